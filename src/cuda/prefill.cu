/*
 * prefill.cu: the prompt path's scratch and chunk loop (prefill.cuh; src/cuda/README.md,
 * "Prefill"), the small row kernels (embedding, add + RMSNorm to bf16, SwiGLU to bf16, biases),
 * the GEMM wrapper and the dense FFN; the mixers and the MoE FFN are in the op files.
 *
 * A call of n rows runs in chunks of up to R = min(C, max_batch) rows (C: cuda.prefill_chunk,
 * 1024 by default, or pv_cuda_set_prefill). Per chunk of T rows, with H the hidden size,
 * qd = heads x head dim, kvd = kv heads x head dim:
 *   embedding            x [T][H] f32 (the decode's exact dequantization, token ids from device memory)
 *   per layer:
 *     add + RMSNorm       x += delta; xb [T][ldh] = bf16(rmsnorm(x) * w)   (xn f32 too for MoE / LM rows)
 *     attention mixer     attention_prefill.cu: qraw/kraw/vraw = xb W^T (cuBLAS bf16 GEMMs, f32 out)
 *                         + biases; q/k norm + RoPE + KV write (norm_rope.cu's kernel for T rows);
 *                         flash-style causal attention over the f32 KV cache -> ob [T][ldo] bf16
 *                         (output gate applied); delta = ob Wo^T
 *     DeltaNet mixer      deltanet_prefill.cu: projections (GEMMs, f32 out); conv and the delta
 *                         rule over the T rows in order, the state in the decode's layout;
 *                         ob = bf16(gated norm of o); delta = ob Wout^T
 *     add + RMSNorm       as above
 *     dense FFN           g, u = xb Wg^T, xb Wu^T; hb = bf16(silu(g) * u); delta = hb Wd^T
 *     MoE FFN             moe_prefill.cu: routing, grouped expert GEMMs, shared expert, combine
 *   LM rows               final norm (f32), the decode's GEMV LM head in 16-row groups, argmax
 * Weights: BF16 matrices are used in place (row-major [out][in] = column-major [in][out], so
 * Y = X W^T is one GemmEx with op T on W); other types are dequantized per use into one bf16
 * scratch matrix (dequant.cu: the value pv_dequant_block gives, then rounded to bf16); the
 * precise mode also keeps what the rounding left, bf16(value - hi), and adds W_lo X_hi.
 *
 * Numerics: activations entering a GEMM are rounded to bf16 (8 significant bits), products
 * accumulate in f32 (tensor cores); everything else is f32 as in the decode path. Deterministic
 * (fixed-order reductions, no atomics; cuBLAS with one stream and its own workspace), but not
 * batch-invariant and not bitwise the 16-row path: the results agree within tolerance
 * (tests/cuda/test_cuda.c, section prefill).
 */
#include "prefill.cuh"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

constexpr size_t WS_BYTES = (size_t)32 << 20;

int round8(int v) { return (v + 7) / 8 * 8; }

/* ---- small kernels ---------------------------------------------------------------------- */

__global__ void embed_kernel(pv_units::Planes m, const int* tok, float* x, int H)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int t = blockIdx.y;
	const int tk = tok[t];
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < H; c += gridDim.x * blockDim.x)
		x[(size_t)t * H + c] = pv_units::dq_elem(m, tk, c);
}

constexpr int NORM_THREADS = 256;

/* x[t] += delta[t] (unless NULL); y = rmsnorm(x[t]) * w (pv_rmsnorm's expression); xn[t] = y
 * (unless NULL), xb[t] = bf16(y) (unless NULL). One block per row; the sum of squares by lanes
 * (stride 256, in order), the warp butterfly, then the warps in order. */
__global__ void __launch_bounds__(NORM_THREADS) norm_kernel(float* x, const float* delta, float* xn, bf16* xb, bf16* xl,
                                                            int ldb, const float* w, int H, float eps)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[NORM_THREADS / 32 + 1];
	const int t = blockIdx.x;
	float* xr = x + (size_t)t * H;
	const float ss = pv_block_sum_all<NORM_THREADS>(pv_add_sumsq<NORM_THREADS>(xr, delta, t, H), red);
	const float r = 1.0f / sqrtf(ss / (float)H + eps);
	for (int i = threadIdx.x; i < H; i += NORM_THREADS) {
		const float y = (xr[i] * r) * w[i];
		if (xn) xn[(size_t)t * H + i] = y;
		if (xb) put_bf16(xb, xl, (size_t)t * ldb + i, y);
	}
}

