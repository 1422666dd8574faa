/*
 * quant.c: quantization (f32 -> ggml blocks) and row dequantization. The quantized
 * matrix-vector products are CPU kernels (cpu/qmatmul.c).
 *
 * Quantizers. Each one performs the float operations of ggml's quantize_row_<type>_ref in the
 * same order (this file is compiled in ISO C mode, where GCC never contracts a*b+c into an fma,
 * and the pragma below tells clang the same), so it writes the same bytes: round-to-nearest for
 * the 32-element types, and for Q4_K/Q5_K/Q6_K the same scale searches (make_qkx2_quants for
 * the 32-element sub-blocks of Q4_K/Q5_K, make_qx_quants with x^2 weights for the 16-element
 * sub-blocks of Q6_K) followed by 6/8-bit quantization of the sub-block scales. Conversions
 * that are undefined in C where ggml relies on x86 behaviour (float -> int of a NaN) go
 * through helpers with the x86 result; non-finite inputs are rejected before that anyway.
 */
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif


/* ---- conversions ----------------------------------------------------------------------- */

static inline uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

uint16_t pv_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u) return sign | 0x7e00u;      /* NaN */
	if (u >= 0x477ff000u) return sign | 0x7c00u;     /* >= 65520: rounds to infinity */
	if (u < 0x38800000u) {
		/* below 2^-14: a multiple of 2^-24. Scaling by 2^24 is exact, and adding then
		 * subtracting 2^23 rounds to the nearest integer, ties to even (values < 2^10). */
		float s = fabsf(f) * 0x1p24f;
		float r = (s + 0x1p23f) - 0x1p23f;
		return sign | (uint16_t)r; /* 1024 is the smallest normal, correctly encoded */
	}
	uint32_t mant = u & 0x7fffffu;
	uint32_t h = ((u >> 23) - 112u) << 10 | mant >> 13; /* rebias 127 -> 15 */
	uint32_t rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry bumps the exponent */
	return sign | (uint16_t)h;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u = f2u(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
	return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* ggml's nearest_int: round to nearest, ties to even, through the float adder. Defined for
 * every input (garbage outside |f| <= 2^22, as in ggml). */
static inline int nearest_int(float f)
{
	float v = f + 12582912.f;
	int32_t i;
	memcpy(&i, &v, 4);
	return (i & 0x007fffff) - 0x00400000;
}

/* (int)f for the truncating conversions ggml writes as casts; NaN and out-of-range values give
 * INT32_MIN as x86's cvttss2si does, instead of undefined behaviour. */
static inline int32_t trunc_i32(float f)
{
	if (!(f > -2147483648.0f && f < 2147483648.0f)) return INT32_MIN;
	return (int32_t)f;
}

static inline void put_f16(unsigned char* p, float f)
{
	uint16_t h = pv_f32_to_f16(f);
	p[0] = (unsigned char)h;
	p[1] = (unsigned char)(h >> 8);
}


#define MINI(a, b) ((a) < (b) ? (a) : (b))
#define MAXI(a, b) ((a) > (b) ? (a) : (b))

/* ---- 32-element types ------------------------------------------------------------------ */

static void quant_q8_0(const float* x, unsigned char* y)
{
	float amax = 0.0f;
	for (int j = 0; j < 32; j++) {
		float a = fabsf(x[j]);
		amax = amax > a ? amax : a;
	}
	const float d = amax / 127;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	put_f16(y, d);
	for (int j = 0; j < 32; j++) y[2 + j] = (unsigned char)(int8_t)trunc_i32(roundf(x[j] * id));
}

/* Q4_0 and Q5_0: d = max / -(2^(bits-1)) where max is the element of largest magnitude. */
static void quant_q4_0(const float* x, unsigned char* y)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < 32; j++) {
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	const float d = max / -8;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	put_f16(y, d);
	for (int j = 0; j < 16; j++) {
		const float x0 = x[j] * id, x1 = x[16 + j] * id;
		const uint8_t q0 = (uint8_t)MINI(15, (int8_t)trunc_i32(x0 + 8.5f));
		const uint8_t q1 = (uint8_t)MINI(15, (int8_t)trunc_i32(x1 + 8.5f));
		y[2 + j] = (uint8_t)(q0 | q1 << 4);
	}
}

