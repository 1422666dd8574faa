/*
 * attention.cu: causal decode/verify attention over the KV cache (f32, f16, bf16 or q8_0
 * elements, common.cuh "KV cache element types"), split-KV.
 *
 * Row t (position p = pos0 + t) attends to keys 0..p. The keys are cut into splits of S = 32
 * positions (a session constant, cuda.att_split: 16, 32 or 64; why 32, PERF.md "Tuning
 * switches"): split s covers [S s, S s + S) ∩ [0, p]. This layout depends on
 * p alone, never on the number of rows in the call, on the context size or on the grid.
 *
 * Pass 1 (attn_split_kernel; a block of 8 warps per (split, kv head, row), the group of G query
 * heads sharing the kv head done together so K and V are read once; blocks loop over splits with
 * a stride of the grid width, which only decides who computes a split, never how):
 *   - scores: warp w takes keys w, w+8, ... of the split; lane l holds K[d] for the vectors
 *     d/VE = l, l+32 (VE = 4 f32 or 8 f16/bf16/q8_0 elements, widened to f32 on load; head
 *     dims up to 256, a multiple of VE), each score is the lane's fmaf chain over its elements
 *     in increasing order, then the xor butterfly, times 1/sqrt(hd);
 *   - per head g (one warp each): the split's max m, e_j = exp(score_j - m), l = sum e_j (lane
 *     l sums keys l, l+32 in order, then the butterfly);
 *   - o_s[g][d] = sum_j e_j v_j[d]: a thread owns VE consecutive d of one head (one vector load
 *     of V per key) and one of KG key slices (KG = 8 / 4 / 2 / 1, fixed by G*hd and the cache
 *     type alone), the keys of its slice in increasing order with one fmaf each; the KG slice
 *     sums are then added in slice order.
 * A 16-bit cache halves the bytes every split reads; the element type is a session constant, so
 * the order of every sum is still a function of the position alone.
 * Pass 2 (attn_combine_kernel; a block per head and row): M = max_s m_s; w_s = exp(m_s - M);
 * L = sum_s l_s w_s (lane-strided over s, then the butterfly, every warp the same) and
 * o[d] = sum_s o_s[d] w_s in split order; o = o * (1 / L), then the output gate if any. The
 * number of splits a row combines is min(p / 64 + 1, n_split); nothing is staged in shared
 * memory (every thread recomputes the same w_s), so no index depends on the context size.
 * The multi-session forms (continuous batching, many.cu) run the same two passes, one body each,
 * with row t at its own position over its own session's cache (struct dmany, common.cuh).
 */
#include "common.cuh"

#include <float.h>

