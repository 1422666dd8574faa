/*
 * qgemm_avx512.c: the AVX-512 kernels of the fast numerics (this file alone is compiled with
 * the AVX-512 flags; kernels.c calls it only after checking the CPU).
 *
 * Quantized weights (panels, cpu/qdot.h): a tile is one 16-row panel times C activation rows.
 * Lane r of every vector belongs to row r of the panel, so a block's integer sums need no
 * horizontal reduction: each 64-byte weight vector (4 elements of each of the 16 rows, unpacked
 * to bytes) meets 4 activation bytes broadcast to all lanes in one vpdpbusd (u8 x s8, summed
 * in int32 without saturation). Stored values with an offset (Q8_0 + 128, Q4_0 q - 8, ...)
 * enter as unsigned bytes and the offset comes off with the activation sums; sub-block scales
 * are int32 multiplies. All of that is exact integer arithmetic, so its order is free. The
 * float step per block is qdot.h's, in block order, once per (row, activation row): the same
 * bits for every C, every tiling, and as the portable code.
 *
 * Decode (T = 1) reads each panel once, in address order (the panels of a task are contiguous,
 * so a thread streams one region); prefill passes tiles of C activation rows over an L2-sized
 * block of panels, unpacking each weight vector once for the C rows.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kern.h"
#include "cpu/qdot.h"

#define INLINE static inline __attribute__((always_inline))

int pv_have_avx512_kernels(void) { return 1; }

/* Activation rows per tile, by type class (accumulators must fit the 32 zmm registers). */
#define CMAX  8
#define CMAXK 4

/* Panel bytes ahead of the current block that a tile prefetches (the streams are sequential,
 * so this mostly hides the hardware prefetcher's ramp-up at each task's start). */
#define PF_DIST 1024

INLINE __m512 ld_f16x16(const unsigned char* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(const void*)p)); }
INLINE __m512i ld(const unsigned char* p) { return _mm512_loadu_si512((const void*)p); }
INLINE __mmask64 ldmask(const unsigned char* p)
{
	uint64_t m;
	memcpy(&m, p, 8);
	return _cvtu64_mask64(m);
}
INLINE __m512i lo4(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
INLINE __m512i hi4(__m512i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
/* acc + vpdpbusd(w, 4 activation bytes at x broadcast to all lanes): the broadcast rides in the
 * instruction's memory operand ({1to16}), which GCC does not fold from the intrinsics */
INLINE __m512i dp(__m512i acc, __m512i w, const int8_t* x)
{
	__asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t*)(const void*)x));
	return acc;
}

/* ---- 32-element types -------------------------------------------------------------------- */

/*
 * One panel (pan, nb blocks) times C activation rows (act, as bytes apart): y[c] (16 lanes).
 */
INLINE void tile32(enum pv_dtype TY, int C, float* yout, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb,
                   const unsigned char* act, size_t as, int64_t n)
{
	__m512 yv[CMAX];
	const size_t pb = pv_panel_block_bytes(TY);
	const int has_m = TY == PV_Q4_1 || TY == PV_Q5_1;
	const int five = TY == PV_Q5_0 || TY == PV_Q5_1;
	const int bias = TY == PV_Q8_0 ? 128 : TY == PV_Q4_0 ? 8 : TY == PV_Q5_0 ? 16 : 0;
	const size_t vec_off = TY == PV_Q8_0 ? 32 : TY == PV_Q4_0 ? 32 : TY == PV_Q4_1 ? 64 : TY == PV_Q5_0 ? 96 : 128;
	const size_t mask_off = TY == PV_Q5_0 ? 32 : 64;
	struct pv_qrow a[CMAX];
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8, n);
		yv[c] = _mm512_setzero_ps();
	}
	const __m512i b16 = _mm512_set1_epi8(16);

	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		_mm_prefetch((const char*)p + PF_DIST, _MM_HINT_T0);
		if (pb > 320) _mm_prefetch((const char*)p + PF_DIST + 64 * ((pb - 1) / 64), _MM_HINT_T0);
		const __m512 dw = ld_f16x16(p);
		__m512i acc[CMAX], acc2[2];
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_si512();
		acc2[0] = acc2[1] = _mm512_setzero_si512();
		if (TY == PV_Q8_0) {
#pragma GCC unroll 8
			for (int j = 0; j < 8; j++) {
				const __m512i w = ld(p + vec_off + 64 * j);
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					/* two chains for decode: vpdpbusd's latency, not its throughput, would bind */
					if (C <= 2 && (j & 1))
						acc2[c] = dp(acc2[c], w, a[c].q + 32 * b + 4 * j);
					else
						acc[c] = dp(acc[c], w, a[c].q + 32 * b + 4 * j);
				}
			}
		} else {
#pragma GCC unroll 4
			for (int cc = 0; cc < 4; cc++) {
				const __m512i raw = ld(p + vec_off + 64 * cc);
				__m512i lo = lo4(raw), hi = hi4(raw);
				if (five) {
					lo = _mm512_mask_add_epi8(lo, ldmask(p + mask_off + 8 * (2 * cc)), lo, b16);
					hi = _mm512_mask_add_epi8(hi, ldmask(p + mask_off + 8 * (2 * cc + 1)), hi, b16);
				}
#pragma GCC unroll 8
				for (int c = 0; c < C; c++) {
					acc[c] = dp(acc[c], lo, a[c].q + 32 * b + 4 * cc);
					if (C <= 2)
						acc2[c] = dp(acc2[c], hi, a[c].q + 32 * b + 16 + 4 * cc);
					else
						acc[c] = dp(acc[c], hi, a[c].q + 32 * b + 16 + 4 * cc);
				}
			}
		}
		const __m512 mw = has_m ? ld_f16x16(p + 32) : _mm512_setzero_ps();
