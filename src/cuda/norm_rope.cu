/*
 * norm_rope.cu: the small per-row kernels: embedding lookup (exact dequantization of one row),
 * residual add fused with RMSNorm, the attention input stage (q/k RMSNorm, RoPE, the output
 * gate split, the KV-cache write; also in the multi-session form of many.cu, each row at its own
 * position into its own session's cache), and the argmax of logits rows.
 *
 * Each kernel works on one row (or one head of one row) per block or warp, with a fixed thread
 * count, so every reduction has an order set by its length alone. The elementwise arithmetic is
 * forward.c's, operation for operation (the build has -fmad=false, so nothing is fused).
 */
#include "common.cuh"
#include "qact.cuh"
#include "units.cuh"

#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <float.h>

namespace {



struct EmbArgs {
	pv_units::Planes m;
	int H;
	const struct dstep* step;
	float* x;
};

__global__ void embed_kernel(EmbArgs a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int t = blockIdx.y;
	const int tok = a.step->tokens[t];
	for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < a.H; c += gridDim.x * blockDim.x)
		a.x[(size_t)t * a.H + c] = pv_units::dq_elem(a.m, tok, c);
}

constexpr int NORM_THREADS = 512;  /* rows whose width is not a multiple of 4, or too wide */
constexpr int NORM4_THREADS = 256; /* = the GEMV block: the fused epilogue runs the same code */

/* sum over the block in a fixed order: per-warp butterflies, then the warps in order */
__global__ void __launch_bounds__(NORM_THREADS) add_rmsnorm_kernel(float* x, const float* delta, float* xn,
                                                                   const float* w, int H, float eps)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[NORM_THREADS / 32 + 1];
	const int t = blockIdx.x;
	float* xr = x + (size_t)t * H;
	const float ss = pv_block_sum_all<NORM_THREADS>(pv_add_sumsq<NORM_THREADS>(xr, delta, t, H), red);
	const float r = 1.0f / sqrtf(ss / (float)H + eps); /* pv_rmsnorm */
	for (int i = threadIdx.x; i < H; i += NORM_THREADS) xn[(size_t)t * H + i] = (xr[i] * r) * w[i];
}

/* add_rmsnorm4_kernel, then the block's warps quantize its row of xn into q (cuda.q8_act,
 * qact.cuh): the bytes qgemv.cu's activation kernel would write from the same xn */
__global__ void __launch_bounds__(NORM4_THREADS) add_rmsnorm4_q8_kernel(float* x, const float* delta, float* xn,
                                                                        const float* w, int H, float eps, int blk,
                                                                        unsigned char* q, size_t rb)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[NORM4_THREADS / 32 + 1];
	const size_t o = (size_t)blockIdx.x * H;
	pv_add_rmsnorm_row<NORM4_THREADS, 8>(x + o, delta ? delta + o : nullptr, xn + o, w, H, eps, red);
	__syncthreads(); /* the row of xn is written (global memory, this block) */
	for (int c = threadIdx.x >> 5; c * 256 < H; c += NORM4_THREADS / 32) {
		float v[8];
		pv_q8_load8(xn + o, H, c, v);
		pv_q8_chunk(v, H, blk, c, q + (size_t)blockIdx.x * rb);
	}
}

/* The same for H a multiple of 4 and 16-byte aligned rows: one block of NORM4_THREADS per row
 * running pv_add_rmsnorm_row, the code the GEMV epilogue runs (pv_cuda_gemv_norm): same bits. */
__global__ void __launch_bounds__(NORM4_THREADS) add_rmsnorm4_kernel(float* x, const float* delta, float* xn,
                                                                     const float* w, int H, float eps)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[NORM4_THREADS / 32 + 1];
	const size_t o = (size_t)blockIdx.x * H;
	pv_add_rmsnorm_row<NORM4_THREADS, 8>(x + o, delta ? delta + o : nullptr, xn + o, w, H, eps, red);
}

