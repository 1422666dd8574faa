/*
 * test_cuda_host.cu: the CUDA backend's weight decoders, on the host (no GPU needed; part of
 * `make test` whenever the CUDA backend is built). units.cuh holds one copy of each decoder for
 * both the device and the host; this checks, for every weight type the backend runs (F32, F16,
 * BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), on quantized random floats and, for
 * the quantized types, on blocks of random bytes with extreme f16 scales:
 *   - the upload's plane split, then each GEMV unit's load + dequantization: with a one-hot
 *     activation, a unit's dot product is the weight itself, equal to pv_dequant_row's
 *   - the order: a float unit's fmaf chain over a random activation equals the same chain
 *     written out over pv_dequant_row's weights in increasing element order, bit for bit; a
 *     quantized unit's factored sum (the scale once per unit) is within 1e-6 of the magnitude
 *     of its terms of the float64 sum over pv_dequant_row's weights
 *   - the embedding lookup's per-element dequantization, bit for bit
 *   - the GEMV's lane walk over column tiles and the butterfly, emulated: a row's result is
 *     bitwise the same whether its launch stages 1, 2, 4, 8 or 16 rows (batch invariance), and
 *     it is the dot product within 1e-5 of sum (|w| + 2|m|) |x| (every unit visited once); and
 *     the one-row launch that reads the activation in place (no staging) gives the same bits
 *   - the KV cache's 16-bit elements (common.cuh, "KV cache element types"): the device's f16
 *     and bf16 roundings give the CPU cache's stored bits (kvcache.c pv_kv_store) over a
 *     stride through every f32 bit pattern, each exponent's rounding ties and the specials, and
 *     the device's widening gives pv_kv_load's values; the q8_0 cache: the device's block
 *     quantizer and per-slice layout give the CPU cache's scales, codes and values, bitwise,
 *     over random slices at every scale and edge blocks (ties, subnormals, overflow, inf, NaN)
 */
#include "cuda/common.cuh"
#include "cuda/units.cuh"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "harness.h"

using namespace pv_units;

