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

struct dsession* DS(const struct pv_session* s) { return (struct dsession*)s->be_state; }
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

void fail_outputs(const struct pv_session* s, const struct pv_step* sp)
{
	if (sp->logits)
		for (size_t i = 0; i < (size_t)(sp->n - sp->logits_row0) * s->m->cfg.vocab; i++) sp->logits[i] = __builtin_nanf("");
	if (sp->argmax)
		for (int i = 0; i < sp->n - sp->argmax_row0; i++) sp->argmax[i] = -1;
}

int cuda_forward(struct pv_session* s, const struct pv_step* sp)
{
	/* off the exact path, long calls may take the prefill path (prefill.cu); the 16-row steps run
	 * the recurrent DeltaNet form (deltanet.cu) */
	struct dsession* d = DS(s);
	const int n = sp->n;
	const int32_t* tokens = sp->tokens;
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) {
		fail_outputs(s, sp);
		return PV_E_DEVICE;
	}
	if (sp->snap_row0 >= 0)
		return pv_session_fail(s, PV_E_UNSUPPORTED, "CUDA backend: per-row snapshots are not implemented yet");
	d->stats.forwards++;
	d->stats.tokens += (uint64_t)n;
	const int r0 = pv_step_lm_row0(sp);
	int prefilled = 0, have_id = 0;
	d->last_token = -1;
	cudaError_t e;
#define STEP(call, what)                                         \
	do {                                                     \
		e = (call);                                      \
		if (e != cudaSuccess) {                          \
			pv_cuda_fail(err, errlen, what, e);      \
			fail(s, NULL, 0);                        \
			fail_outputs(s, sp);                     \
			return PV_E_DEVICE;                      \
		}                                                \
	} while (0)
#define FAIL()                                                   \
	do {                                                     \
		fail(s, NULL, 0);                                \
		fail_outputs(s, sp);                             \
		return PV_E_DEVICE;                              \
	} while (0)

	if (n == 1 && d->graphs_on) {
		/* the graph always runs the LM head and the argmax, and copies the id back */
		if (!d->gexec && capture(s, err, errlen)) FAIL();
		d->gstep_host->pos0 = sp->pos0;
		d->gstep_host->n = 1;
		d->gstep_host->tokens[0] = tokens[0];
		STEP(cudaGraphLaunch(d->gexec, d->st), "cudaGraphLaunch");
		d->stats.graph_launches++;
		d->stats.graph_tokens++;
		struct pv_step o = *sp;
		o.argmax = NULL; /* from ids_host after the sync */
		if (r0 == 0 && pv_cuda_copy_outputs(&o, 0, 1, d->logits, d->ids, d->xn, s->m->cfg.vocab, s->m->cfg.hidden, d->st,
		                                     &d->stats.memcpys, err, errlen))
			FAIL();
	} else if (!sp->exact && pv_prefill_wanted(&d->pre, s, n, 1)) {
		/* Prompt hook: long calls (>= chunk_min_tokens rows) go to the prefill path: bf16
		 * tensor-core GEMMs in chunks, results within tolerance of the 16-row steps (like the
		 * CPU's chunked DeltaNet), no host synchronisation until the one below. */
		struct pv_prefill_view v;
		prefill_view(s, &v);
		if (pv_prefill_forward(&d->pre, s, &v, sp, &have_id, err, errlen)) FAIL();
		prefilled = 1;
	} else {
		/* Steps of at most 16 rows. */
		int slot = 0;
		for (int c0 = 0; c0 < n; c0 += PV_CUDA_ROWS, slot++) {
			const int rows = n - c0 < PV_CUDA_ROWS ? n - c0 : PV_CUDA_ROWS;
			/* LM rows of this step: from the first row an output wants */
			const int lr0 = r0 > c0 ? (r0 - c0 < rows ? r0 - c0 : rows) : 0;
			const int lm = lr0 < rows;
			if (slot >= d->n_slots) {
				pv_errf(err, errlen, "CUDA backend: %d rows exceed the session's step slots", n);
				FAIL();
			}
			struct dstep* h = &d->step_host[slot];
			h->pos0 = sp->pos0 + c0;
			h->n = rows;
			for (int i = 0; i < rows; i++) h->tokens[i] = tokens[c0 + i];
			STEP(cudaMemcpyAsync(d->step_dev, h, sizeof(*h), cudaMemcpyHostToDevice, d->st), "step copy");
			d->stats.memcpys++;
			if (enqueue_step(s, d->step_dev, rows, lm, lr0, err, errlen)) FAIL();
			if (lm && pv_cuda_copy_outputs(sp, c0 + lr0, rows - lr0, d->logits, d->ids, d->xn, s->m->cfg.vocab, s->m->cfg.hidden,
			                               d->st, &d->stats.memcpys, err, errlen))
				FAIL();
			if (lm && c0 + rows == n) { /* the last row's id, for pv_cuda_last_token */
				STEP(cudaMemcpyAsync(d->ids_host, d->ids + (rows - lr0 - 1), sizeof(int), cudaMemcpyDeviceToHost, d->st), "id copy");
				d->stats.memcpys++;
				have_id = 1;
			}
		}
	}
	STEP(cudaStreamSynchronize(d->st), "cudaStreamSynchronize");
	d->stats.syncs++;
	if (prefilled) pv_prefill_account(d->pre, &d->stats);
	if (n == 1 && d->graphs_on) {
		have_id = 1;
		if (sp->argmax && sp->argmax_row0 == 0) sp->argmax[0] = d->ids_host[0];
	}
	if (have_id) d->last_token = d->ids_host[0];
