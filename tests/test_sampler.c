/*
 * test_sampler.c: choosing a token (proven_text.h pv_sample): greedy, determinism per
 * (seed, position), top-k / top-p / min-p restrictions, frequencies, and the inputs that once
 * emptied the candidate set (a temperature whose inverse overflows, non-finite logits).
 */
#include "harness.h"
#include "proven.h"
#include "proven_text.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = 50 };
static float lg[V];
static int arg, order[V];
static void* scratch;

static int setup(void)
{
	for (int i = 0; i < V; i++) lg[i] = (float)sin(i * 1.7) * 3.0f;
	arg = 0;
	for (int i = 1; i < V; i++)
		if (lg[i] > lg[arg]) arg = i;
	for (int i = 0; i < V; i++) order[i] = i;
	for (int i = 0; i < V; i++)
		for (int j = i + 1; j < V; j++)
			if (lg[order[j]] > lg[order[i]]) {
				int t = order[i];
				order[i] = order[j];
				order[j] = t;
			}
	scratch = malloc(pv_sample_scratch_bytes(V));
	return scratch ? 0 : -1;
}

static void teardown(void) { free(scratch); }

TEST_CASE(greedy)
{
	struct pv_sampling g = { 0 };
	CHECK(pv_sampling_is_greedy(&g) && pv_sample(&g, lg, V, 0, scratch) == arg, "temperature 0 is argmax");
	g.n_valid = 10;
	CHECK(pv_sample(&g, lg, V, 0, scratch) < 10, "n_valid bounds the choice");
	struct pv_sampling k1 = { 1.5f, 1, 1, 0, 7, 0 };
	int all = 1;
	for (int p = 0; p < 100; p++) all &= pv_sample(&k1, lg, V, p, scratch) == arg;
	CHECK(all, "top-k 1 is greedy");
	float ties[4] = { 1, 3, 3, 2 };
	CHECK(pv_sample(NULL, ties, 4, 0, scratch) == 1, "ties go to the lower id");
}

TEST_CASE(seed_and_position)
{
	struct pv_sampling p = { 0.8f, 0, 1, 0, 42, 0 };
	int same = 1, differ = 0;
	for (int i = 0; i < 200; i++) {
		same &= pv_sample(&p, lg, V, i, scratch) == pv_sample(&p, lg, V, i, scratch);
		struct pv_sampling q = p;
		q.seed = 43;
		differ += pv_sample(&p, lg, V, i, scratch) != pv_sample(&q, lg, V, i, scratch);
	}
	CHECK(same, "the same (seed, position) gives the same token");
	CHECK(differ > 20, "another seed changes %d of 200 choices", differ);
	/* the draw depends on (seed, position) only: evaluating out of order gives the same tokens */
	int fwd[64], back[64];
	for (int i = 0; i < 64; i++) fwd[i] = pv_sample(&p, lg, V, i, scratch);
	for (int i = 63; i >= 0; i--) back[i] = pv_sample(&p, lg, V, i, scratch);
	CHECK(!memcmp(fwd, back, sizeof fwd), "order of evaluation changes the tokens");
}

TEST_CASE(top_k_top_p_min_p)
{
	struct pv_sampling k3 = { 1.0f, 3, 1, 0, 9, 0 };
	int ok = 1;
	for (int i = 0; i < 500; i++) {
		int t = pv_sample(&k3, lg, V, i, scratch);
		ok &= t == order[0] || t == order[1] || t == order[2];
	}
	CHECK(ok, "top-k 3 stays in the top 3");
	/* top-p 0 keeps the top token only (Hugging Face, llama.cpp): not "off" */
	struct pv_sampling p0 = { 1.0f, 0, 0.0f, 0, 3, 0 };
	ok = 1;
	for (int i = 0; i < 200; i++) ok &= pv_sample(&p0, lg, V, i, scratch) == arg;
	CHECK(ok, "top-p 0 keeps only the most likely token");
	/* top-p 0.5 over p = (0.1, 0.2, 0.3, 0.4): the set {3, 2}, as in HF's cumulative rule */
	float four[4] = { logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f) };
	struct pv_sampling tp = { 1.0f, 0, 0.5f, 0, 3, 0 };
	int seen[4] = { 0 };
	for (int i = 0; i < 2000; i++) seen[pv_sample(&tp, four, 4, i, scratch)]++;
	CHECK(!seen[0] && !seen[1] && seen[2] && seen[3], "top-p 0.5 draws %d %d %d %d", seen[0], seen[1], seen[2], seen[3]);
	/* min-p 0.6: ids with p >= 0.6 * 0.4 = 0.24: {2, 3} */
	struct pv_sampling mp = { 1.0f, 0, 1, 0.6f, 5, 0 };
	memset(seen, 0, sizeof seen);
	for (int i = 0; i < 2000; i++) seen[pv_sample(&mp, four, 4, i, scratch)]++;
	CHECK(!seen[0] && !seen[1] && seen[2] && seen[3], "min-p 0.6 draws %d %d %d %d", seen[0], seen[1], seen[2], seen[3]);
}

/* The sampler as it was before top-k selection (a full sort of every candidate): top-k now
 * selects the best k first, which must choose exactly the same tokens. */
