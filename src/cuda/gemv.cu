/*
 * gemv.cu: matrix-vector products for 1 to 16 activation rows (more: 16-row groups side by side
 * in one launch) over weights in their stored type
 * (BF16, F16, F32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; device layouts in common.cuh).
 *
 * Work split: a block of 8 warps owns 8*R consecutive output rows (R = 1, 2 or 4 rows per
 * warp); the activation rows are staged through shared memory in column tiles shared by all the
 * block's warps, so each weight byte is loaded once per call, whatever the number of rows.
 * Calls of 2-16 rows (verify windows) take the shared walk (units.cuh, walk_rows; template SH):
 * a warp's R weight rows share each activation read, from a conflict-free staged tile (SH 1,
 * cuda.gemv_shared=1) or in place through L1 with no staging (SH 2); SH 0 is the older walk, a
 * weight row at a time. Measured in docs/results/h200-2026-12-02-shared-walk.md.
 *
 * Summation order (what makes the result batch-invariant): a weight row is cut into units of UE
 * consecutive elements (8 for BF16/F16, 4 for F32, 1 for float rows whose bytes are not a whole
 * number of 16-byte vectors, 4 for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, 8 for Q4_K/Q5_K/Q6_K). Lane l of
 * the warp owning the output accumulates, for each activation row separately, the units u = l,
 * l+32, l+64, ... in increasing order and, inside a unit, its elements in increasing order: float
 * types with one fmaf per element, acc = fmaf(w_e, x_e, acc); quantized types with the unit's
 * block scale factored out (units.cuh, qdot_rows: s = sum q_e x_e, acc = fmaf(s, d, acc), plus
 * the offset times sum x_e). The 32 lane sums are added by the xor butterfly of pv_warp_sum; a
 * bias is added after. That order is a function of the row length alone: the column tiles (whose
 * width depends on the number of rows) only pause a lane's walk, and the rows of a call never
 * share an accumulator. The quantized values and scales are quant.h's floats (a one-hot
 * activation gives each weight exactly as pv_dequant_block does).
 */
#include "common.cuh"
#include "units.cuh"

