/*
 * test_kernels_simd.c: the kernel sets and the two numerics of the CPU products (src/cpu/kernels.c,
 * qdot.c, pack.c, qgemm_avx512.c, qgemm_avx2.c; the exact numerics' kernels are test_kernels.c's
 * and test_quant.c's) and the AVX-512 attention and DeltaNet steps (attn_avx512.c,
 * deltanet_avx512.c), for every kernel set this machine runs.
 *
 * Checked, for every quantized type and BF16, on weights whose quant bytes and sub-block scales
 * are random bit patterns (every stored value occurs) with sane f16 scales:
 *   - activation conversion: the AVX-512 code writes the same bytes as the portable code, for
 *     ordinary rows and rows with zeros, subnormals, infinities and NaNs;
 *   - fast numerics, quantized weights: every kernel set gives the same bits as the portable
 *     reference (qdot.h says why they must), for T = 1..17 and 40 rows, thread counts 1..3, random
 *     splits of the output rows, panel-unaligned row ranges and scratch too small for all rows;
 *     batch invariance (a row alone = the same row in any batch), bitwise;
 *   - the reference against a float64 evaluation of the same quantized arithmetic, within the
 *     rounding bound of its float steps (bound_q8 below), and against the exact numerics within
 *     the activation-quantization bound plus both rounding bounds (bound_vs_exact);
 *   - fast numerics, BF16 (AVX512-BF16): bitwise batch/thread/split invariance, and within a
 *     derived bound of float64 sums over bf16-rounded activations and of the exact numerics;
 *   - exact numerics through pv_mm_rows: bitwise the old entry points (pv_matmul_rows with the
 *     same kernel set).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "proven.h"
#include "cpu/kern.h"
#include "cpu/state.h"
#include "cpu/qdot.h"

static uint64_t rng_state = 0x6a09e667f3bcc909ull;
static uint32_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float frnd(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }
static float nrnd(void) { return (frnd() + frnd() + frnd() + frnd()) * 0.5f; }

static const enum pv_dtype qtypes[] = { PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K };
enum { NQT = sizeof qtypes / sizeof qtypes[0] };

static struct pv_pool* pools[4];          /* NULL (inline), 1, 2, 3 threads */
static const double U = 1.0 / 16777216.0; /* 2^-24 */

/* A random finite f16 in +-[2^-10, 1). */
static uint16_t rand_f16(void)
{
	float f = (0.0009765625f + (float)(rnd() % 1000) / 1000.0f) * ((rnd() & 1) ? -1.0f : 1.0f);
	return pv_f32_to_f16(f);
}

/* A block of type t with random quant bytes and scales, sane f16 fields. */
static void rand_block(enum pv_dtype t, unsigned char* b)
{
	size_t bb = pv_dtype_block_bytes(t);
	for (size_t i = 0; i < bb; i++) b[i] = (unsigned char)rnd();
	uint16_t h[2] = { rand_f16(), rand_f16() };
	if (t == PV_Q6_K) {
		memcpy(b + 208, h, 2);
		return;
	}
	if (t == PV_Q4_K || t == PV_Q5_K) h[1] = (uint16_t)(h[1] & 0x7fff); /* dmin >= 0 as stored */
	memcpy(b, h, 2);
	if (t == PV_Q4_1 || t == PV_Q5_1 || t == PV_Q4_K || t == PV_Q5_K) memcpy(b + 2, h + 1, 2);
}

/* ---- activation conversion -------------------------------------------------------------- */

static void test_act_convert(int have512)
{
	if (!have512) return;
	static const int fmts[] = { PV_ACT_Q8, PV_ACT_Q8K, PV_ACT_BF16 };
	const int n = 1024, T = 6;
	float* x = malloc(sizeof(float) * n * T);
	for (int f = 0; f < 3; f++) {
		size_t rb = pv_act_row_bytes(fmts[f], n);
		unsigned char* a = calloc(T, rb);
		unsigned char* b = calloc(T, rb);
		int same = 1;
		for (int rep = 0; rep < 20; rep++) {
			for (int i = 0; i < n * T; i++) x[i] = nrnd() * (rep % 3 ? 1.0f : 1e-3f);
			if (rep >= 10) {
				/* zeros, a zero block, subnormals, huge values, infinities, NaNs, -0 */
				for (int i = 0; i < 256; i++) x[i] = 0.0f;
				for (int i = 0; i < 40; i++) {
					int at = 256 + (int)(rnd() % (uint32_t)(n * T - 256));
					uint32_t u;
					switch (rnd() % 6) {
					case 0: u = rnd() & 0x807fffffu; break;                 /* subnormal */
					case 1: u = 0x7f800000u | (rnd() & 0x80000000u); break; /* inf */
					case 2: u = 0x7fc00000u | (rnd() & 0x803fffffu); break; /* NaN */
					case 3: u = 0x80000000u; break;                         /* -0 */
					case 4: u = 0x7f000000u | (rnd() & 0x807fffffu); break; /* huge */
					default: u = 0x00800000u; break;                        /* smallest normal */
					}
					memcpy(x + at, &u, 4);
				}
			}
			memset(a, 0x55, T * rb);
			memset(b, 0x55, T * rb);
			pv_act_convert(fmts[f], x, n, T, n, a, rb);
			pv_act_convert_avx512(fmts[f], x, n, T, n, b, rb);
			if (memcmp(a, b, T * rb)) same = 0;
		}
		CHECK(same, "activation format %d: AVX-512 conversion differs from the portable one", fmts[f]);
		free(a);
		free(b);
	}
	free(x);
}

/* ---- quantized products ------------------------------------------------------------------ */

struct qfix {
	enum pv_dtype t;
	int64_t rows, cols;
	unsigned char* w;   /* rows x row bytes */
	float* wf;          /* dequantized      */
	float* x;           /* [TX, cols]       */
	unsigned char* act; /* [TX] converted   */
	size_t rb;
};
enum { TX = 40 };

