/*
 * test_quant.c: the quantized weight types (src/quant/quant.c, src/cpu/qmatmul_avx2.c, the dequantizing
 * paths of src/quant/tensor.c).
 *
 * What is checked:
 *   - f32 -> f16 rounding: exhaustively round-trips every finite half, ties at every midpoint
 *     between neighbours go to even, overflow and NaN; and against the CPU's F16C conversion
 *     on random floats when it has one;
 *   - dequantization of every type, bit for bit, against vectors from independent
 *     implementations (tests/data/quant/<type>.bin, written by
 *     tools/reference/make_quant_vectors.py from the gguf Python package and ggml's C
 *     reference): pv_dequant_row, pv_tensor_row_f32 and pv_tensor_get, and the AVX2 kernels'
 *     in-register dequantization (a matmul with one-hot activations returns the weights);
 *   - quantization, byte for byte, against ggml's quantize_row_*_ref (and gguf-py where it has
 *     a quantizer), on typical weights and edge cases (zeros, constants, tiny, huge, ties);
 *   - matmul: bit for bit equal to pv_matmul_rows over the dequantized F32 matrix (both
 *     kernel sets), within a justified bound of a double-precision reference, batch-invariant
 *     (rows alone, random subsets, prefixes), invariant across thread counts 1/2/3 and splits,
 *     writes exactly its outputs, weights at odd addresses; pv_quant_dot.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "cpu/ops.h"
#include "quant/quant.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* ---- helpers ------------------------------------------------------------------------------ */

/* every case starts from the same state, so that it sees the same numbers run alone or not */
#define RNG_SEED 0x243f6a8885a308d3ull
static uint64_t rng_state = RNG_SEED;
static uint32_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float frnd(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */
/* Roughly normal (sum of uniforms), like weights. */
static float nrnd(void) { return (frnd() + frnd() + frnd() + frnd()) * 0.5f; }

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}
static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static const enum pv_dtype qtypes[] = { PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K };
#define NQT (int)(sizeof qtypes / sizeof qtypes[0])

static struct pv_pool* pools[4]; /* NULL (inline), 1, 2, 3 threads */

/* t_main runs the cases from the repository root */
static const char* data_dir(void)
{
	const char* env = getenv("PV_QUANT_DATA");
	return env ? env : "tests/data/quant";
}

/* ---- f16 ---------------------------------------------------------------------------------- */

static double f16_ref(uint16_t h) /* decoder independent of the library (ldexp) */
{
	int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return s ? -v : v;
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) static uint16_t hw_f16(float f)
{
	return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0);
}
#endif

