/*
 * bench_kld.c: what the CPU's fast numerics (Q8 / bf16 activations) cost in quality: the same
 * text through the same model opened twice, with cpu.exact_activations=1 (the reference) and
 * =0, chunk by chunk as llama-perplexity does it (chunks of ctx tokens from an empty context,
 * the second half of each scored). Not a test.
 *
 *   ./build/tools/bench_kld MODEL TEXT [ctx 512] [threads 2] [max chunks, 0 = all]
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

int main(int argc, char** argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_kld MODEL TEXT [ctx] [threads] [max chunks]\n");
		return 2;
	}
	const int ctx = argc > 3 ? atoi(argv[3]) : 512, threads = argc > 4 ? atoi(argv[4]) : 2;
	const int max_chunks = argc > 5 ? atoi(argv[5]) : 0;
	size_t tlen;
	char* text = slurp(argv[2], &tlen);
	if (!text) {
		perror(argv[2]);
		return 1;
	}
	char err[512];
	pv_model *mref = NULL, *mfast = NULL;
	struct pv_model_params pr = { .knobs = "cpu.exact_activations=1" }, pf = { .knobs = "cpu.exact_activations=0" };
	if (pv_model_open(&mref, argv[1], &pr, err, sizeof err) || pv_model_open(&mfast, argv[1], &pf, err, sizeof err)) {
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
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	pv_session *sr = NULL, *sf = NULL;
	if (chunks < 1 || pv_session_new(&sr, mref, &sp, err, sizeof err) || pv_session_new(&sf, mfast, &sp, err, sizeof err)) {
		fprintf(stderr, "bench_kld: %d tokens; %s\n", n, err);
		return 1;
	}
	float* lr = malloc(sizeof(float) * (size_t)V * ctx);
	float* lf = malloc(sizeof(float) * (size_t)V * ctx);
	const int per = ctx - 1 - ctx / 2;
	double* kl = malloc(sizeof(double) * (size_t)chunks * per);
	double nll_r = 0, nll_f = 0, dp2 = 0, t_r = 0, t_f = 0;
	long count = 0, same = 0;
	for (int c = 0; c < chunks; c++) {
		const int32_t* chunk = ids + (size_t)c * ctx;
		double t0 = now();
		if (pv_session_rollback(sr, 0) || pv_session_eval(sr, chunk, ctx, lr, PV_LOGITS_ALL)) return 1;
		double t1 = now();
		if (pv_session_rollback(sf, 0) || pv_session_eval(sf, chunk, ctx, lf, PV_LOGITS_ALL)) return 1;
		t_r += t1 - t0;
		t_f += now() - t1;
		for (int t = ctx / 2; t < ctx - 1; t++) {
			const float *a = lr + (size_t)t * V, *b = lf + (size_t)t * V;
			double ma, la, mb, lb;
			lse(a, V, &ma, &la);
			lse(b, V, &mb, &lb);
			double k = 0;
			int ta = 0, tb = 0;
			for (int i = 0; i < V; i++) {
				const double lpa = a[i] - ma - la, lpb = b[i] - mb - lb;
				k += exp(lpa) * (lpa - lpb);
				ta = a[i] > a[ta] ? i : ta;
				tb = b[i] > b[tb] ? i : tb;
			}
			const int want = chunk[t + 1];
			const double lpa = a[want] - ma - la, lpb = b[want] - mb - lb;
			nll_r -= lpa;
			nll_f -= lpb;
			dp2 += (exp(lpb) - exp(lpa)) * (exp(lpb) - exp(lpa));
			kl[count++] = k;
			same += ta == tb;
		}
		double km = 0;
		for (long i = 0; i < count; i++) km += kl[i];
		fprintf(stderr, "[%d/%d] ppl exact %.4f fast %.4f, mean KLD %.6f\n", c + 1, chunks, exp(nll_r / count),
		        exp(nll_f / count), km / (double)count);
	}
	double mean = 0;
	for (long i = 0; i < count; i++) mean += kl[i];
	mean /= (double)count;
	qsort(kl, (size_t)count, sizeof(double), cmpd);
	const double ppl_r = exp(nll_r / count), ppl_f = exp(nll_f / count);
	printf("model %s, %d tokens, %d chunks of %d, %ld scored\n", argv[1], n, chunks, ctx, count);
	printf("PPL exact (f32 activations) %.4f, fast (Q8/bf16 activations) %.4f, ratio %.5f\n", ppl_r, ppl_f, ppl_f / ppl_r);
	printf("KLD(exact || fast): mean %.6f, median %.6f, 99%% %.6f, max %.6f; same top-1 %.3f%%; RMS dp %.4f%%\n", mean,
	       kl[count / 2], kl[(long)(0.99 * (count - 1))], kl[count - 1], 100.0 * same / count, 100.0 * sqrt(dp2 / count));
	printf("prompt time: exact %.1f s, fast %.1f s\n", t_r, t_f);
	printf("{\"model\":\"%s\",\"ctx\":%d,\"chunks\":%d,\"scored\":%ld,\"ppl_exact\":%.5f,\"ppl_fast\":%.5f,\"kld_mean\":%.7f,"
	       "\"kld_median\":%.7f,\"kld_p99\":%.7f,\"kld_max\":%.7f,\"same_top1\":%.5f,\"rms_dp\":%.6f}\n",
	       argv[1], ctx, chunks, count, ppl_r, ppl_f, mean, kl[count / 2], kl[(long)(0.99 * (count - 1))], kl[count - 1],
	       (double)same / count, sqrt(dp2 / count));
	pv_session_free(sr);
	pv_session_free(sf);
	pv_model_close(mref);
	pv_model_close(mfast);
	free(lr);
	free(lf);
	free(kl);
	free(ids);
	free(text);
	return 0;
}
