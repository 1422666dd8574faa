/*
 * test_spec.c: the exactness court (`proven court spec`) on the committed case set
 * (tests/data/spec/cases.jsonl: code edits, code, extraction, summaries, chat, tool calls and
 * random ids; a third sampled with a seed) over every fixture architecture and drafter, and on
 * the real model when it is here. Speculative output must equal plain output token for token on
 * every case, and the counts must show that the paths a claim rests on ran: drafts accepted and
 * rejected, rollbacks by snapshot and by replay, the MTP head, a draft model.
 * Runs the binary in $PV_BUILD (default build/).
 */
#include "fixture.h"
#include "harness.h"
#include "proven.h"
#include "proven_dev.h"
#include "proven_spec.h"

#include "cpu/ops.h"
#include "model/model.h"

#include <math.h>
#include <unistd.h>

static char bin[512];

struct verdict {
	int cases, exact;
	long long drafted, accepted, rollbacks, restores, replayed;
	char verdict[32];
};

/* Runs the court; 0 when it ran and printed its summary line. */
static int court(const char* model, const char* args, int max_tokens, const char* extra, struct verdict* v)
{
	char cmd[2048], out[1 << 16];
	snprintf(cmd, sizeof cmd,
	         "%s court spec --model %s --cases tests/data/spec/cases.jsonl --max-tokens %d --threads 2 %s %s", bin, model,
	         max_tokens, args, extra ? extra : "");
	memset(v, 0, sizeof *v);
	int rc = t_run_cmd(cmd, out, sizeof out);
	const char* j = strstr(out, "{\"court\"");
	json_t* o = j ? json_loads(j, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
	if (!o) {
		CHECK(0, "%s %s: no summary (exit %d)", model, args, rc);
		return -1;
	}
	v->cases = (int)json_integer_value(json_object_get(o, "cases"));
	v->exact = (int)json_integer_value(json_object_get(o, "exact"));
	v->drafted = json_integer_value(json_object_get(o, "drafted"));
	v->accepted = json_integer_value(json_object_get(o, "accepted"));
	v->rollbacks = json_integer_value(json_object_get(o, "rollbacks"));
	v->restores = json_integer_value(json_object_get(o, "snapshot_restores"));
	v->replayed = json_integer_value(json_object_get(o, "replayed_rows"));
	snprintf(v->verdict, sizeof v->verdict, "%s", json_string_value(json_object_get(o, "verdict")));
	json_decref(o);
	CHECK(rc == 0 && v->exact == v->cases && !strcmp(v->verdict, "exact"), "%s %s: %d of %d cases exact (%s)", model, args,
	      v->exact, v->cases, v->verdict);
	return 0;
}

static int hybrid(const char* dir)
{
	char p[600];
	snprintf(p, sizeof p, "%s/config.json", dir);
	json_t* c = json_load_file(p, 0, NULL);
	const char* t = c ? json_string_value(json_object_get(c, "model_type")) : NULL;
	int h = t && (strstr(t, "qwen3_5") || strstr(t, "qwen3_next"));
	json_decref(c);
	return h;
}

/* n-gram drafts on every fixture, at a fixed draft length (every step drafts when a match
 * exists), with snapshot and with replay rollback */
TEST_CASE(ngram_every_fixture)
{
	char names[32][128];
	int nf = fx_list(fx_root(), names, 32);
	for (int f = 0; f < nf; f++) {
		char dir[512];
		snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[f]);
		struct verdict v;
		/* the whole set on one model of each kind, a part of it on the others (time) */
		int whole = !strcmp(names[f], "qwen3") || !strcmp(names[f], "qwen3_moe") || !strcmp(names[f], "qwen3_5");
		if (court(dir, "--draft ngram --draft-fixed", 16, whole ? NULL : "--limit 24", &v)) continue;
		CHECK(v.cases >= (whole ? 100 : 24), "%s: %d cases", names[f], v.cases);
		if (hybrid(dir)) {
			CHECK(v.rollbacks == 0 || v.restores > 0, "%s: rollbacks without snapshot restores", names[f]);
			if (court(dir, "--draft ngram --draft-fixed --rollback replay", 16, "--limit 24", &v)) continue;
			CHECK(v.rollbacks == 0 || v.replayed > 0, "%s: replay rollbacks replayed nothing", names[f]);
		}
	}
}