/* h[t][i] = bf16(silu(g[t][i]) * u[t][i]) (gemv.cu xin's expression), i < w */
__global__ void swiglu_kernel(const float* g, const float* u, int ld, bf16* h, bf16* hl, int ldh, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i >= w) return;
	const float a = g[(size_t)t * ld + i];
	put_bf16(h, hl, (size_t)t * ldh + i, (a / (1.0f + expf(-a))) * u[(size_t)t * ld + i]);
}

/* y[t][i] += b[i], i < w */
__global__ void bias_kernel(float* y, int ld, const float* b, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i < w) y[(size_t)t * ld + i] = y[(size_t)t * ld + i] + b[i];
}

/* ---- scratch ------------------------------------------------------------------------------ */

struct carve {
	size_t off;
	unsigned char* base;
};

template <typename T>
T* take(struct carve* cv, size_t count)
{
	const size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
	T* p = cv->base ? (T*)(cv->base + cv->off) : NULL;
	cv->off += bytes;
	return p;
}

size_t mat_elems(const struct dmat* w) { return w->type >= 0 && w->type != PV_BF16 ? (size_t)w->rows * (size_t)w->cols : 0; }

/* Lays out (base NULL: only sizes) the scratch of R rows (struct pv_prefill, prefill.cuh). */
void layout(struct pv_prefill* p, const struct pv_session* s, struct carve* cv)
{
	const struct pv_config* c = &s->m->cfg;
	const struct dsession* d = dsess(s);
	const size_t R = (size_t)p->R, H = (size_t)c->hidden, qd = (size_t)pv_cfg_q_dim(c), kvd = (size_t)pv_cfg_kv_dim(c);
	const size_t ffn = (size_t)(c->intermediate > 0 ? c->intermediate : 1);
	p->x = take<float>(cv, R * H);
	p->delta = take<float>(cv, R * H);
	p->xn = take<float>(cv, R * H);
	p->xb = take<bf16>(cv, R * (size_t)p->ldh);
	p->qraw = take<float>(cv, R * (size_t)d->ldq);
	p->kraw = take<float>(cv, R * kvd);
	p->vraw = take<float>(cv, R * kvd);
	p->q = take<float>(cv, R * qd);
	p->gate = take<float>(cv, R * qd);
	p->ob = take<bf16>(cv, R * (size_t)p->ldo);
	p->g = take<float>(cv, R * ffn);
	p->u = take<float>(cv, R * ffn);
	p->hb = take<bf16>(cv, R * (size_t)p->ldf);
	if (s->state_floats) {
		const size_t cd = (size_t)pv_cfg_conv_dim(c), vd = (size_t)pv_cfg_value_dim(c), Hv = (size_t)c->lin_v_heads;
		p->mix = take<float>(cv, R * (size_t)d->ld_raw);
		p->lz = take<float>(cv, R * vd);
		p->lb = take<float>(cv, R * Hv);
		p->la = take<float>(cv, R * Hv);
		p->lab = take<float>(cv, R * 2 * Hv);
		p->lu = take<float>(cv, R * cd);
		p->lo = take<float>(cv, R * vd);
		p->wy = p->wy_on ? take<float>(cv, pv_prefill_wy_floats((int)R, c->lin_v_heads, c->lin_k_dim, c->lin_v_dim)) : NULL;
	}
	if (p->moe_gemm) {
		const size_t E = (size_t)c->n_experts, K = (size_t)c->n_experts_used, Ie = (size_t)c->moe_inter;
		const size_t Is = (size_t)(c->shared_inter > 0 ? c->shared_inter : 1);
		p->rlog = take<float>(cv, R * E);
		p->tw = take<float>(cv, R * K);
		p->tidx = take<int>(cv, R * K);
		p->perm = take<int>(cv, R * K);
		p->eoff = take<int>(cv, E + 1);
		p->ntiles = take<int>(cv, 1);
		p->tiles = take<int2>(cv, (R * K + 63) / 64 + E);
		p->eg = take<float>(cv, R * K * Ie);
		p->eu = take<float>(cv, R * K * Ie);
		p->ehb = take<bf16>(cv, R * K * (size_t)p->ldie);
		p->eo = take<float>(cv, R * K * H);
		p->sg = take<float>(cv, R * Is);
		p->su = take<float>(cv, R * Is);
		p->shb = take<bf16>(cv, R * (size_t)p->ldis);
		p->so = take<float>(cv, R * H);
	}
	if (p->split) {
		p->xl = take<bf16>(cv, R * (size_t)p->ldh);
		p->ol = take<bf16>(cv, R * (size_t)p->ldo);
		p->hl = take<bf16>(cv, R * (size_t)p->ldf);
		if (p->moe_gemm) {
			p->ehl = take<bf16>(cv, R * (size_t)c->n_experts_used * (size_t)p->ldie);
			p->shl = take<bf16>(cv, R * (size_t)p->ldis);
		}
	} else {
		p->xl = p->ol = p->hl = p->ehl = p->shl = NULL;
	}
	p->wbuf = p->wbuf_elems ? take<bf16>(cv, p->wbuf_elems) : NULL;
	p->wlo = p->wbuf_elems && p->split ? take<bf16>(cv, p->wbuf_elems) : NULL;
	p->ws = take<unsigned char>(cv, WS_BYTES);
	p->tok = take<int>(cv, (size_t)p->max_rows);
	p->steps = take<struct dstep>(cv, (size_t)p->n_steps);
}

