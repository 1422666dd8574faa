/*
 * pack.c: repacking of quantized matrices into the 16-row panels the SIMD kernels of the fast
 * numerics read (layouts in qdot.h). Done once per matrix when a model is opened; a plain byte
 * and bit shuffle, so the panels hold exactly the stored values.
 */
#include "cpu/qdot.h"

#include <string.h>

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
		/* padding rows hold q = 0, stored 0x80 */
		for (int j = 0; j < 8; j++)
			for (int r = 0; r < PV_PANEL; r++) {
				uint32_t v = 0;
				if (blk[r]) memcpy(&v, b[r] + 2 + 4 * j, 4);
				v ^= 0x80808080u;
				memcpy(dst + 32 + 64 * j + 4 * r, &v, 4);
			}
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
		if (t == PV_Q5_0 || t == PV_Q5_1) {
			/* bits 4c..4c+3 (and 16+4c..) of each row's 32-bit qh, side by side */
			uint32_t qh[PV_PANEL];
			for (int r = 0; r < PV_PANEL; r++) memcpy(&qh[r], b[r] + qh_off, 4);
			for (int c = 0; c < 4; c++)
				for (int h = 0; h < 2; h++) {
					uint64_t m = 0;
					for (int r = 0; r < PV_PANEL; r++)
						m |= (uint64_t)((qh[r] >> (16 * h + 4 * c)) & 15u) << (4 * r);
					memcpy(dst + mask_off + 8 * (2 * c + h), &m, 8);
				}
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
			for (int c = 0; c < 8; c++) {
				/* bit s of qh_r[4c + k], for the 4 k, as a nibble per row and sub-block s */
				uint64_t m[8] = { 0 };
				for (int r = 0; r < PV_PANEL; r++)
					for (int k = 0; k < 4; k++) {
						const unsigned v = b[r][16 + 4 * c + k];
						for (int sb = 0; sb < 8; sb++)
							m[sb] |= (uint64_t)((v >> sb) & 1u) << (4 * r + k);
					}
				for (int i = 0; i < 4; i++)
					for (int h = 0; h < 2; h++)
						memcpy(dst + 256 + 8 * (2 * (8 * i + c) + h), &m[2 * i + h], 8);
			}
		return;
	}
	case PV_Q6_K:
		for (int j = 0; j < 16; j++)
			for (int r = 0; r < PV_PANEL; r++) dst[32 + 16 * j + r] = b[r][192 + j];
		for (int r = 0; r < PV_PANEL; r++) {
			unsigned char lo[256], hi[256];
			for (int h = 0; h < 2; h++)
				for (int l = 0; l < 32; l++) {
					/* elements 128h + l + 32k, k = 0..3 (quant.h) */
					const unsigned char q0 = b[r][64 * h + l], q1 = b[r][64 * h + l + 32],
					                    qh = b[r][128 + 32 * h + l];
					unsigned char* L = lo + 128 * h + l;
					unsigned char* Hh = hi + 128 * h + l;
					L[0] = q0 & 15;
					L[32] = q1 & 15;
					L[64] = q0 >> 4;
					L[96] = q1 >> 4;
					Hh[0] = qh & 3;
					Hh[32] = (qh >> 2) & 3;
					Hh[64] = (qh >> 4) & 3;
					Hh[96] = qh >> 6;
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
