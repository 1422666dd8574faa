/*
 * session.cu: a session on the GPU (session.cuh): its device memory (one allocation, laid out
 * by layout(): KV cache (f32, f16 or bf16 elements), rope tables, the 16-row step scratch,
 * DeltaNet states, checkpoint and snapshot slots), its creation (the streams, the prefill set-up and the one-row graph: nothing
 * is allocated or captured during evaluation), the recurrent-state copies, prefix copies,
 * counters, and the backend table. The forward pass is decode.cu's (exact steps and the decode
 * graph) and prefill.cu's (long prompts).
 */
#include "session.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pv_cuda_model_free(struct pv_model* m);

void pv_cuda_fail_session(struct pv_session* s)
{
	struct dsession* d = dsess(s);
	if (!d->failed) {
		d->failed = 1;
		/* leave the stream empty for session_free */
		cudaStreamSynchronize(d->st);
	}
}

namespace {

/* ---- session memory ----------------------------------------------------------------------- */

void session_free(struct pv_session* s)
{
	struct dsession* d = dsess(s);
	if (!d) return;
	if (d->st) cudaStreamSynchronize(d->st);
	pv_prefill_free(d->pre); /* its cuBLAS handle is bound to d->st */
	if (d->gexec) cudaGraphExecDestroy(d->gexec);
	if (d->graph) cudaGraphDestroy(d->graph);
	pv_cuda_drop_windows(d);
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
	pv_cuda_profile_free(d);
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
	struct dsession* d = dsess(s);
	const size_t B = PV_CUDA_ROWS, H = (size_t)c->hidden, qd = (size_t)pv_cfg_q_dim(c), kvd = (size_t)pv_cfg_kv_dim(c);
	const size_t half = (size_t)c->rope_dim / 2;
	const size_t rb = (size_t)c->n_kv_heads * pv_kv_hbytes(d->kvt, c->head_dim); /* bytes of a cache row */
	for (int l = 0; l < c->n_layers; l++) {
		d->kc[l] = d->vc[l] = NULL;
		if (c->layer_kind[l] != PV_LAYER_ATTN) continue;
		d->kc[l] = take<unsigned char>(cv, (size_t)s->n_ctx * rb);
		d->vc[l] = take<unsigned char>(cv, (size_t)s->n_ctx * rb);
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
		d->snap = s->n_snapshots ? take<float>(cv, d->state_floats * (size_t)s->n_snapshots) : NULL;
		d->lin_raw = take<float>(cv, B * (size_t)d->ld_raw);
		d->lin_u = take<float>(cv, B * cd);
		d->lin_z = take<float>(cv, B * vd);
		d->lin_b = take<float>(cv, B * Hv);
		d->lin_a = take<float>(cv, B * Hv);
		d->lin_ab = take<float>(cv, B * 2 * Hv);
		d->lin_o = take<float>(cv, B * vd);
	}
	d->mtp_kc = d->mtp_vc = NULL;
	d->mtp_cat = d->mtp_hid = NULL;
	if (s->mtp_on && dmod(s)->mtp.on) { /* the MTP head (mtp.cu) */
		d->mtp_kc = take<unsigned char>(cv, (size_t)s->n_ctx * rb);
		d->mtp_vc = take<unsigned char>(cv, (size_t)s->n_ctx * rb);
		d->mtp_cat = take<float>(cv, B * 2 * H);
		d->mtp_hid = take<float>(cv, B * H);
	}
	{ /* cuda.q8_act's activation scratch (qgemv.cu): 16 rows (gathered experts: 16 k slots) of
	   * the widest input of any matrix; one more for the MoE shared expert's stream */
		int64_t w = 2 * (int64_t)H;
		const int64_t widths[] = { (int64_t)d->ffn, (int64_t)qd, (int64_t)pv_cfg_value_dim(c), (int64_t)c->moe_inter,
			                   (int64_t)c->shared_inter };
		for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) w = widths[i] > w ? widths[i] : w;
		const int64_t rows = (int64_t)B * (c->n_experts_used > 1 ? c->n_experts_used : 1);
		d->tu.q8_bytes = pv_cuda_q8_bytes(rows, w);
		d->tu.q8_buf = take<unsigned char>(cv, d->tu.q8_bytes);
		const int side = c->n_experts && c->shared_inter && d->tu.moe_side; /* session_init makes st2 then */
		d->tu.q8_buf2 = side ? take<unsigned char>(cv, d->tu.q8_bytes) : NULL;
		d->tu.q8_side = (void*)d->st2;
	}
	d->step_dev = take<struct dstep>(cv, 1);
	d->gstep_dev = take<struct dstep>(cv, 1);
	d->kvtab = take<void*>(cv, 2 * (size_t)c->n_layers);
	d->many_dev = take<struct dmany>(cv, 1);
}

