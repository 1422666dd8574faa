/*
 * forward.c: the CPU reference forward pass for one step of up to B rows.
 *
 * Every layer is pre-norm residual (qwen-models.md §2.5):
 *   h = x + Mixer(Norm_in(x))      Mixer: attention (§3.1, §4.1, §6.3) or Gated DeltaNet (§6.4)
 *   y = h + FFN(Norm_post(h))      FFN: SwiGLU (§2.4) or MoE (§5.1, §6.5)
 *
 * Batch invariance: each row's arithmetic is independent of the other rows in the step —
 * matmuls compute one dot product per output (ops.h), attention for row t reads keys 0..pos_t
 * in order, MoE sums a row's experts in its own top-k order. Only the chunked DeltaNet form
 * (used for long calls) mixes rows, and the session decides when it is used.
 */
#include "cpu/state.h"
#include "cpu/kern.h"
#include "base/util.h"

#include <float.h>
#include <string.h>

/* y = x * rsqrt(mean(x^2) + eps) * w; w already holds (1 + w) for zero-centred norms. */
void pv_rmsnorm(float* y, const float* x, const float* w, int n, float eps)
{
	float ss = 0.0f;
	for (int i = 0; i < n; i++) ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	for (int i = 0; i < n; i++) y[i] = (x[i] * r) * w[i];
}

void pv_rmsnorm_rows(float* y, const float* x, const float* w, int rows, int n, float eps)
{
	for (int t = 0; t < rows; t++) pv_rmsnorm(y + (size_t)t * n, x + (size_t)t * n, w, n, eps);
}

void pv_add_rows(float* x, const float* d, size_t count)
{
	for (size_t i = 0; i < count; i++) x[i] += d[i];
}

/* NeoX ("rotate half") RoPE over the first R dims of one head vector; dims >= R untouched. */
static void rope_neox(float* v, const float* cs, const float* sn, int R)
{
	int half = R / 2;
	for (int i = 0; i < half; i++) {
		float a = v[i], b = v[i + half];
		v[i] = a * cs[i] - b * sn[i];
		v[i + half] = b * cs[i] + a * sn[i];
	}
}

/* ---------------------------------------------------------------- attention --- */

struct attn_task {
	struct pv_session* s;
	const unsigned char *kc, *vc; /* [n_ctx] rows of st->kv_row bytes */
	int n, pos0;
};

/* One (row, head) pair: softmax(q k^T / sqrt(hd)) v over keys 0..pos, causal. A non-f32 cache's
 * key and value slices are converted to f32 (exactly, kvcache.c) one position at a time into
 * the thread's [2, hd] buffer; the arithmetic and its order are the f32 cache's. */
void pv_cpu_attn_row_head(struct pv_session* s, const unsigned char* kc, const unsigned char* vc, int t, int pos, int h,
                          int thread)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	int hd = c->head_dim, nh = c->n_heads, kh = h / (nh / c->n_kv_heads);
	const float* q = st->q + (size_t)t * pv_cfg_q_dim(c) + (size_t)h * hd;
	const unsigned char* K = kc + (size_t)kh * st->kv_head;
	const unsigned char* V = vc + (size_t)kh * st->kv_head;
	const size_t rb = st->kv_row;
	const int f32 = st->kv_dtype == PV_F32;
	float* kbuf = st->ts[thread].kv;
	float* vbuf = kbuf + hd;
	float* sc = st->ts[thread].scores;
	float scale = 1.0f / sqrtf((float)hd);

	const int avx2 = st->mm.k->isa >= PV_ISA_AVX2;
	float mx = -FLT_MAX;
	for (int j = 0; j <= pos; j++) {
		const float* kr = kbuf;
		if (f32) kr = (const float*)(const void*)(K + (size_t)j * rb);
		else pv_kv_load(st->kv_dtype, K + (size_t)j * rb, kbuf, hd);
		sc[j] = pv_dot_f32_set(avx2, q, kr, hd) * scale;
		if (sc[j] > mx) mx = sc[j];
	}
	float sum = 0.0f;
	for (int j = 0; j <= pos; j++) {
		sc[j] = expf(sc[j] - mx);
		sum += sc[j];
	}
	float inv = 1.0f / sum;
	float* o = st->o + (size_t)t * pv_cfg_q_dim(c) + (size_t)h * hd;
	memset(o, 0, sizeof(float) * hd);
	for (int j = 0; j <= pos; j++) {
		const float* vr = vbuf;
		if (f32) vr = (const float*)(const void*)(V + (size_t)j * rb);
		else pv_kv_load(st->kv_dtype, V + (size_t)j * rb, vbuf, hd);
		pv_axpy_f32_set(avx2, o, sc[j] * inv, vr, hd);
	}
}

