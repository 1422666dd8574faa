/*
 * deltanet_avx512.c: the Gated DeltaNet steps of the AVX-512 kernel set (this file alone is
 * compiled with the AVX-512 flags; deltanet.c calls it only for models whose kernel set is
 * avx512).
 *
 * The recurrent step performs, element by element, the same operations in the same order as
 * deltanet.c's recurrent form with the AVX2 axpy (a multiply for the decay, one fma per
 * element of each axpy, rows i in increasing order), so the avx2 and avx512 sets agree bitwise
 * there; it only fuses the passes and keeps the dv-long vectors in registers. The causal
 * convolution and the gates use fmas and the vector exp (attn_avx512.c's polynomial), in a
 * fixed order per element: the same for a row alone or in a batch.
 */
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kern.h"

#define INLINE static inline __attribute__((always_inline))

/* exp as attn_avx512.c (the same constants and steps). */
INLINE __m512 exp512(__m512 x)
{
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

INLINE __m512 silu512(__m512 x)
{
	return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

#define MAXC 16 /* dv / 16 held in registers: dv up to 256 */

int pv_delta_avx512_ok(int dv, int cd, int K) { return dv > 0 && dv % 16 == 0 && dv / 16 <= MAXC && cd % 16 == 0 && K <= 8; }

INLINE void step(int NC, float* S, int dk, const float* q, const float* k, const float* v, float decay, float beta, float* o)
{
	__m512 m[MAXC], d[MAXC];
	const __m512 dec = _mm512_set1_ps(decay);
#pragma GCC unroll 16
	for (int c = 0; c < NC; c++) m[c] = _mm512_setzero_ps();
	for (int i = 0; i < dk; i++) {
		float* Si = S + (size_t)i * 16 * NC;
		const __m512 ki = _mm512_set1_ps(k[i]);
#pragma GCC unroll 16
		for (int c = 0; c < NC; c++) {
			const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(Si + 16 * c), dec);
			_mm512_storeu_ps(Si + 16 * c, s);
			m[c] = _mm512_fmadd_ps(ki, s, m[c]);
		}
	}
	const __m512 b = _mm512_set1_ps(beta);
#pragma GCC unroll 16
	for (int c = 0; c < NC; c++) {
		d[c] = _mm512_mul_ps(b, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * c), m[c]));
		m[c] = _mm512_setzero_ps(); /* now the output */
	}
	for (int i = 0; i < dk; i++) {
		float* Si = S + (size_t)i * 16 * NC;
		const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
#pragma GCC unroll 16
		for (int c = 0; c < NC; c++) {
			const __m512 s = _mm512_fmadd_ps(ki, d[c], _mm512_loadu_ps(Si + 16 * c));
			_mm512_storeu_ps(Si + 16 * c, s);
			m[c] = _mm512_fmadd_ps(qi, s, m[c]);
		}
	}
#pragma GCC unroll 16
	for (int c = 0; c < NC; c++) _mm512_storeu_ps(o + 16 * c, m[c]);
}

#define STEP(NC)                                                                                                         \
	static void step_##NC(float* S, int dk, const float* q, const float* k, const float* v, float decay, float beta, \
	                      float* o)                                                                                  \
	{                                                                                                                \
		step(NC, S, dk, q, k, v, decay, beta, o);                                                                \
	}
STEP(1)
STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11) STEP(12) STEP(13) STEP(14) STEP(15) STEP(16)

        void pv_delta_step_avx512(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay,
                                  float beta, float* o)
{
	typedef void (*fn)(float*, int, const float*, const float*, const float*, float, float, float*);
	static const fn f[MAXC + 1] = { NULL,   step_1,  step_2,  step_3,  step_4,  step_5,  step_6,  step_7, step_8,
		                        step_9, step_10, step_11, step_12, step_13, step_14, step_15, step_16 };
	f[dv / 16](S, dk, q, k, v, decay, beta, o);
}

/* out[t][ch] = silu(sum_tau w[ch][tau] x[t - P + tau][ch]), rows before 0 from state; fmas in
 * tau order. cd a multiple of 16. */
void pv_conv_silu_avx512(const float* state, const float* conv_w, const float* mixed, float* out, int n, int cd, int K)
{
	const int P = K - 1;
	const __m512i lane = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
	                                        _mm512_set1_epi32(K));
	for (int ch = 0; ch < cd; ch += 16) {
		__m512 w[8];
		for (int tau = 0; tau < K; tau++) w[tau] = _mm512_i32gather_ps(lane, conv_w + (size_t)ch * K + tau, 4);
		for (int t = 0; t < n; t++) {
			__m512 acc = _mm512_setzero_ps();
			for (int tau = 0; tau < K; tau++) {
				const int src = t - P + tau; /* row of mixed; before 0: the state */
				const float* xr = src < 0 ? state + (size_t)(P + src) * cd : mixed + (size_t)src * cd;
				acc = _mm512_fmadd_ps(w[tau], _mm512_loadu_ps(xr + ch), acc);
			}
			_mm512_storeu_ps(out + (size_t)t * cd + ch, silu512(acc));
		}
	}
}

/* o[i] *= silu(z[i]), n elements. */
void pv_silu_gate_avx512(float* o, const float* z, size_t n)
{
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(o + i), silu512(_mm512_loadu_ps(z + i))));
	if (i < n) {
		const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
		_mm512_mask_storeu_ps(o + i, m,
		                      _mm512_mul_ps(_mm512_maskz_loadu_ps(m, o + i), silu512(_mm512_maskz_loadu_ps(m, z + i))));
	}
}

#else
#include "cpu/kern.h"
int pv_delta_avx512_ok(int dv, int cd, int K) { return 0; }
void pv_delta_step_avx512(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay, float beta,
                          float* o)
{
}
void pv_conv_silu_avx512(const float* state, const float* conv_w, const float* mixed, float* out, int n, int cd, int K) {}
void pv_silu_gate_avx512(float* o, const float* z, size_t n) {}
#endif
