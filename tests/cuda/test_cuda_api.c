/*
 * test_cuda_api.c: the engine API that speculation and serving build on, on the CUDA backend, on
 * every fixture architecture (make test-cuda; a GPU is needed: without one it prints "no CUDA
 * device" and fails, never passes silently). tests/test_api.c is the same for the CPU.
 *
 *   outputs:   argmax rows == the argmax of the CUDA logits rows; hidden rows through the LM head
 *              (the CPU's matmul over the same weights) == the logits within TOL_CPU; any subset
 *              of rows and outputs gives the same values, bitwise; the decode graph's one-row
 *              calls too
 *   exact:     PV_EVAL_EXACT calls of 40 rows (steps of 16, 16, 8) == one-row calls, bitwise
 *   snapshots: a PV_EVAL_SNAPSHOT call, then truncation into each of its rows, then more rows ==
 *              a session that never saw the dropped rows, bitwise; the call's own logits == an
 *              exact call's; a 20-row call (two device steps: slots 16.. from the second); a
 *              one-row call (direct launches, not the graph)
 *   prefix:    copy_prefix from the current state, a checkpoint and a snapshot row, then more
 *              rows == the source's continuation, bitwise; sync
 *   knobs:     pv_model_knobs lists every switch (names, variables, docs, defaults); a knobs
 *              string changes the values; switches that keep the arithmetic (cuda.pdl,
 *              cuda.graphs, cuda.gemv_direct) keep the bits; an unknown name fails the open;
 *              pv_cuda_set_knobs changes a session's copy (decode switches: the graph captured
 *              again, the same bits), refuses cuda.att_split
 *   bytes:     pv_session_bytes == the engine's host part + the session's device_bytes
 *   cpu:       the CUDA logits vs the CPU backend's within TOL_CPU (tests/cuda/test_cuda.c's)
 *   many:      continuous batching (the seam's forward_many, src/cuda/many.cu) on every fixture,
 *              the hybrids included (gated attention; DeltaNet layers, each row over its own
 *              session's recurrent state): k = 2, 3, 5, 16, 17 sessions (17: two groups) of
 *              different contexts and prompt lengths, stepped 8 times together
 *              (pv_session_run_many, as pv_generator_step_many does) == the same sessions stepped
 *              alone: every row's logits, final-norm row (memcmp) and argmax; the rows really went
 *              together (batched_rows = k x steps, the CUDA counters: graphs, or direct launches
 *              with cuda.graphs=0 / cuda.batch_graphs=0); batches in a new order every step with
 *              one session stepping alone in between (other hosts, other rows, states carried
 *              across both paths); greedy generators through pv_generator_step_many == alone; f16,
 *              bf16 and q8_0 caches; the knobs cuda.gemv_shared=1|2, graphs off; a batch mixing cache
 *              types is not covered (stepped alone, the same bits)
 *   cache:     KV cache types f16, bf16 and q8_0: the CUDA logits vs the CPU backend's over the same
 *              cache type within TOL_CPU, not the f32 cache's bits; a prefill call over the typed
 *              cache and the decode rows after it within the prefill tolerance of the exact
 *              path; outputs, exact, snapshots, prefix and bytes above rerun over the typed
 *              cache (the same memcmp claims); the session's bytes shrink by the KV share; a type
 *              past q8_0 is refused
 *   mtp:       the MTP head (pv_session_mtp) over f32, f16, bf16 and q8_0 caches, on the fixture with a
 *              head and on tiny synth files (an MoE head, q8_0; a dense head, q4_k_m): the CUDA
 *              head's output rows vs the CPU head's over the same inputs within TOL_CPU (typed
 *              caches: their CUDA-vs-CPU bounds), greedy ids equal where the CPU logits' margin
 *              is clear, over a whole sequence and over chained drafts (the drafter's calls);
 *              batch invariance: calls of 1, 5, 7, 16 and 39 rows, in two sessions, bitwise;
 *              truncation keeps the head's rows below n - 1 and rows written again are bitwise
 *              the first ones; argmax without output rows; the target's rows after head calls
 *              bitwise a session's without them; the session's bytes with the head's cache; a
 *              model without a head and a session without mtp = 1: PV_E_UNSUPPORTED
 *
 * Every "same session" claim is a memcmp: these are the properties exact speculative decoding
 * rests on, not tolerances.
 */
#include "convert/synth.h"
#include "cpu/ops.h"
#include "cuda/backend.h"
#include "engine/session.h"
#include "fixture.h"
#include "many.h"
#include "harness.h"
#include "model/model.h"
#include "proven.h"
#include "proven_dev.h"
#include "proven_spec.h"

/* The CPU reference in its exact numerics (f32 activations): the CUDA kernels compute f32
 * activations too, and TOL_CPU is that comparison's bound (the fast numerics' cost is measured
 * on real text, docs/results/cpu-quality-*). */
static const struct pv_model_params cpu_exact = { .knobs = "cpu.exact_activations=1" };

#define TOL_CPU 1e-4 /* against the CPU engine (summation order only), as tests/cuda/test_cuda.c */
#define NP      24   /* prompt rows used here (the fixtures' prompts are longer)               */
/* the prefill path against the exact one, last rows (tests/cuda/test_cuda.c "prefill": dense
 * fixtures <= 7e-3, the tiny random hybrids amplify bf16 rounding: gross errors only) */
#define TOL_PREFILL       2e-2
#define TOL_PREFILL_GROSS 0.6

static int32_t* g_toks; /* the fixture's first prompt */
static int g_ntok;
static int g_cache; /* the KV cache type of new_session's sessions (enum pv_cache_type; 0: f32) */

/* fixture.h's session helpers with this file's cache type (g_cache) */
static pv_session* new_session(pv_model* m, int n_snapshots) { return fx_session(m, n_snapshots, g_cache, 0); }
static int run_exact(pv_session* s, const int32_t* toks, int n, int step, float* lg, int V)
{
	return fx_run_exact(s, toks, n, step, lg, V);
}
static int same(const float* a, const float* b, size_t n) { return fx_same(a, b, n); }

/* max over rows of (max |a - ref|) / max(1, max |ref|) */
static double rel_err(const float* a, const float* ref, int n, int V)
{
	double worst = 0;
	for (int t = 0; t < n; t++) {
		double e = 0, mx = 0;
		for (int i = 0; i < V; i++) {
			double d = fabs((double)a[(size_t)t * V + i] - ref[(size_t)t * V + i]);
			if (!(d <= e)) e = d;
			if (fabs(ref[(size_t)t * V + i]) > mx) mx = fabs(ref[(size_t)t * V + i]);
		}
		double r = e / (mx > 1 ? mx : 1);
		if (!(r <= worst)) worst = r;
	}
	return worst;
}

/* argmax and hidden rows agree with the logits, whichever rows and outputs are asked */
static void test_outputs(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, H = pv_model_get_info(m)->hidden;
	float* lg = malloc(sizeof(float) * V * NP);
	float* hid = malloc(sizeof(float) * H * NP);
	float* lg2 = malloc(sizeof(float) * V * NP);
	int32_t am[NP], am2[NP];
	pv_session* s = new_session(m, 0);
	struct pv_eval_out o = { lg, 0, am, 0, hid, 0 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o) == PV_OK, "%s: run: %s", name, pv_session_error(s));
	int ok = 1;
	for (int t = 0; t < NP; t++) ok &= am[t] == pv_argmax(lg + (size_t)t * V, V);
	CHECK(ok, "%s: argmax rows differ from the argmax of the CUDA logits rows", name);
	/* hidden rows are the LM head's input: the LM head over them (the CPU's matmul) gives the
	 * logits up to summation order */
	pv_matmul(NULL, lg2, V, hid, H, NP, &m->w.lm_head);
	double e = rel_err(lg2, lg, NP, V);
	CHECK(e <= TOL_CPU, "%s: the LM head over the hidden rows vs the logits: rel %.3g > %g", name, e, TOL_CPU);
	/* some rows, some outputs: the same values */
	pv_session_free(s);
	s = new_session(m, 0);
	struct pv_eval_out o2 = { NULL, 0, am2, 10, NULL, 0 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o2) == PV_OK, "%s: argmax-only run", name);
	CHECK(!memcmp(am + 10, am2, sizeof(int32_t) * (NP - 10)), "%s: argmax rows [10, n) alone differ", name);
	pv_session_free(s);
	s = new_session(m, 0);
	float* hid2 = malloc(sizeof(float) * H);
	struct pv_eval_out o3 = { lg2, NP - 3, NULL, 0, hid2, NP - 1 };
	CHECK(pv_session_run(s, g_toks, NP, PV_EVAL_EXACT, &o3) == PV_OK, "%s: tail run", name);
	CHECK(same(lg + (size_t)(NP - 3) * V, lg2, (size_t)3 * V), "%s: logits of the last 3 rows differ", name);
	CHECK(same(hid + (size_t)(NP - 1) * H, hid2, (size_t)H), "%s: the last hidden row alone differs", name);
	struct pv_session_stats st;
	pv_session_get_stats(s, &st);
	CHECK(st.logits_rows == 3 && st.hidden_rows == 1 && st.argmax_rows == 0 && st.rows == NP && st.exact_rows == NP,
	      "%s: stats rows %llu logits %llu hidden %llu", name, (unsigned long long)st.rows,
	      (unsigned long long)st.logits_rows, (unsigned long long)st.hidden_rows);
	pv_session_free(s);
	/* one-row calls (the decode graph): every output, and argmax alone */
	s = new_session(m, 0);
	pv_session* s2 = new_session(m, 0);
	ok = 1;
	for (int t = 0; t < 6 && ok; t++) {
		int32_t a1 = -1, a2 = -1;
		struct pv_eval_out p1 = { lg2, 0, &a1, 0, hid2, 0 }, p2 = { NULL, 0, &a2, 0, NULL, 0 };
		ok = pv_session_run(s, g_toks + t, 1, 0, &p1) == PV_OK && pv_session_run(s2, g_toks + t, 1, 0, &p2) == PV_OK;
		ok = ok && a1 == pv_argmax(lg2, V) && a1 == a2 && same(lg2, lg + (size_t)t * V, (size_t)V) &&
		     same(hid2, hid + (size_t)t * H, (size_t)H);
	}
	CHECK(ok, "%s: one-row calls: argmax, logits or hidden differ from the 24-row call's rows", name);
	pv_session_get_stats(s, &st);
	CHECK(st.graph_launches >= 6 || getenv("PV_CUDA_GRAPHS"), "%s: one-row calls did not replay the graph (%llu launches)",
	      name, (unsigned long long)st.graph_launches);
	pv_session_free(s);
	pv_session_free(s2);
	free(lg);
	free(lg2);
	free(hid);
	free(hid2);
}

