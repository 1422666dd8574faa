/*
 * backend.c: the CPU backend, the reference every other backend is compared against: host
 * memory for the KV cache, the DeltaNet state, checkpoints, snapshots and scratch (all
 * allocated here, once per session), the thread pool, and forward.c / deltanet.c for the
 * arithmetic.
 */
#include "cpu/state.h"
#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static int maxi(int a, int b) { return a > b ? a : b; }

/* Widths of the per-row scratch buffers, from the config (never from the fixtures' shapes). */
struct widths {
	size_t mix, ffn, o;
};

static struct widths scratch_widths(const struct pv_config* c)
{
	struct widths w;
	int qd = pv_cfg_q_dim(c);
	w.mix = (size_t)maxi(maxi(pv_cfg_conv_dim(c), 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c)), 2 * qd);
	w.ffn = (size_t)maxi(maxi(c->intermediate, c->moe_inter), c->shared_inter);
	w.o = (size_t)maxi(qd, pv_cfg_value_dim(c));
	return w;
}

static int n_layers_of(const struct pv_config* c, int kind)
{
	int k = 0;
	for (int l = 0; l < c->n_layers; l++) k += c->layer_kind[l] == kind;
	return k;
}

static uint64_t cpu_session_bytes(const struct pv_model* m, const struct pv_session_params* p)
{
	const struct pv_config* c = &m->cfg;
	struct widths w = scratch_widths(c);
	uint64_t B = (uint64_t)p->max_batch, H = (uint64_t)c->hidden, f = 0;
	uint64_t lin = (uint64_t)n_layers_of(c, PV_LAYER_LINEAR);
	uint64_t snaps = lin ? (uint64_t)p->n_snapshots : 0;
	f += (uint64_t)n_layers_of(c, PV_LAYER_ATTN) * 2 * (uint64_t)p->n_ctx * pv_cfg_kv_dim(c);
	f += lin * pv_state_floats_per_layer(c) * (1 + (uint64_t)p->n_checkpoints + snaps);
	f += B * (5 * H + 2 * w.mix + (uint64_t)pv_cfg_value_dim(c) + 2 * (uint64_t)pv_cfg_q_dim(c) + w.o +
	          4 * (uint64_t)c->lin_v_heads + 2 * w.ffn);
	f += B * ((uint64_t)c->n_experts + 2 * (uint64_t)c->n_experts_used + (uint64_t)c->n_experts_used * H);
	f += (uint64_t)PV_LM_ROWS * (uint64_t)c->vocab;
	if (p->mtp && c->n_mtp_layers && m->w.mtp) f += 2 * (uint64_t)p->n_ctx * pv_cfg_kv_dim(c) + B * 2 * H;
	f += (uint64_t)p->n_threads * ((uint64_t)p->n_ctx + pv_deltanet_chunk_floats(c));
	uint64_t pool = p->pool ? 0 : (uint64_t)p->n_threads * PV_POOL_SCRATCH;
	return f * 4 + pool;
}

static float* falloc(size_t n, int* fail)
{
	float* p = pv_aligned_alloc((n ? n : 1) * sizeof(float));
	if (!p) *fail = 1;
	else memset(p, 0, n * sizeof(float));
	return p;
}

static void cpu_session_free(struct pv_session* s)
{
	struct pv_cpu_state* st = pv_cpu(s);
	if (!st) return;
	const struct pv_config* c = &s->m->cfg;
	for (int l = 0; l < c->n_layers; l++) {
		if (st->k_cache) free(st->k_cache[l]);
		if (st->v_cache) free(st->v_cache[l]);
		if (st->ssm) free(st->ssm[l]);
	}
	free(st->k_cache);
	free(st->v_cache);
	free(st->ssm);
	free(st->conv);
	free(st->lin_index);
	for (int i = 0; st->ckpt_buf && i < s->n_ckpt_slots; i++) free(st->ckpt_buf[i]);
	free(st->ckpt_buf);
	for (int i = 0; st->snap_buf && i < s->n_snapshots; i++) free(st->snap_buf[i]);
	free(st->snap_buf);
	if (st->ts)
		for (int i = 0; i < s->n_threads; i++) {
			free(st->ts[i].scores);
			free(st->ts[i].chunk);
		}
	free(st->ts);
	float* bufs[] = { st->x,  st->xn,  st->mixer, st->mo,   st->gx,     st->q,     st->ag, st->o,  st->mix,   st->mix2, st->z,
		          st->ab, st->lb,  st->lg,    st->ff_g, st->ff_u,   st->router, st->top_w, st->eo, st->lm, st->mtp_k, st->mtp_v,
		          st->mtp_cat };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
	free(st->top_idx);
	free(st->exp_rows);
	free(st->exp_slot);
	free(st);
	s->be_state = NULL;
}

