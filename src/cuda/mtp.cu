/*
 * mtp.cu: the MTP head on the GPU (proven.h pv_session_mtp; qwen-models.md §7.2), the arithmetic
 * of the CPU's cpu/mtp.c up to summation order, with the main layers' own enqueue function
 * (decode.cu pv_cuda_enqueue_layer), so the head's layer is the exact path's kernels, not a copy:
 *
 *   e  = RMSNorm(embed[token]; norm_emb)      h = RMSNorm(hidden; norm_hidden)   -> cat [n][2H]
 *   u  = cat W_fc^T                            W_fc [H, 2H], input order [e, h]   -> x [n][H]
 *   u  = decoder layer(u) at RoPE position pos + i (full attention over the head's own KV cache
 *        d->mtp_kc / mtp_vc, [n_ctx][kvd] of the session's cache type; the model's FFN kind)
 *   o  = RMSNorm(u; norm_out) -> xn -> hidden_out [n][H];   argmax(o W_lm^T) -> argmax [n]
 *
 * Rows go in steps of at most PV_CUDA_ROWS (16), as the exact path's, and every kernel is the
 * exact path's batch-invariant one (multi-row GEMVs bitwise the one-row walk, attention per row
 * over a layout fixed by the row's position, norms per row): a row's outputs never depend on how
 * many rows share the call. Direct launches, no graph: the drafter's calls are one row (a chained
 * draft) or the few rows a verify step kept. The engine keeps the head's cache length (mtp_len,
 * engine/session.c): rows at or above pos are simply written again, so rollback needs nothing here.
 */
#include "session.cuh"

#include <math.h>
#include <string.h>

namespace {

constexpr int MTP_NORM_THREADS = 256;

/* The head's input rows: block (t, 0) writes cat[t][0, H) = rmsnorm(x[t]) * we (the embedding
 * row), block (t, 1) cat[t][H, 2H) = rmsnorm(hid[t]) * wh (the target's hidden row). The
 * arithmetic of norm_rope.cu's add_rmsnorm_kernel without the add (a thread-strided sum of
 * squares, the fixed block tree, pv_rmsnorm's scale), written with row stride 2H. */
__global__ void __launch_bounds__(MTP_NORM_THREADS) mtp_in_norm_kernel(const float* x, const float* hid, const float* we,
                                                                       const float* wh, float* cat, int H, float eps)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ float red[MTP_NORM_THREADS / 32 + 1];
	const int t = blockIdx.x, half = blockIdx.y;
	const float* src = (half ? hid : x) + (size_t)t * H;
	const float* w = half ? wh : we;
	float* dst = cat + (size_t)t * 2 * H + (size_t)half * H;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < H; i += MTP_NORM_THREADS) {
		const float v = src[i];
		ss = ss + v * v;
	}
	ss = pv_block_sum_all<MTP_NORM_THREADS>(ss, red);
	const float r = 1.0f / sqrtf(ss / (float)H + eps); /* pv_rmsnorm */
	for (int i = threadIdx.x; i < H; i += MTP_NORM_THREADS) dst[i] = (src[i] * r) * w[i];
}

/* One step of n <= 16 rows (step: positions and tokens in device memory; the hidden rows already
 * in d->mtp_hid): the head's final-norm rows in d->xn, their argmax ids in d->ids. */
