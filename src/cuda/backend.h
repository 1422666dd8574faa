/*
 * cuda/backend.h: the CUDA backend as the C side sees it. The library reaches it only through
 * pv_backend_cuda() (api.c's registry) and the seam (engine/backend.h); the other calls here are
 * the backend's own diagnostics and test hooks, for tests/cuda/ (programs use proven_dev.h).
 * Without CUDA (make CUDA=0, or no nvcc when the library was built) src/cuda/stub.c provides
 * these functions: pv_backend_cuda() returns NULL and everything else fails with "built without
 * CUDA".
 *
 * What the backend does (src/cuda/README.md has the design and the exactness argument):
 *   - weights are uploaded once, in their stored types, when pv_model_params.backend is "cuda";
 *     the tuning switches (pv_model_knobs) are read then, once per model;
 *   - every Qwen layer kind: attention (Qwen2 biases, q/k norm, partial RoPE, output gate),
 *     Gated DeltaNet (recurrent form), dense SwiGLU and MoE (routing on the GPU, shared expert);
 *   - a session holds the KV cache (f32, like the CPU), the DeltaNet states, checkpoint and
 *     per-row snapshot slots (PV_EVAL_SNAPSHOT), the rope tables the engine computed, all scratch,
 *     the prefill set-up and the decode graph: all made when the session is created;
 *   - every kernel reduces in an order fixed by the row length alone, so a row's logits never
 *     depend on how many rows share a call (batch invariance), on the graph or the direct path;
 *   - a one-token call replays a CUDA graph captured once per session: per token the host writes
 *     the token id and position to pinned memory, launches the graph and synchronises once.
 */
#ifndef PV_CUDA_BACKEND_H
#define PV_CUDA_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct pv_backend;
struct pv_model;
struct pv_model_params;
struct pv_session;
struct pv_tensor;

/* The backend table, or NULL when the library was built without CUDA. */
const struct pv_backend* pv_backend_cuda(void);

/* Reads the tuning switches (defaults, the environment, then params->knobs: tuning.cu), uploads
 * m's weights (params: progress callback, verbose summary through pv_log; may be NULL) and makes
 * the CUDA backend m's backend: sessions created afterwards run on the GPU. Returns PV_OK, or
 * without side effects on m (other than a message): PV_E_INVALID (an unknown knob or a bad
 * value), PV_E_UNSUPPORTED (a weight type without a CUDA kernel), PV_E_NOMEM, PV_E_DEVICE (no
 * device, a failed copy). pv_model_close frees the device copy through the backend's model_free. */
int pv_cuda_model_init(struct pv_model* m, const struct pv_model_params* params, char* err, size_t errlen);

/* The device. */
struct pv_cuda_device {
	char name[256];
	int device;             /* ordinal in use (0)                                   */
	int cc_major, cc_minor;
	int sm_count;
	int driver_version;     /* cudaDriverGetVersion: 13000 = CUDA 13.0              */
	int runtime_version;    /* cudaRuntimeGetVersion                                */
	int nvcc_major, nvcc_minor; /* the compiler that built src/cuda                 */
	int sm_clock_mhz;       /* peak SM clock                                        */
	int mem_clock_mhz;      /* peak memory clock                                    */
	int bus_width;          /* memory bus width, bits                               */
	int l2_bytes;
	uint64_t mem_total, mem_free;
};
int pv_cuda_device_info(struct pv_cuda_device* d, char* err, size_t errlen);

/* Device-to-device copy bandwidth: cudaMemcpy of `bytes` (e.g. 4 GiB), median of `reps` timed
 * copies after a warm-up; *gb_s = (bytes read + bytes written) / time, in GB/s (1e9). */
int pv_cuda_membw(size_t bytes, int reps, double* gb_s, char* err, size_t errlen);

