/*
 * decode.cu: the exact path of a CUDA session (session.cuh): a call's rows in steps of at most
 * PV_CUDA_ROWS (16) rows, each step the layers' kernels launched in order (enqueue_*), and the
 * CUDA graph that replays the one-row step.
 *
 * Each step's positions and token ids travel in a struct dstep the kernels read from device
 * memory, so the same launches serve any position: a one-row step is captured once into a graph
 * (the copy of the step struct from pinned memory, every kernel, the copy of the argmax id back)
 * and replayed per token; an exact call of 2-16 rows (a verify window) replays a graph captured
 * per row count and first LM row (cuda.window_graphs) the same way, the host's launch cost of a
 * few hundred kernels paid once. Direct launches and the graphs run the same kernels with the same
 * arguments, so their results are bitwise equal; a row's result never depends on the other rows
 * of its step (gemv.cu, attention.cu), so a verification step of 16 rows gives each row the
 * logits it gets alone. Calls that may take a fast path (not exact, at least chunk_min_tokens
 * rows, more than 16) go to the prefill path instead (prefill.cu, within tolerance).
 */
#include "session.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace {

/* The add+RMSNorm before a projection of weights `next`: with cuda.q8_act (and next one of its
 * kinds) the kernel also writes xn quantized, and the GEMVs that read xn take it as it is
 * (tu.q8_have, until q8_used after the last of them); else the plain kernel. */
int norm_for(struct dsession* d, cudaStream_t st, float* x, const float* delta, float* xn, const float* w, int H, float eps,
             int n, const struct dmat* next, char* err, size_t errlen)
{
	d->tu.q8_have = NULL;
	const int blk = next && next->type >= 0 ? pv_cuda_q8_blk(&d->tu, next) : 0;
	const int f = blk ? pv_cuda_add_rmsnorm_q8(st, &d->tu, x, delta, xn, w, H, eps, n, blk, err, errlen) : 0;
	if (f < 0) return -1;
	if (f) {
		d->tu.q8_have = xn;
		d->tu.q8_have_blk = blk;
		d->tu.q8_have_rows = n;
		return 0;
	}
	return pv_cuda_add_rmsnorm(st, &d->tu, x, delta, xn, w, H, eps, n, err, errlen);
}

/* after the last GEMV that reads the normed rows: the scratch is anyone's again */
void q8_used(struct dsession* d) { d->tu.q8_have = NULL; }

