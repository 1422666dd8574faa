/*
 * deltanet_prefill.cu: the Gated DeltaNet mixer over T rows of a prompt chunk (prefill.cuh):
 * the conv per (row, channel), the delta rule over the rows in order with the state columns
 * spread over lanes (dquad_kernel by default, dcols_kernel bitwise the decode's:
 * cuda.prefill_delta), the gated norm per (row, head) written as bf16, and the layer's driver.
 */
#include "prefill.cuh"

#include <math.h>
#include <string.h>

namespace {

/* y[t][i] = bf16(x[t][i]), i < w */
__global__ void cvt_kernel(const float* x, int ldx, bf16* y, bf16* yl, int ldy, int w)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i < w) put_bf16(y, yl, (size_t)t * ldy + i, x[(size_t)t * ldx + i]);
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
		a.conv_state[(size_t)p * cd + ch] =
		        ci < P ? a.conv_state[(size_t)ci * cd + ch] : a.mix[(size_t)(ci - P) * a.ld_mix + sc];
	}
}

/* The sums of squares of q and k by the decode's block_sum tree: warp butterflies over elements
 * lane + 32 w, then w in order (the decode's warps past dk add zeros). */
template <int NG>
__device__ __forceinline__ void qk_sumsq(const float* qn, const float* kn, float& ssq, float& ssk)
{
	ssq = 0.0f;
	ssk = 0.0f;
#pragma unroll
	for (int w = 0; w < NG; w++) {
		const float sq = pv_warp_sum(qn[w] * qn[w]), sk = pv_warp_sum(kn[w] * kn[w]);
		ssq = w ? ssq + sq : sq;
		ssk = w ? ssk + sk : sk;
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
	/* inputs of row t: q, k elements lane + 32 w, v of column j, the beta and decay inputs (the
	 * same loads as dquad_kernel's; a shared __forceinline__ function for them changed both
	 * kernels' PTX, so each keeps its lambda) */
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
		float ssq, ssk;
		qk_sumsq<NG>(qn, kn, ssq, ssk);
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
		float ssq, ssk;
		qk_sumsq<NG>(qn, kn, ssq, ssk);
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

__global__ void __launch_bounds__(DNORM_THREADS)
        dnorm_kernel(const __grid_constant__ delta_args a, const float* oraw, bf16* ob, bf16* obl, int ldo)
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
	const float z = pv_delta_z(a, t, h, j, dk, dv, r, vd);
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

} // namespace

int pv_prefill_deltanet_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int l, int T)
{
	struct pv_prefill* p = k->p;
	struct dsession* v = k->d;
	const struct pv_config* c = k->c;
	const int H = c->hidden, Hv = c->lin_v_heads, vd = pv_cfg_value_dim(c);
	struct delta_args a;
	memset(&a, 0, sizeof a);
	if (L->in_qkvz.type >= 0) {
		if (pv_prefill_gemm(k, &L->in_qkvz, p->xb, p->ldh, p->mix, v->ld_raw, T) ||
		    pv_prefill_gemm(k, &L->in_ba, p->xb, p->ldh, p->lab, 2 * Hv, T))
			return -1;
		a.qkvz = 1;
		a.ba_grouped = 1;
	} else if (L->in_ba.type >= 0) {
		if (pv_prefill_gemm(k, &L->in_qkv, p->xb, p->ldh, p->mix, v->ld_raw, T) ||
		    pv_prefill_gemm(k, &L->in_z, p->xb, p->ldh, p->lz, vd, T) ||
		    pv_prefill_gemm(k, &L->in_ba, p->xb, p->ldh, p->lab, 2 * Hv, T))
			return -1;
		a.ba_grouped = 1;
	} else {
		if (pv_prefill_gemm(k, &L->in_qkv, p->xb, p->ldh, p->mix, v->ld_raw, T) ||
		    pv_prefill_gemm(k, &L->in_z, p->xb, p->ldh, p->lz, vd, T) ||
		    pv_prefill_gemm(k, &L->in_b, p->xb, p->ldh, p->lb, Hv, T) ||
		    pv_prefill_gemm(k, &L->in_a, p->xb, p->ldh, p->la, Hv, T))
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
	/* cuda.prefill_delta: 0 quad (four lanes per column), 1 the decode's kernels, 2 cols, 3 chunk
	 * (deltanet_wy.cu; the shapes it does not take go by quad) */
	const int wy = v->tu.prefill_delta == 3 && p->wy && c->lin_v_dim <= DNORM_THREADS;
	const int rule = v->tu.prefill_delta == 3 ? 0 : v->tu.prefill_delta;
	const dcols_fn dc = rule == 1 ? NULL : dcols_kernel_for(c->lin_k_dim, rule == 0);
	const int cols_per_block = rule == 0 ? 8 : 32;
	if (wy || (dc && c->lin_v_dim <= DNORM_THREADS)) {
		const int cd = pv_cfg_conv_dim(c);
		char* err = k->err;
		const size_t errlen = k->errlen;
		PV_LAUNCH("prefill conv", &k->d->tu, err, errlen, dconv_kernel, dim3((unsigned)((cd + 127) / 128), (unsigned)T),
		          dim3(128), 0, v->st, a);
		PV_LAUNCH("prefill conv state", &k->d->tu, err, errlen, dconv_state_kernel, dim3((unsigned)((cd + 127) / 128)),
		          dim3(128), 0, v->st, a);
		if (wy) {
			if (pv_prefill_delta_wy(k, &a, p->wy, p->lo)) return -1;
			p->nl++;
		} else {
			PV_LAUNCH("prefill delta", &k->d->tu, err, errlen, dc,
			          dim3((unsigned)((c->lin_v_dim + cols_per_block - 1) / cols_per_block), (unsigned)Hv), dim3(32),
			          0, v->st, a, p->lo);
		}
		PV_LAUNCH("prefill delta norm", &k->d->tu, err, errlen, dnorm_kernel, dim3((unsigned)T, (unsigned)Hv),
		          dim3(DNORM_THREADS), 0, v->st, a, (const float*)p->lo, p->ob, pv_prefill_lo(p, p->ob), p->ldo);
		p->nl += 4;
	} else {
		/* the decode's kernels: conv, then one block per head walking the rows (with the norm) */
		if (pv_cuda_deltanet(v->st, &v->tu, &a, NULL, 0, k->err, k->errlen)) return -1;
		p->nl += 2;
		PV_LAUNCH("prefill cvt", &k->d->tu, k->err, k->errlen, cvt_kernel,
		          dim3((unsigned)((vd + 255) / 256), (unsigned)T), dim3(256), 0, v->st, p->lo, vd, p->ob,
		          pv_prefill_lo(p, p->ob), p->ldo, vd);
		p->nl++;
	}
	return pv_prefill_gemm(k, &L->out_proj, p->ob, p->ldo, p->delta, H, T);
}
