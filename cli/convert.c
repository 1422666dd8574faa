/*
 * convert.c: `proven convert`: a Hugging Face model directory -> one GGUF file (src/convert/convert.h).
 */
#include "cli.h"
#include "convert/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void convert_usage(FILE* f)
{
	fprintf(f,
	        "usage: proven convert --model HF_DIR --out FILE.gguf [--type T] [--threads N] [--quiet]\n"
	        "  --type  f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q6_k | q4_k_m   (default bf16)\n"
	        "          norms, biases, ssm_a/ssm_dt, ssm_conv1d and the MoE router are always F32;\n"
	        "          q4_k_m is llama-quantize's Q4_K_M mix (Q6_K output and some attn_v/ffn_down);\n"
	        "          rows that do not fit a block type fall back to Q5_0 / Q8_0 / F16 as in llama-quantize\n");
}

struct progress {
	int quiet, tty;
	double t0;
};

/* One updating line on a terminal; nothing per tensor otherwise. */
static void on_tensor(void* ud, int i, int n, const char* name, const char* type)
{
	const struct progress* p = ud;
	if (p->quiet || !p->tty) return;
	fprintf(stderr, "\rproven: convert [%*d/%d] %-40s %-6s", n >= 1000 ? 4 : 3, i + 1, n, name, type);
	if (i + 1 == n) fputc('\n', stderr);
	fflush(stderr);
}

int cmd_convert(int argc, char** argv)
{
	const char *model = NULL, *out = NULL, *type = "bf16";
	int threads = 0, quiet = 0;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		const char* v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v, i++;
		else if (!strcmp(a, "--out") || !strcmp(a, "-o")) out = v, i++;
		else if (!strcmp(a, "--type") || !strcmp(a, "-t")) type = v, i++;
		else if (!strcmp(a, "--threads")) threads = cli_int(a, v, 1, 1024), i++;
		else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			convert_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "proven convert: unknown option \"%s\"\n", a);
			convert_usage(stderr);
			return 2;
		}
	}
	if (!model || !out) {
		fprintf(stderr, "proven convert: --model and --out are required\n");
		convert_usage(stderr);
		return 2;
	}
	int t = type ? pv_convert_type_parse(type) : -1;
	if (t < 0) {
		fprintf(stderr, "proven convert: unknown --type \"%s\" (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m)\n",
		        type ? type : "");
		return 2;
	}
	struct progress pr = { quiet, isatty(2), cli_now() };
	struct pv_convert_params p = {
		.model_dir = model, .out_path = out, .type = (enum pv_convert_type)t, .n_threads = threads,
		.progress = on_tensor, .progress_ud = &pr,
	};
	struct pv_convert_stats st;
	char err[1024];
	if (pv_convert(&p, &st, err, sizeof err)) {
		if (!quiet && pr.tty) fputc('\n', stderr);
		fprintf(stderr, "proven convert: %s\n", err);
		return 1;
	}
	if (!quiet) {
		fprintf(stderr, "proven convert: %s: %s, %d tensors, %.2f MiB, %lld params, vocab %d%s, %.2f s\n", out, st.arch,
		        st.n_tensors, (double)st.file_bytes / (1 << 20), (long long)st.n_params, st.vocab,
		        st.synthetic_vocab ? " (synthetic: no tokenizer.json)" : "", cli_now() - pr.t0);
		fprintf(stderr, "proven convert: types:");
		for (int i = 0; i < PV_DTYPE_COUNT; i++)
			if (st.per_type[i]) fprintf(stderr, " %s x%d", pv_dtype_name((enum pv_dtype)i), st.per_type[i]);
		if (st.n_fallback) fprintf(stderr, " (%d fallback%s for row length)", st.n_fallback, st.n_fallback == 1 ? "" : "s");
		fputc('\n', stderr);
	}
	if (st.llama_cpp_note) fprintf(stderr, "proven convert: warning: llama.cpp will not load this file: %s\n", st.llama_cpp_note);
	printf("%s\n", out);
	return 0;
}