namespace {

using namespace pv_units;

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int SMEM_FLOATS = GEMV_SMEM_FLOATS;
constexpr int MAX_SEG = 3;

struct Params {
	Seg seg[MAX_SEG];
	int nseg;
	int cols;
	int tc;    /* staged columns per tile (a multiple of the unit and of 4) */
	int T;     /* activation rows (<= TT; with grows, of the whole call) */
	int grows; /* > 0: block column y takes rows y*grows .. +grows of x and y (calls of more than
	            * 16 rows in one launch: each group is what its own 16-row call computes) */
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
	int prefetch; /* L2 prefetch of the weight rows (cuda.prefetch, off by default) */
	int direct;   /* one plain activation row, 16-byte aligned: read from global memory through L1,
	               * no staging (gemv_kernel) */
	int pipe;     /* direct: the software-pipelined walk (walk_direct; cuda.gemv_pipe, off: walk) */
	norm_epi ne;  /* ne.x: one row, one output: the add+RMSNorm by the last block (pv_cuda_gemv_norm) */
	int pair;     /* direct: seg[0] = gate, seg[1] = up (same shape); the grid covers seg[0]'s rows,
	               * a warp does gate row j and up row j and writes silu(g) * u to seg[0].y */
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

template <int K, int TT, int R, int SH>
__device__ __forceinline__ void gemv_body(const Params& p)
{
	using KT = Kern<K>;
	constexpr int UE = KT::UE;
	constexpr bool ONE = TT == 1 && R == 1; /* the decode shape: one activation row, one row per warp */
	const int b = blockIdx.x;
	const Seg* sp = &p.seg[0];
	if (!p.pair && p.nseg > 1 && b >= p.seg[1].block0) sp = &p.seg[1];
	if (!p.pair && p.nseg > 2 && b >= p.seg[2].block0) sp = &p.seg[2];
	const Seg& s = *sp;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int T = p.grows ? min(p.grows, p.T - (int)blockIdx.y * p.grows) : p.T; /* this block's rows */
	const int64_t row0 = (int64_t)(b - s.block0) * (WARPS * R) + (int64_t)warp * R;
	const int nu = p.cols / UE;

	/* The weights never depend on earlier kernels: each warp starts its rows streaming into L2
	 * before waiting for the previous kernel (PDL) and staging the activations. Gathered experts
	 * are chosen by the previous kernel, so they are not prefetched. */
	/* the shared walk in place (SH 2): the first batch of weight units is requested before the
	 * PDL wait, as the prefetch would */
	constexpr int UB = SHARED_BATCH<K>;
	const int live = row0 < s.rows ? (int)min((int64_t)R, s.rows - row0) : 0;
	[[maybe_unused]] typename Kern<K>::Raw raw[SH == 2 ? UB : 1][SH == 2 ? R : 1];
	if constexpr (SH == 2) load_rows<K, R, UB>(s, p.stype, row0, live, lane, nu, raw);
	/* SH 3 (cuda.gemv_early): a one-row call read in place, not gathered: the first batch of the
	 * first weight row's units is requested before the PDL wait */
	constexpr bool EARLY = SH == 3;
	[[maybe_unused]] typename Kern<K>::Raw pre[EARLY ? Kern<K>::U : 1];
	if constexpr (EARLY)
		if (row0 < s.rows) walk_first<K>(s, p.stype, row0, lane, nu, pre);
	if (p.prefetch && !p.sel && lane == 0) {
		for (int r = 0; r < R; r++)
			if (row0 + r < s.rows) {
				prefetch_l2(s.p0 + (size_t)(row0 + r) * s.s0, s.s0);
				if (s.p1) prefetch_l2(s.p1 + (size_t)(row0 + r) * s.s1, s.s1);
				if (s.p2) prefetch_l2(s.p2 + (size_t)(row0 + r) * s.s2, s.s2);
			}
	}
	pv_grid_sync(); /* before touching memory other kernels write (PDL) */
	extern __shared__ float4 smem4[];
	float* xs = reinterpret_cast<float*>(smem4);

	const float *x = p.x, *x2 = p.x2;
	float* y = s.y;
	if (p.grows) {
		const size_t t0 = (size_t)blockIdx.y * (size_t)p.grows;
		x += t0 * (size_t)p.ldx;
		if (x2) x2 += t0 * (size_t)p.ldx;
		y += t0 * (size_t)s.ldy;
	}
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
	float accu = 0.0f; /* the up row of a gate/up pair */

	if (TT == 1 && p.direct) {
		/* One activation row, read in place: every warp walks the whole row as one tile (u0 = 0,
		 * u1 = cols / UE, c0 = 0), the same units in the same order as the staged walk, so the
		 * result is bitwise the staged one. The row comes from L2 once per SM and stays in L1
		 * (the weights bypass L1), instead of once per block through shared memory. */
		{
#pragma unroll
			for (int r = 0; r < R; r++) {
				const int64_t row = row0 + r;
				if (row >= s.rows) continue;
				if constexpr (EARLY) walk<K, TT, true>(s, p.stype, row, lane, 0, nu, x, p.ldx, 0, acc[r], pre);
				else if (p.pipe) walk_direct<K>(s, p.stype, wrow + row, lane, nu, x, p.ldx, acc[r]);
				else walk<K, TT>(s, p.stype, wrow + row, lane, 0, nu, x, p.ldx, 0, acc[r]);
			}
			if (ONE && p.pair && row0 < s.rows) {
				if (p.pipe) walk_direct<K>(p.seg[1], p.stype, wrow + row0, lane, nu, x, p.ldx, &accu);
				else walk<K, 1>(p.seg[1], p.stype, wrow + row0, lane, 0, nu, x, p.ldx, 0, &accu);
			}
		}
	} else if constexpr (SH == 2) {
		/* in place: one tile, the activations read through L1 (plain rows, 16-byte aligned;
		 * not gathered: sel is a one-row call) */
		if (live > 0) walk_rows<K, TT, R, false>(s, p.stype, row0, live, lane, 0, nu, x, p.ldx, T - 1, raw, acc);
	} else if constexpr (SH == 1) {
		/* the shared walk (units.cuh): each tile's first batch of weight units is requested
		 * before the tile is staged, the tile is staged in stage_at's layout, and the warp's R
		 * rows share each activation read */
		for (int c0 = 0; c0 < p.cols; c0 += p.tc) {
			const int cn = min(p.tc, p.cols - c0);
			const int u0 = c0 / UE, u1 = (c0 + cn) / UE;
			typename Kern<K>::Raw tr[UB][R];
			load_rows<K, R, UB>(s, p.stype, wrow + row0, live, u0 + ((lane - u0) & 31), u1, tr);
			__syncthreads(); /* the previous tile is consumed */
			for (int e = threadIdx.x; e < TT * p.tc; e += THREADS) {
				const int t = e / p.tc, c = e - t * p.tc;
				xs[t * p.tc + stage_at(UE, p.tc, c)] = t < T && c < cn ? xin(p, x, x2, t, c0 + c) : 0.0f;
			}
			__syncthreads();
			if (live > 0) walk_rows<K, TT, R, true>(s, p.stype, wrow + row0, live, lane, u0, u1, xs, p.tc, TT - 1, tr, acc);
		}
	} else
	for (int c0 = 0; c0 < p.cols; c0 += p.tc) {
		const int cn = min(p.tc, p.cols - c0);
		__syncthreads(); /* the previous tile is consumed */
		for (int e = threadIdx.x; e < TT * p.tc; e += THREADS) {
			const int t = e / p.tc, c = e - t * p.tc;
			xs[e] = t < T && c < cn ? xin(p, x, x2, t, c0 + c) : 0.0f;
		}
		__syncthreads();
		const int u0 = c0 / UE, u1 = (c0 + cn) / UE;
#pragma unroll
		for (int r = 0; r < R; r++) {
			const int64_t row = row0 + r;
			if (row < s.rows) walk<K, TT>(s, p.stype, wrow + row, lane, u0, u1, xs, p.tc, c0, acc[r]);
		}
	}

	if (ONE && p.pair) {
		/* gate/up pair: g and u are the sums the two separate GEMVs would write (same walks, same
		 * butterfly, bias after), and silu(g) * u is swiglu_kernel's expression: the bits the
		 * two-kernel path gives (rows of multi-row calls take that path). */
		float g = pv_warp_sum(acc[0][0]);
		float u = pv_warp_sum(accu);
		if (lane == 0 && row0 < s.rows) {
			if (s.bias) g = g + s.bias[row0];
			if (p.seg[1].bias) u = u + p.seg[1].bias[row0];
			y[row0] = (g / (1.0f + expf(-g))) * u; /* pv_silu(gate) * up */
		}
		return;
	}
#pragma unroll
	for (int r = 0; r < R; r++) {
		const int64_t row = row0 + r;
#pragma unroll
		for (int t = 0; t < TT; t++) {
			const float v = pv_warp_sum(acc[r][t]);
			if (lane == 0 && t < T && row < s.rows)
				y[(size_t)t * s.ldy + row] = s.bias ? v + s.bias[row] : v;
		}
	}
	if (ONE && p.ne.x) {
		/* the last block to finish does the add+RMSNorm over the whole row of y (the
		 * threadFenceReduction pattern: every writer fences, one counter, the last resets it) */
		__shared__ unsigned last;
		__shared__ float red[THREADS / 32 + 1];
		__threadfence();
		__syncthreads();
		if (threadIdx.x == 0) last = atomicAdd(p.ne.counter, 1u) == gridDim.x - 1;
		__syncthreads();
		if (last) {
			__threadfence();
			pv_add_rmsnorm_row<THREADS>(p.ne.x, y, p.ne.xn, p.ne.w, p.ne.H, p.ne.eps, red);
			if (threadIdx.x == 0) *p.ne.counter = 0u;
		}
	}
}

template <int K, int TT, int R, int SH>
__global__ void __launch_bounds__(THREADS) gemv_kernel(const __grid_constant__ Params p)
{
	gemv_body<K, TT, R, SH>(p);
}

/* h = silu(g) * u in place of g, elementwise (rows t < n of width w, ld ld): xin's expression */
__global__ void swiglu_kernel(float* g, const float* u, int ld, int w, int n)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (i >= w || t >= n) return;
	const float a = g[(size_t)t * ld + i];
	g[(size_t)t * ld + i] = (a / (1.0f + expf(-a))) * u[(size_t)t * ld + i]; /* pv_silu(gate) * up */
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
	case PV_Q4_1: return K_Q4_1;
	case PV_Q5_0: return K_Q5_0;
	case PV_Q5_1: return K_Q5_1;
	case PV_Q5_K: return K_Q5_K;
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
	case K_Q4_1: return Kern<K_Q4_1>::UE;
	case K_Q5_0: return Kern<K_Q5_0>::UE;
	case K_Q5_1: return Kern<K_Q5_1>::UE;
	case K_Q5_K: return Kern<K_Q5_K>::UE;
	default: return Kern<K_Q6_K>::UE;
	}
}