TEST_CASE(f16)
{
	rng_state = RNG_SEED;
	int rt_ok = 1, tie_ok = 1, mid_ok = 1;
	for (uint32_t h = 0; h < 0x10000; h++) {
		int e = (h >> 10) & 0x1f;
		if (e == 31) continue;
		float f = (float)f16_ref((uint16_t)h);
		if (pv_f32_to_f16(f) != h) rt_ok = 0;
		/* Midpoint to the next half up in magnitude (if finite and not the largest): exactly
		 * representable as a float; rounds to the even one of the two. */
		uint16_t nx = (uint16_t)(h + 1);
		if ((h & 0x7fff) == 0x7bff) {
			/* 65504 + 16 = 65520: ties away to infinity (even) */
			float mid = (float)(f16_ref((uint16_t)h) + (h & 0x8000 ? -16.0 : 16.0));
			if (pv_f32_to_f16(mid) != ((h & 0x8000) | 0x7c00)) tie_ok = 0;
			continue;
		}
		double lo = f16_ref((uint16_t)h), hi = f16_ref(nx);
		float mid = (float)((lo + hi) / 2);
		uint16_t want = (h & 1) ? nx : (uint16_t)h;
		if ((double)mid == (lo + hi) / 2 && pv_f32_to_f16(mid) != want) tie_ok = 0;
		/* Just above and below the midpoint round to the nearer one. */
		float above = nextafterf(mid, (float)hi * 2), below = nextafterf(mid, 0.0f);
		if (pv_f32_to_f16(above) != nx || pv_f32_to_f16(below) != h) mid_ok = 0;
	}
	CHECK(rt_ok, "f16: a finite half does not round-trip");
	CHECK(tie_ok, "f16: ties do not go to even");
	CHECK(mid_ok, "f16: values next to a midpoint round the wrong way");
	CHECK(pv_f32_to_f16(INFINITY) == 0x7c00 && pv_f32_to_f16(-INFINITY) == 0xfc00, "f16 infinities");
	CHECK(pv_f32_to_f16(1e10f) == 0x7c00 && pv_f32_to_f16(-65519.0f) == 0xfbff, "f16 overflow");
	CHECK((pv_f32_to_f16(NAN) & 0x7fff) == 0x7e00, "f16 NaN");
	CHECK(pv_f32_to_f16(1e-30f) == 0 && pv_f32_to_f16(-1e-30f) == 0x8000, "f16 underflow keeps the sign");
	CHECK(pv_f32_to_f16(u2f(0x33000000)) == 0 && pv_f32_to_f16(u2f(0x33000001)) == 1, "f16 smallest subnormal tie");
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("f16c")) {
		int hw_ok = 1;
		for (int i = 0; i < 4000000; i++) {
			uint32_t u = rnd();
			if ((u & 0x7f800000u) == 0x7f800000u) continue; /* NaN payloads differ by design */
			if (i & 1) u = (u & 0x80000000u) | (0x30000000u + (u % 0x18000000u)); /* half's range */
			float f = u2f(u);
			if (pv_f32_to_f16(f) != hw_f16(f)) hw_ok = 0;
		}
		CHECK(hw_ok, "f16: differs from the CPU's F16C conversion");
	}
#endif
}

/* ---- reference vectors ------------------------------------------------------------------------- */

struct vec {
	char type[9];
	uint32_t qk, bb, n_deq, n_q, source, n_gen, gen_chunk;
	uint64_t seed;
	const unsigned char* gen_hash; /* n_gen / gen_chunk little-endian u64 */
	unsigned char* deq;   /* n_deq * bb   */
	float* deq_expect;    /* n_deq * qk   */
	float* q_in;          /* n_q * qk     */
	unsigned char* q_expect;
	unsigned char* file;
};

static int load_vec(struct vec* v, const char* name)
{
	char path[640];
	snprintf(path, sizeof path, "%s/%s.bin", data_dir(), name);
	memset(v, 0, sizeof *v);
	FILE* f = fopen(path, "rb");
	CHECK(f != NULL, "cannot open %s", path);
	if (!f) return -1;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	v->file = malloc((size_t)len);
	size_t got = fread(v->file, 1, (size_t)len, f);
	fclose(f);
	uint32_t h[7];
	if (got != (size_t)len || len < 48 || memcmp(v->file, "PVQ2", 4)) {
		CHECK(0, "%s: bad vector file", path);
		return -1;
	}
	memcpy(v->type, v->file + 4, 8);
	memcpy(h, v->file + 12, sizeof h);
	memcpy(&v->seed, v->file + 40, 8);
	v->qk = h[0], v->bb = h[1], v->n_deq = h[2], v->n_q = h[3], v->source = h[4], v->n_gen = h[5];
	v->gen_chunk = h[6];
	size_t need = 48 + (size_t)v->n_deq * (v->bb + 4 * v->qk) + (size_t)v->n_q * (v->bb + 4 * v->qk) +
	              (v->gen_chunk ? (size_t)v->n_gen / v->gen_chunk * 8 : 0);
	if ((size_t)len != need || strcmp(v->type, name) || (v->gen_chunk && v->n_gen % v->gen_chunk)) {
		CHECK(0, "%s: size %ld, header says %zu", path, len, need);
		return -1;
	}
	unsigned char* p = v->file + 48;
	v->deq = p;
	p += (size_t)v->n_deq * v->bb;
	v->deq_expect = (float*)(void*)p; /* 32 + multiples of 4 bytes: aligned */
	p += (size_t)v->n_deq * v->qk * 4;
	v->q_in = (float*)(void*)p;
	p += (size_t)v->n_q * v->qk * 4;
	v->q_expect = p;
	v->gen_hash = p + (size_t)v->n_q * v->bb;
	return 0;
}