void free_scratch(struct pv_prefill* p)
{
	if (p->blas) pv_cublas_destroy(p->blas);
	p->blas = NULL;
	if (p->mem) cudaFree(p->mem);
	if (p->pinned) cudaFreeHost(p->pinned);
	p->mem = NULL;
	p->pinned = NULL;
	p->R = 0;
}

struct pv_prefill* get(struct pv_session* s)
{
	struct dsession* d = dsess(s);
	if (!d->pre) d->pre = (struct pv_prefill*)pv_xcalloc(1, sizeof(struct pv_prefill));
	return d->pre;
}

/* The scratch's dimensions for the session's settings (what layout() needs). */
void plan(struct pv_prefill* p, const struct pv_session* s)
{
	const struct pv_config* c = &s->m->cfg;
	const struct dmodel* dm = dmod(s);
	const struct dsession* d = dsess(s);
	p->chunk = d->tu.prefill_chunk;
	p->split = d->tu.prefill == 2;
	p->R = p->chunk < s->max_batch ? p->chunk : s->max_batch;
	if (p->R < 1) p->R = 1;
	p->max_rows = s->max_batch;
	p->n_steps = (s->max_batch + p->R - 1) / p->R;
	const int qd = pv_cfg_q_dim(c), vd = s->state_floats ? pv_cfg_value_dim(c) : 0;
	p->ldh = round8(c->hidden);
	p->ldo = round8(qd > vd ? qd : vd);
	p->ldf = round8(c->intermediate > 0 ? c->intermediate : 1);
	/* the largest matrix a GEMM dequantizes (every layer matrix but the routed experts, which
	 * the grouped GEMMs dequantize on their way into shared memory) */
	size_t wb = 0;
	for (int l = 0; l < c->n_layers; l++) {
		const struct dlayer* L = &dm->layers[l];
		const struct dmat* ms[] = { &L->in_qkv, &L->in_z, &L->in_b, &L->in_a, &L->in_qkvz, &L->in_ba, &L->out_proj,
			                    &L->wq,     &L->wk,   &L->wv,   &L->wo,   &L->gate,    &L->up,    &L->down,
			                    &L->sh_gate, &L->sh_up, &L->sh_down };
		for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
			const size_t e = mat_elems(ms[i]);
			wb = e > wb ? e : wb;
		}
	}
	p->wbuf_elems = wb;
	/* MoE FFNs: grouped expert GEMMs (else the decode's gathered GEMVs) */
	p->moe_gemm = 0;
	for (int l = 0; l < c->n_layers; l++) p->moe_gemm |= c->layer_moe[l] && d->tu.prefill_moe != 1;
	/* DeltaNet layers in the chunked form: its per-chunk records (deltanet_wy.cu) */
	p->wy_on = s->state_floats && d->tu.prefill_delta == 3 && pv_prefill_wy_fits(c->lin_k_dim, c->lin_v_dim);
	p->ldie = round8(c->moe_inter > 0 ? c->moe_inter : 1);
	p->ldis = round8(c->shared_inter > 0 ? c->shared_inter : 1);
}

