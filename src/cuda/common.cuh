/*
 * common.cuh: what the CUDA backend's files share: the engine's C headers, checked CUDA calls,
 * the device copy of the model (struct dmodel), the per-step device struct, the launch entry
 * points of each kernel file, and the fixed reduction trees every kernel uses. A session's
 * device state (struct dsession) is in session.cuh, for the host files that drive it.
 *
 * Exactness rules for every kernel here (src/cuda/README.md):
 *   - a reduction's order depends only on the length reduced (hidden size, head dim, row length,
 *     number of keys), never on how many rows a call has, on the grid, or on the graph;
 *   - warp sums are xor butterflies (every lane ends with the same, fixed tree), block sums add
 *     the warps' results in warp order on one thread; no atomics;
 *   - the build uses -fmad=false: a*b+c is a multiply and an add, as on the CPU; fused
 *     multiply-adds appear only where fmaf() is written.
 */
#ifndef PV_CUDA_COMMON_CUH
#define PV_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "base/log.h"
#include "base/util.h"
#include "cuda/backend.h"
#include "engine/backend.h"
#include "engine/session.h"
}

#include "tuning.cuh"

/* ---- checked calls ------------------------------------------------------------------------ */

/* Formats "CUDA backend: <what>: <cuda error>" into err and returns -1. */
int pv_cuda_fail(char* err, size_t errlen, const char* what, cudaError_t e);

