/*
 * cpu_backend.c: the CPU backend, the reference every other backend is compared against:
 * host memory for the KV cache, the DeltaNet state, checkpoints and scratch (all allocated here,
 * once per session), the thread pool, and forward.c / deltanet.c for the arithmetic.
 */
#include "engine/backend.h"
#include "engine/session.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static int maxi(int a, int b) { return a > b ? a : b; }

static float* falloc(size_t n, int* fail)
{
	float* p = pv_aligned_alloc(n * sizeof(float));
	if (!p) *fail = 1;
	else memset(p, 0, n * sizeof(float));
	return p;
}

static void cpu_session_free(struct pv_session* s)
{
	const struct pv_config* c = &s->m->cfg;
	for (int l = 0; l < c->n_layers; l++) {
		if (s->k_cache) free(s->k_cache[l]);
		if (s->v_cache) free(s->v_cache[l]);
		if (s->ssm) free(s->ssm[l]);
	}
	free(s->k_cache);
	free(s->v_cache);
	free(s->ssm);
	free(s->conv);
	for (int i = 0; s->ckpt_buf && i < s->n_ckpt_slots; i++) free(s->ckpt_buf[i]);
	free(s->ckpt_buf);
	if (s->ts)
		for (int i = 0; i < s->n_threads; i++) {
			free(s->ts[i].scores);
			free(s->ts[i].chunk);
		}
	free(s->ts);
	float* bufs[] = { s->rope_cos, s->rope_sin, s->x, s->xn, s->tmp, s->mo, s->gx, s->q, s->ag, s->o,
		          s->mix, s->mix2, s->z, s->ab, s->lb, s->lg, s->ff_g, s->ff_u, s->router, s->top_w, s->eo };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
	free(s->top_idx);
	free(s->exp_rows);
	free(s->exp_slot);
	pv_pool_free(s->pool);
}

static int cpu_session_init(struct pv_session* s, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	int fail = 0, L = c->n_layers, B = s->max_batch, H = c->hidden;
	size_t kvd = (size_t)pv_cfg_kv_dim(c), sf = pv_state_floats_per_layer(c);
	struct pv_widths w = pv_scratch_widths(c);

	s->k_cache = pv_xcalloc((size_t)L, sizeof(float*));
	s->v_cache = pv_xcalloc((size_t)L, sizeof(float*));
	s->ssm = pv_xcalloc((size_t)L, sizeof(float*));
	s->conv = pv_xcalloc((size_t)L, sizeof(float*));
	for (int l = 0; l < L; l++) {
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			s->k_cache[l] = falloc((size_t)s->n_ctx * kvd, &fail);
			s->v_cache[l] = falloc((size_t)s->n_ctx * kvd, &fail);
		} else {
			/* S and conv state are one allocation so a checkpoint is one copy per layer */
			s->ssm[l] = falloc(sf, &fail);
			if (s->ssm[l]) s->conv[l] = s->ssm[l] + (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
		}
	}
	s->ckpt_buf = pv_xcalloc((size_t)s->n_ckpt_slots, sizeof(float*));
	for (int i = 0; i < s->n_ckpt_slots && s->state_floats; i++) s->ckpt_buf[i] = falloc(s->state_floats, &fail);

	int half = c->rope_dim / 2;
	s->rope_cos = falloc((size_t)s->n_ctx * half, &fail);
	s->rope_sin = falloc((size_t)s->n_ctx * half, &fail);
	if (!fail) {
		/* inv_freq_i = 1 / theta^(2i/R) and angle = pos * inv_freq, in f32 like transformers */
		for (int i = 0; i < half; i++) {
			float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
			for (int pos = 0; pos < s->n_ctx; pos++) {
				float ang = (float)pos * inv;
				s->rope_cos[(size_t)pos * half + i] = cosf(ang);
				s->rope_sin[(size_t)pos * half + i] = sinf(ang);
			}
		}
	}

	s->x = falloc((size_t)B * H, &fail);
	s->xn = falloc((size_t)B * H, &fail);
	s->tmp = falloc((size_t)B * H, &fail);
	s->mo = falloc((size_t)B * H, &fail);
	s->gx = falloc((size_t)B * H, &fail);
	s->q = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	s->ag = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	s->o = falloc((size_t)B * w.o, &fail);
	s->mix = falloc((size_t)B * w.mix, &fail);
	s->mix2 = falloc((size_t)B * w.mix, &fail);
	s->z = falloc((size_t)B * maxi(pv_cfg_value_dim(c), 1), &fail);
	s->ab = falloc((size_t)B * 2 * maxi(c->lin_v_heads, 1), &fail);
	s->lb = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	s->lg = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	s->ff_g = falloc((size_t)B * w.ffn, &fail);
	s->ff_u = falloc((size_t)B * w.ffn, &fail);
	if (c->n_experts) {
		s->router = falloc((size_t)B * c->n_experts, &fail);
		s->top_w = falloc((size_t)B * c->n_experts_used, &fail);
		s->eo = falloc((size_t)B * c->n_experts_used * H, &fail);
		s->top_idx = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		s->exp_rows = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		s->exp_slot = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
	}
	s->ts = pv_xcalloc((size_t)s->n_threads, sizeof(*s->ts));
	for (int i = 0; i < s->n_threads; i++) {
		s->ts[i].scores = falloc((size_t)s->n_ctx, &fail);
		s->ts[i].chunk = falloc(pv_deltanet_chunk_floats(c), &fail);
	}
	s->pool = pv_pool_new(s->n_threads);
	if (fail || !s->pool) return pv_errf(err, errlen, "out of memory creating a session (n_ctx %d)", s->n_ctx);
	return 0;
}

/* The recurrent state of every linear layer, S then conv, into/out of checkpoint slot `slot`. */
static void state_copy(struct pv_session* s, float* buf, int save)
{
	const struct pv_config* c = &s->m->cfg;
	size_t sf = pv_state_floats_per_layer(c), off = 0;
	for (int l = 0; l < c->n_layers; l++) {
		if (c->layer_kind[l] != PV_LAYER_LINEAR) continue;
		if (save) memcpy(buf + off, s->ssm[l], sf * sizeof(float));
		else memcpy(s->ssm[l], buf + off, sf * sizeof(float));
		off += sf;
	}
}

static void cpu_state_save(struct pv_session* s, int slot) { state_copy(s, s->ckpt_buf[slot], 1); }
static void cpu_state_load(struct pv_session* s, int slot) { state_copy(s, s->ckpt_buf[slot], 0); }

static void cpu_state_reset(struct pv_session* s)
{
	for (int l = 0; l < s->m->cfg.n_layers; l++)
		if (s->ssm[l]) memset(s->ssm[l], 0, pv_state_floats_per_layer(&s->m->cfg) * sizeof(float));
}

static int cpu_forward(struct pv_session* s, const int32_t* tokens, int n, float* logits, int first_logit, int chunked)
{
	pv_forward(s, tokens, n, logits, first_logit, chunked); /* host arithmetic cannot fail */
	return 0;
}

const struct pv_backend pv_backend_cpu = {
	.name = "cpu",
	.session_init = cpu_session_init,
	.session_free = cpu_session_free,
	.forward = cpu_forward,
	.state_save = cpu_state_save,
	.state_load = cpu_state_load,
	.state_reset = cpu_state_reset,
};
