/*
 * attn_avx512.c: causal attention and the SwiGLU gate of the AVX-512 kernel set (this file alone
 * is compiled with the AVX-512 flags; forward.c calls it only for models whose kernel set is
 * avx512).
 *
 * Attention, per query row t (position pos_t) and head h (key/value head h / G):
 *   keys are taken in blocks of 16 from position 0 (the last block partial), and for each block
 *     s_j  = (sum_d q_d k_jd) * scale       d in increasing order, two fma chains (even, odd d)
 *                                             added at the end
 *     m'   = max(m, max_j s_j)               (m = -inf before the first block)
 *     a    = exp(m - m'),  p_j = exp(s_j - m')
 *     l    = l a + sum_j p_j                 (the 16 lanes summed in a fixed tree)
 *     o    = o a, then o += p_j v_j          j in increasing order, one fma each
 *   and finally o / l.
 * exp is the polynomial below (within 2 ulp of expf; exactly 1 at 0, exactly 0 at -inf).
 * Nothing in this depends on which other rows or heads a task holds, so one row computed alone
 * (decode) and the same row inside a prompt give the same bits: the kernel set's attention is
 * batch-invariant, and a task only shares the transposed key block and the value rows (from the
 * cache) among its rows and the G heads of one key/value head.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kern.h"
#include "cpu/state.h"

#define INLINE static inline __attribute__((always_inline))

/* exp(x): Cephes' expf polynomial on x - n ln2 (n = floor(x log2 e + 1/2)), scaled by 2^n;
 * 0 below -88.38 (subnormal results) and for -inf, +inf above ln(FLT_MAX). */
INLINE __m512 exp512(__m512 x)
{
	/* hi: ln(FLT_MAX) (vscalefps scales without an intermediate overflow); lo: where expf's
	 * results turn subnormal, which are flushed to 0 here */
	const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo = _mm512_set1_ps(-88.3762626647949f);
	const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
	const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
	__m512 v = _mm512_max_ps(_mm512_min_ps(x, hi), lo);
	const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
	                                      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
	v = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);
	v = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), v);
	__m512 y = _mm512_set1_ps(1.9875691500E-4f);
	y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(1.3981999507E-3f));
	y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(8.3334519073E-3f));
	y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(4.1665795894E-2f));
	y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(1.6666665459E-1f));
	y = _mm512_fmadd_ps(y, v, _mm512_set1_ps(5.0000001201E-1f));
	y = _mm512_fmadd_ps(y, _mm512_mul_ps(v, v), _mm512_add_ps(v, _mm512_set1_ps(1.0f)));
	y = _mm512_scalef_ps(y, n);
	y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
	return _mm512_mask_blend_ps(over, y, _mm512_set1_ps(INFINITY));
}

/* ((l0 + l8) + ...) then ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
INLINE float hsum16(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Transposes rows k[0..nk) (row stride ld floats, hd floats each, hd a multiple of 16) into
 * kt[d*16 + j]; rows nk..15 read as zeros (nothing past row nk is touched). */