/* The session's dimensions (what layout() needs), from the config and the session parameters. */
void dims(const struct pv_session* s, struct dsession* d)
{
	const struct pv_config* c = &s->m->cfg;
	d->tu = dmod(s)->tu;
	/* keys per attention split: a session constant (the layout of every row's sum depends on it) */
	d->n_split = (s->n_ctx + d->tu.att_split - 1) / d->tu.att_split;
	d->ldq = (c->attn_gate ? 2 : 1) * pv_cfg_q_dim(c);
	d->ffn = c->intermediate > 0 ? c->intermediate : 1;
	d->n_slots = (s->max_batch + PV_CUDA_ROWS - 1) / PV_CUDA_ROWS;
	/* the cache's element type: session_init_be has refused the types the kernels do not read */
	d->kvt = s->cache_type == PV_CACHE_F16    ? PV_KV_F16
	         : s->cache_type == PV_CACHE_BF16 ? PV_KV_BF16
	         : s->cache_type == PV_CACHE_Q8_0 ? PV_KV_Q8_0
	                                          : PV_KV_F32;
	d->kc = (void**)pv_xcalloc((size_t)c->n_layers, sizeof(void*));
	d->vc = (void**)pv_xcalloc((size_t)c->n_layers, sizeof(void*));
	d->lin_index = (int*)pv_xcalloc((size_t)c->n_layers, sizeof(int));
	for (int l = 0, k = 0; l < c->n_layers; l++) d->lin_index[l] = c->layer_kind[l] == PV_LAYER_LINEAR ? k++ : -1;
	d->state_floats = s->state_floats; /* session.c: the linear layers' S and conv states */
	if (d->state_floats) {
		const int wide = 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c); /* Qwen3-Next's qkvz rows */
		d->ld_raw = pv_cfg_conv_dim(c) > wide ? pv_cfg_conv_dim(c) : wide;
	}
}

