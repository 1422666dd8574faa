/*
 * session.cuh: a CUDA session (s->be_state) as the backend's host files see it: session.cu
 * (memory, the state copies, the backend table), decode.cu (the exact steps and the decode
 * graph), many.cu (several sessions' one-row steps as one step), profile.cu (the timing marks)
 * and the prefill files (prefill.cuh). Shapes: B = PV_CUDA_ROWS (16) rows per device step, H
 * hidden, V vocab, qd = heads x head dim, kvd = kv heads x head dim, cd the DeltaNet conv width,
 * vd = Hv x dv.
 */
#ifndef PV_CUDA_SESSION_CUH
#define PV_CUDA_SESSION_CUH

#include "common.cuh"

#include <string.h>

/* op groups of the profile (pv_cuda_profile); mark() adds a timing event after one */
enum { G_START = 0, G_EMBED, G_NORM, G_QKV, G_ROPE, G_ATTN, G_OPROJ, G_DPROJ, G_DREC, G_DOUT, G_GATEUP, G_DOWN, G_MROUTER,
       G_MROUTE, G_MEXPERTS, G_MSHARED, G_MCOMBINE, G_LMHEAD, G_ARGMAX, G_COUNT };
#define PV_PROF_MAX 2048 /* timing events of one profiled step */

struct pv_prefill; /* prefill.cuh */

struct dsession {
	cudaStream_t st;
	/* the shared expert of an MoE layer runs on st2 beside the routed experts (fork/join events;
	 * captured as two graph branches): both are a few us of latency-bound GEMVs */
	cudaStream_t st2;
	cudaEvent_t fork_ev, join_ev;
	unsigned char* mem;       /* one allocation for everything below (layout())             */
	size_t mem_bytes;
	void **kc, **vc;          /* host arrays [n_layers] of device pointers [n_ctx][nkv] head
	                           * slices of type kvt (NULL: no KV; pv_kv_hbytes bytes a slice)  */
	int kvt;                  /* the cache's element type, PV_KV_* (common.cuh), from s->cache_type */
	float *cos, *sin;         /* [n_ctx][R/2] rope tables                                    */
	float *x, *xn, *delta;    /* [B][H] residual stream, normed input, a block's output       */
	float *qraw, *kraw, *vraw, *q, *gate, *o; /* [B][ldq], [B][kvd] x2, [B][qd] x3            */
	float *part_o, *part_ml;  /* attention splits: [B][nh][n_split][hd], [B][nh][n_split][2]  */
	float *ffg, *ffu;         /* [B][ffn]                                                    */
	float* logits;            /* [B][V]                                                      */
	int* ids;                 /* [B] argmax of the logits rows                               */
	unsigned* ncnt;           /* the fused add+RMSNorm's completion counter (zero between uses) */
	/* Gated DeltaNet: every linear layer's S then conv state, contiguous (the CPU's layout);
	 * the checkpoint slots [n_ckpt_slots] and the per-row snapshot slots [n_snapshots]
	 * (PV_EVAL_SNAPSHOT) have the same size and layout. A multi-session step that another
	 * session hosts reads and writes state through struct dmany's state[t] */
	float *state, *ckpt, *snap;
	size_t state_floats;
	int* lin_index;           /* [n_layers]: position among the linear layers, or -1          */
	/* [B][ld_raw] projections, [B][cd] conv output, [B][vd] z, [B][Hv] b and a, [B][2Hv] ba, [B][vd] o */
	float *lin_raw, *lin_u, *lin_z, *lin_b, *lin_a, *lin_ab, *lin_o;
	int ld_raw;
	/* MoE: router logits [B][E], top-k ids and weights [B][k], per-slot gate/up [B k][Ie] and
	 * outputs [B k][H], the shared expert's gate/up [B][Is] and output [B][H] */
	float *rlog, *top_w, *eg, *eu, *eo, *shg, *shu, *sho;
	int* top_idx;
	/* the MTP head (mtp.cu; sessions with mtp = 1 of a model with a head): its KV cache
	 * [n_ctx][nkv] head slices x2 (type kvt), its input rows [B][2H] ([embedding, hidden] after
	 * their norms) and the caller's hidden rows [B][H] */
	void *mtp_kc, *mtp_vc;
	float *mtp_cat, *mtp_hid;
	/* the cache pointers of every layer, [2][n_layers] (K then V; NULL: no KV), device memory: a
	 * multi-session step (struct dmany) reads another session's cache through this table */
	void** kvtab;
	struct dmany* many_dev;   /* a multi-session step hosted here (many.cu): graph and direct  */
	struct dmany* many_host;  /* pinned                                                      */
	struct dstep* step_dev;   /* direct launches                                             */
	struct dstep* gstep_dev;  /* the graph's                                                 */
	struct dstep* step_host;  /* pinned, [n_slots]                                           */
	struct dstep* gstep_host; /* pinned                                                      */
	int* ids_host;            /* pinned, [PV_CUDA_ROWS]                                      */
	int n_slots;
	int n_split, ldq, ffn;    /* attention splits of cuda.att_split keys over n_ctx            */
	cudaGraph_t graph;
	cudaGraphExec_t gexec;
	/* window graphs (cuda.window_graphs): the step of n = 2..16 rows whose LM rows start at lr0,
	 * without (0) or with (1: cuda.window_graphs=2) snapshots from slot 0, captured at its first
	 * use; [n][lr0][snap], with their kernel counts */
	cudaGraph_t wgraph[PV_CUDA_ROWS + 1][PV_CUDA_ROWS][2];
	cudaGraphExec_t wexec[PV_CUDA_ROWS + 1][PV_CUDA_ROWS][2];
	uint64_t wkernels[PV_CUDA_ROWS + 1][PV_CUDA_ROWS][2];
	/* multi-session graphs (forward_many, many.cu; cuda.batch_graphs): the step of n = 1..16
	 * sessions' rows hosted by this session, captured at its first use, and their kernel counts */
	cudaGraph_t mgraph[PV_CUDA_ROWS + 1];
	cudaGraphExec_t mexec[PV_CUDA_ROWS + 1];
	uint64_t mkernels[PV_CUDA_ROWS + 1];
	/* the model's tuning switches (tuning.cuh), this session's copy: pv_cuda_set_graphs and
	 * pv_cuda_set_prefill change graphs and prefill / prefill_chunk here only */
	struct pv_cuda_tuning tu;
	struct pv_prefill* pre;   /* the prompt path (prefill.cu), set up in session_init         */
	int failed;
	int last_token;
	struct pv_cuda_session_stats stats;
	/* profiling: while prof is set, pv_prof_mark() adds a timing event node after each op group */
	int prof, n_marks;
	cudaEvent_t* ev;          /* [PV_PROF_MAX], created on first use                         */
	unsigned char* mark_group;
	int* mark_kernels;        /* kernels launched up to the mark                             */
	double* mark_bytes;       /* weight bytes since the previous mark                        */
	double pending_bytes;
};

