/*
 * court_ab.c: `proven court ab`, the promotion court. Each arm is a SPEC, the options that make
 * it (`--knobs cpu.x=1`, `--draft ngram`, `--threads 1`, `bin=build-old/proven`); every run is one
 * `proven bench` child writing its own receipt, in ABBA blocks after one discarded warm-up run
 * per arm, repeated until the ratio's 95 % interval is tight (--target) or --max-blocks is hit.
 * The judgement (evidence/court_ab.c) gives faster / slower / no difference, or invalid when a
 * veto holds; the verdict is stored, the court's own receipt written, and --crystal NAME moves
 * that crystal (faster: active; slower: dead, with the lesson; invalid: unchanged, proof kept).
 *
 *   proven court ab --a SPEC --b SPEC --model M [--workload W | --bench "OPTS"] [--figure tg]
 *                   [--reps N] [--max-blocks N] [--target 0.02] [--crystal NAME] [--switch PATH]
 *                   [--same-acceptance] [--exactness CASES] [--max-load X] [--max-foreign X]
 *                   [--min-clean N]
 */
#include "cli.h"
#include "evidence/evidence.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TOK 64
#define MAX_RUNS 256

struct arm {
	char buf[2048];
	char* tok[MAX_TOK];
	int n;
	const char* bin;
};

static int split(struct arm* a, const char* spec)
{
	snprintf(a->buf, sizeof a->buf, "%s", spec ? spec : "");
	a->n = 0;
	a->bin = NULL;
	for (char* p = strtok(a->buf, " \t"); p; p = strtok(NULL, " \t")) {
		if (!strncmp(p, "bin=", 4)) a->bin = p + 4;
		else if (a->n < MAX_TOK - 1) a->tok[a->n++] = p;
		else return -1;
	}
	return 0;
}

/* the value of option o in an arm ("" for a flag, NULL when absent) */
static const char* opt(const struct arm* a, const char* o)
{
	for (int i = 0; i < a->n; i++)
		if (!strcmp(a->tok[i], o)) return i + 1 < a->n && strncmp(a->tok[i + 1], "--", 2) ? a->tok[i + 1] : "";
	return NULL;
}

/* The identity paths the two specs differ in: the switch under test. */
static int switches(const struct arm* a, const struct arm* b, const char** sw, int max, char store[][128])
{
	int n = 0;
	const struct arm* arms[2] = { a, b };
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < arms[s]->n; i++) {
			const char* o = arms[s]->tok[i];
			if (strncmp(o, "--", 2)) continue;
			const char *va = opt(a, o), *vb = opt(b, o);
			if (va && vb && !strcmp(va, vb)) continue;
			if (!strcmp(o, "--knobs")) {
				/* each knob named in either list: runtime.knobs.NAME, and the args line */
				for (int k = 0; k < 2; k++) {
					const char* v = k ? vb : va;
					char tmp[512];
					snprintf(tmp, sizeof tmp, "%s", v ? v : "");
					for (char* p = strtok(tmp, ","); p && n < max - 1; p = strtok(NULL, ",")) {
						char* eq = strchr(p, '=');
						if (eq) *eq = 0;
						snprintf(store[n], 128, "runtime.knobs.%s", p);
						sw[n] = store[n];
						n++;
					}
				}
				if (n < max) sw[n] = "args.knobs", n++;
			} else if (n < max) {
				snprintf(store[n], 128, "args.%s", o + 2);
				sw[n] = store[n];
				n++;
				/* speculation options land in the receipt's args.spec */
				const char* spec_opts[] = { "--rollback", "--draft-max", "--draft-fixed", "--ngram-min", "--ngram-max" };
				for (int q = 0; q < 5; q++)
					if (!strcmp(o, spec_opts[q]) && n < max) sw[n++] = "args.spec";
				if (!strcmp(o, "--threads") && n < max) sw[n++] = "runtime.threads";
			}
		}
	if (a->bin || b->bin) {
		const char* bins[] = { "runtime.commit", "runtime.dirty", "runtime.cflags", "runtime.compiler", "runtime.nvcc_flags", "runtime.nvcc" };
		for (int i = 0; i < 6 && n < max; i++) sw[n++] = bins[i];
	}
	return n;
}

