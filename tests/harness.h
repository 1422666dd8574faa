/*
 * harness.h: the in-repo test harness. Each tests/test_*.c is its own program made of named
 * cases; tests/run.sh runs the programs in parallel and adds up their last lines,
 * "NAME: N passed, N failed" (tests/README.md).
 *
 *   TEST_CASE(vectors) { CHECK(x == 1, "x is %d", x); }     a case named "vectors"
 *   TEST_CASE_MANUAL(bench, "prefill-bench") { ... }        runs only when named exactly
 *   TEST_MAIN("test_x")                                     main(): runs the selected cases
 *
 * A program with its own main() (extra modes, set-up for every case) ends it with
 * `return t_main(argc, argv, "test_x", setup, teardown);` (either may be NULL; both run only
 * when some case is selected, setup before the first, teardown after the last; a nonzero setup
 * runs no case: it should CHECK what went wrong). Cases run in the order they are written; a
 * case must also work alone, so set-up that several cases share goes in a function each calls
 * (done once) rather than in an earlier case.
 *
 * Selection: `prog case...` runs the named cases; otherwise PV_TEST_FILTER (`make test T=...`)
 * runs all cases when it is part of the program's name, else those whose name contains it (a
 * manual case only when it equals its name); no filter runs every case but the manual ones.
 * `prog --list` prints the case names. t_main changes to the repository root first (fixtures
 * and data are named relative to it), so a program runs from any directory.
 *
 * CHECK and TEST_END work as before in a program with a plain main() (no cases); run.sh's
 * filter then runs it only when it is part of the program's name.
 */
#ifndef PV_HARNESS_H
#define PV_HARNESS_H

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pv_t_pass, pv_t_fail;

/* the registered cases (constructors, before main) and the one running */
struct pv_t_case {
	const char* name;
	void (*fn)(void);
	int line;   /* cases run in source order: constructors run in no promised order */
	int manual; /* only when named exactly */
};
#define PV_T_MAX_CASES 256
static struct pv_t_case pv_t_cases[PV_T_MAX_CASES];
static int pv_t_ncases;
static const char* pv_t_case_name; /* NULL outside a case (and in plain-main programs) */
static const char* pv_t_prog = "test";
static int pv_t_skipped;

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

