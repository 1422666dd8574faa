/*
 * backend.h: the one seam between the engine and a compute backend. The CPU backend
 * (cpu_backend.c) is the reference; a GPU backend implements the same calls over device memory.
 * session.c owns everything backend-neutral: parameters, token history, checkpoint bookkeeping,
 * splitting a call into steps, rollback.
 */
#ifndef PV_BACKEND_H
#define PV_BACKEND_H

#include <stddef.h>
#include <stdint.h>

struct pv_model;
struct pv_session;

struct pv_backend {
	const char* name;
	/* per model (optional): upload weights, free them */
	int (*model_init)(struct pv_model* m, char* err, size_t errlen);
	void (*model_free)(struct pv_model* m);
	/* per session: KV cache, recurrent state, n_ckpt_slots checkpoint slots, scratch */
	int (*session_init)(struct pv_session* s, char* err, size_t errlen);
	void (*session_free)(struct pv_session* s);
	/* one step of n <= max_batch rows at positions s->len...; logits rows [first, n) into
	 * logits (ld = vocab, host memory) unless NULL; same contract as pv_forward (session.h).
	 * Returns 0, or -1 with the reason in s->err (a device error; the session is then unusable) */
	int (*forward)(struct pv_session* s, const int32_t* tokens, int n, float* logits, int first_logit, int chunked);
	/* recurrent state (every linear layer's S and conv window) to / from a checkpoint slot */
	void (*state_save)(struct pv_session* s, int slot);
	void (*state_load)(struct pv_session* s, int slot);
	void (*state_reset)(struct pv_session* s);
};

extern const struct pv_backend pv_backend_cpu;

#endif
