/*
 * test_cli.c: the `proven` tool end to end: generate against transformers' ids and logits,
 * --dump-logits format, info, bench, and clean failures on bad arguments and bad models.
 * Runs the binary in $PV_BUILD (default build/).
 */
#include "fixture.h"
#include "harness.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

static char bin[512];

/* Runs a shell command; captures stdout+stderr (up to cap) and returns the exit code. */
static int run(const char* cmd, char* out, size_t cap)
{
	char full[80000];
	/* merge stderr unless the command already redirects it */
	snprintf(full, sizeof(full), strstr(cmd, "2>/dev/null") ? "%s" : "%s 2>&1", cmd);
	FILE* p = popen(full, "r");
	if (!p) return -1;
	size_t n = fread(out, 1, cap - 1, p);
	out[n] = 0;
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static char* ids_csv(json_t* a)
{
	static char buf[65536];
	size_t o = 0;
	for (size_t i = 0; i < json_array_size(a) && o < sizeof(buf) - 16; i++)
		o += snprintf(buf + o, sizeof(buf) - o, i ? ",%lld" : "%lld", (long long)json_integer_value(json_array_get(a, i)));
	return buf;
}

static void generate_matches(const char* fx)
{
	char path[1024], cmd[70000 + 600], out[65536];
	snprintf(path, sizeof(path), "%s/%s/reference.json", fx_root(), fx);
	json_t* ref = json_load_file(path, 0, NULL);
	if (!ref) return;
	json_t* c = json_array_get(json_object_get(ref, "cases"), 0);
	char prompt[65536];
	snprintf(prompt, sizeof(prompt), "%s", ids_csv(json_object_get(c, "prompt")));
	char want[4096];
	snprintf(want, sizeof(want), "%s\n", ids_csv(json_object_get(c, "generated")));
	int ng = (int)json_array_size(json_object_get(c, "generated"));
	char dump[256];
	snprintf(dump, sizeof(dump), "%s/pv_test_cli_%d.safetensors", t_tmpdir(), (int)getpid());
	snprintf(cmd, sizeof(cmd), "%s generate --model %s/%s --prompt-ids %s --max-tokens %d --dump-logits %s 2>/dev/null", bin,
	         fx_root(), fx, prompt, ng, dump);
	int rc = run(cmd, out, sizeof(out));
	CHECK(rc == 0, "%s: generate exit %d: %s", fx, rc, out);
	CHECK(!strcmp(out, want), "%s: generate printed %s, transformers %s", fx, out, want);

	int R, C, R2, C2;
	float* got = fx_read_f32(dump, "logits", &R, &C);
	snprintf(path, sizeof(path), "%s/%s/reference.safetensors", fx_root(), fx);
	float* exp = fx_read_f32(path, "logits_single", &R2, &C2);
	CHECK(got && exp && R == R2 && C == C2, "%s: dump-logits shape [%d, %d] vs reference [%d, %d]", fx, R, C, R2, C2);
	if (got && exp && R == R2 && C == C2) {
		double e = 0, mx = 0;
		for (size_t i = 0; i < (size_t)R * C; i++) {
			double d = fabs((double)got[i] - exp[i]);
			if (!(d <= e)) e = d;
			if (fabs(exp[i]) > mx) mx = fabs(exp[i]);
		}
		CHECK(e <= 1e-3 * (mx > 1 ? mx : 1), "%s: dumped logits max |err| %.3g (max |logit| %.3g)", fx, e, mx);
	}
	free(got);
	free(exp);
	unlink(dump);
	json_decref(ref);
}

static int setup(void)
{
	/* the runs compare logits with transformers': the exact numerics (src/cpu/ops.h) */
	setenv("PV_CPU_EXACT", "1", 1);
	const char* b = getenv("PV_BUILD");
	snprintf(bin, sizeof(bin), "%s/proven", b ? b : "build");
	return 0;
}

/* the first fixture, for the commands that need some model */
static const char* first_fixture(void)
{
	static char names[64][128];
	int n = fx_list(fx_root(), names, 64);
	return n ? names[0] : "none";
}

TEST_CASE(generate)
{
	static char names[64][128];
	int n = fx_list(fx_root(), names, 64);
	CHECK(n > 0, "no fixtures under %s", fx_root());
	for (int i = 0; i < n; i++) generate_matches(names[i]);
}

TEST_CASE(info)
{
	char cmd[2048], out[65536];
	snprintf(cmd, sizeof(cmd), "%s info --model %s/%s", bin, fx_root(), first_fixture());
	CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "architecture") && strstr(out, "parameters"), "info: %s", out);
}

