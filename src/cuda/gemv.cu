/*
 * gemv.cu: matrix-vector products for 1 to 16 activation rows over weights in their stored type
 * (BF16, F16, F32, Q8_0, Q4_0, Q4_K, Q6_K; device layouts in common.cuh).
 *
 * Work split: a block of 8 warps owns 8*R consecutive output rows (R = 1, 2 or 4 rows per
 * warp); the activation rows are staged through shared memory in column tiles shared by all the
 * block's warps, so each weight byte is loaded once per call, whatever the number of rows.
 *
 * Summation order (what makes the result batch-invariant): a weight row is cut into units of UE
 * consecutive elements (8 for BF16/F16, 4 for F32, 1 for float rows whose bytes are not a whole
 * number of 16-byte vectors, 32 for Q8_0/Q4_0, 64 for Q4_K, 128 for Q6_K). Lane l of the warp
 * owning the output accumulates, for each activation row separately, the units u = l, l+32,
 * l+64, ... in increasing order and, inside a unit, its elements in increasing order, with one
 * fmaf per element: acc = fmaf(w_e, x_e, acc). The 32 lane sums are added by the xor butterfly
 * of pv_warp_sum; a bias is added after. That order is a function of the row length alone: the
 * column tiles (whose width depends on the number of rows) only pause a lane's walk, and the
 * rows of a call never share an accumulator. Weights are dequantized exactly as quant.h does it
 * (each value is the same float as pv_dequant_block's), then enter the same fmaf chain.
 */
#include "common.cuh"

#include <cuda_fp16.h>

extern "C" {
#include "quant.h"
}

namespace {

enum Kind { K_BF16 = 0, K_F16, K_F32, K_SCALAR, K_Q8_0, K_Q4_0, K_Q4_K, K_Q6_K, K_COUNT };

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int SMEM_FLOATS = 8192; /* 32 KiB of staged activations per block */
constexpr int MAX_SEG = 3;

struct Seg {
	const unsigned char *p0, *p1, *p2;
	size_t s0, s1, s2;
	float* y;
	const float* bias;
	int ldy;
	int rows;
	int block0; /* first block of this output */
};

struct Params {
	Seg seg[MAX_SEG];
	int nseg;
	int cols;
	int tc;    /* staged columns per tile (a multiple of the unit and of 4) */
	int T;     /* activation rows (<= TT) */
	int ldx;
	int xmode;
	int stype; /* K_SCALAR: the float type of the row */
	const float* x;
	const float* x2;
	/* gathered (MoE experts): block column y is slot q = t*k + j, using expert sel[q] (rows
	 * sel[q]*rows .. +rows of the stacked matrix), activation row q / k (or q with x_by_slot), and
	 * writing output row q. One activation row per slot (T = 1). */
	const int* sel;
	int sel_k;
	int x_by_slot;
	int prefetch; /* L2 prefetch of the weight rows (PV_CUDA_PREFETCH=0 turns it off) */
};

/* Weight loads: read once per call, so they bypass L1. */
__device__ __forceinline__ uint4 ldw4(const unsigned char* p)
{
	uint4 r;
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p));
	return r;
}

__device__ __forceinline__ unsigned short ldw2(const unsigned char* p)
{
	return __ldg(reinterpret_cast<const unsigned short*>(p));
}

__device__ __forceinline__ float f16f(unsigned int h) { return __half2float(__ushort_as_half((unsigned short)h)); }

__device__ __forceinline__ uint32_t word(const uint4& v, int i)
{
	return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* 2^23 + b as a float, b a byte (exact): subtracting 2^23 + c then gives b - c exactly. */
__device__ __forceinline__ float magic_byte(uint32_t w, int k)
{
	return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)k));
}

/* acc[t] = fmaf(w, xs[t*tc + e], acc[t]) for every staged row */
template <int TT>
__device__ __forceinline__ void fma_rows(float w, const float* xs, int tc, int e, float* acc)
{
#pragma unroll
	for (int t = 0; t < TT; t++) acc[t] = fmaf(w, xs[t * tc + e], acc[t]);
}

/* the same for 4 consecutive elements e..e+3 (e a multiple of 4), in order */
template <int TT>
__device__ __forceinline__ void fma4_rows(const float* w, const float* xs, int tc, int e, float* acc)
{
#pragma unroll
	for (int t = 0; t < TT; t++) {
		const float4 a = *reinterpret_cast<const float4*>(xs + t * tc + e);
		float s = acc[t];
		s = fmaf(w[0], a.x, s);
		s = fmaf(w[1], a.y, s);
		s = fmaf(w[2], a.z, s);
		s = fmaf(w[3], a.w, s);
		acc[t] = s;
	}
}

