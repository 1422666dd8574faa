/* cli.h: shared pieces of the proven command-line tool. */
#ifndef PV_CLI_H
#define PV_CLI_H

#include <stdint.h>

#include "proven.h"

/* Parses "1,2,3" into a malloc'd array; returns count, or -1 with a message on stderr. */
int cli_parse_ids(const char* s, int32_t** out);
/* Integer option value with range check; exits the CLI with a message on error. */
int cli_int(const char* opt, const char* v, int lo, int hi);
double cli_double(const char* opt, const char* v, double lo, double hi);
double cli_now(void);

/* log.c: library messages to stderr ("proven: ..."), and the model parameters a command uses
 * (verbose: the load is reported, with a progress bar on a terminal, and prefaulted) */
void cli_log_init(void);
struct pv_model_params cli_model_params(int verbose, const char* backend);

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

#endif
