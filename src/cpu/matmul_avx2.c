/*
 * matmul_avx2.c: the AVX2/FMA/F16C kernels (this file alone is compiled with -mavx2 -mfma
 * -mf16c; matmul.c calls it only after checking the CPU).
 *
 * Summation order (the contract, see matmul.c for the generic twin): one output is the dot
 * product of a weight row w and an activation row x of length n, computed as
 *
 *   acc[0..7] = +0
 *   for each block b of 8 elements (the last one, if n % 8 != 0, padded with zeros in both
 *   w and x):  acc[l] = fma(w[8b + l], x[8b + l], acc[l])   for l = 0..7
 *   result = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))
 *
 * Every kernel below, whatever the number of weight rows (R) and activation rows (C) it
 * handles at once, performs exactly this sequence for each of its R*C outputs: the tiles only
 * interleave independent sequences to keep both FMA pipes busy and to reuse each loaded
 * weight vector across several activation rows. Hence results never depend on T, on which
 * rows share a tile, on the thread split or on the caller.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/tensor.h"

/* Shared with matmul.c (declared there too). */
void pv_matmul_avx2(float* y, int ldy, const float* x, int ldx, int T,
                    const struct pv_tensor* W, int64_t o0, int64_t o1);
float pv_dot_f32_avx2(const float* a, const float* b, int n);
void pv_axpy_f32_avx2(float* y, float a, const float* x, int n);

#define INLINE static inline __attribute__((always_inline))

/* Eight weights starting at byte address p, as f32. Unaligned loads throughout: 2-byte
 * weights point into a memory-mapped file and may sit at any address. */
INLINE __m256 load_w(const char* p, int type)
{
	if (type == PV_F32) return _mm256_loadu_ps((const float*)(const void*)p);
	__m128i h = _mm_loadu_si128((const __m128i*)(const void*)p);
	if (type == PV_F16) return _mm256_cvtph_ps(h);
	/* bf16 is the top half of an f32: widen and shift (exact). */
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last, partial block: n_left (1..7) weights padded with zeros. */
INLINE __m256 load_w_tail(const char* p, int n_left, int type)
{
	_Alignas(32) unsigned char buf[32] = { 0 };
	memcpy(buf, p, (size_t)n_left * (type == PV_F32 ? 4 : 2));
	return load_w((const char*)buf, type);
}

INLINE __m256 load_x_tail(const float* p, int n_left)
{
	_Alignas(32) float buf[8] = { 0 };
	memcpy(buf, p, (size_t)n_left * sizeof(float));
	return _mm256_load_ps(buf);
}

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) */
INLINE float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#define MAX_R 8
#define MAX_C 4

/*
 * R weight rows (w, w + ws, ...) times C activation rows (x, x + ldx, ...):
 * y[c*ldy + r] = dot(w_r, x_c) in the contract's order. R and C are compile-time constants
 * in every instantiation, so the accumulators live in registers.
 */
INLINE void tile(float* y, int ldy, const float* x, int ldx, const char* w, size_t ws, int64_t n,
                 int type, int R, int C)
{
	const size_t es = type == PV_F32 ? 4 : 2;
	__m256 acc[MAX_R][MAX_C];
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();

	/* Keep the smaller operand set in registers while the other streams past it: R + 1 + R*C
	 * or C + 1 + R*C ymm registers, whichever is fewer (GCC spills otherwise). The order in
	 * which independent accumulators are updated does not change any of them. */
	int64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		if (R <= C) {
			__m256 wv[MAX_R];
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) wv[r] = load_w(w + (size_t)r * ws + (size_t)i * es, type);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				__m256 xv = _mm256_loadu_ps(x + (size_t)c * ldx + i);
#pragma GCC unroll 8
				for (int r = 0; r < R; r++) acc[r][c] = _mm256_fmadd_ps(wv[r], xv, acc[r][c]);
			}
		} else {
			__m256 xv[MAX_C];
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) xv[c] = _mm256_loadu_ps(x + (size_t)c * ldx + i);
#pragma GCC unroll 8
			for (int r = 0; r < R; r++) {
				__m256 wv = load_w(w + (size_t)r * ws + (size_t)i * es, type);
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
			}
		}
	}
	if (i < n) {
		/* The padded last block, one row at a time (runs once per tile). */
		int left = (int)(n - i);
		__m256 xv[MAX_C];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) xv[c] = load_x_tail(x + (size_t)c * ldx + i, left);
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			__m256 wv = load_w_tail(w + (size_t)r * ws + (size_t)i * es, left, type);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) y[(size_t)c * ldy + r] = hsum(acc[r][c]);
}

typedef void (*tile_fn)(float* y, int ldy, const float* x, int ldx, const char* w, size_t ws,
                        int64_t n);

#define TILE(TN, TY, R, C)                                                                  \
	static void tile_##TN##_##R##_##C(float* y, int ldy, const float* x, int ldx,         \
	                                  const char* w, size_t ws, int64_t n)                 \
	{                                                                                   \
		tile(y, ldy, x, ldx, w, ws, n, TY, R, C);                                   \
	}
/*
 * The tile shapes: for C activation rows at once, up to R_FOR_C[C] weight rows, chosen so the
 * R*C accumulators plus the operands held in registers fit the 16 ymm registers:
 *   C = 1: 8 rows (decode; 8 FMA chains cover the FMA latency, 8 streams for the prefetcher)
 *   C = 2: 6 rows, C = 3: 4 rows (12 accumulators + C activation vectors + 1 weight vector)
 *   C = 4: 3 rows (12 accumulators + 3 weight vectors + 1 activation vector)
 * Smaller R serve the last rows of a block.
 */
