/*
 * session.c: pv_session, the backend-neutral half: parameters, the token history, the eval
 * driver (checks, the split of a call into steps of at most B rows, which rows of each step get
 * which outputs), checkpoints, per-row snapshots, truncation, sync and prefix copies. The
 * backend (m->backend, attached by api.c) holds the memory and does the arithmetic.
 */
#include "engine/backend.h"
#include "engine/session.h"
#include "base/log.h"
#include "base/pool.h"
#include "base/util.h"

#include <stdarg.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PV_DEFAULT_CHUNK_MIN 64 /* the CPU's chunked DeltaNet works in chunks of 64 rows */

int pv_session_fail(struct pv_session* s, int status, const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
	if (status == PV_E_DEVICE || status == PV_E_NUMERIC) s->failed = 1;
	return status;
}

size_t pv_state_floats_per_layer(const struct pv_config* c)
{
	return (size_t)c->lin_v_heads * c->lin_k_dim * c->lin_v_dim + (size_t)(c->conv_kernel - 1) * pv_cfg_conv_dim(c);
}

static int n_linear_layers(const struct pv_config* c)
{
	int k = 0;
	for (int l = 0; l < c->n_layers; l++) k += c->layer_kind[l] == PV_LAYER_LINEAR;
	return k;
}

/* The parameters with every default filled in. */
static void session_defaults(const struct pv_model* m, const struct pv_session_params* in, struct pv_session_params* p)
{
	struct pv_session_params d = { 0 };
	if (in) d = *in;
	if (d.n_ctx <= 0) d.n_ctx = m->cfg.max_pos < 4096 ? m->cfg.max_pos : 4096;
	if (d.pool) d.n_threads = pv_pool_threads(d.pool);
	if (d.n_threads <= 0) {
		long nc = sysconf(_SC_NPROCESSORS_ONLN);
		d.n_threads = nc > 0 ? (int)nc : 1;
	}
	/* a CPU step is B rows of host scratch; a GPU backend keeps its own step scratch, so a
	 * prompt of up to 4096 tokens is one backend call (no host synchronisation inside it) */
	if (d.max_batch <= 0) d.max_batch = m->backend && strcmp(m->backend->name, "cpu") ? 4096 : 128;
	if (d.chunk_min_tokens <= 0) d.chunk_min_tokens = PV_DEFAULT_CHUNK_MIN;
	if (d.n_checkpoints <= 0) d.n_checkpoints = 4;
	if (d.n_snapshots < 0) d.n_snapshots = 0;
	if (d.cache_type == PV_CACHE_DEFAULT) d.cache_type = PV_CACHE_F32;
	*p = d;
}

uint64_t pv_session_bytes(const pv_model* m, const struct pv_session_params* params)
{
	struct pv_session_params p;
	session_defaults(m, params, &p);
	uint64_t host = (uint64_t)p.n_ctx * (4 + 4 * (uint64_t)m->cfg.rope_dim); /* history, rope tables */
	return host + m->backend->session_bytes(m, &p);
}

