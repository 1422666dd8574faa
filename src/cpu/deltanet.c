/*
 * deltanet.c: one Gated DeltaNet ("linear_attention") layer (qwen-models.md §6.4, §6.6, §6.7).
 *
 *   mixed [n, conv_dim] = x W_qkv^T   (Qwen3-Next: from the key-group-major in_proj_qkvz)
 *   u = silu(causal depthwise conv_Kc(mixed))      the window starts from the saved conv state
 *   q, k [Hk, dk] = l2norm(u_q), l2norm(u_k);  q *= 1/sqrt(dk);  v [Hv, dv] = u_v
 *   beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)          per value head
 *   per value head h (key head h/r, or h%Hk for tiled GGUF order), state S [dk, dv]:
 *       S = exp(g) S;  d = beta (v - S^T k);  S += k d^T;  o = S^T q
 *   y = w_n * rmsnorm(o) * silu(z)  per head;   out = y W_out^T
 *
 * Two forms of the delta rule: the recurrent one (token by token; used for decode and any
 * short call, and bitwise the same whatever the number of rows) and the chunked one (chunks of
 * C = 64 rows through a triangular solve; used for long prompts). They agree within float
 * rounding; tests check both against each other and against transformers.
 *
 * pv_deltanet_layer_many runs the layer for one row of each of several sessions (continuous
 * batching, forward_many.c): the projections over all rows at once, then each row's conv and
 * recurrent step on its own session's conv window and S, the one-row decode arithmetic.
 */
#include "cpu/state.h"
#include "cpu/kern.h"
#include "base/util.h"

#include <string.h>

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

size_t pv_deltanet_chunk_floats(const struct pv_config* c)
{
	size_t C = PV_DELTA_CHUNK, dk = (size_t)c->lin_k_dim, dv = (size_t)c->lin_v_dim;
	return C + C * C + C * (dv + dk) + C * dv + dv;
}

struct delta_task {
	struct pv_session* s;
	int layer, n;
	int snap_row0; /* >= 0: S after row t also goes to snapshot slot snap_row0 + t */
	size_t snap_off; /* this layer's S within a snapshot slot */
};

static inline int key_head(const struct pv_config* c, int h)
{
	return c->v_head_tiled ? h % c->lin_k_heads : h / (c->lin_v_heads / c->lin_k_heads);
}

/* One row of the recurrent form for value head h: S [dk, dv] (the head's state, updated in
 * place) from row u [conv_dim] (l2-normed q, k; v), decay exp(g) and beta; o [dv] = S^T q.
 * The decode arithmetic, shared by the one-session rows and the batched sessions' rows. */
static void delta_step(const struct pv_cpu_state* st, const struct pv_config* c, float* S, const float* u, float decay,
                       float beta, float* o, int h, int thread)
{
	const int dk = c->lin_k_dim, dv = c->lin_v_dim, cd = pv_cfg_conv_dim(c), kd = pv_cfg_key_dim(c), kh = key_head(c, h);
	const float* q = u + (size_t)kh * dk;
	const float* k = u + kd + (size_t)kh * dk;
	const float* v = u + 2 * kd + (size_t)h * dv;
	const int isa = st->mm.k->isa, avx2 = isa >= PV_ISA_AVX2;
	if (isa >= PV_ISA_AVX512 && pv_delta_avx512_ok(dv, cd, c->conv_kernel)) {
		/* the same per-element operations as below with the AVX2 axpy, passes fused */
		pv_delta_step_avx512(S, dk, dv, q, k, v, decay, beta, o);
		return;
	}
	float* m = st->ts[thread].chunk; /* [dv] */
	float* d = m + dv;              /* [dv] */
	memset(m, 0, sizeof(float) * dv);
	for (int i = 0; i < dk; i++) {
		float* Si = S + (size_t)i * dv;
		for (int j = 0; j < dv; j++) Si[j] *= decay;
		pv_axpy_f32_set(avx2, m, k[i], Si, dv);
	}
	for (int j = 0; j < dv; j++) d[j] = beta * (v[j] - m[j]);
	memset(o, 0, sizeof(float) * dv);
	for (int i = 0; i < dk; i++) {
		float* Si = S + (size_t)i * dv;
		pv_axpy_f32_set(avx2, Si, k[i], d, dv);
		pv_axpy_f32_set(avx2, o, q[i], Si, dv);
	}
}