/* What the model put on the GPU. */
struct pv_cuda_model_stats {
	uint64_t weight_bytes;     /* device bytes of every uploaded weight                     */
	uint64_t bytes_per_token;  /* weights one decode token reads: every layer matrix and the
	                            * LM head (the embedding matrix when tied), the f32 vectors;
	                            * the embedding lookup (one row) is not counted             */
	uint64_t used_before;      /* device memory in use (total - free) before the upload      */
	uint64_t used_after;       /* ... and after                                              */
	double upload_s;
};
int pv_cuda_model_stats(const struct pv_model* m, struct pv_cuda_model_stats* st);

/* Counters of one session (since it was created). */
struct pv_cuda_session_stats {
	uint64_t forwards;         /* backend forward calls                                     */
	uint64_t tokens;           /* rows evaluated                                            */
	uint64_t graph_tokens;     /* one-row calls served by the graph                          */
	uint64_t graph_launches;   /* cudaGraphLaunch calls                                     */
	uint64_t graph_captures;   /* graphs captured (1 per session)                           */
	uint64_t graph_kernels;    /* kernel nodes in the decode graph                           */
	uint64_t window_launches;  /* launches of the window graphs (exact calls of 2-16 rows)  */
	uint64_t window_captures;  /* window graphs captured (one per row count and first LM row) */
	uint64_t window_kernels;   /* kernels those launches ran                                */
	uint64_t direct_kernels;   /* kernels launched outside graphs                           */
	uint64_t syncs;            /* host synchronisations (cudaStreamSynchronize)             */
	uint64_t memcpys;          /* cudaMemcpyAsync calls issued by the host outside graphs   */
	uint64_t session_bytes;    /* device memory this session allocated                      */
	uint64_t used_after_init;  /* device memory in use after the session was created        */
	/* the prefill path (calls of >= chunk_min_tokens rows; src/cuda/README.md, "Prefill") */
	uint64_t prefill_calls;    /* backend forward calls it served                           */
	uint64_t prefill_tokens;   /* their rows                                                */
	uint64_t prefill_kernels;  /* kernels it launched (also counted in direct_kernels)      */
	uint64_t prefill_gemms;    /* cuBLAS GEMM calls                                         */
	double prefill_gpu_ms;     /* GPU time of those calls (CUDA events around each call)     */
	/* continuous batching (the seam's forward_many, many.cu): one-row steps of several sessions
	 * evaluated together, over the scratch of one of them (the host: the largest context) */
	uint64_t many_rows;        /* this session's rows evaluated in such steps                */
	uint64_t many_steps;       /* device steps (up to 16 rows) this session hosted           */
	uint64_t many_hosted_rows; /* the rows of those steps, every session's                   */
	uint64_t many_launches;    /* ... of which launches of a multi-session graph             */
	uint64_t many_captures;    /* multi-session graphs captured (one per row count)          */
	uint64_t many_kernels;     /* kernels those graph launches ran                           */
};
int pv_cuda_session_stats(const struct pv_session* s, struct pv_cuda_session_stats* st);

/* NULL while the session is healthy; else the CUDA error that stopped it. A failed step makes
 * pv_session_eval return PV_E_DEVICE with this message (also in pv_session_error), fills the requested
 * logits with NaN, and every later step fails the same way. */
const char* pv_cuda_session_error(const struct pv_session* s);

/* Argmax (lowest index on ties, as pv_argmax) of the last logits row the last call computed on
 * the GPU; -1 if none. A one-row call on the decode graph always computes it, with or without
 * host logits (other calls when an output asks for the last row); programs read argmax ids
 * through pv_eval_out instead. */
int pv_cuda_last_token(const struct pv_session* s);

/* Where a decode token's time goes: a graph of the one-row step with timing events between its
 * op groups, replayed `reps` times at the session's current position. Per group: GPU time per
 * token (the gaps between nodes included), kernels, and weight bytes read (GB/s = bytes / time).
 * The replays rewrite the KV row at the current position and advance DeltaNet states: profile a
 * session you then free (proven bench --profile does it last). */