namespace {

constexpr int SMAX = PV_ATT_SPLIT; /* the largest split: scores are staged [G][SMAX] */
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int MAX_HD = 256;
constexpr int MAX_GHD = 4096; /* query heads per kv head x head dim */
constexpr int MAX_G = 16;     /* query heads per kv head */
constexpr int MAX_SPLITS = 1 << 16;
constexpr int MAX_GRID_X = 64; /* blocks per (kv head, row) along the splits */
constexpr int KEY_UNROLL = 4;  /* keys whose K rows a warp loads before using them */

static_assert(SMAX % 64 == 0, "splits of 16, 32 or 64 keys: the (up to) 8 key slices divide them");
static_assert(SMAX <= 64, "per-head softmax: each lane holds two keys");

/* key slices of the V accumulation: a function of G*hd and the elements per vector (ve) alone */
__host__ __device__ inline int key_slices(int ghd, int ve)
{
	const int items = ghd / ve;
	int kg = THREADS / items;
	return kg >= 8 ? 8 : kg >= 4 ? 4 : kg >= 2 ? 2 : 1;
}

/* shared floats of a split block: q [G][hd], scores [G][S], the V slice sums [KG][G*hd]; the fused
 * input stage adds a scratch row of hd floats per warp after them */
__host__ __device__ inline int split_floats(int G, int hd, int ve)
{
	const int ghd = G * hd, KG = key_slices(ghd, ve);
	return ghd + G * SMAX + (KG > 1 ? KG * ghd : 0);
}

size_t split_smem(int G, int hd, int fuse, int ve)
{
	return sizeof(float) * ((size_t)split_floats(G, hd, ve) + (fuse ? (size_t)WARPS * hd : 0));
}

int elem_vec(int kvt) { return kvt == PV_KV_F32 ? 4 : 8; }

/* Pass 1 for row t = blockIdx.z: the same code for either source, so a row's bits never depend
 * on which kernel ran it. */
template <int KVT, class SRC>
__device__ __forceinline__ void attn_split_body(const attn_args& a, const SRC rows)
{
	constexpr int VE = pv_kv_vec<KVT>(); /* elements per vector of K or V */
	constexpr int NV = MAX_HD / (32 * VE); /* vectors of a K row per lane */
	extern __shared__ float4 sm4[];
	float* sm = reinterpret_cast<float*>(sm4);
	const int kh = blockIdx.y, t = blockIdx.z;
	const int pos = rows.pos(t);
	const int hd = a.hd, G = a.nh / a.nkv, kvd = a.nkv * hd, qd = a.nh * hd, ghd = G * hd;
	const size_t HB = pv_kv_hbytes(KVT, hd), RB = (size_t)a.nkv * HB; /* bytes of a head slice, a cache row */
	const int S = a.split; /* keys per split: 32, or 16 / 64 (PV_CUDA_ATT_SPLIT); fixed per session */
	const int hdv = hd / VE, items = ghd / VE, KG = key_slices(ghd, VE), slice = S / KG;
	float* qs = sm;                 /* [G][hd]          */
	float* sc = sm + ghd;           /* [G][SMAX]        */
	float4* pv = reinterpret_cast<float4*>(sc + G * SMAX); /* [KG][items][VE / 4] (KG > 1) */
	const char* kc = static_cast<const char*>(rows.k(t));
	const char* vc = static_cast<const char*>(rows.v(t));
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int ns = min(pos / S + 1, a.n_split);
	if ((int)blockIdx.x >= ns) return;

	if (a.fuse) {
		/* the input stage of qkv_post_kernel for this kv head, same function, same bits: the G
		 * query heads into qs (every block), and in the block that owns the split holding pos
		 * (it reads that key below, after the barrier at the top of its split loop) the k head
		 * normed and roped into the cache and the v head copied */
		const struct qkv_post_args& pa = a.pa;
		const int half = pa.R / 2;
		const float *cs = pa.cos + (size_t)pos * half, *sn = pa.sin + (size_t)pos * half;
		float* buf = sm + split_floats(G, hd, VE) + warp * hd;
		const int last = (ns - 1) % (int)gridDim.x == (int)blockIdx.x;
		const int items = G + (last ? 2 : 0);
		for (int it = warp; it < items; it += WARPS) {
			if (it < G) {
				const int h = kh * G + it;
				pv_head_post(pa.qraw + (size_t)t * pa.ldq + (size_t)h * (pa.gated ? 2 * hd : hd), buf, qs + it * hd, pa.q_norm,
				             hd, pa.R, pa.eps, cs, sn);
			} else if (it == G) {
				pv_head_post<KVT>(pa.kraw + (size_t)t * kvd + (size_t)kh * hd, buf,
				                  static_cast<char*>(pa.kc) + (size_t)pos * RB + (size_t)kh * HB, pa.k_norm, hd, pa.R,
				                  pa.eps, cs, sn);
			} else {
				pv_kv_put_head<KVT>(static_cast<char*>(pa.vc) + (size_t)pos * RB + (size_t)kh * HB,
				                    pa.vraw + (size_t)t * kvd + (size_t)kh * hd, hd);
			}
		}
	} else {
		for (int i = threadIdx.x; i < ghd; i += THREADS) qs[i] = a.q[(size_t)t * qd + (size_t)kh * ghd + i];
	}
	const float scale = 1.0f / sqrtf((float)hd);

	for (int sp = blockIdx.x; sp < ns; sp += gridDim.x) {
		const int j0 = sp * S;
		const int j1 = min(j0 + S, pos + 1), nk = j1 - j0;
		__syncthreads(); /* qs written; the previous split's sc and pv consumed */

		/* scores */
		for (int jb = warp; jb < nk; jb += WARPS * KEY_UNROLL) {
			float kr[KEY_UNROLL][NV][VE];
#pragma unroll
			for (int u = 0; u < KEY_UNROLL; u++) {
				const int jj = jb + WARPS * u;
				const char* K = kc + (size_t)(j0 + jj) * RB + (size_t)kh * HB;
#pragma unroll
				for (int i = 0; i < NV; i++) {
					const int dv = lane + 32 * i;
					/* fused: plain loads, coherent with this block's own write of the key at pos */
					if (jj < nk && dv < hdv) {
						pv_kv_load<KVT>(K, dv, a.fuse, kr[u][i], hd);
					} else {
#pragma unroll
						for (int e = 0; e < VE; e++) kr[u][i][e] = 0.0f;
					}
				}
			}
#pragma unroll
			for (int u = 0; u < KEY_UNROLL; u++) {
				const int jj = jb + WARPS * u;
				for (int g = 0; g < G; g++) {
					float part = 0.0f;
#pragma unroll
					for (int i = 0; i < NV; i++) {
						const int dv = lane + 32 * i;
						if (dv < hdv) {
#pragma unroll
							for (int h = 0; h < VE / 4; h++) {
								const float4 q = *reinterpret_cast<const float4*>(qs + g * hd + VE * dv + 4 * h);
								part = fmaf(q.x, kr[u][i][4 * h], part);
								part = fmaf(q.y, kr[u][i][4 * h + 1], part);
								part = fmaf(q.z, kr[u][i][4 * h + 2], part);
								part = fmaf(q.w, kr[u][i][4 * h + 3], part);
							}
						}
					}
					part = pv_warp_sum(part);
					if (lane == 0 && jj < nk) sc[g * SMAX + jj] = part * scale;
				}
			}
		}
		__syncthreads();

		/* softmax pieces, one warp per head */
		const size_t pbase = ((size_t)t * a.nh + (size_t)kh * G) * a.n_split + sp; /* + g * n_split */
		for (int g = warp; g < G; g += WARPS) {
			float m = -FLT_MAX;
			for (int jj = lane; jj < nk; jj += 32) m = fmaxf(m, sc[g * SMAX + jj]);
			m = pv_warp_max(m);
			float l = 0.0f;
			for (int jj = lane; jj < nk; jj += 32) {
				const float e = expf(sc[g * SMAX + jj] - m);
				sc[g * SMAX + jj] = e;
				l = l + e;
			}
			l = pv_warp_sum(l);
			if (lane == 0) {
				a.part_ml[2 * (pbase + (size_t)g * a.n_split)] = m;
				a.part_ml[2 * (pbase + (size_t)g * a.n_split) + 1] = l;
			}
		}
		__syncthreads();

		/* o_s = sum_j e_j v_j: thread (slice kg, item it) */
		for (int idx = threadIdx.x; idx < KG * items; idx += THREADS) {
			const int kg = idx / items, it = idx - kg * items;
			const int g = it / hdv, dv = it - g * hdv;
			const int k0 = kg * slice, k1 = min(k0 + slice, nk);
			const char* V = vc + (size_t)j0 * RB + (size_t)kh * HB;
			const float* e = sc + g * SMAX;
			float acc[VE];
#pragma unroll
			for (int c = 0; c < VE; c++) acc[c] = 0.0f;
#pragma unroll 8
			for (int jj = k0; jj < k1; jj++) {
				float v[VE];
				pv_kv_load<KVT>(V + (size_t)jj * RB, dv, a.fuse, v, hd);
				const float w = e[jj];
#pragma unroll
				for (int c = 0; c < VE; c++) acc[c] = fmaf(w, v[c], acc[c]);
			}
			float4* dst = KG == 1 ? reinterpret_cast<float4*>(a.part_o + (pbase + (size_t)g * a.n_split) * hd) + dv * (VE / 4)
			                      : pv + (size_t)idx * (VE / 4);
#pragma unroll
			for (int h = 0; h < VE / 4; h++) dst[h] = make_float4(acc[4 * h], acc[4 * h + 1], acc[4 * h + 2], acc[4 * h + 3]);
		}
		if (KG > 1) {
			__syncthreads();
			for (int it = threadIdx.x; it < items; it += THREADS) {
				const int g = it / hdv, dv = it - g * hdv;
#pragma unroll
				for (int h = 0; h < VE / 4; h++) {
					float4 s = pv[(size_t)it * (VE / 4) + h];
					for (int kg = 1; kg < KG; kg++) {
						const float4 p = pv[((size_t)kg * items + it) * (VE / 4) + h];
						s.x = s.x + p.x;
						s.y = s.y + p.y;
						s.z = s.z + p.z;
						s.w = s.w + p.w;
					}
					reinterpret_cast<float4*>(a.part_o + (pbase + (size_t)g * a.n_split) * hd)[dv * (VE / 4) + h] = s;
				}
			}
		}
	}
}

/* cuda.attn_early: before the PDL wait, the block asks L2 for the K and V head slices of its
 * first split's keys below the row's position (earlier steps wrote them; the key at the position
 * is this kernel's own, fused, write), one 128-byte line per thread at a time: no registers are
 * held, and the loads after the q stage find them in L2. The position is the step struct's,
 * written by the host before the graph starts. */
template <int KVT, class SRC>
__device__ __forceinline__ void attn_prefetch(const attn_args& a, const SRC rows)
{
	const int kh = blockIdx.y, t = blockIdx.z, pos = rows.pos(t);
	const int j0 = (int)blockIdx.x * a.split, j1 = min(j0 + a.split, pos);
	if (j0 >= j1) return;
	const size_t HB = pv_kv_hbytes(KVT, a.hd), RB = (size_t)a.nkv * HB;
	const int lines = (int)((HB + 127) / 128), per = (j1 - j0) * lines;
	for (int i = threadIdx.x; i < 2 * per; i += THREADS) {
		const int kv = i >= per, r = i - kv * per, j = j0 + r / lines, l = r - (r / lines) * lines;
		const char* p = static_cast<const char*>(kv ? rows.v(t) : rows.k(t)) + (size_t)j * RB + (size_t)kh * HB + 128 * (size_t)l;
		asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
	}
}

template <int KVT, bool EARLY = false>
__global__ void __launch_bounds__(THREADS) attn_split_kernel(const __grid_constant__ attn_args a)
{
	if constexpr (EARLY) attn_prefetch<KVT>(a, pv_rows_one<attn_args>{ a });
	pv_grid_sync(); /* before any other global memory access (PDL) */
	attn_split_body<KVT>(a, pv_rows_one<attn_args>{ a });
}

/* The multi-session form (forward_many, many.cu): row t is session t's one-row step, at its own
 * position m->pos[t], over its own cache of this layer (m->kt[t][layer], m->vt[t][layer]); q,
 * part_o and part_ml are the host session's scratch rows t. Never fused (qkv_post_many ran). */
template <int KVT>
__global__ void __launch_bounds__(THREADS) attn_split_many_kernel(const __grid_constant__ attn_args a, const struct dmany* m,
                                                                  int layer)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	attn_split_body<KVT>(a, pv_rows_many{ m, layer });
}

