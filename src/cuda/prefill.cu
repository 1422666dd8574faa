/*
 * prefill.cu: the prompt path (prefill.cuh; src/cuda/README.md, "Prefill").
 *
 * A call of n rows runs in chunks of up to R = min(C, max_batch) rows (C = 1024 by default,
 * PV_CUDA_PREFILL_CHUNK or pv_cuda_set_prefill change it). Per chunk of T rows, with H the
 * hidden size, qd = heads x head dim, kvd = kv heads x head dim:
 *   embedding            x [T][H] f32 (the decode's exact dequantization, token ids from device memory)
 *   per layer:
 *     add + RMSNorm       x += delta; xb [T][ldh] = bf16(rmsnorm(x) * w)   (xn f32 too for MoE / LM rows)
 *     attention mixer     qraw/kraw/vraw = xb W^T (cuBLAS bf16 GEMMs, f32 out) + biases;
 *                         q/k norm + RoPE + KV write (norm_rope.cu's kernel for T rows);
 *                         flash-style causal attention over the f32 KV cache -> ob [T][ldo] bf16
 *                         (output gate applied); delta = ob Wo^T
 *     DeltaNet mixer      projections (GEMMs, f32 out); deltanet.cu's conv + recurrence over the
 *                         T rows in order (the decode kernels, so the state is the decode's
 *                         layout); ob = bf16(o); delta = ob Wout^T
 *     add + RMSNorm       as above
 *     dense FFN           g, u = xb Wg^T, xb Wu^T; hb = bf16(silu(g) * u); delta = hb Wd^T
 *     MoE FFN             (fallback) the decode's router GEMV, routing, gathered expert GEMVs,
 *                         shared expert and combine, in 16-row groups, reading xn (f32)
 *   LM rows               final norm (f32), the decode's GEMV LM head in 16-row groups, argmax
 * Weights: BF16 matrices are used in place (row-major [out][in] = column-major [in][out], so
 * Y = X W^T is one GemmEx with op T on W); other types are dequantized per use into one bf16
 * scratch matrix (units.cuh's dq_elem: the value pv_dequant_block gives, then rounded to bf16).
 *
 * Numerics: activations entering a GEMM are rounded to bf16 (8 significant bits), products
 * accumulate in f32 (tensor cores); everything else is f32 as in the decode path. Deterministic
 * (fixed-order reductions, no atomics; cuBLAS with one stream and its own workspace), but not
 * batch-invariant and not bitwise the 16-row path: the results agree within tolerance
 * (tests/test_cuda.c, section prefill).
 */
#include "prefill.cuh"
#include "units.cuh"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

struct pv_prefill {
	int on, chunk;            /* settings                                                      */
	int R, max_rows, n_steps; /* scratch rows (0: not allocated), tokens and steps it holds   */
	unsigned char* mem;
	size_t mem_bytes;
	unsigned char* pinned;
	void* blas;
	int told;
	/* scratch, R rows each */
	float *x, *delta, *xn;    /* [R][H]                                                        */
	bf16* xb;                 /* [R][ldh] normalized activations                               */
	int ldh;
	float *qraw, *kraw, *vraw; /* [R][ldq], [R][kvd], [R][kvd]                                 */
	float *q, *gate;          /* [R][qd]                                                       */
	bf16* ob;                 /* [R][ldo] attention / DeltaNet output                          */
	int ldo;
	float *g, *u;             /* [R][ffn]                                                      */
	bf16* hb;                 /* [R][ldf]                                                      */
	int ldf;
	float *mix, *lz, *lb, *la, *lab, *lu, *lo; /* DeltaNet: [R][ld_raw], [R][vd], [R][Hv] x2, [R][2Hv], [R][cd], [R][vd] */
	bf16* wbuf;               /* a dequantized weight matrix [rows][cols]                      */
	size_t wbuf_elems;
	void* ws;                 /* cuBLAS workspace                                              */
	int* tok;                 /* [max_rows] device token ids                                   */
	struct dstep* steps;      /* [n_steps] device: pos0 per chunk (for qkv_post)               */
	int* tok_host;            /* pinned copies                                                 */
	struct dstep* steps_host;
	cudaEvent_t ev0, ev1;
	int timed;                /* ev0/ev1 recorded by the last call, not yet accounted          */
	int nl, ng;               /* kernels and GEMMs of the current call                         */
};