static void transpose_block(float* kt, const float* k, size_t ld, int nk, int hd)
{
	for (int d0 = 0; d0 < hd; d0 += 16) {
		__m512 r[16], t[16], u[4][4];
		for (int j = 0; j < 16; j++) r[j] = j < nk ? _mm512_loadu_ps(k + (size_t)j * ld + d0) : _mm512_setzero_ps();
		/* per 128-bit lane L: t[2i] = (r2i[4L], r2i+1[4L], r2i[4L+1], r2i+1[4L+1]), t[2i+1] the same
		 * for 4L+2, 4L+3 */
		for (int i = 0; i < 8; i++) {
			t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
			t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
		}
		/* u[q][c]: lane L holds column 4L + c of rows 4q..4q+3 */
		for (int q = 0; q < 4; q++) {
			const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 1]);
			const __m512d c = _mm512_castps_pd(t[4 * q + 2]), e = _mm512_castps_pd(t[4 * q + 3]);
			u[q][0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
			u[q][1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
			u[q][2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
			u[q][3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
		}
		/* column 4L + c = 128-bit lane L of u[0..3][c], gathered by two shuffle rounds */
		for (int c = 0; c < 4; c++) {
			const __m512 v0 = _mm512_shuffle_f32x4(u[0][c], u[1][c], 0x88),
			             v1 = _mm512_shuffle_f32x4(u[0][c], u[1][c], 0xdd);
			const __m512 v2 = _mm512_shuffle_f32x4(u[2][c], u[3][c], 0x88),
			             v3 = _mm512_shuffle_f32x4(u[2][c], u[3][c], 0xdd);
			_mm512_storeu_ps(kt + (size_t)(d0 + c) * 16, _mm512_shuffle_f32x4(v0, v2, 0x88));
			_mm512_storeu_ps(kt + (size_t)(d0 + 4 + c) * 16, _mm512_shuffle_f32x4(v1, v3, 0x88));
			_mm512_storeu_ps(kt + (size_t)(d0 + 8 + c) * 16, _mm512_shuffle_f32x4(v0, v2, 0xdd));
			_mm512_storeu_ps(kt + (size_t)(d0 + 12 + c) * 16, _mm512_shuffle_f32x4(v1, v3, 0xdd));
		}
	}
}

/*
 * Rows t0 .. t0+nt-1 of q (row stride ldq; heads hd apart) against the cache kc / vc (rows of
 * rb bytes in element type dt, head slices pv_kv_head_bytes apart: kvcache.c), for the G heads
 * kvh*G .. kvh*G+G-1 that share key/value head kvh; row t sees positions 0 .. pos0 + t. Output
 * rows o (row stride ldo). ws: per-thread scratch of pv_attn_avx512_scratch(nt, G, hd, dt)
 * floats. A non-f32 cache's block of 16 keys and values is converted to f32 first (exactly:
 * the values pv_kv_load gives), then the f32 arithmetic runs unchanged.
 */
size_t pv_attn_avx512_scratch(int nt, int G, int hd, int dt)
{
	return (size_t)16 * hd + (size_t)nt * G * (hd + 2) + 16 + (dt != PV_F32 ? (size_t)32 * hd : 0);
}

/* Rows [0, nk) of one head's slices in a non-f32 cache (row stride rb bytes) to f32 dst [nk, hd]
 * (hd a multiple of 16): f16 by vcvtph2ps, bf16 by a shift, q8_0 as d * q per 32-block (the
 * last block of a head may hold 16). */
static void load_block(int dt, const unsigned char* src, size_t rb, int nk, int hd, float* dst)
{
	for (int j = 0; j < nk; j++) {
		const unsigned char* r = src + (size_t)j * rb;
		float* y = dst + (size_t)j * hd;
		if (dt == PV_F16) {
			for (int d = 0; d < hd; d += 16)
				_mm512_storeu_ps(y + d, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(const void*)(r + 2 * d))));
		} else if (dt == PV_BF16) {
			for (int d = 0; d < hd; d += 16) {
				const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(r + 2 * d)));
				_mm512_storeu_ps(y + d, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
			}
		} else {
			for (int b = 0; b < hd; b += 32) {
				const unsigned char* q = r + (size_t)b / 32 * 34;
				uint16_t h;
				memcpy(&h, q, 2);
				const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
				for (int i = 0; i < 32 && b + i < hd; i += 16) {
					const __m512i qi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(const void*)(q + 2 + i)));
					_mm512_storeu_ps(y + b + i, _mm512_mul_ps(d, _mm512_cvtepi32_ps(qi)));
				}
			}
		}
	}
}

/* One key block for HG heads of one row: scores, the online-softmax update and the value
 * accumulation; NC = hd / 16. The loops interleave the heads and chunks (independent chains);
 * each output element still sees the order in the header. */