int pv_session_new(pv_session** out, const pv_model* m, const struct pv_session_params* params, char* err, size_t errlen)
{
	*out = NULL;
	struct pv_session_params p;
	session_defaults(m, params, &p);
	const struct pv_config* c = &m->cfg;
	if (p.n_ctx > c->max_pos)
		return pv_errf(err, errlen, "context %d exceeds the model's max_position_embeddings %d", p.n_ctx, c->max_pos),
		       PV_E_INVALID;
	if (p.n_ctx > (1 << 24) || p.max_batch > 4096 || p.n_threads > 1024 || p.n_checkpoints > 4096 ||
	    p.n_snapshots > 4096)
		return pv_errf(err, errlen,
		               "session parameters out of range (n_ctx %d, max_batch %d, threads %d, checkpoints %d, snapshots %d)",
		               p.n_ctx, p.max_batch, p.n_threads, p.n_checkpoints, p.n_snapshots),
		       PV_E_INVALID;

	if (p.cache_type < PV_CACHE_F32 || p.cache_type > PV_CACHE_Q8_0)
		return pv_errf(err, errlen, "unknown KV cache type %d", p.cache_type), PV_E_INVALID;

	struct pv_session* s = pv_xcalloc(1, sizeof(*s));
	s->m = m;
	s->be = m->backend;
	s->n_ctx = p.n_ctx;
	s->cache_type = p.cache_type;
	s->max_batch = p.max_batch;
	s->chunk_min = p.chunk_min_tokens;
	s->n_threads = p.n_threads;
	s->n_ckpt_slots = p.n_checkpoints;
	s->n_snapshots = n_linear_layers(c) ? p.n_snapshots : 0; /* attention-only: truncation is a cut */
	s->mtp_on = p.mtp && c->n_mtp_layers > 0 && m->w.mtp;
	s->state_floats = (size_t)n_linear_layers(c) * pv_state_floats_per_layer(c);
	s->tokens = calloc((size_t)p.n_ctx, sizeof(int32_t));
	s->ckpt = pv_xcalloc((size_t)p.n_checkpoints, sizeof(*s->ckpt));
	for (int i = 0; i < p.n_checkpoints; i++) s->ckpt[i].slot = i;
	int rc = PV_E_NOMEM;
	if (!s->tokens || pv_rope_tables(c, s->n_ctx, &s->rope_cos, &s->rope_sin)) {
		pv_errf(err, errlen, "out of memory creating a session (n_ctx %d)", s->n_ctx);
	} else {
		rc = s->be->session_init(s, &p, err, errlen);
	}
	if (rc) {
		pv_session_free(s);
		return rc < 0 ? rc : PV_E_NOMEM;
	}
	*out = s;
	return PV_OK;
}

void pv_session_free(pv_session* s)
{
	if (!s) return;
	if (s->be) s->be->session_free(s);
	if (s->own_pool) pv_pool_free(s->pool);
	free(s->rope_cos);
	free(s->rope_sin);
	free(s->ckpt);
	free(s->tokens);
	free(s);
}

const char* pv_session_error(const pv_session* s) { return s->err; }
int pv_session_ok(const pv_session* s) { return !s->failed; }
int pv_session_length(const pv_session* s) { return s->len; }
int pv_session_n_ctx(const pv_session* s) { return s->n_ctx; }
int pv_session_cache_type(const pv_session* s) { return s->cache_type; }

static const char* const cache_names[] = { "f32", "f32", "f16", "bf16", "q8_0" };

const char* pv_cache_type_name(int t) { return t >= 0 && t <= PV_CACHE_Q8_0 ? cache_names[t] : NULL; }

int pv_cache_type_parse(const char* name)
{
	for (int t = PV_CACHE_F32; name && t <= PV_CACHE_Q8_0; t++)
		if (!strcasecmp(name, cache_names[t])) return t;
	return -1;
}
const pv_model* pv_session_model(const pv_session* s) { return s->m; }
int pv_session_n_snapshots(const pv_session* s) { return s->n_snapshots; }
const int32_t* pv_session_tokens(const pv_session* s) { return s->tokens; }

/* Every call starts here: a failed session stays failed; otherwise the last message goes. */
static int begin(struct pv_session* s)
{
	if (s->failed) return PV_E_DEVICE; /* s->err keeps the device or numeric error */
	s->err[0] = 0;
	return PV_OK;
}

/* ---- evaluation ---------------------------------------------------------------------------- */

/* One output's rows [row0, n) of the call, as the rows of the step [off, off + rows). */
static void step_rows(void* base, size_t row_bytes, int row0, int n, int off, int rows, void** p, int* r0)
{
	*p = NULL;
	*r0 = rows;
	if (!base || row0 >= n || row0 >= off + rows) return;
	int first = row0 > off ? row0 - off : 0; /* first row of this step with the output */
	*r0 = first;
	*p = (char*)base + (size_t)(off + first - row0) * row_bytes;
}

