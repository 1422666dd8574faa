/*
 * test_synth.c: `proven synth` (src/convert/synth.c), on the tiny presets only (fast):
 *
 *   - every architecture's tiny preset at several types: the file loads in proven (CPU), the
 *     model info matches the preset, a few tokens evaluate to finite, O(1) logits;
 *   - every tensor of the file has the name, shape and type the plan says, and their bytes add
 *     up to the plan's data size;
 *   - determinism: the same seed gives byte-identical files for 1 and 3 threads; another seed
 *     changes them; a --layers cut holds the same blk.0 bytes as the deeper file;
 *   - hybrids cut to 1 or 2 layers keep an attention layer; --mtp writes a loadable nextn block;
 *     real depth (tiny dims, 48 / 40 layers) stays finite;
 *   - the real-shape presets' settings and parameter counts, from the plan (nothing written);
 *   - CLI errors ($PV_BUILD/proven): unknown arch / preset / type, missing --out, an
 *     unwritable path, an ambiguous preset; nonzero exit, a message, no file left behind.
 */
#include "format/gguf.h"
#include "harness.h"
#include "model/model.h"
#include "proven.h"
#include "quant/quant.h"
#include "convert/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char* build_dir;
static char out_dir[1024];

static const struct pv_synth_preset* preset(const char* arch, const char* name)
{
	char err[512];
	const struct pv_synth_preset* p = pv_synth_find(arch, name, err, sizeof err);
	CHECK(p != NULL, "%s", err);
	return p;
}

static int synth(const char* path, const struct pv_synth_preset* ps, enum pv_convert_type t, uint64_t seed, int layers,
                 int mtp, int threads)
{
	char err[512];
	struct pv_synth_params p = { .preset = ps, .type = t, .out_path = path, .seed = seed, .n_layers = layers, .mtp = mtp,
		                     .n_threads = threads };
	int rc = pv_synth_write(&p, NULL, err, sizeof err);
	CHECK(rc == 0, "synth %s %s %s: %s", ps->arch, ps->name, pv_convert_type_name(t), err);
	return rc;
}

static unsigned char* slurp(const char* path, size_t* n)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char* b = malloc((size_t)len + 1);
	*n = fread(b, 1, (size_t)len, f);
	fclose(f);
	return b;
}

static int same_file(const char* a, const char* b)
{
	size_t na = 0, nb = 0;
	unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
	int same = x && y && na == nb && !memcmp(x, y, na);
	free(x);
	free(y);
	return same;
}

/* The file's tensors against the plan: names, shapes, types, bytes. */
static void check_tensors(const char* path, const struct pv_synth_params* p)
{
	char err[512];
	struct pv_synth_plan plan;
	if (pv_synth_plan(&plan, p, err, sizeof err)) {
		CHECK(0, "plan: %s", err);
		return;
	}
	struct pv_gguf g;
	if (pv_gguf_open(&g, path, err, sizeof err)) {
		CHECK(0, "%s", err);
		pv_synth_plan_free(&plan);
		return;
	}
	CHECK(g.n_tensors == plan.n, "%s: %lld tensors, plan %d", path, (long long)g.n_tensors, plan.n);
	uint64_t bytes = 0;
	int bad = 0;
	for (int i = 0; i < plan.n && i < g.n_tensors; i++) {
		const struct pv_synth_tensor* t = &plan.t[i];
		const struct pv_gguf_tensor* f = &g.tensors[i];
		int ok = !strcmp(f->name, t->name) && f->n_dims == t->n_dims && f->ne[0] == t->ne[0] && f->ne[1] == t->ne[1] &&
		         f->ne[2] == t->ne[2] && f->type == t->type && f->nbytes == t->bytes;
		if (!ok && bad++ < 3)
			CHECK(0, "%s: tensor %d is %s {%lld, %lld, %lld} %s, plan %s {%lld, %lld, %lld} %s", path, i, f->name,
			      (long long)f->ne[0], (long long)f->ne[1], (long long)f->ne[2], pv_dtype_name(f->type), t->name,
			      (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], pv_dtype_name(t->type));
		bytes += f->nbytes;
	}
	CHECK(!bad, "%s: %d tensors differ from the plan", path, bad);
	CHECK(bytes == plan.data_bytes, "%s: %llu bytes of tensors, plan %llu", path, (unsigned long long)bytes,
	      (unsigned long long)plan.data_bytes);
	/* the synthetic vocabulary has exactly V tokens */
	struct pv_gguf_array tok;
	CHECK(!pv_gguf_get_arr(&g, "tokenizer.ggml.tokens", PV_GGUF_STRING, &tok, err, sizeof err) && tok.n == (uint64_t)plan.cfg.vocab,
	      "%s: tokenizer: %s", path, err);
	const char* s;
	uint64_t sl;
	CHECK(!pv_gguf_get_str(&g, "general.architecture", &s, &sl, err, sizeof err) && sl == strlen(p->preset->arch) &&
	          !memcmp(s, p->preset->arch, sl),
	      "%s: general.architecture", path);
	pv_gguf_close(&g);
	pv_synth_plan_free(&plan);
}