/* a draft model: the model drafting for itself (long acceptances) and another fixture (short
 * ones), on a dense and on a hybrid target */
TEST_CASE(draft_model)
{
	struct verdict v;
	char a[600], b[600];
	snprintf(a, sizeof a, "%s/qwen3", fx_root());
	snprintf(b, sizeof b, "--draft %s/qwen3_odd --draft-fixed", fx_root());
	if (!court(a, b, 24, "--limit 60", &v))
		CHECK(v.drafted > 0 && v.rollbacks > 0, "qwen3_odd drafting for qwen3: drafted %lld, rollbacks %lld", v.drafted,
		      v.rollbacks);
	snprintf(a, sizeof a, "%s/qwen3_5", fx_root());
	snprintf(b, sizeof b, "--draft %s/qwen3_5 --draft-fixed", fx_root());
	if (!court(a, b, 24, "--limit 60", &v))
		CHECK(v.accepted > v.drafted / 4 && v.rollbacks > 0 && v.restores > 0,
		      "qwen3_5 drafting for itself: drafted %lld accepted %lld rollbacks %lld restores %lld", v.drafted,
		      v.accepted, v.rollbacks, v.restores);
	snprintf(b, sizeof b, "--draft cascade:%s/qwen3_5 --draft-fixed --rollback replay", fx_root());
	if (!court(a, b, 24, "--limit 40", &v)) CHECK(v.drafted > 0 && v.replayed > 0, "cascade with replay");
}

/* a typed KV cache keeps speculation exact: rows are rounded once, when written, so a verify
 * call's rows read what one-row decoding reads. n-grams on a dense fixture and a hybrid drafting
 * for itself, over f16 and q8_0 caches (snapshot and replay rollback), the MTP head over bf16 (its own cache
 * is typed too), a draft model over q8_0. */
TEST_CASE(cache_types)
{
	struct verdict v;
	char a[600], b[600];
	static const char* const fx[] = { "qwen3", "qwen3_5" };
	static const char* const ct[] = { "f16", "q8_0" };
	for (int f = 0; f < 2; f++)
		for (int t = 0; t < 2; t++) {
			snprintf(a, sizeof a, "%s/%s", fx_root(), fx[f]);
			/* the hybrid drafts for itself (the first cases give n-grams nothing to match) */
			if (f) snprintf(b, sizeof b, "--draft %s/qwen3_5 --draft-fixed --cache-type %s", fx_root(), ct[t]);
			else snprintf(b, sizeof b, "--draft ngram --draft-fixed --cache-type %s", ct[t]);
			if (!court(a, b, 16, "--limit 24", &v))
				CHECK(v.drafted > 0 && (!f || v.restores > 0), "%s %s: drafted %lld restores %lld", fx[f], ct[t], v.drafted,
				      v.restores);
			if (f) snprintf(b, sizeof b, "--draft %s/qwen3_5 --draft-fixed --rollback replay -ctk %s -ctv %s", fx_root(), ct[t], ct[t]);
			else snprintf(b, sizeof b, "--draft ngram --draft-fixed --rollback replay -ctk %s -ctv %s", ct[t], ct[t]);
			court(a, b, 16, "--limit 12", &v);
		}
	snprintf(a, sizeof a, "%s/qwen3_5", fx_root());
	if (!court(a, "--draft mtp --draft-fixed --cache-type bf16", 16, "--limit 24", &v))
		CHECK(v.drafted > 0 && v.restores > 0, "mtp over bf16: drafted %lld restores %lld", v.drafted, v.restores);
	snprintf(a, sizeof a, "%s/qwen3", fx_root());
	snprintf(b, sizeof b, "--draft %s/qwen3_odd --draft-fixed --cache-type q8_0", fx_root());
	if (!court(a, b, 16, "--limit 24", &v)) CHECK(v.drafted > 0, "draft model over q8_0: drafted %lld", v.drafted);
}