/* The driver shared by pv_session_run and the rollback replay. */
static int eval(struct pv_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out,
                int replay)
{
	const struct pv_config* c = &s->m->cfg;
	if (n <= 0) return pv_session_fail(s, PV_E_INVALID, "eval: need at least one token (got %d)", n);
	if (n > s->n_ctx - s->len)
		return pv_session_fail(s, PV_E_CONTEXT, "eval: %d tokens do not fit: context %d, %d used", n, s->n_ctx, s->len);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab)
			return pv_session_fail(s, PV_E_INVALID, "eval: token %d at index %d is outside the vocabulary [0, %d)",
			                       tokens[i], i, c->vocab);
	if (flags & ~(unsigned)(PV_EVAL_EXACT | PV_EVAL_SNAPSHOT))
		return pv_session_fail(s, PV_E_INVALID, "eval: unknown flags 0x%x", flags);
	const int snap = (flags & PV_EVAL_SNAPSHOT) != 0;
	if (snap && s->state_floats && n > s->n_snapshots)
		return pv_session_fail(s, PV_E_INVALID, "eval: a snapshot call of %d rows needs n_snapshots >= %d (session has %d)",
		                       n, n, s->n_snapshots);
	struct pv_eval_out o = { 0 };
	if (out) o = *out;
	if ((o.logits && (o.logits_row0 < 0 || o.logits_row0 > n)) || (o.argmax && (o.argmax_row0 < 0 || o.argmax_row0 > n)) ||
	    (o.hidden && (o.hidden_row0 < 0 || o.hidden_row0 > n)))
		return pv_session_fail(s, PV_E_INVALID, "eval: an output's first row is outside [0, %d]", n);

	/* the exact path: asked for (a snapshot call is exact), a short call, or a model whose
	 * fast path would be the same arithmetic (no DeltaNet: only CUDA has a separate prefill) */
	const int exact = (flags & (PV_EVAL_EXACT | PV_EVAL_SNAPSHOT)) || replay || n < s->chunk_min;
	const int snap_on = snap && s->state_floats;
	if (snap_on) s->snap_n = 0; /* the old snapshots are overwritten row by row */
	const int len0 = s->len;
	for (int off = 0; off < n; off += s->max_batch) {
		int rows = n - off < s->max_batch ? n - off : s->max_batch;
		struct pv_step st = { tokens + off, rows, s->len, exact, snap_on ? off : -1, NULL, rows, NULL, rows, NULL, rows };
		void* p;
		step_rows(o.logits, sizeof(float) * (size_t)c->vocab, o.logits_row0, n, off, rows, &p, &st.logits_row0);
		st.logits = p;
		step_rows(o.argmax, sizeof(int32_t), o.argmax_row0, n, off, rows, &p, &st.argmax_row0);
		st.argmax = p;
		step_rows(o.hidden, sizeof(float) * (size_t)c->hidden, o.hidden_row0, n, off, rows, &p, &st.hidden_row0);
		st.hidden = p;
		memmove(s->tokens + s->len, tokens + off, sizeof(int32_t) * rows); /* may be a replay of the history */
		int rc = s->be->forward(s, &st);
		if (rc) {
			/* rows already evaluated are part of the history; a device failure is sticky */
			return rc < 0 ? rc : PV_E_DEVICE;
		}
		s->len += rows;
		s->stats.steps++;
		if (st.logits) s->stats.logits_rows += (uint64_t)(rows - st.logits_row0);
		if (st.argmax) s->stats.argmax_rows += (uint64_t)(rows - st.argmax_row0);
		if (st.hidden) s->stats.hidden_rows += (uint64_t)(rows - st.hidden_row0);
	}
	s->stats.calls++;
	s->stats.rows += (uint64_t)n;
	s->stats.path_last = exact ? "exact" : "fast";
	if (exact) s->stats.exact_rows += (uint64_t)n;
	else s->stats.fast_rows += (uint64_t)n;
	if (snap_on) {
		s->snap_base = len0;
		s->snap_n = n;
		s->stats.snapshot_rows += (uint64_t)n;
	} else if (s->snap_n && !replay) {
		/* the snapshots describe a history that has moved on: still valid (truncating back into
		 * them is still exact), since rows are only appended */
	}
	return PV_OK;
}

int pv_session_run(pv_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out)
{
	int rc = begin(s);
	return rc ? rc : eval(s, tokens, n, flags, out, 0);
}