/* Recurrent form over rows 0..n-1 for one value head. */
static void delta_recurrent(void* ctx, int h, int thread)
{
	struct delta_task* dt = ctx;
	struct pv_cpu_state* st = pv_cpu(dt->s);
	const struct pv_config* c = &dt->s->m->cfg;
	const int dk = c->lin_k_dim, dv = c->lin_v_dim, cd = pv_cfg_conv_dim(c), vd = pv_cfg_value_dim(c);
	const int Hv = c->lin_v_heads;
	float* S = st->ssm[dt->layer] + (size_t)h * dk * dv;
	for (int t = 0; t < dt->n; t++) {
		delta_step(st, c, S, st->mix2 + (size_t)t * cd, expf(st->lg[(size_t)t * Hv + h]), st->lb[(size_t)t * Hv + h],
		           st->o + (size_t)t * vd + (size_t)h * dv, h, thread);
		if (dt->snap_row0 >= 0)
			memcpy(st->snap_buf[dt->snap_row0 + t] + dt->snap_off + (size_t)h * dk * dv, S, sizeof(float) * dk * dv);
	}
}

/* The kernel set's axpy and dot for the chunked form (not batch-invariant anyway: each set
 * may keep its own order). */
static inline void axpy(int isa, float* y, float a, const float* x, int n)
{
	if (isa >= PV_ISA_AVX512) pv_axpy_f32_avx512(y, a, x, n);
	else pv_axpy_f32_set(isa >= PV_ISA_AVX2, y, a, x, n);
}
static inline float dot(int isa, const float* a, const float* b, int n)
{
	return isa >= PV_ISA_AVX512 ? pv_dot_f32_avx512(a, b, n) : pv_dot_f32_set(isa >= PV_ISA_AVX2, a, b, n);
}

/*
 * Chunked form for one value head (§6.7). For a chunk of rows t < C with incoming state S0:
 *   gam_t = sum_{s<=t} g_s
 *   A[t][s] = beta_t (k_t . k_s) exp(gam_t - gam_s)          s < t (masked before exp)
 *   (I + A) [U | W] = [diag(beta) V | diag(beta exp(gam)) K]  forward substitution
 *   V' = U - W S0
 *   o_t = exp(gam_t) S0^T q_t + sum_{s<=t} exp(gam_t - gam_s) (q_t . k_s) V'_s
 *   S1  = exp(gam_last) S0 + sum_s exp(gam_last - gam_s) k_s V'_s^T
 */