static void quant_q5_0(const float* x, unsigned char* y)
{
	float amax = 0.0f, max = 0.0f;
	for (int j = 0; j < 32; j++) {
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	const float d = max / -16;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	uint32_t qh = 0;
	put_f16(y, d);
	for (int j = 0; j < 16; j++) {
		const float x0 = x[j] * id, x1 = x[16 + j] * id;
		const uint8_t q0 = (uint8_t)MINI(31, (int8_t)trunc_i32(x0 + 16.5f));
		const uint8_t q1 = (uint8_t)MINI(31, (int8_t)trunc_i32(x1 + 16.5f));
		y[6 + j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
		qh |= ((q0 & 0x10u) >> 4) << j;
		qh |= ((q1 & 0x10u) >> 4) << (j + 16);
	}
	for (int i = 0; i < 4; i++) y[2 + i] = (unsigned char)(qh >> (8 * i));
}

/* Q4_1 and Q5_1: d = (max - min) / (2^bits - 1), m = min. */
static void quant_q4_1(const float* x, unsigned char* y)
{
	float min = FLT_MAX, max = -FLT_MAX;
	for (int j = 0; j < 32; j++) {
		if (x[j] < min) min = x[j];
		if (x[j] > max) max = x[j];
	}
	const float d = (max - min) / 15;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	put_f16(y, d);
	put_f16(y + 2, min);
	for (int j = 0; j < 16; j++) {
		const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
		const uint8_t q0 = (uint8_t)MINI(15, (int8_t)trunc_i32(x0 + 0.5f));
		const uint8_t q1 = (uint8_t)MINI(15, (int8_t)trunc_i32(x1 + 0.5f));
		y[4 + j] = (uint8_t)(q0 | q1 << 4);
	}
}

static void quant_q5_1(const float* x, unsigned char* y)
{
	float min = FLT_MAX, max = -FLT_MAX;
	for (int j = 0; j < 32; j++) {
		if (x[j] < min) min = x[j];
		if (x[j] > max) max = x[j];
	}
	const float d = (max - min) / 31;
	const float id = d != 0.0f ? 1.0f / d : 0.0f;
	uint32_t qh = 0;
	put_f16(y, d);
	put_f16(y + 2, min);
	for (int j = 0; j < 16; j++) {
		const float x0 = (x[j] - min) * id, x1 = (x[16 + j] - min) * id;
		const uint8_t q0 = (uint8_t)trunc_i32(x0 + 0.5f);
		const uint8_t q1 = (uint8_t)trunc_i32(x1 + 0.5f);
		y[8 + j] = (uint8_t)((q0 & 0x0F) | (q1 & 0x0F) << 4);
		qh |= ((q0 & 0x10u) >> 4) << j;
		qh |= ((q1 & 0x10u) >> 4) << (j + 16);
	}
	for (int i = 0; i < 4; i++) y[4 + i] = (unsigned char)(qh >> (8 * i));
}

/* ---- K types --------------------------------------------------------------------------- */

#define GROUP_MAX_EPS 1e-15f

/*
 * Scale and min for n values in [0, nmax] levels, minimising the weighted squared error over
 * nstep + 1 candidate scales (ggml's make_qkx2_quants with use_mad = false). L receives the
 * levels, *the_min the (non-negative) offset to subtract; returns the scale.
 */
static float make_qkx2(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep)
{
	float min = x[0], max = x[0];
	float sum_w = weights[0];
	float sum_x = sum_w * x[0];
	for (int i = 1; i < n; i++) {
		if (x[i] < min) min = x[i];
		if (x[i] > max) max = x[i];
		float w = weights[i];
		sum_w += w;
		sum_x += w * x[i];
	}
	if (min > 0) min = 0;
	if (max == min) {
		for (int i = 0; i < n; i++) L[i] = 0;
		*the_min = -min;
		return 0.f;
	}
	float iscale = (float)nmax / (max - min);
	float scale = 1 / iscale;
	float best_error = 0;
	for (int i = 0; i < n; i++) {
		int l = nearest_int(iscale * (x[i] - min));
		L[i] = (uint8_t)MAXI(0, MINI(nmax, l));
		float diff = scale * (float)L[i] + min - x[i];
		diff = diff * diff;
		best_error += weights[i] * diff;
	}
	for (int is = 0; is <= nstep; is++) {
		iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
		float sum_l = 0, sum_l2 = 0, sum_xl = 0;
		for (int i = 0; i < n; i++) {
			int l = nearest_int(iscale * (x[i] - min));
			l = MAXI(0, MINI(nmax, l));
			Laux[i] = (uint8_t)l;
			float w = weights[i];
			sum_l += w * (float)l;
			sum_l2 += w * (float)l * (float)l;
			sum_xl += w * (float)l * x[i];
		}
		float D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			if (this_min > 0) {
				this_min = 0;
				this_scale = sum_xl / sum_l2;
			}
			float cur_error = 0;
			for (int i = 0; i < n; i++) {
				float diff = this_scale * (float)Laux[i] + this_min - x[i];
				diff = diff * diff;
				cur_error += weights[i] * diff;
			}
			if (cur_error < best_error) {
				for (int i = 0; i < n; i++) L[i] = Laux[i];
				best_error = cur_error;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*the_min = -min;
	return scale;
}

/* Q4_K (nmax 15, 21 candidate scales from -1) and Q5_K (nmax 31, 16 from -0.5). */
static void quant_k45(const float* x, unsigned char* y, int q5)
{
	const int nmax = q5 ? 31 : 15;
	uint8_t L[PV_QK_K], Laux[32];
	float weights[32], mins[8], scales[8];
	float max_scale = 0, max_min = 0;
	unsigned char* sc = y + 4;

	for (int j = 0; j < 8; j++) {
		float sum_x2 = 0;
		for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
		float av_x = sqrtf(sum_x2 / 32);
		for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
		scales[j] = q5 ? make_qkx2(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15)
		               : make_qkx2(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20);
		if (scales[j] > max_scale) max_scale = scales[j];
		if (mins[j] > max_min) max_min = mins[j];
	}
	float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
	float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
	for (int j = 0; j < 8; j++) {
		uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
		uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
		ls = MINI(63, ls);
		lm = MINI(63, lm);
		if (j < 4) {
			sc[j] = ls;
			sc[j + 4] = lm;
		} else {
			sc[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
			sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
			sc[j] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	put_f16(y, max_scale / 63.f);
	put_f16(y + 2, max_min / 63.f);
	const float dd = pv_q_f16(y), dm_ = pv_q_f16(y + 2);
	for (int j = 0; j < 8; j++) {
		int is, im;
		pv_q_scale_min_k4(j, sc, &is, &im);
		const float d = dd * (float)is;
		if (d == 0.0f) continue;
		const float dm = dm_ * (float)im;
		for (int ii = 0; ii < 32; ii++) {
			int l = nearest_int((x[32 * j + ii] + dm) / d);
			L[32 * j + ii] = (uint8_t)MAXI(0, MINI(nmax, l));
		}
	}
	if (!q5) {
		unsigned char* q = y + 16;
		for (int j = 0; j < PV_QK_K; j += 64, q += 32)
			for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
		return;
	}
	unsigned char* qh = y + 16;
	unsigned char* ql = y + 48;
	memset(qh, 0, 32);
	uint8_t m1 = 1, m2 = 2;
	for (int j = 0; j < PV_QK_K; j += 64, ql += 32) {
		for (int l = 0; l < 32; l++) {
			int l1 = L[j + l], l2 = L[j + l + 32];
			if (l1 > 15) {
				l1 -= 16;
				qh[l] |= m1;
			}
			if (l2 > 15) {
				l2 -= 16;
				qh[l] |= m2;
			}
			ql[l] = (uint8_t)(l1 | l2 << 4);
		}
		m1 = (uint8_t)(m1 << 2);
		m2 = (uint8_t)(m2 << 2);
	}
}

/*
 * Signed scale for n values in [-nmax, nmax - 1] levels, weights x^2, trying 19 scales around
 * -nmax / max (ggml's make_qx_quants with rmse_type 1 and no importance weights). L receives
 * level + nmax.
 */
static float make_qx(int n, int nmax, const float* x, int8_t* L)
{
	float max = 0, amax = 0;
	for (int i = 0; i < n; i++) {
		float ax = fabsf(x[i]);
		if (ax > amax) {
			amax = ax;
			max = x[i];
		}
	}
	if (amax < GROUP_MAX_EPS) {
		for (int i = 0; i < n; i++) L[i] = 0;
		return 0.f;
	}
	float iscale = (float)-nmax / max;
	float sumlx = 0, suml2 = 0;
	for (int i = 0; i < n; i++) {
		int l = nearest_int(iscale * x[i]);
		l = MAXI(-nmax, MINI(nmax - 1, l));
		L[i] = (int8_t)(l + nmax);
		float w = x[i] * x[i];
		sumlx += w * x[i] * (float)l;
		suml2 += w * (float)l * (float)l;
	}
	float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
	float best = scale * sumlx;
	for (int is = -9; is <= 9; is++) {
		if (is == 0) continue;
		iscale = -((float)nmax + 0.1f * (float)is) / max;
		sumlx = suml2 = 0;
		for (int i = 0; i < n; i++) {
			int l = nearest_int(iscale * x[i]);
			l = MAXI(-nmax, MINI(nmax - 1, l));
			float w = x[i] * x[i];
			sumlx += w * x[i] * (float)l;
			suml2 += w * (float)l * (float)l;
		}
		if (suml2 > 0 && sumlx * sumlx > best * suml2) {
			for (int i = 0; i < n; i++) {
				int l = nearest_int(iscale * x[i]);
				L[i] = (int8_t)(nmax + MAXI(-nmax, MINI(nmax - 1, l)));
			}
			scale = sumlx / suml2;
			best = scale * sumlx;
		}
	}
	return scale;
}

static void quant_q6_k(const float* x, unsigned char* y)
{
	int8_t L[PV_QK_K];
	float scales[16];
	float max_scale = 0, max_abs_scale = 0;

	for (int ib = 0; ib < 16; ib++) {
		const float scale = make_qx(16, 32, x + 16 * ib, L + 16 * ib);
		scales[ib] = scale;
		const float abs_scale = fabsf(scale);
		if (abs_scale > max_abs_scale) {
			max_abs_scale = abs_scale;
			max_scale = scale;
		}
	}
	if (max_abs_scale < GROUP_MAX_EPS) {
		memset(y, 0, 210);
		return; /* d = +0 */
	}
	const float iscale = -128.f / max_scale;
	put_f16(y + 208, 1 / iscale);
	signed char* sc = (signed char*)y + 192;
	for (int ib = 0; ib < 16; ib++) sc[ib] = (signed char)MINI(127, nearest_int(iscale * scales[ib]));
	const float dd = pv_q_f16(y + 208);
	for (int j = 0; j < 16; j++) {
		const float d = dd * (float)sc[j];
		if (d == 0.0f) continue;
		for (int ii = 0; ii < 16; ii++) {
			int l = nearest_int(x[16 * j + ii] / d);
			l = MAXI(-32, MINI(31, l));
			L[16 * j + ii] = (int8_t)(l + 32);
		}
	}
	unsigned char* ql = y;
	unsigned char* qh = y + 128;
	for (int j = 0; j < PV_QK_K; j += 128, ql += 64, qh += 32) {
		for (int l = 0; l < 32; l++) {
			const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
			const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
			ql[l] = (uint8_t)(q1 | q3 << 4);
			ql[l + 32] = (uint8_t)(q2 | q4 << 4);
			qh[l] = (uint8_t)((L[j + l] >> 4) | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
			                  (L[j + l + 96] >> 4) << 6);
		}
	}
}

/* ---- rows ------------------------------------------------------------------------------- */

int pv_quant_supported(enum pv_dtype t) { return (unsigned)t < PV_DTYPE_COUNT; }

int pv_quant_row(enum pv_dtype t, const float* src, void* dst, int64_t n)
{
	const int64_t blk = pv_dtype_block(t);
	const size_t bb = pv_dtype_block_bytes(t);
	unsigned char* out = dst;

	if (!pv_quant_supported(t) || blk <= 0 || n < 0 || n % blk) return -1;
	for (int64_t i = 0; i < n; i++)
		if (!isfinite(src[i])) return -1;
	for (int64_t b = 0; b < n / blk; b++) {
		const float* x = src + b * blk;
		unsigned char* y = out + (size_t)b * bb;
		switch (t) {
		case PV_F32: memcpy(y, x, 4); break;
		case PV_F16: {
			uint16_t h = pv_f32_to_f16(x[0]);
			y[0] = (unsigned char)h;
			y[1] = (unsigned char)(h >> 8);
			break;
		}
		case PV_BF16: {
			uint16_t h = f32_to_bf16(x[0]);
			y[0] = (unsigned char)h;
			y[1] = (unsigned char)(h >> 8);
			break;
		}
		case PV_Q8_0: quant_q8_0(x, y); break;
		case PV_Q4_0: quant_q4_0(x, y); break;
		case PV_Q4_1: quant_q4_1(x, y); break;
		case PV_Q5_0: quant_q5_0(x, y); break;
		case PV_Q5_1: quant_q5_1(x, y); break;
		case PV_Q4_K: quant_k45(x, y, 0); break;
		case PV_Q5_K: quant_k45(x, y, 1); break;
		case PV_Q6_K: quant_q6_k(x, y); break;
		default: return -1;
		}
	}
	return 0;
}

void pv_dequant_row(enum pv_dtype t, const void* src, float* dst, int64_t n)
{
	const int64_t blk = pv_dtype_block(t);
	const size_t bb = pv_dtype_block_bytes(t);
	const unsigned char* s = src;
	if (blk <= 0) return;
	for (int64_t b = 0; b < n / blk; b++) pv_dequant_block(t, s + (size_t)b * bb, dst + b * blk);
}
