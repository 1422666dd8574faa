/*
 * prefill.cuh: the prompt (prefill) path's private header (src/cuda/README.md, "Prefill"), shared
 * by prefill.cu (the scratch, the chunk loop, the dense FFN, the small row kernels) and the op
 * files: attention_prefill.cu (flash-style causal attention), deltanet_prefill.cu (conv and delta
 * rule over T rows), moe_prefill.cu (grouped expert GEMMs), dequant.cu (weights to bf16 for the
 * GEMMs), with cublas.cu below them. session.cuh declares the path's entry points.
 *
 * A long call (n >= chunk_min_tokens rows, never an exact step) runs in chunks of up to R rows:
 * bf16 tensor-core GEMMs (cuBLAS, loaded at run time with dlopen) for every projection, a
 * flash-style causal attention over the KV cache (f32, f16 or bf16), the decode's T-row kernels (q/k norm + RoPE
 * + KV write, MoE routing) and the decode GEMV for the LM head rows. Its results agree with the
 * exact 16-row path within tolerance (bf16 activations), never bitwise; a call of <= 16 rows
 * (decode, verification windows) never comes here.
 */
#ifndef PV_CUDA_PREFILL_CUH
#define PV_CUDA_PREFILL_CUH

#include "session.cuh"
#include "units.cuh"

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

/* ---- cuBLAS, loaded at run time (cublas.cu) ------------------------------------------------- */

/* Loads libcublas once per process (thread-safe). 1: usable; 0: absent (why: in *why, static
 * text). Never links: the binaries have no link-time dependency on cuBLAS. */
int pv_cublas_load(const char** why);
/* A handle bound to stream st with its own workspace (ws, ws_bytes: device memory, may be NULL). */
int pv_cublas_create(void** h, cudaStream_t st, void* ws, size_t ws_bytes, char* err, size_t errlen);
void pv_cublas_destroy(void* h);
/* Y[t*ldy + o] = sum_i X[t*ldx + i] * W[o*ldw + i] (+ beta * Y) for t < T, o < N, i < K:
 * W bf16 row-major [N][ldw] (the stored weight layout), X bf16 row-major [T][ldx], Y f32. One
 * cublasGemmEx: column-major C[N x T] = W^T (op T on the [K x N] column-major view) * X. */
int pv_cublas_gemm(void* h, const __nv_bfloat16* W, int ldw, const __nv_bfloat16* X, int ldx, float* Y, int ldy, int N, int T,
                   int K, float beta, char* err, size_t errlen);

/* ---- the path's state (one per session) and the per-call context ------------------------------ */

struct pv_prefill {
	/* what the scratch was laid out for (the session's cuda.prefill_chunk and cuda.prefill; the
	 * other switches are read from the session's settings, d->tu, at each call) */
	int chunk;                /* rows per chunk asked for (R is at most max_batch)             */
	int split;                /* precise mode: every GEMM input as bf16 hi + lo (two GEMMs; a
	                           * third for the weights' low halves when they are not BF16), the
	                           * f32 attention (cuda.prefill = 2, pv_cuda_set_prefill on = 2)   */
	bf16 *xl, *ol, *hl, *ehl, *shl; /* the low halves of xb, ob, hb, ehb, shb (precise mode)   */
	int R, max_rows, n_steps; /* scratch rows (0: not allocated), tokens and steps it holds   */
	unsigned char* mem;
	size_t mem_bytes;
	unsigned char* pinned;
	void* blas;
	char fallback[192];       /* why the path is off for this session ("" while it is on)      */
	int prepared;             /* pv_prefill_prepare ran                                        */
	int broken;               /* its set-up failed: the path is off for this session           */
	/* scratch, R rows each */
	float *x, *delta, *xn;    /* [R][H]                                                        */
	bf16* xb;                 /* [R][ldh] normalized activations                               */
	int ldh;
	float *qraw, *kraw, *vraw; /* [R][ldq], [R][kvd], [R][kvd]                                 */
	float *q, *gate;          /* [R][qd]                                                       */
	bf16* ob;                 /* [R][ldo] attention / DeltaNet output                          */
	int ldo;
	float *g, *u;             /* [R][ffn]                                                      */
	bf16* hb;                 /* [R][ldf]                                                      */
	int ldf;
	float *mix, *lz, *lb, *la, *lab, *lu, *lo; /* DeltaNet: [R][ld_raw], [R][vd], [R][Hv] x2, [R][2Hv], [R][cd], [R][vd] */
	float* wy;                /* the chunked rule's per-(chunk, head) records (wy_on), else NULL */
	int wy_on;
	/* MoE (grouped expert GEMMs): router logits [R][E], top-k [R][k] ids and weights, the slots
	 * (q = t k + j) sorted by expert, per-expert offsets [E+1], row tiles (expert, first sorted
	 * slot) and their count; per-slot expert gate/up [R k][Ie], product [R k][ldie] bf16, outputs
	 * [R k][H]; the shared expert's gate/up [R][Is], product [R][ldis] bf16, output [R][H] */
	float *rlog, *tw, *eg, *eu, *eo, *sg, *su, *so;
	int *tidx, *perm, *eoff, *ntiles;
	int2* tiles;
	bf16 *ehb, *shb;
	int ldie, ldis, moe_gemm;
	bf16* wbuf;               /* a dequantized weight matrix [rows][cols]                      */
	bf16* wlo;                /* precise mode: its low halves, bf16(W - wbuf) (else NULL)      */
	size_t wbuf_elems;
	void* ws;                 /* cuBLAS workspace                                              */
	int* tok;                 /* [max_rows] device token ids                                   */
	struct dstep* steps;      /* [n_steps] device: pos0 per chunk (for qkv_post)               */
	int* tok_host;            /* pinned copies                                                 */
	struct dstep* steps_host;
	cudaEvent_t ev0, ev1;
	int timed;                /* ev0/ev1 recorded by the last call, not yet accounted          */
	int nl, ng;               /* kernels and GEMMs of the current call                         */
};

