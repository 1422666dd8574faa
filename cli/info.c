/*
 * info.c: `proven info`: what a model is (architecture, layers, parameters) and the memory a
 * session needs.
 */
#include "cli.h"
#include "proven.h"

#include <stdio.h>
#include <string.h>

int cmd_info(int argc, char** argv)
{
	const char* dir = NULL;
	int ctx = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model")) { NEED_VALUE(i); dir = argv[++i]; }
		else if (!strcmp(argv[i], "--ctx")) { NEED_VALUE(i); ctx = cli_int("--ctx", argv[++i], 1, 1 << 24); }
		else { fprintf(stderr, "proven info: unknown option %s\n", argv[i]); return 2; }
	}
	pv_model* m = cli_open_model(dir, 0, NULL);
	if (!m) return 1;
	const struct pv_model_info* in = pv_model_get_info(m);
	struct pv_session_params sp = { .n_ctx = ctx };
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
	printf("session          %.2f MiB at context %d (KV f32, DeltaNet state, scratch)\n", sess / 1048576.0, n_ctx);
	printf("memory needed    %.2f MiB\n", (in->weight_bytes + sess) / 1048576.0);
	pv_model_close(m);
	return 0;
}
