/*
 * generator.c: plain and speculative generation (proven_spec.h) as one loop.
 *
 * A step evaluates rows [pending, d_1 .. d_m] (m = 0: plain decoding) in one exact call, chooses
 * the model's token y_j after row j for j = 0..m (choose.c: a function of row j's logits and of
 * (seed, position) only), accepts the drafts while d_{j+1} == y_j, emits the accepted drafts
 * and the first y that disagrees (or y_m), and truncates the session to what it accepted. Row j
 * of an exact call has the bits a one-row call would give it (proven.h), so every y_j is the
 * token plain decoding chooses at that position: the output is the same bit for bit.
 *
 * The recurrent state returns to the accepted length from a per-row snapshot (PV_EVAL_SNAPSHOT)
 * or from a checkpoint taken before the call and a replay; attention KV is cut in both cases.
 * The adaptive policy picks the draft length that maximises the expected tokens per second from
 * the measured acceptance and the measured cost of calls of each length, and drafts nothing
 * while no length is expected to beat plain decoding.
 */
#include "spec/drafter.h"
#include "proven_dev.h"
#include "base/clock.h"
#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_LIMIT 16 /* most drafts per step (the snapshot slots a session needs: K_LIMIT + 1) */

struct policy {
	double alpha;               /* EMA of the probability that a draft token is accepted        */
	double t_call[K_LIMIT + 2]; /* EMA seconds of a step with r rows (verify + rollback), 0: unknown */
	double t_draft;             /* EMA seconds the drafter takes per drafted token              */
	int plain_run;              /* plain steps in a row while the policy is off                 */
	int probe_every;            /* plain steps between probes: doubles after a probe that accepts
	                             * nothing (up to PROBE_MAX), back to PROBE_MIN when one accepts */
	int probing;                /* this step's drafts are a probe                                */
};

/* Where verify windows cost about their rows (the H200's dense shapes, docs/results/spec-*) a
 * probe every 16 steps cost 3-6 % of plain decoding; backing off keeps the off state near 1.0. */
#define PROBE_MIN 16
#define PROBE_MAX 256

struct pv_generator {
	pv_session* s;
	struct pv_sampling smp;
	struct pv_spec_params sp;
	struct pv_drafter dr; /* name NULL: none                                             */
	int greedy, V, n_valid, H, hybrid, snapshots;
	int32_t* hist; /* [n_ctx + 1]: the session's tokens, then the pending one     */
	int n_hist;    /* 0 before pv_generator_prompt                                */
	int32_t rows[K_LIMIT + 1];
	int32_t argmax[K_LIMIT + 1];
	float* logits; /* [(K_LIMIT + 1) * V]                                         */
	float* hidden; /* [(K_LIMIT + 1) * H] when the drafter wants them              */
	void* cand;    /* pv_sample's scratch                                         */
	struct policy pol;
	struct pv_gen_stats st;
	int lp_top; /* logprobs: alternatives per token, -1: off                   */
	struct pv_token_logprob lp[K_LIMIT + 1];
	int n_lp;
	char err[256];
};

static int fail(struct pv_generator* g, int rc, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct pv_generator* g, int rc, const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g->err, sizeof g->err, fmt, ap);
	va_end(ap);
	return rc;
}

static int session_fail(struct pv_generator* g, int rc) { return fail(g, rc, "%s", pv_session_error(g->s)); }

