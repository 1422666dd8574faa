/*
 * test_noalloc.c: "evaluating tokens allocates nothing" (proven.h), enforced. The program is
 * linked with -Wl,--wrap for the allocator entry points, so every allocation the library's code
 * makes goes through the counters below; while `armed`, one is a failure. Covered: evaluation
 * of every size (decode rows, verify windows, prompts on the fast and exact paths, quantized and
 * float weights), snapshot calls, truncation (snapshot and replay), checkpoints, sync, prefix
 * copies. Session creation may allocate (that is where the memory comes from).
 */
#include "fixture.h"
#include "harness.h"
#include "proven.h"

#include <stddef.h>

static int armed;
static long during;

void* __real_malloc(size_t n);
void* __real_calloc(size_t n, size_t s);
void* __real_realloc(void* p, size_t n);
void* __real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void** p, size_t a, size_t n);

void* __wrap_malloc(size_t n)
{
	during += armed;
	return __real_malloc(n);
}
void* __wrap_calloc(size_t n, size_t s)
{
	during += armed;
	return __real_calloc(n, s);
}
void* __wrap_realloc(void* p, size_t n)
{
	during += armed;
	return __real_realloc(p, n);
}
void* __wrap_aligned_alloc(size_t a, size_t n)
{
	during += armed;
	return __real_aligned_alloc(a, n);
}
int __wrap_posix_memalign(void** p, size_t a, size_t n)
{
	during += armed;
	return __real_posix_memalign(p, a, n);
}

static void exercise(pv_model* m, const int32_t* toks, int ntok, const char* name)
{
	const int V = pv_model_get_info(m)->vocab, H = pv_model_get_info(m)->hidden;
	struct pv_session_params sp = {
		.n_ctx = 128, .n_threads = 2, .n_snapshots = 8, .chunk_min_tokens = 16, .max_batch = 32
	};
	pv_session *s = NULL, *d = NULL;
	char err[256];
	CHECK(pv_session_new(&s, m, &sp, err, sizeof err) == PV_OK && pv_session_new(&d, m, &sp, err, sizeof err) == PV_OK,
	      "%s: sessions: %s", name, err);
	if (!s || !d) return;
	float* lg = malloc(sizeof(float) * V * 48);
	float* hid = malloc(sizeof(float) * H * 48);
	int32_t am[48];
	int reused;
	struct pv_eval_out all = { lg, 0, am, 0, hid, 0 };
	armed = 1;
	during = 0;
	int ok = pv_session_run(s, toks, 40, 0, &all) == PV_OK; /* a prompt: fast path, 2 steps */
	ok &= pv_session_checkpoint(s) == PV_OK;
	ok &= pv_session_run(s, toks + 40, 1, 0, &all) == PV_OK;           /* decode */
	ok &= pv_session_run(s, toks, 6, PV_EVAL_SNAPSHOT, &all) == PV_OK; /* a verify window */
	ok &= pv_session_truncate(s, 44) == PV_OK;                         /* into the snapshots */
	ok &= pv_session_truncate(s, 30) == PV_OK;                         /* checkpoint + replay */
	ok &= pv_session_run(s, toks, 20, PV_EVAL_EXACT, &all) == PV_OK;   /* exact long call */
	ok &= pv_session_sync(s, toks, ntok < 48 ? ntok : 48, 0, &all, &reused) == PV_OK;
	ok &= pv_session_checkpoint(s) == PV_OK;
	ok &= pv_session_copy_prefix(d, s, pv_session_length(s)) == PV_OK;
	ok &= pv_session_eval(d, toks, 3, lg, PV_LOGITS_ALL) == PV_OK;
	armed = 0;
	CHECK(ok, "%s: a call failed: %s / %s", name, pv_session_error(s), pv_session_error(d));
	CHECK(during == 0, "%s: %ld allocations during evaluation", name, during);
	pv_session_free(s);
	pv_session_free(d);
	free(lg);
	free(hid);
}

int main(void)
{
	char names[32][128];
	int nf = fx_list(fx_root(), names, 32);
	CHECK(nf >= 6, "fixtures: %d", nf);
	/* the counters see the library's allocations (a session's creation makes many) */
	{
		char dir[512], err[256];
		snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[0]);
		pv_model* m = NULL;
		pv_session* s = NULL;
		armed = 1;
		during = 0;
		int rc = pv_model_open(&m, dir, NULL, err, sizeof err) || pv_session_new(&s, m, NULL, err, sizeof err);
		armed = 0;
		CHECK(!rc && during > 10, "the allocation counters saw %ld allocations while opening a model", during);
		pv_session_free(s);
		pv_model_close(m);
	}
	for (int f = 0; f < nf; f++) {
		char dir[512], ref[600], err[512];
		snprintf(dir, sizeof dir, "%s/%s", fx_root(), names[f]);
		snprintf(ref, sizeof ref, "%s/reference.json", dir);
		json_t* j = json_load_file(ref, 0, NULL);
		int ntok = 0;
		int32_t* toks = fx_ids(json_object_get(json_array_get(json_object_get(j, "cases"), 0), "prompt"), &ntok);
		json_decref(j);
		pv_model* m = NULL;
		if (ntok >= 48 && pv_model_open(&m, dir, NULL, err, sizeof err) == PV_OK)
			exercise(m, toks, ntok, names[f]);
		else
			CHECK(0, "%s: fixture: %s", names[f], err);
		pv_model_close(m);
		free(toks);
	}
	/* a quantized model (the real one, when tools/get-model.sh has fetched it) */
	char buf[1024];
	const char* real = fx_real_model(buf, sizeof buf);
	if (real) {
		pv_model* m = NULL;
		char err[512];
		int32_t toks[48];
		for (int i = 0; i < 48; i++) toks[i] = 100 + 37 * i;
		if (pv_model_open(&m, real, NULL, err, sizeof err) == PV_OK) exercise(m, toks, 48, "real q4_k_m");
		pv_model_close(m);
	} else {
		printf("skip real model: not fetched (tools/get-model.sh)\n");
	}
	TEST_END("test_noalloc");
}