/* Loads path, checks the info against the preset, evaluates a few tokens; returns the largest
 * |logit| (negative on failure). */
static double load_and_eval(const char* path, const struct pv_synth_preset* ps, int layers, int mtp)
{
	char err[512];
	pv_model* m = NULL;
	if (pv_model_open(&m, path, NULL, err, sizeof err)) {
		CHECK(0, "load %s: %s", path, err);
		return -1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	CHECK(in->n_layers == (layers ? layers : ps->L) && in->hidden == ps->H && in->vocab == ps->V && in->n_heads == ps->nh &&
	          in->n_kv_heads == ps->nkv && in->head_dim == ps->hd && in->n_experts == ps->E && in->n_experts_used == ps->k &&
	          in->tied_embeddings == ps->tied && in->n_mtp_layers == mtp,
	      "%s: info L %d H %d V %d heads %d/%d hd %d E %d/%d tied %d mtp %d", path, in->n_layers, in->hidden, in->vocab,
	      in->n_heads, in->n_kv_heads, in->head_dim, in->n_experts, in->n_experts_used, in->tied_embeddings, in->n_mtp_layers);
	CHECK(in->n_attn_layers >= 1, "%s: no attention layer (%s)", path, in->layer_pattern);
	pv_session* s = NULL;
	struct pv_session_params sp = { .n_ctx = 64, .n_threads = 2 };
	double mx = -1;
	if (pv_session_new(&s, m, &sp, err, sizeof err)) {
		CHECK(0, "session %s: %s", path, err);
	} else {
		int32_t ids[6] = { 1, 17, 300, 42, 255, 999 };
		int V = in->vocab, n = 6;
		float* lg = malloc(sizeof(float) * (size_t)V * (size_t)n);
		if (pv_session_eval(s, ids, n, lg, PV_LOGITS_ALL)) {
			CHECK(0, "eval %s: %s", path, pv_session_error(s));
		} else {
			/* greedy decode a few steps too: the recurrent path */
			int32_t next = pv_argmax(lg + (size_t)(n - 1) * V, V);
			float* l1 = malloc(sizeof(float) * (size_t)V);
			int finite = 1;
			for (int step = 0; step < 4; step++) {
				if (pv_session_eval(s, &next, 1, l1, PV_LOGITS_LAST)) {
					CHECK(0, "decode %s: %s", path, pv_session_error(s));
					break;
				}
				for (int i = 0; i < V; i++) finite &= isfinite(l1[i]);
				next = pv_argmax(l1, V);
			}
			mx = 0;
			for (size_t i = 0; i < (size_t)V * n; i++) {
				finite &= isfinite(lg[i]);
				if (fabs(lg[i]) > mx) mx = fabs(lg[i]);
			}
			CHECK(finite, "%s: non-finite logits", path);
			if (!finite) mx = -1;
			free(l1);
		}
		free(lg);
		pv_session_free(s);
	}
	pv_model_close(m);
	return mx;
}

static const char* archs[] = { "qwen2", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe" };
#define N_ARCHS ((int)(sizeof archs / sizeof archs[0]))

TEST_CASE(tiny)
{
	static const enum pv_convert_type types[] = { PV_CONVERT_Q8_0, PV_CONVERT_Q4_K_M, PV_CONVERT_BF16 };
	char path[1200];
	for (int a = 0; a < N_ARCHS; a++) {
		const struct pv_synth_preset* ps = preset(archs[a], "tiny");
		if (!ps) continue;
		for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
			snprintf(path, sizeof path, "%s/%s-%s.gguf", out_dir, archs[a], pv_convert_type_name(types[k]));
			if (synth(path, ps, types[k], 7, 0, 0, 2)) continue;
			struct pv_synth_params p = { .preset = ps, .type = types[k] };
			check_tensors(path, &p);
			double mx = load_and_eval(path, ps, 0, 0);
			CHECK(mx > 0 && mx < 20, "%s: max |logit| %g (expected O(1))", path, mx);
			unlink(path);
		}
	}
	/* every other type once, on the hybrid MoE (the most tensor kinds) */
	static const enum pv_convert_type more[] = { PV_CONVERT_F32, PV_CONVERT_F16, PV_CONVERT_Q4_0, PV_CONVERT_Q4_K, PV_CONVERT_Q6_K };
	const struct pv_synth_preset* ps = preset("qwen35moe", "tiny");
	for (size_t k = 0; ps && k < sizeof more / sizeof more[0]; k++) {
		snprintf(path, sizeof path, "%s/more-%s.gguf", out_dir, pv_convert_type_name(more[k]));
		if (synth(path, ps, more[k], 7, 0, 0, 2)) continue;
		struct pv_synth_params p = { .preset = ps, .type = more[k] };
		check_tensors(path, &p);
		double mx = load_and_eval(path, ps, 0, 0);
		CHECK(mx > 0 && mx < 20, "%s: max |logit| %g", path, mx);
		unlink(path);
	}
}

TEST_CASE(determinism)
{
	char a[1200], b[1200], c[1200];
	const struct pv_synth_preset* ps = preset("qwen35moe", "tiny");
	if (!ps) return;
	snprintf(a, sizeof a, "%s/det-a.gguf", out_dir);
	snprintf(b, sizeof b, "%s/det-b.gguf", out_dir);
	snprintf(c, sizeof c, "%s/det-c.gguf", out_dir);
	if (synth(a, ps, PV_CONVERT_Q4_K_M, 42, 0, 0, 1) || synth(b, ps, PV_CONVERT_Q4_K_M, 42, 0, 0, 3) ||
	    synth(c, ps, PV_CONVERT_Q4_K_M, 43, 0, 0, 2))
		return;
	CHECK(same_file(a, b), "seed 42: 1 thread and 3 threads wrote different files");
	CHECK(!same_file(a, c), "seeds 42 and 43 wrote the same file");
	/* a cut holds the deeper file's blk.0 bytes (values are keyed by tensor name) */
	if (synth(c, ps, PV_CONVERT_Q4_K_M, 42, 2, 0, 2)) return;
	struct pv_gguf ga, gc;
	char err[512];
	if (!pv_gguf_open(&ga, a, err, sizeof err)) {
		if (!pv_gguf_open(&gc, c, err, sizeof err)) {
			const struct pv_gguf_tensor *x = pv_gguf_find_tensor(&ga, "blk.0.ffn_down_exps.weight"),
			                            *y = pv_gguf_find_tensor(&gc, "blk.0.ffn_down_exps.weight");
			CHECK(x && y && x->nbytes == y->nbytes && !memcmp(x->data, y->data, x->nbytes), "blk.0 differs after --layers 2");
			pv_gguf_close(&gc);
		}
		pv_gguf_close(&ga);
	}
	unlink(a);
	unlink(b);
	unlink(c);
}

TEST_CASE(layers_mtp_depth)
{
	char path[1200], err[512];
	/* hybrids cut short keep one attention layer */
	const struct pv_synth_preset* ps = preset("qwen35", "tiny");
	for (int L = 1; ps && L <= 2; L++) {
		snprintf(path, sizeof path, "%s/cut%d.gguf", out_dir, L);
		if (synth(path, ps, PV_CONVERT_Q8_0, 1, L, 0, 2)) continue;
		pv_model* m = NULL;
		if (pv_model_open(&m, path, NULL, err, sizeof err)) {
			CHECK(0, "%s", err);
			continue;
		}
		const char* want = L == 1 ? "A" : "LA";
		CHECK(!strcmp(pv_model_get_info(m)->layer_pattern, want), "--layers %d: pattern %s, want %s", L,
		      pv_model_get_info(m)->layer_pattern, want);
		pv_model_close(m);
		unlink(path);
	}
	/* MTP block (qwen35moe: an MoE attention block at blk.L plus nextn.*) */
	ps = preset("qwen35moe", "tiny");
	snprintf(path, sizeof path, "%s/mtp.gguf", out_dir);
	if (ps && !synth(path, ps, PV_CONVERT_Q4_K_M, 1, 0, 1, 2)) {
		struct pv_synth_params p = { .preset = ps, .type = PV_CONVERT_Q4_K_M, .mtp = 1 };
		check_tensors(path, &p);
		CHECK(load_and_eval(path, ps, 0, 1) > 0, "mtp file");
		unlink(path);
	}
	struct pv_synth_params bad = { .preset = preset("qwen3", "tiny"), .type = PV_CONVERT_Q8_0, .mtp = 1 };
	struct pv_synth_plan plan;
	CHECK(pv_synth_plan(&plan, &bad, err, sizeof err) != 0 && strstr(err, "MTP"), "--mtp on qwen3 should fail: %s", err);
	/* the real depths of the big MoE presets, with tiny widths: still finite and O(1) */
	static const struct { const char* arch; int L; } deep[] = { { "qwen3moe", 48 }, { "qwen35moe", 40 }, { "qwen3", 64 } };
	for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
		ps = preset(deep[i].arch, "tiny");
		snprintf(path, sizeof path, "%s/deep-%s.gguf", out_dir, deep[i].arch);
		if (!ps || synth(path, ps, PV_CONVERT_Q4_K_M, 3, deep[i].L, 0, 2)) continue;
		double mx = load_and_eval(path, ps, deep[i].L, 0);
		CHECK(mx > 0 && mx < 20, "%s at %d layers: max |logit| %g", deep[i].arch, deep[i].L, mx);
		unlink(path);
	}
}

