/*
 * clock.h: the monotonic clock the library and tools time things with (seconds; only
 * differences mean something).
 */
#ifndef PV_CLOCK_H
#define PV_CLOCK_H

#include <time.h>

static inline double pv_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
