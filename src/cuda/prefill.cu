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
 * (tests/cuda/test_cuda.c, section prefill).
 */
#include "prefill.cuh"
#include "units.cuh"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

struct pv_prefill {
	int on, chunk, chunk0;    /* settings; chunk0: the default (PV_CUDA_PREFILL_CHUNK or 1024)  */
	int split;                /* precise mode: every GEMM input as bf16 hi + lo (two GEMMs), the
	                           * f32 attention (pv_cuda_set_prefill on = 2, PV_CUDA_PREFILL=2)   */
	bf16 *xl, *ol, *hl, *ehl, *shl; /* the low halves of xb, ob, hb, ehb, shb (precise mode)   */
	int attn_f32;             /* attention on the CUDA cores (PV_CUDA_PREFILL_ATTN=f32), else mma */
	int moe_gemv;             /* MoE experts by the decode's gathered GEMVs (PV_CUDA_PREFILL_MOE=gemv) */
	int delta_rec;            /* DeltaNet rule: 0 four lanes per column (default), 1 the decode's one-block-per-head
	                           * kernels (PV_CUDA_PREFILL_DELTA=decode), 2 a lane per column, bitwise the decode's
	                           * (PV_CUDA_PREFILL_DELTA=cols) */
	int R, max_rows, n_steps; /* scratch rows (0: not allocated), tokens and steps it holds   */
	unsigned char* mem;
	size_t mem_bytes;
	unsigned char* pinned;
	void* blas;
	char fallback[192];       /* why the path is off for this session ("" while it is on)      */
	int prepared;             /* pv_prefill_prepare ran                                        */
	int broken;               /* its set-up failed: the path is off for this session           */
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
	/* MoE (grouped expert GEMMs): router logits [R][E], top-k [R][k] ids and weights, the slots
	 * (q = t k + j) sorted by expert, per-expert offsets [E+1], row tiles (expert, first sorted
	 * slot) and their count; per-slot expert gate/up [R k][Ie], product [R k][ldie] bf16, outputs
	 * [R k][H]; the shared expert's gate/up [R][Is], product [R][ldis] bf16, output [R][H] */
	float *rlog, *tw, *eg, *eu, *eo, *sg, *su, *so;
	int *tidx, *perm, *eoff, *ntiles;
	int2* tiles;
	bf16 *ehb, *shb;
	int ldie, ldis, moe_gemm;
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

/* hi[i] = bf16(y); lo[i] = bf16(y - hi[i]) unless lo is NULL (the precise mode: the pair carries
 * ~16 significant bits; y - hi is exact in f32) */
__device__ __forceinline__ void put_bf16(bf16* hi, bf16* lo, size_t i, float y)
{
	const bf16 h = __float2bfloat16_rn(y);
	hi[i] = h;
	if (lo) lo[i] = __float2bfloat16_rn(y - __bfloat162float(h));
}

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

/* y[t][i] = bf16(x[t][i]), i < w */
__global__ void cvt_kernel(const float* x, int ldx, bf16* y, bf16* yl, int ldy, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i < w) put_bf16(y, yl, (size_t)t * ldy + i, x[(size_t)t * ldx + i]);
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

/* The same for Q8_0 (planes: qs [rows][nb * 32] int8, d [rows][nb] f16), a thread per block of
 * 32: the scale read once, two 16-byte loads, the values dq_elem gives ((float)q * d), four
 * 16-byte stores (out ld = cols = 32 nb, so every row and block is 64-byte aligned). */
__global__ void dequant_q8_kernel(pv_units::Planes m, int64_t rows, int nb, bf16* out)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int64_t total = rows * nb;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / nb;
		const int b = (int)(i - r * nb);
		const float d = pv_units::f16f(pv_units::u16at(m.p1 + (size_t)r * m.s1 + (size_t)b * 2));
		const uint4* q = reinterpret_cast<const uint4*>(m.p0 + (size_t)r * m.s0 + (size_t)b * 32);
		const uint4 q0 = __ldg(q), q1 = __ldg(q + 1);
		uint32_t o[16];
#pragma unroll
		for (int j = 0; j < 16; j++) {
			const uint32_t wd = pv_units::word(j < 8 ? q0 : q1, (j & 7) >> 1);
			const int sh = 16 * (j & 1);
			const float lo = __fmul_rn((float)(int)(signed char)((wd >> sh) & 0xffu), d);
			const float hi = __fmul_rn((float)(int)(signed char)((wd >> (sh + 8)) & 0xffu), d);
			const __nv_bfloat162 h2 = __floats2bfloat162_rn(lo, hi); /* .x: the lower element */
			o[j] = *reinterpret_cast<const uint32_t*>(&h2);
		}
		uint4* dst = reinterpret_cast<uint4*>(out + (size_t)r * (size_t)nb * 32 + (size_t)b * 32);
		dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
		dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
		dst[2] = make_uint4(o[8], o[9], o[10], o[11]);
		dst[3] = make_uint4(o[12], o[13], o[14], o[15]);
	}
}

/* byte i (0..31) of two 16-byte vectors */
__device__ __forceinline__ int byte32(const uint4& a, const uint4& b, int i)
{
	return (int)((pv_units::word(i < 16 ? a : b, (i & 15) >> 2) >> (8 * (i & 3))) & 0xffu);
}

/* Q4_K (stored blocks of 144 bytes per 256) and Q6_K (planes: ql|qh [rows][nb * 192], scales
 * [rows][nb * 16] int8, d [rows][nb] f16), a thread per group of 32 elements (one Q4_K sub-block,
 * one Q6_K (half, quarter)): the scale and minimum decoded once, the element expressions of
 * dq_elem, operation for operation; out ld = cols (a multiple of 256). */
__global__ void dequant_k_kernel(pv_units::Planes m, int64_t rows, int cols, bf16* out)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int ng = cols / 32;
	const int64_t total = rows * ng;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / ng;
		const int c0 = 32 * (int)(i - r * ng), sb = c0 / 256, w0 = c0 % 256;
		const unsigned char* r0 = m.p0 + (size_t)r * m.s0;
		float f[32];
		if (m.type == PV_Q4_K) {
			const unsigned char* b = r0 + (size_t)sb * 144;
			const int s = w0 / 32;
			const float d = pv_units::f16f(pv_units::u16at(b)), dmin = pv_units::f16f(pv_units::u16at(b + 2));
			const unsigned char* q = b + 4;
			int sc, mn;
			if (s < 4) {
				sc = q[s] & 63;
				mn = q[s + 4] & 63;
			} else {
				sc = (q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4);
				mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
			}
			const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
			const uint4* qv = reinterpret_cast<const uint4*>(b + 16 + 32 * (s >> 1));
			const uint4 a0 = __ldg(qv), a1 = __ldg(qv + 1);
#pragma unroll
			for (int l = 0; l < 32; l++) {
				const int v = (byte32(a0, a1, l) >> (4 * (s & 1))) & 0xf;
				f[l] = __fsub_rn(__fmul_rn(d1, (float)v), m1);
			}
		} else { /* PV_Q6_K */
			const int h = w0 / 128, k = (w0 % 128) / 32;
			const uint4* ql = reinterpret_cast<const uint4*>(r0 + (size_t)sb * 192 + 64 * h + 32 * (k & 1));
			const uint4* qh = reinterpret_cast<const uint4*>(r0 + (size_t)sb * 192 + 128 + 32 * h);
			const uint4 l0 = __ldg(ql), l1 = __ldg(ql + 1), h0 = __ldg(qh), h1 = __ldg(qh + 1);
			const signed char* scp = reinterpret_cast<const signed char*>(m.p1 + (size_t)r * m.s1 + (size_t)sb * 16 + 8 * h);
			const float d = pv_units::f16f(pv_units::u16at(m.p2 + (size_t)r * m.s2 + (size_t)sb * 2));
			const float ds0 = __fmul_rn(d, (float)scp[2 * k]), ds1 = __fmul_rn(d, (float)scp[2 * k + 1]);
#pragma unroll
			for (int l = 0; l < 32; l++) {
				const int qlb = byte32(l0, l1, l);
				const int nib = k < 2 ? (qlb & 0xf) : (qlb >> 4);
				const int q = (nib | ((byte32(h0, h1, l) >> (2 * k)) & 3) << 4) - 32;
				f[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)q);
			}
		}
		uint4* dst = reinterpret_cast<uint4*>(out + (size_t)r * cols + c0);