static void delta_chunked(void* ctx, int h, int thread)
{
	struct delta_task* dt = ctx;
	struct pv_session* s = dt->s;
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	int dk = c->lin_k_dim, dv = c->lin_v_dim, cd = pv_cfg_conv_dim(c), kd = pv_cfg_key_dim(c);
	int vd = pv_cfg_value_dim(c), Hv = c->lin_v_heads, kh = key_head(c, h);
	const int C = PV_DELTA_CHUNK;
	float* S = st->ssm[dt->layer] + (size_t)h * dk * dv;
	float* gam = st->ts[thread].chunk;    /* [C]            */
	float* A = gam + C;                  /* [C, C]         */
	float* X = A + C * C;                /* [C, dv + dk]   */
	float* Vn = X + (size_t)C * (dv + dk); /* [C, dv]      */
	int xw = dv + dk;
	const int isa = st->mm.k->isa;

	for (int c0 = 0; c0 < dt->n; c0 += C) {
		int cl = dt->n - c0 < C ? dt->n - c0 : C;
#define ROW(t) (st->mix2 + (size_t)(c0 + (t)) * cd)
#define QV(t) (ROW(t) + (size_t)kh * dk)
#define KV(t) (ROW(t) + kd + (size_t)kh * dk)
#define VV(t) (ROW(t) + 2 * kd + (size_t)h * dv)
#define BETA(t) (st->lb[(size_t)(c0 + (t)) * Hv + h])
		float acc = 0.0f;
		for (int t = 0; t < cl; t++) gam[t] = acc += st->lg[(size_t)(c0 + t) * Hv + h];

		for (int t = 0; t < cl; t++)
			for (int u = 0; u < t; u++)
				A[t * C + u] = BETA(t) * dot(isa, KV(t), KV(u), dk) * expf(gam[t] - gam[u]);

		for (int t = 0; t < cl; t++) {
			float* x = X + (size_t)t * xw;
			float b = BETA(t), be = b * expf(gam[t]);
			for (int j = 0; j < dv; j++) x[j] = b * VV(t)[j];
			for (int i = 0; i < dk; i++) x[dv + i] = be * KV(t)[i];
			for (int u = 0; u < t; u++) axpy(isa, x, -A[t * C + u], X + (size_t)u * xw, xw);
		}

		for (int t = 0; t < cl; t++) {
			float* vn = Vn + (size_t)t * dv;
			const float* w = X + (size_t)t * xw + dv;
			memcpy(vn, X + (size_t)t * xw, sizeof(float) * dv);
			for (int i = 0; i < dk; i++) axpy(isa, vn, -w[i], S + (size_t)i * dv, dv);
		}

		for (int t = 0; t < cl; t++) {
			float* o = st->o + (size_t)(c0 + t) * vd + (size_t)h * dv;
			const float* q = QV(t);
			memset(o, 0, sizeof(float) * dv);
			for (int i = 0; i < dk; i++) axpy(isa, o, q[i], S + (size_t)i * dv, dv);
			float e = expf(gam[t]);
			for (int j = 0; j < dv; j++) o[j] *= e;
			for (int u = 0; u <= t; u++)
				axpy(isa, o, expf(gam[t] - gam[u]) * dot(isa, q, KV(u), dk), Vn + (size_t)u * dv, dv);
		}

		float glast = gam[cl - 1], elast = expf(glast);
		for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= elast;
		for (int u = 0; u < cl; u++) {
			float cu = expf(glast - gam[u]);
			const float* k = KV(u);
			for (int i = 0; i < dk; i++) axpy(isa, S + (size_t)i * dv, cu * k[i], Vn + (size_t)u * dv, dv);
		}
#undef ROW
#undef QV
#undef KV
#undef VV
#undef BETA
	}
}

/* Causal depthwise conv over [state (Kc-1 rows) ; mixed (n rows)], then SiLU; updates state.
 * snap (NULL: none): snap[t] + off receives the window after row t (rows t-P+1 .. t of the input). */
