/*
 * mtp.c: drafting with the model's own MTP head (proven.h pv_session_mtp). The head's cache row
 * p is computed from the target's hidden row at p and the token at p + 1 and predicts the token
 * at p + 2. After each verify step the generator hands over the hidden rows of the rows it kept
 * (history positions pos .. pos + r - 1) and the tokens after them (the accepted drafts, then
 * the pending token): one head call writes those cache rows, and its last row's prediction is
 * the next step's first draft. Further drafts chain: the head's own output row and the draft it
 * predicted go in at the next position. The chained rows are temporary: the next accept call
 * starts at the first of them and replaces them with rows from the target's hidden states.
 */
#include "spec/drafter.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MTP_ROWS 64 /* rows per head call when a prompt's rows are written */

struct mtp {
	pv_session* s;
	int H;
	int32_t next;     /* the head's prediction for the position after the pending token, -1: none */
	float* out;       /* [H] the head's last output row (chain input)                            */
	float* out2;      /* [H]                                                                      */
	float* rows;      /* [MTP_ROWS, H] output rows of one call                                    */
	int32_t ids[MTP_ROWS];
};

static int mtp_fail(struct mtp* t, char* err, size_t errlen)
{
	snprintf(err, errlen, "mtp: %s", pv_session_error(t->s));
	return -1;
}

/* Called with the hidden rows of history positions [n - 1 - hn, n - 1) and the history
 * hist[0, n) (pending last): writes the head's rows there; the last one predicts the next draft. */
static int mtp_accept(void* ctx, const int32_t* hist, int n, const float* hidden, int hn, char* err, size_t errlen)
{
	struct mtp* t = ctx;
	t->next = -1;
	if (!hidden || hn <= 0) return 0;
	const int pos = n - 1 - hn;
	if (pos > pv_session_mtp_length(t->s)) return 0; /* the head's cache has a gap: no drafts */
	for (int r = 0; r < hn; r += MTP_ROWS) {
		const int k = hn - r < MTP_ROWS ? hn - r : MTP_ROWS;
		if (pv_session_mtp(t->s, pos + r, hidden + (size_t)r * t->H, hist + pos + r + 1, k, t->ids, t->rows))
			return mtp_fail(t, err, errlen);
		if (r + k == hn) {
			t->next = t->ids[k - 1];
			memcpy(t->out, t->rows + (size_t)(k - 1) * t->H, sizeof(float) * (size_t)t->H);
		}
	}
	return 0;
}

/* The next draft, then chained ones: the head's own output row and the draft it predicted go in
 * at the next position (rows the next accept call replaces). */
static int mtp_propose(void* ctx, const int32_t* hist, int n, int k, int32_t* out, char* err, size_t errlen)
{
	struct mtp* t = ctx;
	if (t->next < 0) return 0;
	int m = 0;
	out[m++] = t->next;
	float *in = t->out, *o = t->out2;
	while (m < k && n - 1 + m < pv_session_n_ctx(t->s)) {
		if (pv_session_mtp(t->s, n - 2 + m, in, &out[m - 1], 1, &out[m], o)) return mtp_fail(t, err, errlen);
		m++;
		float* x = in;
		in = o;
		o = x;
	}
	return m;
}

static void mtp_free(void* ctx)
{
	struct mtp* t = ctx;
	free(t->out);
	free(t->out2);
	free(t->rows);
	free(t);
}

int pv_drafter_mtp(struct pv_drafter* d, pv_session* s, char* err, size_t errlen)
{
	const pv_model* m = pv_session_model(s);
	if (!pv_model_get_info(m)->n_mtp_layers)
		return pv_errf(err, errlen, "speculation: this model has no MTP head (draft mtp needs Qwen3-Next/3.5/3.6 with mtp.*)");
	struct mtp* t = pv_xcalloc(1, sizeof *t);
	t->s = s;
	t->H = pv_model_get_info(m)->hidden;
	t->next = -1;
	t->out = pv_xcalloc((size_t)t->H, sizeof(float));
	t->out2 = pv_xcalloc((size_t)t->H, sizeof(float));
	t->rows = pv_xcalloc((size_t)MTP_ROWS * t->H, sizeof(float));
	*d = (struct pv_drafter){ "mtp", t, mtp_propose, mtp_accept, mtp_free, 1 };
	return 0;
}
