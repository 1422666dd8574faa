/*
 * bench_kld.c: what the CPU's fast numerics (Q8 / bf16 activations) cost in quality: the same
 * text through the same model opened twice, with cpu.exact_activations=1 (the reference) and
 * =0, chunk by chunk as llama-perplexity does it (chunks of ctx tokens from an empty context,
 * the second half of each scored). Not a test.
 *
 *   ./build/tools/bench_kld MODEL TEXT [ctx 512] [threads 2] [max chunks, 0 = all] [numerics|cache]
 *
 * "cache" compares KV cache types instead: the default (fast) numerics with an f32 cache (the
 * reference) against f16, bf16 and q8_0 caches, in one pass over the chunks.
 *
 * Prints the perplexity of each, and over the scored tokens the KL divergence KL(exact || fast)
 * of the next-token distributions (mean, median, 99th percentile, max; nats), the share of
 * tokens whose top-1 token agrees, and the RMS of the change of the probability of the correct
 * token (llama-perplexity's KLD report), then one JSON line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proven.h"
#include "text/tokenizer.h"

static char* slurp(const char* path, size_t* len)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char* b = malloc((size_t)n + 1);
	if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return b;
}

static int cmpd(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

/* log-softmax normaliser of a row: max and log(sum exp(x - max)) */
static void lse(const float* row, int V, double* mx, double* ls)
{
	double m = row[0], s = 0;
	for (int i = 1; i < V; i++) m = row[i] > m ? row[i] : m;
	for (int i = 0; i < V; i++) s += exp(row[i] - m);
	*mx = m;
	*ls = log(s);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One comparison: the reference logits against a test session's, over the scored rows. */
struct cmp {
	const char* name;
	pv_session* s;
	float* lg;
	double* kl;
	double nll, dp2, secs;
	long same;
};

int main(int argc, char** argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_kld MODEL TEXT [ctx] [threads] [max chunks] [numerics|cache]\n");
		return 2;
	}
	const int ctx = argc > 3 ? atoi(argv[3]) : 512, threads = argc > 4 ? atoi(argv[4]) : 2;
	const int max_chunks = argc > 5 ? atoi(argv[5]) : 0;
	/* numerics (default): exact f32 activations (reference) against the fast ones, f32 caches;
	 * cache: the default (fast) numerics, an f32 KV cache (reference) against f16, bf16, q8_0 */
	const int cache_mode = argc > 6 && !strcmp(argv[6], "cache");
	size_t tlen;
	char* text = slurp(argv[2], &tlen);
	if (!text) {
		perror(argv[2]);
		return 1;
	}
	char err[512];
	pv_model *mref = NULL, *mfast = NULL;
	struct pv_model_params pr = { .knobs = "cpu.exact_activations=1" }, pf = { .knobs = "cpu.exact_activations=0" };
	if (pv_model_open(&mref, argv[1], cache_mode ? &pf : &pr, err, sizeof err) ||
	    (!cache_mode && pv_model_open(&mfast, argv[1], &pf, err, sizeof err))) {
		fprintf(stderr, "bench_kld: %s\n", err);
		return 1;
	}
	const struct pv_tok* tok = pv_model_tokenizer(mref);
	int32_t* ids = NULL;
	int n = 0;
	if (!tok || pv_tok_encode(tok, text, tlen, 0, &ids, &n, err, sizeof err)) {
		fprintf(stderr, "bench_kld: no tokenizer or %s\n", err);
		return 1;
	}
	const int V = pv_model_get_info(mref)->vocab;
	int chunks = n / ctx;
	if (max_chunks && chunks > max_chunks) chunks = max_chunks;
	const int per = ctx - 1 - ctx / 2;
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	struct cmp ref = { cache_mode ? "f32 cache" : "exact", NULL, NULL, NULL, 0, 0, 0, 0 };
	struct cmp cs[3];
	int nc = cache_mode ? 3 : 1;
	static const char* const cnames[3] = { "f16", "bf16", "q8_0" };
	if (chunks < 1 || pv_session_new(&ref.s, mref, &sp, err, sizeof err)) {
		fprintf(stderr, "bench_kld: %d tokens; %s\n", n, err);
		return 1;
	}
	ref.lg = malloc(sizeof(float) * (size_t)V * ctx);
	for (int i = 0; i < nc; i++) {
		struct pv_session_params tp = sp;
		tp.cache_type = cache_mode ? pv_cache_type_parse(cnames[i]) : 0;
		cs[i] = (struct cmp){ cache_mode ? cnames[i] : "fast", NULL, malloc(sizeof(float) * (size_t)V * ctx),
			              malloc(sizeof(double) * (size_t)chunks * per), 0, 0, 0, 0 };
		if (pv_session_new(&cs[i].s, cache_mode ? mref : mfast, &tp, err, sizeof err)) {
			fprintf(stderr, "bench_kld: %s\n", err);
			return 1;
		}
	}
	long count = 0;
	for (int c = 0; c < chunks; c++) {
		const int32_t* chunk = ids + (size_t)c * ctx;
		double t0 = now();
		if (pv_session_rollback(ref.s, 0) || pv_session_eval(ref.s, chunk, ctx, ref.lg, PV_LOGITS_ALL)) return 1;
		ref.secs += now() - t0;
		for (int i = 0; i < nc; i++) {
			t0 = now();
			if (pv_session_rollback(cs[i].s, 0) || pv_session_eval(cs[i].s, chunk, ctx, cs[i].lg, PV_LOGITS_ALL)) return 1;
			cs[i].secs += now() - t0;
		}
		for (int t = ctx / 2; t < ctx - 1; t++) {
			const float* a = ref.lg + (size_t)t * V;
			double ma, la;
			lse(a, V, &ma, &la);
			int ta = 0;
			for (int i = 0; i < V; i++) ta = a[i] > a[ta] ? i : ta;
			const int want = chunk[t + 1];
			const double lpa_w = a[want] - ma - la;
			ref.nll -= lpa_w;
			for (int ci = 0; ci < nc; ci++) {
				const float* b = cs[ci].lg + (size_t)t * V;
				double mb, lb;
				lse(b, V, &mb, &lb);
				double k = 0;
				int tb = 0;
				for (int i = 0; i < V; i++) {
					const double lpa = a[i] - ma - la, lpb = b[i] - mb - lb;
					k += exp(lpa) * (lpa - lpb);
					tb = b[i] > b[tb] ? i : tb;
				}
				const double lpb_w = b[want] - mb - lb;
				cs[ci].nll -= lpb_w;
				cs[ci].dp2 += (exp(lpb_w) - exp(lpa_w)) * (exp(lpb_w) - exp(lpa_w));
				cs[ci].kl[count] = k;
				cs[ci].same += ta == tb;
			}
			count++;
		}
		fprintf(stderr, "[%d/%d] ppl %s %.4f", c + 1, chunks, ref.name, exp(ref.nll / count));
		for (int ci = 0; ci < nc; ci++) {
			double km = 0;
			for (long i = 0; i < count; i++) km += cs[ci].kl[i];
			fprintf(stderr, ", %s %.4f (KLD %.6f)", cs[ci].name, exp(cs[ci].nll / count), km / (double)count);
		}
		fprintf(stderr, "\n");
	}
	const double ppl_r = exp(ref.nll / count);
	printf("model %s, %d tokens, %d chunks of %d, %ld scored\n", argv[1], n, chunks, ctx, count);
	for (int ci = 0; ci < nc; ci++) {
		struct cmp* x = &cs[ci];
		double mean = 0;
		for (long i = 0; i < count; i++) mean += x->kl[i];
		mean /= (double)count;
		qsort(x->kl, (size_t)count, sizeof(double), cmpd);
		const double ppl_f = exp(x->nll / count);
		printf("PPL %s %.4f, %s %.4f, ratio %.5f\n", ref.name, ppl_r, x->name, ppl_f, ppl_f / ppl_r);
		printf("KLD(%s || %s): mean %.6f, median %.6f, 99%% %.6f, max %.6f; same top-1 %.3f%%; RMS dp %.4f%%\n", ref.name,
		       x->name, mean, x->kl[count / 2], x->kl[(long)(0.99 * (count - 1))], x->kl[count - 1], 100.0 * x->same / count,
		       100.0 * sqrt(x->dp2 / count));
		printf("prompt time: %s %.1f s, %s %.1f s\n", ref.name, ref.secs, x->name, x->secs);
		if (cache_mode)
			printf("{\"model\":\"%s\",\"ctx\":%d,\"chunks\":%d,\"scored\":%ld,\"cache\":\"%s\",\"ppl_f32_cache\":%.5f,\"ppl\":%.5f,"
			       "\"kld_mean\":%.7f,\"kld_median\":%.7f,\"kld_p99\":%.7f,\"kld_max\":%.7f,\"same_top1\":%.5f,\"rms_dp\":%.6f,"
			       "\"secs_f32\":%.1f,\"secs\":%.1f}\n",
			       argv[1], ctx, chunks, count, x->name, ppl_r, ppl_f, mean, x->kl[count / 2], x->kl[(long)(0.99 * (count - 1))],
			       x->kl[count - 1], (double)x->same / count, sqrt(x->dp2 / count), ref.secs, x->secs);
		else
			printf("{\"model\":\"%s\",\"ctx\":%d,\"chunks\":%d,\"scored\":%ld,\"ppl_exact\":%.5f,\"ppl_fast\":%.5f,\"kld_mean\":%.7f,"
			       "\"kld_median\":%.7f,\"kld_p99\":%.7f,\"kld_max\":%.7f,\"same_top1\":%.5f,\"rms_dp\":%.6f}\n",
			       argv[1], ctx, chunks, count, ppl_r, ppl_f, mean, x->kl[count / 2], x->kl[(long)(0.99 * (count - 1))],
			       x->kl[count - 1], (double)x->same / count, sqrt(x->dp2 / count));
		pv_session_free(x->s);
		free(x->lg);
		free(x->kl);
	}
	pv_session_free(ref.s);
	pv_model_close(mref);
	pv_model_close(mfast);
	free(ref.lg);
	free(ids);
	free(text);
	return 0;
}