int pv_generator_new(pv_generator** out, pv_session* s, const struct pv_sampling* sampling, const struct pv_spec_params* spec,
                     char* err, size_t errlen)
{
	*out = NULL;
	const struct pv_model_info* in = pv_model_get_info(pv_session_model(s));
	struct pv_generator* g = pv_xcalloc(1, sizeof *g);
	g->s = s;
	if (sampling) g->smp = *sampling;
	if (spec) g->sp = *spec;
	g->V = in->vocab;
	g->H = in->hidden;
	g->n_valid = g->smp.n_valid > 0 && g->smp.n_valid < g->V ? g->smp.n_valid : g->V;
	g->greedy = pv_sampling_is_greedy(&g->smp);
	g->hybrid = in->n_linear_layers > 0;
	if (g->sp.k_max <= 0) g->sp.k_max = g->sp.draft == PV_DRAFT_NGRAM || g->sp.draft == PV_DRAFT_REPLAY ? 16 : 8;
	if (g->sp.k_max > K_LIMIT) g->sp.k_max = K_LIMIT;
	int rc = 0;
	switch (g->sp.draft) {
	case PV_DRAFT_NONE: break;
	case PV_DRAFT_NGRAM: rc = pv_drafter_ngram(&g->dr, g->sp.ngram_min, g->sp.ngram_max); break;
	case PV_DRAFT_MODEL: rc = pv_drafter_model(&g->dr, g->sp.draft_session, g->V, err, errlen); break;
	case PV_DRAFT_CASCADE:
		rc = pv_drafter_cascade(&g->dr, g->sp.draft_session, g->V, g->sp.ngram_min, g->sp.ngram_max, err, errlen);
		break;
	case PV_DRAFT_MTP: rc = pv_drafter_mtp(&g->dr, s, err, errlen); break;
	case PV_DRAFT_REPLAY:
		g->sp.fixed_k = 1;
		rc = pv_drafter_replay(&g->dr, g->sp.replay_seq, g->sp.replay_n_seq, g->sp.replay_steps, g->sp.replay_n_steps,
		                       err, errlen);
		break;
	default: rc = pv_errf(err, errlen, "speculation: unknown draft kind %d", g->sp.draft);
	}
	if (rc) {
		free(g);
		return PV_E_INVALID;
	}
	/* snapshots when the session keeps enough of them; otherwise checkpoint + replay */
	g->snapshots = g->hybrid && g->sp.rollback != PV_ROLLBACK_REPLAY && pv_session_n_snapshots(s) >= g->sp.k_max + 1;
	if (g->sp.rollback == PV_ROLLBACK_SNAPSHOT && g->hybrid && !g->snapshots) {
		pv_errf(err, errlen, "speculation: snapshot rollback needs a session with n_snapshots >= %d", g->sp.k_max + 1);
		if (g->dr.free) g->dr.free(g->dr.ctx);
		free(g);
		return PV_E_INVALID;
	}
	g->hist = calloc((size_t)pv_session_n_ctx(s) + 1, sizeof(int32_t));
	g->logits = malloc(sizeof(float) * (size_t)(K_LIMIT + 1) * (size_t)g->V);
	g->cand = malloc(pv_sample_scratch_bytes(g->V));
	if (g->dr.wants_hidden) g->hidden = malloc(sizeof(float) * (size_t)(K_LIMIT + 1) * (size_t)g->H);
	if (!g->hist || !g->logits || !g->cand || (g->dr.wants_hidden && !g->hidden)) {
		pv_generator_free(g);
		return pv_errf(err, errlen, "out of memory for a generator"), PV_E_NOMEM;
	}
	g->pol.alpha = 0.6; /* a prior the first steps replace */
	g->pol.probe_every = PROBE_MIN;
	g->lp_top = -1;
	*out = g;
	return PV_OK;
}

void pv_generator_free(pv_generator* g)
{
	if (!g) return;
	if (g->dr.free) g->dr.free(g->dr.ctx);
	free(g->hist);
	free(g->logits);
	free(g->hidden);
	free(g->cand);
	free(g);
}

const char* pv_generator_error(const pv_generator* g) { return g->err; }

void pv_generator_stats(const pv_generator* g, struct pv_gen_stats* st) { *st = g->st; }

/* The model's token after row j of the last call (logits row j when not greedy). */
static int32_t choice(struct pv_generator* g, int j, int64_t pos)
{
	if (g->greedy) return g->argmax[j];
	return pv_sample(&g->smp, g->logits + (size_t)j * g->V, g->V, pos, g->cand);
}

