/*
 * deltanet.cu: Gated DeltaNet layers (deltanet.c, qwen-models.md §6.4), recurrent form only.
 *
 * After the projections (gemv.cu):
 *   conv:      per channel, rows in order: pv_d_silu(causal depthwise conv over [conv state; rows]),
 *              then the state becomes the last Kc-1 inputs (deltanet.c conv_silu)
 *   recurrent: one block per value head; four threads per column j of the head's state S [dk][dv]
 *              (kept in registers for the call, rows i = r mod 4 each); rows in order: l2norm q
 *              (scaled 1/sqrt(dk)) and k, beta, decay, S = decay S; d = beta (v - S^T k);
 *              S += k d^T; o = S^T q; then the gated norm w * rmsnorm(o) * pv_d_silu(z)
 *              (deltanet.c delta_recurrent and the layer's epilogue)
 * The recurrent form is the decode form on the CPU too; every reduction (over dk for S^T k and
 * S^T q, over a head for the norms) runs in a fixed order, and rows are processed one after the
 * other, so a row's result is the same in a call of any size (batch invariance). Long prompts
 * take the prefill's wider kernels instead (deltanet_prefill.cu), never an exact call.
 *
 * Per-row snapshots (PV_EVAL_SNAPSHOT: speculative decoding rolls back by choosing a row): the
 * state after every row t goes to snapshot slot t in the checkpoint layout (this layer's S, then
 * its conv window): S by recurrent_snap_kernel, the SNAP = true instantiation of the recurrence's
 * body, from the registers that hold it (so slot t is bitwise what a call that ended at row t
 * leaves in S; the plain kernel is the SNAP = false instantiation, its PTX unchanged); the window
 * by conv_window_kernel, a copy of the rows it is made of, before the conv. Both launch only for
 * snapshot steps (pv_cuda_deltanet's snap).
 *
 * Multi-session steps (continuous batching, many.cu): row t of the step is another session's
 * one-row step, over that session's state (struct dmany's state[t]). conv_many_kernel and
 * recurrent_many_kernel run the one-session bodies on a block per (channels or value head, row t)
 * with the arguments of a one-row call: row t's scratch rows, its session's window and S, n = 1
 * (row_args). So a row's arithmetic is its session's own one-row step's, operation for operation.
 *
 * Qwen3-Next's in_proj_qkvz / in_proj_ba are key-group-major ([q_g | k_g | v_g | z_g] and
 * [b_g | a_g] per key head g): the kernels read them through an index map instead of unscrambling.
 */
#include "common.cuh"

