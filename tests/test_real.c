/*
 * test_real.c: a real Qwen model against transformers (tests/data/real/, written by
 * tools/reference/real_model_reference.py from the same GGUF, in float64 on dequantized weights).
 * The model is Qwen2.5-Coder-0.5B-Instruct Q4_K_M from tools/get-model.sh; `make test` fetches it
 * first (or finds it beside the repository, fixture.h); without it this program prints a
 * "skip" line and checks nothing.
 *
 * Checked, kept brief (the model is used only for a few seconds):
 *   - tokenization of every reference prompt through the GGUF's tokenizer equals transformers' ids
 *   - next-token logits after each prompt: full rows (where stored) and the reference top-20,
 *     max |error| within TOL; the argmax agrees
 *   - 16 teacher-forced greedy steps per prompt: argmax equals transformers' greedy id
 *   - the first perplexity chunk's mean NLL within 0.005 of transformers'
 */
#include "fixture.h"
#include "harness.h"
#include "proven.h"
#include "text/tokenizer.h"

#include <math.h>
#include <sys/stat.h>

/* fp32 engine vs float64 reference over 24 layers with logits up to ~30: observed max 5e-5 */
#define TOL 1e-3
#define STEPS 16

static const char* path; /* the model's file */
static json_t* ref;
static pv_model* m;
static float* lg;

/* The model and the reference, for every case; a skip when the model could not be had. */
static int setup(void)
{
	static char buf[1024];
	path = fx_real_model(buf, sizeof buf);
	if (!path) {
		t_skip("the real model is not available (tools/get-model.sh could not fetch it; or set PV_REAL_MODEL): "
		       "nothing checked");
		return 1;
	}
	ref = json_load_file("tests/data/real/reference.json", 0, NULL);
	CHECK(ref != NULL, "tests/data/real/reference.json missing");
	if (!ref) return 1;
	char err[512];
	/* TOL is the exact numerics' (f32 activations, src/cpu/ops.h); test_real_fast.c checks the
	 * default (Q8 activations) against the same reference */
	struct pv_model_params mp = { .knobs = "cpu.exact_activations=1" };
	CHECK(pv_model_open(&m, path, &mp, err, sizeof err) == 0, "load %s: %s", path, err);
	if (!m) {
		json_decref(ref);
		return 1;
	}
	lg = malloc(sizeof(float) * (size_t)pv_model_get_info(m)->vocab * 512);
	return 0;
}

static void teardown(void)
{
	free(lg);
	pv_model_close(m);
	json_decref(ref);
}