static void attn_row_head(void* ctx, int task, int thread)
{
	struct attn_task* a = ctx;
	const int nh = a->s->m->cfg.n_heads, t = task / nh;
	pv_cpu_attn_row_head(a->s, a->kc, a->vc, t, a->pos0 + t, task % nh, thread);
}

/* The AVX-512 kernel set's attention (attn_avx512.c): tasks of up to ATT_ROWS query rows x one
 * key/value head; per-thread scratch from the pool. */
#define ATT_ROWS 16

struct attn512_task {
	struct pv_session* s;
	const unsigned char *kc, *vc;
	int n, pos0, rows;
};

static void attn512_task(void* ctx, int task, int thread)
{
	struct attn512_task* a = ctx;
	const struct pv_config* c = &a->s->m->cfg;
	struct pv_cpu_state* st = pv_cpu(a->s);
	const int nkv = c->n_kv_heads, G = c->n_heads / nkv, hd = c->head_dim, qd = pv_cfg_q_dim(c);
	const int t0 = (task / nkv) * a->rows, nt = a->n - t0 < a->rows ? a->n - t0 : a->rows;
	pv_attn_avx512(st->q, qd, st->o, qd, a->kc, a->vc, st->kv_dtype, st->kv_row, hd, G, task % nkv, t0, nt, a->pos0,
	               1.0f / sqrtf((float)hd), pv_pool_scratch(a->s->pool, thread));
}

/* Whether the session runs the AVX-512 attention (its kernel set, a head size it handles, and
 * the pool scratch holds a task's state). */
int pv_cpu_attn512(const struct pv_session* s, int* rows)
{
	const struct pv_config* c = &s->m->cfg;
	if (pv_cpu(s)->mm.k->isa < PV_ISA_AVX512 || !pv_attn_avx512_ok(c->head_dim) || !pv_pool_scratch(s->pool, 0)) return 0;
	const int G = c->n_heads / c->n_kv_heads;
	for (int r = ATT_ROWS; r >= 1; r /= 2)
		if (pv_attn_avx512_scratch(r, G, c->head_dim, pv_cpu(s)->kv_dtype) * sizeof(float) <= PV_POOL_SCRATCH)
			return *rows = r, 1;
	return 0;
}

/* One row's q [nh*hd], k and v [nkv*hd] after the projections, at position pos: the biases, then
 * each head's RMSNorm (Qwen3's q/k norm) and RoPE. Shared by the one-session and the batched
 * attention, so a row gets the same bits either way. */
void pv_cpu_qkv_post(const struct pv_session* s, const struct pv_layer* L, float* q, float* k, float* v, int pos)
{
	const struct pv_config* c = &s->m->cfg;
	const int hd = c->head_dim, R = c->rope_dim, qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	if (L->bq) {
		pv_add_rows(q, L->bq, qd);
		pv_add_rows(k, L->bk, kvd);
		pv_add_rows(v, L->bv, kvd);
	}
	const float* cs = s->rope_cos + (size_t)pos * (R / 2);
	const float* sn = s->rope_sin + (size_t)pos * (R / 2);
	for (int h = 0; h < c->n_heads; h++) {
		float* qh = q + (size_t)h * hd;
		if (L->q_norm) pv_rmsnorm(qh, qh, L->q_norm, hd, c->rms_eps);
		rope_neox(qh, cs, sn, R);
	}
	for (int h = 0; h < c->n_kv_heads; h++) {
		float* kh = k + (size_t)h * hd;
		if (L->k_norm) pv_rmsnorm(kh, kh, L->k_norm, hd, c->rms_eps);
		rope_neox(kh, cs, sn, R);
	}
}

/* The output gate (Qwen3.5 / Qwen3-Next gated attention): q_proj's row [nh, 2, hd] (per head
 * [q_h | gate_h]) split into q [nh*hd] and the gate ag [nh*hd]. */