/* the MTP head drafting (the fixture's head has random weights: few acceptances, every
 * rollback path), snapshot and replay */
TEST_CASE(mtp)
{
	struct verdict v;
	char a[600];
	snprintf(a, sizeof a, "%s/qwen3_5", fx_root());
	if (!court(a, "--draft mtp --draft-fixed", 24, NULL, &v))
		CHECK(v.drafted > 1000 && v.rollbacks > 0 && v.restores > 0, "mtp: drafted %lld rollbacks %lld restores %lld",
		      v.drafted, v.rollbacks, v.restores);
	if (!court(a, "--draft mtp --draft-fixed --rollback replay --draft-max 3", 24, "--limit 40", &v))
		CHECK(v.replayed > 0, "mtp with replay: replayed %lld", v.replayed);
	/* the adaptive policy: drafts stop when they do not pay, output still exact */
	court(a, "--draft mtp", 24, "--limit 40", &v);
}

/* the MTP head of an MoE hybrid (its layer's FFN is MoE): a tiny qwen35moe written by synth
 * with --mtp, quantized, through the GGUF loader */
TEST_CASE(mtp_moe_gguf)
{
	char path[600], cmd[1400], out[4096];
	const char* tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/test_spec_%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
	snprintf(cmd, sizeof cmd, "%s synth --arch qwen35moe --preset tiny --mtp --type q8_0 --out %s 2>&1", bin, path);
	int rc = t_run_cmd(cmd, out, sizeof out);
	CHECK(rc == 0, "synth: %s", out);
	struct verdict v;
	if (!rc && !court(path, "--draft mtp --draft-fixed", 16, "--limit 30", &v))
		CHECK(v.drafted > 100 && v.restores > 0, "mtp moe: drafted %lld restores %lld", v.drafted, v.restores);
	unlink(path);
}

static pv_model* open_fixture(const char* name, int32_t** toks, int* n)
{
	char dir[512], ref[600], err[256];
	snprintf(dir, sizeof dir, "%s/%s", fx_root(), name);
	snprintf(ref, sizeof ref, "%s/reference.json", dir);
	json_t* j = json_load_file(ref, 0, NULL);
	*toks = fx_ids(json_object_get(json_array_get(json_object_get(j, "cases"), 0), "prompt"), n);
	json_decref(j);
	pv_model* m = NULL;
	if (pv_model_open(&m, dir, NULL, err, sizeof err)) CHECK(0, "%s: %s", name, err);
	return m;
}

/* the acceptance-trace replay drafter: on the plain output as the oracle, each step drafts and
 * has accepted exactly what the trace says, the tokens stay the plain ones; on a hybrid model
 * (snapshot rollback) and a dense one */
