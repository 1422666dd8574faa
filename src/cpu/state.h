/*
 * state.h: what a CPU session holds (s->be_state), allocated once in cpu/backend.c, and the
 * entry points of the CPU forward pass. Shapes use qwen-models.md's notation; B = max_batch.
 */
#ifndef PV_CPU_STATE_H
#define PV_CPU_STATE_H

#include "cpu/ops.h"
#include "engine/backend.h"
#include "engine/session.h"

#include "base/clock.h"

#include <math.h>

#define PV_DELTA_CHUNK 64 /* chunk length C of the chunked DeltaNet form (HF and llama.cpp use 64) */
#define PV_LM_ROWS 8      /* rows of the LM head scratch for argmax-only rows                    */

/* Per-thread scratch for attention scores and the DeltaNet solves. */
struct pv_thread_scratch {
	float* scores; /* [n_ctx]                                                          */
	float* chunk;  /* DeltaNet work area (pv_deltanet_chunk_floats)                     */
	float* kv;     /* [2, hd] one key's and one value's head slice as f32 (non-f32 caches) */
};

/* Where the time of the steps goes (proven bench --profile; pv_session_profile_start): op
 * groups of the forward pass, charged by pv_prof_mark with the wall time since the previous
 * mark (so everything between two marks, threads' work included, lands in one group). */
enum pv_prof_group {
	PV_PROF_EMBED,     /* token embedding rows                                         */
	PV_PROF_NORM,      /* RMS norms of the blocks, residual adds, the final norm       */
	PV_PROF_MM_QKV,    /* matmul: attention q/k/v projections                          */
	PV_PROF_ROPE,      /* q/k norms, RoPE, the K/V rows into the cache                 */
	PV_PROF_ATTN,      /* attention over the cache (and its output gate)               */
	PV_PROF_MM_O,      /* matmul: attention output projection                          */
	PV_PROF_MM_DIN,    /* matmul: DeltaNet input projections (qkv, z, b, a)             */
	PV_PROF_DCONV,     /* DeltaNet causal conv + SiLU                                  */
	PV_PROF_DELTA,     /* DeltaNet recurrence (or chunked form)                        */
	PV_PROF_DOTHER,    /* DeltaNet l2 norms, gates, output norm                        */
	PV_PROF_MM_DOUT,   /* matmul: DeltaNet output projection                           */
	PV_PROF_MM_GATEUP, /* matmul: FFN gate/up (dense, or the MoE shared expert)        */
	PV_PROF_ACT,       /* SwiGLU activation                                            */
	PV_PROF_MM_DOWN,   /* matmul: FFN down (dense, or the MoE shared expert)           */
	PV_PROF_ROUTER,    /* MoE router matmul and top-k                                  */
	PV_PROF_MM_EXP,    /* matmul: routed experts' gate/up and down                     */
	PV_PROF_MOE_OTHER, /* MoE grouping, gathers, the weighted sum, shared-expert gate  */
	PV_PROF_LM_HEAD,   /* LM head matmul, argmax, output checks                        */
	PV_PROF_COUNT
};
struct pv_cpu_prof {
	double s[PV_PROF_COUNT]; /* seconds per group            */
	long calls[PV_PROF_COUNT];
	long rows;               /* rows evaluated while profiling */
	double last;             /* the previous mark (pv_now_s) */
};

struct pv_cpu_state {
	/* attention KV cache, per layer (NULL for linear layers): [n_ctx] rows of kv_row bytes,
	 * each [nkv, hd] in the session's cache type (kvcache.c: kv_dtype, head slices kv_head
	 * bytes apart) */
	unsigned char** k_cache;
	unsigned char** v_cache;
	int kv_dtype;        /* enum pv_dtype: PV_F32, PV_F16, PV_BF16 or PV_Q8_0              */
	size_t kv_head;      /* bytes of one head's slice of a row (pv_kv_head_bytes)          */
	size_t kv_row;       /* bytes of a row: nkv * kv_head                                 */
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
	unsigned char *mtp_k, *mtp_v; /* the MTP head's KV cache, as k_cache (mtp sessions)    */
	float* mtp_cat;           /* [B, 2H] the head's [embedding, hidden] input rows        */
	struct pv_thread_scratch* ts; /* n_threads                                          */
	/* the products (ops.h): pool, the model's kernels, converted activation rows [B, ...] */
	struct pv_mm mm;
	void* act;
	struct pv_kernels own_k;  /* exact numerics for a model not opened on this backend   */
	struct pv_cpu_prof* prof; /* per-op timing while profiling, else NULL                 */
};

static inline struct pv_cpu_state* pv_cpu(const struct pv_session* s) { return (struct pv_cpu_state*)s->be_state; }

/* Charges the time since the previous mark to group g (profiling only; one branch otherwise). */
static inline void pv_prof_mark(struct pv_cpu_state* st, int g)
{
	if (!st->prof) return;
	const double t = pv_now_s();
	st->prof->s[g] += t - st->prof->last;
	st->prof->calls[g]++;
	st->prof->last = t;
}

