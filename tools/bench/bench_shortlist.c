/*
 * bench_shortlist.c: would a certified shortlist LM head pay for verify rows? (issue 11, item 6:
 * a candidate, measured before it is built). Not a test.
 *
 * A verify row only needs to know whether the draft is the argmax. With the LM head's rows W
 * [V, H] grouped into clusters (centroid c, radius r = max |w - c| over the members), no member
 * of a cluster can beat a logit z when h.c + |h| r < z (Cauchy-Schwarz), so only the clusters
 * whose bound reaches z need their exact logits. This tool measures the best case of that idea:
 * z is the row's true largest logit (a real shortlist would only know the draft's logit, which
 * is lower when the draft is wrong), on the final-norm rows h the model produces while decoding
 * real prompts greedily. It prints the share of the vocabulary that would still be computed and
 * the share of rows where the bound rules out at least half of it.
 *
 *   build/tools/bench_shortlist MODEL CASES.jsonl [clusters] [cases] [tokens]
 *
 * Clusters: k-means (two Lloyd iterations from rows spread over the vocabulary) on the
 * dequantized head, in double precision where it decides (radii, bounds).
 */
#include "proven.h"
#include "proven_text.h"

#include "model/model.h"
#include "quant/tensor.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float* W;     /* [V, H] the head, dequantized */
static float* C;     /* [K, H] centroids             */
static int* assign;  /* [V]                          */
static int V, H, K;

struct job {
	int v0, v1;
};

/* nearest centroid of rows [v0, v1): argmax of w.c - |c|^2 / 2 */
static void* assign_rows(void* arg)
{
	const struct job* j = arg;
	double* half = malloc(sizeof(double) * (size_t)K);
	for (int k = 0; k < K; k++) {
		double s = 0;
		for (int i = 0; i < H; i++) s += (double)C[(size_t)k * H + i] * C[(size_t)k * H + i];
		half[k] = s / 2;
	}
	for (int v = j->v0; v < j->v1; v++) {
		const float* w = W + (size_t)v * H;
		int best = 0;
		double bs = -INFINITY;
		for (int k = 0; k < K; k++) {
			const float* c = C + (size_t)k * H;
			float d = 0;
			for (int i = 0; i < H; i++) d += w[i] * c[i];
			const double s = d - half[k];
			if (s > bs) bs = s, best = k;
		}
		assign[v] = best;
	}
	free(half);
	return NULL;
}

static void assign_all(void)
{
	pthread_t t[2];
	struct job j[2] = { { 0, V / 2 }, { V / 2, V } };
	for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, assign_rows, &j[i]);
	for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
}

