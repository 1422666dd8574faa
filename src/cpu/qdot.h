/*
 * qdot.h: the quantized-activation ("fast") numerics of the CPU matmuls, shared by the portable
 * reference (qdot.c), the repacker (pack.c) and the SIMD kernels (qgemm_avx512.c, qgemm_avx2.c).
 *
 * 1. Activations. Each activation row x[n] is converted once per call, from that row alone:
 *    - for the 32-element weight types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), per block of 32 ("Q8"):
 *        amax = max |x_i|,  d = amax / 127,  id = amax > 0 ? 127 / amax : 0,
 *          (amax: the largest bit pattern of the |x_i|, so a NaN input makes d a NaN)
 *        q_i = rint(clamp(x_i * id, -127, 127))          (round to nearest even; int8)
 *        s   = sum of the block's q_i                    (int32)
 *    - for the K types (Q4_K, Q5_K, Q6_K), the same per super-block of 256 ("Q8K"), with the
 *      sums s kept per 16 elements;
 *    - for BF16 weights on CPUs with AVX512-BF16: x rounded to bf16 (nearest even).
 *    clamp(v, lo, hi) is (v < hi ? v : hi) then (v > lo ? v : lo), the x86 min/max semantics,
 *    so every path quantizes every input, a NaN included, to the same bytes.
 *
 * 2. Products. For weight row w and activation row x the integer part of each block is exact
 *    (int32 arithmetic, no overflow for any stored block: bounds below), so it does not matter
 *    how a kernel computes it. The float part is one fixed sequence per output, the same in
 *    every kernel set, for every number of rows, thread count and split:
 *
 *      y = +0
 *      for each block b in increasing order:
 *        y = fma(fl(dw_b * dx_b), (float)I_b, y)
 *        Q4_1, Q5_1:  y = fma(fl(mw_b * dx_b), (float)S_b, y)            S_b = s of the block
 *        Q4_K, Q5_K:  y = fma(-fl(dmin_b * dx_b), (float)M_b, y)         M_b = sum_j m_j S_j
 *
 *    with, per type (q the stored integer, sc / m the sub-block scales and mins):
 *      Q8_0  I = sum q x        (q signed)                    |I| <= 32*128*127
 *      Q4_0  I = sum (q - 8) x      Q5_0  I = sum (q - 16) x
 *      Q4_1  I = sum q x            Q5_1  I = sum q x
 *      Q4_K, Q5_K  I = sum_j sc_j sum_{i in j} q_i x_i  (8 sub-blocks of 32)   |I| <= 63*31*127*256
 *      Q6_K  I = sum_j sc_j sum_{i in j} (q_i - 32) x_i  (16 sub-blocks of 16)  |I| <= 128*32*127*256
 *    fl() is one float rounding; (float)I rounds to nearest even when |I| > 2^24; fma rounds
 *    once. The generic C code (fmaf) and the SIMD kernels (vfmadd) therefore give the same bits:
 *    on a given machine the fast numerics do not depend on the kernel set at all.
 *
 * 3. Panels. The SIMD kernels read a copy of each quantized matrix repacked once at model open
 *    (pack.c) into panels of 16 rows: panel p holds rows 16p..16p+15 (rows past the end are
 *    zero), block after block; a panel block is exactly 16 stored blocks long, so the copy has
 *    the size of the original (plus the padding rows). Inside a panel block a "vector" is 64
 *    bytes: 4 bytes for each of the 16 rows (lane r = row 16p + r), so one vpdpbusd against 4
 *    activation bytes broadcast to all lanes advances 16 dot products by 4 elements. Layouts
 *    (offsets in bytes; f16 fields keep the file's bits):
 *      Q8_0  [0] d[16]  [32] 8 vectors: vector j lane r = q_r[4j..4j+3] + 128 (as u8)
 *      Q4_0  [0] d[16]  [32] 4 vectors: vector c lane r = qs_r[4c..4c+3]
 *               (low nibbles: elements 4c..4c+3, high nibbles: elements 16+4c..16+4c+3)
 *      Q4_1  [0] d[16] [32] m[16] [64] 4 vectors as Q4_0
 *      Q5_0  [0] d[16]  [32] 8 masks (u64)  [96] 4 vectors as Q4_0
 *      Q5_1  [0] d[16] [32] m[16] [64] 8 masks [128] 4 vectors as Q4_0
 *               mask 2c+h, bit 4r+i: the fifth bit of element 16h+4c+i of row r
 *      Q4_K  [0] d[16] [32] dmin[16] [64] 3 vectors: vector j lane r = scales_r[4j..4j+3]
 *            [256] 32 vectors, pair i (sub-blocks 2i, 2i+1), chunk c: vector 8i+c lane r =
 *               qs_r[32i+4c..32i+4c+3] (low nibbles: sub-block 2i, elements 4c..4c+3; high:
 *               sub-block 2i+1)
 *      Q5_K  as Q4_K, with [256] 64 masks: mask 2(8i+c)+h, bit 4r+k: bit 2i+h of qh_r[4c+k];
 *            the quant vectors at [768]
 *      Q6_K  [0] d[16] [32] scales: 16 x 16 bytes, byte 16j+r = sc_r[j]
 *            [288] 16 high-bit vectors, vector v lane r byte i: bits 2f,2f+1 (f = 0..3) are
 *               the top two bits of element e(v, f, i) = 128(f & 1) + 8v + 4(f >> 1) + i
 *            [1312] 32 vectors, vector z lane r byte i: low nibble = low 4 bits of element
 *               4z+i, high nibble = of element 128+4z+i
 *    The original layouts are in quant/quant.h.
 */
