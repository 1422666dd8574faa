/*
 * receipt.h: a receipt, the record of one measured run (a bench, a court, a perplexity, a server
 * benchmark), as one JSON document (schema "proven.receipt/1", docs/receipts.md). One field table
 * (ev_receipt_fields) describes every field: it makes the JSON check, the SQL columns of the
 * store and the markdown documentation, so the three never disagree.
 *
 * A command builds its receipt while it runs:
 *
 *   ev_receipt* r = ev_receipt_begin("bench", argc, argv);      host state before, clocks
 *   ev_receipt_model(r, m, path);  ev_receipt_runtime(r, m, backend, threads);
 *   ev_receipt_workload(r, "synthetic", digest, pp, tg, depth, seed, reps, warmup);
 *   ev_receipt_samples(r, "tg", "ns", x, n);
 *   ev_receipt_figure(r, "tg", "decode-only", "tok/s", mean, sd, n);
 *   ev_receipt_count(r, "syncs", v);
 *   ev_receipt_end(r, "ok");                                    host state after, stored
 *
 * This lives outside the library (libproven.a links no SQLite): only the `proven` program uses it.
 */
#ifndef PV_EVIDENCE_RECEIPT_H
#define PV_EVIDENCE_RECEIPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "proven.h"

#define EV_RECEIPT_SCHEMA "proven.receipt/1"

/* The scopes a figure may have (a number without one is not a figure). */
#define EV_SCOPES "kernel, decode-only, observed, end-to-end, quality, court"
int ev_scope_ok(const char* scope);

/* One field of the receipt document. */
struct ev_field {
	const char* path;    /* "runtime.commit": dots walk objects                              */
	const char* type;    /* "string", "integer", "number", "boolean", "object", "array", "any" */
	int required;        /* 1: every receipt has it (null is not allowed)                     */
	const char* column;  /* the store's column for it (indexed queries), or NULL             */
	const char* doc;     /* one line                                                          */
};
extern const struct ev_field ev_receipt_fields[];
/* doc's value at a field's dotted path (ev_field.path: only the table's paths, knob names hold
 * dots too), or NULL */
const json_t* ev_field_value(const json_t* doc, const char* path);
extern const int ev_receipt_n_fields;

/* 0 when doc has every required field with its type (and each figure a scope and a unit);
 * otherwise -1 with the first problem in err. */
int ev_receipt_check(const json_t* doc, char* err, size_t errlen);
/* The field table as markdown (docs/receipts.md is this output). */
void ev_receipt_schema_md(FILE* f);

/* Reading the host ------------------------------------------------------------------------- */
struct ev_host {
	double load1, load5, load15;
	double mem_avail_mib;
	double cpu_mhz;          /* mean over the cores (0 when unknown)                          */
	uint64_t busy_ticks;     /* /proc/stat: all CPUs' non-idle time                           */
	double self_cpu_s;       /* this process and its waited-for children                      */
	double wall;             /* monotonic seconds                                             */
	int gpu_temp_c, gpu_sm_mhz, gpu_mem_mhz; /* nvidia-smi, -1 when none                       */
};
void ev_host_read(struct ev_host* h, int with_gpu);
/* The host state as a JSON object, and the foreign CPU time between two readings. */
json_t* ev_host_json(const struct ev_host* h);
double ev_foreign_cpu_s(const struct ev_host* a, const struct ev_host* b);

/* Building a receipt -------------------------------------------------------------------------- */
typedef struct ev_receipt ev_receipt;

/* NULL when receipts are off (PROVEN_LEDGER=off). kind: "bench", "bench.spec", "court.spec", ... */
ev_receipt* ev_receipt_begin(const char* kind, int argc, char** argv);
/* The runtime identity: build, backend, every knob of m (m may be NULL), threads, CPU, GPU. */
void ev_receipt_runtime(ev_receipt* r, const pv_model* m, const char* backend, int threads);
/* The model's identity: sha256 of the weights, architecture, type mix (read from the file). */
void ev_receipt_model(ev_receipt* r, const pv_model* m, const char* path);
void ev_receipt_workload(ev_receipt* r, const char* cls, const char* prompt_digest, int n_prompt, int n_gen, int depth,
                         uint64_t seed, int reps, int warmup);
void ev_receipt_samples(ev_receipt* r, const char* name, const char* unit, const double* x, int n);
void ev_receipt_figure(ev_receipt* r, const char* name, const char* scope, const char* unit, double value, double sd, int n);
void ev_receipt_count(ev_receipt* r, const char* name, double v);
/* Anything else, under "extra" (takes the reference). */
void ev_receipt_extra(ev_receipt* r, const char* key, json_t* v);
json_t* ev_receipt_doc(ev_receipt* r);
/* Host state after, checked, stored (the ledger of ev_ledger_path()). Returns the receipt id
 * (> 0), 0 when receipts are off, -1 on failure (a message on stderr; the command's own result
 * stands). Frees r. */
int64_t ev_receipt_end(ev_receipt* r, const char* status);
void ev_receipt_free(ev_receipt* r);

/* sha256 of bytes, as 64 hex digits and a NUL. */
void ev_sha256_hex(const void* data, size_t n, char hex[65]);
struct ev_sha256 {
	uint32_t h[8];
	uint64_t len;
	unsigned char buf[64];
	size_t fill;
};
void ev_sha256_init(struct ev_sha256* s);
void ev_sha256_update(struct ev_sha256* s, const void* data, size_t n);
void ev_sha256_final_hex(struct ev_sha256* s, char hex[65]);
/* of a file's bytes; -1 when it cannot be read */
int ev_sha256_file(const char* path, char hex[65]);
/* a JSON value's canonical text (sorted keys, compact) */
void ev_sha256_json(const json_t* v, char hex[65]);

/* The time now as "2026-12-02T00:40:00Z". */
void ev_utc_now(char buf[32]);

#endif