struct pv_prefill_ctx {
	struct pv_prefill* p;
	struct pv_session* s;
	struct dsession* d;
	const struct pv_config* c;
	char* err;
	size_t errlen;
};

static inline pv_units::Planes pv_prefill_planes(const struct dmat* w)
{
	return pv_units::Planes{ w->p[0], w->p[1], w->p[2], w->stride[0], w->stride[1], w->stride[2], w->type };
}

/* prefill.cu: Y[t][o] = sum_i X[t][i] W[o][i] for t < T (X bf16 [T][ldx], Y f32 [T][ldy]; other
 * weight types than BF16 dequantized first); precise mode: Y = W_hi X_hi, Y += W_hi X_lo, then
 * (weights not BF16) Y += W_lo X_hi */
int pv_prefill_gemm(struct pv_prefill_ctx* k, const struct dmat* W, const bf16* X, int ldx, float* Y, int ldy, int T);
/* prefill.cu: the low-half partner of a bf16 activation buffer (precise mode), else NULL */
bf16* pv_prefill_lo(const struct pv_prefill* p, const bf16* hi);
/* prefill.cu: y[t][i] += b[i] (b may be NULL: nothing) */
int pv_prefill_bias(struct pv_prefill_ctx* k, float* y, int ld, const float* b, int w, int T);
/* prefill.cu: h[t][i] = bf16(silu(g[t][i]) * u[t][i]) (and its low half, precise mode), i < w, t < T */
int pv_prefill_swiglu(struct pv_prefill_ctx* k, const float* g, const float* u, int ld, bf16* h, int ldh, int w, int T);

/* attention_prefill.cu: the mixer of attention layer l over the chunk's T rows (chunk ci, first
 * position pos0): q/k/v GEMMs, q/k norm + RoPE + KV write, the attention, o_proj into delta */
int pv_prefill_attention_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int l, int ci, int pos0, int T);
/* attention_prefill.cu: the kernels' shared-memory limits for this head dim (once, at set-up) */
int pv_prefill_attention_init(int head_dim, char* err, size_t errlen);
/* deltanet_prefill.cu: the mixer of linear layer l over T rows, out_proj into delta */
int pv_prefill_deltanet_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int l, int T);
/* deltanet_wy.cu: the delta rule of a's n rows in the chunked (WY) form, o before the norm into
 * oraw [n][Hv dv], a->S updated; wy holds pv_prefill_wy_floats(n, ...) floats. Only for shapes
 * pv_prefill_wy_fits accepts (dk a multiple of 4, dk and dv at most 128). */
size_t pv_prefill_wy_floats(int rows, int Hv, int dk, int dv);
int pv_prefill_wy_fits(int dk, int dv);
int pv_prefill_delta_wy(struct pv_prefill_ctx* k, const struct delta_args* a, float* wy, float* oraw);
/* moe_prefill.cu: the MoE FFN over T rows into delta (grouped GEMMs, or the decode's GEMVs) */
int pv_prefill_moe_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int T);
/* dequant.cu: out [rows][cols] = W as bf16 (the values dq_elem gives, rounded); lo (unless NULL)
 * = bf16(value - out), the split weights of the precise mode */
int pv_cuda_dequant_bf16(cudaStream_t st, const struct pv_cuda_tuning* tu, const struct dmat* W, bf16* out, bf16* lo,
                         char* err, size_t errlen);

/* ---- device helpers of several prefill kernels ------------------------------------------------- */

/* hi[i] = bf16(y); lo[i] = bf16(y - hi[i]) unless lo is NULL (the precise mode: the pair carries
 * ~16 significant bits; y - hi is exact in f32) */
static __device__ __forceinline__ void put_bf16(bf16* hi, bf16* lo, size_t i, float y)
{
	const bf16 h = __float2bfloat16_rn(y);
	hi[i] = h;
	if (lo) lo[i] = __float2bfloat16_rn(y - __bfloat162float(h));
}

/* four 8x8 b16 matrices from shared memory (mma.sync operands) */
static __device__ __forceinline__ void ldsm_x4(uint32_t* r, const __half* p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

#endif
