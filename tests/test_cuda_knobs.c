/*
 * test_cuda_knobs.c: the CUDA backend's tuning switches as pv_model_open reads them (src/cuda/
 * tuning.cu), on any machine: the knobs are read before the device is touched, so an unknown
 * name or a bad value fails the open with PV_E_INVALID even without a GPU. A good knobs string
 * passes that stage (PV_OK with a GPU, PV_E_DEVICE without one); with a GPU the values in effect
 * are checked too (tests/cuda/test_cuda_api.c checks them again on the device). Builds without
 * the CUDA backend: the open says PV_E_UNSUPPORTED, and that is all there is to check.
 */
#include "fixture.h"
#include "harness.h"
#include "proven.h"
#include "proven_dev.h"

static char g_dir[600];

/* Opens the fixture on the CUDA backend with knobs; returns the status, err filled. */
static int open_cuda(const char* knobs, pv_model** m, char* err, size_t n)
{
	struct pv_model_params p = { .backend = "cuda", .knobs = knobs };
	*m = NULL;
	err[0] = 0;
	return pv_model_open(m, g_dir, &p, err, n);
}

static int knob(pv_model* m, const char* name, int* def)
{
	const struct pv_knob* k = NULL;
	int n = pv_model_knobs(m, &k);
	for (int i = 0; i < n; i++)
		if (!strcmp(k[i].name, name)) {
			if (def) *def = k[i].def;
			return k[i].value;
		}
	return -12345;
}

/* A knobs string that must be refused, and a word its message must contain. */
static void refused(const char* knobs, const char* word)
{
	pv_model* m;
	char err[512];
	int rc = open_cuda(knobs, &m, err, sizeof err);
	CHECK(rc == PV_E_INVALID && !m && strstr(err, word), "knobs \"%s\": %s (%s), want PV_E_INVALID naming %s", knobs,
	      pv_status_name(rc), err, word);
	pv_model_close(m);
}

int main(void)
{
	snprintf(g_dir, sizeof g_dir, "%s/qwen3", fx_root());
	pv_model* m;
	char err[512];
	if (!strstr(pv_build_info()->backends, "cuda")) {
		int rc = open_cuda(NULL, &m, err, sizeof err);
		CHECK(rc == PV_E_UNSUPPORTED && !m, "no CUDA backend: open gave %s (%s)", pv_status_name(rc), err);
		printf("test_cuda_knobs: this build has no CUDA backend: only the refusal checked\n");
		TEST_END("test_cuda_knobs");
	}
	refused("cuda.bogus=1", "bogus");
	refused("bogus", "bogus");
	refused("cuda.pdl", "cuda.pdl");                /* no value                    */
	refused("cuda.pdl=2", "cuda.pdl");              /* out of range                */
	refused("cuda.pdl=1x", "cuda.pdl");             /* trailing junk               */
	refused("cuda.att_split=48", "cuda.att_split"); /* not a power of two         */
	refused("cuda.att_split=128", "cuda.att_split");
	refused("cuda.prefill_attn=f16", "cuda.prefill_attn");
	refused("cuda.gemv_tma=4", "cuda.gemv_tma");
	refused("cuda.prefill_chunk=0", "cuda.prefill_chunk");
	refused("cuda.pdl=0,cuda.bogus=1", "bogus"); /* one bad entry fails the lot */
	/* the environment is read too, and a bad value there is refused with the variable's name */
	setenv("PV_CUDA_ATT_SPLIT", "48", 1);
	refused(NULL, "PV_CUDA_ATT_SPLIT");
	unsetenv("PV_CUDA_ATT_SPLIT");

	/* good strings pass the knobs stage (names with or without "cuda.", words, spaces) */
	setenv("PV_CUDA_PDL", "0", 1); /* the knobs string wins over the environment */
	setenv("PV_CUDA_GEMV_PIPE", "1", 1);
	int rc = open_cuda(" cuda.pdl = 1, att_split=64,cuda.prefill_delta=cols , prefill_attn=f32,", &m, err, sizeof err);
	unsetenv("PV_CUDA_PDL");
	unsetenv("PV_CUDA_GEMV_PIPE");
	CHECK(rc == PV_OK || rc == PV_E_DEVICE, "good knobs: %s (%s)", pv_status_name(rc), err);
	if (rc == PV_OK) {
		const struct pv_knob* k = NULL;
		int def = -1;
		CHECK(pv_model_knobs(m, &k) == 30 && k, "30 knobs listed");
		CHECK(knob(m, "cuda.pdl", &def) == 1 && def == 1, "cuda.pdl: knobs over the environment");
		CHECK(knob(m, "cuda.gemv_pipe", &def) == 1 && def == 0, "cuda.gemv_pipe from the environment");
		CHECK(knob(m, "cuda.att_split", &def) == 64 && def == 32, "cuda.att_split");
		CHECK(knob(m, "cuda.prefill_delta", NULL) == 2 && knob(m, "cuda.prefill_attn", NULL) == 1, "word values");
		CHECK(knob(m, "cuda.prefill", &def) == 1 && def == 1, "an untouched knob keeps its default");
		pv_model_close(m);
	} else {
		printf("test_cuda_knobs: no CUDA device (%s): the values in effect are not checked here\n", err);
	}
	TEST_END("test_cuda_knobs");
}