static int cpu_session_init(struct pv_session* s, const struct pv_session_params* p, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	int fail = 0, L = c->n_layers, B = s->max_batch, H = c->hidden;
	size_t kvd = (size_t)pv_cfg_kv_dim(c), sf = pv_state_floats_per_layer(c);
	struct widths w = scratch_widths(c);

	if (p->pool) {
		s->pool = p->pool;
	} else {
		s->pool = pv_pool_new(s->n_threads);
		s->own_pool = 1;
		if (!s->pool) return pv_errf(err, errlen, "cannot start a thread pool of %d threads", s->n_threads), PV_E_NOMEM;
	}
	s->n_threads = pv_pool_threads(s->pool);

	struct pv_cpu_state* st = pv_xcalloc(1, sizeof(*st));
	s->be_state = st;
	st->k_cache = pv_xcalloc((size_t)L, sizeof(float*));
	st->v_cache = pv_xcalloc((size_t)L, sizeof(float*));
	st->ssm = pv_xcalloc((size_t)L, sizeof(float*));
	st->conv = pv_xcalloc((size_t)L, sizeof(float*));
	st->lin_index = pv_xcalloc((size_t)L, sizeof(int));
	for (int l = 0, k = 0; l < L; l++) {
		st->lin_index[l] = -1;
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			st->k_cache[l] = falloc((size_t)s->n_ctx * kvd, &fail);
			st->v_cache[l] = falloc((size_t)s->n_ctx * kvd, &fail);
		} else {
			/* S and conv state are one allocation so a checkpoint is one copy per layer */
			st->lin_index[l] = k++;
			st->ssm[l] = falloc(sf, &fail);
			if (st->ssm[l]) st->conv[l] = st->ssm[l] + (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim;
		}
	}
	st->ckpt_buf = pv_xcalloc((size_t)s->n_ckpt_slots, sizeof(float*));
	for (int i = 0; i < s->n_ckpt_slots && s->state_floats; i++) st->ckpt_buf[i] = falloc(s->state_floats, &fail);
	st->snap_buf = pv_xcalloc((size_t)(s->n_snapshots ? s->n_snapshots : 1), sizeof(float*));
	for (int i = 0; i < s->n_snapshots; i++) st->snap_buf[i] = falloc(s->state_floats, &fail);

	st->x = falloc((size_t)B * H, &fail);
	st->xn = falloc((size_t)B * H, &fail);
	st->mixer = falloc((size_t)B * H, &fail);
	st->mo = falloc((size_t)B * H, &fail);
	st->gx = falloc((size_t)B * H, &fail);
	st->q = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	st->ag = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	st->o = falloc((size_t)B * w.o, &fail);
	st->mix = falloc((size_t)B * w.mix, &fail);
	st->mix2 = falloc((size_t)B * w.mix, &fail);
	st->z = falloc((size_t)B * maxi(pv_cfg_value_dim(c), 1), &fail);
	st->ab = falloc((size_t)B * 2 * maxi(c->lin_v_heads, 1), &fail);
	st->lb = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	st->lg = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	st->ff_g = falloc((size_t)B * w.ffn, &fail);
	st->ff_u = falloc((size_t)B * w.ffn, &fail);
	st->lm = falloc((size_t)PV_LM_ROWS * c->vocab, &fail);
	if (s->mtp_on) {
		st->mtp_k = falloc((size_t)s->n_ctx * kvd, &fail);
		st->mtp_v = falloc((size_t)s->n_ctx * kvd, &fail);
		st->mtp_cat = falloc((size_t)B * 2 * H, &fail);
	}
	if (c->n_experts) {
		st->router = falloc((size_t)B * c->n_experts, &fail);
		st->top_w = falloc((size_t)B * c->n_experts_used, &fail);
		st->eo = falloc((size_t)B * c->n_experts_used * H, &fail);
		st->top_idx = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->exp_rows = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->exp_slot = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
	}
	st->ts = pv_xcalloc((size_t)s->n_threads, sizeof(*st->ts));
	for (int i = 0; i < s->n_threads; i++) {
		st->ts[i].scores = falloc((size_t)s->n_ctx, &fail);
		st->ts[i].chunk = falloc(pv_deltanet_chunk_floats(c), &fail);
	}
	if (fail) return pv_errf(err, errlen, "out of memory creating a session (n_ctx %d)", s->n_ctx), PV_E_NOMEM;
	return PV_OK;
}

