/*
 * dequant.cu: weight matrices to bf16 for the prefill's GEMMs (prefill.cuh): every stored type
 * element by element (units.cuh's dq_elem, the value pv_dequant_block gives, then rounded), Q8_0
 * by 32-element blocks, Q4_K and Q6_K by 32-element groups with their scales decoded once; and
 * the test hook pv_cuda_test_dequant.
 */
#include "prefill.cuh"

#include <stdlib.h>
#include <string.h>

namespace {

/* out[r][c] = bf16(element (r, c) of a device matrix in its stored type), out ld = cols; lo
 * (unless NULL, the precise mode's split weights) = bf16(value - out), put_bf16's pair */
__global__ void dequant_kernel(pv_units::Planes m, int64_t rows, int cols, bf16* out, bf16* lo)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int64_t total = rows * (int64_t)cols;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / cols;
		const int c = (int)(i - r * cols);
		put_bf16(out, lo, (size_t)i, pv_units::dq_elem(m, r, c));
	}
}

/* two floats as a bf16 pair (.x: the first), or (residual) the pair of what rounding leaves */
__device__ __forceinline__ uint32_t pack_bf16x2(float a, float b, bool residual)
{
	if (residual) {
		a = __fsub_rn(a, __bfloat162float(__float2bfloat16_rn(a)));
		b = __fsub_rn(b, __bfloat162float(__float2bfloat16_rn(b)));
	}
	const __nv_bfloat162 h2 = __floats2bfloat162_rn(a, b);
	return *reinterpret_cast<const uint32_t*>(&h2);
}

/* 32 values to hi (bf16, four 16-byte stores; 64-byte aligned) and, unless NULL, to lo:
 * bf16(v - hi), put_bf16's pair (the precise mode's split weights: ~16 significant bits) */
__device__ __forceinline__ void store32(const float* f, bf16* hi, bf16* lo)
{
#pragma unroll
	for (int half = 0; half < 2; half++) {
		bf16* out = half ? lo : hi;
		if (!out) break;
		uint4* dst = reinterpret_cast<uint4*>(out);
#pragma unroll
		for (int v4 = 0; v4 < 4; v4++)
			dst[v4] = make_uint4(pack_bf16x2(f[8 * v4], f[8 * v4 + 1], half), pack_bf16x2(f[8 * v4 + 2], f[8 * v4 + 3], half),
			                     pack_bf16x2(f[8 * v4 + 4], f[8 * v4 + 5], half),
			                     pack_bf16x2(f[8 * v4 + 6], f[8 * v4 + 7], half));
	}
}

/* The same for Q8_0 (planes: qs [rows][nb * 32] int8, d [rows][nb] f16), a thread per block of
 * 32: the scale read once, two 16-byte loads, the values dq_elem gives ((float)q * d), four
 * 16-byte stores (out ld = cols = 32 nb, so every row and block is 64-byte aligned). */
__global__ void dequant_q8_kernel(pv_units::Planes m, int64_t rows, int nb, bf16* out, bf16* lo)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int64_t total = rows * nb;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / nb;
		const int b = (int)(i - r * nb);
		const float d = pv_units::f16f(pv_units::u16at(m.p1 + (size_t)r * m.s1 + (size_t)b * 2));
		const uint4* q = reinterpret_cast<const uint4*>(m.p0 + (size_t)r * m.s0 + (size_t)b * 32);
		const uint4 q0 = __ldg(q), q1 = __ldg(q + 1);
		float f[32];
#pragma unroll
		for (int j = 0; j < 16; j++) {
			const uint32_t wd = pv_units::word(j < 8 ? q0 : q1, (j & 7) >> 1);
			const int sh = 16 * (j & 1);
			f[2 * j] = __fmul_rn((float)(int)(signed char)((wd >> sh) & 0xffu), d);
			f[2 * j + 1] = __fmul_rn((float)(int)(signed char)((wd >> (sh + 8)) & 0xffu), d);
		}
		const size_t at = (size_t)r * (size_t)nb * 32 + (size_t)b * 32;
		store32(f, out + at, lo ? lo + at : NULL);
	}
}