/* 0, or -1 with the message in err and the status in *code (PV_E_DEVICE unless said otherwise) */
int session_init(struct pv_session* s, int* code, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	*code = PV_E_DEVICE;
	if (!s->m->dev) return pv_errf(err, errlen, "CUDA backend: the model's weights are not on the GPU");
	if (pv_cuda_select_device(err, errlen)) return -1;
	struct dsession* d = (struct dsession*)pv_xcalloc(1, sizeof(*d));
	s->be_state = d;
	d->last_token = -1;
	dims(s, d);
	*code = PV_E_UNSUPPORTED; /* shapes the kernels do not take */
	if (c->head_dim > 256 || c->rope_dim > c->head_dim || c->rope_dim < 2)
		return pv_errf(err, errlen, "CUDA backend: head dim %d / rope dim %d not supported", c->head_dim, c->rope_dim);
	if (pv_cuda_attention_check(c->n_heads, c->n_kv_heads, c->head_dim, d->n_split, d->kvt, err, errlen)) return -1;
	if (d->state_floats) {
		if (pv_cuda_delta_check(c->lin_k_dim, c->lin_v_dim, c->lin_k_heads, c->lin_v_heads, c->conv_kernel, err, errlen) ||
		    pv_cuda_delta_init(err, errlen))
			return -1;
	}
	*code = PV_E_DEVICE;

	if (pv_cuda_gemv_tma_init(err, errlen)) return -1; /* before any graph capture */
	CU(cudaStreamCreateWithFlags(&d->st, cudaStreamNonBlocking), err, errlen);
	if (c->n_experts && c->shared_inter && d->tu.moe_side) {
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
		cudaGetLastError(); /* the failed allocation must not fail the next call */
		*code = PV_E_NOMEM;
		return pv_errf(err, errlen, "CUDA backend: cannot allocate %.2f GiB for a session of context %d (%.2f GiB free): %s",
		               d->mem_bytes / 1073741824.0, s->n_ctx, fr / 1073741824.0, cudaGetErrorString(e));
	}
	cv = (struct carve){ 0, d->mem };
	layout(s, &cv);
	CU(cudaMemsetAsync(d->mem, 0, d->mem_bytes, d->st), err, errlen);
	/* pinned: step slots for direct launches, the graph's step, the ids, the multi-session step */
	const size_t ids_off = sizeof(struct dstep) * (size_t)(d->n_slots + 1);
	const size_t many_off = (ids_off + sizeof(int) * PV_CUDA_ROWS + 15) / 16 * 16;
	const size_t hb = many_off + sizeof(struct dmany);
	CU(cudaHostAlloc((void**)&d->step_host, hb, cudaHostAllocDefault), err, errlen);
	memset(d->step_host, 0, hb);
	d->gstep_host = d->step_host + d->n_slots;
	d->ids_host = (int*)((unsigned char*)d->step_host + ids_off);
	d->many_host = (struct dmany*)((unsigned char*)d->step_host + many_off);
	/* the table of this session's cache pointers, for the multi-session steps other sessions host */
	{
		const size_t nl = (size_t)c->n_layers;
		void** tab = (void**)pv_xcalloc(2 * nl, sizeof(void*));
		for (size_t l = 0; l < nl; l++) {
			tab[l] = d->kc[l];
			tab[nl + l] = d->vc[l];
		}
		cudaError_t te = cudaMemcpyAsync(d->kvtab, tab, 2 * nl * sizeof(void*), cudaMemcpyHostToDevice, d->st);
		if (te == cudaSuccess) te = cudaStreamSynchronize(d->st); /* tab is pageable and freed next */
		free(tab);
		if (te != cudaSuccess) return pv_cuda_fail(err, errlen, "KV table copy", te);
	}

	/* rope tables: the engine's (engine/rope.c), the CPU's bits; on the session's stream, after
	 * the memset (a non-blocking stream does not wait for the legacy default stream) */
	{
		const size_t nt = (size_t)s->n_ctx * (size_t)(c->rope_dim / 2);
		CU(cudaMemcpyAsync(d->cos, s->rope_cos, nt * sizeof(float), cudaMemcpyHostToDevice, d->st), err, errlen);
		CU(cudaMemcpyAsync(d->sin, s->rope_sin, nt * sizeof(float), cudaMemcpyHostToDevice, d->st), err, errlen);
	}
	CU(cudaStreamSynchronize(d->st), err, errlen);
	size_t fr = 0, tot = 0;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->stats.used_after_init = tot - fr;
	/* what the first calls would otherwise set up (evaluation allocates nothing): the prefill
	 * path's cuBLAS handle and scratch, and the one-row graph */
	pv_prefill_prepare(s);
	if (d->tu.graphs && pv_cuda_capture(s, err, errlen)) return -1;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->stats.used_after_init = tot - fr;
	return 0;
}

int session_init_be(struct pv_session* s, const struct pv_session_params* p, char* err, size_t errlen)
{
	(void)p;
	/* the device kernels read and write f32, f16, bf16 and q8_0 caches (common.cuh "KV cache
	 * element types"; q8_0 in its own per-slice layout, the CPU's values); anything else is
	 * refused before any device call. Head dims the kernels do not take for the type (q8_0, as
	 * f16 and bf16: a multiple of 8 up to 256) are refused by session_init, PV_E_UNSUPPORTED. */
	if (s->cache_type != PV_CACHE_F32 && s->cache_type != PV_CACHE_F16 && s->cache_type != PV_CACHE_BF16 &&
	    s->cache_type != PV_CACHE_Q8_0)
		return pv_errf(err, errlen, "CUDA backend: KV cache type %d is not supported (f32, f16, bf16 and q8_0 are)",
		               s->cache_type),
		       PV_E_UNSUPPORTED;
	int code = PV_E_DEVICE;
	return session_init(s, &code, err, errlen) ? code : PV_OK;
}