template <int K>
struct Kern;

template <>
struct Kern<K_BF16> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 v;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		float w[8];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = word(r.v, i);
			w[2 * i] = __uint_as_float(v << 16);
			w[2 * i + 1] = __uint_as_float(v & 0xffff0000u);
		}
		fma4_rows<TT>(w, xs, tc, e0, acc);
		fma4_rows<TT>(w + 4, xs, tc, e0 + 4, acc);
	}
};

template <>
struct Kern<K_F16> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 v;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		float w[8];
#pragma unroll
		for (int i = 0; i < 4; i++) {
			uint32_t v = word(r.v, i);
			w[2 * i] = f16f(v & 0xffffu);
			w[2 * i + 1] = f16f(v >> 16);
		}
		fma4_rows<TT>(w, xs, tc, e0, acc);
		fma4_rows<TT>(w + 4, xs, tc, e0 + 4, acc);
	}
};

template <>
struct Kern<K_F32> {
	static constexpr int UE = 4, U = 4;
	struct Raw {
		uint4 v;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		float w[4] = { __uint_as_float(r.v.x), __uint_as_float(r.v.y), __uint_as_float(r.v.z), __uint_as_float(r.v.w) };
		fma4_rows<TT>(w, xs, tc, e0, acc);
	}
};

/* Float rows that are not whole 16-byte vectors (odd widths): one element per unit. The kind's
 * float type is a run-time parameter (this path is for small odd models only). */
template <>
struct Kern<K_SCALAR> {
	static constexpr int UE = 1, U = 4;
	struct Raw {
		float w;
	};
	static __device__ Raw load_t(const Seg& s, int64_t row, int u, int stype)
	{
		const unsigned char* p = s.p0 + (size_t)row * s.s0;
		if (stype == PV_F32) return Raw{ __ldg(reinterpret_cast<const float*>(p) + u) };
		unsigned int h = ldw2(p + (size_t)u * 2);
		return Raw{ stype == PV_F16 ? f16f(h) : __uint_as_float(h << 16) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		fma_rows<TT>(r.w, xs, tc, e0, acc);
	}
};

/* Q8_0: x = d * q (pv_dequant_block: (float)(int8_t)q * d). */
template <>
struct Kern<K_Q8_0> {
	static constexpr int UE = 32, U = 2;
	struct Raw {
		uint4 q0, q1;
		unsigned int d;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		const unsigned char* q = s.p0 + (size_t)row * s.s0 + (size_t)u * 32;
		return Raw{ ldw4(q), ldw4(q + 16), ldw2(s.p1 + (size_t)row * s.s1 + (size_t)u * 2) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		const float d = f16f(r.d);
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const uint32_t v = word(i < 4 ? r.q0 : r.q1, i & 3) ^ 0x80808080u; /* int8 + 128 */
			float w[4];
#pragma unroll
			for (int k = 0; k < 4; k++) w[k] = __fmul_rn(__fsub_rn(magic_byte(v, k), 8388736.0f), d);
			fma4_rows<TT>(w, xs, tc, e0 + 4 * i, acc);
		}
	}
};

/* Q4_0: element j < 16 is the low nibble of qs[j], j + 16 the high one; x = (q - 8) * d. */
template <>
struct Kern<K_Q4_0> {
	static constexpr int UE = 32, U = 4;
	struct Raw {
		uint4 q;
		unsigned int d;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16), ldw2(s.p1 + (size_t)row * s.s1 + (size_t)u * 2) };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		const float d = f16f(r.d);
#pragma unroll
		for (int half = 0; half < 2; half++)
#pragma unroll
			for (int i = 0; i < 4; i++) {
				const uint32_t v = (word(r.q, i) >> (4 * half)) & 0x0f0f0f0fu;
				float w[4];
#pragma unroll
				for (int k = 0; k < 4; k++) w[k] = __fmul_rn(__fsub_rn(magic_byte(v, k), 8388616.0f), d);
				fma4_rows<TT>(w, xs, tc, e0 + 16 * half + 4 * i, acc);
			}
	}
};

/* byte k (0..11, run-time) of the 12 scale bytes held in words y, z, w of a Q4_K header */
__device__ __forceinline__ int sbyte(const uint4& h, int k)
{
	uint32_t v = k < 4 ? h.y : k < 8 ? h.z : h.w;
	return (int)((v >> (8 * (k & 3))) & 0xffu);
}

