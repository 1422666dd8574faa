/*
 * test_api.c: the engine API that speculation and serving build on, on every fixture
 * architecture (CPU): per-row outputs (logits, argmax, hidden), the exact-path flag, per-row
 * snapshots and truncation, prefix copies, sync, shared pools, stats, status codes, the model
 * digest (against sha256sum), the log callback and knobs, continuous batching (pv_session_run_many:
 * every architecture's rows batched, bitwise their own steps).
 *
 * Every "same session" claim is checked bitwise (memcmp of logits): these are the properties
 * exact speculative decoding rests on, not tolerances.
 */
#include "fixture.h"
#include "many.h"
#include "harness.h"
#include "proven.h"
#include "proven_dev.h"

#include "cpu/ops.h"
#include "base/sha256.h"
#include "cpu/state.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/model.h"

#include <math.h>
#include <pthread.h>

#define NP 24 /* prompt rows used here (the fixtures' prompts are longer) */

static int32_t* g_toks; /* the fixture's first prompt */
static int g_ntok;
static int g_cache; /* the KV cache type of new_session's sessions (enum pv_cache_type) */

/* fixture.h's session helpers with this file's cache type (g_cache), 2 threads */
static pv_session* new_session(pv_model* m, int n_snapshots) { return fx_session(m, n_snapshots, g_cache, 2); }
static int run_exact(pv_session* s, const int32_t* toks, int n, int step, float* lg, int V)
{
	return fx_run_exact(s, toks, n, step, lg, V);
}
static int same(const float* a, const float* b, size_t n) { return fx_same(a, b, n); }

/* per-row outputs: argmax and hidden agree with the logits, whichever rows are asked */
static void test_outputs(pv_model* m, const char* name)
{
	const struct pv_model_info* in = pv_model_get_info(m);
	const int V = in->vocab, H = in->hidden;
	float* lg = malloc(sizeof(float) * V * NP);
	float* hid = malloc(sizeof(float) * H * NP);
	float* lg2 = malloc(sizeof(float) * V * NP);
	int32_t am[NP], am2[NP];
	pv_session* s = new_session(m, 0);
	struct pv_eval_out o = { lg, 0, am, 0, hid, 0 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o) == PV_OK, "%s: run: %s", name, pv_session_error(s));
	int ok = 1;
	for (int t = 0; t < NP; t++) ok &= am[t] == pv_argmax(lg + (size_t)t * V, V);
	CHECK(ok, "%s: argmax rows differ from the argmax of the logits rows", name);
	/* hidden rows are the LM head's input: the LM head over them (in the model's numerics)
	 * gives the logits, bitwise */
	void* act = malloc(pv_mm_act_bytes(NP, H));
	struct pv_mm mm = { NULL, pv_cpu_kernels(m), act, pv_mm_act_bytes(NP, H) };
	pv_mm(&mm, lg2, V, hid, H, NP, &m->w.lm_head);
	free(act);
	CHECK(same(lg, lg2, (size_t)V * NP), "%s: LM head over the hidden rows != logits", name);
	/* only some rows, only some outputs: the same values */
	pv_session_free(s);
	s = new_session(m, 0);
	struct pv_eval_out o2 = { NULL, 0, am2, 10, NULL, 0 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o2) == PV_OK, "%s: argmax-only run", name);
	CHECK(!memcmp(am + 10, am2, sizeof(int32_t) * (NP - 10)), "%s: argmax rows [10, n) alone differ", name);
	pv_session_free(s);
	s = new_session(m, 0);
	struct pv_eval_out o3 = { lg2, NP - 3, NULL, 0, hid, NP - 1 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o3) == PV_OK, "%s: tail run", name);
	CHECK(same(lg + (size_t)(NP - 3) * V, lg2, (size_t)3 * V), "%s: logits of the last 3 rows differ", name);
	struct pv_session_stats st;
	pv_session_get_stats(s, &st);
	CHECK(st.logits_rows == 3 && st.hidden_rows == 1 && st.argmax_rows == 0 && st.rows == NP && st.calls == 1 &&
	              st.exact_rows == NP,
	      "%s: stats rows %llu logits %llu hidden %llu", name, (unsigned long long)st.rows,
	      (unsigned long long)st.logits_rows, (unsigned long long)st.hidden_rows);
	/* pv_session_eval is the logits-only wrapper of a call without flags */
	pv_session_free(s);
	s = new_session(m, 0);
	struct pv_eval_out o4 = { lg, 0, NULL, 0, NULL, 0 };
	CHECK(pv_session_run(s, g_toks, NP, 0, &o4) == PV_OK, "%s: run without flags", name);
	pv_session_free(s);
	s = new_session(m, 0);
	CHECK(pv_session_eval(s, g_toks, NP, lg2, PV_LOGITS_ALL) == PV_OK && same(lg, lg2, (size_t)V * NP),
	      "%s: pv_session_eval differs from pv_session_run", name);
	pv_session_free(s);
	free(lg);
	free(lg2);
	free(hid);
}