static void replay_on(const char* name)
{
	int32_t* toks;
	int n;
	pv_model* m = open_fixture(name, &toks, &n);
	if (!m) return;
	if (n > 32) n = 32;
	enum { G = 40 };
	struct pv_session_params sp = { .n_ctx = 256, .n_threads = 2, .n_snapshots = 17 };
	pv_session* s = NULL;
	char err[256];
	CHECK(!pv_session_new(&s, m, &sp, err, sizeof err), "%s: session: %s", name, err);
	int32_t plain[G + 17], got[G + 17], seq[256];
	int np = 0, ng = 0;
	pv_generator* g = NULL;
	/* plain */
	CHECK(!pv_generator_new(&g, s, NULL, NULL, err, sizeof err) && !pv_generator_prompt(g, toks, n, &plain[0]), "%s: plain",
	      name);
	np = 1;
	while (g && np < G) {
		int k = 0;
		if (pv_generator_step(g, plain + np, G - np, &k)) break;
		np += k;
	}
	pv_generator_free(g);
	memcpy(seq, toks, sizeof(int32_t) * (size_t)n);
	memcpy(seq + n, plain, sizeof(int32_t) * (size_t)np);
	/* (drafted, accepted) per step: full, partial, none, a plain step, a first-token miss */
	static const uint8_t trace[] = { 4, 4, 6, 2, 0, 0, 3, 0, 16, 9, 2, 1, 5, 5 };
	const int steps = (int)sizeof trace / 2;
	struct pv_spec_params spec = { .draft = PV_DRAFT_REPLAY,
		                       .replay_seq = seq,
		                       .replay_n_seq = n + np,
		                       .replay_steps = trace,
		                       .replay_n_steps = steps };
	CHECK(pv_session_truncate(s, 0) == PV_OK && !pv_generator_new(&g, s, NULL, &spec, err, sizeof err) &&
	              !pv_generator_prompt(g, toks, n, &got[0]),
	      "%s: replay: %s", name, err);
	ng = 1;
	int ok = 1;
	for (int i = 0; g && ng < G; i++) {
		struct pv_gen_stats a, b;
		pv_generator_stats(g, &a);
		int k = 0;
		if (pv_generator_step(g, got + ng, G + 17 - ng, &k)) break;
		ng += k;
		pv_generator_stats(g, &b);
		if (i < steps)
			ok &= b.drafted - a.drafted == trace[2 * i] && b.accepted - a.accepted == trace[2 * i + 1];
		else
			ok &= b.drafted == a.drafted; /* past the trace: plain steps */
	}
	CHECK(ok, "%s: the steps did not follow the trace", name);
	CHECK(ng >= G && !memcmp(got, plain, sizeof(int32_t) * G), "%s: replayed tokens differ from plain decoding", name);
	pv_generator_free(g);
	/* no expected tokens: a clear error, no generator */
	struct pv_spec_params bad = { .draft = PV_DRAFT_REPLAY };
	g = NULL;
	CHECK(pv_generator_new(&g, s, NULL, &bad, err, sizeof err) == PV_E_INVALID && !g && strstr(err, "replay"),
	      "%s: a replay drafter without a trace: %s", name, err);
	pv_session_free(s);
	pv_model_close(m);
	free(toks);
}

TEST_CASE(replay_trace)
{
	replay_on("qwen3");
	replay_on("qwen3_5");
}

/* logprobs: the chosen token's log-softmax and the top alternatives, from the same rows the
 * choice came from (checked against logits evaluated separately), greedy and speculative alike */
TEST_CASE(logprobs)
{
	int32_t* toks;
	int n;
	pv_model* m = open_fixture("qwen3_5", &toks, &n);
	if (!m) return;
	const int V = pv_model_get_info(m)->vocab;
	struct pv_session_params sp = { .n_ctx = 256, .n_threads = 2, .n_snapshots = 9 };
	pv_session *s = NULL, *r = NULL;
	char err[256];
	CHECK(!pv_session_new(&s, m, &sp, err, sizeof err) && !pv_session_new(&r, m, &sp, err, sizeof err), "sessions");
	struct pv_spec_params spec = { .draft = PV_DRAFT_NGRAM, .k_max = 4, .ngram_min = 1, .ngram_max = 3, .fixed_k = 1 };
	pv_generator* g = NULL;
	CHECK(pv_generator_new(&g, s, NULL, &spec, err, sizeof err) == PV_OK && pv_generator_set_logprobs(g, 5) == PV_OK,
	      "gen");
	int32_t out[64], first;
	struct pv_token_logprob lp[16];
	CHECK(pv_generator_prompt(g, toks, 24, &first) == PV_OK && pv_generator_logprobs(g, lp, 16) == 1 && lp[0].id == first,
	      "prompt logprobs");
	float* row = malloc(sizeof(float) * V);
	int seq_n = 24, ok = 1, checked = 0;
	int32_t seq[128];
	memcpy(seq, toks, sizeof(int32_t) * 24);
	seq[seq_n++] = first;
	for (int step = 0; step < 12 && ok; step++) {
		int got = 0;
		int nlp = 0;
		if (step == 0) {
			memcpy(lp + 8, lp, sizeof lp[0]);
			nlp = 1;
		}
		ok = pv_generator_step(g, out, 8, &got) == PV_OK;
		int k = pv_generator_logprobs(g, lp, 16);
		CHECK(k == got, "step %d: %d logprobs for %d tokens", step, k, got);
		for (int j = 0; j < k && ok; j++) {
			/* the reference: the logits after seq[0 .. seq_n + j) evaluated plainly */
			if (pv_session_sync(r, seq, seq_n + j, PV_EVAL_EXACT, &(struct pv_eval_out){ row, 0, NULL, 0, NULL, 0 },
			                    NULL))
				ok = 0;
			double mx = row[0], sum = 0;
			for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
			for (int i = 0; i < V; i++) sum += exp(row[i] - mx);
			double want = row[out[j]] - mx - log(sum);
			CHECK(fabs(lp[j].logprob - want) < 1e-4 && lp[j].id == out[j] && lp[j].n_top == 5 &&
			              lp[j].top_id[0] == out[j] && lp[j].top_logprob[0] >= lp[j].top_logprob[4],
			      "step %d token %d: logprob %g want %g", step, j, lp[j].logprob, want);
			checked++;
			seq[seq_n + j] = out[j];
		}
		(void)nlp;
		seq_n += got;
	}
	CHECK(ok && checked >= 12, "checked %d tokens", checked);
	free(row);
	pv_generator_free(g);
	pv_session_free(s);
	pv_session_free(r);
	pv_model_close(m);
	free(toks);
}