static void qfix_make(struct qfix* f, enum pv_dtype t, int64_t rows, int64_t cols)
{
	f->t = t;
	f->rows = rows;
	f->cols = cols;
	size_t rbytes = pv_dtype_row_bytes(t, cols), bb = pv_dtype_block_bytes(t);
	f->w = malloc(rbytes * rows);
	for (int64_t b = 0; b < rows * (cols / pv_dtype_block(t)); b++) rand_block(t, f->w + b * bb);
	f->wf = malloc(sizeof(float) * rows * cols);
	for (int64_t r = 0; r < rows; r++) pv_dequant_row(t, f->w + r * rbytes, f->wf + r * cols, cols);
	f->x = malloc(sizeof(float) * TX * cols);
	for (int64_t i = 0; i < TX * cols; i++) f->x[i] = nrnd();
	/* an outlier and a zero block now and then, as real activations have */
	for (int t0 = 0; t0 < TX; t0 += 7) f->x[t0 * cols + (rnd() % cols)] = 40.0f;
	for (int i = 0; i < 32 && cols >= 512; i++) f->x[3 * cols + 256 + i] = 0.0f;
	f->rb = pv_act_row_bytes(pv_act_fmt_of(t), cols);
	f->act = malloc(f->rb * TX);
	pv_act_convert(pv_act_fmt_of(t), f->x, (int)cols, TX, cols, f->act, f->rb);
}

static void qfix_free(struct qfix* f)
{
	free(f->w);
	free(f->wf);
	free(f->x);
	free(f->act);
}

/* Element e of a stored block as w = A + B in exact (double) arithmetic, decoded here from the
 * bytes independently of the library: A carries the quant (A = d q, d sc q, ...), B the offset
 * (Q4_1/Q5_1: m; Q4_K/Q5_K: -dmin m; else 0). The fast numerics multiply A's integers and B's
 * with the activation integers exactly, so these are "the same quantized arithmetic". */