int enqueue_head(struct pv_session* s, const struct dstep* step, int n, int* nl, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	const struct dmodel* dm = dmod(s);
	const struct dmtp* M = &dm->mtp;
	struct dsession* d = dsess(s);
	cudaStream_t st = d->st;
	const int H = c->hidden;
	if (pv_cuda_embed(st, &d->tu, &dm->embed, step, d->x, H, n, err, errlen)) return -1;
	++*nl;
	PV_LAUNCH("mtp input norms", &d->tu, err, errlen, mtp_in_norm_kernel, dim3((unsigned)n, 2), dim3(MTP_NORM_THREADS), 0,
	          st, (const float*)d->x, (const float*)d->mtp_hid, M->norm_emb, M->norm_hidden, d->mtp_cat, H, c->rms_eps);
	++*nl;
	struct gemv_out fc[1] = { { &M->fc, d->x, H, NULL } };
	if (pv_cuda_gemv(st, &d->tu, fc, 1, d->mtp_cat, NULL, 2 * H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	/* the layer: x = u, no delta to add first; its FFN's down projection may run the output norm */
	int normed = 0;
	if (pv_cuda_enqueue_layer(s, &M->layer, -1, PV_LAYER_ATTN, c->n_experts > 0, d->mtp_kc, d->mtp_vc, step, n, 1,
	                          M->norm_out, &normed, nl, NULL, err, errlen))
		return -1;
	if (!normed) {
		if (pv_cuda_add_rmsnorm(st, &d->tu, d->x, d->delta, d->xn, M->norm_out, H, c->rms_eps, n, err, errlen)) return -1;
		++*nl;
	}
	struct gemv_out lm[1] = { { &dm->lm_head, d->logits, c->vocab, NULL } };
	if (pv_cuda_gemv(st, &d->tu, lm, 1, d->xn, NULL, H, PV_X_PLAIN, n, nl, err, errlen)) return -1;
	if (pv_cuda_argmax(st, &d->tu, d->logits, c->vocab, n, d->ids, err, errlen)) return -1;
	++*nl;
	return 0;
}

} // namespace

int pv_cuda_mtp(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
                float* hidden_out)
{
	struct dsession* d = dsess(s);
	const struct pv_config* c = &s->m->cfg;
	const int H = c->hidden, V = c->vocab;
	char* err = s->err;
	const size_t errlen = sizeof(s->err);
	if (d->failed) return PV_E_DEVICE;
	if (!dmod(s)->mtp.on || !d->mtp_kc)
		return pv_session_fail(s, PV_E_UNSUPPORTED, "CUDA backend: mtp: the head's weights or cache are not on the GPU");
	/* the outputs as a step's: argmax and hidden rows from row 0 (pv_cuda_copy_outputs) */
	struct pv_step o;
	memset(&o, 0, sizeof o);
	o.n = n;
	o.argmax = argmax;
	o.hidden = hidden_out;
	int nl = 0;
	for (int c0 = 0, slot = 0; c0 < n; c0 += PV_CUDA_ROWS, slot++) {
		const int rows = n - c0 < PV_CUDA_ROWS ? n - c0 : PV_CUDA_ROWS;
		if (slot == d->n_slots) { /* n <= max_batch keeps this from happening; the slots are pinned */
			CU_OR(cudaStreamSynchronize(d->st), failed);
			d->stats.syncs++;
			slot = 0;
		}
		struct dstep* h = &d->step_host[slot];
		h->pos0 = pos + c0;
		h->n = rows;
		for (int i = 0; i < rows; i++) h->tokens[i] = tokens[c0 + i];
		CU_OR(cudaMemcpyAsync(d->step_dev, h, sizeof(*h), cudaMemcpyHostToDevice, d->st), failed);
		CU_OR(cudaMemcpyAsync(d->mtp_hid, hidden + (size_t)c0 * H, sizeof(float) * (size_t)rows * H,
		                      cudaMemcpyHostToDevice, d->st),
		      failed);
		d->stats.memcpys += 2;
		if (enqueue_head(s, d->step_dev, rows, &nl, err, errlen)) goto failed;
		if (pv_cuda_copy_outputs(&o, c0, rows, d->logits, d->ids, d->xn, V, H, d->st, &d->stats.memcpys, err, errlen))
			goto failed;
	}
	CU_OR(cudaStreamSynchronize(d->st), failed);
	d->stats.syncs++;
	d->stats.direct_kernels += (uint64_t)nl;
	/* as the CPU: a head that computed NaN or infinities fails the call (checked on the output
	 * rows the caller takes; the logits of finite rows through finite weights are finite) */
	if (hidden_out) {
		int bad = 0;
		for (size_t i = 0; i < (size_t)n * H; i++) bad |= !isfinite(hidden_out[i]);
		if (bad)
			return pv_session_fail(s, PV_E_NUMERIC, "mtp: the head computed NaN or infinite values at positions %d..%d",
			                       pos, pos + n - 1);
	}
	for (int i = 0; i < n; i++)
		if (argmax[i] < 0 || argmax[i] >= V)
			return pv_session_fail(s, PV_E_NUMERIC, "mtp: no argmax at position %d", pos + i);
	return PV_OK;
failed:
	d->stats.direct_kernels += (uint64_t)nl;
	pv_cuda_fail_session(s);
	return PV_E_DEVICE;
}
