/*
 * many.cu: continuous batching on the GPU, the seam's forward_many (engine/backend.h): the
 * one-row decode steps of several sessions of one model evaluated together, each row's outputs
 * bitwise what the session's own one-row step gives.
 *
 * A multi-session step of n <= 16 rows (PV_CUDA_ROWS) is the n-row exact step of decode.cu
 * (pv_cuda_enqueue_step) over the scratch of one session, the host, with struct dmany
 * (common.cuh) in place of the one-session step struct: row t carries session t's token, its
 * position, the table of its KV cache pointers (dsession.kvtab) and its recurrent state
 * (dsession.state, DeltaNet models). The input stage (q/k norm, RoPE, KV write; the output gate's
 * half of q_proj copied out) and the attention read those per row (norm_rope.cu, attention.cu:
 * the one-session kernels' own bodies, so the same arithmetic; the gate is applied in the combine
 * as in any step of more than one row). A DeltaNet layer's conv and recurrence run per row on the
 * row's session's S and conv window (deltanet.cu: the one-session bodies with n = 1 on row t's
 * buffers and state, block (head or channels, row t), so each row is its own one-row step).
 * Everything else is per row already: the GEMVs (the multi-row walk is bitwise the one-row walk
 * per row), add+RMSNorm, the DeltaNet projections and gated norm, SwiGLU, MoE routing and
 * experts, the LM head and the argmax. The attention splits keep their layout per row: it
 * depends on the row's position and cuda.att_split alone (the host's split count only bounds the
 * scratch, and the host has the largest context of the batch, so every row's splits fit).
 *
 * Shapes: B = 16 rows; the host's scratch x, xn, delta [B][H], q/k/v [B][..], gate [B][qd],
 * part_o [B][nh][n_split][hd], lin_raw [B][ld_raw], lin_u [B][cd], lin_z / lin_o [B][vd],
 * lin_b / lin_a [B][Hv], lin_ab [B][2 Hv], logits [B][V], ids [B]; a session's state
 * [n_linear][Hv dk dv + (Kc-1) cd] (the model's layout: the same in every session). More than 16
 * sessions go in groups of 16, one after another (each group synchronised before the next reuses
 * the scratch and the pinned step).
 *
 * With cuda.graphs and cuda.batch_graphs a group replays a graph per row count owned by the host
 * (captured at its first use, like the window graphs): every per-row pointer is read from
 * device memory at run time, so it serves any set of sessions. Else direct launches (the same
 * kernels, the same bits).
 *
 * Covered: Qwen2/2.5, Qwen3, Qwen3-MoE and (cuda.batch_hybrid, on by default) the hybrids Qwen3.5 and Qwen3-Next (gated attention, DeltaNet layers), one row per session on the exact path without
 * snapshots, one cache type and one set of switches, no session twice (its KV row, its state);
 * anything else returns 1 and the engine steps each session alone.
 */
#include "session.cuh"

#include <string.h>

