/*
 * bench.c: `proven bench`: prompt-processing and decode speed and peak memory, as a table and
 * as one JSON line carrying the build identity. A benchmark, never a test: nothing is asserted.
 */
#include "cli.h"
#include "evidence/evidence.h"
#include "proven.h"
#include "proven_dev.h"
#include "proven_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>


static void cpu_model(char* buf, size_t n)
{
	snprintf(buf, n, "unknown");
	FILE* f = fopen("/proc/cpuinfo", "r");
	if (!f) return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "model name", 10)) {
			char* p = strchr(line, ':');
			if (p) {
				p++;
				while (*p == ' ') p++;
				p[strcspn(p, "\n")] = 0;
				snprintf(buf, n, "%s", p);
			}
			break;
		}
	}
	fclose(f);
}

static void json_str(FILE* f, const char* s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
		else fputc(*s, f);
	}
	fputc('"', f);
}

static void mean_sd(const double* x, int n, double* mean, double* sd)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += x[i];
	*mean = s / n;
	for (int i = 0; i < n; i++) q += (x[i] - *mean) * (x[i] - *mean);
	*sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

/* Tokenizer throughput (MB/s) over ~2 MB of mixed text: prose, code, digits, CJK, emoji. */
static double tokenizer_mb_s(const struct pv_tok* tok, int* n_ids)
{
	static const char* parts[] = {
		"The quick brown fox jumps over the lazy dog; it wasn't 1,234.5 times faster. ",
		"def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
		"\u8bed\u8a00\u6a21\u578b\u7684\u63a8\u7406\u5f15\u64ce\u3002 ",
		"Caf\u00e9 \u2014 \u03ba\u03cc\u03c3\u03bc\u03bf\u03c2 \U0001F680\U0001F469\u200D\U0001F4BB ",
		"    for (int i = 0; i < n; i++) { sum += a[i] * b[i]; }\n\t\t// 2026-11-30\n",
	};
	size_t cap = 2u << 20, len = 0;
	char* text = malloc(cap + 256);
	if (!text) return 0;
	for (int i = 0; len < cap; i++) {
		size_t l = strlen(parts[i % 5]);
		memcpy(text + len, parts[i % 5], l);
		len += l;
	}
	int32_t* ids = NULL;
	double t0 = cli_now();
	int rc = pv_tok_encode(tok, text, len, 0, &ids, n_ids, NULL, 0);
	double dt = cli_now() - t0;
	free(ids);
	free(text);
	return rc ? 0 : len / dt / 1e6;
}

/* `proven bench --backend cuda --membw`: the device-to-device copy bandwidth alone. */
/* --membw: the device's copy bandwidth, the ceiling the decode figures are read against; its
 * receipt has no model and a kernel-scope figure */
static int membw_only(ev_receipt* rec)
{
	char err[512];
	struct pv_device_info d;
	double gbs = 0;
	if (pv_device_info("cuda", &d, err, sizeof(err)) || pv_device_membw("cuda", (size_t)4 << 30, 20, &gbs, err, sizeof(err))) {
		fprintf(stderr, "proven bench: %s\n", err);
		return 1;
	}
	printf("| gpu | test | GB/s |\n| --- | --- | ---: |\n| %s | cudaMemcpy D2D 4 GiB, (read + write) / time, median of 20 | %.1f |\n", d.name,
	       gbs);
	printf("{\"gpu\":");
	json_str(stdout, d.name);
	printf(",\"test\":\"d2d_copy\",\"bytes\":%llu,\"d2d_gb_s\":%.3f,\"driver_cuda\":%d,\"runtime\":%d,\"nvcc\":\"%d.%d\","
	       "\"sm_clock_mhz\":%d,\"mem_clock_mhz\":%d,\"bus_width\":%d,\"sms\":%d}\n",
	       (unsigned long long)((size_t)4 << 30), gbs, d.driver_version, d.runtime_version, d.compiler_major, d.compiler_minor,
	       d.sm_clock_mhz, d.mem_clock_mhz, d.bus_width, d.sm_count);
	ev_receipt_runtime(rec, NULL, "cuda", 0);
	ev_receipt_workload(rec, "membw", "d2d-4GiB", 0, 0, 0, 0, 20, 0);
	ev_receipt_figure(rec, "d2d", "kernel", "GB/s", gbs, 0, 20);
	cli_receipt_end(rec, "ok");
	return 0;
}

