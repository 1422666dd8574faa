/*
 * deltanet_wy.cu: the Gated DeltaNet rule over T prompt rows in its chunked (WY) form
 * (cuda.prefill_delta=chunk; qwen-models.md §6.7, the CPU's delta_chunked in cpu/deltanet.c).
 * The row-by-row kernels (deltanet_prefill.cu) walk 512 rows one after another per head; here the
 * rows go in chunks of WC = 64 and only the chunks are sequential, as matrix products.
 *
 * For chunk rows t < C (C <= 64) of value head h, with the normalized q_t, k_t, beta_t, the log
 * decay g_t (<= 0) and gam_t = g_0 + .. + g_t, incoming state S0 [dk][dv]:
 *   A[t][s] = beta_t (k_t . k_s) exp(gam_t - gam_s), s < t
 *   (I + A) [U | W] = [diag(beta) V | diag(beta exp(gam)) K]      (forward substitution)
 *   V' = U - W S0
 *   o_t = exp(gam_t) q_t^T S0 + sum_{s<=t} (q_t . k_s) exp(gam_t - gam_s) V'_s
 *   S1  = exp(gam_last) S0 + sum_s exp(gam_last - gam_s) k_s V'_s^T
 *
 * wy_prep_kernel: one block per (chunk, head), every chunk at once (nothing here reads S): the
 *   q/k l2 norms, beta, gam, A, the solve (a thread per column of [U | W], its column in
 *   registers), and what the scan multiplies: U, W, Qe = exp(gam_t) q_t, KdT[i][s] =
 *   exp(gam_last - gam_s) k_s[i] (transposed), P[t][s] = (q_t . k_s) exp(gam_t - gam_s) for
 *   s <= t, exp(gam_last).
 * wy_scan_kernel: one block per (32 state columns, head) walking the chunks in order: V', o and
 *   S1 from the stage above, S's 32 columns in shared memory.
 * f32 throughout (no tensor cores; fmaf, one rounding per product-add, under -fmad=false): within float rounding of the row-by-row form, not bitwise
 * (test_cuda prefill holds it to the exact path like the other prompt kernels). Rows past the
 * prompt's end in the last chunk are zeros (beta 0, g 0): they change nothing.
 */
#include "prefill.cuh"

#include <string.h>

