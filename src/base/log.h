/*
 * log.h: the library's one way to say something. Messages go to the callback the program set
 * with pv_set_log (proven.h); without one they are dropped: the library never prints.
 */
#ifndef PV_LOG_H
#define PV_LOG_H

#include "proven.h"

/* One line (no trailing newline needed) at `level` (enum pv_log_level). */
void pv_log(int level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 when a callback is set and wants `level` (to skip formatting work nobody reads). */
int pv_log_enabled(int level);

#endif
