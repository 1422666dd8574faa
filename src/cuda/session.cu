/*
 * session.cu: a session on the GPU (backend.h): device memory for the KV cache, rope tables and
 * scratch; the forward pass as a sequence of kernel launches; the CUDA graph that replays it for
 * one-row calls; counters; and the backend table.
 *
 * A call of n rows runs in steps of at most PV_CUDA_ROWS (16) rows. Each step's positions and
 * token ids travel in a struct dstep the kernels read from device memory, so the same launches
 * serve any position: a one-row step is captured once into a graph (the copy of the step struct
 * from pinned memory, every kernel, the copy of the argmax id back) and replayed per token.
 * Direct launches and the graph run the same kernels with the same arguments, so their results
 * are bitwise equal; a row's result never depends on the other rows of its step (gemv.cu,
 * attention.cu), so a verification step of 16 rows gives each row the logits it gets alone.
 *
 * Calls of at least chunk_min_tokens (and more than 16) rows go to the prefill path instead
 * (prefill.cu: bf16 tensor-core GEMMs in chunks, within tolerance of the 16-row steps, like the
 * CPU's chunked DeltaNet form); calls of up to 16 rows always take the exact steps above.
 */
#include "common.cuh"
#include "prefill.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pv_cuda_model_free(struct pv_model* m);

