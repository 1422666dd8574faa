/*
 * session.c: pv_session: allocation of all per-sequence memory, the eval driver (splitting a
 * call into steps of at most B rows), checkpoints and rollback.
 */
#include "engine/backend.h"
#include "engine/session.h"
#include "base/util.h"

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
	/* CPU: 128 rows of host scratch per step; a GPU backend keeps its own step scratch, so a prompt
	 * of up to 4096 tokens is one backend call (no host synchronisation inside it) */
	if (d.max_batch <= 0) d.max_batch = m->backend && m->backend != &pv_backend_cpu ? 4096 : 128;
	if (d.chunk_min_tokens <= 0) d.chunk_min_tokens = PV_DELTA_CHUNK;
	if (d.n_checkpoints <= 0) d.n_checkpoints = 4;
	*p = d;
}

/* Widths of the scratch buffers, from the config (never from the fixtures' shapes). */
struct pv_widths pv_scratch_widths(const struct pv_config* c)
{
	struct pv_widths w;
	int qd = pv_cfg_q_dim(c);
	w.mix = (size_t)maxi(maxi(pv_cfg_conv_dim(c), 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c)), 2 * qd);
	w.ffn = (size_t)maxi(maxi(c->intermediate, c->moe_inter), c->shared_inter);
	w.o = (size_t)maxi(qd, pv_cfg_value_dim(c));
	return w;
}

size_t pv_state_floats_per_layer(const struct pv_config* c)
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
	struct pv_widths w = pv_scratch_widths(c);
	uint64_t B = (uint64_t)p.max_batch, H = (uint64_t)c->hidden, f = 0;
	f += (uint64_t)n_layers_of(c, PV_LAYER_ATTN) * 2 * (uint64_t)p.n_ctx * pv_cfg_kv_dim(c);
	f += (uint64_t)n_layers_of(c, PV_LAYER_LINEAR) * pv_state_floats_per_layer(c) * (1 + (uint64_t)p.n_checkpoints);
	f += (uint64_t)p.n_ctx * (uint64_t)c->rope_dim; /* cos + sin */
	f += B * (4 * H + 2 * w.mix + (uint64_t)pv_cfg_value_dim(c) + 2 * (uint64_t)pv_cfg_q_dim(c) + w.o + 4 * (uint64_t)c->lin_v_heads + 2 * w.ffn);
	f += B * ((uint64_t)c->n_experts + 2 * (uint64_t)c->n_experts_used + H + (uint64_t)c->n_experts_used * H);
	f += (uint64_t)p.n_threads * ((uint64_t)p.n_ctx + pv_deltanet_chunk_floats(c));
	return f * 4 + (uint64_t)p.n_ctx * 4;
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
	s->be = m->backend ? m->backend : &pv_backend_cpu;
	s->tokens = pv_xcalloc((size_t)p.n_ctx, sizeof(int32_t));
	s->ckpt = pv_xcalloc((size_t)p.n_checkpoints, sizeof(*s->ckpt));
	for (int i = 0; i < p.n_checkpoints; i++) s->ckpt[i].slot = i;
	for (int l = 0; l < c->n_layers; l++)
		if (c->layer_kind[l] == PV_LAYER_LINEAR) s->state_floats += pv_state_floats_per_layer(c);
	if (s->be->session_init(s, err, errlen)) {
		pv_session_free(s);
		return -1;
	}
	*out = s;
	return 0;
}

void pv_session_free(pv_session* s)
{
	if (!s) return;
	if (s->be) s->be->session_free(s);
	free(s->ckpt);
	free(s->tokens);
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
		if (s->be->forward(s, tokens + off, rows, lg, first, chunked)) return -1; /* s->err says why */
		s->len += rows;
	}
	return 0;
}

int pv_session_eval(pv_session* s, const int32_t* tokens, int n, float* logits, int mode)
{
	return eval(s, tokens, n, logits, mode, 0);
}

int pv_session_checkpoint(pv_session* s)
{
	if (!s->state_floats) return 0; /* attention-only: rollback is truncation */
	if (s->n_ckpt && s->ckpt[s->n_ckpt - 1].len == s->len) return 0;
	if (s->n_ckpt == s->n_ckpt_slots) {
		/* drop the oldest; its storage slot is reused */
		struct pv_checkpoint old = s->ckpt[0];
		memmove(s->ckpt, s->ckpt + 1, sizeof(*s->ckpt) * (size_t)(s->n_ckpt_slots - 1));
		s->ckpt[--s->n_ckpt] = old;
	}
	struct pv_checkpoint* k = &s->ckpt[s->n_ckpt++];
	k->len = s->len;
	s->be->state_save(s, k->slot);
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
		s->be->state_load(s, s->ckpt[s->n_ckpt - 1].slot);
	} else {
		/* the empty sequence is an implicit checkpoint: zero state at length 0 */
		from = 0;
		s->be->state_reset(s);
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