/* Q4_K: a unit is sub-blocks 2i and 2i+1 of a super-block (they share qs[32i..32i+31]);
 * x = (d * sc) * q - dmin * m, a multiply then a subtract (pv_dequant_block). */
template <>
struct Kern<K_Q4_K> {
	static constexpr int UE = 64, U = 2;
	struct Raw {
		uint4 h, q0, q1;
		int i;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		const unsigned char* b = s.p0 + (size_t)row * s.s0 + (size_t)(u >> 2) * 144;
		const int i = u & 3;
		return Raw{ ldw4(b), ldw4(b + 16 + 32 * i), ldw4(b + 32 + 32 * i), i };
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		const float d = f16f(r.h.x & 0xffffu), dmin = f16f(r.h.x >> 16);
#pragma unroll
		for (int sub = 0; sub < 2; sub++) {
			const int j = 2 * r.i + sub;
			int sc, m;
			if (j < 4) {
				sc = sbyte(r.h, j) & 63;
				m = sbyte(r.h, j + 4) & 63;
			} else {
				sc = (sbyte(r.h, j + 4) & 0xf) | ((sbyte(r.h, j - 4) >> 6) << 4);
				m = (sbyte(r.h, j + 4) >> 4) | ((sbyte(r.h, j) >> 6) << 4);
			}
			const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
#pragma unroll
			for (int i = 0; i < 8; i++) {
				const uint32_t v = (word(i < 4 ? r.q0 : r.q1, i & 3) >> (4 * sub)) & 0x0f0f0f0fu;
				float w[4];
#pragma unroll
				for (int k = 0; k < 4; k++)
					w[k] = __fsub_rn(__fmul_rn(d1, __fsub_rn(magic_byte(v, k), 8388608.0f)), m1);
				fma4_rows<TT>(w, xs, tc, e0 + 32 * sub + 4 * i, acc);
			}
		}
	}
};

/* Q6_K: a unit is one half (128 elements) of a super-block. Element 32k + l (k = 0..3, l < 32)
 * takes the low/high nibble of ql[l] or ql[l+32] and bits 2k, 2k+1 of qh[l], minus 32;
 * x = (d * scales[l/16 + 2k]) * q (pv_dequant_block's order). */
template <>
struct Kern<K_Q6_K> {
	static constexpr int UE = 128, U = 1;
	struct Raw {
		uint4 l[4], qh[2];
		uint2 sc;
		unsigned int d;
	};
	__device__ static Raw load(const Seg& s, int64_t row, int u)
	{
		const int sb = u >> 1, h = u & 1;
		const unsigned char* q = s.p0 + (size_t)row * s.s0 + (size_t)sb * 192;
		Raw r;
#pragma unroll
		for (int i = 0; i < 4; i++) r.l[i] = ldw4(q + 64 * h + 16 * i);
		r.qh[0] = ldw4(q + 128 + 32 * h);
		r.qh[1] = ldw4(q + 144 + 32 * h);
		r.sc = __ldg(reinterpret_cast<const uint2*>(s.p1 + (size_t)row * s.s1 + (size_t)sb * 16 + 8 * h));
		r.d = ldw2(s.p2 + (size_t)row * s.s2 + (size_t)sb * 2);
		return r;
	}
	__device__ static int byte_of(const uint4* v, int idx)
	{
		return (int)((word(v[idx >> 4], (idx >> 2) & 3) >> (8 * (idx & 3))) & 0xffu);
	}
	template <int TT>
	__device__ static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		const float d = f16f(r.d);
		float ds[8];
#pragma unroll
		for (int m = 0; m < 8; m++) {
			const uint32_t v = m < 4 ? r.sc.x : r.sc.y;
			ds[m] = __fmul_rn(d, (float)(int)(signed char)((v >> (8 * (m & 3))) & 0xffu));
		}
#pragma unroll
		for (int k = 0; k < 4; k++)
#pragma unroll
			for (int l0 = 0; l0 < 32; l0 += 4) {
				float w[4];
#pragma unroll
				for (int j = 0; j < 4; j++) {
					const int l = l0 + j;
					const int qlb = byte_of(r.l, l + 32 * (k & 1));
					const int nib = k < 2 ? (qlb & 0xf) : (qlb >> 4);
					const int hb = (byte_of(r.qh, l) >> (2 * k)) & 3;
					const float q = __fsub_rn(__uint_as_float(0x4B000000u | (unsigned)(nib | hb << 4)), 8388640.0f);
					w[j] = __fmul_rn(ds[l / 16 + 2 * k], q);
				}
				fma4_rows<TT>(w, xs, tc, e0 + 32 * k + l0, acc);
			}
	}
};

