/*
 * qgemm_avx2.c: the AVX2 kernels of the fast numerics (this file alone is compiled with -mavx2
 * -mfma -mf16c; kernels.c calls it only after checking the CPU), over the same 16-row panels as
 * qgemm_avx512.c (cpu/qdot.h), taken as two halves of 8 rows: lane r of a 256-bit vector is row
 * 8h + r of the panel.
 *
 * The integer sums are exact as on AVX-512, with vpmaddubsw + vpmaddwd in place of vpdpbusd:
 * vpmaddubsw adds two u8 x s8 products into an int16 with saturation, which never happens here
 * (unsigned weights below 64 give at most 2 * 63 * 127; Q8_0 goes through |w| <= 128 and the
 * sign moved onto the activation, 2 * 128 * 127 < 32768), so every 4-element sum is exactly
 * vpdpbusd's. The float step per block is qdot.h's, in block order: these kernels give the same
 * bits as the AVX-512 ones and the portable reference.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kern.h"
#include "cpu/qdot.h"

#define INLINE static inline __attribute__((always_inline))

#define CMAX    4
#define PF_DIST 1024

INLINE __m256i bcast32(const int8_t* p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return _mm256_set1_epi32(v);
}
INLINE __m256 ld_f16x8(const unsigned char* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)p)); }
INLINE __m256i ld(const unsigned char* p) { return _mm256_loadu_si256((const __m256i*)(const void*)p); }
INLINE __m256i lo4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(15)); }
INLINE __m256i hi4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(15)); }
/* acc + the 4-element dot products of unsigned bytes w (< 64) with 4 activation bytes at x */
INLINE __m256i dp(__m256i acc, __m256i w, const int8_t* x)
{
	const __m256i p = _mm256_maddubs_epi16(w, bcast32(x));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
/* the same for signed bytes w (Q8_0): |w| times x with w's sign */
INLINE __m256i dps(__m256i acc, __m256i w, const int8_t* x)
{
	const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(bcast32(x), w));
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
/* bits 0..31 of m as bytes 0..31: 0x10 where set (the fifth bit of Q5 values), else 0 */
INLINE __m256i bits16(uint32_t m)
{
	const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
	                                     3, 3, 3, 3);
	const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
	__m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), sel);
	v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
	return _mm256_and_si256(v, _mm256_set1_epi8(16));
}
INLINE uint32_t mask32(const unsigned char* p, int h)
{
	uint32_t m;
	memcpy(&m, p + 4 * h, 4);
	return m;
}

/* ---- 32-element types -------------------------------------------------------------------- */

INLINE void tile32(enum pv_dtype TY, int C, int h, __m256* yv, const unsigned char* pan, int64_t nb, const unsigned char* act,
                   size_t as, int64_t n)
{
	const size_t pb = pv_panel_block_bytes(TY);
	const int has_m = TY == PV_Q4_1 || TY == PV_Q5_1;
	const int five = TY == PV_Q5_0 || TY == PV_Q5_1;
	const int bias = TY == PV_Q4_0 ? 8 : TY == PV_Q5_0 ? 16 : 0;
	const size_t vec_off = TY == PV_Q8_0 ? 32 : TY == PV_Q4_0 ? 32 : TY == PV_Q4_1 ? 64 : TY == PV_Q5_0 ? 96 : 128;
	const size_t mask_off = TY == PV_Q5_0 ? 32 : 64;
	struct pv_qrow a[CMAX];
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8, n);
		yv[c] = _mm256_setzero_ps();
	}
	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		_mm_prefetch((const char*)p + PF_DIST, _MM_HINT_T0);
		const __m256 dw = ld_f16x8(p + 16 * h);
		__m256i acc[CMAX];
		for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_si256();
		if (TY == PV_Q8_0) {
			for (int j = 0; j < 8; j++) {
				/* stored as q + 128: back to signed */
				const __m256i w =
				        _mm256_xor_si256(ld(p + vec_off + 64 * j + 32 * h), _mm256_set1_epi8((char)0x80));
				for (int c = 0; c < C; c++) acc[c] = dps(acc[c], w, a[c].q + 32 * b + 4 * j);
			}
		} else {
			for (int cc = 0; cc < 4; cc++) {
				const __m256i raw = ld(p + vec_off + 64 * cc + 32 * h);
				__m256i lo = lo4(raw), hi = hi4(raw);
				if (five) {
					lo = _mm256_or_si256(lo, bits16(mask32(p + mask_off + 8 * (2 * cc), h)));
					hi = _mm256_or_si256(hi, bits16(mask32(p + mask_off + 8 * (2 * cc + 1), h)));
				}
				for (int c = 0; c < C; c++) {
					acc[c] = dp(acc[c], lo, a[c].q + 32 * b + 4 * cc);
					acc[c] = dp(acc[c], hi, a[c].q + 32 * b + 16 + 4 * cc);
				}
			}
		}
		const __m256 mw = has_m ? ld_f16x8(p + 32 + 16 * h) : _mm256_setzero_ps();
		for (int c = 0; c < C; c++) {
			const int32_t s = a[c].s[b];
			__m256i I = acc[c];
			if (bias) I = _mm256_sub_epi32(I, _mm256_set1_epi32(bias * s));
			const __m256 dx = _mm256_set1_ps(a[c].d[b]);
			yv[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(I), yv[c]);
			if (has_m) yv[c] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps((float)s), yv[c]);
		}
	}
}