namespace {

constexpr int WC = 64;       /* rows per chunk                        */
constexpr int WT = 256;      /* threads of both kernels               */
constexpr int WMAX_DK = 128; /* dk, dv at most this (dv + dk columns) */

/* floats of one (chunk, head) record: U [WC][dv], W [WC][dk], Qe [WC][dk], KdT [dk][WC],
 * P [WC][WC], exp(gam_last), padded to 4 */
__host__ __device__ inline size_t wy_rec(int dk, int dv)
{
	return (size_t)WC * dv + 3 * (size_t)WC * dk + (size_t)WC * WC + 4;
}

/* shared row stride of q, k: 16-byte rows (float4 loads), and 8 rows apart land in distinct banks
 * for a quarter warp's float4s */
__host__ __device__ inline int wy_ldk(int dk) { return dk + 4; }

size_t prep_smem(int dk) { return sizeof(float) * (2 * (size_t)WC * wy_ldk(dk) + (size_t)WC * (WC + 1) + 3 * WC); }

__global__ void __launch_bounds__(WT) wy_prep_kernel(const __grid_constant__ delta_args a, float* wy)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ __align__(16) float sm[];
	const int dk = a.dk, dv = a.dv, Hk = a.Hk, Hv = a.Hv, r = Hv / Hk, ld = wy_ldk(dk);
	float* Qh = sm;                  /* [WC][ld] normalized, scaled q        */
	float* Kh = Qh + WC * ld;        /* [WC][ld] normalized k                */
	float* A = Kh + WC * ld;         /* [WC][WC + 1]                         */
	float* beta = A + WC * (WC + 1); /* [WC]                                 */
	float* gl = beta + WC;           /* [WC] log decay                       */
	float* gam = gl + WC;            /* [WC] its running sum over the chunk  */
	const int ch = blockIdx.x, h = blockIdx.y, t0 = ch * WC, cl = min(WC, a.n - t0);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int kd = Hk * dk, cd = 2 * kd + Hv * dv, kh = a.v_tiled ? h % Hk : h / r;
	float* rec = wy + ((size_t)ch * Hv + h) * wy_rec(dk, dv);
	float *U = rec, *Wm = U + WC * dv, *Qe = Wm + WC * dk, *KdT = Qe + WC * dk, *P = KdT + WC * dk;
	const float qscale = 1.0f / sqrtf((float)dk);
	/* q, k of row t by warp t % 8: the sums of squares by the warp's butterfly */
	for (int t = warp; t < WC; t += WT / 32) {
		const float* u = a.u + (size_t)(t0 + t) * cd;
		float sq = 0.0f, sk = 0.0f;
		for (int e = lane; e < dk; e += 32) {
			const float q = t < cl ? u[(size_t)kh * dk + e] : 0.0f, k = t < cl ? u[kd + (size_t)kh * dk + e] : 0.0f;
			Qh[t * ld + e] = q;
			Kh[t * ld + e] = k;
			sq = fmaf(q, q, sq);
			sk = fmaf(k, k, sk);
		}
		sq = pv_warp_sum(sq);
		sk = pv_warp_sum(sk);
		const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.0f / sqrtf(sk + 1e-6f);
		for (int e = lane; e < dk; e += 32) {
			Qh[t * ld + e] *= rq;
			Kh[t * ld + e] *= rk;
		}
	}
	if (tid < WC) {
		float b = 0.0f, g = 0.0f;
		if (tid < cl) {
			const int t = t0 + tid;
			float bn, gn;
			if (a.ba_grouped) {
				const int grp = h / r, jj = h % r;
				bn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + jj];
				gn = a.ab[(size_t)t * 2 * Hv + grp * 2 * r + r + jj];
			} else {
				bn = a.b[(size_t)t * Hv + h];
				gn = a.a[(size_t)t * Hv + h];
			}
			b = pv_d_sigmoid(bn);
			g = a.ssm_a[h] * pv_d_softplus(gn + a.dt_bias[h]);
		}
		beta[tid] = b;
		gl[tid] = g;
	}
	__syncthreads();
	if (tid == 0) {
		float acc = 0.0f;
		for (int t = 0; t < WC; t++) gam[t] = acc = acc + gl[t];
	}
	__syncthreads();
	/* A and P: thread (s = tid % 64, g = tid / 64) takes rows t = g + 4 m, m < 16, a warp's lanes 32
	 * consecutive s: per 4 elements one float4 of k_s and two broadcast float4s (k_t, q_t) per row,
	 * 8 fmaf each (the pairs s > t too, then dropped: the loads, not the products, bound this) */
	{
		const int s = tid % WC, g = tid / WC;
		float kk[16], qk[16];
#pragma unroll
		for (int m = 0; m < 16; m++) kk[m] = qk[m] = 0.0f;
		for (int e = 0; e < dk; e += 4) {
			const float4 ks = *reinterpret_cast<const float4*>(Kh + s * ld + e);
#pragma unroll
			for (int m = 0; m < 16; m++) {
				const int t = g + 4 * m;
				const float4 kt = *reinterpret_cast<const float4*>(Kh + t * ld + e);
				const float4 qt = *reinterpret_cast<const float4*>(Qh + t * ld + e);
				kk[m] = fmaf(kt.w, ks.w, fmaf(kt.z, ks.z, fmaf(kt.y, ks.y, fmaf(kt.x, ks.x, kk[m]))));
				qk[m] = fmaf(qt.w, ks.w, fmaf(qt.z, ks.z, fmaf(qt.y, ks.y, fmaf(qt.x, ks.x, qk[m]))));
			}
		}
#pragma unroll
		for (int m = 0; m < 16; m++) {
			const int t = g + 4 * m;
			const float dec = s <= t ? expf(gam[t] - gam[s]) : 0.0f;
			A[t * (WC + 1) + s] = s < t ? beta[t] * kk[m] * dec : 0.0f;
			P[t * WC + s] = qk[m] * dec;
		}
	}
	const float glast = gam[WC - 1];
	for (int p = tid; p < WC * dk; p += WT) {
		const int t = p / dk, e = p % dk;
		Qe[p] = expf(gam[t]) * Qh[t * ld + e];
		KdT[(size_t)e * WC + t] = expf(glast - gam[t]) * Kh[t * ld + e];
	}
	if (tid == 0) P[WC * WC] = expf(glast);
	__syncthreads();
	/* the solve: thread j owns column j of [U | W] (j < dv: beta v; else beta exp(gam) k) */
	const int j = tid;
	if (j < dv + dk) {
		float x[WC];
		const float* vsrc = a.u + 2 * (size_t)kd + (size_t)h * dv + j;
#pragma unroll
		for (int t = 0; t < WC; t++) {
			float rhs;
			if (j < dv) rhs = t < cl ? beta[t] * vsrc[(size_t)(t0 + t) * cd] : 0.0f;
			else rhs = beta[t] * expf(gam[t]) * Kh[t * ld + j - dv];
#pragma unroll
			for (int s = 0; s < t; s++) rhs = fmaf(-A[t * (WC + 1) + s], x[s], rhs);
			x[t] = rhs;
		}
		if (j < dv)
#pragma unroll
			for (int t = 0; t < WC; t++) U[t * dv + j] = x[t];
		else
#pragma unroll
			for (int t = 0; t < WC; t++) Wm[t * dk + j - dv] = x[t];
	}
}

