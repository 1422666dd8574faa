/*
 * synth.c: `proven synth`: a random-weight GGUF with the published shapes of a Qwen model
 * (src/convert/synth.h), for benchmarks where no real checkpoint exists.
 */
#include "cli.h"
#include "convert/synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void synth_usage(FILE* f)
{
	fprintf(f,
	        "usage: proven synth --preset P [--arch A] --out FILE.gguf [--type T] [--seed S] [--layers N] [--mtp]\n"
	        "                    [--threads N] [--quiet]\n"
	        "       proven synth --list                 the presets, their shapes and file sizes\n"
	        "  --arch    qwen2 | qwen3 | qwen3moe | qwen3next | qwen35 | qwen35moe (or the HF names); needed for\n"
	        "            presets that exist for several architectures (\"tiny\")\n"
	        "  --type    f32 | f16 | bf16 | q8_0 | q4_0 | q4_k | q6_k | q4_k_m   (default q8_0); types per tensor\n"
	        "            as `proven convert` chooses them (norms, ssm_*, conv1d and the router stay F32)\n"
	        "  --seed    the random weights (default 1); the same seed gives the same bytes on any thread count\n"
	        "  --layers  fewer (or more) layers than the preset; hybrids keep the 3:1 DeltaNet:attention pattern\n"
	        "  --mtp     qwen35/qwen35moe: also write the multi-token-prediction block (nextn)\n");
}

static void print_list(void)
{
	static const enum pv_convert_type types[] = { PV_CONVERT_BF16, PV_CONVERT_Q8_0, PV_CONVERT_Q6_K, PV_CONVERT_Q4_K_M,
		                                      PV_CONVERT_Q4_0 };
	int n;
	const struct pv_synth_preset* ps = pv_synth_presets(&n);
	printf("%-10s %-19s %3s %5s %9s %6s %-14s %-12s %6s %4s %8s |", "arch", "preset", "L", "H", "heads", "ffn", "moe E/k/Ie/Is",
	       "deltanet", "V", "tied", "params");
	for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) printf(" %8s", pv_convert_type_name(types[k]));
	printf("   (GiB of tensor data; M: MiB)\n");
	for (int i = 0; i < n; i++) {
		const struct pv_synth_preset* s = &ps[i];
		char heads[32], moe[32], dn[32], params[32];
		snprintf(heads, sizeof heads, "%d/%dx%d", s->nh, s->nkv, s->hd);
		if (s->E) snprintf(moe, sizeof moe, "%d/%d/%d/%d", s->E, s->k, s->Ie, s->Is);
		else snprintf(moe, sizeof moe, "-");
		if (s->Hv) snprintf(dn, sizeof dn, "Hk%d Hv%d d%d", s->Hk, s->Hv, s->dk);
		else snprintf(dn, sizeof dn, "-");
		struct pv_synth_params p = { .preset = s, .type = PV_CONVERT_BF16 };
		struct pv_synth_plan plan;
		char err[256];
		if (pv_synth_plan(&plan, &p, err, sizeof err)) {
			printf("%s: %s\n", s->name, err);
			continue;
		}
		double np = (double)plan.n_params;
		if (np >= 1e9) snprintf(params, sizeof params, "%.2fB", np * 1e-9);
		else snprintf(params, sizeof params, "%.1fM", np * 1e-6);
		pv_synth_plan_free(&plan);
		printf("%-10s %-19s %3d %5d %9s %6d %-14s %-12s %6d %4s %8s |", s->arch, s->name, s->L, s->H, heads, s->I, moe, dn, s->V,
		       s->tied ? "yes" : "no", params);
		for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
			p.type = types[k];
			if (pv_synth_plan(&plan, &p, err, sizeof err)) {
				printf(" %8s", "?");
				continue;
			}
			double b = (double)plan.data_bytes;
			if (b >= 0.1 * (1u << 30)) printf(" %8.2f", b / (1u << 30));
			else printf(" %7.1fM", b / (1u << 20));
			pv_synth_plan_free(&plan);
		}
		printf("\n");
	}
}

struct progress {
	int quiet, tty;
	double t0, last;
};