static void elem_parts(enum pv_dtype t, const unsigned char* b, int e, double* A, double* B)
{
	*B = 0;
	switch (t) {
	case PV_Q8_0: *A = (double)pv_q_f16(b) * (int8_t)b[2 + e]; return;
	case PV_Q4_0:
	case PV_Q4_1:
	case PV_Q5_0:
	case PV_Q5_1: {
		const int qs = t == PV_Q4_0 ? 2 : t == PV_Q4_1 ? 4 : t == PV_Q5_0 ? 6 : 8;
		int q = e < 16 ? b[qs + e] & 15 : b[qs + e - 16] >> 4;
		if (t == PV_Q5_0 || t == PV_Q5_1) q |= ((b[(t == PV_Q5_0 ? 2 : 4) + e / 8] >> (e % 8)) & 1) << 4;
		const double d = pv_q_f16(b);
		if (t == PV_Q4_0)
			*A = d * (q - 8);
		else if (t == PV_Q5_0)
			*A = d * (q - 16);
		else {
			*A = d * q;
			*B = pv_q_f16(b + 2);
		}
		return;
	}
	case PV_Q4_K:
	case PV_Q5_K: {
		int s = e / 32, l = e % 32, sc, m;
		pv_q_scale_min_k4(s, b + 4, &sc, &m);
		const unsigned char* qs = b + (t == PV_Q4_K ? 16 : 48);
		int q = (qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 15;
		if (t == PV_Q5_K) q |= ((b[16 + l] >> s) & 1) << 4;
		*A = (double)pv_q_f16(b) * sc * q;
		*B = -(double)pv_q_f16(b + 2) * m;
		return;
	}
	case PV_Q6_K: {
		int h = e / 128, j = e % 128, k = j / 32, l = j % 32;
		unsigned char v = b[64 * h + l + 32 * (k & 1)];
		int q = (k < 2 ? v & 15 : v >> 4) | ((b[128 + 32 * h + l] >> (2 * k)) & 3) << 4;
		*A = (double)pv_q_f16(b + 208) * (int8_t)b[192 + e / 16] * (q - 32);
		return;
	}
	default: *A = 0; return;
	}
}

/* float64 of the same quantized arithmetic (y64), the rounding bound of the float steps (k
 * roundings reach each term: fl(dw dx), (float)I, and at most one per fma step of the running
 * sum, so |y - y64| <= gamma_k sum |terms|), the activation-quantization term of the distance to
 * the exact numerics (|x - dx q| <= dx (1/2 + 2.5e-5): rint, and the roundings of x*id and of
 * d = amax/127, id = 127/amax; times sum |w|), and the dequantization term (the exact numerics
 * multiply the f32-dequantized weights, within 3 roundings of A + B). */
static void q8_ref64(const struct qfix* f, int64_t o, int t, double* y64, double* bound, double* act_err)
{
	const int fmt = pv_act_fmt_of(f->t);
	const int64_t blk = pv_dtype_block(f->t), nb = f->cols / blk;
	const size_t bb = pv_dtype_block_bytes(f->t);
	struct pv_qrow a = pv_act_row(f->act + f->rb * t, fmt, f->cols);
	const unsigned char* wr = f->w + pv_dtype_row_bytes(f->t, f->cols) * o;
	double s = 0, abs_terms = 0, aq = 0;
	int steps = 0;
	for (int64_t b = 0; b < nb; b++) {
		const double dx = a.d[b];
		double t1 = 0, t2 = 0;
		for (int64_t i = 0; i < blk; i++) {
			double A, B;
			elem_parts(f->t, wr + b * bb, (int)i, &A, &B);
			t1 += A * a.q[b * blk + i];
			t2 += B * a.q[b * blk + i];
			aq += fabs((double)f->wf[o * f->cols + b * blk + i]) * dx * (0.5 + 1e-4);
			aq += 3 * U * (fabs(A) + fabs(B)) * fabs(f->x[t * f->cols + b * blk + i]);
		}
		s += dx * (t1 + t2);
		abs_terms += fabs(dx * t1) + fabs(dx * t2);
		steps += (f->t == PV_Q4_1 || f->t == PV_Q5_1 || f->t == PV_Q4_K || f->t == PV_Q5_K) ? 2 : 1;
	}
	const double k = steps + 2;
	*y64 = s;
	*bound = k * U / (1 - k * U) * abs_terms * 1.000001 + 1e-30;
	*act_err = aq;
}

static int run_mm(struct pv_pool* p, const struct pv_kernels* k, float* y, int ldy, const float* x, int ldx, int T,
                  const struct pv_tensor* W, int64_t o0, int64_t o1, size_t act_bytes)
{
	void* act = malloc(act_bytes ? act_bytes : 1);
	struct pv_mm c = { p, k, act, act_bytes };
	pv_mm_rows(&c, y, ldy, x, ldx, T, W, o0, o1);
	free(act);
	return 0;
}

static void check_qtype(enum pv_dtype t, int64_t rows, int64_t cols, const int* isas, int n_isas)
{
	struct qfix f;
	qfix_make(&f, t, rows, cols);
	struct pv_tensor W = { f.w, t, rows, cols };
	const struct pv_tensor* Wl[1] = { &W };
	char what[96];
	const int ldy = (int)rows + 3;
	const size_t full = pv_mm_act_bytes(TX, cols);
	float* ref = malloc(sizeof(float) * TX * ldy);
	float* y = malloc(sizeof(float) * TX * ldy);

	/* the portable reference, output by output */
	for (int t0 = 0; t0 < TX; t0++)
		for (int64_t o = 0; o < rows; o++)
			ref[t0 * ldy + o] = pv_qdot_ref(t, f.w + pv_dtype_row_bytes(t, cols) * o, f.act + f.rb * t0, cols);

	/* against float64 of the same arithmetic, and against the exact numerics */
	{
		struct pv_kernels ke;
		pv_kernels_init(&ke, PV_ISA_GENERIC, 1);
		float* ye = malloc(sizeof(float) * TX * ldy);
		run_mm(pools[2], &ke, ye, ldy, f.x, (int)cols, TX, &W, 0, rows, 0);
		int ok64 = 1, okex = 1;
		double worst64 = 0, worstex = 0;
		for (int t0 = 0; t0 < TX; t0++)
			for (int64_t o = 0; o < rows; o++) {
				double y64, bnd, aq;
				q8_ref64(&f, o, t0, &y64, &bnd, &aq);
				double e = fabs(ref[t0 * ldy + o] - y64);
				if (!(e <= bnd)) ok64 = 0;
				if (bnd > 0 && e / bnd > worst64) worst64 = e / bnd;
				/* exact: |exact - sum w x| <= gamma_{n/8+4} sum |w x| (test_kernels.c) */
				double sx = 0, ax = 0;
				for (int64_t i = 0; i < cols; i++) {
					double p = (double)f.wf[o * cols + i] * f.x[t0 * cols + i];
					sx += p;
					ax += fabs(p);
				}
				double kk = (double)((cols + 7) / 8) + 4.0;
				double bex = kk * U / (1 - kk * U) * ax * 1.000001 + bnd + aq + 1e-30;
				double ee = fabs((double)ref[t0 * ldy + o] - ye[t0 * ldy + o]);
				if (!(ee <= bex)) okex = 0;
				if (bex > 0 && ee / bex > worstex) worstex = ee / bex;
				(void)sx;
			}
		snprintf(what, sizeof what, "%s %lldx%lld", pv_dtype_name(t), (long long)rows, (long long)cols);
		CHECK(ok64, "%s: reference vs float64 of the quantized arithmetic above bound (worst %.3g x)", what, worst64);
		CHECK(okex, "%s: fast vs exact numerics above the activation-quantization bound (worst %.3g x)", what, worstex);
		free(ye);
	}

	for (int ii = 0; ii < n_isas; ii++) {
		struct pv_kernels k;
		pv_kernels_init(&k, isas[ii], 0);
		CHECK(pv_kernels_pack(&k, Wl, 1) == 0, "pack");
		snprintf(what, sizeof what, "%s %s %lldx%lld", pv_isa_name(k.isa), pv_dtype_name(t), (long long)rows,
		         (long long)cols);
		int all_ok = 1, prefix_ok = 1, split_ok = 1, small_ok = 1, confined = 1;
		/* all rows at once, 2 threads */
		for (int i = 0; i < TX * ldy; i++) y[i] = NAN;
		run_mm(pools[2], &k, y, ldy, f.x, (int)cols, TX, &W, 0, rows, full);
		for (int t0 = 0; t0 < TX; t0++)
			if (memcmp(y + t0 * ldy, ref + t0 * ldy, sizeof(float) * rows)) all_ok = 0;
		for (int t0 = 0; t0 < TX; t0++)
			for (int o = (int)rows; o < ldy; o++)
				if (!isnan(y[t0 * ldy + o])) confined = 0;
		/* T = 1..17 from every offset, every pool */
		for (int T = 1; T <= 17; T++) {
			int off = (int)(rnd() % (TX - T + 1));
			for (int i = 0; i < T * ldy; i++) y[i] = NAN;
			run_mm(pools[T % 4], &k, y, ldy, f.x + off * cols, (int)cols, T, &W, 0, rows, pv_mm_act_bytes(T, cols));
			for (int t0 = 0; t0 < T; t0++)
				if (memcmp(y + t0 * ldy, ref + (off + t0) * ldy, sizeof(float) * rows)) prefix_ok = 0;
		}
		/* random splits of the rows, each piece on a random pool, unaligned to panels */
		for (int rep = 0; rep < 3; rep++) {
			int T = 1 + (int)(rnd() % 12);
			for (int i = 0; i < T * ldy; i++) y[i] = NAN;
			for (int64_t o0 = 0; o0 < rows;) {
				int64_t o1 = o0 + 1 + (int64_t)(rnd() % (uint32_t)(rows - o0 > 40 ? 40 : rows - o0));
				run_mm(pools[rnd() % 4], &k, y, ldy, f.x, (int)cols, T, &W, o0, o1, pv_mm_act_bytes(T, cols));
				o0 = o1;
			}
			for (int t0 = 0; t0 < T; t0++)
				if (memcmp(y + t0 * ldy, ref + t0 * ldy, sizeof(float) * rows)) split_ok = 0;
		}
		/* a piece writes its own outputs only */
		if (rows > 2) {
			for (int i = 0; i < 5 * ldy; i++) y[i] = NAN;
			run_mm(pools[3], &k, y, ldy, f.x, (int)cols, 5, &W, 1, rows - 1, full);
			for (int t0 = 0; t0 < 5; t0++)
				for (int o = 0; o < ldy; o++) {
					int inside = o >= 1 && o < rows - 1;
					if (inside != !isnan(y[t0 * ldy + o])) confined = 0;
					if (inside && memcmp(&y[t0 * ldy + o], &ref[t0 * ldy + o], 4)) split_ok = 0;
				}
		}
		/* scratch for 3 rows only: several passes */
		for (int i = 0; i < TX * ldy; i++) y[i] = NAN;
		run_mm(pools[3], &k, y, ldy, f.x, (int)cols, 11, &W, 0, rows, pv_mm_act_bytes(3, cols));
		for (int t0 = 0; t0 < 11; t0++)
			if (memcmp(y + t0 * ldy, ref + t0 * ldy, sizeof(float) * rows)) small_ok = 0;
		CHECK(all_ok, "%s: 40 rows differ from the portable reference", what);
		CHECK(prefix_ok, "%s: a batch of 1..17 rows differs from the reference", what);
		CHECK(split_ok, "%s: a split of the output rows differs", what);
		CHECK(small_ok, "%s: several passes over small scratch differ", what);
		CHECK(confined, "%s: wrote outside its rows", what);
		pv_kernels_free(&k);
	}
	free(ref);
	free(y);
	qfix_free(&f);
}

static void test_quant(const int* isas, int n_isas)
{
	for (int ti = 0; ti < NQT; ti++) {
		enum pv_dtype t = qtypes[ti];
		int k = pv_dtype_block(t) == 256;
		const int64_t colsv[3] = { k ? 256 : 32, k ? 512 : 96, k ? 1280 : 896 };
		const int64_t rowsv[4] = { 1, 16, 17, 45 };
		for (int ci = 0; ci < 3; ci++)
			for (int ri = 0; ri < 4; ri++) check_qtype(t, rowsv[ri], colsv[ci], isas, n_isas);
	}
}

/* ---- BF16 ---------------------------------------------------------------------------------- */

static void test_bf16(void)
{
	static const int64_t colsv[] = { 1, 31, 32, 33, 100, 1024 };
	static const int64_t rowsv[] = { 1, 7, 8, 25, 64 };
	struct pv_kernels k;
	pv_kernels_init(&k, PV_ISA_AVX512, 0);
	if (!k.bf16) {
		printf("test_kernels_simd: no AVX512-BF16 here, BF16 fast numerics not tested\n");
		return;
	}
	struct pv_kernels ke;
	pv_kernels_init(&ke, PV_ISA_AVX512, 1);
	for (size_t ci = 0; ci < sizeof colsv / sizeof *colsv; ci++)
		for (size_t ri = 0; ri < sizeof rowsv / sizeof *rowsv; ri++) {
			const int64_t n = colsv[ci], rows = rowsv[ri];
			const int ldy = (int)rows + 2;
			/* weights at an odd address */
			unsigned char* wbuf = malloc(rows * n * 2 + 2);
			uint16_t* w = (uint16_t*)(void*)(wbuf + 1);
			for (int64_t i = 0; i < rows * n; i++) {
				uint16_t h = pv_f32_to_bf16_rne(nrnd());
				memcpy((unsigned char*)w + 2 * i, &h, 2);
			}
			struct pv_tensor W = { w, PV_BF16, rows, n };
			float* x = malloc(sizeof(float) * TX * n);
			for (int64_t i = 0; i < TX * n; i++) x[i] = nrnd();
			float* all = malloc(sizeof(float) * TX * ldy);
			float* y = malloc(sizeof(float) * TX * ldy);
			float* ye = malloc(sizeof(float) * TX * ldy);
			run_mm(pools[2], &k, all, ldy, x, (int)n, TX, &W, 0, rows, pv_mm_act_bytes(TX, n));
			run_mm(pools[2], &ke, ye, ldy, x, (int)n, TX, &W, 0, rows, 0);
			int inv = 1, ok64 = 1, okex = 1;
			for (int T = 1; T <= 17; T++) {
				int off = (int)(rnd() % (TX - T + 1));
				run_mm(pools[T % 4], &k, y, ldy, x + off * n, (int)n, T, &W, 0, rows, pv_mm_act_bytes(T, n));
				for (int t0 = 0; t0 < T; t0++)
					if (memcmp(y + t0 * ldy, all + (off + t0) * ldy, sizeof(float) * rows)) inv = 0;
			}
			for (int64_t o0 = 0; o0 < rows;) {
				int64_t o1 = o0 + 1 + (int64_t)(rnd() % (uint32_t)(rows - o0));
				run_mm(pools[rnd() % 4], &k, y, ldy, x, (int)n, 9, &W, o0, o1, pv_mm_act_bytes(9, n));
				o0 = o1;
			}
			for (int t0 = 0; t0 < 9; t0++)
				if (memcmp(y + t0 * ldy, all + t0 * ldy, sizeof(float) * rows)) inv = 0;
			/* bounds: 2 roundings per lane per 32-chunk (vdpbf16ps as two fmas, or fewer) + 4 for
			 * the reduction, and a flushed subnormal costs at most 2^-126 per operation */
			for (int t0 = 0; t0 < TX; t0++)
				for (int64_t o = 0; o < rows; o++) {
					double s = 0, a = 0, ax = 0, aerr = 0;
					for (int64_t i = 0; i < n; i++) {
						uint16_t h;
						memcpy(&h, (unsigned char*)w + 2 * (o * n + i), 2);
						double wv = pv_bf16_to_f32(h),
						       xb = pv_bf16_to_f32(pv_f32_to_bf16_rne(x[t0 * n + i]));
						s += wv * xb;
						a += fabs(wv * xb);
						ax += fabs(wv * x[t0 * n + i]);
						aerr += fabs(wv) * fabs(x[t0 * n + i]) *
						        (1.0 / 256); /* bf16: 8 significant bits */
					}
					double kk = 2.0 * (double)((n + 31) / 32) + 4.0;
					double b64 = kk * U / (1 - kk * U) * a * 1.000001 + (double)n * 0x1p-125;
					double e = fabs(all[t0 * ldy + o] - s);
					if (!(e <= b64)) ok64 = 0;
					double ke8 = (double)((n + 7) / 8) + 4.0;
					double bex = b64 + aerr + ke8 * U / (1 - ke8 * U) * ax * 1.000001;
					if (!(fabs((double)all[t0 * ldy + o] - ye[t0 * ldy + o]) <= bex)) okex = 0;
				}
			CHECK(inv, "bf16 %lldx%lld: not batch / thread / split invariant", (long long)rows, (long long)n);
			CHECK(ok64, "bf16 %lldx%lld: above the float64 bound", (long long)rows, (long long)n);
			CHECK(okex, "bf16 %lldx%lld: fast vs exact above the bound", (long long)rows, (long long)n);
			free(wbuf);
			free(x);
			free(all);
			free(y);
			free(ye);
		}
}

/* ---- exact numerics through the context ------------------------------------------------------ */

static void test_exact_context(void)
{
	static const enum pv_dtype types[] = { PV_F32, PV_BF16, PV_F16, PV_Q8_0, PV_Q4_K, PV_Q6_K, PV_Q5_0 };
	for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
		enum pv_dtype t = types[ti];
		const int64_t rows = 37, cols = 512;
		size_t rbytes = pv_dtype_is_quant(t) ? pv_dtype_row_bytes(t, cols) : (size_t)cols * pv_dtype_size(t);
		unsigned char* w = malloc(rbytes * rows);
		if (pv_dtype_is_quant(t)) {
			for (int64_t b = 0; b < rows * (cols / pv_dtype_block(t)); b++)
				rand_block(t, w + b * pv_dtype_block_bytes(t));
		} else {
			float* tmp = malloc(sizeof(float) * cols);
			for (int64_t r = 0; r < rows; r++) {
				for (int64_t i = 0; i < cols; i++) tmp[i] = nrnd();
				pv_quant_row(t, tmp, w + r * rbytes, cols);
			}
			free(tmp);
		}
		struct pv_tensor W = { w, t, rows, cols };
		float* x = malloc(sizeof(float) * 9 * cols);
		for (int64_t i = 0; i < 9 * cols; i++) x[i] = nrnd();
		float* a = malloc(sizeof(float) * 9 * rows);
		float* b = malloc(sizeof(float) * 9 * rows);
		int same = 1;
		for (int isa = PV_ISA_GENERIC; isa <= pv_isa_best(); isa++) {
			struct pv_kernels k;
			pv_kernels_init(&k, isa, 1);
			run_mm(pools[3], &k, a, (int)rows, x, (int)cols, 9, &W, 0, rows, pv_mm_act_bytes(9, cols));
			pv_matmul_rows_set(pools[1], isa >= PV_ISA_AVX2, b, (int)rows, x, (int)cols, 9, &W, 0, rows);
			if (memcmp(a, b, sizeof(float) * 9 * rows)) same = 0;
		}
		CHECK(same, "%s: exact numerics through pv_mm_rows differ from pv_matmul_rows", pv_dtype_name(t));
		free(w);
		free(x);
		free(a);
		free(b);
	}
}

