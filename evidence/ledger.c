/*
 * ledger.c: the crystals (optimisation attempts) and the import of committed receipts.
 *
 * A crystal is a JSON object (evidence.h); docs/ledger/crystals.jsonl holds the project's own,
 * one per line, reviewable in a diff; `proven ledger import` puts them in the store and
 * `proven ledger export` writes the store's back in the same form (sorted by name).
 */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* statuses[] = { "candidate", "active", "dead" };

int ev_crystal_check(const json_t* c, char* err, size_t errlen)
{
	const char* name = json_string_value(json_object_get(c, "name"));
	if (!json_is_object(c) || !name || !name[0]) {
		snprintf(err, errlen, "a crystal needs a name");
		return -1;
	}
	for (const char* p = name; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.')) {
			snprintf(err, errlen, "crystal name \"%s\": use a-z, 0-9, '-', '_', '.'", name);
			return -1;
		}
	const char* st = json_string_value(json_object_get(c, "status"));
	int ok = 0;
	for (int i = 0; st && i < 3; i++) ok |= !strcmp(st, statuses[i]);
	if (!ok) {
		snprintf(err, errlen, "crystal %s: status must be candidate, active or dead", name);
		return -1;
	}
	if (!json_string_value(json_object_get(c, "hypothesis")) || !json_string_value(json_object_get(c, "switch"))) {
		snprintf(err, errlen, "crystal %s needs a hypothesis and a switch", name);
		return -1;
	}
	json_t* l = json_object_get(c, "lessons");
	size_t i;
	json_t* x;
	json_array_foreach(l, i, x)
	{
		const char* s = json_string_value(x);
		if (!s || strncmp(s, "do not repeat: ", 15) || !strstr(s, ", because ")) {
			snprintf(err, errlen, "crystal %s: a lesson reads \"do not repeat: ..., because ...\"", name);
			return -1;
		}
	}
	/* a dead crystal says why it must not be tried again */
	if (!strcmp(st, "dead") && json_array_size(l) == 0) {
		snprintf(err, errlen, "crystal %s is dead without a lesson", name);
		return -1;
	}
	return 0;
}