int pv_session_run_many(struct pv_session** ss, const int32_t* tokens, int count, const struct pv_eval_out* out, int* rc)
{
	enum { MAXB = 64 };
	struct pv_session* b[MAXB];
	struct pv_step st[MAXB];
	int idx[MAXB], nb = 0;
	const struct pv_backend* be = count > 1 ? ss[0]->be : NULL;
	for (int i = 0; i < count; i++) {
		struct pv_session* s = ss[i];
		const struct pv_eval_out* o = &out[i];
		rc[i] = 1; /* pending */
		/* what the batch takes: everything else goes to pv_session_run, which says what is wrong */
		if (!be || !be->forward_many || nb == MAXB || s->be != be || s->m != ss[0]->m || s->failed || s->len >= s->n_ctx ||
		    tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab || (o->logits && o->logits_row0 != 0) ||
		    (o->argmax && o->argmax_row0 != 0) || (o->hidden && o->hidden_row0 != 0))
			continue;
		b[nb] = s;
		st[nb] = (struct pv_step){ &tokens[i], 1, s->len, 1, -1, o->logits, o->logits ? 0 : 1, o->argmax, o->argmax ? 0 : 1,
			                   o->hidden, o->hidden ? 0 : 1 };
		idx[nb++] = i;
	}
	if (nb >= 2 && be->forward_many(b, st, nb) == 0) {
		/* eval's bookkeeping for a one-row exact call */
		for (int j = 0; j < nb; j++) {
			struct pv_session* s = b[j];
			if (s->failed) {
				/* the backend failed this row (not finite): as its own failing step leaves it */
				rc[idx[j]] = PV_E_NUMERIC;
				continue;
			}
			s->err[0] = 0;
			s->tokens[s->len] = tokens[idx[j]];
			s->len++;
			s->stats.steps++;
			if (st[j].logits) s->stats.logits_rows++;
			if (st[j].argmax) s->stats.argmax_rows++;
			if (st[j].hidden) s->stats.hidden_rows++;
			s->stats.calls++;
			s->stats.rows++;
			s->stats.path_last = "exact";
			s->stats.exact_rows++;
			s->stats.batched_rows++;
			rc[idx[j]] = PV_OK;
		}
	}
	int all = PV_OK;
	for (int i = 0; i < count; i++) {
		if (rc[i] == 1) rc[i] = pv_session_run(ss[i], &tokens[i], 1, PV_EVAL_EXACT, &out[i]);
		if (rc[i] && all == PV_OK) all = rc[i];
	}
	return all;
}

int pv_session_eval(pv_session* s, const int32_t* tokens, int n, float* logits, int mode)
{
	int rc = begin(s);
	if (rc) return rc;
	if (mode != PV_LOGITS_ALL && mode != PV_LOGITS_LAST)
		return pv_session_fail(s, PV_E_INVALID, "eval: unknown logits mode %d", mode);
	struct pv_eval_out o = { logits, mode == PV_LOGITS_ALL ? 0 : n - 1, NULL, 0, NULL, 0 };
	return eval(s, tokens, n, 0, &o, 0);
}

/* ---- checkpoints, snapshots, truncation ------------------------------------------------------ */

int pv_session_checkpoint(pv_session* s)
{
	int rc = begin(s);
	if (rc || !s->state_floats) return rc; /* attention-only: truncation is a cut */
	if (s->n_ckpt && s->ckpt[s->n_ckpt - 1].len == s->len) return PV_OK;
	if (s->n_ckpt == s->n_ckpt_slots) {
		/* drop the oldest; its storage slot is reused */
		struct pv_checkpoint old = s->ckpt[0];
		memmove(s->ckpt, s->ckpt + 1, sizeof(*s->ckpt) * (size_t)(s->n_ckpt_slots - 1));
		s->ckpt[--s->n_ckpt] = old;
	}
	struct pv_checkpoint* k = &s->ckpt[s->n_ckpt];
	rc = s->be->state_save(s, k->slot);
	if (rc) return rc;
	k->len = s->len;
	s->n_ckpt++;
	s->stats.checkpoints++;
	return PV_OK;
}

/* Drops what describes the history beyond length n. */
static void forget_above(struct pv_session* s, int n)
{
	/* the head's row p was computed from the token at p + 1 */
	if (s->mtp_len > n - 1) s->mtp_len = n > 0 ? n - 1 : 0;
	while (s->n_ckpt && s->ckpt[s->n_ckpt - 1].len > n) s->n_ckpt--;
	if (s->snap_n && s->snap_base + s->snap_n > n) s->snap_n = n > s->snap_base ? n - s->snap_base : 0;
}