/* An updating line on a terminal; otherwise a line every 10 s (a log stays short). */
static void on_progress(void* ud, uint64_t done, uint64_t total)
{
	struct progress* p = ud;
	if (p->quiet) return;
	double now = cli_now();
	if (done < total && now - p->last < (p->tty ? 0.2 : 10.0)) return;
	p->last = now;
	double gib = (double)done / (1u << 30), el = now - p->t0;
	fprintf(stderr, "%sproven synth: %.2f / %.2f GiB (%3.0f%%), %.2f GiB/s%s", p->tty ? "\r" : "", gib,
	        (double)total / (1u << 30), total ? 100.0 * (double)done / (double)total : 100.0, el > 0 ? gib / el : 0.0,
	        p->tty && done < total ? "" : "\n");
	fflush(stderr);
}

int cmd_synth(int argc, char** argv)
{
	const char *arch = NULL, *preset = NULL, *out = NULL, *type = "q8_0";
	int threads = 0, quiet = 0, layers = 0, mtp = 0;
	unsigned long long seed = 1;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		const char* v = i + 1 < argc ? argv[i + 1] : NULL;
		int needs = strcmp(a, "--list") && strcmp(a, "--mtp") && strcmp(a, "--quiet") && strcmp(a, "-q") && strcmp(a, "-h") &&
		            strcmp(a, "--help");
		if (needs && !v && a[0] == '-') {
			fprintf(stderr, "proven synth: %s needs a value\n", a);
			return 2;
		}
		if (!strcmp(a, "--list")) {
			print_list();
			return 0;
		} else if (!strcmp(a, "--arch")) arch = v, i++;
		else if (!strcmp(a, "--preset") || !strcmp(a, "-p")) preset = v, i++;
		else if (!strcmp(a, "--out") || !strcmp(a, "-o")) out = v, i++;
		else if (!strcmp(a, "--type") || !strcmp(a, "-t")) type = v, i++;
		else if (!strcmp(a, "--layers")) layers = cli_int(a, v, 1, 4096), i++;
		else if (!strcmp(a, "--threads")) threads = cli_int(a, v, 1, 1024), i++;
		else if (!strcmp(a, "--seed")) {
			char* end;
			errno = 0;
			seed = strtoull(v, &end, 10);
			if (end == v || *end || errno || v[0] == '-') {
				fprintf(stderr, "proven synth: --seed needs a non-negative integer, got \"%s\"\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--mtp")) mtp = 1;
		else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			synth_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "proven synth: unknown option \"%s\"\n", a);
			synth_usage(stderr);
			return 2;
		}
	}
	if (!preset || !out) {
		fprintf(stderr, "proven synth: --preset and --out are required (--list shows the presets)\n");
		synth_usage(stderr);
		return 2;
	}
	char err[1024];
	const struct pv_synth_preset* ps = pv_synth_find(arch, preset, err, sizeof err);
	if (!ps) {
		fprintf(stderr, "proven synth: %s\n", err);
		return 2;
	}
	int t = pv_convert_type_parse(type);
	if (t < 0) {
		fprintf(stderr, "proven synth: unknown --type \"%s\" (f32, f16, bf16, q8_0, q4_0, q4_k, q6_k, q4_k_m)\n", type);
		return 2;
	}
	struct progress pr = { quiet, isatty(2), cli_now(), cli_now() };
	struct pv_synth_params p = {
		.preset = ps, .type = (enum pv_convert_type)t, .out_path = out, .seed = seed, .n_layers = layers, .mtp = mtp,
		.n_threads = threads, .progress = on_progress, .progress_ud = &pr,
	};
	struct pv_synth_plan plan;
	if (pv_synth_plan(&plan, &p, err, sizeof err)) {
		fprintf(stderr, "proven synth: %s\n", err);
		return 2;
	}
	if (!quiet)
		fprintf(stderr, "proven synth: %s %s (%s), %d layers, %s, %d tensors, %lld params, %.2f GiB of tensor data\n", ps->arch,
		        ps->name, ps->model, plan.cfg.n_layers, pv_convert_type_name(p.type), plan.n, (long long)plan.n_params,
		        (double)plan.data_bytes / (1u << 30));
	pv_synth_plan_free(&plan);
	uint64_t bytes = 0;
	if (pv_synth_write(&p, &bytes, err, sizeof err)) {
		if (!quiet && pr.tty) fputc('\n', stderr);
		fprintf(stderr, "proven synth: %s\n", err);
		return 1;
	}
	if (!quiet) {
		double el = cli_now() - pr.t0;
		fprintf(stderr, "proven synth: %s: %.2f GiB in %.2f s (%.2f GiB/s)\n", out, (double)bytes / (1u << 30), el,
		        el > 0 ? (double)bytes / (1u << 30) / el : 0.0);
	}
	printf("%s\n", out);
	return 0;
}