INLINE void block_heads(int HG, int NC, const float* const* qv, const float* kt, const float* V, size_t kvd, int valid,
                        float* const* ml, float* const* ov, __m512 vscale)
{
	const __mmask16 vm = (__mmask16)((1u << valid) - 1u);
	__m512 s0[4], s1[4];
#pragma GCC unroll 4
	for (int h = 0; h < HG; h++) s0[h] = s1[h] = _mm512_setzero_ps();
	for (int d = 0; d < 16 * NC; d += 2) {
		const __m512 k0 = _mm512_loadu_ps(kt + (size_t)d * 16), k1 = _mm512_loadu_ps(kt + (size_t)(d + 1) * 16);
#pragma GCC unroll 4
		for (int h = 0; h < HG; h++) {
			s0[h] = _mm512_fmadd_ps(_mm512_set1_ps(qv[h][d]), k0, s0[h]);
			s1[h] = _mm512_fmadd_ps(_mm512_set1_ps(qv[h][d + 1]), k1, s1[h]);
		}
	}
	_Alignas(64) float pj[4][16];
	__m512 va[4];
#pragma GCC unroll 4
	for (int h = 0; h < HG; h++) {
		const __m512 sc =
		        _mm512_mask_blend_ps(vm, _mm512_set1_ps(-INFINITY), _mm512_mul_ps(_mm512_add_ps(s0[h], s1[h]), vscale));
		const float m = ml[h][0], mb = _mm512_reduce_max_ps(sc), mn = m > mb ? m : mb;
		const float a = _mm_cvtss_f32(_mm512_castps512_ps128(exp512(_mm512_set1_ps(m - mn))));
		const __m512 pv = exp512(_mm512_sub_ps(sc, _mm512_set1_ps(mn)));
		ml[h][0] = mn;
		ml[h][1] = ml[h][1] * a + hsum16(pv);
		_mm512_store_ps(pj[h], pv);
		va[h] = _mm512_set1_ps(a);
	}
	__m512 acc[4][16];
#pragma GCC unroll 4
	for (int h = 0; h < HG; h++)
#pragma GCC unroll 16
		for (int c = 0; c < NC; c++) acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(ov[h] + 16 * c), va[h]);
	for (int j = 0; j < valid; j++) {
		const float* vr = V + (size_t)j * kvd;
#pragma GCC unroll 16
		for (int c = 0; c < NC; c++) {
			const __m512 v = _mm512_loadu_ps(vr + 16 * c);
#pragma GCC unroll 4
			for (int h = 0; h < HG; h++) acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(pj[h][j]), v, acc[h][c]);
		}
	}
#pragma GCC unroll 4
	for (int h = 0; h < HG; h++)
#pragma GCC unroll 16
		for (int c = 0; c < NC; c++) _mm512_storeu_ps(ov[h] + 16 * c, acc[h][c]);
}

typedef void (*block_fn)(const float* const* qv, const float* kt, const float* V, size_t kvd, int valid, float* const* ml,
                         float* const* ov, __m512 vscale);
#define BLK(HG, NC)                                                                                                 \
	static void blk_##HG##_##NC(const float* const* qv, const float* kt, const float* V, size_t kvd, int valid, \
	                            float* const* ml, float* const* ov, __m512 vscale)                              \
	{                                                                                                           \
		block_heads(HG, NC, qv, kt, V, kvd, valid, ml, ov, vscale);                                         \
	}