/* PV_EVAL_EXACT: a long call gives every row the bits it gets alone */
static void test_exact(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, n = 40; /* > 16 rows and >= chunk_min_tokens */
	float* a = malloc(sizeof(float) * V * n);
	float* b = malloc(sizeof(float) * V * n);
	float* c = malloc(sizeof(float) * V * n);
	pv_session* s1 = new_session(m, 0);
	pv_session* s2 = new_session(m, 0);
	pv_session* s3 = new_session(m, 0);
	CHECK(run_exact(s1, g_toks, n, n, a, V) == 0, "%s: exact long call: %s", name, pv_session_error(s1));
	CHECK(run_exact(s2, g_toks, n, 1, b, V) == 0, "%s: row by row", name);
	CHECK(run_exact(s3, g_toks, n, 7, c, V) == 0, "%s: calls of 7 rows", name);
	CHECK(same(a, b, (size_t)V * n), "%s: an exact %d-row call differs from one-row calls", name, n);
	CHECK(same(a, c, (size_t)V * n), "%s: an exact %d-row call differs from calls of 7 rows", name, n);
	struct pv_session_stats st;
	pv_session_get_stats(s1, &st);
	CHECK(st.exact_rows == (uint64_t)n && st.fast_rows == 0 && !strcmp(st.path_last, "exact") && st.steps == 1,
	      "%s: exact stats", name);
	/* without the flag the call may take the prefill: counted as fast */
	pv_session* s4 = new_session(m, 0);
	CHECK(pv_session_run(s4, g_toks, n, 0, NULL) == PV_OK, "%s: fast call: %s", name, pv_session_error(s4));
	pv_session_get_stats(s4, &st);
	CHECK(st.fast_rows == (uint64_t)n && (!strcmp(st.path_last, "fast") || !strcmp(st.path_last, "precise")),
	      "%s: fast stats", name);
	pv_session_free(s1);
	pv_session_free(s2);
	pv_session_free(s3);
	pv_session_free(s4);
	free(a);
	free(b);
	free(c);
}

/* A session at prefix P (row by row), then `rows` exact continuation rows: their logits into ref. */
static void reference(pv_model* m, const int32_t* prefix, int P, const int32_t* cont, int C, float* ref, int V,
                      const char* name)
{
	pv_session* r = new_session(m, 0);
	CHECK(run_exact(r, prefix, P, 1, NULL, V) == 0 && run_exact(r, cont, C, C, ref, V) == 0, "%s: reference", name);
	pv_session_free(r);
}

/* Truncating into a snapshot call: bitwise the session that never saw the dropped rows. */
static void test_snapshots(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, hybrid = pv_model_get_info(m)->n_linear_layers > 0;
	const int P = 12, K = 6, C = 3, K2 = 20; /* prefix, verified rows, continuation, a two-step call */
	float* ref = malloc(sizeof(float) * V * (K2 > C ? K2 : C));
	float* got = malloc(sizeof(float) * V * (K2 > C ? K2 : C));
	const int32_t* seq = g_toks;       /* the reference's rows: the prompt's first P + j (<= 32 of >= 48) */
	const int32_t* cont = g_toks + 40; /* what follows the accepted rows */
	pv_session* s = new_session(m, K2);
	CHECK(run_exact(s, g_toks, P, P, NULL, V) == 0 && pv_session_checkpoint(s) == PV_OK, "%s: prefix", name);
	for (int j = 1; j <= K; j++) {
		CHECK(pv_session_truncate(s, P) == PV_OK, "%s: back to the prefix", name);
		struct pv_eval_out o = { got, 0, NULL, 0, NULL, 0 };
		CHECK(pv_session_run(s, g_toks + P, K, PV_EVAL_SNAPSHOT, &o) == PV_OK, "%s: snapshot call: %s", name,
		      pv_session_error(s));
		if (j == 1) { /* the snapshot call's logits are the exact call's */
			pv_session* e = new_session(m, 0);
			CHECK(run_exact(e, g_toks, P, P, NULL, V) == 0 && run_exact(e, g_toks + P, K, K, ref, V) == 0,
			      "%s: exact call", name);
			CHECK(same(ref, got, (size_t)V * K), "%s: a snapshot call's logits differ from the exact call's", name);
			pv_session_free(e);
		}
		struct pv_session_stats st0, st1;
		pv_session_get_stats(s, &st0);
		CHECK(pv_session_truncate(s, P + j) == PV_OK && pv_session_length(s) == P + j, "%s: truncate to %d: %s", name,
		      P + j, pv_session_error(s));
		pv_session_get_stats(s, &st1);
		if (hybrid)
			CHECK(st1.snapshot_loads == st0.snapshot_loads + (j < K) && st1.rollbacks == st0.rollbacks,
			      "%s: truncation to row %d of the snapshot call did not load a snapshot", name, j);
		CHECK(run_exact(s, cont, C, C, got, V) == 0, "%s: continuation", name);
		reference(m, seq, P + j, cont, C, ref, V, name);
		CHECK(same(ref, got, (size_t)V * C), "%s: snapshot truncation to %d is not bitwise the shorter session", name,
		      P + j);
		CHECK(pv_session_truncate(s, P + j) == PV_OK, "%s: drop the continuation", name);
	}
	/* a 20-row snapshot call is two device steps (16 + 4 rows): rows of both */
	static const int rows2[] = { 1, 3, 16, 17, 19 };
	for (size_t i = 0; i < sizeof rows2 / sizeof rows2[0]; i++) {
		const int j = rows2[i];
		CHECK(pv_session_truncate(s, P) == PV_OK, "%s: back to the prefix", name);
		CHECK(pv_session_run(s, g_toks + P, K2, PV_EVAL_SNAPSHOT, NULL) == PV_OK, "%s: %d-row snapshot call: %s", name,
		      K2, pv_session_error(s));
		CHECK(pv_session_truncate(s, P + j) == PV_OK, "%s: truncate to %d", name, P + j);
		CHECK(run_exact(s, cont, C, C, got, V) == 0, "%s: continuation", name);
		reference(m, seq, P + j, cont, C, ref, V, name);
		CHECK(same(ref, got, (size_t)V * C), "%s: truncation to row %d of a %d-row snapshot call is not bitwise", name,
		      j, K2);
	}
	/* a one-row snapshot call (direct launches, not the graph), then two more rows, then back */
	CHECK(pv_session_truncate(s, P) == PV_OK, "%s: back to the prefix", name);
	CHECK(pv_session_run(s, g_toks + P, 1, PV_EVAL_SNAPSHOT, NULL) == PV_OK &&
	              run_exact(s, g_toks + P + 1, 2, 2, NULL, V) == 0,
	      "%s: one-row snapshot call", name);
	struct pv_session_stats st0, st1;
	pv_session_get_stats(s, &st0);
	CHECK(pv_session_truncate(s, P + 1) == PV_OK, "%s: truncate to the one-row snapshot", name);
	pv_session_get_stats(s, &st1);
	if (hybrid) CHECK(st1.snapshot_loads == st0.snapshot_loads + 1, "%s: the one-row snapshot was not loaded", name);
	CHECK(run_exact(s, cont, C, C, got, V) == 0, "%s: continuation", name);
	reference(m, seq, P + 1, cont, C, ref, V, name);
	CHECK(same(ref, got, (size_t)V * C), "%s: truncation to a one-row snapshot call is not bitwise", name);
	/* a snapshot call longer than n_snapshots is refused, the session unchanged */
	int len = pv_session_length(s);
	int rc = pv_session_run(s, g_toks, K2 + 1, PV_EVAL_SNAPSHOT, NULL);
	CHECK(hybrid ? rc == PV_E_INVALID && pv_session_length(s) == len : rc == PV_OK, "%s: %d-row snapshot call gave %s",
	      name, K2 + 1, pv_status_name(rc));
	CHECK(pv_session_ok(s), "%s: the session failed", name);
	pv_session_free(s);
	free(ref);
	free(got);
}

