/*
 * choose.h: the model's choice of the next token from a logits row (proven_spec.h, struct
 * pv_sampling): a function of the row and, when sampling, of (seed, position) only. Plain and
 * speculative decoding call the same function with the same arguments, which is why their
 * tokens agree.
 */
#ifndef PV_SPEC_CHOOSE_H
#define PV_SPEC_CHOOSE_H

#include "proven_spec.h"

#include <stdint.h>

struct pv_cand {
	float p;
	int id;
};

/* 1 when the sampling parameters choose greedily (the argmax is the choice). */
int pv_choose_is_greedy(const struct pv_sampling* s);
/* The token at sequence position `pos` from logits[0, n_valid) (scratch: n_valid entries). */
int32_t pv_choose(const struct pv_sampling* s, const float* logits, int n_valid, int64_t pos, struct pv_cand* scratch);
/* The uniform draw in [0, 1) for (seed, pos): a counter-based hash (splitmix64), 24 bits. */
float pv_choose_uniform(uint64_t seed, int64_t pos);

#endif
