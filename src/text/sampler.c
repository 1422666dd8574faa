/*
 * sampler.c: greedy, or temperature / top-k / top-p / min-p over one draw u(seed, position)
 * (proven_text.h).
 * The draw is a counter-based hash of (seed, position), not a stream: a speculative step that
 * evaluates rows out of the plain order, or evaluates a row twice, draws the same number for the
 * same position. The candidate set never comes out empty: a temperature so small that 1/T
 * overflows is greedy, non-finite logits never enter the softmax, and every filter keeps at
 * least the most likely id.
 */
#include "proven_text.h"

#include <math.h>
#include <stdlib.h>

int pv_sampling_is_greedy(const struct pv_sampling* s)
{
	/* 1/T overflows below ~2.9e-39: the softmax would be all-or-nothing anyway */
	return !s || !(s->temperature > 1e-30f) || s->top_k == 1;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

float pv_sample_uniform(uint64_t seed, int64_t pos)
{
	uint64_t h = splitmix64(splitmix64(seed) ^ (uint64_t)pos);
	return (float)(h >> 40) * (1.0f / 16777216.0f);
}

struct cand {
	float p;
	int id;
};

size_t pv_sample_scratch_bytes(int n_vocab) { return sizeof(struct cand) * (size_t)(n_vocab > 0 ? n_vocab : 1); }

static int by_prob_desc(const void* a, const void* b)
{
	const struct cand *x = a, *y = b;
	if (x->p != y->p) return x->p < y->p ? 1 : -1;
	return x->id - y->id; /* ties: lower id first, so the order is total */
}

/* Moves the k best candidates (by_prob_desc) to c[0, k), in no order; returns k. A heap of the
 * k best so far with the worst on top: most candidates are rejected by one comparison. */
static int top_k_select(struct cand* c, int n, int k)
{
	for (int i = 0; i < n; i++) {
		struct cand x = c[i];
		int h;
		if (i < k) {
			/* push: sift up while worse than the parent */
			h = i;
			while (h > 0 && by_prob_desc(&x, &c[(h - 1) / 2]) > 0) {
				c[h] = c[(h - 1) / 2];
				h = (h - 1) / 2;
			}
			c[h] = x;
			continue;
		}
		if (by_prob_desc(&x, &c[0]) >= 0) continue; /* not better than the worst kept */
		/* replace the top and sift down */
		h = 0;
		for (;;) {
			int l = 2 * h + 1, r = l + 1, w = h;
			const struct cand* wv = &x;
			if (l < k && by_prob_desc(&c[l], wv) > 0) w = l, wv = &c[l];
			if (r < k && by_prob_desc(&c[r], wv) > 0) w = r, wv = &c[r];
			if (w == h) break;
			c[h] = c[w];
			h = w;
		}
		c[h] = x;
	}
	return k;
}

/* the lowest id among the largest finite logits; 0 when every logit is NaN */
static int argmax_finite(const float* lg, int n)
{
	int best = -1;
	for (int i = 0; i < n; i++)
		if (lg[i] == lg[i] && (best < 0 || lg[i] > lg[best])) best = i;
	return best < 0 ? 0 : best;
}

int32_t pv_sample(const struct pv_sampling* s, const float* logits, int n_vocab, int64_t pos, void* scratch)
{
	const int n_valid = s && s->n_valid > 0 && s->n_valid < n_vocab ? s->n_valid : n_vocab;
	struct cand* c = scratch;
	const int best = argmax_finite(logits, n_valid);
	if (pv_sampling_is_greedy(s) || !isfinite(logits[best])) return best;
	const float inv_t = 1.0f / s->temperature, mx = logits[best];
	int n = 0;
	for (int i = 0; i < n_valid; i++) {
		if (!(logits[i] == logits[i])) continue;
		float e = expf((logits[i] - mx) * inv_t);
		if (e > 0.0f) c[n++] = (struct cand){ e, i };
	}
	if (n == 0) return best;
	if (s->top_k > 0 && s->top_k < n) {
		/* only the top k matter: select them (O(n log k)) and sort those. The comparator is a
		 * total order, so this is exactly the first k of the full sort, and everything below
		 * reads only them (a full qsort of a 152k vocabulary costs ~10 ms a token) */
		n = top_k_select(c, n, s->top_k);
	}
	qsort(c, (size_t)n, sizeof(*c), by_prob_desc);
	if (s->min_p > 0.0f) {
		int m = 1;
		while (m < n && c[m].p >= s->min_p * c[0].p) m++;
		n = m;
	}
	double total = 0;
	for (int i = 0; i < n; i++) total += c[i].p;
	if (s->top_p < 1.0f) {
		/* the smallest prefix holding top_p of the mass; top_p 0 keeps the top id only */
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