/* The log-softmax of logits row j at token id, and the top alternatives, into g->lp[slot]. */
static void logprob(struct pv_generator* g, int j, int32_t id, int slot)
{
	const float* row = g->logits + (size_t)j * g->V;
	double mx = row[0];
	for (int i = 1; i < g->n_valid; i++) mx = row[i] > mx ? row[i] : mx;
	double sum = 0;
	for (int i = 0; i < g->n_valid; i++) sum += exp((double)row[i] - mx);
	const double lse = mx + log(sum);
	struct pv_token_logprob* t = &g->lp[slot];
	t->id = id;
	t->logprob = (float)(row[id] - lse);
	t->n_top = g->lp_top < PV_TOP_LOGPROBS ? g->lp_top : PV_TOP_LOGPROBS;
	/* the top n by insertion (n <= 20): ties to the lower id */
	int k = 0;
	for (int i = 0; i < g->n_valid && t->n_top > 0; i++) {
		float v = row[i];
		if (k == t->n_top && v <= row[t->top_id[k - 1]]) continue;
		int p = k < t->n_top ? k++ : k - 1;
		while (p > 0 && row[t->top_id[p - 1]] < v) {
			t->top_id[p] = t->top_id[p - 1];
			p--;
		}
		t->top_id[p] = i;
	}
	for (int i = 0; i < t->n_top; i++) t->top_logprob[i] = (float)(row[t->top_id[i]] - lse);
}

int pv_generator_set_logprobs(pv_generator* g, int top_n)
{
	if (top_n < -1 || top_n > PV_TOP_LOGPROBS)
		return fail(g, PV_E_INVALID, "logprobs: %d alternatives (0 to %d)", top_n, PV_TOP_LOGPROBS);
	g->lp_top = top_n;
	return PV_OK;
}

int pv_generator_logprobs(const pv_generator* g, struct pv_token_logprob* out, int max)
{
	int n = g->n_lp < max ? g->n_lp : max;
	memcpy(out, g->lp, sizeof(*out) * (size_t)(n > 0 ? n : 0));
	return n;
}

int pv_generator_step_many(pv_generator** g, int count, int32_t** out, const int* max, int* n_out, int* rc)
{
	int all = PV_OK;
	for (int i = 0; i < count; i++) {
		rc[i] = pv_generator_step(g[i], out[i], max[i], &n_out[i]);
		if (rc[i] && all == PV_OK) all = rc[i];
	}
	return all;
}

int pv_generator_prompt(pv_generator* g, const int32_t* prompt, int n, int32_t* first)
{
	g->err[0] = 0;
	const double t0 = pv_now_s();
	if (n < 1) return fail(g, PV_E_INVALID, "generate: the prompt is empty");
	if (n >= pv_session_n_ctx(g->s))
		return fail(g, PV_E_CONTEXT, "generate: a prompt of %d tokens fills the context %d", n, pv_session_n_ctx(g->s));
	/* keep what the session shares with the prompt (but evaluate the last token for its outputs;
	 * an MTP drafter also needs the target's hidden rows from where its own cache ends) */
	const int32_t* hist = pv_session_tokens(g->s);
	int keep = 0, len = pv_session_length(g->s);
	while (keep < len && keep < n - 1 && hist[keep] == prompt[keep]) keep++;
	if (g->dr.wants_hidden && keep > pv_session_mtp_length(g->s)) keep = pv_session_mtp_length(g->s);
	float* hid = NULL;
	if (g->dr.wants_hidden && !(hid = malloc(sizeof(float) * (size_t)(n - keep) * g->H)))
		return fail(g, PV_E_NOMEM, "generate: out of memory for %d hidden rows", n - keep);
	const int want_logits = !g->greedy || g->lp_top >= 0;
	struct pv_eval_out o = {
		want_logits ? g->logits : NULL, n - keep - 1, g->greedy ? g->argmax : NULL, n - keep - 1, hid, 0
	};
	int rc = pv_session_truncate(g->s, keep);
	if (!rc) rc = pv_session_run(g->s, prompt + keep, n - keep, 0, &o);
	if (!rc && g->greedy && g->argmax[0] >= g->n_valid) {
		/* a padded vocabulary row won: the last prompt row again, with its logits */
		g->st.fallback_tokens++;
		struct pv_eval_out ol = { g->logits, 0, NULL, 0, NULL, 0 };
		rc = pv_session_truncate(g->s, n - 1);
		if (!rc) rc = pv_session_run(g->s, prompt + n - 1, 1, PV_EVAL_EXACT, &ol);
		if (!rc) g->argmax[0] = pv_sample(&g->smp, g->logits, g->V, n, g->cand);
	}
	if (rc) {
		free(hid);
		return session_fail(g, rc);
	}
	memcpy(g->hist, prompt, sizeof(int32_t) * (size_t)n);
	g->hist[n] = choice(g, 0, n);
	g->n_hist = n + 1;
	*first = g->hist[n];
	g->n_lp = 0;
	if (g->lp_top >= 0) {
		logprob(g, 0, g->hist[n], 0);
		g->n_lp = 1;
	}
	/* a checkpoint at the end of the prompt: the next request that shares this prefix (a chat's
	 * next turn) rolls back to it instead of replaying the conversation (hybrid models) */
	if (g->hybrid && (rc = pv_session_checkpoint(g->s))) {
		free(hid);
		return session_fail(g, rc);
	}
	if (g->dr.accept && g->dr.accept(g->dr.ctx, g->hist, g->n_hist, hid, hid ? n - keep : 0, g->err, sizeof g->err))
		rc = PV_E_INVALID;
	free(hid);
	g->st.prefill_s += pv_now_s() - t0;
	return rc;
}