typedef void (*kernel_fn)(Params);

/* rows per warp: 1 for one or two activation rows (r2, cuda.gemv_rows = 2: 2, halving the
 * activation traffic per weight byte for a tuning run), 2 for four, 4 for eight or sixteen; with
 * rm (cuda.gemv_rows_multi = 1) 1 for every row count: four times the warps of a 16-row step,
 * whose 4-row warps leave one block per SM (154 registers, 12 % occupancy, DRAM at 2 %: Nsight
 * Compute); rm = 2 with the shared walk: 2 rows per warp at 8 and 16 rows (fewer registers than
 * 4: more blocks per SM). A row's walk and butterfly do not depend on R, so the bits are the
 * same either way.
 * Measured (docs/results/spec-2026-12-02.md §6): slower on the dense 8B at 8 and 16 rows (each
 * block stages the activation tile again), a little faster on the 30B-A3B; off by default. */
int rows_per_warp(int TT, int r2, int rm, int sh)
{
	if (TT > 1 && rm == 1) return 1;
	if (TT >= 8 && rm == 2 && sh) return 2;
	return TT == 1 ? (r2 ? 2 : 1) : TT <= 2 ? 1 : TT == 4 ? 2 : 4;
}

template <int K, int TT>
kernel_fn pick_r(int r2, int rm, int sh)
{
	constexpr int R = TT <= 2 ? 1 : TT == 4 ? 2 : 4;
	if constexpr (TT == 1) {
		(void)rm, (void)sh;
		return r2 ? gemv_kernel<K, 1, 2, 0> : sh == 3 ? gemv_kernel<K, 1, 1, 3> : gemv_kernel<K, 1, 1, 0>;
	} else {
		(void)r2;
		if (rm == 1) return sh ? gemv_kernel<K, TT, 1, 1> : gemv_kernel<K, TT, 1, 0>;
		if constexpr (TT >= 8)
			if (rm == 2 && sh) return sh == 2 ? gemv_kernel<K, TT, 2, 2> : gemv_kernel<K, TT, 2, 1>;
		return sh == 2 ? gemv_kernel<K, TT, R, 2> : sh ? gemv_kernel<K, TT, R, 1> : gemv_kernel<K, TT, R, 0>;
	}
}