template <int K>
struct Loader {
	__device__ static typename Kern<K>::Raw load(const Seg& s, const Params& p, int64_t row, int u)
	{
		return Kern<K>::load(s, row, u);
	}
};
template <>
struct Loader<K_SCALAR> {
	__device__ static Kern<K_SCALAR>::Raw load(const Seg& s, const Params& p, int64_t row, int u)
	{
		return Kern<K_SCALAR>::load_t(s, row, u, p.stype);
	}
};

__device__ __forceinline__ float xin(const Params& p, const float* x, const float* x2, int t, int col)
{
	const float a = x[(size_t)t * p.ldx + col];
	if (p.xmode == PV_X_SWIGLU) {
		const float u = x2[(size_t)t * p.ldx + col];
		return (a / (1.0f + expf(-a))) * u; /* pv_silu(gate) * up, as forward.c */
	}
	return a;
}

/* Asks the copy engine to bring `bytes` at p into L2 (cp.async.bulk.prefetch, sm_90): needs 16-byte
 * alignment and size; anything else is skipped (a prefetch is only a hint). */
__device__ __forceinline__ void prefetch_l2(const unsigned char* p, size_t bytes)
{
	if (((uintptr_t)p & 15) || (bytes & 15) || !bytes || bytes > 0xffffffffu) return;
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"((unsigned)bytes) : "memory");
}

template <int K, int TT, int R>
__global__ void __launch_bounds__(THREADS) gemv_kernel(const __grid_constant__ Params p)
{
	/* The weights never depend on earlier kernels: each warp starts its rows streaming into L2
	 * before waiting for the previous kernel (PDL) and staging the activations. Gathered experts
	 * are chosen by the previous kernel, so they are not prefetched. */
	if (p.prefetch && !p.sel && (threadIdx.x & 31) == 0) {
		const Seg* q = &p.seg[0];
		if (p.nseg > 1 && (int)blockIdx.x >= p.seg[1].block0) q = &p.seg[1];
		if (p.nseg > 2 && (int)blockIdx.x >= p.seg[2].block0) q = &p.seg[2];
		const int64_t r0 = (int64_t)((int)blockIdx.x - q->block0) * (WARPS * R) + (int64_t)(threadIdx.x >> 5) * R;
		for (int r = 0; r < R; r++)
			if (r0 + r < q->rows) {
				prefetch_l2(q->p0 + (size_t)(r0 + r) * q->s0, q->s0);
				if (q->p1) prefetch_l2(q->p1 + (size_t)(r0 + r) * q->s1, q->s1);
				if (q->p2) prefetch_l2(q->p2 + (size_t)(r0 + r) * q->s2, q->s2);
			}
	}
	pv_grid_sync(); /* before touching memory other kernels write (PDL) */
	using KT = Kern<K>;
	constexpr int UE = KT::UE, U = KT::U;
	extern __shared__ float4 smem4[];
	float* xs = reinterpret_cast<float*>(smem4);

	const int b = blockIdx.x;
	const Seg* sp = &p.seg[0];
	if (p.nseg > 1 && b >= p.seg[1].block0) sp = &p.seg[1];
	if (p.nseg > 2 && b >= p.seg[2].block0) sp = &p.seg[2];
	const Seg& s = *sp;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t row0 = (int64_t)(b - s.block0) * (WARPS * R) + (int64_t)warp * R;
	const float *x = p.x, *x2 = p.x2;
	float* y = s.y;
	int64_t wrow = 0; /* first weight row (gathered: the selected expert's) */
	if (p.sel) {
		const int q = blockIdx.y, xr = p.x_by_slot ? q : q / p.sel_k;
		wrow = (int64_t)p.sel[q] * s.rows;
		x += (size_t)xr * p.ldx;
		if (x2) x2 += (size_t)xr * p.ldx;
		y += (size_t)q * s.ldy;
	}

	float acc[R][TT];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int t = 0; t < TT; t++) acc[r][t] = 0.0f;

	for (int c0 = 0; c0 < p.cols; c0 += p.tc) {
		const int cn = min(p.tc, p.cols - c0);
		__syncthreads(); /* the previous tile is consumed */
		for (int e = threadIdx.x; e < TT * p.tc; e += THREADS) {
			const int t = e / p.tc, c = e - t * p.tc;
			xs[e] = t < p.T && c < cn ? xin(p, x, x2, t, c0 + c) : 0.0f;
		}
		__syncthreads();
		const int u0 = c0 / UE, u1 = (c0 + cn) / UE;
		const int uf = u0 + ((lane - u0) & 31); /* this lane's first unit: u = lane (mod 32) */
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int64_t row = row0 + r;
			if (row >= s.rows) continue;
			for (int ub = uf; ub < u1; ub += 32 * U) {
				typename KT::Raw raw[U];
#pragma unroll
				for (int k = 0; k < U; k++)
					if (ub + 32 * k < u1) raw[k] = Loader<K>::load(s, p, wrow + row, ub + 32 * k);
#pragma unroll
				for (int k = 0; k < U; k++)
					if (ub + 32 * k < u1) KT::template dot<TT>(raw[k], xs, p.tc, (ub + 32 * k) * UE - c0, acc[r]);
			}
		}
	}