/* One llama-bench test record (its field names, where they exist), plus the build identity. */
struct test_rec {
	const char* model;
	const struct pv_model_info* in;
	const char* backend;
	const char* gpu;
	const char* cpu;
	int threads, n_batch, n_prompt, n_gen, n_depth, reps;
	const double* samples_ns;
	double test_ts;
	const char* cache; /* the KV cache type (type_k and type_v) */
};

static void rec_stats(const struct test_rec* r, double* avg_ns, double* sd_ns, double* avg_ts, double* sd_ts)
{
	const int n_tok = r->n_prompt ? r->n_prompt : r->n_gen;
	double ts[100];
	for (int i = 0; i < r->reps && i < 100; i++) ts[i] = 1e9 * n_tok / r->samples_ns[i];
	mean_sd(r->samples_ns, r->reps, avg_ns, sd_ns);
	mean_sd(ts, r->reps, avg_ts, sd_ts);
}

static void write_rec(FILE* f, const char* fmt, const struct test_rec* r, int first, int last)
{
	const struct pv_build_info* bi = pv_build_info();
	double avg_ns, sd_ns, avg_ts, sd_ts;
	rec_stats(r, &avg_ns, &sd_ns, &avg_ts, &sd_ts);
	const int n_tok = r->n_prompt ? r->n_prompt : r->n_gen;
	if (!strcmp(fmt, "csv")) {
		if (first)
			fprintf(f, "build_commit,cpu_info,gpu_info,backends,model_filename,model_type,model_size,model_n_params,n_batch,"
			           "n_threads,type_k,type_v,n_prompt,n_gen,n_depth,avg_ns,stddev_ns,avg_ts,stddev_ts,compiler,isa\n");
		fprintf(f, "%s,\"%s\",\"%s\",%s,\"%s\",%s %s,%llu,%lld,%d,%d,%s,%s,%d,%d,%d,%.0f,%.0f,%.6f,%.6f,\"%s\",%s\n",
		        bi->commit, r->cpu, r->gpu, r->backend, r->model, r->in->arch_name, r->in->dtype,
		        (unsigned long long)r->in->weight_bytes, (long long)r->in->n_params, r->n_batch, r->threads, r->cache, r->cache, r->n_prompt,
		        r->n_gen, r->n_depth, avg_ns, sd_ns, avg_ts, sd_ts, bi->compiler, bi->cpu_isa);
		return;
	}
	const int arr = !strcmp(fmt, "json");
	if (arr && first) fputs("[\n", f);
	fputs("{\"build_commit\":", f);
	json_str(f, bi->commit);
	fputs(",\"cpu_info\":", f);
	json_str(f, r->cpu);
	fputs(",\"gpu_info\":", f);
	json_str(f, r->gpu);
	fprintf(f, ",\"backends\":\"%s\",\"model_filename\":", r->backend);
	json_str(f, r->model);
	fprintf(f, ",\"model_type\":\"%s %s\",\"model_size\":%llu,\"model_n_params\":%lld,\"n_batch\":%d,\"n_threads\":%d,"
	           "\"type_k\":\"%s\",\"type_v\":\"%s\",\"n_prompt\":%d,\"n_gen\":%d,\"n_depth\":%d,\"avg_ns\":%.0f,"
	           "\"stddev_ns\":%.0f,\"avg_ts\":%.6f,\"stddev_ts\":%.6f,\"samples_ns\":[",
	        r->in->arch_name, r->in->dtype, (unsigned long long)r->in->weight_bytes, (long long)r->in->n_params, r->n_batch,
	        r->threads, r->cache, r->cache, r->n_prompt, r->n_gen, r->n_depth, avg_ns, sd_ns, avg_ts, sd_ts);
	for (int i = 0; i < r->reps; i++) fprintf(f, "%s%.0f", i ? "," : "", r->samples_ns[i]);
	fputs("],\"samples_ts\":[", f);
	for (int i = 0; i < r->reps; i++) fprintf(f, "%s%.6f", i ? "," : "", 1e9 * n_tok / r->samples_ns[i]);
	fputs("],\"compiler\":", f);
	json_str(f, bi->compiler);
	fputs(",\"cflags\":", f);
	json_str(f, bi->cflags);
	fputs(",\"nvcc_flags\":", f);
	json_str(f, bi->nvcc_flags);
	fprintf(f, ",\"isa\":\"%s\"}%s\n", bi->cpu_isa, arr ? (last ? "" : ",") : "");
	if (arr && last) fputs("]\n", f);
}