int ev_crystal_put(ev_store* st, json_t* c, char* err, size_t errlen)
{
	if (!json_object_get(c, "proofs")) json_object_set_new(c, "proofs", json_array());
	if (!json_object_get(c, "lessons")) json_object_set_new(c, "lessons", json_array());
	if (ev_crystal_check(c, err, errlen)) return -1;
	char* text = json_dumps(c, JSON_SORT_KEYS | JSON_COMPACT);
	sqlite3_stmt* s = NULL;
	int rc = -1;
	if (text && sqlite3_prepare_v2(st->db, "INSERT OR REPLACE INTO crystals(name, status, doc) VALUES(?,?,?)", -1, &s, NULL) == SQLITE_OK) {
		sqlite3_bind_text(s, 1, json_string_value(json_object_get(c, "name")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 2, json_string_value(json_object_get(c, "status")), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(s, 3, text, -1, SQLITE_TRANSIENT);
		rc = sqlite3_step(s) == SQLITE_DONE ? 0 : -1;
	}
	if (rc) snprintf(err, errlen, "%s: %s", st->path, sqlite3_errmsg(st->db));
	sqlite3_finalize(s);
	free(text);
	return rc;
}

json_t* ev_crystal_get(ev_store* st, const char* name)
{
	json_t* a = ev_sql_docs(st, "SELECT doc FROM crystals WHERE name = ?", name, 1);
	json_t* c = json_incref(json_array_get(a, 0));
	json_decref(a);
	return c;
}

json_t* ev_crystals(ev_store* st, const char* status)
{
	return ev_sql_docs(st, status ? "SELECT doc FROM crystals WHERE status = ? ORDER BY name" : "SELECT doc FROM crystals ORDER BY name",
	                   status, 0);
}

int ev_crystal_status(ev_store* st, const char* name, const char* status, const char* proof_kind, const char* ref, const char* note,
                      char* err, size_t errlen)
{
	json_t* c = ev_crystal_get(st, name);
	if (!c) {
		snprintf(err, errlen, "no crystal named %s", name);
		return -1;
	}
	if (status) json_object_set_new(c, "status", json_string(status));
	if (proof_kind && ref) {
		json_t* p = json_pack("{s:s,s:s}", "kind", proof_kind, "ref", ref);
		if (note) json_object_set_new(p, "note", json_string(note));
		json_array_append_new(json_object_get(c, "proofs"), p);
	}
	int rc = ev_crystal_put(st, c, err, errlen);
	json_decref(c);
	return rc;
}

int ev_crystal_lesson(ev_store* st, const char* name, const char* lesson, char* err, size_t errlen)
{
	json_t* c = ev_crystal_get(st, name);
	if (!c) {
		snprintf(err, errlen, "no crystal named %s", name);
		return -1;
	}
	json_array_append_new(json_object_get(c, "lessons"), json_string(lesson));
	int rc = ev_crystal_put(st, c, err, errlen);
	json_decref(c);
	return rc;
}

int ev_ledger_import(ev_store* st, const char* path, int* n, char* err, size_t errlen)
{
	FILE* f = fopen(path, "r");
	*n = 0;
	if (!f) {
		snprintf(err, errlen, "cannot open %s", path);
		return -1;
	}
	char* line = NULL;
	size_t cap = 0;
	int lineno = 0, rc = 0;
	ev_sql(st, "BEGIN IMMEDIATE", err, errlen);
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		if (line[0] == '\n' || line[0] == '#') continue;
		json_error_t je;
		json_t* c = json_loads(line, 0, &je);
		char e2[400];
		if (!c || ev_crystal_put(st, c, e2, sizeof e2)) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, c ? e2 : je.text);
			json_decref(c);
			rc = -1;
			break;
		}
		json_decref(c);
		(*n)++;
	}
	free(line);
	fclose(f);
	ev_sql(st, rc ? "ROLLBACK" : "COMMIT", (char[64]){ 0 }, 64);
	return rc;
}

int ev_ledger_export(ev_store* st, FILE* f)
{
	json_t* a = ev_crystals(st, NULL);
	size_t i;
	json_t* c;
	json_array_foreach(a, i, c)
	{
		/* one crystal per line, keys sorted: a change to one crystal is a one-line diff */
		char* s = json_dumps(c, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII);
		fprintf(f, "%s\n", s);
		free(s);
	}
	json_decref(a);
	return ferror(f) ? -1 : 0;
}

/* ==== Imported receipts ======================================================================== */

/* A docs/results record (bench's JSON line) as a receipt marked imported. */
static const char* str_or(const json_t* o, const char* k, const char* d)
{
	const char* s = json_string_value(json_object_get(o, k));
	return s && s[0] ? s : d;
}

/* A speculation record of docs/results (`court spec` or `bench spec` JSON summary) as an imported
 * receipt: the court's verdict and counts, or the per-class speedups with their scopes. */