template <int K>
kernel_fn pick_tt(int TT, int r2, int rm, int sh)
{
	switch (TT) {
	case 1: return pick_r<K, 1>(r2, rm, sh);
	case 2: return pick_r<K, 2>(r2, rm, sh);
	case 4: return pick_r<K, 4>(r2, rm, sh);
	case 8: return pick_r<K, 8>(r2, rm, sh);
	default: return pick_r<K, 16>(r2, rm, sh);
	}
}

kernel_fn pick(int kind, int TT, int r2, int rm, int sh)
{
	switch (kind) {
	case K_BF16: return pick_tt<K_BF16>(TT, r2, rm, sh);
	case K_F16: return pick_tt<K_F16>(TT, r2, rm, sh);
	case K_F32: return pick_tt<K_F32>(TT, r2, rm, sh);
	case K_SCALAR: return pick_tt<K_SCALAR>(TT, r2, rm, sh);
	case K_Q8_0: return pick_tt<K_Q8_0>(TT, r2, rm, sh);
	case K_Q4_0: return pick_tt<K_Q4_0>(TT, r2, rm, sh);
	case K_Q4_K: return pick_tt<K_Q4_K>(TT, r2, rm, sh);
	case K_Q4_1: return pick_tt<K_Q4_1>(TT, r2, rm, sh);
	case K_Q5_0: return pick_tt<K_Q5_0>(TT, r2, rm, sh);
	case K_Q5_1: return pick_tt<K_Q5_1>(TT, r2, rm, sh);
	case K_Q5_K: return pick_tt<K_Q5_K>(TT, r2, rm, sh);
	default: return pick_tt<K_Q6_K>(TT, r2, rm, sh);
	}
}

