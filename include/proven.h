/*
 * proven.h: the public interface of the proven inference engine.
 *
 * Two objects:
 *   pv_model    an immutable loaded model (weights memory-mapped, settings read from the file).
 *               Any number of sessions may share one model, on any number of threads.
 *   pv_session  one sequence's mutable state: attention KV cache, Gated DeltaNet recurrent and
 *               conv states, the position, the token history, checkpoints and per-row snapshots.
 *               All memory is allocated (and device work prepared) when the session is created:
 *               evaluating tokens allocates nothing. One thread uses a session at a time.
 *
 * Errors: functions that can fail return PV_OK (0) or a negative enum pv_status. Open and create
 * functions write a one-line message into the caller's buffer; session calls keep the message in
 * the session (pv_session_error, cleared by the next call that succeeds). The library never exits
 * and never prints: messages go to the callback set with pv_set_log, if any.
 *
 * Exactness contract (what speculative decoding relies on):
 *   - Batch invariance: on the exact path a row's outputs never depend on how many rows share the
 *     call, on the thread count or on the split of the work. A call takes the exact path when it
 *     passes PV_EVAL_EXACT (checked: the backend never substitutes a faster path), and always when
 *     it has fewer than pv_session_params.chunk_min_tokens rows. Longer calls without the flag may
 *     take a fast path (chunked DeltaNet on the CPU, tensor-core prefill on CUDA) that agrees within
 *     float rounding, not bit for bit. Models without DeltaNet layers run the CPU's exact path for
 *     every call size.
 *   - Truncation: after pv_session_truncate(s, n) (or pv_session_rollback) the session is bitwise
 *     the session that saw only the first n tokens, when the tokens the state is rebuilt from were
 *     evaluated on the exact path: the rows of the last PV_EVAL_SNAPSHOT call (which is exact), or
 *     the tokens between the restored checkpoint and n (replayed on the exact path).
 */
#ifndef PROVEN_H
#define PROVEN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pv_model pv_model;
typedef struct pv_session pv_session;
typedef struct pv_pool pv_pool;

/* What every fallible call returns. A server maps them to responses: INVALID and CONTEXT are the
 * caller's (400), NOMEM is load (503), DEVICE and IO are the machine's (500). */
enum pv_status {
	PV_OK = 0,
	PV_E_INVALID = -1,     /* bad argument: token id, length, flags, parameter out of range       */
	PV_E_CONTEXT = -2,     /* the tokens do not fit in the session's context                       */
	PV_E_NOMEM = -3,       /* host or device memory exhausted                                      */
	PV_E_DEVICE = -4,      /* a device call failed; the session is unusable from then on (sticky)  */
	PV_E_UNSUPPORTED = -5, /* not available for this model, backend or session's parameters        */
	PV_E_IO = -6,          /* a file could not be opened, read or mapped                           */
	PV_E_FORMAT = -7,      /* a file's contents are malformed or describe something unsupported    */
	PV_E_NUMERIC = -8,     /* the model computed NaN or infinite logits (corrupt weights?); the
	                        * session is unusable from then on (sticky)                           */
};
/* "PV_E_CONTEXT", ...; "unknown" for other values. */
const char* pv_status_name(int status);

enum pv_arch {
	PV_ARCH_QWEN2 = 0,   /* Qwen2, Qwen2.5: q/k/v biases                                */
	PV_ARCH_QWEN3,       /* Qwen3 dense: q/k RMSNorm                                     */
	PV_ARCH_QWEN3_MOE,   /* Qwen3-MoE: routed experts, no shared expert                  */
	PV_ARCH_QWEN3_NEXT,  /* hybrid DeltaNet + gated attention, MoE with shared expert    */
	PV_ARCH_QWEN3_5,     /* Qwen3.5/3.6 dense hybrid                                      */
	PV_ARCH_QWEN3_5_MOE, /* Qwen3.5/3.6 MoE hybrid                                        */
	PV_ARCH_COUNT
};

