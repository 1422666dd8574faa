/*
 * qgemv.cu: the GEMVs of cuda.q8_act, the CPU's fast numerics (src/cpu/qdot.h) on the GPU, bit
 * for bit: each activation row is quantized once per call to int8 (per block of 32 for Q8_0
 * weights, of 256 for Q4_K / Q6_K: amax / 127, round to nearest even, x86 min/max clamping), the
 * integer part of every weight block is exact (dp4a: the order of its adds does not matter), and
 * the float part is qdot.h's one sequence per output:
 *
 *   y = +0;  for each block b in order:  y = fma(fl(dw_b * dx_b), (float)I_b, y)
 *            Q4_K also:                   y = fma(-fl(dmin_b * dx_b), (float)M_b, y)
 *
 * so a row's output is pv_qdot_ref's, whatever the number of rows of the call (1-16) and the
 * kernel that computes it: batch-invariant by construction, and the CPU's own bits (test_cuda
 * qgemv compares them). The bias is added after, as the float path does.
 *
 * Which weights: cuda.q8_act=2 (the default) Q4_K and Q6_K; 1 also Q8_0 (slower than its float
 * kernel); 0 none.
 *
 * Work split: R weight rows per warp (rows_of: the gate/up pair's two rows, four rows of a
 * one-row Q8_0 call, two Q4_K / Q6_K rows of a one-row call under cuda.q8_rows=4, the default,
 * else one), 8 warps a block. A pass of the warp over a row covers 32 Q8_0 blocks (a lane each),
 * 8 Q4_K super-blocks (4 lanes each: lane i of a super-block has sub-blocks 2i and 2i+1, 32 qs bytes) or 4 Q6_K super-blocks (8 lanes each: half h = i / 4, group k = i % 4,
 * 32 elements under two sub-block scales). The lanes of a block add their integers by xor
 * shuffles; each block's float operands go to the warp's shared array, and lane r * T + t then
 * runs weight row r's chain for activation row t over the pass's blocks in order (the chains of a
 * call side by side: the chain is one dependent fma per block, h200-2026-12-02-s5.md).
 *
 * Activation scratch (tuning.cuh q8_buf, layout in qact.cuh); the add+RMSNorm before a projection
 * may have written it already (tuning.cuh q8_have), else a small kernel quantizes x. Only calls whose
 * weights all take one activation format, of at most 16 rows (gathered: one per slot), come here;
 * the rest keep the float GEMVs (a choice made from the weights alone, so the one-row step and a
 * verify window make the same one).
 */
#include "common.cuh"
#include "qact.cuh"
#include "units.cuh"