/* one launch over outs[0..n) (same kind and cols) */
int launch(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n, int kind, const float* x,
           const float* x2, int ldx, int xmode, int T, const struct gemv_gather* ga, int pair, char* err, size_t errlen,
           const norm_epi* ne = NULL)
{
	const int TT = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : 16;
	const int groups = T > 16 ? (T + 15) / 16 : 1; /* not gathered (checked by the caller) */
	const int r2 = tu->gemv_rows == 2;
	const int rm = tu->gemv_rows_multi;
	/* the shared walk in place needs plain 16-byte-aligned rows, one weight row set (no gather) */
	const int inplace = T > 1 && xmode == PV_X_PLAIN && !((uintptr_t)x & 15) && ldx % 4 == 0 && !ga;
	/* one weight row per warp (rm 1) has no in-place form: it takes the staged shared walk, and
	 * its tile must be allocated (pick_r) */
	const int sh = tu->gemv_shared == 2 && (!inplace || (rm == 1 && T > 1)) ? 1 : tu->gemv_shared;
	const int UE = unit_of(kind), rpb = WARPS * rows_per_warp(TT, r2, rm, sh);
	Params p;
	memset(&p, 0, sizeof p);
	const int64_t cols = outs[0].w->cols;
	p.cols = (int)cols;
	p.direct = T == 1 && xmode == PV_X_PLAIN && !((uintptr_t)x & 15) && ldx % 4 == 0 && tu->gemv_direct;
	const int tc = tile_cols(UE, TT, cols, SMEM_FLOATS);
	p.tc = tc;
	p.T = T;
	p.grows = groups > 1 ? 16 : 0;
	p.ldx = ldx;
	p.xmode = xmode;
	p.stype = outs[0].w->type;
	p.x = x;
	p.x2 = x2;
	p.nseg = n;
	p.prefetch = tu->prefetch;
	p.pipe = tu->gemv_pipe;
	p.pair = pair;
	if (ne) p.ne = *ne;
	if (ga) {
		p.sel = ga->sel;
		p.sel_k = ga->k;
		p.x_by_slot = ga->x_by_slot;
	}
	int64_t blocks = 0;
	for (int i = 0; i < n; i++) {
		const struct dmat* w = outs[i].w;
		const Seg& s = p.seg[i] = seg_of(w, outs[i], (int)(ga ? w->rows / ga->n_experts : w->rows), (int)blocks);
		if (!pair || i == 0) blocks += (s.rows + rpb - 1) / rpb; /* gathered: rows of one expert */
	}
	if (blocks <= 0 || blocks > INT32_MAX) return pv_errf(err, errlen, "CUDA backend: gemv grid of %lld blocks", (long long)blocks);
	const size_t smem = p.direct || (T > 1 && sh == 2) ? 0 : (size_t)TT * (size_t)tc * sizeof(float);
	const dim3 grid((unsigned)blocks, ga ? (unsigned)ga->slots : (unsigned)groups);
	/* cuda.gemv_early: a one-row call in place, one row per warp, no gather, prefetch or pipe */
	/* (the up row of a gate/up pair too: slower, 0.98x on the 8B Q8_0; ledger cuda-gemv-early-up) */
	const int early = tu->gemv_early && p.direct && !r2 && !ga && !p.prefetch && !p.pipe;
	PV_LAUNCH("gemv", tu, err, errlen, pick(kind, TT, r2, rm, early ? 3 : sh), grid, dim3(THREADS), smem, st, p);
	return 0;
}

} // namespace

int pv_cuda_gemv(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                 const float* x2, int ldx, int xmode, int T, int* n_launch, char* err, size_t errlen)
{
	return pv_cuda_gemv_gather(st, tu, outs, n_out, x, x2, ldx, xmode, T, NULL, n_launch, err, errlen);
}

