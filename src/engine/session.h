/*
 * session.h: the backend-neutral state behind pv_session. What a backend keeps (KV cache,
 * recurrent states, scratch) is in s->be_state, a struct of that backend's own (cpu/state.h,
 * cuda/session.cuh); the engine never looks inside it.
 */
#ifndef PV_SESSION_H
#define PV_SESSION_H

#include "model/model.h"
#include "proven_dev.h"

struct pv_checkpoint {
	int len;     /* session length when taken                                         */
	int slot;    /* backend storage slot holding the state                            */
};

struct pv_backend;

struct pv_session {
	const struct pv_model* m;
	const struct pv_backend* be;
	void* be_state;      /* backend-private                                             */
	struct pv_pool* pool;/* CPU work (shared, or owned when own_pool)                   */
	int own_pool;
	int n_threads;       /* threads of pool                                             */
	int n_ctx;
	int cache_type;      /* enum pv_cache_type of the KV cache, resolved (never DEFAULT) */
	int max_batch;       /* B: rows per backend step                                    */
	int chunk_min;       /* calls of at least this many rows may take the fast path     */
	int len;             /* tokens seen                                                 */
	int32_t* tokens;     /* [n_ctx] history                                             */
	size_t state_floats; /* floats of the recurrent state (all linear layers), 0: none  */

	struct pv_checkpoint* ckpt; /* oldest first                                        */
	int n_ckpt_slots, n_ckpt;
	/* the last PV_EVAL_SNAPSHOT call: the state after history position snap_base + r (length
	 * snap_base + r + 1) is in snapshot slot r, for r < snap_n */
	int n_snapshots, snap_base, snap_n;
	/* the MTP head (pv_session_mtp): its KV cache holds rows [0, mtp_len) */
	int mtp_on, mtp_len;

	/* RoPE tables [n_ctx, R/2] (engine/rope.c), computed once per session, shared by backends */
	float *rope_cos, *rope_sin;

	struct pv_session_stats stats;
	int failed;          /* a device failure: every later call fails                   */
	char err[256];
};

/* engine/rope.c: cos/sin of pos * theta^(-2i/R) for pos < n_ctx, i < R/2, in f32 as
 * transformers computes them ([n_ctx, R/2] each). -1 when out of memory. */
int pv_rope_tables(const struct pv_config* c, int n_ctx, float** cos_out, float** sin_out);

/* One token for each of count sessions of one model (continuous batching), on the exact path:
 * evaluated together where the backend can (forward_many), one after another otherwise; each
 * session ends as pv_session_run(s[i], &tokens[i], 1, PV_EVAL_EXACT, &out[i]) leaves it, bit for
 * bit (out[i]'s rows 0 only). rc[i]: each one's status. Returns PV_OK when every one succeeded. */
int pv_session_run_many(struct pv_session** s, const int32_t* tokens, int count, const struct pv_eval_out* out, int* rc);

/* Sets s->err from a status and message and returns the status (session.c's error helper). */
int pv_session_fail(struct pv_session* s, int status, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* floats of one linear layer's recurrent state (S, then the conv window) */
size_t pv_state_floats_per_layer(const struct pv_config* c);

#endif