/* cuda.norm_cluster (the default): the add+RMSNorm of row blockIdx.y by a cluster of C blocks
 * (C = min(8, chunks)), H a multiple of 4 and at most 8192, 16-byte aligned rows. Chunk c
 * (elements 256 c .. 256 c + 255, zeros past H) belongs to warp c / C of block c % C, lane l
 * holding its 8 elements from 256 c + 8 l: qact.cuh's chunk layout, so the quantized form is
 * written from registers. Every load is issued before the first use, and no block runs more than
 * four warps' latency chains: one block (add_rmsnorm4_kernel) ran every chunk of the row on 8
 * warps, latency-bound (ledger cuda-norm-cluster). Order of the sum of squares, a function of H
 * alone: each lane's 8 squares in element order, the warp's butterfly, then the chunk sums by a
 * butterfly over lanes (chunk k on lane k, zeros past the last), read from the blocks' shared
 * memory across the cluster; every block computes the same total. */
constexpr int NCL = 8;      /* blocks per cluster (the portable limit)           */
constexpr int NCL_WARPS = 4; /* warps per block: chunks = H / 256 <= 32 (H <= 8192) */

struct NormArgs {
	float* x;
	const float* delta;
	float* xn;
	const float* w;
	int H;
	float eps;
	int blk; /* Q8: the quantized form's block (32, 256) */
	unsigned char* q;
	size_t rb;
};

/* EARLY (cuda.norm_early, calls with a delta): x and w are loaded before the PDL wait. With a
 * delta, x is the residual stream, last written by an earlier add+RMSNorm, never by the kernel
 * just before (that one wrote delta), and that earlier kernel completed before the previous one
 * passed its own wait, which is before this kernel could start (PDL). Without a delta, x may be
 * the previous kernel's output (the embedding, the MTP projection): never EARLY. */