/* The real-shape presets, from the plan alone. */
TEST_CASE(real_presets)
{
	char err[512];
	struct pv_synth_plan plan;
	struct pv_synth_params p = { .preset = preset("qwen3", "qwen3-8b"), .type = PV_CONVERT_Q4_K_M };
	if (p.preset && !pv_synth_plan(&plan, &p, err, sizeof err)) {
		const struct pv_config* c = &plan.cfg;
		CHECK(c->n_layers == 36 && c->hidden == 4096 && c->n_heads == 32 && c->n_kv_heads == 8 && c->head_dim == 128 &&
		          c->intermediate == 12288 && c->vocab == 151936 && !c->tied && c->rope_theta == 1e6f,
		      "qwen3-8b settings");
		CHECK(fabs((double)plan.n_params - 8.19e9) < 0.01e9, "qwen3-8b: %lld params, expected ~8.19e9", (long long)plan.n_params);
		CHECK(plan.n == 3 + 36 * 11, "qwen3-8b: %d tensors", plan.n);
		CHECK(plan.t[2].type == PV_Q6_K && !strcmp(plan.t[2].name, "output.weight"), "q4_k_m output: %s %s", plan.t[2].name,
		      pv_dtype_name(plan.t[2].type));
		CHECK(plan.per_type[PV_Q4_K] > 0 && plan.per_type[PV_Q6_K] > 1 && plan.n_fallback == 0, "qwen3-8b q4_k_m mix");
		pv_synth_plan_free(&plan);
	}
	p.preset = preset("qwen3moe", "qwen3-30b-a3b");
	if (p.preset && !pv_synth_plan(&plan, &p, err, sizeof err)) {
		const struct pv_config* c = &plan.cfg;
		CHECK(c->n_layers == 48 && c->hidden == 2048 && c->n_heads == 32 && c->n_kv_heads == 4 && c->head_dim == 128 &&
		          c->n_experts == 128 && c->n_experts_used == 8 && c->moe_inter == 768 && c->vocab == 151936,
		      "qwen3-30b-a3b settings");
		CHECK(fabs((double)plan.n_params - 30.53e9) < 0.05e9, "qwen3-30b-a3b: %lld params", (long long)plan.n_params);
		pv_synth_plan_free(&plan);
	}
	p.preset = preset("qwen35", "qwen3.5-9b");
	if (p.preset && !pv_synth_plan(&plan, &p, err, sizeof err)) {
		const struct pv_config* c = &plan.cfg;
		int attn = 0;
		for (int i = 0; i < c->n_layers; i++) attn += c->layer_kind[i] == PV_LAYER_ATTN;
		CHECK(c->n_layers == 32 && attn == 8 && c->layer_kind[3] == PV_LAYER_ATTN && c->hidden == 4096 && c->n_heads == 16 &&
		          c->n_kv_heads == 4 && c->head_dim == 256 && c->rope_dim == 64 && c->lin_k_heads == 16 &&
		          c->lin_v_heads == 32 && c->lin_k_dim == 128 && c->intermediate == 12288 && c->vocab == 248320 && !c->tied,
		      "qwen3.5-9b settings");
		CHECK(fabs((double)plan.n_params - 8.95e9) < 0.05e9, "qwen3.5-9b: %lld params", (long long)plan.n_params);
		pv_synth_plan_free(&plan);
	}
	p.preset = preset("qwen35moe", "qwen3.5-35b-a3b");
	p.type = PV_CONVERT_Q8_0;
	if (p.preset && !pv_synth_plan(&plan, &p, err, sizeof err)) {
		const struct pv_config* c = &plan.cfg;
		CHECK(c->n_layers == 40 && c->hidden == 2048 && c->n_heads == 16 && c->n_kv_heads == 2 && c->lin_v_heads == 32 &&
		          c->n_experts == 256 && c->n_experts_used == 8 && c->moe_inter == 512 && c->shared_inter == 512 &&
		          c->vocab == 248320,
		      "qwen3.5-35b-a3b settings");
		CHECK(fabs((double)plan.n_params - 34.66e9) < 0.05e9, "qwen3.5-35b-a3b: %lld params", (long long)plan.n_params);
		/* about 37 GB at q8_0 (34 bytes per 32 weights) */
		CHECK(plan.data_bytes > 36.5e9 && plan.data_bytes < 37.5e9, "qwen3.5-35b-a3b q8_0: %llu bytes",
		      (unsigned long long)plan.data_bytes);
		pv_synth_plan_free(&plan);
	}
	/* every preset plans at every type */
	int n;
	const struct pv_synth_preset* all = pv_synth_presets(&n);
	for (int i = 0; i < n; i++)
		for (int t = 0; t < PV_CONVERT_TYPE_COUNT; t++) {
			struct pv_synth_params q = { .preset = &all[i], .type = (enum pv_convert_type)t };
			int rc = pv_synth_plan(&plan, &q, err, sizeof err);
			CHECK(rc == 0 && plan.data_bytes > 0, "%s %s: %s", all[i].arch, all[i].name, err);
			if (!rc) pv_synth_plan_free(&plan);
		}
}

