/* cli.h: what the commands of the proven tool share: the helpers in args.c and the commands'
 * entry points (main.c dispatches to them). */
#ifndef PV_CLI_H
#define PV_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "proven.h"

/* In a command's option loop over (argc, argv): option argv[i] has no value after it -> the
 * command returns 2 with a message. */
#define NEED_VALUE(i)                                                              \
	do {                                                                       \
		if ((i) + 1 >= argc) {                                             \
			fprintf(stderr, "proven: option %s needs a value\n", argv[i]); \
			return 2;                                                  \
		}                                                                  \
	} while (0)

/* Parses "1,2,3" into a malloc'd array; returns count, or -1 with a message on stderr. */
int cli_parse_ids(const char* s, int32_t** out);
/* Integer option value with range check; exits the CLI with a message on error. */
int cli_int(const char* opt, const char* v, int lo, int hi);
double cli_double(const char* opt, const char* v, double lo, double hi);
/* --cache-type T, or llama.cpp's -ctk T / -ctv T (--cache-type-k/-v): the session's KV cache
 * type into *cache_type (enum pv_cache_type). 1 when a was one of them, else 0; exits 2 on an
 * unknown type, or when -ctk and -ctv name different types (proven keeps K and V in one type). */
int cli_cache_option(int* cache_type, const char* a, const char* v);
/* Monotonic clock, seconds. */
double cli_now(void);
/* --backend of command cmd: 0 for NULL (not given), "cpu" or "cuda"; otherwise -1 with
 * `proven CMD: --backend must be cpu or cuda (got "NAME")` on stderr (the command exits 2). */
int cli_check_backend(const char* cmd, const char* name);
/* 1 when writing to stdout has failed (it flushes first); the first time, "proven CMD: cannot
 * write to standard output: REASON" on stderr. A command that streams stops on it. */
int cli_stdout_failed(const char* cmd);
/* After command cmd returned rc: flushes and closes stdout; a failure (a full device, a closed
 * pipe) makes a 0 exit status 1, with the message above. */
int cli_stdout_check(const char* cmd, int rc);
/* Opens an input file named by an option of command cmd: a regular file or a pipe (a FIFO,
 * /dev/stdin on a pipe). A directory, a device (/dev/zero would never end) or a socket is refused;
 * NULL with "proven CMD: ..." on stderr. */
FILE* cli_open_input(const char* cmd, const char* path);
/* The whole input file (as cli_open_input) of at most max bytes, NUL-terminated; NULL with a
 * message on stderr. */
char* cli_read_input(const char* cmd, const char* path, size_t max, size_t* len);
/* Opens the model at path (a directory or a GGUF file); NULL with a message on stderr, also when
 * path is NULL (--model not given). */
pv_model* cli_open_model(const char* path, int verbose, const char* backend);

/* log.c: library messages to stderr ("proven: ..."), and the model parameters a command uses
 * (verbose: the load is reported, with a progress bar on a terminal, and prefaulted) */
void cli_log_init(void);
struct pv_model_params cli_model_params(int verbose, const char* backend);

/* spec.c: sampling and speculation options shared by generate, run, chat and bench */
#include "proven_spec.h"
struct cli_gen {
	struct pv_sampling smp;
	struct pv_spec_params sp;
	const char* draft;          /* --draft value, or NULL                         */
	pv_model* draft_model;      /* opened by cli_gen_open for a draft model       */
	pv_session* draft_session;
	int cache_type;             /* --cache-type (-ctk/-ctv): enum pv_cache_type    */
};
void cli_gen_defaults(struct cli_gen* o, float temperature, float top_p, int top_k);
/* 1 when (a, v) was one of the options (exits 2 on a bad value), else 0 */
int cli_gen_option(struct cli_gen* o, const char* cmd, const char* a, const char* v);
int cli_gen_flag(struct cli_gen* o, const char* a);
/* the target session's parameters speculation needs (snapshot slots, the MTP cache) */
int cli_gen_session_params(struct cli_gen* o, struct pv_session_params* sp);
/* opens the draft model and its session when --draft names one; -1 with a message */
int cli_gen_open(struct cli_gen* o, const char* cmd, pv_model* target, const struct pv_session_params* sp, const char* backend);
void cli_gen_close(struct cli_gen* o);
int cli_gen_write_stats(const char* path, const struct pv_gen_stats* st);

/* usage.c: `proven CMD --help` (0 when cmd has a usage text), the -h/--help test, --version */
int cli_usage(const char* cmd, FILE* f);
int cli_is_help(const char* arg);
void cli_version(FILE* f);

int cmd_info(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);
int cmd_template(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_court(int argc, char** argv);
int cmd_serve(int argc, char** argv);  /* serve.c: runs proven-server */
int cmd_client(int argc, char** argv); /* client.c: the shared-memory protocol's client */
int cmd_bench_spec(int argc, char** argv); /* bench_spec.c: `proven bench spec` */
int cmd_bench_parallel(int argc, char** argv); /* bench_parallel.c: `proven bench --parallel N` */

/* The evidence commands (receipts.c, court_ab.c, workload.c, report.c) */
int cmd_receipts(int argc, char** argv);
int cmd_ledger(int argc, char** argv);
int cmd_court_ab(int argc, char** argv);
int cmd_workload(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_bench_workload(int argc, char** argv); /* `proven bench --workload W` */

/* Receipts of the measuring commands (hooks.c; evidence/receipt.h). --ledger PATH and --knobs
 * LIST are taken by main.c for every command: PROVEN_LEDGER, and cli_knobs (the model's
 * pv_model_params.knobs, set by cli_model_params). */
extern const char* cli_knobs;
typedef struct ev_receipt ev_receipt;
ev_receipt* cli_receipt_begin(const char* kind, int argc, char** argv);
/* host state after, stored; the receipt id (0: receipts off, -1: not written) */
int64_t cli_receipt_end(ev_receipt* r, const char* status);
struct pv_session_stats;
struct pv_gen_stats;
/* court spec and bench spec: generation counters; figures and extra are added by the caller
 * through ev_receipt_* where it has more */
void cli_receipt_gen(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* cls,
                     const char* cases_path, int n_cases, int max_tokens, const struct pv_gen_stats* st);
/* court spec: the receipt and its verdict ("exact", "MISMATCH", "error") in the verdicts table */
void cli_receipt_court(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* cls,
                       const char* cases_path, int cases, int exact, int max_tokens, const char* draft, const struct pv_gen_stats* st,
                       const char* verdict);
void cli_receipt_perplexity(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, const char* file,
                            int ctx, int chunks, double ppl, double ppl_err, double seconds, long scored);
/* bench: samples in ns per rep; st0/st1 the session counters around the last rep's decode */
void cli_receipt_bench(ev_receipt* r, pv_model* m, const char* path, const char* backend, int threads, int pp, int tg, int depth,
                       int reps, const double* pp_ns, const double* tg_ns, const struct pv_session_stats* st0,
                       const struct pv_session_stats* st1);

#endif
