/*
 * receipts.c: `proven receipts list|show|export|schema|add|import` and
 * `proven ledger list|show|add|promote|kill|lesson|import|export` over the ledger database
 * (evidence/: PROVEN_LEDGER or --ledger PATH, else $XDG_DATA_HOME/proven/ledger.db).
 */
#include "cli.h"
#include "evidence/evidence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* `proven receipts run --kind K [--model M] [--backend B] [--figures FILE] -- CMD ARGS...`: the hook
 * for a benchmark that is not a proven command (the server benchmark, a script): CMD runs between
 * the two host readings, with PROVEN_FIGURES naming the file it writes its results to, a JSON
 * object with any of "figures" ([{name, scope, unit, value, sd, n}]), "samples", "counts",
 * "workload" and "extra"; the runtime identity is this build's (with the model's knobs when
 * --model is given), the model's identity from --model. The receipt's status is "ok" when CMD
 * exits 0 and its figures check. */
static int receipts_run(int argc, char** argv)
{
	const char *kind = NULL, *model = NULL, *backend = "cpu", *figs = NULL;
	int i = 2;
	for (; i < argc && strcmp(argv[i], "--"); i++) {
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(argv[i - 1], "--kind")) kind = v;
		else if (!strcmp(argv[i - 1], "--model")) model = v;
		else if (!strcmp(argv[i - 1], "--backend")) backend = v;
		else if (!strcmp(argv[i - 1], "--figures")) figs = v;
		else {
			fprintf(stderr, "proven receipts run: unknown option %s\n", argv[i - 1]);
			return 2;
		}
	}
	if (!kind || i + 1 >= argc) {
		fprintf(stderr, "usage: proven receipts run --kind K [--model M] [--backend cpu|cuda] [--figures FILE] -- CMD ARGS...\n");
		return 2;
	}
	if (cli_check_backend("receipts run", backend)) return 2;
	char tmp[] = "/tmp/proven-figures-XXXXXX";
	if (!figs) {
		int fd = mkstemp(tmp);
		if (fd < 0) {
			perror("proven receipts run");
			return 1;
		}
		close(fd);
		figs = tmp;
	}
	pv_model* m = model ? cli_open_model(model, 0, backend) : NULL;
	if (model && !m) return 1;
	ev_receipt* rec = cli_receipt_begin(kind, argc, argv);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("PROVEN_FIGURES", figs, 1);
		execvp(argv[i + 1], argv + i + 1);
		fprintf(stderr, "proven receipts run: cannot run %s\n", argv[i + 1]);
		_exit(127);
	}
	int status = 0;
	if (pid < 0 || waitpid(pid, &status, 0) < 0) status = -1;
	int ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	json_error_t je;
	json_t* res = json_load_file(figs, 0, &je);
	if (figs == tmp) unlink(tmp);
	int rc = ok ? 0 : 1;
	if (!ok) fprintf(stderr, "proven receipts run: %s exited %d\n", argv[i + 1], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	if (rec) {
		ev_receipt_runtime(rec, m, backend, 0);
		if (m) ev_receipt_model(rec, m, model);
		json_t* doc = ev_receipt_doc(rec);
		const char* keys[] = { "figures", "samples", "counts", "workload", "extra" };
		for (int k = 0; k < 5; k++) {
			json_t* v = json_object_get(res, keys[k]);
			if (!v) continue;
			if (json_is_array(v)) json_array_extend(json_object_get(doc, keys[k]), v);
			else if (json_is_object(v)) json_object_update(json_object_get(doc, keys[k]), v);
		}
		if (!res) fprintf(stderr, "proven receipts run: no results in %s (%s)\n", figs, je.text);
		if (cli_receipt_end(rec, ok && res ? "ok" : ok ? "no results" : "failed") < 0) rc = 1;
	}
	json_decref(res);
	if (m) pv_model_close(m);
	return rc;
}