namespace {

constexpr int DEFAULT_CHUNK = 1024;
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
__global__ void __launch_bounds__(NORM_THREADS) norm_kernel(float* x, const float* delta, float* xn, bf16* xb, int ldb,
                                                            const float* w, int H, float eps)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[NORM_THREADS / 32 + 1];
	const int t = blockIdx.x;
	float* xr = x + (size_t)t * H;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < H; i += NORM_THREADS) {
		float v = xr[i];
		if (delta) {
			v = v + delta[(size_t)t * H + i];
			xr[i] = v;
		}
		ss = ss + v * v;
	}
	ss = pv_warp_sum(ss);
	if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = red[0];
		for (int i = 1; i < NORM_THREADS / 32; i++) s = s + red[i];
		red[NORM_THREADS / 32] = s;
	}
	__syncthreads();
	const float r = 1.0f / sqrtf(red[NORM_THREADS / 32] / (float)H + eps);
	for (int i = threadIdx.x; i < H; i += NORM_THREADS) {
		const float y = (xr[i] * r) * w[i];
		if (xn) xn[(size_t)t * H + i] = y;
		if (xb) xb[(size_t)t * ldb + i] = __float2bfloat16_rn(y);
	}
}

/* h[t][i] = bf16(silu(g[t][i]) * u[t][i]) (gemv.cu xin's expression), i < w */
__global__ void swiglu_kernel(const float* g, const float* u, int ld, bf16* h, int ldh, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i >= w) return;
	const float a = g[(size_t)t * ld + i];
	h[(size_t)t * ldh + i] = __float2bfloat16_rn((a / (1.0f + expf(-a))) * u[(size_t)t * ld + i]);
}

/* y[t][i] = bf16(x[t][i]), i < w */
__global__ void cvt_kernel(const float* x, int ldx, bf16* y, int ldy, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i < w) y[(size_t)t * ldy + i] = __float2bfloat16_rn(x[(size_t)t * ldx + i]);
}

/* y[t][i] += b[i], i < w */
__global__ void bias_kernel(float* y, int ld, const float* b, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i < w) y[(size_t)t * ld + i] = y[(size_t)t * ld + i] + b[i];
}

/* out[r][c] = bf16(element (r, c) of a device matrix in its stored type), out ld = cols */
__global__ void dequant_kernel(pv_units::Planes m, int64_t rows, int cols, bf16* out)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int64_t total = rows * (int64_t)cols;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / cols;
		const int c = (int)(i - r * cols);
		out[i] = __float2bfloat16_rn(pv_units::dq_elem(m, r, c));
	}
}

/* ---- flash-style causal prefill attention ------------------------------------------------ */

/*
 * Block (row tile, kv head kh), 128 threads: AQ = 32 query vectors, the G query heads of kh for
 * BQ = 32 / G consecutive rows (vector r: row t0 + r / G, head kh * G + r % G), so every K/V
 * tile is read once for all of them. Keys in tiles of AK = 32 positions, in increasing order,
 * from 0 to the block's last position (the KV cache holds earlier calls' and this chunk's rows,
 * written by qkv_post before). Thread (qi = tid / 4, kq = tid % 4) owns query vector qi:
 *   scores of keys kq, kq + 4, ... kq + 28 of the tile: one fmaf chain over d in order (float4
 *   steps), times 1/sqrt(hd); keys after the row's position are -inf;
 *   online softmax: m' = max(m, tile max) (the 4 threads' maxima by xor 1, 2), alpha = exp(m - m'),
 *   p = exp(s - m'), l = l * alpha + sum p (each thread's 8 in order, then xor 1, 2);
 *   o[d] for d in its float4s kq, kq + 4, ...: o = o * alpha, then one fmaf per key in key order.
 * Tile 0 always holds key 0 <= every row's position, so m is finite from the first tile on, and
 * a later tile whose keys are all masked gives p = 0, alpha = 1. Finally o / l (then the output
 * gate o * sigmoid(g), as the decode's combine), written as bf16 for o_proj.
 */
constexpr int AQ = 32, AK = 32, ATHREADS = 128, MAX_HD4 = 64;

struct pattn_args {
	const float* q;          /* [T][nh*hd]                                                     */
	const float *kc, *vc;    /* [n_ctx][nkv*hd]                                                */
	const float* gate;       /* [T][nh*hd] or NULL                                             */
	bf16* o;                 /* [T][ldo]                                                       */
	int ldo, T, pos0, nh, nkv, hd, bq;
};

size_t attn_smem(int hd) { return sizeof(float) * ((size_t)AQ * (hd + 4) + (size_t)AK * (hd + 4) + (size_t)AK * hd + (size_t)AQ * (AK + 1)); }

