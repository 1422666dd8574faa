/*
 * draft_model.c: a smaller model of the same vocabulary drafting in its own session (greedy,
 * one row per token: its argmax ids never leave the device on a GPU). Before each proposal the
 * draft session is synced to the target's history (it keeps the longest common prefix: after a
 * rejection that is a truncation, cheap with the checkpoint taken at every sync). The cascade
 * asks the n-grams first.
 */
#include "spec/drafter.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>

struct draft_model {
	pv_session* s;
	int vocab;             /* the target's: drafts at or above it end the draft */
	int draft_vocab;       /* the draft's: a history with a token at or above it gets no draft */
	struct pv_drafter ngram; /* cascade: asked first (ctx NULL: not a cascade) */
};

static int model_propose(void* ctx, const int32_t* hist, int n, int k, int32_t* out, char* err, size_t errlen)
{
	struct draft_model* dm = ctx;
	if (dm->ngram.ctx) {
		int m = dm->ngram.propose(dm->ngram.ctx, hist, n, k, out, err, errlen);
		if (m) return m;
	}
	if (n >= pv_session_n_ctx(dm->s)) return 0; /* the draft's context is full: no guess */
	for (int i = 0; i < n; i++)
		if (hist[i] >= dm->draft_vocab) return 0; /* a token the draft model does not have */
	int32_t t = 0;
	struct pv_eval_out o = { NULL, 0, &t, 0, NULL, 0 };
	int reused = 0;
	if (pv_session_sync(dm->s, hist, n, 0, &o, &reused) || pv_session_checkpoint(dm->s)) {
		snprintf(err, errlen, "draft model: %s", pv_session_error(dm->s));
		return -1;
	}
	int m = 0;
	while (m < k && t >= 0 && t < dm->vocab) {
		out[m++] = t;
		if (m == k || pv_session_length(dm->s) >= pv_session_n_ctx(dm->s)) break;
		if (pv_session_run(dm->s, &out[m - 1], 1, 0, &o)) {
			snprintf(err, errlen, "draft model: %s", pv_session_error(dm->s));
			return -1;
		}
	}
	return m;
}

static int model_accept(void* ctx, const int32_t* hist, int n, const float* hidden, int hn, char* err, size_t errlen)
{
	return 0; /* the next proposal syncs */
}

static void model_free(void* ctx)
{
	struct draft_model* dm = ctx;
	if (dm->ngram.free) dm->ngram.free(dm->ngram.ctx);
	free(dm);
}

int pv_drafter_model(struct pv_drafter* d, pv_session* draft, int target_vocab, char* err, size_t errlen)
{
	if (!draft) return pv_errf(err, errlen, "speculation: a draft model needs its session (pv_spec_params.draft_session)");
	struct draft_model* dm = pv_xcalloc(1, sizeof *dm);
	dm->s = draft;
	dm->vocab = target_vocab;
	dm->draft_vocab = pv_model_get_info(pv_session_model(draft))->vocab;
	*d = (struct pv_drafter){ "model", dm, model_propose, model_accept, model_free, 0 };
	return 0;
}

int pv_drafter_cascade(struct pv_drafter* d, pv_session* draft, int target_vocab, int ngram_min, int ngram_max, char* err,
                       size_t errlen)
{
	if (pv_drafter_model(d, draft, target_vocab, err, errlen)) return -1;
	struct draft_model* dm = d->ctx;
	pv_drafter_ngram(&dm->ngram, ngram_min, ngram_max);
	d->name = "cascade";
	return 0;
}