/* PV_EVAL_EXACT: a long call on the exact path gives every row the bits it gets alone */
static void test_exact(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, n = 40; /* >= chunk_min_tokens (16) */
	float* a = malloc(sizeof(float) * V * n);
	float* b = malloc(sizeof(float) * V * n);
	pv_session* s1 = new_session(m, 0);
	pv_session* s2 = new_session(m, 0);
	CHECK(run_exact(s1, g_toks, n, n, a, V) == 0, "%s: exact long call: %s", name, pv_session_error(s1));
	CHECK(run_exact(s2, g_toks, n, 1, b, V) == 0, "%s: row by row", name);
	CHECK(same(a, b, (size_t)V * n), "%s: an exact %d-row call differs from row-by-row calls", name, n);
	struct pv_session_stats st;
	pv_session_get_stats(s1, &st);
	CHECK(st.exact_rows == (uint64_t)n && st.fast_rows == 0 && !strcmp(st.path_last, "exact"), "%s: exact stats", name);
	/* without the flag a long call may take the fast path: counted as such */
	pv_session* s3 = new_session(m, 0);
	CHECK(pv_session_run(s3, g_toks, n, 0, NULL) == PV_OK, "%s: fast call", name);
	pv_session_get_stats(s3, &st);
	CHECK(st.fast_rows == (uint64_t)n && !strcmp(st.path_last, "fast"), "%s: fast stats", name);
	pv_session_free(s1);
	pv_session_free(s2);
	pv_session_free(s3);
	free(a);
	free(b);
}

/* Snapshots: truncating into the last PV_EVAL_SNAPSHOT call is bitwise the session that never
 * saw the dropped rows, for every row; outside it, checkpoint + replay is too. */
static void test_snapshots(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, hybrid = pv_model_get_info(m)->n_linear_layers > 0;
	const int P = 12, K = 6, C = 3; /* prefix, verified rows, continuation */
	float* ref = malloc(sizeof(float) * V * C);
	float* got = malloc(sizeof(float) * V * C);
	pv_session* s = new_session(m, K);
	CHECK(run_exact(s, g_toks, P, P, NULL, V) == 0 && pv_session_checkpoint(s) == PV_OK, "%s: prefix", name);
	const int32_t* draft = g_toks + P;      /* the rows a verify call would check */
	const int32_t* cont = g_toks + P + K;   /* what follows the accepted rows      */
	for (int j = 1; j <= K; j++) {
		CHECK(pv_session_truncate(s, P) == PV_OK, "%s: back to the prefix", name);
		CHECK(pv_session_run(s, draft, K, PV_EVAL_SNAPSHOT, NULL) == PV_OK, "%s: snapshot call: %s", name,
		      pv_session_error(s));
		struct pv_session_stats st0, st1;
		pv_session_get_stats(s, &st0);
		CHECK(pv_session_truncate(s, P + j) == PV_OK && pv_session_length(s) == P + j, "%s: truncate to %d", name, P + j);
		pv_session_get_stats(s, &st1);
		if (hybrid)
			CHECK(st1.snapshot_loads == st0.snapshot_loads + (j < K) && st1.rollbacks == st0.rollbacks,
			      "%s: truncation to row %d of the snapshot call did not load a snapshot", name, j);
		CHECK(run_exact(s, cont, C, C, got, V) == 0, "%s: continuation", name);
		/* the reference: a session that saw prefix + j draft rows + the continuation */
		pv_session* r = new_session(m, 0);
		int32_t seq[64];
		memcpy(seq, g_toks, sizeof(int32_t) * (P + j));
		CHECK(run_exact(r, seq, P + j, 1, NULL, V) == 0 && run_exact(r, cont, C, C, ref, V) == 0, "%s: reference", name);
		CHECK(same(ref, got, (size_t)V * C), "%s: snapshot truncation to %d is not bitwise the shorter session", name, P + j);
		pv_session_free(r);
		CHECK(pv_session_truncate(s, P + j) == PV_OK, "%s: drop the continuation", name);
	}
	/* a snapshot call longer than n_snapshots is refused, the session unchanged */
	int len = pv_session_length(s);
	int rc = pv_session_run(s, g_toks, K + 1, PV_EVAL_SNAPSHOT, NULL);
	CHECK(hybrid ? rc == PV_E_INVALID && pv_session_length(s) == len : rc == PV_OK, "%s: %d-row snapshot call gave %s", name,
	      K + 1, pv_status_name(rc));
	/* truncation below the snapshot call: checkpoint + replay, still bitwise */
	pv_session_free(s);
	s = new_session(m, K);
	CHECK(run_exact(s, g_toks, P, P, NULL, V) == 0 && pv_session_checkpoint(s) == PV_OK &&
	              pv_session_run(s, draft, K, PV_EVAL_SNAPSHOT, NULL) == PV_OK,
	      "%s: set-up", name);
	struct pv_session_stats st0, st1;
	pv_session_get_stats(s, &st0);
	CHECK(pv_session_truncate(s, P - 2) == PV_OK, "%s: truncate below", name);
	pv_session_get_stats(s, &st1);
	if (hybrid) CHECK(st1.rollbacks == st0.rollbacks + 1 && st1.replayed_rows == st0.replayed_rows + P - 2, "%s: replay", name);
	CHECK(run_exact(s, cont, C, C, got, V) == 0, "%s: continuation", name);
	pv_session* r = new_session(m, 0);
	CHECK(run_exact(r, g_toks, P - 2, 1, NULL, V) == 0 && run_exact(r, cont, C, C, ref, V) == 0, "%s: reference", name);
	CHECK(same(ref, got, (size_t)V * C), "%s: truncation by replay is not bitwise", name);
	pv_session_free(r);
	pv_session_free(s);
	free(ref);
	free(got);
}