/* ---- several outputs of one input ---------------------------------------------------------- */

static void test_multi(void)
{
	static const enum pv_dtype types[] = { PV_Q4_K, PV_Q6_K, PV_Q5_0, PV_BF16, PV_F32, PV_Q8_0 };
	enum { NO = sizeof types / sizeof types[0] };
	const int64_t cols = 512;
	const int64_t rows[NO] = { 33, 16, 70, 9, 5, 48 };
	unsigned char* w[NO];
	struct pv_tensor W[NO];
	const struct pv_tensor* Wl[NO];
	for (int i = 0; i < NO; i++) {
		const enum pv_dtype t = types[i];
		const size_t rbytes = pv_dtype_is_quant(t) ? pv_dtype_row_bytes(t, cols) : (size_t)cols * pv_dtype_size(t);
		w[i] = malloc(rbytes * rows[i]);
		float* tmp = malloc(sizeof(float) * cols);
		for (int64_t r = 0; r < rows[i]; r++) {
			for (int64_t c = 0; c < cols; c++) tmp[c] = nrnd();
			pv_quant_row(t, tmp, w[i] + r * rbytes, cols);
		}
		free(tmp);
		W[i] = (struct pv_tensor){ w[i], t, rows[i], cols };
		Wl[i] = &W[i];
	}
	float* x = malloc(sizeof(float) * TX * cols);
	for (int64_t i = 0; i < TX * cols; i++) x[i] = nrnd();
	for (int isa = PV_ISA_GENERIC; isa <= pv_isa_best(); isa++)
		for (int exact = 0; exact < 2; exact++) {
			struct pv_kernels k;
			pv_kernels_init(&k, isa, exact);
			pv_kernels_pack(&k, Wl, NO);
			int same = 1;
			for (int T = 1; T <= TX; T += 13) {
				float *a[NO], *b[NO];
				struct pv_mm_out o[NO];
				for (int i = 0; i < NO; i++) {
					a[i] = malloc(sizeof(float) * T * (rows[i] + 1));
					b[i] = malloc(sizeof(float) * T * (rows[i] + 1));
					for (int e = 0; e < T * (rows[i] + 1); e++) a[i][e] = b[i][e] = NAN;
					o[i] = (struct pv_mm_out){ a[i], (int)rows[i] + 1, &W[i], i == 2 ? 3 : 0, rows[i] };
					run_mm(pools[1 + i % 3], &k, b[i], (int)rows[i] + 1, x, (int)cols, T, &W[i], o[i].o0,
					       rows[i], pv_mm_act_bytes(T, cols));
				}
				/* scratch for 5 rows: several passes */
				void* act = malloc(pv_mm_act_bytes(5, cols));
				struct pv_mm c = { pools[T % 4], &k, act, pv_mm_act_bytes(5, cols) };
				pv_mm_multi(&c, x, (int)cols, T, o, NO);
				free(act);
				for (int i = 0; i < NO; i++) {
					if (memcmp(a[i], b[i], sizeof(float) * T * (rows[i] + 1))) {
						/* NaN padding compares bytewise too: both untouched */
						same = 0;
					}
					free(a[i]);
					free(b[i]);
				}
			}
			CHECK(same, "%s %s: pv_mm_multi differs from one pv_mm_rows per output", pv_isa_name(isa),
			      exact ? "exact" : "fast");
			pv_kernels_free(&k);
		}
	for (int i = 0; i < NO; i++) free(w[i]);
	free(x);
}