/* The generated blocks of the vector files: xorshift64* integers scaled by powers of two, so
 * every value is exact and tools/reference/make_quant_vectors.py (gen_blocks) makes the same. */
static uint64_t g_state;
static uint32_t g_next(void)
{
	g_state ^= g_state >> 12;
	g_state ^= g_state << 25;
	g_state ^= g_state >> 27;
	return (uint32_t)((g_state * 0x2545F4914F6CDD1Dull) >> 32);
}

static void gen_block(uint32_t b, uint32_t qk, float* x)
{
	uint32_t kind = g_next() % 8;
	int e = (int)(g_next() % 25) - 20;
	int64_t f[8];
	for (uint32_t k = 0; k < qk / 32; k++) f[k] = 1 + g_next() % 7;
	for (uint32_t i = 0; i < qk; i++) {
		uint32_t r = g_next();
		int64_t v = (int64_t)(r & 0xffff) + (int64_t)(r >> 16) - 65535;
		if (kind == 4) v = g_next() % 4 == 0 ? v : (v >= 0 ? v >> 8 : -((-v + 255) >> 8));
		else if (kind == 5) v *= f[i / 32];
		else if (kind == 6) v = g_next() % 3 == 0 ? v : 0;
		else if (kind == 7) v = v < 0 ? -v : v;
		if (b == 0) v = 0;
		else if (b == 1) v = 12345;
		x[i] = (float)v * ldexpf(1.0f, e);
	}
}

static uint64_t fnv1a(uint64_t h, const unsigned char* p, size_t n)
{
	for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001B3ull;
	return h;
}

static int deq_total, q_total, q_blocks_total;
static int have_avx2;

