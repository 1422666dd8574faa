/*
 * http.c: the HTTP front (http.h) on libmicrohttpd, one thread per connection.
 *
 * A thread per connection lets a handler block while the engine works: it waits on the job's
 * condition variable and, every 100 ms, polls the socket for a hang-up, so a client that goes
 * away is noticed within a token and its job cancelled. Limits: bodies above max_body get 413
 * (from Content-Length before reading, or while reading); a watchdog closes a connection whose
 * request headers and body have not all arrived within request_timeout seconds of its start (or
 * of the previous response), which is what stops a slow-loris client; while a response is being
 * sent, libmicrohttpd's own inactivity timeout (send_timeout) closes a client that stopped
 * reading. The engine never waits for a client: it writes into the job's buffer and goes on.
 */
#include "http.h"

#include "proven_dev.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum route {
	R_NONE = 0, R_HEALTH, R_MODELS, R_METRICS, R_PROPS, R_SLOTS, R_PAGE, R_CHAT, R_COMPLETION, R_TOKENIZE, R_DETOKENIZE,
	R_APPLY
};

static const struct {
	const char* path;
	int route, post, open; /* open: no API key needed */
} routes[] = {
	{ "/health", R_HEALTH, 0, 1 },
	{ "/v1/health", R_HEALTH, 0, 1 },
	{ "/", R_PAGE, 0, 1 },
	{ "/index.html", R_PAGE, 0, 1 },
	{ "/v1/models", R_MODELS, 0, 0 },
	{ "/models", R_MODELS, 0, 0 },
	{ "/metrics", R_METRICS, 0, 0 },
	{ "/props", R_PROPS, 0, 0 },
	{ "/slots", R_SLOTS, 0, 0 },
	{ "/v1/chat/completions", R_CHAT, 1, 0 },
	{ "/chat/completions", R_CHAT, 1, 0 },
	{ "/v1/completions", R_COMPLETION, 1, 0 },
	{ "/completions", R_COMPLETION, 1, 0 },
	{ "/tokenize", R_TOKENIZE, 1, 0 },
	{ "/detokenize", R_DETOKENIZE, 1, 0 },
	{ "/apply-template", R_APPLY, 1, 0 },
};

/* A connection, for the watchdog. */
struct conn {
	int fd;
	double since;  /* start of the current receiving phase                              */
	int receiving; /* headers or body of a request are still arriving                   */
	int killed;
	struct conn *prev, *next;
};

struct srv_http {
	struct http_config cfg;
	struct MHD_Daemon* d;
	_Atomic(struct srv_engine*) engine;
	atomic_int load_permille;
	char load_error[512];
	atomic_int failed;
	pthread_mutex_t mu; /* the connection list */
	struct conn* conns;
	pthread_t watchdog;
	atomic_int stop;
	atomic_ullong seq;
	uint64_t id_salt;
	atomic_int in_flight; /* requests between their headers and the end of their response */
};

/* One request (MHD's per-request context). */
struct req {
	int route;
	char* body;
	size_t len, cap;
	int too_large, responded;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Responses ------------------------------------------------------------------------------------- */

static enum MHD_Result send_body(struct srv_http* h, struct MHD_Connection* c, int status, const char* type, const char* body,
                                 size_t n)
{
	struct MHD_Response* r = MHD_create_response_from_buffer(n, (void*)body, MHD_RESPMEM_MUST_COPY);
	if (!r) return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	if (h->cfg.send_timeout > 0) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->cfg.send_timeout);
	enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	struct srv_engine* e = atomic_load(&h->engine);
	if (e) srv_engine_count_http(e, status);
	return ok;
}

static enum MHD_Result send_json(struct srv_http* h, struct MHD_Connection* c, int status, json_t* v)
{
	char* s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (!s) return MHD_NO;
	enum MHD_Result ok = send_body(h, c, status, "application/json", s, strlen(s));
	free(s);
	return ok;
}

static enum MHD_Result send_error(struct srv_http* h, struct MHD_Connection* c, int status, const char* msg, const char* param)
{
	char* s = out_error_json(status, msg, param);
	if (!s) return MHD_NO;
	enum MHD_Result ok = send_body(h, c, status, "application/json", s, strlen(s));
	free(s);
	return ok;
}

