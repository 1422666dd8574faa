/*
 * attention.cu: causal decode/verify attention over the f32 KV cache, split-KV.
 *
 * Row t (position p = pos0 + t) attends to keys 0..p. The keys are cut into splits of
 * PV_ATT_SPLIT = 256 positions: split s covers [256 s, 256 s + 256) ∩ [0, p]. This layout depends
 * on p alone, never on the number of rows in the call or on the context size.
 *
 * Pass 1 (one block per split, kv head and row; the group of query heads that share the kv head
 * is done together so K and V are read once): scores q.k / sqrt(hd) (lane-strided products over
 * the head dim, xor butterfly), the split's max m, e_j = exp(score_j - m), the split's sum l (in
 * key order per lane, butterfly across lanes), and o_s[d] = sum_j e_j v_j[d] in key order.
 * Pass 2 (one block per head and row): M = max_s m_s; w_s = exp(m_s - M); L = sum_s l_s w_s and
 * o[d] = sum_s o_s[d] w_s in split order; o = o * (1 / L), then the output gate if any.
 * Splits past p are skipped (the grid covers the whole context so a graph can be captured once).
 */
#include "common.cuh"

#include <float.h>

namespace {

constexpr int S = PV_ATT_SPLIT;
constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_HD = 256;
constexpr int MAX_GHD = 4096; /* query heads per kv head x head dim */
constexpr int MAX_G = 16;     /* query heads per kv head */
constexpr int MAX_SPLITS = 8192;

__global__ void __launch_bounds__(THREADS) attn_split_kernel(const __grid_constant__ attn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ float sm[];
	const int sp = blockIdx.x, kh = blockIdx.y, t = blockIdx.z;
	const int pos = a.step->pos0 + t;
	const int j0 = sp * S;
	if (j0 > pos) return;
	const int j1 = min(j0 + S, pos + 1), nk = j1 - j0;
	const int hd = a.hd, G = a.nh / a.nkv, kvd = a.nkv * hd, qd = a.nh * hd;
	float* qs = sm;          /* [G][hd] */
	float* sc = sm + G * hd; /* [G][S]  */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int i = threadIdx.x; i < G * hd; i += THREADS) qs[i] = a.q[(size_t)t * qd + (size_t)kh * G * hd + i];
	__syncthreads();

	const float scale = 1.0f / sqrtf((float)hd);
	for (int j = j0 + warp; j < j1; j += WARPS) {
		const float* K = a.kc + (size_t)j * kvd + (size_t)kh * hd;
		float kr[MAX_HD / 32];
#pragma unroll
		for (int i = 0; i < MAX_HD / 32; i++) {
			const int d = lane + 32 * i;
			kr[i] = d < hd ? K[d] : 0.0f;
		}
		for (int g = 0; g < G; g++) {
			float part = 0.0f;
#pragma unroll
			for (int i = 0; i < MAX_HD / 32; i++) {
				const int d = lane + 32 * i;
				if (d < hd) part = fmaf(qs[g * hd + d], kr[i], part);
			}
			part = pv_warp_sum(part);
			if (lane == 0) sc[g * S + (j - j0)] = part * scale;
		}
	}
	__syncthreads();

	const size_t pbase = ((size_t)t * a.nh + (size_t)kh * G) * a.n_split + sp; /* + g * n_split */
	for (int g = warp; g < G; g += WARPS) {
		float m = -FLT_MAX;
		for (int jj = lane; jj < nk; jj += 32) m = fmaxf(m, sc[g * S + jj]);
		m = pv_warp_max(m);
		float l = 0.0f;
		for (int jj = lane; jj < nk; jj += 32) {
			const float e = expf(sc[g * S + jj] - m);
			sc[g * S + jj] = e;
			l = l + e;
		}
		l = pv_warp_sum(l);
		if (lane == 0) {
			a.part_ml[2 * (pbase + (size_t)g * a.n_split)] = m;
			a.part_ml[2 * (pbase + (size_t)g * a.n_split) + 1] = l;
		}
	}
	__syncthreads();