#pragma unroll
	for (int r = 0; r < R; r++) {
		const int64_t row = row0 + r;
#pragma unroll
		for (int t = 0; t < TT; t++) {
			const float v = pv_warp_sum(acc[r][t]);
			if (lane == 0 && t < p.T && row < s.rows)
				y[(size_t)t * s.ldy + row] = s.bias ? v + s.bias[row] : v;
		}
	}
}

/* ---- host side ---------------------------------------------------------------------------- */

int kind_of(const struct dmat* w)
{
	switch (w->type) {
	case PV_BF16: return (w->cols * 2) % 16 ? K_SCALAR : K_BF16;
	case PV_F16: return (w->cols * 2) % 16 ? K_SCALAR : K_F16;
	case PV_F32: return (w->cols * 4) % 16 ? K_SCALAR : K_F32;
	case PV_Q8_0: return K_Q8_0;
	case PV_Q4_0: return K_Q4_0;
	case PV_Q4_K: return K_Q4_K;
	case PV_Q6_K: return K_Q6_K;
	default: return -1;
	}
}

int unit_of(int kind)
{
	switch (kind) {
	case K_BF16: return Kern<K_BF16>::UE;
	case K_F16: return Kern<K_F16>::UE;
	case K_F32: return Kern<K_F32>::UE;
	case K_SCALAR: return Kern<K_SCALAR>::UE;
	case K_Q8_0: return Kern<K_Q8_0>::UE;
	case K_Q4_0: return Kern<K_Q4_0>::UE;
	case K_Q4_K: return Kern<K_Q4_K>::UE;
	default: return Kern<K_Q6_K>::UE;
	}
}

typedef void (*kernel_fn)(Params);

template <int K, int TT>
kernel_fn pick_r()
{
	constexpr int R = TT <= 2 ? 1 : TT == 4 ? 2 : 4;
	return gemv_kernel<K, TT, R>;
}

template <int K>
kernel_fn pick_tt(int TT)
{
	switch (TT) {
	case 1: return pick_r<K, 1>();
	case 2: return pick_r<K, 2>();
	case 4: return pick_r<K, 4>();
	case 8: return pick_r<K, 8>();
	default: return pick_r<K, 16>();
	}
}

kernel_fn pick(int kind, int TT)
{
	switch (kind) {
	case K_BF16: return pick_tt<K_BF16>(TT);
	case K_F16: return pick_tt<K_F16>(TT);
	case K_F32: return pick_tt<K_F32>(TT);
	case K_SCALAR: return pick_tt<K_SCALAR>(TT);
	case K_Q8_0: return pick_tt<K_Q8_0>(TT);
	case K_Q4_0: return pick_tt<K_Q4_0>(TT);
	case K_Q4_K: return pick_tt<K_Q4_K>(TT);
	default: return pick_tt<K_Q6_K>(TT);
	}
}

int rows_per_block(int TT) { return WARPS * (TT <= 2 ? 1 : TT == 4 ? 2 : 4); }

