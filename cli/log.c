/* log.c: where the library's messages and load progress go in the CLI: stderr, one line each. */
#include "cli.h"
#include "proven.h"

#include <stdio.h>
#include <unistd.h>

static void print_line(void* user, int level, const char* line)
{
	(void)user;
	fprintf(stderr, "proven: %s%s\n", level == PV_LOG_WARN ? "warning: " : level == PV_LOG_ERROR ? "error: " : "", line);
}

void cli_log_init(void) { pv_set_log(print_line, NULL, PV_LOG_INFO); }

/* A bar on a terminal, nothing otherwise (a log file wants no carriage returns). */
static void progress_bar(void* user, double f)
{
	int* last = user;
	int pct = (int)(f * 100.0 + 0.5);
	if (pct == *last) return;
	*last = pct;
	fprintf(stderr, "\rproven: loading [%-40.*s] %3d%%", pct * 40 / 100, "########################################", pct);
	if (pct >= 100) fputc('\n', stderr);
}

static int bar_last = -1;

const char* cli_knobs;

struct pv_model_params cli_model_params(int verbose, const char* backend)
{
	struct pv_model_params mp = { 0 };
	mp.verbose = verbose;
	mp.prefault = verbose; /* a command that reports its load also pays the page faults up front */
	mp.backend = backend;
	mp.knobs = cli_knobs;
	if (verbose && isatty(STDERR_FILENO)) {
		bar_last = -1;
		mp.progress = progress_bar;
		mp.progress_user = &bar_last;
	}
	return mp;
}
