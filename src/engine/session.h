/*
 * session.h: the per-sequence state behind pv_session, and the CPU forward entry points.
 * Everything here is allocated once in pv_session_new; the forward pass allocates nothing.
 */
#ifndef PV_SESSION_H
#define PV_SESSION_H

#include "model/model.h"
#include "cpu/ops.h"

#include <math.h>

#define PV_DELTA_CHUNK 64 /* chunk length C of the chunked DeltaNet form (HF and llama.cpp use 64) */

struct pv_checkpoint {
	int len;     /* session length when taken                                         */
	int slot;    /* backend storage slot holding the state                            */
};

/* Per-thread scratch for attention scores and the chunked DeltaNet solve. */
struct pv_thread_scratch {
	float* scores; /* [n_ctx]                                                          */
	float* chunk;  /* chunked DeltaNet work area (see deltanet.c)                       */
};

struct pv_backend;

struct pv_session {
	const struct pv_model* m;
	const struct pv_backend* be;
	void* dev;       /* backend-private state (device buffers)                         */
	struct pv_pool* pool;
	int n_threads;
	int n_ctx;
	int max_batch;   /* B: rows per internal step                                      */
	int chunk_min;   /* calls of at least this many tokens use chunked DeltaNet         */
	int len;         /* tokens seen                                                     */
	int32_t* tokens; /* [n_ctx] history                                                 */

	/* attention KV cache, per layer (NULL for linear layers): [n_ctx, nkv*hd] f32 */
	float** k_cache;
	float** v_cache;
	/* DeltaNet state, per layer (NULL for attention layers) */
	float** ssm;  /* [Hv, dk, dv] f32, S[i][j] with dv contiguous (HF layout)           */
	float** conv; /* [Kc-1, conv_dim] pre-conv inputs, oldest first                    */
	size_t state_floats; /* floats in one checkpoint                                    */

	struct pv_checkpoint* ckpt; /* oldest first                                        */
	int n_ckpt_slots, n_ckpt;
	float** ckpt_buf; /* CPU backend: [n_ckpt_slots] slot storage, each linear layer's S then conv */

	/* RoPE tables [n_ctx, R/2] */
	float *rope_cos, *rope_sin;

	/* scratch, B rows each */
	float *x, *xn, *tmp, *mo; /* [B, H]: residual, normed, layer output, expert output  */
	float *q, *o, *ag;        /* [B, nh*hd] query, [B, max(nh*hd, Hv*dv)] mixer output, [B, nh*hd] gate */
	float *mix, *mix2, *z;    /* [B, max(conv_dim, 2kd+2vd, 2*nh*hd)], [B, conv_dim], [B, vd] */
	float *ab;                /* [B, 2*Hv]                                             */
	float *lb, *lg;           /* [B, Hv] beta and log-decay g                          */
	float *ff_g, *ff_u;       /* [B, max(I, Ie, Is)]                                   */
	float *router;            /* [B, E]                                                */
	int* top_idx;             /* [B, k]                                                */
	float* top_w;             /* [B, k]                                                */
	int* exp_rows;            /* [B] rows routed to the current expert                 */
	int* exp_slot;            /* [B] their slot index t*k + j                          */
	float *gx, *eo;           /* [B, H] gathered rows; [B*k, H] per-slot expert outputs */
	float* mtp_in;            /* reserved for the MTP drafter                          */
	struct pv_thread_scratch* ts; /* n_threads                                         */

	char err[256];
};

/* forward.c: evaluates rows tokens[0..n) at positions s->len.. (n <= max_batch), writing
 * logits rows into `logits` (ld = vocab) for rows [first_logit, n), or none if NULL.
 * Appends K/V and advances the recurrent state; does not change s->len. */
void pv_forward(struct pv_session* s, const int32_t* tokens, int n, float* logits, int first_logit,
                int chunked);

/* deltanet.c: one Gated DeltaNet layer over n rows: xn [n, H] -> out [n, H]. */
void pv_deltanet_layer(struct pv_session* s, int layer, const float* xn, float* out, int n, int chunked);
size_t pv_deltanet_chunk_floats(const struct pv_config* c);
/* session.c: widths of the per-row scratch buffers */
struct pv_widths {
	size_t mix, ffn, o;
};
struct pv_widths pv_scratch_widths(const struct pv_config* c);
/* session.c: floats of one linear layer's recurrent state (S, then the conv window) */
size_t pv_state_floats_per_layer(const struct pv_config* c);

/* small shared helpers (forward.c) */
void pv_rmsnorm(float* y, const float* x, const float* w, int n, float eps);
static inline float pv_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float pv_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
