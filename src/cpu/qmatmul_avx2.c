/*
 * quant_avx2.c: AVX2/FMA/F16C kernels for quantized weight rows times f32 activation rows
 * (this file alone is compiled with -mavx2 -mfma -mf16c; quant.c calls it only when ops.h's
 * kernel choice is "avx2+fma").
 *
 * A tile holds R weight rows and C activation rows. For every group of 8 weights, in increasing
 * order, each row's 8 weights are dequantized into a register with the float operations of the
 * scalar dequantizer (quant.h: int -> float, a multiply, then an add or subtract, never fused;
 * this is ISO C, so GCC contracts nothing, and the pragma keeps clang from doing so), and then
 * acc[r][c] = fma(w, x[c][8g..8g+7], acc[r][c]) for every c. At the end each accumulator is
 * reduced as ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). That is exactly the sequence
 * matmul_avx2.c performs for an F32 weight row holding the dequantized values, for every output,
 * whatever R and C: results do not depend on T, on which rows share a tile or on the caller.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

void pv_qmm_avx2(enum pv_dtype t, float* y, int ldy, const float* x, int ldx, int T,
                 const unsigned char* w, size_t row_bytes, int64_t n, int64_t o0, int64_t o1);
void pv_qdequant_avx2(enum pv_dtype t, const unsigned char* w, float* out, int64_t n);

#define INLINE static inline __attribute__((always_inline))

#define MAX_R 4
#define MAX_C 4

INLINE __m256i load_u8x8(const unsigned char* p)
{
	return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)p));
}

INLINE __m256i load_i8x8(const unsigned char* p)
{
	return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)p));
}

INLINE float f16at(const unsigned char* p)
{
	uint16_t h;
	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* The 8 bits of byte b as 8 lanes of 0/16 (lane i: bit i), the fifth bit of Q5_0/Q5_1. */
INLINE __m256i hbits16(unsigned char b)
{
	const __m256i sh = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	__m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(b), sh);
	return _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(1)), 4);
}

INLINE float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Accumulates w into the C accumulators of row r, or (store mode: one row, no activations)
 * writes the 8 dequantized weights of group g of block b to out. */
#define FMA_ROW(r, wv)                                                                   \
	do {                                                                             \
		if (ST) {                                                                \
			_mm256_storeu_ps(out + b * blk + 8 * (g), (wv));                  \
		} else {                                                                 \
			_Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] =   \
				_mm256_fmadd_ps((wv), _mm256_loadu_ps(xb[c] + 8 * (g)), acc[r][c]); \
		}                                                                        \
	} while (0)

/* 8 bytes of v (a 128-bit lane's low or high half, k = 0..3 over the 256 bits) widened to
 * 8 x int32, zero- or sign-extended. */
INLINE __m256i widen_u8(__m256i v, int k)
{
	__m128i h = (k & 2) ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
	if (k & 1) h = _mm_unpackhi_epi64(h, h);
	return _mm256_cvtepu8_epi32(h);
}
INLINE __m256i widen_i8(__m256i v, int k)
{
	__m128i h = (k & 2) ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
	if (k & 1) h = _mm_unpackhi_epi64(h, h);
	return _mm256_cvtepi8_epi32(h);
}

/*
 * The 6-bit scales and mins of a Q4_K/Q5_K block (12 bytes at q) times d and dmin, as the
 * scalar dequantizer computes them (d * (float)sc, dmin * (float)m): sc for sub-blocks 0..7 to
 * out[0..7], mins to out[8..15]. With w0, w1, w2 the three little-endian words of q:
 *   sc 0-3 = bytes of w0 & 0x3f3f3f3f     sc 4-7 = (w2 & 0x0f..) | ((w0 >> 6) & 0x03..) << 4
 *   m 0-3  = bytes of w1 & 0x3f3f3f3f     m 4-7  = ((w2 >> 4) & 0x0f..) | ((w1 >> 6) & 0x03..) << 4
 */
INLINE void k_scales(const unsigned char* q, float d, float dmin, float* out)
{
	uint32_t w0, w1, w2;
	memcpy(&w0, q, 4);
	memcpy(&w1, q + 4, 4);
	memcpy(&w2, q + 8, 4);
	const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
	const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
	const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
	__m128i b = _mm_setr_epi32((int)sc_lo, (int)sc_hi, (int)m_lo, (int)m_hi);
	__m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
	__m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b)));
	_mm256_storeu_ps(out, _mm256_mul_ps(_mm256_set1_ps(d), sc));
	_mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_set1_ps(dmin), mn));
}

