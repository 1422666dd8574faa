/*
 * bench_parallel.c: `proven bench --parallel N`: aggregate decode throughput of N sequences
 * stepped together (pv_generator_step_many: continuous batching, as `proven serve --parallel N`
 * steps its busy slots), against the same N sessions stepped one after another. No network and
 * no server: a direct measurement of the engine's batched step on any backend (the GPU machine
 * has only a synth file). A benchmark, never a test: nothing is asserted; ids_equal says whether
 * the two arms produced the same tokens (they must: every batched row is bitwise its own step).
 *
 * Per rep: every sequence gets its prompt (pp random ids of its own), untimed; then tg decode
 * steps of all N together, timed; then (unless --no-alone) the prompts again and tg steps of
 * each sequence alone, timed. Aggregate tok/s = N tg / time; per-sequence tok/s = tg / time.
 */
#include "cli.h"
#include "evidence/evidence.h"
#include "proven.h"
#include "proven_dev.h"
#include "proven_spec.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAR_MAX 64 /* pv_generator_step_many's batch */

static void par_mean_sd(const double* x, int n, double* mean, double* sd)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += x[i];
	*mean = n ? s / n : 0;
	for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

struct par {
	int n, pp, tg;
	pv_session* s[PAR_MAX];
	pv_generator* g[PAR_MAX];
	int32_t* prompt[PAR_MAX]; /* [pp] each                                  */
	int32_t* ids[PAR_MAX];    /* [tg + 1] each: the first token, then tg     */
};

/* every sequence's prompt (untimed): its history becomes the prompt again, its first token chosen */
static int par_prompts(struct par* p)
{
	for (int i = 0; i < p->n; i++)
		if (pv_generator_prompt(p->g[i], p->prompt[i], p->pp, &p->ids[i][0])) {
			fprintf(stderr, "proven bench: prompt %d: %s\n", i, pv_generator_error(p->g[i]));
			return -1;
		}
	return 0;
}

/* tg decode tokens of every sequence, together (pv_generator_step_many) or one after another;
 * *secs: the wall time */
static int par_decode(struct par* p, int together, int tg, double* secs)
{
	int have[PAR_MAX];
	for (int i = 0; i < p->n; i++) have[i] = 1;
	const double t0 = cli_now();
	for (int round = 0; round < tg; round++) {
		pv_generator* gs[PAR_MAX];
		int32_t* outs[PAR_MAX];
		int max[PAR_MAX], got[PAR_MAX], rc[PAR_MAX], idx[PAR_MAX], live = 0;
		for (int i = 0; i < p->n; i++)
			if (have[i] < tg + 1) {
				gs[live] = p->g[i];
				outs[live] = p->ids[i] + have[i];
				max[live] = tg + 1 - have[i];
				idx[live++] = i;
			}
		if (!live) break;
		if (together) {
			pv_generator_step_many(gs, live, outs, max, got, rc);
		} else {
			for (int q = 0; q < live; q++) rc[q] = pv_generator_step(gs[q], outs[q], max[q], &got[q]);
		}
		for (int q = 0; q < live; q++) {
			if (rc[q]) {
				fprintf(stderr, "proven bench: sequence %d: %s\n", idx[q], pv_generator_error(gs[q]));
				return -1;
			}
			have[idx[q]] += got[q];
		}
	}
	*secs = cli_now() - t0;
	return 0;
}

static void par_free(struct par* p)
{
	for (int i = 0; i < p->n; i++) {
		pv_generator_free(p->g[i]);
		pv_session_free(p->s[i]);
		free(p->prompt[i]);
		free(p->ids[i]);
	}
}