/* Hang-up --------------------------------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection* c)
{
	const union MHD_ConnectionInfo* ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	return ci ? (int)ci->connect_fd : -1;
}

/* The client closed its side (or the socket broke): nobody will read the answer. */
static int peer_gone(int fd)
{
	if (fd < 0) return 0;
	struct pollfd p = { fd, POLLRDHUP, 0 };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits until the job has bytes (a stream) or is done; 0, or -1 when the client went away. */
static int wait_job(struct srv_job* j, int fd, int stream)
{
	pthread_mutex_lock(&j->mu);
	while (!j->done && !(stream && j->len > j->rd)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (!j->done && !(stream && j->len > j->rd) && peer_gone(fd)) {
			pthread_mutex_unlock(&j->mu);
			return -1;
		}
	}
	pthread_mutex_unlock(&j->mu);
	return 0;
}

/* Server-sent events: the reader copies what the engine wrote, waiting for more. */
struct stream {
	struct srv_http* h;
	struct srv_job* j;
	int fd;
};

static ssize_t stream_read(void* cls, uint64_t pos, char* buf, size_t max)
{
	struct stream* st = cls;
	struct srv_job* j = st->j;
	double quiet = now_s();
	pthread_mutex_lock(&j->mu);
	for (;;) {
		if (j->len > j->rd) {
			size_t n = j->len - j->rd < max ? j->len - j->rd : max;
			memcpy(buf, j->out + j->rd, n);
			j->rd += n;
			if (j->rd == j->len) j->rd = j->len = 0; /* all read: the buffer starts over */
			pthread_mutex_unlock(&j->mu);
			return (ssize_t)n;
		}
		if (j->done) {
			pthread_mutex_unlock(&j->mu);
			return MHD_CONTENT_READER_END_OF_STREAM;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (j->len > j->rd || j->done) continue;
		pthread_mutex_unlock(&j->mu);
		if (peer_gone(st->fd)) {
			struct srv_engine* e = atomic_load(&st->h->engine);
			if (e) srv_job_cancel(e, j);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		if (now_s() - quiet > 10) {
			/* a comment line keeps proxies and the send timeout from closing a quiet stream */
			static const char ping[] = ": ping\n\n";
			if (max >= sizeof ping - 1) {
				memcpy(buf, ping, sizeof ping - 1);
				return (ssize_t)(sizeof ping - 1);
			}
		}
		pthread_mutex_lock(&j->mu);
	}
}

static void stream_free(void* cls)
{
	struct stream* st = cls;
	pthread_mutex_lock(&st->j->mu);
	int done = st->j->done;
	pthread_mutex_unlock(&st->j->mu);
	struct srv_engine* e = atomic_load(&st->h->engine);
	if (!done && e) srv_job_cancel(e, st->j); /* the connection ended before the job */
	srv_job_release(st->j);
	free(st);
}

/* Generation ------------------------------------------------------------------------------------- */

static void make_id(struct srv_http* h, const char* prefix, char* out, size_t n)
{
	unsigned long long k = atomic_fetch_add(&h->seq, 1) + 1;
	snprintf(out, n, "%s%016llx%04llx", prefix, (unsigned long long)(h->id_salt ^ (k * 0x9e3779b97f4a7c15ull)), k & 0xffff);
}

static int tokenize(const struct pv_tok* tok, const char* text, size_t len, int32_t** ids, int* n, char* msg, size_t msglen)
{
	char err[256];
	if (pv_tok_encode(tok, text, len, 1, ids, n, err, sizeof err)) {
		snprintf(msg, msglen, "tokenization failed: %s", err);
		return 400;
	}
	return 0;
}

static enum MHD_Result generate(struct srv_http* h, struct srv_engine* e, struct MHD_Connection* c, struct req* r, int kind)
{
	char msg[512];
	const char* param = NULL;
	struct srv_request q;
	const pv_model* m = srv_engine_model(e);
	struct srv_limits lim = { pv_model_get_info(m)->vocab, srv_engine_n_ctx(e) };
	int st = srv_request_parse(kind, r->body ? r->body : "", r->len, &lim, &q, msg, sizeof msg, &param);
	char pbuf[96];
	if (param) snprintf(pbuf, sizeof pbuf, "%s", param), param = pbuf; /* it may point into the body */
	if (st) {
		enum MHD_Result ok = send_error(h, c, st, msg, param);
		srv_request_free(&q);
		return ok;
	}
	const struct srv_config* cfg = srv_engine_config(e);
	const struct pv_tok* tok = srv_engine_tok(e);
	struct srv_job* j = srv_job_new();
	if (!j) {
		srv_request_free(&q);
		return send_error(h, c, 503, "out of memory", NULL);
	}
	j->kind = kind;
	int dialect = srv_engine_dialect(e);
	if (kind == SRV_CHAT) {
		if (dialect < 0) {
			st = 400;
			snprintf(msg, sizeof msg, "this model has no chat template the server knows (qwen3, qwen3.5, qwen2.5): use /v1/completions");
		} else {
			char* prompt = NULL;
			size_t plen = 0;
			char err[400];
			if (srv_render_chat(&q, dialect, &prompt, &plen, err, sizeof err)) {
				st = 400;
				snprintf(msg, sizeof msg, "messages: %s", err);
				param = "messages";
			} else {
				st = tokenize(tok, prompt, plen, &j->prompt, &j->n_prompt, msg, sizeof msg);
			}
			free(prompt);
		}
		j->dialect = dialect;
		/* qwen3.5's generation prompt opens the think block when thinking is on */
		j->parse_flags = dialect == PV_CHAT_QWEN3_5 && q.enable_thinking != 0 ? PV_CHAT_PARSE_IN_THINK : 0;
		if (q.tools) j->tools = json_incref(q.tools);
	} else if (q.prompt) {
		st = tokenize(tok, q.prompt, q.prompt_len, &j->prompt, &j->n_prompt, msg, sizeof msg);
	} else {
		j->prompt = q.ids, j->n_prompt = q.n_ids;
		q.ids = NULL;
	}
	if (!st && j->n_prompt == 0) {
		st = 400;
		snprintf(msg, sizeof msg, "the prompt encodes to no tokens");
		param = "prompt";
	}
	if (!st && j->n_prompt >= srv_engine_n_ctx(e)) {
		st = 400;
		snprintf(msg, sizeof msg, "the prompt has %d tokens; the context holds %d (--ctx): context_length_exceeded", j->n_prompt,
		         srv_engine_n_ctx(e));
		param = kind == SRV_CHAT ? "messages" : "prompt";
	}
	if (st) {
		srv_request_free(&q);
		srv_job_release(j);
		return send_error(h, c, st, msg, param);
	}
	j->stream = q.stream;
	j->include_usage = q.include_usage;
	j->logprobs = q.logprobs;
	j->top_logprobs = q.top_logprobs;
	j->max_tokens = q.max_tokens;
	j->cache_prompt = q.cache_prompt;
	for (int i = 0; i < q.n_stop; i++) j->stop[i] = q.stop[i], j->stop_len[i] = q.stop_len[i], q.stop[i] = NULL;
	j->n_stop = q.n_stop;
	q.n_stop = 0;
	j->smp = cfg->defaults;
	if (q.has_temperature) j->smp.temperature = q.temperature;
	if (q.has_top_p) j->smp.top_p = q.top_p;
	if (q.has_top_k) j->smp.top_k = q.top_k;
	if (q.has_min_p) j->smp.min_p = q.min_p;
	if (q.has_seed) j->smp.seed = q.seed;
	else if (getrandom(&j->smp.seed, sizeof j->smp.seed, 0) != sizeof j->smp.seed) j->smp.seed = (uint64_t)now_s() ^ atomic_load(&h->seq);
	make_id(h, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-", j->id, sizeof j->id);
	j->created = (long long)time(NULL);
	j->model_name = cfg->model_name;
	srv_request_free(&q);
	if ((st = srv_engine_submit(e, j, msg, sizeof msg))) {
		srv_job_release(j);
		return send_error(h, c, st, msg, NULL);
	}
	int fd = conn_fd(c);
	if (wait_job(j, fd, j->stream)) {
		srv_job_cancel(e, j);
		srv_job_release(j);
		return MHD_NO; /* the client is gone: close */
	}
	pthread_mutex_lock(&j->mu);
	int status = j->status, done = j->done;
	pthread_mutex_unlock(&j->mu);
	if (!j->stream || (done && status != 200)) {
		/* the whole answer, or an error before the stream began */
		pthread_mutex_lock(&j->mu);
		char* body = j->out;
		size_t n = j->len;
		pthread_mutex_unlock(&j->mu);
		enum MHD_Result ok = status == 499 ? MHD_NO : send_body(h, c, status, "application/json", body ? body : "", body ? n : 0);
		srv_job_release(j);
		return ok;
	}
	struct stream* sc = calloc(1, sizeof *sc);
	struct MHD_Response* resp = sc ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free) : NULL;
	if (!resp) {
		free(sc);
		srv_job_cancel(e, j);
		srv_job_release(j);
		return MHD_NO;
	}
	sc->h = h, sc->j = j, sc->fd = fd;
	MHD_add_response_header(resp, "Content-Type", "text/event-stream");
	MHD_add_response_header(resp, "Cache-Control", "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	if (h->cfg.send_timeout > 0) MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)h->cfg.send_timeout);
	enum MHD_Result ok = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp); /* the stream's free callback releases the job */
	srv_engine_count_http(e, 200);
	return ok;
}

/* The other endpoints ----------------------------------------------------------------------------- */

static enum MHD_Result text_endpoint(struct srv_http* h, struct srv_engine* e, struct MHD_Connection* c, struct req* r, int kind)
{
	char msg[512];
	const char* param = NULL;
	struct srv_request q;
	const pv_model* m = srv_engine_model(e);
	const struct pv_tok* tok = srv_engine_tok(e);
	struct srv_limits lim = { pv_model_get_info(m)->vocab, 1 << 24 };
	int st = srv_request_parse(kind, r->body ? r->body : "", r->len, &lim, &q, msg, sizeof msg, &param);
	char pbuf[96];
	if (param) snprintf(pbuf, sizeof pbuf, "%s", param), param = pbuf; /* it may point into the body */
	if (st) {
		srv_request_free(&q);
		return send_error(h, c, st, msg, param);
	}
	json_t* res = NULL;
	char err[400];
	if (kind == SRV_TOKENIZE) {
		int32_t* ids = NULL;
		int n = 0;
		if (pv_tok_encode(tok, q.content, q.content_len, q.parse_special, &ids, &n, err, sizeof err)) {
			st = 400;
			snprintf(msg, sizeof msg, "tokenization failed: %s", err);
		} else {
			json_t* a = json_array();
			for (int i = 0; i < n; i++) {
				if (!q.with_pieces) {
					json_array_append_new(a, json_integer(ids[i]));
					continue;
				}
				char* s = NULL;
				size_t len = 0;
				pv_tok_decode(tok, &ids[i], 1, 0, &s, &len, NULL, 0);
				json_t* piece = json_stringn(s ? s : "", s ? len : 0);
				json_array_append_new(a, json_pack("{s:i,s:o}", "id", ids[i], "piece", piece ? piece : json_string("")));
				free(s);
			}
			res = json_pack("{s:o}", "tokens", a);
		}
		free(ids);
	} else if (kind == SRV_DETOKENIZE) {
		char* s = NULL;
		size_t len = 0;
		if (pv_tok_decode(tok, q.ids, q.n_ids, 0, &s, &len, err, sizeof err)) {
			st = 400;
			snprintf(msg, sizeof msg, "detokenization failed: %s", err);
		} else {
			json_t* v = json_stringn(s, len);
			res = json_pack("{s:o}", "content", v ? v : json_string(""));
		}
		free(s);
	} else {
		int dialect = srv_engine_dialect(e);
		char* prompt = NULL;
		size_t plen = 0;
		if (dialect < 0) {
			st = 400;
			snprintf(msg, sizeof msg, "this model has no chat template the server knows");
		} else if (srv_render_chat(&q, dialect, &prompt, &plen, err, sizeof err)) {
			st = 400;
			snprintf(msg, sizeof msg, "messages: %s", err);
			param = "messages";
		} else {
			json_t* v = json_stringn(prompt, plen);
			res = json_pack("{s:o}", "prompt", v ? v : json_string(""));
		}
		free(prompt);
	}
	srv_request_free(&q);
	if (st) return send_error(h, c, st, msg, param);
	return send_json(h, c, 200, res);
}

static enum MHD_Result get_endpoint(struct srv_http* h, struct srv_engine* e, struct MHD_Connection* c, int route)
{
	const struct srv_config* cfg = srv_engine_config(e);
	switch (route) {
	case R_HEALTH: return send_json(h, c, 200, json_pack("{s:s}", "status", "ok"));
	case R_MODELS: {
		const struct pv_model_info* in = pv_model_get_info(srv_engine_model(e));
		json_t* meta = json_pack("{s:i,s:i,s:I,s:I,s:s}", "n_vocab", in->vocab, "n_ctx_train", in->max_context, "n_params",
		                         (json_int_t)in->n_params, "size", (json_int_t)in->weight_bytes, "arch", in->arch_name);
		return send_json(h, c, 200,
		                 json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:o}]}", "object", "list", "data", "id", cfg->model_name, "object",
		                           "model", "created", (json_int_t)time(NULL), "owned_by", "proven", "meta", meta));
	}
	case R_PROPS: return send_json(h, c, 200, srv_engine_props(e));
	case R_SLOTS: return send_json(h, c, 200, srv_engine_slots(e));
	case R_METRICS: {
		char* s = srv_engine_metrics(e);
		if (!s) return send_error(h, c, 503, "out of memory", NULL);
		enum MHD_Result ok = send_body(h, c, 200, "text/plain; version=0.0.4", s, strlen(s));
		free(s);
		return ok;
	}
	}
	return send_error(h, c, 404, "not found", NULL);
}