template <bool Q8, bool EARLY = false>
__global__ void __launch_bounds__(NCL_WARPS * 32) add_rmsnorm_cluster_kernel(const __grid_constant__ NormArgs a)
{
	namespace cg = cooperative_groups;
	cg::cluster_group cl = cg::this_cluster();
	__shared__ float part[NCL_WARPS];
	if constexpr (!EARLY) pv_grid_sync(); /* before any global memory access (PDL) */
	const int C = (int)cl.num_blocks(), b = (int)cl.block_rank(); /* the cluster spans gridDim.x */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int H = a.H, nch = (H + 255) / 256, c = b + warp * C;
	const size_t o = (size_t)blockIdx.y * H;
	const int e0 = c * 256 + lane * 8;
	const bool on0 = c < nch && e0 < H, on1 = c < nch && e0 + 4 < H;
	const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	float4 x0 = z, x1 = z, d0 = z, d1 = z, g0 = z, g1 = z;
	if constexpr (EARLY) {
		if (on0) {
			x0 = __ldcg(reinterpret_cast<const float4*>(a.x + o + e0));
			g0 = __ldg(reinterpret_cast<const float4*>(a.w + e0));
		}
		if (on1) {
			x1 = __ldcg(reinterpret_cast<const float4*>(a.x + o + e0 + 4));
			g1 = __ldg(reinterpret_cast<const float4*>(a.w + e0 + 4));
		}
		pv_grid_sync(); /* delta is the previous kernel's output */
		if (on0) d0 = __ldcg(reinterpret_cast<const float4*>(a.delta + o + e0));
		if (on1) d1 = __ldcg(reinterpret_cast<const float4*>(a.delta + o + e0 + 4));
	} else {
		if (on0) {
			x0 = __ldcg(reinterpret_cast<const float4*>(a.x + o + e0));
			g0 = __ldg(reinterpret_cast<const float4*>(a.w + e0));
			if (a.delta) d0 = __ldcg(reinterpret_cast<const float4*>(a.delta + o + e0));
		}
		if (on1) {
			x1 = __ldcg(reinterpret_cast<const float4*>(a.x + o + e0 + 4));
			g1 = __ldg(reinterpret_cast<const float4*>(a.w + e0 + 4));
			if (a.delta) d1 = __ldcg(reinterpret_cast<const float4*>(a.delta + o + e0 + 4));
		}
	}
	float v[8] = { x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w };
	const float g[8] = { g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w };
	if (a.delta) {
		const float d[8] = { d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w };
#pragma unroll
		for (int i = 0; i < 8; i++) v[i] = v[i] + d[i];
		if (on0) *reinterpret_cast<float4*>(a.x + o + e0) = make_float4(v[0], v[1], v[2], v[3]);
		if (on1) *reinterpret_cast<float4*>(a.x + o + e0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
	}
	float ss = 0.0f;
#pragma unroll
	for (int i = 0; i < 8; i++) ss = ss + v[i] * v[i];
	ss = pv_warp_sum(ss);
	if (lane == 0) part[warp] = ss;
	cl.sync(); /* every block's chunk sums are written */
	float t = 0.0f;
	if (lane < nch) t = *cl.map_shared_rank(&part[lane / C], lane % C);
	t = pv_warp_sum(t);
	cl.sync(); /* no block leaves while another may still read its part[] */
	if (c >= nch) return; /* a whole warp */
	const float r = 1.0f / sqrtf(t / (float)H + a.eps); /* pv_rmsnorm */
	float y[8];
#pragma unroll
	for (int i = 0; i < 8; i++) y[i] = (v[i] * r) * g[i];
	if (on0) *reinterpret_cast<float4*>(a.xn + o + e0) = make_float4(y[0], y[1], y[2], y[3]);
	if (on1) *reinterpret_cast<float4*>(a.xn + o + e0 + 4) = make_float4(y[4], y[5], y[6], y[7]);
	if constexpr (Q8) pv_q8_chunk(y, H, a.blk, c, a.q + (size_t)blockIdx.y * a.rb);
}

/* One warp per head vector: q heads, then k heads, then v heads, of row blockIdx.y. K and V go
 * into the cache as elements of type KVT (common.cuh, "KV cache element types"). */
constexpr int POST_WARPS = 8;

/* Row t = blockIdx.y, its K and V into its cache (rows: common.cuh pv_rows_one / pv_rows_many):
 * the same code for either source. buf: the kernel's shared [POST_WARPS][256]. */
template <int KVT, class SRC>
__device__ __forceinline__ void qkv_post_body(const qkv_post_args& a, const SRC rows, float (*buf)[256])
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int item = blockIdx.x * POST_WARPS + warp, t = blockIdx.y;
	const int hd = a.hd, kvd = a.nkv * hd, qd = a.nh * hd;
	const size_t HB = pv_kv_hbytes(KVT, hd), RB = (size_t)a.nkv * HB; /* bytes of a head slice, a cache row */
	if (item >= a.nh + 2 * a.nkv) return; /* warp-uniform: a warp's lanes share item */
	const int pos = rows.pos(t);
	float* v = buf[warp];

	if (item >= a.nh + a.nkv) { /* v: copy into the cache */
		const int h = item - a.nh - a.nkv;
		pv_kv_put_head<KVT>(static_cast<char*>(rows.v(t)) + (size_t)pos * RB + (size_t)h * HB,
		                    a.vraw + (size_t)t * kvd + (size_t)h * hd, hd);
		return;
	}
	const int isq = item < a.nh, h = isq ? item : item - a.nh;
	const float* src = isq ? a.qraw + (size_t)t * a.ldq + (size_t)h * (a.gated ? 2 * hd : hd)
	                       : a.kraw + (size_t)t * kvd + (size_t)h * hd;
	const float* nw = isq ? a.q_norm : a.k_norm;
	if (isq && a.gated)
		for (int d = lane; d < hd; d += 32) a.gate[(size_t)t * qd + (size_t)h * hd + d] = src[hd + d];

	const int half = a.R / 2;
	const float *cs = a.cos + (size_t)pos * half, *sn = a.sin + (size_t)pos * half;
	if (isq)
		pv_head_post(src, v, a.q + (size_t)t * qd + (size_t)h * hd, nw, hd, a.R, a.eps, cs, sn);
	else
		pv_head_post<KVT>(src, v, static_cast<char*>(rows.k(t)) + (size_t)pos * RB + (size_t)h * HB, nw, hd, a.R, a.eps, cs,
		                  sn);
}

template <int KVT>
__global__ void __launch_bounds__(POST_WARPS * 32) qkv_post_kernel(const __grid_constant__ qkv_post_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float buf[POST_WARPS][256];
	qkv_post_body<KVT>(a, pv_rows_one<qkv_post_args>{ a }, buf);
}