#define TILES_FOR(TN, TY)                                                                   \
	TILE(TN, TY, 1, 1) TILE(TN, TY, 2, 1) TILE(TN, TY, 3, 1) TILE(TN, TY, 4, 1)           \
	TILE(TN, TY, 5, 1) TILE(TN, TY, 6, 1) TILE(TN, TY, 7, 1) TILE(TN, TY, 8, 1)           \
	TILE(TN, TY, 1, 2) TILE(TN, TY, 2, 2) TILE(TN, TY, 3, 2) TILE(TN, TY, 4, 2)           \
	TILE(TN, TY, 5, 2) TILE(TN, TY, 6, 2)                                                 \
	TILE(TN, TY, 1, 3) TILE(TN, TY, 2, 3) TILE(TN, TY, 3, 3) TILE(TN, TY, 4, 3)           \
	TILE(TN, TY, 1, 4) TILE(TN, TY, 2, 4) TILE(TN, TY, 3, 4)                              \
	static const tile_fn tiles_##TN[MAX_C + 1][MAX_R + 1] = {                             \
		{ NULL },                                                                   \
		{ NULL, tile_##TN##_1_1, tile_##TN##_2_1, tile_##TN##_3_1, tile_##TN##_4_1,   \
		  tile_##TN##_5_1, tile_##TN##_6_1, tile_##TN##_7_1, tile_##TN##_8_1 },        \
		{ NULL, tile_##TN##_1_2, tile_##TN##_2_2, tile_##TN##_3_2, tile_##TN##_4_2,   \
		  tile_##TN##_5_2, tile_##TN##_6_2 },                                         \
		{ NULL, tile_##TN##_1_3, tile_##TN##_2_3, tile_##TN##_3_3, tile_##TN##_4_3 }, \
		{ NULL, tile_##TN##_1_4, tile_##TN##_2_4, tile_##TN##_3_4 },                  \
	};

TILES_FOR(f32, PV_F32)
TILES_FOR(f16, PV_F16)
TILES_FOR(bf16, PV_BF16)

static const int R_FOR_C[MAX_C + 1] = { 0, 8, 6, 4, 3 };

/* Weight bytes a block of rows may occupy so that it stays in L2 while every activation
 * tile passes over it (the L2 here is 1-2 MiB per core; leave room for the activations). */
#define L2_BLOCK_BYTES (256 * 1024)

/* Rows [o0, o1) of W times activation rows x[0..C): one pass of C-row tiles. */
static void pass(const tile_fn* tiles, int C, float* y, int ldy, const float* x, int ldx,
                 const char* base, size_t ws, int64_t n, int64_t o0, int64_t o1)
{
	const int R = R_FOR_C[C];
	for (int64_t o = o0; o < o1; o += R) {
		int r = o1 - o < R ? (int)(o1 - o) : R;
		tiles[r](y + o, ldy, x, ldx, base + (size_t)o * ws, ws, n);
	}
}

void pv_matmul_avx2(float* y, int ldy, const float* x, int ldx, int T,
                    const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	const int type = W->type;
	const int64_t n = W->cols;
	const size_t ws = (size_t)n * (type == PV_F32 ? 4 : 2);
	const char* base = W->data;
	const tile_fn(*tiles)[MAX_R + 1] =
		type == PV_F32 ? tiles_f32 : type == PV_F16 ? tiles_f16 : tiles_bf16;

	if (T <= MAX_C) {
		/* Decode and short verification batches: one pass, so each weight row is streamed
		 * from memory once. */
		pass(tiles[T], T, y, ldy, x, ldx, base, ws, n, o0, o1);
		return;
	}

	/* Prefill: for a block of weight rows that fits in L2, pass every tile of MAX_C
	 * activation rows (then the remainder) over it. */
	int64_t block = (int64_t)(L2_BLOCK_BYTES / (ws ? ws : 1));
	block = block >= 24 ? block / 24 * 24 : block < 1 ? 1 : block;
	for (int64_t ob = o0; ob < o1; ob += block) {
		int64_t oe = o1 - ob < block ? o1 : ob + block;
		for (int t = 0; t < T; t += MAX_C) {
			int c = T - t < MAX_C ? T - t : MAX_C;
			pass(tiles[c], c, y + (size_t)t * ldy, ldy, x + (size_t)t * ldx, ldx, base, ws,
			     n, ob, oe);
		}
	}
}

float pv_dot_f32_avx2(const float* a, const float* b, int n)
{
	/* The same sequence as an F32 weight row: a plays the weight, b the activation. */
	float r;
	tile_f32_1_1(&r, 1, b, 0, (const char*)a, 0, n);
	return r;
}

void pv_axpy_f32_avx2(float* y, float a, const float* x, int n)
{
	/* Each element is fma(a, x[i], y[i]), in the vector body and the scalar tail alike. */
	const __m256 av = _mm256_set1_ps(a);
	int i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	for (; i < n; i++)
		y[i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(x[i]), _mm_set_ss(y[i])));
}

#else
/* Not x86: matmul.c never calls into this file. ISO C wants a translation unit to declare
 * something. */
typedef int pv_matmul_avx2_unused;
#endif