static ev_store* open_store(const char* cmd)
{
	char err[512];
	ev_store* st = NULL;
	if (ev_store_open(&st, ev_ledger_path(), err, sizeof err)) {
		fprintf(stderr, "proven %s: %s\n", cmd, err);
		return NULL;
	}
	return st;
}

static void list_line(const json_t* r)
{
	const json_t* rt = json_object_get(r, "runtime");
	const json_t* m = json_object_get(r, "model");
	const json_t* w = json_object_get(r, "workload");
	printf("%6lld  %-20s  %-14s  %s%s  %-5s  %-12s  %-10s", (long long)json_integer_value(json_object_get(r, "id")),
	       json_string_value(json_object_get(r, "created")), json_string_value(json_object_get(r, "kind")),
	       json_string_value(json_object_get(rt, "commit")), json_is_true(json_object_get(rt, "dirty")) ? "+" : " ",
	       json_string_value(json_object_get(rt, "backend")),
	       json_string_value(json_object_get(m, "arch")) ? json_string_value(json_object_get(m, "arch")) : "-",
	       json_string_value(json_object_get(w, "class")));
	size_t i;
	json_t* f;
	json_array_foreach(json_object_get(r, "figures"), i, f)
	{
		if (i >= 3) break;
		printf("  %s=%.4g %s [%s]", json_string_value(json_object_get(f, "name")), json_number_value(json_object_get(f, "value")),
		       json_string_value(json_object_get(f, "unit")), json_string_value(json_object_get(f, "scope")));
	}
	printf("%s\n", json_is_true(json_object_get(r, "imported")) ? "  (imported)" : "");
}

int cmd_receipts(int argc, char** argv)
{
	const char* sub = argc > 1 ? argv[1] : "list";
	if (cli_is_help(sub) || (argc > 2 && cli_is_help(argv[2]))) return cli_usage("receipts", stdout);
	if (!strcmp(sub, "schema")) {
		ev_receipt_schema_md(stdout);
		return 0;
	}
	ev_store* st = open_store("receipts");
	if (!st) return 1;
	int rc = 0;
	char err[512];
	if (!strcmp(sub, "list") || !strcmp(sub, "export")) {
		const char* kind = NULL;
		int limit = !strcmp(sub, "list") ? 50 : 0;
		for (int i = 2; i < argc; i++) {
			if (!strcmp(argv[i], "--kind") && i + 1 < argc) kind = argv[++i];
			else if (!strcmp(argv[i], "--limit") && i + 1 < argc) limit = cli_int("--limit", argv[++i], 0, 1 << 30);
			else {
				fprintf(stderr, "proven receipts %s: unknown option %s\n", sub, argv[i]);
				ev_store_close(st);
				return 2;
			}
		}
		json_t* a = ev_store_receipts(st, kind, limit);
		size_t i;
		json_t* r;
		if (!strcmp(sub, "list")) {
			printf("%6s  %-20s  %-14s  %-13s  %-5s  %-12s  %-10s  figures\n", "id", "created", "kind", "commit", "bknd", "model", "workload");
			json_array_foreach(a, i, r) list_line(r);
		} else {
			/* oldest first, one document per line: the stable schema of docs/receipts.md */
			for (size_t k = json_array_size(a); k-- > 0;) {
				char* s = json_dumps(json_array_get(a, k), JSON_SORT_KEYS | JSON_COMPACT);
				printf("%s\n", s);
				free(s);
			}
		}
		json_decref(a);
	} else if (!strcmp(sub, "show")) {
		if (argc < 3) {
			fprintf(stderr, "usage: proven receipts show ID\n");
			rc = 2;
		} else {
			char* end = NULL;
			long long id = strtoll(argv[2], &end, 10);
			json_t* r = id > 0 && end && !*end ? ev_store_get_receipt(st, id) : NULL;
			if (!(id > 0 && end && !*end)) {
				fprintf(stderr, "proven receipts show: the id must be a positive integer (got \"%s\")\n", argv[2]);
				rc = 2;
			} else if (!r) {
				fprintf(stderr, "proven receipts: no receipt %s\n", argv[2]);
				rc = 1;
			} else {
				char* s = json_dumps(r, JSON_SORT_KEYS | JSON_INDENT(2));
				printf("%s\n", s);
				free(s);
				json_decref(r);
			}
		}
	} else if (!strcmp(sub, "add")) {
		/* a receipt written elsewhere (a server benchmark script): checked, then stored */
		if (argc < 3) {
			fprintf(stderr, "usage: proven receipts add FILE.json   (one receipt document, docs/receipts.md)\n");
			rc = 2;
		} else {
			json_error_t je;
			json_t* r = json_load_file(argv[2], 0, &je);
			int64_t id = r ? ev_store_put_receipt(st, r, err, sizeof err) : -1;
			if (id < 0) {
				fprintf(stderr, "proven receipts add: %s\n", r ? err : je.text);
				rc = 1;
			} else printf("%lld\n", (long long)id);
			json_decref(r);
		}
	} else if (!strcmp(sub, "run")) {
		ev_store_close(st);
		return receipts_run(argc, argv);
	} else if (!strcmp(sub, "import")) {
		/* docs/results JSON lines: receipts marked imported (the GPU rows) */
		for (int i = 2; i < argc; i++) {
			int n = ev_import_results(st, argv[i], err, sizeof err);
			if (n < 0) {
				fprintf(stderr, "proven receipts import: %s\n", err);
				rc = 1;
				break;
			}
			printf("%s: %d receipts imported\n", argv[i], n);
		}
	} else {
		fprintf(stderr, "proven receipts: unknown subcommand %s (list, show, export, schema, add, import, run)\n", sub);
		rc = 2;
	}
	ev_store_close(st);
	return rc;
}

