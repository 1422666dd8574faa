/*
 * spec.c: the options every generating command shares (sampling and speculation) and what they
 * open: the draft model and its session, the target session's snapshot slots.
 *
 *   --temp T --top-k K --top-p P --min-p P --seed S       sampling (greedy at --temp 0)
 *   --draft ngram|mtp|cascade:PATH|PATH                    speculate with this drafter
 *   (bench spec also: --draft replay:TRACE.jsonl, an acceptance trace from --trace-out)
 *   --draft-max K  --draft-fixed  --ngram-min N --ngram-max N  --rollback auto|snapshot|replay
 */
#include "cli.h"
#include "proven_spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_gen_option(struct cli_gen* o, const char* cmd, const char* a, const char* v)
{
	if (!strcmp(a, "--temp"))
		o->smp.temperature = (float)cli_double(a, v, 0, 100);
	else if (!strcmp(a, "--top-k"))
		o->smp.top_k = cli_int(a, v, 0, 1 << 24);
	else if (!strcmp(a, "--top-p"))
		o->smp.top_p = (float)cli_double(a, v, 0, 1);
	else if (!strcmp(a, "--min-p"))
		o->smp.min_p = (float)cli_double(a, v, 0, 1);
	else if (!strcmp(a, "--seed"))
		o->smp.seed = (uint64_t)cli_double(a, v, 0, 1.8e19);
	else if (!strcmp(a, "--draft"))
		o->draft = v;
	else if (cli_cache_option(&o->cache_type, a, v))
		return 1;
	else if (!strcmp(a, "--draft-max"))
		o->sp.k_max = cli_int(a, v, 1, 16);
	else if (!strcmp(a, "--ngram-min"))
		o->sp.ngram_min = cli_int(a, v, 1, 64);
	else if (!strcmp(a, "--ngram-max"))
		o->sp.ngram_max = cli_int(a, v, 1, 64);
	else if (!strcmp(a, "--rollback")) {
		if (!strcmp(v, "auto"))
			o->sp.rollback = PV_ROLLBACK_AUTO;
		else if (!strcmp(v, "snapshot"))
			o->sp.rollback = PV_ROLLBACK_SNAPSHOT;
		else if (!strcmp(v, "replay"))
			o->sp.rollback = PV_ROLLBACK_REPLAY;
		else {
			fprintf(stderr, "proven %s: --rollback must be auto, snapshot or replay (got \"%s\")\n", cmd, v);
			exit(2);
		}
	} else
		return 0;
	return 1;
}

int cli_gen_flag(struct cli_gen* o, const char* a)
{
	if (!strcmp(a, "--draft-fixed"))
		o->sp.fixed_k = 1;
	else
		return 0;
	return 1;
}

void cli_gen_defaults(struct cli_gen* o, float temperature, float top_p, int top_k)
{
	memset(o, 0, sizeof *o);
	o->smp.temperature = temperature;
	o->smp.top_p = top_p;
	o->smp.top_k = top_k;
	o->smp.seed = 42;
}

int cli_gen_session_params(struct cli_gen* o, struct pv_session_params* sp)
{
	sp->cache_type = o->cache_type;
	if (!o->draft) return 0;
	if (!strcmp(o->draft, "ngram"))
		o->sp.draft = PV_DRAFT_NGRAM;
	else if (!strcmp(o->draft, "mtp"))
		o->sp.draft = PV_DRAFT_MTP;
	else if (!strncmp(o->draft, "cascade:", 8))
		o->sp.draft = PV_DRAFT_CASCADE;
	else if (!strncmp(o->draft, "replay:", 7))
		o->sp.draft = PV_DRAFT_REPLAY;
	else
		o->sp.draft = PV_DRAFT_MODEL;
	int k = o->sp.k_max ? o->sp.k_max : o->sp.draft == PV_DRAFT_NGRAM || o->sp.draft == PV_DRAFT_REPLAY ? 16 : 8;
	/* per-row snapshots for the verify calls (used on hybrid models unless --rollback replay) */
	if (o->sp.rollback != PV_ROLLBACK_REPLAY) sp->n_snapshots = k + 1;
	if (o->sp.draft == PV_DRAFT_MTP) sp->mtp = 1;
	return 0;
}

int cli_gen_open(struct cli_gen* o, const char* cmd, pv_model* target, const struct pv_session_params* sp, const char* backend)
{
	if (o->sp.draft != PV_DRAFT_MODEL && o->sp.draft != PV_DRAFT_CASCADE) return 0;
	const char* path = o->sp.draft == PV_DRAFT_CASCADE ? o->draft + 8 : o->draft;
	char err[512];
	struct pv_model_params mp = cli_model_params(0, backend);
	if (pv_model_open(&o->draft_model, path, &mp, err, sizeof err)) {
		fprintf(stderr, "proven %s: cannot load the draft model: %s\n", cmd, err);
		return -1;
	}
	/* the same token ids are assumed (a draft that proposes an id the target lacks, or a history
	 * with ids the draft lacks, simply drafts nothing) */
	struct pv_session_params dp = { .n_ctx = sp->n_ctx, .n_threads = sp->n_threads, .pool = sp->pool,
		                         .cache_type = sp->cache_type };
	if (pv_session_new(&o->draft_session, o->draft_model, &dp, err, sizeof err)) {
		fprintf(stderr, "proven %s: draft session: %s\n", cmd, err);
		return -1;
	}
	o->sp.draft_session = o->draft_session;
	return 0;
}

void cli_gen_close(struct cli_gen* o)
{
	pv_session_free(o->draft_session);
	pv_model_close(o->draft_model);
	o->draft_session = NULL;
	o->draft_model = NULL;
}

int cli_gen_write_stats(const char* path, const struct pv_gen_stats* st)
{
	FILE* f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "proven: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f,
	        "{\"tokens\":%lld,\"steps\":%lld,\"verify_calls\":%lld,\"drafted\":%lld,\"accepted\":%lld,\"rollbacks\":%lld,"
	        "\"snapshot_restores\":%lld,\"replayed_rows\":%lld,\"fallback_tokens\":%lld,\"policy_off_steps\":%lld,"
	        "\"prefill_s\":%.6f,\"decode_s\":%.6f,\"accepted_len\":[",
	        (long long)st->tokens, (long long)st->steps, (long long)st->verify_calls, (long long)st->drafted,
	        (long long)st->accepted, (long long)st->rollbacks, (long long)st->snapshot_restores,
	        (long long)st->replayed_rows, (long long)st->fallback_tokens, (long long)st->policy_off_steps, st->prefill_s,
	        st->decode_s);
	for (int i = 0; i < 17; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)st->accepted_len[i]);
	fprintf(f, "]}\n");
	if (ferror(f) | fclose(f)) { /* both: a failed write may leave nothing for fclose to fail on */
		fprintf(stderr, "proven: failed writing %s\n", path);
		return -1;
	}
	return 0;
}