static json_t* imported_spec(json_t* rec, const char* path, const char* file_sha, int line)
{
	int court = json_object_get(rec, "court") != NULL;
	char cmd[600];
	snprintf(cmd, sizeof cmd, "imported from %s line %d (%s spec)", path, line, court ? "court" : "bench");
	char commit[64];
	snprintf(commit, sizeof commit, "%s", str_or(rec, "commit", "unknown"));
	int dirty = strstr(commit, "-dirty") != NULL;
	if (dirty) *strstr(commit, "-dirty") = 0;
	json_t* r = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b,s:{s:s,s:s,s:i}}", "schema", EV_RECEIPT_SCHEMA, "created", "", "kind",
	                      court ? "court.spec" : "bench.spec", "command", cmd, "status",
	                      court ? (!strcmp(str_or(rec, "verdict", "?"), "exact") ? "ok" : str_or(rec, "verdict", "?")) : "ok", "imported", 1,
	                      "source", "file", path, "sha256", file_sha, "line", line);
	json_object_set_new(r, "runtime",
	                    json_pack("{s:s,s:b,s:s,s:s,s:s,s:{},s:s,s:s}", "commit", commit, "dirty", dirty, "compiler", str_or(rec, "compiler", "unknown"),
	                              "cflags", "unknown", "backend", str_or(rec, "backend", court ? "unknown" : "cpu"), "knobs", "cpu_model",
	                              "unknown", "isa", str_or(rec, "isa", "unknown")));
	json_object_set_new(r, "model", json_pack("{s:s}", "path", str_or(rec, "model", "unknown")));
	json_t* h0 = json_pack("{s:n}", "load1");
	json_object_set_new(r, "host", json_pack("{s:i,s:o,s:o,s:f,s:f,s:f,s:f}", "cpus", 0, "before", h0, "after", json_deep_copy(h0), "wall_s",
	                                         0.0, "self_cpu_s", 0.0, "foreign_cpu_s", 0.0, "foreign_share", 0.0));
	int cases = (int)json_integer_value(json_object_get(rec, "cases"));
	json_object_set_new(r, "workload", json_pack("{s:s,s:s,s:i,s:I}", "class", str_or(rec, "class", "all"), "prompt_digest", "cases file",
	                                             "n_prompt", cases, "n_gen", json_integer_value(json_object_get(rec, "max_tokens"))));
	json_object_set_new(r, "samples", json_array());
	json_t* figs = json_array();
	json_t* counts = json_object();
	const char* ck[] = { "tokens", "steps", "verify_calls", "drafted", "accepted", "rollbacks", "snapshot_restores", "replayed_rows", "fallbacks", "mismatches" };
	for (int i = 0; i < 10; i++)
		if (json_is_integer(json_object_get(rec, ck[i]))) json_object_set(counts, ck[i], json_object_get(rec, ck[i]));
	if (court) {
		json_array_append_new(figs, json_pack("{s:s,s:s,s:s,s:O,s:f,s:i}", "name", "exact_cases", "scope", "court", "unit", "cases", "value",
		                                      json_object_get(rec, "exact"), "sd", 0.0, "n", cases));
		json_object_set_new(r, "args", json_pack("{s:s}", "draft", str_or(rec, "draft", "none")));
		json_object_set_new(r, "extra", json_pack("{s:s,s:O}", "verdict", str_or(rec, "verdict", "?"), "record", rec));
	} else {
		char name[96];
		const char* cls = str_or(rec, "class", "all");
		struct {
			const char* key;
			const char* suffix;
			const char* scope;
			const char* unit;
		} f[] = { { "speedup_decode_only", "speedup_decode", "decode-only", "ratio spec/plain" },
			  { "speedup_end_to_end", "speedup_e2e", "end-to-end", "ratio spec/plain" },
			  { "spec_decode_tok_s", "spec_decode", "decode-only", "tok/s" },
			  { "plain_decode_tok_s", "plain_decode", "decode-only", "tok/s" } };
		for (int i = 0; i < 4; i++) {
			if (!json_is_number(json_object_get(rec, f[i].key))) continue;
			snprintf(name, sizeof name, "%.40s.%s", cls, f[i].suffix);
			json_array_append_new(figs, json_pack("{s:s,s:s,s:s,s:O,s:f,s:i}", "name", name, "scope", f[i].scope, "unit", f[i].unit, "value",
			                                      json_object_get(rec, f[i].key), "sd", 0.0, "n", cases));
		}
		json_object_set_new(r, "args", json_pack("{s:s}", "draft", str_or(rec, "draft", "none")));
		json_object_set_new(r, "extra", json_pack("{s:O}", "record", rec));
	}
	json_object_set_new(r, "figures", figs);
	json_object_set_new(r, "counts", counts);
	return r;
}

