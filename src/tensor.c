/* tensor.c: element access for weight views (slow path) and exact half -> float conversion. */
#include "tensor.h"

#include <string.h>

const char* pv_dtype_name(enum pv_dtype t)
{
	switch (t) {
	case PV_F32: return "f32";
	case PV_F16: return "f16";
	case PV_BF16: return "bf16";
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

float pv_tensor_get(const struct pv_tensor* t, int64_t row, int64_t col)
{
	return element(t, row * t->cols + col);
}

void pv_tensor_row_f32(const struct pv_tensor* t, int64_t row, float* dst)
{
	for (int64_t c = 0; c < t->cols; c++) dst[c] = element(t, row * t->cols + c);
}