static inline struct dsession* dsess(const struct pv_session* s) { return (struct dsession*)s->be_state; }
static inline const struct dmodel* dmod(const struct pv_session* s) { return (const struct dmodel*)s->m->dev; }

/* The first row of a step any output wants (sp->n: none): the LM head runs from there. */
static inline int pv_step_lm_row0(const struct pv_step* sp)
{
	int r0 = sp->n;
	if (sp->logits && sp->logits_row0 < r0) r0 = sp->logits_row0;
	if (sp->argmax && sp->argmax_row0 < r0) r0 = sp->argmax_row0;
	if (sp->hidden && sp->hidden_row0 < r0) r0 = sp->hidden_row0;
	return r0;
}

/* The MoE arguments of layer L over n rows, without the buffers (logits, idx, w, eo, sh, xn,
 * out): decode and prefill each set their own. */
static inline void pv_moe_args_layer(struct moe_args* a, const struct pv_config* c, const struct dlayer* L, int n)
{
	memset(a, 0, sizeof(*a));
	a->sh_gate = L->sh_gate_w;
	a->E = c->n_experts;
	a->k = c->n_experts_used;
	a->norm_topk = c->norm_topk;
	a->shared = L->sh_gate.type >= 0;
	a->H = c->hidden;
	a->n = n;
}

/* session.cu: marks the session failed (sticky; the stream drained for session_free) */
void pv_cuda_fail_session(struct pv_session* s);

/* decode.cu: the backend's forward call (engine/backend.h); the one-row graph's capture */
int pv_cuda_forward(struct pv_session* s, const struct pv_step* sp);
int pv_cuda_capture(struct pv_session* s, char* err, size_t errlen);
/* decode.cu: frees the window graphs and the multi-session graphs (session end, a change of the
 * decode switches) */
void pv_cuda_drop_windows(struct dsession* d);
/* decode.cu: rows [0, n) of one step at step->pos0: every layer, then (lm) the final norm, the
 * LM head and the argmax for rows [lr0, n). snap (NULL: none): the snapshot slot that receives
 * the recurrent state after row 0; row t's goes to the slot t after it (direct launches only:
 * the graph never has snapshots). many (NULL: one session): a multi-session step (step is
 * &many->step): row t at many->pos[t] over its own session's KV cache and recurrent state
 * (many->kt / vt / state), s's scratch for the rest (no snapshots). */
int pv_cuda_enqueue_step(struct pv_session* s, const struct dstep* step, int n, int lm, int lr0, float* snap, char* err,
                         size_t errlen, const struct dmany* many = NULL);