/* The recurrent state (every linear layer's S and conv window, state_floats floats) from src to
 * dst, both device memory: one device-to-device copy and a sync (session.c calls these only for
 * models with DeltaNet layers). A failure marks the session failed. */
int state_copy(struct pv_session* s, float* dst, const float* src, const char* what)
{
	struct dsession* d = dsess(s);
	if (d->failed) return PV_E_DEVICE;
	if (!d->state_floats) return PV_OK;
	cudaError_t e = cudaMemcpyAsync(dst, src, d->state_floats * sizeof(float), cudaMemcpyDeviceToDevice, d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.memcpys++;
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), what, e);
		pv_cuda_fail_session(s);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

int state_save(struct pv_session* s, int slot)
{
	struct dsession* d = dsess(s);
	return state_copy(s, d->ckpt + (size_t)slot * d->state_floats, d->state, "checkpoint save");
}

int state_load(struct pv_session* s, int slot)
{
	struct dsession* d = dsess(s);
	return state_copy(s, d->state, d->ckpt + (size_t)slot * d->state_floats, "checkpoint load");
}

/* the state after row `slot` of the last PV_EVAL_SNAPSHOT call becomes the current state */
int snapshot_load(struct pv_session* s, int slot)
{
	struct dsession* d = dsess(s);
	if (!d->snap || slot < 0 || slot >= s->n_snapshots)
		return pv_session_fail(s, PV_E_INVALID, "CUDA backend: snapshot slot %d outside [0, %d)", slot, s->n_snapshots);
	return state_copy(s, d->state, d->snap + (size_t)slot * d->state_floats, "snapshot load");
}