int pv_cuda_gemv_gather(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out,
                        const float* x, const float* x2, int ldx, int xmode, int T, const struct gemv_gather* ga, int* n_launch,
                        char* err, size_t errlen)
{
	/* more than 16 rows: one launch, 16-row groups side by side (block column y), each group's bits
	 * those of its own call; T == 1 only when gathered */
	if (T < 1 || T > 65535 * PV_CUDA_ROWS || n_out < 1 || (ga && (T != 1 || ga->slots < 1 || ga->k < 1 || ga->n_experts < 1)))
		return pv_errf(err, errlen, "CUDA backend: gemv called with %d rows, %d outputs", T, n_out);
	for (int i = 0; ga && i < n_out; i++)
		if (outs[i].w->rows % ga->n_experts)
			return pv_errf(err, errlen, "CUDA backend: stacked expert matrix of %lld rows for %d experts",
			               (long long)outs[i].w->rows, ga->n_experts);
	int done[8] = { 0 };
	if (n_out > 8) return pv_errf(err, errlen, "CUDA backend: gemv with %d outputs", n_out);
	{ /* cuda.q8_act: the integer products (qgemv.cu) when the call is one of theirs */
		const int q = pv_cuda_qgemv(st, tu, outs, n_out, x, x2, ldx, xmode, T, ga, 0, n_launch, err, errlen);
		if (q) return q < 0 ? -1 : 0;
	}
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
		if (!ga && T == 1 && xmode == PV_X_PLAIN && tu->gemv_direct) {
			/* one row of BF16/F16/F32 weights: the bulk-copy kernel (gemv_tma.cu), same bits */
			const int h = pv_cuda_gemv_tma(st, tu, group, g, x, ldx, 0, n_launch, err, errlen);
			if (h < 0) return -1;
			if (h) continue;
		}
		if (launch(st, tu, group, g, kind, x, x2, ldx, xmode, T, ga, 0, err, errlen)) return -1;
		if (n_launch) ++*n_launch;
	}
	return 0;
}

int pv_cuda_gemv_norm(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* out, const float* x, int ldx,
                      const struct norm_epi* ne, int* n_launch, char* err, size_t errlen)
{
	const struct dmat* w = out->w;
	const int kind = kind_of(w);
	if (pv_cuda_q8_applies(tu, out, 1, 1, NULL)) return 0; /* the integer products: not fused */
	if (!tu->norm_fuse || !tu->gemv_direct || tu->gemv_rows == 2 || tu->gemv_pipe || tu->gemv_tma || kind < 0 ||
	    ((uintptr_t)x & 15) || ldx % 4 || w->rows != ne->H || ne->H % 4 || out->ldy < w->rows ||
	    (((uintptr_t)ne->x | (uintptr_t)ne->xn | (uintptr_t)ne->w | (uintptr_t)out->y) & 15) || w->rows > INT32_MAX / 2 ||
	    w->cols > INT32_MAX / 2)
		return 0;
	if (launch(st, tu, out, 1, kind, x, NULL, ldx, PV_X_PLAIN, 1, NULL, 0, err, errlen, ne)) return -1;
	if (n_launch) ++*n_launch;
	return 1;
}

int pv_cuda_gemv_swiglu(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* gate,
                        const struct gemv_out* up, const float* x, int ldx, int T, int* n_launch, char* err, size_t errlen)
{
	return pv_cuda_gemv_swiglu_gather(st, tu, gate, up, x, ldx, T, NULL, n_launch, err, errlen);
}

int pv_cuda_gemv_swiglu_gather(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* gate,
                               const struct gemv_out* up, const float* x, int ldx, int T, const struct gemv_gather* ga,
                               int* n_launch, char* err, size_t errlen)
{
	const struct dmat *g = gate->w, *u = up->w;
	if (ga && (ga->slots < 1 || ga->k < 1 || ga->n_experts < 1 || g->rows % ga->n_experts)) return 0;
	const int kind = kind_of(g);
	if (tu->swiglu_pair && T == 1 && g->type == u->type && g->rows == u->rows && g->cols == u->cols) {
		struct gemv_out o[2] = { *gate, *up };
		const int q = pv_cuda_qgemv(st, tu, o, 2, x, NULL, ldx, PV_X_PLAIN, 1, ga, 1, n_launch, err, errlen);
		if (q) return q;
	}
	if (!tu->swiglu_pair || !tu->gemv_direct || tu->gemv_rows == 2 || T != 1 || kind < 0 || kind != kind_of(u) ||
	    g->type != u->type || g->rows != u->rows || g->cols != u->cols || g->rows > INT32_MAX / 2 ||
	    g->cols > INT32_MAX / 2 || ((uintptr_t)x & 15) || ldx % 4)
		return 0;
	struct gemv_out o[2] = { *gate, *up };
	if (!ga) {
		const int h = pv_cuda_gemv_tma(st, tu, o, 2, x, ldx, 1, n_launch, err, errlen);
		if (h) return h;
	}
	if (launch(st, tu, o, 2, kind, x, NULL, ldx, PV_X_PLAIN, 1, ga, 1, err, errlen)) return -1;
	if (n_launch) ++*n_launch;
	return 1;
}