static json_t* imported_receipt(json_t* rec, const char* path, const char* file_sha, int line)
{
	const char* backend = json_string_value(json_object_get(rec, "backend"));
	/* speculation summaries: court spec and bench spec lines */
	if ((json_is_string(json_object_get(rec, "court")) && !strcmp(json_string_value(json_object_get(rec, "court")), "spec")) ||
	    (json_is_string(json_object_get(rec, "bench")) && !strcmp(json_string_value(json_object_get(rec, "bench")), "spec")))
		return imported_spec(rec, path, file_sha, line);
	if (!json_is_number(json_object_get(rec, "tg_tok_s")) && !json_is_number(json_object_get(rec, "d2d_gb_s"))) return NULL;
	if (!json_is_number(json_object_get(rec, "tg_tok_s"))) return NULL; /* a copy-bandwidth line: kept in the run's extra */
	const char* commit = json_string_value(json_object_get(rec, "build_commit"));
	char c12[64];
	snprintf(c12, sizeof c12, "%s", commit ? commit : "unknown");
	int dirty = 0;
	char* d = strstr(c12, "-dirty");
	if (d) *d = 0, dirty = 1;
	json_t* knobs = json_object();
	const char* kn[] = { "pdl", "prefetch" };
	for (int i = 0; i < 2; i++)
		if (json_is_integer(json_object_get(rec, kn[i]))) {
			char k[32];
			snprintf(k, sizeof k, "cuda.%s", kn[i]);
			json_object_set(knobs, k, json_object_get(rec, kn[i]));
		}
	json_t* rk = json_object_get(rec, "knobs");
	if (json_is_object(rk)) json_object_update(knobs, rk);
	const char* gpu = json_string_value(json_object_get(rec, "gpu"));
	json_t* g = gpu ? json_pack("{s:s,s:O,s:O,s:O}", "name", gpu, "driver", json_object_get(rec, "driver_cuda"), "sm_clock_mhz",
	                            json_object_get(rec, "sm_clock_mhz"), "mem_clock_mhz", json_object_get(rec, "mem_clock_mhz"))
	                : json_null();
	char cmd[600];
	const char* name = json_string_value(json_object_get(rec, "name"));
	snprintf(cmd, sizeof cmd, "imported from %s line %d (%s)", path, line, name ? name : "bench");
	json_t* r = json_pack("{s:s,s:s,s:s,s:s,s:s,s:b,s:{s:s,s:s,s:i}}", "schema", EV_RECEIPT_SCHEMA, "created", "", "kind", "bench",
	                      "command", cmd, "status", "ok", "imported", 1, "source", "file", path, "sha256", file_sha, "line", line);
	const char* flags = json_string_value(json_object_get(rec, "flags"));
	json_object_set_new(r, "runtime",
	                    json_pack("{s:s,s:b,s:s,s:s,s:O,s:s,s:o,s:O,s:s,s:s,s:o}", "commit", c12, "dirty", dirty, "compiler",
	                              json_string_value(json_object_get(rec, "compiler")) ? json_string_value(json_object_get(rec, "compiler"))
	                                                                                  : "unknown",
	                              "cflags", flags ? flags : "unknown", "nvcc_flags",
	                              json_object_get(rec, "nvcc_flags") ? json_object_get(rec, "nvcc_flags") : json_null(), "backend",
	                              backend ? backend : "cpu", "knobs", knobs, "threads", json_object_get(rec, "threads"), "cpu_model",
	                              json_string_value(json_object_get(rec, "cpu")) ? json_string_value(json_object_get(rec, "cpu")) : "unknown",
	                              "isa", json_string_value(json_object_get(rec, "isa")) ? json_string_value(json_object_get(rec, "isa")) : "unknown",
	                              "gpu", g));
	json_t* rt = json_object_get(r, "runtime");
	if (json_is_null(json_object_get(rt, "nvcc_flags"))) json_object_del(rt, "nvcc_flags");
	if (json_is_null(json_object_get(rt, "threads"))) json_object_del(rt, "threads");
	json_object_set_new(r, "model",
	                    json_pack("{s:O,s:O,s:O,s:O}", "path", json_object_get(rec, "model"), "arch", json_object_get(rec, "arch"), "dtype",
	                              json_object_get(rec, "weight_dtype"), "n_params", json_object_get(rec, "n_params")));
	json_t* h0 = json_pack("{s:n}", "load1");
	json_object_set_new(r, "host",
	                    json_pack("{s:i,s:o,s:o,s:f,s:f,s:f,s:f}", "cpus", 0, "before", h0, "after", json_deep_copy(h0), "wall_s", 0.0,
	                              "self_cpu_s", 0.0, "foreign_cpu_s", 0.0, "foreign_share", 0.0));
	int pp = (int)json_integer_value(json_object_get(rec, "pp")), tg = (int)json_integer_value(json_object_get(rec, "tg"));
	json_object_set_new(r, "workload",
	                    json_pack("{s:s,s:s,s:i,s:i,s:I,s:I}", "class", "synthetic", "prompt_digest", "random-ids-12345", "n_prompt", pp,
	                              "n_gen", tg, "depth", json_integer_value(json_object_get(rec, "depth")), "reps",
	                              json_integer_value(json_object_get(rec, "reps"))));
	json_object_set_new(r, "samples", json_array());
	json_t* figs = json_array();
	int reps = (int)json_integer_value(json_object_get(rec, "reps"));
	json_array_append_new(figs, json_pack("{s:s,s:s,s:s,s:O,s:O,s:i}", "name", "pp", "scope", "observed", "unit", "tok/s", "value",
	                                      json_object_get(rec, "pp_tok_s"), "sd", json_object_get(rec, "pp_tok_s_sd"), "n", reps));
	json_array_append_new(figs, json_pack("{s:s,s:s,s:s,s:O,s:O,s:i}", "name", "tg", "scope", "decode-only", "unit", "tok/s", "value",
	                                      json_object_get(rec, "tg_tok_s"), "sd", json_object_get(rec, "tg_tok_s_sd"), "n", reps));
	if (json_is_number(json_object_get(rec, "tg_bw_share")))
		json_array_append_new(figs, json_pack("{s:s,s:s,s:s,s:O,s:f,s:i}", "name", "tg_bw_share", "scope", "decode-only", "unit",
		                                      "fraction of d2d", "value", json_object_get(rec, "tg_bw_share"), "sd", 0.0, "n", reps));
	json_object_set_new(r, "figures", figs);
	json_t* counts = json_object();
	if (json_is_number(json_object_get(rec, "graph_launches_per_token")))
		json_object_set(counts, "launches_per_token", json_object_get(rec, "graph_launches_per_token"));
	if (json_is_number(json_object_get(rec, "syncs_per_token"))) json_object_set(counts, "syncs_per_token", json_object_get(rec, "syncs_per_token"));
	if (json_is_number(json_object_get(rec, "kernels_per_token")))
		json_object_set(counts, "kernels_per_token", json_object_get(rec, "kernels_per_token"));
	json_object_set_new(r, "counts", counts);
	json_object_set_new(r, "args", json_object());
	json_object_set_new(r, "extra", json_deep_copy(rec));
	return r;
}

