/*
 * backend.h: the one seam between the engine and a compute backend. The CPU backend (src/cpu/)
 * is the reference; the CUDA backend (src/cuda/) implements the same calls over device memory.
 * The engine (session.c) owns everything backend-neutral: parameters, the token history, which
 * rows of a call get which outputs, splitting a call into steps, checkpoint and snapshot
 * bookkeeping, truncation. src/api.c is the only file that names a backend.
 *
 * Every int-returning call returns PV_OK or a negative enum pv_status, with the reason in
 * s->err (session calls) or err (the others). PV_E_DEVICE marks the session failed for good.
 */
#ifndef PV_BACKEND_H
#define PV_BACKEND_H

#include "proven.h"
#include "proven_dev.h"

#include <stddef.h>
#include <stdint.h>

struct pv_model;
struct pv_session;

/* One backend forward call: rows tokens[0, n) at positions pos0 .. pos0 + n - 1 (n <= the
 * session's max_batch). Outputs cover rows [row0, n) of this step, host memory; row0 == n (or
 * a NULL pointer): none. The engine has already checked every argument. */
struct pv_step {
	const int32_t* tokens;
	int n;
	int pos0;
	int exact;         /* 1: the batch-invariant path only (recurrent DeltaNet, GEMV kernels)     */
	int snap_row0;     /* >= 0: keep the recurrent state after row t in snapshot slot snap_row0 + t
	                    * (implies exact); -1: no snapshots                                         */
	float* logits;     int logits_row0;   /* [n - row0, vocab]                                     */
	int32_t* argmax;   int argmax_row0;   /* [n - row0]                                            */
	float* hidden;     int hidden_row0;   /* [n - row0, hidden]                                    */
};

/* Where copy_prefix takes the recurrent state at n from. */
enum pv_state_from { PV_STATE_CURRENT = 0, PV_STATE_CHECKPOINT = 1, PV_STATE_SNAPSHOT = 2 };

struct pv_backend {
	const char* name;
	/* per model: upload weights (knobs applied), free them, list the knobs (count) */
	int (*model_init)(struct pv_model* m, const struct pv_model_params* p, char* err, size_t errlen);
	void (*model_free)(struct pv_model* m);
	int (*model_knobs)(const struct pv_model* m, const struct pv_knob** out);
	int (*model_device_stats)(const struct pv_model* m, struct pv_model_device_stats* st);
	/* bytes a session with these (defaulted) parameters allocates on this backend */
	uint64_t (*session_bytes)(const struct pv_model* m, const struct pv_session_params* p);
	/* per session: KV cache, recurrent state, s->n_ckpt_slots checkpoint slots, s->n_snapshots
	 * snapshot slots, scratch, and anything the first eval would otherwise set up (graphs,
	 * library handles): evaluation allocates nothing */
	int (*session_init)(struct pv_session* s, const struct pv_session_params* p, char* err, size_t errlen);
	void (*session_free)(struct pv_session* s);
	int (*forward)(struct pv_session* s, const struct pv_step* st);
	/* one-row steps st[i] of count sessions of one model, evaluated together (continuous
	 * batching): each row's outputs bitwise what forward(s[i], &st[i]) gives. 0, a negative
	 * status, or 1: not covered (the engine then calls forward for each). With 0, a session
	 * whose row is not finite has been failed (pv_session_fail, PV_E_NUMERIC: sticky), as its
	 * own forward would have; the engine reports it and leaves its history alone. May be NULL. */
	int (*forward_many)(struct pv_session** s, const struct pv_step* st, int count);
	/* the recurrent state (every linear layer's S and conv window) to / from a checkpoint slot,
	 * from a snapshot slot, or zeroed */
	int (*state_save)(struct pv_session* s, int slot);
	int (*state_load)(struct pv_session* s, int slot);
	int (*snapshot_load)(struct pv_session* s, int slot);
	int (*state_reset)(struct pv_session* s);
	/* dst's KV rows [0, n) from src's, and its current recurrent state from src's state at n
	 * (from: enum pv_state_from; index: the checkpoint or snapshot slot) */
	int (*copy_prefix)(struct pv_session* dst, const struct pv_session* src, int n, int from, int index);
	/* the MTP head (proven.h pv_session_mtp; arguments checked; NULL: unsupported) */
	int (*mtp)(struct pv_session* s, int pos, const float* hidden, const int32_t* tokens, int n, int32_t* argmax,
	           float* hidden_out);
	/* the backend's counters into st (the engine fills the rest) */
	void (*stats)(const struct pv_session* s, struct pv_session_stats* st);
	/* diagnostics (may be NULL: PV_E_UNSUPPORTED) */
	int (*profile)(struct pv_session* s, int32_t token, int reps, struct pv_profile* out);
	int (*device_info)(struct pv_device_info* d, char* err, size_t errlen);
	int (*membw)(size_t bytes, int reps, double* gb_s, char* err, size_t errlen);
	/* per-op timing of the steps evaluated between on = 1 and on = 0 (the latter fills out,
	 * proven_dev.h pv_session_profile_stop); NULL: unsupported */
	int (*profile_rows)(struct pv_session* s, int on, struct pv_profile* out);
};

/* The registry (src/api.c): a backend by name, NULL when unknown or not built. */
const struct pv_backend* pv_backend_find(const char* name);

#endif