/* ---- AVX-512 exp and attention ------------------------------------------------------------- */

static void test_exp(void)
{
	enum { N = 200000 };
	float* x = malloc(sizeof(float) * N);
	float* y = malloc(sizeof(float) * N);
	for (int i = 0; i < N; i++) x[i] = -90.0f + 180.0f * (float)i / N;
	memcpy(y, x, sizeof(float) * N);
	pv_exp_avx512(y, N);
	double worst = 0;
	for (int i = 0; i < N; i++) {
		double r = exp((double)x[i]);
		if (r < 1.2e-38 || r > 3.4e38) continue; /* subnormal or overflowing results */
		double ulp = ldexp(1.0, ilogb(r) - 23), e = fabs(y[i] - r) / ulp;
		worst = e > worst ? e : worst;
	}
	/* Cephes' expf polynomial on a reduced argument: a few ulp */
	CHECK(worst <= 3.0, "exp: %.2f ulp from exp", worst);
	printf("test_kernels_simd: avx512 exp within %.2f ulp of exp\n", worst);
	float sp[6] = { 0.0f, -INFINITY, -100.0f, 100.0f, INFINITY, -0.0f };
	pv_exp_avx512(sp, 6);
	CHECK(sp[0] == 1.0f && sp[1] == 0.0f && sp[2] == 0.0f && isinf(sp[3]) && isinf(sp[4]) && sp[5] == 1.0f,
	      "exp: special values %g %g %g %g %g %g", sp[0], sp[1], sp[2], sp[3], sp[4], sp[5]);
	free(x);
	free(y);
}