#define PV_CUDA_PROF_GROUPS 24
struct pv_cuda_profile {
	int n;                                   /* groups that occurred                            */
	const char* name[PV_CUDA_PROF_GROUPS];   /* "gemv qkv", "attention", "norm", ...            */
	double us[PV_CUDA_PROF_GROUPS];          /* microseconds per token                          */
	int kernels[PV_CUDA_PROF_GROUPS];        /* per token                                       */
	double bytes[PV_CUDA_PROF_GROUPS];       /* weight bytes per token                          */
	double total_us;                         /* the step, first to last event                   */
};
int pv_cuda_profile(struct pv_session* s, int32_t token, int reps, struct pv_cuda_profile* out);

/* Tests: 0 evaluates one-row calls with direct launches instead of the graph (default: the
 * model's cuda.graphs); changes this session's copy of the switch only. */
void pv_cuda_set_graphs(struct pv_session* s, int on);

/* The prefill path: calls of at least chunk_min_tokens rows (more than 16, never with
 * PV_EVAL_EXACT) go through bf16 tensor-core GEMMs (cuBLAS, loaded at run time) and a
 * flash-style attention in chunks of `chunk` rows; the results agree with the 16-row path within
 * tolerance (not bitwise). 1 when cuBLAS can be loaded (else prompts keep the 16-row path, with
 * a one-time PV_LOG_WARN message and the reason in the session stats' fallback). */
int pv_cuda_prefill_available(void);
/* Per session: on = 0 (the 16-row path), 1 (prefill, fast: bf16 GEMM inputs, tensor-core
 * attention) or 2 (prefill, precise: GEMM inputs and non-BF16 weights as bf16 hi + lo pairs,
 * three GEMMs per product (two for BF16 weights), and the f32 attention; within ~1e-3 of the exact path where the fast mode may differ by ~1e-2);
 * the default is the model's cuda.prefill; and the rows per chunk (0: the model's
 * cuda.prefill_chunk). Changes this session's copy of both switches. Tests use it to force
 * either path. */
void pv_cuda_set_prefill(struct pv_session* s, int on, int chunk);
/* Tests: out[r*cols + c] = W[r][c] as the prefill's GEMMs see it (uploaded, dequantized on the
 * GPU and rounded to bf16), as floats; out_lo (unless NULL): the low halves the precise mode
 * adds, bf16(W[r][c] - out[r*cols + c]). */
int pv_cuda_test_dequant(const struct pv_tensor* W, float* out, float* out_lo, char* err, size_t errlen);

/* Tests: changes this session's copy of the model's knobs ("name=value,...", tuning.cu's names),
 * for A/B runs inside one process; the next call uses them (the prefill scratch is set up again
 * when its layout changes, the decode graph captured again when a decode switch changes).
 * cuda.att_split and cuda.moe_side are fixed per session. Returns PV_OK, or PV_E_INVALID with a
 * message (PV_E_DEVICE if the new capture fails). */
int pv_cuda_set_knobs(struct pv_session* s, const char* spec, char* err, size_t errlen);

/* Tests: y[t*W->rows + o] = sum_i x[t*W->cols + i] * W[o, i] for t < T (any T >= 1), through the
 * same upload and GEMV kernels as the forward pass (T is split into steps of at most 16 rows). */
int pv_cuda_test_matmul(const struct pv_tensor* W, const float* x, int T, float* y, char* err, size_t errlen);

/* Tests: the add+RMSNorm of n rows (1-16) of H through the kernel the knobs select (the defaults,
 * the environment, then spec, "name=value,..."): x[n][H] += delta (unless NULL), in place; xn =
 * rmsnorm(x) * w; with blk (32 or 256; 0: none) also xn's quantized form for cuda.q8_act into q,
 * pv_qrow_bytes(blk, H) bytes per row (src/cuda/qact.cuh: int8 q[H] | float d[H / blk] | int32
 * s[H / 32], each part 16-byte aligned). Returns 0, or -1 with a message. */
int pv_cuda_test_norm(float* x, const float* delta, const float* w, int H, int n, float eps, const char* spec, float* xn,
                      int blk, unsigned char* q, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
