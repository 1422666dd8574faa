/*
 * qdot.c: the portable half of the fast numerics (qdot.h): activation conversion, and the
 * reference product of quantized weight rows (as stored, no panels) with Q8 activation rows.
 * The SIMD kernels give the same bits (qdot.h, 2.); this code is the generic kernel set's
 * fast path and what the tests hold them to.
 */
#include "cpu/qdot.h"
#include "cpu/kern.h"

#include <math.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- activations ------------------------------------------------------------------------ */

/* x86 minps / maxps: the second operand when either is NaN. */
static inline float min_x86(float a, float b) { return a < b ? a : b; }
static inline float max_x86(float a, float b) { return a > b ? a : b; }

/* One block of blk elements: d, the int8 values, and sums per sblk elements. */
static void quant_block(const float* x, int blk, int sblk, float* d, int32_t* s, int8_t* q)
{
	/* max |x| as the largest bit pattern with the sign cleared: the same value in any order,
	 * NaNs included (a NaN makes d a NaN, so the block's products are NaN) */
	uint32_t ab = 0;
	for (int i = 0; i < blk; i++) {
		uint32_t u;
		memcpy(&u, x + i, 4);
		u &= 0x7fffffffu;
		ab = u > ab ? u : ab;
	}
	float amax;
	memcpy(&amax, &ab, 4);
	*d = amax / 127.0f;
	const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
	for (int i = 0; i < blk; i++) q[i] = (int8_t)(int)rintf(max_x86(min_x86(x[i] * id, 127.0f), -127.0f));
	for (int j = 0; j < blk / sblk; j++) {
		int32_t acc = 0;
		for (int i = 0; i < sblk; i++) acc += q[j * sblk + i];
		s[j] = acc;
	}
}

void pv_act_convert(int fmt, const float* x, int ldx, int T, int64_t n, void* dst, size_t row_bytes)
{
	for (int t = 0; t < T; t++) {
		const float* xr = x + (size_t)t * ldx;
		unsigned char* out = (unsigned char*)dst + (size_t)t * row_bytes;
		if (fmt == PV_ACT_BF16) {
			uint16_t* o = (uint16_t*)(void*)out;
			for (int64_t i = 0; i < n; i++) o[i] = pv_f32_to_bf16_rne(xr[i]);
			continue;
		}
		const int blk = (int)pv_act_blk(fmt), sblk = (int)pv_act_sblk(fmt);
		struct pv_qrow r = pv_act_row(out, fmt, n);
		for (int64_t b = 0; b < n / blk; b++)
			quant_block(xr + b * blk, blk, sblk, r.d + b, r.s + b * (blk / sblk), r.q + b * blk);
	}
}

/* ---- products --------------------------------------------------------------------------- */

/* The integer part of block b of a stored row against activation row a: I and the second
 * integer of the float step (S for Q4_1/Q5_1, M for Q4_K/Q5_K, unused otherwise), and the
 * block's float scales dw, mw (qdot.h, 2.). */
