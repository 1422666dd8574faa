/*
 * harness.h: the in-repo test harness. Each tests/test_*.c is its own program; CHECK counts
 * passes and failures, and TEST_END prints "NAME: N passed, N failed" and sets the exit code.
 * tests/run.sh runs them all and prints the total.
 */
#ifndef PV_HARNESS_H
#define PV_HARNESS_H

#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

static int pv_t_pass, pv_t_fail;

/* Runs a shell command, captures its stdout (up to outlen - 1 bytes), returns its exit code. */
static inline int t_run_cmd(const char* cmd, char* out, size_t outlen)
{
	FILE* f = popen(cmd, "r");
	if (!f) return -1;
	size_t n = fread(out, 1, outlen - 1, f);
	out[n] = 0;
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int t_exists(const char* p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

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