constexpr int CTHREADS = 128;

/* Pass 2 for row t = blockIdx.y (see attn_split_body) */
template <class SRC>
__device__ __forceinline__ void attn_combine_body(const attn_args& a, const SRC rows)
{
	const int h = blockIdx.x, t = blockIdx.y;
	const int pos = rows.pos(t);
	const int ns = min(pos / a.split + 1, a.n_split), hd = a.hd, qd = a.nh * hd;
	const int lane = threadIdx.x & 31;
	const size_t base = ((size_t)t * a.nh + h) * a.n_split;
	const float2* ml = reinterpret_cast<const float2*>(a.part_ml) + base;
	/* every warp computes the same M and L (the same lanes, the same order) */
	float M = -FLT_MAX;
	for (int s = lane; s < ns; s += 32) M = fmaxf(M, ml[s].x);
	M = pv_warp_max(M);
	float L = 0.0f;
	for (int s = lane; s < ns; s += 32) {
		const float2 v = ml[s];
		L = L + v.y * expf(v.x - M);
	}
	L = pv_warp_sum(L);
	const float inv = 1.0f / L;
	for (int d = threadIdx.x; d < hd; d += CTHREADS) {
		float o = 0.0f;
		for (int s = 0; s < ns; s++) o = fmaf(a.part_o[(base + s) * hd + d], expf(ml[s].x - M), o);
		o = o * inv;
		if (a.gate) {
			const float g = a.gate[(size_t)t * a.gate_ld + (size_t)h * a.gate_hs + d];
			o = o * (1.0f / (1.0f + expf(-g))); /* pv_sigmoid, as forward.c */
		}
		a.o[(size_t)t * qd + (size_t)h * hd + d] = o;
	}
}