/* several generators stepped together give each one's own tokens */
TEST_CASE(step_many)
{
	const char* fx[3] = { "qwen3", "qwen3_5", "qwen3_moe" };
	pv_model* m[3];
	pv_session* s[3];
	pv_generator* g[3];
	int32_t* toks[3];
	int nt[3];
	int32_t alone[3][40], many[3][40];
	char err[256];
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 3; i++) {
			m[i] = open_fixture(fx[i], &toks[i], &nt[i]);
			struct pv_session_params sp = { .n_ctx = 256, .n_threads = 2, .n_snapshots = 9 };
			struct pv_spec_params spec = { .draft = i == 1 ? PV_DRAFT_NGRAM : PV_DRAFT_NONE,
				                       .k_max = 8,
				                       .fixed_k = 1 };
			struct pv_sampling smp = { i == 2 ? 0.9f : 0.0f, 0, 1.0f, 0, 5, 0 };
			CHECK(m[i] && !pv_session_new(&s[i], m[i], &sp, err, sizeof err) &&
			              !pv_generator_new(&g[i], s[i], &smp, &spec, err, sizeof err) &&
			              !pv_generator_prompt(g[i], toks[i], 20, pass ? &many[i][0] : &alone[i][0]),
			      "%s: set-up", fx[i]);
		}
		int have[3] = { 1, 1, 1 };
		for (int round = 0; round < 64; round++) {
			int32_t* outs[3];
			int max[3], got[3], rc[3], live = 0;
			pv_generator* gs[3];
			int idx[3];
			for (int i = 0; i < 3; i++)
				if (have[i] < 40) {
					outs[live] = (pass ? many[i] : alone[i]) + have[i];
					max[live] = 40 - have[i];
					gs[live] = g[i];
					idx[live++] = i;
				}
			if (!live) break;
			if (pass) {
				CHECK(pv_generator_step_many(gs, live, outs, max, got, rc) == PV_OK, "step_many");
			} else {
				for (int k = 0; k < live; k++) rc[k] = pv_generator_step(gs[k], outs[k], max[k], &got[k]);
			}
			for (int k = 0; k < live; k++) have[idx[k]] += rc[k] ? 40 : got[k];
		}
		for (int i = 0; i < 3; i++) {
			pv_generator_free(g[i]);
			pv_session_free(s[i]);
			pv_model_close(m[i]);
			free(toks[i]);
		}
	}
	for (int i = 0; i < 3; i++) CHECK(!memcmp(alone[i], many[i], sizeof alone[i]), "%s: stepped together differs", fx[i]);
}