#undef STEP
#undef FAIL
	return PV_OK;
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
	s->be_state = NULL;
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

/* The session's dimensions (what layout() needs), from the config and the session parameters. */
void dims(const struct pv_session* s, struct dsession* d)
{
	const struct pv_config* c = &s->m->cfg;
	const char* g = getenv("PV_CUDA_GRAPHS"); /* 0: one-row calls use direct launches (diagnosis) */
	d->graphs_on = !(g && !strcmp(g, "0"));
	/* keys per attention split: a session constant (the layout of every row's sum depends on it) */
	const char* as = getenv("PV_CUDA_ATT_SPLIT");
	d->att_split = as && !strcmp(as, "64") ? 64 : as && !strcmp(as, "16") ? 16 : 32; /* 32: measured 214.5 vs 208.1 tok/s (8B bf16, H200) */
	d->n_split = (s->n_ctx + d->att_split - 1) / d->att_split;
	d->ldq = (c->attn_gate ? 2 : 1) * pv_cfg_q_dim(c);
	d->ffn = c->intermediate > 0 ? c->intermediate : 1;
	d->n_slots = (s->max_batch + PV_CUDA_ROWS - 1) / PV_CUDA_ROWS;
	d->kc = (float**)pv_xcalloc((size_t)c->n_layers, sizeof(float*));
	d->vc = (float**)pv_xcalloc((size_t)c->n_layers, sizeof(float*));
	d->lin_index = (int*)pv_xcalloc((size_t)c->n_layers, sizeof(int));
	for (int l = 0, k = 0; l < c->n_layers; l++) d->lin_index[l] = c->layer_kind[l] == PV_LAYER_LINEAR ? k++ : -1;
	d->state_floats = s->state_floats; /* session.c: the linear layers' S and conv states */
	if (d->state_floats) {
		const int wide = 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c); /* Qwen3-Next's qkvz rows */
		d->ld_raw = pv_cfg_conv_dim(c) > wide ? pv_cfg_conv_dim(c) : wide;
	}
}

