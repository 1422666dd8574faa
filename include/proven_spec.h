/*
 * proven_spec.h: generation, plain or speculative, greedy or sampled, with one promise: the
 * tokens are the same either way, bit for bit.
 *
 * A generator drives one session. Each step it may ask a drafter for up to k tokens, evaluates
 * the pending token and the drafts as k + 1 rows in one exact call (PV_EVAL_EXACT: every row gets
 * the bits it would get alone), keeps the longest prefix of drafts that equal the model's own
 * choices, emits those and the model's next token, and brings the session back to what it has
 * accepted (a per-row snapshot, or a checkpoint and a replay). The model's choice at position p
 * is a function of the logits at p and, when sampling, of (seed, p) only: plain decoding makes
 * the same choices from the same logits, so speculation changes the speed, never the tokens.
 *
 * The session holds every emitted token but the last, which is pending: it is evaluated at the
 * start of the next step. A caller that stops early (a stop string) may truncate the session.
 */
#ifndef PROVEN_SPEC_H
#define PROVEN_SPEC_H

#include "proven.h"
#include "proven_text.h" /* struct pv_sampling */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pv_generator pv_generator;

enum pv_draft_kind {
	PV_DRAFT_NONE = 0, /* plain decoding                                                        */
	PV_DRAFT_NGRAM,    /* prompt lookup: the continuation of the latest earlier match of the last
	                    * ngram_max .. ngram_min tokens of the history                           */
	PV_DRAFT_MODEL,    /* a smaller model of the same vocabulary in its own session (draft)     */
	PV_DRAFT_MTP,      /* the model's own multi-token-prediction head (Qwen3-Next, Qwen3.5/3.6)  */
	PV_DRAFT_CASCADE,  /* n-gram drafts first, the draft model where the n-grams find nothing  */
	PV_DRAFT_REPLAY,   /* benchmarks: a recorded acceptance trace replayed against the target's
	                    * known continuation (replay_*): real verify shapes on a synth model   */
};

/* How the recurrent (DeltaNet) state returns to the accepted length after a partly rejected
 * verify call: loading a per-row snapshot the call kept, or restoring the checkpoint before the
 * call and replaying the accepted rows. AUTO picks the cheaper one for the model (README). */
enum pv_rollback_mode { PV_ROLLBACK_AUTO = 0, PV_ROLLBACK_SNAPSHOT, PV_ROLLBACK_REPLAY };

struct pv_spec_params {
	int draft;                 /* enum pv_draft_kind                                               */
	int k_max;                 /* most tokens drafted per step; 0: 8 (16 for n-grams)               */
	int ngram_min;             /* shortest suffix looked up; 0: 2                                    */
	int ngram_max;             /* longest; 0: 4                                                      */
	pv_session* draft_session; /* PV_DRAFT_MODEL / CASCADE: the draft model's session (its own
	                            * model; the same token ids). The generator keeps it in step.  */
	int fixed_k;               /* 1: always draft k_max; 0: the adaptive policy (draft length from
	                        * recent acceptance; off when the expected gain is below 1)          */
	int rollback;              /* enum pv_rollback_mode                                              */
	/* PV_DRAFT_REPLAY: the expected history (prompt + the target's plain continuation) and the
	 * trace, (drafted, accepted) per generator step; each step drafts the accepted tokens of the
	 * expected history and then one it will reject. Implies fixed_k (the trace has the policy's
	 * choices). Both arrays must stay alive while the generator does. */
	const int32_t* replay_seq;
	int replay_n_seq;
	const uint8_t* replay_steps;
	int replay_n_steps;
};

/* What a generator did (since it was created). */
struct pv_gen_stats {
	int64_t tokens;             /* emitted                                                        */
	int64_t steps;              /* generator steps (each emits >= 1 token)                        */
	int64_t verify_calls;       /* steps that evaluated drafts                                    */
	int64_t drafted;            /* draft tokens evaluated                                         */
	int64_t accepted;           /* of which accepted                                              */
	int64_t accepted_len[17];   /* verify steps by accepted drafts (16: 16 or more)               */
	int64_t rollbacks;          /* verify steps that rejected a draft                             */
	int64_t snapshot_restores;  /* ... brought back by a snapshot                                  */
	int64_t replayed_rows;      /* ... rows evaluated again by checkpoint + replay                */
	int64_t fallback_tokens;    /* tokens decided from host logits after a padded-row argmax       */
	int64_t policy_off_steps;   /* steps the adaptive policy ran plain                             */
	double prefill_s, decode_s; /* wall time in pv_generator_prompt and pv_generator_step          */
};

/* s must stay alive while the generator does; sampling and spec may be NULL (greedy, plain). */
int pv_generator_new(pv_generator** out, pv_session* s, const struct pv_sampling* sampling, const struct pv_spec_params* spec,
                     char* err, size_t errlen);
void pv_generator_free(pv_generator* g);
const char* pv_generator_error(const pv_generator* g);

/* Makes the session's history equal prompt[0, n) (reusing what it shares with it) and chooses
 * the first token, which becomes pending; *first receives it. */
int pv_generator_prompt(pv_generator* g, const int32_t* prompt, int n, int32_t* first);
/* One step: evaluates the pending token (and drafts), writes the tokens it decides after it into
 * out (1 .. max, max >= 1; at most 1 + k_max) and their count into *n_out; the last becomes
 * pending. Fails with PV_E_CONTEXT when the context cannot hold the pending token. */
int pv_generator_step(pv_generator* g, int32_t* out, int max, int* n_out);
void pv_generator_stats(const pv_generator* g, struct pv_gen_stats* st);

/* Several generators (one session each, any models) stepped together: the same tokens as
 * stepping each alone, bit for bit (each row keeps its own KV cache, state and arithmetic);
 * where the backend can, their rows share one forward pass (continuous batching: on the CPU,
 * generators without a drafter on sessions of one model (any architecture, hybrids included),
 * one cache type and one pool; on CUDA, the same on sessions of one attention-only model, cache
 * type and knobs, up to 16 rows per device step; the others are stepped one after another, with
 * the same results). out[i] has
 * room for max[i] tokens; rc[i] is each one's status. Returns PV_OK when every one succeeded. */
int pv_generator_step_many(pv_generator** g, int count, int32_t** out, const int* max, int* n_out, int* rc);

/* Log-probabilities of the emitted tokens (OpenAI logprobs / top_logprobs): log-softmax of the
 * model's raw logits (before temperature and filters) at each token's position. top_n 0..20:
 * how many alternatives per token (0: the token's own only); -1 turns it off (the default: greedy
 * generation then never copies logits). Applies from the next prompt or step. */
#define PV_TOP_LOGPROBS 20
struct pv_token_logprob {
	int32_t id;
	float logprob;
	int n_top;
	int32_t top_id[PV_TOP_LOGPROBS];
	float top_logprob[PV_TOP_LOGPROBS];
};
int pv_generator_set_logprobs(pv_generator* g, int top_n);
/* The tokens the last pv_generator_prompt / pv_generator_step emitted, in order (at most max);
 * returns the count (0 when logprobs are off). */
int pv_generator_logprobs(const pv_generator* g, struct pv_token_logprob* out, int max);

#ifdef __cplusplus
}
#endif
#endif
