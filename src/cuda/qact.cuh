/*
 * qact.cuh: the quantized activations of cuda.q8_act (qgemv.cu): the row layout in the session's
 * scratch and the warp that quantizes 256 elements of a row, shared by qgemv.cu's activation
 * kernel and the add+RMSNorm that writes its output quantized too (norm_rope.cu), so both give
 * the same bytes.
 *
 * A row of n elements in blocks of blk (32: Q8, for Q8_0 weights; 256: Q8K, for Q4_K / Q6_K):
 * q int8[n] | d float[n / blk] | s int32[n / 32] (the sums of q per 32 elements, for Q4_K's
 * mins), each part 16-byte aligned. The values are qdot.c's quant_block: amax as the largest bit
 * pattern of |x| (a max: any order gives the same), d = amax / 127, id = 127 / amax (0 unless
 * amax > 0), q = rint(x * id) clamped to [-127, 127] as x86 minps / maxps do (NaN: the bound).
 */
#ifndef PV_CUDA_QACT_CUH
#define PV_CUDA_QACT_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

__host__ __device__ constexpr size_t pv_a16(size_t n) { return (n + 15) & ~(size_t)15; }

/* bytes of one quantized row of n elements in blocks of blk */
__host__ __device__ inline size_t pv_qrow_bytes(int blk, int64_t n)
{
	return pv_a16((size_t)n) + pv_a16((size_t)(n / blk) * 4) + pv_a16((size_t)(n / 32) * 4);
}

/* where a row's scales and sums start, past its n codes (blocks of blk) */
__host__ __device__ constexpr size_t pv_qrow_d_off(int n) { return pv_a16((size_t)n); }
__host__ __device__ constexpr size_t pv_qrow_s_off(int blk, int n)
{
	return pv_a16((size_t)n) + pv_a16((size_t)(n / blk) * 4);
}

/* x86 minps / maxps (qdot.c): the second operand when either is NaN */
__device__ __forceinline__ float pv_min_x86(float a, float b) { return a < b ? a : b; }
__device__ __forceinline__ float pv_max_x86(float a, float b) { return a > b ? a : b; }

/* Elements 256 c .. 256 c + 255 of one row (n elements, n a multiple of blk; the part past n is
 * skipped) into that row's quantized form at row: all 32 lanes of the warp call it, lane l takes
 * the 8 elements from 256 c + 8 l (a Q8 block is 4 lanes, a Q8K block the warp). v: those 8
 * values (zeros past n). */
__device__ __forceinline__ void pv_q8_chunk(const float* v, int n, int blk, int c, unsigned char* row)
{
	const int lane = threadIdx.x & 31, e0 = c * 256 + lane * 8;
	unsigned ab = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) ab = max(ab, __float_as_uint(v[i]) & 0x7fffffffu);
	if (blk == 32) {
		ab = max(ab, __shfl_xor_sync(0xffffffffu, ab, 1));
		ab = max(ab, __shfl_xor_sync(0xffffffffu, ab, 2));
	} else {
		ab = __reduce_max_sync(0xffffffffu, ab);
	}
	const float amax = __uint_as_float(ab);
	const float d = __fdiv_rn(amax, 127.0f);
	const float id = amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
	uint32_t w[2] = { 0, 0 };
	int s = 0;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const int q = (int)rintf(pv_max_x86(pv_min_x86(__fmul_rn(v[i], id), 127.0f), -127.0f));
		s += q;
		w[i >> 2] |= (uint32_t)(q & 0xff) << (8 * (i & 3));
	}
	s += __shfl_xor_sync(0xffffffffu, s, 1);
	s += __shfl_xor_sync(0xffffffffu, s, 2);
	if (e0 >= n) return;
	*reinterpret_cast<uint2*>(row + e0) = make_uint2(w[0], w[1]);
	float* dd = reinterpret_cast<float*>(row + pv_qrow_d_off(n));
	int* ss = reinterpret_cast<int*>(row + pv_qrow_s_off(blk, n));
	if ((lane & 3) == 0) {
		ss[e0 / 32] = s;
		if (blk == 32) dd[e0 / 32] = d;
	}
	if (blk == 256 && lane == 0) dd[c] = d;
}

/* the 8 elements of lane l of chunk c of a row at xr (n elements, 16-byte aligned), zeros past n */
__device__ __forceinline__ void pv_q8_load8(const float* xr, int n, int c, float* v)
{
	const int e0 = c * 256 + (threadIdx.x & 31) * 8;
	if (e0 < n) {
		const float4 p0 = *reinterpret_cast<const float4*>(xr + e0), p1 = *reinterpret_cast<const float4*>(xr + e0 + 4);
		v[0] = p0.x, v[1] = p0.y, v[2] = p0.z, v[3] = p0.w, v[4] = p1.x, v[5] = p1.y, v[6] = p1.z, v[7] = p1.w;
	} else {
#pragma unroll
		for (int i = 0; i < 8; i++) v[i] = 0.0f;
	}
}

#endif