static int rollback(struct pv_session* s, int n)
{
	forget_above(s, n);
	if (!s->state_floats) {
		s->len = n;
		return PV_OK;
	}
	int from, rc;
	if (s->n_ckpt) {
		from = s->ckpt[s->n_ckpt - 1].len;
		rc = s->be->state_load(s, s->ckpt[s->n_ckpt - 1].slot);
	} else {
		/* the empty sequence is an implicit checkpoint: zero state at length 0 */
		from = 0;
		rc = s->be->state_reset(s);
	}
	if (rc) return rc;
	s->len = from;
	s->stats.rollbacks++;
	if (n == from) return PV_OK;
	/* Replay the history after the checkpoint on the exact path, which is bitwise what those
	 * tokens produced if they were evaluated on it. The snapshots stay: replay rows are not
	 * snapshot rows, and the ones below n are still right. */
	s->stats.replayed_rows += (uint64_t)(n - from);
	int sn = s->snap_n;
	rc = eval(s, s->tokens + from, n - from, PV_EVAL_EXACT, NULL, 1);
	s->snap_n = sn;
	return rc;
}

int pv_session_rollback(pv_session* s, int n)
{
	int rc = begin(s);
	if (rc) return rc;
	if (n < 0 || n > s->len) return pv_session_fail(s, PV_E_INVALID, "rollback: length %d outside [0, %d]", n, s->len);
	return rollback(s, n);
}

int pv_session_truncate(pv_session* s, int n)
{
	int rc = begin(s);
	if (rc) return rc;
	if (n < 0 || n > s->len) return pv_session_fail(s, PV_E_INVALID, "truncate: length %d outside [0, %d]", n, s->len);
	if (n == s->len) return PV_OK;
	if (!s->state_floats) {
		forget_above(s, n);
		s->len = n;
		return PV_OK;
	}
	/* the state after row r of the last snapshot call is the state at length snap_base + r + 1 */
	if (s->snap_n && n > s->snap_base && n <= s->snap_base + s->snap_n) {
		int slot = n - s->snap_base - 1;
		rc = s->be->snapshot_load(s, slot);
		if (rc) return rc;
		forget_above(s, n);
		s->len = n;
		s->stats.snapshot_loads++;
		return PV_OK;
	}
	return rollback(s, n);
}

int pv_session_sync(pv_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out, int* reused)
{
	int rc = begin(s);
	if (reused) *reused = 0;
	if (rc) return rc;
	if (n <= 0 || n > s->n_ctx)
		return pv_session_fail(s, n <= 0 ? PV_E_INVALID : PV_E_CONTEXT, "sync: %d tokens (context %d)", n, s->n_ctx);
	int keep = 0;
	while (keep < s->len && keep < n - 1 && s->tokens[keep] == tokens[keep]) keep++;
	if (keep < s->len) {
		rc = pv_session_truncate(s, keep);
		if (rc) return rc;
	}
	struct pv_eval_out o = { 0 };
	if (out) {
		o = *out;
		o.logits_row0 = o.argmax_row0 = o.hidden_row0 = n - keep - 1;
	}
	rc = eval(s, tokens + keep, n - keep, flags, &o, 0);
	if (!rc && reused) *reused = keep;
	return rc;
}

int pv_session_copy_prefix(pv_session* dst, const pv_session* src, int n)
{
	int rc = begin(dst);
	if (rc) return rc;
	if (src == dst) return pv_session_fail(dst, PV_E_INVALID, "copy_prefix: source and destination are one session");
	if (src->m != dst->m || src->be != dst->be)
		return pv_session_fail(dst, PV_E_INVALID, "copy_prefix: the sessions belong to different models or backends");
	if (src->failed) return pv_session_fail(dst, PV_E_INVALID, "copy_prefix: the source session has failed");
	if (src->cache_type != dst->cache_type)
		return pv_session_fail(dst, PV_E_INVALID, "copy_prefix: the sessions' KV cache types differ (%s, %s)",
		                       pv_cache_type_name(dst->cache_type), pv_cache_type_name(src->cache_type));
	if (n < 0 || n > src->len || n > dst->n_ctx)
		return pv_session_fail(dst, PV_E_INVALID, "copy_prefix: length %d outside [0, %d] (destination context %d)", n,
		                       src->len, dst->n_ctx);
	int from = PV_STATE_CURRENT, index = 0;
	if (src->state_floats && n != src->len) {
		from = -1;
		for (int i = src->n_ckpt - 1; i >= 0 && from < 0; i--)
			if (src->ckpt[i].len == n) {
				from = PV_STATE_CHECKPOINT;
				index = src->ckpt[i].slot;
			}
		if (from < 0 && src->snap_n && n > src->snap_base && n <= src->snap_base + src->snap_n) {
			from = PV_STATE_SNAPSHOT;
			index = n - src->snap_base - 1;
		}
		if (from < 0)
			return pv_session_fail(dst, PV_E_UNSUPPORTED,
			                       "copy_prefix: the source has no recurrent state at length %d (current %d; "
			                       "take a checkpoint there, or copy from a snapshot call)",
			                       n, src->len);
	}
	if (n == 0) from = -1; /* the empty prefix: zero state */
	dst->n_ckpt = 0;
	dst->snap_n = 0;
	dst->len = 0;
	rc = from < 0 ? (dst->state_floats ? dst->be->state_reset(dst) : PV_OK) : dst->be->copy_prefix(dst, src, n, from, index);
	if (rc) return rc;
	memcpy(dst->tokens, src->tokens, sizeof(int32_t) * (size_t)n);
	dst->len = n;
	dst->stats.prefix_copies++;
	if (dst->state_floats && dst->n_ckpt_slots) return pv_session_checkpoint(dst);
	return PV_OK;
}