/*
 * Attention against float64, and batch invariance. Bound: with scores s_j = scale q.k_j, each
 * computed within ds_j = gamma_{hd/2+2} scale sum_d |q_d k_jd| (two fma chains, their sum, the
 * scale), every p_j = exp(s_j - m) carries a relative error within d = 2 max_j ds_j (score and
 * max) + u max|s_j - m| (the subtraction) + 4e-7 (the polynomial, test_exp); the normalised
 * output o = sum p_j v_j / sum p_j then moves by at most 2 d / (1 - d) max|v| (a reweighting of
 * the v_j), and the sums, the per-block rescales and the division add
 * (n + 2 * blocks + 4) u (1 + d) max|v|.
 */
static void test_attention(void)
{
	static const int hds[] = { 64, 128, 256, 32 };
	static const int Gs[] = { 7, 2, 1, 3 };
	for (int ci = 0; ci < 4; ci++) {
		const int hd = hds[ci], G = Gs[ci], nkv = 2, nh = G * nkv, kvd = nkv * hd, qd = nh * hd;
		const int ctx = 150, pos0 = 37, n = 40; /* rows at positions 37..76; keys 0..76 */
		float* kc = malloc(sizeof(float) * ctx * kvd);
		float* vc = malloc(sizeof(float) * ctx * kvd);
		float* q = malloc(sizeof(float) * n * qd);
		for (int i = 0; i < ctx * kvd; i++) {
			kc[i] = (i / kvd) < pos0 + n ? nrnd() : NAN; /* past the last row: never read */
			vc[i] = (i / kvd) < pos0 + n ? nrnd() : NAN;
		}
		for (int i = 0; i < n * qd; i++) q[i] = nrnd() * 2.0f;
		const float scale = 1.0f / sqrtf((float)hd);
		float* ws = malloc(sizeof(float) * pv_attn_avx512_scratch(8, G, hd, PV_F32));
		float* all = malloc(sizeof(float) * n * qd);
		float* y = malloc(sizeof(float) * n * qd);
		/* blocks of 8 rows (a prompt's tasks) */
		for (int kvh = 0; kvh < nkv; kvh++)
			for (int t0 = 0; t0 < n; t0 += 8)
				pv_attn_avx512(q, qd, all, qd, (const unsigned char*)kc, (const unsigned char*)vc, PV_F32, sizeof(float) * kvd, hd, G, kvh, t0, n - t0 < 8 ? n - t0 : 8, pos0,
				               scale, ws);
		/* every row alone (decode), and blocks of 3 from an odd start */
		int inv = 1;
		for (int kvh = 0; kvh < nkv; kvh++)
			for (int t = 0; t < n; t++)
				pv_attn_avx512(q, qd, y, qd, (const unsigned char*)kc, (const unsigned char*)vc, PV_F32, sizeof(float) * kvd, hd, G, kvh, t, 1, pos0, scale, ws);
		if (memcmp(all, y, sizeof(float) * n * qd)) inv = 0;
		for (int kvh = 0; kvh < nkv; kvh++)
			for (int t0 = 1; t0 < n; t0 += 3)
				pv_attn_avx512(q, qd, y, qd, (const unsigned char*)kc, (const unsigned char*)vc, PV_F32, sizeof(float) * kvd, hd, G, kvh, t0, n - t0 < 3 ? n - t0 : 3, pos0, scale,
				               ws);
		if (memcmp(all + qd, y + qd, sizeof(float) * (n - 1) * qd)) inv = 0;
		CHECK(inv, "attention hd %d G %d: a row's result depends on the rows computed with it", hd, G);
		int ok = 1;
		double worst = 0;
		for (int t = 0; t < n; t++)
			for (int h = 0; h < nh; h++) {
				const int pos = pos0 + t, kh = h / G;
				const float* qv = q + (size_t)t * qd + (size_t)h * hd;
				double* s = malloc(sizeof(double) * (pos + 1));
				double m = -INFINITY, ds = 0, vmax = 0, l = 0;
				for (int j = 0; j <= pos; j++) {
					double d = 0, a = 0;
					for (int e = 0; e < hd; e++) {
						d += (double)qv[e] * kc[(size_t)j * kvd + kh * hd + e];
						a += fabs((double)qv[e] * kc[(size_t)j * kvd + kh * hd + e]);
					}
					s[j] = d * scale;
					m = s[j] > m ? s[j] : m;
					double k = hd / 2 + 2;
					double dsj = k * U / (1 - k * U) * a * scale;
					ds = dsj > ds ? dsj : ds;
				}
				double smax = 0;
				for (int j = 0; j <= pos; j++) {
					l += exp(s[j] - m);
					smax = fabs(s[j] - m) > smax ? fabs(s[j] - m) : smax;
				}
				const double dl = 2 * ds + U * smax + 4e-7;
				const int blocks = pos / 16 + 1;
				for (int e = 0; e < hd; e++) {
					double o = 0;
					vmax = 0;
					for (int j = 0; j <= pos; j++) {
						const double v = vc[(size_t)j * kvd + kh * hd + e];
						o += exp(s[j] - m) * v;
						vmax = fabs(v) > vmax ? fabs(v) : vmax;
					}
					o /= l;
					const double bound = (2 * dl / (1 - dl) + (pos + 1 + 2 * blocks + 4) * U * (1 + dl)) *
					                     vmax * 1.000001;
					const double err = fabs(all[(size_t)t * qd + (size_t)h * hd + e] - o);
					if (!(err <= bound)) ok = 0;
					if (bound > 0 && err / bound > worst) worst = err / bound;
				}
				free(s);
			}
		CHECK(ok, "attention hd %d G %d: above the float64 bound (worst %.3g x)", hd, G, worst);
		printf("test_kernels_simd: attention hd %d G %d: worst error %.3g x the bound\n", hd, G, worst);
		free(kc);
		free(vc);
		free(q);
		free(ws);
		free(all);
		free(y);
	}
}

/*
 * The AVX-512 attention over typed KV caches (kvcache.c): K and V rows rounded into f16, bf16
 * or q8_0, then attention over that cache must be bitwise the f32 attention over the rounded
 * values read back with pv_kv_load (the vector conversions in load_block are exact and equal
 * the scalar ones), and a row's result must not depend on the rows computed with it.
 */