/* The access handler ---------------------------------------------------------------------------- */

static int key_ok(struct srv_http* h, struct MHD_Connection* c)
{
	if (!h->cfg.n_keys) return 1;
	const char* a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	const char* x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
	const char* given = NULL;
	if (a && !strncasecmp(a, "Bearer ", 7)) given = a + 7;
	else if (x) given = x;
	if (!given) return 0;
	size_t gl = strlen(given);
	int ok = 0;
	for (int i = 0; i < h->cfg.n_keys; i++) {
		/* compared in time independent of where they differ */
		size_t kl = strlen(h->cfg.keys[i]);
		unsigned char d = (unsigned char)(kl != gl);
		for (size_t k = 0; k < gl; k++) d |= (unsigned char)(given[k] ^ h->cfg.keys[i][k < kl ? k : 0]);
		ok |= d == 0;
	}
	return ok;
}

static struct conn* conn_of(struct MHD_Connection* c)
{
	const union MHD_ConnectionInfo* ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void* cls, struct MHD_Connection* c, const char* url, const char* method, const char* version,
                                  const char* upload, size_t* upload_size, void** con_cls)
{
	struct srv_http* h = cls;
	struct req* r = *con_cls;
	if (!r) {
		/* the headers are in */
		if (!(r = calloc(1, sizeof *r))) return MHD_NO;
		*con_cls = r;
		atomic_fetch_add(&h->in_flight, 1);
		int k = 0, n = (int)(sizeof routes / sizeof routes[0]), path_known = 0;
		int is_post = !strcmp(method, "POST"), is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
		for (k = 0; k < n; k++) {
			if (strcmp(routes[k].path, url)) continue;
			path_known = 1;
			if (routes[k].post ? is_post : is_get) break;
		}
		r->responded = 1;
		if (k == n) {
			if (path_known) return send_error(h, c, 405, "method not allowed", NULL);
			char m[300];
			snprintf(m, sizeof m, "no such endpoint: %s %.200s", method, url);
			return send_error(h, c, 404, m, NULL);
		}
		r->route = routes[k].route;
		if (!routes[k].open && !key_ok(h, c)) return send_error(h, c, 401, "invalid or missing API key", NULL);
		const char* cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > h->cfg.max_body) {
			char m[160];
			snprintf(m, sizeof m, "the request body is larger than %zu bytes (--max-body)", h->cfg.max_body);
			return send_error(h, c, 413, m, NULL);
		}
		r->responded = 0;
		return MHD_YES;
	}
	if (r->responded) {
		*upload_size = 0; /* a response is queued already: the rest of the body is dropped */
		return MHD_YES;
	}
	if (*upload_size) {
		if (!r->too_large) {
			if (r->len + *upload_size > h->cfg.max_body) {
				r->too_large = 1;
			} else {
				if (r->len + *upload_size + 1 > r->cap) {
					size_t cap = r->cap ? r->cap : 4096;
					while (cap < r->len + *upload_size + 1) cap *= 2;
					char* g = realloc(r->body, cap);
					if (!g) return MHD_NO;
					r->body = g, r->cap = cap;
				}
				memcpy(r->body + r->len, upload, *upload_size);
				r->len += *upload_size;
			}
		}
		*upload_size = 0;
		return MHD_YES;
	}
	/* the whole request is in: the watchdog lets it be */
	struct conn* cn = conn_of(c);
	if (cn) {
		pthread_mutex_lock(&h->mu);
		cn->receiving = 0;
		pthread_mutex_unlock(&h->mu);
	}
	r->responded = 1;
	if (r->too_large) {
		char m[160];
		snprintf(m, sizeof m, "the request body is larger than %zu bytes (--max-body)", h->cfg.max_body);
		return send_error(h, c, 413, m, NULL);
	}
	if (r->route == R_PAGE) return send_body(h, c, 200, "text/html; charset=utf-8", srv_page_html, srv_page_html_len);
	struct srv_engine* e = atomic_load(&h->engine);
	if (!e) {
		if (atomic_load(&h->failed)) return send_error(h, c, 503, h->load_error, NULL);
		char m[128];
		snprintf(m, sizeof m, "Loading model (%.0f%%)", atomic_load(&h->load_permille) / 10.0);
		return send_error(h, c, 503, m, NULL);
	}
	/* draining: /health says so too, so that a load balancer stops sending requests here */
	if (srv_engine_draining(e) && r->route != R_METRICS) return send_error(h, c, 503, "the server is shutting down", NULL);
	switch (r->route) {
	case R_CHAT: return generate(h, e, c, r, SRV_CHAT);
	case R_COMPLETION: return generate(h, e, c, r, SRV_COMPLETION);
	case R_TOKENIZE: return text_endpoint(h, e, c, r, SRV_TOKENIZE);
	case R_DETOKENIZE: return text_endpoint(h, e, c, r, SRV_DETOKENIZE);
	case R_APPLY: return text_endpoint(h, e, c, r, SRV_APPLY_TEMPLATE);
	default: return get_endpoint(h, e, c, r->route);
	}
}

