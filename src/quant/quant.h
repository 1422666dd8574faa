/*
 * quant.h: the ggml block-quantized weight types: block geometry, exact dequantization,
 * quantization (f32 -> blocks, as ggml's reference quantizers do it) and the dot products and
 * matrix-vector products of quantized weight rows with f32 activations.
 *
 * Block layouts (bytes, little-endian; "f16" is an IEEE half; all fields are read with memcpy
 * or byte loads, so blocks may sit at any address):
 *
 *   Q8_0   32 el.  34 B  f16 d | i8 qs[32]                       x = d * q
 *   Q4_0   32 el.  18 B  f16 d | u8 qs[16]                       x = d * (q - 8)
 *   Q4_1   32 el.  20 B  f16 d | f16 m | u8 qs[16]               x = d * q + m
 *   Q5_0   32 el.  22 B  f16 d | u8 qh[4] | u8 qs[16]            x = d * (q - 16)
 *   Q5_1   32 el.  24 B  f16 d | f16 m | u8 qh[4] | u8 qs[16]    x = d * q + m
 *   Q4_K  256 el. 144 B  f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
 *   Q5_K  256 el. 176 B  f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
 *   Q6_K  256 el. 210 B  u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
 *
 * 32-element types: element j < 16 is the low nibble of qs[j], element j + 16 the high nibble;
 * Q5_x take bit j of the 32-bit qh as the fifth bit of element j.
 * Q4_K/Q5_K: eight sub-blocks of 32 with 6-bit scale sc and min m packed in scales[12]
 * (sub-block j < 4: sc = scales[j] & 63, m = scales[j+4] & 63; j >= 4: sc = (scales[j+4] & 15)
 * | (scales[j-4] >> 6) << 4, m = (scales[j+4] >> 4) | (scales[j] >> 6) << 4); x = (d*sc)*q - dmin*m.
 * Sub-blocks 2i and 2i+1 share qs[32i..32i+31] (low, high nibble); Q5_K's fifth bit of
 * sub-block s is bit s of qh[l].
 * Q6_K: two halves of 128; in half h, for l < 32: element l, l+32, l+64, l+96 take the low
 * nibble of ql[64h+l], the low nibble of ql[64h+l+32], the high nibble of ql[64h+l], the high
 * nibble of ql[64h+l+32], with bits (0,1), (2,3), (4,5), (6,7) of qh[32h+l] on top, minus 32;
 * scale scales[8h + l/16 + 2k] for the k-th of the four; x = (d*scale)*q.
 *
 * Exactness: dequantization performs the same IEEE float operations, in the same order, as
 * ggml's dequantize_row_* and the gguf Python package (a multiply, then an add or subtract:
 * never fused), so the values are bit-identical with theirs. The quantizers follow ggml's
 * quantize_row_*_ref (round-to-nearest with the same scale searches), operation for
 * operation, and produce the same bytes.
 */
#ifndef PV_QUANT_H
#define PV_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant/tensor.h"

struct pv_pool;

#define PV_QK 32   /* elements per block of the 32-element types */
#define PV_QK_K 256 /* elements per super-block of the K types   */

/* ---- geometry --------------------------------------------------------------------------- */

static inline int pv_dtype_is_quant(enum pv_dtype t) { return t >= PV_Q8_0 && t < PV_DTYPE_COUNT; }

/* Elements per block: 1 for F32/F16/BF16, 32 or 256 for quantized types, 0 if invalid. */
static inline int64_t pv_dtype_block(enum pv_dtype t)
{
	switch (t) {
	case PV_F32: case PV_F16: case PV_BF16: return 1;
	case PV_Q8_0: case PV_Q4_0: case PV_Q4_1: case PV_Q5_0: case PV_Q5_1: return PV_QK;
	case PV_Q4_K: case PV_Q5_K: case PV_Q6_K: return PV_QK_K;
	default: return 0;
	}
}

/* Bytes per block (the element size for F32/F16/BF16), 0 if invalid. */
static inline size_t pv_dtype_block_bytes(enum pv_dtype t)
{
	switch (t) {
	case PV_F32: return 4;
	case PV_F16: case PV_BF16: return 2;
	case PV_Q8_0: return 34;
	case PV_Q4_0: return 18;
	case PV_Q4_1: return 20;
	case PV_Q5_0: return 22;
	case PV_Q5_1: return 24;
	case PV_Q4_K: return 144;
	case PV_Q5_K: return 176;
	case PV_Q6_K: return 210;
	default: return 0;
	}
}

/* Bytes of a row of n elements; 0 when n is not a whole number of blocks (or t is invalid). */
static inline size_t pv_dtype_row_bytes(enum pv_dtype t, int64_t n)
{
	int64_t blk = pv_dtype_block(t);
	if (blk <= 0 || n < 0 || n % blk) return 0;
	return (size_t)(n / blk) * pv_dtype_block_bytes(t);
}

/* ---- exact block dequantization (inline: tensor.c and the fuzz targets use it) ----------- */