/* Continuous batching: generators without a drafter on sessions of one model (one shared pool)
 * step one row each in one forward; the ids (greedy, sampled, with log-probabilities) are those
 * of stepping each alone, at different positions, on a dense, an MoE and a biased-QKV model and
 * on every hybrid (gated attention + Gated DeltaNet: Qwen3.5 dense and MoE, Qwen3-Next's
 * key-group-major projections); the rows really went together (batched_rows); the dense model
 * and a hybrid again with a q8_0 KV cache (rows stored into each session's typed cache); a
 * hybrid whose sessions mix cache types is not covered: it steps alone with the same ids. */
TEST_CASE(step_many_batched)
{
	enum { NF = 11, G = 4, N = 24 };
	static const char* const fx[NF] = { "qwen3",       "qwen3_moe",    "qwen2",      "qwen3_5", "qwen3",  "qwen3_5_moe",
		                            "qwen3_5_r3", "qwen3_5_text", "qwen3_next", "qwen3_5", "qwen3_5" };
	/* the sessions' cache types: 0 f32, 1 q8_0, 2 f32 and f16 by turns (not covered) */
	static const int cache[NF] = { 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2 };
	char err[256];
	for (int f = 0; f < NF; f++) {
		int32_t *toks, ids[2][G][N];
		int nt;
		pv_model* m = open_fixture(fx[f], &toks, &nt);
		if (!m) continue;
		uint64_t batched[2] = { 0, 0 };
		pv_pool* pool = pv_pool_new(2);
		for (int pass = 0; pass < 2; pass++) {
			pv_session* s[G] = { 0 };
			pv_generator* g[G] = { 0 };
			int have[G], ok = 1;
			for (int i = 0; i < G; i++) {
				const int ct = cache[f] == 1 ? PV_CACHE_Q8_0 : cache[f] == 2 && i % 2 ? PV_CACHE_F16 : 0;
				struct pv_session_params sp = { .n_ctx = 128, .pool = pool, .cache_type = ct };
				struct pv_sampling smp = { i == 1 ? 0.9f : 0.0f, i == 1 ? 40 : 0, 1.0f, 0, 7u + (unsigned)i, 0 };
				const int plen = 4 + 5 * i < nt ? 4 + 5 * i : nt; /* different positions */
				ok &= !pv_session_new(&s[i], m, &sp, err, sizeof err) && !pv_generator_new(&g[i], s[i], &smp, NULL, err, sizeof err);
				if (ok && i == 3) pv_generator_set_logprobs(g[i], 3); /* logits rows too */
				ok &= ok && !pv_generator_prompt(g[i], toks, plen, &ids[pass][i][0]);
				have[i] = 1;
			}
			CHECK(ok, "%s: set-up: %s", fx[f], err);
			for (int round = 0; ok && round < N; round++) {
				pv_generator* gs[G];
				int32_t* outs[G];
				int max[G], got[G], rc[G], idx[G], live = 0;
				for (int i = 0; i < G; i++)
					if (have[i] < N) {
						gs[live] = g[i];
						outs[live] = &ids[pass][i][have[i]];
						max[live] = N - have[i];
						idx[live++] = i;
					}
				if (!live) break;
				if (pass) ok &= pv_generator_step_many(gs, live, outs, max, got, rc) == PV_OK;
				else
					for (int k = 0; k < live; k++) ok &= (rc[k] = pv_generator_step(gs[k], outs[k], max[k], &got[k])) == PV_OK;
				for (int k = 0; k < live; k++) have[idx[k]] += got[k];
			}
			CHECK(ok, "%s: pass %d stepped", fx[f], pass);
			for (int i = 0; i < G; i++) {
				struct pv_session_stats st;
				if (s[i] && !pv_session_get_stats(s[i], &st)) batched[pass] += st.batched_rows;
				pv_generator_free(g[i]);
				pv_session_free(s[i]);
			}
		}
		for (int i = 0; i < G; i++)
			CHECK(!memcmp(ids[0][i], ids[1][i], sizeof ids[0][i]), "%s: generator %d: batched ids = alone", fx[f], i);
		if (cache[f] != 2)
			CHECK(batched[0] == 0 && batched[1] >= (N - 1) * G - 4, "%s: %llu rows batched", fx[f], (unsigned long long)batched[1]);
		else CHECK(batched[1] == 0, "%s (mixed cache types): steps alone", fx[f]);
		pv_pool_free(pool);
		pv_model_close(m);
		free(toks);
	}
}