/* byte i (0..31) of two 16-byte vectors */
__device__ __forceinline__ int byte32(const uint4& a, const uint4& b, int i)
{
	return (int)((pv_units::word(i < 16 ? a : b, (i & 15) >> 2) >> (8 * (i & 3))) & 0xffu);
}

/* Q4_K (stored blocks of 144 bytes per 256) and Q6_K (planes: ql|qh [rows][nb * 192], scales
 * [rows][nb * 16] int8, d [rows][nb] f16), a thread per group of 32 elements (one Q4_K sub-block,
 * one Q6_K (half, quarter)): the scale and minimum decoded once, the element expressions of
 * dq_elem, operation for operation; out ld = cols (a multiple of 256). */
__global__ void dequant_k_kernel(pv_units::Planes m, int64_t rows, int cols, bf16* out, bf16* lo)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	const int ng = cols / 32;
	const int64_t total = rows * ng;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t r = i / ng;
		const int c0 = 32 * (int)(i - r * ng), sb = c0 / 256, w0 = c0 % 256;
		const unsigned char* r0 = m.p0 + (size_t)r * m.s0;
		float f[32];
		if (m.type == PV_Q4_K) {
			const unsigned char* b = r0 + (size_t)sb * 144;
			const int s = w0 / 32;
			const float d = pv_units::f16f(pv_units::u16at(b)), dmin = pv_units::f16f(pv_units::u16at(b + 2));
			const unsigned char* q = b + 4;
			int sc, mn;
			if (s < 4) {
				sc = q[s] & 63;
				mn = q[s + 4] & 63;
			} else {
				sc = (q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4);
				mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
			}
			const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
			const uint4* qv = reinterpret_cast<const uint4*>(b + 16 + 32 * (s >> 1));
			const uint4 a0 = __ldg(qv), a1 = __ldg(qv + 1);
#pragma unroll
			for (int l = 0; l < 32; l++) {
				const int v = (byte32(a0, a1, l) >> (4 * (s & 1))) & 0xf;
				f[l] = __fsub_rn(__fmul_rn(d1, (float)v), m1);
			}
		} else { /* PV_Q6_K */
			const int h = w0 / 128, k = (w0 % 128) / 32;
			const uint4* ql = reinterpret_cast<const uint4*>(r0 + (size_t)sb * 192 + 64 * h + 32 * (k & 1));
			const uint4* qh = reinterpret_cast<const uint4*>(r0 + (size_t)sb * 192 + 128 + 32 * h);
			const uint4 l0 = __ldg(ql), l1 = __ldg(ql + 1), h0 = __ldg(qh), h1 = __ldg(qh + 1);
			const signed char* scp =
			        reinterpret_cast<const signed char*>(m.p1 + (size_t)r * m.s1 + (size_t)sb * 16 + 8 * h);
			const float d = pv_units::f16f(pv_units::u16at(m.p2 + (size_t)r * m.s2 + (size_t)sb * 2));
			const float ds0 = __fmul_rn(d, (float)scp[2 * k]), ds1 = __fmul_rn(d, (float)scp[2 * k + 1]);
#pragma unroll
			for (int l = 0; l < 32; l++) {
				const int qlb = byte32(l0, l1, l);
				const int nib = k < 2 ? (qlb & 0xf) : (qlb >> 4);
				const int q = (nib | ((byte32(h0, h1, l) >> (2 * k)) & 3) << 4) - 32;
				f[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)q);
			}
		}
		const size_t at = (size_t)r * cols + c0;
		store32(f, out + at, lo ? lo + at : NULL);
	}
}
} // namespace

/* out [rows][cols] = W as bf16 (the values dq_elem gives, rounded) and, unless lo is NULL,
 * lo = bf16(value - out): by 32-element blocks for Q8_0, Q4_K and Q6_K, else element by element */