static void on_completed(void* cls, struct MHD_Connection* c, void** con_cls, enum MHD_RequestTerminationCode toe)
{
	struct srv_http* h = cls;
	struct req* r = *con_cls;
	if (r) {
		free(r->body);
		free(r);
		*con_cls = NULL;
		atomic_fetch_sub(&h->in_flight, 1);
	}
	/* keep-alive: the next request's headers start arriving now */
	struct conn* cn = conn_of(c);
	if (cn) {
		pthread_mutex_lock(&h->mu);
		cn->receiving = 1;
		cn->since = now_s();
		pthread_mutex_unlock(&h->mu);
	}
}

static void on_connection(void* cls, struct MHD_Connection* c, void** socket_context, enum MHD_ConnectionNotificationCode code)
{
	struct srv_http* h = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		struct conn* cn = calloc(1, sizeof *cn);
		if (!cn) return;
		cn->fd = conn_fd(c);
		cn->since = now_s();
		cn->receiving = 1;
		pthread_mutex_lock(&h->mu);
		cn->next = h->conns;
		if (h->conns) h->conns->prev = cn;
		h->conns = cn;
		pthread_mutex_unlock(&h->mu);
		*socket_context = cn;
		return;
	}
	struct conn* cn = *socket_context;
	if (!cn) return;
	/* removed before libmicrohttpd closes the socket, so the watchdog never touches a reused fd */
	pthread_mutex_lock(&h->mu);
	if (cn->prev) cn->prev->next = cn->next;
	else h->conns = cn->next;
	if (cn->next) cn->next->prev = cn->prev;
	pthread_mutex_unlock(&h->mu);
	free(cn);
	*socket_context = NULL;
}