namespace {

using namespace pv_units;

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;

struct QAct {
	const unsigned char* base;
	size_t rb; /* bytes per row */
	int n, blk;
	__device__ __forceinline__ const int8_t* q(int t) const { return reinterpret_cast<const int8_t*>(base + (size_t)t * rb); }
	__device__ __forceinline__ const float* d(int t) const
	{
		return reinterpret_cast<const float*>(base + (size_t)t * rb + pv_qrow_d_off(n));
	}
	__device__ __forceinline__ const int* s(int t) const
	{
		return reinterpret_cast<const int*>(base + (size_t)t * rb + pv_qrow_s_off(blk, n));
	}
};

/* the sum of v over the G lanes of an aligned group (integers: exact in any order) */
template <int G>
__device__ __forceinline__ int group_sum(int v)
{
#pragma unroll
	for (int o = 1; o < G; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* ---- activations -------------------------------------------------------------------------- */

struct QuantArgs {
	const float *x, *x2;
	int ldx, xmode, n, blk;
	unsigned char* out;
	size_t rb;
};

/* grid (ceil(n / 2048), rows), 256 threads: warp w of block b quantizes elements 256 c ..
 * 256 c + 255 (c = 8 b + w) of row blockIdx.y (qact.cuh) */
__global__ void __launch_bounds__(THREADS) act_quant_kernel(const __grid_constant__ QuantArgs a)
{
	pv_grid_sync(); /* x is the previous kernel's output (PDL) */
	const int c = blockIdx.x * WARPS + (threadIdx.x >> 5), t = blockIdx.y;
	if (c * 256 >= a.n) return; /* whole warps */
	float v[8];
	pv_q8_load8(a.x + (size_t)t * a.ldx, a.n, c, v);
	if (a.xmode == PV_X_SWIGLU) {
		float u[8];
		pv_q8_load8(a.x2 + (size_t)t * a.ldx, a.n, c, u);
#pragma unroll
		for (int i = 0; i < 8; i++) v[i] = (v[i] / (1.0f + expf(-v[i]))) * u[i]; /* gemv.cu's xin */
	}
	pv_q8_chunk(v, a.n, a.blk, c, a.out + (size_t)t * a.rb);
}

/* ---- products ----------------------------------------------------------------------------- */

struct QParams {
	Seg seg[3];
	int nseg;
	int cols, T;
	QAct act;
	const int* sel; /* gathered (gemv.cu's Params): block column y is slot q */
	int sel_k, x_by_slot;
	int pair;       /* seg[0] gate, seg[1] up: y = silu(g) * u into seg[0].y */
};

__device__ __forceinline__ int dp4(uint32_t a, uint32_t b, int c) { return __dp4a((int)a, (int)b, c); }

/* the 4 words of an int4 */
__device__ __forceinline__ uint32_t iw(const int4& v, int i)
{
	return (uint32_t)(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}

/* Q4_K sub-block j's 6-bit scale and min (pv_q_scale_min_k4) from the header words y, z, w */
__device__ __forceinline__ void k4_int(const uint4& h, int j, int* sc, int* m)
{
	if (j < 4) {
		*sc = sbyte(h, j) & 63;
		*m = sbyte(h, j + 4) & 63;
	} else {
		*sc = (sbyte(h, j + 4) & 0xf) | ((sbyte(h, j - 4) >> 6) << 4);
		*m = (sbyte(h, j + 4) >> 4) | ((sbyte(h, j) >> 6) << 4);
	}
}

/* One pass of a warp over a weight row: its raw bytes (load, issued U passes at a time so more
 * bytes are in flight), then (dot) each activation row's integers per block and the block's two
 * float operands of the chain, written to the warp's shared array sw ([t][step][NV] floats, a
 * row of rows's steps padded by one float against bank conflicts); chain() then runs row t's
 * float steps in block order on lane t (so the rows of a call chain side by side). */
template <int K>
struct QK;

/* the chains of a pass's steps: lane L < nl runs chain L (sw + L * (STEPS * NV + 1)), y its sum */
template <int STEPS, int NV>
__device__ __forceinline__ void chain(const float* sw, int nj, int nl, float& y)
{
	const int lane = threadIdx.x & 31;
	__syncwarp();
	if (lane < nl) {
		const float* r = sw + lane * (STEPS * NV + 1);
		float acc = y;
		if (nj == STEPS) {
#pragma unroll
			for (int j = 0; j < STEPS; j++)
#pragma unroll
				for (int v = 0; v < NV; v += 2) acc = fmaf(r[NV * j + v], r[NV * j + v + 1], acc);
		} else {
			for (int j = 0; j < nj; j++)
#pragma unroll
				for (int v = 0; v < NV; v += 2) acc = fmaf(r[NV * j + v], r[NV * j + v + 1], acc);
		}
		y = acc;
	}
	__syncwarp(); /* sw is free again */
}

/* Q8_0, planes qs (32 bytes a block) | d (f16): lane l has block 32 pass + l; a step is
 * (fl(dw * dx), (float)I) */
template <>
struct QK<K_Q8_0> {
	static constexpr int U = 4, STEPS = 32, NV = 2;
	struct Raw {
		uint4 w0, w1;
		unsigned short d;
	};
	__device__ static int passes(int cols) { return (cols / 32 + 31) / 32; }
	__device__ static int steps(int cols, int ps) { return min(32, cols / 32 - 32 * ps); }
	__device__ static Raw load(const RowP& rp, int cols, int ps)
	{
		const int b = 32 * ps + (threadIdx.x & 31);
		Raw r = { make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0 };
		if (b < cols / 32) {
			r.w0 = ldw4(rp.q0 + (size_t)b * 32);
			r.w1 = ldw4(rp.q0 + (size_t)b * 32 + 16);
			r.d = ldw2(rp.q1 + (size_t)b * 2);
		}
		return r;
	}
	template <int TT>
	__device__ static void dot(const Raw& r, int cols, int ps, const QAct& A, int x0, int T, float* sw)
	{
		const int lane = threadIdx.x & 31, nb = cols / 32, b = 32 * ps + lane;
		const float dw = f16f(r.d);
		if (b < nb) {
#pragma unroll
			for (int t = 0; t < TT; t++) {
				if (t >= T) break;
				const int4* xa = reinterpret_cast<const int4*>(A.q(x0 + t) + (size_t)b * 32);
				const int4 a0 = __ldg(xa), a1 = __ldg(xa + 1);
				int I = 0;
#pragma unroll
				for (int i = 0; i < 4; i++) I = dp4(word(r.w0, i), iw(a0, i), I);
#pragma unroll
				for (int i = 0; i < 4; i++) I = dp4(word(r.w1, i), iw(a1, i), I);
				float* o = sw + t * (STEPS * NV + 1) + NV * lane;
				o[0] = __fmul_rn(dw, __ldg(A.d(x0 + t) + b));
				o[1] = __int2float_rn(I);
			}
		}
	}
};

/* Q4_K, one plane of whole 144-byte blocks (d, dmin | 12 scale bytes | 128 qs): lanes 4j .. 4j+3
 * have super-block 8 pass + j, lane i of them sub-blocks 2i (low nibbles of qs 32i ..) and 2i+1
 * (high nibbles); a step is (fl(d dx), (float)I, -fl(dmin dx), (float)M) */
template <>
struct QK<K_Q4_K> {
	static constexpr int U = 2, STEPS = 8, NV = 4;
	struct Raw {
		uint4 h, q0, q1;
	};
	__device__ static int passes(int cols) { return (cols / 256 + 7) / 8; }
	__device__ static int steps(int cols, int ps) { return min(8, cols / 256 - 8 * ps); }
	__device__ static Raw load(const RowP& rp, int cols, int ps)
	{
		const int lane = threadIdx.x & 31, sb = 8 * ps + (lane >> 2), i = lane & 3;
		Raw r = { make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0) };
		if (sb < cols / 256) {
			const unsigned char* blk = rp.q0 + (size_t)sb * 144;
			r.h = ldg<uint4>(blk);
			r.q0 = ldw4(blk + 16 + 32 * i);
			r.q1 = ldw4(blk + 32 + 32 * i);
		}
		return r;
	}
	template <int TT>
	__device__ static void dot(const Raw& r, int cols, int ps, const QAct& A, int x0, int T, float* sw)
	{
		const int lane = threadIdx.x & 31, nsb = cols / 256, sb = 8 * ps + (lane >> 2), i = lane & 3;
		const bool on = sb < nsb;
		int sc0, m0, sc1, m1;
		k4_int(r.h, 2 * i, &sc0, &m0);
		k4_int(r.h, 2 * i + 1, &sc1, &m1);
		const float d = f16f(r.h.x & 0xffffu), dmin = f16f(r.h.x >> 16);
#pragma unroll
		for (int t = 0; t < TT; t++) {
			if (t >= T) break;
			int I = 0, M = 0;
			float dx = 0.0f;
			if (on) {
				const int4* xa = reinterpret_cast<const int4*>(A.q(x0 + t) + (size_t)sb * 256 + 64 * i);
				const int4 a0 = __ldg(xa), a1 = __ldg(xa + 1), a2 = __ldg(xa + 2), a3 = __ldg(xa + 3);
				int lo = 0, hi = 0;
#pragma unroll
				for (int w = 0; w < 8; w++) {
					const uint32_t qw = w < 4 ? word(r.q0, w) : word(r.q1, w - 4);
					lo = dp4(qw & 0x0f0f0f0fu, w < 4 ? iw(a0, w) : iw(a1, w - 4), lo);
					hi = dp4((qw >> 4) & 0x0f0f0f0fu, w < 4 ? iw(a2, w) : iw(a3, w - 4), hi);
				}
				const int* S = A.s(x0 + t) + (size_t)sb * 8 + 2 * i;
				I = sc0 * lo + sc1 * hi;
				M = m0 * __ldg(S) + m1 * __ldg(S + 1);
				dx = __ldg(A.d(x0 + t) + sb);
			}
			I = group_sum<4>(I);
			M = group_sum<4>(M);
			if (on && i == 0) {
				float* o = sw + t * (STEPS * NV + 1) + NV * (lane >> 2);
				o[0] = __fmul_rn(d, dx);
				o[1] = __int2float_rn(I);
				o[2] = -__fmul_rn(dmin, dx);
				o[3] = __int2float_rn(M);
			}
		}
	}
};

/* Q6_K, planes ql (128) + qh (64) | scales (16, int8) | d (f16) per super-block: lanes 8j .. 8j+7
 * have super-block 4 pass + j; lane i of them, h = i / 4, k = i % 4, elements 128 h + 32 k + l
 * (l < 32): ql byte 64 h + 32 (k & 1) + l (low nibble for k < 2), bits 2k of qh byte 32 h + l,
 * scale 8 h + 2 k + l / 16; a step is (fl(d dx), (float)I) */
template <>
struct QK<K_Q6_K> {
	static constexpr int U = 2, STEPS = 4, NV = 2;
	struct Raw {
		uint4 l0, l1, h0, h1;
		int sc;           /* the two scales, bytes 0 and 1 */
		unsigned short d;
	};
	__device__ static int passes(int cols) { return (cols / 256 + 3) / 4; }
	__device__ static int steps(int cols, int ps) { return min(4, cols / 256 - 4 * ps); }
	__device__ static Raw load(const RowP& rp, int cols, int ps)
	{
		const int lane = threadIdx.x & 31, sb = 4 * ps + (lane >> 3), i = lane & 7, h = i >> 2, k = i & 3;
		Raw r = { make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0), 0, 0 };
		if (sb < cols / 256) {
			const unsigned char* q = rp.q0 + (size_t)sb * 192;
			r.l0 = ldw4(q + 64 * h + 32 * (k & 1));
			r.l1 = ldw4(q + 64 * h + 32 * (k & 1) + 16);
			r.h0 = ldw4(q + 128 + 32 * h);
			r.h1 = ldw4(q + 128 + 32 * h + 16);
			r.sc = ldw2(rp.q1 + (size_t)sb * 16 + 8 * h + 2 * k); /* even offset: one 2-byte load */
			r.d = ldw2(rp.q2 + (size_t)sb * 2);
		}
		return r;
	}
	template <int TT>
	__device__ static void dot(const Raw& r, int cols, int ps, const QAct& A, int x0, int T, float* sw)
	{
		const int lane = threadIdx.x & 31, nsb = cols / 256, sb = 4 * ps + (lane >> 3), i = lane & 7, h = i >> 2, k = i & 3;
		const bool on = sb < nsb;
		const int sc0 = (int)(signed char)(r.sc & 0xff), sc1 = (int)(signed char)(r.sc >> 8);
		const float d = f16f(r.d);
		uint32_t v[8]; /* the 32 values minus 32, as signed bytes */
#pragma unroll
		for (int w = 0; w < 8; w++) {
			const uint32_t lw = w < 4 ? word(r.l0, w) : word(r.l1, w - 4), hw = w < 4 ? word(r.h0, w) : word(r.h1, w - 4);
			const uint32_t u = ((lw >> (4 * (k >> 1))) & 0x0f0f0f0fu) | (((hw >> (2 * k)) & 0x03030303u) << 4);
			v[w] = ((u | 0x80808080u) - 0x20202020u) ^ 0x80808080u; /* bytewise u - 32: no borrow crosses a byte */
		}
#pragma unroll
		for (int t = 0; t < TT; t++) {
			if (t >= T) break;
			int I = 0;
			float dx = 0.0f;
			if (on) {
				const int4* xa = reinterpret_cast<const int4*>(A.q(x0 + t) + (size_t)sb * 256 + 128 * h + 32 * k);
				const int4 a0 = __ldg(xa), a1 = __ldg(xa + 1);
				int s0 = 0, s1 = 0;
#pragma unroll
				for (int w = 0; w < 4; w++) s0 = dp4(v[w], iw(a0, w), s0);
#pragma unroll
				for (int w = 0; w < 4; w++) s1 = dp4(v[4 + w], iw(a1, w), s1);
				I = sc0 * s0 + sc1 * s1;
				dx = __ldg(A.d(x0 + t) + sb);
			}
			I = group_sum<8>(I);
			if (on && i == 0) {
				float* o = sw + t * (STEPS * NV + 1) + NV * (lane >> 3);
				o[0] = __fmul_rn(d, dx);
				o[1] = __int2float_rn(I);
			}
		}
	}
};

/* shared floats of one warp's chain arrays for R weight rows of TT activation rows */
template <int K>
__host__ __device__ constexpr int sw_floats(int R, int TT)
{
	return R * TT * (QK<K>::STEPS * QK<K>::NV + 1);
}

/* weight rows per warp: a gate/up pair's two rows; 4 for one activation row of Q8_0 (its chain
 * is a step per 32 weights: four rows chain side by side on four lanes); two for one activation
 * row of the K types under cuda.q8_rows=2 or 3 (rk); else 1 */
__host__ __device__ constexpr int rows_of(int K, int TT, bool pair, int rk = 1)
{
	return pair ? 2 : K == K_Q8_0 && TT == 1 ? 4 : TT == 1 && rk > 1 ? 2 : 1;
}

/* passes of a row whose weight bytes a warp loads together (about Q::U passes' bytes in flight);
 * WIDE (cuda.q8_rows=2): U passes of every row */
template <int K, int R, bool WIDE>
__host__ __device__ constexpr int passes_u()
{
	return WIDE ? QK<K>::U : (QK<K>::U + R - 1) / R;
}

template <int K, int R, int U>
__device__ __forceinline__ void load_passes(const RowP* rp, int live, int cols, int p0, int np, typename QK<K>::Raw (&raw)[U][R])
{
#pragma unroll
	for (int u = 0; u < U; u++)
#pragma unroll
		for (int r = 0; r < R; r++)
			if (p0 + u < np && r < live) raw[u][r] = QK<K>::load(rp[r], cols, p0 + u);
}

/* The passes p0 .. p0 + U of rows rp[0 .. live) (raw: their weight bytes) against activation
 * rows x0 .. x0 + T: each pass's steps go to the warp's shared arrays ([r][t]), then every
 * (r, t) chains on its own lane, y its sum so far. */
template <int K, int TT, int R, int U>
__device__ __forceinline__ void batch_dot(const typename QK<K>::Raw (&raw)[U][R], int live, int cols, int p0, int np,
                                          const QAct& A, int x0, int T, float* sw, float& y)
{
	using Q = QK<K>;
	constexpr int SW = Q::STEPS * Q::NV + 1;
#pragma unroll
	for (int u = 0; u < U; u++) {
		if (p0 + u >= np) break;
#pragma unroll
		for (int r = 0; r < R; r++)
			if (r < live) Q::template dot<TT>(raw[u][r], cols, p0 + u, A, x0, T, sw + r * T * SW);
		chain<Q::STEPS, Q::NV>(sw, Q::steps(cols, p0 + u), live * T, y);
	}
}

/* Weight rows rp[0 .. live) of a warp against activation rows x0 .. x0 + T: lane r * T + t ends
 * with y = row r's output for activation row t. The passes in order, U at a time; EARLY: pre
 * holds the first U, loaded before the PDL wait (cuda.q8_early). */
template <int K, int TT, int R, int U, bool EARLY, int PU>
__device__ __forceinline__ void rows_dot(const RowP* rp, int live, int cols, const QAct& A, int x0, int T, float* sw,
                                         const typename QK<K>::Raw (&pre)[PU][R], float& y)
{
	const int np = QK<K>::passes(cols);
	int p0 = 0;
	if constexpr (EARLY) {
		static_assert(PU == U, "the early passes are the first batch");
		batch_dot<K, TT, R, U>(pre, live, cols, 0, np, A, x0, T, sw, y);
		p0 = U;
	}
	for (; p0 < np; p0 += U) {
		typename QK<K>::Raw raw[U][R];
		load_passes<K, R, U>(rp, live, cols, p0, np, raw);
		batch_dot<K, TT, R, U>(raw, live, cols, p0, np, A, x0, T, sw, y);
	}
}

/* RK: the form of a one-row call (cuda.q8_rows): 1 one row a warp, 2 two Q4_K rows with every
 * pass in flight (WIDE, ledger cuda-q8-two-rows, dead), 3 two rows a pass at a time (Q4_K, and
 * Q6_K under 3 blocks an SM: 80 registers, no spills, where the compiler alone takes 98).
 * EARLY (cuda.q8_early, calls that are not gathered): the first passes' weight bytes are
 * requested before the PDL wait. */
template <int K, int TT, bool PAIR, int RK, bool EARLY>
__device__ __forceinline__ void qgemv_body(const QParams& p)
{
	constexpr int R = rows_of(K, TT, PAIR, RK);
	constexpr int U = passes_u<K, R, RK == 2>();
	__shared__ float swa[WARPS * sw_floats<K>(R, TT)];
	const int b = blockIdx.x;
	const Seg* sp = &p.seg[0];
	if (!PAIR && p.nseg > 1 && b >= p.seg[1].block0) sp = &p.seg[1];
	if (!PAIR && p.nseg > 2 && b >= p.seg[2].block0) sp = &p.seg[2];
	const Seg& s = *sp;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float* sw = swa + warp * sw_floats<K>(R, TT);
	/* the warp's first output row: R rows per warp, or one (the pair's gate and up rows) */
	const int64_t row0 = ((int64_t)(b - s.block0) * WARPS + warp) * (PAIR ? 1 : R);
	RowP rp[R];
	int live;
	/* the weight rows from wrow (gathered: the previous kernel chose the expert) */
	auto rows_at = [&](int64_t wrow) {
		if constexpr (PAIR) {
			rp[0] = rowp(s, wrow);
			rp[1] = rowp(p.seg[1], wrow);
			live = 2;
		} else {
			live = (int)min((int64_t)R, s.rows - row0);
#pragma unroll
			for (int r = 0; r < R; r++) rp[r] = rowp(s, wrow + (r < live ? r : 0));
		}
	};
	typename QK<K>::Raw pre[EARLY ? U : 1][R];
	if constexpr (EARLY) {
		/* the weights never depend on the previous kernel: in flight while it drains */
		if (row0 < s.rows) {
			rows_at(row0);
			load_passes<K, R, U>(rp, live, p.cols, 0, QK<K>::passes(p.cols), pre);
		}
	}
	pv_grid_sync(); /* the activations and the expert ids are earlier kernels' (PDL) */
	if (row0 >= s.rows) return; /* a whole warp; no block-wide barrier follows */
	int64_t wrow = row0;
	int x0 = 0;
	float* yo = s.y;
	if (p.sel) {
		const int q = blockIdx.y;
		wrow += (int64_t)p.sel[q] * s.rows;
		x0 = p.x_by_slot ? q : q / p.sel_k;
		yo += (size_t)q * s.ldy;
	}
	if (!EARLY || p.sel) rows_at(wrow); /* (the host never gathers with EARLY) */
	const int T = PAIR ? 1 : p.T;
	float y = 0.0f; /* lane r * T + t: weight row r's output for activation row t */
	rows_dot<K, TT, R, U, EARLY>(rp, live, p.cols, p.act, x0, T, sw, pre, y);
	if constexpr (PAIR) {
		/* silu(g) * u as gemv.cu's pair (and swiglu_kernel): g on lane 0, u on lane 1 */
		float u = __shfl_sync(0xffffffffu, y, 1);
		if (lane == 0) {
			float g = y;
			if (s.bias) g = g + s.bias[row0];
			if (p.seg[1].bias) u = u + p.seg[1].bias[row0];
			yo[row0] = (g / (1.0f + expf(-g))) * u; /* pv_silu(gate) * up */
		}
		return;
	}
	if (lane < live * T) {
		const int r = lane / T, t = lane - r * T;
		yo[(size_t)t * s.ldy + row0 + r] = s.bias ? y + s.bias[row0 + r] : y;
	}
}

template <int K, int TT, bool PAIR, int RK = 1, bool EARLY = false>
__global__ void __launch_bounds__(THREADS) qgemv_kernel(const __grid_constant__ QParams p)
{
	qgemv_body<K, TT, PAIR, RK, EARLY>(p);
}

/* Q6_K's two rows a pass at a time, held to 80 registers (3 blocks an SM, no spills) */
template <int K, int TT, bool PAIR, int RK, bool EARLY>
__global__ void __launch_bounds__(THREADS, 3) qgemv_kernel3(const __grid_constant__ QParams p)
{
	qgemv_body<K, TT, PAIR, RK, EARLY>(p);
}

typedef void (*qkernel_fn)(QParams);

/* early: cuda.q8_early (1: one-row calls, 2: calls of 2-16 rows too) for a call that is not gathered */
template <int K>
qkernel_fn pick_tt(int TT, int pair, int rk, int early)
{
	if (pair) return early ? qgemv_kernel<K, 1, true, 1, true> : qgemv_kernel<K, 1, true>;
	switch (TT) {
	case 1:
		if constexpr (K == K_Q4_K) {
			if (rk == 2) return early ? qgemv_kernel<K, 1, false, 2, true> : qgemv_kernel<K, 1, false, 2>;
			if (rk == 3) return early ? qgemv_kernel<K, 1, false, 3, true> : qgemv_kernel<K, 1, false, 3>;
		}
		if constexpr (K == K_Q6_K)
			if (rk == 3) return early ? qgemv_kernel3<K, 1, false, 3, true> : qgemv_kernel3<K, 1, false, 3, false>;
		return early ? qgemv_kernel<K, 1, false, 1, true> : qgemv_kernel<K, 1, false>;
	case 2: return early == 2 ? qgemv_kernel<K, 2, false, 1, true> : qgemv_kernel<K, 2, false>;
	case 4: return early == 2 ? qgemv_kernel<K, 4, false, 1, true> : qgemv_kernel<K, 4, false>;
	case 8: return early == 2 ? qgemv_kernel<K, 8, false, 1, true> : qgemv_kernel<K, 8, false>;
	default: return early == 2 ? qgemv_kernel<K, 16, false, 1, true> : qgemv_kernel<K, 16, false>;
	}
}

qkernel_fn pick(int kind, int TT, int pair, int rk, int early)
{
	return kind == K_Q8_0   ? pick_tt<K_Q8_0>(TT, pair, rk, early)
	       : kind == K_Q4_K ? pick_tt<K_Q4_K>(TT, pair, rk, early)
	                        : pick_tt<K_Q6_K>(TT, pair, rk, early);
}

/* the weight kinds of this numerics under cuda.q8_act = mode (1: Q8_0, Q4_K, Q6_K; 2: Q4_K, Q6_K)
 * and their activation blocks (0: not one of them) */
int qkind(const struct dmat* w, int mode, int* blk)
{
	switch (w->type) {
	case PV_Q8_0:
		if (mode != 1) return 0;
		*blk = 32;
		return K_Q8_0;
	case PV_Q4_K: *blk = 256; return K_Q4_K;
	case PV_Q6_K: *blk = 256; return K_Q6_K;
	default: return 0;
	}
}

} // namespace

/* activation rows of a call: T, or gathered, one per slot (x_by_slot) or per token */
static int x_rows(int T, const struct gemv_gather* ga)
{
	return ga ? (ga->x_by_slot ? ga->slots : (ga->slots + ga->k - 1) / ga->k) : T;
}

size_t pv_cuda_q8_bytes(int64_t rows, int64_t cols)
{
	return (size_t)rows * pv_qrow_bytes(32, (cols + 31) / 32 * 32); /* blocks of 32 take the most */
}

int pv_cuda_q8_applies(const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, int T,
                       const struct gemv_gather* ga)
{
	if (!tu->q8_act || !tu->q8_buf || n_out < 1 || n_out > 3 || T < 1 || T > PV_CUDA_ROWS) return 0;
	if (ga && T != 1) return 0;
	int blk = 0;
	for (int i = 0; i < n_out; i++) {
		int b = 0;
		if (!qkind(outs[i].w, tu->q8_act, &b) || (i && b != blk) || outs[i].w->cols != outs[0].w->cols || outs[i].w->cols % b)
			return 0;
		blk = b;
	}
	return (size_t)x_rows(T, ga) * pv_qrow_bytes(blk, outs[0].w->cols) <= tu->q8_bytes;
}

int pv_cuda_qgemv(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                  const float* x2, int ldx, int xmode, int T, const struct gemv_gather* ga, int pair, int* n_launch,
                  char* err, size_t errlen)
{
	if (!pv_cuda_q8_applies(tu, outs, n_out, T, ga) || ((uintptr_t)x & 15) || ldx % 4 || (x2 && ((uintptr_t)x2 & 15)))
		return 0;
	int blk = 0;
	qkind(outs[0].w, tu->q8_act, &blk);
	const int n = (int)outs[0].w->cols;
	const int xrows = x_rows(T, ga);
	const int side = (void*)st == tu->q8_side && tu->q8_buf2;
	unsigned char* buf = side ? tu->q8_buf2 : tu->q8_buf;
	const size_t rb = pv_qrow_bytes(blk, n);
	/* already there: the add+RMSNorm before this call wrote x quantized (decode.cu, q8_have) */
	const int have = !side && tu->q8_have == x && tu->q8_have_blk == blk && xrows <= tu->q8_have_rows && ldx == n &&
	                 xmode == PV_X_PLAIN;
	if (!have) {
		QuantArgs a = { x, x2, ldx, xmode, n, blk, buf, rb };
		PV_LAUNCH("q8 activations", tu, err, errlen, act_quant_kernel, dim3((unsigned)((n + 2047) / 2048), (unsigned)xrows),
		          dim3(THREADS), 0, st, a);
		if (n_launch) ++*n_launch;
	}
	const int TT = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : 16;
	/* outputs of one kind share a launch, in order (a pair: both of one kind, checked by the caller) */
	int done[3] = { 0, 0, 0 };
	for (int i = 0; i < n_out; i++) {
		if (done[i]) continue;
		QParams p;
		memset(&p, 0, sizeof p);
		p.cols = n;
		p.T = T;
		p.act = QAct{ buf, rb, n, blk };
		p.pair = pair;
		if (ga) {
			p.sel = ga->sel;
			p.sel_k = ga->k;
			p.x_by_slot = ga->x_by_slot;
		}
		const int kind = qkind(outs[i].w, tu->q8_act, &blk);
		/* cuda.q8_rows: the form of a one-row call's K-type GEMV (rk: qgemv_kernel's RK); 4 is 3 for
		 * Q6_K too (its WIDE form took 150 registers) */
		const int rk = kind == K_Q4_K ? (tu->q8_rows == 4 ? 3 : tu->q8_rows) : kind == K_Q6_K && tu->q8_rows == 4 ? 3 : 1;
		int64_t blocks = 0;
		for (int j = i; j < n_out && p.nseg < 3; j++) {
			int bj = 0;
			if (done[j] || (qkind(outs[j].w, tu->q8_act, &bj) != kind && !pair)) continue;
			const struct dmat* w = outs[j].w;
			const Seg& s = p.seg[p.nseg++] = seg_of(w, outs[j], (int)(ga ? w->rows / ga->n_experts : w->rows), (int)blocks);
			const int rpb = WARPS * (pair ? 1 : rows_of(kind, TT, false, rk)); /* output rows per block */
			if (!pair || j == i) blocks += (s.rows + rpb - 1) / rpb;
			done[j] = 1;
		}
		if (blocks <= 0 || blocks > INT32_MAX) return pv_errf(err, errlen, "CUDA backend: q8 gemv grid of %lld blocks", (long long)blocks);
		const dim3 grid((unsigned)blocks, ga ? (unsigned)ga->slots : 1u);
		PV_LAUNCH("q8 gemv", tu, err, errlen, pick(kind, TT, pair, rk, ga ? 0 : tu->q8_early), grid, dim3(THREADS), 0, st, p);
		if (n_launch) ++*n_launch;
	}
	return 1;
}

int pv_cuda_q8_blk(const struct pv_cuda_tuning* tu, const struct dmat* w)
{
	int blk = 0;
	return tu->q8_act && qkind(w, tu->q8_act, &blk) ? blk : 0;
}
