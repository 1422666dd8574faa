/*
 * pack.c: repacking of quantized matrices into the 16-row panels the SIMD kernels of the fast
 * numerics read (layouts in qdot.h). Done once per matrix when a model is opened; a plain byte
 * and bit shuffle, so the panels hold exactly the stored values.
 */
#include "cpu/qdot.h"

#include <string.h>

/* Element e (0..255) of a Q6_K block: its low 4 bits and its top 2 bits (quant.h layout). */
static inline int q6_lo4(const unsigned char* b, int e)
{
	int h = e / 128, j = e % 128, k = j / 32, l = j % 32;
	unsigned char v = b[64 * h + l + 32 * (k & 1)];
	return k < 2 ? v & 15 : v >> 4;
}
static inline int q6_hi2(const unsigned char* b, int e)
{
	int h = e / 128, j = e % 128, k = j / 32, l = j % 32;
	return (b[128 + 32 * h + l] >> (2 * k)) & 3;
}

/* The fifth bit of element e of a Q5_0 / Q5_1 block whose qh starts at qh. */
static inline int q5_bit(const unsigned char* qh, int e) { return (qh[e >> 3] >> (e & 7)) & 1; }

/* One panel block: the blocks `blk[r]` (NULL for a padding row) of the 16 rows into dst. */
static void pack_block(enum pv_dtype t, const unsigned char* const blk[PV_PANEL], unsigned char* dst)
{
	const size_t pb = pv_panel_block_bytes(t);
	static const unsigned char zero[256];
	const unsigned char* b[PV_PANEL];
	for (int r = 0; r < PV_PANEL; r++) b[r] = blk[r] ? blk[r] : zero;
	memset(dst, 0, pb);
	/* the f16 scale fields keep the file's bits: d at [0], m / dmin at [32] */
	const int d_off = t == PV_Q6_K ? 208 : 0;
	for (int r = 0; r < PV_PANEL; r++) memcpy(dst + 2 * r, b[r] + d_off, 2);
	if (t == PV_Q4_1 || t == PV_Q5_1 || t == PV_Q4_K || t == PV_Q5_K)
		for (int r = 0; r < PV_PANEL; r++) memcpy(dst + 32 + 2 * r, b[r] + 2, 2);

	switch (t) {
	case PV_Q8_0:
		for (int j = 0; j < 8; j++)
			for (int r = 0; r < PV_PANEL; r++)
				for (int i = 0; i < 4; i++)
					dst[32 + 64 * j + 4 * r + i] =
					        blk[r] ? (unsigned char)(b[r][2 + 4 * j + i] ^ 0x80) : 0x80;
		return;
	case PV_Q4_0:
	case PV_Q4_1:
	case PV_Q5_0:
	case PV_Q5_1: {
		const int qs_off = t == PV_Q4_0 ? 2 : t == PV_Q4_1 ? 4 : t == PV_Q5_0 ? 6 : 8;
		const int qh_off = t == PV_Q5_0 ? 2 : 4;
		const int vec_off = t == PV_Q4_0 ? 32 : t == PV_Q4_1 ? 64 : t == PV_Q5_0 ? 96 : 128;
		const int mask_off = t == PV_Q5_0 ? 32 : 64;
		for (int c = 0; c < 4; c++)
			for (int r = 0; r < PV_PANEL; r++) memcpy(dst + vec_off + 64 * c + 4 * r, b[r] + qs_off + 4 * c, 4);
		if (t == PV_Q5_0 || t == PV_Q5_1)
			for (int c = 0; c < 4; c++)
				for (int h = 0; h < 2; h++) {
					uint64_t m = 0;
					for (int r = 0; r < PV_PANEL; r++)
						for (int i = 0; i < 4; i++)
							m |= (uint64_t)q5_bit(b[r] + qh_off, 16 * h + 4 * c + i) << (4 * r + i);
					memcpy(dst + mask_off + 8 * (2 * c + h), &m, 8);
				}
		return;
	}
	case PV_Q4_K:
	case PV_Q5_K: {
		const int qs_off = t == PV_Q4_K ? 16 : 48;
		const int vec_off = t == PV_Q4_K ? 256 : 768;
		for (int j = 0; j < 3; j++)
			for (int r = 0; r < PV_PANEL; r++) memcpy(dst + 64 + 64 * j + 4 * r, b[r] + 4 + 4 * j, 4);
		for (int i = 0; i < 4; i++)
			for (int c = 0; c < 8; c++)
				for (int r = 0; r < PV_PANEL; r++)
					memcpy(dst + vec_off + 64 * (8 * i + c) + 4 * r, b[r] + qs_off + 32 * i + 4 * c, 4);
		if (t == PV_Q5_K)
			for (int i = 0; i < 4; i++)
				for (int c = 0; c < 8; c++)
					for (int h = 0; h < 2; h++) {
						uint64_t m = 0;
						for (int r = 0; r < PV_PANEL; r++)
							for (int k = 0; k < 4; k++)
								m |= (uint64_t)((b[r][16 + 4 * c + k] >> (2 * i + h)) & 1)
								     << (4 * r + k);
						memcpy(dst + 256 + 8 * (2 * (8 * i + c) + h), &m, 8);
					}
		return;
	}
	case PV_Q6_K:
		for (int j = 0; j < 16; j++)
			for (int r = 0; r < PV_PANEL; r++) dst[32 + 16 * j + r] = b[r][192 + j];
		for (int r = 0; r < PV_PANEL; r++) {
			unsigned char lo[256], hi[256];
			for (int e = 0; e < 256; e++) {
				lo[e] = (unsigned char)q6_lo4(b[r], e);
				hi[e] = (unsigned char)q6_hi2(b[r], e);
			}
			/* high bits: fields f = 0..3 of byte i of vector v hold elements 8v+i, 128+8v+i,
			 * 8v+4+i, 128+8v+4+i (qdot.h) */
			for (int v = 0; v < 16; v++)
				for (int i = 0; i < 4; i++)
					dst[288 + 64 * v + 4 * r + i] =
					        (unsigned char)(hi[8 * v + i] | hi[128 + 8 * v + i] << 2 |
					                        hi[8 * v + 4 + i] << 4 | hi[128 + 8 * v + 4 + i] << 6);
			for (int z = 0; z < 32; z++)
				for (int i = 0; i < 4; i++)
					dst[1312 + 64 * z + 4 * r + i] =
					        (unsigned char)(lo[4 * z + i] | lo[128 + 4 * z + i] << 4);
		}
		return;
	default: return;
	}
}

void pv_pack_panels(enum pv_dtype t, const void* src, int64_t rows, int64_t cols, void* dst)
{
	pv_pack_panels_range(t, src, rows, cols, dst, 0, (rows + PV_PANEL - 1) / PV_PANEL);
}

void pv_pack_panels_range(enum pv_dtype t, const void* src, int64_t rows, int64_t cols, void* dst, int64_t p0, int64_t p1)
{
	const size_t rb = pv_dtype_row_bytes(t, cols), bb = pv_dtype_block_bytes(t), pb = pv_panel_block_bytes(t);
	const int64_t nb = cols / pv_dtype_block(t);
	unsigned char* out = dst;
	for (int64_t p = p0; p < p1; p++)
		for (int64_t k = 0; k < nb; k++) {
			const unsigned char* blk[PV_PANEL];
			for (int r = 0; r < PV_PANEL; r++) {
				int64_t row = p * PV_PANEL + r;
				blk[r] = row < rows ? (const unsigned char*)src + (size_t)row * rb + (size_t)k * bb : NULL;
			}
			pack_block(t, blk, out + ((size_t)p * (size_t)nb + (size_t)k) * pb);
		}
}