/* decode.cu: one decoder layer over the step's rows, the residual stream d->x in place: the
 * input add+RMSNorm (x += delta unless first; skipped when *normed says the previous GEMV's
 * epilogue did it), the mixer (kind PV_LAYER_LINEAR: DeltaNet layer l's state, snap as above;
 * PV_LAYER_ATTN: attention over the KV cache kc / vc, [n_ctx][kvd] of type kvt), the add+RMSNorm,
 * the FFN (moe: routed experts, else SwiGLU) into delta, not yet added to x. nn: the norm after
 * the FFN, which a one-row down projection may run in its epilogue (then *normed = 1, xn holds
 * its output). many: a multi-session step (enqueue_step). The main layers and the MTP head's
 * layer (mtp.cu) both run it. */
int pv_cuda_enqueue_layer(struct pv_session* s, const struct dlayer* L, int l, int kind, int moe, void* kc, void* vc,
                          const struct dstep* step, int n, int first, const float* nn, int* normed, int* nl, float* snap,
                          char* err, size_t errlen, const struct dmany* many = NULL);
/* mtp.cu: the MTP head, the seam's mtp call (engine/backend.h; arguments checked by the engine) */
int pv_cuda_mtp(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
                float* hidden_out);
/* decode.cu: captures that step of n rows, LM rows [lr0, n), with the copy of its step struct in
 * front (many: d->many_host to d->many_dev, the multi-session step; else the one-session graph
 * step) and the copy of the argmax ids to ids_host behind; the kernel nodes into *kernels */
int pv_cuda_capture_step(struct pv_session* s, int n, int lr0, float* snap, int many, cudaGraph_t* graph,
                         cudaGraphExec_t* exec, uint64_t* kernels, char* err, size_t errlen);
/* many.cu: the seam's forward_many (continuous batching) */
int pv_cuda_forward_many(struct pv_session** ss, const struct pv_step* sp, int count);
/* decode.cu: copies back the outputs of step rows [g0, g0 + rows) whose LM rows are on the
 * device (row g0 first): logits rows in d_logits, argmax ids in d_ids, final-norm rows in d_xn */
int pv_cuda_copy_outputs(const struct pv_step* sp, int g0, int rows, const float* d_logits, const int* d_ids, const float* d_xn,
                         int V, int H, cudaStream_t st, uint64_t* memcpys, char* err, size_t errlen);

/* profile.cu: a timing event after op group g (nl kernels launched so far in the step), and the
 * weight bytes the next group reads (share: k / E for gathered experts); no-ops unless profiling */
int pv_prof_mark(struct dsession* d, int g, int nl, char* err, size_t errlen);
void pv_prof_weigh(struct dsession* d, const struct gemv_out* o, int n, double share);
/* profile.cu: pv_cuda_profile as the seam's profile call */
int pv_cuda_profile_seam(struct pv_session* s, int32_t token, int reps, struct pv_profile* out);
void pv_cuda_profile_free(struct dsession* d);

/* prefill.cu: the prompt path (src/cuda/README.md, "Prefill"). A long call (n >= chunk_min_tokens
 * rows, more than 16, never an exact step) runs in chunks of bf16 tensor-core GEMMs (cuBLAS,
 * loaded at run time), a flash-style attention and the T-row kernels; within tolerance of the
 * exact 16-row steps, never bitwise. */
/* 1 when this call should take the path: on for the session, cuBLAS loaded (else a one-time
 * message and 0), n rows > 16 and >= s->chunk_min */
int pv_prefill_wanted(struct pv_session* s, int n);
/* The step: rows sp->tokens at positions sp->pos0.., outputs as it asks; *have_id = 1 when
 * ids_host[0] will hold the last row's argmax after the caller's synchronisation. No host
 * synchronisation inside. */
int pv_prefill_forward(struct pv_session* s, const struct pv_step* sp, int* have_id, char* err, size_t errlen);
/* The set-up (cuBLAS, its handle, the scratch) when the session can take the path (on,
 * max_batch above 16 and >= chunk_min), at session creation; a failure turns the path off for
 * the session (stats' fallback says why, and a PV_LOG_WARN message) */
void pv_prefill_prepare(struct pv_session* s);
/* After the caller's synchronisation: adds the call's GPU time (CUDA events) to the stats. */
void pv_prefill_account(struct pv_session* s);
/* after a change of the session's settings (d->tu): drops the scratch when it was laid out for
 * other settings (chunk, precise mode, MoE kernels); pv_prefill_prepare sets it up again */
void pv_prefill_retune(struct pv_session* s);
void pv_prefill_free(struct pv_prefill* p);
/* device bytes of the scratch a session with these settings sets up (0: none), and of the one it
 * holds now */
uint64_t pv_prefill_bytes(const struct pv_session* s);
uint64_t pv_prefill_device_bytes(const struct pv_prefill* p);
/* why the path is off for the session (NULL while it is on) */
const char* pv_prefill_fallback(const struct pv_prefill* p);

#endif