size_t scan_smem(int dk)
{
	return sizeof(float) * ((size_t)dk * 33 + WC * 33 + WC * 33 + 3 * (size_t)WC * dk + (size_t)WC * WC + 4);
}

/* 4 consecutive shared floats (16-byte aligned, the same for every lane) */
__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

/* acc[k] = sum_i M[warp + 8 k][i] S[i][lane], i in order by fmaf (M: rows of dk floats; S: rows of 33) */
__device__ __forceinline__ void rows_by_s(float (&acc)[8], const float* M, const float* Ss, int dk, int warp, int lane)
{
#pragma unroll
	for (int k = 0; k < 8; k++) acc[k] = 0.0f;
	for (int i = 0; i < dk; i += 4) {
		const float s0 = Ss[i * 33 + lane], s1 = Ss[(i + 1) * 33 + lane], s2 = Ss[(i + 2) * 33 + lane],
		            s3 = Ss[(i + 3) * 33 + lane];
#pragma unroll
		for (int k = 0; k < 8; k++) {
			const float4 m = ld4(M + (warp + 8 * k) * dk + i);
			acc[k] = fmaf(m.w, s3, fmaf(m.z, s2, fmaf(m.y, s1, fmaf(m.x, s0, acc[k]))));
		}
	}
}

__global__ void __launch_bounds__(WT) wy_scan_kernel(const __grid_constant__ delta_args a, const float* wy, float* oraw)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ __align__(16) float sm[];
	const int dk = a.dk, dv = a.dv, Hv = a.Hv, vd = Hv * dv;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int h = blockIdx.y, j0 = blockIdx.x * 32, j = j0 + lane;
	const bool col = j < dv;
	float* Wm = sm;              /* [WC][dk]   16-byte aligned rows (dk % 4 == 0) */
	float* Qe = Wm + WC * dk;    /* [WC][dk]                                  */
	float* KdT = Qe + WC * dk;   /* [dk][WC]                                  */
	float* P = KdT + WC * dk;    /* [WC][WC], then exp(gam_last)              */
	float* Ss = P + WC * WC + 4; /* [dk][33]  S's columns j0 .. j0 + 31        */
	float* Vp = Ss + dk * 33;    /* [WC][33]  V'                              */
	float* Us = Vp + WC * 33;    /* [WC][33]  U's columns                     */
	float* S = a.S + (size_t)h * dk * dv;
	for (int p = tid; p < dk * 32; p += WT) {
		const int i = p / 32, c = p % 32;
		Ss[i * 33 + c] = j0 + c < dv ? S[(size_t)i * dv + j0 + c] : 0.0f;
	}
	const int nch = (a.n + WC - 1) / WC;
	for (int ch = 0; ch < nch; ch++) {
		const int t0 = ch * WC, cl = min(WC, a.n - t0);
		const float* rec = wy + ((size_t)ch * Hv + h) * wy_rec(dk, dv);
		__syncthreads(); /* the previous chunk's tiles are consumed */
		{ /* every piece's copy in flight at once (cp.async: no registers held; the loads of a
		   * plain copy loop went one round trip after another) */
			const float* src = rec + WC * dv;
			const int n4 = (3 * WC * dk + WC * WC + 4) / 4;
			for (int p = tid; p < n4; p += WT) {
				const unsigned d = (unsigned)__cvta_generic_to_shared(Wm + 4 * p);
				asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src + 4 * p) : "memory");
			}
			for (int p = tid; p < WC * 32; p += WT) {
				const int t = p / 32, c = p % 32;
				const unsigned d = (unsigned)__cvta_generic_to_shared(Us + t * 33 + c);
				const bool in = j0 + c < dv;
				asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d),
				             "l"(in ? rec + (size_t)t * dv + j0 + c : rec), "r"(in ? 4 : 0) : "memory");
			}
			asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
		}
		__syncthreads();
		/* V'[t][j] = U[t][j] - sum_i W[t][i] S[i][j]: rows warp + 8 k */
		float acc[8];
		rows_by_s(acc, Wm, Ss, dk, warp, lane);