int state_reset(struct pv_session* s)
{
	struct dsession* d = dsess(s);
	if (d->failed) return PV_E_DEVICE;
	if (!d->state_floats) return PV_OK;
	cudaError_t e = cudaMemsetAsync(d->state, 0, d->state_floats * sizeof(float), d->st);
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(s->err, sizeof(s->err), "state reset", e);
		pv_cuda_fail_session(s);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

/* dst's KV rows [0, n) and its state from src's state at n: device-to-device copies on dst's
 * stream after src's stream is idle (a session is used by one thread at a time, but two
 * sessions may be on two threads: src is only read). */
int copy_prefix(struct pv_session* dst, const struct pv_session* src, int n, int from, int index)
{
	struct dsession *d = dsess(dst), *sd = dsess(src);
	const struct pv_config* c = &src->m->cfg;
	/* rows [0, n): contiguous (common.cuh "KV cache element types"); session.c: same types */
	const size_t kvb = (size_t)c->n_kv_heads * pv_kv_hbytes(d->kvt, c->head_dim) * (size_t)n;
	if (d->failed) return PV_E_DEVICE;
	cudaError_t e = cudaStreamSynchronize(sd->st);
	for (int l = 0; l < c->n_layers && e == cudaSuccess && n > 0; l++) {
		if (!d->kc[l]) continue;
		e = cudaMemcpyAsync(d->kc[l], sd->kc[l], kvb, cudaMemcpyDeviceToDevice, d->st);
		if (e == cudaSuccess) e = cudaMemcpyAsync(d->vc[l], sd->vc[l], kvb, cudaMemcpyDeviceToDevice, d->st);
		d->stats.memcpys += 2;
	}
	if (e == cudaSuccess && d->state_floats) {
		if (from == PV_STATE_SNAPSHOT && (!sd->snap || index < 0 || index >= src->n_snapshots))
			return pv_session_fail(dst, PV_E_INVALID, "CUDA backend: the source's snapshot slot %d outside [0, %d)",
			                       index, src->n_snapshots);
		const float* st = from == PV_STATE_CHECKPOINT ? sd->ckpt + (size_t)index * sd->state_floats
		                  : from == PV_STATE_SNAPSHOT ? sd->snap + (size_t)index * sd->state_floats
		                                              : sd->state;
		e = cudaMemcpyAsync(d->state, st, d->state_floats * sizeof(float), cudaMemcpyDeviceToDevice, d->st);
		d->stats.memcpys++;
	}
	if (e == cudaSuccess) e = cudaStreamSynchronize(d->st);
	d->stats.syncs++;
	if (e != cudaSuccess) {
		pv_cuda_fail(dst->err, sizeof(dst->err), "prefix copy", e);
		pv_cuda_fail_session(dst);
		return PV_E_DEVICE;
	}
	return PV_OK;
}

void stats(const struct pv_session* s, struct pv_session_stats* st)
{
	const struct dsession* d = dsess(s);
	const struct pv_cuda_session_stats* c = &d->stats;
	st->graph_launches = c->graph_launches + c->window_launches + c->many_launches;
	st->kernels = c->direct_kernels + c->graph_launches * c->graph_kernels + c->window_kernels + c->many_kernels;
	st->syncs = c->syncs;
	st->memcpys = c->memcpys;
	st->device_bytes = d->mem_bytes + pv_prefill_device_bytes(d->pre);
	st->device_used = c->used_after_init;
	st->fast_ms = c->prefill_gpu_ms;
	st->fast_kernels = c->prefill_kernels;
	st->fast_gemms = c->prefill_gemms;
	if (st->path_last && !strcmp(st->path_last, "fast") && d->tu.prefill == 2) st->path_last = "precise";
	st->fallback = pv_prefill_fallback(d->pre);
}

/* Device bytes of a session with these parameters: layout() over a session that is never made,
 * plus the prefill scratch its creation sets up (pv_prefill_bytes: counted whenever the settings
 * and max_batch call for it; a machine without cuBLAS skips it, so there this is an upper bound). */
uint64_t session_bytes(const struct pv_model* m, const struct pv_session_params* p)
{
	struct pv_session s;
	struct dsession d;
	memset(&s, 0, sizeof s);
	memset(&d, 0, sizeof d);
	s.m = m;
	s.n_ctx = p->n_ctx;
	s.cache_type = p->cache_type;
	s.max_batch = p->max_batch;
	s.chunk_min = p->chunk_min_tokens;
	s.n_ckpt_slots = p->n_checkpoints;
	s.mtp_on = p->mtp && m->cfg.n_mtp_layers > 0 && m->w.mtp; /* as session.c */
	for (int l = 0; l < m->cfg.n_layers; l++)
		if (m->cfg.layer_kind[l] == PV_LAYER_LINEAR) s.state_floats += pv_state_floats_per_layer(&m->cfg);
	s.n_snapshots = s.state_floats ? p->n_snapshots : 0; /* as session.c: attention-only models keep none */
	s.be_state = &d;
	dims(&s, &d);
	struct carve cv = { 0, NULL };
	layout(&s, &cv);
	const uint64_t bytes = cv.off + pv_prefill_bytes(&s);
	free(d.kc);
	free(d.vc);
	free(d.lin_index);
	return bytes;
}

int backend_model_init(struct pv_model* m, const struct pv_model_params* p, char* err, size_t errlen)
{
	const int rc = pv_cuda_model_init(m, p, err, errlen);
	return rc < 0 ? rc : rc ? PV_E_DEVICE : PV_OK;
}

/* the knobs in effect for this model's sessions (tuning.cu's table, read at open) */
int model_knobs(const struct pv_model* m, const struct pv_knob** out)
{
	const struct dmodel* dm = (const struct dmodel*)m->dev;
	*out = dm ? dm->knobs : NULL;
	return dm ? PV_CUDA_N_KNOBS : 0;
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

const struct pv_backend* cuda_table(void);
extern "C" const struct pv_backend* pv_backend_cuda(void) { return cuda_table(); }

int pv_cuda_session_stats(const struct pv_session* s, struct pv_cuda_session_stats* st)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return -1;
	const struct dsession* d = dsess(s);
	*st = d->stats;
	st->session_bytes = d->mem_bytes + pv_prefill_device_bytes(d->pre);
	return 0;
}

const char* pv_cuda_session_error(const struct pv_session* s)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return "not a CUDA session";
	return dsess(s)->failed ? s->err : NULL;
}