static void conv_silu(const struct pv_config* c, float* state, const float* conv_w, const float* mixed,
                      float* out, int n, float* const* snap, size_t off, int avx512)
{
	int cd = pv_cfg_conv_dim(c), K = c->conv_kernel, P = K - 1;
	for (int t = 0; snap && t < n; t++)
		for (int i = 0; i < P; i++) {
			int src = t - P + 1 + i;
			memcpy(snap[t] + off + (size_t)i * cd, src < 0 ? state + (size_t)(P + src) * cd : mixed + (size_t)src * cd,
			       sizeof(float) * cd);
		}
	if (avx512) pv_conv_silu_avx512(state, conv_w, mixed, out, n, cd, K);
	for (int t = 0; !avx512 && t < n; t++) {
		for (int ch = 0; ch < cd; ch++) {
			const float* w = conv_w + (size_t)ch * K;
			float acc = 0.0f;
			for (int tau = 0; tau < K; tau++) {
				int src = t - P + tau; /* row in mixed; negative rows come from the state */
				float xv = src < 0 ? state[(size_t)(P + src) * cd + ch] : mixed[(size_t)src * cd + ch];
				acc += w[tau] * xv;
			}
			out[(size_t)t * cd + ch] = pv_silu(acc);
		}
	}
	/* new state: the last P rows of [state ; mixed] */
	if (n >= P) {
		memcpy(state, mixed + (size_t)(n - P) * cd, sizeof(float) * (size_t)P * cd);
	} else {
		memmove(state, state + (size_t)n * cd, sizeof(float) * (size_t)(P - n) * cd);
		memcpy(state + (size_t)(P - n) * cd, mixed, sizeof(float) * (size_t)n * cd);
	}
}

static void l2norm_scale(float* x, int n, float scale)
{
	float ss = 0.0f;
	for (int i = 0; i < n; i++) ss += x[i] * x[i];
	float r = scale / sqrtf(ss + 1e-6f); /* HF l2norm: x * rsqrt(sum x^2 + 1e-6) */
	for (int i = 0; i < n; i++) x[i] *= r;
}

/* The input projections of rows xn [n, H] into st's scratch: mix [n, conv_dim] (the conv's
 * input, q | k | v), z [n, vd] (the output gate), lb / lg [n, Hv] (b and a, before their
 * activations). One product per weight over all n rows (batch-invariant, ops.h). */
static void delta_in(struct pv_cpu_state* st, const struct pv_config* c, const struct pv_layer* L, const float* xn, int n)
{
	int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim;
	int kd = pv_cfg_key_dim(c), vd = pv_cfg_value_dim(c), cd = pv_cfg_conv_dim(c), r = Hv / Hk;

	if (L->in_qkvz.data) {
		/* Qwen3-Next: rows grouped by key head g: [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)],
		 * and in_proj_ba per group [b_g (r) | a_g (r)]. Unscramble into the Qwen3.5 layout. */
		int gw = 2 * dk + 2 * r * dv;
		const struct pv_mm_out o[2] = { { st->mix2, (int)L->in_qkvz.rows, &L->in_qkvz, 0, L->in_qkvz.rows },
			                        { st->ab, 2 * Hv, &L->in_ba, 0, L->in_ba.rows } };
		pv_mm_multi(&st->mm, xn, H, n, o, 2);
		for (int t = 0; t < n; t++) {
			const float* src = st->mix2 + (size_t)t * L->in_qkvz.rows;
			float* mx = st->mix + (size_t)t * cd;
			for (int g = 0; g < Hk; g++) {
				const float* gs = src + (size_t)g * gw;
				memcpy(mx + (size_t)g * dk, gs, sizeof(float) * dk);
				memcpy(mx + kd + (size_t)g * dk, gs + dk, sizeof(float) * dk);
				memcpy(mx + 2 * kd + (size_t)g * r * dv, gs + 2 * dk, sizeof(float) * r * dv);
				memcpy(st->z + (size_t)t * vd + (size_t)g * r * dv, gs + 2 * dk + r * dv, sizeof(float) * r * dv);
				for (int j = 0; j < r; j++) {
					st->lb[(size_t)t * Hv + g * r + j] = st->ab[(size_t)t * 2 * Hv + g * 2 * r + j];
					st->lg[(size_t)t * Hv + g * r + j] = st->ab[(size_t)t * 2 * Hv + g * 2 * r + r + j];
				}
			}
		}
	} else {
		struct pv_mm_out o[4] = { { st->mix, cd, &L->in_qkv, 0, L->in_qkv.rows }, { st->z, vd, &L->in_z, 0, L->in_z.rows } };
		if (L->in_ba.data) {
			o[2] = (struct pv_mm_out){ st->ab, 2 * Hv, &L->in_ba, 0, L->in_ba.rows };
		} else {
			o[2] = (struct pv_mm_out){ st->lb, Hv, &L->in_b, 0, L->in_b.rows };
			o[3] = (struct pv_mm_out){ st->lg, Hv, &L->in_a, 0, L->in_a.rows };
		}
		pv_mm_multi(&st->mm, xn, H, n, o, L->in_ba.data ? 3 : 4);
		if (L->in_ba.data) {
			/* Qwen3-Next GGUF: q/k/v/z already regrouped by the converter, ba still
			 * key-group-major [b_g (r) | a_g (r)] */
			for (int t = 0; t < n; t++)
				for (int g = 0; g < Hk; g++)
					for (int j = 0; j < r; j++) {
						st->lb[(size_t)t * Hv + g * r + j] = st->ab[(size_t)t * 2 * Hv + g * 2 * r + j];
						st->lg[(size_t)t * Hv + g * r + j] = st->ab[(size_t)t * 2 * Hv + g * 2 * r + r + j];
					}
		}
	}
	pv_prof_mark(st, PV_PROF_MM_DIN);
}