BLK(1, 1)
BLK(2, 1)
BLK(3, 1)
BLK(4, 1)
BLK(1, 2) BLK(2, 2) BLK(3, 2) BLK(4, 2) BLK(1, 4) BLK(2, 4) BLK(3, 4) BLK(4, 4) BLK(1, 8) BLK(2, 8) BLK(1, 16)

        /* Heads per call for a head size (HG x NC accumulators fit the registers), and the functions. */
        static int heads_per_call(int nc)
{
	return nc <= 4 ? 4 : nc <= 8 ? 2 : 1;
}
static block_fn block_for(int hg, int nc)
{
	static const block_fn f1[5] = { NULL, blk_1_1, blk_2_1, blk_3_1, blk_4_1 };
	static const block_fn f2[5] = { NULL, blk_1_2, blk_2_2, blk_3_2, blk_4_2 };
	static const block_fn f4[5] = { NULL, blk_1_4, blk_2_4, blk_3_4, blk_4_4 };
	static const block_fn f8[3] = { NULL, blk_1_8, blk_2_8 };
	switch (nc) {
	case 1: return f1[hg];
	case 2: return f2[hg];
	case 4: return f4[hg];
	case 8: return f8[hg];
	case 16: return blk_1_16;
	default: return NULL;
	}
}

int pv_attn_avx512_ok(int hd) { return hd > 0 && hd % 16 == 0 && block_for(1, hd / 16) != NULL; }

void pv_attn_avx512(const float* q, int ldq, float* o, int ldo, const unsigned char* kc, const unsigned char* vc, int dt,
                    size_t rb, int hd, int G, int kvh, int t0, int nt, int pos0, float scale, float* ws)
{
	float* kt = ws;                       /* [hd][16] the transposed key block */
	float* ml = kt + (size_t)16 * hd;     /* [nt*G][2] running max and sum    */
	float* acc = ml + (size_t)2 * nt * G; /* [nt*G][hd] running output        */
	float* kb = acc + (size_t)nt * G * hd; /* [16][hd] keys, then [16][hd] values, as f32 (non-f32 dt) */
	float* vb = kb + (size_t)16 * hd;
	const int P = nt * G, nc = hd / 16, hgmax = heads_per_call(nc);
	for (int p = 0; p < P; p++) {
		ml[2 * p] = -INFINITY;
		ml[2 * p + 1] = 0.0f;
	}
	memset(acc, 0, sizeof(float) * (size_t)P * hd);
	const size_t hb = pv_kv_head_bytes(dt, hd);
	const unsigned char* K = kc + (size_t)kvh * hb;
	const unsigned char* Vc = vc + (size_t)kvh * hb;
	const int last = pos0 + t0 + nt - 1; /* the last row's position */
	const __m512 vscale = _mm512_set1_ps(scale);
	for (int j0 = 0; j0 <= last; j0 += 16) {
		const int nk = last + 1 - j0 < 16 ? last + 1 - j0 : 16;
		/* this block's keys and values as f32 rows, kvd floats apart */
		const float *Kb, *V;
		size_t kvd;
		if (dt == PV_F32) {
			Kb = (const float*)(const void*)(K + (size_t)j0 * rb);
			V = (const float*)(const void*)(Vc + (size_t)j0 * rb);
			kvd = rb / sizeof(float);
		} else {
			load_block(dt, K + (size_t)j0 * rb, rb, nk, hd, kb);
			load_block(dt, Vc + (size_t)j0 * rb, rb, nk, hd, vb);
			Kb = kb;
			V = vb;
			kvd = (size_t)hd;
		}
		transpose_block(kt, Kb, kvd, nk, hd);
		for (int t = 0; t < nt; t++) {
			const int pos = pos0 + t0 + t;
			if (pos < j0) continue;
			const int valid = pos + 1 - j0 < 16 ? pos + 1 - j0 : 16;
			for (int g0 = 0; g0 < G; g0 += hgmax) {
				const int hg = G - g0 < hgmax ? G - g0 : hgmax;
				const float* qv[4];
				float *mlp[4], *ov[4];
				for (int h = 0; h < hg; h++) {
					const int pi = t * G + g0 + h;
					qv[h] = q + (size_t)(t0 + t) * ldq + (size_t)(kvh * G + g0 + h) * hd;
					mlp[h] = ml + 2 * pi;
					ov[h] = acc + (size_t)pi * hd;
				}
				block_for(hg, nc)(qv, kt, V, kvd, valid, mlp, ov, vscale);
			}
		}
	}
	for (int t = 0; t < nt; t++)
		for (int g = 0; g < G; g++) {
			const int pi = t * G + g;
			const __m512 l = _mm512_set1_ps(ml[2 * pi + 1]);
			float* dst = o + (size_t)(t0 + t) * ldo + (size_t)(kvh * G + g) * hd;
			for (int c = 0; c < nc; c++)
				_mm512_storeu_ps(dst + 16 * c,
				                 _mm512_div_ps(_mm512_loadu_ps(acc + (size_t)pi * hd + 16 * c), l));
		}
}