int pv_cuda_last_token(const struct pv_session* s)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return -1;
	return dsess(s)->last_token;
}

void pv_cuda_set_graphs(struct pv_session* s, int on)
{
	if (s && s->be == pv_backend_cuda() && s->be_state) dsess(s)->tu.graphs = on != 0;
}

void pv_cuda_set_prefill(struct pv_session* s, int on, int chunk)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return;
	struct dsession* d = dsess(s);
	if (d->st) cudaStreamSynchronize(d->st); /* a chunk change frees the prefill scratch */
	d->tu.prefill = on < 0 ? 0 : on > 2 ? 2 : on;
	d->tu.prefill_chunk = chunk > 0 ? chunk : dmod(s)->tu.prefill_chunk;
	pv_prefill_retune(s);
	pv_prefill_prepare(s); /* set up again now, not at the next call */
}

int pv_cuda_set_knobs(struct pv_session* s, const char* spec, char* err, size_t errlen)
{
	if (!s || s->be != pv_backend_cuda() || !s->be_state) return pv_errf(err, errlen, "not a CUDA session"), PV_E_INVALID;
	struct dsession* d = dsess(s);
	struct pv_cuda_tuning tu = d->tu;
	if (pv_cuda_tuning_apply(&tu, spec, err, errlen)) return PV_E_INVALID;
	/* fixed when the session was made: the attention splits (its memory layout) and the MoE side
	 * stream (created at session creation when on) */
	if (tu.att_split != d->tu.att_split || tu.moe_side != d->tu.moe_side)
		return pv_errf(err, errlen, "CUDA backend: cuda.att_split and cuda.moe_side are fixed per session (open the "
		                            "model with them)"),
		       PV_E_INVALID;
	if (d->failed) return PV_E_DEVICE;
	/* a switch of the decode path (all but the prefill's and cuda.graphs): the graph is captured again */
	struct pv_cuda_tuning a = d->tu, b = tu;
	a.graphs = b.graphs = 0;
	a.prefill = b.prefill = a.prefill_chunk = b.prefill_chunk = 0;
	a.prefill_attn = b.prefill_attn = a.prefill_moe = b.prefill_moe = a.prefill_delta = b.prefill_delta = 0;
	const int recapture = memcmp(&a, &b, sizeof a) != 0;
	if (d->st) cudaStreamSynchronize(d->st); /* the graph and the prefill scratch may be freed */
	d->tu = tu;
	if (recapture && d->gexec) {
		cudaGraphExecDestroy(d->gexec);
		cudaGraphDestroy(d->graph);
		d->gexec = NULL;
		d->graph = NULL;
	}
	if (recapture || !d->tu.graphs || !d->tu.window_graphs) pv_cuda_drop_windows(d);
	if (d->tu.graphs && !d->gexec && pv_cuda_capture(s, err, errlen)) {
		pv_cuda_fail_session(s);
		return PV_E_DEVICE;
	}
	pv_prefill_retune(s);
	pv_prefill_prepare(s);
	return PV_OK;
}


/* ---- the backend table ------------------------------------------------------------------------ */

namespace {

/* in engine/backend.h's order */
const struct pv_backend cuda_backend = {
	"cuda",
	backend_model_init,
	pv_cuda_model_free,
	model_knobs,
	model_device_stats,
	session_bytes,
	session_init_be,
	session_free,
	pv_cuda_forward,
	pv_cuda_forward_many, /* many.cu: every model; 1 for mixed cache types or switches, snapshots, ... */
	state_save,
	state_load,
	snapshot_load,
	state_reset,
	copy_prefix,
	pv_cuda_mtp,
	stats,
	pv_cuda_profile_seam,
	device_info,
	membw,
	NULL, /* profile_rows: the CPU's per-op timing of whole calls; the GPU has pv_session_profile */
};

} // namespace

const struct pv_backend* cuda_table(void) { return &cuda_backend; }