void pv_cpu_gate_split(const struct pv_config* c, const float* qg, float* q, float* ag)
{
	const int hd = c->head_dim;
	for (int h = 0; h < c->n_heads; h++) {
		memcpy(q + (size_t)h * hd, qg + (size_t)h * 2 * hd, sizeof(float) * hd);
		memcpy(ag + (size_t)h * hd, qg + (size_t)h * 2 * hd + hd, sizeof(float) * hd);
	}
}

/* o [count] *= sigmoid(ag): the gate on the attention output, before o_proj */
void pv_cpu_gate_apply(float* o, const float* ag, size_t count)
{
	for (size_t i = 0; i < count; i++) o[i] *= pv_sigmoid(ag[i]);
}

static void attention_layer(struct pv_session* s, const struct pv_layer* L, unsigned char* kc, unsigned char* vc,
                            const float* xn, float* out, int n, int pos0)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	int H = c->hidden, hd = c->head_dim, nh = c->n_heads, nkv = c->n_kv_heads;
	int qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);

	/* Projections. Gated q_proj yields per head [q_h (hd) | gate_h (hd)]: [n, nh*2*hd]. */
	float* qg = c->attn_gate ? st->mix : st->q;
	/* K and V rows [n, kvd] in f32: straight into an f32 cache, else into mix2 ([B, 2*kvd] fits:
	 * its width is at least 2*nh*hd), rounded into the cache once they are final */
	const int f32 = st->kv_dtype == PV_F32;
	float* kdst = f32 ? (float*)(void*)(kc + (size_t)pos0 * st->kv_row) : st->mix2;
	float* vdst = f32 ? (float*)(void*)(vc + (size_t)pos0 * st->kv_row) : st->mix2 + (size_t)n * kvd;
	const struct pv_mm_out qkv[3] = { { qg, (int)L->wq.rows, &L->wq, 0, L->wq.rows },
		                          { kdst, kvd, &L->wk, 0, L->wk.rows },
		                          { vdst, kvd, &L->wv, 0, L->wv.rows } };
	pv_mm_multi(&st->mm, xn, H, n, qkv, 3);
	pv_prof_mark(st, PV_PROF_MM_QKV);

	for (int t = 0; t < n; t++) {
		float* q = st->q + (size_t)t * qd;
		float* k = kdst + (size_t)t * kvd;
		float* v = vdst + (size_t)t * kvd;
		if (c->attn_gate) pv_cpu_gate_split(c, qg + (size_t)t * 2 * qd, q, st->ag + (size_t)t * qd);
		pv_cpu_qkv_post(s, L, q, k, v, pos0 + t);
		if (!f32) {
			/* attention below reads these rows back from the cache like any earlier row */
			pv_kv_store(st->kv_dtype, k, kc + (size_t)(pos0 + t) * st->kv_row, nkv, hd);
			pv_kv_store(st->kv_dtype, v, vc + (size_t)(pos0 + t) * st->kv_row, nkv, hd);
		}
	}

	pv_prof_mark(st, PV_PROF_ROPE);
	int rows;
	if (pv_cpu_attn512(s, &rows)) {
		struct attn512_task at = { s, kc, vc, n, pos0, rows };
		pv_pool_run(s->pool, attn512_task, &at, (n + rows - 1) / rows * nkv);
	} else {
		struct attn_task at = { s, kc, vc, n, pos0 };
		pv_pool_run(s->pool, attn_row_head, &at, n * nh);
	}

	if (c->attn_gate) pv_cpu_gate_apply(st->o, st->ag, (size_t)n * qd);
	pv_prof_mark(st, PV_PROF_ATTN);
	pv_mm(&st->mm, out, H, st->o, qd, n, &L->wo);
	pv_prof_mark(st, PV_PROF_MM_O);
}

/* ---------------------------------------------------------------------- FFN --- */

/* SwiGLU: out[n, H] = down( silu(gate x) * up x ), width I. */
static void swiglu(struct pv_session* s, const struct pv_expert* e, const float* x, float* out, int n)
{
	struct pv_cpu_state* st = pv_cpu(s);
	int H = s->m->cfg.hidden, I = (int)e->gate.rows;
	const struct pv_mm_out gu[2] = { { st->ff_g, I, &e->gate, 0, e->gate.rows }, { st->ff_u, I, &e->up, 0, e->up.rows } };
	pv_mm_multi(&st->mm, x, H, n, gu, 2);
	pv_prof_mark(st, PV_PROF_MM_GATEUP);
	if (st->mm.k->isa >= PV_ISA_AVX512) pv_swiglu_avx512(st->ff_g, st->ff_u, (size_t)n * I);
	else
		for (size_t i = 0; i < (size_t)n * I; i++) st->ff_g[i] = pv_silu(st->ff_g[i]) * st->ff_u[i];
	pv_prof_mark(st, PV_PROF_ACT);
	pv_mm(&st->mm, out, H, st->ff_g, I, n, &e->down);
	pv_prof_mark(st, PV_PROF_MM_DOWN);
}

