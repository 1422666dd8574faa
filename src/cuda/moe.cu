/*
 * moe.cu: the routed-expert FFN's small kernels (forward.c route / moe_layer).
 *
 *   route:   per row, on one thread, forward.c's route() step for step: softmax over all E
 *            router logits (max, then sum of exp in expert order, then divide), top-k by repeated
 *            selection (ties: the lower index), renormalisation of the k weights when asked
 *   combine: per row, out = sum_j w_j * expert_j in the row's slot order, then (shared expert)
 *            + sigmoid(x . w_sg) * shared, the dot in a fixed block order
 * The experts themselves are gathered GEMVs (gemv.cu): each (row, slot) multiplies its row by its
 * expert alone, so a row's result never depends on which experts other rows chose.
 */
#include "common.cuh"

#include <float.h>

namespace {

constexpr int THREADS = 256;

__global__ void route_kernel(const __grid_constant__ moe_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int t = blockIdx.x * blockDim.x + threadIdx.x;
	if (t >= a.n) return;
	const int E = a.E, k = a.k;
	float* p = a.logits + (size_t)t * E;
	int* idx = a.idx + (size_t)t * k;
	float* w = a.w + (size_t)t * k;
	float mx = -FLT_MAX;
	for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
	float sum = 0.0f;
	for (int e = 0; e < E; e++) {
		p[e] = expf(p[e] - mx);
		sum = sum + p[e];
	}
	for (int e = 0; e < E; e++) p[e] = p[e] / sum;
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
	if (a.norm_topk) {
		float ws = 0.0f;
		for (int j = 0; j < k; j++) ws = ws + w[j];
		for (int j = 0; j < k; j++) w[j] = w[j] / ws;
	}
}

__global__ void __launch_bounds__(THREADS) combine_kernel(const __grid_constant__ moe_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[THREADS / 32 + 1];
	const int t = blockIdx.x, H = a.H, k = a.k;
	float gsc = 0.0f;
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
	for (int i = threadIdx.x; i < H; i += THREADS) {
		float o = 0.0f;
		for (int j = 0; j < k; j++) o = o + a.w[(size_t)t * k + j] * a.eo[((size_t)t * k + j) * H + i];
		if (a.shared) o = o + gsc * a.sh[(size_t)t * H + i];
		a.out[(size_t)t * H + i] = o;
	}
}

} // namespace

int pv_cuda_moe_route(cudaStream_t st, const struct moe_args* a, char* err, size_t errlen)
{
	PV_LAUNCH("moe route", err, errlen, route_kernel, dim3((unsigned)((a->n + 31) / 32)), dim3(32), 0, st, *a);
	return 0;
}

int pv_cuda_moe_combine(cudaStream_t st, const struct moe_args* a, char* err, size_t errlen)
{
	PV_LAUNCH("moe combine", err, errlen, combine_kernel, dim3((unsigned)a->n), dim3(THREADS), 0, st, *a);
	return 0;
}