static inline uint16_t pv_q_u16(const unsigned char* p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline float pv_q_f16(const unsigned char* p) { return pv_f16_to_f32(pv_q_u16(p)); }

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's scales[12]. */
static inline void pv_q_scale_min_k4(int j, const unsigned char* q, int* sc, int* m)
{
	if (j < 4) {
		*sc = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

/* Fifth bit of element j (0..31) of a Q5_0/Q5_1 block: bit j of the little-endian u32 qh. */
static inline int pv_q5_hbit(const unsigned char* qh, int j) { return (qh[j >> 3] >> (j & 7)) & 1; }

/* Dequantizes one block of type t at b into y[pv_dtype_block(t)]. Float types: one element. */
static inline void pv_dequant_block(enum pv_dtype t, const unsigned char* b, float* y)
{
	switch (t) {
	case PV_F32:
		memcpy(y, b, 4);
		return;
	case PV_F16:
		y[0] = pv_q_f16(b);
		return;
	case PV_BF16:
		y[0] = pv_bf16_to_f32(pv_q_u16(b));
		return;
	case PV_Q8_0: {
		const float d = pv_q_f16(b);
		for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
		return;
	}
	case PV_Q4_0: {
		const float d = pv_q_f16(b);
		for (int j = 0; j < 16; j++) {
			y[j] = (float)((b[2 + j] & 0xF) - 8) * d;
			y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
		}
		return;
	}
	case PV_Q4_1: {
		const float d = pv_q_f16(b), m = pv_q_f16(b + 2);
		for (int j = 0; j < 16; j++) {
			y[j] = (float)(b[4 + j] & 0xF) * d + m;
			y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
		}
		return;
	}
	case PV_Q5_0: {
		const float d = pv_q_f16(b);
		const unsigned char *qh = b + 2, *qs = b + 6;
		for (int j = 0; j < 16; j++) {
			y[j] = (float)(((qs[j] & 0xF) | pv_q5_hbit(qh, j) << 4) - 16) * d;
			y[j + 16] = (float)(((qs[j] >> 4) | pv_q5_hbit(qh, j + 16) << 4) - 16) * d;
		}
		return;
	}
	case PV_Q5_1: {
		const float d = pv_q_f16(b), m = pv_q_f16(b + 2);
		const unsigned char *qh = b + 4, *qs = b + 8;
		for (int j = 0; j < 16; j++) {
			y[j] = (float)((qs[j] & 0xF) | pv_q5_hbit(qh, j) << 4) * d + m;
			y[j + 16] = (float)((qs[j] >> 4) | pv_q5_hbit(qh, j + 16) << 4) * d + m;
		}
		return;
	}
	case PV_Q4_K:
	case PV_Q5_K: {
		const float d = pv_q_f16(b), dmin = pv_q_f16(b + 2);
		const unsigned char* sc = b + 4;
		const unsigned char* qh = b + 16;
		const unsigned char* qs = t == PV_Q4_K ? b + 16 : b + 48;
		for (int s = 0; s < 8; s++) {
			int is, im;
			pv_q_scale_min_k4(s, sc, &is, &im);
			const float d1 = d * (float)is, m1 = dmin * (float)im;
			const unsigned char* q = qs + 32 * (s >> 1);
			const int shift = (s & 1) * 4;
			for (int l = 0; l < 32; l++) {
				int v = (q[l] >> shift) & 0xF;
				if (t == PV_Q5_K) v |= ((qh[l] >> s) & 1) << 4;
				y[32 * s + l] = d1 * (float)v - m1;
			}
		}
		return;
	}
	case PV_Q6_K: {
		const float d = pv_q_f16(b + 208);
		for (int h = 0; h < 2; h++) {
			const unsigned char* ql = b + 64 * h;
			const unsigned char* qh = b + 128 + 32 * h;
			const signed char* sc = (const signed char*)b + 192 + 8 * h;
			float* yy = y + 128 * h;
			for (int l = 0; l < 32; l++) {
				const int is = l / 16;
				const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
				const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
				const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
				const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
				yy[l] = d * (float)sc[is] * (float)q1;
				yy[l + 32] = d * (float)sc[is + 2] * (float)q2;
				yy[l + 64] = d * (float)sc[is + 4] * (float)q3;
				yy[l + 96] = d * (float)sc[is + 6] * (float)q4;
			}
		}
		return;
	}
	default:
		return;
	}
}

/* ---- rows ------------------------------------------------------------------------------- */

/* Dequantizes n elements (a whole number of blocks) of type t from src into dst. Any type,
 * float types included; bit-identical with ggml's dequantize_row_*. */
void pv_dequant_row(enum pv_dtype t, const void* src, float* dst, int64_t n);

/* Whether pv_quant_row implements type t (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, and
 * F32/F16/BF16 as plain conversions). */
int pv_quant_supported(enum pv_dtype t);

/* Quantizes n elements (a whole number of blocks) of src into dst (pv_dtype_row_bytes(t, n)
 * bytes), exactly as ggml's quantize_row_<t>_ref (which llama-quantize uses without an
 * importance matrix). F16/BF16 round to nearest even. Returns 0, or -1 (dst unspecified) when
 * the type has no quantizer, n is not a whole number of blocks, or src holds a NaN or an
 * infinity (ggml's result is undefined there). */
int pv_quant_row(enum pv_dtype t, const float* src, void* dst, int64_t n);

/* IEEE binary32 -> binary16, round to nearest even; overflow gives infinity, NaN stays NaN
 * (0x7e00 with the sign), as ggml's GGML_FP32_TO_FP16. */
uint16_t pv_f32_to_f16(float f);

#endif