#pragma GCC unroll 8
		for (int c = 0; c < C; c++) {
			const int32_t s = a[c].s[b];
			__m512i I = C <= 2 ? _mm512_add_epi32(acc[c], acc2[c]) : acc[c];
			if (bias) I = _mm512_sub_epi32(I, _mm512_set1_epi32(bias * s));
			const __m512 dx = _mm512_set1_ps(a[c].d[b]);
			yv[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(I), yv[c]);
			if (has_m) yv[c] = _mm512_fmadd_ps(_mm512_mul_ps(mw, dx), _mm512_set1_ps((float)s), yv[c]);
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(yout + (size_t)c * ldy, km, yv[c]);
}

/* ---- Q4_K, Q5_K ---------------------------------------------------------------------------- */

/* Sub-block scales (sc) and mins (m) of the 16 rows, per lane, from the transposed 12-byte
 * fields (quant.h): s < 4 in the low 6 bits of bytes s (sc) and 4+s (m); s >= 4 in the nibbles
 * of byte 4+s plus the top two bits of bytes s-4 (sc) and s (m). */
INLINE void k_scales(const unsigned char* p, __m512i sc[8], __m512i mn[8])
{
	const __m512i A = ld(p + 64), B = ld(p + 128), Cc = ld(p + 192);
	const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
#pragma GCC unroll 4
	for (int s = 0; s < 4; s++) {
		sc[s] = _mm512_and_si512(_mm512_srli_epi32(A, 8 * s), m63);
		mn[s] = _mm512_and_si512(_mm512_srli_epi32(B, 8 * s), m63);
		sc[4 + s] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(Cc, 8 * s), m15),
		                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(A, 8 * s + 6), m3), 4));
		mn[4 + s] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(Cc, 8 * s + 4), m15),
		                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(B, 8 * s + 6), m3), 4));
	}
}

INLINE void tilek4(enum pv_dtype TY, int C, float* yout, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb,
                   const unsigned char* act, size_t as, int64_t n)
{
	__m512 yv[CMAXK];
	const size_t pb = pv_panel_block_bytes(TY);
	const int five = TY == PV_Q5_K;
	const size_t vec_off = five ? 768 : 256;
	struct pv_qrow a[CMAXK];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8K, n);
		yv[c] = _mm512_setzero_ps();
	}
	const __m512i b16 = _mm512_set1_epi8(16);

	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		for (size_t k = 0; k < pb; k += 512) _mm_prefetch((const char*)p + PF_DIST + k, _MM_HINT_T0);
		__m512i sc[8], mn[8];
		k_scales(p, sc, mn);
		__m512i itot[CMAXK];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) itot[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (int i = 0; i < 4; i++) {
			__m512i alo[CMAXK], ahi[CMAXK];
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) alo[c] = ahi[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int k = 0; k < 8; k++) {
				const __m512i raw = ld(p + vec_off + 64 * (8 * i + k));
				__m512i lo = lo4(raw), hi = hi4(raw);
				if (five) {
					lo = _mm512_mask_add_epi8(lo, ldmask(p + 256 + 8 * (2 * (8 * i + k))), lo, b16);
					hi = _mm512_mask_add_epi8(hi, ldmask(p + 256 + 8 * (2 * (8 * i + k) + 1)), hi, b16);
				}
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t* x = a[c].q + 256 * b + 64 * i + 4 * k;
					alo[c] = dp(alo[c], lo, x);
					ahi[c] = dp(ahi[c], hi, x + 32);
				}
			}
