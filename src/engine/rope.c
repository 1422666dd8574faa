/*
 * rope.c: the RoPE tables every backend uses, computed once per session on the host (the CPU
 * reads them, a GPU backend uploads them), so both see the same bits by construction.
 */
#include "engine/session.h"

#include <math.h>
#include <stdlib.h>

int pv_rope_tables(const struct pv_config* c, int n_ctx, float** cos_out, float** sin_out)
{
	const int half = c->rope_dim / 2;
	const size_t nt = (size_t)n_ctx * (size_t)(half > 0 ? half : 1);
	float* cs = malloc(nt * sizeof(float));
	float* sn = malloc(nt * sizeof(float));
	*cos_out = cs;
	*sin_out = sn;
	if (!cs || !sn) return -1;
	/* inv_freq_i = 1 / theta^(2i/R) and angle = pos * inv_freq, in f32 like transformers */
	for (int i = 0; i < half; i++) {
		float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
		for (int pos = 0; pos < n_ctx; pos++) {
			float ang = (float)pos * inv;
			cs[(size_t)pos * half + i] = cosf(ang);
			sn[(size_t)pos * half + i] = sinf(ang);
		}
	}
	return 0;
}