/* one launch over outs[0..n) (same kind and cols) */
int launch(cudaStream_t st, const struct gemv_out* outs, int n, int kind, const float* x, const float* x2, int ldx,
           int xmode, int T, const struct gemv_gather* ga, char* err, size_t errlen)
{
	const int TT = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : 16;
	const int UE = unit_of(kind), rpb = rows_per_block(TT);
	Params p;
	memset(&p, 0, sizeof p);
	const int64_t cols = outs[0].w->cols;
	p.cols = (int)cols;
	int tc = SMEM_FLOATS / TT;
	tc -= tc % (UE > 4 ? UE : 4);
	int64_t need = (cols + 3) / 4 * 4;
	if (need < tc) tc = (int)need;
	p.tc = tc;
	p.T = T;
	p.ldx = ldx;
	p.xmode = xmode;
	p.stype = outs[0].w->type;
	p.x = x;
	p.x2 = x2;
	p.nseg = n;
	p.prefetch = pv_cuda_prefetch;
	if (ga) {
		p.sel = ga->sel;
		p.sel_k = ga->k;
		p.x_by_slot = ga->x_by_slot;
	}
	int64_t blocks = 0;
	for (int i = 0; i < n; i++) {
		const struct dmat* w = outs[i].w;
		Seg& s = p.seg[i];
		s.p0 = w->p[0];
		s.p1 = w->p[1];
		s.p2 = w->p[2];
		s.s0 = w->stride[0];
		s.s1 = w->stride[1];
		s.s2 = w->stride[2];
		s.y = outs[i].y;
		s.ldy = outs[i].ldy;
		s.bias = outs[i].bias;
		s.rows = (int)(ga ? w->rows / ga->n_experts : w->rows); /* gathered: rows of one expert */
		s.block0 = (int)blocks;
		blocks += (s.rows + rpb - 1) / rpb;
	}
	if (blocks <= 0 || blocks > INT32_MAX) return pv_errf(err, errlen, "CUDA backend: gemv grid of %lld blocks", (long long)blocks);
	const size_t smem = (size_t)TT * (size_t)tc * sizeof(float);
	const dim3 grid((unsigned)blocks, ga ? (unsigned)ga->slots : 1u);
	PV_LAUNCH("gemv", err, errlen, pick(kind, TT), grid, dim3(THREADS), smem, st, p);
	return 0;
}

} // namespace

int pv_cuda_gemv(cudaStream_t st, const struct gemv_out* outs, int n_out, const float* x, const float* x2, int ldx,
                 int xmode, int T, int* n_launch, char* err, size_t errlen)
{
	return pv_cuda_gemv_gather(st, outs, n_out, x, x2, ldx, xmode, T, NULL, n_launch, err, errlen);
}

int pv_cuda_gemv_gather(cudaStream_t st, const struct gemv_out* outs, int n_out, const float* x, const float* x2, int ldx,
                        int xmode, int T, const struct gemv_gather* ga, int* n_launch, char* err, size_t errlen)
{
	if (T < 1 || T > PV_CUDA_ROWS || n_out < 1 || (ga && (T != 1 || ga->slots < 1 || ga->k < 1 || ga->n_experts < 1)))
		return pv_errf(err, errlen, "CUDA backend: gemv called with %d rows, %d outputs", T, n_out);
	for (int i = 0; ga && i < n_out; i++)
		if (outs[i].w->rows % ga->n_experts)
			return pv_errf(err, errlen, "CUDA backend: stacked expert matrix of %lld rows for %d experts",
			               (long long)outs[i].w->rows, ga->n_experts);
	int done[8] = { 0 };
	if (n_out > 8) return pv_errf(err, errlen, "CUDA backend: gemv with %d outputs", n_out);
	for (int i = 0; i < n_out; i++) {
		const struct dmat* w = outs[i].w;
		if (kind_of(w) < 0) return pv_errf(err, errlen, "CUDA backend: no GEMV kernel for weight type %s", pv_dtype_name((enum pv_dtype)w->type));
		if (w->cols != outs[0].w->cols) return pv_errf(err, errlen, "CUDA backend: fused gemv outputs differ in width");
		if (w->rows > INT32_MAX / 2 || w->cols > INT32_MAX / 2) return pv_errf(err, errlen, "CUDA backend: matrix too large");
	}
	/* outputs of one kind (and float type) share a launch, in order */
	for (int i = 0; i < n_out; i++) {
		if (done[i]) continue;
		struct gemv_out group[MAX_SEG];
		int g = 0, kind = kind_of(outs[i].w);
		for (int j = i; j < n_out && g < MAX_SEG; j++)
			if (!done[j] && kind_of(outs[j].w) == kind && outs[j].w->type == outs[i].w->type) {
				group[g++] = outs[j];
				done[j] = 1;
			}
		if (launch(st, group, g, kind, x, x2, ldx, xmode, T, ga, err, errlen)) return -1;
		if (n_launch) ++*n_launch;
	}
	return 0;
}