/* The scratch, pinned buffers, cuBLAS handle and events, once (p->R != 0 afterwards). */
int ensure(struct pv_prefill* p, struct pv_session* s, char* err, size_t errlen)
{
	if (p->R) return 0;
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = dsess(s);
	plan(p, s);
	struct carve cv = { 0, NULL };
	layout(p, s, &cv);
	p->mem_bytes = cv.off;
	cudaError_t e = cudaMalloc((void**)&p->mem, p->mem_bytes);
	if (e != cudaSuccess) {
		p->mem = NULL;
		const int rows = p->R;
		p->R = 0;
		return pv_errf(err, errlen, "CUDA backend: cannot allocate %.2f GiB of prefill scratch (%d rows): %s",
		               p->mem_bytes / 1073741824.0, rows, cudaGetErrorString(e));
	}
	cv = (struct carve){ 0, p->mem };
	layout(p, s, &cv);
	const size_t hb = sizeof(int) * (size_t)p->max_rows + sizeof(struct dstep) * (size_t)p->n_steps + 64;
	e = cudaHostAlloc((void**)&p->pinned, hb, cudaHostAllocDefault);
	if (e != cudaSuccess) {
		p->pinned = NULL;
		free_scratch(p);
		return pv_cuda_fail(err, errlen, "prefill pinned buffers", e);
	}
	memset(p->pinned, 0, hb);
	p->steps_host = (struct dstep*)p->pinned;
	p->tok_host = (int*)(p->steps_host + p->n_steps);
	if (pv_cublas_create(&p->blas, d->st, p->ws, WS_BYTES, err, errlen)) {
		free_scratch(p);
		return -1;
	}
	if (!p->ev0) {
		CU(cudaEventCreate(&p->ev0), err, errlen);
		CU(cudaEventCreate(&p->ev1), err, errlen);
	}
	if (pv_prefill_attention_init(c->head_dim, err, errlen)) return -1;
	return 0;
}

/* ---- the layer loop --------------------------------------------------------------------------- */

/* x += delta (unless NULL); xn = rmsnorm(x) * w (unless NULL), xb = bf16 of it (unless NULL) */
int norm(struct pv_prefill_ctx* k, float* x, const float* delta, float* xn, bf16* xb, const float* w, int T)
{
	const int H = k->c->hidden;
	PV_LAUNCH("prefill norm", &k->d->tu, k->err, k->errlen, norm_kernel, dim3((unsigned)T), dim3(NORM_THREADS), 0, k->d->st,
	          x, delta, xn, xb, pv_prefill_lo(k->p, xb), k->p->ldh, w, H, k->c->rms_eps);
	k->p->nl++;
	return 0;
}

/* dense SwiGLU FFN of xb into delta */
int ffn_dense(struct pv_prefill_ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	const int H = k->c->hidden, I = (int)L->gate.rows;
	const int ldg = k->c->intermediate;
	if (I != ldg || L->up.rows != I)
		return pv_errf(k->err, k->errlen, "CUDA backend: prefill: FFN width %d, config %d", I, ldg);
	if (pv_prefill_gemm(k, &L->gate, p->xb, p->ldh, p->g, ldg, T) ||
	    pv_prefill_gemm(k, &L->up, p->xb, p->ldh, p->u, ldg, T) ||
	    pv_prefill_swiglu(k, p->g, p->u, ldg, p->hb, p->ldf, I, T))
		return -1;
	return pv_prefill_gemm(k, &L->down, p->hb, p->ldf, p->delta, H, T);
}

