/*
 * drafter.h: what proposes draft tokens, behind one small interface. A drafter sees the whole
 * history (prompt, emitted tokens, and the pending token last) and proposes up to k tokens that
 * follow it; after each verify step it is told what the target accepted.
 */
#ifndef PV_SPEC_DRAFTER_H
#define PV_SPEC_DRAFTER_H

#include "proven_spec.h"

struct pv_drafter {
	const char* name;
	void* ctx;
	/* up to k tokens following hist[0, n) into out; returns how many (0: no guess), or < 0 with
	 * a message in err on a failure of the drafter's own session */
	int (*propose)(void* ctx, const int32_t* hist, int n, int k, int32_t* out, char* err, size_t errlen);
	/* the history now is hist[0, n) (pending last); hidden: the target's final-norm rows of the
	 * last verify call's accepted rows, rows hidden_n, first at history position n - hidden_n
	 * (NULL when the generator did not ask for them) */
	int (*accept)(void* ctx, const int32_t* hist, int n, const float* hidden, int hidden_n, char* err, size_t errlen);
	void (*free)(void* ctx);
	int wants_hidden; /* the generator asks verify calls for hidden rows (MTP) */
};

/* ngram.c: prompt lookup over the history. */
int pv_drafter_ngram(struct pv_drafter* d, int ngram_min, int ngram_max);
/* draft_model.c: a smaller model's session, kept in step with the history. */
int pv_drafter_model(struct pv_drafter* d, pv_session* draft, int target_vocab, char* err, size_t errlen);
/* mtp.c: the model's own MTP head, computed by the backend beside the session. */
int pv_drafter_mtp(struct pv_drafter* d, pv_session* s, char* err, size_t errlen);
/* cascade: n-grams first, the draft model where they find nothing (draft_model.c). */
int pv_drafter_cascade(struct pv_drafter* d, pv_session* draft, int target_vocab, int ngram_min, int ngram_max, char* err,
                       size_t errlen);
/* replay.c: an acceptance trace replayed against the target's known continuation (benchmarks). */
int pv_drafter_replay(struct pv_drafter* d, const int32_t* seq, int n_seq, const uint8_t* steps, int n_steps, char* err,
                      size_t errlen);

#endif