/* After the conv, per row of st's scratch (rows independent): q, k [Hk, dk] of mix2 l2-normed
 * (q also scaled by 1/sqrt(dk)), beta = sigmoid(b) into lb, g = A softplus(a + dt_bias) into lg. */
static void delta_gates(struct pv_cpu_state* st, const struct pv_config* c, const struct pv_layer* L, int n)
{
	const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_k_dim, kd = pv_cfg_key_dim(c), cd = pv_cfg_conv_dim(c);
	float qscale = 1.0f / sqrtf((float)dk);
	for (int t = 0; t < n; t++) {
		float* u = st->mix2 + (size_t)t * cd;
		for (int g = 0; g < Hk; g++) {
			l2norm_scale(u + (size_t)g * dk, dk, qscale);
			l2norm_scale(u + kd + (size_t)g * dk, dk, 1.0f);
		}
		for (int h = 0; h < Hv; h++) {
			float* b = &st->lb[(size_t)t * Hv + h];
			float* a = &st->lg[(size_t)t * Hv + h];
			*b = pv_sigmoid(*b);
			*a = L->ssm_a[h] * softplus(*a + L->dt_bias[h]);
		}
	}
	pv_prof_mark(st, PV_PROF_DOTHER);
}

/* The gated output norm of rows o [n, Hv, dv] (per head: w_n * rmsnorm(o) * silu(z)), then
 * out [n, H] = o W_out^T, one product over all n rows. */
static void delta_out(struct pv_cpu_state* st, const struct pv_config* c, const struct pv_layer* L, float* out, int n)
{
	const int H = c->hidden, Hv = c->lin_v_heads, dv = c->lin_v_dim, vd = pv_cfg_value_dim(c);
	const int avx512 = st->mm.k->isa >= PV_ISA_AVX512 && pv_delta_avx512_ok(dv, pv_cfg_conv_dim(c), c->conv_kernel);
	for (int t = 0; t < n; t++)
		for (int h = 0; h < Hv; h++) {
			float* o = st->o + (size_t)t * vd + (size_t)h * dv;
			const float* z = st->z + (size_t)t * vd + (size_t)h * dv;
			pv_rmsnorm(o, o, L->lin_norm, dv, c->rms_eps);
			if (avx512) pv_silu_gate_avx512(o, z, (size_t)dv);
			else
				for (int j = 0; j < dv; j++) o[j] *= pv_silu(z[j]);
		}
	pv_prof_mark(st, PV_PROF_DOTHER);
	pv_mm(&st->mm, out, H, st->o, vd, n, &L->out_proj);
	pv_prof_mark(st, PV_PROF_MM_DOUT);
}

