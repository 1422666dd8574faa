/*
 * info.c: `proven info`: what a model is (architecture, layers, parameters) and the memory a
 * session needs; with --check, whether every weight is finite (a NaN scale or an infinite norm
 * weight makes the forward pass produce garbage).
 */
#include "cli.h"
#include "proven.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void check_progress(void* user, double f)
{
	int* last = user;
	int pct = (int)(f * 100.0);
	if (pct == *last) return;
	*last = pct;
	fprintf(stderr, "\rproven: checking weights %3d%%%s", pct, pct >= 100 ? "\n" : "");
}

/* --check: every weight read; 0 when all are finite, 1 (a line per bad tensor) otherwise */
static int check_weights(const pv_model* m)
{
	enum { MAX = 64 };
	struct pv_weight_fault* f = calloc(MAX, sizeof *f);
	if (!f) {
		fprintf(stderr, "proven info: out of memory\n");
		return 1;
	}
	int last = -1;
	int n = pv_model_check(m, f, MAX, isatty(STDERR_FILENO) ? check_progress : NULL, &last);
	if (!n) printf("check            every weight is finite\n");
	else printf("check            %d tensor%s with NaN or infinite values:\n", n, n == 1 ? "" : "s");
	for (int i = 0; i < n && i < MAX; i++)
		printf("  %s [%lld x %lld]: row %lld, column %lld is %s (%lld non-finite value%s)\n", f[i].tensor, (long long)f[i].rows,
		       (long long)f[i].cols, (long long)f[i].row, (long long)f[i].col, f[i].value != f[i].value ? "NaN" : f[i].value > 0 ? "+inf" : "-inf",
		       (long long)f[i].count, f[i].count == 1 ? "" : "s");
	if (n > MAX) printf("  ... and %d more\n", n - MAX);
	if (n)
		fprintf(stderr, "proven info: tensor %s has a %s at row %lld%s\n", f[0].tensor, f[0].value != f[0].value ? "NaN" : "infinity",
		        (long long)f[0].row, n > 1 ? " (and other tensors: see the list)" : "");
	free(f);
	return n ? 1 : 0;
}

int cmd_info(int argc, char** argv)
{
	const char* dir = NULL;
	int ctx = 0, check = 0, cache_type = 0;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) return cli_usage("info", stdout);
		if (!strcmp(argv[i], "--model")) { NEED_VALUE(i); dir = argv[++i]; }
		else if (!strcmp(argv[i], "--check")) check = 1;
		else if (i + 1 < argc && cli_cache_option(&cache_type, argv[i], argv[i + 1])) i++;
		else if (!strcmp(argv[i], "--ctx")) { NEED_VALUE(i); ctx = cli_int("--ctx", argv[++i], 1, 1 << 24); }
		else { fprintf(stderr, "proven info: unknown option %s\n", argv[i]); return 2; }
	}
	pv_model* m = cli_open_model(dir, 0, NULL);
	if (!m) return 1;
	const struct pv_model_info* in = pv_model_get_info(m);
	struct pv_session_params sp = { .n_ctx = ctx, .cache_type = cache_type };
	if (ctx > in->max_context) {
		fprintf(stderr, "proven info: --ctx %d exceeds max_position_embeddings %d\n", ctx, in->max_context);
		pv_model_close(m);
		return 2;
	}
	uint64_t sess = pv_session_bytes(m, &sp);
	int n_ctx = ctx ? ctx : (in->max_context < 4096 ? in->max_context : 4096);
	printf("architecture     %s\n", in->arch_name);
	printf("layers           %d (%d full attention, %d Gated DeltaNet)%s\n", in->n_layers, in->n_attn_layers,
	       in->n_linear_layers, in->n_mtp_layers ? ", + MTP head" : "");
	printf("layer pattern    %s\n", in->layer_pattern);
	printf("hidden           %d\n", in->hidden);
	printf("attention heads  %d (kv %d, head dim %d)\n", in->n_heads, in->n_kv_heads, in->head_dim);
	if (in->n_experts) printf("experts          %d (%d per token)\n", in->n_experts, in->n_experts_used);
	printf("vocab            %d%s\n", in->vocab, in->tied_embeddings ? " (tied embeddings)" : "");
	printf("max context      %d\n", in->max_context);
	if (in->n_params >= 1000000000) printf("parameters       %lld (%.2f B)", (long long)in->n_params, in->n_params / 1e9);
	else printf("parameters       %lld (%.2f M)", (long long)in->n_params, in->n_params / 1e6);
	if (in->n_params_mtp) printf(", of which MTP %lld", (long long)in->n_params_mtp);
	printf("\n");
	printf("weights          %.2f MiB (%s, memory-mapped)\n", in->weight_bytes / 1048576.0, in->dtype);
	printf("session          %.2f MiB at context %d (KV %s, DeltaNet state, scratch)\n", sess / 1048576.0, n_ctx,
	       pv_cache_type_name(cache_type));
	printf("memory needed    %.2f MiB\n", (in->weight_bytes + sess) / 1048576.0);
	int rc = check ? check_weights(m) : 0;
	pv_model_close(m);
	return rc;
}