#pragma unroll
		for (int k = 0; k < 8; k++) Vp[(warp + 8 * k) * 33 + lane] = Us[(warp + 8 * k) * 33 + lane] - acc[k];
		__syncthreads();
		/* o[t][j] = sum_i Qe[t][i] S[i][j] + sum_{s <= t} P[t][s] V'[s][j] */
		rows_by_s(acc, Qe, Ss, dk, warp, lane);
		for (int s = 0; s < WC; s += 4) { /* P is zero above the diagonal */
			const float v0 = Vp[s * 33 + lane], v1 = Vp[(s + 1) * 33 + lane], v2 = Vp[(s + 2) * 33 + lane],
			            v3 = Vp[(s + 3) * 33 + lane];
#pragma unroll
			for (int k = 0; k < 8; k++) {
				const float4 p = ld4(P + (warp + 8 * k) * WC + s);
				acc[k] = fmaf(p.w, v3, fmaf(p.z, v2, fmaf(p.y, v1, fmaf(p.x, v0, acc[k]))));
			}
		}
		if (col)
#pragma unroll
			for (int k = 0; k < 8; k++)
				if (warp + 8 * k < cl) oraw[(size_t)(t0 + warp + 8 * k) * vd + (size_t)h * dv + j] = acc[k];
		__syncthreads(); /* S read by every warp above */
		/* S[i][j] = exp(gam_last) S[i][j] + sum_s KdT[i][s] V'[s][j]: rows i = warp + 8 k */
		const float el = P[WC * WC];
		for (int i0 = 0; i0 < dk; i0 += 64) {
			float sacc[8];
#pragma unroll
			for (int k = 0; k < 8; k++) sacc[k] = 0.0f;
			for (int s = 0; s < WC; s += 4) {
				const float v0 = Vp[s * 33 + lane], v1 = Vp[(s + 1) * 33 + lane], v2 = Vp[(s + 2) * 33 + lane],
				            v3 = Vp[(s + 3) * 33 + lane];
#pragma unroll
				for (int k = 0; k < 8; k++) {
					const int i = i0 + warp + 8 * k;
					if (i < dk) {
						const float4 kv = ld4(KdT + i * WC + s);
						sacc[k] = fmaf(kv.w, v3, fmaf(kv.z, v2, fmaf(kv.y, v1, fmaf(kv.x, v0, sacc[k]))));
					}
				}
			}
#pragma unroll
			for (int k = 0; k < 8; k++) {
				const int i = i0 + warp + 8 * k;
				if (i < dk) Ss[i * 33 + lane] = fmaf(el, Ss[i * 33 + lane], sacc[k]);
			}
		}
	}
	__syncthreads();
	for (int p = tid; p < dk * 32; p += WT) {
		const int i = p / 32, c = p % 32;
		if (j0 + c < dv) S[(size_t)i * dv + j0 + c] = Ss[i * 33 + c];
	}
}

} // namespace

size_t pv_prefill_wy_floats(int rows, int Hv, int dk, int dv)
{
	return (size_t)((rows + WC - 1) / WC) * (size_t)Hv * wy_rec(dk, dv);
}

int pv_prefill_wy_fits(int dk, int dv) { return dk >= 4 && dv >= 1 && dk % 4 == 0 && dk <= WMAX_DK && dv <= WMAX_DK; }

int pv_prefill_delta_wy(struct pv_prefill_ctx* k, const struct delta_args* a, float* wy, float* oraw)
{
	char* err = k->err;
	const size_t errlen = k->errlen;
	cudaStream_t st = k->d->st;
	const size_t sp = prep_smem(a->dk), ss = scan_smem(a->dk);
	CU(cudaFuncSetAttribute(wy_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sp), err, errlen);
	CU(cudaFuncSetAttribute(wy_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss), err, errlen);
	const unsigned nch = (unsigned)((a->n + WC - 1) / WC);
	PV_LAUNCH("prefill delta wy prep", &k->d->tu, err, errlen, wy_prep_kernel, dim3(nch, (unsigned)a->Hv), dim3(WT), sp, st,
	          *a, wy);
	PV_LAUNCH("prefill delta wy scan", &k->d->tu, err, errlen, wy_scan_kernel,
	          dim3((unsigned)((a->dv + 31) / 32), (unsigned)a->Hv), dim3(WT), ss, st, *a, (const float*)wy, oraw);
	return 0;
}