/* What `proven info` prints; every number is read or derived from the model's own files. */
struct pv_model_info {
	const char* arch_name;   /* the HF model_type, e.g. "qwen3_5_moe"                       */
	int arch;                /* enum pv_arch                                                */
	int n_layers;            /* decoder layers (MTP layers not counted)                    */
	int n_attn_layers;       /* full-attention layers (have a KV cache)                    */
	int n_linear_layers;     /* Gated DeltaNet layers (have recurrent state)               */
	int n_mtp_layers;        /* multi-token-prediction layers found in the checkpoint      */
	int hidden;              /* H                                                          */
	int vocab;               /* V (embedding rows)                                         */
	int n_heads, n_kv_heads, head_dim;
	int n_experts, n_experts_used;
	int max_context;         /* max_position_embeddings                                    */
	int tied_embeddings;
	int64_t n_params;        /* all weights, MTP included                                  */
	int64_t n_params_mtp;    /* of which MTP                                               */
	uint64_t weight_bytes;   /* bytes of tensor data as stored                             */
	const char* layer_pattern; /* one char per layer: 'A' attention, 'L' linear (DeltaNet) */
	const char* dtype;       /* "bf16", "f16", "f32" or "mixed"                            */
};

struct pv_model_params {
	int verbose;         /* 1: progress and a summary as PV_LOG_INFO messages (pv_set_log)       */
	int prefault;        /* 1: read every page of the weights at open, so the first tokens do not
	                      * wait for page faults (a server wants this; independent of verbose)  */
	const char* backend; /* NULL or "cpu": the CPU; "cuda": weights uploaded to the GPU at open,
	                      * sessions run there (fails when the build has no CUDA backend)       */
	const char* knobs;   /* NULL, or backend tuning switches "name=value,..." (proven_dev.h lists
	                      * them with pv_model_knobs); an unknown name fails the open           */
	/* NULL, or called with the fraction done (0..1) while weights are prefaulted or uploaded */
	void (*progress)(void* user, double fraction);
	void* progress_user;
};

struct pv_session_params {
	int n_ctx;            /* KV cache length; 0: min(max_context, 4096)                          */
	int n_threads;        /* CPU threads of the session's own pool; 0: all online cores          */
	pv_pool* pool;        /* NULL, or a pool shared with other sessions (pv_pool_new): sessions
	                       * on one pool take turns, a step at a time; n_threads is then ignored */
	int max_batch;        /* rows evaluated per internal step (scratch size); 0: 128 on the CPU,
	                       * 4096 on the GPU (a prompt of up to 4096 tokens is one device call) */
	int chunk_min_tokens; /* calls with at least this many tokens may take the fast path; 0: 64   */
	int n_checkpoints;    /* checkpoint slots kept (oldest dropped first); 0: 4                  */
	int n_snapshots;      /* rows a PV_EVAL_SNAPSHOT call may have (each keeps one copy of the
	                       * recurrent state); 0: snapshots off. Verifying k drafts needs k + 1  */
	int mtp;              /* 1: allocate the MTP head's KV cache (pv_session_mtp)                */
	int cache_type;       /* enum pv_cache_type of the K and V cache; 0: PV_CACHE_DEFAULT        */
};

/* Element type of a session's KV cache (K and V alike). Every type keeps the exactness contract
 * above: a row is rounded once, when it is written, by a function of that row alone, and every
 * later read sees the same stored bits, so batch invariance, snapshots, truncation and prefix
 * copies behave as with f32. f16/bf16: round to nearest even per element (half the bytes);
 * q8_0: each head's slice in blocks of 32 (the last zero-padded), an f16 scale per block and
 * 8-bit codes, ggml's Q8_0 rounding (34 bytes per 32 elements). Their quality cost is measured
 * in docs/results/. The CUDA backend runs all four (the same stored values; q8_0 in its own
 * per-head layout, src/cuda/common.cuh), for head dims a multiple of 8 (f32: 4) up to 256. */
enum pv_cache_type {
	PV_CACHE_DEFAULT = 0, /* f32 (README "KV cache types": why not f16)                     */
	PV_CACHE_F32 = 1,
	PV_CACHE_F16 = 2,
	PV_CACHE_BF16 = 3,
	PV_CACHE_Q8_0 = 4,
};
/* "f32", "f16", "bf16", "q8_0" (the default resolved); NULL for other values. */
const char* pv_cache_type_name(int cache_type);
/* The type named ("f32", "f16", "bf16", "q8_0", case-insensitive), or -1. */
int pv_cache_type_parse(const char* name);

/* Thread pool ------------------------------------------------------------------------------ */

/* A pool of n_threads threads (the caller counts as one; <= 0: all online cores) that CPU
 * sessions can share (pv_session_params.pool). Free it after every session that uses it. */
pv_pool* pv_pool_new(int n_threads);
void pv_pool_free(pv_pool* p);

/* Model ---------------------------------------------------------------------------------- */

