/*
 * state.h: what a CPU session holds (s->be_state), allocated once in cpu/backend.c, and the
 * entry points of the CPU forward pass. Shapes use qwen-models.md's notation; B = max_batch.
 */
#ifndef PV_CPU_STATE_H
#define PV_CPU_STATE_H

#include "cpu/ops.h"
#include "engine/backend.h"
#include "engine/session.h"

#include <math.h>

#define PV_DELTA_CHUNK 64 /* chunk length C of the chunked DeltaNet form (HF and llama.cpp use 64) */
#define PV_LM_ROWS 8      /* rows of the LM head scratch for argmax-only rows                    */

/* Per-thread scratch for attention scores and the DeltaNet solves. */
struct pv_thread_scratch {
	float* scores; /* [n_ctx]                                                          */
	float* chunk;  /* DeltaNet work area (pv_deltanet_chunk_floats)                     */
};

struct pv_cpu_state {
	/* attention KV cache, per layer (NULL for linear layers): [n_ctx, nkv*hd] f32 */
	float** k_cache;
	float** v_cache;
	/* DeltaNet state, per layer (NULL for attention layers); S and conv are one allocation */
	float** ssm;  /* [Hv, dk, dv] f32, S[i][j] with dv contiguous (HF layout)           */
	float** conv; /* [Kc-1, conv_dim] pre-conv inputs, oldest first                    */
	int* lin_index; /* [n_layers]: position among the linear layers, or -1              */
	float** ckpt_buf; /* [n_ckpt_slots] checkpoint slots, each linear layer's S then conv */
	float** snap_buf; /* [n_snapshots] per-row snapshot slots, same layout              */

	/* scratch, B rows each. Buffers are reused by the layer kinds; each names its use: */
	float *x, *xn;            /* [B, H] residual stream, normed input of the block      */
	float *mixer;             /* [B, H] mixer output, then the FFN's                    */
	float *mo;                /* [B, H] one expert's / the shared expert's output       */
	float *q;                 /* [B, nh*hd] queries (rotated)                           */
	float *o;                 /* [B, max(nh*hd, Hv*dv)] attention / DeltaNet output     */
	float *ag;                /* [B, nh*hd] attention output gate                       */
	float *mix, *mix2;        /* [B, max(conv_dim, 2kd+2vd, 2*nh*hd)]: projections, conv out */
	float *z;                 /* [B, vd] DeltaNet output gate                           */
	float *ab;                /* [B, 2*Hv] grouped b/a projections                      */
	float *lb, *lg;           /* [B, Hv] beta and log-decay g                           */
	float *ff_g, *ff_u;       /* [B, max(I, Is)], or [B*k, Ie] on MoE models if larger  */
	float *router;            /* [B, E]                                                 */
	int* top_idx;             /* [B, k]                                                 */
	float* top_w;             /* [B, k]                                                 */
	int* exp_rows;            /* [B*k] routed rows, grouped by expert                   */
	int* exp_slot;            /* [B*k] their slot index t*k + j                         */
	int* slot_pos;            /* [B*k] slot t*k + j -> its place in the grouped order    */
	int* exp_off;             /* [E+1] first grouped place of each expert               */
	struct pv_mm_prod* prods; /* [2E] the experts' products of one MoE layer            */
	float *gx, *eo;           /* [B*k, H] gathered rows (B on dense models); [B*k, H] the
	                           * experts' outputs in grouped order                      */
	float* lm;                /* [PV_LM_ROWS, V] logits of rows whose logits nobody keeps */
	float *mtp_k, *mtp_v;     /* the MTP head's KV cache [n_ctx, nkv*hd] (mtp sessions)   */
	float* mtp_cat;           /* [B, 2H] the head's [embedding, hidden] input rows        */
	struct pv_thread_scratch* ts; /* n_threads                                          */
	/* the products (ops.h): pool, the model's kernels, converted activation rows [B, ...] */
	struct pv_mm mm;
	void* act;
	struct pv_kernels own_k;  /* exact numerics for a model not opened on this backend   */
};

static inline struct pv_cpu_state* pv_cpu(const struct pv_session* s) { return (struct pv_cpu_state*)s->be_state; }

/* forward.c: one step (engine/backend.h): rows st->tokens at positions st->pos0.., outputs as
 * asked. Appends K/V and advances the recurrent state; does not change s->len. Returns 0, or -1
 * when an output row holds a NaN or an infinity. */
int pv_cpu_forward(struct pv_session* s, const struct pv_step* st);
/* forward.c: one decoder layer over rows x [n, H] in place (the residual stream), at positions
 * pos0..: the loop body of the forward pass, and what the MTP head runs with its own layer and
 * KV cache (kc, vc: [n_ctx, nkv*hd], NULL for a linear layer). */
void pv_cpu_layer(struct pv_session* s, const struct pv_layer* L, int layer, int kind, int moe, float* kc, float* vc,
                  int n, int pos0, int chunked, int snap_row0);

/* mtp.c: the MTP head (proven.h pv_session_mtp), arguments checked by the engine */
int pv_cpu_mtp(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
               float* hidden_out);

/* deltanet.c: one Gated DeltaNet layer over n rows: xn [n, H] -> out [n, H]; snap_row0 >= 0:
 * the state after row t is also written to snapshot slot snap_row0 + t */
void pv_deltanet_layer(struct pv_session* s, int layer, const float* xn, float* out, int n, int chunked, int snap_row0);
size_t pv_deltanet_chunk_floats(const struct pv_config* c);

/* backend.c: the kernels a model opened on the CPU backend uses (its knobs); NULL for a model
 * opened elsewhere (its CPU sessions take the exact numerics) */
const struct pv_kernels* pv_cpu_kernels(const struct pv_model* m);

/* small shared helpers (forward.c) */
void pv_rmsnorm(float* y, const float* x, const float* w, int n, float eps);
static inline float pv_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float pv_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