static void crystal_print(const json_t* c, int full)
{
	printf("%-9s  %-28s  %s\n", json_string_value(json_object_get(c, "status")), json_string_value(json_object_get(c, "name")),
	       json_string_value(json_object_get(c, "switch")));
	if (!full) return;
	printf("  hypothesis: %s\n", json_string_value(json_object_get(c, "hypothesis")));
	const char* figs = json_string_value(json_object_get(c, "figures"));
	if (figs) printf("  figures:    %s\n", figs);
	size_t i;
	json_t* x;
	json_array_foreach(json_object_get(c, "proofs"), i, x)
	{
		printf("  proof:      %s %s%s%s\n", json_string_value(json_object_get(x, "kind")), json_string_value(json_object_get(x, "ref")),
		       json_object_get(x, "note") ? ": " : "", json_object_get(x, "note") ? json_string_value(json_object_get(x, "note")) : "");
	}
	json_array_foreach(json_object_get(c, "lessons"), i, x) printf("  lesson:     %s\n", json_string_value(x));
}

int cmd_ledger(int argc, char** argv)
{
	const char* sub = argc > 1 ? argv[1] : "list";
	if (cli_is_help(sub) || (argc > 2 && cli_is_help(argv[2]))) return cli_usage("ledger", stdout);
	ev_store* st = open_store("ledger");
	if (!st) return 1;
	char err[512];
	int rc = 0;
	const char* name = argc > 2 ? argv[2] : NULL;
	if (!strcmp(sub, "list")) {
		json_t* a = ev_crystals(st, name);
		size_t i;
		json_t* c;
		json_array_foreach(a, i, c) crystal_print(c, 0);
		json_decref(a);
	} else if (!strcmp(sub, "show")) {
		json_t* c = name ? ev_crystal_get(st, name) : NULL;
		if (!c) {
			fprintf(stderr, "proven ledger show: no crystal %s\n", name ? name : "(none named)");
			rc = 1;
		} else {
			crystal_print(c, 1);
			json_t* v = ev_store_verdicts(st, name, 10);
			size_t i;
			json_t* x;
			json_array_foreach(v, i, x)
			printf("  verdict %lld: %s, B/A %.4f [%.4f, %.4f]\n", (long long)json_integer_value(json_object_get(x, "id")),
			       json_string_value(json_object_get(x, "verdict")), json_number_value(json_object_get(x, "ratio")),
			       json_number_value(json_object_get(x, "lo")), json_number_value(json_object_get(x, "hi")));
			json_decref(v);
			json_decref(c);
		}
	} else if (!strcmp(sub, "add")) {
		/* proven ledger add NAME --switch S --hypothesis H [--status candidate] */
		json_t* c = json_pack("{s:s,s:s,s:[],s:[]}", "name", name ? name : "", "status", "candidate", "proofs", "lessons");
		for (int i = 3; i + 1 < argc; i += 2) {
			const char* k = argv[i] + (strncmp(argv[i], "--", 2) ? 0 : 2);
			json_object_set_new(c, k, json_string(argv[i + 1]));
		}
		if (ev_crystal_put(st, c, err, sizeof err)) {
			fprintf(stderr, "proven ledger add: %s\n", err);
			rc = 1;
		}
		json_decref(c);
	} else if (!strcmp(sub, "promote") || !strcmp(sub, "kill") || !strcmp(sub, "proof")) {
		/* proven ledger promote NAME --proof receipt:12|verdict:3 [--note TEXT] ; kill NAME --lesson TEXT */
		const char *proof = NULL, *note = NULL, *lesson = NULL;
		for (int i = 3; i + 1 < argc; i += 2) {
			if (!strcmp(argv[i], "--proof")) proof = argv[i + 1];
			else if (!strcmp(argv[i], "--note")) note = argv[i + 1];
			else if (!strcmp(argv[i], "--lesson")) lesson = argv[i + 1];
		}
		int kill = !strcmp(sub, "kill");
		if (!name || !proof || (kill && !lesson)) {
			fprintf(stderr, "usage: proven ledger promote NAME --proof KIND:REF [--note T] | kill NAME --proof KIND:REF --lesson "
			                "\"do not repeat: ..., because ...\"\n");
			rc = 2;
		} else {
			char kind[32];
			const char* colon = strchr(proof, ':');
			snprintf(kind, sizeof kind, "%.*s", colon ? (int)(colon - proof) : 0, proof);
			if ((kill && ev_crystal_lesson(st, name, lesson, err, sizeof err)) ||
			    ev_crystal_status(st, name, kill ? "dead" : !strcmp(sub, "proof") ? NULL : "active", colon ? kind : "note", colon ? colon + 1 : proof, note, err,
			                      sizeof err)) {
				fprintf(stderr, "proven ledger %s: %s\n", sub, err);
				rc = 1;
			}
		}
	} else if (!strcmp(sub, "lesson")) {
		if (!name || argc < 4 || ev_crystal_lesson(st, name, argv[3], err, sizeof err)) {
			fprintf(stderr, "proven ledger lesson: %s\n", argc < 4 ? "usage: proven ledger lesson NAME \"do not repeat: ..., because ...\"" : err);
			rc = argc < 4 ? 2 : 1;
		}
	} else if (!strcmp(sub, "import")) {
		int n = 0;
		const char* path = name ? name : "docs/ledger/crystals.jsonl";
		if (ev_ledger_import(st, path, &n, err, sizeof err)) {
			fprintf(stderr, "proven ledger import: %s\n", err);
			rc = 1;
		} else printf("%s: %d crystals\n", path, n);
	} else if (!strcmp(sub, "export")) {
		rc = ev_ledger_export(st, stdout) ? 1 : 0;
	} else {
		fprintf(stderr, "proven ledger: unknown subcommand %s (list, show, add, promote, kill, proof, lesson, import, export)\n", sub);
		rc = 2;
	}
	ev_store_close(st);
	return rc;
}