__global__ void __launch_bounds__(CTHREADS) attn_combine_kernel(const __grid_constant__ attn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	attn_combine_body(a, pv_rows_one<attn_args>{ a });
}

__global__ void __launch_bounds__(CTHREADS) attn_combine_many_kernel(const __grid_constant__ attn_args a, const struct dmany* m)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	attn_combine_body(a, pv_rows_many{ m, 0 });
}

} // namespace


int pv_cuda_attention_check(int nh, int nkv, int hd, int n_split, int kvt, char* err, size_t errlen)
{
	if (kvt != PV_KV_F32 && kvt != PV_KV_F16 && kvt != PV_KV_BF16 && kvt != PV_KV_Q8_0)
		return pv_errf(err, errlen, "CUDA backend: KV cache element type %d", kvt);
	if (nkv <= 0 || nh % nkv) return pv_errf(err, errlen, "CUDA backend: %d query heads over %d kv heads", nh, nkv);
	if (nh / nkv > MAX_G) return pv_errf(err, errlen, "CUDA backend: %d query heads per kv head (at most %d)", nh / nkv, MAX_G);
	if (n_split > MAX_SPLITS) return pv_errf(err, errlen, "CUDA backend: %d attention splits above %d", n_split, MAX_SPLITS);
	if (hd > MAX_HD || hd % elem_vec(kvt))
		return pv_errf(err, errlen, "CUDA backend: head dim %d (a multiple of %d up to %d with this KV cache type)", hd,
		               elem_vec(kvt), MAX_HD);
	if (nh / nkv * hd > MAX_GHD)
		return pv_errf(err, errlen, "CUDA backend: %d query heads per kv head x head dim %d above %d", nh / nkv, hd, MAX_GHD);
	if (split_smem(nh / nkv, hd, 1, elem_vec(kvt)) > 48 * 1024)
		return pv_errf(err, errlen, "CUDA backend: attention needs %zu bytes of shared memory",
		               split_smem(nh / nkv, hd, 1, elem_vec(kvt)));
	return 0;
}