/* One child run; its receipt id, or -1. */
static int64_t run_arm(const struct arm* a, const char* model, const char* workload, const struct arm* common, const char* ledger,
                       const char* kind)
{
	char idfile[] = "/tmp/proven-court-XXXXXX";
	int fd = mkstemp(idfile);
	if (fd < 0) return -1;
	close(fd);
	char* argv[MAX_TOK * 2 + 16];
	int n = 0;
	argv[n++] = (char*)(a->bin ? a->bin : "/proc/self/exe");
	if (!strcmp(kind, "court")) {
		argv[n++] = "court";
		argv[n++] = "spec";
	} else argv[n++] = "bench";
	argv[n++] = "--model";
	argv[n++] = (char*)model;
	if (workload && strcmp(kind, "court")) {
		argv[n++] = "--workload";
		argv[n++] = (char*)workload;
	}
	for (int i = 0; i < common->n; i++) argv[n++] = common->tok[i];
	for (int i = 0; i < a->n; i++) argv[n++] = a->tok[i];
	if (!strcmp(kind, "court") && !opt(a, "--draft")) {
		argv[n++] = "--draft";
		argv[n++] = "ngram";
	}
	argv[n] = NULL;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("PROVEN_LEDGER", ledger, 1);
		setenv("PROVEN_RECEIPT_ID_FILE", idfile, 1);
		/* the child's tables are not the court's output */
		if (!freopen("/dev/null", "w", stdout)) _exit(127);
		execv(argv[0], argv);
		_exit(127);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) < 0) {
		unlink(idfile);
		return -1;
	}
	FILE* f = fopen(idfile, "r");
	long long id = -1;
	if (f) {
		if (fscanf(f, "%lld", &id) != 1) id = -1;
		fclose(f);
	}
	unlink(idfile);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "proven court ab: a run of %s exited %d\n", argv[1], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return !strcmp(kind, "court") && id > 0 ? -id : -1; /* a failed court still wrote its receipt */
	}
	return id;
}

/* The judgement of the runs rs (arm[i]: 0 = A, 1 = B), its receipt (rec: the court's, NULL when
 * receipts are off), the stored verdict, the table and the crystal that follows it. Returns the
 * exit status: 0 for a verdict, 3 for invalid. */