int ev_import_results(ev_store* st, const char* path, char* err, size_t errlen)
{
	char sha[65];
	if (ev_sha256_file(path, sha)) {
		snprintf(err, errlen, "cannot read %s", path);
		return -1;
	}
	/* importing the same file twice adds nothing */
	json_t* seen = ev_sql_docs(st, "SELECT doc FROM receipts WHERE imported = 1 AND doc LIKE '%' || ? || '%' LIMIT 1", sha, 1);
	int dup = json_array_size(seen) > 0;
	json_decref(seen);
	if (dup) return 0;
	FILE* f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "cannot open %s", path);
		return -1;
	}
	/* the file's date is the receipts' date (docs/results/h200-2026-11-30-...) */
	char created[32] = "";
	const char* base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	for (const char* p = base; *p; p++)
		if (p[0] >= '0' && p[0] <= '9' && strlen(p) >= 10 && p[4] == '-' && p[7] == '-') {
			snprintf(created, sizeof created, "%.10sT00:00:00Z", p);
			break;
		}
	if (!created[0]) ev_utc_now(created);
	char* line = NULL;
	size_t cap = 0;
	int lineno = 0, count = 0;
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		json_t* rec = json_loads(line, 0, NULL);
		/* a receipt exported by `receipts export` comes back as it was (its own id is dropped:
		 * ids belong to a store); a bench record becomes an imported receipt */
		int own = rec && !strcmp(json_string_value(json_object_get(rec, "schema")) ? json_string_value(json_object_get(rec, "schema")) : "",
		                         EV_RECEIPT_SCHEMA);
		json_t* r = own ? json_incref(rec) : rec ? imported_receipt(rec, path, sha, lineno) : NULL;
		json_decref(rec);
		if (!r) continue;
		if (own) {
			const char* was = json_string_value(json_object_get(r, "sha256"));
			char hex[65];
			json_object_del(r, "id");
			json_t* c = json_deep_copy(r);
			json_object_del(c, "sha256");
			ev_sha256_json(c, hex);
			json_decref(c);
			if (was && strcmp(was, hex)) {
				snprintf(err, errlen, "%s:%d: the receipt's content does not match its sha256", path, lineno);
				json_decref(r);
				free(line);
				fclose(f);
				return -1;
			}
			json_t* have = ev_sql_docs(st, "SELECT doc FROM receipts WHERE doc_sha256 = ?", hex, 1);
			int dup_r = json_array_size(have) > 0;
			json_decref(have);
			if (dup_r) {
				json_decref(r);
				continue;
			}
		} else json_object_set_new(r, "created", json_string(created));
		if (ev_store_put_receipt(st, r, err, errlen) < 0) {
			json_decref(r);
			free(line);
			fclose(f);
			return -1;
		}
		/* a court's receipt carries its verdict: the verdicts table comes back with it */
		const json_t* vd = json_object_get(json_object_get(r, "extra"), "verdict");
		const char* kind = json_string_value(json_object_get(r, "kind"));
		json_t* v = NULL;
		if (own && kind && !strcmp(kind, "court.ab") && json_is_object(vd)) {
			v = json_deep_copy(vd);
			json_object_set_new(v, "receipt", json_integer(json_integer_value(json_object_get(r, "id"))));
		} else if (own && kind && !strcmp(kind, "court.spec") && json_is_string(vd)) {
			const json_t* fg = NULL;
			size_t k;
			json_t* x;
			json_array_foreach(json_object_get(r, "figures"), k, x)
			if (!strcmp(json_string_value(json_object_get(x, "name")) ? json_string_value(json_object_get(x, "name")) : "", "exact_cases")) fg = x;
			const char* draft = json_string_value(json_object_get(json_object_get(r, "args"), "draft"));
			v = json_pack("{s:s,s:O,s:s,s:I,s:I,s:[{s:I,s:s}],s:I}", "court", "spec", "verdict", vd, "draft", draft ? draft : "none", "cases",
			              fg ? json_integer_value(json_object_get(fg, "n")) : (json_int_t)0, "exact",
			              fg ? (json_int_t)json_number_value(json_object_get(fg, "value")) : (json_int_t)0, "receipts", "id",
			              json_integer_value(json_object_get(r, "id")), "arm", "spec", "receipt", json_integer_value(json_object_get(r, "id")));
		}
		if (v) {
			json_object_set(v, "created", json_object_get(r, "created"));
			if (ev_store_put_verdict(st, v, err, errlen) < 0) {
				json_decref(v);
				json_decref(r);
				free(line);
				fclose(f);
				return -1;
			}
			json_decref(v);
		}
		json_decref(r);
		count++;
	}
	free(line);
	fclose(f);
	return count;
}