void pv_deltanet_layer(struct pv_session* s, int layer, const float* xn, float* out, int n, int chunked, int snap_row0)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	const struct pv_layer* L = &s->m->w.layers[layer];
	const int Hv = c->lin_v_heads, dk = c->lin_k_dim, dv = c->lin_v_dim, cd = pv_cfg_conv_dim(c);

	delta_in(st, c, L, xn, n);
	/* snapshots: this layer's S, then its conv window, inside every slot (the checkpoint layout) */
	const size_t S_floats = (size_t)Hv * dk * dv;
	const size_t snap_off = (size_t)st->lin_index[layer] * pv_state_floats_per_layer(c);
	const int snap = snap_row0 >= 0 && !chunked;
	const int avx512 = st->mm.k->isa >= PV_ISA_AVX512 && pv_delta_avx512_ok(dv, cd, c->conv_kernel);
	conv_silu(c, st->conv[layer], L->conv_w, st->mix, st->mix2, n, snap ? st->snap_buf + snap_row0 : NULL,
	          snap_off + S_floats, avx512);
	pv_prof_mark(st, PV_PROF_DCONV);
	delta_gates(st, c, L, n);
	struct delta_task dt = { s, layer, n, snap ? snap_row0 : -1, snap_off };
	pv_pool_run(s->pool, chunked ? delta_chunked : delta_recurrent, &dt, Hv);
	pv_prof_mark(st, PV_PROF_DELTA);
	delta_out(st, c, L, out, n);
}

/* ---------------------------------------------- one row of several sessions --- */

struct delta_many {
	struct pv_session* host;      /* its scratch holds the rows */
	struct pv_session* const* ss; /* row i's session */
	int layer;
};

/* Task i * Hv + h: value head h of row i, on session i's own S (the one-row recurrent step). */
static void delta_recurrent_many(void* ctx, int task, int thread)
{
	struct delta_many* dm = ctx;
	const struct pv_session* s0 = dm->host;
	const struct pv_cpu_state* st = pv_cpu(s0);
	const struct pv_config* c = &s0->m->cfg;
	const int Hv = c->lin_v_heads, i = task / Hv, h = task % Hv, dk = c->lin_k_dim, dv = c->lin_v_dim;
	float* S = pv_cpu(dm->ss[i])->ssm[dm->layer] + (size_t)h * dk * dv;
	delta_step(st, c, S, st->mix2 + (size_t)i * pv_cfg_conv_dim(c), expf(st->lg[(size_t)i * Hv + h]),
	           st->lb[(size_t)i * Hv + h], st->o + (size_t)i * pv_cfg_value_dim(c) + (size_t)h * dv, h, thread);
}

void pv_deltanet_layer_many(struct pv_session* s0, struct pv_session* const* ss, int count, int layer, const float* xn,
                            float* out)
{
	struct pv_cpu_state* st = pv_cpu(s0);
	const struct pv_config* c = &s0->m->cfg;
	const struct pv_layer* L = &s0->m->w.layers[layer];
	const int dv = c->lin_v_dim, cd = pv_cfg_conv_dim(c);
	const int avx512 = st->mm.k->isa >= PV_ISA_AVX512 && pv_delta_avx512_ok(dv, cd, c->conv_kernel);

	delta_in(st, c, L, xn, count);
	/* row i through session i's conv window: a one-row call's conv (mix row i -> mix2 row i) */
	for (int i = 0; i < count; i++)
		conv_silu(c, pv_cpu(ss[i])->conv[layer], L->conv_w, st->mix + (size_t)i * cd, st->mix2 + (size_t)i * cd, 1, NULL, 0,
		          avx512);
	pv_prof_mark(st, PV_PROF_DCONV);
	delta_gates(st, c, L, count);
	struct delta_many dm = { s0, ss, layer };
	pv_pool_run(s0->pool, delta_recurrent_many, &dm, count * c->lin_v_heads);
	pv_prof_mark(st, PV_PROF_DELTA);
	delta_out(st, c, L, out, count);
}