static int conclude(ev_store* st, ev_receipt* rec, json_t* const* rs, const int* arm, int n, const char* const* sw, int nsw, const char* fig,
                    const struct ev_court_limits* lim, const int* exact_ab, const int64_t* court_ids, const int64_t* warm, const char* sa,
                    const char* sb, const char* crystal, int64_t rejudge_of)
{
	char err[512];
	json_t* verdict = ev_court_judge(rs, arm, n, sw, nsw, fig, lim, exact_ab[0], exact_ab[1]);
	json_object_set_new(verdict, "a", json_string(sa));
	json_object_set_new(verdict, "b", json_string(sb));
	json_object_set_new(verdict, "warmup", json_pack("[I,I]", (json_int_t)warm[0], (json_int_t)warm[1]));
	if (court_ids) json_object_set_new(verdict, "exactness_receipts", json_pack("[I,I]", (json_int_t)court_ids[0], (json_int_t)court_ids[1]));
	if (crystal) json_object_set_new(verdict, "crystal", json_string(crystal));
	/* the limits the vetoes were judged by: a verdict under raised limits says so */
	json_object_set_new(verdict, "limits",
	                    json_pack("{s:f,s:f,s:f,s:f,s:i,s:b,s:b}", "max_load_per_core", lim->max_load_per_core, "max_foreign_share",
	                              lim->max_foreign_share, "max_clock_drift", lim->max_clock_drift, "max_temp_drift_c", lim->max_temp_drift_c,
	                              "min_clean_blocks", lim->min_clean_pairs, "same_acceptance", lim->same_acceptance, "same_tokens",
	                              lim->same_tokens));
	if (rejudge_of) json_object_set_new(verdict, "rejudge_of", json_integer(rejudge_of));
	const char* vd = json_string_value(json_object_get(verdict, "verdict"));
	double ratio = json_number_value(json_object_get(verdict, "ratio"));
	double lo = json_number_value(json_object_get(verdict, "lo")), hi = json_number_value(json_object_get(verdict, "hi"));
	/* the court's own receipt: the ratio with its interval, citing the runs */
	if (rec) {
		ev_receipt_runtime(rec, NULL, "cpu", 0);
		json_t* w = json_object_get(rs[0], "workload");
		ev_receipt_workload(rec, json_string_value(json_object_get(w, "class")), json_string_value(json_object_get(w, "prompt_digest")),
		                    (int)json_integer_value(json_object_get(w, "n_prompt")), (int)json_integer_value(json_object_get(w, "n_gen")),
		                    0, 0, n, 2);
		if (json_is_object(json_object_get(rs[0], "model")))
			json_object_set(ev_receipt_doc(rec), "model", json_object_get(rs[0], "model"));
		double* r = malloc(sizeof(double) * (size_t)(n / 4 + 1));
		int nr = 0;
		for (int k = 0; r && k < n / 4; k++) {
			double a = 0, b = 0;
			for (int j = 4 * k; j < 4 * k + 4; j++) {
				size_t i;
				json_t* f;
				json_array_foreach(json_object_get(rs[j], "figures"), i, f)
				if (!strcmp(json_string_value(json_object_get(f, "name")), fig))(arm[j] ? &b : &a)[0] +=
					        json_number_value(json_object_get(f, "value"));
			}
			if (a > 0) r[nr++] = b / a;
		}
		ev_receipt_samples(rec, "block_ratio", "ratio B/A", r, nr);
		free(r);
		if (ratio > 0) ev_receipt_figure(rec, "ratio", "court", "ratio B/A", ratio, 0, json_integer_value(json_object_get(verdict, "clean_blocks")));
		ev_receipt_extra(rec, "verdict", json_deep_copy(verdict));
		int64_t rid = cli_receipt_end(rec, "ok");
		rec = NULL;
		if (rid > 0) json_object_set_new(verdict, "receipt", json_integer(rid));
	}
	int64_t vid = ev_store_put_verdict(st, verdict, err, sizeof err);
	if (vid < 0) fprintf(stderr, "proven court ab: %s\n", err);
	printf("| arm | spec |\n| --- | --- |\n| A | %s |\n| B | %s |\n", sa, sb);
	printf("verdict %lld: %s; %s B/A = %.4f, 95%% interval [%.4f, %.4f], %lld clean ABBA blocks of %lld\n", (long long)vid, vd, fig, ratio,
	       lo, hi, (long long)json_integer_value(json_object_get(verdict, "clean_blocks")),
	       (long long)json_integer_value(json_object_get(verdict, "blocks")));
	size_t i;
	json_t* v;
	json_array_foreach(json_object_get(verdict, "vetoes"), i, v)
	printf("veto %s: %s\n", json_string_value(json_object_get(v, "rule")), json_string_value(json_object_get(v, "detail")));
	/* the crystal follows a valid verdict */
	if (crystal && vid > 0) {
		char ref[32], note[600], lesson[900];
		snprintf(ref, sizeof ref, "%lld", (long long)vid);
		snprintf(note, sizeof note, "court ab: %s, %s B/A %.4f [%.4f, %.4f]", vd, fig, ratio, lo, hi);
		const char* to = !strcmp(vd, "faster") ? "active" : !strcmp(vd, "slower") ? "dead" : NULL;
		if (to && !strcmp(to, "dead")) {
			snprintf(lesson, sizeof lesson, "do not repeat: %s as it stands, because the promotion court measured %s B/A %.4f [%.4f, %.4f] (verdict %lld)",
			         sb, fig, ratio, lo, hi, (long long)vid);
			ev_crystal_lesson(st, crystal, lesson, err, sizeof err);
		}
		if (ev_crystal_status(st, crystal, to, "verdict", ref, note, err, sizeof err))
			fprintf(stderr, "proven court ab: crystal %s: %s\n", crystal, err);
		else printf("crystal %s: %s\n", crystal, to ? to : "unchanged");
	}
	char* s = json_dumps(verdict, JSON_SORT_KEYS | JSON_COMPACT);
	printf("%s\n", s);
	free(s);
	int rc = !strcmp(vd, "invalid") ? 3 : 0;
	json_decref(verdict);
	return rc;
}

/* `--rejudge ID`: the runs of a stored verdict judged again under the limits and rules given now
 * (--needs, --max-load, --same-acceptance, ...), without measuring anything: a new verdict that
 * names the one it re-judges. --crystal moves a crystal as a court does; without it none moves. */
