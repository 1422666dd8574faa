/*
 * session.c: pv_session: allocation of all per-sequence memory, the eval driver (splitting a
 * call into steps of at most B rows), checkpoints and rollback.
 */
#include "session.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int maxi(int a, int b) { return a > b ? a : b; }

static void session_defaults(const struct pv_model* m, const struct pv_session_params* in,
                             struct pv_session_params* p)
{
	struct pv_session_params d = { 0 };
	if (in) d = *in;
	if (d.n_ctx <= 0) d.n_ctx = m->cfg.max_pos < 4096 ? m->cfg.max_pos : 4096;
	if (d.n_threads <= 0) {
		long nc = sysconf(_SC_NPROCESSORS_ONLN);
		d.n_threads = nc > 0 ? (int)nc : 1;
	}
	if (d.max_batch <= 0) d.max_batch = 128;
	if (d.chunk_min_tokens <= 0) d.chunk_min_tokens = PV_DELTA_CHUNK;
	if (d.n_checkpoints <= 0) d.n_checkpoints = 4;
	*p = d;
}

/* Widths of the scratch buffers, from the config (never from the fixtures' shapes). */
struct widths {
	size_t mix, ffn, o;
};

static struct widths scratch_widths(const struct pv_config* c)
{
	struct widths w;
	int qd = pv_cfg_q_dim(c);
	w.mix = (size_t)maxi(maxi(pv_cfg_conv_dim(c), 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c)), 2 * qd);
	w.ffn = (size_t)maxi(maxi(c->intermediate, c->moe_inter), c->shared_inter);
	w.o = (size_t)maxi(qd, pv_cfg_value_dim(c));
	return w;
}