#ifndef PV_QDOT_H
#define PV_QDOT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

#define PV_PANEL 16 /* rows per panel */

/* Activation formats. */
enum pv_act_fmt { PV_ACT_F32 = 0, PV_ACT_Q8 = 1, PV_ACT_Q8K = 2, PV_ACT_BF16 = 3 };

static inline int pv_act_fmt_of(enum pv_dtype t)
{
	switch (t) {
	case PV_Q8_0:
	case PV_Q4_0:
	case PV_Q4_1:
	case PV_Q5_0:
	case PV_Q5_1: return PV_ACT_Q8;
	case PV_Q4_K:
	case PV_Q5_K:
	case PV_Q6_K: return PV_ACT_Q8K;
	default: return PV_ACT_F32;
	}
}

static inline size_t pv_a64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Elements per scale of a Q8 format, and per stored sum. */
static inline int64_t pv_act_blk(int fmt) { return fmt == PV_ACT_Q8K ? 256 : 32; }
static inline int64_t pv_act_sblk(int fmt) { return fmt == PV_ACT_Q8K ? 16 : 32; }

/* One converted row of n elements: d[n / blk] | s[n / sblk] | q[n], each 64-byte aligned
 * (Q8, Q8K); x[n] as bf16 (BF16). n is a whole number of blocks. */
static inline size_t pv_act_row_bytes(int fmt, int64_t n)
{
	if (fmt == PV_ACT_BF16) return pv_a64((size_t)n * 2);
	if (fmt == PV_ACT_F32) return 0;
	return pv_a64((size_t)(n / pv_act_blk(fmt)) * 4) + pv_a64((size_t)(n / pv_act_sblk(fmt)) * 4) + pv_a64((size_t)n);
}

struct pv_qrow {
	float* d;
	int32_t* s;
	int8_t* q;
};

static inline struct pv_qrow pv_act_row(void* base, int fmt, int64_t n)
{
	struct pv_qrow r;
	unsigned char* p = base;
	r.d = (float*)(void*)p;
	p += pv_a64((size_t)(n / pv_act_blk(fmt)) * 4);
	r.s = (int32_t*)(void*)p;
	p += pv_a64((size_t)(n / pv_act_sblk(fmt)) * 4);
	r.q = (int8_t*)p;
	return r;
}

/* Bytes of one panel block (16 stored blocks) and where the panels of a matrix start. */
static inline size_t pv_panel_block_bytes(enum pv_dtype t) { return PV_PANEL * pv_dtype_block_bytes(t); }
static inline size_t pv_panel_bytes(enum pv_dtype t, int64_t cols)
{
	return (size_t)(cols / pv_dtype_block(t)) * pv_panel_block_bytes(t);
}

/* Portable, shared by every kernel set (qdot.c). */
/* Converts rows x[T][ldx] (n elements each) into T rows of format fmt at dst, row_bytes apart. */
void pv_act_convert(int fmt, const float* x, int ldx, int T, int64_t n, void* dst, size_t row_bytes);
/* Repacks rows [0, rows) of a quantized matrix (type t, cols) into panels at dst
 * (ceil(rows / 16) * pv_panel_bytes(t, cols) bytes). */
void pv_pack_panels(enum pv_dtype t, const void* src, int64_t rows, int64_t cols, void* dst);
/* The same for panels [p0, p1) only (dst is still the first panel's address). */
void pv_pack_panels_range(enum pv_dtype t, const void* src, int64_t rows, int64_t cols, void* dst, int64_t p0, int64_t p1);

/* f32 -> bf16 as vcvtneps2bf16 does it: round to nearest even, zeros and subnormals to a zero
 * of the same sign, NaN to a quiet NaN. */
static inline uint16_t pv_f32_to_bf16_rne(float f)
{
	union {
		float f;
		uint32_t u;
	} v = { f };
	if ((v.u & 0x7f800000u) == 0) return (uint16_t)((v.u >> 16) & 0x8000u);
	if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
	return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

#endif