/*
 * One tile: R rows starting at w (row stride rb bytes) times C activation rows starting at x;
 * or, with ST, the dequantization of one row into out. TY, R, C and ST are compile-time
 * constants in every instantiation.
 */
INLINE void tile(float* y, int ldy, const float* x, int ldx, const unsigned char* w, size_t rb,
                 int64_t n, enum pv_dtype TY, int R, int C, int ST, float* out)
{
	__m256 acc[MAX_R][MAX_C];
	const int64_t blk = pv_dtype_block(TY);
	const size_t bb = pv_dtype_block_bytes(TY);
	const __m256i m15 = _mm256_set1_epi32(15);

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();

	for (int64_t b = 0; b < n / blk; b++) {
		const float* xb[MAX_C];
		const unsigned char* wb[MAX_R];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) xb[c] = x + (size_t)c * ldx + b * blk;
#pragma GCC unroll 4
		for (int r = 0; r < R; r++) wb[r] = w + (size_t)r * rb + (size_t)b * bb;
		/* Software prefetch 256 bytes ahead in every row: Q6_K reads the end of a block (scales,
		 * d) before its start, which defeats the hardware prefetcher (2x slower streaming without
		 * this); it also helps Q8_0 a little and costs the others nothing measurable. */
		if (!ST) {
#pragma GCC unroll 4
			for (int r = 0; r < R; r++)
				for (size_t k = 0; k < (bb + 63) / 64; k++)
					_mm_prefetch((const char*)wb[r] + 256 + 64 * k, _MM_HINT_T0);
		}

		if (TY == PV_Q8_0) {
			__m256 d[MAX_R];
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) d[r] = _mm256_set1_ps(f16at(wb[r]));
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++) {
#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					__m256 q = _mm256_cvtepi32_ps(load_i8x8(wb[r] + 2 + 8 * g));
					FMA_ROW(r, _mm256_mul_ps(q, d[r]));
				}
			}
		} else if (TY == PV_Q4_0 || TY == PV_Q4_1 || TY == PV_Q5_0 || TY == PV_Q5_1) {
			const int has_m = TY == PV_Q4_1 || TY == PV_Q5_1;
			const int five = TY == PV_Q5_0 || TY == PV_Q5_1;
			const size_t qs_off = TY == PV_Q4_0 ? 2 : TY == PV_Q4_1 ? 4 : TY == PV_Q5_0 ? 6 : 8;
			const size_t qh_off = TY == PV_Q5_0 ? 2 : 4;
			const __m256i bias = _mm256_set1_epi32(TY == PV_Q4_0 ? 8 : 16);
			__m256 d[MAX_R], m[MAX_R];
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				d[r] = _mm256_set1_ps(f16at(wb[r]));
				m[r] = has_m ? _mm256_set1_ps(f16at(wb[r] + 2)) : _mm256_setzero_ps();
			}
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++) {
#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					__m256i v = load_u8x8(wb[r] + qs_off + 8 * (g & 1));
					v = g < 2 ? _mm256_and_si256(v, m15) : _mm256_srli_epi32(v, 4);
					if (five) v = _mm256_or_si256(v, hbits16(wb[r][qh_off + g]));
					if (!has_m) v = _mm256_sub_epi32(v, bias);
					__m256 wv = _mm256_mul_ps(_mm256_cvtepi32_ps(v), d[r]);
					if (has_m) wv = _mm256_add_ps(wv, m[r]);
					FMA_ROW(r, wv);
				}
			}
		} else if (TY == PV_Q4_K || TY == PV_Q5_K) {
			const int five = TY == PV_Q5_K;
			const size_t qs_off = five ? 48 : 16;
			const __m256i m0f = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
			_Alignas(32) float dm[MAX_R][16]; /* d1 of sub-block s at [s], m1 at [8 + s] */
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) k_scales(wb[r] + 4, f16at(wb[r]), f16at(wb[r] + 2), dm[r]);
			for (int s = 0; s < 8; s++) {
#pragma GCC unroll 4
				for (int r = 0; r < R; r++) {
					/* the 32 values of sub-block s as bytes */
					__m256i v = _mm256_loadu_si256((const __m256i*)(const void*)(wb[r] + qs_off + 32 * (s >> 1)));
					v = (s & 1) ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f) : _mm256_and_si256(v, m0f);
					if (five) {
						__m256i h = _mm256_loadu_si256((const __m256i*)(const void*)(wb[r] + 16));
						h = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(s)), one);
						v = _mm256_or_si256(v, _mm256_slli_epi16(h, 4));
					}
					const __m256 d1 = _mm256_broadcast_ss(&dm[r][s]), m1 = _mm256_broadcast_ss(&dm[r][8 + s]);