/* Opens a model: a Hugging Face directory (config.json + safetensors) or a GGUF file (any path
 * that is a regular file). Validates every tensor against the shapes the config implies before
 * returning. Returns PV_OK or a pv_status. */
int pv_model_open(pv_model** out, const char* path, const struct pv_model_params* params,
                  char* err, size_t errlen);
void pv_model_close(pv_model* m);
const struct pv_model_info* pv_model_get_info(const pv_model* m);
/* The text side, when the model files carry it (tokenizer.json / tokenizer_config.json in an HF
 * directory, tokenizer.ggml.* in a GGUF). The tokenizer and chat API is in proven_text.h. */
struct pv_tok;
const struct pv_tok* pv_model_tokenizer(const pv_model* m); /* NULL: no tokenizer            */
const char* pv_model_chat_template(const pv_model* m);     /* NULL: no chat template         */
int pv_model_eos(const pv_model* m, const int32_t** ids);  /* end-of-generation ids, count   */

/* Bytes of memory a session with these parameters allocates on the model's backend (host memory
 * on the CPU, device memory on a GPU): KV cache, states, checkpoints, snapshots, scratch. */
uint64_t pv_session_bytes(const pv_model* m, const struct pv_session_params* params);

/* The SHA-256 of the weights' bytes as stored (a GGUF file whole; an HF directory's safetensors
 * shards sorted by name, concatenated), as 64 hex digits and a NUL. Computed on the first call
 * (it reads every byte), then cached in the model. */
int pv_model_digest(const pv_model* m, char hex[65]);

/* A weight tensor holding values that are not finite (pv_model_check). */
struct pv_weight_fault {
	char tensor[128];   /* its name in the file ("token_embd.weight", "model.norm.weight")     */
	int64_t rows, cols; /* the tensor seen as rows of its last (contiguous) dimension          */
	int64_t row, col;   /* the first NaN or infinity, in that view                             */
	float value;        /* which (NaN, +inf or -inf)                                           */
	int64_t count;      /* non-finite values in the tensor                                     */
};

/* Reads every weight the model's files hold (quantized blocks dequantized exactly as the kernels
 * see them: a NaN scale makes its whole block NaN) and finds the tensors with NaN or infinite
 * values, which the forward pass would turn into garbage. Fills faults[0, min(n, max)) in file
 * order and returns n, the number of such tensors (0: every weight is finite). Reads every byte
 * of the weights; progress (may be NULL) is called with the fraction done. */
int pv_model_check(const pv_model* m, struct pv_weight_fault* faults, int max, void (*progress)(void* user, double fraction),
                   void* user);

/* Session -------------------------------------------------------------------------------- */

int pv_session_new(pv_session** out, const pv_model* m, const struct pv_session_params* params,
                   char* err, size_t errlen);
void pv_session_free(pv_session* s);
const char* pv_session_error(const pv_session* s); /* "" after a success                   */
int pv_session_ok(const pv_session* s);            /* 0 after a device failure (sticky)      */

/* What one evaluation returns, per row of the call (row t = the outputs after token t). Each
 * output covers rows [row0, n); a NULL pointer skips it. Rows no output asks for skip the LM
 * head entirely. */
struct pv_eval_out {
	float* logits;   int logits_row0; /* [n - row0, vocab] host floats                           */
	int32_t* argmax; int argmax_row0; /* [n - row0] greedy ids (lowest index on ties), computed
	                                   * where the logits are: a GPU copies back ids, not rows     */
	float* hidden;   int hidden_row0; /* [n - row0, hidden] the final norm's output rows, the
	                                   * LM head's input (what an MTP head takes)                  */
};

enum {
	PV_EVAL_EXACT = 1u << 0,    /* the batch-invariant path only (see the contract above)        */
	PV_EVAL_SNAPSHOT = 1u << 1, /* exact, and keep the recurrent state after every row, so that
	                             * pv_session_truncate into this call loads a copy instead of
	                             * replaying; n <= pv_session_params.n_snapshots (else INVALID)   */
};

/* Appends n tokens and evaluates them with outputs as asked (out may be NULL). Fails cleanly
 * (session unchanged) on a bad token id, flags, rows or a full context; after a DEVICE failure
 * the session is unusable. */
int pv_session_run(pv_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out);

enum {
	PV_LOGITS_ALL = 0,  /* logits is [n, vocab]: row t holds the logits after token t        */
	PV_LOGITS_LAST = 1, /* logits is [vocab]: only the last row (the LM head runs once)       */
};
/* pv_session_run with logits only, without flags. logits may be NULL (the LM head is skipped). */
int pv_session_eval(pv_session* s, const int32_t* tokens, int n, float* logits, int mode);

