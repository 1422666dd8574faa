/*
 * sampler.h: choosing the next token from a logits row: greedy at temperature 0, otherwise
 * temperature, top-k and top-p (nucleus) over a seeded PCG32 stream, so a run is reproducible
 * from its seed. Only ids below n_valid are ever chosen (padded vocabulary rows never win).
 */
#ifndef PV_SAMPLER_H
#define PV_SAMPLER_H

#include <stdint.h>

struct pv_sampler_params {
	float temperature; /* 0: greedy                                     */
	int top_k;         /* 0: off                                        */
	float top_p;       /* 1 (or 0): off                                 */
	uint64_t seed;
};

struct pv_sampler;

struct pv_sampler* pv_sampler_new(const struct pv_sampler_params* p, int n_vocab);
void pv_sampler_free(struct pv_sampler* s);
/* Picks a token from logits[0..n_valid). Does not modify logits. */
int pv_sampler_pick(struct pv_sampler* s, const float* logits, int n_valid);

#endif