static int cmp_double(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char** argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_shortlist MODEL CASES.jsonl [clusters] [cases] [tokens]\n");
		return 2;
	}
	K = argc > 3 ? atoi(argv[3]) : 256;
	const int n_cases = argc > 4 ? atoi(argv[4]) : 8, n_tok = argc > 5 ? atoi(argv[5]) : 32;
	char err[512];
	pv_model* m = NULL;
	if (pv_model_open(&m, argv[1], NULL, err, sizeof err)) {
		fprintf(stderr, "bench_shortlist: %s\n", err);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	V = in->vocab;
	H = in->hidden;
	if (K < 2 || K > V) K = 256;
	W = malloc(sizeof(float) * (size_t)V * H);
	C = malloc(sizeof(float) * (size_t)K * H);
	assign = malloc(sizeof(int) * (size_t)V);
	double* rad = calloc((size_t)K, sizeof(double));
	int* size = calloc((size_t)K, sizeof(int));
	if (!W || !C || !assign || !rad || !size) {
		fprintf(stderr, "bench_shortlist: out of memory\n");
		return 1;
	}
	for (int v = 0; v < V; v++) pv_tensor_row_f32(&m->w.lm_head, v, W + (size_t)v * H);
	for (int k = 0; k < K; k++) memcpy(C + (size_t)k * H, W + (size_t)((int64_t)k * V / K) * H, sizeof(float) * H);
	for (int it = 0; it < 2; it++) {
		assign_all();
		double* acc = calloc((size_t)K * H, sizeof(double));
		memset(size, 0, sizeof(int) * (size_t)K);
		for (int v = 0; v < V; v++) {
			size[assign[v]]++;
			for (int i = 0; i < H; i++) acc[(size_t)assign[v] * H + i] += W[(size_t)v * H + i];
		}
		for (int k = 0; k < K; k++)
			if (size[k])
				for (int i = 0; i < H; i++) C[(size_t)k * H + i] = (float)(acc[(size_t)k * H + i] / size[k]);
		free(acc);
		fprintf(stderr, "k-means iteration %d done\n", it + 1);
	}
	assign_all();
	memset(size, 0, sizeof(int) * (size_t)K);
	for (int v = 0; v < V; v++) {
		const int k = assign[v];
		size[k]++;
		double d = 0;
		for (int i = 0; i < H; i++) {
			const double e = (double)W[(size_t)v * H + i] - C[(size_t)k * H + i];
			d += e * e;
		}
		if (sqrt(d) > rad[k]) rad[k] = sqrt(d);
	}

	/* final-norm rows of greedy decoding over the cases' prompts */
	const struct pv_tok* tok = pv_model_tokenizer(m);
	FILE* f = fopen(argv[2], "r");
	struct pv_session_params sp = { .n_ctx = 4096, .n_threads = 2 };
	pv_session* s = NULL;
	if (!tok || !f || pv_session_new(&s, m, &sp, err, sizeof err)) {
		fprintf(stderr, "bench_shortlist: %s\n", !tok ? "no tokenizer" : !f ? "cannot open the cases" : err);
		return 1;
	}
	float* lg = malloc(sizeof(float) * (size_t)V);
	float* h = malloc(sizeof(float) * (size_t)H);
	double* shares = malloc(sizeof(double) * (size_t)n_cases * n_tok);
	int rows = 0, cases = 0, half_rows = 0;
	char* line = NULL;
	size_t cap = 0;
	while (cases < n_cases && getline(&line, &cap, f) > 0) {
		json_t* j = json_loads(line, 0, NULL);
		const char* text = json_string_value(json_object_get(j, "text"));
		int32_t* ids = NULL;
		int n = 0;
		if (!text || pv_tok_encode(tok, text, strlen(text), 1, &ids, &n, err, sizeof err) || n + n_tok > 4096) {
			json_decref(j);
			free(ids);
			continue;
		}
		json_decref(j);
		cases++;
		pv_session_truncate(s, 0);
		struct pv_eval_out o = { lg, n - 1, NULL, 0, h, n - 1 };
		int rc = pv_session_run(s, ids, n, 0, &o);
		for (int t = 0; !rc && t < n_tok; t++) {
			/* the bound test for this row, z = the row's largest exact logit */
			double hn = 0, z = -INFINITY;
			for (int i = 0; i < H; i++) hn += (double)h[i] * h[i];
			hn = sqrt(hn);
			int best = 0;
			for (int v = 0; v < V; v++) {
				double d = 0;
				for (int i = 0; i < H; i++) d += (double)h[i] * W[(size_t)v * H + i];
				if (d > z) z = d, best = v;
			}
			long computed = 0;
			for (int k = 0; k < K; k++) {
				double d = 0;
				for (int i = 0; i < H; i++) d += (double)h[i] * C[(size_t)k * H + i];
				if (d + hn * rad[k] >= z) computed += size[k];
			}
			const double share = (double)computed / V;
			shares[rows++] = share;
			half_rows += share <= 0.5;
			struct pv_eval_out o1 = { lg, 0, NULL, 0, h, 0 };
			int32_t next = best;
			rc = pv_session_run(s, &next, 1, 0, &o1);
		}
		free(ids);
	}
	free(line);
	fclose(f);
	qsort(shares, (size_t)rows, sizeof(double), cmp_double);
	double mean = 0, rmax = 0, rmean = 0;
	for (int i = 0; i < rows; i++) mean += shares[i];
	for (int k = 0; k < K; k++) {
		rmax = rad[k] > rmax ? rad[k] : rmax;
		rmean += rad[k] / K;
	}
	mean = rows ? mean / rows : 0;
	printf("| model | V | H | clusters | radius mean / max | rows | vocabulary computed: mean | p10 | p50 | p90 | rows "
	       "with <= 50%% computed |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	printf("| %s | %d | %d | %d | %.3f / %.3f | %d | %.4f | %.4f | %.4f | %.4f | %d |\n", argv[1], V, H, K, rmean, rmax, rows,
	       mean, rows ? shares[rows / 10] : 0, rows ? shares[rows / 2] : 0, rows ? shares[rows * 9 / 10] : 0, half_rows);
	free(shares);
	free(lg);
	free(h);
	pv_session_free(s);
	pv_model_close(m);
	free(W);
	free(C);
	free(assign);
	free(rad);
	free(size);
	return 0;
}