int pv_cuda_dequant_bf16(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct dmat* W, bf16* out, bf16* lo,
                         char* err, size_t errlen)
{
	const int64_t total = W->rows * W->cols;
	if (W->type == PV_Q8_0 && W->cols % 32 == 0) {
		const int nb = (int)(W->cols / 32);
		int64_t blocks = (W->rows * nb + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant q8_0", tu, err, errlen, dequant_q8_kernel, dim3((unsigned)blocks), dim3(256), 0, st,
		          pv_prefill_planes(W), W->rows, nb, out, lo);
	} else if ((W->type == PV_Q4_K || W->type == PV_Q6_K) && W->cols % 256 == 0) {
		int64_t blocks = (W->rows * (W->cols / 32) + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant k", tu, err, errlen, dequant_k_kernel, dim3((unsigned)blocks), dim3(256), 0, st,
		          pv_prefill_planes(W), W->rows, (int)W->cols, out, lo);
	} else {
		int64_t blocks = (total + 255) / 256;
		if (blocks > 132 * 32) blocks = 132 * 32;
		PV_LAUNCH("dequant", tu, err, errlen, dequant_kernel, dim3((unsigned)blocks), dim3(256), 0, st,
		          pv_prefill_planes(W), W->rows, (int)W->cols, out, lo);
	}
	return 0;
}

/* ---- tests: the prefill's weight dequantization alone ------------------------------------------ */

int pv_cuda_test_dequant(const struct pv_tensor* W, float* out, float* out_lo, char* err, size_t errlen)
{
	struct pv_cuda_tuning tu; /* the defaults and the environment: no model here */
	if (pv_cuda_tuning_read(&tu, NULL, NULL, err, errlen) || pv_cuda_select_device(err, errlen)) return -1;
	struct dmat d;
	if (pv_cuda_plan_mat(W, &d, err, errlen)) return -1;
	unsigned char* mem = NULL;
	bf16* dy = NULL;
	cudaStream_t st = NULL;
	struct pv_stager* sg = NULL;
	uint16_t* host = NULL;
	int rc = -1;
	const size_t n = (size_t)W->rows * (size_t)W->cols;
	host = (uint16_t*)malloc(n * 2 + 2);
	if (!host) {
		pv_errf(err, errlen, "out of memory");
		goto done;
	}
	CU_OR(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), done);
	CU_OR(cudaMalloc((void**)&mem, d.bytes), done);
	{
		size_t off = 0;
		for (int q = 0; q < d.n_planes; q++) {
			d.p[q] = mem + off;
			off += (d.stride[q] * (size_t)d.rows + 255) / 256 * 256;
		}
	}
	CU_OR(cudaMalloc((void**)&dy, n * 4), done); /* hi, then lo */
	if (pv_stager_new(&sg, st, d.bytes, err, errlen) || pv_stager_upload_mat(sg, W, &d, 0, err, errlen) ||
	    pv_stager_finish(sg, err, errlen))
		goto done;
	if (pv_cuda_dequant_bf16(st, &tu, &d, dy, out_lo ? dy + n : NULL, err, errlen)) goto done;
	for (int half = 0; half < (out_lo ? 2 : 1); half++) {
		CU_OR(cudaMemcpyAsync(host, dy + half * n, n * 2, cudaMemcpyDeviceToHost, st), done);
		CU_OR(cudaStreamSynchronize(st), done);
		float* o = half ? out_lo : out;
		for (size_t i = 0; i < n; i++) {
			const uint32_t u = (uint32_t)host[i] << 16;
			memcpy(o + i, &u, 4);
		}
	}
	rc = 0;
done:
	pv_stager_free(sg);
	if (st) cudaStreamSynchronize(st);
	if (st) cudaStreamDestroy(st);
	if (mem) cudaFree(mem);
	if (dy) cudaFree(dy);
	free(host);
	return rc;
}