namespace {

constexpr int DK_MAX = 128;

/* The conv of channel ch = blockIdx.x * blockDim.x + threadIdx.x over rows [0, a.n) and its
 * window update, for a `const delta_args& a` (or the kernel's parameter a): conv_kernel's body, and
 * conv_many_kernel's per row (there with n = 1 on the row's own buffers and its session's window,
 * so a row's bits are its own one-row step's). A macro, not a function: moving the body into a
 * device function (even __forceinline__, by reference or by value) changes conv_kernel's PTX (the
 * loop induction variables are set up one row apart: the same arithmetic, not the same bytes),
 * and conv_kernel's PTX must not change. */
#define PV_CONV_BODY                                                                                          \
	do {                                                                                                  \
		pv_grid_sync(); /* before any global memory access (PDL) */                                   \
		const int ch = blockIdx.x * blockDim.x + threadIdx.x;                                         \
		const int cd = 2 * a.Hk * a.dk + a.Hv * a.dv, K = a.Kc, P = K - 1;                            \
		if (ch >= cd) return;                                                                         \
		const int sc = pv_delta_src_col(a, ch);                                                       \
		const float* w = a.conv_w + (size_t)ch * K;                                                   \
		for (int t = 0; t < a.n; t++) {                                                               \
			float acc = 0.0f;                                                                     \
			for (int tau = 0; tau < K; tau++) {                                                   \
				const int src = t - P + tau; /* negative rows come from the state */          \
				const float xv = src < 0 ? a.conv_state[(size_t)(P + src) * cd + ch]          \
				                         : a.mix[(size_t)src * a.ld_mix + sc];                \
				acc = acc + w[tau] * xv;                                                      \
			}                                                                                     \
			a.u[(size_t)t * cd + ch] = pv_d_silu(acc);                                            \
		}                                                                                             \
		/* the new state: rows n .. n+P-1 of [state ; mixed]; row p is written after it is read */    \
		for (int p = 0; p < P; p++) {                                                                 \
			const int ci = a.n + p;                                                               \
			a.conv_state[(size_t)p * cd + ch] = ci < P ? a.conv_state[(size_t)ci * cd + ch]       \
			                                           : a.mix[(size_t)(ci - P) * a.ld_mix + sc]; \
		}                                                                                             \
	} while (0)

__global__ void conv_kernel(const __grid_constant__ delta_args a)
{
	PV_CONV_BODY;
}

/* Row t of a multi-session step (forward_many, many.cu) as a one-row call of its own: a's row
 * buffers moved to row t (the host session's scratch rows: mix [B][ld_mix], z and o [B][vd],
 * b and a [B][Hv], ab [B][2 Hv], u [B][cd]) and the state to row t's session's, m->state[t] +
 * lofs (this layer's S [Hv][dk][dv], then its window [Kc-1][cd]), n = 1. Every index the bodies
 * form is then what that session's own one-row step forms over its own buffers (row 0). */
__device__ __forceinline__ delta_args row_args(const delta_args& a, const struct dmany* m, size_t lofs, int t)
{
	const int cd = 2 * a.Hk * a.dk + a.Hv * a.dv, vd = a.Hv * a.dv;
	delta_args r = a;
	r.S = m->state[t] + lofs;
	r.conv_state = r.S + (size_t)a.Hv * a.dk * a.dv;
	r.mix = a.mix + (size_t)t * a.ld_mix;
	r.z = a.z ? a.z + (size_t)t * vd : NULL;
	r.b = a.b ? a.b + (size_t)t * a.Hv : NULL;
	r.a = a.a ? a.a + (size_t)t * a.Hv : NULL;
	r.ab = a.ab ? a.ab + (size_t)t * 2 * a.Hv : NULL;
	r.u = a.u + (size_t)t * cd;
	r.o = a.o + (size_t)t * vd;
	r.n = 1;
	return r;
}

/* The multi-session conv: block (x, t = blockIdx.y) does channels of row t on its session's
 * window (PV_CONV_BODY with n = 1; it waits for the previous kernel again, a no-op). */
__global__ void conv_many_kernel(const __grid_constant__ delta_args g, const struct dmany* m, size_t lofs)
{
	pv_grid_sync(); /* m is read before the body's own wait */
	const delta_args r = row_args(g, m, lofs, (int)blockIdx.y);
	const delta_args& a = r;
	PV_CONV_BODY;
}

/* Snapshots (PV_EVAL_SNAPSHOT): the conv window after each row t, rows t + 1 .. t + P of
 * [state ; mixed] (deltanet.c conv_silu's snapshot; after the last row it is exactly the new
 * state conv_kernel writes), into slot t: snap + t * stride + Hv dk dv (the slot holds this
 * layer's S, then its window [P][cd]). Launched just before conv_kernel, which replaces the state
 * in place. A copy without arithmetic, so it is its own kernel: a template variant of conv_kernel
 * changed the plain instantiation's PTX (loop induction variables one off: the same arithmetic,
 * not the same bytes), and conv_kernel's must not change. */
__global__ void conv_window_kernel(const __grid_constant__ delta_args a, float* snap, size_t stride)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int ch = blockIdx.x * blockDim.x + threadIdx.x;
	const int cd = 2 * a.Hk * a.dk + a.Hv * a.dv, P = a.Kc - 1;
	if (ch >= cd) return;
	const int sc = pv_delta_src_col(a, ch);
	for (int t = 0; t < a.n; t++) {
		float* win = snap + (size_t)t * stride + (size_t)a.Hv * a.dk * a.dv;
		for (int p = 0; p < P; p++) {
			const int ci = t + 1 + p; /* row of [state ; mixed] */
			win[(size_t)p * cd + ch] =
			        ci < P ? a.conv_state[(size_t)ci * cd + ch] : a.mix[(size_t)(ci - P) * a.ld_mix + sc];
		}
	}
}

