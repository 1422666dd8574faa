/*
 * engine.h: the server's engine: one loaded model, N slots (a session each, all on one shared
 * thread pool), a bounded queue of jobs, and ONE engine thread that admits jobs into slots,
 * prefills them in chunks and steps every decoding slot once per iteration, together where the
 * backend can (pv_generator_step_many: continuous batching).
 * HTTP threads only build jobs, submit them and read what the engine writes into them.
 *
 * A job's output is bytes the engine appends (server-sent events for a stream, the JSON body
 * otherwise); the HTTP side waits on the job's condition variable and copies them out. Either
 * side may drop its reference first: a job the HTTP side abandons (client gone) is cancelled,
 * and the engine frees its slot at the next step.
 */
#ifndef PV_SERVER_ENGINE_H
#define PV_SERVER_ENGINE_H

#include "proven.h"
#include "proven_spec.h"
#include "proven_text.h"
#include "request.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct srv_config {
	const char* model;        /* path                                                       */
	const char* backend;      /* NULL / "cpu" / "cuda"                                      */
	const char* draft;        /* NULL, "ngram", "mtp", "cascade:PATH" or a draft model path  */
	int draft_max;            /* 0: the generator's default                                  */
	int parallel;             /* slots                                                       */
	int n_ctx;                /* per slot; 0: min(max_context, 4096)                          */
	int threads;              /* shared pool; 0: all cores                                   */
	int queue_max;            /* jobs waiting beyond the slots before 429                     */
	int prefill_chunk;        /* prompt tokens evaluated per engine iteration per slot        */
	int cache_entries;        /* extra sessions holding evicted prefixes (LRU); 0: none       */
	int exact_prefill;        /* 1: prompts on the exact path too (hybrid models: outputs then never
	                           * depend on chunking or on the prefix a slot reused)             */
	struct pv_sampling defaults; /* sampling when a request does not say                      */
	const char* model_name;   /* the id /v1/models reports                                   */
	int dialect;              /* -1: from the chat template                                   */
	int fail_after;           /* tests (PV_SERVER_FAIL_AFTER): every job fails after this many
	                           * tokens as a device failure would; 0: never                     */
	void (*progress)(void* user, double fraction); /* the model's load, for /health             */
	void* progress_user;
};

enum srv_finish { SRV_FIN_NONE = 0, SRV_FIN_STOP, SRV_FIN_LENGTH, SRV_FIN_TOOLS, SRV_FIN_CANCELLED, SRV_FIN_ERROR };

struct srv_job {
	/* set by the HTTP thread before srv_engine_submit; read-only afterwards */
	int kind;                 /* SRV_CHAT or SRV_COMPLETION                                 */
	int stream, include_usage, logprobs, top_logprobs;
	int32_t* prompt;          /* malloc'd                                                   */
	int n_prompt;
	int max_tokens;           /* -1: until the context is full                              */
	char* stop[SRV_MAX_STOP];
	int stop_len[SRV_MAX_STOP];
	int n_stop;
	int cache_prompt;
	struct pv_sampling smp;
	json_t* tools;            /* a reference, or NULL                                      */
	int dialect, parse_flags; /* chat output parsing                                        */
	char id[48];
	long long created;
	const char* model_name;

	/* shared, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char* out;                /* bytes for the HTTP side: out[rd, len)                      */
	size_t len, cap, rd;
	int done;                 /* the engine will write nothing more                         */
	int begun;                /* bytes were written (the reader may have taken them all)     */
	int status;               /* HTTP status of the response (200, or the error's)          */
	int refs;                 /* HTTP side + engine side                                     */
	atomic_int cancelled;     /* the client is gone or the server is draining                */