/* ---- Q4_K, Q5_K ---------------------------------------------------------------------------- */

INLINE void tilek4(enum pv_dtype TY, int C, int h, __m256* yv, const unsigned char* pan, int64_t nb, const unsigned char* act,
                   size_t as, int64_t n)
{
	const size_t pb = pv_panel_block_bytes(TY);
	const int five = TY == PV_Q5_K;
	const size_t vec_off = five ? 768 : 256;
	struct pv_qrow a[CMAX];
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8K, n);
		yv[c] = _mm256_setzero_ps();
	}
	const __m256i m63 = _mm256_set1_epi32(63), m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3);
	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		for (size_t k = 0; k < pb; k += 512) _mm_prefetch((const char*)p + PF_DIST + k, _MM_HINT_T0);
		const __m256i A = ld(p + 64 + 32 * h), B = ld(p + 128 + 32 * h), Cc = ld(p + 192 + 32 * h);
		__m256i sc[8], mn[8];
		for (int s = 0; s < 4; s++) {
			sc[s] = _mm256_and_si256(_mm256_srli_epi32(A, 8 * s), m63);
			mn[s] = _mm256_and_si256(_mm256_srli_epi32(B, 8 * s), m63);
			sc[4 + s] =
			        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(Cc, 8 * s), m15),
			                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(A, 8 * s + 6), m3), 4));
			mn[4 + s] =
			        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(Cc, 8 * s + 4), m15),
			                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(B, 8 * s + 6), m3), 4));
		}
		__m256i itot[CMAX];
		for (int c = 0; c < C; c++) itot[c] = _mm256_setzero_si256();
		for (int i = 0; i < 4; i++) {
			__m256i alo[CMAX], ahi[CMAX];
			for (int c = 0; c < C; c++) alo[c] = ahi[c] = _mm256_setzero_si256();
			for (int k = 0; k < 8; k++) {
				const __m256i raw = ld(p + vec_off + 64 * (8 * i + k) + 32 * h);
				__m256i lo = lo4(raw), hi = hi4(raw);
				if (five) {
					lo = _mm256_or_si256(lo, bits16(mask32(p + 256 + 8 * (2 * (8 * i + k)), h)));
					hi = _mm256_or_si256(hi, bits16(mask32(p + 256 + 8 * (2 * (8 * i + k) + 1), h)));
				}
				for (int c = 0; c < C; c++) {
					const int8_t* x = a[c].q + 256 * b + 64 * i + 4 * k;
					alo[c] = dp(alo[c], lo, x);
					ahi[c] = dp(ahi[c], hi, x + 32);
				}
			}
			for (int c = 0; c < C; c++)
				itot[c] =
				        _mm256_add_epi32(itot[c], _mm256_add_epi32(_mm256_mullo_epi32(alo[c], sc[2 * i]),
				                                                   _mm256_mullo_epi32(ahi[c], sc[2 * i + 1])));
		}
		const __m256 dw = ld_f16x8(p + 16 * h), mw = ld_f16x8(p + 32 + 16 * h);
		for (int c = 0; c < C; c++) {
			const int32_t* s16 = a[c].s + 16 * b;
			__m256i M = _mm256_setzero_si256();
			for (int s = 0; s < 8; s++)
				M = _mm256_add_epi32(M,
				                     _mm256_mullo_epi32(mn[s], _mm256_set1_epi32(s16[2 * s] + s16[2 * s + 1])));
			const __m256 dx = _mm256_set1_ps(a[c].d[b]);
			yv[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(itot[c]), yv[c]);
			yv[c] = _mm256_fnmadd_ps(_mm256_mul_ps(mw, dx), _mm256_cvtepi32_ps(M), yv[c]);
		}
	}
}