#pragma GCC unroll 4
					for (int k = 0; k < 4; k++) {
						const int g = 4 * s + k;
						__m256 wv = _mm256_mul_ps(_mm256_cvtepi32_ps(widen_u8(v, k)), d1);
						FMA_ROW(r, _mm256_sub_ps(wv, m1));
					}
				}
			}
		} else if (TY == PV_Q6_K) {
			_Alignas(32) float ds[MAX_R][16];
			const __m256i m0f = _mm256_set1_epi8(0x0f), m03 = _mm256_set1_epi8(3), b32 = _mm256_set1_epi8(32);
#pragma GCC unroll 4
			for (int r = 0; r < R; r++) {
				const __m256 d = _mm256_set1_ps(f16at(wb[r] + 208));
				__m128i sc = _mm_loadu_si128((const __m128i*)(const void*)(wb[r] + 192));
				_mm256_storeu_ps(ds[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
				_mm256_storeu_ps(ds[r] + 8,
				                 _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(sc, sc)))));
			}
			for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
				for (int k = 0; k < 4; k++) {
#pragma GCC unroll 4
					for (int r = 0; r < R; r++) {
						/* elements 32k..32k+31 of half h as bytes: a nibble of ql[l (+32)] and
						 * bits 2k, 2k+1 of qh[l], minus 32 */
						__m256i ql = _mm256_loadu_si256((const __m256i*)(const void*)(wb[r] + 64 * h + 32 * (k & 1)));
						__m256i qh = _mm256_loadu_si256((const __m256i*)(const void*)(wb[r] + 128 + 32 * h));
						ql = k >= 2 ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), m0f) : _mm256_and_si256(ql, m0f);
						qh = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m03);
						__m256i q = _mm256_sub_epi8(_mm256_or_si256(ql, _mm256_slli_epi16(qh, 4)), b32);
#pragma GCC unroll 4
						for (int lg = 0; lg < 4; lg++) {
							const int g = 16 * h + 4 * k + lg;
							__m256 sc = _mm256_broadcast_ss(&ds[r][8 * h + lg / 2 + 2 * k]);
							FMA_ROW(r, _mm256_mul_ps(sc, _mm256_cvtepi32_ps(widen_i8(q, lg))));
						}
					}
				}
			}
		}
	}
	if (!ST) {
#pragma GCC unroll 4
		for (int r = 0; r < R; r++)
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) y[(size_t)c * ldy + r] = hsum(acc[r][c]);
	}
}

typedef void (*qtile_fn)(float* y, int ldy, const float* x, int ldx, const unsigned char* w, size_t rb,
                         int64_t n);

#define QTILE(TN, TY, R, C)                                                                  \
	static void qtile_##TN##_##R##_##C(float* y, int ldy, const float* x, int ldx,         \
	                                   const unsigned char* w, size_t rb, int64_t n)        \
	{                                                                                    \
		tile(y, ldy, x, ldx, w, rb, n, TY, R, C, 0, NULL);                           \
	}

/* Tile shapes: C activation rows at once with up to R_FOR_C[C] weight rows, so that the R*C
 * accumulators and the dequantization temporaries fit the 16 ymm registers. */