#pragma unroll
		for (int v4 = 0; v4 < 4; v4++) {
			uint32_t o[4];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const __nv_bfloat162 h2 = __floats2bfloat162_rn(f[8 * v4 + 2 * j], f[8 * v4 + 2 * j + 1]);
				o[j] = *reinterpret_cast<const uint32_t*>(&h2);
			}
			dst[v4] = make_uint4(o[0], o[1], o[2], o[3]);
		}
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
	bf16 *o, *ol;            /* [T][ldo]; ol: the low halves (precise mode) or NULL            */
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
				put_bf16(a.o, a.ol, (size_t)t * a.ldo + (size_t)h * hd + d, o[c]);
			}
		}
	}
}

/*
 * The same attention on the tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation), the
 * FlashAttention-2 scheme. Block (row tile, kv head kh), 8 warps, MQ = 128 query vectors (the G
 * heads of kh for BQ = 128 / G consecutive rows, vector r: row t0 + r / G, head kh * G + r % G;
 * 128 rather than 64 halves how often the K/V prefix is read and converted for long prompts);
 * warp w owns vectors 16 w .. 16 w + 15. Head dims are padded with zeros to HP = 16 NT (NT k-steps).
 * Shared memory, f16, rows of HS = HP + 8 halves (16-byte rows for ldmatrix, 8 rows on 8 distinct
 * bank groups): Q [MQ][HS] (scaled by 1/sqrt(hd) before rounding), K [64][HS], V [64][HS]
 * (hd 128: 70 KB, hd 256: 135 KB).
 * Per key tile of 64 positions (in order, up to the block's last row):
 *   S = Q K^T: 16 x 64 per warp, 8 n-tiles x NT k-steps; A (Q) and B (K, stored [key][d] =
 *   the "col" operand) by ldmatrix.x4;
 *   keys after a row's position are -inf; online softmax per row on f32 (the 4 lanes of a row
 *   group combined by xor 1, 2), P rounded to f16 and reused in registers as the A operand of
 *   O += P V (the C layout of two n-tiles is the A layout of one k-step); V by ldmatrix.x4.trans.
 * Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, c = lane % 4): A regs {row g, cols 2c..2c+1},
 * {row g+8, same}, {row g, cols 2c+8..}, {row g+8, cols 2c+8..}; B regs {k 2c..2c+1, n g},
 * {k 2c+8.., n g}; C {row g, cols 2c, 2c+1}, {row g+8, cols 2c, 2c+1}.
 * Deterministic (the mma order is fixed); f16 rounding of q, k, v and p is the tolerance cost.
 */
constexpr int MQ = 128, MK = 64, MTHREADS = 256; /* MTHREADS = 32 x MQ / 16 */

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const __half* p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t* r, const __half* p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

/* d += a b (m16n8k16, f16 in, f32 accumulate) */
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
	const __half2 h = __floats2half2_rn(lo, hi); /* .x (low 16 bits) = lo */
	return *reinterpret_cast<const uint32_t*>(&h);
}

size_t mma_smem(int NT) { return sizeof(__half) * (size_t)(MQ + 2 * MK) * (size_t)(16 * NT + 8); }

template <int NT>
__global__ void __launch_bounds__(MTHREADS) attn_mma_kernel(const __grid_constant__ pattn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	constexpr int HP = 16 * NT, HS = HP + 8;
	extern __shared__ float4 sm4[];
	__half* Qs = reinterpret_cast<__half*>(sm4); /* [MQ][HS] */
	__half* Ks = Qs + MQ * HS;                   /* [MK][HS] */
	__half* Vs = Ks + MK * HS;                   /* [MK][HS] */
	const int hd = a.hd, G = a.nh / a.nkv, kvd = a.nkv * hd, qd = a.nh * hd;
	const int kh = blockIdx.y, t0 = blockIdx.x * a.bq;
	const int nr = min(a.bq, a.T - t0), nq = nr * G;
	const int last = a.pos0 + t0 + nr - 1;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
	const float scale = 1.0f / sqrtf((float)hd);

	for (int i = tid; i < MQ * (HP / 2); i += MTHREADS) {
		const int r = i / (HP / 2), d = 2 * (i - r * (HP / 2));
		float x0 = 0.0f, x1 = 0.0f;
		if (r < nq && d < hd) { /* hd is a multiple of 4: d + 1 < hd too */
			const float* q = a.q + (size_t)(t0 + r / G) * qd + (size_t)(kh * G + r % G) * hd;
			x0 = q[d] * scale;
			x1 = q[d + 1] * scale;
		}
		*reinterpret_cast<__half2*>(Qs + r * HS + d) = __floats2half2_rn(x0, x1);
	}
	const int ra = warp * 16 + g, rb = ra + 8; /* this thread's two query vectors */
	const int pa = a.pos0 + t0 + (ra < nq ? ra / G : 0), pb = a.pos0 + t0 + (rb < nq ? rb / G : 0);
	float o[2 * NT][4];
#pragma unroll
	for (int i = 0; i < 2 * NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

	for (int j0 = 0; j0 <= last; j0 += MK) {
		__syncthreads(); /* Q written; the previous tile's K and V consumed */
		for (int i = tid; i < MK * (HP / 4); i += MTHREADS) {
			const int j = i / (HP / 4), d = 4 * (i - j * (HP / 4));
			float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
			if (j0 + j <= last && d < hd) {
				const size_t off = (size_t)(j0 + j) * kvd + (size_t)kh * hd + d;
				kv = __ldg(reinterpret_cast<const float4*>(a.kc + off));
				vv = __ldg(reinterpret_cast<const float4*>(a.vc + off));
			}
			*reinterpret_cast<uint2*>(Ks + j * HS + d) = make_uint2(pack_h2(kv.x, kv.y), pack_h2(kv.z, kv.w));
			*reinterpret_cast<uint2*>(Vs + j * HS + d) = make_uint2(pack_h2(vv.x, vv.y), pack_h2(vv.z, vv.w));
		}
		__syncthreads();
		float s[8][4];
#pragma unroll
		for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < NT; kk++) {
			uint32_t qa[4];
			ldsm_x4(qa, Qs + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * HS + 16 * kk + 8 * (lane >> 4));
#pragma unroll
			for (int n2 = 0; n2 < 4; n2++) {
				uint32_t kb[4];
				ldsm_x4(kb, Ks + (16 * n2 + (lane & 7) + 8 * (lane >> 4)) * HS + 16 * kk + 8 * ((lane >> 3) & 1));
				mma16816(s[2 * n2], qa, kb[0], kb[1]);
				mma16816(s[2 * n2 + 1], qa, kb[2], kb[3]);
			}
		}
		float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int key = j0 + 8 * nt + 2 * c + e;
				if (key > pa) s[nt][e] = -INFINITY;
				if (key > pb) s[nt][2 + e] = -INFINITY;
				mxa = fmaxf(mxa, s[nt][e]);
				mxb = fmaxf(mxb, s[nt][2 + e]);
			}
		mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
		mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
		mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
		mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
		const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb); /* finite: tile 0 holds key 0 */
		const float aa = expf(ma - na), ab = expf(mb - nb);
		float sa = 0.0f, sb = 0.0f;