int session_init(struct pv_session* s, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	if (!s->m->dev) return pv_errf(err, errlen, "CUDA backend: the model's weights are not on the GPU");
	if (pv_cuda_select_device(err, errlen)) return -1;
	struct dsession* d = (struct dsession*)pv_xcalloc(1, sizeof(*d));
	s->be_state = d;
	d->last_token = -1;
	dims(s, d);
	if (c->head_dim > 256 || c->rope_dim > c->head_dim || c->rope_dim < 2)
		return pv_errf(err, errlen, "CUDA backend: head dim %d / rope dim %d not supported", c->head_dim, c->rope_dim);
	if (pv_cuda_attention_check(c->n_heads, c->n_kv_heads, c->head_dim, d->n_split, err, errlen)) return -1;
	if (d->state_floats) {
		if (pv_cuda_delta_check(c->lin_k_dim, c->lin_v_dim, c->lin_k_heads, c->lin_v_heads, c->conv_kernel, err, errlen) ||
		    pv_cuda_delta_init(err, errlen))
			return -1;
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

	/* rope tables: the engine's (engine/rope.c), the CPU's bits; on the session's stream, after
	 * the memset (a non-blocking stream does not wait for the legacy default stream) */
	{
		const size_t nt = (size_t)s->n_ctx * (size_t)(c->rope_dim / 2);
		CU(cudaMemcpyAsync(d->cos, s->rope_cos, nt * sizeof(float), cudaMemcpyHostToDevice, d->st), err, errlen);
		CU(cudaMemcpyAsync(d->sin, s->rope_sin, nt * sizeof(float), cudaMemcpyHostToDevice, d->st), err, errlen);
	}
	CU(cudaStreamSynchronize(d->st), err, errlen);
	d->stats.session_bytes = d->mem_bytes;
	size_t fr = 0, tot = 0;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->stats.used_after_init = tot - fr;
	/* what the first calls would otherwise set up (evaluation allocates nothing): the prefill
	 * path's cuBLAS handle and scratch, and the one-row graph */
	{
		struct pv_prefill_view v;
		prefill_view(s, &v);
		pv_prefill_prepare(&d->pre, s, &v);
	}
	if (d->graphs_on && capture(s, err, errlen)) return -1;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->stats.used_after_init = tot - fr;
	return 0;
}

int session_init_be(struct pv_session* s, const struct pv_session_params* p, char* err, size_t errlen)
{
	(void)p;
	return session_init(s, err, errlen) ? PV_E_DEVICE : PV_OK;
}

/* The recurrent state (every linear layer's S and conv window) to / from checkpoint slot `slot`:
 * one device-to-device copy and a sync (session.c calls these only for models with DeltaNet
 * layers). A failure marks the session failed. */
int state_copy(struct pv_session* s, int slot, int save)
{
	struct dsession* d = DS(s);
	if (d->failed) return PV_E_DEVICE;
	if (!d->state_floats) return PV_OK;
	float* ck = d->ckpt + (size_t)slot * d->state_floats;
	const size_t bytes = d->state_floats * sizeof(float);
	cudaError_t e = cudaMemcpyAsync(save ? ck : d->state, save ? d->state : ck, bytes, cudaMemcpyDeviceToDevice, d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.memcpys++;
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), save ? "checkpoint save" : "checkpoint load", e);
		fail(s, NULL, 0);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

int state_save(struct pv_session* s, int slot) { return state_copy(s, slot, 1); }
int state_load(struct pv_session* s, int slot) { return state_copy(s, slot, 0); }

int snapshot_load(struct pv_session* s, int slot)
{
	(void)slot;
	return pv_session_fail(s, PV_E_UNSUPPORTED, "CUDA backend: per-row snapshots are not implemented yet");
}

int state_reset(struct pv_session* s)
{
	struct dsession* d = DS(s);
	if (d->failed) return PV_E_DEVICE;
	if (!d->state_floats) return PV_OK;
	cudaError_t e = cudaMemsetAsync(d->state, 0, d->state_floats * sizeof(float), d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), "state reset", e);
		fail(s, NULL, 0);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

/* dst's KV rows [0, n) and its state from src's state at n: device-to-device copies on dst's
 * stream after src's stream is idle (a session is used by one thread at a time, but two
 * sessions may be on two threads: src is only read). */
int copy_prefix(struct pv_session* dst, const struct pv_session* src, int n, int from, int index)
{
	struct dsession *d = DS(dst), *sd = DS(src);
	const struct pv_config* c = &src->m->cfg;
	const size_t kvb = sizeof(float) * (size_t)pv_cfg_kv_dim(c) * (size_t)n;
	if (d->failed) return PV_E_DEVICE;
	cudaError_t e = cudaStreamSynchronize(sd->st);
	for (int l = 0; l < c->n_layers && e == cudaSuccess && n > 0; l++) {
		if (!d->kc[l]) continue;
		e = cudaMemcpyAsync(d->kc[l], sd->kc[l], kvb, cudaMemcpyDeviceToDevice, d->st);
		if (e == cudaSuccess) e = cudaMemcpyAsync(d->vc[l], sd->vc[l], kvb, cudaMemcpyDeviceToDevice, d->st);
		d->stats.memcpys += 2;
	}
	if (e == cudaSuccess && d->state_floats) {
		if (from == PV_STATE_SNAPSHOT)
			return pv_session_fail(dst, PV_E_UNSUPPORTED, "CUDA backend: per-row snapshots are not implemented yet");
		const float* st = from == PV_STATE_CHECKPOINT ? sd->ckpt + (size_t)index * sd->state_floats : sd->state;
		e = cudaMemcpyAsync(d->state, st, d->state_floats * sizeof(float), cudaMemcpyDeviceToDevice, d->st);
		d->stats.memcpys++;
	}
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(dst->err, sizeof(dst->err), "prefix copy", e);
		fail(dst, NULL, 0);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

void stats(const struct pv_session* s, struct pv_session_stats* st)
{
	const struct dsession* d = DS(s);
	const struct pv_cuda_session_stats* c = &d->stats;
	st->graph_launches = c->graph_launches;
	st->kernels = c->direct_kernels + c->graph_launches * c->graph_kernels;
	st->syncs = c->syncs;
	st->memcpys = c->memcpys;
	st->device_bytes = c->session_bytes;
	st->device_used = c->used_after_init;
	st->fast_ms = c->prefill_gpu_ms;
	st->fast_kernels = c->prefill_kernels;
	st->fast_gemms = c->prefill_gemms;
	if (st->path_last && !strcmp(st->path_last, "fast") && pv_prefill_mode(d->pre) == 2) st->path_last = "precise";
	st->fallback = pv_prefill_fallback(d->pre);
}

/* Device bytes of a session with these parameters: layout() over a session that is never made. */
uint64_t session_bytes(const struct pv_model* m, const struct pv_session_params* p)
{
	struct pv_session s;
	struct dsession d;
	memset(&s, 0, sizeof s);
	memset(&d, 0, sizeof d);
	s.m = m;
	s.n_ctx = p->n_ctx;
	s.max_batch = p->max_batch;
	s.n_ckpt_slots = p->n_checkpoints;
	for (int l = 0; l < m->cfg.n_layers; l++)
		if (m->cfg.layer_kind[l] == PV_LAYER_LINEAR) s.state_floats += pv_state_floats_per_layer(&m->cfg);
	s.be_state = &d;
	dims(&s, &d);
	struct carve cv = { 0, NULL };
	layout(&s, &cv);
	free(d.kc);
	free(d.vc);
	free(d.lin_index);
	return cv.off;
}

int backend_model_init(struct pv_model* m, const struct pv_model_params* p, char* err, size_t errlen)
{
	return pv_cuda_model_init(m, p, err, errlen) ? PV_E_DEVICE : PV_OK;
}

int model_knobs(const struct pv_model* m, const struct pv_knob** out)
{
	(void)m;
	*out = NULL;
	return 0;
}

int model_device_stats(const struct pv_model* m, struct pv_model_device_stats* st)
{
	struct pv_cuda_model_stats c;
	if (pv_cuda_model_stats(m, &c)) return PV_E_UNSUPPORTED;
	st->weight_bytes = c.weight_bytes;
	st->bytes_per_token = c.bytes_per_token;
	st->used_before = c.used_before;
	st->used_after = c.used_after;
	st->upload_s = c.upload_s;
	return PV_OK;
}

int device_info(struct pv_device_info* o, char* err, size_t errlen)
{
	struct pv_cuda_device d;
	if (pv_cuda_device_info(&d, err, errlen)) return PV_E_DEVICE;
	snprintf(o->name, sizeof o->name, "%s", d.name);
	o->cc_major = d.cc_major;
	o->cc_minor = d.cc_minor;
	o->sm_count = d.sm_count;
	o->driver_version = d.driver_version;
	o->runtime_version = d.runtime_version;
	o->compiler_major = d.nvcc_major;
	o->compiler_minor = d.nvcc_minor;
	o->sm_clock_mhz = d.sm_clock_mhz;
	o->mem_clock_mhz = d.mem_clock_mhz;
	o->bus_width = d.bus_width;
	o->l2_bytes = d.l2_bytes;
	o->mem_total = d.mem_total;
	o->mem_free = d.mem_free;
	return PV_OK;
}

int membw(size_t bytes, int reps, double* gb_s, char* err, size_t errlen)
{
	return pv_cuda_membw(bytes, reps, gb_s, err, errlen) ? PV_E_DEVICE : PV_OK;
}

} // namespace

int pv_cuda_copy_outputs(const struct pv_step* sp, int g0, int rows, const float* d_logits, const int* d_ids, const float* d_xn,
                         int V, int H, cudaStream_t st, uint64_t* memcpys, char* err, size_t errlen)
{
	const int g1 = g0 + rows;
	if (sp->logits && g1 > sp->logits_row0) {
		const int a = g0 > sp->logits_row0 ? g0 : sp->logits_row0;
		CU(cudaMemcpyAsync(sp->logits + (size_t)(a - sp->logits_row0) * V, d_logits + (size_t)(a - g0) * V,
		                   sizeof(float) * V * (size_t)(g1 - a), cudaMemcpyDeviceToHost, st),
		   err, errlen);
		++*memcpys;
	}
	if (sp->argmax && g1 > sp->argmax_row0) {
		const int a = g0 > sp->argmax_row0 ? g0 : sp->argmax_row0;
		CU(cudaMemcpyAsync(sp->argmax + (a - sp->argmax_row0), d_ids + (a - g0), sizeof(int) * (size_t)(g1 - a),
		                   cudaMemcpyDeviceToHost, st),
		   err, errlen);
		++*memcpys;
	}
	if (sp->hidden && g1 > sp->hidden_row0) {
		const int a = g0 > sp->hidden_row0 ? g0 : sp->hidden_row0;
		CU(cudaMemcpyAsync(sp->hidden + (size_t)(a - sp->hidden_row0) * H, d_xn + (size_t)(a - g0) * H,
		                   sizeof(float) * H * (size_t)(g1 - a), cudaMemcpyDeviceToHost, st),
		   err, errlen);
		++*memcpys;
	}
	return 0;
}

const struct pv_backend* cuda_table(void);
extern "C" const struct pv_backend* pv_backend_cuda(void) { return cuda_table(); }

int pv_cuda_session_stats(const struct pv_session* s, struct pv_cuda_session_stats* st)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return -1;
	*st = DS(s)->stats;
	return 0;
}