	/* the engine thread's own */
	struct srv_job* next;     /* the queue                                                  */
	int slot;
	struct pv_tok_stream* dec;
	pv_chat_stream* cs;
	char* pend;               /* decoded text held back for stop strings                    */
	size_t n_pend, cap_pend;
	char* text;               /* released text (non-streaming: parsed at the end)           */
	size_t n_text, cap_text;
	int max_stop;             /* longest stop string                                         */
	int n_gen, n_reasoning, in_think, n_tool_calls, sent_role, stop_hit;
	int finish;               /* enum srv_finish                                            */
	int cached, evaluated;    /* prompt tokens reused from the slot, and evaluated           */
	double t_submit, t_start, t_first, t_end;
	int64_t drafted, accepted;
	json_t* lp;               /* logprobs entries gathered for a non-streaming response    */
	int bare;                 /* bare JSON tool calls (output.c): 0 undecided, 1 holding, 2 off */
	char* hold;               /* streamed content held while it may be a bare tool call      */
	size_t n_hold, cap_hold;
	char err[256];
	int err_status;
};

struct srv_engine;

/* Loads the model and creates the slots; 0, or -1 with a message. */
int srv_engine_new(struct srv_engine** out, const struct srv_config* cfg, char* err, size_t errlen);
/* Stops the engine thread: jobs still queued or running end with an error event. */
void srv_engine_stop(struct srv_engine* e);
/* srv_engine_stop, then frees everything. */
void srv_engine_free(struct srv_engine* e);

const pv_model* srv_engine_model(const struct srv_engine* e);
const struct pv_tok* srv_engine_tok(const struct srv_engine* e);
int srv_engine_dialect(const struct srv_engine* e); /* -1: no chat template known           */
int srv_engine_n_ctx(const struct srv_engine* e);
pv_pool* srv_engine_pool(const struct srv_engine* e); /* the shared pool (the socket's sessions use it) */
const struct srv_config* srv_engine_config(const struct srv_engine* e);

/* A new job with one reference (the caller's); fields are zero, status 200. */
struct srv_job* srv_job_new(void);
void srv_job_release(struct srv_job* j);
/* Marks the job cancelled (the engine stops it at its next step) and wakes the engine. */
void srv_job_cancel(struct srv_engine* e, struct srv_job* j);

/* Queues a job (taking a reference). 0, or 429 (queue full) / 503 (draining) with a message. */
int srv_engine_submit(struct srv_engine* e, struct srv_job* j, char* msg, size_t msglen);

/* SIGTERM: refuse new jobs (503) and wait until every queued and running job ended, at most
 * timeout_s seconds; then cancel what is left with an error event. */
void srv_engine_drain(struct srv_engine* e, double timeout_s);
int srv_engine_draining(const struct srv_engine* e);

/* JSON views for /props, /slots and the text of /metrics (malloc'd). */
json_t* srv_engine_props(struct srv_engine* e);
json_t* srv_engine_slots(struct srv_engine* e);
char* srv_engine_metrics(struct srv_engine* e);
/* A request finished at the HTTP layer with this status (for the metrics). */
void srv_engine_count_http(struct srv_engine* e, int status);
/* The socket protocol's sessions (shm.c): one opened (+1) or closed (-1); requests served. */
void srv_engine_count_socket(struct srv_engine* e, int sessions, int requests);

/* output.c: what the engine writes into a job */
void out_begin(struct srv_job* j, const struct pv_tok* tok);              /* engine: job admitted */
/* engine: one generated token; lp its logprobs (or NULL). Returns 1 when the job is finished. */
int out_token(struct srv_job* j, const pv_model* m, const struct pv_tok* tok, int32_t id, const struct pv_token_logprob* lp);
/* engine: the job ends with j->finish set (and j->err for SRV_FIN_ERROR); writes the tail. */
void out_end(struct srv_job* j, const struct pv_tok* tok);
/* appends bytes to the job's output under its lock and wakes the reader */
void out_append(struct srv_job* j, const char* s, size_t n);
/* An OpenAI error body: {"error":{"message","type","code"[,"param"]}} (malloc'd) */
char* out_error_json(int status, const char* message, const char* param);
const char* out_error_type(int status);

#endif