static void vectors(enum pv_dtype t)
{
	const char* name = pv_dtype_name(t);
	struct vec v;
	if (load_vec(&v, name)) {
		free(v.file);
		return;
	}
	CHECK(v.qk == pv_dtype_block(t) && v.bb == pv_dtype_block_bytes(t), "%s: geometry %u/%u", name, v.qk, v.bb);
	const size_t n = (size_t)v.n_deq * v.qk;
	float* out = malloc(n * 4);

	/* pv_dequant_row over all blocks at once. */
	memset(out, 0xff, n * 4);
	pv_dequant_row(t, v.deq, out, (int64_t)n);
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		if (f2u(out[i]) != f2u(v.deq_expect[i])) {
			if (!bad)
				fprintf(stderr, "%s: element %zu: got %a, want %a\n", name, i, out[i], v.deq_expect[i]);
			bad++;
		}
	CHECK(bad == 0, "%s: %d of %zu dequantized values differ from the reference", name, bad, n);
	deq_total += (int)n;

	/* pv_tensor_row_f32 / pv_tensor_get on a [n_deq/2, 2 blocks] view. */
	struct pv_tensor tv = { v.deq, t, v.n_deq / 2, 2 * (int64_t)v.qk };
	int bad_row = 0, bad_get = 0;
	for (int64_t r = 0; r < tv.rows; r++) {
		float row[2 * PV_QK_K];
		pv_tensor_row_f32(&tv, r, row);
		if (memcmp(row, v.deq_expect + r * tv.cols, (size_t)tv.cols * 4)) bad_row++;
		for (int k = 0; k < 5; k++) {
			int64_t c = rnd() % (uint32_t)tv.cols;
			if (f2u(pv_tensor_get(&tv, r, c)) != f2u(v.deq_expect[r * tv.cols + c])) bad_get++;
		}
	}
	CHECK(!bad_row && !bad_get, "%s: pv_tensor_row_f32 (%d rows) / pv_tensor_get (%d) differ", name, bad_row,
	      bad_get);

	/* Each kernel set's dequantization through matmul: x = one-hot rows e_c (tiles of at most 4
	 * rows, the fused AVX2 path), y[c][o] = W[o][c] exactly (the other products are +-0). */
	for (int set = 0; set < 2; set++) {
		if (set == 0 && !have_avx2) continue;
		pv_ops_force_generic(set);
		struct pv_tensor W = { v.deq, t, v.n_deq, v.qk };
		float* x = calloc((size_t)4 * v.qk, 4);
		float y[4 * 96];
		int bad_mm = 0;
		for (uint32_t c0 = 0; c0 < v.qk; c0 += 4) {
			memset(x, 0, (size_t)4 * v.qk * 4);
			for (int k = 0; k < 4; k++) x[(size_t)k * v.qk + c0 + k] = 1.0f;
			pv_quant_matmul_rows(pools[set + 1], y, 96, x, (int)v.qk, 4, &W, 0, v.n_deq);
			for (int k = 0; k < 4; k++)
				for (uint32_t o = 0; o < v.n_deq; o++)
					if (!(y[k * 96 + o] == v.deq_expect[(size_t)o * v.qk + c0 + k])) bad_mm++;
		}
		CHECK(bad_mm == 0, "%s: %s kernels dequantize %d values differently", name, set ? "generic" : "avx2",
		      bad_mm);
		free(x);
	}
	pv_ops_force_generic(0);

	/* Quantization, block by block. */
	if (v.n_q) {
		unsigned char* q = malloc((size_t)v.n_q * v.bb);
		int rc = pv_quant_row(t, v.q_in, q, (int64_t)v.n_q * v.qk);
		int bad_blocks = 0;
		for (uint32_t b = 0; b < v.n_q; b++)
			if (memcmp(q + (size_t)b * v.bb, v.q_expect + (size_t)b * v.bb, v.bb)) {
				if (!bad_blocks) {
					size_t k = 0;
					while (q[(size_t)b * v.bb + k] == v.q_expect[(size_t)b * v.bb + k]) k++;
					fprintf(stderr, "%s: block %u byte %zu: got %02x, want %02x\n", name, b, k,
					        q[(size_t)b * v.bb + k], v.q_expect[(size_t)b * v.bb + k]);
				}
				bad_blocks++;
			}
		CHECK(rc == 0 && bad_blocks == 0, "%s: %d of %u quantized blocks differ from the reference (source %u)",
		      name, bad_blocks, v.n_q, v.source);
		q_total += (int)v.n_q;
		q_blocks_total++;
		free(q);
	}
	/* The generated blocks, chunk by chunk against the reference's hashes. */
	if (v.n_gen) {
		float x[PV_QK_K];
		unsigned char q[256];
		int bad_chunks = 0;
		g_state = v.seed;
		for (uint32_t c = 0; c < v.n_gen / v.gen_chunk; c++) {
			uint64_t h = 0xCBF29CE484222325ull, want;
			for (uint32_t b = 0; b < v.gen_chunk; b++) {
				gen_block(c * v.gen_chunk + b, v.qk, x);
				pv_quant_row(t, x, q, v.qk);
				h = fnv1a(h, q, v.bb);
			}
			memcpy(&want, v.gen_hash + 8 * (size_t)c, 8);
			if (h != want) {
				if (!bad_chunks) fprintf(stderr, "%s: generated chunk %u differs\n", name, c);
				bad_chunks++;
			}
		}
		CHECK(bad_chunks == 0, "%s: %d of %u chunks of generated blocks quantize differently", name, bad_chunks,
		      v.n_gen / v.gen_chunk);
		q_total += (int)v.n_gen;
	}
	free(out);
	free(v.file);
}

TEST_CASE(vectors)
{
	rng_state = RNG_SEED;
	for (int k = 0; k < NQT; k++) vectors(qtypes[k]);
	printf("reference vectors: %d dequantized values, %d quantized blocks (%d types)\n", deq_total, q_total,
	       q_blocks_total);
}

/* ---- quantizer properties ------------------------------------------------------------------------ */

