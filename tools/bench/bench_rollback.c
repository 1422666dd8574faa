/*
 * bench_rollback.c: what a rejected draft costs, by snapshot and by checkpoint + replay (issue
 * 11: measure both per model kind, choose the cheaper one as the default). Not a test.
 *
 * For a model (a synth file of a real shape, or a real one) and a verify window of k + 1 rows:
 *   snapshot: every verify call keeps the state after each row (PV_EVAL_SNAPSHOT), a rejection
 *             loads one of them (pv_session_truncate);
 *   replay:   a checkpoint before every verify call, a plain exact call, a rejection restores the
 *             checkpoint and replays the accepted rows.
 * Each step accepts a uniformly random number of the k drafts. Prints per mode: the verify
 * call's time, the rollback's time, their sum per step, and the memory the mode keeps.
 *
 *   build/tools/bench_rollback MODEL [k] [steps] [threads]
 */
#include "proven.h"
#include "proven_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char** argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench_rollback MODEL [k] [steps] [threads]\n");
		return 2;
	}
	const int k = argc > 2 ? atoi(argv[2]) : 8, steps = argc > 3 ? atoi(argv[3]) : 16, threads = argc > 4 ? atoi(argv[4]) : 2;
	char err[512];
	pv_model* m = NULL;
	if (pv_model_open(&m, argv[1], NULL, err, sizeof err)) {
		fprintf(stderr, "bench_rollback: %s\n", err);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	const int P = 64, ctx = P + (k + 1) * (steps + 2) + 8;
	int32_t* toks = malloc(sizeof(int32_t) * (size_t)ctx);
	uint32_t rng = 7;
	for (int i = 0; i < ctx; i++) toks[i] = (int32_t)((rng = rng * 1664525u + 1013904223u) >> 8) % in->vocab;
	printf("| model | mode | k | verify ms | rollback ms | per step ms | state kept MiB |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
	for (int mode = 0; mode < 2; mode++) {
		struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads, .n_snapshots = mode ? 0 : k + 1 };
		struct pv_session_params base = sp;
		base.n_snapshots = 0;
		base.n_checkpoints = 1;
		pv_session* s = NULL;
		if (pv_session_new(&s, m, &sp, err, sizeof err)) {
			fprintf(stderr, "bench_rollback: %s\n", err);
			return 1;
		}
		if (pv_session_run(s, toks, P, 0, NULL)) goto fail;
		double tv = 0, tr = 0;
		int len = P;
		for (int st = 0; st < steps; st++) {
			int acc = (int)((rng = rng * 1664525u + 1013904223u) >> 8) % (k + 1); /* drafts accepted */
			double t0 = now();
			if (mode) {
				if (pv_session_checkpoint(s) || pv_session_run(s, toks + len, k + 1, PV_EVAL_EXACT, NULL)) goto fail;
			} else if (pv_session_run(s, toks + len, k + 1, PV_EVAL_SNAPSHOT, NULL)) {
				goto fail;
			}
			double t1 = now();
			if (pv_session_truncate(s, len + 1 + acc)) goto fail;
			double t2 = now();
			if (st > 0) { /* the first step warms up */
				tv += t1 - t0;
				tr += t2 - t1;
			}
			len += 1 + acc;
		}
		/* what the mode keeps beside the session's own state: k + 1 snapshots, or one checkpoint */
		struct pv_session_params one = base;
		one.n_snapshots = 1;
		double state = (double)(pv_session_bytes(m, &one) - pv_session_bytes(m, &base)) / 1048576.0;
		double kept = mode ? state : state * (k + 1);
		const int n = steps - 1;
		printf("| %s | %s | %d | %.2f | %.2f | %.2f | %.1f |\n", argv[1], mode ? "replay" : "snapshot", k, 1e3 * tv / n, 1e3 * tr / n,
		       1e3 * (tv + tr) / n, kept);
		pv_session_free(s);
		continue;
	fail:
		fprintf(stderr, "bench_rollback: %s\n", pv_session_error(s));
		return 1;
	}
	printf("build %s, %s, %d threads\n", pv_build_info()->commit, pv_build_info()->cpu_isa, threads);
	pv_model_close(m);
	free(toks);
	return 0;
}
