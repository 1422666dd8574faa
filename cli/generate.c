/*
 * generate.c: `proven generate`: greedy decoding from token ids, optionally dumping the logits.
 */
#include "cli.h"
#include "proven.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes a safetensors file with one F32 tensor "logits" [T, V]. */
static int write_logits(const char* path, const float* data, int T, int V)
{
	FILE* f = fopen(path, "wb");
	if (!f) {
		fprintf(stderr, "proven generate: cannot write %s: %s\n", path, strerror(errno));
		return -1;
	}
	char hdr[256];
	unsigned long long bytes = (unsigned long long)T * V * 4;
	int n = snprintf(hdr, sizeof(hdr), "{\"logits\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[0,%llu]}}",
	                 T, V, bytes);
	while (n % 8) hdr[n++] = ' '; /* the data section starts 8-byte aligned */
	unsigned char len[8];
	for (int i = 0; i < 8; i++) len[i] = (unsigned char)((unsigned long long)n >> (8 * i));
	int ok = fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
	         fwrite(data, 4, (size_t)T * V, f) == (size_t)T * V;
	if (fclose(f) || !ok) {
		fprintf(stderr, "proven: failed writing %s\n", path);
		return -1;
	}
	return 0;
}

/* The teacher-forced logits of prompt + generated ids, with the call pattern plain greedy
 * decoding has (the prompt in one call, then one row per token), into lg [np + n, V]. */
static int dump_logits(pv_model* m, const struct pv_session_params* sp, const int32_t* prompt, int np, const int32_t* out,
                       int n, float* lg, int V)
{
	pv_session* s = NULL;
	char err[512];
	if (pv_session_new(&s, m, sp, err, sizeof err)) {
		fprintf(stderr, "proven generate: %s\n", err);
		return -1;
	}
	int rc = pv_session_eval(s, prompt, np, lg, PV_LOGITS_ALL);
	for (int i = 0; i < n && !rc; i++) rc = pv_session_eval(s, &out[i], 1, lg + (size_t)(np + i) * V, PV_LOGITS_LAST);
	if (rc) fprintf(stderr, "proven generate: %s\n", pv_session_error(s));
	pv_session_free(s);
	return rc ? -1 : 0;
}