const char* pv_cuda_session_error(const struct pv_session* s)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return "not a CUDA session";
	return DS(s)->failed ? s->err : NULL;
}

int pv_cuda_last_token(const struct pv_session* s)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return -1;
	return DS(s)->last_token;
}

void pv_cuda_set_graphs(struct pv_session* s, int on)
{
	if (s && s->be == pv_backend_cuda() && s->be_state) DS(s)->graphs_on = on != 0;
}

void pv_cuda_set_prefill(struct pv_session* s, int on, int chunk)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return;
	struct dsession* d = DS(s);
	if (d->st) cudaStreamSynchronize(d->st); /* a chunk change frees the prefill scratch */
	pv_prefill_set(&d->pre, on, chunk);
	struct pv_prefill_view v; /* set up again now, not at the next call */
	prefill_view(s, &v);
	pv_prefill_prepare(&d->pre, s, &v);
}

int pv_cuda_prefill_available(void) { return pv_cublas_load(NULL); }

/* ---- profile ---------------------------------------------------------------------------- */

int pv_cuda_profile(struct pv_session* s, int32_t token, int reps, struct pv_cuda_profile* out)
{
	memset(out, 0, sizeof(*out));
	if (!s || s->be != pv_backend_cuda() || !s->be_state || reps < 1) return -1;
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

/* ---- the backend table ------------------------------------------------------------------------ */

namespace {

int profile(struct pv_session* s, int32_t token, int reps, struct pv_profile* out)
{
	struct pv_cuda_profile p;
	if (pv_cuda_profile(s, token, reps, &p)) return s->failed ? PV_E_DEVICE : PV_E_INVALID;
	memset(out, 0, sizeof(*out));
	out->n = p.n < PV_PROFILE_GROUPS ? p.n : PV_PROFILE_GROUPS;
	for (int i = 0; i < out->n; i++) {
		out->name[i] = p.name[i];
		out->us[i] = p.us[i];
		out->kernels[i] = p.kernels[i];
		out->bytes[i] = p.bytes[i];
	}
	out->total_us = p.total_us;
	return PV_OK;
}

const struct pv_backend cuda_backend = {
	"cuda",
	backend_model_init,
	pv_cuda_model_free,
	model_knobs,
	model_device_stats,
	session_bytes,
	session_init_be,
	session_free,
	cuda_forward,
	state_save,
	state_load,
	snapshot_load,
	state_reset,
	copy_prefix,
	NULL, /* mtp: the MTP head on the GPU is not written yet */
	stats,
	profile,
	device_info,
	membw,
};

} // namespace

const struct pv_backend* cuda_table(void) { return &cuda_backend; }