/* forward.c: one step (engine/backend.h): rows st->tokens at positions st->pos0.., outputs as
 * asked. Appends K/V and advances the recurrent state; does not change s->len. Returns 0, or -1
 * when an output row holds a NaN or an infinity. */
int pv_cpu_forward(struct pv_session* s, const struct pv_step* st);
/* forward_many.c: one row of each of count sessions evaluated together (engine/backend.h
 * forward_many): 0 (bad[i] = 1 where row i's outputs are not finite: that session's own step
 * would have failed), or 1 when this path does not cover the call (nothing was touched; the
 * engine then steps each session alone). */
int pv_cpu_forward_many(struct pv_session** ss, const struct pv_step* st, int count, int* bad);
/* forward.c: one decoder layer over rows x [n, H] in place (the residual stream), at positions
 * pos0..: the loop body of the forward pass, and what the MTP head runs with its own layer and
 * KV cache (kc, vc: [n_ctx] rows of st->kv_row bytes, NULL for a linear layer). */
void pv_cpu_layer(struct pv_session* s, const struct pv_layer* L, int layer, int kind, int moe, unsigned char* kc,
                  unsigned char* vc,
                  int n, int pos0, int chunked, int snap_row0);

/* forward.c: the pieces of a layer the batched step (forward_many.c) shares with the one-session
 * step, so that a row gets the same bits either way. The attention ones work in s's scratch
 * (q, o, ag: [B, nh*hd]). */
/* rows [rows, n]: y = pv_rmsnorm(x) per row; x [count] += d */
void pv_rmsnorm_rows(float* y, const float* x, const float* w, int rows, int n, float eps);
void pv_add_rows(float* x, const float* d, size_t count);
/* one row's q [nh*hd], k, v [nkv*hd] after the projections, at position pos: biases, q/k norms, RoPE */
void pv_cpu_qkv_post(const struct pv_session* s, const struct pv_layer* L, float* q, float* k, float* v, int pos);
/* the output gate: q_proj's row [nh, 2, hd] -> q [nh*hd], ag [nh*hd]; o [count] *= sigmoid(ag) */
void pv_cpu_gate_split(const struct pv_config* c, const float* qg, float* q, float* ag);
void pv_cpu_gate_apply(float* o, const float* ag, size_t count);
/* attention of query row t (s's q row t -> o row t), head h, at position pos, over a cache kc/vc
 * ([n_ctx] rows of kv_row bytes, s's cache type): the portable / AVX2 kernel */
void pv_cpu_attn_row_head(struct pv_session* s, const unsigned char* kc, const unsigned char* vc, int t, int pos, int h,
                          int thread);
/* whether s runs the AVX-512 attention (pv_attn_avx512), and its rows per task */
int pv_cpu_attn512(const struct pv_session* s, int* rows);
/* the FFN of rows xn [n, H] -> out [n, H]: MoE (moe) or dense SwiGLU */
void pv_cpu_ffn(struct pv_session* s, const struct pv_layer* L, int moe, const float* xn, float* out, int n);
/* whether a row is finite; a logits row's argmax, -1 when it is not finite */
int pv_cpu_row_finite(const float* x, int n);
int pv_cpu_argmax_finite(const struct pv_cpu_state* st, const float* x, int n);

/* mtp.c: the MTP head (proven.h pv_session_mtp), arguments checked by the engine */
int pv_cpu_mtp(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
               float* hidden_out);

/* deltanet.c: one Gated DeltaNet layer over n rows: xn [n, H] -> out [n, H]; snap_row0 >= 0:
 * the state after row t is also written to snapshot slot snap_row0 + t */
void pv_deltanet_layer(struct pv_session* s, int layer, const float* xn, float* out, int n, int chunked, int snap_row0);
/* deltanet.c: the layer for one row of each of count sessions (ss[i], forward_many.c): xn
 * [count, H] -> out [count, H] in host's scratch; row i's conv window and S are session i's,
 * advanced by the one-row recurrent step */
void pv_deltanet_layer_many(struct pv_session* host, struct pv_session* const* ss, int count, int layer, const float* xn,
                            float* out);
size_t pv_deltanet_chunk_floats(const struct pv_config* c);

/* backend.c: the kernels a model opened on the CPU backend uses (its knobs); NULL for a model
 * opened elsewhere (its CPU sessions take the exact numerics) */
const struct pv_kernels* pv_cpu_kernels(const struct pv_model* m);

/* kvcache.c: the cache's element types. The pv_dtype of an enum pv_cache_type; bytes of one
 * head's slice of hd elements; one row [nkv, hd] of f32 to its stored form (rounded once);
 * one head's stored slice back to hd floats (exact). */
int pv_kv_dtype(int cache_type);
size_t pv_kv_head_bytes(int dtype, int hd);
void pv_kv_store(int dtype, const float* src, unsigned char* dst, int nkv, int hd);
void pv_kv_load(int dtype, const unsigned char* head, float* dst, int hd);

/* small shared helpers (forward.c) */
void pv_rmsnorm(float* y, const float* x, const float* w, int n, float eps);
static inline float pv_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float pv_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

#endif
