/*
 * harness.h: the in-repo test harness. Each tests/test_*.c is its own program; CHECK counts
 * passes and failures, and TEST_END prints "NAME: N passed, N failed" and sets the exit code.
 * tests/run.sh runs them all and prints the total.
 */
#ifndef PV_HARNESS_H
#define PV_HARNESS_H

#include <stdio.h>

static int pv_t_pass, pv_t_fail;

#define CHECK(cond, ...)                                                                 \
	do {                                                                             \
		if (cond) {                                                              \
			pv_t_pass++;                                                     \
		} else {                                                                 \
			pv_t_fail++;                                                     \
			fprintf(stderr, "FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                    \
			fputc('\n', stderr);                                             \
		}                                                                        \
	} while (0)

#define TEST_END(name)                                                          \
	do {                                                                    \
		printf("%s: %d passed, %d failed\n", name, pv_t_pass, pv_t_fail); \
		return pv_t_fail ? 1 : 0;                                       \
	} while (0)

#endif