/* fixed-order block sum of NT threads: warp butterflies, then the warps in order */
template <int NT>
__device__ float block_sum(float v, float* red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = pv_warp_sum(v);
	__syncthreads(); /* red is reused */
	if (lane == 0) red[warp] = v;
	__syncthreads();
	float s = red[0];
	for (int i = 1; i < NT / 32; i++) s = s + red[i];
	return s;
}

/* One block per value head, four threads per state column: thread (j, r) = (tid / 4, tid % 4)
 * keeps rows i = r, r + 4, r + 8, ... of column j of S [dk][dv] in registers. Per row t:
 * q, k l2-normed (q also scaled by 1/sqrt(dk)), beta = sigmoid(b), decay = exp(A softplus(a + dt));
 * S = decay S; m_j = sum_i k_i S_ij (each thread its rows in order, then the xor butterfly over
 * the column's four threads: (p0 + p1) + (p2 + p3), the same on all four); d_j = beta (v_j - m_j);
 * S += k d^T; o_j = sum_i q_i S_ij (the same way); then the gated RMSNorm over the head,
 * w * rmsnorm(o) * pv_d_silu(z). Every order is fixed by dk and dv alone, rows run in order, so a row's
 * result does not depend on the call's row count (batch invariance). The dependent chains are
 * dk / 4 long (was dk, a thread per column with S in shared memory: twice slower, PERF.md
 * session 2). */
constexpr int RQ = 4;                   /* threads per column */
constexpr int RTHREADS = RQ * DK_MAX;   /* 512: dv <= 128 columns */
constexpr int RROWS = DK_MAX / RQ;      /* rows of S per thread */

/* The body of both recurrent kernels. qs, ks [DK_MAX] and red [RTHREADS / 32]: the kernel's
 * shared arrays. SNAP: after each row t the block's head of the state (every column j, its rows
 * in this thread's registers) is also written to snapshot slot t, snap + t * stride, in S's own
 * layout [Hv][dk][dv]: the same registers the end of the call writes to S, so slot t holds the
 * bits a call that ended at row t leaves in S. */