#pragma GCC unroll 4
			for (int c = 0; c < C; c++)
				itot[c] =
				        _mm512_add_epi32(itot[c], _mm512_add_epi32(_mm512_mullo_epi32(alo[c], sc[2 * i]),
				                                                   _mm512_mullo_epi32(ahi[c], sc[2 * i + 1])));
		}
		const __m512 dw = ld_f16x16(p), mw = ld_f16x16(p + 32);
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) {
			const int32_t* s16 = a[c].s + 16 * b;
			__m512i M = _mm512_setzero_si512();
#pragma GCC unroll 8
			for (int s = 0; s < 8; s++)
				M = _mm512_add_epi32(M,
				                     _mm512_mullo_epi32(mn[s], _mm512_set1_epi32(s16[2 * s] + s16[2 * s + 1])));
			const __m512 dx = _mm512_set1_ps(a[c].d[b]);
			yv[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(itot[c]), yv[c]);
			yv[c] = _mm512_fnmadd_ps(_mm512_mul_ps(mw, dx), _mm512_cvtepi32_ps(M), yv[c]);
		}
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(yout + (size_t)c * ldy, km, yv[c]);
}

/* ---- Q6_K ---------------------------------------------------------------------------------- */

INLINE void tileq6(int C, float* yout, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb, const unsigned char* act,
                   size_t as, int64_t n)
{
	__m512 yv[CMAXK];
	const size_t pb = pv_panel_block_bytes(PV_Q6_K);
	struct pv_qrow a[CMAXK];
#pragma GCC unroll 4
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8K, n);
		yv[c] = _mm512_setzero_ps();
	}
	const __m512i m30 = _mm512_set1_epi8(0x30);

	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		for (size_t k = 0; k < pb; k += 512) _mm_prefetch((const char*)p + PF_DIST + k, _MM_HINT_T0);
		__m512i itot[CMAXK];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) itot[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
		for (int s = 0; s < 8; s++) {
			/* high-bit vectors 2s, 2s+1: sub-block s from the low nibbles, 8+s from the high */
			__m512i aa[CMAXK], ab[CMAXK];
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) aa[c] = ab[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
			for (int vv = 0; vv < 2; vv++) {
				const int v = 2 * s + vv;
				const __m512i qh = ld(p + 288 + 64 * v);
				const __m512i r0 = ld(p + 1312 + 64 * (2 * v)), r1 = ld(p + 1312 + 64 * (2 * v + 1));
				/* a | (b & 0x30): ternary-logic truth table 0xf8 */
				const __m512i l0 = _mm512_ternarylogic_epi32(lo4(r0), _mm512_slli_epi16(qh, 4), m30, 0xf8);
				const __m512i h0 = _mm512_ternarylogic_epi32(hi4(r0), _mm512_slli_epi16(qh, 2), m30, 0xf8);
				const __m512i l1 = _mm512_ternarylogic_epi32(lo4(r1), qh, m30, 0xf8);
				const __m512i h1 = _mm512_ternarylogic_epi32(hi4(r1), _mm512_srli_epi16(qh, 2), m30, 0xf8);
#pragma GCC unroll 4
				for (int c = 0; c < C; c++) {
					const int8_t* x = a[c].q + 256 * b + 8 * v;
					aa[c] = dp(aa[c], l0, x);
					aa[c] = dp(aa[c], l1, x + 4);
					ab[c] = dp(ab[c], h0, x + 128);
					ab[c] = dp(ab[c], h1, x + 132);
				}
			}
			const __m512i sa =
			        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(const void*)(p + 32 + 16 * s)));
			const __m512i sb =
			        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(const void*)(p + 32 + 16 * (8 + s))));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) {
				const int32_t* s16 = a[c].s + 16 * b;
				const __m512i ia = _mm512_sub_epi32(aa[c], _mm512_set1_epi32(32 * s16[s]));
				const __m512i ib = _mm512_sub_epi32(ab[c], _mm512_set1_epi32(32 * s16[8 + s]));
				itot[c] = _mm512_add_epi32(
				        itot[c], _mm512_add_epi32(_mm512_mullo_epi32(ia, sa), _mm512_mullo_epi32(ib, sb)));
			}
		}
		const __m512 dw = ld_f16x16(p);
