/*
 * upload.cu: the model's weights on the GPU. Every matrix is copied once, in its stored type,
 * into one device allocation (the arena); the f32 vectors (norms, biases) follow. Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1 and Q6_K blocks are split into planes on the way (common.cuh, struct dmat) so the kernels'
 * loads are aligned; no value changes. Copies go through two pinned staging buffers so the host
 * fills one while the other is in flight.
 */
#include "common.cuh"
#include "units.cuh"

#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "quant/quant.h"
}

int pv_cuda_fail(char* err, size_t errlen, const char* what, cudaError_t e)
{
	return pv_errf(err, errlen, "CUDA backend: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Selects device 0. (The tuning switches are per model: tuning.cu, read by pv_cuda_model_init.) */
int pv_cuda_select_device(char* err, size_t errlen)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess) return pv_errf(err, errlen, "CUDA backend: no CUDA device (%s)", cudaGetErrorString(e));
	if (n <= 0) return pv_errf(err, errlen, "CUDA backend: no CUDA device");
	CU(cudaSetDevice(0), err, errlen);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- layouts ------------------------------------------------------------------------------ */

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

int pv_cuda_plan_mat(const struct pv_tensor* t, struct dmat* d, char* err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	d->type = t->type;
	d->rows = t->rows;
	d->cols = t->cols;
	const int64_t nb32 = t->cols / 32, nb256 = t->cols / 256;
	switch (t->type) {
	case PV_F32:
	case PV_F16:
	case PV_BF16:
	case PV_Q4_K:
	case PV_Q5_K:
		d->n_planes = 1;
		d->stride[0] = pv_dtype_row_bytes(t->type, t->cols);
		break;
	case PV_Q8_0:
		d->n_planes = 2;
		d->stride[0] = (size_t)nb32 * 32;
		d->stride[1] = (size_t)nb32 * 2;
		break;
	case PV_Q4_0:
		d->n_planes = 2;
		d->stride[0] = (size_t)nb32 * 16;
		d->stride[1] = (size_t)nb32 * 2;
		break;
	case PV_Q4_1:
		d->n_planes = 2;
		d->stride[0] = (size_t)nb32 * 16;
		d->stride[1] = (size_t)nb32 * 4;
		break;
	case PV_Q5_0:
	case PV_Q5_1:
		d->n_planes = 3;
		d->stride[0] = (size_t)nb32 * 16;
		d->stride[1] = (size_t)nb32 * 4;
		d->stride[2] = (size_t)nb32 * (t->type == PV_Q5_0 ? 2 : 4);
		break;
	case PV_Q6_K:
		d->n_planes = 3;
		d->stride[0] = (size_t)nb256 * 192;
		d->stride[1] = (size_t)nb256 * 16;
		d->stride[2] = (size_t)nb256 * 2;
		break;
	default:
		return pv_errf(err, errlen,
		               "CUDA backend: weight type %s has no CUDA kernel (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)",
		               pv_dtype_name(t->type));
	}
	if (t->rows <= 0 || t->cols <= 0 || !d->stride[0] || pv_dtype_row_bytes(t->type, t->cols) == 0)
		return pv_errf(err, errlen, "CUDA backend: bad %s matrix [%lld, %lld]", pv_dtype_name(t->type), (long long)t->rows,
		               (long long)t->cols);
	for (int p = 0; p < d->n_planes; p++) d->bytes += align256(d->stride[p] * (size_t)t->rows);
	return 0;
}

/* ---- staging ------------------------------------------------------------------------------ */

#define STAGE_BYTES ((size_t)64 << 20)

struct pv_stager {
	cudaStream_t st;
	size_t cap; /* bytes per buffer */
	unsigned char* buf[2];
	cudaEvent_t ev[2];
	int used[2];
	int cur;
	/* progress */
	void (*progress)(void* user, double fraction); /* pv_model_params.progress, or NULL */
	void* progress_user;
	uint64_t done, total;
	int last_pct;
	double t0;
};

int pv_stager_new(struct pv_stager** out, cudaStream_t st, size_t bytes, char* err, size_t errlen)
{
	struct pv_stager* sg = (struct pv_stager*)calloc(1, sizeof(*sg));
	if (!sg) return pv_errf(err, errlen, "out of memory");
	sg->st = st;
	sg->cap = bytes < STAGE_BYTES ? (bytes > 4096 ? bytes : 4096) : STAGE_BYTES;
	sg->last_pct = -1;
	sg->t0 = now_s();
	*out = sg;
	for (int i = 0; i < 2; i++) {
		CU(cudaHostAlloc((void**)&sg->buf[i], sg->cap, cudaHostAllocDefault), err, errlen);
		CU(cudaEventCreateWithFlags(&sg->ev[i], cudaEventDisableTiming), err, errlen);
	}
	return 0;
}

void pv_stager_free(struct pv_stager* sg)
{
	if (!sg) return;
	for (int i = 0; i < 2; i++) {
		if (sg->ev[i]) cudaEventDestroy(sg->ev[i]);
		if (sg->buf[i]) cudaFreeHost(sg->buf[i]);
	}
	free(sg);
}

static void progress(struct pv_stager* sg, int final)
{
	if (!sg->progress || !sg->total) return;
	int pct = (int)(100.0 * (double)sg->done / (double)sg->total);
	if (pct == sg->last_pct && !final) return;
	sg->last_pct = pct;
	sg->progress(sg->progress_user, pct / 100.0);
}

int pv_stager_upload_mat(struct pv_stager* sg, const struct pv_tensor* t, const struct dmat* d, int64_t row0, char* err,
                         size_t errlen)
{
	const size_t src_row = pv_dtype_row_bytes(t->type, t->cols);
	for (int p = 0; p < d->n_planes; p++) {
		const size_t stride = d->stride[p];
		int64_t per = (int64_t)(sg->cap / stride);
		if (per < 1) return pv_errf(err, errlen, "CUDA backend: a row of %zu bytes exceeds the staging buffer", stride);
		for (int64_t r0 = 0; r0 < t->rows; r0 += per) {
			const int64_t nr = t->rows - r0 < per ? t->rows - r0 : per;
			const int c = sg->cur;
			if (sg->used[c]) CU(cudaEventSynchronize(sg->ev[c]), err, errlen);
			for (int64_t r = 0; r < nr; r++)
				pv_units::extract_plane(d->type, d->cols, d->stride[0], p, (const unsigned char*)t->data + (size_t)(r0 + r) * src_row,
				                        sg->buf[c] + (size_t)r * stride);
			CU(cudaMemcpyAsync(d->p[p] + (size_t)(row0 + r0) * stride, sg->buf[c], (size_t)nr * stride, cudaMemcpyHostToDevice, sg->st),
			   err, errlen);
			CU(cudaEventRecord(sg->ev[c], sg->st), err, errlen);
			sg->used[c] = 1;
			sg->cur ^= 1;
			sg->done += (uint64_t)nr * stride;
			progress(sg, 0);
		}
	}
	return 0;
}

int pv_stager_finish(struct pv_stager* sg, char* err, size_t errlen)
{
	CU(cudaStreamSynchronize(sg->st), err, errlen);
	progress(sg, 1);
	return 0;
}

/* ---- the model ---------------------------------------------------------------------------- */

/* One weight to upload: a matrix (dst a dmat) or an f32 vector (dst a float pointer). */
struct item {
	const struct pv_tensor* t;  /* matrix ...                                   */
	struct dmat* d;
	const struct pv_expert* ex; /* ... or n_ex experts' field `which` stacked    */
	int n_ex, which;            /*     (0 gate, 1 up, 2 down)                    */
	struct pv_tensor stk;       /*     the stacked shape, for planning           */
	double share;               /* of the bytes one decode token reads (k / E)   */
	struct pv_tensor vec;       /* ... or a vector viewed as a 1-row f32 matrix  */
	const float** vdst;
	struct dmat vd;
	int per_token;              /* read by every decode token                   */
};

struct plan {
	struct item* it;
	int n, cap;
};

static struct item* grow(struct plan* pl)
{
	if (pl->n == pl->cap) {
		pl->cap = pl->cap ? 2 * pl->cap : 64;
		struct item* it = (struct item*)realloc(pl->it, sizeof(struct item) * (size_t)pl->cap);
		if (!it) pv_abort(__FILE__, __LINE__, "out of memory");
		pl->it = it;
	}
	struct item* i = &pl->it[pl->n++];
	memset(i, 0, sizeof(*i));
	return i;
}

static void add_mat(struct plan* pl, const struct pv_tensor* t, struct dmat* d, int per_token)
{
	d->type = -1;
	if (!t->data) return;
	struct item* i = grow(pl);
	i->t = t;
	i->d = d;
	i->per_token = per_token;
	i->share = per_token;
}

static void add_vec(struct plan* pl, const float* v, int64_t n, const float** dst)
{
	*dst = NULL;
	if (!v) return;
	struct item* i = grow(pl);
	i->vec.data = v;
	i->vec.type = PV_F32;
	i->vec.rows = 1;
	i->vec.cols = n;
	i->vdst = dst; /* t and d are &vec and &vd (see T() and D(): the array may move while it grows) */
	i->per_token = 1;
	i->share = 1;
}

static const struct pv_tensor* ex_field(const struct pv_expert* e, int which)
{
	return which == 0 ? &e->gate : which == 1 ? &e->up : &e->down;
}

/* n experts' `which` matrices as one stacked matrix; all must share type and shape */
static int add_experts(struct plan* pl, const struct pv_expert* ex, int n, int which, int k, struct dmat* d, char* err,
                       size_t errlen)
{
	d->type = -1;
	const struct pv_tensor* f = ex_field(&ex[0], which);
	for (int e = 0; e < n; e++) {
		const struct pv_tensor* g = ex_field(&ex[e], which);
		if (!g->data || g->type != f->type || g->rows != f->rows || g->cols != f->cols)
			return pv_errf(err, errlen, "CUDA backend: expert %d's matrices differ in type or shape from expert 0's", e);
	}
	struct item* i = grow(pl);
	i->d = d;
	i->ex = ex;
	i->n_ex = n;
	i->which = which;
	i->stk = *f;
	i->stk.rows = f->rows * n;
	i->share = (double)k / n;
	return 0;
}

static const struct pv_tensor* T(struct item* i) { return i->vdst ? &i->vec : i->ex ? &i->stk : i->t; }
static struct dmat* D(struct item* i) { return i->vdst ? &i->vd : i->d; }

/* Plans one decoder layer's weights (kind: PV_LAYER_ATTN or PV_LAYER_LINEAR; moe: routed
 * experts or a dense SwiGLU); absent matrices get type -1. 0, or -1 with a message. */
static int plan_layer(struct plan* pl, const struct pv_config* c, const struct pv_layer* L, struct dlayer* DL, int kind,
                      int moe, char* err, size_t errlen)
{
	const int qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	add_vec(pl, L->attn_norm, c->hidden, &DL->attn_norm);
	add_vec(pl, L->ffn_norm, c->hidden, &DL->ffn_norm);
	struct dmat* all[] = { &DL->wq, &DL->wk, &DL->wv, &DL->wo, &DL->gate, &DL->up, &DL->down, &DL->in_qkv, &DL->in_z,
		               &DL->in_b, &DL->in_a, &DL->in_qkvz, &DL->in_ba, &DL->out_proj };
	for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) all[k]->type = -1;
	if (kind == PV_LAYER_ATTN) {
		add_mat(pl, &L->wq, &DL->wq, 1);
		add_mat(pl, &L->wk, &DL->wk, 1);
		add_mat(pl, &L->wv, &DL->wv, 1);
		add_mat(pl, &L->wo, &DL->wo, 1);
		add_vec(pl, L->bq, qd, &DL->bq);
		add_vec(pl, L->bk, kvd, &DL->bk);
		add_vec(pl, L->bv, kvd, &DL->bv);
		add_vec(pl, L->q_norm, c->head_dim, &DL->q_norm);
		add_vec(pl, L->k_norm, c->head_dim, &DL->k_norm);
	} else {
		add_mat(pl, &L->in_qkv, &DL->in_qkv, 1);
		add_mat(pl, &L->in_z, &DL->in_z, 1);
		add_mat(pl, &L->in_b, &DL->in_b, 1);
		add_mat(pl, &L->in_a, &DL->in_a, 1);
		add_mat(pl, &L->in_qkvz, &DL->in_qkvz, 1);
		add_mat(pl, &L->in_ba, &DL->in_ba, 1);
		add_mat(pl, &L->out_proj, &DL->out_proj, 1);
		add_vec(pl, L->conv_w, (int64_t)pv_cfg_conv_dim(c) * c->conv_kernel, &DL->conv_w);
		add_vec(pl, L->ssm_a, c->lin_v_heads, &DL->ssm_a);
		add_vec(pl, L->dt_bias, c->lin_v_heads, &DL->dt_bias);
		add_vec(pl, L->lin_norm, c->lin_v_dim, &DL->lin_norm);
	}
	struct dmat* moe_m[] = { &DL->router, &DL->ex_gate, &DL->ex_up, &DL->ex_down, &DL->sh_gate, &DL->sh_up, &DL->sh_down };
	for (size_t k = 0; k < sizeof moe_m / sizeof moe_m[0]; k++) moe_m[k]->type = -1;
	if (!moe) {
		add_mat(pl, &L->ffn_gate, &DL->gate, 1);
		add_mat(pl, &L->ffn_up, &DL->up, 1);
		add_mat(pl, &L->ffn_down, &DL->down, 1);
		return 0;
	}
	add_mat(pl, &L->router, &DL->router, 1);
	if (add_experts(pl, L->experts, c->n_experts, 0, c->n_experts_used, &DL->ex_gate, err, errlen) ||
	    add_experts(pl, L->experts, c->n_experts, 1, c->n_experts_used, &DL->ex_up, err, errlen) ||
	    add_experts(pl, L->experts, c->n_experts, 2, c->n_experts_used, &DL->ex_down, err, errlen))
		return -1;
	if (L->shexp.gate.data) {
		add_mat(pl, &L->shexp.gate, &DL->sh_gate, 1);
		add_mat(pl, &L->shexp.up, &DL->sh_up, 1);
		add_mat(pl, &L->shexp.down, &DL->sh_down, 1);
		add_vec(pl, L->shexp_gate, c->hidden, &DL->sh_gate_w);
	} else {
		DL->sh_gate_w = NULL;
	}
	return 0;
}