/* Router: softmax over all E logits (fp32, in place), top-k (ties: lower index), optional
 * renormalisation (qwen-models.md §5.1: softmax first, then top-k, then renormalise). */
static void route(const struct pv_config* c, float* p, int* idx, float* w)
{
	int E = c->n_experts, k = c->n_experts_used;
	float mx = -FLT_MAX;
	for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
	float sum = 0.0f;
	for (int e = 0; e < E; e++) sum += p[e] = expf(p[e] - mx);
	for (int e = 0; e < E; e++) p[e] /= sum;
	for (int j = 0; j < k; j++) {
		int best = -1;
		for (int e = 0; e < E; e++) {
			int taken = 0;
			for (int i = 0; i < j; i++) taken |= idx[i] == e;
			if (!taken && (best < 0 || p[e] > p[best])) best = e;
		}
		idx[j] = best;
		w[j] = p[best];
	}
	if (c->norm_topk) {
		float ws = 0.0f;
		for (int j = 0; j < k; j++) ws += w[j];
		for (int j = 0; j < k; j++) w[j] /= ws;
	}
}

static void moe_layer(struct pv_session* s, const struct pv_layer* L, const float* xn, float* out, int n)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	int H = c->hidden, E = c->n_experts, k = c->n_experts_used;

	pv_mm(&st->mm, st->router, E, xn, H, n, &L->router);
	for (int t = 0; t < n; t++)
		route(c, st->router + (size_t)t * E, st->top_idx + (size_t)t * k, st->top_w + (size_t)t * k);
	pv_prof_mark(st, PV_PROF_ROUTER);

	/* Each selected expert runs once over all the rows routed to it (grouped by expert: expert e
	 * holds places exp_off[e] .. exp_off[e+1]), all experts' gate/up products in one batch, then
	 * all their down products; row t then sums its experts in its own slot order. */
	const int Ie = c->moe_inter;
	int* off = st->exp_off;
	for (int e = 0; e <= E; e++) off[e] = 0;
	for (int i = 0; i < n * k; i++) off[st->top_idx[i] + 1]++;
	for (int e = 0; e < E; e++) off[e + 1] += off[e];
	for (int t = 0; t < n; t++)
		for (int j = 0; j < k; j++) {
			const int e = st->top_idx[t * k + j], pos = off[e]++;
			st->exp_rows[pos] = t;
			st->exp_slot[pos] = t * k + j;
			st->slot_pos[t * k + j] = pos;
		}
	for (int e = E; e > 0; e--) off[e] = off[e - 1]; /* back to each expert's first place */
	off[0] = 0;
	for (int i = 0; i < n * k; i++) memcpy(st->gx + (size_t)i * H, xn + (size_t)st->exp_rows[i] * H, sizeof(float) * H);
	pv_prof_mark(st, PV_PROF_MOE_OTHER);
	/* cpu.moe_group=0 (the comparison arm): one batch per row over that row's own experts, each
	 * product one row, so an expert chosen by r rows is read r times; the bits are the same */
	const int group = st->mm.k->moe_group;
	int np = 0;
	for (int t = 0; t < (group ? 1 : n); t++) {
		np = 0;
		for (int e = 0; e < (group ? E : k); e++) {
			const int p0 = group ? off[e] : st->slot_pos[t * k + e], m = group ? off[e + 1] - off[e] : 1;
			if (!m) continue;
			const struct pv_expert* x = &L->experts[group ? e : st->top_idx[t * k + e]];
			float* gx = st->gx + (size_t)p0 * H;
			st->prods[np++] = (struct pv_mm_prod){ gx, H, m, st->ff_g + (size_t)p0 * Ie, Ie, &x->gate, 0, x->gate.rows };
			st->prods[np++] = (struct pv_mm_prod){ gx, H, m, st->ff_u + (size_t)p0 * Ie, Ie, &x->up, 0, x->up.rows };
		}
		pv_mm_batch(&st->mm, st->prods, np);
	}
	pv_prof_mark(st, PV_PROF_MM_EXP);
	if (st->mm.k->isa >= PV_ISA_AVX512) pv_swiglu_avx512(st->ff_g, st->ff_u, (size_t)n * k * Ie);
	else
		for (size_t i = 0; i < (size_t)n * k * Ie; i++) st->ff_g[i] = pv_silu(st->ff_g[i]) * st->ff_u[i];
	pv_prof_mark(st, PV_PROF_ACT);
	for (int t = 0; t < (group ? 1 : n); t++) {
		np = 0;
		for (int e = 0; e < (group ? E : k); e++) {
			const int p0 = group ? off[e] : st->slot_pos[t * k + e], m = group ? off[e + 1] - off[e] : 1;
			if (!m) continue;
			const struct pv_tensor* dn = &L->experts[group ? e : st->top_idx[t * k + e]].down;
			st->prods[np++] =
			        (struct pv_mm_prod){ st->ff_g + (size_t)p0 * Ie, Ie, m, st->eo + (size_t)p0 * H, H, dn, 0, dn->rows };
		}
		pv_mm_batch(&st->mm, st->prods, np);
	}
	pv_prof_mark(st, PV_PROF_MM_EXP);
	const int avx2 = st->mm.k->isa >= PV_ISA_AVX2;
	for (int t = 0; t < n; t++) {
		float* o = out + (size_t)t * H;
		memset(o, 0, sizeof(float) * H);
		for (int j = 0; j < k; j++)
			pv_axpy_f32_set(avx2, o, st->top_w[t * k + j], st->eo + (size_t)st->slot_pos[t * k + j] * H, H);
	}
	pv_prof_mark(st, PV_PROF_MOE_OTHER);
	if (L->shexp.gate.data) {
		/* shared expert, scaled per row by sigmoid(x . w_sg) */
		swiglu(s, &L->shexp, xn, st->mo, n);
		for (int t = 0; t < n; t++) {
			float gsc = pv_sigmoid(pv_dot_f32_set(avx2, xn + (size_t)t * H, L->shexp_gate, H));
			pv_axpy_f32_set(avx2, out + (size_t)t * H, gsc, st->mo + (size_t)t * H, H);
		}
		pv_prof_mark(st, PV_PROF_MOE_OTHER);
	}
}