#pragma GCC unroll 4
		for (int c = 0; c < C; c++)
			yv[c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(a[c].d[b])), _mm512_cvtepi32_ps(itot[c]),
			                        yv[c]);
	}
#pragma GCC unroll 8
	for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(yout + (size_t)c * ldy, km, yv[c]);
}

/* ---- instantiation and the driver ---------------------------------------------------------- */

typedef void (*qtile_fn)(float* y, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb, const unsigned char* act,
                         size_t as, int64_t n);

#define QT32(TN, TY, C)                                                                                  \
	static void qt_##TN##_##C(float* y, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb, \
	                          const unsigned char* act, size_t as, int64_t n)                        \
	{                                                                                                \
		tile32(TY, C, y, ldy, km, pan, nb, act, as, n);                                          \
	}
#define QTK(TN, TY, C)                                                                                   \
	static void qt_##TN##_##C(float* y, int ldy, __mmask16 km, const unsigned char* pan, int64_t nb, \
	                          const unsigned char* act, size_t as, int64_t n)                        \
	{                                                                                                \
		if (TY == PV_Q6_K)                                                                       \
			tileq6(C, y, ldy, km, pan, nb, act, as, n);                                      \
		else                                                                                     \
			tilek4(TY, C, y, ldy, km, pan, nb, act, as, n);                                  \
	}
#define QT32_ALL(TN, TY)                                                                                           \
	QT32(TN, TY, 1)                                                                                            \
	QT32(TN, TY, 2)                                                                                            \
	QT32(TN, TY, 3)                                                                                            \
	QT32(TN, TY, 4) QT32(TN, TY, 5) QT32(TN, TY, 6) QT32(TN, TY, 7)                                            \
	        QT32(TN, TY, 8) static const qtile_fn qt_##TN[CMAX + 1] = { NULL,        qt_##TN##_1, qt_##TN##_2, \
		                                                            qt_##TN##_3, qt_##TN##_4, qt_##TN##_5, \
		                                                            qt_##TN##_6, qt_##TN##_7, qt_##TN##_8 };
#define QTK_ALL(TN, TY) \
	QTK(TN, TY, 1)  \
	QTK(TN, TY, 2)  \
	QTK(TN, TY, 3)  \
	QTK(TN, TY, 4)  \
	static const qtile_fn qt_##TN[CMAX + 1] = { NULL, qt_##TN##_1, qt_##TN##_2, qt_##TN##_3, qt_##TN##_4 };

QT32_ALL(q8_0, PV_Q8_0)
QT32_ALL(q4_0, PV_Q4_0)
QT32_ALL(q4_1, PV_Q4_1)
QT32_ALL(q5_0, PV_Q5_0)
QT32_ALL(q5_1, PV_Q5_1)
QTK_ALL(q4_k, PV_Q4_K)
QTK_ALL(q5_k, PV_Q5_K)
QTK_ALL(q6_k, PV_Q6_K)

/* Panel bytes a block of panels may take so that it stays in L2 while every activation tile
 * passes over it (1-2 MiB of L2 per core here; the activation rows share it). */
#define L2_PANEL_BYTES (384 * 1024)