#pragma unroll
		for (int nt = 0; nt < 8; nt++) {
			s[nt][0] = expf(s[nt][0] - na);
			s[nt][1] = expf(s[nt][1] - na);
			s[nt][2] = expf(s[nt][2] - nb);
			s[nt][3] = expf(s[nt][3] - nb);
			sa = sa + s[nt][0];
			sa = sa + s[nt][1];
			sb = sb + s[nt][2];
			sb = sb + s[nt][3];
		}
		sa = sa + __shfl_xor_sync(0xffffffffu, sa, 1);
		sa = sa + __shfl_xor_sync(0xffffffffu, sa, 2);
		sb = sb + __shfl_xor_sync(0xffffffffu, sb, 1);
		sb = sb + __shfl_xor_sync(0xffffffffu, sb, 2);
		la = la * aa + sa;
		lb = lb * ab + sb;
		ma = na;
		mb = nb;
#pragma unroll
		for (int i = 0; i < 2 * NT; i++) {
			o[i][0] = o[i][0] * aa;
			o[i][1] = o[i][1] * aa;
			o[i][2] = o[i][2] * ab;
			o[i][3] = o[i][3] * ab;
		}
#pragma unroll
		for (int ks = 0; ks < MK / 16; ks++) {
			uint32_t pf[4] = { pack_h2(s[2 * ks][0], s[2 * ks][1]), pack_h2(s[2 * ks][2], s[2 * ks][3]),
				           pack_h2(s[2 * ks + 1][0], s[2 * ks + 1][1]), pack_h2(s[2 * ks + 1][2], s[2 * ks + 1][3]) };
#pragma unroll
			for (int d2 = 0; d2 < NT; d2++) {
				uint32_t vb[4];
				ldsm_x4_t(vb, Vs + (16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1)) * HS + 16 * d2 + 8 * (lane >> 4));
				mma16816(o[2 * d2], pf, vb[0], vb[1]);
				mma16816(o[2 * d2 + 1], pf, vb[2], vb[3]);
			}
		}
	}
	const float ia = 1.0f / la, ib = 1.0f / lb;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int r = half ? rb : ra;
		if (r >= nq) continue;
		const int t = t0 + r / G, h = kh * G + r % G;
		const float inv = half ? ib : ia;
#pragma unroll
		for (int i = 0; i < 2 * NT; i++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int d = 8 * i + 2 * c + e;
				if (d >= hd) continue;
				float v = o[i][2 * half + e] * inv;
				if (a.gate) {
					const float gt = a.gate[(size_t)t * qd + (size_t)h * hd + d];
					v = v * (1.0f / (1.0f + expf(-gt))); /* pv_sigmoid, as forward.c */
				}
				put_bf16(a.o, a.ol, (size_t)t * a.ldo + (size_t)h * hd + d, v);
			}
	}
}

typedef void (*attn_fn)(pattn_args);

/* the tensor-core kernel for head dims padded to 16 NT (NT 1-8, 16), else NULL */
attn_fn mma_kernel(int NT)
{
	switch (NT) {
	case 1: return attn_mma_kernel<1>;
	case 2: return attn_mma_kernel<2>;
	case 3: return attn_mma_kernel<3>;
	case 4: return attn_mma_kernel<4>;
	case 5: return attn_mma_kernel<5>;
	case 6: return attn_mma_kernel<6>;
	case 7: return attn_mma_kernel<7>;
	case 8: return attn_mma_kernel<8>;
	case 16: return attn_mma_kernel<16>;
	default: return NULL;
	}
}

/* ---- Gated DeltaNet over T rows ----------------------------------------------------------- */

/*
 * The decode kernels' arithmetic (deltanet.cu), spread wider, so u, o and the state come out
 * bitwise as deltanet.cu's conv + recurrent kernels give them for the same projections:
 *   conv:  one thread per (row, channel) (the rows are independent: a row reads the inputs and
 *          the saved window, never outputs), the same sum over tau in order, then SiLU; the
 *          window update (rows n .. n+P-1 of [state; inputs]) in a second kernel after it;
 *   delta: the state columns are independent (S^T k, the update and S^T q touch column j
 *          alone), so a block is one warp owning 32 columns of one value head, each lane its
 *          column of S in registers (DK floats); per row the q/k l2 norms by the same fixed tree
 *          as the decode's 128-thread block sum (four warp butterflies over elements
 *          lane + 32 w, added in w order), beta, decay and the column's two fmaf-free chains over
 *          i in order, as deltanet.cu; the next row's inputs are loaded before the current row
 *          is computed; o before the norm goes to oraw;
 *   norm:  the gated RMSNorm per (row, head) by a 128-thread block with the decode's block sum,
 *          times silu(z), written as bf16 for out_proj.
 * The grid has Hv x dv/32 warps instead of Hv blocks of 128 threads walking the rows.
 */
__global__ void dconv_kernel(const __grid_constant__ delta_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int ch = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	const int cd = 2 * a.Hk * a.dk + a.Hv * a.dv, K = a.Kc, P = K - 1;
	if (ch >= cd) return;
	const int sc = pv_delta_src_col(a, ch);
	const float* w = a.conv_w + (size_t)ch * K;
	float acc = 0.0f;
	for (int tau = 0; tau < K; tau++) {
		const int src = t - P + tau; /* negative rows come from the state */
		const float xv = src < 0 ? a.conv_state[(size_t)(P + src) * cd + ch] : a.mix[(size_t)src * a.ld_mix + sc];
		acc = acc + w[tau] * xv;
	}
	a.u[(size_t)t * cd + ch] = pv_d_silu(acc);
}

__global__ void dconv_state_kernel(const __grid_constant__ delta_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int ch = blockIdx.x * blockDim.x + threadIdx.x;
	const int cd = 2 * a.Hk * a.dk + a.Hv * a.dv, P = a.Kc - 1;
	if (ch >= cd) return;
	const int sc = pv_delta_src_col(a, ch);
	for (int p = 0; p < P; p++) { /* row p is written after it is read (ci >= p) */
		const int ci = a.n + p;
		a.conv_state[(size_t)p * cd + ch] = ci < P ? a.conv_state[(size_t)ci * cd + ch] : a.mix[(size_t)(ci - P) * a.ld_mix + sc];
	}
}

template <int DK>
__global__ void __launch_bounds__(32) dcols_kernel(const __grid_constant__ delta_args a, float* oraw)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	constexpr int NG = (DK + 31) / 32;
	__shared__ __align__(16) float qs[NG * 32], ks[NG * 32];
	const int lane = threadIdx.x, h = blockIdx.y, j = blockIdx.x * 32 + lane;
	const int dk = DK, dv = a.dv, Hk = a.Hk, Hv = a.Hv, r = Hv / Hk;
	const int kd = Hk * dk, cd = 2 * kd + Hv * dv, vd = Hv * dv;
	const int kh = a.v_tiled ? h % Hk : h / r;
	const bool col = j < dv;
	float* S = a.S + (size_t)h * dk * dv;
	float st[DK];