int cmd_bench(int argc, char** argv)
{
	if (argc > 1 && !strcmp(argv[1], "spec")) return cmd_bench_spec(argc - 1, argv + 1);
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--workload")) return cmd_bench_workload(argc, argv); /* workload.c */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--parallel")) return cmd_bench_parallel(argc, argv); /* bench_parallel.c */
	ev_receipt* rec = cli_receipt_begin("bench", argc, argv); /* hooks.c: the receipt of this run */
	const char* dir = NULL;
	const char* backend = "cpu";
	int pp = 128, tg = 32, reps = 3, threads = 0, ctx = 0, json_only = 0, membw = 0, profile = 0, depth = 0;
	int cache_type = 0;
	const char* fmt = NULL; /* -o: md (default, with the detail lines), json, jsonl, csv (llama-bench's) */
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("bench", stdout);
		if (!strcmp(a, "--json-only")) { json_only = 1; continue; }
		if (!strcmp(a, "--membw")) { membw = 1; continue; }
		if (!strcmp(a, "--profile")) { profile = 1; continue; }
		if (i + 1 >= argc) { fprintf(stderr, "proven bench: unknown option or missing value: %s\n", a); return 2; }
		if (!strcmp(a, "--model")) dir = argv[++i];
		else if (!strcmp(a, "--pp")) pp = cli_int(a, argv[++i], 1, 1 << 20);
		else if (!strcmp(a, "--tg")) tg = cli_int(a, argv[++i], 1, 1 << 20);
		else if (!strcmp(a, "--reps")) reps = cli_int(a, argv[++i], 1, 100);
		else if (!strcmp(a, "--threads")) threads = cli_int(a, argv[++i], 1, 1024);
		else if (!strcmp(a, "--ctx")) ctx = cli_int(a, argv[++i], 1, 1 << 24);
		else if (!strcmp(a, "--depth")) depth = cli_int(a, argv[++i], 0, 1 << 24);
		else if (!strcmp(a, "--backend")) backend = argv[++i];
		else if (cli_cache_option(&cache_type, a, argv[i + 1])) i++;
		else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			fmt = argv[++i];
			if (strcmp(fmt, "md") && strcmp(fmt, "json") && strcmp(fmt, "jsonl") && strcmp(fmt, "csv")) {
				fprintf(stderr, "proven bench: -o must be md, json, jsonl or csv (got \"%s\")\n", fmt);
				return 2;
			}
		}
		else { fprintf(stderr, "proven bench: unknown option %s\n", a); return 2; }
	}
	if (cli_check_backend("bench", backend)) return 2;
	const int cuda = !strcmp(backend, "cuda");
	if (membw) {
		if (!cuda) { fprintf(stderr, "proven bench: --membw needs --backend cuda\n"); return 2; }
		return membw_only(rec);
	}
	if (!dir) { fprintf(stderr, "proven bench: --model DIR is required\n"); return 2; }
	char err[512];
	/* CUDA: the device, and the copy bandwidth the decode speed is compared with (same run) */
	struct pv_device_info dev;
	double d2d = 0;
	memset(&dev, 0, sizeof(dev));
	if (cuda && (pv_device_info("cuda", &dev, err, sizeof(err)) ||
	             pv_device_membw("cuda", dev.mem_free / 4 < ((size_t)4 << 30) ? (size_t)(dev.mem_free / 4) : ((size_t)4 << 30), 10,
	                             &d2d, err, sizeof(err)))) {
		fprintf(stderr, "proven bench: %s\n", err);
		return 1;
	}
	pv_model* m = NULL;
	struct pv_model_params mp = cli_model_params(cuda && !json_only, backend);
	if (pv_model_open(&m, dir, &mp, err, sizeof(err))) {
		fprintf(stderr, "proven bench: cannot load model: %s\n", err);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	if (!ctx) ctx = depth + pp + tg;
	if (ctx < depth + pp + tg || ctx > in->max_context) {
		fprintf(stderr, "proven bench: context %d must hold depth %d + pp %d + tg %d and be <= %d\n", ctx, depth, pp, tg,
		        in->max_context);
		pv_model_close(m);
		return 2;
	}
	if (!threads) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads, .cache_type = cache_type };
	pv_session* s = NULL;
	if (pv_session_new(&s, m, &sp, err, sizeof(err))) {
		fprintf(stderr, "proven bench: %s\n", err);
		pv_model_close(m);
		return 1;
	}
	int V = in->vocab;
	/* the prompt of every rep follows `depth` tokens evaluated once, untimed (llama-bench -d) */
	int32_t* all = malloc(sizeof(int32_t) * ((size_t)depth + pp));
	int32_t* toks = all ? all + depth : NULL;
	float* lg = malloc(sizeof(float) * (size_t)V);
	double *pps = calloc((size_t)reps, sizeof(double)), *tgs = calloc((size_t)reps, sizeof(double));
	double *pp_ns = calloc((size_t)reps, sizeof(double)), *tg_ns = calloc((size_t)reps, sizeof(double));
	if (!all || !lg || !pps || !tgs || !pp_ns || !tg_ns) { fprintf(stderr, "proven bench: out of memory\n"); return 1; }
	uint32_t rng = 12345;
	for (int i = 0; i < depth + pp; i++) {
		rng = rng * 1664525u + 1013904223u;
		all[i] = (int32_t)((rng >> 8) % (uint32_t)V);
	}
	/* warm-up: touch every weight page once */
	if (pv_session_eval(s, toks, 1, lg, PV_LOGITS_LAST)) goto fail;
	if (cuda && pv_session_eval(s, toks, 1, NULL, PV_LOGITS_LAST)) goto fail;
	int32_t tok = 0;
	struct pv_eval_out greedy = { NULL, 0, &tok, 0, NULL, 0 }; /* the argmax id, computed where the logits are */
	double fill_s = 0;
	if (depth) {
		if (pv_session_rollback(s, 0)) goto fail;
		double f0 = cli_now();
		if (pv_session_eval(s, all, depth, NULL, PV_LOGITS_LAST) || pv_session_checkpoint(s)) goto fail;
		fill_s = cli_now() - f0;
	}
	struct pv_session_stats cs0, cs1, csp;
	memset(&cs0, 0, sizeof(cs0));
	memset(&cs1, 0, sizeof(cs1));
	memset(&csp, 0, sizeof(csp));
	/* CUDA: one untimed prompt first (the first launch of each prefill kernel loads it lazily, and
	 * cuBLAS picks its kernels at its first calls: not part of the prefill's speed) */
	if (cuda) {
		if (pv_session_rollback(s, depth) || pv_session_eval(s, toks, pp, lg, PV_LOGITS_LAST)) goto fail;
	}
	/* every rep: the prompt after `depth` tokens, then (back at `depth`, as llama-bench's
	 * tg starts at -d) tg greedy tokens; the decode never follows the timed prompt */
	for (int r = 0; r < reps; r++) {
		if (pv_session_rollback(s, depth)) goto fail;
		pv_session_get_stats(s, &csp);
		double t0 = cli_now();
		struct pv_eval_out po = { NULL, 0, &tok, pp - 1, NULL, 0 };
		if (pv_session_run(s, toks, pp, 0, &po)) goto fail;
		double t1 = cli_now();
		if (pv_session_rollback(s, depth)) goto fail;
		pv_session_get_stats(s, &cs0);
		/* greedy: the host reads back only the argmax id of each token */
		double t2 = cli_now();
		for (int i = 0; i < tg; i++)
			if (pv_session_run(s, &tok, 1, 0, &greedy)) goto fail;
		double t3 = cli_now();
		pv_session_get_stats(s, &cs1);
		pps[r] = pp / (t1 - t0);
		tgs[r] = tg / (t3 - t2);
		pp_ns[r] = 1e9 * (t1 - t0);
		tg_ns[r] = 1e9 * (t3 - t2);
	}
	/* CUDA --profile: where a decode token's time goes, at the position the last decode run ended
	 * (depth + tg: the decode starts at depth, as llama-bench's tg) */
	struct pv_profile prof;
	memset(&prof, 0, sizeof(prof));
	int have_prof = cuda && profile && pv_session_profile(s, toks[0], 20, &prof) == 0;
	if (cuda && profile && !have_prof) fprintf(stderr, "proven bench: --profile: %s\n", pv_session_error(s));
	/* CPU --profile: one more prompt and one more decode run of the same shapes, untimed, with
	 * the per-op timer on (cprof[0]: per prompt token, cprof[1]: per decode token) */
	struct pv_profile cprof[2];
	memset(cprof, 0, sizeof(cprof));
	int have_cprof = 0;
	if (!cuda && profile) {
		struct pv_eval_out po = { NULL, 0, &tok, pp - 1, NULL, 0 };
		int ok = pv_session_rollback(s, depth) == 0 && pv_session_profile_start(s) == 0 &&
		         pv_session_run(s, toks, pp, 0, &po) == 0 && pv_session_profile_stop(s, &cprof[0]) == 0 &&
		         pv_session_rollback(s, depth) == 0 && pv_session_profile_start(s) == 0;
		for (int i = 0; ok && i < tg; i++) ok = pv_session_run(s, &tok, 1, 0, &greedy) == 0;
		have_cprof = ok && pv_session_profile_stop(s, &cprof[1]) == 0;
	}
	if (!pv_session_ok(s)) {
		fprintf(stderr, "proven bench: %s\n", pv_session_error(s));
		pv_session_free(s);
		pv_model_close(m);
		free(all); free(lg); free(pps); free(tgs); free(pp_ns); free(tg_ns);
		return 1;
	}
	if (fmt && strcmp(fmt, "md")) {
		/* llama-bench's records, one per test, and nothing else on stdout */
		char cpu_info[256];
		cpu_model(cpu_info, sizeof(cpu_info));
		struct test_rec rp = { dir, in, backend, cuda ? dev.name : "", cpu_info, threads, sp.max_batch ? sp.max_batch : cuda ? 4096 : 128, pp, 0, depth, reps, pp_ns, 0,
			               pv_cache_type_name(pv_session_cache_type(s)) };
		struct test_rec rt = rp;
		rt.n_prompt = 0;
		rt.n_gen = tg;
		rt.samples_ns = tg_ns;
		write_rec(stdout, fmt, &rp, 1, 0);
		write_rec(stdout, fmt, &rt, 0, 1);
		cli_receipt_bench(rec, m, dir, backend, threads, pp, tg, depth, reps, pp_ns, tg_ns, &cs0, &cs1);
		pv_session_free(s);
		pv_model_close(m);
		free(all); free(lg); free(pps); free(tgs); free(pp_ns); free(tg_ns);
		return fflush(stdout) || ferror(stdout) ? 1 : 0;
	}
	double tok_mbs = 0;
	int tok_ids = 0;
	if (pv_model_tokenizer(m)) tok_mbs = tokenizer_mb_s(pv_model_tokenizer(m), &tok_ids);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double peak_mib = ru.ru_maxrss / 1024.0;
	double ppm, pps_sd, tgm, tgs_sd;
	mean_sd(pps, reps, &ppm, &pps_sd);
	mean_sd(tgs, reps, &tgm, &tgs_sd);
	char cpu[256];
	cpu_model(cpu, sizeof(cpu));
	/* CUDA: bytes per decode token (weights without the embedding lookup, plus the KV cache at
	 * the mean position of the decode phase), achieved bandwidth, launches, syncs, memory */
	struct pv_model_device_stats ms;
	memset(&ms, 0, sizeof(ms));
	double kv_tok = 0, gbs = 0, share = 0, launches = 0, syncs = 0;
	/* the last rep's prompt: kernels (a prompt runs outside graphs), host syncs */
	double pp_kernels = (double)(cs0.kernels - csp.kernels), pp_syncs = (double)(cs0.syncs - csp.syncs);
	/* kernels per decode token */
	unsigned long long tg_kernels = (unsigned long long)((cs1.kernels - cs0.kernels) / (uint64_t)tg);
	if (cuda) {
		pv_model_device_stats(m, &ms);
		/* bytes of a cached head slice: f32, f16 and bf16 elements; q8_0 the device's slice of hd
		 * codes and ceil(hd / 32) f16 scales padded to 8 bytes (src/cuda/common.cuh) */
		const int ct = pv_session_cache_type(s), hd = in->head_dim;
		const double hb = ct == PV_CACHE_Q8_0 ? (double)((hd + 2 * ((hd + 31) / 32) + 7) / 8 * 8)
		                                      : (double)hd * (ct == PV_CACHE_F32 ? 4.0 : 2.0);
		kv_tok = 2.0 * in->n_attn_layers * (double)in->n_kv_heads * hb * (depth + pp + (tg + 1) / 2.0);
		gbs = (ms.bytes_per_token + kv_tok) * tgm / 1e9;
		share = d2d > 0 ? gbs / d2d : 0;
		double n_tok = (double)tg;
		launches = (double)(cs1.graph_launches - cs0.graph_launches) / n_tok;
		syncs = (double)(cs1.syncs - cs0.syncs) / n_tok;
	}
	if (!json_only && cuda) {
		printf("| model | arch | params | backend | test | t/s |\n");
		printf("| --- | --- | ---: | --- | --- | ---: |\n");
		printf("| %s | %s | %.2f M | cuda (%s) | pp%d @ d%d | %.2f ± %.2f |\n", dir, in->arch_name, in->n_params / 1e6, dev.name,
		       pp, depth, ppm, pps_sd);
		printf("| %s | %s | %.2f M | cuda (%s) | tg%d @ d%d | %.2f ± %.2f |\n", dir, in->arch_name, in->n_params / 1e6, dev.name,
		       tg, depth + pp, tgm, tgs_sd);
		printf("prompt: %.0f kernels outside graphs, %.0f host syncs per prompt of %d tokens\n", pp_kernels, pp_syncs, pp);
		if (depth) printf("depth: %d tokens filled once in %.2f s (%.0f tok/s)\n", depth, fill_s, depth / fill_s);
		printf("decode: %.1f MB/token weights + %.1f MB KV -> %.1f GB/s = %.1f%% of the %.1f GB/s D2D copy; "
		       "%.2f graph launches, %llu kernels, %.2f host syncs per token\n",
		       ms.bytes_per_token / 1e6, kv_tok / 1e6, gbs, 100 * share, d2d, launches, tg_kernels, syncs);
		printf("GPU memory: weights %.1f MiB, session %.1f MiB, in use %.1f MiB of %.1f MiB; %d reps\n",
		       ms.weight_bytes / 1048576.0, cs1.device_bytes / 1048576.0, cs1.device_used / 1048576.0,
		       dev.mem_total / 1048576.0, reps);
	}
	if (!json_only && have_prof) {
		printf("| decode step (graph with timing events, 20 replays) | us/token | %% | kernels | MB | GB/s |\n");
		printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
		for (int i = 0; i < prof.n; i++)
			printf("| %s | %.1f | %.1f | %d | %.1f | %.0f |\n", prof.name[i], prof.us[i], 100 * prof.us[i] / prof.total_us,
			       prof.kernels[i], prof.bytes[i] / 1e6, prof.us[i] > 0 ? prof.bytes[i] / (prof.us[i] * 1e3) : 0.0);
		printf("| total | %.1f | 100 | | | |\n", prof.total_us);
	}
	if (!json_only && have_cprof) {
		/* the two runs side by side, groups in the prompt's order (decode may lack none of them) */
		printf("| op group (CPU, wall time, %d threads) | pp%d us/token | %% | tg%d us/token | %% |\n", threads, pp, tg);
		printf("| --- | ---: | ---: | ---: | ---: |\n");
		for (int i = 0; i < cprof[0].n; i++) {
			double dus = 0;
			for (int j = 0; j < cprof[1].n; j++)
				if (!strcmp(cprof[1].name[j], cprof[0].name[i])) dus = cprof[1].us[j];
			printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", cprof[0].name[i], cprof[0].us[i],
			       100 * cprof[0].us[i] / cprof[0].total_us, dus, cprof[1].total_us > 0 ? 100 * dus / cprof[1].total_us : 0.0);
		}
		printf("| total | %.1f | 100 | %.1f | 100 |\n", cprof[0].total_us, cprof[1].total_us);
	}
	if (!json_only && !cuda) {
		printf("| model | arch | params | backend | threads | test | t/s |\n");
		printf("| --- | --- | ---: | --- | ---: | --- | ---: |\n");
		printf("| %s | %s | %.2f M | cpu (%s) | %d | pp%d | %.2f ± %.2f |\n", dir, in->arch_name, in->n_params / 1e6,
		       pv_build_info()->cpu_isa, threads, pp, ppm, pps_sd);
		printf("| %s | %s | %.2f M | cpu (%s) | %d | tg%d | %.2f ± %.2f |\n", dir, in->arch_name, in->n_params / 1e6,
		       pv_build_info()->cpu_isa, threads, tg, tgm, tgs_sd);
		printf("peak memory (max RSS): %.1f MiB; weights %.1f MiB (%s); %d reps\n", peak_mib,
		       in->weight_bytes / 1048576.0, in->dtype, reps);
		if (tok_mbs > 0) printf("tokenizer: %.2f MB/s (2 MiB of mixed text, %d ids, one thread)\n", tok_mbs, tok_ids);
	}
	printf("{\"model\":");
	json_str(stdout, dir);
	printf(",\"arch\":\"%s\",\"n_params\":%lld,\"weight_dtype\":\"%s\",\"backend\":\"%s\",\"isa\":\"%s\",\"threads\":%d,"
	       "\"n_ctx\":%d,\"pp\":%d,\"tg\":%d,\"reps\":%d,\"pp_tok_s\":%.3f,\"pp_tok_s_sd\":%.3f,\"tg_tok_s\":%.3f,"
	       "\"tg_tok_s_sd\":%.3f,\"depth\":%d,\"peak_rss_mib\":%.1f,\"build_commit\":\"%s\",\"compiler\":",
	       in->arch_name, (long long)in->n_params, in->dtype, backend, pv_build_info()->cpu_isa, threads, ctx, pp, tg, reps, ppm, pps_sd,
	       tgm, tgs_sd, depth, peak_mib, pv_build_info()->commit);
	json_str(stdout, pv_build_info()->compiler);
	printf(",\"flags\":");
	json_str(stdout, pv_build_info()->cflags);
	printf(",\"nvcc_flags\":");
	json_str(stdout, pv_build_info()->nvcc_flags);
	printf(",\"cpu\":");
	json_str(stdout, cpu);
	if (cuda) {
		printf(",\"gpu\":");
		json_str(stdout, dev.name);
		printf(",\"cc\":\"%d.%d\",\"sms\":%d,\"driver_cuda\":%d,\"runtime\":%d,\"nvcc\":\"%d.%d\",\"sm_clock_mhz\":%d,"
		       "\"mem_clock_mhz\":%d,\"d2d_gb_s\":%.3f,\"weight_bytes_per_token\":%llu,\"kv_bytes_per_token\":%.0f,"
		       "\"tg_gb_s\":%.3f,\"tg_bw_share\":%.4f,\"graph_launches_per_token\":%.3f,\"kernels_per_token\":%llu,"
		       "\"syncs_per_token\":%.3f,\"tg_logits_copied\":false,\"gpu_weights_mib\":%.1f,\"gpu_session_mib\":%.1f,"
		       "\"gpu_used_mib\":%.1f,\"upload_s\":%.3f,\"pp_kernels\":%.0f,\"pp_syncs\":%.0f,\"depth_fill_s\":%.3f",
		       dev.cc_major, dev.cc_minor, dev.sm_count, dev.driver_version, dev.runtime_version, dev.compiler_major,
		       dev.compiler_minor, dev.sm_clock_mhz, dev.mem_clock_mhz, d2d, (unsigned long long)ms.bytes_per_token, kv_tok, gbs,
		       share, launches, tg_kernels, syncs, ms.weight_bytes / 1048576.0, cs1.device_bytes / 1048576.0,
		       cs1.device_used / 1048576.0, ms.upload_s, pp_kernels, pp_syncs, fill_s);
		if (cs1.fallback) {
			printf(",\"fallback\":");
			json_str(stdout, cs1.fallback);
		}
	}
	/* every tuning switch in effect (pv_model_knobs) */
	const struct pv_knob* kn;
	int nk = pv_model_knobs(m, &kn);
	printf(",\"knobs\":{");
	for (int i = 0; i < nk; i++) printf("%s\"%s\":%d", i ? "," : "", kn[i].name, kn[i].value);
	printf("}");
	printf(",\"type_k\":\"%s\",\"type_v\":\"%s\"", pv_cache_type_name(pv_session_cache_type(s)),
	       pv_cache_type_name(pv_session_cache_type(s)));
	if (have_prof) {
		printf(",\"profile_total_us\":%.2f,\"profile\":[", prof.total_us);
		for (int i = 0; i < prof.n; i++)
			printf("%s{\"group\":\"%s\",\"us\":%.2f,\"kernels\":%d,\"bytes\":%.0f}", i ? "," : "", prof.name[i], prof.us[i],
			       prof.kernels[i], prof.bytes[i]);
		printf("]");
	}
	for (int k = 0; k < 2 && have_cprof; k++) {
		printf(",\"profile_%s_total_us\":%.2f,\"profile_%s\":[", k ? "tg" : "pp", cprof[k].total_us, k ? "tg" : "pp");
		for (int i = 0; i < cprof[k].n; i++)
			printf("%s{\"group\":\"%s\",\"us\":%.2f,\"calls_per_row\":%d}", i ? "," : "", cprof[k].name[i], cprof[k].us[i],
			       cprof[k].kernels[i]);
		printf("]");
	}
	if (tok_mbs > 0) printf(",\"tokenizer_mb_s\":%.3f", tok_mbs);
	printf("}\n");
	/* --profile: the per-token sum of the kernels' own times, a kernel-scope figure */
	if (have_prof) ev_receipt_figure(rec, "decode_kernels", "kernel", "us/token", prof.total_us, 0, 20);
	cli_receipt_bench(rec, m, dir, backend, threads, pp, tg, depth, reps, pp_ns, tg_ns, &cs0, &cs1);
	pv_session_free(s);
	pv_model_close(m);
	free(all); free(lg); free(pps); free(tgs); free(pp_ns); free(tg_ns);
	return 0;
fail:
	fprintf(stderr, "proven bench: %s\n", pv_session_error(s));
	pv_session_free(s);
	pv_model_close(m);
	free(all); free(lg); free(pps); free(tgs); free(pp_ns); free(tg_ns);
	return 1;
}
