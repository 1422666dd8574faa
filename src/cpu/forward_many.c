/*
 * forward_many.c: continuous batching on the CPU (engine/backend.h forward_many): one row of
 * each of `count` sessions of one model (one pool, one KV cache type) evaluated together.
 *
 * The rows share every weight product, which reads (and on the fast numerics converts) each
 * weight block once for all of them. What carries a session's history stays per row, on that
 * session's own state at its own position:
 *   - attention (with or without the output gate): row i's K/V go into session i's cache at
 *     pos_i, and its query reads keys 0..pos_i of that cache (one task per row, exactly as a
 *     one-row step runs it);
 *   - Gated DeltaNet: row i's conv window and recurrent state S are session i's (the one-row
 *     recurrent step, deltanet.c pv_deltanet_layer_many).
 * Every other stage (norms, projections, the gate split, l2 norms, FFN / MoE, the LM head) is
 * per row already, and the products are batch-invariant (ops.h: an output is one dot product
 * whose order depends on the row length only, never on the number of rows), so each row's bits
 * are those of forward(s[i], &st[i]). One session, the host (the first of the largest context,
 * so its per-thread score rows hold every row's keys), lends its scratch to the batch; a batch
 * larger than its max_batch goes in groups of max_batch rows, one after another.
 */
#include "cpu/state.h"
#include "cpu/kern.h"

#include <string.h>

struct attn_many {
	struct pv_session* s0; /* the host */
	struct pv_session* const* ss;
	const int* pos;
	int layer;
};

/* task t * nh + h: head h of row t, against session t's cache (pv_cpu_attn_row_head, the
 * portable and AVX2 sets' attention) */
static void attn_many_row_head(void* ctx, int task, int thread)
{
	struct attn_many* a = ctx;
	const int nh = a->s0->m->cfg.n_heads, t = task / nh;
	const struct pv_cpu_state* si = pv_cpu(a->ss[t]);
	pv_cpu_attn_row_head(a->s0, si->k_cache[a->layer], si->v_cache[a->layer], t, a->pos[t], task % nh, thread);
}

/* task t * nkv + g: kv head g (its G query heads) of row t, the AVX-512 set's attention over one
 * row, as a one-row step runs it */
static void attn_many_512(void* ctx, int task, int thread)
{
	struct attn_many* a = ctx;
	const struct pv_config* c = &a->s0->m->cfg;
	struct pv_cpu_state* st0 = pv_cpu(a->s0);
	const int nkv = c->n_kv_heads, t = task / nkv, hd = c->head_dim, qd = pv_cfg_q_dim(c);
	struct pv_cpu_state* si = pv_cpu(a->ss[t]);
	/* every session of the batch has s0's cache type (pv_cpu_forward_many checks) */
	pv_attn_avx512(st0->q, qd, st0->o, qd, si->k_cache[a->layer], si->v_cache[a->layer], st0->kv_dtype, st0->kv_row, hd,
	               c->n_heads / nkv, task % nkv, t, 1, a->pos[t] - t, 1.0f / sqrtf((float)hd),
	               pv_pool_scratch(a->s0->pool, thread));
}

/* forward.c's attention_layer for rows of different sessions: xn [count, H] -> out [count, H].
 * q (or q and gate, [count, nh, 2, hd], into mix), K and V rows [count, kvd] (into mix2: its width
 * holds 2 * nh * hd >= 2 kvd per row) in one product; then per row the gate split, biases, q/k
 * norms, RoPE, the K/V rows stored into session t's cache (rounded once to its type);
 * attention; the gate; o_proj over all rows. */
static void attention_many(struct pv_session* s0, struct pv_session* const* ss, const int* pos, int count,
                           const struct pv_layer* L, int layer, const float* xn, float* out)
{
	struct pv_cpu_state* st = pv_cpu(s0);
	const struct pv_config* c = &s0->m->cfg;
	const int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
	const int qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	float* qg = c->attn_gate ? st->mix : st->q;
	float* kb = st->mix2;
	float* vb = st->mix2 + (size_t)count * kvd;
	const struct pv_mm_out qkv[3] = { { qg, (int)L->wq.rows, &L->wq, 0, L->wq.rows },
		                          { kb, kvd, &L->wk, 0, L->wk.rows },
		                          { vb, kvd, &L->wv, 0, L->wv.rows } };
	pv_mm_multi(&st->mm, xn, H, count, qkv, 3);
	for (int t = 0; t < count; t++) {
		float* q = st->q + (size_t)t * qd;
		float* k = kb + (size_t)t * kvd; /* finished here, then stored into the session's cache */
		float* v = vb + (size_t)t * kvd;
		if (c->attn_gate) pv_cpu_gate_split(c, qg + (size_t)t * 2 * qd, q, st->ag + (size_t)t * qd);
		pv_cpu_qkv_post(s0, L, q, k, v, pos[t]);
		/* the one-row step's store: f32 rows as they are, other types rounded once */
		struct pv_cpu_state* si = pv_cpu(ss[t]);
		unsigned char* kd = si->k_cache[layer] + (size_t)pos[t] * si->kv_row;
		unsigned char* vd = si->v_cache[layer] + (size_t)pos[t] * si->kv_row;
		if (si->kv_dtype == PV_F32) {
			memcpy(kd, k, sizeof(float) * kvd);
			memcpy(vd, v, sizeof(float) * kvd);
		} else {
			pv_kv_store(si->kv_dtype, k, kd, nkv, hd);
			pv_kv_store(si->kv_dtype, v, vd, nkv, hd);
		}
	}
	struct attn_many am = { s0, ss, pos, layer };
	int rows;
	if (pv_cpu_attn512(s0, &rows))
		pv_pool_run(s0->pool, attn_many_512, &am, count * nkv);
	else
		pv_pool_run(s0->pool, attn_many_row_head, &am, count * nh);
	if (c->attn_gate) pv_cpu_gate_apply(st->o, st->ag, (size_t)count * qd);
	pv_mm(&st->mm, out, H, st->o, qd, count, &L->wo);
}