namespace {

/* op groups of the profile (pv_cuda_profile) */
enum { G_START = 0, G_EMBED, G_NORM, G_QKV, G_ROPE, G_ATTN, G_OPROJ, G_DPROJ, G_DREC, G_DOUT, G_GATEUP, G_DOWN, G_MROUTER,
       G_MROUTE, G_MEXPERTS, G_MSHARED, G_MCOMBINE, G_LMHEAD, G_ARGMAX, G_COUNT };
const char* const group_name[G_COUNT] = { "start", "embedding", "add+rmsnorm", "gemv q/k/v", "qk norm+rope+kv", "attention",
	                                  "gemv o_proj", "gemv deltanet in", "deltanet conv+rec", "gemv deltanet out",
	                                  "gemv gate/up", "gemv down", "gemv router", "moe route", "gemv experts",
	                                  "shared expert", "moe combine", "gemv lm_head", "argmax" };
constexpr int PROF_MAX = 2048;

struct dsession {
	cudaStream_t st;
	/* the shared expert of an MoE layer runs on st2 beside the routed experts (fork/join events;
	 * captured as two graph branches): both are a few us of latency-bound GEMVs */
	cudaStream_t st2;
	cudaEvent_t fork_ev, join_ev;
	unsigned char* mem; /* one allocation for everything below */
	size_t mem_bytes;
	float **kc, **vc;   /* host arrays [n_layers] of device pointers (NULL: no KV) */
	float *cos, *sin;
	float *x, *xn, *delta;
	float *qraw, *kraw, *vraw, *q, *gate, *o;
	float *part_o, *part_ml;
	float *ffg, *ffu;
	float* logits;
	int* ids;
	unsigned* ncnt;           /* the fused add+RMSNorm's completion counter (zero between uses) */
	/* Gated DeltaNet: every linear layer's S then conv state, contiguous (the CPU's layout), and
	 * the checkpoint slots of the same size */
	float *state, *ckpt;
	size_t state_floats;
	int* lin_index;        /* [n_layers]: position among the linear layers, or -1 */
	float *lin_raw, *lin_u, *lin_z, *lin_b, *lin_a, *lin_ab, *lin_o;
	int ld_raw;
	/* MoE */
	float *rlog, *top_w, *eg, *eu, *eo, *shg, *shu, *sho;
	int* top_idx;
	struct dstep* step_dev;   /* direct launches */
	struct dstep* gstep_dev;  /* the graph's */
	struct dstep* step_host;  /* pinned, [n_slots] */
	struct dstep* gstep_host; /* pinned */
	int* ids_host;            /* pinned, [PV_CUDA_ROWS] */
	int n_slots;
	int n_split, att_split, ldq, ffn;
	cudaGraph_t graph;
	cudaGraphExec_t gexec;
	int graphs_on;
	struct pv_prefill* pre; /* the prompt path (prefill.cu), allocated on first use */
	int failed;
	int last_token;
	struct pv_cuda_session_stats stats;
	/* profiling: while prof is set, mark() adds a timing event node after each op group */
	int prof, n_marks;
	cudaEvent_t* ev;        /* [PROF_MAX], created on first use */
	unsigned char* mark_group;
	int* mark_kernels;      /* kernels launched up to the mark */
	double* mark_bytes;     /* weight bytes since the previous mark */
	double pending_bytes;
};

struct dsession* DS(const struct pv_session* s) { return (struct dsession*)s->dev; }
const struct dmodel* DM(const struct pv_session* s) { return (const struct dmodel*)s->m->dev; }

/* Profiling only: a timing event after op group g (nl kernels launched so far in the step). */
int mark(struct dsession* d, int g, int nl, char* err, size_t errlen)
{
	if (!d->prof || d->n_marks >= PROF_MAX) return 0;
	const int i = d->n_marks++;
	d->mark_group[i] = (unsigned char)g;
	d->mark_kernels[i] = nl;
	d->mark_bytes[i] = d->pending_bytes;
	d->pending_bytes = 0;
	CU(cudaEventRecordWithFlags(d->ev[i], d->st, cudaEventRecordExternal), err, errlen);
	return 0;
}

/* Profiling only: weight bytes the next op group reads (share: k / E for gathered experts). */
void weigh(struct dsession* d, const struct gemv_out* o, int n, double share)
{
	if (!d->prof) return;
	for (int i = 0; i < n; i++) d->pending_bytes += share * (double)o[i].w->bytes;
}

/* ---- the forward pass as launches --------------------------------------------------------- */

/* One Gated DeltaNet mixer: projections, conv + recurrence + gated norm, out_proj into delta. */
/* One row with a norm weight nn: out_proj also does the add+RMSNorm that follows (*normed = 1). */
int fused_out(struct pv_session* s, const struct gemv_out* o, const float* x, int ldx, const float* nn, int n, int* nl,
              int* normed, char* err, size_t errlen)
{
	struct dsession* d = DS(s);
	*normed = 0;
	if (n == 1 && nn) {
		const struct norm_epi ne = { d->x, d->xn, nn, s->m->cfg.rms_eps, s->m->cfg.hidden, d->ncnt };
		const int f = pv_cuda_gemv_norm(d->st, o, x, ldx, &ne, nl, err, errlen);
		if (f < 0) return -1;
		*normed = f;
	}
	if (!*normed && pv_cuda_gemv(d->st, o, 1, x, NULL, ldx, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	return 0;
}

int enqueue_deltanet(struct pv_session* s, const struct dlayer* L, int l, int n, const float* nn, int* normed, int* nl,
                     char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = DS(s);
	const int H = c->hidden, Hv = c->lin_v_heads, vd = pv_cfg_value_dim(c);
	struct delta_args a;
	memset(&a, 0, sizeof a);
	if (L->in_qkvz.type >= 0) {
		struct gemv_out o[2] = { { &L->in_qkvz, d->lin_raw, d->ld_raw, NULL }, { &L->in_ba, d->lin_ab, 2 * Hv, NULL } };
		weigh(d, o, 2, 1);
		if (pv_cuda_gemv(d->st, o, 2, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		a.qkvz = 1;
		a.ba_grouped = 1;
	} else if (L->in_ba.type >= 0) {
		struct gemv_out o[3] = { { &L->in_qkv, d->lin_raw, d->ld_raw, NULL }, { &L->in_z, d->lin_z, vd, NULL },
			                 { &L->in_ba, d->lin_ab, 2 * Hv, NULL } };
		weigh(d, o, 3, 1);
		if (pv_cuda_gemv(d->st, o, 3, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		a.ba_grouped = 1;
	} else {
		struct gemv_out o[4] = { { &L->in_qkv, d->lin_raw, d->ld_raw, NULL }, { &L->in_z, d->lin_z, vd, NULL },
			                 { &L->in_b, d->lin_b, Hv, NULL }, { &L->in_a, d->lin_a, Hv, NULL } };
		weigh(d, o, 4, 1);
		if (pv_cuda_gemv(d->st, o, 4, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	}
	if (mark(d, G_DPROJ, *nl, err, errlen)) return -1;
	pv_delta_args_layer(&a, c, L, d->state + (size_t)d->lin_index[l] * pv_state_floats_per_layer(c));
	a.mix = d->lin_raw;
	a.ld_mix = d->ld_raw;
	a.z = d->lin_z;
	a.b = d->lin_b;
	a.a = d->lin_a;
	a.ab = d->lin_ab;
	a.u = d->lin_u;
	a.o = d->lin_o;
	a.n = n;
	if (pv_cuda_deltanet(d->st, &a, err, errlen)) return -1;
	*nl += 2;
	if (mark(d, G_DREC, *nl, err, errlen)) return -1;
	struct gemv_out o[1] = { { &L->out_proj, d->delta, H, NULL } };
	weigh(d, o, 1, 1);
	if (fused_out(s, o, d->lin_o, vd, nn, n, nl, normed, err, errlen)) return -1;
	return mark(d, G_DOUT, *nl, err, errlen);
}

/* One attention mixer: q/k/v projections (+ biases), q/k norm + RoPE + KV write, attention (+ the
 * output gate), o_proj into delta. */
int enqueue_attention(struct pv_session* s, const struct dlayer* L, int l, const struct dstep* step, int n, const float* nn,
                      int* normed, int* nl, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = DS(s);
	cudaStream_t st = d->st;
	const int H = c->hidden, qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	{
		struct gemv_out o[3] = { { &L->wq, d->qraw, d->ldq, L->bq }, { &L->wk, d->kraw, kvd, L->bk }, { &L->wv, d->vraw, kvd, L->bv } };
		weigh(d, o, 3, 1);
		if (pv_cuda_gemv(st, o, 3, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		if (mark(d, G_QKV, *nl, err, errlen)) return -1;
	}
	/* one row: the attention kernel does the input stage itself (pv_cuda_attn_fuse) */
	const int fuse = n == 1 && pv_cuda_attn_fuse;
	struct qkv_post_args pa;
	{
		struct qkv_post_args& a = pa;
		a.qraw = d->qraw;
		a.kraw = d->kraw;
		a.vraw = d->vraw;
		a.ldq = d->ldq;
		a.gated = c->attn_gate;
		a.q_norm = L->q_norm;
		a.k_norm = L->k_norm;
		a.cos = d->cos;
		a.sin = d->sin;
		a.q = d->q;
		a.gate = d->gate;
		a.kc = d->kc[l];
		a.vc = d->vc[l];
		a.nh = c->n_heads;
		a.nkv = c->n_kv_heads;
		a.hd = c->head_dim;
		a.R = c->rope_dim;
		a.eps = c->rms_eps;
		a.step = step;
		if (!fuse) {
			if (pv_cuda_qkv_post(st, &a, n, err, errlen)) return -1;
			++*nl;
			if (mark(d, G_ROPE, *nl, err, errlen)) return -1;
		}
	}
	{
		struct attn_args a;
		memset(&a, 0, sizeof a);
		a.q = d->q;
		a.kc = d->kc[l];
		a.vc = d->vc[l];
		a.gate = c->attn_gate ? (fuse ? d->qraw + c->head_dim : d->gate) : NULL;
		a.gate_ld = fuse ? d->ldq : qd;
		a.gate_hs = fuse ? 2 * c->head_dim : c->head_dim;
		a.fuse = fuse;
		a.pa = pa;
		a.o = d->o;
		a.part_o = d->part_o;
		a.part_ml = d->part_ml;
		a.nh = c->n_heads;
		a.nkv = c->n_kv_heads;
		a.hd = c->head_dim;
		a.n_split = d->n_split;
		a.split = d->att_split;
		a.step = step;
		if (pv_cuda_attention(st, &a, n, err, errlen)) return -1;
		*nl += 2;
		if (mark(d, G_ATTN, *nl, err, errlen)) return -1;
	}
	{
		struct gemv_out o[1] = { { &L->wo, d->delta, H, NULL } };
		weigh(d, o, 1, 1);
		if (fused_out(s, o, d->o, qd, nn, n, nl, normed, err, errlen)) return -1;
	}
	return mark(d, G_OPROJ, *nl, err, errlen);
}

/* SwiGLU of xn: g = gate xn, u = up xn (one launch), out = down (silu(g) * u) (the product is
 * formed while the down projection stages its input). */
int enqueue_swiglu(struct pv_session* s, cudaStream_t st, const struct dmat* gate, const struct dmat* up, const struct dmat* down,
                   float* g, float* u, int width, float* out, int n, int* nl, int shared, char* err, size_t errlen,
                   const float* nn = NULL, int* normed = NULL)
{
	struct dsession* d = DS(s);
	const int H = s->m->cfg.hidden;
	struct gemv_out o[2] = { { gate, g, width, NULL }, { up, u, width, NULL } };
	weigh(d, o, 2, 1);
	/* one row: the product silu(g) * u in the gate/up kernel's epilogue (same bits) */
	const int paired = pv_cuda_gemv_swiglu(st, &o[0], &o[1], d->xn, H, n, nl, err, errlen);
	if (paired < 0) return -1;
	if (!paired && pv_cuda_gemv(st, o, 2, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	if (!shared && mark(d, G_GATEUP, *nl, err, errlen)) return -1;
	struct gemv_out od[1] = { { down, out, H, NULL } };
	weigh(d, od, 1, 1);
	if (!paired) {
		if (pv_cuda_swiglu(st, g, u, width, width, n, err, errlen)) return -1;
		++*nl;
	}
	if (normed) {
		if (fused_out(s, od, g, width, nn, n, nl, normed, err, errlen)) return -1;
	} else if (pv_cuda_gemv(st, od, 1, g, NULL, width, PV_X_PLAIN, n, nl, err, errlen)) {
		return -1;
	}
	return mark(d, shared ? G_MSHARED : G_DOWN, *nl, err, errlen);
}

/* Routed experts (+ the shared expert): router GEMV, routing on the GPU, each row's k experts as
 * gathered GEMVs (their ids stay in device memory), the weighted sum into delta. */
int enqueue_moe(struct pv_session* s, const struct dlayer* L, int n, int* nl, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = DS(s);
	const int H = c->hidden, E = c->n_experts, k = c->n_experts_used, Ie = c->moe_inter;
	struct moe_args a;
	memset(&a, 0, sizeof a);
	a.logits = d->rlog;
	a.idx = d->top_idx;
	a.w = d->top_w;
	a.eo = d->eo;
	a.sh = d->sho;
	a.sh_gate = L->sh_gate_w;
	a.xn = d->xn;
	a.out = d->delta;
	a.E = E;
	a.k = k;
	a.norm_topk = c->norm_topk;
	a.shared = L->sh_gate.type >= 0;
	a.H = H;
	a.n = n;
	/* the shared expert beside the routed ones (not while profiling: the marks time one stream) */
	const int side = a.shared && d->st2 && !d->prof;
	if (side) {
		CU(cudaEventRecord(d->fork_ev, d->st), err, errlen);
		CU(cudaStreamWaitEvent(d->st2, d->fork_ev, 0), err, errlen);
		if (enqueue_swiglu(s, d->st2, &L->sh_gate, &L->sh_up, &L->sh_down, d->shg, d->shu, c->shared_inter, d->sho, n, nl, 1, err,
		                   errlen))
			return -1;
		CU(cudaEventRecord(d->join_ev, d->st2), err, errlen);
	}
	struct gemv_out r[1] = { { &L->router, d->rlog, E, NULL } };
	weigh(d, r, 1, 1);
	if (pv_cuda_gemv(d->st, r, 1, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	if (mark(d, G_MROUTER, *nl, err, errlen)) return -1;
	if (pv_cuda_moe_route(d->st, &a, err, errlen)) return -1;
	++*nl;
	if (mark(d, G_MROUTE, *nl, err, errlen)) return -1;
	struct gemv_gather ga = { d->top_idx, n * k, k, E, 0 };
	struct gemv_out gu[2] = { { &L->ex_gate, d->eg, Ie, NULL }, { &L->ex_up, d->eu, Ie, NULL } };
	weigh(d, gu, 2, (double)n * k / E);
	/* one launch: each slot's gate and up rows with silu(g) * u in the epilogue (same bits) */
	const int paired = n == 1 ? pv_cuda_gemv_swiglu_gather(d->st, &gu[0], &gu[1], d->xn, H, 1, &ga, nl, err, errlen) : 0;
	if (paired < 0) return -1;
	if (!paired && pv_cuda_gemv_gather(d->st, gu, 2, d->xn, NULL, H, PV_X_PLAIN, 1, &ga, nl, err, errlen)) return -1;
	ga.x_by_slot = 1;
	struct gemv_out dn[1] = { { &L->ex_down, d->eo, H, NULL } };
	weigh(d, dn, 1, (double)n * k / E);
	if (!paired) {
		if (pv_cuda_swiglu(d->st, d->eg, d->eu, Ie, Ie, n * k, err, errlen)) return -1;
		++*nl;
	}
	if (pv_cuda_gemv_gather(d->st, dn, 1, d->eg, NULL, Ie, PV_X_PLAIN, 1, &ga, nl, err, errlen)) return -1;
	if (mark(d, G_MEXPERTS, *nl, err, errlen)) return -1;
	if (side) CU(cudaStreamWaitEvent(d->st, d->join_ev, 0), err, errlen);
	if (a.shared && !side &&
	    enqueue_swiglu(s, d->st, &L->sh_gate, &L->sh_up, &L->sh_down, d->shg, d->shu, c->shared_inter, d->sho, n, nl, 1, err,
	                   errlen))
		return -1;
	if (pv_cuda_moe_combine(d->st, &a, err, errlen)) return -1;
	++*nl;
	return mark(d, G_MCOMBINE, *nl, err, errlen);
}

/* Rows [0, n) of one step at step->pos0: every layer, then (lm) the final norm, the LM head and
 * the argmax for rows [lr0, n). */
int enqueue_step(struct pv_session* s, const struct dstep* step, int n, int lm, int lr0, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	const struct dmodel* dm = DM(s);
	struct dsession* d = DS(s);
	cudaStream_t st = d->st;
	const int H = c->hidden;
	int nl = 0; /* kernels launched */
	int rc = -1;
	/* normed: the previous GEMV's epilogue already did the add+RMSNorm this step needs (one row) */
	int normed = 0;

	if (mark(d, G_START, nl, err, errlen)) goto out;
	if (pv_cuda_embed(st, &dm->embed, step, d->x, H, n, err, errlen)) goto out;
	nl++;
	if (mark(d, G_EMBED, nl, err, errlen)) goto out;
	for (int l = 0; l < c->n_layers; l++) {
		const struct dlayer* L = &dm->layers[l];
		if (!normed) {
			if (pv_cuda_add_rmsnorm(st, d->x, l ? d->delta : NULL, d->xn, L->attn_norm, H, c->rms_eps, n, err, errlen)) goto out;
			nl++;
			if (mark(d, G_NORM, nl, err, errlen)) goto out;
		}
		normed = 0;
		if (c->layer_kind[l] == PV_LAYER_LINEAR) {
			if (enqueue_deltanet(s, L, l, n, L->ffn_norm, &normed, &nl, err, errlen)) goto out;
		} else if (enqueue_attention(s, L, l, step, n, L->ffn_norm, &normed, &nl, err, errlen)) {
			goto out;
		}
		if (!normed) {
			if (pv_cuda_add_rmsnorm(st, d->x, d->delta, d->xn, L->ffn_norm, H, c->rms_eps, n, err, errlen)) goto out;
			nl++;
			if (mark(d, G_NORM, nl, err, errlen)) goto out;
		}
		normed = 0;
		/* the norm after this FFN: the next layer's input norm, or the final norm before the LM head */
		const float* nn = l + 1 < c->n_layers ? dm->layers[l + 1].attn_norm : lm && lr0 == 0 ? dm->final_norm : NULL;
		if (c->layer_moe[l]) {
			if (enqueue_moe(s, L, n, &nl, err, errlen)) goto out;
		} else if (enqueue_swiglu(s, st, &L->gate, &L->up, &L->down, d->ffg, d->ffu, d->ffn, d->delta, n, &nl, 0, err, errlen, nn,
		                          &normed)) {
			goto out;
		}
	}
	if (lm) {
		const int rows = n - lr0;
		if (!normed) {
			if (pv_cuda_add_rmsnorm(st, d->x + (size_t)lr0 * H, d->delta + (size_t)lr0 * H, d->xn, dm->final_norm, H, c->rms_eps,
			                        rows, err, errlen))
				goto out;
			nl++;
			if (mark(d, G_NORM, nl, err, errlen)) goto out;
		}
		struct gemv_out o[1] = { { &dm->lm_head, d->logits, c->vocab, NULL } };
		weigh(d, o, 1, 1);
		if (pv_cuda_gemv(st, o, 1, d->xn, NULL, H, PV_X_PLAIN, rows, &nl, err, errlen)) goto out;
		if (mark(d, G_LMHEAD, nl, err, errlen)) goto out;
		if (pv_cuda_argmax(st, d->logits, c->vocab, rows, d->ids, err, errlen)) goto out;
		nl++;
		if (mark(d, G_ARGMAX, nl, err, errlen)) goto out;
	}
	rc = 0;
out:
	d->stats.direct_kernels += (uint64_t)nl;
	return rc;
}

int count_kernels(cudaGraph_t g, uint64_t* out)
{
	size_t n = 0;
	*out = 0;
	if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) return -1;
	cudaGraphNode_t* nodes = (cudaGraphNode_t*)calloc(n ? n : 1, sizeof(cudaGraphNode_t));
	if (!nodes) return -1;
	if (cudaGraphGetNodes(g, nodes, &n) != cudaSuccess) {
		free(nodes);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		cudaGraphNodeType t;
		if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && t == cudaGraphNodeTypeKernel) ++*out;
	}
	free(nodes);
	return 0;
}

/* Captures the one-row step: copy in the step struct, the kernels, copy out the argmax id. */
int capture(struct pv_session* s, char* err, size_t errlen)
{
	struct dsession* d = DS(s);
	CU(cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal), err, errlen);
	uint64_t before = d->stats.direct_kernels;
	int rc = 0;
	cudaError_t e = cudaMemcpyAsync(d->gstep_dev, d->gstep_host, sizeof(struct dstep), cudaMemcpyHostToDevice, d->st);
	if (e != cudaSuccess) rc = pv_cuda_fail(err, errlen, "graph step copy", e);
	if (!rc) rc = enqueue_step(s, d->gstep_dev, 1, 1, 0, err, errlen);
	if (!rc) {
		e = cudaMemcpyAsync(d->ids_host, d->ids, sizeof(int), cudaMemcpyDeviceToHost, d->st);
		if (e != cudaSuccess) rc = pv_cuda_fail(err, errlen, "graph id copy", e);
	}
	d->stats.direct_kernels = before; /* captured, not launched */
	cudaGraph_t g = NULL;
	e = cudaStreamEndCapture(d->st, &g);
	if (rc) {
		if (g) cudaGraphDestroy(g);
		return -1;
	}
	if (e != cudaSuccess) return pv_cuda_fail(err, errlen, "cudaStreamEndCapture", e);
	d->graph = g;
	CU(cudaGraphInstantiate(&d->gexec, g, 0), err, errlen);
	if (count_kernels(g, &d->stats.graph_kernels)) return pv_errf(err, errlen, "CUDA backend: cannot read the graph's nodes");
	d->stats.graph_captures++;
	return 0;
}

void fail(struct pv_session* s, float* logits, size_t n_floats)
{
	struct dsession* d = DS(s);
	if (!d->failed) {
		d->failed = 1;
		/* leave the stream empty for session_free */
		cudaStreamSynchronize(d->st);
	}
	if (logits)
		for (size_t i = 0; i < n_floats; i++) logits[i] = __builtin_nanf("");
}

/* What the prefill path (prefill.cu) uses of the session. */
void prefill_view(struct pv_session* s, struct pv_prefill_view* v)
{
	struct dsession* d = DS(s);
	memset(v, 0, sizeof(*v));
	v->st = d->st;
	v->dm = DM(s);
	v->kc = d->kc;
	v->vc = d->vc;
	v->cos = d->cos;
	v->sin = d->sin;
	v->state = d->state;
	v->lin_index = d->lin_index;
	v->ld_raw = d->ld_raw;
	v->ldq = d->ldq;
	v->rlog = d->rlog;
	v->top_w = d->top_w;
	v->eg = d->eg;
	v->eu = d->eu;
	v->eo = d->eo;
	v->shg = d->shg;
	v->shu = d->shu;
	v->sho = d->sho;
	v->top_idx = d->top_idx;
	v->logits = d->logits;
	v->ids = d->ids;
	v->ids_host = d->ids_host;
	v->stats = &d->stats;
}

int cuda_forward(struct pv_session* s, const int32_t* tokens, int n, float* logits, int first_logit, int chunked)
{
	/* chunked: long calls may take the prefill path (prefill.cu); the 16-row steps run the
	 * recurrent DeltaNet form (deltanet.cu) */
	struct dsession* d = DS(s);
	const int V = s->m->cfg.vocab;
	const size_t n_logit_floats = logits && first_logit < n ? (size_t)(n - first_logit) * V : 0;
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) {
		fail(s, logits, n_logit_floats);
		return -1;
	}
	{
		/* the prefill path's one-time set-up (cuBLAS, its handle, scratch) on the session's first
		 * call, so that it never lands inside a prompt; a failure only turns the path off */
		struct pv_prefill_view v;
		prefill_view(s, &v);
		pv_prefill_prepare(&d->pre, s, &v);
	}
	d->stats.forwards++;
	d->stats.tokens += (uint64_t)n;
	d->last_token = -1;
	int have_id = 0, prefilled = 0;
	cudaError_t e;
#define STEP(call, what)                                         \
	do {                                                     \
		e = (call);                                      \
		if (e != cudaSuccess) {                          \
			pv_cuda_fail(err, errlen, what, e);      \
			fail(s, logits, n_logit_floats);         \
			return -1;                                  \
		}                                                \
	} while (0)

	if (n == 1 && d->graphs_on) {
		if (!d->gexec && capture(s, err, errlen)) {
			fail(s, logits, n_logit_floats);
			return -1;
		}
		d->gstep_host->pos0 = s->len;
		d->gstep_host->n = 1;
		d->gstep_host->tokens[0] = tokens[0];
		STEP(cudaGraphLaunch(d->gexec, d->st), "cudaGraphLaunch");
		d->stats.graph_launches++;
		d->stats.graph_tokens++;
		have_id = 1;
		if (n_logit_floats) {
			STEP(cudaMemcpyAsync(logits, d->logits, sizeof(float) * V, cudaMemcpyDeviceToHost, d->st), "logits copy");
			d->stats.memcpys++;
		}
	} else if (pv_prefill_wanted(&d->pre, s, n, chunked)) {
		/* Prompt hook: long calls (>= chunk_min_tokens rows) go to the prefill path: bf16
		 * tensor-core GEMMs in chunks, results within tolerance of the 16-row steps (like the
		 * CPU's chunked DeltaNet), no host synchronisation until the one below. */
		struct pv_prefill_view v;
		prefill_view(s, &v);
		if (pv_prefill_forward(&d->pre, s, &v, tokens, n, logits, first_logit, &have_id, err, errlen)) {
			fail(s, logits, n_logit_floats);
			return -1;
		}
		prefilled = 1;
	} else {
		/* Steps of at most 16 rows. */
		int slot = 0;
		for (int c0 = 0; c0 < n; c0 += PV_CUDA_ROWS, slot++) {
			const int rows = n - c0 < PV_CUDA_ROWS ? n - c0 : PV_CUDA_ROWS;
			/* LM rows: those the caller asked for; a one-row call always (as the graph does) */
			int lr0 = rows, lm = 0;
			if (logits && first_logit < c0 + rows) lr0 = first_logit > c0 ? first_logit - c0 : 0;
			if (n == 1) lr0 = 0;
			lm = lr0 < rows;
			if (slot >= d->n_slots) {
				pv_errf(err, errlen, "CUDA backend: %d rows exceed the session's step slots", n);
				fail(s, logits, n_logit_floats);
				return -1;
			}
			struct dstep* h = &d->step_host[slot];
			h->pos0 = s->len + c0;
			h->n = rows;
			for (int i = 0; i < rows; i++) h->tokens[i] = tokens[c0 + i];
			STEP(cudaMemcpyAsync(d->step_dev, h, sizeof(*h), cudaMemcpyHostToDevice, d->st), "step copy");
			d->stats.memcpys++;
			if (enqueue_step(s, d->step_dev, rows, lm, lr0, err, errlen)) {
				fail(s, logits, n_logit_floats);
				return -1;
			}
			if (lm && logits && c0 + lr0 >= first_logit) {
				STEP(cudaMemcpyAsync(logits + (size_t)(c0 + lr0 - first_logit) * V, d->logits, sizeof(float) * V * (size_t)(rows - lr0),
				                     cudaMemcpyDeviceToHost, d->st),
				     "logits copy");
				d->stats.memcpys++;
			}
			if (lm && c0 + rows == n) {
				STEP(cudaMemcpyAsync(d->ids_host, d->ids + (rows - lr0 - 1), sizeof(int), cudaMemcpyDeviceToHost, d->st), "id copy");
				d->stats.memcpys++;
				have_id = 1;
			}
		}
	}
	STEP(cudaStreamSynchronize(d->st), "cudaStreamSynchronize");
	d->stats.syncs++;
	if (prefilled) pv_prefill_account(d->pre, &d->stats);
	if (have_id) d->last_token = d->ids_host[0];
#undef STEP
	return 0;
}

/* ---- session memory ----------------------------------------------------------------------- */

void session_free(struct pv_session* s)
{
	struct dsession* d = DS(s);
	if (!d) return;
	if (d->st) cudaStreamSynchronize(d->st);
	pv_prefill_free(d->pre); /* its cuBLAS handle is bound to d->st */
	if (d->gexec) cudaGraphExecDestroy(d->gexec);
	if (d->graph) cudaGraphDestroy(d->graph);
	if (d->mem) cudaFree(d->mem);
	if (d->step_host) cudaFreeHost(d->step_host);
	if (d->st2) cudaStreamSynchronize(d->st2);
	if (d->st) cudaStreamDestroy(d->st);
	if (d->st2) cudaStreamDestroy(d->st2);
	if (d->fork_ev) cudaEventDestroy(d->fork_ev);
	if (d->join_ev) cudaEventDestroy(d->join_ev);
	free(d->kc);
	free(d->vc);
	free(d->lin_index);
	if (d->ev)
		for (int i = 0; i < PROF_MAX; i++)
			if (d->ev[i]) cudaEventDestroy(d->ev[i]);
	free(d->ev);
	free(d->mark_group);
	free(d->mark_kernels);
	free(d->mark_bytes);
	free(d);
	s->dev = NULL;
}

struct carve {
	size_t off;
	unsigned char* base;
};

template <typename T>
T* take(struct carve* cv, size_t count)
{
	size_t bytes = (count * sizeof(T) + 255) / 256 * 256;
	T* p = cv->base ? (T*)(cv->base + cv->off) : NULL;
	cv->off += bytes;
	return p;
}

/* Lays out (base NULL: only sizes) every device buffer of the session. */
void layout(struct pv_session* s, struct carve* cv)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = DS(s);
	const size_t B = PV_CUDA_ROWS, H = (size_t)c->hidden, qd = (size_t)pv_cfg_q_dim(c), kvd = (size_t)pv_cfg_kv_dim(c);
	const size_t half = (size_t)c->rope_dim / 2;
	for (int l = 0; l < c->n_layers; l++) {
		d->kc[l] = d->vc[l] = NULL;
		if (c->layer_kind[l] != PV_LAYER_ATTN) continue;
		d->kc[l] = take<float>(cv, (size_t)s->n_ctx * kvd);
		d->vc[l] = take<float>(cv, (size_t)s->n_ctx * kvd);
	}
	d->cos = take<float>(cv, (size_t)s->n_ctx * half);
	d->sin = take<float>(cv, (size_t)s->n_ctx * half);
	d->x = take<float>(cv, B * H);
	d->xn = take<float>(cv, B * H);
	d->delta = take<float>(cv, B * H);
	d->qraw = take<float>(cv, B * (size_t)d->ldq);
	d->kraw = take<float>(cv, B * kvd);
	d->vraw = take<float>(cv, B * kvd);
	d->q = take<float>(cv, B * qd);
	d->gate = take<float>(cv, B * qd);
	d->o = take<float>(cv, B * qd);
	d->part_o = take<float>(cv, B * (size_t)c->n_heads * (size_t)d->n_split * (size_t)c->head_dim);
	d->part_ml = take<float>(cv, B * (size_t)c->n_heads * (size_t)d->n_split * 2);
	d->ffg = take<float>(cv, B * (size_t)d->ffn);
	d->ffu = take<float>(cv, B * (size_t)d->ffn);
	d->logits = take<float>(cv, B * (size_t)c->vocab);
	d->ids = take<int>(cv, B);
	d->ncnt = take<unsigned>(cv, 32);
	if (c->n_experts) {
		const size_t E = (size_t)c->n_experts, k = (size_t)c->n_experts_used, Ie = (size_t)c->moe_inter;
		const size_t Is = (size_t)(c->shared_inter > 0 ? c->shared_inter : 1);
		d->rlog = take<float>(cv, B * E);
		d->top_idx = take<int>(cv, B * k);
		d->top_w = take<float>(cv, B * k);
		d->eg = take<float>(cv, B * k * Ie);
		d->eu = take<float>(cv, B * k * Ie);
		d->eo = take<float>(cv, B * k * H);
		d->shg = take<float>(cv, B * Is);
		d->shu = take<float>(cv, B * Is);
		d->sho = take<float>(cv, B * H);
	}
	if (d->state_floats) {
		const size_t cd = (size_t)pv_cfg_conv_dim(c), vd = (size_t)pv_cfg_value_dim(c), Hv = (size_t)c->lin_v_heads;
		d->state = take<float>(cv, d->state_floats);
		d->ckpt = take<float>(cv, d->state_floats * (size_t)s->n_ckpt_slots);
		d->lin_raw = take<float>(cv, B * (size_t)d->ld_raw);
		d->lin_u = take<float>(cv, B * cd);
		d->lin_z = take<float>(cv, B * vd);
		d->lin_b = take<float>(cv, B * Hv);
		d->lin_a = take<float>(cv, B * Hv);
		d->lin_ab = take<float>(cv, B * 2 * Hv);
		d->lin_o = take<float>(cv, B * vd);
	}
	d->step_dev = take<struct dstep>(cv, 1);
	d->gstep_dev = take<struct dstep>(cv, 1);
}

int session_init(struct pv_session* s, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	if (!s->m->dev) return pv_errf(err, errlen, "CUDA backend: the model's weights are not on the GPU");
	if (pv_cuda_select_device(err, errlen)) return -1;
	struct dsession* d = (struct dsession*)pv_xcalloc(1, sizeof(*d));
	s->dev = d;
	{
		const char* g = getenv("PV_CUDA_GRAPHS"); /* 0: one-row calls use direct launches (diagnosis) */
		d->graphs_on = !(g && !strcmp(g, "0"));
	}
	d->last_token = -1;
	/* keys per attention split: a session constant (the layout of every row's sum depends on it) */
	const char* as = getenv("PV_CUDA_ATT_SPLIT");
	d->att_split = as && !strcmp(as, "64") ? 64 : as && !strcmp(as, "16") ? 16 : 32; /* 32: measured 214.5 vs 208.1 tok/s (8B bf16, H200) */
	d->n_split = (s->n_ctx + d->att_split - 1) / d->att_split;
	d->ldq = (c->attn_gate ? 2 : 1) * pv_cfg_q_dim(c);
	d->ffn = c->intermediate > 0 ? c->intermediate : 1;
	d->n_slots = (s->max_batch + PV_CUDA_ROWS - 1) / PV_CUDA_ROWS;
	if (c->head_dim > 256 || c->rope_dim > c->head_dim || c->rope_dim < 2)
		return pv_errf(err, errlen, "CUDA backend: head dim %d / rope dim %d not supported", c->head_dim, c->rope_dim);
	if (pv_cuda_attention_check(c->n_heads, c->n_kv_heads, c->head_dim, d->n_split, err, errlen)) return -1;
	d->kc = (float**)pv_xcalloc((size_t)c->n_layers, sizeof(float*));
	d->vc = (float**)pv_xcalloc((size_t)c->n_layers, sizeof(float*));
	d->lin_index = (int*)pv_xcalloc((size_t)c->n_layers, sizeof(int));
	for (int l = 0, k = 0; l < c->n_layers; l++) d->lin_index[l] = c->layer_kind[l] == PV_LAYER_LINEAR ? k++ : -1;
	d->state_floats = s->state_floats; /* session.c: the linear layers' S and conv states */
	if (d->state_floats) {
		if (pv_cuda_delta_check(c->lin_k_dim, c->lin_v_dim, c->lin_k_heads, c->lin_v_heads, c->conv_kernel, err, errlen) ||
		    pv_cuda_delta_init(err, errlen))
			return -1;
		const int wide = 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c); /* Qwen3-Next's qkvz rows */
		d->ld_raw = pv_cfg_conv_dim(c) > wide ? pv_cfg_conv_dim(c) : wide;
	}

	if (pv_cuda_gemv_tma_init(err, errlen)) return -1; /* before any graph capture */
	CU(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking), err, errlen);
	if (c->n_experts && c->shared_inter && pv_cuda_moe_side) {
		CU(cudaStreamCreateWithFlags(&d->st2, cudaStreamNonBlocking), err, errlen);
		CU(cudaEventCreateWithFlags(&d->fork_ev, cudaEventDisableTiming), err, errlen);
		CU(cudaEventCreateWithFlags(&d->join_ev, cudaEventDisableTiming), err, errlen);
	}
	struct carve cv = { 0, NULL };
	layout(s, &cv);
	d->mem_bytes = cv.off;
	cudaError_t e = cudaMalloc((void**)&d->mem, d->mem_bytes);
	if (e != cudaSuccess) {
		d->mem = NULL;
		size_t fr = 0, tot = 0;
		cudaMemGetInfo(&fr, &tot);
		return pv_errf(err, errlen, "CUDA backend: cannot allocate %.2f GiB for a session of context %d (%.2f GiB free): %s",
		               d->mem_bytes / 1073741824.0, s->n_ctx, fr / 1073741824.0, cudaGetErrorString(e));
	}
	cv = (struct carve){ 0, d->mem };
	layout(s, &cv);
	CU(cudaMemsetAsync(d->mem, 0, d->mem_bytes, d->st), err, errlen);
	/* pinned: step slots for direct launches, the graph's step, the ids */
	size_t hb = sizeof(struct dstep) * (size_t)(d->n_slots + 1) + sizeof(int) * PV_CUDA_ROWS;
	CU(cudaHostAlloc((void**)&d->step_host, hb, cudaHostAllocDefault), err, errlen);
	memset(d->step_host, 0, hb);
	d->gstep_host = d->step_host + d->n_slots;
	d->ids_host = (int*)(d->gstep_host + 1);

	/* rope tables: computed on the host exactly as the CPU backend does (cpu_backend.c) */
	{
		const int half = c->rope_dim / 2;
		const size_t nt = (size_t)s->n_ctx * half;
		float* tab = (float*)malloc(2 * nt * sizeof(float) + 1);
		if (!tab) return pv_errf(err, errlen, "out of memory for the rope tables");
		for (int i = 0; i < half; i++) {
			float inv = 1.0f / powf(c->rope_theta, (float)(2 * i) / (float)c->rope_dim);
			for (int pos = 0; pos < s->n_ctx; pos++) {
				float ang = (float)pos * inv;
				tab[(size_t)pos * half + i] = cosf(ang);
				tab[nt + (size_t)pos * half + i] = sinf(ang);
			}
		}
		/* on the session's stream, after the memset (a non-blocking stream does not wait for
		 * the legacy default stream) */
		e = cudaMemcpyAsync(d->cos, tab, nt * sizeof(float), cudaMemcpyHostToDevice, d->st);
		if (e == cudaSuccess) e = cudaMemcpyAsync(d->sin, tab + nt, nt * sizeof(float), cudaMemcpyHostToDevice, d->st);
		cudaError_t e2 = cudaStreamSynchronize(d->st);
		if (e == cudaSuccess) e = e2;
		free(tab);
		if (e != cudaSuccess) return pv_cuda_fail(err, errlen, "rope tables", e);
	}
	CU(cudaStreamSynchronize(d->st), err, errlen);
	d->stats.session_bytes = d->mem_bytes;
	size_t fr = 0, tot = 0;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->stats.used_after_init = tot - fr;
	return 0;
}

/* The recurrent state (every linear layer's S and conv window) to / from checkpoint slot `slot`:
 * one device-to-device copy and a sync (session.c calls these only for models with DeltaNet
 * layers). backend.h gives them no error return: a failure marks the session failed. */
void state_copy(struct pv_session* s, int slot, int save)
{
	struct dsession* d = DS(s);
	if (d->failed || !d->state_floats) return;
	float* ck = d->ckpt + (size_t)slot * d->state_floats;
	const size_t bytes = d->state_floats * sizeof(float);
	cudaError_t e = cudaMemcpyAsync(save ? ck : d->state, save ? d->state : ck, bytes, cudaMemcpyDeviceToDevice, d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.memcpys++;
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), save ? "checkpoint save" : "checkpoint load", e);
		fail(s, NULL, 0);
	}
}

void state_save(struct pv_session* s, int slot) { state_copy(s, slot, 1); }
void state_load(struct pv_session* s, int slot) { state_copy(s, slot, 0); }

void state_reset(struct pv_session* s)
{
	struct dsession* d = DS(s);
	if (d->failed || !d->state_floats) return;
	cudaError_t e = cudaMemsetAsync(d->state, 0, d->state_floats * sizeof(float), d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), "state reset", e);
		fail(s, NULL, 0);
	}
}

int backend_model_init(struct pv_model* m, char* err, size_t errlen) { return pv_cuda_model_init(m, 0, err, errlen); }

const struct pv_backend cuda_backend = {
	"cuda",
	backend_model_init,
	pv_cuda_model_free,
	session_init,
	session_free,
	cuda_forward,
	state_save,
	state_load,
	state_reset,
};

} // namespace

extern "C" const struct pv_backend* pv_backend_cuda(void) { return &cuda_backend; }

int pv_cuda_session_stats(const struct pv_session* s, struct pv_cuda_session_stats* st)
{
	if (!s || s->be != &cuda_backend || !s->dev) return -1;
	*st = DS(s)->stats;
	return 0;
}

const char* pv_cuda_session_error(const struct pv_session* s)
{
	if (!s || s->be != &cuda_backend || !s->dev) return "not a CUDA session";
	return DS(s)->failed ? s->err : NULL;
}

int pv_cuda_last_token(const struct pv_session* s)
{
	if (!s || s->be != &cuda_backend || !s->dev) return -1;
	return DS(s)->last_token;
}

void pv_cuda_set_graphs(struct pv_session* s, int on)
{
	if (s && s->be == &cuda_backend && s->dev) DS(s)->graphs_on = on != 0;
}

void pv_cuda_set_prefill(struct pv_session* s, int on, int chunk)
{
	if (!s || s->be != &cuda_backend || !s->dev) return;
	struct dsession* d = DS(s);
	if (d->st) cudaStreamSynchronize(d->st); /* a chunk change frees the prefill scratch */
	pv_prefill_set(&d->pre, on, chunk);
}

int pv_cuda_prefill_available(void) { return pv_cublas_load(NULL); }

/* ---- profile ---------------------------------------------------------------------------- */

int pv_cuda_profile(struct pv_session* s, int32_t token, int reps, struct pv_cuda_profile* out)
{
	memset(out, 0, sizeof(*out));
	if (!s || s->be != &cuda_backend || !s->dev || reps < 1) return -1;
	struct dsession* d = DS(s);
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) return -1;
	if (token < 0 || token >= s->m->cfg.vocab || s->len >= s->n_ctx)
		return pv_errf(err, errlen, "profile: token %d or position %d out of range", token, s->len);
	if (!d->ev) {
		d->ev = (cudaEvent_t*)pv_xcalloc(PROF_MAX, sizeof(cudaEvent_t));
		d->mark_group = (unsigned char*)pv_xcalloc(PROF_MAX, 1);
		d->mark_kernels = (int*)pv_xcalloc(PROF_MAX, sizeof(int));
		d->mark_bytes = (double*)pv_xcalloc(PROF_MAX, sizeof(double));
		for (int i = 0; i < PROF_MAX; i++) CU(cudaEventCreate(&d->ev[i]), err, errlen);
	}
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	int rc = -1;
	cudaError_t e;
	double acc_us[G_COUNT] = { 0 }, acc_bytes[G_COUNT] = { 0 }, total = 0;
	int acc_k[G_COUNT] = { 0 };
	d->gstep_host->pos0 = s->len;
	d->gstep_host->n = 1;
	d->gstep_host->tokens[0] = token;
	CU(cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal), err, errlen);
	d->prof = 1;
	d->n_marks = 0;
	d->pending_bytes = 0;
	uint64_t before = d->stats.direct_kernels;
	e = cudaMemcpyAsync(d->gstep_dev, d->gstep_host, sizeof(struct dstep), cudaMemcpyHostToDevice, d->st);
	int erc = e != cudaSuccess ? pv_cuda_fail(err, errlen, "profile step copy", e) : enqueue_step(s, d->gstep_dev, 1, 1, 0, err, errlen);
	d->prof = 0;
	d->stats.direct_kernels = before;
	e = cudaStreamEndCapture(d->st, &g);
	if (erc) goto done;
	if (e != cudaSuccess) {
		pv_cuda_fail(err, errlen, "profile capture", e);
		goto done;
	}
	e = cudaGraphInstantiate(&x, g, 0);
	if (e != cudaSuccess) {
		pv_cuda_fail(err, errlen, "profile graph", e);
		goto done;
	}
	for (int r = 0; r <= reps; r++) { /* replay 0 warms up */
		e = cudaGraphLaunch(x, d->st);
		if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
		if (e != cudaSuccess) {
			pv_cuda_fail(err, errlen, "profile replay", e);
			goto done;
		}
		if (!r) continue;
		for (int i = 1; i < d->n_marks; i++) {
			float ms = 0;
			e = cudaEventElapsedTime(&ms, d->ev[i - 1], d->ev[i]);
			if (e != cudaSuccess) {
				pv_cuda_fail(err, errlen, "profile events", e);
				goto done;
			}
			acc_us[d->mark_group[i]] += 1e3 * ms;
		}
		float ms = 0;
		if (cudaEventElapsedTime(&ms, d->ev[0], d->ev[d->n_marks - 1]) == cudaSuccess) total += 1e3 * ms;
	}
	for (int i = 1; i < d->n_marks; i++) {
		acc_k[d->mark_group[i]] += d->mark_kernels[i] - d->mark_kernels[i - 1];
		acc_bytes[d->mark_group[i]] += d->mark_bytes[i];
	}
	for (int gi = 1; gi < G_COUNT && out->n < PV_CUDA_PROF_GROUPS; gi++) {
		if (!acc_k[gi]) continue;
		out->name[out->n] = group_name[gi];
		out->us[out->n] = acc_us[gi] / reps;
		out->kernels[out->n] = acc_k[gi];
		out->bytes[out->n] = acc_bytes[gi];
		out->n++;
	}
	out->total_us = total / reps;
	rc = 0;
done:
	if (x) cudaGraphExecDestroy(x);
	if (g) cudaGraphDestroy(g);
	if (rc) fail(s, NULL, 0);
	return rc;
}

/* ---- tests: one matrix through the forward pass's kernels ----------------------------------- */

int pv_cuda_test_matmul(const struct pv_tensor* W, const float* x, int T, float* y, char* err, size_t errlen)
{
	if (pv_cuda_select_device(err, errlen)) return -1;
	struct dmat d;
	if (pv_cuda_plan_mat(W, &d, err, errlen)) return -1;
	unsigned char* mem = NULL;
	float *dx = NULL, *dy = NULL;
	cudaStream_t st = NULL;
	struct pv_stager* sg = NULL;
	int rc = -1;
	const size_t xb = sizeof(float) * (size_t)T * (size_t)W->cols, yb = sizeof(float) * (size_t)T * (size_t)W->rows;
	cudaError_t e;
#define STEP(call)                                         \
	do {                                               \
		e = (call);                                \
		if (e != cudaSuccess) {                    \
			pv_cuda_fail(err, errlen, #call, e); \
			goto done;                         \
		}                                          \
	} while (0)
	STEP(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	STEP(cudaMalloc((void**)&mem, d.bytes));
	{
		size_t off = 0;
		for (int p = 0; p < d.n_planes; p++) {
			d.p[p] = mem + off;
			off += (d.stride[p] * (size_t)d.rows + 255) / 256 * 256;
		}
	}
	STEP(cudaMalloc((void**)&dx, xb));
	STEP(cudaMalloc((void**)&dy, yb));
	STEP(cudaMemsetAsync(dy, 0xff, yb, st)); /* NaN: every output must be written */
	STEP(cudaMemcpyAsync(dx, x, xb, cudaMemcpyHostToDevice, st));
	STEP(cudaStreamSynchronize(st));
	if (pv_stager_new(&sg, st, d.bytes, err, errlen) || pv_stager_upload_mat(sg, W, &d, 0, err, errlen) ||
	    pv_stager_finish(sg, err, errlen))
		goto done;
	for (int t0 = 0; t0 < T; t0 += PV_CUDA_ROWS) {
		const int rows = T - t0 < PV_CUDA_ROWS ? T - t0 : PV_CUDA_ROWS;
		struct gemv_out o = { &d, dy + (size_t)t0 * W->rows, (int)W->rows, NULL };
		if (pv_cuda_gemv(st, &o, 1, dx + (size_t)t0 * W->cols, NULL, (int)W->cols, PV_X_PLAIN, rows, NULL, err, errlen)) goto done;
	}
	STEP(cudaMemcpyAsync(y, dy, yb, cudaMemcpyDeviceToHost, st));
	STEP(cudaStreamSynchronize(st));
	rc = 0;
#undef STEP
done:
	pv_stager_free(sg);
	if (st) cudaStreamSynchronize(st);
	if (st) cudaStreamDestroy(st);
	if (mem) cudaFree(mem);
	if (dx) cudaFree(dx);
	if (dy) cudaFree(dy);
	return rc;
}