#define QTILES_FOR(TN, TY)                                                                 \
	QTILE(TN, TY, 1, 1) QTILE(TN, TY, 2, 1) QTILE(TN, TY, 3, 1) QTILE(TN, TY, 4, 1)      \
	QTILE(TN, TY, 1, 2) QTILE(TN, TY, 2, 2) QTILE(TN, TY, 3, 2) QTILE(TN, TY, 4, 2)      \
	QTILE(TN, TY, 1, 3) QTILE(TN, TY, 2, 3) QTILE(TN, TY, 3, 3)                          \
	QTILE(TN, TY, 1, 4) QTILE(TN, TY, 2, 4)                                              \
	static void qdeq_##TN(const unsigned char* w, float* out, int64_t n)                  \
	{                                                                                    \
		tile(NULL, 0, NULL, 0, w, 0, n, TY, 1, 0, 1, out);                           \
	}                                                                                    \
	static const qtile_fn qtiles_##TN[MAX_C + 1][MAX_R + 1] = {                          \
		{ NULL },                                                                  \
		{ NULL, qtile_##TN##_1_1, qtile_##TN##_2_1, qtile_##TN##_3_1, qtile_##TN##_4_1 }, \
		{ NULL, qtile_##TN##_1_2, qtile_##TN##_2_2, qtile_##TN##_3_2, qtile_##TN##_4_2 }, \
		{ NULL, qtile_##TN##_1_3, qtile_##TN##_2_3, qtile_##TN##_3_3 },                \
		{ NULL, qtile_##TN##_1_4, qtile_##TN##_2_4 },                                  \
	};

QTILES_FOR(q8_0, PV_Q8_0)
QTILES_FOR(q4_0, PV_Q4_0)
QTILES_FOR(q4_1, PV_Q4_1)
QTILES_FOR(q5_0, PV_Q5_0)
QTILES_FOR(q5_1, PV_Q5_1)
QTILES_FOR(q4_k, PV_Q4_K)
QTILES_FOR(q5_k, PV_Q5_K)
QTILES_FOR(q6_k, PV_Q6_K)

static const int R_FOR_C[MAX_C + 1] = { 0, 4, 4, 3, 2 };

/* Weight bytes per block of rows that every activation tile passes over while it is in L2. */
#define L2_BLOCK_BYTES (128 * 1024)

void pv_qmm_avx2(enum pv_dtype t, float* y, int ldy, const float* x, int ldx, int T,
                 const unsigned char* w, size_t rb, int64_t n, int64_t o0, int64_t o1)
{
	const qtile_fn(*tiles)[MAX_R + 1];
	switch (t) {
	case PV_Q8_0: tiles = qtiles_q8_0; break;
	case PV_Q4_0: tiles = qtiles_q4_0; break;
	case PV_Q4_1: tiles = qtiles_q4_1; break;
	case PV_Q5_0: tiles = qtiles_q5_0; break;
	case PV_Q5_1: tiles = qtiles_q5_1; break;
	case PV_Q4_K: tiles = qtiles_q4_k; break;
	case PV_Q5_K: tiles = qtiles_q5_k; break;
	case PV_Q6_K: tiles = qtiles_q6_k; break;
	default: return;
	}
	int64_t block = (int64_t)(L2_BLOCK_BYTES / (rb ? rb : 1));
	if (block < 1) block = 1;
	for (int64_t ob = o0; ob < o1; ob += block) {
		int64_t oe = o1 - ob < block ? o1 : ob + block;
		for (int t0 = 0; t0 < T; t0 += MAX_C) {
			const int C = T - t0 < MAX_C ? T - t0 : MAX_C;
			const int R = R_FOR_C[C];
			for (int64_t o = ob; o < oe; o += R) {
				int r = oe - o < R ? (int)(oe - o) : R;
				tiles[C][r](y + (size_t)t0 * ldy + o, ldy, x + (size_t)t0 * ldx, ldx, w + (size_t)o * rb, rb, n);
			}
		}
	}
}

/* One row of n elements dequantized into out: the same values as pv_dequant_row. */
void pv_qdequant_avx2(enum pv_dtype t, const unsigned char* w, float* out, int64_t n)
{
	switch (t) {
	case PV_Q8_0: qdeq_q8_0(w, out, n); break;
	case PV_Q4_0: qdeq_q4_0(w, out, n); break;
	case PV_Q4_1: qdeq_q4_1(w, out, n); break;
	case PV_Q5_0: qdeq_q5_0(w, out, n); break;
	case PV_Q5_1: qdeq_q5_1(w, out, n); break;
	case PV_Q4_K: qdeq_q4_k(w, out, n); break;
	case PV_Q5_K: qdeq_q5_k(w, out, n); break;
	case PV_Q6_K: qdeq_q6_k(w, out, n); break;
	default: break;
	}
}

#else
typedef int pv_quant_avx2_unused;
#endif