template <bool SNAP, bool EARLY = false>
__device__ __forceinline__ void recurrent_body(const delta_args& a, float* qs, float* ks, float* red, float* snap,
                                               size_t stride)
{
	/* EARLY (cuda.delta_early): S is loaded before the wait below: the kernel before this one
	 * (the conv) never writes it; its last writer is this kernel's previous call, or a snapshot
	 * restore, both finished before the conv began (PDL) */
	if constexpr (!EARLY) pv_grid_sync(); /* before any global memory access (PDL) */
	const int h = blockIdx.x, tid = threadIdx.x, j = tid / RQ, r = tid % RQ;
	const int dk = a.dk, dv = a.dv, Hk = a.Hk, Hv = a.Hv, rr_ = Hv / Hk;
	const int kd = Hk * dk, cd = 2 * kd + Hv * dv, vd = Hv * dv;
	const int kh = a.v_tiled ? h % Hk : h / rr_;
	const bool col = j < dv;
	float* S = a.S + (size_t)h * dk * dv;
	float sr[RROWS];
#pragma unroll
	for (int ii = 0; ii < RROWS; ii++) {
		const int i = r + RQ * ii;
		sr[ii] = col && i < dk ? S[(size_t)i * dv + j] : 0.0f;
	}
	if constexpr (EARLY) pv_grid_sync(); /* the row inputs are the previous kernels' (PDL) */
	const float qscale = 1.0f / sqrtf((float)dk);

	for (int t = 0; t < a.n; t++) {
		const float* u = a.u + (size_t)t * cd;
		/* l2norm (HF: x * rsqrt(sum x^2 + 1e-6)), q also scaled by 1/sqrt(dk) */
		const float qv = tid < dk ? u[(size_t)kh * dk + tid] : 0.0f;
		const float kv = tid < dk ? u[kd + (size_t)kh * dk + tid] : 0.0f;
		const float ssq = block_sum<RTHREADS>(qv * qv, red);
		const float ssk = block_sum<RTHREADS>(kv * kv, red);
		if (tid < dk) {
			qs[tid] = qv * (qscale / sqrtf(ssq + 1e-6f));
			ks[tid] = kv * (1.0f / sqrtf(ssk + 1e-6f));
		}
		__syncthreads();
		float b, g;
		if (a.ba_grouped) {
			const int grp = h / rr_, jj = h % rr_;
			b = a.ab[(size_t)t * 2 * Hv + grp * 2 * rr_ + jj];
			g = a.ab[(size_t)t * 2 * Hv + grp * 2 * rr_ + rr_ + jj];
		} else {
			b = a.b[(size_t)t * Hv + h];
			g = a.a[(size_t)t * Hv + h];
		}
		const float beta = pv_d_sigmoid(b);
		const float decay = expf(a.ssm_a[h] * pv_d_softplus(g + a.dt_bias[h]));
		const float v = col ? u[2 * kd + (size_t)h * dv + j] : 0.0f;
		float m = 0.0f;
#pragma unroll
		for (int ii = 0; ii < RROWS; ii++) {
			const int i = r + RQ * ii;
			if (i < dk) {
				const float x = sr[ii] * decay;
				sr[ii] = x;
				m = m + ks[i] * x;
			}
		}
		m = m + __shfl_xor_sync(0xffffffffu, m, 1);
		m = m + __shfl_xor_sync(0xffffffffu, m, 2);
		const float d = beta * (v - m);
		float o = 0.0f;
#pragma unroll
		for (int ii = 0; ii < RROWS; ii++) {
			const int i = r + RQ * ii;
			if (i < dk) {
				const float x = sr[ii] + ks[i] * d;
				sr[ii] = x;
				o = o + qs[i] * x;
			}
		}
		if constexpr (SNAP) {
			if (col) {
				float* Sn = snap + (size_t)t * stride + (size_t)h * dk * dv;
#pragma unroll
				for (int ii = 0; ii < RROWS; ii++) {
					const int i = r + RQ * ii;
					if (i < dk) Sn[(size_t)i * dv + j] = sr[ii];
				}
			}
		}
		o = o + __shfl_xor_sync(0xffffffffu, o, 1);
		o = o + __shfl_xor_sync(0xffffffffu, o, 2);
		/* gated RMSNorm over the head: w * rmsnorm(o) * silu(z) (one thread of each column) */
		const float ss = block_sum<RTHREADS>(col && r == 0 ? o * o : 0.0f, red);
		if (col && r == 0) {
			const float rn = 1.0f / sqrtf(ss / (float)dv + a.eps);
			float y = (o * rn) * a.lin_norm[j];
			const float z = pv_delta_z(a, t, h, j, dk, dv, rr_, vd);
			a.o[(size_t)t * vd + (size_t)h * dv + j] = y * pv_d_silu(z);
		}
		__syncthreads(); /* qs/ks are rewritten for the next row */
	}
	if (col)
#pragma unroll
		for (int ii = 0; ii < RROWS; ii++) {
			const int i = r + RQ * ii;
			if (i < dk) S[(size_t)i * dv + j] = sr[ii];
		}
}

template <bool EARLY = false>
__global__ void __launch_bounds__(RTHREADS) recurrent_kernel(const __grid_constant__ delta_args a)
{
	__shared__ float qs[DK_MAX], ks[DK_MAX], red[RTHREADS / 32];
	recurrent_body<false, EARLY>(a, qs, ks, red, NULL, 0);
}

/* snap: this layer's S in the snapshot slot of the call's row 0; stride: floats per slot */
template <bool EARLY = false>
__global__ void __launch_bounds__(RTHREADS)
        recurrent_snap_kernel(const __grid_constant__ delta_args a, float* snap, size_t stride)
{
	__shared__ float qs[DK_MAX], ks[DK_MAX], red[RTHREADS / 32];
	recurrent_body<true, EARLY>(a, qs, ks, red, snap, stride);
}