__global__ void __launch_bounds__(ATHREADS) attn_kernel(const __grid_constant__ pattn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ float4 sm4[];
	const int hd = a.hd, hd4 = hd >> 2, G = a.nh / a.nkv, kvd = a.nkv * hd, qd = a.nh * hd, ld = hd + 4;
	float* Qs = reinterpret_cast<float*>(sm4); /* [AQ][ld] */
	float* Ks = Qs + AQ * ld;                  /* [AK][ld] */
	float* Vs = Ks + AK * ld;                  /* [AK][hd] */
	float* Ps = Vs + AK * hd;                  /* [AQ][AK + 1] */
	const int kh = blockIdx.y, t0 = blockIdx.x * a.bq;
	const int nr = min(a.bq, a.T - t0); /* rows of this block */
	const int nq = nr * G;              /* valid query vectors */
	const int tid = threadIdx.x, qi = tid >> 2, kq = tid & 3;
	const int last = a.pos0 + t0 + nr - 1; /* the block's last key */
	const int qpos = a.pos0 + t0 + (qi < nq ? qi / G : 0);

	for (int i = tid; i < AQ * hd4; i += ATHREADS) {
		const int r = i / hd4, d4 = i - r * hd4;
		float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (r < nq) {
			const int t = t0 + r / G, h = kh * G + r % G;
			v = reinterpret_cast<const float4*>(a.q + (size_t)t * qd + (size_t)h * hd)[d4];
		}
		*reinterpret_cast<float4*>(Qs + r * ld + 4 * d4) = v;
	}
	const float scale = 1.0f / sqrtf((float)hd);
	float m = -INFINITY, l = 0.0f;
	float4 acc[MAX_HD4 / 4];
#pragma unroll
	for (int i = 0; i < MAX_HD4 / 4; i++) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

	for (int j0 = 0; j0 <= last; j0 += AK) {
		__syncthreads(); /* Q written; the previous tile's K, V, P consumed */
		for (int i = tid; i < AK * hd4; i += ATHREADS) {
			const int j = i / hd4, d4 = i - j * hd4;
			float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
			if (j0 + j <= last) {
				const size_t off = (size_t)(j0 + j) * kvd + (size_t)kh * hd;
				kv = __ldg(reinterpret_cast<const float4*>(a.kc + off) + d4);
				vv = __ldg(reinterpret_cast<const float4*>(a.vc + off) + d4);
			}
			*reinterpret_cast<float4*>(Ks + j * ld + 4 * d4) = kv;
			*reinterpret_cast<float4*>(Vs + j * hd + 4 * d4) = vv;
		}
		__syncthreads();
		float sc[AK / 4];
#pragma unroll
		for (int u = 0; u < AK / 4; u++) sc[u] = 0.0f;
		for (int d = 0; d < hd; d += 4) {
			const float4 qv = *reinterpret_cast<const float4*>(Qs + qi * ld + d);
#pragma unroll
			for (int u = 0; u < AK / 4; u++) {
				const float4 kv = *reinterpret_cast<const float4*>(Ks + (kq + 4 * u) * ld + d);
				float s = sc[u];
				s = fmaf(qv.x, kv.x, s);
				s = fmaf(qv.y, kv.y, s);
				s = fmaf(qv.z, kv.z, s);
				s = fmaf(qv.w, kv.w, s);
				sc[u] = s;
			}
		}
		float mx = -INFINITY;
#pragma unroll
		for (int u = 0; u < AK / 4; u++) {
			const int j = j0 + kq + 4 * u;
			sc[u] = j <= qpos ? sc[u] * scale : -INFINITY;
			mx = fmaxf(mx, sc[u]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		const float mn = fmaxf(m, mx);
		const float alpha = expf(m - mn);
		float ps = 0.0f;
#pragma unroll
		for (int u = 0; u < AK / 4; u++) {
			const float p = expf(sc[u] - mn);
			Ps[qi * (AK + 1) + kq + 4 * u] = p;
			ps = ps + p;
		}
		ps = ps + __shfl_xor_sync(0xffffffffu, ps, 1);
		ps = ps + __shfl_xor_sync(0xffffffffu, ps, 2);
		l = l * alpha + ps;
		m = mn;
		__syncwarp(); /* a row's P is written and read by the 4 lanes of that row (one warp) */
#pragma unroll
		for (int i = 0; i < MAX_HD4 / 4; i++) {
			const int d4 = kq + 4 * i;
			if (d4 < hd4) {
				float4 o = acc[i];
				o.x = o.x * alpha;
				o.y = o.y * alpha;
				o.z = o.z * alpha;
				o.w = o.w * alpha;
				for (int j = 0; j < AK; j++) {
					const float p = Ps[qi * (AK + 1) + j];
					const float4 v = *reinterpret_cast<const float4*>(Vs + j * hd + 4 * d4);
					o.x = fmaf(p, v.x, o.x);
					o.y = fmaf(p, v.y, o.y);
					o.z = fmaf(p, v.z, o.z);
					o.w = fmaf(p, v.w, o.w);
				}
				acc[i] = o;
			}
		}
	}
	if (qi >= nq) return;
	const int t = t0 + qi / G, h = kh * G + qi % G;
	const float inv = 1.0f / l;
#pragma unroll
	for (int i = 0; i < MAX_HD4 / 4; i++) {
		const int d4 = kq + 4 * i;
		if (d4 < hd4) {
			float o[4] = { acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv };
			for (int c = 0; c < 4; c++) {
				const int d = 4 * d4 + c;
				if (a.gate) {
					const float g = a.gate[(size_t)t * qd + (size_t)h * hd + d];
					o[c] = o[c] * (1.0f / (1.0f + expf(-g))); /* pv_sigmoid, as forward.c */
				}
				a.o[(size_t)t * a.ldo + (size_t)h * hd + d] = __float2bfloat16_rn(o[c]);
			}
		}
	}
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

void layout(struct pv_prefill* p, const struct pv_session* s, const struct pv_prefill_view* v, struct carve* cv)
{
	const struct pv_config* c = &s->m->cfg;
	const size_t R = (size_t)p->R, H = (size_t)c->hidden, qd = (size_t)pv_cfg_q_dim(c), kvd = (size_t)pv_cfg_kv_dim(c);
	const size_t ffn = (size_t)(c->intermediate > 0 ? c->intermediate : 1);
	p->x = take<float>(cv, R * H);
	p->delta = take<float>(cv, R * H);
	p->xn = take<float>(cv, R * H);
	p->xb = take<bf16>(cv, R * (size_t)p->ldh);
	p->qraw = take<float>(cv, R * (size_t)v->ldq);
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
		p->mix = take<float>(cv, R * (size_t)v->ld_raw);
		p->lz = take<float>(cv, R * vd);
		p->lb = take<float>(cv, R * Hv);
		p->la = take<float>(cv, R * Hv);
		p->lab = take<float>(cv, R * 2 * Hv);
		p->lu = take<float>(cv, R * cd);
		p->lo = take<float>(cv, R * vd);
	}
	p->wbuf = p->wbuf_elems ? take<bf16>(cv, p->wbuf_elems) : NULL;
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

struct pv_prefill* get(struct pv_prefill** pp)
{
	if (!*pp) {
		struct pv_prefill* p = (struct pv_prefill*)pv_xcalloc(1, sizeof(*p));
		const char* e = getenv("PV_CUDA_PREFILL");
		p->on = !(e && !strcmp(e, "0"));
		const char* ch = getenv("PV_CUDA_PREFILL_CHUNK");
		p->chunk = ch && atoi(ch) > 0 ? atoi(ch) : DEFAULT_CHUNK;
		*pp = p;
	}
	return *pp;
}

int ensure(struct pv_prefill* p, const struct pv_session* s, const struct pv_prefill_view* v, char* err, size_t errlen)
{
	if (p->R) return 0;
	const struct pv_config* c = &s->m->cfg;
	const struct dmodel* dm = v->dm;
	p->R = p->chunk < s->max_batch ? p->chunk : s->max_batch;
	if (p->R < 1) p->R = 1;
	p->max_rows = s->max_batch;
	p->n_steps = (s->max_batch + p->R - 1) / p->R;
	const int qd = pv_cfg_q_dim(c), vd = s->state_floats ? pv_cfg_value_dim(c) : 0;
	p->ldh = round8(c->hidden);
	p->ldo = round8(qd > vd ? qd : vd);
	p->ldf = round8(c->intermediate > 0 ? c->intermediate : 1);
	/* the largest matrix a GEMM dequantizes (every layer matrix but the routed experts, which
	 * take the decode's gathered GEMVs) */
	size_t wb = 0;
	for (int l = 0; l < c->n_layers; l++) {
		const struct dlayer* L = &dm->layers[l];
		const struct dmat* ms[] = { &L->in_qkv, &L->in_z, &L->in_b, &L->in_a, &L->in_qkvz, &L->in_ba, &L->out_proj,
			                    &L->wq,     &L->wk,   &L->wv,   &L->wo,   &L->gate,    &L->up,    &L->down };
		for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
			const size_t e = mat_elems(ms[i]);
			wb = e > wb ? e : wb;
		}
	}
	p->wbuf_elems = wb;
	struct carve cv = { 0, NULL };
	layout(p, s, v, &cv);
	p->mem_bytes = cv.off;
	cudaError_t e = cudaMalloc((void**)&p->mem, p->mem_bytes);
	if (e != cudaSuccess) {
		p->mem = NULL;
		const int rows = p->R;
		p->R = 0;
		return pv_errf(err, errlen, "CUDA backend: cannot allocate %.2f GiB of prefill scratch (%d rows): %s", p->mem_bytes / 1073741824.0,
		               rows, cudaGetErrorString(e));
	}
	cv = (struct carve){ 0, p->mem };
	layout(p, s, v, &cv);
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
	if (pv_cublas_create(&p->blas, v->st, p->ws, WS_BYTES, err, errlen)) {
		free_scratch(p);
		return -1;
	}
	if (!p->ev0) {
		CU(cudaEventCreate(&p->ev0), err, errlen);
		CU(cudaEventCreate(&p->ev1), err, errlen);
	}
	CU(cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)attn_smem(c->head_dim)), err, errlen);
	v->stats->session_bytes += p->mem_bytes;
	return 0;
}