/* The multi-session form (forward_many, many.cu): row t is session t's one-row step, at its own
 * position over its own cache of this layer. */
template <int KVT>
__global__ void __launch_bounds__(POST_WARPS * 32) qkv_post_many_kernel(const __grid_constant__ qkv_post_args a,
                                                                        const struct dmany* m, int layer)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float buf[POST_WARPS][256];
	qkv_post_body<KVT>(a, pv_rows_many{ m, layer }, buf);
}

constexpr int ARGMAX_THREADS = 1024;

__global__ void __launch_bounds__(ARGMAX_THREADS) argmax_kernel(const float* logits, int V, int* ids)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float bv[ARGMAX_THREADS];
	__shared__ int bi[ARGMAX_THREADS];
	const float* l = logits + (size_t)blockIdx.x * V;
	float best = -FLT_MAX;
	int idx = -1;
	for (int i = threadIdx.x; i < V; i += ARGMAX_THREADS) {
		const float v = l[i];
		if (idx < 0 || v > best) {
			best = v;
			idx = i;
		}
	}
	bv[threadIdx.x] = best;
	bi[threadIdx.x] = idx;
	__syncthreads();
	for (int o = ARGMAX_THREADS / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			const float v = bv[threadIdx.x + o];
			const int i = bi[threadIdx.x + o];
			if (i >= 0 && (bi[threadIdx.x] < 0 || v > bv[threadIdx.x] || (v == bv[threadIdx.x] && i < bi[threadIdx.x]))) {
				bv[threadIdx.x] = v;
				bi[threadIdx.x] = i;
			}
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) ids[blockIdx.x] = bi[0];
}

} // namespace

int pv_cuda_embed(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct dmat* E, const struct dstep* step, float* x,
                  int H, int n, char* err, size_t errlen)
{
	EmbArgs a = { { E->p[0], E->p[1], E->p[2], E->stride[0], E->stride[1], E->stride[2], E->type }, H, step, x };
	dim3 grid((unsigned)((H + 255) / 256), (unsigned)n);
	PV_LAUNCH("embed", tu, err, errlen, embed_kernel, grid, dim3(256), 0, st, a);
	return 0;
}

/* whether the cluster form takes a row of H (vec: H % 4 == 0, rows 16-byte aligned) */
static int norm_cluster_fits(const struct pv_cuda_tuning* tu, int vec, int H)
{
	return tu->norm_cluster && !tu->norm_fuse && vec && H <= 32 * 256;
}

/* the cluster form over n rows: grid (C, n), clusters of C blocks along x */
static int launch_norm_cluster(cudaStream_t st, const struct pv_cuda_tuning* tu, const NormArgs& a, int n, bool q8,
                               char* err, size_t errlen)
{
	const int nch = (a.H + 255) / 256, C = nch < NCL ? nch : NCL, warps = (nch + C - 1) / C;
	const dim3 grid((unsigned)C, (unsigned)n), block((unsigned)(32 * warps));
	const bool early = tu->norm_early && a.delta;
	void (*kern)(NormArgs) = q8 ? (early ? add_rmsnorm_cluster_kernel<true, true> : add_rmsnorm_cluster_kernel<true>)
	                            : (early ? add_rmsnorm_cluster_kernel<false, true> : add_rmsnorm_cluster_kernel<false>);
	PV_LAUNCH_CL(q8 ? "add_rmsnorm_q8 (cluster)" : "add_rmsnorm (cluster)", tu, err, errlen, (unsigned)C, kern, grid, block, 0,
	             st, a);
	return 0;
}