/* Rows [c0, c0 + T) of the call, chunk ci. */
int chunk(struct pv_prefill_ctx* k, int ci, int c0, int T, const struct pv_step* sp, int* have_id)
{
	struct pv_prefill* p = k->p;
	struct dsession* d = k->d;
	const struct pv_config* c = k->c;
	const struct dmodel* dm = dmod(k->s);
	const int H = c->hidden, V = c->vocab;
	cudaStream_t st = d->st;
	char* err = k->err;
	const size_t errlen = k->errlen;
	{
		const struct dmat* E = &dm->embed;
		PV_LAUNCH("prefill embed", &k->d->tu, err, errlen, embed_kernel, dim3((unsigned)((H + 255) / 256), (unsigned)T),
		          dim3(256), 0, st, pv_prefill_planes(E), p->tok + c0, p->x, H);
		p->nl++;
	}
	for (int l = 0; l < c->n_layers; l++) {
		const struct dlayer* L = &dm->layers[l];
		if (norm(k, p->x, l ? p->delta : NULL, NULL, p->xb, L->attn_norm, T)) return -1;
		if (c->layer_kind[l] == PV_LAYER_LINEAR) {
			if (pv_prefill_deltanet_layer(k, L, l, T)) return -1;
		} else if (pv_prefill_attention_layer(k, L, l, ci, sp->pos0 + c0, T)) {
			return -1;
		}
		const int moe = c->layer_moe[l];
		/* MoE: xn (f32) for the router GEMV and the shared gate, xb for the expert GEMMs */
		if (norm(k, p->x, p->delta, moe ? p->xn : NULL, moe && !p->moe_gemm ? NULL : p->xb, L->ffn_norm, T)) return -1;
		if (moe ? pv_prefill_moe_layer(k, L, T) : ffn_dense(k, L, T)) return -1;
	}
	/* LM rows of this chunk: [r0, c0 + T), from the first row any output wants */
	const int n = sp->n, first = pv_step_lm_row0(sp);
	if (first >= c0 + T) return 0;
	const int r0 = first > c0 ? first : c0;
	if (norm(k, p->x + (size_t)(r0 - c0) * H, p->delta + (size_t)(r0 - c0) * H, p->xn, NULL, dm->final_norm, c0 + T - r0))
		return -1;
	for (int g0 = r0; g0 < c0 + T; g0 += PV_CUDA_ROWS) {
		const int rows = c0 + T - g0 < PV_CUDA_ROWS ? c0 + T - g0 : PV_CUDA_ROWS;
		struct gemv_out o[1] = { { &dm->lm_head, d->logits, V, NULL } };
		if (pv_cuda_gemv(st, &d->tu, o, 1, p->xn + (size_t)(g0 - r0) * H, NULL, H, PV_X_PLAIN, rows, &p->nl, err,
		                 errlen))
			return -1;
		if (pv_cuda_argmax(st, &d->tu, d->logits, V, rows, d->ids, err, errlen)) return -1;
		p->nl++;
		if (pv_cuda_copy_outputs(sp, g0, rows, d->logits, d->ids, p->xn + (size_t)(g0 - r0) * H, V, H, st,
		                         &d->stats.memcpys, err, errlen))
			return -1;
		if (g0 + rows == n) {
			CU(cudaMemcpyAsync(d->ids_host, d->ids + (rows - 1), sizeof(int), cudaMemcpyDeviceToHost, st), err,
			   errlen);
			d->stats.memcpys++;
			*have_id = 1;
		}
	}
	return 0;
}

} // namespace

/* ---- helpers of the op files (prefill.cuh) ------------------------------------------------------ */

bf16* pv_prefill_lo(const struct pv_prefill* p, const bf16* hi)
{
	if (!p->split || !hi) return NULL;
	if (hi == p->xb) return p->xl;
	if (hi == p->ob) return p->ol;
	if (hi == p->hb) return p->hl;
	if (hi == p->ehb) return p->ehl;
	if (hi == p->shb) return p->shl;
	return NULL;
}

/* precise mode: Y = W_hi X_hi, then Y += W_hi X_lo, then (weights not BF16, whose bf16 rounding
 * loses bits: Q8_0's d * q has up to 19 significant bits) Y += W_lo X_hi; GEMMs with beta 1, in
 * that order. W_lo X_lo (below 2^-16 relative) is left out. Without the third GEMM the random
 * MoE models' prompts flipped top-k experts (docs/results/cpu-2026-12-02-bf16-weights.md). */