/* ---- launches ----------------------------------------------------------------------------- */

struct ctx {
	struct pv_prefill* p;
	const struct pv_prefill_view* v;
	struct pv_session* s;
	const struct pv_config* c;
	char* err;
	size_t errlen;
};

pv_units::Planes planes(const struct dmat* w)
{
	return pv_units::Planes{ w->p[0], w->p[1], w->p[2], w->stride[0], w->stride[1], w->stride[2], w->type };
}

/* Y[t][o] = sum_i X[t][i] W[o][i] for t < T (X bf16 [T][ldx], Y f32 [T][ldy]) */
int gemm(struct ctx* k, const struct dmat* W, const bf16* X, int ldx, float* Y, int ldy, int T)
{
	struct pv_prefill* p = k->p;
	const bf16* w;
	int ldw;
	if (W->type == PV_BF16) {
		w = reinterpret_cast<const bf16*>(W->p[0]);
		ldw = (int)(W->stride[0] / 2);
	} else {
		const int64_t total = W->rows * W->cols;
		if ((size_t)total > p->wbuf_elems || !p->wbuf)
			return pv_errf(k->err, k->errlen, "CUDA backend: prefill: a [%lld, %lld] matrix exceeds the dequantization buffer",
			               (long long)W->rows, (long long)W->cols);
		int64_t blocks = (total + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant", k->err, k->errlen, dequant_kernel, dim3((unsigned)blocks), dim3(256), 0, k->v->st, planes(W), W->rows,
		          (int)W->cols, p->wbuf);
		p->nl++;
		w = p->wbuf;
		ldw = (int)W->cols;
	}
	if (pv_cublas_gemm(p->blas, w, ldw, X, ldx, Y, ldy, (int)W->rows, T, (int)W->cols, 0.0f, k->err, k->errlen)) return -1;
	p->ng++;
	return 0;
}

