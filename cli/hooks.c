/*
 * hooks.c: the receipts of the measuring commands (bench, bench spec, court spec, perplexity):
 * what each command hands over, put into the receipt (evidence/receipt.h) with a scope per
 * figure. A command calls cli_receipt_begin first (the host before) and one call here at the end.
 */
#include "cli.h"
#include "evidence/evidence.h"
#include "proven_dev.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A command that fails before its end leaves its receipt unwritten: freed at exit. */
static ev_receipt* open_receipt;
static void free_open_receipt(void)
{
	ev_receipt_free(open_receipt);
	open_receipt = NULL;
}

ev_receipt* cli_receipt_begin(const char* kind, int argc, char** argv)
{
	ev_receipt* r = ev_receipt_begin(kind, argc, argv);
	if (r && cli_knobs) json_object_set_new(json_object_get(ev_receipt_doc(r), "args"), "knobs", json_string(cli_knobs));
	if (r && !open_receipt) atexit(free_open_receipt);
	open_receipt = r;
	return r;
}

int64_t cli_receipt_end(ev_receipt* r, const char* status)
{
	if (r == open_receipt) open_receipt = NULL;
	return ev_receipt_end(r, status);
}

static void mean_sd(const double* x, int n, double* m, double* sd)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += x[i];
	*m = n ? s / n : 0;
	for (int i = 0; i < n; i++) q += (x[i] - *m) * (x[i] - *m);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

void cli_receipt_bench(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, int pp, int tg, int depth,
                       int reps, const double* pp_ns, const double* tg_ns, const struct pv_session_stats* st0,
                       const struct pv_session_stats* st1)
{
	if (!r) return;
	ev_receipt_runtime(r, m, backend, threads);
	ev_receipt_model(r, m, path);
	/* bench's prompt: random ids from a fixed generator (seed 12345), so the digest names them */
	ev_receipt_workload(r, "synthetic", "lcg-12345", pp, tg, depth, 12345, reps, 1);
	ev_receipt_samples(r, "pp", "ns", pp_ns, reps);
	ev_receipt_samples(r, "tg", "ns", tg_ns, reps);
	double *pts = malloc(sizeof(double) * (size_t)reps), *tts = malloc(sizeof(double) * (size_t)reps);
	if (pts && tts) {
		for (int i = 0; i < reps; i++) {
			pts[i] = 1e9 * pp / pp_ns[i];
			tts[i] = 1e9 * tg / tg_ns[i];
		}
		double pm, ps, tm, ts;
		mean_sd(pts, reps, &pm, &ps);
		mean_sd(tts, reps, &tm, &ts);
		/* pp: the prompt's wall time seen by the host; tg: decode tokens over decode time */
		ev_receipt_figure(r, "pp", "observed", "tok/s", pm, ps, reps);
		ev_receipt_figure(r, "tg", "decode-only", "tok/s", tm, ts, reps);
	}
	free(pts);
	free(tts);
	if (st0 && st1 && tg > 0) {
		ev_receipt_count(r, "tokens", tg);
		ev_receipt_count(r, "launches_per_token", (double)(st1->graph_launches - st0->graph_launches) / tg);
		ev_receipt_count(r, "kernels_per_token", (double)(st1->kernels - st0->kernels) / tg);
		ev_receipt_count(r, "syncs_per_token", (double)(st1->syncs - st0->syncs) / tg);
		ev_receipt_count(r, "crossings_per_token", (double)(st1->memcpys - st0->memcpys) / tg);
		ev_receipt_count(r, "rollbacks", (double)(st1->rollbacks - st0->rollbacks));
		ev_receipt_count(r, "fallbacks", st1->fallback ? 1 : 0);
		if (st1->fallback) ev_receipt_extra(r, "fallback", json_string(st1->fallback));
	}
	cli_receipt_end(r, "ok");
}