static void test_attention_types(void)
{
	static const int hds[] = { 64, 128, 16, 32 };
	static const int Gs[] = { 7, 2, 1, 3 };
	static const int dts[] = { PV_F16, PV_BF16, PV_Q8_0 };
	for (int ci = 0; ci < 4; ci++)
		for (int di = 0; di < 3; di++) {
			const int hd = hds[ci], G = Gs[ci], nkv = 2, nh = G * nkv, kvd = nkv * hd, qd = nh * hd, dt = dts[di];
			const int ctx = 90, pos0 = 21, n = 40; /* rows at positions 21..60 */
			const size_t hb = pv_kv_head_bytes(dt, hd), rb = (size_t)nkv * hb;
			float* row = malloc(sizeof(float) * kvd);
			unsigned char* kc = calloc((size_t)ctx, rb);
			unsigned char* vc = calloc((size_t)ctx, rb);
			float* kf = malloc(sizeof(float) * ctx * kvd); /* the stored values read back */
			float* vf = malloc(sizeof(float) * ctx * kvd);
			for (int j = 0; j < ctx; j++) {
				for (int i = 0; i < kvd; i++) row[i] = nrnd();
				pv_kv_store(dt, row, kc + (size_t)j * rb, nkv, hd);
				for (int i = 0; i < kvd; i++) row[i] = nrnd() * 3.0f;
				pv_kv_store(dt, row, vc + (size_t)j * rb, nkv, hd);
				for (int h = 0; h < nkv; h++) {
					pv_kv_load(dt, kc + (size_t)j * rb + (size_t)h * hb, kf + (size_t)j * kvd + (size_t)h * hd, hd);
					pv_kv_load(dt, vc + (size_t)j * rb + (size_t)h * hb, vf + (size_t)j * kvd + (size_t)h * hd, hd);
				}
			}
			float* q = malloc(sizeof(float) * n * qd);
			for (int i = 0; i < n * qd; i++) q[i] = nrnd() * 2.0f;
			const float scale = 1.0f / sqrtf((float)hd);
			float* ws = malloc(sizeof(float) * pv_attn_avx512_scratch(8, G, hd, dt));
			float* want = malloc(sizeof(float) * n * qd);
			float* got = malloc(sizeof(float) * n * qd);
			float* one = malloc(sizeof(float) * n * qd);
			for (int kvh = 0; kvh < nkv; kvh++)
				for (int t0 = 0; t0 < n; t0 += 8) {
					const int nt = n - t0 < 8 ? n - t0 : 8;
					pv_attn_avx512(q, qd, want, qd, (const unsigned char*)kf, (const unsigned char*)vf, PV_F32,
					               sizeof(float) * kvd, hd, G, kvh, t0, nt, pos0, scale, ws);
					pv_attn_avx512(q, qd, got, qd, kc, vc, dt, rb, hd, G, kvh, t0, nt, pos0, scale, ws);
				}
			for (int kvh = 0; kvh < nkv; kvh++)
				for (int t = 0; t < n; t++) pv_attn_avx512(q, qd, one, qd, kc, vc, dt, rb, hd, G, kvh, t, 1, pos0, scale, ws);
			CHECK(!memcmp(want, got, sizeof(float) * n * qd), "attention over a %s cache (hd %d) != f32 over its values",
			      pv_dtype_name(dt), hd);
			CHECK(!memcmp(got, one, sizeof(float) * n * qd), "attention over a %s cache (hd %d): not batch-invariant",
			      pv_dtype_name(dt), hd);
			/* the rounding itself: within half an f16 / bf16 ulp; for q8_0 half a step d = amax/127
			 * plus the scale's own f16 rounding (up to 2^-11 d) times |q| <= 127 */
			double worst = 0;
			for (int h = 0; h < nkv; h++) {
				for (int i = 0; i < hd; i++) row[i] = nrnd();
				unsigned char buf[1024];
				float back[256];
				pv_kv_store(dt, row, buf, 1, hd);
				pv_kv_load(dt, buf, back, hd);
				for (int b = 0; b < hd; b += 32) {
					float amax = 0;
					for (int i = b; i < hd && i < b + 32; i++) amax = fabsf(row[i]) > amax ? fabsf(row[i]) : amax;
					for (int i = b; i < hd && i < b + 32; i++) {
						const double tol = dt == PV_Q8_0 ? amax / 127.0 * (0.5 + 127 * 0x1p-11) * 1.001 + 1e-7
						                                 : fabs(row[i]) * (dt == PV_F16 ? 0x1p-11 : 0x1p-8) + 1e-7;
						const double e = fabs((double)back[i] - row[i]) / tol;
						worst = e > worst ? e : worst;
					}
				}
			}
			CHECK(worst <= 1.0, "%s cache rounding: %.3g x the bound (hd %d)", pv_dtype_name(dt), worst, hd);
			free(row);
			free(kc);
			free(vc);
			free(kf);
			free(vf);
			free(q);
			free(ws);
			free(want);
			free(got);
			free(one);
		}
	printf("test_kernels_simd: avx512 attention over f16, bf16, q8_0 caches: bitwise f32 over the stored values\n");
}

/* The AVX-512 recurrent DeltaNet step: bitwise the avx2 set's (decay multiply, one fma per
 * element of each axpy, rows in order), for the head sizes it takes. */
static void test_delta_step(void)
{
	static const int dvs[] = { 16, 64, 128, 256 };
	int same = 1;
	for (int di = 0; di < 4; di++) {
		const int dk = 128, dv = dvs[di];
		float* S0 = malloc(sizeof(float) * dk * dv);
		float* S1 = malloc(sizeof(float) * dk * dv);
		float *q = malloc(sizeof(float) * dk), *k = malloc(sizeof(float) * dk), *v = malloc(sizeof(float) * dv);
		float *o0 = malloc(sizeof(float) * dv), *o1 = malloc(sizeof(float) * dv), *m = malloc(sizeof(float) * dv);
		float* d = malloc(sizeof(float) * dv);
		for (int i = 0; i < dk * dv; i++) S0[i] = S1[i] = nrnd();
		for (int step = 0; step < 5; step++) {
			for (int i = 0; i < dk; i++) {
				q[i] = nrnd() * 0.1f;
				k[i] = nrnd() * 0.1f;
			}
			for (int j = 0; j < dv; j++) v[j] = nrnd();
			const float decay = 0.9f + 0.01f * step, beta = 0.3f + 0.1f * step;
			memset(m, 0, sizeof(float) * dv);
			for (int i = 0; i < dk; i++) {
				for (int j = 0; j < dv; j++) S0[i * dv + j] *= decay;
				pv_axpy_f32_set(1, m, k[i], S0 + i * dv, dv);
			}
			for (int j = 0; j < dv; j++) d[j] = beta * (v[j] - m[j]);
			memset(o0, 0, sizeof(float) * dv);
			for (int i = 0; i < dk; i++) {
				pv_axpy_f32_set(1, S0 + i * dv, k[i], d, dv);
				pv_axpy_f32_set(1, o0, q[i], S0 + i * dv, dv);
			}
			pv_delta_step_avx512(S1, dk, dv, q, k, v, decay, beta, o1);
			if (memcmp(S0, S1, sizeof(float) * dk * dv) || memcmp(o0, o1, sizeof(float) * dv)) same = 0;
		}
		free(S0);
		free(S1);
		free(q);
		free(k);
		free(v);
		free(o0);
		free(o1);
		free(m);
		free(d);
	}
	CHECK(same, "DeltaNet: the AVX-512 recurrent step differs from the AVX2 one");
}

