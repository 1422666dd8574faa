/*
 * mtp.c: the MTP head on the CPU (qwen-models.md §7.2), with the layer loop's own layer
 * function (pv_cpu_layer), so the head is the reference forward's arithmetic, not a copy:
 *
 *   e  = RMSNorm(embed[token]; pre_fc_norm_embedding)     h = RMSNorm(hidden; pre_fc_norm_hidden)
 *   u  = [e, h] W_fc^T                                     W_fc [H, 2H], input order [e, h]
 *   u  = decoder layer(u) at RoPE position pos + i, with the head's own KV cache
 *   o  = RMSNorm(u; mtp.norm)   -> hidden_out;   argmax(o W_lm^T) -> the draft
 *
 * Rows are independent except through the causal attention over the head's cache, as in the
 * main layers: batch-invariant.
 */
#include "cpu/state.h"

#include <math.h>
#include <string.h>

int pv_cpu_mtp(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
               float* hidden_out)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_model* m = s->m;
	const struct pv_config* c = &m->cfg;
	const struct pv_mtp* h = m->w.mtp;
	const int H = c->hidden, V = c->vocab;
	if (!s->own_pool) pv_pool_lock(s->pool);
	for (int i = 0; i < n; i++) {
		float* cat = st->mtp_cat + (size_t)i * 2 * H;
		pv_tensor_row_f32(&m->w.embed, tokens[i], st->xn);
		pv_rmsnorm(cat, st->xn, h->norm_emb, H, c->rms_eps);
		pv_rmsnorm(cat + H, hidden + (size_t)i * H, h->norm_hidden, H, c->rms_eps);
	}
	pv_matmul(s->pool, st->x, H, st->mtp_cat, 2 * H, n, &h->fc);
	pv_cpu_layer(s, &h->layer, -1, PV_LAYER_ATTN, c->n_experts > 0, st->mtp_k, st->mtp_v, n, pos, 0, -1);
	for (int i = 0; i < n; i++) pv_rmsnorm(st->xn + (size_t)i * H, st->x + (size_t)i * H, h->norm_out, H, c->rms_eps);
	if (hidden_out) memcpy(hidden_out, st->xn, sizeof(float) * (size_t)n * H);
	for (int t = 0; t < n; t += PV_LM_ROWS) {
		const int rows = n - t < PV_LM_ROWS ? n - t : PV_LM_ROWS;
		pv_matmul(s->pool, st->lm, V, st->xn + (size_t)t * H, H, rows, &m->w.lm_head);
		for (int r = 0; r < rows; r++) {
			const float* row = st->lm + (size_t)r * V;
			int best = 0, bad = 0;
			for (int i = 0; i < V; i++) {
				bad |= !isfinite(row[i]);
				if (row[i] > row[best]) best = i;
			}
			if (bad) {
				if (!s->own_pool) pv_pool_unlock(s->pool);
				return pv_session_fail(s, PV_E_NUMERIC, "mtp: the head computed NaN or infinite values at position %d", pos + t + r);
			}
			argmax[t + r] = best;
		}
	}
	if (!s->own_pool) pv_pool_unlock(s->pool);
	return PV_OK;
}