/* the checks of both launchers */
static int attention_args_check(const struct attn_args* a, int n, char* err, size_t errlen)
{
	if (pv_cuda_attention_check(a->nh, a->nkv, a->hd, a->n_split, a->kvt, err, errlen)) return -1;
	if (a->fuse && a->pa.kvt != a->kvt) return pv_errf(err, errlen, "CUDA backend: fused attention with two cache types");
	if (a->split != 16 && a->split != 32 && a->split != 64) return pv_errf(err, errlen, "CUDA backend: attention split of %d keys", a->split);
	if (a->fuse && (n != 1 || a->pa.hd > MAX_HD || a->pa.R > a->pa.hd))
		return pv_errf(err, errlen, "CUDA backend: fused attention input stage with %d rows", n);
	return 0;
}

/* the one-session split kernel for cache type kvt (attention_args_check: one of four) */
template <bool EARLY>
static void (*split_kernel(int kvt))(attn_args)
{
	return kvt == PV_KV_F16    ? attn_split_kernel<PV_KV_F16, EARLY>
	       : kvt == PV_KV_BF16 ? attn_split_kernel<PV_KV_BF16, EARLY>
	       : kvt == PV_KV_Q8_0 ? attn_split_kernel<PV_KV_Q8_0, EARLY>
	                           : attn_split_kernel<PV_KV_F32, EARLY>;
}