#pragma unroll
	for (int i = 0; i < DK; i++) st[i] = col ? S[(size_t)i * dv + j] : 0.0f;
	const float qscale = 1.0f / sqrtf((float)dk);
	const float sa = a.ssm_a[h], db = a.dt_bias[h];
	/* inputs of row t: q, k elements lane + 32 w, v of column j, the beta and decay inputs */
	float qn[NG], kn[NG], vn = 0.0f, bn = 0.0f, gn = 0.0f;
	auto load = [&](int t) {
		const float* u = a.u + (size_t)t * cd;
#pragma unroll
		for (int w = 0; w < NG; w++) {
			const int e = lane + 32 * w;
			qn[w] = e < dk ? u[(size_t)kh * dk + e] : 0.0f;
			kn[w] = e < dk ? u[kd + (size_t)kh * dk + e] : 0.0f;
		}
		vn = col ? u[2 * kd + (size_t)h * dv + j] : 0.0f;
		if (a.ba_grouped) {
			const int grp = h / r, jj = h % r;
			bn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + jj];
			gn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + r + jj];
		} else {
			bn = a.b[(size_t)t * Hv + h];
			gn = a.a[(size_t)t * Hv + h];
		}
	};
	if (a.n > 0) load(0);
	for (int t = 0; t < a.n; t++) {
		/* the decode's block_sum: warp butterflies over elements lane + 32 w, then w in order
		 * (its warps past dk add zeros) */
		float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
		for (int w = 0; w < NG; w++) {
			const float sq = pv_warp_sum(qn[w] * qn[w]), sk = pv_warp_sum(kn[w] * kn[w]);
			ssq = w ? ssq + sq : sq;
			ssk = w ? ssk + sk : sk;
		}
		__syncwarp(); /* the previous row's qs/ks are consumed */
#pragma unroll
		for (int w = 0; w < NG; w++) {
			qs[lane + 32 * w] = qn[w] * (qscale / sqrtf(ssq + 1e-6f));
			ks[lane + 32 * w] = kn[w] * (1.0f / sqrtf(ssk + 1e-6f));
		}
		__syncwarp();
		const float v = vn, b = bn, g = gn;
		if (t + 1 < a.n) load(t + 1); /* in flight while this row is computed */
		const float beta = pv_d_sigmoid(b);
		const float decay = expf(sa * pv_d_softplus(g + db));
		/* (the empty asm statements keep the compiler from hoisting every qs/ks load to the
		 * top, which would need another 2 DK registers next to the column's DK) */
		float m = 0.0f;
#pragma unroll
		for (int i = 0; i < DK; i++) {
			if (i % 8 == 0) asm volatile("" ::: "memory");
			const float x = st[i] * decay;
			st[i] = x;
			m = m + ks[i] * x;
		}
		const float d = beta * (v - m);
		float o = 0.0f;
#pragma unroll
		for (int i = 0; i < DK; i++) {
			if (i % 8 == 0) asm volatile("" ::: "memory");
			const float x = st[i] + ks[i] * d;
			st[i] = x;
			o = o + qs[i] * x;
		}
		if (col) oraw[(size_t)t * vd + (size_t)h * dv + j] = o;
	}
	if (col)
#pragma unroll
		for (int i = 0; i < DK; i++) S[(size_t)i * dv + j] = st[i];
}

/*
 * The default delta rule over T rows (faster, not bitwise the decode's): four lanes per state
 * column, lane c of a column's group owning rows i in [c DK/4, (c+1) DK/4) of it (DK/4 floats in
 * registers), so each row's two dependent chains are DK/4 long instead of DK; a warp = 8 columns,
 * Hv x dv/8 warps. Per row: the q/k norms as in dcols_kernel, then per lane partial sums over its
 * rows in order, combined by xor 1 then xor 2 inside the group of 4 lanes (every lane of the group
 * ends with the same value, a fixed tree). qs/ks are stored [4][DK/4 + 1] so the four groups'
 * reads fall in distinct banks.
 */
template <int DK>
__global__ void __launch_bounds__(32) dquad_kernel(const __grid_constant__ delta_args a, float* oraw)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	constexpr int NG = (DK + 31) / 32, Q = DK / 4, QS = Q + 1;
	__shared__ float qs[4 * QS], ks[4 * QS];
	const int lane = threadIdx.x, c = lane & 3, h = blockIdx.y, j = blockIdx.x * 8 + (lane >> 2);
	const int dk = DK, dv = a.dv, Hk = a.Hk, Hv = a.Hv, r = Hv / Hk;
	const int kd = Hk * dk, cd = 2 * kd + Hv * dv, vd = Hv * dv;
	const int kh = a.v_tiled ? h % Hk : h / r;
	const bool col = j < dv;
	float* S = a.S + (size_t)h * dk * dv;
	float st[Q];
#pragma unroll
	for (int i = 0; i < Q; i++) st[i] = col ? S[(size_t)(c * Q + i) * dv + j] : 0.0f;
	const float qscale = 1.0f / sqrtf((float)dk);
	const float sa = a.ssm_a[h], db = a.dt_bias[h];
	float qn[NG], kn[NG], vn = 0.0f, bn = 0.0f, gn = 0.0f;
	auto load = [&](int t) {
		const float* u = a.u + (size_t)t * cd;
#pragma unroll
		for (int w = 0; w < NG; w++) {
			const int e = lane + 32 * w;
			qn[w] = e < dk ? u[(size_t)kh * dk + e] : 0.0f;
			kn[w] = e < dk ? u[kd + (size_t)kh * dk + e] : 0.0f;
		}
		vn = col ? u[2 * kd + (size_t)h * dv + j] : 0.0f;
		if (a.ba_grouped) {
			const int grp = h / r, jj = h % r;
			bn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + jj];
			gn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + r + jj];
		} else {
			bn = a.b[(size_t)t * Hv + h];
			gn = a.a[(size_t)t * Hv + h];
		}
	};
	if (a.n > 0) load(0);
	for (int t = 0; t < a.n; t++) {
		float ssq = 0.0f, ssk = 0.0f;
#pragma unroll
		for (int w = 0; w < NG; w++) {
			const float sq = pv_warp_sum(qn[w] * qn[w]), sk = pv_warp_sum(kn[w] * kn[w]);
			ssq = w ? ssq + sq : sq;
			ssk = w ? ssk + sk : sk;
		}
		__syncwarp(); /* the previous row's qs/ks are consumed */
#pragma unroll
		for (int w = 0; w < NG; w++) {
			const int e = lane + 32 * w;
			if (e < dk) {
				qs[(e / Q) * QS + e % Q] = qn[w] * (qscale / sqrtf(ssq + 1e-6f));
				ks[(e / Q) * QS + e % Q] = kn[w] * (1.0f / sqrtf(ssk + 1e-6f));
			}
		}
		__syncwarp();
		const float v = vn, b = bn, g = gn;
		if (t + 1 < a.n) load(t + 1); /* in flight while this row is computed */
		const float beta = pv_d_sigmoid(b);
		const float decay = expf(sa * pv_d_softplus(g + db));
		const float* kq = ks + c * QS;
		const float* qq = qs + c * QS;
		float m = 0.0f;
#pragma unroll
		for (int i = 0; i < Q; i++) {
			const float x = st[i] * decay;
			st[i] = x;
			m = m + kq[i] * x;
		}
		m = m + __shfl_xor_sync(0xffffffffu, m, 1);
		m = m + __shfl_xor_sync(0xffffffffu, m, 2);
		const float d = beta * (v - m);
		float o = 0.0f;
#pragma unroll
		for (int i = 0; i < Q; i++) {
			const float x = st[i] + kq[i] * d;
			st[i] = x;
			o = o + qq[i] * x;
		}
		o = o + __shfl_xor_sync(0xffffffffu, o, 1);
		o = o + __shfl_xor_sync(0xffffffffu, o, 2);
		if (col && c == 0) oraw[(size_t)t * vd + (size_t)h * dv + j] = o;
	}
	if (col)
#pragma unroll
		for (int i = 0; i < Q; i++) S[(size_t)(c * Q + i) * dv + j] = st[i];
}

constexpr int DNORM_THREADS = 128; /* deltanet.cu's THREADS: the same block-sum tree */

__global__ void __launch_bounds__(DNORM_THREADS) dnorm_kernel(const __grid_constant__ delta_args a, const float* oraw, bf16* ob, bf16* obl,
                                                               int ldo)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[DNORM_THREADS / 32];
	const int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
	const int dk = a.dk, dv = a.dv, Hv = a.Hv, r = Hv / a.Hk, vd = Hv * dv;
	const bool col = j < dv;
	const float o = col ? oraw[(size_t)t * vd + (size_t)h * dv + j] : 0.0f;
	float v = pv_warp_sum(col ? o * o : 0.0f);
	if ((j & 31) == 0) red[j >> 5] = v;
	__syncthreads();
	float ss = red[0];
	for (int i = 1; i < DNORM_THREADS / 32; i++) ss = ss + red[i];
	if (!col) return;
	const float rr = 1.0f / sqrtf(ss / (float)dv + a.eps);
	const float y = (o * rr) * a.lin_norm[j];
	float z;
	if (a.qkvz) {
		const int gw = 2 * dk + 2 * r * dv, e = h * dv + j;
		z = a.mix[(size_t)t * a.ld_mix + (e / (r * dv)) * gw + 2 * dk + r * dv + e % (r * dv)];
	} else {
		z = a.z[(size_t)t * vd + (size_t)h * dv + j];
	}
	put_bf16(ob, obl, (size_t)t * ldo + (size_t)h * dv + j, y * pv_d_silu(z));
}