/* ---- Q6_K ---------------------------------------------------------------------------------- */

INLINE void tileq6(int C, int h, __m256* yv, const unsigned char* pan, int64_t nb, const unsigned char* act, size_t as,
                   int64_t n)
{
	const size_t pb = pv_panel_block_bytes(PV_Q6_K);
	struct pv_qrow a[CMAX];
	for (int c = 0; c < C; c++) {
		a[c] = pv_act_row((void*)(act + (size_t)c * as), PV_ACT_Q8K, n);
		yv[c] = _mm256_setzero_ps();
	}
	const __m256i m30 = _mm256_set1_epi8(0x30);
	for (int64_t b = 0; b < nb; b++) {
		const unsigned char* p = pan + (size_t)b * pb;
		for (size_t k = 0; k < pb; k += 512) _mm_prefetch((const char*)p + PF_DIST + k, _MM_HINT_T0);
		__m256i itot[CMAX];
		for (int c = 0; c < C; c++) itot[c] = _mm256_setzero_si256();
		for (int s = 0; s < 8; s++) {
			__m256i aa[CMAX], ab[CMAX];
			for (int c = 0; c < C; c++) aa[c] = ab[c] = _mm256_setzero_si256();
			for (int vv = 0; vv < 2; vv++) {
				const int v = 2 * s + vv;
				const __m256i qh = ld(p + 288 + 64 * v + 32 * h);
				const __m256i r0 = ld(p + 1312 + 64 * (2 * v) + 32 * h),
				              r1 = ld(p + 1312 + 64 * (2 * v + 1) + 32 * h);
				const __m256i l0 = _mm256_or_si256(lo4(r0), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
				const __m256i h0 = _mm256_or_si256(hi4(r0), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
				const __m256i l1 = _mm256_or_si256(lo4(r1), _mm256_and_si256(qh, m30));
				const __m256i h1 = _mm256_or_si256(hi4(r1), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
				for (int c = 0; c < C; c++) {
					const int8_t* x = a[c].q + 256 * b + 8 * v;
					aa[c] = dp(aa[c], l0, x);
					aa[c] = dp(aa[c], l1, x + 4);
					ab[c] = dp(ab[c], h0, x + 128);
					ab[c] = dp(ab[c], h1, x + 132);
				}
			}
			const __m256i sa =
			        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)(p + 32 + 16 * s + 8 * h)));
			const __m256i sb = _mm256_cvtepi8_epi32(
			        _mm_loadl_epi64((const __m128i*)(const void*)(p + 32 + 16 * (8 + s) + 8 * h)));
			for (int c = 0; c < C; c++) {
				const int32_t* s16 = a[c].s + 16 * b;
				const __m256i ia = _mm256_sub_epi32(aa[c], _mm256_set1_epi32(32 * s16[s]));
				const __m256i ib = _mm256_sub_epi32(ab[c], _mm256_set1_epi32(32 * s16[8 + s]));
				itot[c] = _mm256_add_epi32(
				        itot[c], _mm256_add_epi32(_mm256_mullo_epi32(ia, sa), _mm256_mullo_epi32(ib, sb)));
			}
		}
		const __m256 dw = ld_f16x8(p + 16 * h);
		for (int c = 0; c < C; c++)
			yv[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(a[c].d[b])), _mm256_cvtepi32_ps(itot[c]),
			                        yv[c]);
	}
}

/* ---- instantiation and the driver ---------------------------------------------------------- */

typedef void (*qtile_fn)(float* y, int ldy, int lo, int hi, const unsigned char* pan, int64_t nb, const unsigned char* act,
                         size_t as, int64_t n);

/* Stores lanes [lo, hi) of the half's 8 outputs for each of the C rows. */
INLINE void store8(float* y, int ldy, int lo, int hi, int C, const __m256* yv)
{
	for (int c = 0; c < C; c++) {
		_Alignas(32) float tmp[8];
		_mm256_store_ps(tmp, yv[c]);
		for (int r = lo; r < hi; r++) y[(size_t)c * ldy + r] = tmp[r];
	}
}