TEST_CASE(cli)
{
	char cmd[3000], out[8192], path[1400];
	const char* bin = build_dir;
	struct {
		const char* args;
		const char* expect;
	} bad[] = {
		{ "--arch qwen9 --preset tiny --out '%s/x.gguf'", "unknown architecture \"qwen9\"" },
		{ "--arch qwen3 --preset qwen3-999b --out '%s/x.gguf'", "unknown preset \"qwen3-999b\"" },
		{ "--preset tiny --out '%s/x.gguf'", "several architectures" },
		{ "--arch qwen3 --preset tiny --type q3_k --out '%s/x.gguf'", "unknown --type \"q3_k\"" },
		{ "--arch qwen3 --preset tiny", "--out" },
		{ "--arch qwen3 --preset tiny --mtp --out '%s/x.gguf'", "MTP" },
		{ "--arch qwen3 --preset tiny --layers 0 --out '%s/x.gguf'", "--layers" },
		{ "--arch qwen3 --preset tiny --bogus --out '%s/x.gguf'", "unknown option" },
		{ "--arch qwen3 --preset tiny --out /nonexistent-dir/x.gguf", "cannot create" },
		{ "--arch qwen3 --preset tiny --out '%s'", "is a directory" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char args[1600];
		snprintf(args, sizeof args, bad[i].args, out_dir);
		snprintf(cmd, sizeof cmd, "'%s/proven' synth %s -q 2>&1", bin, args);
		int rc = t_run_cmd(cmd, out, sizeof out);
		CHECK(rc != 0 && rc != 139 && strstr(out, bad[i].expect), "proven synth %s: rc %d: %s", args, rc, out);
	}
	snprintf(path, sizeof path, "%s/x.gguf", out_dir);
	CHECK(!t_exists(path), "a failed synth left %s", path);
	/* success prints the path on stdout; --list names the presets */
	snprintf(cmd, sizeof cmd, "'%s/proven' synth --arch qwen3_5 --preset TINY --type q4_k_m --seed 5 --out '%s/cli.gguf' -q", bin,
	         out_dir);
	int rc = t_run_cmd(cmd, out, sizeof out);
	snprintf(path, sizeof path, "%s/cli.gguf\n", out_dir);
	CHECK(rc == 0 && !strcmp(out, path), "CLI synth: rc %d: %s", rc, out);
	path[strlen(path) - 1] = 0;
	unlink(path);
	snprintf(cmd, sizeof cmd, "'%s/proven' synth --list", bin);
	rc = t_run_cmd(cmd, out, sizeof out);
	CHECK(rc == 0 && strstr(out, "qwen3-8b") && strstr(out, "qwen3.5-35b-a3b") && strstr(out, "8.19B"), "--list: rc %d: %.300s", rc,
	      out);
}

static int setup(void)
{
	build_dir = getenv("PV_BUILD") ? getenv("PV_BUILD") : "build";
	snprintf(out_dir, sizeof out_dir, "%s/tests/synth", build_dir);
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "mkdir -p '%s'", out_dir);
	if (!system(cmd)) return 0;
	CHECK(0, "cannot create %s", out_dir);
	return 1;
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_synth", setup, NULL);
}