TEST_CASE(quant_misc)
{
	rng_state = RNG_SEED;
	float x[512];
	unsigned char q[512 * 4];
	for (int i = 0; i < 512; i++) x[i] = nrnd();
	for (int k = 0; k < NQT; k++) {
		enum pv_dtype t = qtypes[k];
		const char* name = pv_dtype_name(t);
		CHECK(pv_quant_row(t, x, q, 512) == 0, "%s: quantize", name);
		/* round trip: error is small relative to the data */
		float y[512];
		pv_dequant_row(t, q, y, 512);
		double se = 0, sx = 0;
		for (int i = 0; i < 512; i++) {
			se += (double)(y[i] - x[i]) * (y[i] - x[i]);
			sx += (double)x[i] * x[i];
		}
		double rel = sqrt(se / sx);
		/* 4-bit: ~0.1, 5-bit: ~0.05, 6-bit: ~0.025, 8-bit: ~0.005 */
		double lim = t == PV_Q8_0 ? 0.01 : (t == PV_Q6_K) ? 0.04 : (t == PV_Q5_0 || t == PV_Q5_1 || t == PV_Q5_K) ? 0.07 : 0.14;
		CHECK(rel < lim, "%s: round-trip relative rms error %.4f >= %.3f", name, rel, lim);
		CHECK(pv_quant_row(t, x, q, 16) == -1 || pv_dtype_block(t) == 1, "%s: partial block accepted", name);
		float bad[256];
		memcpy(bad, x, sizeof bad);
		bad[77] = NAN;
		CHECK(pv_quant_row(t, bad, q, 256) == -1, "%s: NaN input accepted", name);
		bad[77] = -INFINITY;
		CHECK(pv_quant_row(t, bad, q, 256) == -1, "%s: infinite input accepted", name);
		CHECK(pv_dtype_row_bytes(t, 512) == 512 / (size_t)pv_dtype_block(t) * pv_dtype_block_bytes(t),
		      "%s: row bytes", name);
	}
	/* F16/BF16 "quantization" rounds to nearest even */
	float h[2] = { 1.0f + 0x1p-11f, 1.0f + 0x1p-7f + 0x1p-8f };
	unsigned char hb[4];
	CHECK(pv_quant_row(PV_F16, h, hb, 2) == 0 && hb[0] == 0x00 && hb[1] == 0x3c, "f16 row tie to even");
	CHECK(pv_quant_row(PV_BF16, h + 1, hb, 1) == 0 && (hb[0] | hb[1] << 8) == 0x3f82, "bf16 row tie to even");
	CHECK(pv_dtype_size(PV_Q4_K) == 0 && pv_dtype_size(PV_BF16) == 2 && pv_dtype_row_bytes(PV_Q4_K, 100) == 0,
	      "sizes of quantized types");
	CHECK(!strcmp(pv_dtype_name(PV_Q6_K), "q6_k") && !strcmp(pv_dtype_name(PV_Q8_0), "q8_0"), "names");
}

/* ---- matmul ---------------------------------------------------------------------------------------- */

enum { TMAX = 48 };

struct fixture {
	enum pv_dtype type;
	int in, out, ldx, ldy;
	unsigned char* wbuf;
	struct pv_tensor W;    /* quantized, possibly at an odd address   */
	float* wf;             /* dequantized [out, in]                   */
	struct pv_tensor Wf;   /* F32 view of wf                          */
	float* x;              /* [TMAX, ldx]                             */
	double* ref;           /* [TMAX, out]                             */
	double* bound;
};

/* Same bound as test_kernels.c: an output sums n products over 8 lanes of ceil(n/8) adds and 3
 * reduction levels, so each product passes through at most k = ceil(n/8) + 4 roundings and
 * |y - exact| <= gamma_k * sum |w x|, gamma_k = k u / (1 - k u), u = 2^-24 (Higham 3.1). The
 * weights enter as their exact dequantized f32 values, so `exact` is the double-precision
 * product of those. */
