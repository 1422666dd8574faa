/*
 * replay.c: the acceptance-trace replay drafter, for measuring what speculation costs on a
 * model whose drafts mean nothing (random weights of a published shape). A trace recorded with a
 * real model and a real drafter says, step by step, how many tokens were drafted (d) and how
 * many of them the target accepted (a). Given the target's own plain continuation (the oracle),
 * this drafter proposes, at each step, the a tokens the target will choose followed by a token it
 * will not: the verify calls then have the real trace's shapes and the generator accepts exactly
 * the real counts, so the time measured is the real cost at the real acceptance.
 */
#include "spec/drafter.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

struct replay {
	const int32_t* seq; /* the expected history: prompt + the target's plain continuation */
	int n_seq;
	const uint8_t* steps; /* (drafted, accepted) per generator step */
	int n_steps, next;
};

static int replay_propose(void* ctx, const int32_t* hist, int n, int k, int32_t* out, char* err, size_t errlen)
{
	struct replay* r = ctx;
	if (r->next >= r->n_steps) return 0;
	int d = r->steps[2 * r->next], a = r->steps[2 * r->next + 1];
	r->next++;
	/* off the expected history (a different prompt, or the oracle is too short): no guess */
	if (n > r->n_seq || hist[n - 1] != r->seq[n - 1]) return 0;
	if (d > k) d = k;
	if (d > r->n_seq - n) d = r->n_seq - n;
	if (a > d) a = d;
	for (int i = 0; i < d; i++) out[i] = r->seq[n + i];
	/* the first rejected draft: any token but the target's choice */
	if (a < d) out[a] = out[a] > 0 ? out[a] - 1 : 1;
	return d;
}

static int replay_accept(void* ctx, const int32_t* hist, int n, const float* hidden, int hn, char* err, size_t errlen)
{
	return 0;
}

int pv_drafter_replay(struct pv_drafter* d, const int32_t* seq, int n_seq, const uint8_t* steps, int n_steps, char* err,
                      size_t errlen)
{
	if (!seq || n_seq < 1 || (!steps && n_steps) || n_steps < 0)
		return pv_errf(err, errlen, "speculation: a replay drafter needs the expected tokens and a trace");
	struct replay* r = pv_xcalloc(1, sizeof *r);
	*r = (struct replay){ seq, n_seq, steps, n_steps, 0 };
	*d = (struct pv_drafter){ "replay", r, replay_propose, replay_accept, free, 0 };
	return 0;
}