#define CHECK(cond, ...)                                                                              \
	do {                                                                                          \
		if (cond) {                                                                           \
			pv_t_pass++;                                                                  \
		} else {                                                                              \
			pv_t_fail++;                                                                  \
			if (pv_t_case_name)                                                           \
				fprintf(stderr, "FAIL %s:%d [%s]: (%s) ", __FILE__, __LINE__, pv_t_case_name, \
				        #cond);                                                       \
			else                                                                          \
				fprintf(stderr, "FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond);      \
			fprintf(stderr, __VA_ARGS__);                                                 \
			fputc('\n', stderr);                                                          \
		}                                                                                     \
	} while (0)

#define TEST_END(name)                                                            \
	do {                                                                      \
		printf("%s: %d passed, %d failed\n", name, pv_t_pass, pv_t_fail); \
		return pv_t_fail ? 1 : 0;                                         \
	} while (0)

/* Says that (part of) the current case was skipped and why: a line starting with "skip" that
 * run.sh shows. A skip is not a failure: use it only for what this machine cannot have (data
 * outside the repository, the network, a device). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static inline void t_skip(const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("skip %s%s%s: ", pv_t_prog, pv_t_case_name ? "/" : "", pv_t_case_name ? pv_t_case_name : "");
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	pv_t_skipped = 1;
}

/* ---- paths ------------------------------------------------------------------------------- */

/* dir (an absolute path, changed in place) or one of its parents holding tests/run.sh */
static inline int pv_t_walk_up(char* dir)
{
	for (;;) {
		char p[PATH_MAX + 16];
		snprintf(p, sizeof p, "%s/tests/run.sh", dir);
		if (t_exists(p)) return 0;
		char* slash = strrchr(dir, '/');
		if (!slash || slash == dir) return -1;
		*slash = 0;
	}
}

/* The repository root (absolute; NULL when not found): the current directory or a parent that
 * holds tests/run.sh, else the executable's directory or a parent (build/tests/x is run from
 * anywhere). Not __FILE__: the binaries are carried to other machines (tools/cuda). */
static inline const char* t_repo_root(void)
{
	static char root[PATH_MAX];
	static int done;
	if (done) return root[0] ? root : NULL;
	done = 1;
	if (getcwd(root, sizeof root) && !pv_t_walk_up(root)) return root;
	ssize_t n = readlink("/proc/self/exe", root, sizeof root - 1);
	if (n > 0) {
		root[n] = 0;
		if (!pv_t_walk_up(root)) return root;
	}
	root[0] = 0;
	return NULL;
}

static inline const char* t_tmpdir(void)
{
	const char* t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

/* Data kept beside the repository rather than in it (the real tokenizer, models): writes
 * "$PV_SHARED/rel" (when set) or "<root>/../shared/rel" to buf and returns buf when it
 * exists, else NULL (buf then holds the path looked for, for the skip message). */
static inline const char* t_shared_path(char* buf, size_t n, const char* rel)
{
	const char* env = getenv("PV_SHARED");
	const char* root = t_repo_root();
	if (env && *env) snprintf(buf, n, "%s/%s", env, rel);
	else snprintf(buf, n, "%s/../shared/%s", root ? root : ".", rel);
	return t_exists(buf) ? buf : NULL;
}

/* ---- cases --------------------------------------------------------------------------------- */

static inline void pv_t_register(const char* name, void (*fn)(void), int line, int manual)
{
	if (pv_t_ncases == PV_T_MAX_CASES) {
		fprintf(stderr, "harness.h: more than %d cases\n", PV_T_MAX_CASES);
		abort();
	}
	struct pv_t_case c = { name, fn, line, manual };
	pv_t_cases[pv_t_ncases++] = c;
}

/* Registration runs at constructor priority 101, before pv_t_plain_filter (102), which must
 * know whether the program has cases. */
#define PV_T_CASE(id, name, manual)                                                        \
	static void pv_t_case_##id(void);                                                  \
	__attribute__((constructor(101))) static void pv_t_reg_##id(void)                  \
	{                                                                                  \
		pv_t_register(name, pv_t_case_##id, __LINE__, manual);                     \
	}                                                                                  \
	static void pv_t_case_##id(void)
#define TEST_CASE(id) PV_T_CASE(id, #id, 0)
#define TEST_CASE_MANUAL(id, name) PV_T_CASE(id, name, 1)

static inline double pv_t_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* whether case i runs: named on the command line, else by the filter */
static inline int pv_t_selected(int i, const char* named, const char* filter)
{
	const struct pv_t_case* c = &pv_t_cases[i];
	if (named) return named[i];
	if (c->manual) return filter && !strcmp(filter, c->name);
	return !filter || strstr(pv_t_prog, filter) || strstr(c->name, filter);
}

/* A plain-main program cannot select its cases: with a filter that is not part of its name it
 * reports nothing run, as a case program with no matching case does. */
__attribute__((constructor(102))) static void pv_t_plain_filter(void)
{
	const char* filter = getenv("PV_TEST_FILTER");
	if (pv_t_ncases || !filter || !*filter || strstr(program_invocation_short_name, filter)) return;
	printf("%s: 0 passed, 0 failed\n", program_invocation_short_name);
	exit(0);
}

static inline int t_main(int argc, char** argv, const char* prog, int (*setup)(void), void (*teardown)(void))
{
	pv_t_prog = prog;
	/* FAIL lines (stderr) and case lines (stdout) in order when both go to one file */
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < pv_t_ncases; i++) /* source order */
		for (int j = i; j > 0 && pv_t_cases[j].line < pv_t_cases[j - 1].line; j--) {
			struct pv_t_case t = pv_t_cases[j];
			pv_t_cases[j] = pv_t_cases[j - 1];
			pv_t_cases[j - 1] = t;
		}
	static char names[PV_T_MAX_CASES];
	const char* named = NULL;
	for (int a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--list")) {
			for (int i = 0; i < pv_t_ncases; i++)
				printf("%s%s\n", pv_t_cases[i].name, pv_t_cases[i].manual ? "\t(manual: runs only when named)" : "");
			return 0;
		}
		int found = 0;
		for (int i = 0; i < pv_t_ncases; i++)
			if (!strcmp(argv[a], pv_t_cases[i].name)) names[i] = found = 1;
		if (!found) {
			fprintf(stderr, "%s: no case named \"%s\"\nusage: %s [--list] [case...]\n", prog, argv[a], argv[0]);
			return 2;
		}
		named = names;
	}
	const char* filter = getenv("PV_TEST_FILTER");
	if (filter && !*filter) filter = NULL;
	int n_sel = 0;
	for (int i = 0; i < pv_t_ncases; i++) n_sel += pv_t_selected(i, named, filter);
	int go = n_sel > 0;
	if (go) {
		const char* root = t_repo_root();
		if (root && chdir(root)) fprintf(stderr, "%s: cannot change to %s: %s\n", prog, root, strerror(errno));
		int f0 = pv_t_fail;
		pv_t_skipped = 0;
		if (setup && setup()) {
			/* set-up said why (a FAIL, or a skip that covers every case) */
			if (pv_t_fail == f0 && !pv_t_skipped) CHECK(0, "%s: set-up failed", prog);
			go = 0;
		}
	}
	for (int i = 0; i < pv_t_ncases && go; i++) {
		if (!pv_t_selected(i, named, filter)) continue;
		int p0 = pv_t_pass, f0 = pv_t_fail;
		double t0 = pv_t_now();
		pv_t_case_name = pv_t_cases[i].name;
		pv_t_skipped = 0;
		pv_t_cases[i].fn();
		pv_t_case_name = NULL;
		int np = pv_t_pass - p0, nf = pv_t_fail - f0;
		double dt = pv_t_now() - t0;
		if (nf) printf("  FAIL  %s: %d of %d checks failed (%.2f s)\n", pv_t_cases[i].name, nf, np + nf, dt);
		else printf("  ok    %s: %d checks%s (%.2f s)\n", pv_t_cases[i].name, np, pv_t_skipped ? ", and a skip" : "", dt);
	}
	if (go && teardown) teardown();
	/* run.sh tells "the filter matched nothing" from "matched, checked nothing" by this line */
	printf("  cases selected: %d of %d\n", n_sel, pv_t_ncases);
	printf("%s: %d passed, %d failed\n", prog, pv_t_pass, pv_t_fail);
	return pv_t_fail ? 1 : 0;
}

#define TEST_MAIN(prog)                                             \
	int main(int argc, char** argv)                             \
	{                                                           \
		return t_main(argc, argv, prog, NULL, NULL);        \
	}

#endif
