/*
 * backend.c: the CPU backend, the reference every other backend is compared against: host
 * memory for the KV cache, the DeltaNet state, checkpoints, snapshots and scratch (all
 * allocated here, once per session), the thread pool, and forward.c / deltanet.c for the
 * arithmetic.
 */
#include "cpu/state.h"
#include "model/gguf_load.h"
#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

static int maxi(int a, int b) { return a > b ? a : b; }

extern const struct pv_backend pv_backend_cpu;
#define model_kernels pv_cpu_kernels

/* Widths of the per-row scratch buffers, from the config (never from the fixtures' shapes). */
struct widths {
	size_t mix, o;
	size_t act; /* bytes of the converted activation rows (B rows of the widest matmul input) */
};

static struct widths scratch_widths(const struct pv_config* c)
{
	struct widths w;
	int qd = pv_cfg_q_dim(c);
	w.mix = (size_t)maxi(maxi(pv_cfg_conv_dim(c), 2 * pv_cfg_key_dim(c) + 2 * pv_cfg_value_dim(c)), 2 * qd);
	w.o = (size_t)maxi(qd, pv_cfg_value_dim(c));
	return w;
}

/* The widest input of any matrix the forward pass multiplies by: H, the attention / DeltaNet
 * outputs (o_proj, out_proj), the FFN widths, the MTP head's [2H]. */
static int64_t max_matmul_cols(const struct pv_config* c)
{
	int w = maxi(maxi(2 * c->hidden, pv_cfg_q_dim(c)), pv_cfg_value_dim(c));
	return maxi(w, maxi(maxi(c->intermediate, c->moe_inter), c->shared_inter));
}

/* Rows of the gathered expert inputs (gx): B, or B * k on MoE models (every routed (row,
 * expert) pair at once); floats of ff_g / ff_u: B rows of the widest FFN, or that many expert
 * rows. */
static uint64_t moe_rows(const struct pv_config* c, int B)
{
	return (uint64_t)B * (uint64_t)(c->n_experts ? maxi(c->n_experts_used, 1) : 1);
}
static uint64_t ffn_floats(const struct pv_config* c, int B)
{
	const uint64_t dense = (uint64_t)B * (uint64_t)maxi(c->intermediate, c->shared_inter);
	const uint64_t moe = moe_rows(c, B) * (uint64_t)c->moe_inter;
	return dense > moe ? dense : moe;
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
	/* the KV cache in bytes (its element type), kept apart from the float count f */
	const uint64_t kv_row = (uint64_t)c->n_kv_heads * pv_kv_head_bytes(pv_kv_dtype(p->cache_type), c->head_dim);
	uint64_t kv = (uint64_t)n_layers_of(c, PV_LAYER_ATTN) * 2 * (uint64_t)p->n_ctx * kv_row;
	f += lin * pv_state_floats_per_layer(c) * (1 + (uint64_t)p->n_checkpoints + snaps);
	f += B * (4 * H + 2 * w.mix + (uint64_t)pv_cfg_value_dim(c) + 2 * (uint64_t)pv_cfg_q_dim(c) + w.o +
	          4 * (uint64_t)c->lin_v_heads);
	f += moe_rows(c, (int)B) * H + 2 * ffn_floats(c, (int)B); /* gx, ff_g, ff_u */
	f += B * ((uint64_t)c->n_experts + 2 * (uint64_t)c->n_experts_used + (uint64_t)c->n_experts_used * H);
	f += (uint64_t)PV_LM_ROWS * (uint64_t)c->vocab;
	if (p->mtp && c->n_mtp_layers && m->w.mtp) {
		kv += 2 * (uint64_t)p->n_ctx * kv_row;
		f += B * 2 * H;
	}
	f += (uint64_t)p->n_threads * ((uint64_t)p->n_ctx + pv_deltanet_chunk_floats(c) + 2 * (uint64_t)c->head_dim);
	uint64_t pool = p->pool ? 0 : (uint64_t)p->n_threads * PV_POOL_SCRATCH;
	return f * 4 + kv + pool + pv_mm_act_bytes(p->max_batch, max_matmul_cols(c));
}

static float* falloc(size_t n, int* fail)
{
	float* p = pv_aligned_alloc((n ? n : 1) * sizeof(float));
	if (!p) *fail = 1;
	else memset(p, 0, n * sizeof(float));
	return p;
}

