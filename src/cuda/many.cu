/*
 * many.cu: continuous batching on the GPU, the seam's forward_many (engine/backend.h): the
 * one-row decode steps of several sessions of one model evaluated together, each row's outputs
 * bitwise what the session's own one-row step gives.
 *
 * A multi-session step of n <= 16 rows (PV_CUDA_ROWS) is the n-row exact step of decode.cu
 * (pv_cuda_enqueue_step) over the scratch of one session, the host, with struct dmany
 * (common.cuh) in place of the one-session step struct: row t carries session t's token, its
 * position and the table of its KV cache pointers (dsession.kvtab), and the input stage (q/k
 * norm, RoPE, KV write) and the attention read those per row (norm_rope.cu, attention.cu: the
 * one-session kernels' own bodies, so the same arithmetic). Everything else is per row already:
 * the GEMVs (the multi-row walk is bitwise the one-row walk per row), add+RMSNorm, SwiGLU, MoE
 * routing and experts, the LM head and the argmax. The attention splits keep their layout per
 * row: it depends on the row's position and cuda.att_split alone (the host's split count only
 * bounds the scratch, and the host has the largest context of the batch, so every row's splits
 * fit).
 *
 * Shapes: B = 16 rows; the host's scratch x, xn, delta [B][H], q/k/v [B][..], part_o
 * [B][nh][n_split][hd], logits [B][V], ids [B]. More than 16 sessions go in groups of 16, one
 * after another (each group synchronised before the next reuses the scratch and the pinned step).
 *
 * With cuda.graphs and cuda.batch_graphs a group replays a graph per row count owned by the host
 * (captured at its first use, like the window graphs): every per-row pointer is read from
 * device memory at run time, so it serves any set of sessions. Else direct launches (the same
 * kernels, the same bits).
 *
 * Covered: attention-only models without the output gate (Qwen2/2.5, Qwen3, Qwen3-MoE), one row
 * per session on the exact path without snapshots, one cache type and one set of switches, no
 * session twice; anything else returns 1 and the engine steps each session alone.
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
	const struct pv_config* c = &s0->m->cfg;
	if (c->attn_gate || s0->state_floats || !s0->be_state) return -1;
	const struct dsession* d0 = dsess(s0);
	int host = 0;
	for (int i = 0; i < count; i++) {
		const struct pv_session* s = ss[i];
		const struct pv_step* p = &sp[i];
		const struct dsession* d = dsess(s);
		if (s->m != s0->m || s->be != s0->be || !d || d->failed || d->kvt != d0->kvt || memcmp(&d->tu, &d0->tu, sizeof d->tu))
			return -1;
		if (p->n != 1 || !p->exact || p->snap_row0 >= 0 || p->pos0 < 0 || p->pos0 >= s->n_ctx) return -1;
		if ((p->logits && p->logits_row0 != 0) || (p->argmax && p->argmax_row0 != 0) || (p->hidden && p->hidden_row0 != 0))
			return -1;
		for (int j = 0; j < i; j++)
			if (ss[j] == s) return -1; /* one row per session: its KV row and its scratch */
		if (s->n_ctx > ss[host]->n_ctx) host = i;
	}
	return host;
}

/* Rows [0, n) of the batch (ss, sp: this group's) as one step hosted by host: the step struct,
 * the graph or the direct launches, the outputs back, one synchronisation. */
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
	}
	if (d->tu.graphs && d->tu.batch_graphs) {
		if (!d->mexec[n]) {
			if (pv_cuda_capture_step(host, n, 0, NULL, 1, &d->mgraph[n], &d->mexec[n], &d->mkernels[n], err, errlen))
				return -1;
			d->stats.many_captures++;
		}
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
	for (int g0 = 0; g0 < count; g0 += PV_CUDA_ROWS) {
		const int n = count - g0 < PV_CUDA_ROWS ? count - g0 : PV_CUDA_ROWS;
		if (group_step(host, ss + g0, sp + g0, n, host->err, sizeof host->err)) {
			/* the host's stream failed: it is marked (sticky, as its own step would be); the
			 * engine steps every session alone, which rewrites their KV rows at the same
			 * positions with the same bits, and the host's own step reports the failure */
			pv_cuda_fail_session(host);
			return PV_E_DEVICE;
		}
	}
	return PV_OK;
}
