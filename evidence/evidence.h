/*
 * evidence.h: the evidence system around the engine (issue 13): receipts in a SQLite ledger, the
 * crystals (optimisation attempts: candidate, active or dead, with proofs and lessons), the
 * promotion court (A/B with vetoes), the standard workload and the static report with its
 * release gate. Built as build/libevidence.a and linked by the `proven` program only: the
 * library (libproven.a) never links SQLite and src/ never includes this folder.
 *
 * Every call that can fail returns 0 (or an id > 0) on success and -1 with a one-line message in
 * err (errlen bytes).
 */
#ifndef PV_EVIDENCE_H
#define PV_EVIDENCE_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "receipt.h"

/* The store ----------------------------------------------------------------------------------- */
typedef struct ev_store ev_store;

/* The ledger database: PROVEN_LEDGER, else $XDG_DATA_HOME/proven/ledger.db, else
 * ~/.local/share/proven/ledger.db; NULL when PROVEN_LEDGER is "off" (receipts are not written). */
const char* ev_ledger_path(void);
/* Opens (creating the folder and the schema) in WAL mode with synchronous=FULL: a receipt is
 * either committed whole or absent, whatever kills the writer. */
int ev_store_open(ev_store** out, const char* path, char* err, size_t errlen);
void ev_store_close(ev_store* st);
/* Stores a checked receipt in one transaction; sets doc's "id" and "sha256" (of the document
 * without them); returns the id. */
int64_t ev_store_put_receipt(ev_store* st, json_t* doc, char* err, size_t errlen);
/* The document (with "id" and "sha256"), NULL when absent. */
json_t* ev_store_get_receipt(ev_store* st, int64_t id);
/* Receipts whose kind starts with kind_prefix (NULL: all), newest first, at most limit (0: all);
 * a JSON array of the documents. */
json_t* ev_store_receipts(ev_store* st, const char* kind_prefix, int limit);
/* PRAGMA integrity_check == "ok" */
int ev_store_integrity(ev_store* st, char* err, size_t errlen);
/* A receipt stored without committing, for the kill -9 test: begins a transaction, inserts,
 * and returns without COMMIT (the caller is killed before it ends). */
int64_t ev_store_put_uncommitted(ev_store* st, json_t* doc, char* err, size_t errlen);

/* Verdicts of the courts: {"court","crystal","verdict","ratio","lo","hi","vetoes":[...],
 * "receipts":[ids], ...}; returns the id. */
int64_t ev_store_put_verdict(ev_store* st, json_t* v, char* err, size_t errlen);
json_t* ev_store_verdicts(ev_store* st, const char* crystal, int limit);

/* The crystals ---------------------------------------------------------------------------------
 * A crystal: {"name","hypothesis","switch","status":"candidate|active|dead","scope","figures",
 * "proofs":[{"kind":"receipt|verdict|file","ref","note"}],"lessons":["do not repeat: ..., because ..."]}.
 * docs/ledger/crystals.jsonl is the project's reviewable copy; import puts it in the store. */
int ev_crystal_put(ev_store* st, json_t* c, char* err, size_t errlen);           /* insert or replace */
json_t* ev_crystal_get(ev_store* st, const char* name);
json_t* ev_crystals(ev_store* st, const char* status);                             /* NULL: all */
int ev_crystal_status(ev_store* st, const char* name, const char* status, const char* proof_kind, const char* ref,
                      const char* note, char* err, size_t errlen);
int ev_crystal_lesson(ev_store* st, const char* name, const char* lesson, char* err, size_t errlen);
int ev_crystal_check(const json_t* c, char* err, size_t errlen);
int ev_ledger_import(ev_store* st, const char* path, int* n, char* err, size_t errlen);
int ev_ledger_export(ev_store* st, FILE* f);

/* Imported receipts: a docs/results JSON-lines file (one bench record per line) becomes
 * receipts marked "imported" with the file's sha256 as their source. Returns the count. */