void pv_qgemm_avx512(enum pv_dtype t, float* y, int ldy, const void* act, size_t as, int T, const unsigned char* panels,
                     int64_t n, int64_t o0, int64_t o1)
{
	const qtile_fn* tiles;
	int cmax = CMAX;
	switch (t) {
	case PV_Q8_0: tiles = qt_q8_0; break;
	case PV_Q4_0: tiles = qt_q4_0; break;
	case PV_Q4_1: tiles = qt_q4_1; break;
	case PV_Q5_0: tiles = qt_q5_0; break;
	case PV_Q5_1: tiles = qt_q5_1; break;
	case PV_Q4_K:
		tiles = qt_q4_k;
		cmax = CMAXK;
		break;
	case PV_Q5_K:
		tiles = qt_q5_k;
		cmax = CMAXK;
		break;
	case PV_Q6_K:
		tiles = qt_q6_k;
		cmax = CMAXK;
		break;
	default: return;
	}
	const int64_t nb = n / pv_dtype_block(t);
	const size_t pbytes = pv_panel_bytes(t, n);
	const int64_t p0 = o0 / PV_PANEL, p1 = (o1 + PV_PANEL - 1) / PV_PANEL;
	int64_t blk = T <= cmax ? p1 - p0 : (int64_t)(L2_PANEL_BYTES / (pbytes ? pbytes : 1));
	if (blk < 1) blk = 1;
	for (int64_t pb0 = p0; pb0 < p1; pb0 += blk) {
		const int64_t pb1 = p1 - pb0 < blk ? p1 : pb0 + blk;
		for (int t0 = 0; t0 < T; t0 += cmax) {
			const int C = T - t0 < cmax ? T - t0 : cmax;
			for (int64_t p = pb0; p < pb1; p++) {
				const int64_t r0 = p * PV_PANEL;
				const int lo = o0 > r0 ? (int)(o0 - r0) : 0,
				          hi = o1 - r0 < PV_PANEL ? (int)(o1 - r0) : PV_PANEL;
				const __mmask16 km = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
				tiles[C](y + (size_t)t0 * ldy + r0, ldy, km, panels + (size_t)p * pbytes, nb,
				         (const unsigned char*)act + (size_t)t0 * as, as, n);
			}
		}
	}
}

/* ---- BF16 (vdpbf16ps) ------------------------------------------------------------------------ */

/* ((l0 + l8) + ...) then the 8-lane tree ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
INLINE float hsum16(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

#define BMAX_R 8
#define BMAX_C 4

/* R weight rows x C bf16 activation rows; y[c*ldy + r]. */
INLINE void bf_tile(int R, int C, float* y, int ldy, const uint16_t* x, size_t ldx, const uint16_t* w, size_t ldw, int64_t n)
{
	__m512 acc[BMAX_R][BMAX_C];
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
	int64_t i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512bh xv[BMAX_C];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) xv[c] = (__m512bh)_mm512_loadu_si512((const void*)(x + (size_t)c * ldx + i));
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void*)(w + (size_t)r * ldw + i));
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
		}
	}
	if (i < n) {
		const __mmask32 m = (__mmask32)((1ull << (n - i)) - 1);
		__m512bh xv[BMAX_C];
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) xv[c] = (__m512bh)_mm512_maskz_loadu_epi16(m, x + (size_t)c * ldx + i);
#pragma GCC unroll 8
		for (int r = 0; r < R; r++) {
			const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + (size_t)r * ldw + i);
#pragma GCC unroll 4
			for (int c = 0; c < C; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv, xv[c]);
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < R; r++)
#pragma GCC unroll 4
		for (int c = 0; c < C; c++) y[(size_t)c * ldy + r] = hsum16(acc[r][c]);
}

typedef void (*bf_fn)(float* y, int ldy, const uint16_t* x, size_t ldx, const uint16_t* w, size_t ldw, int64_t n);
#define BT(R, C)                                                                                                             \
	static void bt_##R##_##C(float* y, int ldy, const uint16_t* x, size_t ldx, const uint16_t* w, size_t ldw, int64_t n) \
	{                                                                                                                    \
		bf_tile(R, C, y, ldy, x, ldx, w, ldw, n);                                                                    \
	}
BT(1, 1)
BT(2, 1)
BT(3, 1)
BT(4, 1) BT(5, 1) BT(6, 1) BT(7, 1) BT(8, 1) BT(1, 2) BT(2, 2) BT(3, 2) BT(4, 2) BT(5, 2) BT(6, 2) BT(1, 3) BT(2, 3) BT(3, 3)
        BT(4, 3) BT(5, 3) BT(6, 3) BT(1, 4) BT(2, 4) BT(3, 4) BT(4, 4) BT(5, 4)
                BT(6, 4) static const bf_fn bts[BMAX_C + 1][BMAX_R + 1] = {
	                { NULL },
	                { NULL, bt_1_1, bt_2_1, bt_3_1, bt_4_1, bt_5_1, bt_6_1, bt_7_1, bt_8_1 },
	                { NULL, bt_1_2, bt_2_2, bt_3_2, bt_4_2, bt_5_2, bt_6_2 },
	                { NULL, bt_1_3, bt_2_3, bt_3_3, bt_4_3, bt_5_3, bt_6_3 },
	                { NULL, bt_1_4, bt_2_4, bt_3_4, bt_4_4, bt_5_4, bt_6_4 },
                };