/* ---- the MTP head ---------------------------------------------------------------------------- */

int pv_session_mtp(pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax, float* hidden_out)
{
	int rc = begin(s);
	if (rc) return rc;
	if (!s->mtp_on || !s->be->mtp)
		return pv_session_fail(s, PV_E_UNSUPPORTED, "mtp: %s", !s->m->w.mtp ? "the model has no MTP head"
		                                                  : !s->mtp_on      ? "the session was created without mtp = 1"
		                                                                    : "the backend does not compute the MTP head");
	if (n <= 0 || n > s->max_batch || !hidden || !tokens || !argmax)
		return pv_session_fail(s, PV_E_INVALID, "mtp: %d rows (1 to %d, with hidden, tokens and argmax)", n, s->max_batch);
	if (pos < 0 || pos > s->mtp_len || pos + n > s->n_ctx)
		return pv_session_fail(s, PV_E_INVALID, "mtp: position %d with %d rows (cached %d, context %d)", pos, n, s->mtp_len,
		                       s->n_ctx);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= s->m->cfg.vocab)
			return pv_session_fail(s, PV_E_INVALID, "mtp: token %d outside the vocabulary", tokens[i]);
	s->mtp_len = pos;
	rc = s->be->mtp(s, pos, hidden, tokens, n, argmax, hidden_out);
	if (rc) return rc < 0 ? rc : PV_E_DEVICE;
	s->mtp_len = pos + n;
	return PV_OK;
}

int pv_session_mtp_length(const pv_session* s) { return s->mtp_len; }

/* ---- stats ------------------------------------------------------------------------------- */

int pv_session_get_stats(const pv_session* s, struct pv_session_stats* st)
{
	*st = s->stats;
	if (s->be->stats) s->be->stats(s, st);
	return PV_OK;
}

int pv_session_profile(pv_session* s, int32_t token, int reps, struct pv_profile* out)
{
	memset(out, 0, sizeof(*out));
	int rc = begin(s);
	if (rc) return rc;
	if (!s->be->profile) return pv_session_fail(s, PV_E_UNSUPPORTED, "profile: the %s backend has no profiler", s->be->name);
	return s->be->profile(s, token, reps, out);
}

int pv_session_profile_start(pv_session* s)
{
	int rc = begin(s);
	if (rc) return rc;
	if (!s->be->profile_rows)
		return pv_session_fail(s, PV_E_UNSUPPORTED, "profile: the %s backend has no per-op profiler (use pv_session_profile)",
		                       s->be->name);
	return s->be->profile_rows(s, 1, NULL);
}

int pv_session_profile_stop(pv_session* s, struct pv_profile* out)
{
	memset(out, 0, sizeof(*out));
	int rc = begin(s);
	if (rc) return rc;
	if (!s->be->profile_rows) return pv_session_fail(s, PV_E_UNSUPPORTED, "profile: the %s backend has no per-op profiler", s->be->name);
	return s->be->profile_rows(s, 0, out);
}

int pv_argmax(const float* logits, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (logits[i] > logits[best]) best = i;
	return best;
}