typedef void (*dcols_fn)(delta_args, float*);

/* quad: the 4-lanes-per-column kernel (default), else the bitwise-decode column kernel */
dcols_fn dcols_kernel_for(int dk, int quad)
{
	if (quad) switch (dk) {
		case 16: return dquad_kernel<16>;
		case 32: return dquad_kernel<32>;
		case 64: return dquad_kernel<64>;
		case 128: return dquad_kernel<128>;
		default: return NULL;
		}
	switch (dk) {
	case 16: return dcols_kernel<16>;
	case 32: return dcols_kernel<32>;
	case 64: return dcols_kernel<64>;
	case 128: return dcols_kernel<128>;
	default: return NULL;
	}
}

/* ---- MoE: slots sorted by expert, grouped expert GEMMs ------------------------------------ */

/*
 * Sort (one block): cnt[e] = slots q (q = t k + j < nslots) with idx[q] == e; off = exclusive
 * prefix of cnt; perm[off[e] ..] = those slots in increasing q (thread e scans all slots in
 * order: deterministic, no atomics); row tiles of 64 sorted slots per expert, (e, first), in
 * expert order, and their count.
 */
constexpr int SORT_THREADS = 1024;

__global__ void __launch_bounds__(SORT_THREADS) moe_sort_kernel(const int* idx, int nslots, int E, int* off, int* perm,
                                                                int2* tiles, int* ntiles)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ int si[];
	int* cnt = si;         /* [E]     */
	int* soff = si + E;    /* [E + 1] */
	int* toff = soff + E + 1; /* [E]  */
	for (int e = threadIdx.x; e < E; e += SORT_THREADS) {
		int n = 0;
		for (int q = 0; q < nslots; q++) n += idx[q] == e;
		cnt[e] = n;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int o = 0, to = 0;
		for (int e = 0; e < E; e++) {
			soff[e] = o;
			toff[e] = to;
			o += cnt[e];
			to += (cnt[e] + 63) / 64;
		}
		soff[E] = o;
		off[E] = o;
		*ntiles = to;
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += SORT_THREADS) {
		off[e] = soff[e];
		int w = soff[e];
		for (int q = 0; q < nslots; q++)
			if (idx[q] == e) perm[w++] = q;
		for (int i = 0; i < (cnt[e] + 63) / 64; i++) tiles[toff[e] + i] = make_int2(e, soff[e] + 64 * i);
	}
}

/*
 * Grouped GEMM: for row tile (expert e, sorted slots s0 .. s0 + 63 of e) and output columns
 * n0 .. n0 + 63: Y[q][n] = sum_i X[row(q)][i] W_e[n][i], q = perm[s], row(q) = q (by_slot) or
 * q / k. W_e is rows e N .. e N + N - 1 of the stacked matrix, in its stored type, dequantized
 * to bf16 on its way into shared memory (BF16: copied; Q8_0: d * q per 16-byte load; other types
 * or widths: units.cuh's dq_elem per element). 4 warps; warp w computes rows 16 w .. 16 w + 15 x
 * 64 columns with mma.sync m16n8k16 (bf16 in, f32 accumulation), k-steps of 32 in order.
 * Blocks past the tile count exit at once (the grid is sized for the most tiles possible).
 */
constexpr int GM = 64, GN = 64, GK = 32, GS = GK + 8; /* GS: shared row stride (bf16), 80 bytes */
enum { W_GENERIC = 0, W_BF16, W_Q8_0 };

struct ggemm_args {
	const bf16* x;             /* activation rows, ld ldx (a multiple of 8)                   */
	int ldx, by_slot, k;
	int accumulate;            /* Y += the product (the precise mode's second, low-half pass) */
	const int *perm, *off, *ntiles;
	const int2* tiles;
	pv_units::Planes w[2];     /* stacked expert matrices [E N][K]; blockIdx.z picks one      */
	float* y[2];               /* [slots][ldy]                                                */
	int ldy, N, K, wkind;
};

__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi)
{
	const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x (low 16 bits) = lo */
	return *reinterpret_cast<const uint32_t*>(&h);
}

