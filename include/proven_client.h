/*
 * proven_client.h: the client side of proven-server's local shared-memory protocol
 * (`proven-server --socket PATH`), a small static library (libproven_client.a) that needs neither
 * the engine nor jansson: a remote session behaves like a pv_session of proven.h, run by the
 * server's engine in the server's process.
 *
 * Transport: a UNIX socket (SOCK_SEQPACKET) carries fixed-size control messages; one
 * shared-memory segment per session (a memfd the server creates with mode 0600 and passes over the
 * socket) carries the token ids in and the ids, logits and hidden rows out, so no bulk data is
 * copied through the socket. The server accepts only peers of its own uid (SO_PEERCRED; the
 * socket file is 0600 too). A session is one connection: closing it, or the client process
 * dying, frees the server's session at once.
 *
 * Crossings (one request message and one reply each): pvc_run / pvc_sync / pvc_truncate /
 * pvc_rollback / pvc_checkpoint one per call (a call is one forward for the run calls);
 * pvc_generate one per request whatever the number of tokens. pvc_stats counts them.
 *
 * Errors: calls return PV_OK (0) or a negative enum pv_status (proven.h); a broken connection is
 * PV_E_IO. pvc_error tells the last failure's message (the server's, when it comes from there).
 */
#ifndef PROVEN_CLIENT_H
#define PROVEN_CLIENT_H

#include "proven.h" /* enum pv_status, struct pv_eval_out, PV_EVAL_* (declarations only) */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pvc_session pvc_session;

struct pvc_params {
	int n_ctx;       /* 0: the server's --ctx                                                  */
	int max_rows;    /* most rows one pvc_run may return outputs for (sizes the segment); 0: 64 */
	int n_snapshots; /* as pv_session_params.n_snapshots                                       */
};

/* What the server reports at connection. */
struct pvc_info {
	int vocab, hidden, n_ctx, max_rows;
	char model[128];     /* the model's id                                                      */
	char arch[32];
	uint64_t shm_bytes;  /* the segment's size                                                  */
};

/* Connects to the server's socket and opens a remote session. PV_OK, or a status with a
 * message in err (PV_E_IO: no server there; PV_E_INVALID: refused, e.g. another uid). */
int pvc_open(pvc_session** out, const char* socket_path, const struct pvc_params* params, char* err, size_t errlen);
void pvc_close(pvc_session* s);
const struct pvc_info* pvc_get_info(const pvc_session* s);
const char* pvc_error(const pvc_session* s);

/* As pv_session_run: the outputs are copied from the segment into out's arrays (rows [row0, n);
 * at most max_rows rows of each). */
int pvc_run(pvc_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out);
/* As pv_session_sync (outputs of the last row only). */
int pvc_sync(pvc_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out, int* reused);
int pvc_truncate(pvc_session* s, int n);
int pvc_rollback(pvc_session* s, int n);
int pvc_checkpoint(pvc_session* s);
int pvc_length(const pvc_session* s); /* after the last call (no crossing) */

/* Generation, plain or speculative (the same tokens either way), done in the server in one
 * crossing. Stops after max_tokens, at an end-of-generation id of the model (not included in out),
 * or when the context is full. */
struct pvc_gen_params {
	int max_tokens;
	float temperature;  /* 0: greedy                                                            */
	int top_k;
	float top_p;        /* 0 is "top id only"; pass 1 for no top-p                               */
	float min_p;
	uint64_t seed;
	int draft;          /* 0 plain, 1 n-gram (prompt lookup) speculation                         */
	int draft_max;      /* 0: the generator's default                                           */
};
struct pvc_gen_result {
	int n;              /* tokens written to out                                                */
	int stopped_eos;    /* 1: an end-of-generation id ended it                                  */
	int64_t drafted, accepted;
	double server_ms;   /* time the server spent on the request                                 */
};
/* The session's history becomes prompt (reusing what it shares, as pv_generator_prompt) plus the
 * generated tokens but the last. out has room for max_tokens ids. */
int pvc_generate(pvc_session* s, const int32_t* prompt, int n, const struct pvc_gen_params* p, int32_t* out,
                 struct pvc_gen_result* res);

/* Text through the server's tokenizer (parse_special as in proven_text.h). *ids / *text are
 * malloc'd; free() them. */
int pvc_tokenize(pvc_session* s, const char* text, size_t len, int parse_special, int32_t** ids, int* n);
int pvc_detokenize(pvc_session* s, const int32_t* ids, int n, char** text, size_t* len);

struct pvc_stats {
	uint64_t crossings;  /* request/reply round trips                                           */
	uint64_t runs, generates;
	double wait_ms;      /* time spent waiting for replies                                      */
};
void pvc_stats(const pvc_session* s, struct pvc_stats* st);

#ifdef __cplusplus
}
#endif
#endif