static int court_rejudge(int id, int argc, char** argv, const char* fig, const char* crystal, const char* const* extra_sw, int n_extra,
                         const struct ev_court_limits* lim)
{
	char err[512];
	ev_store* st = NULL;
	if (!ev_ledger_path() || ev_store_open(&st, ev_ledger_path(), err, sizeof err)) {
		fprintf(stderr, "proven court ab: %s\n", ev_ledger_path() ? err : "the court needs receipts (PROVEN_LEDGER is off)");
		return 1;
	}
	json_t* all = ev_store_verdicts(st, NULL, 0);
	json_t* old = NULL;
	size_t i;
	json_t* x;
	json_array_foreach(all, i, x) if (json_integer_value(json_object_get(x, "id")) == id) old = x;
	const char* court = old ? json_string_value(json_object_get(old, "court")) : NULL;
	if (!old || !court || strcmp(court, "ab")) {
		fprintf(stderr, "proven court ab: no promotion-court verdict %d to re-judge\n", id);
		json_decref(all);
		ev_store_close(st);
		return 1;
	}
	json_t* rs[MAX_RUNS];
	int arm[MAX_RUNS], n = 0, rc = 1;
	json_array_foreach(json_object_get(old, "receipts"), i, x)
	{
		if (n == MAX_RUNS) break;
		rs[n] = ev_store_get_receipt(st, json_integer_value(json_object_get(x, "id")));
		if (!rs[n]) {
			fprintf(stderr, "proven court ab: verdict %d cites receipt %lld, which is not in the ledger\n", id,
			        (long long)json_integer_value(json_object_get(x, "id")));
			goto out;
		}
		const char* a = json_string_value(json_object_get(x, "arm"));
		arm[n++] = a && !strcmp(a, "B");
	}
	const char* sw[64];
	int nsw = 0;
	json_array_foreach(json_object_get(old, "switch"), i, x) if (nsw < 48 && json_string_value(x)) sw[nsw++] = json_string_value(x);
	for (int k = 0; k < n_extra && nsw < 64; k++) sw[nsw++] = extra_sw[k];
	int exact_ab[2] = { -1, -1 };
	int64_t court_ids[2] = { 0, 0 }, warm[2] = { 0, 0 };
	json_t* ex = json_object_get(old, "exactness_receipts");
	for (int k = 0; k < 2 && json_array_size(ex) == 2; k++) {
		court_ids[k] = json_integer_value(json_array_get(ex, (size_t)k));
		json_t* r = ev_store_get_receipt(st, court_ids[k]);
		const char* status = r ? json_string_value(json_object_get(r, "status")) : NULL;
		exact_ab[k] = status && !strcmp(status, "ok");
		json_decref(r);
	}
	for (int k = 0; k < 2; k++) warm[k] = json_integer_value(json_array_get(json_object_get(old, "warmup"), (size_t)k));
	ev_receipt* rec = cli_receipt_begin("court.ab", argc, argv);
	rc = conclude(st, rec, rs, arm, n, sw, nsw, fig ? fig : json_string_value(json_object_get(old, "figure")), lim, exact_ab,
	              json_array_size(ex) == 2 ? court_ids : NULL, warm, json_string_value(json_object_get(old, "a")),
	              json_string_value(json_object_get(old, "b")), crystal, id);
out:
	for (int k = 0; k < n; k++) json_decref(rs[k]);
	json_decref(all);
	ev_store_close(st);
	return rc;
}