int pv_session_length(const pv_session* s);         /* tokens seen so far                    */
const pv_model* pv_session_model(const pv_session* s);
int pv_session_n_snapshots(const pv_session* s);    /* rows a snapshot call may have (0: off) */
int pv_session_n_ctx(const pv_session* s);
int pv_session_cache_type(const pv_session* s);     /* enum pv_cache_type, never the default */
const int32_t* pv_session_tokens(const pv_session* s); /* history, pv_session_length entries */

/* Saves the recurrent (DeltaNet + conv) state at the current length (a no-op without DeltaNet
 * layers). Attention KV needs no copy: truncation cuts it. */
int pv_session_checkpoint(pv_session* s);
/* Keeps the session's first n tokens (n <= length), the cheapest way available: a model without
 * DeltaNet layers only cuts its KV; inside the last PV_EVAL_SNAPSHOT call (length after one of
 * its rows) the state is that row's snapshot; otherwise as pv_session_rollback. Checkpoints and
 * snapshots above n are dropped. */
int pv_session_truncate(pv_session* s, int n);
/* Keeps the first n tokens by restoring the newest checkpoint at or below n (or the empty state)
 * and replaying the tokens after it from the history on the exact path. */
int pv_session_rollback(pv_session* s, int n);
/* Makes the session's history equal tokens[0, n) (n >= 1) and returns the last row's outputs:
 * keeps the longest common prefix of the history and tokens (truncating to it, but at most n - 1
 * so the last token is evaluated), evaluates the rest (flags as pv_session_run), and writes the
 * outputs of row n - 1 only: out's row0 fields are ignored, logits [vocab], argmax [1], hidden [H].
 * *reused (may be NULL): the tokens kept. What a server does with each request (ds4_session_sync). */
int pv_session_sync(pv_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out,
                    int* reused);
/* Makes dst (a fresh or used session of the same model and backend) hold src's first n tokens:
 * KV rows [0, n), the history, and the recurrent state at n, which must be src's current state
 * (n == length), a checkpoint at n, or a snapshot row at n (else PV_E_UNSUPPORTED). dst's
 * checkpoints and snapshots are dropped; a checkpoint at n is taken in dst. The prefix cache. */
int pv_session_copy_prefix(pv_session* dst, const pv_session* src, int n);

/* Messages --------------------------------------------------------------------------------- */

/* The library never prints. What it has to say (load progress when asked, a switch to a slower
 * path, a device error's detail) goes to one process-wide callback, as sqlite3_config(SQLITE_CONFIG_LOG):
 * fn(user, level, line) for every message with level <= max_level; fn NULL: messages are dropped
 * (the default). Set it before opening models; it may be called from any thread that runs a
 * library call. */
enum pv_log_level { PV_LOG_ERROR = 0, PV_LOG_WARN = 1, PV_LOG_INFO = 2, PV_LOG_DEBUG = 3 };
typedef void (*pv_log_fn)(void* user, int level, const char* line);
void pv_set_log(pv_log_fn fn, void* user, int max_level);

/* The multi-token-prediction head that Qwen3-Next / Qwen3.5 / Qwen3.6 checkpoints ship
 * (pv_model_info.n_mtp_layers): one full-attention decoder layer with the model's FFN kind and
 * its own KV cache in the session (pv_session_params.mtp = 1). Row i takes the final-norm hidden
 * row of history position pos + i (hidden [n, H], as pv_eval_out.hidden returns it) and the token
 * at position pos + i + 1, writes the head's KV row at position pos + i (its RoPE position), and
 * predicts the token at position pos + i + 2: argmax [n] its greedy ids, hidden_out [n, H] (may be
 * NULL) the head's own final-norm rows, which a further row takes to chain a longer draft. Rows
 * of the head's cache at or above pos are replaced; pos may not exceed pv_session_mtp_length. The
 * session's truncation to n keeps the head's rows below n - 1. PV_E_UNSUPPORTED without a head,
 * without mtp = 1, or on a backend that does not compute it. */
int pv_session_mtp(pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
                   float* hidden_out);
int pv_session_mtp_length(const pv_session* s);

/* Greedy helper: index of the largest logit (lowest index on ties). */
int pv_argmax(const float* logits, int n);

#ifdef __cplusplus
}
#endif
#endif
