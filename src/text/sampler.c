/* sampler.c: greedy / temperature / top-k / top-p sampling with a seeded PCG32 stream. */
#include "proven_text.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>

struct cand {
	float p;
	int id;
};

struct pv_sampler {
	struct pv_sampler_params p;
	uint64_t state, inc;
	struct cand* c; /* [n_vocab] scratch, allocated once */
	int n_vocab;
};

static uint32_t pcg32(struct pv_sampler* s)
{
	uint64_t old = s->state;
	s->state = old * 6364136223846793005ULL + s->inc;
	uint32_t x = (uint32_t)(((old >> 18) ^ old) >> 27), rot = (uint32_t)(old >> 59);
	return (x >> rot) | (x << ((-rot) & 31));
}

/* uniform in [0, 1) with 24 bits */
static float uniform(struct pv_sampler* s) { return (pcg32(s) >> 8) * (1.0f / 16777216.0f); }

struct pv_sampler* pv_sampler_new(const struct pv_sampler_params* p, int n_vocab)
{
	struct pv_sampler* s = pv_xcalloc(1, sizeof(*s));
	s->p = *p;
	s->n_vocab = n_vocab;
	s->c = pv_xcalloc((size_t)n_vocab, sizeof(*s->c));
	s->inc = (p->seed << 1) | 1;
	s->state = 0;
	pcg32(s);
	s->state += p->seed ^ 0x853c49e6748fea9bULL;
	pcg32(s);
	return s;
}

void pv_sampler_free(struct pv_sampler* s)
{
	if (!s) return;
	free(s->c);
	free(s);
}

static int by_prob_desc(const void* a, const void* b)
{
	const struct cand *x = a, *y = b;
	if (x->p != y->p) return x->p < y->p ? 1 : -1;
	return x->id - y->id; /* ties: lower id first, so the order is total */
}

int pv_sampler_pick(struct pv_sampler* s, const float* logits, int n_valid)
{
	if (n_valid > s->n_vocab) n_valid = s->n_vocab;
	int best = 0;
	for (int i = 1; i < n_valid; i++)
		if (logits[i] > logits[best]) best = i;
	if (s->p.temperature <= 0.0f) return best;

	/* softmax(logits / T) relative to the max, then keep the top-k, then the top-p mass */
	float inv_t = 1.0f / s->p.temperature, mx = logits[best];
	int n = 0;
	for (int i = 0; i < n_valid; i++) {
		float e = expf((logits[i] - mx) * inv_t);
		if (e > 0.0f) s->c[n++] = (struct cand){ e, i };
	}
	qsort(s->c, (size_t)n, sizeof(*s->c), by_prob_desc);
	if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
	double total = 0;
	for (int i = 0; i < n; i++) total += s->c[i].p;
	if (s->p.top_p > 0.0f && s->p.top_p < 1.0f) {
		double keep = 0;
		int m = 0;
		while (m < n && keep < s->p.top_p * total) keep += s->c[m++].p;
		n = m > 0 ? m : 1;
		total = keep > 0 ? keep : s->c[0].p;
	}
	double r = uniform(s) * total, acc = 0;
	for (int i = 0; i < n; i++) {
		acc += s->c[i].p;
		if (r < acc) return s->c[i].id;
	}
	return s->c[n - 1].id;
}