__global__ void __launch_bounds__(128) ggemm_kernel(const __grid_constant__ ggemm_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ __align__(16) bf16 As[GM * GS];
	__shared__ __align__(16) bf16 Bs[GN * GS];
	__shared__ int slot[GM];
	const int tile = blockIdx.y;
	if (tile >= *a.ntiles) return; /* the whole block */
	const int2 tl = a.tiles[tile];
	const int e = tl.x, s0 = tl.y, cnt = min(GM, a.off[e + 1] - s0);
	const int n0 = blockIdx.x * GN, z = blockIdx.z;
	const pv_units::Planes W = a.w[z];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
	const int N = a.N, K = a.K;
	if (tid < GM) slot[tid] = tid < cnt ? a.perm[s0 + tid] : -1;
	__syncthreads();
	float acc[8][4];
#pragma unroll
	for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

	for (int k0 = 0; k0 < K; k0 += GK) {
		/* A: 64 rows x 32 columns, 8 bf16 per thread item */
		for (int ch = tid; ch < GM * GK / 8; ch += 128) {
			const int r = ch / (GK / 8), cc = (ch - r * (GK / 8)) * 8;
			uint4 v = make_uint4(0u, 0u, 0u, 0u);
			const int q = slot[r];
			if (q >= 0) {
				const bf16* src = a.x + (size_t)(a.by_slot ? q : q / a.k) * a.ldx + k0 + cc;
				if (k0 + cc + 8 <= K) {
					v = *reinterpret_cast<const uint4*>(src);
				} else {
					unsigned short h[8];
					for (int i = 0; i < 8; i++) h[i] = k0 + cc + i < K ? reinterpret_cast<const unsigned short*>(src)[i] : 0;
					v = make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16, h[4] | (uint32_t)h[5] << 16,
					               h[6] | (uint32_t)h[7] << 16);
				}
			}
			*reinterpret_cast<uint4*>(As + r * GS + cc) = v;
		}
		/* B: weight rows n0 .. n0 + 63 of expert e, columns k0 .. k0 + 31, as bf16 */
		if (a.wkind == W_Q8_0) { /* K % 32 == 0: one block per row and step; thread: row tid / 2, half tid % 2 */
			const int r = tid >> 1, hh = tid & 1;
			uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
			if (n0 + r < N) {
				const int64_t row = (int64_t)e * N + n0 + r;
				const uint4 qv = __ldg(reinterpret_cast<const uint4*>(W.p0 + (size_t)row * W.s0 + k0 + 16 * hh));
				const float d = pv_units::f16f(pv_units::u16at(W.p1 + (size_t)row * W.s1 + (size_t)(k0 / 32) * 2));
				float f[16];
				for (int i = 0; i < 16; i++) {
					const uint32_t wd = pv_units::word(qv, i >> 2);
					f[i] = __fmul_rn((float)(int)(signed char)((wd >> (8 * (i & 3))) & 0xffu), d);
				}
				lo = make_uint4(pack_bf2(f[0], f[1]), pack_bf2(f[2], f[3]), pack_bf2(f[4], f[5]), pack_bf2(f[6], f[7]));
				hi = make_uint4(pack_bf2(f[8], f[9]), pack_bf2(f[10], f[11]), pack_bf2(f[12], f[13]), pack_bf2(f[14], f[15]));
			}
			*reinterpret_cast<uint4*>(Bs + r * GS + 16 * hh) = lo;
			*reinterpret_cast<uint4*>(Bs + r * GS + 16 * hh + 8) = hi;
		} else if (a.wkind == W_BF16) { /* K % 8 == 0: 16-byte rows pieces */
			for (int ch = tid; ch < GN * GK / 8; ch += 128) {
				const int r = ch / (GK / 8), cc = (ch - r * (GK / 8)) * 8;
				uint4 v = make_uint4(0u, 0u, 0u, 0u);
				if (n0 + r < N && k0 + cc < K) /* K % 8 == 0: the piece is whole */
					v = __ldg(reinterpret_cast<const uint4*>(W.p0 + (size_t)((int64_t)e * N + n0 + r) * W.s0 + (size_t)(k0 + cc) * 2));
				*reinterpret_cast<uint4*>(Bs + r * GS + cc) = v;
			}
		} else {
			for (int i = tid; i < GN * GK; i += 128) {
				const int r = i / GK, kk = i - r * GK;
				float v = 0.0f;
				if (n0 + r < N && k0 + kk < K) v = pv_units::dq_elem(W, (int64_t)e * N + n0 + r, k0 + kk);
				Bs[r * GS + kk] = __float2bfloat16_rn(v);
			}
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < GK; kk += 16) {
			uint32_t af[4];
			ldsm_x4(af, reinterpret_cast<const __half*>(As + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * GS + kk + 8 * (lane >> 4)));
#pragma unroll
			for (int n2 = 0; n2 < 4; n2++) {
				uint32_t bf[4];
				ldsm_x4(bf, reinterpret_cast<const __half*>(Bs + (16 * n2 + (lane & 7) + 8 * (lane >> 4)) * GS + kk + 8 * ((lane >> 3) & 1)));
				mma_bf16(acc[2 * n2], af, bf[0], bf[1]);
				mma_bf16(acc[2 * n2 + 1], af, bf[2], bf[3]);
			}
		}
		__syncthreads(); /* As, Bs consumed */
	}
	float* Y = a.y[z];
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int q = slot[warp * 16 + g + 8 * half];
		if (q < 0) continue;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e2 = 0; e2 < 2; e2++) {
				const int n = n0 + 8 * nt + 2 * c + e2;
				if (n < N) {
					float* yp = Y + (size_t)q * a.ldy + n;
					*yp = a.accumulate ? *yp + acc[nt][2 * half + e2] : acc[nt][2 * half + e2];
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
		p->split = e && !strcmp(e, "2");
		const char* ch = getenv("PV_CUDA_PREFILL_CHUNK");
		p->chunk = p->chunk0 = ch && atoi(ch) > 0 ? atoi(ch) : DEFAULT_CHUNK;
		const char* at = getenv("PV_CUDA_PREFILL_ATTN");
		p->attn_f32 = at && !strcmp(at, "f32");
		const char* mo = getenv("PV_CUDA_PREFILL_MOE");
		p->moe_gemv = mo && !strcmp(mo, "gemv");
		const char* dl = getenv("PV_CUDA_PREFILL_DELTA");
		p->delta_rec = dl && !strcmp(dl, "decode") ? 1 : dl && !strcmp(dl, "cols") ? 2 : 0;
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
			                    &L->wq,     &L->wk,   &L->wv,   &L->wo,   &L->gate,    &L->up,    &L->down,
			                    &L->sh_gate, &L->sh_up, &L->sh_down };
		for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
			const size_t e = mat_elems(ms[i]);
			wb = e > wb ? e : wb;
		}
	}
	p->wbuf_elems = wb;
	/* MoE FFNs: grouped expert GEMMs (PV_CUDA_PREFILL_MOE=gemv: the decode's gathered GEMVs) */
	p->moe_gemm = 0;
	for (int l = 0; l < c->n_layers; l++) p->moe_gemm |= c->layer_moe[l] && !p->moe_gemv;
	p->ldie = round8(c->moe_inter > 0 ? c->moe_inter : 1);
	p->ldis = round8(c->shared_inter > 0 ? c->shared_inter : 1);
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
	const int NT = (c->head_dim + 15) / 16;
	if (mma_kernel(NT))
		CU(cudaFuncSetAttribute(mma_kernel(NT), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma_smem(NT)), err, errlen);
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

/* out [rows][cols] = W as bf16 (the values dq_elem gives, rounded): by 32-element blocks for
 * Q8_0, Q4_K and Q6_K, else element by element */
int dequant(cudaStream_t st, const struct dmat* W, bf16* out, char* err, size_t errlen)
{
	const int64_t total = W->rows * W->cols;
	if (W->type == PV_Q8_0 && W->cols % 32 == 0) {
		const int nb = (int)(W->cols / 32);
		int64_t blocks = (W->rows * nb + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant q8_0", err, errlen, dequant_q8_kernel, dim3((unsigned)blocks), dim3(256), 0, st, planes(W), W->rows, nb, out);
	} else if ((W->type == PV_Q4_K || W->type == PV_Q6_K) && W->cols % 256 == 0) {
		int64_t blocks = (W->rows * (W->cols / 32) + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant k", err, errlen, dequant_k_kernel, dim3((unsigned)blocks), dim3(256), 0, st, planes(W), W->rows, (int)W->cols,
		          out);
	} else {
		int64_t blocks = (total + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant", err, errlen, dequant_kernel, dim3((unsigned)blocks), dim3(256), 0, st, planes(W), W->rows, (int)W->cols, out);
	}
	return 0;
}

/* the low-half partner of a bf16 activation buffer (precise mode), else NULL */
bf16* lo_of(const struct pv_prefill* p, const bf16* hi)
{
	if (!p->split || !hi) return NULL;
	if (hi == p->xb) return p->xl;
	if (hi == p->ob) return p->ol;
	if (hi == p->hb) return p->hl;
	if (hi == p->ehb) return p->ehl;
	if (hi == p->shb) return p->shl;
	return NULL;
}

/* Y[t][o] = sum_i X[t][i] W[o][i] for t < T (X bf16 [T][ldx], Y f32 [T][ldy]); precise mode:
 * Y = W X_hi, then Y += W X_lo (a second GEMM with beta 1, in that order) */
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
		if (dequant(k->v->st, W, p->wbuf, k->err, k->errlen)) return -1;
		p->nl++;
		w = p->wbuf;
		ldw = (int)W->cols;
	}
	if (pv_cublas_gemm(p->blas, w, ldw, X, ldx, Y, ldy, (int)W->rows, T, (int)W->cols, 0.0f, k->err, k->errlen)) return -1;
	p->ng++;
	const bf16* lo = lo_of(p, X);
	if (lo) {
		if (pv_cublas_gemm(p->blas, w, ldw, lo, ldx, Y, ldy, (int)W->rows, T, (int)W->cols, 1.0f, k->err, k->errlen)) return -1;
		p->ng++;
	}
	return 0;
}