/* Expected tokens per step with m drafts at acceptance a: 1 + a + ... + a^m. */
static double expected(double a, int m)
{
	double e = 1, p = 1;
	for (int i = 0; i < m; i++) e += p *= a;
	return e;
}

/* The draft length for this step: fixed, or the one with the best expected tokens per second
 * (0: plain). Unknown call costs are taken as proportional to rows, pessimistically. */
/* The cost of a step of r rows: measured, else scaled from the nearest measured length with a
 * cost model of 1 + (r - 1)/2 (units when nothing is measured yet). */
static double est_call(const struct policy* p, int r)
{
	if (p->t_call[r] > 0) return p->t_call[r];
	for (int d = 1; d <= K_LIMIT; d++)
		for (int s = -1; s <= 1; s += 2) {
			int q = r + s * d;
			if (q >= 1 && q <= K_LIMIT + 1 && p->t_call[q] > 0)
				return p->t_call[q] * (1.0 + 0.5 * (r - 1)) / (1.0 + 0.5 * (q - 1));
		}
	return 1.0 + 0.5 * (r - 1);
}

static int policy_k(struct pv_generator* g, int cap)
{
	if (g->sp.fixed_k) return cap;
	struct policy* p = &g->pol;
	const double t1 = est_call(p, 1);
	double best = 1.03; /* a draft length must promise at least 3 % over plain decoding */
	int k = 0;
	for (int m = 1; m <= cap; m++) {
		double t = est_call(p, m + 1);
		double gain = expected(p->alpha, m) * t1 / (t + m * p->t_draft);
		if (gain > best) {
			best = gain;
			k = m;
		}
	}
	/* off: probe now and then, so a change of acceptance is seen */
	p->probing = 0;
	if (!k && ++p->plain_run >= p->probe_every) {
		p->plain_run = 0;
		p->probing = 1;
		k = cap < 2 ? cap : 2;
	}
	if (k) p->plain_run = 0;
	return k;
}

static void ema(double* x, double v, double w) { *x = *x > 0 ? (1 - w) * *x + w * v : v; }

/* Evaluates rows[0, r) in one call with the outputs the step needs. */
static int run_rows(struct pv_generator* g, int r, unsigned flags)
{
	const int want_logits = !g->greedy || g->lp_top >= 0;
	struct pv_eval_out o = { want_logits ? g->logits : NULL, 0, g->greedy ? g->argmax : NULL, 0, g->hidden, 0 };
	return pv_session_run(g->s, g->rows, r, flags, &o);
}