TEST_CASE(bench)
{
	char cmd[2048], out[65536];
	snprintf(cmd, sizeof(cmd), "%s bench --model %s/%s --pp 8 --tg 4 --reps 1", bin, fx_root(), first_fixture());
	CHECK(run(cmd, out, sizeof(out)) == 0 && strstr(out, "\"build_commit\"") && strstr(out, "\"tg_tok_s\""), "bench: %s", out);
}

/* bench --parallel: N sequences decoding together (continuous batching) and alone, on the CPU:
 * the JSON line's fields, the same ids both ways, the rows really batched, on an attention-only
 * and on a hybrid (gated attention + Gated DeltaNet) model */
TEST_CASE(bench_parallel)
{
	char cmd[2048], out[65536];
	static const char* const fx[2] = { "qwen3", "qwen3_5" };
	for (int f = 0; f < 2; f++) {
		snprintf(cmd, sizeof(cmd), "%s bench --model %s/%s --parallel 3 --pp 6 --tg 5 --reps 2 --threads 2", bin,
		         fx_root(), fx[f]);
		int rc = run(cmd, out, sizeof(out));
		const char* b = strstr(out, "\"batched_share\":");
		const double share = b ? atof(b + strlen("\"batched_share\":")) : -1;
		CHECK(rc == 0 && strstr(out, "\"test\":\"parallel\"") && strstr(out, "\"parallel\":3") &&
		              strstr(out, "\"agg_tok_s\":") && strstr(out, "\"seq_tok_s\":") &&
		              strstr(out, "\"alone_agg_tok_s\":") && strstr(out, "\"ids_equal\":true") &&
		              strstr(out, "aggregate t/s"),
		      "bench --parallel on %s: %s", fx[f], out);
		CHECK(share > 0.99, "bench --parallel on %s: batched_share %g", fx[f], share);
	}
}

/* bad arguments: exit 2 with a message; bad models: nonzero with the path named */
TEST_CASE(bad_args)
{
	char cmd[2048], out[65536];
	const char* fx = first_fixture();
	struct { const char* args; int code; const char* msg; } bad[] = {
		{ "", 2, "usage" },
		{ "frobnicate", 2, "unknown command" },
		{ "generate --prompt-ids 1,2", 1, "--model" },
		{ "generate --model /nonexistent/dir --prompt-ids 1", 1, "/nonexistent/dir" },
		{ "generate --model FX --prompt-ids 1,x,3", 2, "token id" },
		{ "generate --model FX --prompt-ids 1,,3", 2, "token id" },
		{ "generate --model FX --prompt-ids 1, ", 2, "token id" },
		{ "generate --model FX --prompt-ids 99999999", 1, "vocabulary" },
		{ "generate --model FX --prompt-ids 1 --max-tokens -3", 2, "--max-tokens" },
		{ "generate --model FX --prompt-ids 1 --max-tokens", 2, "needs a value" },
		{ "generate --model FX --prompt-ids 1 --ctx 100000", 1, "context" },
		{ "info --model FX --bogus", 2, "unknown option" },
		{ "bench --model FX --pp 0", 2, "--pp" },
		{ "bench --model FX --parallel 0", 2, "--parallel" },
		{ "bench --model FX --parallel 65", 2, "--parallel" },
		{ "bench --model FX --parallel 2 --depth 4", 2, "--depth" },
		{ "run --model FX -p hi --backend tpu", 2, "--backend must be cpu or cuda" },
		{ "chat --model FX --backend metal", 2, "--backend must be cpu or cuda" },
		{ "perplexity --model FX --file /dev/null --backend x", 2, "--backend must be cpu or cuda" },
		/* no GPU here (or no CUDA in the build): a clear failure naming the backend */
		{ "run --model FX -p hi --backend cuda", 1, "CUDA" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char args[1024];
		const char* a = bad[i].args;
		const char* p = strstr(a, "FX");
		if (p) snprintf(args, sizeof(args), "%.*s%s/%s%s", (int)(p - a), a, fx_root(), fx, p + 2);
		else snprintf(args, sizeof(args), "%s", a);
		snprintf(cmd, sizeof(cmd), "%s %s", bin, args);
		int rc = run(cmd, out, sizeof(out));
		CHECK(rc == bad[i].code && strstr(out, bad[i].msg), "`proven %s`: exit %d (want %d), output: %s", args, rc,
		      bad[i].code, out);
	}
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_cli", setup, NULL);
}