int norm(struct ctx* k, float* x, const float* delta, float* xn, bf16* xb, const float* w, int T)
{
	const int H = k->c->hidden;
	PV_LAUNCH("prefill norm", k->err, k->errlen, norm_kernel, dim3((unsigned)T), dim3(NORM_THREADS), 0, k->v->st, x, delta, xn, xb,
	          lo_of(k->p, xb), k->p->ldh, w, H, k->c->rms_eps);
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
	b.ol = lo_of(p, p->ob);
	b.ldo = p->ldo;
	b.T = T;
	b.pos0 = pos0;
	b.nh = c->n_heads;
	b.nkv = c->n_kv_heads;
	b.hd = c->head_dim;
	const int G = c->n_heads / c->n_kv_heads, NT = (c->head_dim + 15) / 16;
	if (AQ / G < 1 || c->head_dim % 4 || c->head_dim / 4 > MAX_HD4)
		return pv_errf(k->err, k->errlen, "CUDA backend: prefill attention: %d heads per kv head, head dim %d", G, c->head_dim);
	const attn_fn mk = p->attn_f32 || p->split ? NULL : mma_kernel(NT);
	if (mk) {
		b.bq = MQ / G;
		const dim3 grid((unsigned)((T + b.bq - 1) / b.bq), (unsigned)c->n_kv_heads);
		PV_LAUNCH("prefill attention", k->err, k->errlen, mk, grid, dim3(MTHREADS), mma_smem(NT), v->st, b);
	} else {
		b.bq = AQ / G;
		const dim3 grid((unsigned)((T + b.bq - 1) / b.bq), (unsigned)c->n_kv_heads);
		PV_LAUNCH("prefill attention", k->err, k->errlen, attn_kernel, grid, dim3(ATHREADS), attn_smem(c->head_dim), v->st, b);
	}
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
	pv_delta_args_layer(&a, c, L, v->state + (size_t)v->lin_index[l] * pv_state_floats_per_layer(c));
	a.mix = p->mix;
	a.ld_mix = v->ld_raw;
	a.z = p->lz;
	a.b = p->lb;
	a.a = p->la;
	a.ab = p->lab;
	a.u = p->lu;
	a.o = p->lo;
	a.n = T;
	const dcols_fn dc = p->delta_rec == 1 ? NULL : dcols_kernel_for(c->lin_k_dim, p->delta_rec == 0);
	const int cols_per_block = p->delta_rec == 0 ? 8 : 32;
	if (dc && c->lin_v_dim <= DNORM_THREADS) {
		const int cd = pv_cfg_conv_dim(c);
		char* err = k->err;
		const size_t errlen = k->errlen;
		PV_LAUNCH("prefill conv", err, errlen, dconv_kernel, dim3((unsigned)((cd + 127) / 128), (unsigned)T), dim3(128), 0, v->st, a);
		PV_LAUNCH("prefill conv state", err, errlen, dconv_state_kernel, dim3((unsigned)((cd + 127) / 128)), dim3(128), 0, v->st, a);
		PV_LAUNCH("prefill delta", err, errlen, dc, dim3((unsigned)((c->lin_v_dim + cols_per_block - 1) / cols_per_block), (unsigned)Hv),
		          dim3(32), 0, v->st, a, p->lo);
		PV_LAUNCH("prefill delta norm", err, errlen, dnorm_kernel, dim3((unsigned)T, (unsigned)Hv), dim3(DNORM_THREADS), 0, v->st, a,
		          (const float*)p->lo, p->ob, lo_of(p, p->ob), p->ldo);
		p->nl += 4;
	} else {
		/* the decode's kernels: conv, then one block per head walking the rows (with the norm) */
		if (pv_cuda_deltanet(v->st, &a, k->err, k->errlen)) return -1;
		p->nl += 2;
		PV_LAUNCH("prefill cvt", k->err, k->errlen, cvt_kernel, dim3((unsigned)((vd + 255) / 256), (unsigned)T), dim3(256), 0, v->st,
		          p->lo, vd, p->ob, lo_of(p, p->ob), p->ldo, vd);
		p->nl++;
	}
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

int wkind(const struct dmat* w, int K)
{
	if (w->type == PV_BF16 && K % 8 == 0) return W_BF16;
	if (w->type == PV_Q8_0 && K % 32 == 0) return W_Q8_0;
	return W_GENERIC;
}

/* MoE FFN over T rows without a host sync: the router as the decode's GEMV (f32, 16-row groups,
 * so the expert choice is the decode's for the same input), routing (moe.cu) for the T rows, the
 * slots sorted by expert, grouped GEMMs for the experts' gate/up and down (outputs per slot in
 * slot order), the shared expert as GEMMs, the decode's combine (per row, slots in order). */
int moe_layer_gemm(struct ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	const struct pv_prefill_view* v = k->v;
	const struct pv_config* c = k->c;
	const int H = c->hidden, E = c->n_experts, kk = c->n_experts_used, Ie = c->moe_inter, Is = c->shared_inter;
	const int nslots = T * kk;
	char* err = k->err;
	const size_t errlen = k->errlen;
	cudaStream_t st = v->st;
	for (int g0 = 0; g0 < T; g0 += PV_CUDA_ROWS) {
		const int n = T - g0 < PV_CUDA_ROWS ? T - g0 : PV_CUDA_ROWS;
		struct gemv_out r[1] = { { &L->router, p->rlog + (size_t)g0 * E, E, NULL } };
		if (pv_cuda_gemv(st, r, 1, p->xn + (size_t)g0 * H, NULL, H, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
	}
	struct moe_args a;
	memset(&a, 0, sizeof a);
	a.logits = p->rlog;
	a.idx = p->tidx;
	a.w = p->tw;
	a.eo = p->eo;
	a.sh = p->so;
	a.sh_gate = L->sh_gate_w;
	a.xn = p->xn;
	a.out = p->delta;
	a.E = E;
	a.k = kk;
	a.norm_topk = c->norm_topk;
	a.shared = L->sh_gate.type >= 0;
	a.H = H;
	a.n = T;
	if (pv_cuda_moe_route(st, &a, err, errlen)) return -1;
	p->nl++;
	PV_LAUNCH("moe sort", err, errlen, moe_sort_kernel, dim3(1), dim3(SORT_THREADS), sizeof(int) * (size_t)(3 * E + 1), st, p->tidx,
	          nslots, E, p->eoff, p->perm, p->tiles, p->ntiles);
	p->nl++;
	const unsigned max_tiles = (unsigned)((nslots + GM - 1) / GM + E);
	{
		ggemm_args g;
		memset(&g, 0, sizeof g);
		g.x = p->xb;
		g.ldx = p->ldh;
		g.by_slot = 0;
		g.k = kk;
		g.perm = p->perm;
		g.off = p->eoff;
		g.ntiles = p->ntiles;
		g.tiles = p->tiles;
		g.w[0] = planes(&L->ex_gate);
		g.w[1] = planes(&L->ex_up);
		g.y[0] = p->eg;
		g.y[1] = p->eu;
		g.ldy = Ie;
		g.N = Ie;
		g.K = H;
		g.wkind = wkind(&L->ex_gate, H);
		if (wkind(&L->ex_up, H) != g.wkind) g.wkind = W_GENERIC;
		PV_LAUNCH("moe gate/up", err, errlen, ggemm_kernel, dim3((unsigned)((Ie + GN - 1) / GN), max_tiles, 2), dim3(128), 0, st, g);
		p->nl++;
		if (lo_of(p, p->xb)) { /* precise mode: += the low halves' product */
			g.x = lo_of(p, p->xb);
			g.accumulate = 1;
			PV_LAUNCH("moe gate/up lo", err, errlen, ggemm_kernel, dim3((unsigned)((Ie + GN - 1) / GN), max_tiles, 2), dim3(128), 0, st, g);
			p->nl++;
		}
	}
	PV_LAUNCH("moe swiglu", err, errlen, swiglu_kernel, dim3((unsigned)((Ie + 255) / 256), (unsigned)nslots), dim3(256), 0, st, p->eg,
	          p->eu, Ie, p->ehb, lo_of(p, p->ehb), p->ldie, Ie);
	p->nl++;
	{
		ggemm_args g;
		memset(&g, 0, sizeof g);
		g.x = p->ehb;
		g.ldx = p->ldie;
		g.by_slot = 1;
		g.k = kk;
		g.perm = p->perm;
		g.off = p->eoff;
		g.ntiles = p->ntiles;
		g.tiles = p->tiles;
		g.w[0] = planes(&L->ex_down);
		g.w[1] = g.w[0];
		g.y[0] = p->eo;
		g.y[1] = p->eo;
		g.ldy = H;
		g.N = H;
		g.K = Ie;
		g.wkind = wkind(&L->ex_down, Ie);
		PV_LAUNCH("moe down", err, errlen, ggemm_kernel, dim3((unsigned)((H + GN - 1) / GN), max_tiles, 1), dim3(128), 0, st, g);
		p->nl++;
		if (lo_of(p, p->ehb)) {
			g.x = lo_of(p, p->ehb);
			g.accumulate = 1;
			PV_LAUNCH("moe down lo", err, errlen, ggemm_kernel, dim3((unsigned)((H + GN - 1) / GN), max_tiles, 1), dim3(128), 0, st, g);
			p->nl++;
		}
	}
	if (a.shared) {
		if (gemm(k, &L->sh_gate, p->xb, p->ldh, p->sg, Is, T) || gemm(k, &L->sh_up, p->xb, p->ldh, p->su, Is, T)) return -1;
		PV_LAUNCH("shared swiglu", err, errlen, swiglu_kernel, dim3((unsigned)((Is + 255) / 256), (unsigned)T), dim3(256), 0, st, p->sg,
		          p->su, Is, p->shb, lo_of(p, p->shb), p->ldis, Is);
		p->nl++;
		if (gemm(k, &L->sh_down, p->shb, p->ldis, p->so, H, T)) return -1;
	}
	if (pv_cuda_moe_combine(st, &a, err, errlen)) return -1;
	p->nl++;
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
	          k->v->st, p->g, p->u, ldg, p->hb, lo_of(p, p->hb), p->ldf, I);
	p->nl++;
	return gemm(k, &L->down, p->hb, p->ldf, p->delta, H, T);
}

/* Rows [c0, c0 + T) of the call, chunk ci. */
int chunk(struct ctx* k, int ci, int c0, int T, const struct pv_step* sp, int* have_id)
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
		} else if (attention_layer(k, L, l, ci, sp->pos0 + c0, T)) {
			return -1;
		}
		const int moe = c->layer_moe[l];
		/* MoE: xn (f32) for the router GEMV and the shared gate, xb for the expert GEMMs */
		if (norm(k, p->x, p->delta, moe ? p->xn : NULL, moe && !p->moe_gemm ? NULL : p->xb, L->ffn_norm, T)) return -1;
		if (moe ? (p->moe_gemm ? moe_layer_gemm(k, L, T) : moe_layer(k, L, T)) : ffn_dense(k, L, T)) return -1;
	}
	/* LM rows of this chunk: [r0, c0 + T), from the first row any output wants */
	const int n = sp->n, first = pv_step_lm_row0(sp);
	if (first >= c0 + T) return 0;
	const int r0 = first > c0 ? first : c0;
	if (norm(k, p->x + (size_t)(r0 - c0) * H, p->delta + (size_t)(r0 - c0) * H, p->xn, NULL, dm->final_norm, c0 + T - r0)) return -1;
	for (int g0 = r0; g0 < c0 + T; g0 += PV_CUDA_ROWS) {
		const int rows = c0 + T - g0 < PV_CUDA_ROWS ? c0 + T - g0 : PV_CUDA_ROWS;
		struct gemv_out o[1] = { { &dm->lm_head, v->logits, V, NULL } };
		if (pv_cuda_gemv(st, o, 1, p->xn + (size_t)(g0 - r0) * H, NULL, H, PV_X_PLAIN, rows, &p->nl, err, errlen)) return -1;
		if (pv_cuda_argmax(st, v->logits, V, rows, v->ids, err, errlen)) return -1;
		p->nl++;
		if (pv_cuda_copy_outputs(sp, g0, rows, v->logits, v->ids, p->xn + (size_t)(g0 - r0) * H, V, H, st, &v->stats->memcpys, err,
		                         errlen))
			return -1;
		if (g0 + rows == n) {
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
	if (!p->on || p->broken || n <= PV_CUDA_ROWS || n < s->chunk_min) return 0;
	if (s->state_floats && !chunked) return 0; /* DeltaNet models: the session's rule (never a rollback replay) */
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

int pv_prefill_forward(struct pv_prefill** pp, struct pv_session* s, const struct pv_prefill_view* v, const struct pv_step* sp,
                       int* have_id, char* err, size_t errlen)
{
	const int32_t* tokens = sp->tokens;
	const int n = sp->n;
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
		p->steps_host[i].pos0 = sp->pos0 + i * p->R;
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
		rc = chunk(&k, ci, c0, p->steps_host[ci].n, sp, have_id);
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

void pv_prefill_prepare(struct pv_prefill** pp, struct pv_session* s, const struct pv_prefill_view* v)
{
	struct pv_prefill* p = get(pp);
	if (p->prepared || p->R || !p->on || s->max_batch <= PV_CUDA_ROWS || s->max_batch < s->chunk_min) return;
	p->prepared = 1;
	if (!pv_cublas_load(NULL)) return; /* pv_prefill_wanted says so once, at the first prompt */
	char err[256];
	if (ensure(p, s, v, err, sizeof err)) {
		p->broken = 1;
		cudaGetLastError(); /* a failed allocation must not fail the session's later launches */
		snprintf(p->fallback, sizeof p->fallback, "prefill set-up failed (%.120s): prompts use the 16-row GEMV path", err);
		pv_log(PV_LOG_WARN, "cuda: %s", p->fallback);
	}
}

int pv_prefill_mode(const struct pv_prefill* p) { return !p || !p->on ? 0 : p->split ? 2 : 1; }

const char* pv_prefill_fallback(const struct pv_prefill* p) { return p && p->fallback[0] ? p->fallback : NULL; }

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
	const int want = chunk_rows > 0 ? chunk_rows : p->chunk0, split = on == 2;
	if (want != p->chunk || split != p->split) {
		free_scratch(p); /* the scratch depends on both */
		p->chunk = want;
		p->split = split;
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

/* ---- tests: the prefill's weight dequantization alone ------------------------------------------ */

int pv_cuda_test_dequant(const struct pv_tensor* W, float* out, char* err, size_t errlen)
{
	if (pv_cuda_select_device(err, errlen)) return -1;
	struct dmat d;
	if (pv_cuda_plan_mat(W, &d, err, errlen)) return -1;
	unsigned char* mem = NULL;
	bf16* dy = NULL;
	cudaStream_t st = NULL;
	struct pv_stager* sg = NULL;
	uint16_t* host = NULL;
	int rc = -1;
	const size_t n = (size_t)W->rows * (size_t)W->cols;
	cudaError_t e;
#define STEP(call)                                         \
	do {                                               \
		e = (call);                                \
		if (e != cudaSuccess) {                    \
			pv_cuda_fail(err, errlen, #call, e); \
			goto done;                         \
		}                                          \
	} while (0)
	host = (uint16_t*)malloc(n * 2 + 2);
	if (!host) {
		pv_errf(err, errlen, "out of memory");
		goto done;
	}
	STEP(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	STEP(cudaMalloc((void**)&mem, d.bytes));
	{
		size_t off = 0;
		for (int q = 0; q < d.n_planes; q++) {
			d.p[q] = mem + off;
			off += (d.stride[q] * (size_t)d.rows + 255) / 256 * 256;
		}
	}
	STEP(cudaMalloc((void**)&dy, n * 2));
	if (pv_stager_new(&sg, st, d.bytes, err, errlen) || pv_stager_upload_mat(sg, W, &d, 0, err, errlen) ||
	    pv_stager_finish(sg, err, errlen))
		goto done;
	if (dequant(st, &d, dy, err, errlen)) goto done;
	STEP(cudaMemcpyAsync(host, dy, n * 2, cudaMemcpyDeviceToHost, st));
	STEP(cudaStreamSynchronize(st));
	for (size_t i = 0; i < n; i++) {
		const uint32_t u = (uint32_t)host[i] << 16;
		memcpy(out + i, &u, 4);
	}
	rc = 0;
#undef STEP
done:
	pv_stager_free(sg);
	if (st) cudaStreamSynchronize(st);
	if (st) cudaStreamDestroy(st);
	if (mem) cudaFree(mem);
	if (dy) cudaFree(dy);
	free(host);
	return rc;
}