int cmd_court_ab(int argc, char** argv)
{
	const char *sa = NULL, *sb = NULL, *model = NULL, *workload = NULL, *bench = "", *fig = NULL, *crystal = NULL, *exact = NULL;
	int min_blocks = 3, max_blocks = 10, rejudge = 0;
	double target = 0.02;
	const char* extra_sw[16];
	int n_extra = 0;
	struct ev_court_limits lim;
	ev_court_limits_default(&lim);
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("court", stdout);
		if (!strcmp(a, "--same-acceptance")) { lim.same_acceptance = 1; continue; }
		if (!strcmp(a, "--tokens-may-change")) { lim.same_tokens = 0; continue; }
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(a, "--a")) sa = v;
		else if (!strcmp(a, "--b")) sb = v;
		else if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--workload")) workload = v;
		else if (!strcmp(a, "--bench")) bench = v;
		else if (!strcmp(a, "--figure")) fig = v;
		else if (!strcmp(a, "--crystal")) crystal = v;
		else if (!strcmp(a, "--exactness")) exact = v;
		else if (!strcmp(a, "--switch") && n_extra < 16) extra_sw[n_extra++] = v;
		else if (!strcmp(a, "--needs") && lim.n_needs < 4) lim.needs[lim.n_needs++] = v;
		else if (!strcmp(a, "--rejudge")) rejudge = cli_int(a, v, 1, 1 << 30);
		else if (!strcmp(a, "--reps")) min_blocks = cli_int(a, v, 1, 60);
		else if (!strcmp(a, "--max-blocks")) max_blocks = cli_int(a, v, 1, 60);
		else if (!strcmp(a, "--target")) target = cli_double(a, v, 0, 1);
		else if (!strcmp(a, "--max-load")) lim.max_load_per_core = cli_double(a, v, 0, 1000);
		else if (!strcmp(a, "--max-foreign")) lim.max_foreign_share = cli_double(a, v, 0, 1);
		else if (!strcmp(a, "--max-clock-drift")) lim.max_clock_drift = cli_double(a, v, 0, 1);
		else if (!strcmp(a, "--min-clean")) lim.min_clean_pairs = cli_int(a, v, 1, 60);
		else {
			fprintf(stderr, "proven court ab: unknown option %s\n", a);
			return 2;
		}
	}
	if (rejudge) return court_rejudge(rejudge, argc, argv, fig, crystal, extra_sw, n_extra, &lim);
	if (!sa || !sb || !model) {
		fprintf(stderr, "proven court ab: --a SPEC, --b SPEC and --model are required\n");
		return 2;
	}
	if (max_blocks < min_blocks) max_blocks = min_blocks;
	if (!fig) fig = workload ? "e2e" : "tg";
	const char* ledger = ev_ledger_path();
	if (!ledger) {
		fprintf(stderr, "proven court ab: the court needs receipts (PROVEN_LEDGER is off)\n");
		return 2;
	}
	static struct arm A, B, common;
	if (split(&A, sa) || split(&B, sb) || split(&common, bench)) {
		fprintf(stderr, "proven court ab: a SPEC has more than %d words\n", MAX_TOK - 1);
		return 2;
	}
	const char* sw[48];
	static char swbuf[48][128];
	int nsw = switches(&A, &B, sw, 32, swbuf);
	for (int i = 0; i < n_extra && nsw < 48; i++) sw[nsw++] = extra_sw[i];
	for (int i = 0; i < nsw; i++)
		for (int j = i + 1; j < nsw; j++)
			if (!strcmp(sw[i], sw[j])) sw[j--] = sw[--nsw];
	ev_receipt* rec = cli_receipt_begin("court.ab", argc, argv);
	char err[512];
	ev_store* st = NULL;
	if (ev_store_open(&st, ledger, err, sizeof err)) {
		fprintf(stderr, "proven court ab: %s\n", err);
		return 1;
	}
	fprintf(stderr, "proven court ab: switch under test:");
	for (int i = 0; i < nsw; i++) fprintf(stderr, " %s", sw[i]);
	fprintf(stderr, "\n");
	/* the exactness court of each arm, when asked */
	int exact_ab[2] = { -1, -1 };
	int64_t court_ids[2] = { 0, 0 };
	if (exact) {
		static struct arm ce;
		char cs[600];
		snprintf(cs, sizeof cs, "--cases %s --max-tokens 24", exact);
		split(&ce, cs);
		for (int k = 0; k < 2; k++) {
			int64_t id = run_arm(k ? &B : &A, model, NULL, &ce, ledger, "court");
			exact_ab[k] = id > 0;
			court_ids[k] = id > 0 ? id : -id;
			fprintf(stderr, "proven court ab: exactness court, arm %c: %s (receipt %lld)\n", k ? 'B' : 'A', id > 0 ? "exact" : "FAILED",
			        (long long)court_ids[k]);
		}
	}
	/* warm-up: one run per arm, discarded */
	int64_t warm[2];
	for (int k = 0; k < 2; k++) warm[k] = run_arm(k ? &B : &A, model, workload, &common, ledger, "bench");
	json_t* rs[MAX_RUNS];
	int arm[MAX_RUNS], n = 0, rc = 1;
	json_t* verdict = NULL;
	if (warm[0] < 0 || warm[1] < 0) {
		fprintf(stderr, "proven court ab: the warm-up run of arm %c failed\n", warm[0] < 0 ? 'A' : 'B');
		goto done;
	}
	for (int blk = 0; blk < max_blocks && n + 4 <= MAX_RUNS; blk++) {
		static const int abba[4] = { 0, 1, 1, 0 };
		for (int j = 0; j < 4; j++) {
			int64_t id = run_arm(abba[j] ? &B : &A, model, workload, &common, ledger, "bench");
			if (id < 0 || !(rs[n] = ev_store_get_receipt(st, id))) {
				fprintf(stderr, "proven court ab: a run of arm %c failed\n", abba[j] ? 'B' : 'A');
				goto done;
			}
			arm[n++] = abba[j];
		}
		double hw = ev_court_halfwidth(rs, arm, n, fig);
		fprintf(stderr, "proven court ab: block %d: interval half-width %.2f%%\n", blk + 1, 100 * hw);
		if (blk + 1 >= min_blocks && hw < target) break;
	}
	rc = conclude(st, rec, rs, arm, n, sw, nsw, fig, &lim, exact_ab, exact ? court_ids : NULL, warm, sa, sb, crystal, 0);
	rec = NULL;
done:
	for (int k = 0; k < n; k++) json_decref(rs[k]);
	json_decref(verdict);
	ev_store_close(st);
	return rc;
}