/* CU(call, err, errlen): returns -1 from the enclosing function with a message on failure. */
#define CU(call, err, errlen)                                                        \
	do {                                                                         \
		cudaError_t cu_e_ = (call);                                           \
		if (cu_e_ != cudaSuccess) return pv_cuda_fail(err, errlen, #call, cu_e_); \
	} while (0)

/* CU_OR(call, label): on failure, the message into the enclosing function's err / errlen and a
 * jump to label (functions with clean-up to do before they return). */
#define CU_OR(call, label)                                       \
	do {                                                     \
		cudaError_t cu_e_ = (call);                      \
		if (cu_e_ != cudaSuccess) {                      \
			pv_cuda_fail(err, errlen, #call, cu_e_); \
			goto label;                              \
		}                                                \
	} while (0)


/* ---- KV cache element types ---------------------------------------------------------------- */

/*
 * The device KV cache holds a layer's K (and V) as [n_ctx][nkv] head slices of hd elements of
 * one type, the session's enum pv_cache_type; slice (row j, head h) starts at byte
 * (j nkv + h) pv_kv_hbytes(kvt, hd):
 *   f32        hd floats
 *   f16, bf16  hd 16-bit words (IEEE half or bf16) stored as uint16_t
 *   q8_0       hd int8 codes, then the slice's nb = ceil(hd / 32) f16 scales, the slice padded
 *              to a multiple of 8 bytes (hd 128: 136 bytes, as the CPU's 4 x 34); element i is
 *              d[i / 32] * q[i]. The CPU's bytes rearranged per slice (codes, then scales) so
 *              every code load is an aligned 8-byte vector. A last partial block (hd not a
 *              multiple of 32) is the CPU's zero-padded one: its scale is over the slice's
 *              elements alone, the padding codes are not stored.
 * An element is rounded once, when qkv_post (or the fused attention input stage) writes it, by
 * the CPU's own functions (quant.c pv_f32_to_f16, kvcache.c f32_to_bf16: round to nearest even,
 * the same NaN and overflow encodings; q8_0: quant.c quant_q8_0 per block of 32 by one warp,
 * pv_kv_put_head below), so the stored values equal the CPU cache's; readers widen them to f32
 * exactly (f16 d times |q| <= 127 is an f32) and the attention arithmetic after the load is f32
 * as before. Every read of a head slice is a vector: 16 bytes (4 f32 or 8 16-bit elements) or,
 * for q8_0, 8 codes (8 bytes) and their block's scale. Head dims are a multiple of 8 for every
 * type but f32 (a multiple of 4): attention.cu refuses others (PV_E_UNSUPPORTED).
 */
enum { PV_KV_F32 = 0, PV_KV_F16 = 1, PV_KV_BF16 = 2, PV_KV_Q8_0 = 3 };

/* bytes of one head slice [hd] of a cache of type kvt (a cache row is nkv of them) */
__host__ __device__ inline size_t pv_kv_hbytes(int kvt, int hd)
{
	if (kvt == PV_KV_Q8_0) return ((size_t)hd + 2 * (((size_t)hd + 31) / 32) + 7) / 8 * 8;
	return (size_t)hd * (kvt == PV_KV_F32 ? 4 : 2);
}

/* the bits of an f32 (device and host: tests/cuda/test_cuda_host.cu runs the roundings below
 * against the CPU's on the host) */
__host__ __device__ __forceinline__ uint32_t pv_kv_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
#endif
}

/* quant.c pv_f32_to_f16, operation for operation */
__host__ __device__ __forceinline__ uint16_t pv_d_f32_to_f16(float f)
{
	uint32_t u = pv_kv_bits(f);
	const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	u &= 0x7fffffffu;
	if (u > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
	if (u >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520: rounds to infinity */
	if (u < 0x38800000u) {
		/* below 2^-14: a multiple of 2^-24; scaling by 2^24 is exact, the add and subtract of
		 * 2^23 round to the nearest integer, ties to even (-fmad=false: nothing fused) */
		const float s = fabsf(f) * 0x1p24f;
		const float r = (s + 0x1p23f) - 0x1p23f;
		return sign | (uint16_t)r;
	}
	const uint32_t mant = u & 0x7fffffu;
	uint32_t h = ((u >> 23) - 112u) << 10 | mant >> 13; /* rebias 127 -> 15 */
	const uint32_t rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry bumps the exponent */
	return sign | (uint16_t)h;
}

/* kvcache.c f32_to_bf16 */
__host__ __device__ __forceinline__ uint16_t pv_d_f32_to_bf16(float f)
{
	const uint32_t u = pv_kv_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
	return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* quant.c quant_q8_0, split in the pieces one warp and the host test share (a block's amax is
 * a max, exact in any order). The scale of a block whose amax is amax: d = amax / 127 stored as
 * f16 (*dh), and the factor the codes are computed with, id = 1 / d or 0 (from the f32 d). */
__host__ __device__ __forceinline__ float pv_d_q8_id(float amax, uint16_t* dh)
{
	const float d = amax / 127;
	*dh = pv_d_f32_to_f16(d);
	return d != 0.0f ? 1.0f / d : 0.0f;
}

/* the code of x: (int8_t)trunc_i32(roundf(x * id)), trunc_i32 giving INT32_MIN (low byte 0) for
 * NaN and values outside the int32 range (x86's cvttss2si) where the device's conversion would
 * saturate; in range, the low byte of the integer */
__host__ __device__ __forceinline__ int8_t pv_d_q8_code(float x, float id)
{
	const float r = roundf(x * id);
	if (!(r > -2147483648.0f && r < 2147483648.0f)) return 0;
	return (int8_t)(uint8_t)((uint32_t)(int32_t)r & 0xffu);
}

/* a non-finite value (quant.c pv_quant_row refuses the block; kvcache.c then stores scale 0x7e00,
 * a NaN, and codes 0) */
__host__ __device__ __forceinline__ bool pv_d_nonfinite(float x) { return (pv_kv_bits(x) & 0x7f800000u) == 0x7f800000u; }

/* One block of n <= 32 values (the rest zero) as kvcache.c pv_kv_store stores it: *dh and q[n].
 * The host form of what pv_kv_put_head's warp does (tests/cuda/test_cuda_host.cu runs it against
 * the CPU's pv_quant_row). */
__host__ __device__ inline void pv_d_q8_block(const float* x, int n, uint16_t* dh, int8_t* q)
{
	float amax = 0.0f;
	bool bad = false;
	for (int i = 0; i < n; i++) {
		const float a = fabsf(x[i]);
		amax = amax > a ? amax : a;
		bad |= pv_d_nonfinite(x[i]);
	}
	const float id = pv_d_q8_id(amax, dh);
	for (int i = 0; i < n; i++) q[i] = bad ? 0 : pv_d_q8_code(x[i], id);
	if (bad) *dh = 0x7e00u;
}

/* a stored q8_0 element (scale bits dh, the code in the low byte of q) as f32: kvcache.c
 * pv_kv_load's d * (float)q, exact (an f16 times |q| <= 127 is an f32), so the same bits */
__host__ __device__ __forceinline__ float pv_kv_q8_elem(uint16_t dh, uint32_t q)
{
	return __half2float(__ushort_as_half((unsigned short)dh)) * (float)(int8_t)(uint8_t)(q & 0xffu);
}

/* element i of a cache of type KVT := v (rounded as above) */
template <int KVT>
__device__ __forceinline__ void pv_kv_put(void* base, size_t i, float v)
{
	if constexpr (KVT == PV_KV_F32) {
		static_cast<float*>(base)[i] = v;
	} else if constexpr (KVT == PV_KV_F16) {
		static_cast<uint16_t*>(base)[i] = pv_d_f32_to_f16(v);
	} else {
		static_assert(KVT == PV_KV_BF16, "q8_0 is written a head slice at a time: pv_kv_put_head");
		static_cast<uint16_t*>(base)[i] = pv_d_f32_to_bf16(v);
	}
}

/* one stored 16-bit element (the low half of h) widened to f32 (exact) */
template <int KVT>
__host__ __device__ __forceinline__ float pv_kv_widen(uint32_t h)
{
	if constexpr (KVT == PV_KV_F16) {
		return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
	} else {
#ifdef __CUDA_ARCH__
		return __uint_as_float((h & 0xffffu) << 16);
#else
		const uint32_t u = (h & 0xffffu) << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
#endif
	}
}

/* elements per vector of a cache of type KVT (16 bytes; q8_0: 8 codes, 8 bytes) */
template <int KVT>
__host__ __device__ constexpr int pv_kv_vec() { return KVT == PV_KV_F32 ? 4 : 8; }

/* vector v (pv_kv_vec<KVT>() elements) of a head slice [hd] starting at row, widened into f[] in
 * element order; plain: ordinary loads (coherent with this block's own earlier writes), else
 * through the read-only cache. q8_0: codes 8v .. 8v + 7, all in block v / 4, whose scale is
 * scale v / 4 of the slice (after its hd codes); d q is exact, the CPU's d * (float)q. */
template <int KVT>
__device__ __forceinline__ void pv_kv_load(const void* row, int v, bool plain, float* f, int hd)
{
	if constexpr (KVT == PV_KV_Q8_0) {
		const uint2* p = static_cast<const uint2*>(row) + v;
		const unsigned short* sp = reinterpret_cast<const unsigned short*>(static_cast<const char*>(row) + hd) + (v >> 2);
		const uint2 x = plain ? *p : __ldg(p);
		const unsigned short s = plain ? *sp : __ldg(sp);
		const uint32_t w[2] = { x.x, x.y };
#pragma unroll
		for (int i = 0; i < 2; i++)
#pragma unroll
			for (int b = 0; b < 4; b++) f[4 * i + b] = pv_kv_q8_elem(s, w[i] >> (8 * b));
	} else if constexpr (KVT == PV_KV_F32) {
		const float4* p = static_cast<const float4*>(row) + v;
		const float4 x = plain ? *p : __ldg(p);
		f[0] = x.x;
		f[1] = x.y;
		f[2] = x.z;
		f[3] = x.w;
	} else {
		const uint4* p = static_cast<const uint4*>(row) + v;
		const uint4 x = plain ? *p : __ldg(p);
		const uint32_t w[4] = { x.x, x.y, x.z, x.w };
#pragma unroll
		for (int i = 0; i < 4; i++) {
			f[2 * i] = pv_kv_widen<KVT>(w[i]);
			f[2 * i + 1] = pv_kv_widen<KVT>(w[i] >> 16);
		}
	}
}

/* ---- device weights ----------------------------------------------------------------------- */

/*
 * A weight matrix in device memory, in its stored type. Float types, Q4_K and Q5_K are the
 * stored bytes; the other quantized types are split into planes (structure of arrays) so every
 * load is aligned; the values are the same bytes, rearranged (upload.cu):
 *   Q8_0: plane 0 qs [rows][nb*32] int8,    plane 1 d [rows][nb] f16
 *   Q4_0: plane 0 qs [rows][nb*16] nibbles, plane 1 d [rows][nb] f16
 *   Q4_1: plane 0 qs [rows][nb*16] nibbles, plane 1 d,m [rows][nb][2] f16
 *   Q5_0: plane 0 qs [rows][nb*16] nibbles, plane 1 qh [rows][nb] u32, plane 2 d [rows][nb] f16
 *   Q5_1: plane 0 qs [rows][nb*16] nibbles, plane 1 qh [rows][nb] u32, plane 2 d,m [rows][nb][2] f16
 *   Q6_K: plane 0 ql|qh [rows][nb*192],  plane 1 scales [rows][nb*16], plane 2 d [rows][nb] f16
 * (nb: blocks per row, 32 elements each; 256 for Q6_K)
 */
#define PV_CUDA_MAX_PLANES 3
struct dmat {
	int type;                               /* enum pv_dtype; -1: absent                   */
	int64_t rows, cols;
	unsigned char* p[PV_CUDA_MAX_PLANES];   /* plane base pointers                         */
	size_t stride[PV_CUDA_MAX_PLANES];      /* bytes per row of each plane                 */
	int n_planes;
	uint64_t bytes;                         /* all planes                                  */
};

struct dlayer {
	const float *attn_norm, *ffn_norm;      /* [H]                                         */
	/* Gated DeltaNet */
	struct dmat in_qkv, in_z, in_b, in_a;   /* Qwen3.5 (and GGUF Qwen3-Next: in_ba)        */
	struct dmat in_qkvz, in_ba;             /* Qwen3-Next, key-group-major                  */
	struct dmat out_proj;
	const float *conv_w, *ssm_a, *dt_bias, *lin_norm;
	const float *bq, *bk, *bv;              /* Qwen2 biases or NULL                        */
	const float *q_norm, *k_norm;           /* [hd] or NULL                                */
	struct dmat wq, wk, wv, wo;
	struct dmat gate, up, down;             /* dense SwiGLU                                */
	/* MoE: the router, every expert's matrices stacked (expert e: rows e*Ie .. e*Ie+Ie-1, or
	 * e*H .. for down), the shared expert and its gate vector */
	struct dmat router, ex_gate, ex_up, ex_down;
	struct dmat sh_gate, sh_up, sh_down;
	const float* sh_gate_w;                 /* [H] or NULL                                 */
};

/* The MTP head (model.h struct pv_mtp, mtp.cu), uploaded when the model has one (on) */
struct dmtp {
	int on;
	struct dmat fc;                         /* [H, 2H], input order [embedding, hidden]    */
	const float *norm_emb, *norm_hidden, *norm_out; /* [H]                                 */
	struct dlayer layer;                    /* full attention, the model's FFN kind        */
};

struct dmodel {
	unsigned char* arena;                   /* one cudaMalloc for every weight             */
	size_t arena_bytes, arena_used;
	struct dmat embed, lm_head;             /* lm_head aliases embed when tied             */
	const float* final_norm;
	struct dlayer* layers;                  /* host array of device pointers               */
	struct dmtp mtp;
	struct pv_cuda_model_stats st;
	struct pv_cuda_tuning tu;              /* the knobs in effect, read once at open       */
	struct pv_knob knobs[PV_CUDA_N_KNOBS]; /* the same as pv_model_knobs lists them        */
};

/* upload.cu */
int pv_cuda_plan_mat(const struct pv_tensor* t, struct dmat* d, char* err, size_t errlen);
struct pv_stager;
/* staging buffers of min(bytes, 64 MiB) (at least 4 KiB); a plane row must fit */
int pv_stager_new(struct pv_stager** out, cudaStream_t st, size_t bytes, char* err, size_t errlen);
/* t's rows into d's rows row0 .. row0 + t->rows - 1 */
int pv_stager_upload_mat(struct pv_stager* sg, const struct pv_tensor* t, const struct dmat* d, int64_t row0, char* err,
                         size_t errlen);
int pv_stager_finish(struct pv_stager* sg, char* err, size_t errlen);
void pv_stager_free(struct pv_stager* sg);
int pv_cuda_select_device(char* err, size_t errlen);

/* ---- the per-step device struct (positions and tokens read by every kernel) ---------------- */

#define PV_CUDA_ROWS 16        /* rows per device step (the multi-row kernels' maximum)        */
struct dstep {
	int pos0;                  /* position of row 0                                            */
	int n;                     /* rows                                                         */
	int tokens[PV_CUDA_ROWS];
};

/*
 * A multi-session step (forward_many, many.cu): row t < step.n is session t's one-row step (a
 * decode token of one of up to 16 sessions of one model), the rows evaluated together over the
 * host session's scratch. Everything per row that a one-session step takes from the step's pos0
 * or from its session is read from here at run time, so one captured graph per row count serves
 * any set of sessions:
 *   step.tokens[t]  row t's token (the embedding reads step as for one session; pos0 unused)
 *   pos[t]          row t's position (RoPE, the KV row written, the keys attended)
 *   kt[t], vt[t]    row t's session's table of per-layer cache pointers (dsession.kvtab, device
 *                   memory): layer l's K is kt[t][l] ([n_ctx][kvd] elements of the cache type),
 *                   V vt[t][l]; NULL for layers without a KV cache
 *   state[t]        row t's session's recurrent state (dsession.state; NULL for attention-only
 *                   models): every linear layer's S [Hv][dk][dv] then its conv window
 *                   [Kc-1][cd], pv_state_floats_per_layer floats per layer, linear layer k's at
 *                   k times that (the layout is the model's, so the offset is a launch argument)
 * step comes first so a struct dmany* is also the struct dstep* the embedding reads; state comes
 * last so the fields the attention kernels read keep their offsets (and those kernels their PTX).
 */
struct dmany {
	struct dstep step;
	int pos[PV_CUDA_ROWS];
	void* const* kt[PV_CUDA_ROWS];
	void* const* vt[PV_CUDA_ROWS];
	float* state[PV_CUDA_ROWS];
};

/* Where a kernel's row t takes its position and this layer's K/V cache from: the step struct and
 * the launch arguments (one session), or struct dmany (one row per session, forward_many). The
 * kernels that serve both (qkv_post, attention) run one body templated on this source and ask
 * at the points the one-session kernels always read them, so those keep their code (PTX). */
template <class A> /* struct qkv_post_args or struct attn_args */
struct pv_rows_one {
	const A& a;
	__device__ __forceinline__ int pos(int t) const { return a.step->pos0 + t; }
	__device__ __forceinline__ auto k(int) const { return a.kc; }
	__device__ __forceinline__ auto v(int) const { return a.vc; }
};
struct pv_rows_many {
	const struct dmany* m;
	int layer;
	__device__ __forceinline__ int pos(int t) const { return m->pos[t]; }
	__device__ __forceinline__ void* k(int t) const { return m->kt[t][layer]; }
	__device__ __forceinline__ void* v(int t) const { return m->vt[t][layer]; }
};

/* ---- kernel launchers (each returns 0 or -1 with a message) -------------------------------- */

/* gemv.cu: y_s[t*ldy_s + o] = sum_i xin[t][i] * W_s[o][i] (+ bias_s[o]) for every output s, t < T.
 * xin = x (xmode 0) or silu(x) * x2 (xmode 1, the SwiGLU product), elementwise, ld ldx. All
 * outputs must share cols; outputs of one weight type and kernel share one launch. T > 16 (not
 * gathered): the 16-row groups side by side in one launch, each row's bits what a call of its own
 * group gives (the MoE prompt's router). */
struct gemv_out {
	const struct dmat* w;
	float* y;
	int ldy;
	const float* bias;
};
enum { PV_X_PLAIN = 0, PV_X_SWIGLU = 1 };
int pv_cuda_gemv(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                 const float* x2, int ldx, int xmode, int T, int* n_launch, char* err, size_t errlen);
/* Gathered (MoE): w holds n_experts stacked matrices; slot q < slots multiplies expert sel[q]
 * (device memory, so a graph can replay it) with activation row q / k (q with x_by_slot) and
 * writes output row q (y + q * ldy). T must be 1: each slot is one row's product. */
struct gemv_gather {
	const int* sel;
	int slots, k, n_experts, x_by_slot;
};
int pv_cuda_gemv_gather(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out,
                        const float* x, const float* x2, int ldx, int xmode, int T, const struct gemv_gather* ga, int* n_launch,
                        char* err, size_t errlen);

/* One-row gate/up GEMV with the SwiGLU product in its epilogue: gate->y = silu(gate x) * (up x),
 * bitwise what pv_cuda_gemv of both then pv_cuda_swiglu give. Returns 1 when it launched, 0 when
 * the shapes/types/alignment (or cuda.swiglu_pair=0) call for the two-kernel path, -1 on error. */
int pv_cuda_gemv_swiglu(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* gate,
                        const struct gemv_out* up, const float* x, int ldx, int T, int* n_launch, char* err, size_t errlen);
/* One activation row, one output (its y is delta) and the add+RMSNorm after it in the epilogue
 * (x += y; xn = rmsnorm(x) * w): 1 when launched, 0 when the shapes/types/alignment call for the
 * GEMV then pv_cuda_add_rmsnorm (same bits either way; also when cuda.norm_fuse is off), -1 on error. */
int pv_cuda_gemv_norm(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* out, const float* x, int ldx,
                      const struct norm_epi* ne, int* n_launch, char* err, size_t errlen);
/* The same over gathered experts (MoE): slot q's expert sel[q], written to gate->y + q * ldy. */
int pv_cuda_gemv_swiglu_gather(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* gate,
                               const struct gemv_out* up, const float* x, int ldx, int T, const struct gemv_gather* ga,
                               int* n_launch, char* err, size_t errlen);
/* qgemv.cu (cuda.q8_act): the CPU's fast numerics for Q8_0 / Q4_K / Q6_K weights, bit for bit:
 * the activation rows quantized into the session's scratch (tu->q8_buf), then integer dot
 * products. pv_cuda_q8_applies says whether a call takes it (the knob, a scratch, weights of one
 * activation format, at most 16 rows, gathered: one row per slot); pv_cuda_qgemv launches it
 * (pair: outs = {gate, up}, silu(g) * u into gate's y, T = 1): 1 when it did, 0 when the call is
 * not for it, -1 on error. pv_cuda_q8_bytes: the scratch for rows rows of cols elements. */
int pv_cuda_q8_applies(const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, int T,
                       const struct gemv_gather* ga);
int pv_cuda_qgemv(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                  const float* x2, int ldx, int xmode, int T, const struct gemv_gather* ga, int pair, int* n_launch,
                  char* err, size_t errlen);
size_t pv_cuda_q8_bytes(int64_t rows, int64_t cols);
/* the activation block a matrix takes under tu's cuda.q8_act (32, 256), 0 when it keeps the float GEMVs */
int pv_cuda_q8_blk(const struct pv_cuda_tuning* tu, const struct dmat* w);
/* pv_cuda_add_rmsnorm that also writes xn quantized in blocks of blk into tu->q8_buf (qact.cuh):
 * 1 when it launched, 0 when it cannot (no scratch, shapes, alignment: the caller runs the plain
 * one), -1 on error. The GEMVs that read xn then skip their quantization (tu->q8_have). */
int pv_cuda_add_rmsnorm_q8(cudaStream_t st, const struct pv_cuda_tuning* tu, float* x, const float* delta, float* xn,
                           const float* w, int H, float eps, int n, int blk, char* err, size_t errlen);
/* gemv_tma.cu: one activation row over BF16/F16/F32 rows whose weights come into shared memory
 * through the bulk copy engine (the first stages before the PDL wait); bitwise pv_cuda_gemv's
 * result. pair: outs = {gate, up}, writes silu(g) * u to gate's y. Returns 1 when it launched,
 * 0 when the shapes/types/alignment do not fit it (or cuda.gemv_tma is 0, the default), -1 on error.
 * pv_cuda_gemv_tma_init raises the kernels' shared-memory limit (once, before any capture). */
int pv_cuda_gemv_tma(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct gemv_out* outs, int n_out, const float* x,
                     int ldx, int pair, int* n_launch, char* err, size_t errlen);
int pv_cuda_gemv_tma_init(char* err, size_t errlen);
/* g[t*ld + i] = silu(g[t*ld + i]) * u[t*ld + i] for i < width, t < n: the SwiGLU product, once, so
 * the down projection is a plain GEMV (one kernel) */
int pv_cuda_swiglu(cudaStream_t st, const struct pv_cuda_tuning* tu, float* g, const float* u, int ld, int width, int n,
                   char* err, size_t errlen);

/* norm_rope.cu */
int pv_cuda_embed(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct dmat* E, const struct dstep* step, float* x,
                  int H, int n, char* err, size_t errlen);
/* x[t] += delta[t] (unless delta is NULL); xn[t] = rmsnorm(x[t]) * w, rows t < n. */
int pv_cuda_add_rmsnorm(cudaStream_t st, const struct pv_cuda_tuning* tu, float* x, const float* delta, float* xn,
                        const float* w, int H, float eps, int n, char* err, size_t errlen);
struct qkv_post_args {
	const float *qraw, *kraw, *vraw;  /* projections (biases added): [n][ldq], [n][kvd], [n][kvd] */
	int ldq;                          /* nh*hd, or nh*2*hd with the output gate                  */
	int gated;                        /* q_proj rows are [q_h | gate_h] per head                 */
	const float *q_norm, *k_norm;     /* [hd] or NULL                                            */
	const float *cos, *sin;           /* [n_ctx][R/2]                                            */
	float *q, *gate;                  /* out: [n][nh*hd] roped query, [n][nh*hd] gate            */
	void *kc, *vc;                    /* this layer's cache [n_ctx][nkv] head slices of type kvt */
	int kvt;                          /* PV_KV_F32, PV_KV_F16, PV_KV_BF16 or PV_KV_Q8_0          */
	int nh, nkv, hd, R;
	float eps;
	const struct dstep* step;
};
int pv_cuda_qkv_post(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct qkv_post_args* a, int n, char* err,
                     size_t errlen);
/* The same input stage for a multi-session step: row t at m->pos[t] into its session's cache of
 * this layer (m->kt[t][layer], m->vt[t][layer]); a->kc, a->vc and a->step are not read. */
int pv_cuda_qkv_post_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct qkv_post_args* a, const struct dmany* m,
                          int layer, int n, char* err, size_t errlen);
/* ids[t] = argmax of logits[t][0..V) (lowest index on ties), t < n */
int pv_cuda_argmax(cudaStream_t st, const struct pv_cuda_tuning* tu, const float* logits, int V, int n, int* ids, char* err,
                   size_t errlen);

/* deltanet.cu: conv + the recurrent delta rule + gated norm, rows in order */
struct delta_args {
	const float* mix;          /* [n][ld_mix] q|k|v projections, or Qwen3-Next's raw qkvz rows  */
	int ld_mix;
	int qkvz;                  /* mix is key-group-major [q_g | k_g | v_g | z_g]; z is read there */
	const float* z;            /* [n][Hv*dv] (unless qkvz)                                      */
	const float *b, *a;        /* [n][Hv] beta and decay inputs (unless ba_grouped)             */
	const float* ab;           /* [n][2 Hv] key-group-major [b_g | a_g] (ba_grouped)            */
	int ba_grouped;
	const float *conv_w, *ssm_a, *dt_bias, *lin_norm;
	float* conv_state;         /* [Kc-1][cd], oldest first                                      */
	float* S;                  /* [Hv][dk][dv]                                                  */
	float* u;                  /* scratch [n][cd]: the conv output                              */
	float* o;                  /* [n][Hv*dv] gated-norm output                                  */
	int Hk, Hv, dk, dv, Kc, v_tiled, n;
	float eps;
};
/* snap (NULL: none): also keep the state after every row t < n in the snapshot slot t: snap is
 * this layer's S in the slot of the call's row 0 (the layer's window follows its S, as in the
 * checkpoint layout), snap_stride the floats from one slot to the next */
int pv_cuda_deltanet(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct delta_args* a, float* snap,
                     size_t snap_stride, char* err, size_t errlen);
/* The same layer for a multi-session step (forward_many, many.cu): row t < a->n is session t's
 * one-row step over its own recurrent state, m->state[t] + lofs (this layer's S, then its window;
 * lofs: the layer's offset within a state, a model constant); a->S and a->conv_state are not read,
 * the row buffers are the host session's rows t. Each row runs the one-session kernels' bodies
 * with n = 1 on its own rows and state, so its bits are what its session's own one-row step gives.
 * No snapshots (a multi-session step keeps none). */
int pv_cuda_deltanet_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct delta_args* a, const struct dmany* m,
                          size_t lofs, char* err, size_t errlen);

/* The layer's weights, state and shapes in a (decode, deltanet.cu, and prefill, deltanet_prefill.cu):
 * S is the layer's [Hv][dk][dv] state, its conv window follows it. The caller sets the row
 * buffers (mix, z, b, a, ab, u, o), qkvz, ba_grouped and n. */
static inline void pv_delta_args_layer(struct delta_args* a, const struct pv_config* c, const struct dlayer* L, float* S)
{
	a->conv_w = L->conv_w;
	a->ssm_a = L->ssm_a;
	a->dt_bias = L->dt_bias;
	a->lin_norm = L->lin_norm;
	a->S = S;
	a->conv_state = S + (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
	a->Hk = c->lin_k_heads;
	a->Hv = c->lin_v_heads;
	a->dk = c->lin_k_dim;
	a->dv = c->lin_v_dim;
	a->Kc = c->conv_kernel;
	a->v_tiled = c->v_head_tiled;
	a->eps = c->rms_eps;
}

/* deltanet.c's elementwise functions (both DeltaNet paths use these) */
__device__ __forceinline__ float pv_d_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float pv_d_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float pv_d_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* column in a row of the projection for conv channel ch (Qwen3.5 order q | k | v; Qwen3-Next's
 * key-group-major [q_g | k_g | v_g | z_g] rows through this index map) */
__device__ __forceinline__ int pv_delta_src_col(const delta_args& a, int ch)
{
	if (!a.qkvz) return ch;
	const int kd = a.Hk * a.dk, r = a.Hv / a.Hk, gw = 2 * a.dk + 2 * r * a.dv;
	if (ch < kd) return (ch / a.dk) * gw + ch % a.dk;
	if (ch < 2 * kd) return ((ch - kd) / a.dk) * gw + a.dk + (ch - kd) % a.dk;
	const int cc = ch - 2 * kd;
	return (cc / (r * a.dv)) * gw + 2 * a.dk + cc % (r * a.dv);
}
/* the output gate z of row t, value head h, column j: from z, or from Qwen3-Next's key-group-major
 * qkvz rows in mix (the same expression in deltanet.cu's recurrence and the prefill's gated
 * norm); r = Hv / Hk, vd = Hv dv */
__device__ __forceinline__ float pv_delta_z(const delta_args& a, int t, int h, int j, int dk, int dv, int r, int vd)
{
	if (a.qkvz) {
		const int gw = 2 * dk + 2 * r * dv, e = h * dv + j;
		return a.mix[(size_t)t * a.ld_mix + (e / (r * dv)) * gw + 2 * dk + r * dv + e % (r * dv)];
	}
	return a.z[(size_t)t * vd + (size_t)h * dv + j];
}
int pv_cuda_delta_check(int dk, int dv, int Hk, int Hv, int Kc, char* err, size_t errlen);
int pv_cuda_delta_init(char* err, size_t errlen); /* once per session, before any capture */

/* moe.cu */
struct moe_args {
	float* logits;             /* [n][E] router logits, replaced by the softmax                 */
	int* idx;                  /* [n][k] selected experts                                       */
	float* w;                  /* [n][k] their weights                                          */
	const float* eo;           /* [n*k][H] each slot's expert output                            */
	const float* sh;           /* [n][H] shared expert output (shared)                           */
	const float* sh_gate;      /* [H] (shared)                                                  */
	const float* xn;           /* [n][H] the FFN input (for the shared gate)                    */
	float* out;                /* [n][H]                                                        */
	int E, k, norm_topk, shared, H, n;
};
int pv_cuda_moe_route(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct moe_args* a, char* err, size_t errlen);
int pv_cuda_moe_combine(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct moe_args* a, char* err, size_t errlen);

/* attention.cu */
#define PV_ATT_SPLIT 64 /* the largest keys per split (a session uses 16, 32 or 64)      */
struct attn_args {
	const float* q;            /* [n][nh*hd]                                                    */
	const void *kc, *vc;       /* [n_ctx][nkv] head slices of type kvt (pv_kv_hbytes)           */
	int kvt;                   /* PV_KV_F32, _F16, _BF16 or _Q8_0 (fused: pa.kvt is the same)   */
	const float* gate;         /* [n][nh*hd] or NULL: o *= sigmoid(gate)                        */
	int gate_ld, gate_hs;      /* gate row stride and head stride: nh*hd, hd (or ldq, 2 hd fused) */
	float* o;                  /* [n][nh*hd]                                                    */
	float *part_o, *part_ml;   /* [n][nh][n_split][hd], [n][nh][n_split][2]                     */
	int nh, nkv, hd, n_split;
	int split; /* keys per split (cuda.att_split), the same for every call of a session */
	const struct dstep* step;
	/* fused input stage (one row only): q is computed from qraw (q/k norm + RoPE, pv_head_post)
	 * by every block, and the block of the split holding the row's position writes its kv
	 * head's k (normed, roped) and v into the cache before reading it; `post` carries the
	 * qkv_post_args fields (its q, gate, step are unused). fuse 0: q is ready (qkv_post ran). */
	int fuse;
	struct qkv_post_args pa;
};
int pv_cuda_attention(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct attn_args* a, int n, char* err,
                      size_t errlen);
/* The same attention for a multi-session step (not fused): row t at m->pos[t] over its session's
 * cache of this layer; a->kc, a->vc and a->step are not read. The row's arithmetic is the
 * one-session kernel's (one device function), so its bits are what its own step gives. */
int pv_cuda_attention_many(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct attn_args* a, const struct dmany* m,
                           int layer, int n, char* err, size_t errlen);
int pv_cuda_attention_check(int nh, int nkv, int hd, int n_split, int kvt, char* err, size_t errlen);

/* ---- launches: programmatic dependent launch (PDL) ------------------------------------------ */

/* With cuda.pdl (the default; struct pv_cuda_tuning, tuning.cuh) every kernel is launched with
 * programmatic stream serialization: the next kernel's blocks may start while the previous
 * kernel drains, and wait in pv_grid_sync() until it has completed and its writes are visible.
 * Every kernel calls pv_grid_sync() before touching memory that the kernel just before may write,
 * so results are the same with and without it (the kernels and their arithmetic do not change);
 * only the gaps between kernels shrink (PERF.md, "Tuning switches"). Kernel N starts only after
 * every block of N-1 passed its wait, that is after N-2 completed: what N-2 or an earlier kernel
 * last wrote (the weights, old KV rows, the DeltaNet state, a residual add's x) may be read
 * before the wait (the cuda.*_early switches, PERF.md "Session 7"). */
__device__ __forceinline__ void pv_grid_sync(void)
{
	asm volatile("griddepcontrol.wait;" ::: "memory");      /* no-op without PDL */
	asm volatile("griddepcontrol.launch_dependents;" :::); /* the next kernel may be scheduled */
}

/* PV_CUDA_TRACE=<seconds> (a diagnostic, off by default): after every direct launch (not while a
 * stream is captured) the launcher waits for the stream; a kernel still running after that many
 * seconds is named on stderr with its grid and the launches before it, and the process exits
 * (status 3), so a hang says which kernel it is. Launches are serialized (no PDL overlap). */
struct pv_launch_rec {
	dim3 grid, block;
	size_t smem;
	cudaStream_t st;
	int pdl;
};
extern thread_local struct pv_launch_rec pv_last_launch;
int pv_cuda_trace_seconds(void);
int pv_cuda_trace(const char* what, char* err, size_t errlen);

/* cluster_x > 0: the grid's x blocks form clusters of cluster_x (sm_90 thread block clusters) */
template <typename... KArgs, typename... Args>
static inline cudaError_t pv_launch_cl(int pdl, unsigned cluster_x, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                       cudaStream_t st, Args... args)
{
	if (pv_cuda_trace_seconds()) pv_last_launch = pv_launch_rec{ grid, block, smem, st, pdl };
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cudaLaunchAttribute at[2] = {};
	int n = 0;
	if (pdl) {
		at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[n++].val.programmaticStreamSerializationAllowed = 1;
	}
	if (cluster_x) {
		at[n].id = cudaLaunchAttributeClusterDimension;
		at[n].val.clusterDim.x = cluster_x;
		at[n].val.clusterDim.y = 1;
		at[n++].val.clusterDim.z = 1;
	}
	cfg.attrs = at;
	cfg.numAttrs = (unsigned)n;
	return cudaLaunchKernelEx(&cfg, kernel, args...);
}

template <typename... KArgs, typename... Args>
static inline cudaError_t pv_launch(int pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                    Args... args)
{
	return pv_launch_cl(pdl, 0, kernel, grid, block, smem, st, args...);
}

/* PV_LAUNCH(what, tu, err, errlen, kernel, grid, block, smem, stream, args...) inside a launcher
 * returning int: tu (const struct pv_cuda_tuning*) says whether to use PDL; PV_LAUNCH_CL the same
 * with clusters of cx blocks along x */
#define PV_LAUNCH(what, tu, err, errlen, ...) PV_LAUNCH_CL(what, tu, err, errlen, 0, __VA_ARGS__)
#define PV_LAUNCH_CL(what, tu, err, errlen, cx, ...)                                 \
	do {                                                                         \
		CU(pv_launch_cl((tu)->pdl, cx, __VA_ARGS__), err, errlen);           \
		if (pv_cuda_trace_seconds() && pv_cuda_trace(what, err, errlen)) return -1; \
	} while (0)

/* ---- fixed reduction trees ------------------------------------------------------------------ */

__device__ __forceinline__ float pv_warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float pv_warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* x[0..H) += delta (unless NULL; read through L2: other blocks of the calling kernel may have
 * written it); xn = rmsnorm(x) * w, by one block of NT threads, H a multiple of 4, 16-byte
 * aligned rows. Order: thread t's float4s t, t + NT, ... and their components in order, the warp
 * butterfly, then the warps in order on thread 0. The standalone add+RMSNorm kernel
 * (norm_rope.cu) and the fused GEMV epilogue (gemv.cu) both run this with NT = 256, so a row gets
 * the same bits either way. red: NT / 32 + 1 floats of shared memory. */
template <int NT, int KR = 0>
__device__ __forceinline__ void pv_add_rmsnorm_row(float* x, const float* delta, float* xn, const float* w, int H, float eps,
                                                   float* red)
{
	/* KR > 0: rows of up to KR float4s per thread (H <= 8192 at NT = 256, KR = 8) are held in
	 * registers, every load of x, delta and w issued before the first use (one memory latency,
	 * not one per float4: the standalone kernel is on the decode's critical path); the same
	 * operations in the same order as the loop below, so the same bits. The GEMV epilogue keeps
	 * the loop (KR = 0: no registers added to the GEMV). */
	const int H4 = H >> 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float4* x4 = reinterpret_cast<float4*>(x);
	const float4* d4 = reinterpret_cast<const float4*>(delta);
	const float4* w4 = reinterpret_cast<const float4*>(w);
	float4* o4 = reinterpret_cast<float4*>(xn);
	const bool regs = KR > 0 && H4 <= KR * NT;
	float4 xv[KR > 0 ? KR : 1], gv[KR > 0 ? KR : 1];
	float ss = 0.0f;
	if (regs) {
#pragma unroll
		for (int k = 0; k < KR; k++) {
			const int i = threadIdx.x + k * NT;
			if (i < H4) {
				xv[k] = __ldcg(x4 + i);
				gv[k] = __ldg(w4 + i);
			}
		}
		if (d4) {
#pragma unroll
			for (int k = 0; k < KR; k++) {
				const int i = threadIdx.x + k * NT;
				if (i < H4) {
					const float4 d = __ldcg(d4 + i);
					xv[k].x = xv[k].x + d.x;
					xv[k].y = xv[k].y + d.y;
					xv[k].z = xv[k].z + d.z;
					xv[k].w = xv[k].w + d.w;
				}
			}
		}
#pragma unroll
		for (int k = 0; k < KR; k++) {
			const int i = threadIdx.x + k * NT;
			if (i < H4) {
				if (d4) x4[i] = xv[k];
				ss = ss + xv[k].x * xv[k].x;
				ss = ss + xv[k].y * xv[k].y;
				ss = ss + xv[k].z * xv[k].z;
				ss = ss + xv[k].w * xv[k].w;
			}
		}
	} else {
		for (int i = threadIdx.x; i < H4; i += NT) {
			float4 v = __ldcg(x4 + i);
			if (d4) {
				const float4 d = __ldcg(d4 + i);
				v.x = v.x + d.x;
				v.y = v.y + d.y;
				v.z = v.z + d.z;
				v.w = v.w + d.w;
				x4[i] = v;
			}
			ss = ss + v.x * v.x;
			ss = ss + v.y * v.y;
			ss = ss + v.z * v.z;
			ss = ss + v.w * v.w;
		}
	}
	ss = pv_warp_sum(ss);
	if (lane == 0) red[warp] = ss;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = red[0];
		for (int i = 1; i < NT / 32; i++) s = s + red[i];
		red[NT / 32] = s;
	}
	__syncthreads();
	const float r = 1.0f / sqrtf(red[NT / 32] / (float)H + eps); /* pv_rmsnorm */
	if (regs) {
#pragma unroll
		for (int k = 0; k < KR; k++) {
			const int i = threadIdx.x + k * NT;
			if (i < H4) {
				const float4 v = xv[k], g = gv[k];
				o4[i] = make_float4((v.x * r) * g.x, (v.y * r) * g.y, (v.z * r) * g.z, (v.w * r) * g.w);
			}
		}
		return;
	}
	for (int i = threadIdx.x; i < H4; i += NT) {
		const float4 v = x4[i]; /* this thread's own value (written above, or untouched) */
		const float4 g = __ldg(w4 + i);
		o4[i] = make_float4((v.x * r) * g.x, (v.y * r) * g.y, (v.z * r) * g.z, (v.w * r) * g.w);
	}
}

/* The first half of an add+RMSNorm of row t by a block of NT threads (norm_rope.cu's kernel and
 * the prefill's): x[t] += delta[t] (unless delta is NULL), thread-strided, in order; returns this
 * thread's sum of squares of the new row. */
template <int NT>
__device__ __forceinline__ float pv_add_sumsq(float* xr, const float* delta, int t, int H)
{
	float ss = 0.0f;
	for (int i = threadIdx.x; i < H; i += NT) {
		float v = xr[i];
		if (delta) {
			v = v + delta[(size_t)t * H + i];
			xr[i] = v;
		}
		ss = ss + v * v;
	}
	return ss;
}

/* Fixed-order block sum of NT threads, the same on every thread: warp butterflies, the warps in
 * order on thread 0, broadcast through red[NT / 32] (red: NT / 32 + 1 floats). */
template <int NT>
__device__ __forceinline__ float pv_block_sum_all(float v, float* red)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = pv_warp_sum(v);
	if (lane == 0) red[warp] = v;
	__syncthreads();
	if (threadIdx.x == 0) {
		float s = red[0];
		for (int i = 1; i < NT / 32; i++) s = s + red[i];
		red[NT / 32] = s;
	}
	__syncthreads();
	return red[NT / 32];
}

/* the add+RMSNorm a GEMV may do in its epilogue (pv_cuda_gemv_norm): after every block has
 * written its rows of delta (the GEMV's output), the last block to finish (a completion counter,
 * reset by that block) runs pv_add_rmsnorm_row<256> over x, delta */
struct norm_epi {
	float* x;
	float* xn;
	const float* w;
	float eps;
	int H;
	unsigned* counter;         /* zero between uses                                             */
};

/* One head slice [hd] of a cache of type KVT := src[0, hd), by one warp (all 32 lanes call it;
 * src written before, by this warp behind a __syncwarp or by an earlier kernel). q8_0: block b
 * (elements 32 b + lane, zeros past hd) by the CPU's quant_q8_0 (pv_d_q8_block's pieces): amax
 * by the butterfly (a max: any order gives the CPU's), a non-finite element anywhere in the
 * block gives the NaN scale and codes 0 as kvcache.c; lane i writes code 32 b + i, lane 0 the
 * scale. A function of the slice alone. */
template <int KVT>
__device__ __forceinline__ void pv_kv_put_head(void* head, const float* src, int hd)
{
	const int lane = threadIdx.x & 31;
	if constexpr (KVT == PV_KV_Q8_0) {
		int8_t* q = static_cast<int8_t*>(head);
		uint16_t* ds = reinterpret_cast<uint16_t*>(static_cast<char*>(head) + hd);
		for (int b = 0; b < hd; b += 32) {
			const int i = b + lane;
			const float x = i < hd ? src[i] : 0.0f;
			const bool bad = __any_sync(0xffffffffu, pv_d_nonfinite(x));
			const float amax = pv_warp_max(fabsf(x));
			uint16_t dh;
			const float id = pv_d_q8_id(amax, &dh);
			const int8_t c = pv_d_q8_code(x, id);
			if (i < hd) q[i] = bad ? (int8_t)0 : c;
			if (lane == 0) ds[b / 32] = bad ? (uint16_t)0x7e00u : dh;
		}
	} else {
		for (int d = lane; d < hd; d += 32) pv_kv_put<KVT>(head, d, src[d]);
	}
}

/* One head vector of the attention input stage, by one warp (norm_rope.cu's qkv_post_kernel and
 * attention.cu's fused form share it, so both give the same bits): RMSNorm over the hd values of
 * src (when nw; the sum of squares lane-strided, then the butterfly), then NeoX RoPE over the
 * first R dims with the position's cos/sin rows; dst may be global or shared memory, hd elements
 * of type DT (f32 for a query, the cache's type for a key: rounded once, as it is stored); buf is
 * the warp's own scratch of hd floats. */
template <int DT = PV_KV_F32>
__device__ __forceinline__ void pv_head_post(const float* src, float* buf, void* dst, const float* nw, int hd, int R,
                                             float eps, const float* cs, const float* sn)
{
	const int lane = threadIdx.x & 31;
	__syncwarp(); /* buf is free (a previous head's RoPE has read it) */
	float ss = 0.0f;
	for (int d = lane; d < hd; d += 32) {
		const float x = src[d];
		buf[d] = x;
		ss = ss + x * x;
	}
	if (nw) {
		ss = pv_warp_sum(ss);
		const float r = 1.0f / sqrtf(ss / (float)hd + eps);
		for (int d = lane; d < hd; d += 32) buf[d] = (buf[d] * r) * nw[d];
	}
	__syncwarp();
	/* NeoX RoPE over the first R dims (forward.c rope_neox) */
	const int half = R / 2;
	if constexpr (DT == PV_KV_Q8_0) {
		/* a block's scale needs all its values: the roped head in buf (lane i owns i and
		 * i + half, read then written by it alone), then the slice quantized from buf */
		for (int i = lane; i < half; i += 32) {
			const float x0 = buf[i], x1 = buf[i + half];
			buf[i] = x0 * cs[i] - x1 * sn[i];
			buf[i + half] = x1 * cs[i] + x0 * sn[i];
		}
		__syncwarp();
		pv_kv_put_head<DT>(dst, buf, hd);
	} else {
		for (int i = lane; i < half; i += 32) {
			const float x0 = buf[i], x1 = buf[i + half];
			pv_kv_put<DT>(dst, i, x0 * cs[i] - x1 * sn[i]);
			pv_kv_put<DT>(dst, i + half, x1 * cs[i] + x0 * sn[i]);
		}
		for (int d = R + lane; d < hd; d += 32) pv_kv_put<DT>(dst, d, buf[d]);
	}
}

#endif