int pv_cuda_attention(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct attn_args* a, int n, char* err,
                      size_t errlen)
{
	if (attention_args_check(a, n, err, errlen)) return -1;
	const int G = a->nh / a->nkv;
	const unsigned gx = (unsigned)(a->n_split < MAX_GRID_X ? a->n_split : MAX_GRID_X);
	void (*kern)(attn_args) = tu->attn_early ? split_kernel<true>(a->kvt) : split_kernel<false>(a->kvt);
	PV_LAUNCH("attention", tu, err, errlen, kern, dim3(gx, (unsigned)a->nkv, (unsigned)n), dim3(THREADS),
	          split_smem(G, a->hd, a->fuse, elem_vec(a->kvt)), st, *a);
	PV_LAUNCH("attention combine", tu, err, errlen, attn_combine_kernel, dim3((unsigned)a->nh, (unsigned)n), dim3(CTHREADS),
	          0, st, *a);
	return 0;
}

int pv_cuda_attention_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct attn_args* a, const struct dmany* m,
                           int layer, int n, char* err, size_t errlen)
{
	if (attention_args_check(a, n, err, errlen)) return -1;
	if (a->fuse || n > PV_CUDA_ROWS) return pv_errf(err, errlen, "CUDA backend: multi-session attention of %d rows (fused %d)", n, a->fuse);
	const int G = a->nh / a->nkv;
	/* the grid only decides which block computes a split, never how: n_split is the host
	 * session's, and every row's position is below its context (many.cu checks) */
	const unsigned gx = (unsigned)(a->n_split < MAX_GRID_X ? a->n_split : MAX_GRID_X);
	void (*kern)(attn_args, const struct dmany*, int) = a->kvt == PV_KV_F16    ? attn_split_many_kernel<PV_KV_F16>
	                                                    : a->kvt == PV_KV_BF16 ? attn_split_many_kernel<PV_KV_BF16>
	                                                    : a->kvt == PV_KV_Q8_0 ? attn_split_many_kernel<PV_KV_Q8_0>
	                                                                           : attn_split_many_kernel<PV_KV_F32>;
	PV_LAUNCH("attention (many)", tu, err, errlen, kern, dim3(gx, (unsigned)a->nkv, (unsigned)n), dim3(THREADS),
	          split_smem(G, a->hd, 0, elem_vec(a->kvt)), st, *a, m, layer);
	PV_LAUNCH("attention combine (many)", tu, err, errlen, attn_combine_many_kernel, dim3((unsigned)a->nh, (unsigned)n),
	          dim3(CTHREADS), 0, st, *a, m);
	return 0;
}