#define QT(TN, TY, C)                                                                                      \
	static void qt_##TN##_##C(float* y, int ldy, int lo, int hi, const unsigned char* pan, int64_t nb, \
	                          const unsigned char* act, size_t as, int64_t n)                          \
	{                                                                                                  \
		for (int h = 0; h < 2; h++) {                                                              \
			const int l = lo > 8 * h ? lo - 8 * h : 0, e = hi < 8 * h + 8 ? hi - 8 * h : 8;    \
			if (l >= e) continue;                                                              \
			__m256 yv[CMAX];                                                                   \
			if (TY == PV_Q6_K)                                                                 \
				tileq6(C, h, yv, pan, nb, act, as, n);                                     \
			else if (TY == PV_Q4_K || TY == PV_Q5_K)                                           \
				tilek4(TY, C, h, yv, pan, nb, act, as, n);                                 \
			else                                                                               \
				tile32(TY, C, h, yv, pan, nb, act, as, n);                                 \
			store8(y + 8 * h, ldy, l, e, C, yv);                                               \
		}                                                                                          \
	}
#define QT_ALL(TN, TY) \
	QT(TN, TY, 1)  \
	QT(TN, TY, 2)  \
	QT(TN, TY, 3)  \
	QT(TN, TY, 4)  \
	static const qtile_fn qt_##TN[CMAX + 1] = { NULL, qt_##TN##_1, qt_##TN##_2, qt_##TN##_3, qt_##TN##_4 };

QT_ALL(q8_0, PV_Q8_0)
QT_ALL(q4_0, PV_Q4_0)
QT_ALL(q4_1, PV_Q4_1)
QT_ALL(q5_0, PV_Q5_0)
QT_ALL(q5_1, PV_Q5_1)
QT_ALL(q4_k, PV_Q4_K)
QT_ALL(q5_k, PV_Q5_K)
QT_ALL(q6_k, PV_Q6_K)

#define L2_PANEL_BYTES (256 * 1024)

void pv_qgemm_avx2(enum pv_dtype t, float* y, int ldy, const void* act, size_t as, int T, const unsigned char* panels,
                   int64_t n, int64_t o0, int64_t o1)
{
	const qtile_fn* tiles;
	switch (t) {
	case PV_Q8_0: tiles = qt_q8_0; break;
	case PV_Q4_0: tiles = qt_q4_0; break;
	case PV_Q4_1: tiles = qt_q4_1; break;
	case PV_Q5_0: tiles = qt_q5_0; break;
	case PV_Q5_1: tiles = qt_q5_1; break;
	case PV_Q4_K: tiles = qt_q4_k; break;
	case PV_Q5_K: tiles = qt_q5_k; break;
	case PV_Q6_K: tiles = qt_q6_k; break;
	default: return;
	}
	const int64_t nb = n / pv_dtype_block(t);
	const size_t pbytes = pv_panel_bytes(t, n);
	const int64_t p0 = o0 / PV_PANEL, p1 = (o1 + PV_PANEL - 1) / PV_PANEL;
	int64_t blk = T <= CMAX ? p1 - p0 : (int64_t)(L2_PANEL_BYTES / (pbytes ? pbytes : 1));
	if (blk < 1) blk = 1;
	for (int64_t pb0 = p0; pb0 < p1; pb0 += blk) {
		const int64_t pb1 = p1 - pb0 < blk ? p1 : pb0 + blk;
		for (int t0 = 0; t0 < T; t0 += CMAX) {
			const int C = T - t0 < CMAX ? T - t0 : CMAX;
			for (int64_t p = pb0; p < pb1; p++) {
				const int64_t r0 = p * PV_PANEL;
				const int lo = o0 > r0 ? (int)(o0 - r0) : 0,
				          hi = o1 - r0 < PV_PANEL ? (int)(o1 - r0) : PV_PANEL;
				tiles[C](y + (size_t)t0 * ldy + r0, ldy, lo, hi, panels + (size_t)p * pbytes, nb,
				         (const unsigned char*)act + (size_t)t0 * as, as, n);
			}
		}
	}
}

#else
typedef int pv_qgemm_avx2_unused;
#endif