/* copy_prefix: the destination continues bitwise like the source would; sync */
static void test_copy_prefix(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, hybrid = pv_model_get_info(m)->n_linear_layers > 0;
	const int C = 3;
	const int32_t* cont = g_toks + 40;
	float* ref16 = malloc(sizeof(float) * V * C);
	float* ref20 = malloc(sizeof(float) * V * C);
	float* ref22 = malloc(sizeof(float) * V * C);
	float* got = malloc(sizeof(float) * V * C);
	reference(m, g_toks, 16, cont, C, ref16, V, name);
	reference(m, g_toks, 20, cont, C, ref20, V, name);
	reference(m, g_toks, 22, cont, C, ref22, V, name);
	pv_session* src = new_session(m, 4);
	pv_session* dst = new_session(m, 0);
	/* src: 16 tokens, a checkpoint, a 4-row snapshot call to 20, then 2 more */
	CHECK(run_exact(src, g_toks, 16, 16, NULL, V) == 0 && pv_session_checkpoint(src) == PV_OK &&
	              pv_session_run(src, g_toks + 16, 4, PV_EVAL_SNAPSHOT, NULL) == PV_OK &&
	              run_exact(src, g_toks + 20, 2, 2, NULL, V) == 0,
	      "%s: source", name);
	CHECK(pv_session_copy_prefix(dst, src, 22) == PV_OK && pv_session_length(dst) == 22 &&
	              !memcmp(pv_session_tokens(dst), g_toks, 22 * sizeof(int32_t)),
	      "%s: copy at the current length: %s", name, pv_session_error(dst));
	CHECK(run_exact(dst, cont, C, C, got, V) == 0 && same(ref22, got, (size_t)V * C),
	      "%s: continuation after a current-state copy", name);
	CHECK(pv_session_copy_prefix(dst, src, 16) == PV_OK, "%s: copy from the checkpoint: %s", name, pv_session_error(dst));
	CHECK(run_exact(dst, cont, C, C, got, V) == 0 && same(ref16, got, (size_t)V * C),
	      "%s: continuation after a checkpoint copy", name);
	CHECK(pv_session_copy_prefix(dst, src, 20) == PV_OK, "%s: copy from a snapshot row: %s", name, pv_session_error(dst));
	CHECK(run_exact(dst, cont, C, C, got, V) == 0 && same(ref20, got, (size_t)V * C),
	      "%s: continuation after a snapshot copy", name);
	int rc = pv_session_copy_prefix(dst, src, 14);
	CHECK(hybrid ? rc == PV_E_UNSUPPORTED : rc == PV_OK, "%s: copy at 14 gave %s", name, pv_status_name(rc));
	/* the source is untouched by the copies: its own continuation is still the reference's */
	CHECK(run_exact(src, cont, C, C, got, V) == 0 && same(ref22, got, (size_t)V * C), "%s: the source changed", name);
	pv_session_free(src);
	pv_session_free(dst);

	/* sync: keeps the shared prefix, evaluates the rest, returns the last row */
	float* a = malloc(sizeof(float) * V);
	float* b = malloc(sizeof(float) * V);
	int32_t seq[40];
	memcpy(seq, g_toks, sizeof seq);
	pv_session* s = new_session(m, 0);
	int reused = -1;
	struct pv_eval_out o = { a, 0, NULL, 0, NULL, 0 };
	CHECK(pv_session_sync(s, seq, 30, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 0, "%s: first sync", name);
	CHECK(pv_session_checkpoint(s) == PV_OK, "%s: checkpoint", name);
	CHECK(pv_session_sync(s, seq, 40, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 30, "%s: extending sync reused %d",
	      name, reused);
	pv_session* r = new_session(m, 0);
	struct pv_eval_out ob = { b, 39, NULL, 0, NULL, 0 };
	CHECK(pv_session_run(r, seq, 40, PV_EVAL_EXACT, &ob) == PV_OK && same(a, b, (size_t)V), "%s: sync's last row differs",
	      name);
	pv_session_free(r);
	seq[30] = (seq[30] + 1) % V;
	CHECK(pv_session_sync(s, seq, 35, PV_EVAL_EXACT, &o, &reused) == PV_OK && reused == 30, "%s: diverging sync", name);
	r = new_session(m, 0);
	ob.logits_row0 = 34;
	CHECK(pv_session_run(r, seq, 35, PV_EVAL_EXACT, &ob) == PV_OK && same(a, b, (size_t)V), "%s: diverging sync's last row",
	      name);
	pv_session_free(r);
	pv_session_free(s);
	free(a);
	free(b);
	free(ref16);
	free(ref20);
	free(ref22);
	free(got);
}

static const struct pv_knob* find_knob(const struct pv_knob* k, int n, const char* name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(k[i].name, name)) return &k[i];
	return NULL;
}

/* knobs: the list, a knobs string, the bits of switches that keep the arithmetic */
static void test_knobs(pv_model* m, const char* dir, const char* name)
{
	const struct pv_knob* k = NULL;
	const int n = pv_model_knobs(m, &k);
	static const char* const want[] = { "cuda.pdl",          "cuda.prefetch",      "cuda.gemv_rows",    "cuda.gemv_direct",
		                            "cuda.gemv_pipe",    "cuda.gemv_tma",      "cuda.swiglu_pair",  "cuda.attn_fuse",
		                            "cuda.moe_side",     "cuda.norm_fuse",     "cuda.graphs",       "cuda.att_split",
		                            "cuda.prefill",      "cuda.prefill_chunk", "cuda.prefill_attn", "cuda.prefill_moe",
		                            "cuda.prefill_delta", "cuda.gemv_rows_multi", "cuda.gemv_shared",
		                            "cuda.window_graphs", "cuda.batch_graphs",
		                            "cuda.batch_hybrid", "cuda.q8_act", "cuda.norm_cluster", "cuda.q8_rows",
		                            "cuda.q8_early",     "cuda.gemv_early",    "cuda.attn_early",   "cuda.delta_early",
		                            "cuda.norm_early" };
	const int nw = (int)(sizeof want / sizeof want[0]);
	CHECK(n == nw && k, "%s: %d knobs listed, want %d", name, n, nw);
	for (int i = 0; i < nw; i++) {
		const struct pv_knob* kk = find_knob(k, n, want[i]);
		CHECK(kk && kk->env && !strncmp(kk->env, "PV_CUDA_", 8) && kk->doc && kk->doc[0],
		      "%s: knob %s missing or undocumented", name, want[i]);
		/* without its variable set, a knob has its default */
		if (kk && kk->env && !getenv(kk->env))
			CHECK(kk->value == kk->def, "%s: %s = %d, default %d", name, want[i], kk->value, kk->def);
	}
	const struct pv_knob* split = find_knob(k, n, "cuda.att_split");
	CHECK(split && split->def == 32, "%s: cuda.att_split's default", name);

	/* a knobs string: the values change; pdl, graphs and the staged GEMV keep the bits; the
	 * add+RMSNorm in the GEMV's epilogue (cuda.norm_fuse=1) keeps the bits of the one-block
	 * kernel (cuda.norm_cluster=0: the same row code, its order of the sum) */
	static const char* const same_bits[3] = { "cuda.pdl=0,cuda.graphs=0,cuda.gemv_direct=0", "cuda.norm_fuse=1",
		                                  "cuda.gemv_early=0,cuda.q8_early=0,cuda.q8_rows=1,cuda.attn_early=0,cuda.delta_early=0,"
		                                  "cuda.norm_early=0" };
	pv_model* m2 = NULL;
	char err[512];
	for (int ks = 0; ks < 3; ks++) {
		pv_model* mref = m;
		if (ks == 1) {
			struct pv_model_params pr = { .backend = "cuda", .knobs = "cuda.norm_cluster=0" };
			mref = NULL;
			CHECK(pv_model_open(&mref, dir, &pr, err, sizeof err) == PV_OK, "%s: open with cuda.norm_cluster=0: %s", name, err);
			if (!mref) continue;
		}
		m2 = NULL;
		struct pv_model_params p = { .backend = "cuda", .knobs = same_bits[ks] };
		CHECK(pv_model_open(&m2, dir, &p, err, sizeof err) == PV_OK, "%s: open with knobs %s: %s", name, same_bits[ks], err);
		if (!m2) {
			if (mref != m) pv_model_close(mref);
			continue;
		}
		const struct pv_knob* k2 = NULL;
		const int n2 = pv_model_knobs(m2, &k2);
		const struct pv_knob *a = find_knob(k2, n2, "cuda.pdl"), *g = find_knob(k2, n2, "cuda.graphs"),
		                     *d = find_knob(k2, n2, "cuda.gemv_direct"), *nf = find_knob(k2, n2, "cuda.norm_fuse");
		const struct pv_knob* ge = find_knob(k2, n2, "cuda.gemv_early");
		if (ks == 0)
			CHECK(a && g && d && a->value == 0 && g->value == 0 && d->value == 0,
			      "%s: the knobs string did not change the values", name);
		else if (ks == 1)
			CHECK(nf && nf->value == 1, "%s: the knobs string did not set cuda.norm_fuse", name);
		else
			CHECK(ge && ge->value == 0, "%s: the knobs string did not set cuda.gemv_early", name);
		const int V = pv_model_get_info(m)->vocab;
		float* x = malloc(sizeof(float) * V * NP);
		float* y = malloc(sizeof(float) * V * NP);
		pv_session* s1 = new_session(mref, 0);
		pv_session* s2 = new_session(m2, 0);
		CHECK(run_exact(s1, g_toks, NP, 1, x, V) == 0 && run_exact(s2, g_toks, NP, 1, y, V) == 0, "%s: runs", name);
		CHECK(same(x, y, (size_t)V * NP), "%s: %s changed the logits", name, same_bits[ks]);
		struct pv_session_stats st;
		pv_session_get_stats(s2, &st);
		if (ks == 0)
			CHECK(st.graph_launches == 0, "%s: cuda.graphs=0 still launched %llu graphs", name,
			      (unsigned long long)st.graph_launches);
		pv_session_free(s1);
		pv_session_free(s2);
		free(x);
		free(y);
		pv_model_close(m2);
		if (mref != m) pv_model_close(mref);
	}
	/* the multi-row GEMV variants (rows per warp: cuda.gemv_rows_multi; the shared walk:
	 * cuda.gemv_shared, on by default, and the old walk): the same bits for exact calls of 2, 3,
	 * 5, 8 and 16 rows as one-row calls of the default model */
	static const char* const multi[] = { "cuda.gemv_rows_multi=1", "cuda.gemv_rows_multi=2", "cuda.gemv_shared=0",
		                             "cuda.gemv_shared=0,cuda.gemv_rows_multi=1", "cuda.gemv_shared=1",
		                             "cuda.gemv_shared=2", "cuda.gemv_shared=2,cuda.gemv_rows_multi=2",
		                             "cuda.gemv_shared=2,cuda.window_graphs=0" };
	for (int v = 0; v < (int)(sizeof multi / sizeof multi[0]); v++) {
		pv_model* m3 = NULL;
		struct pv_model_params p3 = { .backend = "cuda", .knobs = multi[v] };
		CHECK(pv_model_open(&m3, dir, &p3, err, sizeof err) == PV_OK, "%s: open with %s: %s", name, multi[v], err);
		const int V = pv_model_get_info(m)->vocab;
		float* x = malloc(sizeof(float) * V * NP);
		float* y = malloc(sizeof(float) * V * NP);
		pv_session* s1 = new_session(m, 0);
		CHECK(run_exact(s1, g_toks, NP, 1, x, V) == 0, "%s: one-row run", name);
		static const int steps[] = { 2, 3, 5, 8, 16 };
		for (int i = 0; m3 && i < 5; i++) {
			pv_session* s3 = new_session(m3, 0);
			CHECK(run_exact(s3, g_toks, NP, steps[i], y, V) == 0 && same(x, y, (size_t)V * NP),
			      "%s: %s with %d-row calls changed the logits", name, multi[v], steps[i]);
			pv_session_free(s3);
		}
		pv_session_free(s1);
		free(x);
		free(y);
		pv_model_close(m3);
	}
	/* window graphs for calls that keep DeltaNet snapshots (cuda.window_graphs=2): the snapshot
	 * and exact-step properties with them on */
	{
		pv_model* m4 = NULL;
		struct pv_model_params p4 = { .backend = "cuda", .knobs = "cuda.window_graphs=2" };
		CHECK(pv_model_open(&m4, dir, &p4, err, sizeof err) == PV_OK, "%s: open with window_graphs=2: %s", name, err);
		if (m4) {
			test_exact(m4, name);
			test_snapshots(m4, name);
		}
		pv_model_close(m4);
	}
	/* a session's own copy (pv_cuda_set_knobs, the A/B hook): decode switches that keep the
	 * arithmetic keep the bits, the graph captured again with them; fixed ones are refused */
	{
		const int V = pv_model_get_info(m)->vocab;
		float* x = malloc(sizeof(float) * V * NP);
		float* y = malloc(sizeof(float) * V * NP);
		pv_session* s1 = new_session(m, 0);
		pv_session* s2 = new_session(m, 0);
		CHECK(pv_cuda_set_knobs(s2, "cuda.att_split=64", err, sizeof err) == PV_E_INVALID, "%s: att_split changed in a session",
		      name);
		CHECK(pv_cuda_set_knobs(s2, "cuda.no_such_switch=0", err, sizeof err) == PV_E_INVALID, "%s: an unknown knob accepted",
		      name);
		CHECK(pv_cuda_set_knobs(s2, "cuda.swiglu_pair=0,cuda.attn_fuse=0,cuda.pdl=0", err, sizeof err) == PV_OK,
		      "%s: set_knobs: %s", name, err);
		CHECK(run_exact(s1, g_toks, NP, 1, x, V) == 0 && run_exact(s2, g_toks, NP, 1, y, V) == 0, "%s: runs", name);
		CHECK(same(x, y, (size_t)V * NP), "%s: swiglu_pair=0, attn_fuse=0, pdl=0 in a session changed the logits", name);
		struct pv_cuda_session_stats cs;
		pv_cuda_session_stats(s2, &cs);
		CHECK(getenv("PV_CUDA_GRAPHS") || (cs.graph_captures == 2 && cs.graph_launches == NP),
		      "%s: %llu captures, %llu launches after set_knobs (want 2, %d)", name, (unsigned long long)cs.graph_captures,
		      (unsigned long long)cs.graph_launches, NP);
		pv_session_free(s1);
		pv_session_free(s2);
		free(x);
		free(y);
	}
	m2 = NULL;
	struct pv_model_params bad = { .backend = "cuda", .knobs = "cuda.no_such_switch=1" };
	CHECK(pv_model_open(&m2, dir, &bad, err, sizeof err) == PV_E_INVALID && !m2 && strstr(err, "no_such_switch"),
	      "%s: an unknown knob: %s", name, err);
	pv_model_close(m2);
}

/* ---- many: continuous batching ------------------------------------------------------------- */

/* the sum of the batch sessions' CUDA counters (fx_many_run's tally) */
static void many_tally(pv_session* s, void* arg)
{
	struct pv_cuda_session_stats* t = arg;
	struct pv_cuda_session_stats cs;
	if (pv_cuda_session_stats(s, &cs)) return;
	t->many_rows += cs.many_rows;
	t->many_steps += cs.many_steps;
	t->many_hosted_rows += cs.many_hosted_rows;
	t->many_launches += cs.many_launches;
	t->many_captures += cs.many_captures;
	t->many_kernels += cs.many_kernels;
}

/* fixture.h's fx_many_run (batched rows bitwise each session alone; shuffle: the batch's order
 * and host change every step, a state passing between the two paths) on sessions of max_batch
 * 16; returns the batched rows and, through *st_out (may be NULL), the CUDA counters' sum. */
static uint64_t many_run(pv_model* m, const char* name, const char* what, int k, int steps, const int* cache, int same_ctx,
                         int shuffle, struct pv_cuda_session_stats* st_out)
{
	if (st_out) memset(st_out, 0, sizeof *st_out);
	/* max_batch 16: no prefill set-up, cheap sessions */
	const struct fx_many o = { .same_ctx = same_ctx, .max_batch = 16, .shuffle = shuffle, .tally = st_out ? many_tally : NULL,
		                   .arg = st_out };
	return fx_many_run(m, g_toks, name, what, k, steps, cache, &o);
}

/* greedy generators on k sessions: pv_generator_step_many (the server's call) == each alone */
static void many_generators(pv_model* m, const char* name, int k)
{
	enum { G = 5, N = 10 };
	int32_t ids[2][G][N];
	uint64_t batched = 0;
	char err[256];
	for (int pass = 0; pass < 2; pass++) {
		pv_session* s[G] = { 0 };
		pv_generator* g[G] = { 0 };
		int have[G], ok = 1;
		for (int i = 0; i < k; i++) {
			struct pv_session_params sp = { .n_ctx = 128, .max_batch = 16, .chunk_min_tokens = 16, .cache_type = g_cache };
			ok = ok && !pv_session_new(&s[i], m, &sp, err, sizeof err) &&
			     !pv_generator_new(&g[i], s[i], NULL, NULL, err, sizeof err) &&
			     !pv_generator_prompt(g[i], g_toks + i, 4 + 6 * i, &ids[pass][i][0]);
			have[i] = 1;
		}
		CHECK(ok, "%s many generators: set-up: %s", name, err);
		for (int round = 0; ok && round < N; round++) {
			pv_generator* gs[G];
			int32_t* outs[G];
			int max[G], got[G], rc[G], idx[G], live = 0;
			for (int i = 0; i < k; i++)
				if (have[i] < N) {
					gs[live] = g[i];
					outs[live] = &ids[pass][i][have[i]];
					max[live] = N - have[i];
					idx[live++] = i;
				}
			if (!live) break;
			if (pass)
				ok = pv_generator_step_many(gs, live, outs, max, got, rc) == PV_OK;
			else
				for (int q = 0; q < live && ok; q++)
					ok = pv_generator_step(gs[q], outs[q], max[q], &got[q]) == PV_OK;
			for (int q = 0; q < live; q++) have[idx[q]] += got[q];
		}
		CHECK(ok, "%s many generators: pass %d", name, pass);
		for (int i = 0; i < k; i++) {
			struct pv_session_stats st;
			if (pass && s[i] && !pv_session_get_stats(s[i], &st)) batched += st.batched_rows;
			pv_generator_free(g[i]);
			pv_session_free(s[i]);
		}
	}
	for (int i = 0; i < k; i++)
		CHECK(!memcmp(ids[0][i], ids[1][i], sizeof ids[0][i]), "%s many generators: generator %d: together != alone",
		      name, i);
	/* every model is covered (many.cu): the rounds with two or more live generators go together */
	CHECK(batched >= (uint64_t)(N - 1) * k - 2, "%s many generators: %llu rows batched", name, (unsigned long long)batched);
}

/* Every fixture is covered (many.cu takes attention-only models and the hybrids: the output gate,
 * DeltaNet layers over each row's own state), so every run below must batch all its rows
 * (k x steps) with each row bitwise its own one-row step; the mixed-cache batch is the uncovered
 * case, stepped alone with the same bits. */
static void test_many(pv_model* m0, const char* dir, const char* name)
{
	enum { STEPS = 8 };
	int hybrid = m0->cfg.attn_gate; /* the rows take the gate or DeltaNet layers */
	for (int l = 0; l < m0->cfg.n_layers; l++) hybrid |= m0->cfg.layer_kind[l] != PV_LAYER_ATTN;
	int cache[17];
	char err[256];
	for (int i = 0; i < 17; i++) cache[i] = g_cache;
	/* with cuda.batch_hybrid=0 the hybrids step alone, with the same bits; on (the default) they
	 * batch like the rest */
	pv_model* m = m0;
	if (hybrid) {
		pv_model* off = NULL;
		struct pv_model_params hp = { .backend = "cuda", .knobs = "cuda.batch_hybrid=0" };
		CHECK(pv_model_open(&off, dir, &hp, err, sizeof err) == PV_OK, "%s many: open with batch_hybrid=0: %s", name, err);
		if (off)
			CHECK(many_run(off, name, "hybrid, batch_hybrid off", 3, 3, cache, 0, 0, NULL) == 0,
			      "%s many: a hybrid batch was batched with cuda.batch_hybrid off", name);
		pv_model_close(off);
	}
	static const int ks[] = { 2, 3, 5, 16, 17 };
	for (int q = 0; q < 5; q++) {
		const int k = ks[q];
		struct pv_cuda_session_stats cs;
		const uint64_t b = many_run(m, name, "default", k, STEPS, cache, k == 2, 0, &cs);
		const uint64_t want = (uint64_t)k * STEPS;
		CHECK(b == want && cs.many_rows == want && cs.many_hosted_rows == want,
		      "%s many k=%d: %llu rows batched (CUDA: %llu), want %llu", name, k, (unsigned long long)b,
		      (unsigned long long)cs.many_rows, (unsigned long long)want);
		/* graphs on (the default): one launch per group of 16, one capture per row count */
		const uint64_t groups = (uint64_t)STEPS * ((k + 15) / 16);
		if (!getenv("PV_CUDA_GRAPHS") && !getenv("PV_CUDA_BATCH_GRAPHS"))
			CHECK(cs.many_steps == groups && cs.many_launches == groups && cs.many_captures == (k > 16 ? 2u : 1u),
			      "%s many k=%d: %llu steps, %llu graph launches, %llu captures", name, k,
			      (unsigned long long)cs.many_steps, (unsigned long long)cs.many_launches,
			      (unsigned long long)cs.many_captures);
		printf("  %-16s many k=%-2d %s: %llu rows batched in %llu steps\n", name, k, hybrid ? "hybrid" : "attn  ",
		       (unsigned long long)b, (unsigned long long)cs.many_steps);
	}
	/* a new order every step, one session alone in between: k - 1 rows batched per step */
	for (int k = 3; k <= 17; k += 14) {
		const uint64_t b = many_run(m, name, "shuffled", k, STEPS, cache, 0, 1, NULL);
		CHECK(b == (uint64_t)(k - 1) * STEPS, "%s many shuffled k=%d: %llu rows batched, want %llu", name, k,
		      (unsigned long long)b, (unsigned long long)(k - 1) * STEPS);
	}
	many_generators(m, name, 5);
	/* typed caches (the rows stored into each session's f16 / bf16 / q8_0 cache) */
	for (int t = PV_CACHE_F16; t <= PV_CACHE_Q8_0; t++) {
		for (int i = 0; i < 17; i++) cache[i] = t;
		const uint64_t b = many_run(m, name, pv_cache_type_name(t), 5, STEPS, cache, 0, 0, NULL);
		CHECK(b == 5u * STEPS, "%s many %s cache: %llu rows batched", name, pv_cache_type_name(t),
		      (unsigned long long)b);
	}
	/* one cache type per batch: a mixed batch is stepped alone, with the same bits */
	for (int i = 0; i < 17; i++) cache[i] = i == 1 ? PV_CACHE_F16 : g_cache;
	CHECK(many_run(m, name, "mixed caches", 3, 3, cache, 0, 0, NULL) == 0, "%s many: a mixed-cache batch was batched", name);
	for (int i = 0; i < 17; i++) cache[i] = g_cache;
	/* knobs: the shared GEMV walks, graphs off (direct launches), the multi-session graphs off */
	static const char* const kn[] = { "cuda.gemv_shared=1", "cuda.gemv_shared=2", "cuda.graphs=0", "cuda.batch_graphs=0",
		                          "cuda.gemv_shared=2,cuda.gemv_rows_multi=2,cuda.batch_graphs=0" };
	for (int v = 0; v < 5; v++) {
		pv_model* m2 = NULL;
		char knobs[160];
		snprintf(knobs, sizeof knobs, "%s", kn[v]);
		struct pv_model_params p = { .backend = "cuda", .knobs = knobs };
		CHECK(pv_model_open(&m2, dir, &p, err, sizeof err) == PV_OK, "%s many: open with %s: %s", name, kn[v], err);
		if (!m2) continue;
		struct pv_cuda_session_stats cs;
		const uint64_t b = many_run(m2, name, kn[v], v < 2 ? 17 : 5, 4, cache, 0, 0, &cs);
		const uint64_t want = (uint64_t)(v < 2 ? 17 : 5) * 4;
		CHECK(b == want, "%s many %s: %llu rows batched, want %llu", name, kn[v], (unsigned long long)b,
		      (unsigned long long)want);
		if (v >= 2)
			CHECK(cs.many_launches == 0 && cs.many_captures == 0, "%s many %s: %llu graph launches", name, kn[v],
			      (unsigned long long)cs.many_launches);
		pv_model_close(m2);
	}
	if (m != m0) pv_model_close(m);
}

/* session_bytes: what the session says it holds on the device, plus the engine's host part */
static void test_bytes(pv_model* m, const char* name)
{
	for (int ns = 0; ns <= 4; ns += 4) {
		struct pv_session_params p = {
			.n_ctx = 96, .n_snapshots = ns, .n_checkpoints = 3, .chunk_min_tokens = 16, .cache_type = g_cache
		};
		pv_session* s = NULL;
		char err[256];
		CHECK(pv_session_new(&s, m, &p, err, sizeof err) == PV_OK, "%s: session: %s", name, err);
		if (!s) continue;
		struct pv_session_stats st;
		pv_session_get_stats(s, &st);
		const uint64_t host = (uint64_t)p.n_ctx * (4 + 4 * (uint64_t)m->cfg.rope_dim); /* engine/session.c */
		const uint64_t want = pv_session_bytes(m, &p);
		if (st.fallback) /* no prefill scratch (no cuBLAS, or its set-up failed): session_bytes counts it */
			CHECK(host + st.device_bytes <= want, "%s: device bytes %llu above session_bytes %llu", name,
			      (unsigned long long)(host + st.device_bytes), (unsigned long long)want);
		else
			CHECK(host + st.device_bytes == want,
			      "%s (%d snapshots): session_bytes %llu, the session holds %llu + host %llu", name, ns,
			      (unsigned long long)want, (unsigned long long)st.device_bytes, (unsigned long long)host);
		pv_session_free(s);
	}
}

/* the CUDA logits against the CPU backend's, within TOL_CPU */
static void test_cpu(pv_model* m, pv_model* cm, const char* name)
{
	const int V = pv_model_get_info(m)->vocab;
	float* g = malloc(sizeof(float) * V * NP);
	float* c = malloc(sizeof(float) * V * NP);
	pv_session* gs = new_session(m, 0);
	struct pv_session_params cp = { .n_ctx = 160, .n_threads = 2 };
	pv_session* cs = NULL;
	char err[256];
	CHECK(pv_session_new(&cs, cm, &cp, err, sizeof err) == PV_OK, "%s: CPU session: %s", name, err);
	if (gs && cs && run_exact(gs, g_toks, NP, NP, g, V) == 0 && run_exact(cs, g_toks, NP, NP, c, V) == 0) {
		const double e = rel_err(g, c, NP, V);
		CHECK(e <= TOL_CPU, "%s: CUDA vs CPU rel error %.3g > %g", name, e, TOL_CPU);
		printf("  %-16s CUDA vs CPU rel %.3e\n", name, e);
	} else {
		CHECK(0, "%s: CUDA vs CPU runs", name);
	}
	pv_session_free(gs);
	pv_session_free(cs);
	free(g);
	free(c);
}

/* A prefill call (40 rows, no exact flag: the prompt path when cuBLAS is there) over the session
 * cache type, then 3 one-row decode steps that read what it wrote, against a session that ran the
 * same rows on the exact path: the last prompt row and every decode row within the prefill
 * tolerance. */
static void test_prefill_cache(pv_model* m, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, n = 40, D = 3;
	const double tol = pv_model_get_info(m)->n_linear_layers > 0 ? TOL_PREFILL_GROSS : TOL_PREFILL;
	float* a = malloc(sizeof(float) * V);
	float* b = malloc(sizeof(float) * V);
	pv_session* f = new_session(m, 0);
	pv_session* e = new_session(m, 0);
	struct pv_eval_out oa = { a, n - 1, NULL, 0, NULL, 0 }, ob = { b, n - 1, NULL, 0, NULL, 0 };
	CHECK(f && e && pv_session_run(f, g_toks, n, 0, &oa) == PV_OK &&
	              pv_session_run(e, g_toks, n, PV_EVAL_EXACT, &ob) == PV_OK,
	      "%s %s: prefill and exact calls: %s", name, pv_cache_type_name(g_cache), f ? pv_session_error(f) : "no session");
	struct pv_session_stats st;
	pv_session_get_stats(f, &st);
	if (st.fallback)
		printf("  %-16s %s: no prefill path (%s): the call ran the exact steps\n", name, pv_cache_type_name(g_cache),
		       st.fallback);
	else
		CHECK(st.fast_rows == (uint64_t)n, "%s %s: the 40-row call did not take the prefill path", name,
		      pv_cache_type_name(g_cache));
	double worst = rel_err(a, b, 1, V);
	for (int k = 0; k < D; k++) {
		struct pv_eval_out o1 = { a, 0, NULL, 0, NULL, 0 }, o2 = { b, 0, NULL, 0, NULL, 0 };
		CHECK(pv_session_run(f, g_toks + n + k, 1, 0, &o1) == PV_OK &&
		              pv_session_run(e, g_toks + n + k, 1, 0, &o2) == PV_OK,
		      "%s: decode after the prefill", name);
		const double r = rel_err(a, b, 1, V);
		worst = r > worst ? r : worst;
	}
	CHECK(worst <= tol, "%s %s cache: prefill (+ decode) vs exact rel %.3g > %g", name, pv_cache_type_name(g_cache), worst,
	      tol);
	printf("  %-16s %s cache: prefill vs exact rel %.3e\n", name, pv_cache_type_name(g_cache), worst);
	pv_session_free(f);
	pv_session_free(e);
	free(a);
	free(b);
}

/* KV cache types on the GPU (the list at the top, "cache"): the device rounds every stored
 * element with the CPU's own rounding, so the two backends differ by summation order only, as
 * with f32; every bitwise property holds because a row is rounded once, when it is written. */
static void test_cache_types(pv_model* m, pv_model* cm, const char* name)
{
	const int V = pv_model_get_info(m)->vocab;
	const struct pv_config* c = &m->cfg;
	float* f32 = malloc(sizeof(float) * V * NP);
	float* g = malloc(sizeof(float) * V * NP);
	float* cpu = malloc(sizeof(float) * V * NP);
	g_cache = 0;
	pv_session* r = new_session(m, 0);
	CHECK(r && run_exact(r, g_toks, NP, NP, f32, V) == 0, "%s: f32 reference", name);
	pv_session_free(r);
	char err[256];
	for (int t = PV_CACHE_F16; t <= PV_CACHE_Q8_0; t++) {
		const char* tn = pv_cache_type_name(t);
		g_cache = t;
		pv_session* gs = new_session(m, 0);
		struct pv_session_params cp = { .n_ctx = 160, .n_threads = 2, .cache_type = t };
		pv_session* cs = NULL;
		CHECK(pv_session_new(&cs, cm, &cp, err, sizeof err) == PV_OK, "%s: CPU %s session: %s", name, tn, err);
		if (gs && cs && run_exact(gs, g_toks, NP, NP, g, V) == 0 && run_exact(cs, g_toks, NP, NP, cpu, V) == 0) {
			CHECK(pv_session_cache_type(gs) == t, "%s: cache type %s not kept", name, tn);
			/* The backends' K and V differ by summation order (~1e-7 relative); stored in a
			 * 16-bit type, an element that falls next to a rounding boundary lands one step
			 * apart (2^-11 relative for f16, 2^-8 for bf16) and carries that into the logits:
			 * on the H200, qwen3_5 with a bf16 cache gave 3.9e-4 (12-02 receipt,
			 * h200-2026-12-02-shared-f.txt); the f32 cache's TOL_CPU holds for every other
			 * case there. The bound stays below the typed cache's own effect (CUDA typed vs
			 * CUDA f32: 6e-5..9e-3 there) only for bf16 on some fixtures, so the check that
			 * the type is used is the bitwise one below. q8_0: the stored values are the CPU's
			 * function of the row (tests/cuda/test_cuda_host.cu kv_q8_0, bitwise), so the two
			 * differ where an element of the CPU and CUDA rows falls either side of a code
			 * boundary: rarer than a bf16 flip (the step is the block's amax / 127), up to
			 * twice its size; 5e-3 (not yet measured on the H200: the printed figures). */
			const double tol = t == PV_CACHE_Q8_0 ? 5e-3 : t == PV_CACHE_BF16 ? 2e-3 : 5e-4;
			const double e = rel_err(g, cpu, NP, V);
			CHECK(e <= tol, "%s %s cache: CUDA vs CPU rel error %.3g > %g", name, tn, e, tol);
			printf("  %-16s %s cache: CUDA vs CPU rel %.3e (vs the CUDA f32 cache %.3e)\n", name, tn, e,
			       rel_err(g, f32, NP, V));
			CHECK(!same(g, f32, (size_t)V * NP), "%s %s: logits bitwise the f32 cache's (is the type used?)", name,
			      tn);
		} else {
			CHECK(0, "%s %s cache: CUDA vs CPU runs", name, tn);
		}
		pv_session_free(gs);
		pv_session_free(cs);
		/* bytes: the KV cache at 2 bytes an element (q8_0: a head slice of hd codes and
		 * ceil(hd / 32) f16 scales, padded to 8 bytes: common.cuh), the rest unchanged */
		struct pv_session_params a = { .n_ctx = 64, .chunk_min_tokens = 16 }, b = a;
		b.cache_type = t;
		uint64_t na = 0;
		for (int l = 0; l < c->n_layers; l++) na += c->layer_kind[l] == PV_LAYER_ATTN;
		const uint64_t kvb = (uint64_t)pv_cfg_kv_dim(c) * 64; /* elements of one layer's K */
		const uint64_t hd = (uint64_t)c->head_dim, q8b = (uint64_t)c->n_kv_heads * 64 * ((hd + 2 * ((hd + 31) / 32) + 7) / 8 * 8);
		const uint64_t tb = t == PV_CACHE_Q8_0 ? q8b : 2 * kvb; /* bytes of one layer's K */
		/* K and V of each attention layer, each buffer rounded up to 256 bytes (session.cu) */
		const uint64_t want = na * 2 * ((4 * kvb + 255) / 256 * 256 - (tb + 255) / 256 * 256);
		CHECK(pv_session_bytes(m, &a) - pv_session_bytes(m, &b) == want,
		      "%s %s: a typed cache saves %llu bytes, expected %llu", name, tn,
		      (unsigned long long)(pv_session_bytes(m, &a) - pv_session_bytes(m, &b)), (unsigned long long)want);
		/* the prompt path over the typed cache, then the bitwise properties */
		test_prefill_cache(m, name);
		test_outputs(m, name);
		test_exact(m, name);
		test_snapshots(m, name);
		test_copy_prefix(m, name);
		test_bytes(m, name);
	}
	/* a type past q8_0: refused (PV_E_INVALID by the engine), no session */
	struct pv_session_params q = { .n_ctx = 64, .cache_type = PV_CACHE_Q8_0 + 1 };
	pv_session* qs = NULL;
	CHECK(pv_session_new(&qs, m, &q, err, sizeof err) != PV_OK && !qs, "%s: cache type %d was not refused", name,
	      PV_CACHE_Q8_0 + 1);
	pv_session_free(qs);
	g_cache = 0;
	free(f32);
	free(g);
	free(cpu);
}

/* ---- the MTP head (PV_CUDA_API_ONLY=mtp; the list at the top, "mtp") ------------------------- */

#define MTP_T 40 /* sequence rows: the head runs over history positions 0 .. MTP_T - 2 */

static pv_session* mtp_session(pv_model* m, int mtp, int cache_type)
{
	struct pv_session_params sp = { .n_ctx = 160, .n_threads = 2, .mtp = mtp, .cache_type = cache_type,
		                        .chunk_min_tokens = 16 };
	pv_session* s = NULL;
	char err[256];
	CHECK(pv_session_new(&s, m, &sp, err, sizeof err) == PV_OK, "mtp session: %s", err);
	return s;
}

/* The head over positions [p0, p0 + n) in calls of `step` rows: hidden rows hid (row r: history
 * position r), the tokens after them toks[r + 1], argmax am[r], output rows oh (may be NULL). */
static int mtp_calls(pv_session* s, int p0, int n, int step, const float* hid, const int32_t* toks, int32_t* am, float* oh,
                     int H)
{
	for (int r = p0; r < p0 + n; r += step) {
		const int k = p0 + n - r < step ? p0 + n - r : step;
		if (pv_session_mtp(s, r, hid + (size_t)r * H, toks + r + 1, k, am + r, oh ? oh + (size_t)r * H : NULL)) {
			fprintf(stderr, "mtp at %d (%d rows): %s\n", r, k, pv_session_error(s));
			return -1;
		}
	}
	return 0;
}

/* The CUDA head's rows (oh_g, am_g) against the CPU head's over the same inputs (oh_c, am_c):
 * output rows within tol; greedy ids equal wherever the CPU logits (the LM head over oh_c) have a
 * clear margin (10 tol of the row's largest logit: 1e-3 with the f32 cache, as tests/test_spec.c
 * mtp_reference). Returns the largest relative error. */
static double mtp_compare(pv_model* cm, const float* oh_g, const int32_t* am_g, const float* oh_c, const int32_t* am_c,
                          int n, double tol, const char* what, const char* name)
{
	const int H = pv_model_get_info(cm)->hidden, V = pv_model_get_info(cm)->vocab;
	const double e = rel_err(oh_g, oh_c, n, H);
	CHECK(e <= tol, "%s: mtp %s: CUDA vs CPU output rows rel %.3g > %g", name, what, e, tol);
	float* lg = malloc(sizeof(float) * (size_t)V * n);
	pv_matmul(NULL, lg, V, oh_c, H, n, &cm->w.lm_head);
	int clear = 0, ok = 1;
	for (int r = 0; r < n; r++) {
		const float* l = lg + (size_t)r * V;
		int best = 0, second = -1;
		double mx = 0;
		for (int i = 0; i < V; i++) {
			if (l[i] > l[best]) best = i;
			if (fabs(l[i]) > mx) mx = fabs(l[i]);
		}
		for (int i = 0; i < V; i++)
			if (i != best && (second < 0 || l[i] > l[second])) second = i;
		if (l[best] - l[second] > 10 * tol * (mx > 1 ? mx : 1)) {
			clear++;
			ok &= am_g[r] == best && am_c[r] == best;
		}
	}
	CHECK(ok, "%s: mtp %s: CUDA greedy ids differ from the CPU's where the margin is clear", name, what);
	CHECK(clear > 0 || n < 8, "%s: mtp %s: no row with a clear margin", name, what);
	printf("  %-16s mtp %s: %d rows, CUDA vs CPU rel %.3e, %d clear-margin ids equal\n", name, what, n, e, clear);
	free(lg);
	return e;
}

/* The head on one cache type: CUDA vs CPU, batch invariance, truncation, chained drafts, bytes. */
static void test_mtp_cache(pv_model* m, pv_model* cm, const int32_t* toks, int T, int ct, double tol, const char* name)
{
	const int H = pv_model_get_info(m)->hidden, n = T - 1;
	char what[64];
	const char* tn = pv_cache_type_name(ct);
	float* hid = malloc(sizeof(float) * (size_t)T * H);
	float* oh_a = malloc(sizeof(float) * (size_t)n * H);
	float* oh_b = malloc(sizeof(float) * (size_t)n * H);
	float* oh_c = malloc(sizeof(float) * (size_t)n * H);
	int32_t *am_a = malloc(sizeof(int32_t) * n), *am_b = malloc(sizeof(int32_t) * n), *am_c = malloc(sizeof(int32_t) * n);
	pv_session* g = mtp_session(m, 1, ct);
	pv_session* c = mtp_session(cm, 1, ct);
	/* the target's final-norm rows of the sequence (the exact path), the inputs of both heads */
	struct pv_eval_out o = { NULL, 0, NULL, 0, hid, 0 };
	int ok = g && c && pv_session_run(g, toks, T, PV_EVAL_EXACT, &o) == PV_OK;
	CHECK(ok, "%s %s: main rows: %s", name, tn, g ? pv_session_error(g) : "no session");
	if (!ok) goto out;
	/* every position in one call (three device steps: 16 + 16 + 7 rows), on both backends */
	CHECK(mtp_calls(g, 0, n, n, hid, toks, am_a, oh_a, H) == 0 && pv_session_mtp_length(g) == n, "%s %s: CUDA head",
	      name, tn);
	CHECK(mtp_calls(c, 0, n, n, hid, toks, am_c, oh_c, H) == 0, "%s %s: CPU head", name, tn);
	snprintf(what, sizeof what, "%s sequence", tn);
	mtp_compare(cm, oh_a, am_a, oh_c, am_c, n, tol, what, name);
	/* batch invariance: the same rows in calls of 1, 7 and 16 rows (rows at or above pos are
	 * written again), then in another session in calls of 5: bitwise */
	static const int steps[] = { 1, 7, 16 };
	for (int i = 0; i < 3; i++) {
		memset(oh_b, 0, sizeof(float) * (size_t)n * H);
		CHECK(mtp_calls(g, 0, n, steps[i], hid, toks, am_b, oh_b, H) == 0 &&
		              !memcmp(am_a, am_b, sizeof(int32_t) * n) && same(oh_a, oh_b, (size_t)n * H),
		      "%s %s: the head's rows in calls of %d differ from one call's (batch invariance)", name, tn, steps[i]);
	}
	pv_session* g2 = mtp_session(m, 1, ct);
	CHECK(g2 && mtp_calls(g2, 0, n, 5, hid, toks, am_b, oh_b, H) == 0 && !memcmp(am_a, am_b, sizeof(int32_t) * n) &&
	              same(oh_a, oh_b, (size_t)n * H),
	      "%s %s: another session's head rows (calls of 5) differ", name, tn);
	/* argmax alone (no output rows): the same ids */
	memset(am_b, 0xff, sizeof(int32_t) * n);
	CHECK(g2 && mtp_calls(g2, 0, n, n, hid, toks, am_b, NULL, H) == 0 && !memcmp(am_a, am_b, sizeof(int32_t) * n),
	      "%s %s: argmax without output rows differs", name, tn);
	pv_session_free(g2);
	/* truncation to T - 10 keeps the head's rows below T - 11; a call past them is refused, the
	 * rows written again are bitwise the first ones */
	CHECK(pv_session_truncate(g, T - 10) == PV_OK && pv_session_mtp_length(g) == T - 11,
	      "%s %s: truncation left the head's length at %d (want %d): %s", name, tn, pv_session_mtp_length(g), T - 11,
	      pv_session_error(g));
	CHECK(pv_session_mtp(g, T - 10, hid + (size_t)(T - 10) * H, toks + T - 9, 1, am_b, oh_b) == PV_E_INVALID &&
	              pv_session_ok(g),
	      "%s %s: a head call past its cached rows was not refused", name, tn);
	CHECK(mtp_calls(g, T - 11, 10, 10, hid, toks, am_b, oh_b, H) == 0 &&
	              !memcmp(am_a + T - 11, am_b + T - 11, sizeof(int32_t) * 10) &&
	              same(oh_a + (size_t)(T - 11) * H, oh_b + (size_t)(T - 11) * H, (size_t)10 * H),
	      "%s %s: the head's rows after truncation differ", name, tn);
	/* chained drafts (spec/mtp.c propose): the head's own row and its draft go in at the next
	 * position; both heads take the CUDA chain's inputs, so errors do not compound */
	{
		enum { K = 4 };
		float* in = malloc(sizeof(float) * (size_t)(K + 1) * H); /* [K + 1][H] chain inputs        */
		float* oc = malloc(sizeof(float) * (size_t)K * H);       /* [K][H] the CPU head's rows     */
		int32_t tk[K + 1], ac[K];
		memcpy(in, oh_a + (size_t)(n - 1) * H, sizeof(float) * H);
		tk[0] = am_a[n - 1];
		int cok = 1;
		for (int k = 0; k < K && cok; k++) { /* the CUDA row of step k is the input of step k + 1 */
			cok = pv_session_mtp(g, n + k, in + (size_t)k * H, &tk[k], 1, &tk[k + 1], in + (size_t)(k + 1) * H) ==
			              PV_OK &&
			      pv_session_mtp(c, n + k, in + (size_t)k * H, &tk[k], 1, &ac[k], oc + (size_t)k * H) == PV_OK;
		}
		CHECK(cok && pv_session_mtp_length(g) == n + K, "%s %s: chained head calls: %s / %s", name, tn,
		      pv_session_error(g), pv_session_error(c));
		if (cok) {
			snprintf(what, sizeof what, "%s chain", tn);
			mtp_compare(cm, in + H, tk + 1, oc, ac, K, tol, what, name);
		}
		free(in);
		free(oc);
	}
	/* the head leaves the target alone: its next rows are bitwise a session's that never ran it */
	{
		const int V = pv_model_get_info(m)->vocab;
		float* la = malloc(sizeof(float) * (size_t)3 * V);
		float* lb = malloc(sizeof(float) * (size_t)3 * V);
		pv_session* r = mtp_session(m, 1, ct);
		CHECK(r && run_exact(g, toks + T - 10, 3, 3, la, V) == 0 && run_exact(r, toks, T - 10, T - 10, NULL, V) == 0 &&
		              run_exact(r, toks + T - 10, 3, 3, lb, V) == 0 && same(la, lb, (size_t)3 * V),
		      "%s %s: the target's rows after head calls differ from a session without them", name, tn);
		pv_session_free(r);
		free(la);
		free(lb);
	}
	/* bytes: the head's K and V at the cache's element size, its two row buffers */
	{
		struct pv_session_params a = { .n_ctx = 96, .chunk_min_tokens = 16, .cache_type = ct }, b = a;
		b.mtp = 1;
		const uint64_t hd = (uint64_t)m->cfg.head_dim;
		const uint64_t kvb = ct == PV_CACHE_Q8_0 /* q8_0: the device's head slices (common.cuh) */
		                             ? (uint64_t)m->cfg.n_kv_heads * 96 * ((hd + 2 * ((hd + 31) / 32) + 7) / 8 * 8)
		                             : (uint64_t)pv_cfg_kv_dim(&m->cfg) * 96 * (ct == PV_CACHE_F16 || ct == PV_CACHE_BF16 ? 2 : 4);
#define R256(x) (((uint64_t)(x) + 255) / 256 * 256)
		const uint64_t want = 2 * R256(kvb) + R256(16 * 2 * (uint64_t)H * 4) + R256(16 * (uint64_t)H * 4);
#undef R256
		CHECK(pv_session_bytes(m, &b) - pv_session_bytes(m, &a) == want, "%s %s: the head adds %llu bytes, want %llu",
		      name, tn, (unsigned long long)(pv_session_bytes(m, &b) - pv_session_bytes(m, &a)),
		      (unsigned long long)want);
		pv_session* s = NULL;
		char err[256];
		CHECK(pv_session_new(&s, m, &b, err, sizeof err) == PV_OK, "%s: mtp session: %s", name, err);
		if (s) {
			struct pv_session_stats st;
			pv_session_get_stats(s, &st);
			const uint64_t host = (uint64_t)b.n_ctx * (4 + 4 * (uint64_t)m->cfg.rope_dim); /* engine/session.c */
			if (!st.fallback)
				CHECK(host + st.device_bytes == pv_session_bytes(m, &b), "%s %s: an mtp session holds %llu, session_bytes %llu",
				      name, tn, (unsigned long long)(host + st.device_bytes), (unsigned long long)pv_session_bytes(m, &b));
		}
		pv_session_free(s);
	}
out:
	pv_session_free(g);
	pv_session_free(c);
	free(hid);
	free(oh_a);
	free(oh_b);
	free(oh_c);
	free(am_a);
	free(am_b);
	free(am_c);
}

/* The head of model m (CUDA) against cm (the CPU, exact numerics) over f32, f16 and bf16 caches
 * (tol: the f32 cache's bound); a model without a head: the documented refusal. */
static void test_mtp(pv_model* m, pv_model* cm, const int32_t* toks, int T, double tol, const char* name)
{
	const int H = pv_model_get_info(m)->hidden;
	float* h = calloc((size_t)H, sizeof(float));
	int32_t am = -1, tk = toks[1];
	/* a session without mtp = 1, or a model without a head: PV_E_UNSUPPORTED, the session usable */
	pv_session* s = mtp_session(m, pv_model_get_info(m)->n_mtp_layers == 0, 0);
	const int rc = s ? pv_session_mtp(s, 0, h, &tk, 1, &am, NULL) : PV_E_INVALID;
	CHECK(rc == PV_E_UNSUPPORTED && s && pv_session_ok(s), "%s: mtp on a session without a head gave %s (%s)", name,
	      pv_status_name(rc), s ? pv_session_error(s) : "");
	CHECK(s && pv_session_run(s, toks, 2, PV_EVAL_EXACT, NULL) == PV_OK, "%s: the session after the refusal", name);
	pv_session_free(s);
	free(h);
	if (!pv_model_get_info(m)->n_mtp_layers) {
		struct pv_session_params a = { .n_ctx = 96 }, b = a;
		b.mtp = 1;
		CHECK(pv_session_bytes(m, &a) == pv_session_bytes(m, &b), "%s: mtp = 1 without a head changed the bytes", name);
		return;
	}
	static const int types[] = { PV_CACHE_F32, PV_CACHE_F16, PV_CACHE_BF16, PV_CACHE_Q8_0 };
	for (int i = 0; i < 4; i++) {
		/* typed caches: the CUDA-vs-CPU bounds of test_cache_types (q8_0: bf16's, so the
		 * clear-margin ids keep bf16's margin; its flips are rarer, see there) */
		const double t = types[i] == PV_CACHE_BF16 || types[i] == PV_CACHE_Q8_0 ? 2e-3 : types[i] == PV_CACHE_F16 ? 5e-4 : tol;
		test_mtp_cache(m, cm, toks, T, types[i], t > tol ? t : tol, name);
	}
}

/* The K types under the default cuda.q8_act (2: int8 activations for Q4_K / Q6_K, qgemv.cu)
 * against the CPU's fast numerics, its default (the same int8 activations, bit for bit in those
 * GEMVs: test_cuda qgemv): T exact one-row steps of a Q4_K_M file. The rest of the forward (norms,
 * attention, the DeltaNet) rounds differently, and a rounding that moves one activation across
 * an int8 step moves its products by a step; on a tiny random model that noise is as large as
 * the quantization's own (the CPU's fast numerics against its exact ones: 9.3e-2 of the largest
 * logit on this file, where CUDA's are 0.11 from the CPU's fast ones, 2026-12-02). So the bound
 * is relative to that spread, measured here: CUDA's int8 path no farther from the CPU's than
 * twice the CPU's fast-to-exact distance (a wrong block or scale gives errors near 1). cm: the
 * file on the CPU in its exact numerics. */
static void test_q8_fast(const char* path, pv_model* cm, const int32_t* toks, int T, const char* name)
{
	char err[512];
	pv_model *g = NULL, *c = NULL;
	struct pv_model_params gp = { .backend = "cuda" }, cp = { .backend = "cpu" };
	int rc = pv_model_open(&g, path, &gp, err, sizeof err);
	if (!rc) rc = pv_model_open(&c, path, &cp, err, sizeof err);
	CHECK(rc == PV_OK, "%s q8: open: %s", name, err);
	const struct pv_knob* k = NULL;
	const int nk = rc ? 0 : pv_model_knobs(g, &k);
	const struct pv_knob* q8 = find_knob(k, nk, "cuda.q8_act");
	CHECK(rc || (q8 && q8->value == 2), "%s q8: cuda.q8_act is not 2 by default", name);
	if (!rc) {
		const int V = pv_model_get_info(g)->vocab;
		float* lg = malloc(sizeof(float) * (size_t)V * T);
		float* lc = malloc(sizeof(float) * (size_t)V * T);
		float* lx = malloc(sizeof(float) * (size_t)V * T);
		pv_session* sg = new_session(g, 0);
		pv_session* sc = new_session(c, 0);
		pv_session* sx = new_session(cm, 0);
		const int ok = run_exact(sg, toks, T, 1, lg, V) == 0 && run_exact(sc, toks, T, 1, lc, V) == 0 &&
		               run_exact(sx, toks, T, 1, lx, V) == 0;
		CHECK(ok, "%s q8: runs", name);
		const double e = ok ? rel_err(lg, lc, T, V) : 1, spread = ok ? rel_err(lc, lx, T, V) : 0;
		CHECK(e <= 2 * spread + 1e-3, "%s: CUDA (cuda.q8_act=2) vs the CPU's fast numerics rel error %.3g > twice %.3g "
		      "(the CPU's fast vs exact)", name, e, spread);
		printf("  %-16s cuda.q8_act=2 vs the CPU's fast numerics: %d rows, rel %.3e (the CPU's fast vs exact: %.3e)\n", name,
		       T, e, spread);
		/* the integer GEMVs' scheduling switches keep the bits, in one-row steps and in exact steps
		 * of 5 rows (the multi-row kernels): weights requested before the PDL wait (cuda.q8_early,
		 * 2 by default: every row count), rows per warp (cuda.q8_rows; 4 by default) */
		static const char* const same_bits[] = { "",
		                                         "cuda.q8_early=0",
		                                         "cuda.q8_early=1",
		                                         "cuda.q8_rows=1",
		                                         "cuda.q8_rows=2",
		                                         "cuda.q8_rows=3",
		                                         "cuda.q8_early=0,cuda.q8_rows=1",
		                                         "cuda.pdl=0" };
		for (size_t v = 0; ok && v < sizeof same_bits / sizeof same_bits[0]; v++) {
			pv_model* gv = NULL;
			struct pv_model_params vp = { .backend = "cuda", .knobs = same_bits[v] };
			CHECK(pv_model_open(&gv, path, &vp, err, sizeof err) == PV_OK, "%s q8: open with %s: %s", name, same_bits[v], err);
			if (!gv) continue;
			for (int rows = 1; rows <= 5; rows += 4) {
				if (!v && rows == 1) continue; /* that is lg itself */
				pv_session* sv = new_session(gv, 0);
				CHECK(run_exact(sv, toks, T, rows, lx, V) == 0 && same(lg, lx, (size_t)V * T),
				      "%s: \"%s\" in steps of %d rows changed the logits", name, same_bits[v], rows);
				pv_session_free(sv);
			}
			pv_model_close(gv);
		}
		pv_session_free(sg);
		pv_session_free(sc);
		pv_session_free(sx);
		free(lg);
		free(lc);
		free(lx);
	}
	pv_model_close(g);
	pv_model_close(c);
}

/* A tiny synth file with a head (arch qwen35moe: an MoE layer; qwen35: dense), written to TMPDIR,
 * on both backends. The tolerance is looser than the fixtures' (random quantized weights, wider
 * rows): gross errors only; the printed figures are the measurement. */
static void test_mtp_synth(const char* arch, enum pv_convert_type type)
{
	char path[512], err[512], name[64];
	const char* tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/test_cuda_api_mtp_%d_%s.gguf", tmp ? tmp : "/tmp", (int)getpid(), arch);
	snprintf(name, sizeof name, "synth %s", arch);
	const struct pv_synth_preset* ps = pv_synth_find(arch, "tiny", err, sizeof err);
	CHECK(ps != NULL, "%s: %s", name, err);
	if (!ps) return;
	struct pv_synth_params p = { .preset = ps, .type = type, .out_path = path, .seed = 7, .mtp = 1, .n_threads = 2 };
	if (pv_synth_write(&p, NULL, err, sizeof err)) {
		CHECK(0, "%s: synth: %s", name, err);
		return;
	}
	pv_model *m = NULL, *cm = NULL;
	/* f32 activations for every type, as the CPU's exact numerics (the K types' default,
	 * cuda.q8_act=2, is the CPU's fast numerics: test_cuda qgemv and quant) */
	struct pv_model_params gp = { .backend = "cuda", .knobs = "cuda.q8_act=0" };
	int rc = pv_model_open(&m, path, &gp, err, sizeof err);
	CHECK(rc == PV_OK, "%s: open on cuda: %s", name, err);
	if (!rc) rc = pv_model_open(&cm, path, &cpu_exact, err, sizeof err);
	CHECK(rc == PV_OK, "%s: open: %s", name, err);
	if (!rc) {
		CHECK(pv_model_get_info(m)->n_mtp_layers == 1, "%s: no head", name);
		int32_t toks[MTP_T];
		uint32_t x = 12345;
		for (int i = 0; i < MTP_T; i++) {
			x = x * 1103515245u + 12345u;
			toks[i] = (int32_t)((x >> 8) % (uint32_t)pv_model_get_info(m)->vocab);
		}
		test_mtp(m, cm, toks, MTP_T, 1e-3, name);
		if (type == PV_CONVERT_Q4_K_M) test_q8_fast(path, cm, toks, MTP_T, name);
	}
	pv_model_close(m);
	pv_model_close(cm);
	unlink(path);
}

int main(void)
{
	struct pv_device_info di;
	char err[512];
	if (pv_device_info("cuda", &di, err, sizeof err)) {
		printf("test_cuda_api: no CUDA device: %s\n", err);
		printf("test_cuda_api: 0 passed, 1 failed\n");
		return 1;
	}
	printf("test_cuda_api: %s (sm_%d%d)\n", di.name, di.cc_major, di.cc_minor);
	char names[32][128];
	int nf = fx_list(fx_root(), names, 32);
	CHECK(nf >= 6, "fixtures found: %d", nf);
	for (int f = 0; f < nf; f++) {
		char dir[512], ref[600];
		snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[f]);
		snprintf(ref, sizeof ref, "%s/reference.json", dir);
		json_t* j = json_load_file(ref, 0, NULL);
		g_toks = fx_ids(json_object_get(json_array_get(json_object_get(j, "cases"), 0), "prompt"), &g_ntok);
		json_decref(j);
		if (g_ntok < 48) {
			printf("skip %s: prompt of %d tokens\n", names[f], g_ntok);
			free(g_toks);
			continue;
		}
		pv_model *m = NULL, *cm = NULL;
		struct pv_model_params gp = { .backend = "cuda" };
		int rc = pv_model_open(&m, dir, &gp, err, sizeof err);
		CHECK(rc == PV_OK, "%s: open on cuda: %s", names[f], err);
		if (!rc) rc = pv_model_open(&cm, dir, &cpu_exact, err, sizeof err);
		CHECK(rc == PV_OK, "%s: open: %s", names[f], err);
		/* PV_CUDA_API_ONLY=cache: the KV cache types alone; =knobs: the knobs and the multi-row
		 * GEMV variants alone (short device calls); =mtp: the MTP head alone; =many: continuous
		 * batching alone */
		const char* only = getenv("PV_CUDA_API_ONLY");
		if (!rc && only && !strcmp(only, "cache")) {
			test_cache_types(m, cm, names[f]);
		} else if (!rc && only && !strcmp(only, "knobs")) {
			test_knobs(m, dir, names[f]);
		} else if (!rc && only && !strcmp(only, "mtp")) {
			test_mtp(m, cm, g_toks, MTP_T, TOL_CPU, names[f]);
		} else if (!rc && only && !strcmp(only, "many")) {
			test_many(m, dir, names[f]);
		} else if (!rc) {
			test_outputs(m, names[f]);
			test_exact(m, names[f]);
			test_snapshots(m, names[f]);
			test_copy_prefix(m, names[f]);
			test_knobs(m, dir, names[f]);
			test_bytes(m, names[f]);
			test_cpu(m, cm, names[f]);
			test_cache_types(m, cm, names[f]);
			test_mtp(m, cm, g_toks, MTP_T, TOL_CPU, names[f]);
			test_many(m, dir, names[f]);
			printf("  %-16s done (%d checks failed so far)\n", names[f], pv_t_fail);
		}
		pv_model_close(m);
		pv_model_close(cm);
		free(g_toks);
	}
	/* the MTP head of an MoE model and of a quantized dense one (tiny synth files) */
	const char* only = getenv("PV_CUDA_API_ONLY");
	if (!only || !strcmp(only, "mtp")) {
		test_mtp_synth("qwen35moe", PV_CONVERT_Q8_0);
		test_mtp_synth("qwen35", PV_CONVERT_Q4_K_M);
	}
	TEST_END("test_cuda_api");
}