/* n bytes, zeroed, 64-aligned */
static unsigned char* balloc(size_t n, int* fail)
{
	unsigned char* p = pv_aligned_alloc(n ? n : 1);
	if (!p) *fail = 1;
	else memset(p, 0, n);
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
			free(st->ts[i].kv);
		}
	free(st->ts);
	float* bufs[] = { st->x,  st->xn,  st->mixer, st->mo,   st->gx,     st->q,     st->ag, st->o,  st->mix,   st->mix2, st->z,
		          st->ab, st->lb,  st->lg,    st->ff_g, st->ff_u,   st->router, st->top_w, st->eo, st->lm, st->mtp_cat };
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) free(bufs[i]);
	free(st->mtp_k);
	free(st->mtp_v);
	free(st->act);
	free(st->top_idx);
	free(st->exp_rows);
	free(st->exp_slot);
	free(st->slot_pos);
	free(st->exp_off);
	free(st->prods);
	free(st->prof);
	free(st);
	s->be_state = NULL;
}

static int cpu_session_init(struct pv_session* s, const struct pv_session_params* p, char* err, size_t errlen)
{
	const struct pv_config* c = &s->m->cfg;
	int fail = 0, L = c->n_layers, B = s->max_batch, H = c->hidden;
	size_t sf = pv_state_floats_per_layer(c);
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
	st->kv_dtype = pv_kv_dtype(s->cache_type);
	st->kv_head = pv_kv_head_bytes(st->kv_dtype, c->head_dim);
	st->kv_row = (size_t)c->n_kv_heads * st->kv_head;
	st->k_cache = pv_xcalloc((size_t)L, sizeof(unsigned char*));
	st->v_cache = pv_xcalloc((size_t)L, sizeof(unsigned char*));
	st->ssm = pv_xcalloc((size_t)L, sizeof(float*));
	st->conv = pv_xcalloc((size_t)L, sizeof(float*));
	st->lin_index = pv_xcalloc((size_t)L, sizeof(int));
	for (int l = 0, k = 0; l < L; l++) {
		st->lin_index[l] = -1;
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			st->k_cache[l] = balloc((size_t)s->n_ctx * st->kv_row, &fail);
			st->v_cache[l] = balloc((size_t)s->n_ctx * st->kv_row, &fail);
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
	st->gx = falloc((size_t)moe_rows(c, B) * H, &fail);
	st->q = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	st->ag = falloc((size_t)B * pv_cfg_q_dim(c), &fail);
	st->o = falloc((size_t)B * w.o, &fail);
	st->mix = falloc((size_t)B * w.mix, &fail);
	st->mix2 = falloc((size_t)B * w.mix, &fail);
	st->z = falloc((size_t)B * maxi(pv_cfg_value_dim(c), 1), &fail);
	st->ab = falloc((size_t)B * 2 * maxi(c->lin_v_heads, 1), &fail);
	st->lb = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	st->lg = falloc((size_t)B * maxi(c->lin_v_heads, 1), &fail);
	st->ff_g = falloc((size_t)ffn_floats(c, B), &fail);
	st->ff_u = falloc((size_t)ffn_floats(c, B), &fail);
	st->lm = falloc((size_t)PV_LM_ROWS * c->vocab, &fail);
	if (s->mtp_on) {
		st->mtp_k = balloc((size_t)s->n_ctx * st->kv_row, &fail);
		st->mtp_v = balloc((size_t)s->n_ctx * st->kv_row, &fail);
		st->mtp_cat = falloc((size_t)B * 2 * H, &fail);
	}
	if (c->n_experts) {
		st->router = falloc((size_t)B * c->n_experts, &fail);
		st->top_w = falloc((size_t)B * c->n_experts_used, &fail);
		st->eo = falloc((size_t)B * c->n_experts_used * H, &fail);
		st->top_idx = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->exp_rows = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->exp_slot = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->slot_pos = pv_xcalloc((size_t)B * c->n_experts_used, sizeof(int));
		st->exp_off = pv_xcalloc((size_t)c->n_experts + 1, sizeof(int));
		st->prods = pv_xcalloc((size_t)2 * c->n_experts, sizeof(struct pv_mm_prod));
	}
	st->ts = pv_xcalloc((size_t)s->n_threads, sizeof(*st->ts));
	for (int i = 0; i < s->n_threads; i++) {
		st->ts[i].scores = falloc((size_t)s->n_ctx, &fail);
		st->ts[i].chunk = falloc(pv_deltanet_chunk_floats(c), &fail);
		st->ts[i].kv = falloc((size_t)2 * c->head_dim, &fail);
	}
	/* the products: this model's kernels (or the exact numerics, see model_kernels) */
	const struct pv_kernels* k = model_kernels(s->m);
	if (!k) {
		pv_kernels_init(&st->own_k, pv_isa_best(), 1);
		k = &st->own_k;
	}
	const size_t act = pv_mm_act_bytes(B, max_matmul_cols(c));
	st->act = pv_aligned_alloc(act ? act : 64);
	if (!st->act) fail = 1;
	st->mm = (struct pv_mm){ s->pool, k, st->act, act };
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
	/* the engine checked that both caches have one type, so rows are kv_row bytes in both */
	for (int l = 0; l < c->n_layers; l++)
		if (c->layer_kind[l] == PV_LAYER_ATTN) {
			memcpy(d->k_cache[l], sr->k_cache[l], sr->kv_row * (size_t)n);
			memcpy(d->v_cache[l], sr->v_cache[l], sr->kv_row * (size_t)n);
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

/* A step whose output rows are not finite: the session fails (sticky), with the same message
 * whether it ran alone or in a batch. */
static int fail_numeric(struct pv_session* s, const struct pv_step* st)
{
	return pv_session_fail(s, PV_E_NUMERIC,
	                       "the model computed NaN or infinite values at positions %d..%d (corrupt weights? "
	                       "proven info --check scans them)",
	                       st->pos0, st->pos0 + st->n - 1);
}

static int cpu_forward_many(struct pv_session** s, const struct pv_step* st, int count)
{
	int bad[count];
	if (!s[0]->own_pool) pv_pool_lock(s[0]->pool);
	int rc = pv_cpu_forward_many(s, st, count, bad);
	if (!s[0]->own_pool) pv_pool_unlock(s[0]->pool);
	/* a row that is not finite fails its own session, as its one-row step would (stepping it
	 * again alone is no option: its recurrent state has advanced); the others keep their rows */
	for (int i = 0; i < count && rc == 0; i++)
		if (bad[i]) fail_numeric(s[i], &st[i]);
	return rc;
}

static const char* const prof_names[PV_PROF_COUNT] = {
	[PV_PROF_EMBED] = "embedding",          [PV_PROF_NORM] = "norms + residual",
	[PV_PROF_MM_QKV] = "matmul attn q/k/v", [PV_PROF_ROPE] = "q/k norm, rope, kv store",
	[PV_PROF_ATTN] = "attention",           [PV_PROF_MM_O] = "matmul attn out",
	[PV_PROF_MM_DIN] = "matmul deltanet in", [PV_PROF_DCONV] = "deltanet conv",
	[PV_PROF_DELTA] = "deltanet recurrence", [PV_PROF_DOTHER] = "deltanet norms/gates",
	[PV_PROF_MM_DOUT] = "matmul deltanet out", [PV_PROF_MM_GATEUP] = "matmul ffn gate/up",
	[PV_PROF_ACT] = "swiglu",               [PV_PROF_MM_DOWN] = "matmul ffn down",
	[PV_PROF_ROUTER] = "moe router + top-k", [PV_PROF_MM_EXP] = "matmul moe experts",
	[PV_PROF_MOE_OTHER] = "moe gather/sum", [PV_PROF_LM_HEAD] = "lm head + argmax",
};

/* on: start accumulating (allocates the accumulator; the one allocation outside session_init,
 * a diagnostic's); off: the groups that occurred into out, per row, and stop. */
static int cpu_profile_rows(struct pv_session* s, int on, struct pv_profile* out)
{
	struct pv_cpu_state* st = pv_cpu(s);
	if (on) {
		if (!st->prof && !(st->prof = calloc(1, sizeof(*st->prof))))
			return pv_session_fail(s, PV_E_NOMEM, "profile: out of memory");
		memset(st->prof, 0, sizeof(*st->prof));
		return PV_OK;
	}
	if (!st->prof) return pv_session_fail(s, PV_E_INVALID, "profile: stop without start");
	const struct pv_cpu_prof* p = st->prof;
	const double rows = p->rows > 0 ? (double)p->rows : 1.0;
	for (int g = 0; g < PV_PROF_COUNT && out->n < PV_PROFILE_GROUPS; g++) {
		if (!p->calls[g]) continue;
		out->name[out->n] = prof_names[g];
		out->us[out->n] = p->s[g] * 1e6 / rows;
		out->kernels[out->n] = (int)(p->calls[g] / rows + 0.5);
		out->total_us += out->us[out->n];
		out->n++;
	}
	free(st->prof);
	st->prof = NULL;
	return PV_OK;
}

static int cpu_forward(struct pv_session* s, const struct pv_step* st)
{
	/* a shared pool serves one session's step at a time; host arithmetic cannot fail */
	if (!s->own_pool) pv_pool_lock(s->pool);
	int bad = pv_cpu_forward(s, st);
	if (!s->own_pool) pv_pool_unlock(s->pool);
	return bad ? fail_numeric(s, st) : PV_OK;
}

/* ---- the model: kernel choice (knobs) and repacked weights ------------------------------- */

enum { KNOB_ISA, KNOB_EXACT, KNOB_MOE_GROUP, N_KNOBS };

/* What the CPU backend keeps per model (m->dev). */
struct cpu_model {
	struct pv_kernels k;
	struct pv_knob knobs[N_KNOBS];
};

/* The model's kernels when it was opened on this backend; NULL otherwise (a model opened on
 * another backend and run here, as tests do: the session then takes the exact numerics). */
const struct pv_kernels* pv_cpu_kernels(const struct pv_model* m)
{
	return m->backend == &pv_backend_cpu && m->dev && m->dev_owner == &pv_backend_cpu ? &((const struct cpu_model*)m->dev)->k : NULL;
}

/* Every matrix the forward pass multiplies by (pv_mm), for repacking. */
static int collect_layer(const struct pv_layer* L, const struct pv_tensor** out, int n, int E)
{
	const struct pv_tensor* t[] = { &L->wq,       &L->wk,      &L->wv,       &L->wo,           &L->in_qkv,
		                        &L->in_z,     &L->in_b,    &L->in_a,     &L->in_qkvz,      &L->in_ba,
		                        &L->out_proj, &L->ffn_gate, &L->ffn_up, &L->ffn_down,    &L->router,
		                        &L->shexp.gate, &L->shexp.up, &L->shexp.down };
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (t[i]->data) out[n++] = t[i];
	for (int e = 0; L->experts && e < E; e++) {
		out[n++] = &L->experts[e].gate;
		out[n++] = &L->experts[e].up;
		out[n++] = &L->experts[e].down;
	}
	return n;
}

static int pack_model(struct pv_model* m, struct pv_kernels* k)
{
	const struct pv_config* c = &m->cfg;
	const int per_layer = 18 + 3 * c->n_experts;
	const int cap = (c->n_layers + (m->w.mtp ? c->n_mtp_layers : 0)) * per_layer + 2;
	const struct pv_tensor** list = malloc(sizeof(*list) * (size_t)cap);
	if (!list) return -1;
	int n = 0;
	for (int l = 0; l < c->n_layers; l++) n = collect_layer(&m->w.layers[l], list, n, c->n_experts);
	for (int i = 0; m->w.mtp && i < c->n_mtp_layers; i++) {
		if (m->w.mtp[i].fc.data) list[n++] = &m->w.mtp[i].fc;
		n = collect_layer(&m->w.mtp[i].layer, list, n, c->n_experts);
	}
	if (m->w.lm_head.data) list[n++] = &m->w.lm_head;
	/* a GGUF's repacked matrices: their file pages leave the resident set as they are packed
	 * (the panels are what the products read), so the weights are resident once, not twice */
	const void* map = NULL;
	size_t len = 0;
	if (m->gguf && pv_gguf_model_mapping(m->gguf, &map, &len)) {
		k->release_lo = map;
		k->release_hi = (const unsigned char*)map + len;
	}
	int rc = pv_kernels_pack(k, (const struct pv_tensor* const*)list, n);
	free(list);
	if (!rc && map) pv_kernels_release_sources(k, map, len); /* the pages items shared */
	return rc;
}

/* A knob's value from text: an integer, or for cpu.isa a kernel set's name. */
static int knob_value(int which, const char* v, size_t len, int* out)
{
	char buf[32];
	if (len == 0 || len >= sizeof buf) return -1;
	memcpy(buf, v, len);
	buf[len] = 0;
	if (which == KNOB_ISA)
		for (int i = PV_ISA_GENERIC; i <= PV_ISA_AVX512; i++)
			if (!strcmp(buf, pv_isa_name(i))) return *out = i, 0;
	char* end;
	long x = strtol(buf, &end, 10);
	if (*end || x < 0 || x > (which == KNOB_ISA ? PV_ISA_AVX512 : 1)) return -1;
	*out = (int)x;
	return 0;
}

static int cpu_model_init(struct pv_model* m, const struct pv_model_params* p, char* err, size_t errlen)
{
	static const char* names[N_KNOBS] = { "cpu.isa", "cpu.exact_activations", "cpu.moe_group" };
	static const char* envs[N_KNOBS] = { "PV_CPU_ISA", "PV_CPU_EXACT", "PV_CPU_MOE_GROUP" };
	static const char* docs[N_KNOBS] = {
		"CPU kernel set: 0 generic, 1 avx2, 2 avx512 (default and ceiling: the best this CPU runs)",
		"1: f32 activations, every product the f32 dot product of the dequantized weights; 0: activations "
		"converted once per row (Q8 blocks, bf16) for integer / bf16 dot products (default 0 with avx2, avx512)",
		"MoE rows of one call: 1 each selected expert runs once over every row that chose it (default); 0 each "
		"row's experts run on their own (the comparison arm: the same bits, more weight reads)",
	};
	int val[N_KNOBS] = { pv_isa_best(), -1, 1 }, set[N_KNOBS] = { 0, 0, 0 };
	/* defaults, then the environment, then the knobs string */
	for (int i = 0; i < N_KNOBS; i++) {
		const char* e = getenv(envs[i]);
		if (e && *e) {
			if (knob_value(i, e, strlen(e), &val[i]))
				return pv_errf(err, errlen, "%s=%s: not a value of %s", envs[i], e, names[i]), PV_E_INVALID;
			set[i] = 1;
		}
	}
	for (const char* q = p && p->knobs ? p->knobs : ""; *q;) {
		const char* end = strchr(q, ',');
		size_t len = end ? (size_t)(end - q) : strlen(q);
		const char* eq = memchr(q, '=', len);
		int which = -1;
		for (int i = 0; i < N_KNOBS && eq; i++)
			if ((size_t)(eq - q) == strlen(names[i]) && !memcmp(q, names[i], strlen(names[i]))) which = i;
		if (which < 0)
			return pv_errf(err, errlen, "backend cpu: unknown knob \"%.*s\" (cpu.isa, cpu.exact_activations, cpu.moe_group)", (int)len, q),
			       PV_E_INVALID;
		if (knob_value(which, eq + 1, len - (size_t)(eq + 1 - q), &val[which]))
			return pv_errf(err, errlen, "backend cpu: bad value in \"%.*s\"", (int)len, q), PV_E_INVALID;
		set[which] = 1;
		q += len + (end ? 1 : 0);
	}
	struct cpu_model* cm = pv_xcalloc(1, sizeof *cm);
	pv_kernels_init(&cm->k, val[KNOB_ISA], 1);
	/* the fast numerics are the default where their kernels exist (AVX2, AVX-512 VNNI) */
	const int exact_def = cm->k.isa >= PV_ISA_AVX2 ? 0 : 1;
	pv_kernels_init(&cm->k, val[KNOB_ISA], set[KNOB_EXACT] ? val[KNOB_EXACT] : exact_def);
	const int isa_def = pv_isa_best();
	cm->k.moe_group = val[KNOB_MOE_GROUP];
	const int vals[N_KNOBS] = { cm->k.isa, cm->k.exact, cm->k.moe_group }, defs[N_KNOBS] = { isa_def, exact_def, 1 };
	for (int i = 0; i < N_KNOBS; i++) cm->knobs[i] = (struct pv_knob){ names[i], envs[i], vals[i], defs[i], docs[i] };
	if (pack_model(m, &cm->k)) {
		free(cm);
		return pv_errf(err, errlen, "out of memory repacking the weights for the CPU kernels"), PV_E_NOMEM;
	}
	m->dev = cm;
	m->dev_owner = &pv_backend_cpu;
	return PV_OK;
}

static void cpu_model_free(struct pv_model* m)
{
	struct cpu_model* cm = m->dev;
	if (!cm) return;
	pv_kernels_free(&cm->k);
	free(cm);
	m->dev = NULL;
	m->dev_owner = NULL;
}

static int cpu_model_knobs(const struct pv_model* m, const struct pv_knob** out)
{
	const struct cpu_model* cm = m->dev;
	*out = cm ? cm->knobs : NULL;
	return cm ? N_KNOBS : 0;
}

const struct pv_backend pv_backend_cpu = {
	.name = "cpu",
	.model_init = cpu_model_init,
	.model_free = cpu_model_free,
	.model_knobs = cpu_model_knobs,
	.session_bytes = cpu_session_bytes,
	.session_init = cpu_session_init,
	.session_free = cpu_session_free,
	.forward = cpu_forward,
	.forward_many = cpu_forward_many,
	.state_save = cpu_state_save,
	.state_load = cpu_state_load,
	.snapshot_load = cpu_snapshot_load,
	.state_reset = cpu_state_reset,
	.copy_prefix = cpu_copy_prefix,
	.mtp = pv_cpu_mtp,
	.profile_rows = cpu_profile_rows,
};
