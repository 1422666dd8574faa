/*
 * many.h: continuous batching (the seam's forward_many) against stepping alone, the check the CPU
 * API test (tests/test_api.c) and the CUDA one (tests/cuda/test_cuda_api.c) share. Needs the
 * engine's pv_session_run_many (engine/session.h).
 */
#ifndef PV_TEST_MANY_H
#define PV_TEST_MANY_H

#include "engine/session.h"
#include "fixture.h"
#include "proven_dev.h"

/* Continuous batching (the seam's forward_many) against stepping alone. k sessions of m (KV cache
 * type cache[i]; contexts 96 / 128 / 160 by turns, or 160 each with o->same_ctx; max_batch
 * o->max_batch; pool o->pool, may be NULL), prompt i of 3 + (7 i) % 37 tokens from toks + i % 5
 * (different positions); then `steps` steps of every session together (pv_session_run_many, as
 * pv_generator_step_many does) and, on a twin set, alone (one-row exact calls): every row's
 * logits, final-norm row (memcmp), argmax and length each step. o->shuffle: at step j session
 * j % k steps alone (before the others) and the rest go together in the order j + 1, j + 2, ...
 * (mod k), so the batch's first session and every row's place change from step to step.
 * o->tally (may be NULL) sees each batch session before it is freed. Returns the rows that went
 * together (batched_rows), or (uint64_t)-1. */
struct fx_many {
	int same_ctx, max_batch, shuffle;
	pv_pool* pool;
	void (*tally)(pv_session* s, void* arg);
	void* arg;
};

static inline uint64_t fx_many_run(pv_model* m, const int32_t* toks, const char* name, const char* what, int k, int steps,
                                   const int* cache, const struct fx_many* o)
{
	enum { KMAX = 17 };
	const int V = pv_model_get_info(m)->vocab, H = pv_model_get_info(m)->hidden;
	pv_session *bs[KMAX] = { 0 }, *as[KMAX] = { 0 };
	int32_t tok_b[KMAX], tok_a[KMAX], am_b[KMAX], am_a[KMAX];
	float* lg_b = malloc(sizeof(float) * (size_t)V * k);
	float* lg_a = malloc(sizeof(float) * (size_t)V * k);
	float* hd_b = malloc(sizeof(float) * (size_t)H * k);
	float* hd_a = malloc(sizeof(float) * (size_t)H * k);
	struct pv_eval_out ob[KMAX];
	int rc[KMAX], ok = k <= KMAX;
	char err[256] = "";
	uint64_t batched = 0;
	for (int i = 0; i < k && ok; i++) {
		struct pv_session_params sp = { .n_ctx = o->same_ctx ? 160 : 96 + 32 * (i % 3), .max_batch = o->max_batch,
			                        .chunk_min_tokens = 16, .cache_type = cache[i], .pool = o->pool };
		ok = pv_session_new(&bs[i], m, &sp, err, sizeof err) == PV_OK && pv_session_new(&as[i], m, &sp, err, sizeof err) == PV_OK;
		CHECK(ok, "%s many %s: session %d: %s", name, what, i, err);
		const int plen = 3 + (7 * i) % 37, off = i % 5;
		ok = ok && fx_run_exact(bs[i], toks + off, plen, plen, NULL, V) == 0 &&
		     fx_run_exact(as[i], toks + off, plen, plen, NULL, V) == 0;
		tok_b[i] = tok_a[i] = toks[off + plen];
	}
	CHECK(ok, "%s many %s: prompts (k = %d)", name, what, k);
	for (int j = 0; j < steps && ok; j++) {
		for (int i = 0; i < k; i++) ob[i] = (struct pv_eval_out){ lg_b + (size_t)i * V, 0, &am_b[i], 0, hd_b + (size_t)i * H, 0 };
		if (o->shuffle) {
			pv_session* pb[KMAX];
			int32_t pt[KMAX];
			struct pv_eval_out po[KMAX];
			const int e = j % k;
			ok = pv_session_run(bs[e], &tok_b[e], 1, PV_EVAL_EXACT, &ob[e]) == PV_OK;
			for (int q = 1; q < k; q++) {
				const int i = (j + q) % k;
				pb[q - 1] = bs[i];
				pt[q - 1] = tok_b[i];
				po[q - 1] = ob[i];
			}
			ok = ok && pv_session_run_many(pb, pt, k - 1, po, rc) == PV_OK;
		} else {
			ok = pv_session_run_many(bs, tok_b, k, ob, rc) == PV_OK;
		}
		CHECK(ok, "%s many %s k=%d step %d: run_many: %s", name, what, k, j, pv_session_error(bs[0]));
		for (int i = 0; i < k && ok; i++) {
			struct pv_eval_out oa = { lg_a + (size_t)i * V, 0, &am_a[i], 0, hd_a + (size_t)i * H, 0 };
			ok = pv_session_run(as[i], &tok_a[i], 1, PV_EVAL_EXACT, &oa) == PV_OK;
		}
		CHECK(ok, "%s many %s k=%d step %d: alone", name, what, k, j);
		if (!ok) break;
		int bad = -1;
		for (int i = 0; i < k && bad < 0; i++)
			if (am_b[i] != am_a[i] || !fx_same(lg_b + (size_t)i * V, lg_a + (size_t)i * V, (size_t)V) ||
			    !fx_same(hd_b + (size_t)i * H, hd_a + (size_t)i * H, (size_t)H) || am_b[i] != pv_argmax(lg_b + (size_t)i * V, V) ||
			    pv_session_length(bs[i]) != pv_session_length(as[i]))
				bad = i;
		CHECK(bad < 0, "%s many %s k=%d step %d: session %d's row differs from its own step (argmax %d vs %d)", name, what,
		      k, j, bad, bad < 0 ? 0 : am_b[bad], bad < 0 ? 0 : am_a[bad]);
		ok = bad < 0;
		for (int i = 0; i < k; i++) {
			tok_b[i] = am_b[i];
			tok_a[i] = am_a[i];
		}
	}
	for (int i = 0; i < k && i < KMAX; i++) {
		struct pv_session_stats st;
		if (bs[i] && !pv_session_get_stats(bs[i], &st)) batched += st.batched_rows;
		if (bs[i] && o->tally) o->tally(bs[i], o->arg);
		pv_session_free(bs[i]);
		pv_session_free(as[i]);
	}
	free(lg_b);
	free(lg_a);
	free(hd_b);
	free(hd_a);
	return ok ? batched : (uint64_t)-1;
}

#endif