/* One Gated DeltaNet mixer: projections, conv + recurrence + gated norm, out_proj into delta. */
/* One row with a norm weight nn: out_proj also does the add+RMSNorm that follows (*normed = 1). */
int fused_out(struct pv_session* s, const struct gemv_out* o, const float* x, int ldx, const float* nn, int n, int* nl,
              int* normed, char* err, size_t errlen)
{
	struct dsession* d = dsess(s);
	*normed = 0;
	if (n == 1 && nn) {
		const struct norm_epi ne = { d->x, d->xn, nn, s->m->cfg.rms_eps, s->m->cfg.hidden, d->ncnt };
		const int f = pv_cuda_gemv_norm(d->st, &d->tu, o, x, ldx, &ne, nl, err, errlen);
		if (f < 0) return -1;
		*normed = f;
	}
	if (!*normed && pv_cuda_gemv(d->st, &d->tu, o, 1, x, NULL, ldx, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	return 0;
}

/* One Gated DeltaNet mixer: projections, conv + recurrence + gated norm, out_proj into delta.
 * snap (NULL: none): the step's snapshot slot of row 0 (all layers); this layer's part of every
 * row's slot is written too (deltanet.cu). many (NULL: one session): row t is its own session's
 * step, the conv and the recurrence over that session's state (many->state[t], this layer's part
 * at the same offset as in s's own state); the projections, the gated norm and out_proj are per
 * row over s's scratch as for one session. */
int enqueue_deltanet(struct pv_session* s, const struct dlayer* L, int l, int n, const float* nn, int* normed, int* nl,
                     float* snap, const struct dmany* many, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = dsess(s);
	const int H = c->hidden, Hv = c->lin_v_heads, vd = pv_cfg_value_dim(c);
	struct delta_args a;
	memset(&a, 0, sizeof a);
	if (L->in_qkvz.type >= 0) {
		struct gemv_out o[2] = { { &L->in_qkvz, d->lin_raw, d->ld_raw, NULL }, { &L->in_ba, d->lin_ab, 2 * Hv, NULL } };
		pv_prof_weigh(d, o, 2, 1);
		if (pv_cuda_gemv(d->st, &d->tu, o, 2, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		a.qkvz = 1;
		a.ba_grouped = 1;
	} else if (L->in_ba.type >= 0) {
		struct gemv_out o[3] = { { &L->in_qkv, d->lin_raw, d->ld_raw, NULL },
			                 { &L->in_z, d->lin_z, vd, NULL },
			                 { &L->in_ba, d->lin_ab, 2 * Hv, NULL } };
		pv_prof_weigh(d, o, 3, 1);
		if (pv_cuda_gemv(d->st, &d->tu, o, 3, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		a.ba_grouped = 1;
	} else {
		struct gemv_out o[4] = { { &L->in_qkv, d->lin_raw, d->ld_raw, NULL },
			                 { &L->in_z, d->lin_z, vd, NULL },
			                 { &L->in_b, d->lin_b, Hv, NULL },
			                 { &L->in_a, d->lin_a, Hv, NULL } };
		pv_prof_weigh(d, o, 4, 1);
		if (pv_cuda_gemv(d->st, &d->tu, o, 4, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	}
	q8_used(d);
	if (pv_prof_mark(d, G_DPROJ, *nl, err, errlen)) return -1;
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
	const size_t lofs = (size_t)d->lin_index[l] * pv_state_floats_per_layer(c); /* the layer within a state */
	if (many) {
		/* every session of the batch has this model's state layout: lofs is theirs too */
		if (snap) return pv_errf(err, errlen, "CUDA backend: snapshots in a multi-session step");
		if (pv_cuda_deltanet_many(d->st, &d->tu, &a, many, lofs, err, errlen)) return -1;
	} else if (pv_cuda_deltanet(d->st, &d->tu, &a, snap ? snap + lofs : NULL, d->state_floats, err, errlen)) {
		return -1;
	}
	*nl += snap ? 3 : 2;
	if (pv_prof_mark(d, G_DREC, *nl, err, errlen)) return -1;
	struct gemv_out o[1] = { { &L->out_proj, d->delta, H, NULL } };
	pv_prof_weigh(d, o, 1, 1);
	if (fused_out(s, o, d->lin_o, vd, nn, n, nl, normed, err, errlen)) return -1;
	return pv_prof_mark(d, G_DOUT, *nl, err, errlen);
}

/* One attention mixer: q/k/v projections (+ biases), q/k norm + RoPE + KV write into kc / vc
 * ([n_ctx][kvd] of the session's cache type: a main layer's or the MTP head's), attention (+ the
 * output gate), o_proj into delta. many (NULL: one session): row t is its own session's step, at
 * many->pos[t] over that session's cache of layer l (the multi-session kernels, never the fused
 * stage; kc / vc are then the host session's and unused). */
int enqueue_attention(struct pv_session* s, const struct dlayer* L, int l, void* kc, void* vc, const struct dstep* step, int n,
                      const float* nn, int* normed, int* nl, const struct dmany* many, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = dsess(s);
	cudaStream_t st = d->st;
	const int H = c->hidden, qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	{
		struct gemv_out o[3] = { { &L->wq, d->qraw, d->ldq, L->bq },
			                 { &L->wk, d->kraw, kvd, L->bk },
			                 { &L->wv, d->vraw, kvd, L->bv } };
		pv_prof_weigh(d, o, 3, 1);
		if (pv_cuda_gemv(st, &d->tu, o, 3, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
		q8_used(d);
		if (pv_prof_mark(d, G_QKV, *nl, err, errlen)) return -1;
	}
	/* one row: the attention kernel does the input stage itself (cuda.attn_fuse) */
	const int fuse = n == 1 && d->tu.attn_fuse && !many;
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
		a.kc = kc;
		a.vc = vc;
		a.kvt = d->kvt;
		a.nh = c->n_heads;
		a.nkv = c->n_kv_heads;
		a.hd = c->head_dim;
		a.R = c->rope_dim;
		a.eps = c->rms_eps;
		a.step = step;
		if (!fuse) {
			if (many ? pv_cuda_qkv_post_many(st, &d->tu, &a, many, l, n, err, errlen)
			         : pv_cuda_qkv_post(st, &d->tu, &a, n, err, errlen))
				return -1;
			++*nl;
			if (pv_prof_mark(d, G_ROPE, *nl, err, errlen)) return -1;
		}
	}
	{
		struct attn_args a;
		memset(&a, 0, sizeof a);
		a.q = d->q;
		a.kc = kc;
		a.vc = vc;
		a.kvt = d->kvt;
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
		a.split = d->tu.att_split;
		a.step = step;
		if (many ? pv_cuda_attention_many(st, &d->tu, &a, many, l, n, err, errlen)
		         : pv_cuda_attention(st, &d->tu, &a, n, err, errlen))
			return -1;
		*nl += 2;
		if (pv_prof_mark(d, G_ATTN, *nl, err, errlen)) return -1;
	}
	{
		struct gemv_out o[1] = { { &L->wo, d->delta, H, NULL } };
		pv_prof_weigh(d, o, 1, 1);
		if (fused_out(s, o, d->o, qd, nn, n, nl, normed, err, errlen)) return -1;
	}
	return pv_prof_mark(d, G_OPROJ, *nl, err, errlen);
}

/* SwiGLU of xn: g = gate xn, u = up xn (one launch), out = down (silu(g) * u) (the product is
 * formed while the down projection stages its input). */
int enqueue_swiglu(struct pv_session* s, cudaStream_t st, const struct dmat* gate, const struct dmat* up,
                   const struct dmat* down, float* g, float* u, int width, float* out, int n, int* nl, int shared, char* err,
                   size_t errlen, const float* nn = NULL, int* normed = NULL)
{
	struct dsession* d = dsess(s);
	const int H = s->m->cfg.hidden;
	struct gemv_out o[2] = { { gate, g, width, NULL }, { up, u, width, NULL } };
	pv_prof_weigh(d, o, 2, 1);
	/* one row: the product silu(g) * u in the gate/up kernel's epilogue (same bits) */
	const int paired = pv_cuda_gemv_swiglu(st, &d->tu, &o[0], &o[1], d->xn, H, n, nl, err, errlen);
	if (paired < 0) return -1;
	if (!paired && pv_cuda_gemv(st, &d->tu, o, 2, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	if (st == d->st) q8_used(d); /* the side stream's shared expert has its own scratch */
	if (!shared && pv_prof_mark(d, G_GATEUP, *nl, err, errlen)) return -1;
	struct gemv_out od[1] = { { down, out, H, NULL } };
	pv_prof_weigh(d, od, 1, 1);
	if (!paired) {
		if (pv_cuda_swiglu(st, &d->tu, g, u, width, width, n, err, errlen)) return -1;
		++*nl;
	}
	if (normed) {
		if (fused_out(s, od, g, width, nn, n, nl, normed, err, errlen)) return -1;
	} else if (pv_cuda_gemv(st, &d->tu, od, 1, g, NULL, width, PV_X_PLAIN, n, nl, err, errlen)) {
		return -1;
	}
	return pv_prof_mark(d, shared ? G_MSHARED : G_DOWN, *nl, err, errlen);
}

/* Routed experts (+ the shared expert): router GEMV, routing on the GPU, each row's k experts as
 * gathered GEMVs (their ids stay in device memory), the weighted sum into delta. */
int enqueue_moe(struct pv_session* s, const struct dlayer* L, int n, int* nl, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = dsess(s);
	const int H = c->hidden, E = c->n_experts, k = c->n_experts_used, Ie = c->moe_inter;
	struct moe_args a;
	pv_moe_args_layer(&a, c, L, n);
	a.logits = d->rlog;
	a.idx = d->top_idx;
	a.w = d->top_w;
	a.eo = d->eo;
	a.sh = d->sho;
	a.xn = d->xn;
	a.out = d->delta;
	/* the shared expert beside the routed ones (not while profiling: the marks time one stream) */
	const int side = a.shared && d->st2 && !d->prof;
	if (side) {
		CU(cudaEventRecord(d->fork_ev, d->st), err, errlen);
		CU(cudaStreamWaitEvent(d->st2, d->fork_ev, 0), err, errlen);
		if (enqueue_swiglu(s, d->st2, &L->sh_gate, &L->sh_up, &L->sh_down, d->shg, d->shu, c->shared_inter, d->sho, n,
		                   nl, 1, err, errlen))
			return -1;
		CU(cudaEventRecord(d->join_ev, d->st2), err, errlen);
	}
	struct gemv_out r[1] = { { &L->router, d->rlog, E, NULL } };
	pv_prof_weigh(d, r, 1, 1);
	if (pv_cuda_gemv(d->st, &d->tu, r, 1, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	if (pv_prof_mark(d, G_MROUTER, *nl, err, errlen)) return -1;
	if (pv_cuda_moe_route(d->st, &d->tu, &a, err, errlen)) return -1;
	++*nl;
	if (pv_prof_mark(d, G_MROUTE, *nl, err, errlen)) return -1;
	struct gemv_gather ga = { d->top_idx, n * k, k, E, 0 };
	struct gemv_out gu[2] = { { &L->ex_gate, d->eg, Ie, NULL }, { &L->ex_up, d->eu, Ie, NULL } };
	pv_prof_weigh(d, gu, 2, (double)n * k / E);
	/* one launch: each slot's gate and up rows with silu(g) * u in the epilogue (same bits) */
	const int paired =
	        n == 1 ? pv_cuda_gemv_swiglu_gather(d->st, &d->tu, &gu[0], &gu[1], d->xn, H, 1, &ga, nl, err, errlen) : 0;
	if (paired < 0) return -1;
	if (!paired && pv_cuda_gemv_gather(d->st, &d->tu, gu, 2, d->xn, NULL, H, PV_X_PLAIN, 1, &ga, nl, err, errlen))
		return -1;
	q8_used(d); /* the shared expert after these (no side stream) quantizes xn again */
	ga.x_by_slot = 1;
	struct gemv_out dn[1] = { { &L->ex_down, d->eo, H, NULL } };
	pv_prof_weigh(d, dn, 1, (double)n * k / E);
	if (!paired) {
		if (pv_cuda_swiglu(d->st, &d->tu, d->eg, d->eu, Ie, Ie, n * k, err, errlen)) return -1;
		++*nl;
	}
	if (pv_cuda_gemv_gather(d->st, &d->tu, dn, 1, d->eg, NULL, Ie, PV_X_PLAIN, 1, &ga, nl, err, errlen)) return -1;
	if (pv_prof_mark(d, G_MEXPERTS, *nl, err, errlen)) return -1;
	if (side) CU(cudaStreamWaitEvent(d->st, d->join_ev, 0), err, errlen);
	if (a.shared && !side &&
	    enqueue_swiglu(s, d->st, &L->sh_gate, &L->sh_up, &L->sh_down, d->shg, d->shu, c->shared_inter, d->sho, n, nl, 1,
	                   err, errlen))
		return -1;
	if (pv_cuda_moe_combine(d->st, &d->tu, &a, err, errlen)) return -1;
	++*nl;
	return pv_prof_mark(d, G_MCOMBINE, *nl, err, errlen);
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

void fail_outputs(const struct pv_session* s, const struct pv_step* sp)
{
	if (sp->logits)
		for (size_t i = 0; i < (size_t)(sp->n - sp->logits_row0) * s->m->cfg.vocab; i++)
			sp->logits[i] = __builtin_nanf("");
	if (sp->argmax)
		for (int i = 0; i < sp->n - sp->argmax_row0; i++) sp->argmax[i] = -1;
}

} // namespace

/* One decoder layer over the step's rows (see session.cuh). */
int pv_cuda_enqueue_layer(struct pv_session* s, const struct dlayer* L, int l, int kind, int moe, void* kc, void* vc,
                          const struct dstep* step, int n, int first, const float* nn, int* normed, int* nl, float* snap,
                          char* err, size_t errlen, const struct dmany* many)
{
	const struct pv_config* c = &s->m->cfg;
	struct dsession* d = dsess(s);
	cudaStream_t st = d->st;
	const int H = c->hidden;
	if (!*normed) {
		const struct dmat* next = kind == PV_LAYER_LINEAR ? (L->in_qkvz.type >= 0 ? &L->in_qkvz : &L->in_qkv) : &L->wq;
		if (norm_for(d, st, d->x, first ? NULL : d->delta, d->xn, L->attn_norm, H, c->rms_eps, n, next, err, errlen))
			return -1;
		++*nl;
		if (pv_prof_mark(d, G_NORM, *nl, err, errlen)) return -1;
	}
	*normed = 0;
	if (kind == PV_LAYER_LINEAR) {
		if (enqueue_deltanet(s, L, l, n, L->ffn_norm, normed, nl, snap, many, err, errlen)) return -1;
	} else if (enqueue_attention(s, L, l, kc, vc, step, n, L->ffn_norm, normed, nl, many, err, errlen)) {
		return -1;
	}
	if (!*normed) {
		if (norm_for(d, st, d->x, d->delta, d->xn, L->ffn_norm, H, c->rms_eps, n, moe ? &L->ex_gate : &L->gate, err, errlen))
			return -1;
		++*nl;
		if (pv_prof_mark(d, G_NORM, *nl, err, errlen)) return -1;
	}
	*normed = 0;
	if (moe) return enqueue_moe(s, L, n, nl, err, errlen);
	return enqueue_swiglu(s, st, &L->gate, &L->up, &L->down, d->ffg, d->ffu, d->ffn, d->delta, n, nl, 0, err, errlen, nn,
	                      normed);
}

/* Rows [0, n) of one step at step->pos0: every layer, then (lm) the final norm, the LM head and
 * the argmax for rows [lr0, n); snap, many: see session.cuh. */
int pv_cuda_enqueue_step(struct pv_session* s, const struct dstep* step, int n, int lm, int lr0, float* snap, char* err,
                         size_t errlen, const struct dmany* many)
{
	const struct pv_config* c = &s->m->cfg;
	const struct dmodel* dm = dmod(s);
	struct dsession* d = dsess(s);
	cudaStream_t st = d->st;
	const int H = c->hidden;
	int nl = 0; /* kernels launched */
	int rc = -1;
	/* normed: the previous GEMV's epilogue already did the add+RMSNorm this step needs (one row) */
	int normed = 0;

	if (pv_prof_mark(d, G_START, nl, err, errlen)) goto out;
	if (pv_cuda_embed(st, &d->tu, &dm->embed, step, d->x, H, n, err, errlen)) goto out;
	nl++;
	if (pv_prof_mark(d, G_EMBED, nl, err, errlen)) goto out;
	for (int l = 0; l < c->n_layers; l++) {
		/* the norm after this FFN: the next layer's input norm, or the final norm before the LM head */
		const float* nn = l + 1 < c->n_layers ? dm->layers[l + 1].attn_norm : lm && lr0 == 0 ? dm->final_norm : NULL;
		if (pv_cuda_enqueue_layer(s, &dm->layers[l], l, c->layer_kind[l], c->layer_moe[l], d->kc[l], d->vc[l], step, n,
		                          l == 0, nn, &normed, &nl, snap, err, errlen, many))
			goto out;
	}
	if (lm) {
		const int rows = n - lr0;
		if (!normed) {
			if (norm_for(d, st, d->x + (size_t)lr0 * H, d->delta + (size_t)lr0 * H, d->xn, dm->final_norm, H, c->rms_eps,
			             rows, &dm->lm_head, err, errlen))
				goto out;
			nl++;
			if (pv_prof_mark(d, G_NORM, nl, err, errlen)) goto out;
		}
		struct gemv_out o[1] = { { &dm->lm_head, d->logits, c->vocab, NULL } };
		pv_prof_weigh(d, o, 1, 1);
		if (pv_cuda_gemv(st, &d->tu, o, 1, d->xn, NULL, H, PV_X_PLAIN, rows, &nl, err, errlen)) goto out;
		q8_used(d);
		if (pv_prof_mark(d, G_LMHEAD, nl, err, errlen)) goto out;
		if (pv_cuda_argmax(st, &d->tu, d->logits, c->vocab, rows, d->ids, err, errlen)) goto out;
		nl++;
		if (pv_prof_mark(d, G_ARGMAX, nl, err, errlen)) goto out;
	}
	rc = 0;
out:
	d->stats.direct_kernels += (uint64_t)nl;
	return rc;
}

/* Captures the step of n rows with LM rows [lr0, n): copy in the graph's step struct (many: the
 * multi-session one, many_host to many_dev), the kernels, copy out the argmax ids of the LM rows
 * (ids_host[0 .. n - lr0)). */
int pv_cuda_capture_step(struct pv_session* s, int n, int lr0, float* snap, int many, cudaGraph_t* graph,
                         cudaGraphExec_t* exec, uint64_t* kernels, char* err, size_t errlen)
{
	struct dsession* d = dsess(s);
	CU(cudaStreamBeginCapture(d->st, cudaStreamCaptureModeThreadLocal), err, errlen);
	uint64_t before = d->stats.direct_kernels;
	int rc = 0;
	cudaError_t e = many ? cudaMemcpyAsync(d->many_dev, d->many_host, sizeof(struct dmany), cudaMemcpyHostToDevice, d->st)
	                     : cudaMemcpyAsync(d->gstep_dev, d->gstep_host, sizeof(struct dstep), cudaMemcpyHostToDevice, d->st);
	if (e != cudaSuccess) rc = pv_cuda_fail(err, errlen, "graph step copy", e);
	if (!rc)
		rc = many ? pv_cuda_enqueue_step(s, &d->many_dev->step, n, 1, lr0, snap, err, errlen, d->many_dev)
		          : pv_cuda_enqueue_step(s, d->gstep_dev, n, 1, lr0, snap, err, errlen);
	if (!rc) {
		e = cudaMemcpyAsync(d->ids_host, d->ids, sizeof(int) * (size_t)(n - lr0), cudaMemcpyDeviceToHost, d->st);
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
	*graph = g;
	CU(cudaGraphInstantiate(exec, g, 0), err, errlen);
	if (count_kernels(g, kernels)) return pv_errf(err, errlen, "CUDA backend: cannot read the graph's nodes");
	return 0;
}

/* Captures the one-row step. */
int pv_cuda_capture(struct pv_session* s, char* err, size_t errlen)
{
	struct dsession* d = dsess(s);
	if (pv_cuda_capture_step(s, 1, 0, NULL, 0, &d->graph, &d->gexec, &d->stats.graph_kernels, err, errlen)) return -1;
	d->stats.graph_captures++;
	return 0;
}

void pv_cuda_drop_windows(struct dsession* d)
{
	for (int n = 0; n <= PV_CUDA_ROWS; n++) {
		if (d->mexec[n]) cudaGraphExecDestroy(d->mexec[n]);
		if (d->mgraph[n]) cudaGraphDestroy(d->mgraph[n]);
		d->mexec[n] = NULL;
		d->mgraph[n] = NULL;
	}
	for (int n = 0; n <= PV_CUDA_ROWS; n++)
		for (int r = 0; r < PV_CUDA_ROWS; r++)
			for (int k = 0; k < 2; k++) {
				if (d->wexec[n][r][k]) cudaGraphExecDestroy(d->wexec[n][r][k]);
				if (d->wgraph[n][r][k]) cudaGraphDestroy(d->wgraph[n][r][k]);
				d->wexec[n][r][k] = NULL;
				d->wgraph[n][r][k] = NULL;
			}
}

namespace {

/* An exact call of n = 2..16 rows whose LM rows start at lr0 (the verify window: every row's
 * argmax), without snapshots or (snap) with them from slot 0 (a DeltaNet model's window: the
 * slots' memory never moves, so the captured pointers stay right): the window graph of (n, lr0,
 * snap), captured at its first use. The logits and final-norm rows are copied after it as
 * direct copies; the ids come back with it. */
int window_step(struct pv_session* s, const struct pv_step* sp, int lr0, int snap, char* err, size_t errlen)
{
	struct dsession* d = dsess(s);
	const int n = sp->n;
	if (!d->wexec[n][lr0][snap]) {
		if (pv_cuda_capture_step(s, n, lr0, snap ? d->snap : NULL, 0, &d->wgraph[n][lr0][snap], &d->wexec[n][lr0][snap],
		                         &d->wkernels[n][lr0][snap], err, errlen))
			return -1;
		d->stats.window_captures++;
	}
	d->gstep_host->pos0 = sp->pos0;
	d->gstep_host->n = n;
	for (int i = 0; i < n; i++) d->gstep_host->tokens[i] = sp->tokens[i];
	CU(cudaGraphLaunch(d->wexec[n][lr0][snap], d->st), err, errlen);
	d->stats.window_launches++;
	d->stats.window_kernels += d->wkernels[n][lr0][snap];
	struct pv_step o = *sp;
	o.argmax = NULL; /* from ids_host after the sync */
	return pv_cuda_copy_outputs(&o, lr0, n - lr0, d->logits, d->ids, d->xn, s->m->cfg.vocab, s->m->cfg.hidden, d->st,
	                            &d->stats.memcpys, err, errlen);
}

} // namespace

int pv_cuda_forward(struct pv_session* s, const struct pv_step* sp)

{
	/* off the exact path, long calls may take the prefill path (prefill.cu); the 16-row steps run
	 * the recurrent DeltaNet form (deltanet.cu) */
	struct dsession* d = dsess(s);
	const int n = sp->n;
	const int32_t* tokens = sp->tokens;
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) {
		fail_outputs(s, sp);
		return PV_E_DEVICE;
	}
	/* snapshots: the state after row t goes to slot snap_row0 + t, written by the DeltaNet kernels
	 * of exact steps with direct launches (the decode graph has no snapshot writes) */
	const int snap = sp->snap_row0 >= 0 && d->state_floats;
	if (snap && (sp->snap_row0 + n > s->n_snapshots || !d->snap))
		return pv_session_fail(s, PV_E_INVALID, "CUDA backend: snapshot rows [%d, %d) outside the session's %d slots",
		                       sp->snap_row0, sp->snap_row0 + n, s->n_snapshots);
	d->stats.forwards++;
	d->stats.tokens += (uint64_t)n;
	const int r0 = pv_step_lm_row0(sp);
	int prefilled = 0, have_id = 0;
	d->last_token = -1;
	/* n rows in one step, LM rows from r0 (none: the direct launches) */
	const int win = n >= 2 && n <= PV_CUDA_ROWS && r0 < n && d->tu.graphs && d->tu.window_graphs &&
	                (!snap || (d->tu.window_graphs == 2 && sp->snap_row0 == 0));

	if (n == 1 && d->tu.graphs && !snap) {
		/* the graph always runs the LM head and the argmax, and copies the id back */
		if (!d->gexec && pv_cuda_capture(s, err, errlen)) goto failed;
		d->gstep_host->pos0 = sp->pos0;
		d->gstep_host->n = 1;
		d->gstep_host->tokens[0] = tokens[0];
		CU_OR(cudaGraphLaunch(d->gexec, d->st), failed);
		d->stats.graph_launches++;
		d->stats.graph_tokens++;
		struct pv_step o = *sp;
		o.argmax = NULL; /* from ids_host after the sync */
		if (r0 == 0 && pv_cuda_copy_outputs(&o, 0, 1, d->logits, d->ids, d->xn, s->m->cfg.vocab, s->m->cfg.hidden,
		                                    d->st, &d->stats.memcpys, err, errlen))
			goto failed;
	} else if (win) {
		if (window_step(s, sp, r0, snap, err, errlen)) goto failed;
	} else if (!sp->exact && !snap && pv_prefill_wanted(s, n)) {
		/* Prompt hook: long calls (>= chunk_min_tokens rows) go to the prefill path: bf16
		 * tensor-core GEMMs in chunks, results within tolerance of the 16-row steps (like the
		 * CPU's chunked DeltaNet), no host synchronisation until the one below. */
		if (pv_prefill_forward(s, sp, &have_id, err, errlen)) goto failed;
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
				goto failed;
			}
			struct dstep* h = &d->step_host[slot];
			h->pos0 = sp->pos0 + c0;
			h->n = rows;
			for (int i = 0; i < rows; i++) h->tokens[i] = tokens[c0 + i];
			CU_OR(cudaMemcpyAsync(d->step_dev, h, sizeof(*h), cudaMemcpyHostToDevice, d->st), failed);
			d->stats.memcpys++;
			float* sn = snap ? d->snap + (size_t)(sp->snap_row0 + c0) * d->state_floats : NULL;
			if (pv_cuda_enqueue_step(s, d->step_dev, rows, lm, lr0, sn, err, errlen)) goto failed;
			if (lm && pv_cuda_copy_outputs(sp, c0 + lr0, rows - lr0, d->logits, d->ids, d->xn, s->m->cfg.vocab,
			                               s->m->cfg.hidden, d->st, &d->stats.memcpys, err, errlen))
				goto failed;
			if (lm && c0 + rows == n) { /* the last row's id, for pv_cuda_last_token */
				CU_OR(cudaMemcpyAsync(d->ids_host, d->ids + (rows - lr0 - 1), sizeof(int),
				                      cudaMemcpyDeviceToHost, d->st),
				      failed);
				d->stats.memcpys++;
				have_id = 1;
			}
		}
	}
	CU_OR(cudaStreamSynchronize(d->st), failed);
	d->stats.syncs++;
	if (prefilled) pv_prefill_account(s);
	if (n == 1 && d->tu.graphs && !snap) {
		have_id = 1;
		if (sp->argmax && sp->argmax_row0 == 0) sp->argmax[0] = d->ids_host[0];
	}
	if (win) {
		/* ids_host[i] is row r0 + i's */
		if (sp->argmax)
			for (int a = sp->argmax_row0 > r0 ? sp->argmax_row0 : r0; a < n; a++)
				sp->argmax[a - sp->argmax_row0] = d->ids_host[a - r0];
		d->last_token = d->ids_host[n - 1 - r0];
		return PV_OK;
	}
	if (have_id) d->last_token = d->ids_host[0];
	return PV_OK;
failed:
	pv_cuda_fail_session(s);
	fail_outputs(s, sp);
	return PV_E_DEVICE;
}

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