void cli_receipt_gen(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* cls,
                     const char* cases_path, int n_cases, int max_tokens, const struct pv_gen_stats* st)
{
	if (!r) return;
	char hex[65] = "none";
	if (cases_path && ev_sha256_file(cases_path, hex)) snprintf(hex, sizeof hex, "unreadable");
	ev_receipt_runtime(r, m, backend, threads);
	ev_receipt_model(r, m, path);
	ev_receipt_workload(r, cls ? cls : "all", hex, n_cases, max_tokens, 0, 0, 1, 0);
	if (st) {
		ev_receipt_count(r, "tokens", (double)st->tokens);
		ev_receipt_count(r, "steps", (double)st->steps);
		ev_receipt_count(r, "verify_calls", (double)st->verify_calls);
		ev_receipt_count(r, "drafted", (double)st->drafted);
		ev_receipt_count(r, "accepted", (double)st->accepted);
		ev_receipt_count(r, "rollbacks", (double)st->rollbacks);
		ev_receipt_count(r, "snapshot_restores", (double)st->snapshot_restores);
		ev_receipt_count(r, "replayed_rows", (double)st->replayed_rows);
		ev_receipt_count(r, "fallbacks", (double)st->fallback_tokens);
		json_t* h = json_array();
		for (int i = 0; i < 17; i++) json_array_append_new(h, json_integer(st->accepted_len[i]));
		ev_receipt_extra(r, "accepted_len", h);
	}
}

void cli_receipt_perplexity(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* file,
                            int ctx, int chunks, double ppl, double ppl_err, double seconds, long scored)
{
	if (!r) return;
	char hex[65] = "none";
	if (ev_sha256_file(file, hex)) snprintf(hex, sizeof hex, "unreadable");
	ev_receipt_runtime(r, m, backend, threads);
	ev_receipt_model(r, m, path);
	ev_receipt_workload(r, "perplexity", hex, ctx, 0, 0, 0, chunks, 0);
	ev_receipt_figure(r, "ppl", "quality", "ppl", ppl, ppl_err, (int)scored);
	ev_receipt_figure(r, "eval", "end-to-end", "tok/s", (double)ctx * chunks / seconds, 0, chunks);
	ev_receipt_count(r, "tokens_scored", (double)scored);
	cli_receipt_end(r, "ok");
}

void cli_receipt_court(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* cls,
                       const char* cases_path, int cases, int exact, int max_tokens, const char* draft, const struct pv_gen_stats* st,
                       const char* verdict)
{
	if (!r) return;
	cli_receipt_gen(r, m, path, backend, threads, cls, cases_path, cases, max_tokens, st);
	json_object_set_new(json_object_get(ev_receipt_doc(r), "args"), "draft", json_string(draft ? draft : "none"));
	ev_receipt_figure(r, "exact_cases", "court", "cases", exact, 0, cases);
	if (st && st->drafted) ev_receipt_figure(r, "acceptance", "court", "accepted/drafted", (double)st->accepted / st->drafted, 0, cases);
	if (st && st->decode_s > 0)
		ev_receipt_figure(r, "spec_decode", "decode-only", "tok/s", (double)(st->tokens - cases) / st->decode_s, 0, cases);
	ev_receipt_extra(r, "verdict", json_string(verdict));
	int64_t id = cli_receipt_end(r, !strcmp(verdict, "exact") ? "ok" : verdict);
	if (id <= 0) return;
	char err[512];
	ev_store* st2 = NULL;
	if (ev_store_open(&st2, ev_ledger_path(), err, sizeof err)) return;
	json_t* v = json_pack("{s:s,s:s,s:s,s:i,s:i,s:[{s:I,s:s}]}", "court", "spec", "verdict", verdict, "draft", draft ? draft : "none",
	                      "cases", cases, "exact", exact, "receipts", "id", (json_int_t)id, "arm", "spec");
	json_object_set_new(v, "receipt", json_integer(id));
	if (ev_store_put_verdict(st2, v, err, sizeof err) < 0) fprintf(stderr, "proven court: %s\n", err);
	json_decref(v);
	ev_store_close(st2);
}