/* The MTP head against an independent float64 implementation of qwen-models.md §7.2
 * (tools/reference/mtp_reference.py, torch, no transformers: transformers never runs the head):
 * the main model's final-norm rows, the head's logits for every position of the fixture's
 * sequence, within the conformance tolerance (tests/test_conformance.c: 2e-4 of the row's largest
 * logit), greedy ids equal wherever the reference's margin is clear; and the head is
 * batch-invariant (one row per call == many rows per call, bitwise). */
#define MTP_TOL_REL 2e-4
TEST_CASE(mtp_reference)
{
	char dir[512], ref[600], path[700], err[256];
	snprintf(dir, sizeof dir, "%s/qwen3_5", fx_root());
	snprintf(ref, sizeof ref, "%s/reference.json", dir);
	snprintf(path, sizeof path, "%s/mtp.reference.safetensors", dir);
	json_t* j = json_load_file(ref, 0, NULL);
	json_t* c0 = json_array_get(json_object_get(j, "cases"), 0);
	int np, ng;
	int32_t* p = fx_ids(json_object_get(c0, "prompt"), &np);
	int32_t* g = fx_ids(json_object_get(c0, "generated"), &ng);
	json_decref(j);
	const int T = np + ng;
	int32_t* ids = malloc(sizeof(int32_t) * (size_t)T);
	memcpy(ids, p, sizeof(int32_t) * (size_t)np);
	memcpy(ids + np, g, sizeof(int32_t) * (size_t)ng);
	free(p);
	free(g);
	int hr, hc, lr, lc;
	float* ref_h = fx_read_f32(path, "hidden", &hr, &hc);
	float* ref_l = fx_read_f32(path, "mtp_logits", &lr, &lc);
	pv_model* m = NULL;
	/* the exact numerics (f32 activations): this checks the math against float64; the fast
	 * numerics' cost is measured on real text (docs/results/cpu-quality-*) */
	struct pv_model_params mp = { .knobs = "cpu.exact_activations=1" };
	CHECK(ref_h && ref_l && hr == T && lr == T - 1, "reference %s: hidden %d rows, logits %d rows (sequence %d)", path, hr,
	      lr, T);
	if (!ref_h || !ref_l || hr != T || lr != T - 1 || pv_model_open(&m, dir, &mp, err, sizeof err)) goto out;
	{
		const int H = pv_model_get_info(m)->hidden, V = pv_model_get_info(m)->vocab;
		CHECK(hc == H && lc == V, "reference widths %d %d", hc, lc);
		struct pv_session_params sp = { .n_ctx = T + 8, .n_threads = 2, .mtp = 1, .max_batch = 64 };
		pv_session* s = NULL;
		CHECK(pv_session_new(&s, m, &sp, err, sizeof err) == PV_OK, "session: %s", err);
		float* hid = malloc(sizeof(float) * (size_t)T * H);
		float* oh = malloc(sizeof(float) * (size_t)T * H);
		float* oh1 = malloc(sizeof(float) * (size_t)T * H);
		float* lg = malloc(sizeof(float) * (size_t)T * V);
		int32_t* am = malloc(sizeof(int32_t) * (size_t)T);
		int32_t* am1 = malloc(sizeof(int32_t) * (size_t)T);
		struct pv_eval_out o = { NULL, 0, NULL, 0, hid, 0 };
		CHECK(pv_session_run(s, ids, T, PV_EVAL_EXACT, &o) == PV_OK, "main rows: %s", pv_session_error(s));
		double eh = 0, hm = 0;
		for (size_t i = 0; i < (size_t)T * H; i++) {
			double d = fabs((double)hid[i] - ref_h[i]);
			if (!(d <= eh)) eh = d;
			if (fabs(ref_h[i]) > hm) hm = fabs(ref_h[i]);
		}
		CHECK(eh / (hm > 1 ? hm : 1) <= MTP_TOL_REL, "main model's final-norm rows: max error %.3g of max %.3g", eh,
		      hm);
		/* the head over every position, 64 rows per call */
		int ok = 1;
		for (int r = 0; r < T - 1 && ok; r += 64) {
			int k = T - 1 - r < 64 ? T - 1 - r : 64;
			ok = pv_session_mtp(s, r, hid + (size_t)r * H, ids + r + 1, k, am + r, oh + (size_t)r * H) == PV_OK;
		}
		CHECK(ok && pv_session_mtp_length(s) == T - 1, "mtp calls: %s", pv_session_error(s));
		pv_matmul(NULL, lg, V, oh, H, T - 1, &m->w.lm_head);
		double worst = 0;
		int ids_ok = 1, clear = 0;
		for (int r = 0; r < T - 1; r++) {
			const float *a = lg + (size_t)r * V, *b = ref_l + (size_t)r * V;
			double e = 0, mx = 0;
			int best = 0, second = -1;
			for (int i = 0; i < V; i++) {
				double d = fabs((double)a[i] - b[i]);
				if (!(d <= e)) e = d;
				if (fabs(b[i]) > mx) mx = fabs(b[i]);
				if (b[i] > b[best]) best = i;
			}
			for (int i = 0; i < V; i++)
				if (i != best && (second < 0 || b[i] > b[second])) second = i;
			double rel = e / (mx > 1 ? mx : 1);
			if (!(rel <= worst)) worst = rel;
			if (b[best] - b[second] > 1e-3 * (mx > 1 ? mx : 1)) {
				clear++;
				ids_ok &= am[r] == best;
			}
		}
		CHECK(worst <= MTP_TOL_REL, "MTP logits vs the float64 reference: rel %.3g > %g", worst, MTP_TOL_REL);
		CHECK(ids_ok && clear > (T - 1) / 2, "MTP greedy ids differ from the reference (%d rows with a clear margin)",
		      clear);
		printf("  mtp: %d positions, max rel error %.2e, %d clear-margin ids equal\n", T - 1, worst, clear);
		/* batch invariance: one row per call gives the same bits */
		CHECK(pv_session_truncate(s, T) == PV_OK, "truncate");
		for (int r = 0; r < T - 1 && ok; r++)
			ok = pv_session_mtp(s, r, hid + (size_t)r * H, ids + r + 1, 1, am1 + r, oh1 + (size_t)r * H) == PV_OK;
		CHECK(ok && !memcmp(am, am1, sizeof(int32_t) * (size_t)(T - 1)) &&
		              !memcmp(oh, oh1, sizeof(float) * (size_t)(T - 1) * H),
		      "the head's rows depend on how many share a call");
		pv_session_free(s);
		free(hid);
		free(oh);
		free(oh1);
		free(lg);
		free(am);
		free(am1);
	}
out:
	pv_model_close(m);
	free(ref_h);
	free(ref_l);
	free(ids);
}

/* the real 0.5B model (text prompts through its tokenizer): n-gram and itself as a draft model */
TEST_CASE(real_model)
{
	char buf[1024];
	const char* m = fx_real_model(buf, sizeof buf);
	if (!m) {
		t_skip("the real model is not here (tools/get-model.sh)");
		return;
	}
	struct verdict v;
	if (!court(m, "--draft ngram --draft-fixed", 12, "--limit 3 --class code_edit", &v))
		CHECK(v.accepted > 0, "real ngram on code edits: accepted %lld", v.accepted);
	char args[1200];
	snprintf(args, sizeof args, "--draft %s --draft-max 4 --draft-fixed", m);
	court(m, args, 8, "--limit 2 --class chat", &v);
}

static int setup(void)
{
	const char* b = getenv("PV_BUILD");
	snprintf(bin, sizeof bin, "%s/proven", b ? b : "build");
	return 0;
}

int main(int argc, char** argv) { return t_main(argc, argv, "test_spec", setup, NULL); }
