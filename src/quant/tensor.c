/* tensor.c: element access for weight views (slow path) and exact half -> float conversion. */
#include "quant/tensor.h"

#include <string.h>

#include "quant/quant.h"

const char* pv_dtype_name(enum pv_dtype t)
{
	switch (t) {
	case PV_F32: return "f32";
	case PV_F16: return "f16";
	case PV_BF16: return "bf16";
	case PV_Q8_0: return "q8_0";
	case PV_Q4_0: return "q4_0";
	case PV_Q4_1: return "q4_1";
	case PV_Q5_0: return "q5_0";
	case PV_Q5_1: return "q5_1";
	case PV_Q4_K: return "q4_k";
	case PV_Q5_K: return "q5_k";
	case PV_Q6_K: return "q6_k";
	default: return "?";
	}
}

/* Exact IEEE binary16 -> binary32: every half value (subnormals, infinities and NaN payloads
 * included) is representable as a float, so no rounding happens. */
float pv_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu;
	uint32_t mant = h & 0x3ffu;
	union { uint32_t u; float f; } v;

	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24, exact in float (a normal float for mant > 0) */
		v.f = (float)mant * 0x1p-24f;
		v.u |= sign;
		return v.f;
	}
	if (exp == 31)
		v.u = sign | 0x7f800000u | (mant << 13); /* inf, or NaN keeping its payload */
	else
		v.u = sign | ((exp + 112u) << 23) | (mant << 13); /* rebias 15 -> 127 */
	return v.f;
}

/* Views point into file mappings where only the start of the data section is guaranteed to be
 * aligned, so elements are read with memcpy. */
static float element(const struct pv_tensor* t, int64_t i)
{
	const unsigned char* p = (const unsigned char*)t->data + (size_t)i * pv_dtype_size(t->type);
	uint16_t h;
	float f;

	switch (t->type) {
	case PV_F32:
		memcpy(&f, p, sizeof f);
		return f;
	case PV_F16:
		memcpy(&h, p, sizeof h);
		return pv_f16_to_f32(h);
	case PV_BF16:
		memcpy(&h, p, sizeof h);
		return pv_bf16_to_f32(h);
	default:
		return 0.0f;
	}
}

/* Quantized rows are cols / block blocks; an element is read by dequantizing its block. */
float pv_tensor_get(const struct pv_tensor* t, int64_t row, int64_t col)
{
	if (pv_dtype_is_quant(t->type)) {
		float blk[PV_QK_K];
		const int64_t bs = pv_dtype_block(t->type);
		const unsigned char* r = (const unsigned char*)t->data + (size_t)row * pv_dtype_row_bytes(t->type, t->cols);
		pv_dequant_block(t->type, r + (size_t)(col / bs) * pv_dtype_block_bytes(t->type), blk);
		return blk[col % bs];
	}
	return element(t, row * t->cols + col);
}

void pv_tensor_row_f32(const struct pv_tensor* t, int64_t row, float* dst)
{
	if (pv_dtype_is_quant(t->type)) {
		const int64_t bs = pv_dtype_block(t->type);
		const size_t bb = pv_dtype_block_bytes(t->type);
		const unsigned char* r = (const unsigned char*)t->data + (size_t)row * pv_dtype_row_bytes(t->type, t->cols);
		for (int64_t b = 0; b < t->cols / bs; b++) pv_dequant_block(t->type, r + (size_t)b * bb, dst + b * bs);
		return;
	}
	for (int64_t c = 0; c < t->cols; c++) dst[c] = element(t, row * t->cols + c);
}