/* copy_prefix: the destination continues bitwise like the source would */
static void test_copy_prefix(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, hybrid = pv_model_get_info(m)->n_linear_layers > 0;
	const int C = 3;
	float* ref = malloc(sizeof(float) * V * C);
	float* got = malloc(sizeof(float) * V * C);
	const int32_t* cont = g_toks + 40;
	/* reference continuations after 16 and after 20 tokens */
	float* ref16 = malloc(sizeof(float) * V * C);
	pv_session* r = new_session(m, 0);
	CHECK(run_exact(r, g_toks, 16, 16, NULL, V) == 0 && run_exact(r, cont, C, C, ref16, V) == 0, "%s: reference", name);
	pv_session_free(r);
	r = new_session(m, 0);
	CHECK(run_exact(r, g_toks, 20, 20, NULL, V) == 0 && run_exact(r, cont, C, C, ref, V) == 0, "%s: reference", name);
	pv_session_free(r);

	pv_session* src = new_session(m, 4);
	pv_session* dst = new_session(m, 0);
	/* src: 16 tokens, a checkpoint, a 4-row snapshot call to 20, then 2 more */
	CHECK(run_exact(src, g_toks, 16, 16, NULL, V) == 0 && pv_session_checkpoint(src) == PV_OK &&
	              pv_session_run(src, g_toks + 16, 4, PV_EVAL_SNAPSHOT, NULL) == PV_OK &&
	              run_exact(src, g_toks + 20, 2, 2, NULL, V) == 0,
	      "%s: source", name);
	/* from the current state (22), then from the checkpoint (16), then from the snapshot row (20) */
	CHECK(pv_session_copy_prefix(dst, src, 22) == PV_OK && pv_session_length(dst) == 22 &&
	              !memcmp(pv_session_tokens(dst), g_toks, 22 * sizeof(int32_t)),
	      "%s: copy at the current length: %s", name, pv_session_error(dst));
	CHECK(pv_session_copy_prefix(dst, src, 16) == PV_OK, "%s: copy from the checkpoint: %s", name, pv_session_error(dst));
	CHECK(run_exact(dst, cont, C, C, got, V) == 0 && same(ref16, got, (size_t)V * C), "%s: continuation after a checkpoint copy",
	      name);
	CHECK(pv_session_copy_prefix(dst, src, 20) == PV_OK, "%s: copy from a snapshot row: %s", name, pv_session_error(dst));
	CHECK(run_exact(dst, cont, C, C, got, V) == 0 && same(ref, got, (size_t)V * C), "%s: continuation after a snapshot copy",
	      name);
	/* where src keeps no state (below its checkpoint) the copy is refused on hybrids (a cut elsewhere) */
	int rc = pv_session_copy_prefix(dst, src, 14);
	CHECK(hybrid ? rc == PV_E_UNSUPPORTED : rc == PV_OK, "%s: copy at 14 gave %s", name, pv_status_name(rc));
	CHECK(pv_session_copy_prefix(dst, dst, 1) == PV_E_INVALID, "%s: self copy accepted", name);
	struct pv_session_stats st;
	pv_session_get_stats(dst, &st);
	CHECK(st.prefix_copies == (uint64_t)(hybrid ? 3 : 4), "%s: prefix copies %llu", name, (unsigned long long)st.prefix_copies);
	pv_session_free(src);
	pv_session_free(dst);
	free(ref);
	free(ref16);
	free(got);
}