/* Independent products in one batch (MoE experts): each bitwise its own pv_mm_rows, with inputs
 * shared or not, row counts from 1 to 9, scratch that holds everything or only some. */
static void test_batch(void)
{
	static const enum pv_dtype types[] = { PV_Q4_K, PV_Q6_K, PV_Q8_0, PV_BF16, PV_Q5_0 };
	enum { NP = 23, NT = sizeof types / sizeof types[0] };
	const int64_t cols = 256, rows = 40;
	unsigned char* w[NT];
	struct pv_tensor W[NT];
	const struct pv_tensor* Wl[NT];
	for (int i = 0; i < NT; i++) {
		const size_t rbytes =
		        pv_dtype_is_quant(types[i]) ? pv_dtype_row_bytes(types[i], cols) : (size_t)cols * pv_dtype_size(types[i]);
		w[i] = malloc(rbytes * rows);
		float tmp[256];
		for (int64_t r = 0; r < rows; r++) {
			for (int64_t c = 0; c < cols; c++) tmp[c] = nrnd();
			pv_quant_row(types[i], tmp, w[i] + r * rbytes, cols);
		}
		W[i] = (struct pv_tensor){ w[i], types[i], rows, cols };
		Wl[i] = &W[i];
	}
	float* x = malloc(sizeof(float) * 9 * NP * cols);
	for (int64_t i = 0; i < 9 * NP * cols; i++) x[i] = nrnd();
	for (int isa = PV_ISA_GENERIC; isa <= pv_isa_best(); isa++) {
		struct pv_kernels k;
		pv_kernels_init(&k, isa, 0);
		pv_kernels_pack(&k, Wl, NT);
		int same = 1;
		for (int rep = 0; rep < 3; rep++) {
			struct pv_mm_prod p[NP];
			float *a[NP], *b[NP];
			for (int i = 0; i < NP; i++) {
				const int T = 1 + (int)(rnd() % 9), src = (i % 4 == 3) ? i - 1 : i; /* every 4th shares the input before */
				p[i] = (struct pv_mm_prod){ x + (size_t)src * 9 * cols, (int)cols, T, NULL, (int)rows, &W[rnd() % NT], 0, rows };
				if (i % 4 == 3) p[i].T = p[i - 1].T;
				a[i] = malloc(sizeof(float) * 9 * rows);
				b[i] = malloc(sizeof(float) * 9 * rows);
				p[i].y = a[i];
				run_mm(pools[1 + i % 3], &k, b[i], (int)rows, p[i].x, (int)cols, p[i].T, p[i].W, 0, rows,
				       pv_mm_act_bytes(p[i].T, cols));
			}
			const int cap_rows = rep == 0 ? 9 * NP : rep == 1 ? 12 : 3;
			void* act = malloc(pv_mm_act_bytes(cap_rows, cols));
			struct pv_mm c = { pools[rep + 1], &k, act, pv_mm_act_bytes(cap_rows, cols) };
			pv_mm_batch(&c, p, NP);
			free(act);
			for (int i = 0; i < NP; i++) {
				if (memcmp(a[i], b[i], sizeof(float) * p[i].T * rows)) same = 0;
				free(a[i]);
				free(b[i]);
			}
		}
		CHECK(same, "%s: pv_mm_batch differs from one pv_mm_rows per product", pv_isa_name(isa));
		pv_kernels_free(&k);
	}
	for (int i = 0; i < NT; i++) free(w[i]);
	free(x);
}

/* The vector argmax gives pv_argmax's index: ties (the first), NaNs anywhere (never chosen;
 * index 0 when first), signed zeros, infinities, lengths around the vector width. */
static void test_argmax(void)
{
	int same = 1;
	for (int rep = 0; rep < 4000; rep++) {
		const int n = 1 + (int)(rnd() % 100);
		float x[100];
		for (int i = 0; i < n; i++) {
			uint32_t r = rnd();
			x[i] = (r & 7) == 0 ? NAN : (r & 7) == 1 ? -0.0f : (r & 7) == 2 ? 0.0f : (float)(int)(rnd() % 5) - 2.0f;
			if ((r & 255) == 3) x[i] = INFINITY;
			if ((r & 255) == 4) x[i] = -INFINITY;
		}
		if (pv_argmax_avx512(x, n) != pv_argmax(x, n)) same = 0;
	}
	CHECK(same, "pv_argmax_avx512 differs from pv_argmax");
}

int main(void)
{
	pools[0] = NULL;
	for (int i = 1; i < 4; i++) pools[i] = pv_pool_new(i);
	const int best = pv_isa_best();
	int isas[3], n_isas = 0;
	for (int i = PV_ISA_GENERIC; i <= best; i++) isas[n_isas++] = i;
	printf("test_kernels_simd: kernel sets here: generic%s%s%s\n", best >= PV_ISA_AVX2 ? ", avx2" : "",
	       best >= PV_ISA_AVX512 ? ", avx512" : "", pv_isa_has_bf16() ? " (+bf16)" : "");
	CHECK(!strcmp(pv_isa_name(PV_ISA_AVX512), "avx512"), "isa names");

	test_act_convert(best >= PV_ISA_AVX512);
	test_quant(isas, n_isas);
	if (best >= PV_ISA_AVX512) {
		test_bf16();
		test_exp();
		test_attention();
		test_attention_types();
		test_delta_step();
		test_argmax();
	}
	test_exact_context();
	test_multi();
	test_batch();

	for (int i = 1; i < 4; i++) pv_pool_free(pools[i]);
	TEST_END("test_kernels_simd");
}