/* every case starts from the same state: the same numbers run alone or not */
#define RNG_SEED 0x9e3779b9u
static uint32_t g_rng = RNG_SEED;
static float frand(void)
{
	g_rng = g_rng * 1664525u + 1013904223u;
	return ((g_rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

template <int K>
struct Load {
	static typename Kern<K>::Raw load(const Seg& s, int64_t row, int u, int stype) { return Kern<K>::load(s, row, u); }
};
template <>
struct Load<K_SCALAR> {
	static Kern<K_SCALAR>::Raw load(const Seg& s, int64_t row, int u, int stype) { return Kern<K_SCALAR>::load_t(s, row, u, stype); }
};

/* byte offsets of a quantized block's f16 fields (d, then m / dmin where there is one) */
static int f16_fields(enum pv_dtype t, int* off)
{
	switch (t) {
	case PV_Q8_0: case PV_Q4_0: case PV_Q5_0: off[0] = 0; return 1;
	case PV_Q4_1: case PV_Q5_1: case PV_Q4_K: case PV_Q5_K: off[0] = 0; off[1] = 2; return 2;
	case PV_Q6_K: off[0] = 208; return 1;
	default: return 0;
	}
}

static uint32_t urand(void)
{
	g_rng = g_rng * 1664525u + 1013904223u;
	return g_rng >> 8;
}

/* an f16 scale: the extremes (zeros of both signs, the smallest and largest subnormals, the
 * smallest normal, one, the largest finite of both signs) or a random finite value */
static uint16_t extreme_f16(void)
{
	static const uint16_t ex[] = { 0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xfbff, 0x8001, 0x2e66 };
	const uint32_t k = urand() % 20;
	if (k < sizeof ex / sizeof ex[0]) return ex[k];
	uint16_t h = (uint16_t)(urand() & 0xffff);
	if (((h >> 10) & 0x1f) == 0x1f) h &= 0xbfff; /* no infinities or NaNs */
	return h;
}

/* A row of random blocks: every byte random (every nibble, high bit and packed 6-bit scale
 * pattern), the f16 scales from extreme_f16() */
static void raw_row(enum pv_dtype t, unsigned char* dst, int cols)
{
	const size_t rb = pv_dtype_row_bytes(t, cols), bb = pv_dtype_block_bytes(t);
	for (size_t i = 0; i < rb; i++) dst[i] = (unsigned char)urand();
	int off[2];
	const int nf = f16_fields(t, off);
	for (size_t b = 0; b < rb / bb; b++)
		for (int k = 0; k < nf; k++) {
			const uint16_t h = extreme_f16();
			memcpy(dst + b * bb + off[k], &h, 2);
		}
}

/* |offset| of the block holding element e of a stored row (Q4_1/Q5_1: m; Q4_K/Q5_K: dmin * m
 * of the sub-block; 0 for the types without one): the quantized units sum d * (q x) and
 * m * x separately (units.cuh, qdot_rows), so their rounding is relative to those terms, which
 * |w| + 2 |m| bounds (|d q| <= |w| + |m|) */
static double unit_offset(enum pv_dtype t, const unsigned char* row, int64_t e)
{
	switch (t) {
	case PV_Q4_1: return fabs((double)pv_q_f16(row + 20 * (e / 32) + 2));
	case PV_Q5_1: return fabs((double)pv_q_f16(row + 24 * (e / 32) + 2));
	case PV_Q4_K:
	case PV_Q5_K: {
		const unsigned char* b = row + (t == PV_Q4_K ? 144 : 176) * (e / 256);
		int sc, m;
		pv_q_scale_min_k4((int)(e % 256) / 32, b + 4, &sc, &m);
		return fabs((double)pv_q_f16(b + 2) * m);
	}
	default: return 0.0;
	}
}

/* The quantized kinds factor the block scale out of each unit (units.cuh, qdot_rows): their
 * unit sums are checked against float64 within a rounding bound; the float kinds' against the
 * same fmaf chain written out, bit for bit. */
template <int K>
static constexpr bool factored() { return K >= K_Q8_0; }

/* Rows of random weights of type t, as the tests build them: row r from random floats times 0.1 (1 + r),
 * quantized (raw: random blocks instead, raw_row), its dequantized values (ref, [rows, cols]),
 * and the device planes as the upload splits them (one Seg over them). */
struct HostMat {
	size_t rb;                              /* bytes of one stored row */
	unsigned char* w;                       /* [rows] stored rows */
	float* ref;                             /* [rows, cols] pv_dequant_row of each */
	struct dmat d;
	unsigned char* planes[PV_CUDA_MAX_PLANES];
	Seg s;
};

static HostMat host_mat(enum pv_dtype t, int rows, int cols, int raw, const char* label)
{
	char err[256];
	HostMat m;
	memset(&m, 0, sizeof m);
	m.rb = pv_dtype_row_bytes(t, cols);
	m.w = (unsigned char*)malloc(m.rb * (size_t)rows);
	m.ref = (float*)malloc(sizeof(float) * (size_t)cols * rows);
	float* f = (float*)malloc(sizeof(float) * (size_t)cols);
	for (int r = 0; r < rows; r++) {
		for (int c = 0; c < cols; c++) f[c] = frand() * 0.1f * (1 + r);
		unsigned char* dst = m.w + m.rb * (size_t)r;
		if (raw) raw_row(t, dst, cols);
		else if (t == PV_F32) memcpy(dst, f, m.rb);
		else if (t == PV_BF16 || t == PV_F16)
			for (int c = 0; c < cols; c++) {
				uint16_t h = t == PV_BF16 ? to_bf16(f[c]) : pv_f32_to_f16(f[c]);
				memcpy(dst + 2 * c, &h, 2);
			}
		else CHECK(pv_quant_row(t, f, dst, cols) == 0, "%s: quantize", label);
		pv_dequant_row(t, dst, m.ref + (size_t)r * cols, cols);
	}
	free(f);
	struct pv_tensor T = { m.w, t, rows, cols };
	CHECK(pv_cuda_plan_mat(&T, &m.d, err, sizeof err) == 0, "%s: plan: %s", label, err);
	for (int p = 0; p < m.d.n_planes; p++) {
		m.planes[p] = (unsigned char*)aligned_alloc(16, (m.d.stride[p] * (size_t)rows + 15) / 16 * 16);
		for (int r = 0; r < rows; r++)
			extract_plane(m.d.type, m.d.cols, m.d.stride[0], p, m.w + m.rb * (size_t)r, m.planes[p] + m.d.stride[p] * (size_t)r);
	}
	m.s.p0 = m.planes[0];
	m.s.p1 = m.planes[1];
	m.s.p2 = m.planes[2];
	m.s.s0 = m.d.stride[0];
	m.s.s1 = m.d.stride[1];
	m.s.s2 = m.d.stride[2];
	return m;
}

static void host_mat_free(HostMat* m)
{
	for (int p = 0; p < PV_CUDA_MAX_PLANES; p++) free(m->planes[p]);
	free(m->w);
	free(m->ref);
}

/* raw: the rows are random blocks (raw_row) instead of quantized random floats */
template <int K>
static void check(enum pv_dtype t, int rows, int cols, const char* label, int raw = 0)
{
	HostMat hm = host_mat(t, rows, cols, raw, label);
	const size_t rb = hm.rb;
	const unsigned char* w = hm.w;
	const float* ref = hm.ref;
	const struct dmat& d = hm.d;
	unsigned char* const* planes = hm.planes;
	const Seg& s = hm.s;
	Planes pl = { planes[0], planes[1], planes[2], d.stride[0], d.stride[1], d.stride[2], (int)t };

	constexpr int UE = Kern<K>::UE;
	float* xs = (float*)aligned_alloc(16, sizeof(float) * (size_t)cols);
	int bad_map = 0, bad_order = 0, bad_elem = 0;
	for (int r = 0; r < rows; r++) {
		const float* rr = ref + (size_t)r * cols;
		for (int c = 0; c < cols; c++) {
			const float e = dq_elem(pl, r, c);
			bad_elem += memcmp(&rr[c], &e, 4) != 0;
		}
		for (int u = 0; u < cols / UE; u++) {
			typename Kern<K>::Raw raw = Load<K>::load(s, r, u, (int)t);
			/* one-hot: the unit's product is the weight at that column */
			for (int j = 0; j < UE && bad_map < 5; j++) {
				memset(xs, 0, sizeof(float) * (size_t)cols);
				xs[u * UE + j] = 1.0f;
				float acc = 0.0f;
				Kern<K>::template dot<1>(raw, xs, cols, u * UE, &acc);
				if (!(acc == rr[u * UE + j])) {
					if (!bad_map)
						fprintf(stderr, "%s: row %d unit %d element %d: %g, want %g\n", label, r, u, j, acc, rr[u * UE + j]);
					bad_map++;
				}
			}
			/* order: the chain over a random activation, against the same chain written out
			 * (float kinds), or the unit's factored sum against float64 (quantized kinds:
			 * each of its <= 8 + 3 roundings is at most 2^-24 of the terms' magnitude) */
			for (int c = 0; c < cols; c++) xs[c] = frand();
			float acc = 0.25f, want = 0.25f;
			Kern<K>::template dot<1>(raw, xs, cols, u * UE, &acc);
			if (factored<K>()) {
				double ref = 0.25, mag = 0.25;
				for (int j = 0; j < UE; j++) {
					const double m = unit_offset(t, w + rb * (size_t)r, (int64_t)u * UE + j);
					ref += (double)rr[u * UE + j] * xs[u * UE + j];
					mag += (fabs((double)rr[u * UE + j]) + 2 * m) * fabs((double)xs[u * UE + j]);
				}
				if (!(fabs((double)acc - ref) <= 1e-6 * mag)) {
					if (!bad_order) fprintf(stderr, "%s: row %d unit %d: %.9g, want %.9g (bound %.3g)\n", label, r, u, acc, ref, 1e-6 * mag);
					bad_order++;
				}
			} else {
				for (int j = 0; j < UE; j++) want = fmaf(rr[u * UE + j], xs[u * UE + j], want);
				bad_order += memcmp(&acc, &want, 4) != 0;
			}
		}
	}
	CHECK(!bad_map, "%s: %d unit elements decode to the wrong weight", label, bad_map);
	CHECK(!bad_order, "%s: %d units accumulate in another order than element order (or, factored, off float64)", label, bad_order);
	CHECK(!bad_elem, "%s: %d embedding elements differ from pv_dequant_row", label, bad_elem);
	printf("  %-14s [%d, %d]%s: unit decode, order and embedding lookup %s\n", label, rows, cols, raw ? " random blocks" : "",
	       bad_map || bad_order || bad_elem ? "WRONG" : "exact");
	free(xs);
	host_mat_free(&hm);
}

/* The GEMV of one weight row as the kernel computes it, emulated: 32 lanes walk the column tiles
 * a TT-row launch stages (units u = lane mod 32), then the xor butterfly. Returns row t's result. */
template <int K, int TT>
static float gemv_row(const Seg& s, int stype, int64_t row, int64_t cols, const float* x, int t)
{
	constexpr int UE = Kern<K>::UE;
	const int tc = tile_cols(UE, TT, cols, GEMV_SMEM_FLOATS);
	float* xs = (float*)aligned_alloc(16, sizeof(float) * (size_t)TT * tc);
	float lanes[32][TT];
	memset(lanes, 0, sizeof lanes);
	for (int c0 = 0; c0 < cols; c0 += tc) {
		const int cn = cols - c0 < tc ? (int)(cols - c0) : tc;
		for (int e = 0; e < TT * tc; e++) {
			const int tt = e / tc, c = e % tc;
			xs[e] = c < cn ? x[(size_t)tt * cols + c0 + c] : 0.0f;
		}
		for (int lane = 0; lane < 32; lane++) walk<K, TT>(s, stype, row, lane, c0 / UE, (c0 + cn) / UE, xs, tc, c0, lanes[lane]);
	}
	float v[32];
	for (int lane = 0; lane < 32; lane++) v[lane] = lanes[lane][t];
	free(xs);
	return butterfly32(v);
}

/* The one-row launch that reads its activation in place (gemv.cu, Params::direct): every lane
 * walks the whole row as one tile, x itself, ld = the row length; pipe: walk_direct (the
 * default), else walk (PV_CUDA_GEMV_PIPE=0). */
template <int K>
static float gemv_row_direct(const Seg& s, int stype, int64_t row, int64_t cols, const float* x, int pipe)
{
	constexpr int UE = Kern<K>::UE;
	float lanes[32][1];
	memset(lanes, 0, sizeof lanes);
	for (int lane = 0; lane < 32; lane++) {
		if (pipe) walk_direct<K>(s, stype, row, lane, (int)(cols / UE), x, (int)cols, lanes[lane]);
		else walk<K, 1>(s, stype, row, lane, 0, (int)(cols / UE), x, (int)cols, 0, lanes[lane]);
	}
	float v[32];
	for (int lane = 0; lane < 32; lane++) v[lane] = lanes[lane][0];
	return butterfly32(v);
}

/* batch invariance of the emulated kernel: a row's result from a launch of 1, 2, 4, 8 or 16
 * staged rows (each with its own tile width) is bitwise the same; and it is the dot product */
template <int K>
static void check_walk(enum pv_dtype t, int cols, const char* label, int raw = 0)
{
	HostMat hm = host_mat(t, 1, cols, raw, label);
	const unsigned char* w = hm.w;
	const float* f = hm.ref; /* the dequantized row */
	const Seg& s = hm.s;
	float* x = (float*)malloc(sizeof(float) * 16 * (size_t)cols);
	for (int i = 0; i < 16 * cols; i++) x[i] = frand();
	int same = 1;
	double worst = 0;
	for (int r = 0; r < 16; r++) {
		const float y1 = gemv_row<K, 1>(s, (int)t, 0, cols, x + (size_t)r * cols, 0);
		const float y2 = gemv_row<K, 2>(s, (int)t, 0, cols, x + (size_t)(r & ~1) * cols, r & 1);
		const float y4 = gemv_row<K, 4>(s, (int)t, 0, cols, x + (size_t)(r & ~3) * cols, r & 3);
		const float y8 = gemv_row<K, 8>(s, (int)t, 0, cols, x + (size_t)(r & ~7) * cols, r & 7);
		const float y16 = gemv_row<K, 16>(s, (int)t, 0, cols, x, r);
		const float yd = gemv_row_direct<K>(s, (int)t, 0, cols, x + (size_t)r * cols, 0);
		const float yp = gemv_row_direct<K>(s, (int)t, 0, cols, x + (size_t)r * cols, 1);
		same &= !memcmp(&y1, &yd, 4) && !memcmp(&y1, &yp, 4);
		same &= !memcmp(&y1, &y2, 4) && !memcmp(&y1, &y4, 4) && !memcmp(&y1, &y8, 4) && !memcmp(&y1, &y16, 4);
		double ref = 0, mag = 0;
		for (int c = 0; c < cols; c++) {
			ref += (double)f[c] * x[(size_t)r * cols + c];
			mag += (fabs((double)f[c]) + 2 * unit_offset(t, w, c)) * fabs((double)x[(size_t)r * cols + c]);
		}
		const double e = fabs(y1 - ref) / (mag > 0 ? mag : 1);
		if (e > worst) worst = e;
	}
	CHECK(same, "%s [%d]: a row's result depends on how many rows the launch stages (or on staging at all)", label, cols);
	CHECK(worst < 1e-5, "%s [%d]: the emulated GEMV is off the float64 dot product by %.3g of sum |w x|", label, cols, worst);
	printf("  %-14s [%d]%s: emulated GEMV, in place (plain and pipelined) and 1..16 staged rows bitwise equal, error %.2e of sum |w x|\n",
	       label, cols, raw ? " random blocks" : "", worst);
	host_mat_free(&hm);
	free(x);
}

/* The shared walk (units.cuh, walk_rows: a warp's R weight rows against one staged tile in
 * stage_at's layout), emulated for a launch of TT activation rows: out[row * TT + t]. */
template <int K, int TT, int R>
static void gemv_rows_shared(const Seg& s, int stype, int nrows, int64_t cols, const float* x, float* out)
{
	constexpr int UE = Kern<K>::UE, UB = SHARED_BATCH<K>;
	const int tc = tile_cols(UE, TT, cols, GEMV_SMEM_FLOATS);
	const int warps = (nrows + R - 1) / R;
	float* xs = (float*)aligned_alloc(16, sizeof(float) * (size_t)TT * tc);
	float* acc = (float*)calloc((size_t)warps * 32 * R * TT, sizeof(float)); /* [warp][lane][R][TT] */
	for (int64_t c0 = 0; c0 < cols; c0 += tc) {
		const int cn = cols - c0 < tc ? (int)(cols - c0) : tc;
		for (int e = 0; e < TT * tc; e++) xs[e] = NAN; /* every read cell is written below */
		for (int e = 0; e < TT * tc; e++) {
			const int t = e / tc, c = e % tc;
			xs[t * tc + stage_at(UE, tc, c)] = c < cn ? x[(size_t)t * cols + c0 + c] : 0.0f;
		}
		const int u0 = (int)(c0 / UE), u1 = (int)((c0 + cn) / UE);
		for (int w = 0; w < warps; w++) {
			const int live = nrows - w * R < R ? nrows - w * R : R;
			for (int lane = 0; lane < 32; lane++) {
				typename Kern<K>::Raw raw[UB][R];
				load_rows<K, R, UB>(s, stype, (int64_t)w * R, live, u0 + ((lane - u0) & 31), u1, raw);
				float(*a)[TT] = reinterpret_cast<float(*)[TT]>(acc + ((size_t)w * 32 + lane) * R * TT);
				walk_rows<K, TT, R, true>(s, stype, (int64_t)w * R, live, lane, u0, u1, xs, tc, TT - 1, raw, a);
			}
		}
	}
	for (int row = 0; row < nrows; row++)
		for (int t = 0; t < TT; t++) {
			float v[32];
			for (int lane = 0; lane < 32; lane++)
				v[lane] = acc[(((size_t)(row / R) * 32 + lane) * R + row % R) * TT + t];
			out[row * TT + t] = butterfly32(v);
		}
	free(acc);
	free(xs);
}

/* The shared walk reading the activations in place (cuda.gemv_shared = 2): one tile, x itself,
 * rows T .. TT-1 read as row T-1 (T = the rows given). */
template <int K, int TT, int R>
static void gemv_rows_inplace(const Seg& s, int stype, int nrows, int64_t cols, const float* x, int T, float* out)
{
	constexpr int UE = Kern<K>::UE, UB = SHARED_BATCH<K>;
	const int warps = (nrows + R - 1) / R, nu = (int)(cols / UE);
	for (int w = 0; w < warps; w++) {
		const int live = nrows - w * R < R ? nrows - w * R : R;
		float v[R][TT][32];
		for (int lane = 0; lane < 32; lane++) {
			float a[R][TT];
			memset(a, 0, sizeof a);
			typename Kern<K>::Raw raw[UB][R];
			load_rows<K, R, UB>(s, stype, (int64_t)w * R, live, lane, nu, raw);
			walk_rows<K, TT, R, false>(s, stype, (int64_t)w * R, live, lane, 0, nu, x, (int)cols, T - 1, raw, a);
			for (int r = 0; r < R; r++)
				for (int t = 0; t < TT; t++) v[r][t][lane] = a[r][t];
		}
		for (int r = 0; r < live; r++)
			for (int t = 0; t < T; t++) out[(w * R + r) * TT + t] = butterfly32(v[r][t]);
	}
}

/* the shared walk gives walk()'s bits: 3 weight rows (a warp of R = 4 with a dead row, R = 2
 * with a lone row), every row count */
template <int K>
static void check_shared(enum pv_dtype t, int cols, const char* label)
{
	enum { RW = 3 };
	HostMat hm = host_mat(t, RW, cols, 0, label);
	const Seg& s = hm.s;
	float* x = (float*)malloc(sizeof(float) * 16 * (size_t)cols);
	for (int i = 0; i < 16 * cols; i++) x[i] = frand();
	float ref[RW][16], o[RW * 16];
	for (int r = 0; r < RW; r++)
		for (int i = 0; i < 16; i++) ref[r][i] = gemv_row<K, 1>(s, (int)t, r, cols, x + (size_t)i * cols, 0);
	int bad = 0;
#define SHARED_CASE(TT, R)                                                                     \
	for (int b = 0; b < 16; b += TT) {                                                     \
		gemv_rows_shared<K, TT, R>(s, (int)t, RW, cols, x + (size_t)b * cols, o);      \
		for (int r = 0; r < RW; r++)                                                   \
			for (int i = 0; i < TT; i++) bad += memcmp(&o[r * TT + i], &ref[r][b + i], 4) != 0; \
	}
	SHARED_CASE(2, 1)
	SHARED_CASE(4, 2)
	SHARED_CASE(8, 2)
	SHARED_CASE(8, 4)
	SHARED_CASE(16, 1)
	SHARED_CASE(16, 2)
	SHARED_CASE(16, 4)
#undef SHARED_CASE
	/* in place, T of TT rows given (3 of 4, 5 of 8, 16 of 16: the rows past T are never read
	 * past the buffer) */
#define INPLACE_CASE(TT, R, T)                                                                 \
	{                                                                                      \
		gemv_rows_inplace<K, TT, R>(s, (int)t, RW, cols, x + (size_t)(16 - T) * cols, T, o); \
		for (int r = 0; r < RW; r++)                                                   \
			for (int i = 0; i < T; i++) bad += memcmp(&o[r * TT + i], &ref[r][16 - T + i], 4) != 0; \
	}
	INPLACE_CASE(2, 1, 2)
	INPLACE_CASE(4, 2, 3)
	INPLACE_CASE(8, 4, 5)
	INPLACE_CASE(16, 4, 16)
	INPLACE_CASE(16, 2, 16)
#undef INPLACE_CASE
	CHECK(!bad, "%s [%d]: %d results of the shared walk differ from the one-row walk", label, cols, bad);
	printf("  %-14s [%d]: shared walk (2-16 rows, 1-4 weight rows per warp; staged and in place) bitwise the one-row walk\n",
	       label, cols);
	host_mat_free(&hm);
	free(x);
}

/* the shared walk of multi-row GEMVs, emulated */
TEST_CASE(shared)
{
	g_rng = RNG_SEED;
	check_shared<K_BF16>(PV_BF16, 4104, "bf16");
	check_shared<K_F16>(PV_F16, 1536, "f16");
	check_shared<K_F32>(PV_F32, 1028, "f32");
	check_shared<K_SCALAR>(PV_BF16, 2051, "bf16 (odd)");
	check_shared<K_Q8_0>(PV_Q8_0, 2080, "q8_0");
	check_shared<K_Q4_0>(PV_Q4_0, 1024, "q4_0");
	check_shared<K_Q4_1>(PV_Q4_1, 1056, "q4_1");
	check_shared<K_Q5_0>(PV_Q5_0, 896, "q5_0");
	check_shared<K_Q5_1>(PV_Q5_1, 1056, "q5_1");
	check_shared<K_Q4_K>(PV_Q4_K, 2816, "q4_k");
	check_shared<K_Q5_K>(PV_Q5_K, 2048, "q5_k");
	check_shared<K_Q6_K>(PV_Q6_K, 2816, "q6_k");
}

/* each type on quantized random floats */
TEST_CASE(decode)
{
	g_rng = RNG_SEED;
	check<K_BF16>(PV_BF16, 3, 768, "bf16");
	check<K_F16>(PV_F16, 3, 768, "f16");
	check<K_F32>(PV_F32, 3, 768, "f32");
	check<K_SCALAR>(PV_BF16, 3, 203, "bf16 (odd)");
	check<K_SCALAR>(PV_F16, 3, 203, "f16 (odd)");
	check<K_SCALAR>(PV_F32, 3, 203, "f32 (odd)");
	check<K_Q8_0>(PV_Q8_0, 3, 768, "q8_0");
	check<K_Q4_0>(PV_Q4_0, 3, 768, "q4_0");
	check<K_Q4_K>(PV_Q4_K, 3, 768, "q4_k");
	check<K_Q6_K>(PV_Q6_K, 3, 768, "q6_k");
	check<K_Q4_1>(PV_Q4_1, 3, 768, "q4_1");
	check<K_Q5_0>(PV_Q5_0, 3, 768, "q5_0");
	check<K_Q5_1>(PV_Q5_1, 3, 768, "q5_1");
	check<K_Q5_K>(PV_Q5_K, 3, 768, "q5_k");
}

TEST_CASE(random_blocks)
{
	g_rng = RNG_SEED;
	/* random blocks (every bit pattern of the quants and packed scales, extreme f16 scales):
	 * 1024 blocks of the 32-element types, 128 super-blocks of the K types */
	check<K_Q8_0>(PV_Q8_0, 16, 2048, "q8_0", 1);
	check<K_Q4_0>(PV_Q4_0, 16, 2048, "q4_0", 1);
	check<K_Q4_1>(PV_Q4_1, 16, 2048, "q4_1", 1);
	check<K_Q5_0>(PV_Q5_0, 16, 2048, "q5_0", 1);
	check<K_Q5_1>(PV_Q5_1, 16, 2048, "q5_1", 1);
	check<K_Q4_K>(PV_Q4_K, 16, 2048, "q4_k", 1);
	check<K_Q5_K>(PV_Q5_K, 16, 2048, "q5_k", 1);
	check<K_Q6_K>(PV_Q6_K, 16, 2048, "q6_k", 1);
}

/* the GEMV's lane walk and butterfly, emulated */
TEST_CASE(walk)
{
	g_rng = RNG_SEED;
	/* widths past one tile (8192 / TT columns) exercise the walk across tiles */
	check_walk<K_BF16>(PV_BF16, 12288, "bf16");
	check_walk<K_F16>(PV_F16, 1536, "f16");
	check_walk<K_F32>(PV_F32, 4100, "f32");
	check_walk<K_SCALAR>(PV_BF16, 2051, "bf16 (odd)");
	check_walk<K_Q8_0>(PV_Q8_0, 12288, "q8_0");
	check_walk<K_Q4_0>(PV_Q4_0, 4096, "q4_0");
	check_walk<K_Q4_K>(PV_Q4_K, 12288, "q4_k");
	check_walk<K_Q6_K>(PV_Q6_K, 2816, "q6_k");
	check_walk<K_Q4_1>(PV_Q4_1, 4096, "q4_1");
	check_walk<K_Q5_0>(PV_Q5_0, 4864, "q5_0");
	check_walk<K_Q5_1>(PV_Q5_1, 4096, "q5_1");
	check_walk<K_Q5_K>(PV_Q5_K, 12288, "q5_k");
	check_walk<K_Q5_0>(PV_Q5_0, 896, "q5_0", 1);
	check_walk<K_Q5_K>(PV_Q5_K, 2816, "q5_k", 1);
	check_walk<K_Q4_1>(PV_Q4_1, 1056, "q4_1", 1);
	check_walk<K_Q5_1>(PV_Q5_1, 1056, "q5_1", 1);
	/* unit counts that end mid-batch (the pipelined walk's tails) */
	check_walk<K_BF16>(PV_BF16, 4104, "bf16");
	check_walk<K_Q4_K>(PV_Q4_K, 2816, "q4_k");
	check_walk<K_Q8_0>(PV_Q8_0, 1056, "q8_0");
}

/* the CPU KV cache (cpu/state.h, kvcache.c): the reference of the device's stores and loads */
extern "C" void pv_kv_store(int dtype, const float* src, unsigned char* dst, int nkv, int hd);
extern "C" void pv_kv_load(int dtype, const unsigned char* head, float* dst, int hd);

/* n values of x through the CPU cache and the device functions (common.cuh) of 16-bit type t */
template <int KVT>
static int kv_batch(const float* x, int n, unsigned char* st, float* back)
{
	const int dt = KVT == PV_KV_F16 ? PV_F16 : PV_BF16;
	pv_kv_store(dt, x, st, 1, n);
	pv_kv_load(dt, st, back, n);
	int bad = 0;
	for (int i = 0; i < n; i++) {
		uint16_t cpu;
		memcpy(&cpu, st + 2 * (size_t)i, 2);
		const uint16_t dev = KVT == PV_KV_F16 ? pv_d_f32_to_f16(x[i]) : pv_d_f32_to_bf16(x[i]);
		const float w = pv_kv_widen<KVT>(dev);
		const int same_w = isnan(w) ? isnan(back[i]) : memcmp(&w, &back[i], 4) == 0;
		if (cpu != dev || !same_w) {
			if (bad < 4)
				fprintf(stderr, "  %s: x %a (0x%08x): CPU 0x%04x, device 0x%04x; widened %a vs %a\n",
				        KVT == PV_KV_F16 ? "f16" : "bf16", (double)x[i], pv_kv_bits(x[i]), cpu, dev, (double)w,
				        (double)back[i]);
			bad++;
		}
	}
	return bad;
}

TEST_CASE(kv_rounding)
{
	enum { N = 4096 };
	static float x[N], back[N];
	static unsigned char st[2 * N];
	int n = 0, bad16 = 0, badbf = 0;
	long total = 0;
	/* the bit patterns: a prime stride through all 2^32, then per exponent (and sign) the
	 * mantissas at and beside the f16 and bf16 ties, and the specials */
	uint32_t pats[] = { 0x0fffu, 0x1000u, 0x1001u, 0x2fffu, 0x3000u, 0x3001u, 0x7fffu, 0x8000u, 0x8001u, 0x17fffu,
		            0x18000u, 0x18001u, 0x7fe000u, 0x7ff000u, 0x7fffffu, 0x0u, 0x1u, 0x400000u };
	const uint32_t specials[] = { 0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
		                      0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x38800000u, 0x387fffffu, 0x33800000u,
		                      0x33000000u, 0x33000001u, 0x337fffffu, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu };
	const int npat = (int)(sizeof pats / sizeof pats[0]), nspec = (int)(sizeof specials / sizeof specials[0]);
	const uint64_t stride = 65521ull, steps = (1ull << 32) / stride;
	const uint64_t all = steps + 2ull * 256 * npat + nspec;
	for (uint64_t k = 0; k < all; k++) {
		uint32_t u;
		if (k < steps) {
			u = (uint32_t)(k * stride);
		} else if (k < steps + 2ull * 256 * npat) {
			const uint64_t j = k - steps;
			const uint32_t sign = (uint32_t)(j / (256 * npat)) << 31, e = (uint32_t)(j / npat % 256);
			u = sign | e << 23 | pats[j % npat];
		} else {
			u = specials[k - steps - 2ull * 256 * npat];
		}
		memcpy(&x[n++], &u, 4);
		if (n == N || k + 1 == all) {
			bad16 += kv_batch<PV_KV_F16>(x, n, st, back);
			badbf += kv_batch<PV_KV_BF16>(x, n, st, back);
			total += n;
			n = 0;
		}
	}
	CHECK(bad16 == 0, "f16 KV rounding: %d of %ld values differ from the CPU cache's", bad16, total);
	CHECK(badbf == 0, "bf16 KV rounding: %d of %ld values differ from the CPU cache's", badbf, total);
	printf("  f16 / bf16 KV stores and loads: %ld f32 values, bitwise the CPU cache's\n", total);
}

/* One head slice [hd] through the CPU's q8_0 cache (pv_kv_store / pv_kv_load: 34-byte blocks)
 * and through the device's (common.cuh: hd codes then nb f16 scales, pv_kv_hbytes bytes): the
 * block quantizer the warp runs (pv_d_q8_block: the same pv_d_q8_id and pv_d_q8_code, amax a
 * max) into the device layout, then read back as pv_kv_load<PV_KV_Q8_0> indexes it (vector v of
 * 8 codes, scale v / 4, pv_kv_q8_elem). Scales, codes (the stored ones; the CPU's padding codes
 * are 0) and every widened value bitwise (NaN: both NaN). Returns the mismatches. */
static int kv_q8_slice(const float* x, int hd, const char* what)
{
	static unsigned char cpu[8 * 34 + 64], dev[512];
	static float back[256];
	const int nb = (hd + 31) / 32;
	const size_t hb = pv_kv_hbytes(PV_KV_Q8_0, hd);
	int bad = 0;
	if (hb % 8 || hb < (size_t)hd + 2 * nb || hb > sizeof dev) {
		fprintf(stderr, "  q8_0 %s: head dim %d: %zu slice bytes\n", what, hd, hb);
		return 1;
	}
	memset(dev, 0xa5, sizeof dev);
	pv_kv_store(PV_Q8_0, x, cpu, 1, hd);
	pv_kv_load(PV_Q8_0, cpu, back, hd);
	int8_t* q = (int8_t*)dev;
	uint16_t* ds = (uint16_t*)(dev + hd);
	for (int b = 0; b < nb; b++) {
		const int n = hd - 32 * b < 32 ? hd - 32 * b : 32;
		pv_d_q8_block(x + 32 * b, n, ds + b, q + 32 * b);
		const unsigned char* cb = cpu + 34 * (size_t)b;
		const uint16_t cd = (uint16_t)(cb[0] | cb[1] << 8);
		if (cd != ds[b] || memcmp(cb + 2, q + 32 * b, (size_t)n) != 0) {
			if (bad < 4)
				fprintf(stderr, "  q8_0 %s: hd %d block %d: CPU scale 0x%04x, device 0x%04x (or the codes differ)\n",
				        what, hd, b, cd, ds[b]);
			bad++;
		}
		for (int i = n; i < 32; i++)
			if (cb[2 + i] != 0) bad++; /* the CPU's zero padding quantizes to 0 */
	}
	for (int v = 0; v < hd / 8; v++) {
		uint32_t w[2];
		memcpy(w, dev + 8 * (size_t)v, 8);
		for (int e = 0; e < 8; e++) {
			const float f = pv_kv_q8_elem(ds[v >> 2], w[e / 4] >> (8 * (e % 4)));
			const float c = back[8 * v + e];
			if (isnan(f) ? !isnan(c) : memcmp(&f, &c, 4) != 0) {
				if (bad < 4)
					fprintf(stderr, "  q8_0 %s: hd %d element %d: device %a, CPU %a\n", what, hd, 8 * v + e, (double)f,
					        (double)c);
				bad++;
			}
		}
	}
	return bad;
}

/* the q8_0 cache (common.cuh "KV cache element types"): the device's quantizer and layout give
 * the CPU cache's values, bitwise, over random blocks at every scale, the head dims of the
 * fixtures and Qwen (8 .. 256: partial last blocks), and edge blocks */
TEST_CASE(kv_q8_0)
{
	g_rng = RNG_SEED;
	static const int hds[] = { 8, 16, 24, 32, 40, 64, 72, 128, 136, 256 };
	float x[256];
	int bad = 0, slices = 0;
	/* random slices, scaled by 2^e across the f32 range (f16 scales normal, subnormal, zero,
	 * infinite; 1 / d overflowing; codes from 1 / d's rounding) */
	for (int e = -150; e <= 128; e += 1)
		for (int k = 0; k < 3; k++) {
			const int hd = hds[(e + 150 + k) % 10];
			for (int i = 0; i < hd; i++) x[i] = ldexpf(frand(), e);
			if (k == 2) /* a sparse slice: mostly zeros, one large element per block */
				for (int i = 0; i < hd; i++) x[i] = i % 32 == 5 ? ldexpf(frand(), e) : (i % 7 == 0 ? ldexpf(frand(), e - 20) : 0.0f);
			bad += kv_q8_slice(x, hd, "random");
			slices++;
		}
	for (int r = 0; r < 2000; r++) { /* unscaled random slices, every head dim */
		const int hd = hds[r % 10];
		for (int i = 0; i < hd; i++) x[i] = frand() * (r % 3 == 0 ? 1e-3f : r % 3 == 1 ? 7.0f : 300.0f);
		bad += kv_q8_slice(x, hd, "random");
		slices++;
	}
	/* edges, per head dim: all zero; one nonzero; +-amax; x * id exactly k + 0.5 (amax 127:
	 * d = 1, roundf's ties away from zero); -0; tiny and huge; amax where the f16 scale
	 * rounds to infinity; an infinity or a NaN in one block (that block: NaN scale, codes 0;
	 * the others quantized) */
	for (int h = 0; h < 10; h++) {
		const int hd = hds[h];
		for (int c = 0; c < 16; c++) {
			for (int i = 0; i < hd; i++) x[i] = 0.0f;
			switch (c) {
			case 0: break;
			case 1: x[hd - 1] = 0.37f; break;
			case 2:
				for (int i = 0; i < hd; i++) x[i] = i % 2 ? 3.5f : -3.5f;
				break;
			case 3:
				x[0] = 127.0f;
				for (int i = 1; i < hd; i++) x[i] = (float)(i % 127) + (i % 2 ? 0.5f : -0.5f) - 63.0f;
				break;
			case 4:
				x[0] = -127.0f;
				for (int i = 1; i < hd; i++) x[i] = -((float)(i % 120) + 0.5f);
				break;
			case 5:
				for (int i = 0; i < hd; i++) x[i] = -0.0f;
				x[hd / 2] = 1e-30f;
				break;
			case 6:
				for (int i = 0; i < hd; i++) x[i] = ldexpf(frand(), -140); /* subnormal inputs */
				break;
			case 7:
				x[0] = 1e-45f; /* the smallest subnormal: d = 0 */
				x[1] = -1e-45f;
				break;
			case 8:
				x[hd - 1] = 4e-37f; /* d subnormal, 1 / d finite */
				x[0] = 1e-39f;
				x[hd / 2] = -2e-37f;
				break;
			case 9:
				for (int i = 0; i < hd; i++) x[i] = frand() * 3.4e38f; /* huge: the f16 scale is infinite */
				break;
			case 10:
				for (int i = 0; i < hd; i++) x[i] = frand() * 8.3e6f; /* near amax / 127 = 65520 */
				x[0] = 65520.0f * 127.0f;
				break;
			case 11:
				for (int i = 0; i < hd; i++) x[i] = frand();
				x[hd - 1] = INFINITY;
				break;
			case 12:
				for (int i = 0; i < hd; i++) x[i] = frand();
				x[0] = -INFINITY;
				break;
			case 13:
				for (int i = 0; i < hd; i++) x[i] = frand();
				x[hd / 3] = NAN;
				break;
			case 14: /* amax of a block in its last element, ties of x / d near every code */
				for (int i = 0; i < hd; i++) x[i] = ((float)(i % 32) - 15.5f) * (1.0f / 3.0f);
				break;
			default:
				for (int i = 0; i < hd; i++) x[i] = FLT_MAX * (i % 2 ? 1.0f : -0.5f);
				break;
			}
			bad += kv_q8_slice(x, hd, "edge");
			slices++;
		}
	}
	CHECK(bad == 0, "q8_0 KV cache: %d mismatches over %d head slices", bad, slices);
	printf("  q8_0 KV stores and loads: %d head slices (hd 8 .. 256), bitwise the CPU cache's\n", slices);
}

TEST_MAIN("test_cuda_host")
