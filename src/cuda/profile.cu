/*
 * profile.cu: where a decode token's time goes (pv_cuda_profile, proven bench --profile): the
 * one-row step captured into a graph with a timing event after each op group (the marks that
 * decode.cu's enqueue functions place: pv_prof_mark, pv_prof_weigh), replayed, and the event
 * times summed per group. The shared expert runs in line while profiling (one stream), so the
 * groups' times add up.
 */
#include "session.cuh"

#include <stdlib.h>
#include <string.h>

namespace {

const char* const group_name[G_COUNT] = {
	"start",       "embedding",        "add+rmsnorm",       "gemv q/k/v",        "qk norm+rope+kv", "attention",
	"gemv o_proj", "gemv deltanet in", "deltanet conv+rec", "gemv deltanet out", "gemv gate/up",    "gemv down",
	"gemv router", "moe route",        "gemv experts",      "shared expert",     "moe combine",     "gemv lm_head",
	"argmax"
};

} // namespace


/* Profiling only: a timing event after op group g (nl kernels launched so far in the step). */
int pv_prof_mark(struct dsession* d, int g, int nl, char* err, size_t errlen)
{
	if (!d->prof || d->n_marks >= PV_PROF_MAX) return 0;
	const int i = d->n_marks++;
	d->mark_group[i] = (unsigned char)g;
	d->mark_kernels[i] = nl;
	d->mark_bytes[i] = d->pending_bytes;
	d->pending_bytes = 0;
	CU(cudaEventRecordWithFlags(d->ev[i], d->st, cudaEventRecordExternal), err, errlen);
	return 0;
}

/* Profiling only: weight bytes the next op group reads (share: k / E for gathered experts). */
void pv_prof_weigh(struct dsession* d, const struct gemv_out* o, int n, double share)
{
	if (!d->prof) return;
	for (int i = 0; i < n; i++) d->pending_bytes += share * (double)o[i].w->bytes;
}

void pv_cuda_profile_free(struct dsession* d)
{
	if (d->ev)
		for (int i = 0; i < PV_PROF_MAX; i++)
			if (d->ev[i]) cudaEventDestroy(d->ev[i]);
	free(d->ev);
	free(d->mark_group);
	free(d->mark_kernels);
	free(d->mark_bytes);
	d->ev = NULL;
}

int pv_cuda_profile(struct pv_session* s, int32_t token, int reps, struct pv_cuda_profile* out)
{
	memset(out, 0, sizeof(*out));
	if (!s || s->be != pv_backend_cuda() || !s->be_state || reps < 1) return -1;
	struct dsession* d = dsess(s);
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) return -1;
	if (token < 0 || token >= s->m->cfg.vocab || s->len >= s->n_ctx)
		return pv_errf(err, errlen, "profile: token %d or position %d out of range", token, s->len);
	if (!d->ev) {
		d->ev = (cudaEvent_t*)pv_xcalloc(PV_PROF_MAX, sizeof(cudaEvent_t));
		d->mark_group = (unsigned char*)pv_xcalloc(PV_PROF_MAX, 1);
		d->mark_kernels = (int*)pv_xcalloc(PV_PROF_MAX, sizeof(int));
		d->mark_bytes = (double*)pv_xcalloc(PV_PROF_MAX, sizeof(double));
		for (int i = 0; i < PV_PROF_MAX; i++) CU(cudaEventCreate(&d->ev[i]), err, errlen);
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
	int erc = e != cudaSuccess ? pv_cuda_fail(err, errlen, "profile step copy", e)
	                           : pv_cuda_enqueue_step(s, d->gstep_dev, 1, 1, 0, NULL, err, errlen);
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
	if (rc) pv_cuda_fail_session(s);
	return rc;
}

int pv_cuda_profile_seam(struct pv_session* s, int32_t token, int reps, struct pv_profile* out)
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