int norm(struct ctx* k, float* x, const float* delta, float* xn, bf16* xb, const float* w, int T)
{
	const int H = k->c->hidden;
	PV_LAUNCH("prefill norm", k->err, k->errlen, norm_kernel, dim3((unsigned)T), dim3(NORM_THREADS), 0, k->v->st, x, delta, xn, xb,
	          k->p->ldh, w, H, k->c->rms_eps);
	k->p->nl++;
	return 0;
}

int bias(struct ctx* k, float* y, int ld, const float* b, int w, int T)
{
	if (!b) return 0;
	PV_LAUNCH("prefill bias", k->err, k->errlen, bias_kernel, dim3((unsigned)((w + 255) / 256), (unsigned)T), dim3(256), 0, k->v->st, y,
	          ld, b, w);
	k->p->nl++;
	return 0;
}

int attention_layer(struct ctx* k, const struct dlayer* L, int l, int ci, int pos0, int T)
{
	struct pv_prefill* p = k->p;
	const struct pv_prefill_view* v = k->v;
	const struct pv_config* c = k->c;
	const int H = c->hidden, kvd = pv_cfg_kv_dim(c);
	if (gemm(k, &L->wq, p->xb, p->ldh, p->qraw, v->ldq, T) || gemm(k, &L->wk, p->xb, p->ldh, p->kraw, kvd, T) ||
	    gemm(k, &L->wv, p->xb, p->ldh, p->vraw, kvd, T))
		return -1;
	if (bias(k, p->qraw, v->ldq, L->bq, (int)L->wq.rows, T) || bias(k, p->kraw, kvd, L->bk, kvd, T) ||
	    bias(k, p->vraw, kvd, L->bv, kvd, T))
		return -1;
	struct qkv_post_args a;
	a.qraw = p->qraw;
	a.kraw = p->kraw;
	a.vraw = p->vraw;
	a.ldq = v->ldq;
	a.gated = c->attn_gate;
	a.q_norm = L->q_norm;
	a.k_norm = L->k_norm;
	a.cos = v->cos;
	a.sin = v->sin;
	a.q = p->q;
	a.gate = p->gate;
	a.kc = v->kc[l];
	a.vc = v->vc[l];
	a.nh = c->n_heads;
	a.nkv = c->n_kv_heads;
	a.hd = c->head_dim;
	a.R = c->rope_dim;
	a.eps = c->rms_eps;
	a.step = p->steps + ci; /* pos0 of this chunk */
	if (pv_cuda_qkv_post(v->st, &a, T, k->err, k->errlen)) return -1;
	p->nl++;
	pattn_args b;
	b.q = p->q;
	b.kc = v->kc[l];
	b.vc = v->vc[l];
	b.gate = c->attn_gate ? p->gate : NULL;
	b.o = p->ob;
	b.ldo = p->ldo;
	b.T = T;
	b.pos0 = pos0;
	b.nh = c->n_heads;
	b.nkv = c->n_kv_heads;
	b.hd = c->head_dim;
	const int G = c->n_heads / c->n_kv_heads;
	b.bq = AQ / G;
	if (b.bq < 1 || c->head_dim % 4 || c->head_dim / 4 > MAX_HD4)
		return pv_errf(k->err, k->errlen, "CUDA backend: prefill attention: %d heads per kv head, head dim %d", G, c->head_dim);
	const dim3 grid((unsigned)((T + b.bq - 1) / b.bq), (unsigned)c->n_kv_heads);
	PV_LAUNCH("prefill attention", k->err, k->errlen, attn_kernel, grid, dim3(ATHREADS), attn_smem(c->head_dim), v->st, b);
	p->nl++;
	return gemm(k, &L->wo, p->ob, p->ldo, p->delta, H, T);
}

