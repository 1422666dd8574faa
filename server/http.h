/*
 * http.h: the HTTP front of the server (libmicrohttpd, a thread per connection): routing, the API
 * key, size and time limits, OpenAI responses and server-sent events. HTTP threads parse, render
 * and tokenize requests, hand jobs to the engine and copy out what it writes.
 */
#ifndef PV_SERVER_HTTP_H
#define PV_SERVER_HTTP_H

#include "engine.h"

#include <stddef.h>

struct http_config {
	const char* host;         /* "127.0.0.1" by default                                     */
	int port;                 /* 0: any free port (srv_http_port tells which)               */
	const char** keys;        /* API keys (NULL / 0: none)                                  */
	int n_keys;
	size_t max_body;          /* bytes; larger bodies get 413                               */
	int request_timeout;      /* seconds a request's headers and body may take to arrive     */
	int send_timeout;         /* seconds a client may stall reading a response               */
	int max_connections;
};

struct srv_http;

/* Binds and starts serving (/health says "loading" until srv_http_set_engine). 0, or -1 with a
 * message. */
int srv_http_start(struct srv_http** out, const struct http_config* cfg, char* err, size_t errlen);
int srv_http_port(const struct srv_http* h);
void srv_http_set_engine(struct srv_http* h, struct srv_engine* e);
void srv_http_set_load_progress(struct srv_http* h, double fraction);
/* The model failed to load: every request then gets 503 with this message. */
void srv_http_set_load_error(struct srv_http* h, const char* msg);
/* Stops accepting connections and waits for the connection threads (the engine must have
 * finished or failed every job first). */
void srv_http_stop(struct srv_http* h);

/* The chat page (page.c: page.html embedded in the binary). */
extern const char srv_page_html[];
extern const unsigned int srv_page_html_len;

#endif
