/*
 * generate.c: `proven generate`: greedy decoding from token ids, optionally dumping the logits.
 */
#include "cli.h"
#include "proven.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes a safetensors file with one F32 tensor "logits" [T, V]. */
static int write_logits(const char* path, const float* data, int T, int V)
{
	FILE* f = fopen(path, "wb");
	if (!f) {
		perror(path);
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

int cmd_generate(int argc, char** argv)
{
	const char *dir = NULL, *ids_arg = NULL, *dump = NULL, *stop_arg = NULL, *backend = NULL;
	int max_tokens = 16, threads = 0, ctx = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model")) { NEED_VALUE(i); dir = argv[++i]; }
		else if (!strcmp(argv[i], "--prompt-ids")) { NEED_VALUE(i); ids_arg = argv[++i]; }
		else if (!strcmp(argv[i], "--max-tokens")) { NEED_VALUE(i); max_tokens = cli_int("--max-tokens", argv[++i], 0, 1 << 24); }
		else if (!strcmp(argv[i], "--dump-logits")) { NEED_VALUE(i); dump = argv[++i]; }
		else if (!strcmp(argv[i], "--threads")) { NEED_VALUE(i); threads = cli_int("--threads", argv[++i], 1, 1024); }
		else if (!strcmp(argv[i], "--ctx")) { NEED_VALUE(i); ctx = cli_int("--ctx", argv[++i], 1, 1 << 24); }
		else if (!strcmp(argv[i], "--stop-ids")) { NEED_VALUE(i); stop_arg = argv[++i]; }
		else if (!strcmp(argv[i], "--backend")) { NEED_VALUE(i); backend = argv[++i]; }
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
	char err[512];
	pv_session* s = NULL;
	int32_t* out = malloc(sizeof(int32_t) * ((size_t)max_tokens + 1));
	size_t rows_cap = dump ? (size_t)np + max_tokens : 0;
	float* lg = rows_cap ? malloc(sizeof(float) * (size_t)V * rows_cap) : NULL;
	if (!out || (rows_cap && !lg)) {
		fprintf(stderr, "proven generate: out of memory for %zu logit rows\n", rows_cap);
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
	/* greedy: each call returns the argmax id of its last row, computed where the logits are
	 * (a GPU copies back one id); host logits only for the dump */
	double t0 = cli_now();
	int32_t next = 0;
	struct pv_eval_out o = { dump ? lg : NULL, 0, &next, np - 1, NULL, 0 };
	if (pv_session_run(s, prompt, np, 0, &o)) {
		fprintf(stderr, "proven generate: %s\n", pv_session_error(s));
		goto done;
	}
	double t1 = cli_now();
	int n_out = 0;
	while (n_out < max_tokens) {
		int tok = next;
		out[n_out++] = tok;
		int stopped = 0;
		for (int i = 0; i < ns; i++) stopped |= stop[i] == tok;
		/* the last token needs evaluating only for its logits row in the dump */
		if (!dump && (stopped || n_out == max_tokens)) break;
		struct pv_eval_out o1 = { dump ? lg + (size_t)(np + n_out - 1) * V : NULL, 0, &next, 0, NULL, 0 };
		if (pv_session_run(s, &out[n_out - 1], 1, 0, &o1)) {
			fprintf(stderr, "proven generate: %s\n", pv_session_error(s));
			goto done;
		}
		if (stopped) break;
	}
	double t2 = cli_now();
	for (int i = 0; i < n_out; i++) printf(i ? ",%d" : "%d", out[i]);
	printf("\n");
	fprintf(stderr, "proven: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s)\n", np,
	        t1 - t0, np / (t1 - t0), n_out, t2 - t1, n_out > 1 ? (n_out - 1) / (t2 - t1) : 0.0);
	rc = 0;
	if (dump && write_logits(dump, lg, np + n_out, V)) rc = 1;
done:
	pv_session_free(s);
	pv_model_close(m);
	free(prompt);
	free(stop);
	free(out);
	free(lg);
	return rc;
}
