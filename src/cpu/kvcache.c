/*
 * kvcache.c: the CPU KV cache's element types (proven.h enum pv_cache_type).
 *
 * A cache row is one position's K (or V) for all nkv heads, [nkv, hd], stored head after head
 * so that a head's slice starts at a fixed byte offset whatever the type:
 *   f32   hd * 4 bytes per head
 *   f16   hd * 2 bytes per head (IEEE half, round to nearest even: pv_f32_to_f16)
 *   bf16  hd * 2 bytes per head (round to nearest even, NaN kept quiet)
 *   q8_0  ceil(hd / 32) blocks of 34 bytes per head: f16 d | i8 q[32], x = d * q (ggml's
 *         quantize_row_q8_0_ref over the slice; a last partial block is zero-padded, so any
 *         head size works and a head never shares a block with the next one)
 * A row is rounded once, when the forward pass writes it, by a function of that row alone; the
 * readers (the generic attention in forward.c, the AVX-512 one in attn_avx512.c) convert stored
 * values back to f32 exactly (every f16, bf16 and d * q with |q| <= 127 is an f32), so what a
 * query sees never depends on the rows evaluated with it, the thread count or the split.
 */
#include "cpu/state.h"
#include "quant/quant.h"

#include <string.h>

int pv_kv_dtype(int cache_type)
{
	switch (cache_type) {
	case PV_CACHE_F16: return PV_F16;
	case PV_CACHE_BF16: return PV_BF16;
	case PV_CACHE_Q8_0: return PV_Q8_0;
	default: return PV_F32;
	}
}

size_t pv_kv_head_bytes(int dtype, int hd)
{
	switch (dtype) {
	case PV_F16:
	case PV_BF16: return (size_t)hd * 2;
	case PV_Q8_0: return (size_t)(hd + 31) / 32 * 34;
	default: return (size_t)hd * 4;
	}
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
	return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

void pv_kv_store(int dtype, const float* src, unsigned char* dst, int nkv, int hd)
{
	if (dtype == PV_F32) {
		memcpy(dst, src, sizeof(float) * (size_t)nkv * hd);
		return;
	}
	const size_t hb = pv_kv_head_bytes(dtype, hd);
	for (int h = 0; h < nkv; h++) {
		const float* x = src + (size_t)h * hd;
		unsigned char* y = dst + (size_t)h * hb;
		if (dtype == PV_F16 || dtype == PV_BF16) {
			for (int i = 0; i < hd; i++) {
				const uint16_t v = dtype == PV_F16 ? pv_f32_to_f16(x[i]) : f32_to_bf16(x[i]);
				memcpy(y + 2 * (size_t)i, &v, 2);
			}
			continue;
		}
		/* q8_0, block by block: [32] floats (the tail zero-padded) -> 34 bytes */
		for (int b = 0; b < hd; b += 32) {
			float blk[32] = { 0 };
			memcpy(blk, x + b, sizeof(float) * (size_t)(hd - b < 32 ? hd - b : 32));
			unsigned char* q = y + (size_t)b / 32 * 34;
			if (pv_quant_row(PV_Q8_0, blk, q, 32) != 0) {
				/* a NaN or an infinity in the row: store a NaN scale, so the reads stay NaN
				 * and the step's output check reports it (as the f32 cache would) */
				memset(q, 0, 34);
				q[0] = 0x00;
				q[1] = 0x7e;
			}
		}
	}
}

void pv_kv_load(int dtype, const unsigned char* head, float* dst, int hd)
{
	switch (dtype) {
	case PV_F16:
	case PV_BF16:
		for (int i = 0; i < hd; i++) {
			uint16_t v;
			memcpy(&v, head + 2 * (size_t)i, 2);
			dst[i] = dtype == PV_F16 ? pv_f16_to_f32(v) : pv_bf16_to_f32(v);
		}
		return;
	case PV_Q8_0:
		for (int b = 0; b < hd; b += 32) {
			const unsigned char* q = head + (size_t)b / 32 * 34;
			const float d = pv_q_f16(q);
			const int nb = hd - b < 32 ? hd - b : 32;
			for (int i = 0; i < nb; i++) dst[b + i] = d * (float)(int8_t)q[2 + i];
		}
		return;
	default: memcpy(dst, head, sizeof(float) * (size_t)hd);
	}
}
