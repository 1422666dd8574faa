/*
 * perplexity.c: `proven perplexity --model M --file TEXT [--ctx N]`, computed the way
 * llama.cpp's llama-perplexity does it so the numbers compare: the text is tokenized once
 * (no special-token parsing, no BOS for Qwen), cut into chunks of N tokens, each chunk is
 * evaluated from an empty context, and only the second half of each chunk is scored
 * (each scored token sees at least N/2 tokens of context).
 */
#include "cli.h"
#include "proven.h"
#include "proven_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the most text pv_tok_encode takes */
#define MAX_TEXT ((size_t)1 << 30)

int cmd_perplexity(int argc, char** argv)
{
	const char *model = NULL, *file = NULL, *backend = NULL;
	int ctx = 512, threads = 0, max_chunks = 0, cache_type = 0;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("perplexity", stdout);
		if (i + 1 >= argc) { fprintf(stderr, "proven perplexity: unknown option or missing value: %s\n", a); return 2; }
		const char* v = argv[++i];
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v;
		else if (!strcmp(a, "--file") || !strcmp(a, "-f")) file = v;
		else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) ctx = cli_int(a, v, 8, 1 << 20);
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) threads = cli_int(a, v, 1, 1024);
		else if (!strcmp(a, "--chunks")) max_chunks = cli_int(a, v, 1, 1 << 20);
		else if (cli_cache_option(&cache_type, a, v)) continue;
		else if (!strcmp(a, "--backend")) {
			if (cli_check_backend("perplexity", v)) return 2;
			backend = v;
		}
		else { fprintf(stderr, "proven perplexity: unknown option %s\n", a); return 2; }
	}
	if (!model || !file) { fprintf(stderr, "proven perplexity: --model and --file are required\n"); return 2; }
	ev_receipt* rec = cli_receipt_begin("perplexity", argc, argv);
	size_t tlen;
	/* a directory, a device (/dev/zero) or more than 1 GiB: a message, before the model loads */
	char* text = cli_read_input("perplexity", file, MAX_TEXT, &tlen);
	if (!text) return 1;
	char err[512];
	pv_model* m = NULL;
	struct pv_model_params mp = cli_model_params(1, backend);
	if (pv_model_open(&m, model, &mp, err, sizeof(err))) {
		fprintf(stderr, "proven perplexity: cannot load model: %s\n", err);
		free(text);
		return 1;
	}
	int rc = 1;
	const struct pv_tok* tok = pv_model_tokenizer(m);
	int32_t* ids = NULL;
	int n = 0;
	float* lg = NULL;
	pv_session* s = NULL;
	if (!tok) { fprintf(stderr, "proven perplexity: the model has no tokenizer\n"); goto done; }
	if (pv_tok_encode(tok, text, tlen, 0, &ids, &n, err, sizeof(err))) {
		fprintf(stderr, "proven perplexity: %s\n", err);
		goto done;
	}
	int V = pv_model_get_info(m)->vocab, chunks = n / ctx;
	if (max_chunks && chunks > max_chunks) chunks = max_chunks;
	if (chunks < 1) {
		fprintf(stderr, "proven perplexity: %s has %d tokens, fewer than one chunk of %d\n", file, n, ctx);
		goto done;
	}
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads, .cache_type = cache_type };
	if (pv_session_new(&s, m, &sp, err, sizeof(err))) { fprintf(stderr, "proven perplexity: %s\n", err); goto done; }
	lg = malloc(sizeof(float) * (size_t)V * ctx);
	if (!lg) { fprintf(stderr, "proven perplexity: out of memory\n"); goto done; }
	fprintf(stderr, "proven perplexity: %d tokens, %d chunks of %d, scoring the second half of each\n", n, chunks, ctx);
	double nll = 0, nll2 = 0, t0 = cli_now();
	long count = 0;
	for (int c = 0; c < chunks; c++) {
		if (pv_session_rollback(s, 0) || pv_session_eval(s, ids + (size_t)c * ctx, ctx, lg, PV_LOGITS_ALL)) {
			fprintf(stderr, "proven perplexity: %s\n", pv_session_error(s));
			goto done;
		}
		for (int t = ctx / 2; t < ctx - 1; t++) {
			const float* row = lg + (size_t)t * V;
			double mx = row[0], sum = 0;
			for (int i = 1; i < V; i++) mx = row[i] > mx ? row[i] : mx;
			for (int i = 0; i < V; i++) sum += exp(row[i] - mx);
			double l = -(row[ids[(size_t)c * ctx + t + 1]] - mx - log(sum));
			nll += l;
			nll2 += l * l;
			count++;
		}
		printf("[%d]%.4f ", c + 1, exp(nll / count));
		fflush(stdout);
	}
	double mean = nll / count, var = nll2 / count - mean * mean;
	double ppl = exp(mean), err_ppl = ppl * sqrt(var / (count - 1 > 0 ? count - 1 : 1));
	printf("\nFinal estimate: PPL = %.4f +/- %.5f  (%ld tokens scored, ctx %d, %.1f s)\n", ppl, err_ppl, count, ctx,
	       cli_now() - t0);
	cli_receipt_perplexity(rec, m, model, backend, threads, file, ctx, chunks, ppl, err_ppl, cli_now() - t0, count);
	rc = 0;
done:
	free(lg);
	free(ids);
	free(text);
	pv_session_free(s);
	pv_model_close(m);
	return rc;
}