/* The multi-session recurrence: block (h, t = blockIdx.y) is value head h of row t, the one-row
 * body (S loaded into registers, one row, S stored) on row t's session's S. */
__global__ void __launch_bounds__(RTHREADS)
        recurrent_many_kernel(const __grid_constant__ delta_args a, const struct dmany* m, size_t lofs)
{
	__shared__ float qs[DK_MAX], ks[DK_MAX], red[RTHREADS / 32];
	pv_grid_sync(); /* m is read before the body's own wait */
	const delta_args r = row_args(a, m, lofs, (int)blockIdx.y);
	recurrent_body<false>(r, qs, ks, red, NULL, 0);
}

} // namespace

int pv_cuda_delta_check(int dk, int dv, int Hk, int Hv, int Kc, char* err, size_t errlen)
{
	if (dk > DK_MAX || dv > DK_MAX || dk < 1 || dv < 1)
		return pv_errf(err, errlen, "CUDA backend: DeltaNet head dims %d/%d above %d", dk, dv, DK_MAX);
	if (Hk < 1 || Hv % Hk || Kc < 1) return pv_errf(err, errlen, "CUDA backend: DeltaNet heads %d/%d, kernel %d", Hk, Hv, Kc);
	return 0;
}

int pv_cuda_delta_init(char* err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return 0; /* the state lives in registers: no shared-memory opt-in */
}

int pv_cuda_deltanet(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct delta_args* a, float* snap,
                     size_t snap_stride, char* err, size_t errlen)
{
	if (pv_cuda_delta_check(a->dk, a->dv, a->Hk, a->Hv, a->Kc, err, errlen)) return -1;
	const int cd = 2 * a->Hk * a->dk + a->Hv * a->dv;
	const dim3 cgrid((unsigned)((cd + 127) / 128)), rgrid((unsigned)a->Hv);
	if (snap) {
		PV_LAUNCH("deltanet windows", tu, err, errlen, conv_window_kernel, cgrid, dim3(128), 0, st, *a, snap,
		          snap_stride);
		PV_LAUNCH("deltanet conv", tu, err, errlen, conv_kernel, cgrid, dim3(128), 0, st, *a);
		PV_LAUNCH("deltanet recurrent", tu, err, errlen, tu->delta_early ? recurrent_snap_kernel<true> : recurrent_snap_kernel<false>,
		          rgrid, dim3(RTHREADS), 0, st, *a, snap, snap_stride);
	} else {
		PV_LAUNCH("deltanet conv", tu, err, errlen, conv_kernel, cgrid, dim3(128), 0, st, *a);
		PV_LAUNCH("deltanet recurrent", tu, err, errlen, tu->delta_early ? recurrent_kernel<true> : recurrent_kernel<false>, rgrid,
		          dim3(RTHREADS), 0, st, *a);
	}
	return 0;
}

int pv_cuda_deltanet_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct delta_args* a, const struct dmany* m,
                          size_t lofs, char* err, size_t errlen)
{
	if (pv_cuda_delta_check(a->dk, a->dv, a->Hk, a->Hv, a->Kc, err, errlen)) return -1;
	if (a->n < 1 || a->n > PV_CUDA_ROWS)
		return pv_errf(err, errlen, "CUDA backend: multi-session DeltaNet of %d rows", a->n);
	const int cd = 2 * a->Hk * a->dk + a->Hv * a->dv;
	/* the one-session grids with a row per blockIdx.y: the bodies index channels and heads by
	 * blockIdx.x as they do there */
	const dim3 cgrid((unsigned)((cd + 127) / 128), (unsigned)a->n), rgrid((unsigned)a->Hv, (unsigned)a->n);
	PV_LAUNCH("deltanet conv (many)", tu, err, errlen, conv_many_kernel, cgrid, dim3(128), 0, st, *a, m, lofs);
	PV_LAUNCH("deltanet recurrent (many)", tu, err, errlen, recurrent_many_kernel, rgrid, dim3(RTHREADS), 0, st, *a, m,
	          lofs);
	return 0;
}