int pv_generator_step(pv_generator* g, int32_t* out, int max, int* n_out)
{
	*n_out = 0;
	g->err[0] = 0;
	if (!g->n_hist) return fail(g, PV_E_INVALID, "generate: no prompt yet");
	if (max < 1) return fail(g, PV_E_INVALID, "generate: room for %d tokens", max);
	const double t0 = pv_now_s();
	const int len = pv_session_length(g->s), n_ctx = pv_session_n_ctx(g->s);
	if (len + 1 > n_ctx) return fail(g, PV_E_CONTEXT, "generate: context full (%d tokens)", n_ctx);
	/* how many drafts fit: the context, the caller's buffer, the limit */
	int cap = g->sp.k_max;
	if (cap > n_ctx - len - 1) cap = n_ctx - len - 1;
	if (cap > max - 1) cap = max - 1;
	int m = 0;
	if (g->dr.propose && cap > 0) {
		int k = policy_k(g, cap);
		if (k > 0) {
			const double td = pv_now_s();
			m = g->dr.propose(g->dr.ctx, g->hist, g->n_hist, k, g->rows + 1, g->err, sizeof g->err);
			if (m < 0) return PV_E_INVALID;
			if (m > 0) ema(&g->pol.t_draft, (pv_now_s() - td) / m, 0.2);
		} else {
			g->st.policy_off_steps++;
		}
	}
	g->rows[0] = g->hist[g->n_hist - 1];
	const int r = m + 1;
	int rc;
	const double tc = pv_now_s();
	unsigned flags = PV_EVAL_EXACT;
	if (m > 0 && g->hybrid) {
		if (g->snapshots)
			flags |= PV_EVAL_SNAPSHOT;
		else if ((rc = pv_session_checkpoint(g->s)))
			return session_fail(g, rc);
	}
	if ((rc = run_rows(g, r, flags))) return session_fail(g, rc);
	if (g->greedy) {
		/* a padded vocabulary row won somewhere: the same rows again, with their logits */
		int pad = 0;
		for (int j = 0; j < r; j++) pad |= g->argmax[j] >= g->n_valid;
		if (pad) {
			g->st.fallback_tokens++;
			struct pv_eval_out ol = { g->logits, 0, NULL, 0, g->hidden, 0 };
			if ((rc = pv_session_truncate(g->s, len)) || (rc = pv_session_run(g->s, g->rows, r, flags, &ol)))
				return session_fail(g, rc);
			for (int j = 0; j < r; j++)
				g->argmax[j] = pv_sample(&g->smp, g->logits + (size_t)j * g->V, g->V, len + 1 + j, g->cand);
		}
	}
	/* accept while the draft is the model's own choice */
	int i = 0;
	int32_t y = choice(g, 0, len + 1);
	while (i < m && g->rows[i + 1] == y) {
		out[i] = y;
		i++;
		y = choice(g, i, len + 1 + i);
	}
	out[i] = y;
	*n_out = i + 1;
	g->n_lp = 0;
	if (g->lp_top >= 0) {
		for (int j = 0; j <= i; j++) logprob(g, j, out[j], j);
		g->n_lp = i + 1;
	}
	if (i < m) {
		struct pv_session_stats s0, s1;
		pv_session_get_stats(g->s, &s0);
		if ((rc = pv_session_truncate(g->s, len + 1 + i))) return session_fail(g, rc);
		pv_session_get_stats(g->s, &s1);
		g->st.rollbacks++;
		g->st.snapshot_restores += (int64_t)(s1.snapshot_loads - s0.snapshot_loads);
		g->st.replayed_rows += (int64_t)(s1.replayed_rows - s0.replayed_rows);
	}
	const double t_call = pv_now_s() - tc;
	/* the history: the evaluated rows that were kept, then the new pending token */
	memcpy(g->hist + len, g->rows, sizeof(int32_t) * (size_t)(i + 1));
	g->hist[len + 1 + i] = y;
	g->n_hist = len + 2 + i;
	if (g->dr.accept && g->dr.accept(g->dr.ctx, g->hist, g->n_hist, g->hidden, i + 1, g->err, sizeof g->err))
		return PV_E_INVALID;
	/* statistics and what the policy learns */
	g->st.steps++;
	g->st.tokens += i + 1;
	ema(&g->pol.t_call[r], t_call, 0.2);
	if (m > 0) {
		g->st.verify_calls++;
		g->st.drafted += m;
		g->st.accepted += i;
		g->st.accepted_len[i < 16 ? i : 16]++;
		if (g->pol.probing)
			g->pol.probe_every = i > 0 ? PROBE_MIN : g->pol.probe_every * 2 > PROBE_MAX ? PROBE_MAX : g->pol.probe_every * 2;
		/* acceptance per draft token: i accepted of the first i + (i < m) tried */
		double tried = i + (i < m);
		g->pol.alpha = 0.85 * g->pol.alpha + 0.15 * (i / tried);
	}
	g->st.decode_s += pv_now_s() - t0;
	return PV_OK;
}