int pv_cuda_add_rmsnorm(cudaStream_t st, const struct pv_cuda_tuning* tu, float* x, const float* delta, float* xn,
                        const float* w, int H, float eps, int n, char* err, size_t errlen)
{
	const int vec = H % 4 == 0 && !(((uintptr_t)x | (uintptr_t)delta | (uintptr_t)xn | (uintptr_t)w) & 15);
	if (norm_cluster_fits(tu, vec, H)) return launch_norm_cluster(st, tu, NormArgs{ x, delta, xn, w, H, eps, 0, NULL, 0 }, n, false, err, errlen);
	if (vec)
		PV_LAUNCH("add_rmsnorm", tu, err, errlen, add_rmsnorm4_kernel, dim3((unsigned)n), dim3(NORM4_THREADS), 0, st, x,
		          delta, xn, w, H, eps);
	else
		PV_LAUNCH("add_rmsnorm", tu, err, errlen, add_rmsnorm_kernel, dim3((unsigned)n), dim3(NORM_THREADS), 0, st, x,
		          delta, xn, w, H, eps);
	return 0;
}

int pv_cuda_add_rmsnorm_q8(cudaStream_t st, const struct pv_cuda_tuning* tu, float* x, const float* delta, float* xn,
                           const float* w, int H, float eps, int n, int blk, char* err, size_t errlen)
{
	const int vec = H % 4 == 0 && !(((uintptr_t)x | (uintptr_t)delta | (uintptr_t)xn | (uintptr_t)w) & 15);
	const size_t rb = blk ? pv_qrow_bytes(blk, H) : 0;
	if (!tu->q8_act || !tu->q8_buf || !vec || (blk != 32 && blk != 256) || H % blk || n < 1 || (size_t)n * rb > tu->q8_bytes)
		return 0;
	if (norm_cluster_fits(tu, vec, H))
		return launch_norm_cluster(st, tu, NormArgs{ x, delta, xn, w, H, eps, blk, tu->q8_buf, rb }, n, true, err, errlen) ? -1 : 1;
	PV_LAUNCH("add_rmsnorm_q8", tu, err, errlen, add_rmsnorm4_q8_kernel, dim3((unsigned)n), dim3(NORM4_THREADS), 0, st, x,
	          delta, xn, w, H, eps, blk, tu->q8_buf, rb);
	return 1;
}

int pv_cuda_qkv_post(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct qkv_post_args* a, int n, char* err,
                     size_t errlen)
{
	if (a->hd > 256 || a->R > a->hd) return pv_errf(err, errlen, "CUDA backend: head dim %d (rope %d) above 256", a->hd, a->R);
	const int items = a->nh + 2 * a->nkv;
	dim3 grid((unsigned)((items + POST_WARPS - 1) / POST_WARPS), (unsigned)n);
	void (*kern)(qkv_post_args) = a->kvt == PV_KV_F16    ? qkv_post_kernel<PV_KV_F16>
	                              : a->kvt == PV_KV_BF16 ? qkv_post_kernel<PV_KV_BF16>
	                              : a->kvt == PV_KV_Q8_0 ? qkv_post_kernel<PV_KV_Q8_0>
	                              : a->kvt == PV_KV_F32  ? qkv_post_kernel<PV_KV_F32>
	                                                     : NULL;
	if (!kern) return pv_errf(err, errlen, "CUDA backend: KV cache element type %d", a->kvt);
	PV_LAUNCH("qkv_post", tu, err, errlen, kern, grid, dim3(POST_WARPS * 32), 0, st, *a);
	return 0;
}

int pv_cuda_qkv_post_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct qkv_post_args* a, const struct dmany* m,
                          int layer, int n, char* err, size_t errlen)
{
	if (a->hd > 256 || a->R > a->hd) return pv_errf(err, errlen, "CUDA backend: head dim %d (rope %d) above 256", a->hd, a->R);
	if (n > PV_CUDA_ROWS) return pv_errf(err, errlen, "CUDA backend: multi-session step of %d rows", n);
	const int items = a->nh + 2 * a->nkv;
	dim3 grid((unsigned)((items + POST_WARPS - 1) / POST_WARPS), (unsigned)n);
	void (*kern)(qkv_post_args, const struct dmany*, int) = a->kvt == PV_KV_F16    ? qkv_post_many_kernel<PV_KV_F16>
	                                                        : a->kvt == PV_KV_BF16 ? qkv_post_many_kernel<PV_KV_BF16>
	                                                        : a->kvt == PV_KV_Q8_0 ? qkv_post_many_kernel<PV_KV_Q8_0>
	                                                        : a->kvt == PV_KV_F32  ? qkv_post_many_kernel<PV_KV_F32>
	                                                                               : NULL;
	if (!kern) return pv_errf(err, errlen, "CUDA backend: KV cache element type %d", a->kvt);
	PV_LAUNCH("qkv_post (many)", tu, err, errlen, kern, grid, dim3(POST_WARPS * 32), 0, st, *a, m, layer);
	return 0;
}

