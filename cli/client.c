/*
 * client.c: `proven client`, the command-line client of proven-server's shared-memory protocol
 * (proven_client.h).
 *
 *   proven client --socket PATH -p TEXT [--max-tokens N] [sampling] [--draft ngram]   generate text
 *   proven client --socket PATH --prompt-ids 1,2,3 [--max-tokens N] [--ids]           ids in (and out)
 *   proven client --socket PATH --bench --model PATH [--reps N]
 *       the added latency: the same calls in this process and through the socket
 */
#include "cli.h"
#include "proven_client.h"
#include "proven_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_d(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

static double median(double* v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_d);
	return n ? v[n / 2] : 0;
}

/* One-row evaluations and one generation, in process and remote, on the same prompt. */
static int bench(pvc_session* rs, const char* model, int reps)
{
	pv_model* m = cli_open_model(model, 0, NULL);
	if (!m) return 1;
	const int V = pv_model_get_info(m)->vocab;
	char err[512];
	pv_session* ls = NULL;
	struct pv_session_params sp = { .n_ctx = pvc_get_info(rs)->n_ctx };
	if (pv_session_new(&ls, m, &sp, err, sizeof err)) {
		fprintf(stderr, "proven client: %s\n", err);
		pv_model_close(m);
		return 1;
	}
	if (pvc_get_info(rs)->vocab != V) fprintf(stderr, "proven client: warning: the server's model has another vocabulary\n");
	int32_t prompt[64];
	for (int i = 0; i < 64; i++) prompt[i] = (int32_t)((i * 7919 + 13) % (V < 1000 ? V : 1000));
	float* lg = malloc(sizeof(float) * (size_t)V);
	double* tl = malloc(sizeof(double) * (size_t)reps * 4);
	double *tr = tl + reps, *tl2 = tl + 2 * reps, *tr2 = tl + 3 * reps;
	int32_t am;
	int rc = 0;
	/* both hold the 64-token prompt; each rep evaluates one more row and cuts it again */
	rc |= pv_session_run(ls, prompt, 64, 0, NULL);
	rc |= pvc_run(rs, prompt, 64, 0, NULL);
	struct pvc_stats s0, s1;
	pvc_stats(rs, &s0);
	for (int i = 0; i < reps && !rc; i++) {
		int32_t t = prompt[i % 64];
		struct pv_eval_out oa = { NULL, 0, &am, 0, NULL, 0 }, ol = { lg, 0, NULL, 0, NULL, 0 };
		double t0 = cli_now();
		rc |= pv_session_run(ls, &t, 1, PV_EVAL_EXACT, &oa);
		tl[i] = cli_now() - t0;
		rc |= pv_session_truncate(ls, 64);
		t0 = cli_now();
		rc |= pvc_run(rs, &t, 1, PV_EVAL_EXACT, &oa);
		tr[i] = cli_now() - t0;
		rc |= pvc_truncate(rs, 64);
		t0 = cli_now();
		rc |= pv_session_run(ls, &t, 1, PV_EVAL_EXACT, &ol);
		tl2[i] = cli_now() - t0;
		rc |= pv_session_truncate(ls, 64);
		t0 = cli_now();
		rc |= pvc_run(rs, &t, 1, PV_EVAL_EXACT, &ol);
		tr2[i] = cli_now() - t0;
		rc |= pvc_truncate(rs, 64);
	}
	pvc_stats(rs, &s1);
	if (rc) {
		fprintf(stderr, "proven client: bench failed: %s\n", pvc_error(rs));
	} else {
		double a = median(tl, reps), b = median(tr, reps), c = median(tl2, reps), d = median(tr2, reps);
		printf("one-row eval, argmax only:   in-process %8.1f us   remote %8.1f us   added %7.1f us\n", a * 1e6, b * 1e6, (b - a) * 1e6);
		printf("one-row eval, logits [%d]: in-process %8.1f us   remote %8.1f us   added %7.1f us\n", V, c * 1e6, d * 1e6, (d - c) * 1e6);
		printf("crossings: %llu for %d remote evals and %d truncations (one each)\n",
		       (unsigned long long)(s1.crossings - s0.crossings), 2 * reps, 2 * reps);
		/* a whole generation: one crossing */
		int32_t out[64];
		struct pvc_gen_params gp = { .max_tokens = 32, .temperature = 0, .top_p = 1 };
		struct pvc_gen_result gr;
		pv_generator* g = NULL;
		pv_session_truncate(ls, 0);
		pv_generator_new(&g, ls, NULL, NULL, err, sizeof err);
		int32_t local[64];
		int nl = 1;
		double t0 = cli_now();
		pv_generator_prompt(g, prompt, 64, &local[0]);
		while (nl < 32) {
			int got = 0;
			if (pv_generator_step(g, local + nl, 32 - nl, &got)) break;
			nl += got;
		}
		double tg = cli_now() - t0;
		pv_generator_free(g);
		pvc_truncate(rs, 0);
		pvc_stats(rs, &s0);
		t0 = cli_now();
		rc = pvc_generate(rs, prompt, 64, &gp, out, &gr);
		double tg2 = cli_now() - t0;
		pvc_stats(rs, &s1);
		printf("generate 32 tokens (64-token prompt): in-process %.2f ms   remote %.2f ms (server %.2f ms)   crossings %llu   same ids: %s\n",
		       tg * 1e3, tg2 * 1e3, gr.server_ms, (unsigned long long)(s1.crossings - s0.crossings),
		       gr.n <= nl && !memcmp(out, local, sizeof(int32_t) * (size_t)gr.n) ? "yes" : "NO");
	}
	free(tl);
	free(lg);
	pv_session_free(ls);
	pv_model_close(m);
	return rc ? 1 : 0;
}

