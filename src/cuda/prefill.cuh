/*
 * prefill.cuh: the prompt (prefill) path of the CUDA backend, between session.cu and
 * prefill.cu / cublas.cu (src/cuda/README.md, "Prefill").
 *
 * A long call (n >= chunk_min_tokens rows, and for models with DeltaNet layers only when the
 * session asked for the chunked form) runs in chunks of up to C rows: bf16 tensor-core GEMMs
 * (cuBLAS, loaded at run time with dlopen) for every projection, a flash-style causal attention
 * over the f32 KV cache, the existing T-row kernels (q/k norm + RoPE + KV write, the DeltaNet
 * recurrence, MoE routing) and the decode GEMV for the LM head rows. Its results agree with the
 * exact 16-row path within tolerance (bf16 activations), never bitwise; a call of <= 16 rows
 * (decode, verification windows) never comes here.
 */
#ifndef PV_CUDA_PREFILL_CUH
#define PV_CUDA_PREFILL_CUH

#include "common.cuh"

#include <cuda_bf16.h>

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

/* ---- what prefill.cu needs of a session (filled by session.cu) ------------------------------- */

struct pv_prefill_view {
	cudaStream_t st;
	const struct dmodel* dm;
	float **kc, **vc;          /* [n_layers] this session's KV cache, [n_ctx][kvd] f32 each     */
	const float *cos, *sin;    /* rope tables [n_ctx][R/2]                                     */
	float* state;              /* DeltaNet states, per linear layer S then conv (session.cu)   */
	const int* lin_index;      /* [n_layers] position among the linear layers, or -1           */
	int ld_raw, ldq;           /* DeltaNet projection row width; q_proj row width (gated: 2x)  */
	/* the decode path's 16-row scratch: the MoE fallback (16-row groups of the gathered GEMVs)
	 * and the LM head rows (the decode GEMV) */
	float *rlog, *top_w, *eg, *eu, *eo, *shg, *shu, *sho;
	int* top_idx;
	float* logits;             /* [16][V]                                                      */
	int* ids;                  /* [16]                                                         */
	int* ids_host;             /* pinned; [0] receives the last row's argmax                   */
	struct pv_cuda_session_stats* stats;
};

struct pv_prefill;

/* The first row of a step any output wants (sp->n: none): the LM head runs from there. */
static inline int pv_step_lm_row0(const struct pv_step* sp)
{
	int r0 = sp->n;
	if (sp->logits && sp->logits_row0 < r0) r0 = sp->logits_row0;
	if (sp->argmax && sp->argmax_row0 < r0) r0 = sp->argmax_row0;
	if (sp->hidden && sp->hidden_row0 < r0) r0 = sp->hidden_row0;
	return r0;
}
/* session.cu: copies back the outputs of step rows [g0, g0 + rows) whose LM rows are on the
 * device (row g0 first): logits rows in d_logits, argmax ids in d_ids, final-norm rows in d_xn. */
int pv_cuda_copy_outputs(const struct pv_step* sp, int g0, int rows, const float* d_logits, const int* d_ids, const float* d_xn,
                         int V, int H, cudaStream_t st, uint64_t* memcpys, char* err, size_t errlen);

/* 1 when this call should take the prefill path: prefill on for the session (PV_CUDA_PREFILL=0
 * or pv_cuda_set_prefill turn it off), cuBLAS loaded (else a one-time message and 0), n rows >=
 * s->chunk_min, and for models with DeltaNet layers only when `chunked` (session.c: never for
 * rollback replays). */
int pv_prefill_wanted(struct pv_prefill** pp, const struct pv_session* s, int n, int chunked);
/* The step (engine/backend.h): rows sp->tokens at positions sp->pos0.., outputs as it asks;
 * *have_id = 1 when ids_host[0] will hold the last row's argmax after the caller's
 * synchronisation. No host synchronisation inside. */
int pv_prefill_forward(struct pv_prefill** pp, struct pv_session* s, const struct pv_prefill_view* v, const struct pv_step* sp,
                       int* have_id, char* err, size_t errlen);
/* The one-time set-up (cuBLAS loaded, its handle, the scratch) when the session can take the
 * path (on, max_batch above 16 and >= chunk_min); done once, at the session's first call. A
 * failure (e.g. no memory) is reported once on stderr and turns the path off for the session. */
void pv_prefill_prepare(struct pv_prefill** pp, struct pv_session* s, const struct pv_prefill_view* v);
/* After the caller's synchronisation: adds the call's GPU time (CUDA events) to the stats. */
void pv_prefill_account(struct pv_prefill* p, struct pv_cuda_session_stats* st);
/* on: 1/0; chunk: rows per chunk (0: the default) */
void pv_prefill_set(struct pv_prefill** pp, int on, int chunk);
void pv_prefill_free(struct pv_prefill* p);
/* 0 off, 1 fast, 2 precise; and why the path is off for the session (NULL while it is on) */
int pv_prefill_mode(const struct pv_prefill* p);
const char* pv_prefill_fallback(const struct pv_prefill* p);

#endif