int pv_cuda_argmax(cudaStream_t st, const struct pv_cuda_tuning* tu, const float* logits, int V, int n, int* ids, char* err,
                   size_t errlen)
{
	PV_LAUNCH("argmax", tu, err, errlen, argmax_kernel, dim3((unsigned)n), dim3(ARGMAX_THREADS), 0, st, logits, V, ids);
	return 0;
}

/* ---- tests: n rows through the add+RMSNorm the knobs select ----------------------------------- */

int pv_cuda_test_norm(float* x, const float* delta, const float* w, int H, int n, float eps, const char* spec, float* xn,
                      int blk, unsigned char* q, char* err, size_t errlen)
{
	struct pv_cuda_tuning tu; /* the defaults, the environment, then spec: no model here */
	if (H < 1 || n < 1 || n > PV_CUDA_ROWS) return pv_errf(err, errlen, "test_norm: %d rows of %d", n, H);
	if (pv_cuda_tuning_read(&tu, NULL, spec, err, errlen) || pv_cuda_select_device(err, errlen)) return -1;
	const size_t xb = sizeof(float) * (size_t)n * (size_t)H, wb = sizeof(float) * (size_t)H;
	const size_t rb = blk ? pv_qrow_bytes(blk, H) : 0;
	float *dx = NULL, *dd = NULL, *dn = NULL, *dw = NULL;
	unsigned char* dq = NULL;
	cudaStream_t st = NULL;
	int rc = -1;
	CU_OR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), done);
	CU_OR(cudaMalloc((void**)&dx, xb), done);
	CU_OR(cudaMalloc((void**)&dn, xb), done);
	CU_OR(cudaMalloc((void**)&dw, wb), done);
	if (delta) CU_OR(cudaMalloc((void**)&dd, xb), done);
	if (blk) {
		CU_OR(cudaMalloc((void**)&dq, rb * (size_t)n), done);
		CU_OR(cudaMemsetAsync(dq, 0xa5, rb * (size_t)n, st), done);
		tu.q8_act = 1;
		tu.q8_buf = dq;
		tu.q8_bytes = rb * (size_t)n;
	}
	CU_OR(cudaMemsetAsync(dn, 0xff, xb, st), done); /* NaN: every output must be written */
	CU_OR(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, st), done);
	CU_OR(cudaMemcpyAsync(dw, w, wb, cudaMemcpyHostToDevice, st), done);
	if (delta) CU_OR(cudaMemcpyAsync(dd, delta, xb, cudaMemcpyHostToDevice, st), done);
	if (blk) {
		const int r = pv_cuda_add_rmsnorm_q8(st, &tu, dx, dd, dn, dw, H, eps, n, blk, err, errlen);
		if (r < 0) goto done;
		if (r == 0) {
			pv_errf(err, errlen, "test_norm: no quantizing add+RMSNorm for %d rows of %d in blocks of %d", n, H, blk);
			goto done;
		}
	} else if (pv_cuda_add_rmsnorm(st, &tu, dx, dd, dn, dw, H, eps, n, err, errlen)) {
		goto done;
	}
	CU_OR(cudaMemcpyAsync(x, dx, xb, cudaMemcpyDeviceToHost, st), done);
	CU_OR(cudaMemcpyAsync(xn, dn, xb, cudaMemcpyDeviceToHost, st), done);
	if (blk) CU_OR(cudaMemcpyAsync(q, dq, rb * (size_t)n, cudaMemcpyDeviceToHost, st), done);
	CU_OR(cudaStreamSynchronize(st), done);
	rc = 0;
done:
	if (st) cudaStreamSynchronize(st);
	if (st) cudaStreamDestroy(st);
	cudaFree(dx);
	cudaFree(dd);
	cudaFree(dn);
	cudaFree(dw);
	cudaFree(dq);
	return rc;
}