int cmd_client(int argc, char** argv)
{
	const char *path = NULL, *text = NULL, *ids_arg = NULL, *model = NULL;
	int max_tokens = 128, print_ids = 0, do_bench = 0, reps = 200;
	struct cli_gen go;
	cli_gen_defaults(&go, 0.0f, 1.0f, 0);
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("client", stdout);
		if (!strcmp(a, "--ids")) { print_ids = 1; continue; }
		if (!strcmp(a, "--bench")) { do_bench = 1; continue; }
		if (cli_gen_flag(&go, a)) continue;
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(a, "--socket")) path = v;
		else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) text = v;
		else if (!strcmp(a, "--prompt-ids")) ids_arg = v;
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n")) max_tokens = cli_int(a, v, 1, 1 << 24);
		else if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--reps")) reps = cli_int(a, v, 1, 1000000);
		else if (cli_gen_option(&go, "client", a, v)) {
		} else {
			fprintf(stderr, "proven client: unknown option %s\n", a);
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "proven client: --socket PATH is required (proven serve --socket PATH)\n");
		return 2;
	}
	if (go.draft && strcmp(go.draft, "ngram")) {
		fprintf(stderr, "proven client: --draft: only ngram over the socket\n");
		return 2;
	}
	pvc_session* s = NULL;
	char err[512];
	struct pvc_params p = { 0 };
	if (pvc_open(&s, path, &p, err, sizeof err)) {
		fprintf(stderr, "proven client: %s\n", err);
		return 1;
	}
	int rc = 0;
	if (do_bench) {
		if (!model) fprintf(stderr, "proven client: --bench needs --model PATH (the server's model, loaded here too)\n"), rc = 2;
		else rc = bench(s, model, reps);
		pvc_close(s);
		return rc;
	}
	int32_t* ids = NULL;
	int n = 0;
	if (ids_arg) {
		if ((n = cli_parse_ids(ids_arg, &ids)) < 0) rc = 2;
	} else if (text) {
		if (pvc_tokenize(s, text, strlen(text), 1, &ids, &n)) fprintf(stderr, "proven client: %s\n", pvc_error(s)), rc = 1;
	} else {
		fprintf(stderr, "proven client: -p TEXT or --prompt-ids is required\n");
		rc = 2;
	}
	if (!rc && n < 1) fprintf(stderr, "proven client: the prompt is empty\n"), rc = 1;
	int32_t* out = rc ? NULL : malloc(sizeof(int32_t) * (size_t)max_tokens);
	if (!rc && out) {
		struct pvc_gen_params gp = { max_tokens, go.smp.temperature, go.smp.top_k, go.smp.top_p, go.smp.min_p, go.smp.seed,
			                     go.draft ? 1 : 0, go.sp.k_max };
		struct pvc_gen_result gr;
		double t0 = cli_now();
		if (pvc_generate(s, ids, n, &gp, out, &gr)) {
			fprintf(stderr, "proven client: %s\n", pvc_error(s));
			rc = 1;
		}
		double dt = cli_now() - t0;
		if (print_ids || !text) {
			for (int i = 0; i < gr.n; i++) printf("%s%d", i ? "," : "", out[i]);
			printf("\n");
		} else {
			char* t = NULL;
			size_t len = 0;
			if (pvc_detokenize(s, out, gr.n, &t, &len)) fprintf(stderr, "proven client: %s\n", pvc_error(s)), rc = 1;
			else printf("%s%.*s\n", text, (int)len, t);
			free(t);
		}
		struct pvc_stats st;
		pvc_stats(s, &st);
		fprintf(stderr, "proven client: %d prompt tokens, %d generated in %.1f ms (server %.1f ms)%s; %llu crossings\n", n, gr.n,
		        dt * 1e3, gr.server_ms, gr.drafted ? "" : "", (unsigned long long)st.crossings);
		if (gr.drafted) fprintf(stderr, "proven client: drafted %lld, accepted %lld\n", (long long)gr.drafted, (long long)gr.accepted);
	}
	free(out);
	free(ids);
	pvc_close(s);
	return rc;
}