static double err_bound(int64_t n, double abs_sum)
{
	double k = (double)((n + 7) / 8) + 4.0, u = ldexp(1.0, -24);
	return k * u / (1.0 - k * u) * abs_sum * 1.000001 + 1e-30;
}

static void fixture_make(struct fixture* f, enum pv_dtype t, int in, int out, int odd)
{
	f->type = t;
	f->in = in;
	f->out = out;
	f->ldx = in + 3;
	f->ldy = out + 2;
	size_t rb = pv_dtype_row_bytes(t, in);
	f->wbuf = malloc(rb * (size_t)out + 1);
	unsigned char* w = f->wbuf + (odd ? 1 : 0);
	float* row = malloc((size_t)in * 4);
	for (int o = 0; o < out; o++) {
		float s = 0.02f * (1.0f + (float)(o % 5));
		for (int i = 0; i < in; i++) row[i] = nrnd() * s;
		if (o % 7 == 3) row[rnd() % (uint32_t)in] = 0.5f; /* outlier */
		pv_quant_row(t, row, w + (size_t)o * rb, in);
	}
	free(row);
	f->W = (struct pv_tensor){ w, t, out, in };
	f->wf = malloc((size_t)out * in * 4);
	for (int o = 0; o < out; o++) pv_dequant_row(t, w + (size_t)o * rb, f->wf + (size_t)o * in, in);
	f->Wf = (struct pv_tensor){ f->wf, PV_F32, out, in };
	f->x = malloc(sizeof(float) * TMAX * f->ldx);
	for (int i = 0; i < TMAX * f->ldx; i++) f->x[i] = frnd();
	f->ref = malloc(sizeof(double) * TMAX * out);
	f->bound = malloc(sizeof(double) * TMAX * out);
	for (int tt = 0; tt < TMAX; tt++)
		for (int o = 0; o < out; o++) {
			double s = 0, a = 0;
			for (int i = 0; i < in; i++) {
				double p = (double)f->wf[(size_t)o * in + i] * f->x[tt * f->ldx + i];
				s += p;
				a += fabs(p);
			}
			f->ref[tt * out + o] = s;
			f->bound[tt * out + o] = err_bound(in, a);
		}
}

static void fixture_free(struct fixture* f)
{
	free(f->wbuf);
	free(f->wf);
	free(f->x);
	free(f->ref);
	free(f->bound);
}