/* g[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u, n elements. */
void pv_swiglu_avx512(float* g, const float* u, size_t n)
{
	size_t i = 0;
	const __m512 one = _mm512_set1_ps(1.0f);
	for (; i + 16 <= n; i += 16) {
		const __m512 x = _mm512_loadu_ps(g + i);
		const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
		_mm512_storeu_ps(g + i, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
	}
	if (i < n) {
		const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
		const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
		_mm512_mask_storeu_ps(g + i, m,
		                      _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, u + i)));
	}
}

/* pv_argmax's answer (engine/session.c: the first index whose value beats every earlier one,
 * NaNs never win, index 0 when x[0] is a NaN) in two vector passes: the largest non-NaN value,
 * then its first index. */
int pv_argmax_avx512(const float* x, int n)
{
	if (n <= 0 || x[0] != x[0]) return 0;
	__m512 mx = _mm512_set1_ps(x[0]);
	int i = 0;
	for (; i + 16 <= n; i += 16) mx = _mm512_max_ps(_mm512_loadu_ps(x + i), mx); /* a NaN load keeps mx */
	float m = _mm512_reduce_max_ps(mx);
	for (; i < n; i++) m = x[i] > m ? x[i] : m;
	const __m512 mv = _mm512_set1_ps(m);
	for (i = 0; i + 16 <= n; i += 16) {
		const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), mv, _CMP_EQ_OQ);
		if (eq) return i + __builtin_ctz(eq);
	}
	for (; i < n; i++)
		if (x[i] == m) return i;
	return 0;
}

/* y[i] = fma(a, x[i], y[i]): per element the avx2 set's axpy, 16 at a time. */
void pv_axpy_f32_avx512(float* y, float a, const float* x, int n)
{
	const __m512 av = _mm512_set1_ps(a);
	int i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
	if (i < n) {
		const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(y + i, m,
		                      _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
	}
}

/* sum a[i] b[i]: 16 lanes of fmas over 16-element blocks in order (the last zero-padded), then
 * hsum16's tree. */
float pv_dot_f32_avx512(const float* a, const float* b, int n)
{
	__m512 acc = _mm512_setzero_ps();
	int i = 0;
	for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
	if (i < n) {
		const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
	}
	return hsum16(acc);
}

/* exp of n floats in place (tests). */
void pv_exp_avx512(float* x, size_t n)
{
	for (size_t i = 0; i < n; i += 16) {
		const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(x + i, m, exp512(_mm512_maskz_loadu_ps(m, x + i)));
	}
}

#else
/* Not x86: never called (no model gets the avx512 kernel set); the symbols keep the link whole. */
#include "cpu/kern.h"
size_t pv_attn_avx512_scratch(int nt, int G, int hd, int dt) { return 0; }
int pv_attn_avx512_ok(int hd) { return 0; }
void pv_attn_avx512(const float* q, int ldq, float* o, int ldo, const unsigned char* kc, const unsigned char* vc, int dt,
                    size_t rb, int hd, int G, int kvh, int t0, int nt, int pos0, float scale, float* ws)
{
}
void pv_swiglu_avx512(float* g, const float* u, size_t n) {}
void pv_exp_avx512(float* x, size_t n) {}
int pv_argmax_avx512(const float* x, int n) { return 0; }
void pv_axpy_f32_avx512(float* y, float a, const float* x, int n) {}
float pv_dot_f32_avx512(const float* a, const float* b, int n) { return 0; }
#endif