int ev_import_results(ev_store* st, const char* path, char* err, size_t errlen);

/* The promotion court -------------------------------------------------------------------------- */
struct ev_court_limits {
	double max_load_per_core;  /* 1-min load average / cores before or after a run (default 0.75) */
	double max_foreign_share;  /* other processes' CPU time / (wall x cores) (default 0.10)       */
	double max_clock_drift;    /* relative change of a CPU or GPU clock across the court (0.05)   */
	double max_temp_drift_c;   /* GPU temperature change across the court (10)                   */
	int min_clean_pairs;       /* ABBA blocks without a per-run veto (default 3)                  */
	int same_acceptance;       /* the change claims not to change acceptance or rollbacks         */
	int same_tokens;           /* the change claims not to change the generated tokens (1)       */
	const char* needs[4];      /* counts that must be > 0 in every run: the switch is exercised  */
	int n_needs;
};
void ev_court_limits_default(struct ev_court_limits* l);

/* The arms' receipts of one court, in run order (arm[i] 0 = A, 1 = B), the switch under test
 * (identity paths allowed to differ: "runtime.knobs.cpu.x", "runtime.commit", "args.draft"), the
 * figure compared (a figure name: "tg", "e2e"; higher is better), the exactness courts' results
 * (-1: not run, 0: failed, 1: exact). The verdict: {"verdict":"faster|slower|no difference|
 * invalid","ratio":B/A,"lo","hi","pairs","clean_pairs","vetoes":[{"rule","detail"}]}. */
json_t* ev_court_judge(json_t* const* receipts, const int* arm, int n, const char* const* switches, int n_switches,
                       const char* figure, const struct ev_court_limits* lim, int exact_a, int exact_b);
/* The relative half-width of the ratio's 95 % interval from the ABBA blocks so far (inf when
 * fewer than 2 blocks): the court repeats until it is below its target or a cap is hit. */
double ev_court_halfwidth(json_t* const* receipts, const int* arm, int n, const char* figure);

/* The report ---------------------------------------------------------------------------------- */
/* Writes DIR/index.html (SVG plots inline, no script, no external asset) and DIR/receipts/ID.json
 * (each cited receipt) from the store; title NULL: the default. */
int ev_report_write(ev_store* st, const char* dir, const char* title, char* err, size_t errlen);
/* The same with the mechanism table (docs/results/mechanisms.json, docs/evidence.md): per
 * mechanism of the paper's four families, the CPU, CUDA and paper columns, each cell's figures
 * picked from the store by the file's selectors (the newest receipt that matches) and its verdict
 * (TRANSFERS, HW-GAP, RUNTIME, N/A, or "not measured") from the file's rules. The file is checked
 * first and copied to DIR/mechanisms.json, which the gate reads. mechanisms NULL: no table. */
int ev_report_write_with(ev_store* st, const char* dir, const char* title, const char* mechanisms, char* err, size_t errlen);
/* 0 when spec is a well-formed mechanism table, else -1 with the first problem in err. */
int ev_mech_check(const json_t* spec, char* err, size_t errlen);
/* The release gate without the browser: every figure has a scope and a receipt link that
 * resolves, every cited receipt's sha256 matches, every img/svg has alt text, every link resolves,
 * nothing external, the page's own digest matches; the mechanism table's cells show the figures
 * their selectors name, their ratios are those figures' and their verdicts follow the rules of
 * DIR/mechanisms.json. Problems are printed to f; returns their count. */
int ev_report_check_static(const char* dir, FILE* f);
/* The layout from one screenshot (an 8-bit RGB(A) PNG): nothing drawn in the rightmost
 * margin_px columns, not blank; problems printed to f, their count. */
int ev_report_check_shot(const char* png, const char* what, int margin_px, FILE* f);

/* The workload ---------------------------------------------------------------------------------- */
/* A prompt's canonical digest: sha256 of {"messages":..,"tools":..} with sorted keys. */
void ev_prompt_digest(const json_t* prompt, char hex[65]);

#endif