/* The FFN of rows xn [n, H] -> out [n, H]: the MoE block (moe) or the dense SwiGLU. */
void pv_cpu_ffn(struct pv_session* s, const struct pv_layer* L, int moe, const float* xn, float* out, int n)
{
	if (moe) {
		moe_layer(s, L, xn, out, n);
	} else {
		struct pv_expert dense = { L->ffn_gate, L->ffn_up, L->ffn_down };
		swiglu(s, &dense, xn, out, n);
	}
}

/* -------------------------------------------------------------- the step --- */

void pv_cpu_layer(struct pv_session* s, const struct pv_layer* L, int layer, int kind, int moe, unsigned char* kc,
                  unsigned char* vc,
                  int n, int pos0, int chunked, int snap_row0)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	const int H = c->hidden;
	float* out = st->mixer; /* [B, H]: mixer, then FFN output */

	pv_rmsnorm_rows(st->xn, st->x, L->attn_norm, n, H, c->rms_eps);
	pv_prof_mark(st, PV_PROF_NORM);
	if (kind == PV_LAYER_ATTN)
		attention_layer(s, L, kc, vc, st->xn, out, n, pos0);
	else
		pv_deltanet_layer(s, layer, st->xn, out, n, chunked, snap_row0);
	pv_add_rows(st->x, out, (size_t)n * H);

	pv_rmsnorm_rows(st->xn, st->x, L->ffn_norm, n, H, c->rms_eps);
	pv_prof_mark(st, PV_PROF_NORM);
	pv_cpu_ffn(s, L, moe, st->xn, out, n);
	pv_add_rows(st->x, out, (size_t)n * H);
	pv_prof_mark(st, PV_PROF_NORM);
}

/* Whether a row holds no NaN and no infinity: corrupt weights must fail the call, not decode
 * as token 0. */
int pv_cpu_row_finite(const float* x, int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++) bad |= !isfinite(x[i]);
	return !bad;
}

/* The argmax of a logits row (pv_argmax's answer; vectorised on the avx512 set), or -1 when the
 * row is not finite. */