static void* watchdog_main(void* arg)
{
	struct srv_http* h = arg;
	while (!atomic_load(&h->stop)) {
		usleep(250 * 1000);
		double t = now_s();
		pthread_mutex_lock(&h->mu);
		for (struct conn* cn = h->conns; cn; cn = cn->next)
			if (cn->receiving && !cn->killed && t - cn->since > h->cfg.request_timeout) {
				/* too slow to send a request (or idle too long between two): libmicrohttpd
				 * sees the socket fail and closes the connection */
				shutdown(cn->fd, SHUT_RDWR);
				cn->killed = 1;
			}
		pthread_mutex_unlock(&h->mu);
	}
	return NULL;
}

static void mhd_log(void* cls, const char* fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof line, fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
	fprintf(stderr, "proven-server: http: %s\n", line);
}

/* Start and stop --------------------------------------------------------------------------------- */

int srv_http_start(struct srv_http** out, const struct http_config* cfg, char* err, size_t errlen)
{
	*out = NULL;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo* ai = NULL;
	char port[16];
	snprintf(port, sizeof port, "%d", cfg->port);
	int grc = getaddrinfo(cfg->host, port, &hints, &ai);
	if (grc || !ai) {
		snprintf(err, errlen, "cannot resolve --host %s: %s", cfg->host, gai_strerror(grc));
		return -1;
	}
	struct srv_http* h = calloc(1, sizeof *h);
	if (!h) {
		freeaddrinfo(ai);
		return snprintf(err, errlen, "out of memory"), -1;
	}
	h->cfg = *cfg;
	pthread_mutex_init(&h->mu, NULL);
	if (getrandom(&h->id_salt, sizeof h->id_salt, 0) != sizeof h->id_salt) h->id_salt = (uint64_t)time(NULL);
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_POLL | MHD_USE_ITC;
	if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
	h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_SOCK_ADDR,
	                        ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
	                        (unsigned)cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)0,
	                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024), MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
	                        MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
	                        MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!h->d) {
		snprintf(err, errlen, "cannot listen on %s:%d (address in use, or not allowed?)", cfg->host, cfg->port);
		pthread_mutex_destroy(&h->mu);
		free(h);
		return -1;
	}
	if (pthread_create(&h->watchdog, NULL, watchdog_main, h)) {
		MHD_stop_daemon(h->d);
		free(h);
		return snprintf(err, errlen, "cannot start the watchdog thread"), -1;
	}
	*out = h;
	return 0;
}

