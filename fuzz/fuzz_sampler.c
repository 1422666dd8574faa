/*
 * fuzz_sampler.c: libFuzzer target for pv_sample (src/text/sampler.c), what a server exposes to
 * every request: random logits (any bit pattern: NaN, infinities, subnormals, huge values) and
 * random parameters (temperature, top-k, top-p, min-p, seed, n_valid, position), all read from
 * the input as raw bits. The chosen id must be a valid one (in [0, n_valid)), never an id whose
 * logit is NaN while another is not, the same on a second call, and the greedy choice (the
 * lowest id among the largest logits) whenever the parameters say greedy.
 *
 *   make fuzz && build-fuzz/fuzz_sampler -max_total_time=120 fuzz/seeds/sampler
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proven_text.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static uint32_t take32(const uint8_t** p, size_t* n)
{
	uint32_t v = 0;
	for (int i = 0; i < 4 && *n; i++, (*p)++, (*n)--) v |= (uint32_t)**p << (8 * i);
	return v;
}

static float as_float(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	const uint8_t* p = data;
	size_t n = size;
	struct pv_sampling s;
	s.temperature = as_float(take32(&p, &n));
	s.top_k = (int32_t)take32(&p, &n);
	s.top_p = as_float(take32(&p, &n));
	s.min_p = as_float(take32(&p, &n));
	s.seed = take32(&p, &n) | (uint64_t)take32(&p, &n) << 32;
	s.n_valid = (int32_t)take32(&p, &n);
	int64_t pos = (int32_t)take32(&p, &n);
	/* the logits: the rest, 4 bytes each (a short input is a short vocabulary) */
	int V = (int)(n / 4);
	if (V < 1) return 0;
	if (V > 4096) V = 4096;
	float* lg = malloc(sizeof *lg * (size_t)V);
	for (int i = 0; i < V; i++) lg[i] = as_float(take32(&p, &n));
	void* scratch = malloc(pv_sample_scratch_bytes(V));
	int32_t id = pv_sample(&s, lg, V, pos, scratch);
	int nv = s.n_valid > 0 && s.n_valid < V ? s.n_valid : V;
	if (id < 0 || id >= nv) __builtin_trap();
	int any = 0, best = -1;
	for (int i = 0; i < nv; i++)
		if (!isnan(lg[i])) {
			any = 1;
			if (best < 0 || lg[i] > lg[best]) best = i;
		}
	if (any && isnan(lg[id])) __builtin_trap();
	if (pv_sample(&s, lg, V, pos, scratch) != id) __builtin_trap(); /* a function of (row, seed, position) */
	if (pv_sampling_is_greedy(&s) && any && id != best) __builtin_trap();
	free(scratch);
	free(lg);
	return 0;
}