int cmd_generate(int argc, char** argv)
{
	const char *dir = NULL, *ids_arg = NULL, *dump = NULL, *stop_arg = NULL, *backend = NULL, *stats_path = NULL;
	int max_tokens = 16, threads = 0, ctx = 0;
	struct cli_gen go;
	cli_gen_defaults(&go, 0.0f, 1.0f, 0);
	for (int i = 1; i < argc; i++) {
		if (cli_gen_flag(&go, argv[i])) continue;
		if (cli_is_help(argv[i])) return cli_usage("generate", stdout);
		if (!strcmp(argv[i], "--model")) { NEED_VALUE(i); dir = argv[++i]; }
		else if (!strcmp(argv[i], "--prompt-ids")) { NEED_VALUE(i); ids_arg = argv[++i]; }
		else if (!strcmp(argv[i], "--max-tokens")) { NEED_VALUE(i); max_tokens = cli_int("--max-tokens", argv[++i], 0, 1 << 24); }
		else if (!strcmp(argv[i], "--dump-logits")) { NEED_VALUE(i); dump = argv[++i]; }
		else if (!strcmp(argv[i], "--spec-stats")) { NEED_VALUE(i); stats_path = argv[++i]; }
		else if (!strcmp(argv[i], "--threads")) { NEED_VALUE(i); threads = cli_int("--threads", argv[++i], 1, 1024); }
		else if (!strcmp(argv[i], "--ctx")) { NEED_VALUE(i); ctx = cli_int("--ctx", argv[++i], 1, 1 << 24); }
		else if (!strcmp(argv[i], "--stop-ids")) { NEED_VALUE(i); stop_arg = argv[++i]; }
		else if (!strcmp(argv[i], "--backend")) { NEED_VALUE(i); backend = argv[++i]; }
		else if (i + 1 < argc && cli_gen_option(&go, "generate", argv[i], argv[i + 1])) i++;
		else { fprintf(stderr, "proven generate: unknown option %s\n", argv[i]); return 2; }
	}
	if (!ids_arg) {
		fprintf(stderr, "proven generate: --prompt-ids is required\n");
		return 2;
	}
	int32_t *prompt = NULL, *stop = NULL;
	int np = cli_parse_ids(ids_arg, &prompt), ns = 0;
	if (np <= 0) {
		if (np == 0) fprintf(stderr, "proven generate: the prompt is empty\n");
		free(prompt);
		return 2;
	}
	if (stop_arg && (ns = cli_parse_ids(stop_arg, &stop)) < 0) {
		free(prompt);
		return 2;
	}
	if (cli_check_backend("generate", backend)) {
		free(prompt);
		free(stop);
		return 2;
	}
	pv_model* m = cli_open_model(dir, 0, backend);
	if (!m) {
		free(prompt);
		free(stop);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	int V = in->vocab, rc = 1;
	if (!ctx) ctx = np + max_tokens + 1 < in->max_context ? np + max_tokens + 1 : in->max_context;
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	sp.cache_type = go.cache_type;
	struct pv_session_params plain = sp;
	cli_gen_session_params(&go, &sp);
	char err[512];
	pv_session* s = NULL;
	pv_generator* gen = NULL;
	int32_t* out = malloc(sizeof(int32_t) * ((size_t)max_tokens + 17));
	float* lg = NULL;
	if (!out) {
		fprintf(stderr, "proven generate: out of memory\n");
		goto done;
	}
	if (pv_session_new(&s, m, &sp, err, sizeof(err))) {
		fprintf(stderr, "proven generate: %s\n", err);
		goto done;
	}
	if (np + max_tokens > pv_session_n_ctx(s) + (dump ? 0 : 1)) {
		fprintf(stderr, "proven generate: prompt %d + %d tokens exceed the context %d\n", np, max_tokens, pv_session_n_ctx(s));
		goto done;
	}
	if (cli_gen_open(&go, "generate", m, &sp, backend)) goto done;
	if (pv_generator_new(&gen, s, &go.smp, &go.sp, err, sizeof err)) {
		fprintf(stderr, "proven generate: %s\n", err);
		goto done;
	}
	/* the generator keeps the last token pending (evaluated at the next step): the ids on stdout
	 * are the same with and without speculation, greedy or seeded */
	double t0 = cli_now();
	int n_out = 0;
	if (max_tokens > 0) {
		if (pv_generator_prompt(gen, prompt, np, &out[0])) {
			fprintf(stderr, "proven generate: %s\n", pv_generator_error(gen));
			goto done;
		}
		n_out = 1;
	}
	double t1 = cli_now();
	for (;;) {
		int stopped = 0;
		for (int j = 0; j < n_out && !stopped; j++)
			for (int i = 0; i < ns; i++)
				if (stop[i] == out[j]) {
					stopped = 1;
					n_out = j + 1;
				}
		if (stopped || n_out >= max_tokens) break;
		int got = 0;
		if (pv_generator_step(gen, out + n_out, max_tokens - n_out, &got)) {
			fprintf(stderr, "proven generate: %s\n", pv_generator_error(gen));
			goto done;
		}
		n_out += got;
	}
	if (n_out > max_tokens) n_out = max_tokens;
	double t2 = cli_now();
	for (int i = 0; i < n_out; i++) printf(i ? ",%d" : "%d", out[i]);
	printf("\n");
	if (cli_stdout_failed("generate")) goto done; /* the ids are the result: nothing else to do */
	struct pv_gen_stats gs;
	pv_generator_stats(gen, &gs);
	fprintf(stderr, "proven: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)", np, t1 - t0,
	        np / (t1 - t0), n_out, t2 - t1, n_out > 1 ? (n_out - 1) / (t2 - t1) : 0.0);
	if (go.sp.draft)
		fprintf(stderr, "; %s drafts %lld, accepted %lld (%.1f%%), %.2f tokens per step", go.draft, (long long)gs.drafted,
		        (long long)gs.accepted, gs.drafted ? 100.0 * gs.accepted / gs.drafted : 0.0,
		        gs.steps ? (double)gs.tokens / gs.steps : 0.0);
	fprintf(stderr, "\n");
	rc = 0;
	if (stats_path && cli_gen_write_stats(stats_path, &gs)) rc = 1;
	if (dump) {
		lg = malloc(sizeof(float) * (size_t)V * ((size_t)np + n_out));
		if (!lg) fprintf(stderr, "proven generate: out of memory for %d logit rows\n", np + n_out);
		/* the dump covers prompt + generated rows, the last generated token included */
		if (!lg || dump_logits(m, &plain, prompt, np, out, n_out, lg, V) || write_logits(dump, lg, np + n_out, V)) rc = 1;
	}
done:
	pv_generator_free(gen);
	pv_session_free(s);
	cli_gen_close(&go);
	pv_model_close(m);
	free(prompt);
	free(stop);
	free(out);
	free(lg);
	return rc;
}