namespace {

/* The host of the batch (the session whose scratch and graphs run it: the first of the largest
 * context), or -1 when the batch is not covered. */
int pick_host(struct pv_session** ss, const struct pv_step* sp, int count)
{
	if (count < 1) return -1;
	const struct pv_session* s0 = ss[0];
	if (!s0->be_state) return -1;
	const struct dsession* d0 = dsess(s0);
	/* the hybrids' batched path (gated attention, per-row DeltaNet state): cuda.batch_hybrid=0
	 * steps them alone */
	if ((s0->m->cfg.attn_gate || d0->state_floats) && !d0->tu.batch_hybrid) return -1;
	int host = 0;
	for (int i = 0; i < count; i++) {
		const struct pv_session* s = ss[i];
		const struct pv_step* p = &sp[i];
		const struct dsession* d = dsess(s);
		/* one model: one state layout (state_floats, lin_index), one scratch shape */
		if (s->m != s0->m || s->be != s0->be || !d || d->failed || d->kvt != d0->kvt ||
		    pv_cuda_knobs_differ(&d->tu, &d0->tu) || d->state_floats != d0->state_floats ||
		    (d->state_floats && !d->state))
			return -1;
		if (p->n != 1 || !p->exact || p->snap_row0 >= 0 || p->pos0 < 0 || p->pos0 >= s->n_ctx) return -1;
		if ((p->logits && p->logits_row0 != 0) || (p->argmax && p->argmax_row0 != 0) || (p->hidden && p->hidden_row0 != 0))
			return -1;
		for (int j = 0; j < i; j++)
			if (ss[j] == s) return -1; /* one row per session: its KV row, its state, its scratch */
		if (s->n_ctx > ss[host]->n_ctx) host = i;
	}
	return host;
}

/* The graph of the n-row step hosted by host (cuda.batch_graphs), captured at its first use. */
int ensure_graph(struct pv_session* host, int n, char* err, size_t errlen)
{
	struct dsession* d = dsess(host);
	if (d->mexec[n]) return 0;
	if (pv_cuda_capture_step(host, n, 0, NULL, 1, &d->mgraph[n], &d->mexec[n], &d->mkernels[n], err, errlen)) return -1;
	d->stats.many_captures++;
	return 0;
}

/* Rows [0, n) of the batch (ss, sp: this group's) as one step hosted by host: the step struct,
 * the graph (captured already) or the direct launches, the outputs back, one synchronisation. */
int group_step(struct pv_session* host, struct pv_session** ss, const struct pv_step* sp, int n, char* err, size_t errlen)
{
	struct dsession* d = dsess(host);
	const struct pv_config* c = &host->m->cfg;
	const int V = c->vocab, H = c->hidden;
	struct dmany* h = d->many_host;
	/* the previous group's copies of this pinned struct have completed (it synchronised) */
	memset(h, 0, sizeof *h);
	h->step.pos0 = 0;
	h->step.n = n;
	for (int t = 0; t < n; t++) {
		const struct dsession* dt = dsess(ss[t]);
		h->step.tokens[t] = sp[t].tokens[0];
		h->pos[t] = sp[t].pos0;
		h->kt[t] = dt->kvtab;
		h->vt[t] = dt->kvtab + c->n_layers;
		h->state[t] = dt->state; /* NULL without DeltaNet layers (never read then) */
	}
	if (d->tu.graphs && d->tu.batch_graphs) {
		if (ensure_graph(host, n, err, errlen)) return -1;
		CU(cudaGraphLaunch(d->mexec[n], d->st), err, errlen);
		d->stats.many_launches++;
		d->stats.many_kernels += d->mkernels[n];
	} else {
		CU(cudaMemcpyAsync(d->many_dev, h, sizeof *h, cudaMemcpyHostToDevice, d->st), err, errlen);
		d->stats.memcpys++;
		if (pv_cuda_enqueue_step(host, &d->many_dev->step, n, 1, 0, NULL, err, errlen, d->many_dev)) return -1;
		CU(cudaMemcpyAsync(d->ids_host, d->ids, sizeof(int) * (size_t)n, cudaMemcpyDeviceToHost, d->st), err, errlen);
		d->stats.memcpys++;
	}
	/* row t's logits and final-norm row as its own one-row step's (the ids come in ids_host) */
	for (int t = 0; t < n; t++) {
		struct pv_step o = sp[t];
		o.argmax = NULL;
		if (pv_cuda_copy_outputs(&o, 0, 1, d->logits + (size_t)t * V, d->ids + t, d->xn + (size_t)t * H, V, H, d->st,
		                         &d->stats.memcpys, err, errlen))
			return -1;
	}
	CU(cudaStreamSynchronize(d->st), err, errlen);
	d->stats.syncs++;
	d->stats.many_steps++;
	d->stats.many_hosted_rows += (uint64_t)n;
	for (int t = 0; t < n; t++) {
		struct dsession* dt = dsess(ss[t]);
		if (sp[t].argmax) sp[t].argmax[0] = d->ids_host[t];
		dt->last_token = d->ids_host[t];
		dt->stats.forwards++;
		dt->stats.tokens++;
		dt->stats.many_rows++;
	}
	return 0;
}

} // namespace

int pv_cuda_forward_many(struct pv_session** ss, const struct pv_step* sp, int count)
{
	const int hi = pick_host(ss, sp, count);
	if (hi < 0) return 1;
	struct pv_session* host = ss[hi];
	struct dsession* d = dsess(host);
	/* the graphs of both group sizes before any row runs: a capture that fails leaves every
	 * session's cache rows and state as they were (the host is marked failed, as below) */
	if (d->tu.graphs && d->tu.batch_graphs &&
	    ((count >= PV_CUDA_ROWS && ensure_graph(host, PV_CUDA_ROWS, host->err, sizeof host->err)) ||
	     (count % PV_CUDA_ROWS && ensure_graph(host, count % PV_CUDA_ROWS, host->err, sizeof host->err)))) {
		pv_cuda_fail_session(host);
		return PV_E_DEVICE;
	}
	for (int g0 = 0; g0 < count; g0 += PV_CUDA_ROWS) {
		const int n = count - g0 < PV_CUDA_ROWS ? count - g0 : PV_CUDA_ROWS;
		if (group_step(host, ss + g0, sp + g0, n, host->err, sizeof host->err)) {
			/* the host's stream failed: it is marked (sticky, as its own step would be); the
			 * engine steps every session alone, which rewrites their KV rows at the same
			 * positions with the same bits, and the host's own step reports the failure. A
			 * recurrent state is not rewritten but advanced again: the sessions of this group
			 * (state maybe half written) and of the groups before it (advanced already) are
			 * marked failed too, so none of them applies a row twice; later groups' sessions
			 * are untouched and step alone. */
			pv_cuda_fail_session(host);
			if (d->state_floats)
				for (int i = 0; i < g0 + n; i++) {
					if (ss[i] == host) continue;
					pv_cuda_fail_session(ss[i]);
					pv_session_fail(ss[i], PV_E_DEVICE, "CUDA backend: a multi-session step failed: %s",
					                host->err);
				}
			return PV_E_DEVICE;
		}
	}
	return PV_OK;
}