int deltanet_layer(struct ctx* k, const struct dlayer* L, int l, int T)
{
	struct pv_prefill* p = k->p;
	const struct pv_prefill_view* v = k->v;
	const struct pv_config* c = k->c;
	const int H = c->hidden, Hv = c->lin_v_heads, vd = pv_cfg_value_dim(c);
	struct delta_args a;
	memset(&a, 0, sizeof a);
	if (L->in_qkvz.type >= 0) {
		if (gemm(k, &L->in_qkvz, p->xb, p->ldh, p->mix, v->ld_raw, T) || gemm(k, &L->in_ba, p->xb, p->ldh, p->lab, 2 * Hv, T)) return -1;
		a.qkvz = 1;
		a.ba_grouped = 1;
	} else if (L->in_ba.type >= 0) {
		if (gemm(k, &L->in_qkv, p->xb, p->ldh, p->mix, v->ld_raw, T) || gemm(k, &L->in_z, p->xb, p->ldh, p->lz, vd, T) ||
		    gemm(k, &L->in_ba, p->xb, p->ldh, p->lab, 2 * Hv, T))
			return -1;
		a.ba_grouped = 1;
	} else {
		if (gemm(k, &L->in_qkv, p->xb, p->ldh, p->mix, v->ld_raw, T) || gemm(k, &L->in_z, p->xb, p->ldh, p->lz, vd, T) ||
		    gemm(k, &L->in_b, p->xb, p->ldh, p->lb, Hv, T) || gemm(k, &L->in_a, p->xb, p->ldh, p->la, Hv, T))
			return -1;
	}
	float* S = v->state + (size_t)v->lin_index[l] * pv_state_floats_per_layer(c);
	a.mix = p->mix;
	a.ld_mix = v->ld_raw;
	a.z = p->lz;
	a.b = p->lb;
	a.a = p->la;
	a.ab = p->lab;
	a.conv_w = L->conv_w;
	a.ssm_a = L->ssm_a;
	a.dt_bias = L->dt_bias;
	a.lin_norm = L->lin_norm;
	a.S = S;
	a.conv_state = S + (size_t)Hv * c->lin_k_dim * c->lin_v_dim;
	a.u = p->lu;
	a.o = p->lo;
	a.Hk = c->lin_k_heads;
	a.Hv = Hv;
	a.dk = c->lin_k_dim;
	a.dv = c->lin_v_dim;
	a.Kc = c->conv_kernel;
	a.v_tiled = c->v_head_tiled;
	a.n = T;
	a.eps = c->rms_eps;
	if (pv_cuda_deltanet(v->st, &a, k->err, k->errlen)) return -1;
	p->nl += 2;
	PV_LAUNCH("prefill cvt", k->err, k->errlen, cvt_kernel, dim3((unsigned)((vd + 255) / 256), (unsigned)T), dim3(256), 0, v->st, p->lo,
	          vd, p->ob, p->ldo, vd);
	p->nl++;
	return gemm(k, &L->out_proj, p->ob, p->ldo, p->delta, H, T);
}

/* Fallback for MoE FFNs: the decode's kernels (router GEMV, routing, gathered expert GEMVs, the
 * shared expert, combine) over 16-row groups of xn (f32), into delta. */