int srv_http_port(const struct srv_http* h)
{
	const union MHD_DaemonInfo* di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	return di ? di->port : h->cfg.port;
}

void srv_http_set_engine(struct srv_http* h, struct srv_engine* e) { atomic_store(&h->engine, e); }
void srv_http_set_load_progress(struct srv_http* h, double f) { atomic_store(&h->load_permille, (int)(f * 1000)); }
void srv_http_set_load_error(struct srv_http* h, const char* msg)
{
	snprintf(h->load_error, sizeof h->load_error, "the model failed to load: %s", msg);
	atomic_store(&h->failed, 1);
}

void srv_http_stop(struct srv_http* h)
{
	if (!h) return;
	/* no new connections; the responses under way are sent to the end (the last events of a
	 * stream, its [DONE]) before the connections are closed: at most 10 s */
	MHD_socket ls = MHD_quiesce_daemon(h->d);
	for (int i = 0; i < 1000 && atomic_load(&h->in_flight) > 0; i++) usleep(10 * 1000);
	MHD_stop_daemon(h->d);
	if (ls != MHD_INVALID_SOCKET) close(ls);
	atomic_store(&h->stop, 1);
	pthread_join(h->watchdog, NULL);
	pthread_mutex_lock(&h->mu);
	while (h->conns) {
		struct conn* cn = h->conns;
		h->conns = cn->next;
		free(cn);
	}
	pthread_mutex_unlock(&h->mu);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