int cmd_bench_parallel(int argc, char** argv)
{
	ev_receipt* rec = cli_receipt_begin("bench", argc, argv);
	const char* dir = NULL;
	const char* backend = "cpu";
	int n = 1, pp = 32, tg = 64, reps = 1, threads = 0, ctx = 0, json_only = 0, alone = 1, cache_type = 0;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("bench", stdout);
		if (!strcmp(a, "--json-only")) {
			json_only = 1;
			continue;
		}
		if (!strcmp(a, "--no-alone")) {
			alone = 0;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "proven bench: unknown option or missing value: %s\n", a);
			return 2;
		}
		if (!strcmp(a, "--model"))
			dir = argv[++i];
		else if (!strcmp(a, "--parallel"))
			n = cli_int(a, argv[++i], 1, PAR_MAX);
		else if (!strcmp(a, "--pp"))
			pp = cli_int(a, argv[++i], 1, 1 << 20);
		else if (!strcmp(a, "--tg"))
			tg = cli_int(a, argv[++i], 1, 1 << 20);
		else if (!strcmp(a, "--reps"))
			reps = cli_int(a, argv[++i], 1, 100);
		else if (!strcmp(a, "--threads"))
			threads = cli_int(a, argv[++i], 1, 1024);
		else if (!strcmp(a, "--ctx"))
			ctx = cli_int(a, argv[++i], 1, 1 << 24);
		else if (!strcmp(a, "--backend"))
			backend = argv[++i];
		else if (cli_cache_option(&cache_type, a, argv[i + 1]))
			i++;
		else {
			fprintf(stderr, "proven bench: --parallel does not take %s\n", a);
			return 2;
		}
	}
	if (cli_check_backend("bench", backend)) return 2;
	if (!dir) {
		fprintf(stderr, "proven bench: --model DIR is required\n");
		return 2;
	}
	const int cuda = !strcmp(backend, "cuda");
	char err[512];
	struct pv_device_info dev;
	memset(&dev, 0, sizeof dev);
	if (cuda && pv_device_info("cuda", &dev, err, sizeof err)) {
		fprintf(stderr, "proven bench: %s\n", err);
		return 1;
	}
	pv_model* m = NULL;
	struct pv_model_params mp = cli_model_params(cuda && !json_only, backend);
	if (pv_model_open(&m, dir, &mp, err, sizeof err)) {
		fprintf(stderr, "proven bench: cannot load model: %s\n", err);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	if (!ctx) ctx = pp + tg + 1;
	if (ctx < pp + tg + 1 || ctx > in->max_context) {
		fprintf(stderr, "proven bench: context %d must hold pp %d + tg %d + 1 and be <= %d\n", ctx, pp, tg,
		        in->max_context);
		pv_model_close(m);
		return 2;
	}
	if (!threads) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct par p;
	memset(&p, 0, sizeof p);
	p.n = n;
	p.pp = pp;
	p.tg = tg;
	/* CPU sessions share one pool, the condition of the CPU's batched step */
	pv_pool* pool = cuda ? NULL : pv_pool_new(threads);
	int ok = 1;
	int32_t* first = calloc((size_t)n * (tg + 1), sizeof(int32_t)); /* the batched arm's ids, for ids_equal */
	double *tog = calloc((size_t)reps, sizeof(double)), *alo = calloc((size_t)reps, sizeof(double));
	ok = first && tog && alo;
	uint32_t rng = 12345;
	for (int i = 0; i < n && ok; i++) {
		struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads, .cache_type = cache_type, .pool = pool };
		p.prompt[i] = malloc(sizeof(int32_t) * (size_t)pp);
		p.ids[i] = calloc((size_t)tg + 1, sizeof(int32_t));
		ok = p.prompt[i] && p.ids[i];
		if (ok && (pv_session_new(&p.s[i], m, &sp, err, sizeof err) ||
		           pv_generator_new(&p.g[i], p.s[i], NULL, NULL, err, sizeof err))) {
			fprintf(stderr, "proven bench: sequence %d: %s\n", i, err);
			ok = 0;
		}
		for (int j = 0; ok && j < pp; j++) {
			rng = rng * 1664525u + 1013904223u;
			p.prompt[i][j] = (int32_t)((rng >> 8) % (uint32_t)in->vocab);
		}
	}
	/* warm-up, untimed: the prompts and a few steps together (graphs captured, weights touched) */
	double secs = 0;
	ok = ok && par_prompts(&p) == 0 && par_decode(&p, 1, tg < 4 ? tg : 4, &secs) == 0;
	int ids_equal = 1;
	uint64_t batched0 = 0, batched1 = 0;
	for (int i = 0; ok && i < n; i++) {
		struct pv_session_stats st;
		if (!pv_session_get_stats(p.s[i], &st)) batched0 += st.batched_rows;
	}
	for (int r = 0; ok && r < reps; r++) {
		ok = par_prompts(&p) == 0 && par_decode(&p, 1, tg, &secs) == 0;
		tog[r] = secs;
		for (int i = 0; ok && i < n; i++) memcpy(first + (size_t)i * (tg + 1), p.ids[i], sizeof(int32_t) * (tg + 1));
		if (ok && r == reps - 1)
			for (int i = 0; i < n; i++) {
				struct pv_session_stats st;
				if (!pv_session_get_stats(p.s[i], &st)) batched1 += st.batched_rows;
			}
		if (ok && alone) {
			ok = par_prompts(&p) == 0 && par_decode(&p, 0, tg, &secs) == 0;
			alo[r] = secs;
			for (int i = 0; ok && i < n; i++)
				ids_equal &= !memcmp(first + (size_t)i * (tg + 1), p.ids[i], sizeof(int32_t) * (tg + 1));
		}
	}
	if (!ok) goto done;
	/* tok/s per rep: aggregate (n tg / s) and per sequence (tg / s) */
	double agg[100], agg_a[100];
	for (int r = 0; r < reps; r++) {
		agg[r] = (double)n * tg / tog[r];
		agg_a[r] = alone ? (double)n * tg / alo[r] : 0;
	}
	double am, asd, bm, bsd;
	par_mean_sd(agg, reps, &am, &asd);
	par_mean_sd(agg_a, reps, &bm, &bsd);
	/* the share of the last rep's rows that went through a batched forward */
	const double share = (double)(batched1 - batched0) / ((double)reps * n * tg);
	if (!json_only) {
		printf("| model | backend | sequences | test | aggregate t/s | per sequence t/s | alone aggregate t/s | speedup |\n");
		printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |\n");
		printf("| %s | %s%s%s | %d | tg%d after pp%d | %.2f ± %.2f | %.2f | ", dir, backend, cuda ? " " : "",
		       cuda ? dev.name : "", n, tg, pp, am, asd, am / n);
		if (alone)
			printf("%.2f ± %.2f | %.2fx |\n", bm, bsd, bm > 0 ? am / bm : 0.0);
		else
			printf("- | - |\n");
		printf("batched rows: %.1f%% of the decode rows; tokens together == alone: %s; %d reps\n", 100 * share,
		       alone ? (ids_equal ? "yes" : "NO") : "not run", reps);
	}
	printf("{\"test\":\"parallel\",\"model\":");
	fputc('"', stdout);
	for (const char* c = dir; *c; c++) {
		if (*c == '"' || *c == '\\') putchar('\\');
		putchar(*c);
	}
	printf("\",\"arch\":\"%s\",\"weight_dtype\":\"%s\",\"backend\":\"%s\",\"gpu\":\"%s\",\"threads\":%d,\"n_ctx\":%d,"
	       "\"parallel\":%d,\"pp\":%d,\"tg\":%d,\"reps\":%d,\"agg_tok_s\":%.3f,\"agg_tok_s_sd\":%.3f,\"seq_tok_s\":%.3f,",
	       in->arch_name, in->dtype, backend, cuda ? dev.name : "", threads, ctx, n, pp, tg, reps, am, asd, am / n);
	if (alone)
		printf("\"alone_agg_tok_s\":%.3f,\"alone_agg_tok_s_sd\":%.3f,\"alone_seq_tok_s\":%.3f,\"speedup\":%.4f,\"ids_equal\":%s,",
		       bm, bsd, bm / n, bm > 0 ? am / bm : 0.0, ids_equal ? "true" : "false");
	printf("\"batched_share\":%.4f,\"type_k\":\"%s\",\"samples_s\":[", share, pv_cache_type_name(cache_type));
	for (int r = 0; r < reps; r++) printf("%s%.6f", r ? "," : "", tog[r]);
	printf("]");
	if (alone) {
		printf(",\"alone_samples_s\":[");
		for (int r = 0; r < reps; r++) printf("%s%.6f", r ? "," : "", alo[r]);
		printf("]");
	}
	const struct pv_knob* kn;
	const int nk = pv_model_knobs(m, &kn);
	printf(",\"knobs\":{");
	for (int i = 0; i < nk; i++) printf("%s\"%s\":%d", i ? "," : "", kn[i].name, kn[i].value);
	printf("},\"build_commit\":\"%s\"}\n", pv_build_info()->commit);
	if (rec) {
		ev_receipt_runtime(rec, m, backend, threads);
		ev_receipt_model(rec, m, dir);
		ev_receipt_workload(rec, "synthetic-parallel", "lcg-12345", pp, tg, 0, 12345, reps, 1);
		ev_receipt_figure(rec, "tg_parallel_aggregate", "decode-only", "tok/s", am, asd, reps);
		if (alone) ev_receipt_figure(rec, "tg_parallel_alone_aggregate", "decode-only", "tok/s", bm, bsd, reps);
		ev_receipt_extra(rec, "parallel", json_integer(n));
		cli_receipt_end(rec, "ok");
	}
done:
	par_free(&p);
	if (pool) pv_pool_free(pool);
	pv_model_close(m);
	free(first);
	free(tog);
	free(alo);
	return ok ? 0 : 1;
}
