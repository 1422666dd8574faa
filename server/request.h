/*
 * request.h: the JSON request bodies of the server's POST endpoints, parsed and validated into
 * plain structs by a pure function (no sockets, no engine, no globals), so that fuzz/fuzz_request.c
 * can drive exactly what the server runs on every request body.
 *
 * Policy: a field the server knows and honours is validated (type, range); a known OpenAI field
 * whose semantics the engine cannot honour is accepted only at its neutral value (n 1,
 * presence_penalty 0, response_format text, ...) and is otherwise a 400 that says so; an unknown
 * field is a 400 naming it. Nothing is silently ignored. JSON null means "not given".
 */
#ifndef PV_SERVER_REQUEST_H
#define PV_SERVER_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum srv_kind {
	SRV_CHAT = 0,       /* POST /v1/chat/completions */
	SRV_COMPLETION,     /* POST /v1/completions      */
	SRV_TOKENIZE,       /* POST /tokenize            */
	SRV_DETOKENIZE,     /* POST /detokenize          */
	SRV_APPLY_TEMPLATE, /* POST /apply-template      */
	SRV_KIND_COUNT
};

#define SRV_MAX_STOP 16      /* stop strings per request                    */
#define SRV_MAX_STOP_LEN 512 /* bytes per stop string                       */

/* What the parser checks against: the loaded model's numbers. */
struct srv_limits {
	int n_vocab;  /* token ids must be below it                             */
	int n_ctx;    /* a token-id prompt longer than this is refused early     */
};

struct srv_request {
	int kind;
	json_t* root;          /* the parsed body (owns what the pointers below borrow)       */
	/* chat and apply-template */
	json_t* messages;      /* borrowed from root                                          */
	json_t* tools;         /* borrowed; NULL when absent, empty or tool_choice "none"      */
	int enable_thinking;   /* -1: the template's default (on); 0 / 1                      */
	int add_generation_prompt; /* apply-template only; default 1                           */
	/* completion */
	char* prompt;          /* malloc'd text, or NULL when the prompt is token ids          */
	size_t prompt_len;
	int32_t* ids;          /* malloc'd token ids: a completion's prompt, detokenize's input */
	int n_ids;
	/* generation */
	int stream, include_usage;
	int max_tokens;        /* -1: until the context is full                               */
	char* stop[SRV_MAX_STOP]; /* malloc'd (may hold NUL bytes: stop_len is the length)          */
	int stop_len[SRV_MAX_STOP];
	int n_stop;
	int has_temperature, has_top_p, has_top_k, has_min_p, has_seed;
	float temperature, top_p, min_p;
	int top_k;
	uint64_t seed;
	int logprobs;          /* 0 off, 1 on                                                  */
	int top_logprobs;      /* alternatives per token (0..20)                               */
	int cache_prompt;      /* 1 (default): reuse a slot's cached prefix                    */
	/* tokenize */
	int parse_special;     /* default 1                                                     */
	int with_pieces;
	char* content;         /* tokenize: malloc'd text                                       */
	size_t content_len;
};

/* Parses body[0, len) for endpoint kind. Returns 0 with *r filled (free with srv_request_free),
 * or an HTTP status (400, 413) with a one-line message in msg and, when one field is at fault,
 * its name in *param (a static string or a pointer into msg; may be NULL). *r is always safe to
 * free afterwards. */
int srv_request_parse(int kind, const char* body, size_t len, const struct srv_limits* lim, struct srv_request* r,
                      char* msg, size_t msglen, const char** param);
void srv_request_free(struct srv_request* r);

/* Renders a chat or apply-template request's prompt with the native chat renderer
 * (pv_chat_render, dialect as enum pv_chat_dialect). 0, or -1 with the renderer's message. */
int srv_render_chat(const struct srv_request* r, int dialect, char** out, size_t* out_len, char* msg, size_t msglen);

#endif