/* One group of count <= the host's max_batch rows (row i: session ss[i]) through every layer and
 * the outputs, in the host s0's scratch; bad[i] = 1 when row i's outputs are not finite (what
 * would fail its one-row step). */
static void group_step(struct pv_session* s0, struct pv_session* const* ss, const struct pv_step* sp, const int* pos, int count,
                       int* bad)
{
	struct pv_cpu_state* st = pv_cpu(s0);
	const struct pv_model* m = s0->m;
	const struct pv_config* c = &m->cfg;
	const int H = c->hidden, V = c->vocab;
	for (int i = 0; i < count; i++) pv_tensor_row_f32(&m->w.embed, sp[i].tokens[0], st->x + (size_t)i * H);
	for (int l = 0; l < c->n_layers; l++) {
		const struct pv_layer* L = &m->w.layers[l];
		float* out = st->mixer;
		pv_rmsnorm_rows(st->xn, st->x, L->attn_norm, count, H, c->rms_eps);
		if (c->layer_kind[l] == PV_LAYER_ATTN)
			attention_many(s0, ss, pos, count, L, l, st->xn, out);
		else
			pv_deltanet_layer_many(s0, ss, count, l, st->xn, out);
		pv_add_rows(st->x, out, (size_t)count * H);
		pv_rmsnorm_rows(st->xn, st->x, L->ffn_norm, count, H, c->rms_eps);
		pv_cpu_ffn(s0, L, c->layer_moe[l], st->xn, out, count);
		pv_add_rows(st->x, out, (size_t)count * H);
	}
	/* the final norm, and the LM head over PV_LM_ROWS rows at a time; each step takes its row's
	 * outputs (the logits a one-row step would write, its argmax from them) */
	pv_rmsnorm_rows(st->xn, st->x, m->w.final_norm, count, H, c->rms_eps);
	for (int g0 = 0; g0 < count; g0 += PV_LM_ROWS) {
		const int rows = count - g0 < PV_LM_ROWS ? count - g0 : PV_LM_ROWS;
		int need_lm = 0;
		for (int i = g0; i < g0 + rows; i++)
			need_lm |= (sp[i].logits && sp[i].logits_row0 < 1) || (sp[i].argmax && sp[i].argmax_row0 < 1);
		if (need_lm) pv_mm(&st->mm, st->lm, V, st->xn + (size_t)g0 * H, H, rows, &m->w.lm_head);
		for (int i = g0; i < g0 + rows; i++) {
			const struct pv_step* p = &sp[i];
			const float* xr = st->xn + (size_t)i * H;
			const float* lr = st->lm + (size_t)(i - g0) * V;
			bad[i] = 0;
			if (p->hidden && p->hidden_row0 < 1) {
				memcpy(p->hidden, xr, sizeof(float) * H);
				bad[i] |= !pv_cpu_row_finite(xr, H);
			}
			if (p->logits && p->logits_row0 < 1) {
				memcpy(p->logits, lr, sizeof(float) * V);
				bad[i] |= !pv_cpu_row_finite(lr, V);
			}
			if (p->argmax && p->argmax_row0 < 1) {
				int a = pv_cpu_argmax_finite(st, lr, V);
				bad[i] |= a < 0;
				p->argmax[0] = a;
			}
		}
	}
}

int pv_cpu_forward_many(struct pv_session** ss, const struct pv_step* sp, int count, int* bad)
{
	if (count < 2) return 1;
	int host = 0;
	for (int i = 1; i < count; i++)
		if (ss[i]->n_ctx > ss[host]->n_ctx) host = i;
	struct pv_session* h = ss[host];
	const struct pv_model* m = h->m;
	/* what this path covers; anything else is stepped alone by the engine */
	if (h->max_batch < 2) return 1;
	int pos[count];
	for (int i = 0; i < count; i++) {
		const struct pv_step* p = &sp[i];
		if (ss[i]->m != m || ss[i]->pool != h->pool || pv_cpu(ss[i])->kv_dtype != pv_cpu(h)->kv_dtype || p->n != 1 ||
		    !p->exact || p->snap_row0 >= 0)
			return 1;
		for (int j = 0; j < i; j++)
			if (ss[j] == ss[i]) return 1; /* one row per session: its cache row, its recurrent state */
		pos[i] = p->pos0;
	}
	for (int g0 = 0; g0 < count; g0 += h->max_batch) {
		const int n = count - g0 < h->max_batch ? count - g0 : h->max_batch;
		group_step(h, ss + g0, sp + g0, pos + g0, n, bad + g0);
	}
	return 0;
}