int pv_prefill_gemm(struct pv_prefill_ctx* k, const struct dmat* W, const bf16* X, int ldx, float* Y, int ldy, int T)
{
	struct pv_prefill* p = k->p;
	const bf16* w;
	const bf16* wl = NULL;
	int ldw;
	if (W->type == PV_BF16) {
		w = reinterpret_cast<const bf16*>(W->p[0]);
		ldw = (int)(W->stride[0] / 2);
	} else {
		const int64_t total = W->rows * W->cols;
		if ((size_t)total > p->wbuf_elems || !p->wbuf)
			return pv_errf(k->err, k->errlen, "CUDA backend: prefill: a [%lld, %lld] matrix exceeds the dequantization buffer",
			               (long long)W->rows, (long long)W->cols);
		wl = p->split ? p->wlo : NULL;
		if (pv_cuda_dequant_bf16(k->d->st, &k->d->tu, W, p->wbuf, (bf16*)wl, k->err, k->errlen)) return -1;
		p->nl++;
		w = p->wbuf;
		ldw = (int)W->cols;
	}
	const int N = (int)W->rows, K = (int)W->cols;
	if (pv_cublas_gemm(p->blas, w, ldw, X, ldx, Y, ldy, N, T, K, 0.0f, k->err, k->errlen)) return -1;
	p->ng++;
	const bf16* lo = pv_prefill_lo(p, X);
	if (lo) {
		if (pv_cublas_gemm(p->blas, w, ldw, lo, ldx, Y, ldy, N, T, K, 1.0f, k->err, k->errlen)) return -1;
		p->ng++;
	}
	if (wl) {
		if (pv_cublas_gemm(p->blas, wl, ldw, X, ldx, Y, ldy, N, T, K, 1.0f, k->err, k->errlen)) return -1;
		p->ng++;
	}
	return 0;
}

int pv_prefill_bias(struct pv_prefill_ctx* k, float* y, int ld, const float* b, int w, int T)
{
	if (!b) return 0;
	PV_LAUNCH("prefill bias", &k->d->tu, k->err, k->errlen, bias_kernel, dim3((unsigned)((w + 255) / 256), (unsigned)T),
	          dim3(256), 0, k->d->st, y, ld, b, w);
	k->p->nl++;
	return 0;
}

int pv_prefill_swiglu(struct pv_prefill_ctx* k, const float* g, const float* u, int ld, bf16* h, int ldh, int w, int T)
{
	PV_LAUNCH("prefill swiglu", &k->d->tu, k->err, k->errlen, swiglu_kernel, dim3((unsigned)((w + 255) / 256), (unsigned)T),
	          dim3(256), 0, k->d->st, g, u, ld, h, pv_prefill_lo(k->p, h), ldh, w);
	k->p->nl++;
	return 0;
}

/* ---- the path's entry points (session.cuh) ------------------------------------------------------ */

int pv_cuda_prefill_available(void) { return pv_cublas_load(NULL); }

/* the set-up happens at session creation when the settings and the session's rows call for it */
static int set_up_wanted(const struct pv_session* s)
{
	return dsess(s)->tu.prefill && s->max_batch > PV_CUDA_ROWS && s->max_batch >= s->chunk_min;
}

uint64_t pv_prefill_bytes(const struct pv_session* s)
{
	if (!set_up_wanted(s)) return 0;
	struct pv_prefill p;
	memset(&p, 0, sizeof p);
	plan(&p, s);
	struct carve cv = { 0, NULL };
	layout(&p, s, &cv);
	return cv.off;
}

uint64_t pv_prefill_device_bytes(const struct pv_prefill* p) { return p && p->mem ? p->mem_bytes : 0; }

int pv_prefill_wanted(struct pv_session* s, int n)
{
	struct pv_prefill* p = get(s);
	if (!dsess(s)->tu.prefill || p->broken || n <= PV_CUDA_ROWS || n < s->chunk_min) return 0;
	const char* why = NULL;
	if (!pv_cublas_load(&why)) {
		if (!p->fallback[0]) {
			snprintf(p->fallback, sizeof p->fallback, "no cuBLAS (%s): prompts use the 16-row GEMV path", why ? why : "?");
			pv_log(PV_LOG_WARN, "cuda: %s", p->fallback);
		}
		return 0;
	}
	return 1;
}