/* sync: keeps the shared prefix, evaluates the rest, returns the last row */
static void test_sync(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab;
	float* a = malloc(sizeof(float) * V);
	float* b = malloc(sizeof(float) * V);
	int32_t seq[40];
	memcpy(seq, g_toks, sizeof seq);
	pv_session* s = new_session(m, 0);
	int reused = -1;
	struct pv_eval_out o = { a, 0, NULL, 0, NULL, 0 };
	CHECK(pv_session_sync(s, seq, 30, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 0, "%s: first sync", name);
	CHECK(pv_session_checkpoint(s) == PV_OK, "%s: checkpoint", name);
	/* a request that shares 30 tokens and adds 10: reuses 30 */
	CHECK(pv_session_sync(s, seq, 40, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 30 && pv_session_length(s) == 40,
	      "%s: extending sync reused %d", name, reused);
	pv_session* r = new_session(m, 0);
	struct pv_eval_out ob = { b, 0, NULL, 0, NULL, 0 };
	ob.logits_row0 = 39;
	CHECK(pv_session_run(r, seq, 40, PV_EVAL_EXACT, &ob) == PV_OK && same(a, b, (size_t)V), "%s: sync's last row differs", name);
	pv_session_free(r);
	/* a request that diverges at 30: rolls back to the checkpoint */
	seq[30] = (seq[30] + 1) % V;
	CHECK(pv_session_sync(s, seq, 35, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 30, "%s: diverging sync", name);
	r = new_session(m, 0);
	ob.logits_row0 = 34;
	CHECK(pv_session_run(r, seq, 35, PV_EVAL_EXACT, &ob) == PV_OK && same(a, b, (size_t)V), "%s: diverging sync's last row",
	      name);
	pv_session_free(r);
	/* the same request again: the last token is evaluated again for its outputs */
	CHECK(pv_session_sync(s, seq, 35, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 34 && same(a, b, (size_t)V),
	      "%s: repeated sync reused %d", name, reused);
	pv_session_free(s);
	free(a);
	free(b);
}

/* a pool shared by two sessions on two threads: each gets its solo results */
struct pool_job {
	pv_model* m;
	pv_pool* pool;
	const int32_t* toks;
	float* lg;
	int rc;
};

static void* pool_thread(void* arg)
{
	struct pool_job* j = arg;
	struct pv_session_params sp = { .n_ctx = 160, .pool = j->pool, .chunk_min_tokens = 16 };
	pv_session* s = NULL;
	j->rc = pv_session_new(&s, j->m, &sp, NULL, 0);
	for (int r = 0; r < 4 && !j->rc; r++) {
		j->rc = pv_session_truncate(s, 0);
		if (!j->rc) j->rc = pv_session_eval(s, j->toks, NP, j->lg, PV_LOGITS_ALL);
	}
	pv_session_free(s);
	return NULL;
}

static void test_shared_pool(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab;
	float *solo[2], *got[2];
	for (int i = 0; i < 2; i++) {
		solo[i] = malloc(sizeof(float) * V * NP);
		got[i] = malloc(sizeof(float) * V * NP);
		pv_session* s = new_session(m, 0);
		CHECK(pv_session_eval(s, g_toks + 3 * i, NP, solo[i], PV_LOGITS_ALL) == PV_OK, "%s: solo", name);
		pv_session_free(s);
	}
	pv_pool* pool = pv_pool_new(2);
	struct pool_job j[2];
	pthread_t th[2];
	for (int i = 0; i < 2; i++) {
		j[i] = (struct pool_job){ m, pool, g_toks + 3 * i, got[i], -1 };
		pthread_create(&th[i], NULL, pool_thread, &j[i]);
	}
	for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
	pv_pool_free(pool);
	for (int i = 0; i < 2; i++)
		CHECK(j[i].rc == PV_OK && same(solo[i], got[i], (size_t)V * NP), "%s: session %d on a shared pool differs", name, i);
	for (int i = 0; i < 2; i++) {
		free(solo[i]);
		free(got[i]);
	}
}

/* status codes: bad calls fail with the right code and leave the session as it was */
static void test_status(pv_model* m, const char* name)
{
	pv_session* s = new_session(m, 0);
	const int V = pv_model_get_info(m)->vocab;
	CHECK(pv_session_run(s, g_toks, 5, 0, NULL) == PV_OK && !pv_session_error(s)[0], "%s: run", name);
	int32_t bad = V;
	CHECK(pv_session_run(s, &bad, 1, 0, NULL) == PV_E_INVALID && pv_session_length(s) == 5 && pv_session_error(s)[0],
	      "%s: bad token", name);
	CHECK(pv_session_run(s, g_toks, 2, 0x80, NULL) == PV_E_INVALID && pv_session_length(s) == 5, "%s: bad flags", name);
	int32_t* many = calloc(200, sizeof(int32_t));
	CHECK(pv_session_run(s, many, 200, 0, NULL) == PV_E_CONTEXT && pv_session_length(s) == 5, "%s: context", name);
	free(many);
	float lg[1];
	struct pv_eval_out o = { lg, 3, NULL, 0, NULL, 0 };
	CHECK(pv_session_run(s, g_toks, 2, 0, &o) == PV_E_INVALID, "%s: output row outside the call", name);
	CHECK(pv_session_truncate(s, 6) == PV_E_INVALID && pv_session_rollback(s, -1) == PV_E_INVALID, "%s: truncate range", name);
	CHECK(pv_session_run(s, g_toks, 1, 0, NULL) == PV_OK && !pv_session_error(s)[0] && pv_session_ok(s),
	      "%s: a success clears the message", name);
	pv_session_free(s);
	struct pv_session_params bad_p = { .n_ctx = 1 << 30 };
	char err[256];
	pv_session* s2 = NULL;
	CHECK(pv_session_new(&s2, m, &bad_p, err, sizeof err) == PV_E_INVALID && !s2, "%s: session parameters", name);
}

/* session_bytes follows what the parameters allocate */
static void test_bytes(pv_model* m, const char* name)
{
	const struct pv_model_info* in = pv_model_get_info(m);
	struct pv_session_params a = { .n_ctx = 64, .n_threads = 2 }, b = a;
	b.n_snapshots = 4;
	uint64_t d = pv_session_bytes(m, &b) - pv_session_bytes(m, &a);
	uint64_t want = in->n_linear_layers ? (uint64_t)4 * m->cfg.n_layers : 0;
	(void)want;
	size_t sf = 0;
	for (int l = 0; l < m->cfg.n_layers; l++)
		if (m->cfg.layer_kind[l] == PV_LAYER_LINEAR)
			sf += (size_t)m->cfg.lin_v_heads * m->cfg.lin_k_dim * m->cfg.lin_v_dim +
			      (size_t)(m->cfg.conv_kernel - 1) * (2 * m->cfg.lin_k_heads * m->cfg.lin_k_dim + m->cfg.lin_v_heads * m->cfg.lin_v_dim);
	CHECK(d == (uint64_t)4 * sf * 4, "%s: 4 snapshots add %llu bytes, expected %llu", name, (unsigned long long)d,
	      (unsigned long long)(4 * sf * 4));
}

/* one validator, one set of limits: a loaded config passes; each field pushed past a limit fails */
static void test_config_check(pv_model* m, const char* name)
{
	char err[256];
	struct pv_config c = m->cfg;
	CHECK(pv_config_check(&c, name, err, sizeof err) == 0, "%s: the loaded config fails the check: %s", name, err);
	struct { int* f; int bad; } muts[] = {
		{ &c.n_layers, 0 }, { &c.hidden, PV_MAX_DIM + 1 }, { &c.vocab, 0 }, { &c.n_heads, PV_MAX_HEADS + 1 },
		{ &c.head_dim, 0 }, { &c.rope_dim, 3 }, { &c.max_pos, PV_MAX_CONTEXT + 1 }, { &c.n_mtp_layers, 2 },
	};
	for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
		int keep = *muts[i].f;
		*muts[i].f = muts[i].bad;
		CHECK(pv_config_check(&c, name, err, sizeof err) != 0, "%s: mutation %zu passed the check", name, i);
		*muts[i].f = keep;
	}
	if (m->info.n_linear_layers) {
		c.conv_kernel = 65;
		CHECK(pv_config_check(&c, name, err, sizeof err) != 0 && strstr(err, "conv kernel"), "%s: conv kernel 65", name);
		c.conv_kernel = m->cfg.conv_kernel;
	}
	if (m->cfg.n_experts) {
		c.n_experts_used = c.n_experts + 1;
		CHECK(pv_config_check(&c, name, err, sizeof err) != 0, "%s: more experts per token than experts", name);
		c.n_experts_used = m->cfg.n_experts_used;
	}
	const struct pv_arch_info* ai = pv_arch_info(m->cfg.arch);
	CHECK(ai && pv_arch_from_hf(ai->hf) == ai && pv_arch_from_gguf(ai->gguf) == ai && !strcmp(m->info.arch_name, ai->hf),
	      "%s: the architecture table's names do not round-trip", name);
}

static int n_log_lines;
static void count_log(void* user, int level, const char* line)
{
	(void)user;
	(void)line;
	if (level <= PV_LOG_INFO) n_log_lines++;
}

/* the digest is sha256sum's, over the weight files in name order */
static void test_digest(pv_model* m, const char* dir, const char* name)
{
	char hex[65], cmd[1200], out[256];
	CHECK(pv_model_digest(m, hex) == PV_OK && strlen(hex) == 64, "%s: digest", name);
	snprintf(cmd, sizeof cmd, "cat $(ls %s/*.safetensors | grep -v reference.safetensors | sort) | sha256sum", dir);
	if (t_run_cmd(cmd, out, sizeof out) != 0) {
		printf("skip %s: digest: sha256sum not available\n", name);
		return;
	}
	CHECK(!strncmp(out, hex, 64), "%s: digest %s, sha256sum %.64s", name, hex, out);
	char again[65];
	CHECK(pv_model_digest(m, again) == PV_OK && !strcmp(hex, again), "%s: cached digest differs", name);
}

/* Runs fn on every fixture model (CPU), with the fixture's first prompt in g_toks. */
static void each_fixture(void (*fn)(pv_model* m, const char* dir, const char* name))
{
	char names[32][128];
	int nf = fx_list(fx_root(), names, 32);
	CHECK(nf >= 6, "fixtures found: %d", nf);
	for (int f = 0; f < nf; f++) {
		char dir[512], ref[600], err[512];
		snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[f]);
		snprintf(ref, sizeof ref, "%s/reference.json", dir);
		json_t* j = json_load_file(ref, 0, NULL);
		g_toks = fx_ids(json_object_get(json_array_get(json_object_get(j, "cases"), 0), "prompt"), &g_ntok);
		json_decref(j);
		pv_model* m = NULL;
		if (g_ntok < 48) {
			CHECK(0, "%s: prompt of %d tokens", names[f], g_ntok);
		} else if (pv_model_open(&m, dir, NULL, err, sizeof err) != PV_OK) {
			CHECK(0, "%s: open: %s", names[f], err);
		} else {
			fn(m, dir, names[f]);
		}
		pv_model_close(m);
		free(g_toks);
	}
}

/*
 * KV cache types: every bitwise property above (exact flag, snapshots and truncation, prefix
 * copies, sync) holds over f16, bf16 and q8_0 caches too, since a row is rounded once when it is
 * written. Beyond that: a typed cache changes the logits (it is not silently f32) but only a
 * little (the top token of most rows stays); the session's bytes shrink by the KV share; an
 * unknown type and a copy between caches of different types are refused.
 */
static void test_cache_types(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, n = NP;
	const struct pv_config* c = &m->cfg;
	float* ref = malloc(sizeof(float) * V * n);
	float* got = malloc(sizeof(float) * V * n);
	g_cache = 0;
	pv_session* r = new_session(m, 0);
	CHECK(run_exact(r, g_toks, n, n, ref, V) == 0, "%s: f32 reference", name);
	for (int t = PV_CACHE_F16; t <= PV_CACHE_Q8_0; t++) {
		const char* tn = pv_cache_type_name(t);
		g_cache = t;
		pv_session* s = new_session(m, 0);
		CHECK(pv_session_cache_type(s) == t, "%s: cache type %s not kept", name, tn);
		CHECK(run_exact(s, g_toks, n, n, got, V) == 0, "%s %s: run", name, tn);
		/* the first row attends to itself only: softmax of one score is 1, so o = v exactly
		 * rounded; later rows differ from f32 */
		double dmax = 0, lmax = 0;
		int top = 0;
		for (int i = 0; i < n; i++) {
			top += pv_argmax(ref + (size_t)i * V, V) == pv_argmax(got + (size_t)i * V, V);
			for (int v = 0; v < V; v++) {
				const double d = fabs((double)ref[(size_t)i * V + v] - got[(size_t)i * V + v]);
				dmax = d > dmax ? d : dmax;
				lmax = fabs(ref[(size_t)i * V + v]) > lmax ? fabs(ref[(size_t)i * V + v]) : lmax;
			}
		}
		CHECK(dmax > 0, "%s %s: logits bitwise the f32 cache's (is the type used?)", name, tn);
		CHECK(dmax < 0.05 * lmax + 0.05 && top >= n * 3 / 4, "%s %s: logits moved by %.4g (max |logit| %.4g), top-1 kept %d/%d",
		      name, tn, dmax, lmax, top, n);
		/* the exact path's batch invariance over this cache: one call == row by row */
		pv_session* s1 = new_session(m, 0);
		float* rows = malloc(sizeof(float) * V * n);
		CHECK(run_exact(s1, g_toks, n, 1, rows, V) == 0 && same(rows, got, (size_t)V * n),
		      "%s %s: an exact %d-row call differs from row-by-row calls", name, tn, n);
		free(rows);
		/* a copy between caches of different types is refused, the destination untouched */
		g_cache = 0;
		pv_session* d = new_session(m, 0);
		CHECK(pv_session_copy_prefix(d, s, 4) == PV_E_INVALID && pv_session_length(d) == 0, "%s %s: copy from f32 accepted",
		      name, tn);
		pv_session_free(d);
		pv_session_free(s1);
		pv_session_free(s);
		/* bytes: the KV cache at its type's size */
		struct pv_session_params a = { .n_ctx = 64, .n_threads = 2 }, b = a;
		b.cache_type = t;
		size_t na = 0;
		for (int l = 0; l < c->n_layers; l++) na += c->layer_kind[l] == PV_LAYER_ATTN;
		const uint64_t hb = t == PV_CACHE_Q8_0 ? (uint64_t)(c->head_dim + 31) / 32 * 34 : (uint64_t)c->head_dim * 2;
		const uint64_t want = na * 2 * 64 * (uint64_t)c->n_kv_heads * (4 * (uint64_t)c->head_dim - hb);
		CHECK(pv_session_bytes(m, &a) - pv_session_bytes(m, &b) == want, "%s %s: a typed cache saves %llu bytes, expected %llu",
		      name, tn, (unsigned long long)(pv_session_bytes(m, &a) - pv_session_bytes(m, &b)), (unsigned long long)want);
		/* the properties the engine promises, over this cache */
		g_cache = t;
		test_exact(m, name);
		test_snapshots(m, name);
		test_copy_prefix(m, name);
		test_sync(m, name);
	}
	g_cache = 0;
	struct pv_session_params bad = { .n_ctx = 64, .n_threads = 2, .cache_type = 99 };
	char err[256];
	pv_session* s2 = NULL;
	CHECK(pv_session_new(&s2, m, &bad, err, sizeof err) == PV_E_INVALID && !s2 && strstr(err, "cache type"),
	      "%s: an unknown cache type was accepted", name);
	CHECK(pv_cache_type_parse("Q8_0") == PV_CACHE_Q8_0 && pv_cache_type_parse("f16") == PV_CACHE_F16 &&
	              pv_cache_type_parse("q4_0") == -1 && !strcmp(pv_cache_type_name(PV_CACHE_DEFAULT), "f32"),
	      "cache type names");
	pv_session_free(r);
	free(ref);
	free(got);
}

/*
 * Continuous batching (the seam's forward_many, cpu/forward_many.c): fixture.h's fx_many_run with
 * the k sessions on one pool of 2 threads and max_batch mb (groups of mb rows). Returns the rows
 * that went together (batched_rows), or -1.
 */
static uint64_t many_run(pv_model* m, const char* name, const char* what, int k, int steps, const int* cache, int mb)
{
	pv_pool* pool = pv_pool_new(2);
	const struct fx_many o = { .max_batch = mb, .pool = pool };
	const uint64_t b = fx_many_run(m, g_toks, name, what, k, steps, cache, &o);
	pv_pool_free(pool);
	return b;
}

/* Every fixture architecture is covered on the CPU (attention with or without the output gate,
 * Gated DeltaNet, MoE): k = 2, 3, 5 rows batched and bitwise their own steps; 9 sessions of
 * max_batch 4 (groups of 4, 4, 1 rows in the host's scratch); q8_0 caches; uncovered batches
 * fall back with the same bits (mixed cache types; a session twice: its rows one after the
 * other); a non-finite row fails its session as its own step would, its history untouched. */
static void test_many(pv_model* m, const char* name)
{
	enum { STEPS = 6 };
	int f32[9] = { 0 }, q8[3] = { PV_CACHE_Q8_0, PV_CACHE_Q8_0, PV_CACHE_Q8_0 }, mixed[3] = { 0, PV_CACHE_F16, 0 };
	static const int ks[3] = { 2, 3, 5 };
	for (int i = 0; i < 3; i++)
		CHECK(many_run(m, name, "f32", ks[i], STEPS, f32, 16) == (uint64_t)ks[i] * STEPS, "%s many k=%d: not every row batched",
		      name, ks[i]);
	CHECK(many_run(m, name, "groups", 9, STEPS, f32, 4) == 9 * STEPS, "%s many: 9 rows in groups of 4", name);
	CHECK(many_run(m, name, "q8_0", 3, STEPS, q8, 16) == 3 * STEPS, "%s many q8_0: not every row batched", name);
	CHECK(many_run(m, name, "mixed", 3, STEPS, mixed, 16) == 0, "%s many: mixed cache types batched", name);

	/* one session twice in a batch: stepped one row after the other, as two calls would */
	const int V = pv_model_get_info(m)->vocab;
	float* lg = malloc(sizeof(float) * (size_t)V * 4);
	pv_pool* pool = pv_pool_new(2);
	struct pv_session_params sp = { .n_ctx = 96, .max_batch = 16, .pool = pool };
	pv_session *a = NULL, *b = NULL, *c = NULL;
	char err[256];
	CHECK(!pv_session_new(&a, m, &sp, err, sizeof err) && !pv_session_new(&b, m, &sp, err, sizeof err) &&
	              !pv_session_new(&c, m, &sp, err, sizeof err),
	      "%s many: sessions: %s", name, err);
	CHECK(run_exact(a, g_toks, 5, 5, NULL, V) == 0 && run_exact(b, g_toks, 5, 5, NULL, V) == 0 &&
	              run_exact(c, g_toks, 5, 5, NULL, V) == 0,
	      "%s many: prompts", name);
	pv_session* twice[2] = { a, a };
	struct pv_eval_out o2[2] = { { lg, 0, NULL, 0, NULL, 0 }, { lg + V, 0, NULL, 0, NULL, 0 } };
	int rc[3];
	CHECK(pv_session_run_many(twice, g_toks + 5, 2, o2, rc) == PV_OK && pv_session_length(a) == 7, "%s many: a session twice",
	      name);
	CHECK(run_exact(b, g_toks + 5, 2, 1, lg + 2 * (size_t)V, V) == 0 && same(lg, lg + 2 * (size_t)V, 2 * (size_t)V),
	      "%s many: a session twice differs from its two steps", name);
	struct pv_session_stats st;
	CHECK(!pv_session_get_stats(a, &st) && st.batched_rows == 0, "%s many: a session twice was batched", name);

	/* non-finite rows (a NaN in a norm weight): each session fails, PV_E_NUMERIC, length kept */
	float* w = m->w.layers[0].attn_norm;
	const float keep = w[0];
	w[0] = NAN;
	pv_session* three[3] = { a, b, c };
	int32_t am[3];
	struct pv_eval_out o3[3] = { { lg, 0, NULL, 0, NULL, 0 }, { NULL, 0, &am[1], 0, NULL, 0 }, { lg + V, 0, &am[2], 0, NULL, 0 } };
	const int la = pv_session_length(a), lb = pv_session_length(b);
	CHECK(pv_session_run_many(three, g_toks, 3, o3, rc) == PV_E_NUMERIC, "%s many: NaN rows succeeded", name);
	for (int i = 0; i < 3; i++)
		CHECK(rc[i] == PV_E_NUMERIC && !pv_session_ok(three[i]) && strstr(pv_session_error(three[i]), "NaN"),
		      "%s many: NaN row %d gave %s: %s", name, i, pv_status_name(rc[i]), pv_session_error(three[i]));
	CHECK(pv_session_length(a) == la && pv_session_length(b) == lb && pv_session_length(c) == 5,
	      "%s many: a failed row changed the history", name);
	w[0] = keep;
	pv_session_free(a);
	pv_session_free(b);
	pv_session_free(c);
	pv_pool_free(pool);
	free(lg);
}

#define FIXTURE_CASE(id, call)                                                               \
	static void id##_fx(pv_model* m, const char* dir, const char* name) { (void)dir; call; } \
	TEST_CASE(id) { each_fixture(id##_fx); }

FIXTURE_CASE(outputs, test_outputs(m, name))
FIXTURE_CASE(exact_flag, test_exact(m, name))
FIXTURE_CASE(snapshots, test_snapshots(m, name))
FIXTURE_CASE(copy_prefix, test_copy_prefix(m, name))
FIXTURE_CASE(sync, test_sync(m, name))
FIXTURE_CASE(shared_pool, test_shared_pool(m, name))
FIXTURE_CASE(status_codes, test_status(m, name))
FIXTURE_CASE(session_bytes, test_bytes(m, name))
FIXTURE_CASE(digest, test_digest(m, dir, name))
/* the SHA extensions' block function against the portable one: random lengths (0 .. 300, whole
 * blocks, a few MB), start offsets 0 .. 15, fed in random pieces; plus FIPS 180-4's vectors */
TEST_CASE(sha256_paths)
{
	const size_t N = (size_t)3 << 20;
	unsigned char* buf = malloc(N + 16);
	CHECK(buf != NULL, "sha256: out of memory");
	if (!buf) return;
	uint32_t r = 7;
	for (size_t i = 0; i < N + 16; i++) buf[i] = (unsigned char)((r = r * 1664525u + 1013904223u) >> 24);
	static const char* abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	static const char* two = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
	int bad = 0;
	for (int c = 0; c < 400; c++) {
		size_t len = c < 300 ? (size_t)c : c < 380 ? (size_t)64 * (c - 299) : N - (size_t)(c - 380) * 977;
		const unsigned char* p = buf + (size_t)(c % 16);
		unsigned char d[2][32];
		for (int path = 0; path < 2; path++) {
			pv_sha256_portable(path);
			struct pv_sha256 h;
			pv_sha256_init(&h);
			for (size_t o = 0; o < len;) { /* pieces of 0 .. 200 bytes, then the rest */
				size_t k = (r = r * 1664525u + 1013904223u) >> 24;
				if (k > 200 || o + k > len) k = len - o;
				pv_sha256_update(&h, p + o, k);
				o += k;
			}
			pv_sha256_final(&h, d[path]);
		}
		bad += memcmp(d[0], d[1], 32) != 0;
	}
	CHECK(bad == 0, "sha256: %d of 400 inputs differ between the SHA-extension and portable paths", bad);
	for (int path = 0; path < 2; path++) {
		pv_sha256_portable(path);
		const char* in[2] = { "abc", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq" };
		const char* want[2] = { abc, two };
		for (int i = 0; i < 2; i++) {
			struct pv_sha256 h;
			unsigned char d[32];
			char hex[65];
			pv_sha256_init(&h);
			pv_sha256_update(&h, in[i], strlen(in[i]));
			pv_sha256_final(&h, d);
			for (int j = 0; j < 32; j++) snprintf(hex + 2 * j, 3, "%02x", d[j]);
			CHECK(!strcmp(hex, want[i]), "sha256 (%s path) of FIPS vector %d: %s", path ? "portable" : "default", i, hex);
		}
	}
	pv_sha256_portable(0);
	free(buf);
}

FIXTURE_CASE(config_check, test_config_check(m, name))
FIXTURE_CASE(cache_types, test_cache_types(m, name))
FIXTURE_CASE(many, test_many(m, name))

/* non-finite logits fail the call (corrupt weights must not decode as token 0), for every
 * output kind, and the session stays failed */
static void nonfinite_fx(pv_model* m, const char* dir, const char* name)
{
	float* w = m->w.layers[0].attn_norm; /* a model-owned f32 vector */
	const float keep = w[0];
	w[0] = NAN;
	const int V = pv_model_get_info(m)->vocab, H = pv_model_get_info(m)->hidden;
	float* lg = malloc(sizeof(float) * V * 4);
	float* hid = malloc(sizeof(float) * H * 4);
	int32_t am[4];
	struct pv_eval_out outs[3] = { { lg, 0, NULL, 0, NULL, 0 }, { NULL, 0, am, 0, NULL, 0 }, { NULL, 0, NULL, 0, hid, 0 } };
	for (int k = 0; k < 3; k++) {
		pv_session* s = new_session(m, 0);
		int rc = pv_session_run(s, g_toks, 4, 0, &outs[k]);
		CHECK(rc == PV_E_NUMERIC && !pv_session_ok(s) && strstr(pv_session_error(s), "NaN"), "%s: output %d gave %s: %s", name,
		      k, pv_status_name(rc), pv_session_error(s));
		CHECK(pv_session_run(s, g_toks, 1, 0, &outs[1]) != PV_OK, "%s: the session is not sticky-failed", name);
		pv_session_free(s);
	}
	/* no output asked: nothing is checked, nothing fails (the rows' KV is all there is) */
	pv_session* s = new_session(m, 0);
	CHECK(pv_session_run(s, g_toks, 4, 0, NULL) == PV_OK, "%s: a run without outputs", name);
	pv_session_free(s);
	w[0] = keep;
	free(lg);
	free(hid);
}
FIXTURE_CASE(nonfinite_logits, nonfinite_fx(m, dir, name))

/* cpu.moe_group=0 (each row's experts on their own) gives the grouped pass's bits: the A/B
 * arms of the expert-overlap measurement compute the same thing */
static void moe_group_fx(pv_model* m, const char* dir, const char* name)
{
	const struct pv_model_info* in = pv_model_get_info(m);
	if (!in->n_experts) return;
	pv_model* u = NULL;
	char err[512];
	struct pv_model_params mp = { .knobs = "cpu.moe_group=0" };
	CHECK(pv_model_open(&u, dir, &mp, err, sizeof err) == PV_OK, "%s: open ungrouped: %s", name, err);
	if (!u) return;
	const int V = in->vocab, N = 12;
	float *a = malloc(sizeof(float) * V * N), *b = malloc(sizeof(float) * V * N);
	struct pv_eval_out oa = { a, 0, NULL, 0, NULL, 0 }, ob = { b, 0, NULL, 0, NULL, 0 };
	pv_session *sa = new_session(m, 0), *sb = new_session(u, 0);
	CHECK(pv_session_run(sa, g_toks, N, PV_EVAL_EXACT, &oa) == PV_OK && pv_session_run(sb, g_toks, N, PV_EVAL_EXACT, &ob) == PV_OK,
	      "%s: runs", name);
	CHECK(same(a, b, (size_t)V * N), "%s: ungrouped experts differ from the grouped pass", name);
	pv_session_free(sa);
	pv_session_free(sb);
	pv_model_close(u);
	free(a);
	free(b);
}
FIXTURE_CASE(moe_group_knob, moe_group_fx(m, dir, name))

static void log_fx(pv_model* m0, const char* dir, const char* name)
{
	pv_model* m = NULL;
	char err[512];
	n_log_lines = 0;
	pv_set_log(count_log, NULL, PV_LOG_INFO);
	struct pv_model_params quiet = { 0 };
	CHECK(pv_model_open(&m, dir, &quiet, err, sizeof err) == PV_OK && n_log_lines == 0, "%s: a quiet open logged %d lines", name,
	      n_log_lines);
	pv_model_close(m);
	m = NULL;
	struct pv_model_params loud = { .verbose = 1 };
	CHECK(pv_model_open(&m, dir, &loud, err, sizeof err) == PV_OK && n_log_lines > 0, "%s: a verbose open logged nothing", name);
	pv_set_log(NULL, NULL, 0);
	pv_model_close(m);
	const struct pv_knob* kn;
	CHECK(pv_model_knobs(m0, &kn) == 3 && !strcmp(kn[0].name, "cpu.isa") && !strcmp(kn[1].name, "cpu.exact_activations") &&
	              !strcmp(kn[2].name, "cpu.moe_group") && kn[2].value == 1,
	      "%s: the CPU's knobs", name);
}
TEST_CASE(log_and_knobs) { each_fixture(log_fx); }

TEST_CASE(identity_and_open_errors)
{
	const struct pv_build_info* bi = pv_build_info();
	CHECK(bi->commit[0] && bi->cflags[0] && bi->compiler[0] && bi->nvcc_flags[0] && bi->backends[0] && bi->cpu_isa[0],
	      "build info");
	CHECK(!strcmp(pv_status_name(PV_E_CONTEXT), "PV_E_CONTEXT") && !strcmp(pv_status_name(123), "unknown"), "status names");
	char names[32][128];
	CHECK(fx_list(fx_root(), names, 32) > 0, "fixtures");
	pv_model* m = NULL;
	char err[256], dir[300];
	snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[0]);
	CHECK(pv_model_open(&m, "/nonexistent/model", NULL, err, sizeof err) == PV_E_IO && !m, "missing path");
	struct pv_model_params kp = { .knobs = "cuda.pdl=0" };
	CHECK(pv_model_open(&m, dir, &kp, err, sizeof err) == PV_E_INVALID && !m, "knobs on the cpu backend: %s", err);
	struct pv_model_params bp = { .backend = "tpu" };
	CHECK(pv_model_open(&m, dir, &bp, err, sizeof err) == PV_E_INVALID && !m, "unknown backend");
}

TEST_MAIN("test_api")