int moe_layer(struct ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	const struct pv_prefill_view* v = k->v;
	const struct pv_config* c = k->c;
	const int H = c->hidden, E = c->n_experts, kk = c->n_experts_used, Ie = c->moe_inter, Is = c->shared_inter;
	char* err = k->err;
	const size_t errlen = k->errlen;
	for (int g0 = 0; g0 < T; g0 += PV_CUDA_ROWS) {
		const int n = T - g0 < PV_CUDA_ROWS ? T - g0 : PV_CUDA_ROWS;
		const float* xg = p->xn + (size_t)g0 * H;
		struct moe_args a;
		memset(&a, 0, sizeof a);
		a.logits = v->rlog;
		a.idx = v->top_idx;
		a.w = v->top_w;
		a.eo = v->eo;
		a.sh = v->sho;
		a.sh_gate = L->sh_gate_w;
		a.xn = xg;
		a.out = p->delta + (size_t)g0 * H;
		a.E = E;
		a.k = kk;
		a.norm_topk = c->norm_topk;
		a.shared = L->sh_gate.type >= 0;
		a.H = H;
		a.n = n;
		struct gemv_out r[1] = { { &L->router, v->rlog, E, NULL } };
		if (pv_cuda_gemv(v->st, r, 1, xg, NULL, H, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
		if (pv_cuda_moe_route(v->st, &a, err, errlen)) return -1;
		p->nl++;
		struct gemv_gather ga = { v->top_idx, n * kk, kk, E, 0 };
		struct gemv_out gu[2] = { { &L->ex_gate, v->eg, Ie, NULL }, { &L->ex_up, v->eu, Ie, NULL } };
		if (pv_cuda_gemv_gather(v->st, gu, 2, xg, NULL, H, PV_X_PLAIN, 1, &ga, &p->nl, err, errlen)) return -1;
		if (pv_cuda_swiglu(v->st, v->eg, v->eu, Ie, Ie, n * kk, err, errlen)) return -1;
		p->nl++;
		ga.x_by_slot = 1;
		struct gemv_out dn[1] = { { &L->ex_down, v->eo, H, NULL } };
		if (pv_cuda_gemv_gather(v->st, dn, 1, v->eg, NULL, Ie, PV_X_PLAIN, 1, &ga, &p->nl, err, errlen)) return -1;
		if (a.shared) {
			struct gemv_out sgu[2] = { { &L->sh_gate, v->shg, Is, NULL }, { &L->sh_up, v->shu, Is, NULL } };
			if (pv_cuda_gemv(v->st, sgu, 2, xg, NULL, H, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
			if (pv_cuda_swiglu(v->st, v->shg, v->shu, Is, Is, n, err, errlen)) return -1;
			p->nl++;
			struct gemv_out sd[1] = { { &L->sh_down, v->sho, H, NULL } };
			if (pv_cuda_gemv(v->st, sd, 1, v->shg, NULL, Is, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
		}
		if (pv_cuda_moe_combine(v->st, &a, err, errlen)) return -1;
		p->nl++;
	}
	return 0;
}

int ffn_dense(struct ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	const int H = k->c->hidden, I = (int)L->gate.rows;
	const int ldg = k->c->intermediate;
	if (I != ldg || L->up.rows != I) return pv_errf(k->err, k->errlen, "CUDA backend: prefill: FFN width %d, config %d", I, ldg);
	if (gemm(k, &L->gate, p->xb, p->ldh, p->g, ldg, T) || gemm(k, &L->up, p->xb, p->ldh, p->u, ldg, T)) return -1;
	PV_LAUNCH("prefill swiglu", k->err, k->errlen, swiglu_kernel, dim3((unsigned)((I + 255) / 256), (unsigned)T), dim3(256), 0,
	          k->v->st, p->g, p->u, ldg, p->hb, p->ldf, I);
	p->nl++;
	return gemm(k, &L->down, p->hb, p->ldf, p->delta, H, T);
}

/* Rows [c0, c0 + T) of the call, chunk ci. */
int chunk(struct ctx* k, int ci, int c0, int T, int n, float* logits, int first_logit, int* have_id)
{
	struct pv_prefill* p = k->p;
	const struct pv_prefill_view* v = k->v;
	const struct pv_config* c = k->c;
	const struct dmodel* dm = v->dm;
	const int H = c->hidden, V = c->vocab;
	cudaStream_t st = v->st;
	char* err = k->err;
	const size_t errlen = k->errlen;
	{
		const struct dmat* E = &dm->embed;
		PV_LAUNCH("prefill embed", err, errlen, embed_kernel, dim3((unsigned)((H + 255) / 256), (unsigned)T), dim3(256), 0, st, planes(E),
		          p->tok + c0, p->x, H);
		p->nl++;
	}
	for (int l = 0; l < c->n_layers; l++) {
		const struct dlayer* L = &dm->layers[l];
		if (norm(k, p->x, l ? p->delta : NULL, NULL, p->xb, L->attn_norm, T)) return -1;
		if (c->layer_kind[l] == PV_LAYER_LINEAR) {
			if (deltanet_layer(k, L, l, T)) return -1;
		} else if (attention_layer(k, L, l, ci, k->s->len + c0, T)) {
			return -1;
		}
		const int moe = c->layer_moe[l];
		if (norm(k, p->x, p->delta, moe ? p->xn : NULL, moe ? NULL : p->xb, L->ffn_norm, T)) return -1;
		if (moe ? moe_layer(k, L, T) : ffn_dense(k, L, T)) return -1;
	}
	/* LM rows of this chunk: [r0, c0 + T) */
	if (!logits || first_logit >= c0 + T) return 0;
	const int r0 = first_logit > c0 ? first_logit : c0;
	if (norm(k, p->x + (size_t)(r0 - c0) * H, p->delta + (size_t)(r0 - c0) * H, p->xn, NULL, dm->final_norm, c0 + T - r0)) return -1;
	for (int g0 = r0; g0 < c0 + T; g0 += PV_CUDA_ROWS) {
		const int rows = c0 + T - g0 < PV_CUDA_ROWS ? c0 + T - g0 : PV_CUDA_ROWS;
		struct gemv_out o[1] = { { &dm->lm_head, v->logits, V, NULL } };
		if (pv_cuda_gemv(st, o, 1, p->xn + (size_t)(g0 - r0) * H, NULL, H, PV_X_PLAIN, rows, &p->nl, err, errlen)) return -1;
		CU(cudaMemcpyAsync(logits + (size_t)(g0 - first_logit) * V, v->logits, sizeof(float) * V * (size_t)rows, cudaMemcpyDeviceToHost,
		                   st),
		   err, errlen);
		v->stats->memcpys++;
		if (g0 + rows == n) {
			if (pv_cuda_argmax(st, v->logits, V, rows, v->ids, err, errlen)) return -1;
			p->nl++;
			CU(cudaMemcpyAsync(v->ids_host, v->ids + (rows - 1), sizeof(int), cudaMemcpyDeviceToHost, st), err, errlen);
			v->stats->memcpys++;
			*have_id = 1;
		}
	}
	return 0;
}

} // namespace

int pv_prefill_wanted(struct pv_prefill** pp, const struct pv_session* s, int n, int chunked)
{
	struct pv_prefill* p = get(pp);
	if (!p->on || n <= PV_CUDA_ROWS || n < s->chunk_min) return 0;
	if (s->state_floats && !chunked) return 0; /* DeltaNet models: the session's rule (never a rollback replay) */
	const char* why = NULL;
	if (!pv_cublas_load(&why)) {
		static int told;
		if (!told) {
			told = 1;
			fprintf(stderr, "proven: cuda: no cuBLAS (%s): prompts use the 16-row GEMV path\n", why ? why : "?");
		}
		return 0;
	}
	return 1;
}

int pv_prefill_forward(struct pv_prefill** pp, struct pv_session* s, const struct pv_prefill_view* v, const int32_t* tokens,
                       int n, float* logits, int first_logit, int* have_id, char* err, size_t errlen)
{
	struct pv_prefill* p = get(pp);
	*have_id = 0;
	if (ensure(p, s, v, err, errlen)) return -1;
	if (n > p->max_rows) return pv_errf(err, errlen, "CUDA backend: prefill of %d rows above max_batch %d", n, p->max_rows);
	const int nch = (n + p->R - 1) / p->R;
	p->nl = 0;
	p->ng = 0;
	/* the host buffers are free: the previous call ended with a synchronisation */
	for (int i = 0; i < n; i++) p->tok_host[i] = tokens[i];
	for (int i = 0; i < nch; i++) {
		p->steps_host[i].pos0 = s->len + i * p->R;
		p->steps_host[i].n = n - i * p->R < p->R ? n - i * p->R : p->R;
	}
	CU(cudaEventRecord(p->ev0, v->st), err, errlen);
	CU(cudaMemcpyAsync(p->tok, p->tok_host, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, v->st), err, errlen);
	CU(cudaMemcpyAsync(p->steps, p->steps_host, sizeof(struct dstep) * (size_t)nch, cudaMemcpyHostToDevice, v->st), err, errlen);
	v->stats->memcpys += 2;
	struct ctx k = { p, v, s, &s->m->cfg, err, errlen };
	int rc = 0;
	for (int ci = 0; ci < nch && !rc; ci++) {
		const int c0 = ci * p->R;
		rc = chunk(&k, ci, c0, p->steps_host[ci].n, n, logits, first_logit, have_id);
	}
	v->stats->direct_kernels += (uint64_t)p->nl;
	v->stats->prefill_kernels += (uint64_t)p->nl;
	v->stats->prefill_gemms += (uint64_t)p->ng;
	v->stats->prefill_calls++;
	v->stats->prefill_tokens += (uint64_t)n;
	if (rc) return -1;
	CU(cudaEventRecord(p->ev1, v->st), err, errlen);
	p->timed = 1;
	return 0;
}

void pv_prefill_account(struct pv_prefill* p, struct pv_cuda_session_stats* st)
{
	if (!p || !p->timed) return;
	p->timed = 0;
	float ms = 0;
	if (cudaEventElapsedTime(&ms, p->ev0, p->ev1) == cudaSuccess) st->prefill_gpu_ms += ms;
}

void pv_prefill_set(struct pv_prefill** pp, int on, int chunk_rows)
{
	struct pv_prefill* p = get(pp);
	p->on = on != 0;
	const int want = chunk_rows > 0 ? chunk_rows : DEFAULT_CHUNK;
	if (want != p->chunk) {
		free_scratch(p);
		p->chunk = want;
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
