/*
 * moe.cu: the routed-expert FFN's small kernels (forward.c route / moe_layer).
 *
 *   route:   per row, one warp: softmax over all E router logits (max, exp, the sum in a fixed
 *            lane-then-butterfly order, divide), top-k by k warp argmax rounds (ties: the lower
 *            index, forward.c's rule), renormalisation of the k weights in slot order
 *   combine: per row, out = sum_j w_j * expert_j in the row's slot order, then (shared expert)
 *            + sigmoid(x . w_sg) * shared, the dot in a fixed block order
 * The experts themselves are gathered GEMVs (gemv.cu): each (row, slot) multiplies its row by its
 * expert alone, so a row's result never depends on which experts other rows chose.
 */
#include "common.cuh"

#include <float.h>
#include <limits.h>

namespace {

constexpr int THREADS = 256;

constexpr int RLIM = 32; /* experts per lane: E <= 1024 (the kernel is instantiated for 8, 16, 32) */
constexpr int KMAX = 16; /* experts per token */

/* One warp per row: lane l holds experts l, l + 32, ... in registers. Softmax: the max (exact in
 * any order), e_i = exp(z_i - max), their sum (lane sums in expert order, then the butterfly),
 * p_i = e_i / sum (written back over the logits); top-k by k rounds of a warp argmax (largest p,
 * ties: the lower index, forward.c's rule); then the renormalisation in slot order on lane 0.
 * (Was one thread per row: latency-bound at E = 256, PERF.md session 2.) */
template <int RMAX>
__global__ void __launch_bounds__(32) route_kernel(const __grid_constant__ moe_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int t = blockIdx.x, lane = threadIdx.x;
	const int E = a.E, k = a.k;
	float* p = a.logits + (size_t)t * E;
	float v[RMAX];
	float mx = -FLT_MAX;
#pragma unroll
	for (int i = 0; i < RMAX; i++) {
		const int e = lane + 32 * i;
		v[i] = e < E ? p[e] : -FLT_MAX;
		mx = fmaxf(mx, v[i]);
	}
	mx = pv_warp_max(mx);
	float part = 0.0f;
#pragma unroll
	for (int i = 0; i < RMAX; i++)
		if (lane + 32 * i < E) {
			v[i] = expf(v[i] - mx);
			part = part + v[i];
		}
	const float sum = pv_warp_sum(part);
#pragma unroll
	for (int i = 0; i < RMAX; i++)
		if (lane + 32 * i < E) {
			v[i] = v[i] / sum;
			p[lane + 32 * i] = v[i];
		}
	unsigned taken = 0;
	float wv[KMAX];
#pragma unroll
	for (int j = 0; j < KMAX; j++) {
		wv[j] = 0.0f;
		if (j >= k) continue;
		float bv = -FLT_MAX;
		int be = INT_MAX; /* none yet: loses to any expert */
#pragma unroll
		for (int i = 0; i < RMAX; i++) {
			const int e = lane + 32 * i;
			if (e < E && !((taken >> i) & 1u) && (be == INT_MAX || v[i] > bv)) {
				bv = v[i];
				be = e;
			}
		}
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
			const int oe = __shfl_xor_sync(0xffffffffu, be, o);
			if ((be == INT_MAX && oe != INT_MAX) || (oe != INT_MAX && (ov > bv || (ov == bv && oe < be)))) {
				bv = ov;
				be = oe;
			}
		}
		if (be != INT_MAX && (be & 31) == lane) taken |= 1u << (be >> 5);
		wv[j] = bv;
		if (lane == 0) a.idx[(size_t)t * k + j] = be;
	}
	if (lane == 0) {
		if (a.norm_topk) {
			float ws = 0.0f;
			for (int j = 0; j < k && j < KMAX; j++) ws = ws + wv[j];
			for (int j = 0; j < k && j < KMAX; j++) wv[j] = wv[j] / ws;
		}
		for (int j = 0; j < k && j < KMAX; j++) a.w[(size_t)t * k + j] = wv[j];
	}
}

__global__ void __launch_bounds__(THREADS) combine_kernel(const __grid_constant__ moe_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[THREADS / 32 + 1];
	const int t = blockIdx.x, H = a.H, k = a.k;
	float gsc = 0.0f; /* sigmoid(x . w_sg): one fixed-order sum, the same in every block of the row */
	if (a.shared) {
		float part = 0.0f;
		for (int i = threadIdx.x; i < H; i += THREADS) part = part + a.xn[(size_t)t * H + i] * a.sh_gate[i];
		part = pv_warp_sum(part);
		if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = part;
		__syncthreads();
		if (threadIdx.x == 0) {
			float s = red[0];
			for (int i = 1; i < THREADS / 32; i++) s = s + red[i];
			red[THREADS / 32] = 1.0f / (1.0f + expf(-s)); /* pv_sigmoid */
		}
		__syncthreads();
		gsc = red[THREADS / 32];
	}
	float wj[KMAX]; /* the row's expert weights, read once */
#pragma unroll
	for (int j = 0; j < KMAX; j++) wj[j] = j < k ? a.w[(size_t)t * k + j] : 0.0f;
	/* block y takes elements [y * THREADS, ...) of the row (every block computes the same gate
	 * sum above, in the same order) */
	for (int i = blockIdx.y * THREADS + threadIdx.x; i < H; i += gridDim.y * THREADS) {
		float o = 0.0f;
#pragma unroll
		for (int j = 0; j < KMAX; j++)
			if (j < k) o = o + wj[j] * a.eo[((size_t)t * k + j) * H + i];
		if (a.shared) o = o + gsc * a.sh[(size_t)t * H + i];
		a.out[(size_t)t * H + i] = o;
	}
}

} // namespace

int pv_cuda_moe_route(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct moe_args* a, char* err, size_t errlen)
{
	if (a->E < 1 || a->E > 32 * RLIM || a->k < 1 || a->k > KMAX || a->k > a->E)
		return pv_errf(err, errlen, "CUDA backend: MoE routing of %d experts, %d per token (at most %d and %d)", a->E, a->k,
		               32 * RLIM, KMAX);
	/* registers per lane for the row's experts: the smallest instance that holds E (the results do
	 * not depend on it: lanes own experts l, l + 32, ... either way) */
	void (*kern)(moe_args) = a->E <= 256 ? route_kernel<8> : a->E <= 512 ? route_kernel<16> : route_kernel<32>;
	PV_LAUNCH("moe route", tu, err, errlen, kern, dim3((unsigned)a->n), dim3(32), 0, st, *a);
	return 0;
}

int pv_cuda_moe_combine(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct moe_args* a, char* err, size_t errlen)
{
	PV_LAUNCH("moe combine", tu, err, errlen, combine_kernel,
	          dim3((unsigned)a->n, (unsigned)((a->H + THREADS - 1) / THREADS)), dim3(THREADS), 0, st, *a);
	return 0;
}