static size_t state_floats_per_layer(const struct pv_config* c)
{
	return (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim + (size_t)(c->conv_kernel - 1) * pv_cfg_conv_dim(c);
}

static int n_layers_of(const struct pv_config* c, int kind)
{
	int k = 0;
	for (int l = 0; l < c->n_layers; l++) k += c->layer_kind[l] == kind;
	return k;
}

uint64_t pv_session_bytes(const pv_model* m, const struct pv_session_params* params)
{
	struct pv_session_params p;
	session_defaults(m, params, &p);
	const struct pv_config* c = &m->cfg;
	struct widths w = scratch_widths(c);
	uint64_t B = (uint64_t)p.max_batch, H = (uint64_t)c->hidden, f = 0;
	f += (uint64_t)n_layers_of(c, PV_LAYER_ATTN) * 2 * (uint64_t)p.n_ctx * pv_cfg_kv_dim(c);
	f += (uint64_t)n_layers_of(c, PV_LAYER_LINEAR) * state_floats_per_layer(c) * (1 + (uint64_t)p.n_checkpoints);
	f += (uint64_t)p.n_ctx * (uint64_t)c->rope_dim; /* cos + sin */
	f += B * (4 * H + 2 * w.mix + (uint64_t)pv_cfg_value_dim(c) + 2 * (uint64_t)pv_cfg_q_dim(c) + w.o + 4 * (uint64_t)c->lin_v_heads + 2 * w.ffn);
	f += B * ((uint64_t)c->n_experts + 2 * (uint64_t)c->n_experts_used + H + (uint64_t)c->n_experts_used * H);
	f += (uint64_t)p.n_threads * ((uint64_t)p.n_ctx + pv_deltanet_chunk_floats(c));
	return f * 4 + (uint64_t)p.n_ctx * 4;
}

static float* falloc(size_t n, int* fail)
{
	float* p = pv_aligned_alloc(n * sizeof(float));
	if (!p) *fail = 1;
	else memset(p, 0, n * sizeof(float));
	return p;
}

int pv_session_new(pv_session** out, const pv_model* m, const struct pv_session_params* params,
                   char* err, size_t errlen)
{
	*out = NULL;
	struct pv_session_params p;
	session_defaults(m, params, &p);
	const struct pv_config* c = &m->cfg;
	if (p.n_ctx > c->max_pos)
		return pv_errf(err, errlen, "context %d exceeds the model's max_position_embeddings %d", p.n_ctx, c->max_pos);
	if (p.n_ctx > (1 << 24) || p.max_batch > 4096 || p.n_threads > 1024)
		return pv_errf(err, errlen, "session parameters out of range (n_ctx %d, max_batch %d, threads %d)",
		               p.n_ctx, p.max_batch, p.n_threads);

	struct pv_session* s = pv_xcalloc(1, sizeof(*s));
	s->m = m;
	s->n_ctx = p.n_ctx;
	s->max_batch = p.max_batch;
	s->chunk_min = p.chunk_min_tokens;
	s->n_threads = p.n_threads;
	s->n_ckpt_slots = p.n_checkpoints;

	int fail = 0, L = c->n_layers, B = p.max_batch, H = c->hidden;
	size_t kvd = (size_t)pv_cfg_kv_dim(c), sf = state_floats_per_layer(c);
	struct widths w = scratch_widths(c);

	s->tokens = pv_xcalloc((size_t)p.n_ctx, sizeof(int32_t));
	s->k_cache = pv_xcalloc((size_t)L, sizeof(float*));
	s->v_cache = pv_xcalloc((size_t)L, sizeof(float*));
	s->ssm = pv_xcalloc((size_t)L, sizeof(float*));
	s->conv = pv_xcalloc((size_t)L, sizeof(float*));
	for (int l = 0; l < L; l++) {
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			s->k_cache[l] = falloc((size_t)p.n_ctx * kvd, &fail);
			s->v_cache[l] = falloc((size_t)p.n_ctx * kvd, &fail);
		} else {
			/* S and conv state are one allocation so a checkpoint is one copy per layer */
			s->ssm[l] = falloc(sf, &fail);
			if (s->ssm[l]) s->conv[l] = s->ssm[l] + (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
			s->state_floats += sf;
		}
	}
	s->ckpt = pv_xcalloc((size_t)p.n_checkpoints, sizeof(*s->ckpt));
	for (int i = 0; i < p.n_checkpoints && s->state_floats; i++) s->ckpt[i].data = falloc(s->state_floats, &fail);

	int half = c->rope_dim / 2;
	s->rope_cos = falloc((size_t)p.n_ctx * half, &fail);
	s->rope_sin = falloc((size_t)p.n_ctx * half, &fail);
	if (!fail) {
		/* inv_freq_i = 1 / theta^(2i/R) and angle = pos * inv_freq, in f32 like transformers */
		for (int i = 0; i < half; i++) {
			float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
			for (int pos = 0; pos < p.n_ctx; pos++) {
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
	s->ts = pv_xcalloc((size_t)p.n_threads, sizeof(*s->ts));
	for (int i = 0; i < p.n_threads; i++) {
		s->ts[i].scores = falloc((size_t)p.n_ctx, &fail);
		s->ts[i].chunk = falloc(pv_deltanet_chunk_floats(c), &fail);
	}
	s->pool = pv_pool_new(p.n_threads);
	if (fail || !s->pool) {
		pv_session_free(s);
		return pv_errf(err, errlen, "out of memory creating a session (%.1f MiB for n_ctx %d)",
		               (double)pv_session_bytes(m, &p) / (1 << 20), p.n_ctx);
	}
	*out = s;
	return 0;
}

void pv_session_free(pv_session* s)
{
	if (!s) return;
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
	for (int i = 0; s->ckpt && i < s->n_ckpt_slots; i++) free(s->ckpt[i].data);
	free(s->ckpt);
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
	free(s->tokens);
	pv_pool_free(s->pool);
	free(s);
}

const char* pv_session_error(const pv_session* s) { return s->err; }
int pv_session_length(const pv_session* s) { return s->len; }
int pv_session_n_ctx(const pv_session* s) { return s->n_ctx; }
const int32_t* pv_session_tokens(const pv_session* s) { return s->tokens; }

/* The eval driver shared by pv_session_eval and rollback replay. */
static int eval(struct pv_session* s, const int32_t* tokens, int n, float* logits, int mode, int force_recurrent)
{
	const struct pv_config* c = &s->m->cfg;
	if (n <= 0) return pv_errf(s->err, sizeof(s->err), "eval: need at least one token (got %d)", n);
	if (n > s->n_ctx - s->len)
		return pv_errf(s->err, sizeof(s->err), "eval: %d tokens do not fit: context %d, %d used", n, s->n_ctx, s->len);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab)
			return pv_errf(s->err, sizeof(s->err), "eval: token %d at index %d is outside the vocabulary [0, %d)",
			               tokens[i], i, c->vocab);
	if (mode != PV_LOGITS_ALL && mode != PV_LOGITS_LAST)
		return pv_errf(s->err, sizeof(s->err), "eval: unknown logits mode %d", mode);

	int has_linear = n_layers_of(c, PV_LAYER_LINEAR) > 0;
	int chunked = has_linear && !force_recurrent && n >= s->chunk_min;
	for (int off = 0; off < n; off += s->max_batch) {
		int rows = n - off < s->max_batch ? n - off : s->max_batch;
		float* lg = NULL;
		int first = rows;
		if (logits && mode == PV_LOGITS_ALL) {
			lg = logits + (size_t)off * c->vocab;
			first = 0;
		} else if (logits && off + rows == n) {
			lg = logits;
			first = rows - 1;
		}
		memmove(s->tokens + s->len, tokens + off, sizeof(int32_t) * rows); /* may be a replay of the history */
		pv_forward(s, tokens + off, rows, lg, first, chunked);
		s->len += rows;
	}
	return 0;
}

int pv_session_eval(pv_session* s, const int32_t* tokens, int n, float* logits, int mode)
{
	return eval(s, tokens, n, logits, mode, 0);
}

static void state_copy(struct pv_session* s, float* dst, int to_ckpt)
{
	const struct pv_config* c = &s->m->cfg;
	size_t sf = state_floats_per_layer(c), off = 0;
	for (int l = 0; l < c->n_layers; l++) {
		if (c->layer_kind[l] != PV_LAYER_LINEAR) continue;
		if (to_ckpt) memcpy(dst + off, s->ssm[l], sf * sizeof(float));
		else memcpy(s->ssm[l], dst + off, sf * sizeof(float));
		off += sf;
	}
}

int pv_session_checkpoint(pv_session* s)
{
	if (!s->state_floats) return 0; /* attention-only: rollback is truncation */
	if (s->n_ckpt && s->ckpt[s->n_ckpt - 1].len == s->len) return 0;
	if (s->n_ckpt == s->n_ckpt_slots) {
		/* drop the oldest, keep its buffer for reuse */
		struct pv_checkpoint old = s->ckpt[0];
		memmove(s->ckpt, s->ckpt + 1, sizeof(*s->ckpt) * (size_t)(s->n_ckpt_slots - 1));
		s->ckpt[--s->n_ckpt] = old;
	}
	struct pv_checkpoint* k = &s->ckpt[s->n_ckpt++];
	k->len = s->len;
	state_copy(s, k->data, 1);
	return 0;
}

int pv_session_rollback(pv_session* s, int n)
{
	if (n < 0 || n > s->len)
		return pv_errf(s->err, sizeof(s->err), "rollback: length %d outside [0, %d]", n, s->len);
	while (s->n_ckpt && s->ckpt[s->n_ckpt - 1].len > n) s->n_ckpt--;
	if (!s->state_floats) {
		s->len = n;
		return 0;
	}
	int from;
	if (s->n_ckpt) {
		from = s->ckpt[s->n_ckpt - 1].len;
		state_copy(s, s->ckpt[s->n_ckpt - 1].data, 0);
	} else {
		/* the empty sequence is an implicit checkpoint: zero state at length 0 */
		from = 0;
		for (int l = 0; l < s->m->cfg.n_layers; l++)
			if (s->ssm[l]) memset(s->ssm[l], 0, state_floats_per_layer(&s->m->cfg) * sizeof(float));
	}
	s->len = from;
	/* Replay the history after the checkpoint token by token (the recurrent form), which is
	 * bitwise what those tokens produced if they were evaluated in recurrent-form calls. */
	if (n > from) return eval(s, s->tokens + from, n - from, NULL, PV_LOGITS_LAST, 1);
	return 0;
}

int pv_argmax(const float* logits, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best]) best = i;
	return best;
}