	for (int idx = threadIdx.x; idx < G * hd; idx += THREADS) {
		const int g = idx / hd, d = idx - g * hd;
		const float* V = a.vc + (size_t)j0 * kvd + (size_t)kh * hd + d;
		const float* e = sc + g * S;
		float acc = 0.0f;
		for (int jj = 0; jj < nk; jj++) acc = fmaf(e[jj], V[(size_t)jj * kvd], acc);
		a.part_o[(pbase + (size_t)g * a.n_split) * hd + d] = acc;
	}
}

__global__ void __launch_bounds__(THREADS) attn_combine_kernel(const __grid_constant__ attn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ float ws[]; /* [n_split + 1]: split weights, then 1 / L */
	const int h = blockIdx.x, t = blockIdx.y;
	const int pos = a.step->pos0 + t;
	const int ns = pos / S + 1, hd = a.hd, qd = a.nh * hd;
	const size_t base = ((size_t)t * a.nh + h) * a.n_split;
	if (threadIdx.x == 0) {
		float M = -FLT_MAX;
		for (int s = 0; s < ns; s++) M = fmaxf(M, a.part_ml[2 * (base + s)]);
		float L = 0.0f;
		for (int s = 0; s < ns; s++) {
			const float w = expf(a.part_ml[2 * (base + s)] - M);
			ws[s] = w;
			L = L + a.part_ml[2 * (base + s) + 1] * w;
		}
		ws[a.n_split] = 1.0f / L;
	}
	__syncthreads();
	const float inv = ws[a.n_split];
	for (int d = threadIdx.x; d < hd; d += THREADS) {
		float o = 0.0f;
		for (int s = 0; s < ns; s++) o = fmaf(a.part_o[(base + s) * hd + d], ws[s], o);
		o = o * inv;
		if (a.gate) {
			const float g = a.gate[(size_t)t * qd + (size_t)h * hd + d];
			o = o * (1.0f / (1.0f + expf(-g))); /* pv_sigmoid, as forward.c */
		}
		a.o[(size_t)t * qd + (size_t)h * hd + d] = o;
	}
}

} // namespace

int pv_cuda_attention_check(int nh, int nkv, int hd, int n_split, char* err, size_t errlen)
{
	if (nkv <= 0 || nh % nkv) return pv_errf(err, errlen, "CUDA backend: %d query heads over %d kv heads", nh, nkv);
	if (nh / nkv > MAX_G) return pv_errf(err, errlen, "CUDA backend: %d query heads per kv head (at most %d)", nh / nkv, MAX_G);
	if (n_split > MAX_SPLITS) return pv_errf(err, errlen, "CUDA backend: context of %d keys above %d", n_split * S, MAX_SPLITS * S);
	if (hd > MAX_HD) return pv_errf(err, errlen, "CUDA backend: head dim %d above %d", hd, MAX_HD);
	if (nh / nkv * hd > MAX_GHD)
		return pv_errf(err, errlen, "CUDA backend: %d query heads per kv head x head dim %d above %d", nh / nkv, hd, MAX_GHD);
	return 0;
}

int pv_cuda_attention(cudaStream_t st, const struct attn_args* a, int n, char* err, size_t errlen)
{
	if (pv_cuda_attention_check(a->nh, a->nkv, a->hd, a->n_split, err, errlen)) return -1;
	const int G = a->nh / a->nkv;
	const size_t smem1 = sizeof(float) * ((size_t)G * a->hd + (size_t)G * S);
	const size_t smem2 = sizeof(float) * ((size_t)a->n_split + 1);
	if (smem1 > 48 * 1024 || smem2 > 48 * 1024)
		return pv_errf(err, errlen, "CUDA backend: attention needs %zu / %zu bytes of shared memory", smem1, smem2);
	PV_LAUNCH("attention", err, errlen, attn_split_kernel, dim3((unsigned)a->n_split, (unsigned)a->nkv, (unsigned)n),
	          dim3(THREADS), smem1, st, *a);
	PV_LAUNCH("attention combine", err, errlen, attn_combine_kernel, dim3((unsigned)a->nh, (unsigned)n), dim3(THREADS), smem2,
	          st, *a);
	return 0;
}