static void block_ints(enum pv_dtype t, const unsigned char* blk, struct pv_qrow a, int64_t b, int32_t* I, int32_t* aux,
                       float* dw, float* mw)
{
	int32_t acc = 0, acc2 = 0;
	*mw = 0.0f;
	switch (t) {
	case PV_Q8_0: {
		const int8_t* x = a.q + 32 * b;
		*dw = pv_q_f16(blk);
		for (int i = 0; i < 32; i++) acc += (int8_t)blk[2 + i] * x[i];
		break;
	}
	case PV_Q4_0:
	case PV_Q4_1:
	case PV_Q5_0:
	case PV_Q5_1: {
		const int8_t* x = a.q + 32 * b;
		const int five = t == PV_Q5_0 || t == PV_Q5_1, has_m = t == PV_Q4_1 || t == PV_Q5_1;
		const int qs_off = t == PV_Q4_0 ? 2 : t == PV_Q4_1 ? 4 : t == PV_Q5_0 ? 6 : 8;
		const int bias = has_m ? 0 : five ? 16 : 8;
		const unsigned char* qh = blk + (t == PV_Q5_0 ? 2 : 4);
		*dw = pv_q_f16(blk);
		if (has_m) *mw = pv_q_f16(blk + 2);
		for (int j = 0; j < 16; j++) {
			int lo = blk[qs_off + j] & 15, hi = blk[qs_off + j] >> 4;
			if (five) {
				lo |= pv_q5_hbit(qh, j) << 4;
				hi |= pv_q5_hbit(qh, j + 16) << 4;
			}
			acc += (lo - bias) * x[j] + (hi - bias) * x[j + 16];
		}
		acc2 = a.s[b];
		break;
	}
	case PV_Q4_K:
	case PV_Q5_K: {
		const int8_t* x = a.q + 256 * b;
		const unsigned char* qs = blk + (t == PV_Q4_K ? 16 : 48);
		*dw = pv_q_f16(blk);
		*mw = pv_q_f16(blk + 2);
		for (int s = 0; s < 8; s++) {
			int sc, m;
			pv_q_scale_min_k4(s, blk + 4, &sc, &m);
			int32_t sub = 0;
			for (int l = 0; l < 32; l++) {
				int v = (qs[32 * (s >> 1) + l] >> (4 * (s & 1))) & 15;
				if (t == PV_Q5_K) v |= ((blk[16 + l] >> s) & 1) << 4;
				sub += v * x[32 * s + l];
			}
			acc += sc * sub;
			acc2 += m * (a.s[16 * b + 2 * s] + a.s[16 * b + 2 * s + 1]);
		}
		break;
	}
	case PV_Q6_K: {
		const int8_t* x = a.q + 256 * b;
		*dw = pv_q_f16(blk + 208);
		for (int h = 0; h < 2; h++)
			for (int k = 0; k < 4; k++)
				for (int half = 0; half < 2; half++) {
					/* sub-block 8h + 2k + half: elements 128h + 32k + 16 half + l */
					const int sc = (int8_t)blk[192 + 8 * h + 2 * k + half];
					int32_t sub = 0;
					for (int l = 16 * half; l < 16 * half + 16; l++) {
						const unsigned char ql = blk[64 * h + l + 32 * (k & 1)];
						const int lo = k < 2 ? ql & 15 : ql >> 4;
						const int hi = (blk[128 + 32 * h + l] >> (2 * k)) & 3;
						sub += ((lo | hi << 4) - 32) * x[128 * h + 32 * k + l];
					}
					acc += sc * sub;
				}
		break;
	}
	default: *dw = 0.0f; break;
	}
	*I = acc;
	*aux = acc2;
}

float pv_qdot_ref(enum pv_dtype t, const void* w, const void* act, int64_t n)
{
	const int fmt = pv_act_fmt_of(t);
	struct pv_qrow a = pv_act_row((void*)act, fmt, n);
	const int64_t blk = pv_dtype_block(t), nb = n / blk;
	const size_t bb = pv_dtype_block_bytes(t);
	float y = 0.0f;
	for (int64_t b = 0; b < nb; b++) {
		int32_t I, aux;
		float dw, mw;
		block_ints(t, (const unsigned char*)w + (size_t)b * bb, a, b, &I, &aux, &dw, &mw);
		const float dx = a.d[b];
		y = fmaf(dw * dx, (float)I, y);
		if (t == PV_Q4_1 || t == PV_Q5_1) y = fmaf(mw * dx, (float)aux, y);
		if (t == PV_Q4_K || t == PV_Q5_K) y = fmaf(-(mw * dx), (float)aux, y);
	}
	return y;
}

void pv_qgemm_generic(enum pv_dtype t, float* y, int ldy, const void* act, size_t act_stride, int T, const void* w, int64_t n,
                      int64_t o0, int64_t o1)
{
	const size_t rb = pv_dtype_row_bytes(t, n);
	for (int64_t o = o0; o < o1; o++)
		for (int r = 0; r < T; r++)
			y[(size_t)r * ldy + o] = pv_qdot_ref(t, (const unsigned char*)w + (size_t)o * rb,
			                                     (const unsigned char*)act + (size_t)r * act_stride, n);
}