int pv_cpu_argmax_finite(const struct pv_cpu_state* st, const float* x, int n)
{
	if (!pv_cpu_row_finite(x, n)) return -1;
	return st->mm.k->isa >= PV_ISA_AVX512 ? pv_argmax_avx512(x, n) : pv_argmax(x, n);
}

/* The LM head over normed rows xn [rows, H] for rows [r0, n) of the step: logits into the
 * caller's rows where asked, argmax ids from them (or from PV_LM_ROWS-row scratch for rows whose
 * logits nobody keeps), hidden rows copied out. Returns 0, or -1 when a row is not finite. */
static int outputs(struct pv_session* s, const struct pv_step* sp, int r0)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_model* m = s->m;
	const int H = m->cfg.hidden, V = m->cfg.vocab, n = sp->n;
	const float* xn = st->xn; /* row t of the step is xn row t - r0 */
	if (sp->hidden)
		memcpy(sp->hidden, xn + (size_t)(sp->hidden_row0 - r0) * H, sizeof(float) * H * (size_t)(n - sp->hidden_row0));
	const int lr0 = sp->logits ? sp->logits_row0 : n;
	if (lr0 < n) {
		pv_mm(&st->mm, sp->logits, V, xn + (size_t)(lr0 - r0) * H, H, n - lr0, &m->w.lm_head);
		if (!sp->argmax || sp->argmax_row0 > lr0)
			for (int t = lr0; t < n; t++)
				if (!pv_cpu_row_finite(sp->logits + (size_t)(t - lr0) * V, V)) return -1;
	}
	if (!sp->argmax) return 0;
	for (int t = sp->argmax_row0; t < n;) {
		if (t >= lr0) {
			int a = pv_cpu_argmax_finite(st, sp->logits + (size_t)(t - lr0) * V, V);
			if (a < 0) return -1;
			sp->argmax[t - sp->argmax_row0] = a;
			t++;
			continue;
		}
		const int rows = lr0 - t < PV_LM_ROWS ? lr0 - t : PV_LM_ROWS;
		pv_mm(&st->mm, st->lm, V, xn + (size_t)(t - r0) * H, H, rows, &m->w.lm_head);
		for (int i = 0; i < rows; i++) {
			int a = pv_cpu_argmax_finite(st, st->lm + (size_t)i * V, V);
			if (a < 0) return -1;
			sp->argmax[t + i - sp->argmax_row0] = a;
		}
		t += rows;
	}
	return 0;
}

int pv_cpu_forward(struct pv_session* s, const struct pv_step* sp)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_model* m = s->m;
	const struct pv_config* c = &m->cfg;
	const int H = c->hidden, n = sp->n;
	/* the chunked DeltaNet form mixes rows: only off the exact path, and only for long calls */
	const int chunked = !sp->exact;

	if (st->prof) {
		st->prof->last = pv_now_s();
		st->prof->rows += n;
	}
	for (int t = 0; t < n; t++) pv_tensor_row_f32(&m->w.embed, sp->tokens[t], st->x + (size_t)t * H);
	pv_prof_mark(st, PV_PROF_EMBED);
	for (int l = 0; l < c->n_layers; l++)
		pv_cpu_layer(s, &m->w.layers[l], l, c->layer_kind[l], c->layer_moe[l], st->k_cache[l], st->v_cache[l], n, sp->pos0,
		             chunked, sp->snap_row0);

	/* the first row any output wants; the final norm runs from there */
	int r0 = n;
	if (sp->logits && sp->logits_row0 < r0) r0 = sp->logits_row0;
	if (sp->argmax && sp->argmax_row0 < r0) r0 = sp->argmax_row0;
	if (sp->hidden && sp->hidden_row0 < r0) r0 = sp->hidden_row0;
	if (r0 >= n) return 0;
	pv_rmsnorm_rows(st->xn, st->x + (size_t)r0 * H, m->w.final_norm, n - r0, H, c->rms_eps);
	pv_prof_mark(st, PV_PROF_NORM);
	if (sp->hidden) /* hidden-only rows: the final norm's output is what is checked */
		for (int t = sp->hidden_row0; t < n; t++)
			if (!pv_cpu_row_finite(st->xn + (size_t)(t - r0) * H, H)) return -1;
	const int rc = outputs(s, sp, r0);
	pv_prof_mark(st, PV_PROF_LM_HEAD);
	return rc;
}