static const int BR_FOR_C[BMAX_C + 1] = { 0, 8, 6, 6, 6 };

#define L2_BF_BYTES (256 * 1024)

void pv_bf16gemm_avx512(float* y, int ldy, const void* act, size_t as, int T, const uint16_t* w, size_t ldw, int64_t n,
                        int64_t o0, int64_t o1)
{
	const size_t ldx = as / 2;
	const uint16_t* x = act;
	int64_t blk = T <= BMAX_C ? o1 - o0 : (int64_t)(L2_BF_BYTES / (ldw ? 2 * ldw : 1));
	blk = blk >= 24 ? blk / 24 * 24 : blk < 1 ? 1 : blk;
	for (int64_t ob = o0; ob < o1; ob += blk) {
		const int64_t oe = o1 - ob < blk ? o1 : ob + blk;
		for (int t0 = 0; t0 < T; t0 += BMAX_C) {
			const int C = T - t0 < BMAX_C ? T - t0 : BMAX_C, R = BR_FOR_C[C];
			for (int64_t o = ob; o < oe; o += R) {
				const int r = oe - o < R ? (int)(oe - o) : R;
				bts[C][r](y + (size_t)t0 * ldy + o, ldy, x + (size_t)t0 * ldx, ldx, w + (size_t)o * ldw, ldw,
				          n);
			}
		}
	}
}

/* ---- activation conversion ------------------------------------------------------------------ */

void pv_act_convert_avx512(int fmt, const float* x, int ldx, int T, int64_t n, void* dst, size_t row_bytes)
{
	for (int t = 0; t < T; t++) {
		const float* xr = x + (size_t)t * ldx;
		unsigned char* out = (unsigned char*)dst + (size_t)t * row_bytes;
		if (fmt == PV_ACT_BF16) {
			uint16_t* o = (uint16_t*)(void*)out;
			int64_t i = 0;
			for (; i + 32 <= n; i += 32) {
				__m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + i + 16), _mm512_loadu_ps(xr + i));
				_mm512_storeu_si512((void*)(o + i), (__m512i)v);
			}
			for (; i < n; i++) o[i] = pv_f32_to_bf16_rne(xr[i]);
			continue;
		}
		const int blk = (int)pv_act_blk(fmt), sblk = (int)pv_act_sblk(fmt);
		struct pv_qrow r = pv_act_row(out, fmt, n);
		const __m512i absm = _mm512_set1_epi32(0x7fffffff);
		const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
		for (int64_t b = 0; b < n / blk; b++) {
			const float* xb = xr + b * blk;
			__m512i mx = _mm512_setzero_si512();
			for (int i = 0; i < blk; i += 16)
				mx = _mm512_max_epu32(mx, _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(xb + i)), absm));
			const uint32_t ab = _mm512_reduce_max_epu32(mx);
			float amax;
			memcpy(&amax, &ab, 4);
			r.d[b] = amax / 127.0f;
			const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
			int8_t* q = r.q + b * blk;
			for (int i = 0; i < blk; i += 16) {
				__m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + i), id);
				v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
				const __m512i qi = _mm512_cvtps_epi32(v);
				_mm_storeu_si128((__m128i*)(void*)(q + i), _mm512_cvtepi32_epi8(qi));
				if (sblk == 16) r.s[b * (blk / 16) + i / 16] = _mm512_reduce_add_epi32(qi);
			}
			if (sblk == 32) {
				const __m256i q32 = _mm256_loadu_si256((const __m256i*)(const void*)q);
				const __m512i w = _mm512_cvtepi8_epi16(q32);
				r.s[b] = _mm512_reduce_add_epi32(_mm512_madd_epi16(w, _mm512_set1_epi16(1)));
			}
		}
	}
}

#else
typedef int pv_qgemm_avx512_unused;
int pv_have_avx512_kernels(void) { return 0; }
#endif