static void fill_nan(float* p, size_t n)
{
	for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static int rows_equal(const struct fixture* f, const float* y, const float* all, const int* idx, int T)
{
	for (int t = 0; t < T; t++)
		if (memcmp(y + (size_t)t * f->ldy, all + (size_t)idx[t] * f->ldy, sizeof(float) * f->out)) return 0;
	return 1;
}

static int untouched_outside(const struct fixture* f, const float* y, int T, int o0, int o1)
{
	for (int t = 0; t < T; t++)
		for (int o = 0; o < f->ldy; o++)
			if ((o < o0 || o >= o1) && !isnan(y[(size_t)t * f->ldy + o])) return 0;
	return 1;
}

static void check_matmul(const struct fixture* f, const char* set)
{
	const int out = f->out, ldy = f->ldy;
	const size_t ysz = (size_t)TMAX * ldy;
	float* all = malloc(sizeof(float) * ysz);
	float* y = malloc(sizeof(float) * ysz);
	float* yf = malloc(sizeof(float) * ysz);
	float* xs = malloc(sizeof(float) * TMAX * f->ldx);
	int idx[TMAX];
	char what[96];
	snprintf(what, sizeof what, "%s %s in=%d out=%d", set, pv_dtype_name(f->type), f->in, out);

	/* All rows at once (2 threads): written, accurate, and equal to the F32 matmul over the
	 * dequantized weights. */
	fill_nan(all, ysz);
	pv_quant_matmul_rows(pools[2], all, ldy, f->x, f->ldx, TMAX, &f->W, 0, out);
	fill_nan(yf, ysz);
	pv_matmul(pools[3], yf, ldy, f->x, f->ldx, TMAX, &f->Wf);
	int written = 1, accurate = 1;
	double worst = 0;
	for (int t = 0; t < TMAX; t++)
		for (int o = 0; o < out; o++) {
			float v = all[(size_t)t * ldy + o];
			if (isnan(v)) written = 0;
			double e = fabs((double)v - f->ref[t * out + o]);
			if (!(e <= f->bound[t * out + o])) accurate = 0;
			if (f->bound[t * out + o] > 0 && e / f->bound[t * out + o] > worst) worst = e / f->bound[t * out + o];
		}
	CHECK(written, "%s: an output was not written", what);
	CHECK(untouched_outside(f, all, TMAX, 0, out), "%s: wrote between rows", what);
	CHECK(accurate, "%s: error above bound (worst %.3g x bound)", what, worst);
	CHECK(!memcmp(all, yf, sizeof(float) * ysz), "%s: differs from pv_matmul over the dequantized weights", what);

	/* Decode-sized batches T = 1..6 against the F32 path too (the fused tiles). */
	int small_ok = 1;
	for (int T = 1; T <= 6; T++) {
		fill_nan(y, (size_t)T * ldy);
		pv_quant_matmul_rows(pools[T % 4], y, ldy, f->x + (size_t)(T * 5 % TMAX) * f->ldx, f->ldx, T, &f->W, 0, out);
		for (int i = 0; i < T; i++) idx[i] = (T * 5 % TMAX) + i;
		if (T * 5 % TMAX + T <= TMAX && !rows_equal(f, y, all, idx, T)) small_ok = 0;
	}
	CHECK(small_ok, "%s: a small batch differs from the full batch", what);

	/* Every row alone. */
	int alone_ok = 1;
	for (int t = 0; t < TMAX; t++) {
		fill_nan(y, (size_t)ldy);
		pv_quant_matmul_rows(pools[t % 4], y, ldy, f->x + (size_t)t * f->ldx, f->ldx, 1, &f->W, 0, out);
		idx[0] = t;
		if (!rows_equal(f, y, all, idx, 1)) alone_ok = 0;
	}
	CHECK(alone_ok, "%s: a row computed alone differs from the batch", what);

	/* Random subsets of 1..20 rows in random order, through every pool. */
	int subset_ok = 1;
	for (int T = 1; T <= 20; T++) {
		int perm[TMAX];
		for (int i = 0; i < TMAX; i++) perm[i] = i;
		for (int i = 0; i < T; i++) {
			int j = i + (int)(rnd() % (uint32_t)(TMAX - i));
			int tmp = perm[i];
			perm[i] = perm[j];
			perm[j] = tmp;
			idx[i] = perm[i];
			memcpy(xs + (size_t)i * f->ldx, f->x + (size_t)idx[i] * f->ldx, sizeof(float) * f->in);
		}
		fill_nan(y, (size_t)T * ldy);
		pv_quant_matmul_rows(pools[T % 4], y, ldy, xs, f->ldx, T, &f->W, 0, out);
		if (!rows_equal(f, y, all, idx, T)) subset_ok = 0;
	}
	CHECK(subset_ok, "%s: a random subset of rows differs from the batch", what);

	/* Random splits of the output rows, each piece on a random pool; a piece writes only its
	 * rows. */
	int split_ok = 1, confined = 1;
	fill_nan(y, ysz);
	for (int o0 = 0; o0 < out;) {
		int o1 = o0 + 1 + (int)(rnd() % (uint32_t)(out - o0 > 40 ? 40 : out - o0));
		pv_quant_matmul_rows(pools[rnd() % 4], y, ldy, f->x, f->ldx, TMAX, &f->W, o0, o1);
		o0 = o1;
	}
	for (int i = 0; i < TMAX; i++) idx[i] = i;
	if (!rows_equal(f, y, all, idx, TMAX)) split_ok = 0;
	{
		int o0 = out > 2 ? 1 : 0, o1 = out > 2 ? out - 1 : out;
		for (int T = 3; T <= 9; T += 6) {
			fill_nan(y, ysz);
			pv_quant_matmul_rows(pools[3], y, ldy, f->x, f->ldx, T, &f->W, o0, o1);
			if (!untouched_outside(f, y, T, o0, o1)) confined = 0;
			for (int t = 0; t < T; t++)
				if (memcmp(y + (size_t)t * ldy + o0, all + (size_t)t * ldy + o0, sizeof(float) * (size_t)(o1 - o0)))
					split_ok = 0;
		}
		fill_nan(y, ysz);
		pv_quant_matmul_rows(pools[2], y, ldy, f->x, f->ldx, 3, &f->W, o0, o0);
		if (!untouched_outside(f, y, 3, 0, 0)) confined = 0;
	}
	CHECK(split_ok, "%s: split output rows differ", what);
	CHECK(confined, "%s: wrote outside its rows", what);

	/* pv_quant_dot: the same as a one-row matmul, and as pv_dot_f32 on the dequantized row. */
	int dot_ok = 1;
	size_t rb = pv_dtype_row_bytes(f->type, f->in);
	for (int o = 0; o < out && o < 8; o++) {
		float d = pv_quant_dot(f->type, (const unsigned char*)f->W.data + (size_t)o * rb, f->x, f->in);
		float e = pv_dot_f32(f->wf + (size_t)o * f->in, f->x, f->in);
		if (f2u(d) != f2u(all[o]) || f2u(d) != f2u(e)) dot_ok = 0;
	}
	CHECK(dot_ok, "%s: pv_quant_dot differs", what);

	free(all);
	free(y);
	free(yf);
	free(xs);
}

TEST_CASE(matmul)
{
	rng_state = RNG_SEED;
	static const int ins32[] = { 32, 96, 4096 }, ins256[] = { 256, 768 };
	static const int outs[] = { 1, 5, 37 };
	for (int k = 0; k < NQT; k++) {
		enum pv_dtype t = qtypes[k];
		const int* ins = pv_dtype_block(t) == 32 ? ins32 : ins256;
		int nin = pv_dtype_block(t) == 32 ? 3 : 2;
		for (int ii = 0; ii < nin; ii++)
			for (int oi = 0; oi < 3; oi++) {
				if (ins[ii] == 4096 && oi != 2) continue;
				struct fixture f;
				fixture_make(&f, t, ins[ii], outs[oi], (ii + oi) & 1);
				if (have_avx2) {
					pv_ops_force_generic(0);
					check_matmul(&f, "avx2");
				}
				pv_ops_force_generic(1);
				check_matmul(&f, "generic");
				pv_ops_force_generic(0);
				if (have_avx2) {
					/* the two sets agree as closely as each agrees with the reference */
					float a[8 * 40], b[8 * 40];
					pv_quant_matmul_rows(pools[1], a, f.ldy, f.x, f.ldx, 8, &f.W, 0, f.out);
					pv_ops_force_generic(1);
					pv_quant_matmul_rows(pools[1], b, f.ldy, f.x, f.ldx, 8, &f.W, 0, f.out);
					pv_ops_force_generic(0);
					int ok = 1;
					for (int tt = 0; tt < 8; tt++)
						for (int o = 0; o < f.out; o++)
							if (!(fabs((double)a[tt * f.ldy + o] - b[tt * f.ldy + o]) <= 2 * f.bound[tt * f.out + o]))
								ok = 0;
					CHECK(ok, "%s in=%d out=%d: avx2 and generic disagree beyond the bound", pv_dtype_name(t),
					      f.in, f.out);
				}
				fixture_free(&f);
			}
	}
}

static int setup(void)
{
	pools[0] = NULL;
	pools[1] = pv_pool_new(1);
	pools[2] = pv_pool_new(2);
	pools[3] = pv_pool_new(3);
	have_avx2 = !strcmp(pv_ops_isa(), "avx2+fma");
	printf("kernels: %s\n", have_avx2 ? "avx2+fma and generic" : "generic only");
	return 0;
}

static void teardown(void)
{
	for (int i = 1; i < 4; i++) pv_pool_free(pools[i]);
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_quant", setup, teardown);
}