int pv_cuda_swiglu(cudaStream_t st, const struct pv_cuda_tuning* tu, float* g, const float* u, int ld, int width, int n,
                   char* err, size_t errlen)
{
	if (width < 1 || n < 1) return 0;
	PV_LAUNCH("swiglu", tu, err, errlen, swiglu_kernel, dim3((unsigned)((width + 255) / 256), (unsigned)n), dim3(256), 0,
	          st, g, u, ld, width, n);
	return 0;
}

/* ---- tests: one matrix through the GEMV kernels ------------------------------------------------- */

int pv_cuda_test_matmul(const struct pv_tensor* W, const float* x, int T, float* y, char* err, size_t errlen)
{
	struct pv_cuda_tuning tu_env; /* the defaults and the environment: no model here */
	if (pv_cuda_tuning_read(&tu_env, NULL, NULL, err, errlen) || pv_cuda_select_device(err, errlen)) return -1;
	const struct pv_cuda_tuning* tu = &tu_env;
	unsigned char* qbuf = NULL; /* cuda.q8_act's activation scratch, for calls of up to 16 rows */
	struct dmat d;
	if (pv_cuda_plan_mat(W, &d, err, errlen)) return -1;
	unsigned char* mem = NULL;
	float *dx = NULL, *dy = NULL;
	cudaStream_t st = NULL;
	struct pv_stager* sg = NULL;
	int rc = -1;
	const size_t xb = sizeof(float) * (size_t)T * (size_t)W->cols, yb = sizeof(float) * (size_t)T * (size_t)W->rows;
	CU_OR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), done);
	CU_OR(cudaMalloc((void**)&mem, d.bytes), done);
	{
		size_t off = 0;
		for (int p = 0; p < d.n_planes; p++) {
			d.p[p] = mem + off;
			off += (d.stride[p] * (size_t)d.rows + 255) / 256 * 256;
		}
	}
	if (tu_env.q8_act) {
		tu_env.q8_bytes = pv_cuda_q8_bytes(T < PV_CUDA_ROWS ? T : PV_CUDA_ROWS, W->cols);
		CU_OR(cudaMalloc((void**)&qbuf, tu_env.q8_bytes), done);
		tu_env.q8_buf = qbuf;
	}
	CU_OR(cudaMalloc((void**)&dx, xb), done);
	CU_OR(cudaMalloc((void**)&dy, yb), done);
	CU_OR(cudaMemsetAsync(dy, 0xff, yb, st), done); /* NaN: every output must be written */
	CU_OR(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, st), done);
	CU_OR(cudaStreamSynchronize(st), done);
	if (pv_stager_new(&sg, st, d.bytes, err, errlen) || pv_stager_upload_mat(sg, W, &d, 0, err, errlen) ||
	    pv_stager_finish(sg, err, errlen))
		goto done;
	{ /* more than 16 rows: one launch of 16-row groups */
		struct gemv_out o = { &d, dy, (int)W->rows, NULL };
		if (pv_cuda_gemv(st, tu, &o, 1, dx, NULL, (int)W->cols, PV_X_PLAIN, T, NULL, err, errlen)) goto done;
	}
	CU_OR(cudaMemcpyAsync(y, dy, yb, cudaMemcpyDeviceToHost, st), done);
	CU_OR(cudaStreamSynchronize(st), done);
	rc = 0;
done:
	pv_stager_free(sg);
	if (st) cudaStreamSynchronize(st);
	if (st) cudaStreamDestroy(st);
	if (mem) cudaFree(mem);
	if (dx) cudaFree(dx);
	if (dy) cudaFree(dy);
	if (qbuf) cudaFree(qbuf);
	return rc;
}