/* tokenization, next-token logits and teacher-forced greedy steps per reference prompt */
TEST_CASE(prompts)
{
	char err[512];
	const struct pv_tok* tok = pv_model_tokenizer(m);
	int V = pv_model_get_info(m)->vocab;
	double worst = 0;
	int steps = 0, steps_ok = 0;
	json_t* prompts = json_object_get(ref, "prompts");
	for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
		json_t* p = json_array_get(prompts, pi);
		const char* name = json_string_value(json_object_get(p, "name"));
		const char* text = json_string_value(json_object_get(p, "text"));
		int nref;
		int32_t* rids = fx_ids(json_object_get(p, "ids"), &nref);
		int32_t* ids = NULL;
		int n = 0;
		pv_tok_encode(tok, text, strlen(text), 1, &ids, &n, err, sizeof err);
		CHECK(n == nref && !memcmp(ids, rids, sizeof(int32_t) * (size_t)n), "%s: tokenization differs from transformers", name);
		pv_session* s = NULL;
		struct pv_session_params sp = { .n_ctx = nref + STEPS + 1 };
		pv_session_new(&s, m, &sp, err, sizeof err);
		pv_session_eval(s, rids, nref, lg, PV_LOGITS_LAST);
		double e = fx_max_err_ids(lg, json_object_get(p, "next_top_ids"), json_object_get(p, "next_top_logits"));
		CHECK(e <= TOL, "%s: next-token logits max |err| %.4g > %g", name, e, TOL);
		if (e > worst) worst = e;
		/* full vocabulary rows for the chat prompt (tf.chat_c_reverse [9, V]) */
		int R = 0, C = 0;
		float* full = !strcmp(name, "chat_c_reverse") ? fx_read_f32("tests/data/real/logits.safetensors", "tf.chat_c_reverse", &R, &C) : NULL;
		json_t* greedy = json_object_get(p, "greedy_ids");
		json_t* tf = json_object_get(p, "teacher_forced_top20");
		for (int i = 0; i < STEPS && i < (int)json_array_size(greedy); i++) {
			int want = (int)json_integer_value(json_array_get(greedy, i));
			steps++;
			steps_ok += pv_argmax(lg, V) == want;
			/* teacher_forced_top20[i]: the row that predicts greedy[i] */
			json_t* row = json_array_get(tf, i);
			if (row) {
				double ee = fx_max_err_ids(lg, json_object_get(row, "top_ids"), json_object_get(row, "top_logits"));
				if (ee > worst) worst = ee;
				CHECK(ee <= TOL, "%s: step %d logits max |err| %.4g", name, i, ee);
			}
			if (full && i < R && C == V) {
				double fe = 0;
				for (int v = 0; v < V; v++) {
					double d = fabs(lg[v] - full[(size_t)i * V + v]);
					if (!(d <= fe)) fe = d;
				}
				if (fe > worst) worst = fe;
				CHECK(fe <= TOL, "%s: step %d full-row max |err| %.4g", name, i, fe);
			}
			int32_t t = want;
			pv_session_eval(s, &t, 1, lg, PV_LOGITS_LAST);
		}
		pv_session_free(s);
		free(full);
		free(ids);
		free(rids);
	}
	CHECK(steps_ok == steps, "greedy ids: %d of %d steps agree with transformers", steps_ok, steps);
	printf("  real model: %s; greedy %d/%d steps agree; max |logit err| %.4g (reference top-20 rows, 9 full rows)\n", path,
	       steps_ok, steps, worst);
}

/* perplexity, first chunk of 512 */
TEST_CASE(perplexity)
{
	char err[512];
	const struct pv_tok* tok = pv_model_tokenizer(m);
	int V = pv_model_get_info(m)->vocab;
	json_t* ppl = json_object_get(ref, "perplexity");
	FILE* f = fopen("tests/data/text/ppl.txt", "rb");
	char* text = malloc(1 << 20);
	size_t tl = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
	if (f) fclose(f);
	int32_t* ids = NULL;
	int n = 0;
	pv_tok_encode(tok, text, tl, 0, &ids, &n, err, sizeof err);
	double nll = 0, ref_nll = json_real_value(json_object_get(json_array_get(json_object_get(ppl, "per_chunk"), 0), "mean_nll"));
	if (n >= 512) {
		pv_session* s = NULL;
		struct pv_session_params sp = { .n_ctx = 512 };
		pv_session_new(&s, m, &sp, err, sizeof err);
		pv_session_eval(s, ids, 512, lg, PV_LOGITS_ALL);
		for (int t = 256; t < 511; t++) {
			const float* r = lg + (size_t)t * V;
			double mx = r[0], sum = 0;
			for (int i = 1; i < V; i++) mx = r[i] > mx ? r[i] : mx;
			for (int i = 0; i < V; i++) sum += exp(r[i] - mx);
			nll += -(r[ids[t + 1]] - mx - log(sum));
		}
		nll /= 255;
		pv_session_free(s);
	}
	CHECK(n >= 512 && fabs(nll - ref_nll) < 0.005, "perplexity chunk 1: mean NLL %.5f vs transformers %.5f", nll, ref_nll);
	printf("  real model: chunk-1 NLL %.5f vs %.5f (PPL %.4f vs %.4f)\n", nll, ref_nll, exp(nll), exp(ref_nll));
	free(ids);
	free(text);
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_real", setup, teardown);
}