/* The recurrent state of every linear layer, S then conv, to / from a slot buffer. */
static void state_copy(struct pv_session* s, float* buf, int save)
{
	struct pv_cpu_state* st = pv_cpu(s);
	const struct pv_config* c = &s->m->cfg;
	size_t sf = pv_state_floats_per_layer(c), off = 0;
	for (int l = 0; l < c->n_layers; l++) {
		if (c->layer_kind[l] != PV_LAYER_LINEAR) continue;
		if (save) memcpy(buf + off, st->ssm[l], sf * sizeof(float));
		else memcpy(st->ssm[l], buf + off, sf * sizeof(float));
		off += sf;
	}
}

static int cpu_state_save(struct pv_session* s, int slot)
{
	state_copy(s, pv_cpu(s)->ckpt_buf[slot], 1);
	return PV_OK;
}

static int cpu_state_load(struct pv_session* s, int slot)
{
	state_copy(s, pv_cpu(s)->ckpt_buf[slot], 0);
	return PV_OK;
}

static int cpu_snapshot_load(struct pv_session* s, int slot)
{
	state_copy(s, pv_cpu(s)->snap_buf[slot], 0);
	return PV_OK;
}

static int cpu_state_reset(struct pv_session* s)
{
	struct pv_cpu_state* st = pv_cpu(s);
	for (int l = 0; l < s->m->cfg.n_layers; l++)
		if (st->ssm[l]) memset(st->ssm[l], 0, pv_state_floats_per_layer(&s->m->cfg) * sizeof(float));
	return PV_OK;
}

static int cpu_copy_prefix(struct pv_session* dst, const struct pv_session* src, int n, int from, int index)
{
	struct pv_cpu_state *d = pv_cpu(dst), *sr = pv_cpu(src);
	const struct pv_config* c = &src->m->cfg;
	const size_t kvd = (size_t)pv_cfg_kv_dim(c);
	for (int l = 0; l < c->n_layers; l++)
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			memcpy(d->k_cache[l], sr->k_cache[l], sizeof(float) * kvd * (size_t)n);
			memcpy(d->v_cache[l], sr->v_cache[l], sizeof(float) * kvd * (size_t)n);
		}
	if (!src->state_floats) return PV_OK;
	if (from == PV_STATE_CHECKPOINT) {
		state_copy(dst, sr->ckpt_buf[index], 0);
	} else if (from == PV_STATE_SNAPSHOT) {
		state_copy(dst, sr->snap_buf[index], 0);
	} else {
		for (int l = 0; l < c->n_layers; l++)
			if (sr->ssm[l]) memcpy(d->ssm[l], sr->ssm[l], pv_state_floats_per_layer(c) * sizeof(float));
	}
	return PV_OK;
}

static int cpu_forward(struct pv_session* s, const struct pv_step* st)
{
	/* a shared pool serves one session's step at a time; host arithmetic cannot fail */
	if (!s->own_pool) pv_pool_lock(s->pool);
	int bad = pv_cpu_forward(s, st);
	if (!s->own_pool) pv_pool_unlock(s->pool);
	if (bad)
		return pv_session_fail(s, PV_E_NUMERIC,
		                       "the model computed NaN or infinite values at positions %d..%d (corrupt weights? "
		                       "proven info --check scans them)",
		                       st->pos0, st->pos0 + st->n - 1);
	return PV_OK;
}

static int cpu_model_init(struct pv_model* m, const struct pv_model_params* p, char* err, size_t errlen)
{
	if (p && p->knobs && *p->knobs)
		return pv_errf(err, errlen, "backend cpu has no tuning switches (got \"%s\")", p->knobs), PV_E_INVALID;
	return PV_OK;
}

static int cpu_model_knobs(const struct pv_model* m, const struct pv_knob** out)
{
	*out = NULL;
	return 0;
}

const struct pv_backend pv_backend_cpu = {
	.name = "cpu",
	.model_init = cpu_model_init,
	.model_knobs = cpu_model_knobs,
	.session_bytes = cpu_session_bytes,
	.session_init = cpu_session_init,
	.session_free = cpu_session_free,
	.forward = cpu_forward,
	.state_save = cpu_state_save,
	.state_load = cpu_state_load,
	.snapshot_load = cpu_snapshot_load,
	.state_reset = cpu_state_reset,
	.copy_prefix = cpu_copy_prefix,
	.mtp = pv_cpu_mtp,
};