static void model_free(struct pv_model* m)
{
	struct dmodel* dm = (struct dmodel*)m->dev;
	if (!dm) return;
	if (dm->arena) cudaFree(dm->arena);
	free(dm->layers);
	free(dm);
	m->dev = NULL;
	m->dev_owner = NULL;
}

void pv_cuda_model_free(struct pv_model* m) { model_free(m); }

int pv_cuda_model_init(struct pv_model* m, const struct pv_model_params* params, char* err, size_t errlen)
{
	const struct pv_config* c = &m->cfg;
	if (m->dev) return pv_errf(err, errlen, "CUDA backend: the model is already on a device"), PV_E_INVALID;
	/* the knobs first: a bad one fails the open before anything is uploaded */
	struct pv_cuda_tuning tu;
	struct pv_knob knobs[PV_CUDA_N_KNOBS];
	if (pv_cuda_tuning_read(&tu, knobs, params ? params->knobs : NULL, err, errlen)) return PV_E_INVALID;
	if (pv_cuda_select_device(err, errlen)) return PV_E_DEVICE;
	struct dmodel* dm = (struct dmodel*)pv_xcalloc(1, sizeof(*dm));
	dm->tu = tu;
	memcpy(dm->knobs, knobs, sizeof knobs);
	dm->layers = (struct dlayer*)pv_xcalloc((size_t)c->n_layers, sizeof(struct dlayer));
	struct plan pl = { NULL, 0, 0 };
	struct pv_stager* sg = NULL;
	cudaStream_t st = NULL;
	int rc = PV_E_DEVICE;
	size_t fr = 0, tot = 0;
	double t0 = now_s();
	int tied = 0;

	if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) dm->st.used_before = tot - fr;
	add_mat(&pl, &m->w.embed, &dm->embed, 0);
	add_vec(&pl, m->w.final_norm, c->hidden, &dm->final_norm);
	for (int l = 0; l < c->n_layers; l++) {
		if (plan_layer(&pl, c, &m->w.layers[l], &dm->layers[l], c->layer_kind[l], c->layer_moe[l], err, errlen)) {
			rc = PV_E_UNSUPPORTED;
			goto fail;
		}
	}
	/* the MTP head (mtp.cu) when the model has one: a full-attention layer with the model's FFN
	 * kind, as the CPU runs it (cpu/mtp.c); read by draft calls only, so not in bytes_per_token */
	if (m->w.mtp && c->n_mtp_layers > 0) {
		const struct pv_mtp* h = m->w.mtp;
		struct dmtp* D = &dm->mtp;
		const int first = pl.n;
		D->on = 1;
		add_mat(&pl, &h->fc, &D->fc, 0);
		add_vec(&pl, h->norm_emb, c->hidden, &D->norm_emb);
		add_vec(&pl, h->norm_hidden, c->hidden, &D->norm_hidden);
		add_vec(&pl, h->norm_out, c->hidden, &D->norm_out);
		if (plan_layer(&pl, c, &h->layer, &D->layer, PV_LAYER_ATTN, c->n_experts > 0, err, errlen)) {
			rc = PV_E_UNSUPPORTED;
			goto fail;
		}
		for (int i = first; i < pl.n; i++) {
			pl.it[i].per_token = 0;
			pl.it[i].share = 0;
		}
	}
	tied = m->w.lm_head.data == m->w.embed.data;
	if (!tied) add_mat(&pl, &m->w.lm_head, &dm->lm_head, 1);

	/* sizes, one arena */
	for (int i = 0; i < pl.n; i++) {
		if (pv_cuda_plan_mat(T(&pl.it[i]), D(&pl.it[i]), err, errlen)) {
			rc = PV_E_UNSUPPORTED; /* a weight type without a kernel */
			goto fail;
		}
		dm->arena_bytes += D(&pl.it[i])->bytes;
	}
	{
		cudaError_t e = cudaMalloc((void**)&dm->arena, dm->arena_bytes);
		if (e != cudaSuccess) {
			pv_errf(err, errlen, "CUDA backend: cannot allocate %.2f GiB for the weights (%.2f GiB free of %.2f): %s",
			        dm->arena_bytes / 1073741824.0, fr / 1073741824.0, tot / 1073741824.0, cudaGetErrorString(e));
			dm->arena = NULL;
			rc = PV_E_NOMEM;
			goto fail;
		}
	}
	for (int i = 0; i < pl.n; i++) {
		struct dmat* d = D(&pl.it[i]);
		for (int p = 0; p < d->n_planes; p++) {
			d->p[p] = dm->arena + dm->arena_used;
			dm->arena_used += align256(d->stride[p] * (size_t)d->rows);
		}
		if (pl.it[i].vdst) *pl.it[i].vdst = (const float*)d->p[0];
		dm->st.bytes_per_token += (uint64_t)(pl.it[i].share * (double)d->bytes);
	}
	if (tied) {
		dm->lm_head = dm->embed;
		dm->st.bytes_per_token += dm->embed.bytes;
	}
	dm->st.weight_bytes = dm->arena_bytes;

	if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
		pv_errf(err, errlen, "CUDA backend: cannot create a stream");
		st = NULL;
		goto fail;
	}
	if (pv_stager_new(&sg, st, dm->arena_bytes, err, errlen)) goto fail;
	sg->progress = params ? params->progress : NULL;
	sg->progress_user = params ? params->progress_user : NULL;
	sg->total = dm->arena_bytes;
	for (int i = 0; i < pl.n; i++) {
		struct item* it = &pl.it[i];
		if (!it->ex) {
			if (pv_stager_upload_mat(sg, T(it), D(it), 0, err, errlen)) goto fail;
			continue;
		}
		for (int e = 0; e < it->n_ex; e++) {
			const struct pv_tensor* f = ex_field(&it->ex[e], it->which);
			if (pv_stager_upload_mat(sg, f, it->d, (int64_t)e * f->rows, err, errlen)) goto fail;
		}
	}
	if (pv_stager_finish(sg, err, errlen)) goto fail;
	dm->st.upload_s = now_s() - t0;
	if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) dm->st.used_after = tot - fr;
	if (params && params->verbose)
		pv_log(PV_LOG_INFO, "cuda: %.2f GiB of weights in %.2f s (%.2f GB/s); GPU memory in use %.2f GiB (was %.2f)",
		        dm->arena_bytes / 1073741824.0, dm->st.upload_s, dm->arena_bytes / dm->st.upload_s / 1e9,
		        dm->st.used_after / 1073741824.0, dm->st.used_before / 1073741824.0);
	m->dev = dm;
	m->backend = pv_backend_cuda();
	m->dev_owner = m->backend;
	rc = PV_OK;
	dm = NULL;
fail:
	pv_stager_free(sg);
	if (st) cudaStreamDestroy(st);
	free(pl.it);
	if (dm) {
		if (dm->arena) cudaFree(dm->arena);
		free(dm->layers);
		free(dm);
	}
	return rc;
}

int pv_cuda_model_stats(const struct pv_model* m, struct pv_cuda_model_stats* st)
{
	const struct dmodel* dm = (const struct dmodel*)m->dev;
	if (!dm || m->backend != pv_backend_cuda()) return -1;
	*st = dm->st;
	return 0;
}