struct ref_cand {
	float p;
	int id;
};
static int ref_cmp(const void* a, const void* b)
{
	const struct ref_cand *x = a, *y = b;
	if (x->p != y->p) return x->p < y->p ? 1 : -1;
	return x->id - y->id;
}
static int32_t ref_sample(const struct pv_sampling* s, const float* l, int n_vocab, int64_t pos, struct ref_cand* c)
{
	int best = 0;
	for (int i = 1; i < n_vocab; i++)
		if (l[i] > l[best]) best = i;
	const float inv_t = 1.0f / s->temperature, mx = l[best];
	int n = 0;
	for (int i = 0; i < n_vocab; i++) {
		float e = expf((l[i] - mx) * inv_t);
		if (e > 0.0f) c[n++] = (struct ref_cand){ e, i };
	}
	qsort(c, (size_t)n, sizeof(*c), ref_cmp);
	if (s->top_k > 0 && s->top_k < n) n = s->top_k;
	if (s->min_p > 0.0f) {
		int m = 1;
		while (m < n && c[m].p >= s->min_p * c[0].p) m++;
		n = m;
	}
	double total = 0;
	for (int i = 0; i < n; i++) total += c[i].p;
	if (s->top_p < 1.0f) {
		double keep = c[0].p;
		int m = 1;
		while (m < n && keep < (double)s->top_p * total) keep += c[m++].p;
		n = m;
		total = keep;
	}
	double r = (double)pv_sample_uniform(s->seed, pos) * total, acc = 0;
	for (int i = 0; i < n; i++) {
		acc += c[i].p;
		if (r < acc) return c[i].id;
	}
	return c[n - 1].id;
}

TEST_CASE(top_k_selection_equals_full_sort)
{
	enum { N = 5000 };
	float* l = malloc(sizeof(float) * N);
	struct ref_cand* rc = malloc(sizeof(struct ref_cand) * N);
	void* sc = malloc(pv_sample_scratch_bytes(N));
	srand(7);
	int same = 1, tries = 0;
	for (int round = 0; round < 40 && l && rc && sc; round++) {
		/* coarse values make many exact ties, which the order must break by id */
		for (int i = 0; i < N; i++) l[i] = round % 2 ? (float)(rand() % 50) * 0.25f : (float)rand() / RAND_MAX * 8.0f;
		const int ks[] = { 1, 2, 3, 20, 40, 64, 1000, N - 1 };
		for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
			struct pv_sampling s = { 0.3f + 0.2f * (round % 7), ks[k], round % 3 ? 0.9f : 1.0f, round % 5 ? 0.0f : 0.05f,
				                 (uint64_t)round, 0 };
			for (int pos = 0; pos < 20; pos++, tries++)
				same &= pv_sample(&s, l, N, pos, sc) == (ks[k] == 1 ? pv_argmax(l, N) : ref_sample(&s, l, N, pos, rc));
		}
	}
	CHECK(same && tries > 0, "top-k selection chose another token than the full sort (%d draws)", tries);
	free(l);
	free(rc);
	free(sc);
}

TEST_CASE(frequencies)
{
	/* frequencies at temperature 1 follow softmax within a few standard deviations */
	float two[2] = { 0.0f, logf(3.0f) }; /* p = 0.25, 0.75 */
	struct pv_sampling t1 = { 1.0f, 0, 1, 0, 3, 0 };
	int n1 = 0, N = 20000;
	for (int i = 0; i < N; i++) n1 += pv_sample(&t1, two, 2, i, scratch) == 1;
	double sd = sqrt(N * 0.75 * 0.25);
	CHECK(fabs(n1 - 0.75 * N) < 5 * sd, "frequency %d vs expected %.0f", n1, 0.75 * N);
	/* the draw is uniform: its mean and its share below 0.1 */
	double sum = 0;
	int low = 0;
	for (int i = 0; i < N; i++) {
		float u = pv_sample_uniform(77, i);
		sum += u;
		low += u < 0.1f;
		CHECK(u >= 0 && u < 1, "draw %g", u);
	}
	CHECK(fabs(sum / N - 0.5) < 0.01 && abs(low - N / 10) < 5 * (int)sqrt(N * 0.09), "uniform: mean %g, %d below 0.1", sum / N,
	      low);
}

/* the inputs that emptied the candidate set (issue 9: a heap read at c[-1]) */
TEST_CASE(never_empty)
{
	float tiny_t[] = { 1e-39f, 3e-39f, 1e-30f, 1e-45f };
	for (size_t i = 0; i < sizeof tiny_t / sizeof tiny_t[0]; i++) {
		struct pv_sampling s = { tiny_t[i], 0, 0.9f, 0, 1, 0 };
		CHECK(pv_sample(&s, lg, V, 3, scratch) == arg, "temperature %g is greedy", tiny_t[i]);
	}
	float bad[6] = { NAN, 1.0f, INFINITY, -INFINITY, NAN, 2.0f };
	struct pv_sampling s = { 0.7f, 0, 0.9f, 0, 1, 0 };
	for (int p = 0; p < 50; p++) {
		int t = pv_sample(&s, bad, 6, p, scratch);
		CHECK(t >= 0 && t < 6 && !isnan(bad[t]), "a NaN logit was chosen (%d)", t);
	}
	float nan_all[3] = { NAN, NAN, NAN };
	int t = pv_sample(&s, nan_all, 3, 0, scratch);
	CHECK(t >= 0 && t < 3, "all-NaN row gave %d", t);
	float minus[3] = { -INFINITY, -INFINITY, -INFINITY };
	CHECK(pv_sample(&s, minus, 3, 0, scratch) == 0, "all -inf row");
	float big[3] = { 1e38f, -1e38f, 3e38f };
	t = pv_sample(&s, big, 3, 0, scratch);
	CHECK(t >= 0 && t < 3, "huge logits gave %d", t);
}

int main(int argc, char** argv) { return t_main(argc, argv, "test_sampler", setup, teardown); }
