/*
 * fixture.h: reading the conformance fixtures written by tools/reference/make_fixtures.py:
 * reference.json (prompts, transformers' greedy ids) and reference.safetensors (teacher-forced
 * logits as F32 tensors). The reader is independent of the engine's loader on purpose.
 */
#ifndef PV_FIXTURE_H
#define PV_FIXTURE_H

#include "harness.h"
#include "proven.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads F32 tensor `name` of a small safetensors file: returns malloc'd data, rows, cols. */
static inline float* fx_read_f32(const char* path, const char* name, int* rows, int* cols)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	unsigned char lb[8];
	float* out = NULL;
	char* hdr = NULL;
	if (fread(lb, 1, 8, f) != 8) goto done;
	uint64_t hl = 0;
	for (int i = 0; i < 8; i++) hl |= (uint64_t)lb[i] << (8 * i);
	if (hl > (1u << 24)) goto done;
	hdr = malloc(hl + 1);
	if (!hdr || fread(hdr, 1, hl, f) != hl) goto done;
	hdr[hl] = 0;
	json_t* j = json_loads(hdr, 0, NULL);
	json_t* t = j ? json_object_get(j, name) : NULL;
	json_t* shape = t ? json_object_get(t, "shape") : NULL;
	json_t* offs = t ? json_object_get(t, "data_offsets") : NULL;
	if (shape && offs && json_array_size(shape) == 2 && !strcmp(json_string_value(json_object_get(t, "dtype")), "F32")) {
		*rows = (int)json_integer_value(json_array_get(shape, 0));
		*cols = (int)json_integer_value(json_array_get(shape, 1));
		long b = (long)json_integer_value(json_array_get(offs, 0));
		size_t n = (size_t)*rows * *cols;
		out = malloc(n * 4);
		if (!out || fseek(f, 8 + (long)hl + b, SEEK_SET) || fread(out, 4, n, f) != n) {
			free(out);
			out = NULL;
		}
	}
	json_decref(j);
done:
	free(hdr);
	fclose(f);
	return out;
}

/* JSON int array -> malloc'd int32 array. */
static inline int32_t* fx_ids(json_t* a, int* n)
{
	*n = (int)json_array_size(a);
	int32_t* v = malloc(sizeof(int32_t) * (*n ? *n : 1));
	for (int i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
	return v;
}

/* Lists fixture directories (those holding reference.json), sorted. Returns count. */
static inline int fx_list(const char* root, char names[][128], int max)
{
	DIR* d = opendir(root);
	if (!d) return 0;
	int n = 0;
	struct dirent* e;
	while ((e = readdir(d)) && n < max) {
		if (e->d_name[0] == '.') continue;
		char p[600];
		snprintf(p, sizeof(p), "%s/%s/reference.json", root, e->d_name);
		FILE* f = fopen(p, "r");
		if (!f) continue;
		fclose(f);
		snprintf(names[n++], 128, "%s", e->d_name);
	}
	closedir(d);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (strcmp(names[i], names[j]) > 0) {
				char t[128];
				memcpy(t, names[i], 128);
				memcpy(names[i], names[j], 128);
				memcpy(names[j], t, 128);
			}
	return n;
}

static inline const char* fx_root(void)
{
	const char* r = getenv("PV_FIXTURES");
	return r ? r : "tests/fixtures";
}

/* The real Qwen2.5-Coder-0.5B GGUF of tools/get-model.sh: $PV_REAL_MODEL, else the cache
 * ($PROVEN_CACHE or ~/.cache/proven), else a copy beside the repository (shared/data, see
 * t_shared_path); NULL when absent. */
static inline const char* fx_real_model(char* buf, size_t n)
{
	const char* env = getenv("PV_REAL_MODEL");
	if (env && t_exists(env)) return env;
	const char* cache = getenv("PROVEN_CACHE");
	const char* home = getenv("HOME");
	if (cache) snprintf(buf, n, "%s/qwen2.5-coder-0.5b.gguf", cache);
	else snprintf(buf, n, "%s/.cache/proven/qwen2.5-coder-0.5b.gguf", home ? home : "/tmp");
	if (t_exists(buf)) return buf;
	return t_shared_path(buf, n, "data/qwen2.5-coder-0.5b.gguf");
}

/* max |lg[ids[i]] - vals[i]| over a reference's (ids, values) arrays */
static inline double fx_max_err_ids(const float* lg, json_t* ids, json_t* vals)
{
	double e = 0;
	for (size_t i = 0; i < json_array_size(ids); i++) {
		double d = fabs(lg[json_integer_value(json_array_get(ids, i))] - json_real_value(json_array_get(vals, i)));
		if (!(d <= e)) e = d;
	}
	return e;
}

/* ---- sessions over a fixture (tests/test_api.c, tests/cuda/test_cuda_api.c) ------------------ */

/* A session for the API tests: context 160, chunk_min 16 (calls of 16+ rows without
 * PV_EVAL_EXACT may take a fast path, so 40-row calls test both paths), the given snapshot
 * slots, KV cache type and threads (0: the backend's default). */
static inline pv_session* fx_session(pv_model* m, int n_snapshots, int cache_type, int threads)
{
	struct pv_session_params sp = { .n_ctx = 160, .n_threads = threads, .n_snapshots = n_snapshots,
		                        .chunk_min_tokens = 16, .cache_type = cache_type };
	pv_session* s = NULL;
	char err[256];
	int rc = pv_session_new(&s, m, &sp, err, sizeof err);
	CHECK(rc == PV_OK, "session: %s", err);
	return s;
}

/* Evaluates toks one call per `step` rows on the exact path; logits of every row into lg. */
static inline int fx_run_exact(pv_session* s, const int32_t* toks, int n, int step, float* lg, int V)
{
	for (int i = 0; i < n; i += step) {
		int k = n - i < step ? n - i : step;
		struct pv_eval_out o = { lg ? lg + (size_t)i * V : NULL, 0, NULL, 0, NULL, 0 };
		if (pv_session_run(s, toks + i, k, PV_EVAL_EXACT, &o)) {
			fprintf(stderr, "run: %s\n", pv_session_error(s));
			return -1;
		}
	}
	return 0;
}

/* bitwise equal float arrays */
static inline int fx_same(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

#endif
