/*
 * proven.h: the public interface of the proven inference engine.
 *
 * Two objects:
 *   pv_model    an immutable loaded model (weights memory-mapped, settings read from the file).
 *               Any number of sessions may share one model.
 *   pv_session  one sequence's mutable state: attention KV cache, Gated DeltaNet recurrent and
 *               conv states, the position, the token history and checkpoints. All scratch memory
 *               is allocated when the session is created: evaluating tokens allocates nothing.
 *
 * Errors: functions that can fail return 0 on success and a negative value on failure. Open and
 * create functions write a one-line message into the caller's buffer; session calls keep the
 * message in the session (pv_session_error). The library never exits and never prints, except
 * progress lines when asked to.
 *
 * Exactness contract (what speculative decoding relies on):
 *   - Batch invariance: the logits of a row never depend on how many rows are evaluated in the
 *     same call, as long as the call uses the token-by-token ("recurrent") form of Gated DeltaNet.
 *     Calls shorter than pv_session_params.chunk_min_tokens always do; longer calls (prompts) use
 *     the chunked form on hybrid models, which agrees within float rounding but not bit for bit.
 *     Models without DeltaNet layers are batch-invariant for every call size.
 *   - Rollback: after pv_session_rollback(s, n) the session is bitwise the session that saw only
 *     the first n tokens, when the tokens between the restored checkpoint and n were evaluated
 *     in calls that used the recurrent form (see above).
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
	int verbose;         /* 1: progress and summary lines on stderr while loading                */
	const char* backend; /* NULL or "cpu": the CPU; "cuda": weights uploaded to the GPU at open,
	                      * sessions run there (fails when the build has no CUDA backend)       */
};

struct pv_session_params {
	int n_ctx;            /* KV cache length; 0: min(max_context, 4096)                          */
	int n_threads;        /* 0: all online cores                                                 */
	int max_batch;        /* rows evaluated per internal step (scratch size); 0: 128 on the CPU,
	                       * 4096 on the GPU (a prompt of up to 4096 tokens is one device call) */
	int chunk_min_tokens; /* calls with at least this many tokens use chunked DeltaNet; 0: 64    */
	int n_checkpoints;    /* checkpoint slots kept (oldest dropped first); 0: 4                  */
};

/* Model ---------------------------------------------------------------------------------- */

/* Opens a model: a Hugging Face directory (config.json + safetensors) or a GGUF file (any path
 * that is a regular file). Validates every tensor against the shapes the config implies before
 * returning. */
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

/* Bytes of memory a session with these parameters allocates (KV, states, scratch). */
uint64_t pv_session_bytes(const pv_model* m, const struct pv_session_params* params);

/* Session -------------------------------------------------------------------------------- */

int pv_session_new(pv_session** out, const pv_model* m, const struct pv_session_params* params,
                   char* err, size_t errlen);
void pv_session_free(pv_session* s);
const char* pv_session_error(const pv_session* s);

enum {
	PV_LOGITS_ALL = 0,  /* logits is [n, vocab]: row t holds the logits after token t        */
	PV_LOGITS_LAST = 1, /* logits is [vocab]: only the last row (the LM head runs once)       */
};

/* Appends n tokens and evaluates them. logits may be NULL (nothing is written and the LM head
 * is skipped). Fails cleanly (session unchanged) on a bad token id or a full context. */
int pv_session_eval(pv_session* s, const int32_t* tokens, int n, float* logits, int mode);

int pv_session_length(const pv_session* s);         /* tokens seen so far                    */
int pv_session_n_ctx(const pv_session* s);
const int32_t* pv_session_tokens(const pv_session* s); /* history, pv_session_length entries */

/* Saves the recurrent (DeltaNet + conv) state at the current length. Returns 0 or < 0.
 * Attention KV needs no copy: rollback truncates it. */
int pv_session_checkpoint(pv_session* s);
/* Rolls the session back to its first n tokens (n <= length): restores the newest checkpoint at
 * or below n and replays the tokens after it from the history. Checkpoints above n are dropped.
 * A model without DeltaNet layers needs no checkpoint. */
int pv_session_rollback(pv_session* s, int n);

/* Messages --------------------------------------------------------------------------------- */

/* The library never prints. What it has to say (load progress when asked, a switch to a slower
 * path, a device error's detail) goes to one process-wide callback, as sqlite3_config(SQLITE_CONFIG_LOG):
 * fn(user, level, line) for every message with level <= max_level; fn NULL: messages are dropped
 * (the default). Set it before opening models; it may be called from any thread that runs a
 * library call. */
enum pv_log_level { PV_LOG_ERROR = 0, PV_LOG_WARN = 1, PV_LOG_INFO = 2, PV_LOG_DEBUG = 3 };
typedef void (*pv_log_fn)(void* user, int level, const char* line);
void pv_set_log(pv_log_fn fn, void* user, int max_level);

/* Greedy helper: index of the largest logit (lowest index on ties). */
int pv_argmax(const float* logits, int n);

#ifdef __cplusplus
}
#endif
#endif