int pv_prefill_forward(struct pv_session* s, const struct pv_step* sp, int* have_id, char* err, size_t errlen)
{
	const int32_t* tokens = sp->tokens;
	const int n = sp->n;
	struct pv_prefill* p = get(s);
	struct dsession* d = dsess(s);
	*have_id = 0;
	if (ensure(p, s, err, errlen)) return -1;
	if (n > p->max_rows) return pv_errf(err, errlen, "CUDA backend: prefill of %d rows above max_batch %d", n, p->max_rows);
	const int nch = (n + p->R - 1) / p->R;
	p->nl = 0;
	p->ng = 0;
	/* the host buffers are free: the previous call ended with a synchronisation */
	for (int i = 0; i < n; i++) p->tok_host[i] = tokens[i];
	for (int i = 0; i < nch; i++) {
		p->steps_host[i].pos0 = sp->pos0 + i * p->R;
		p->steps_host[i].n = n - i * p->R < p->R ? n - i * p->R : p->R;
	}
	CU(cudaEventRecord(p->ev0, d->st), err, errlen);
	CU(cudaMemcpyAsync(p->tok, p->tok_host, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, d->st), err, errlen);
	CU(cudaMemcpyAsync(p->steps, p->steps_host, sizeof(struct dstep) * (size_t)nch, cudaMemcpyHostToDevice, d->st), err,
	   errlen);
	d->stats.memcpys += 2;
	struct pv_prefill_ctx k = { p, s, d, &s->m->cfg, err, errlen };
	int rc = 0;
	for (int ci = 0; ci < nch && !rc; ci++) {
		const int c0 = ci * p->R;
		rc = chunk(&k, ci, c0, p->steps_host[ci].n, sp, have_id);
	}
	d->stats.direct_kernels += (uint64_t)p->nl;
	d->stats.prefill_kernels += (uint64_t)p->nl;
	d->stats.prefill_gemms += (uint64_t)p->ng;
	d->stats.prefill_calls++;
	d->stats.prefill_tokens += (uint64_t)n;
	if (rc) return -1;
	CU(cudaEventRecord(p->ev1, d->st), err, errlen);
	p->timed = 1;
	return 0;
}

void pv_prefill_prepare(struct pv_session* s)
{
	struct pv_prefill* p = get(s);
	if (p->prepared || p->R || !set_up_wanted(s)) return;
	p->prepared = 1;
	if (!pv_cublas_load(NULL)) return; /* pv_prefill_wanted says so once, at the first prompt */
	char err[256];
	if (ensure(p, s, err, sizeof err)) {
		p->broken = 1;
		cudaGetLastError(); /* a failed allocation must not fail the session's later launches */
		snprintf(p->fallback, sizeof p->fallback, "prefill set-up failed (%.120s): prompts use the 16-row GEMV path", err);
		pv_log(PV_LOG_WARN, "cuda: %s", p->fallback);
	}
}

const char* pv_prefill_fallback(const struct pv_prefill* p) { return p && p->fallback[0] ? p->fallback : NULL; }

void pv_prefill_account(struct pv_session* s)
{
	struct pv_prefill* p = dsess(s)->pre;
	if (!p || !p->timed) return;
	p->timed = 0;
	float ms = 0;
	if (cudaEventElapsedTime(&ms, p->ev0, p->ev1) == cudaSuccess) dsess(s)->stats.prefill_gpu_ms += ms;
}

void pv_prefill_retune(struct pv_session* s)
{
	struct pv_prefill* p = get(s);
	struct pv_prefill want;
	memset(&want, 0, sizeof want);
	plan(&want, s);
	if (want.chunk != p->chunk || want.split != p->split || want.moe_gemm != p->moe_gemm || want.wy_on != p->wy_on) {
		free_scratch(p); /* laid out again by the next ensure() */
		p->chunk = want.chunk;
		p->split = want.split;
		p->moe_gemm = want.moe_gemm;
		p->wy_on = want.wy_on;
		p->prepared = p->broken = 0;
		p->fallback[0] = 0;
	}
}

void pv_prefill_free(struct pv_prefill* p)
{
	if (!p) return;
	free_scratch(p);
	if (p->ev0) cudaEventDestroy(p->ev0);
	if (p->ev1) cudaEventDestroy(p->ev1);
	free(p);
}
