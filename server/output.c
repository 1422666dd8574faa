/*
 * output.c: from generated token ids to what the client reads, on the engine thread: the
 * streaming detokenizer, stop strings (text that may still become a stop string is held back),
 * the chat output parser (reasoning, content, tool calls), logprobs, and the OpenAI JSON of
 * chunks, final responses, usage and llama-server-style timings.
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char* out_error_type(int status)
{
	switch (status) {
	case 400: return "invalid_request_error";
	case 401: return "authentication_error";
	case 404: return "not_found_error";
	case 405: return "invalid_request_error";
	case 408: return "timeout_error";
	case 413: return "invalid_request_error";
	case 429: return "rate_limit_error";
	case 503: return "unavailable_error";
	default: return "server_error";
	}
}

/* A JSON string of n bytes; text that is not valid UTF-8 (it should always be) is repaired
 * rather than dropped, so a response is never silently empty. */
static json_t* jstr(const char* s, size_t n)
{
	json_t* v = json_stringn(s, n);
	if (v) return v;
	char* c = malloc(n * 3 + 1);
	size_t k = 0;
	for (size_t i = 0; c && i < n; i++) {
		unsigned char b = (unsigned char)s[i];
		if (b < 0x80) c[k++] = (char)b;
		else k += (size_t)sprintf(c + k, "\xef\xbf\xbd"); /* U+FFFD per byte */
	}
	v = c ? json_stringn(c, k) : json_string("");
	free(c);
	return v;
}

char* out_error_json(int status, const char* message, const char* param)
{
	json_t* e = json_pack("{s:o,s:s,s:i}", "message", jstr(message, strlen(message)), "type", out_error_type(status),
	                      "code", status);
	if (param) json_object_set_new(e, "param", jstr(param, strlen(param)));
	json_t* root = json_pack("{s:o}", "error", e);
	char* s = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return s;
}

void out_append(struct srv_job* j, const char* s, size_t n)
{
	pthread_mutex_lock(&j->mu);
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 4096;
		while (cap < j->len + n + 1) cap *= 2;
		char* g = realloc(j->out, cap);
		if (!g) {
			pthread_mutex_unlock(&j->mu);
			return; /* the reader sees a cut stream; the job ends with an error next */
		}
		j->out = g;
		j->cap = cap;
	}
	memcpy(j->out + j->len, s, n);
	j->len += n;
	j->begun |= n > 0;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
}

/* "data: <json>\n\n" (steals the reference) */
static void sse(struct srv_job* j, json_t* v)
{
	char* s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	if (!s) return;
	size_t n = strlen(s);
	char* b = malloc(n + 9);
	if (b) {
		memcpy(b, "data: ", 6);
		memcpy(b + 6, s, n);
		memcpy(b + 6 + n, "\n\n", 2);
		out_append(j, b, n + 8);
	}
	free(b);
	free(s);
}

static int grow(char** p, size_t* cap, size_t need)
{
	if (need <= *cap) return 0;
	size_t c = *cap ? *cap : 256;
	while (c < need) c *= 2;
	char* g = realloc(*p, c);
	if (!g) return -1;
	*p = g;
	*cap = c;
	return 0;
}

static json_t* chunk_base(struct srv_job* j)
{
	return json_pack("{s:s,s:s,s:I,s:s}", "id", j->id, "object", j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion",
	                 "created", (json_int_t)j->created, "model", j->model_name);
}

/* One token's logprobs entry (chat format): {token, logprob, bytes, top_logprobs}. */
static json_t* token_json(const struct pv_tok* tok, int32_t id, float lp, int with_top)
{
	char* s = NULL;
	size_t n = 0;
	json_t* bytes = json_array();
	if (!pv_tok_decode(tok, &id, 1, PV_TOK_DECODE_RAW, &s, &n, NULL, 0))
		for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)s[i]));
	free(s);
	s = NULL;
	n = 0;
	pv_tok_decode(tok, &id, 1, 0, &s, &n, NULL, 0);
	json_t* e = json_pack("{s:o,s:f,s:o}", "token", jstr(s ? s : "", s ? n : 0), "logprob", isfinite(lp) ? (double)lp : -9999.0,
	                      "bytes", bytes);
	free(s);
	if (with_top) json_object_set_new(e, "top_logprobs", json_array());
	return e;
}

static json_t* logprob_entry(struct srv_job* j, const struct pv_tok* tok, const struct pv_token_logprob* lp)
{
	json_t* e = token_json(tok, lp->id, lp->logprob, 1);
	json_t* top = json_object_get(e, "top_logprobs");
	for (int i = 0; i < lp->n_top && i < j->top_logprobs; i++)
		json_array_append_new(top, token_json(tok, lp->top_id[i], lp->top_logprob[i], 0));
	return e;
}

/* Legacy completions logprobs from chat-style entries: tokens, token_logprobs, top_logprobs, text_offset. */
static json_t* completion_logprobs(json_t* entries, size_t offset0)
{
	json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
	size_t i, off = offset0;
	json_t* e;
	json_array_foreach(entries, i, e)
	{
		json_t* t = json_object_get(e, "token");
		json_array_append(toks, t);
		json_array_append(lps, json_object_get(e, "logprob"));
		json_t* m = json_object();
		size_t k;
		json_t* a;
		json_array_foreach(json_object_get(e, "top_logprobs"), k, a)
		        json_object_set(m, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
		json_array_append_new(tops, m);
		json_array_append_new(offs, json_integer((json_int_t)off));
		off += json_string_length(t);
	}
	return json_pack("{s:o,s:o,s:o,s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

/* Qwen2.5-Coder answers a tool request with the bare Hermes JSON ({"name": ..., "arguments": ...},
 * sometimes in a ```json fence) instead of inside the <tool_call> tags its template asks for;
 * llama.cpp's Hermes parser accepts that form too. With tools given (Hermes dialects), content
 * that is exactly one such call naming a declared tool becomes a tool call: the body is handed to
 * the library's own parser inside the tags, so the arguments are written as for a tagged call. */
static int hermes(const struct srv_job* j) { return j->tools && (j->dialect == PV_CHAT_QWEN2_5 || j->dialect == PV_CHAT_QWEN3); }

static json_t* bare_calls(const struct srv_job* j, const char* s, size_t n)
{
	while (n && strchr(" \t\r\n", *s)) s++, n--;
	while (n && strchr(" \t\r\n", s[n - 1])) n--;
	if (n > 6 && !strncmp(s, "```", 3) && !strncmp(s + n - 3, "```", 3)) {
		const char* nl = memchr(s, '\n', n);
		if (!nl) return NULL;
		n -= (size_t)(nl + 1 - s) + 3;
		s = nl + 1;
		while (n && strchr(" \t\r\n", s[n - 1])) n--;
	}
	if (n < 2 || s[0] != '{' || s[n - 1] != '}') return NULL;
	json_t* obj = json_loadb(s, n, 0, NULL);
	const char* name = json_string_value(json_object_get(obj, "name"));
	int known = 0;
	size_t i;
	json_t* t;
	json_array_foreach(j->tools, i, t)
	{
		const char* tn = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
		known |= name && tn && !strcmp(name, tn);
	}
	json_decref(obj);
	if (!known) return NULL;
	char* text = malloc(n + 32);
	if (!text) return NULL;
	int len = sprintf(text, "<tool_call>\n%.*s\n</tool_call>", (int)n, s);
	json_t* parsed = pv_chat_parse(j->dialect, text, (size_t)len, 0, j->tools, NULL, 0);
	free(text);
	json_t* calls = json_object_get(parsed, "tool_calls");
	json_t* out = json_array_size(calls) == 1 && !json_array_size(json_object_get(parsed, "errors")) ? json_incref(calls) : NULL;
	json_decref(parsed);
	return out;
}

/* Could the streamed content so far (whitespace ignored) still be, or is it, a bare call? 0 no,
 * 1 maybe (a prefix of one), 2 it starts like one (held to the end). */
static int bare_prefix(const char* s, size_t n)
{
	static const char* const pats[] = { "{\"name\"", "```json{\"name\"", "```{\"name\"" };
	char c[24];
	size_t k = 0;
	for (size_t i = 0; i < n && k < sizeof c - 1; i++)
		if (!strchr(" \t\r\n", s[i])) c[k++] = s[i];
	c[k] = 0;
	int best = 0;
	for (int p = 0; p < 3; p++) {
		size_t pl = strlen(pats[p]);
		if (k >= pl && !strncmp(c, pats[p], pl)) return 2;
		if (k < pl && !strncmp(c, pats[p], k)) best = 1;
	}
	return best;
}

static void add_calls(struct srv_job* j, json_t* d, json_t* calls);

/* Streamed content through the bare-call hold: returns the content to send now (a new
 * reference, or NULL), and may add the held call to the delta at the end. */
static json_t* bare_filter(struct srv_job* j, json_t* d, json_t* content, int end)
{
	if (!hermes(j) || j->bare == 2) return content ? json_incref(content) : NULL;
	size_t n = json_string_length(content);
	if (n && !grow(&j->hold, &j->cap_hold, j->n_hold + n + 1)) {
		memcpy(j->hold + j->n_hold, json_string_value(content), n);
		j->n_hold += n;
	}
	if (!end) {
		int st = bare_prefix(j->hold, j->n_hold);
		if (st == 0) j->bare = 2;
		else j->bare = st == 2 ? 1 : 0;
		if (j->bare != 2) return NULL;
	} else if (j->n_hold) {
		json_t* calls = bare_calls(j, j->hold, j->n_hold);
		if (calls) {
			add_calls(j, d, calls);
			json_decref(calls);
			j->n_hold = 0;
			return NULL;
		}
	}
	json_t* out = j->n_hold ? jstr(j->hold, j->n_hold) : NULL;
	j->n_hold = 0;
	j->bare = 2;
	return out;
}

/* The delta of a chat chunk from the stream parser's output: tool calls get their index and id. */
static json_t* chat_delta(struct srv_job* j, json_t* parsed, int end)
{
	json_t* d = json_object();
	json_t* v;
	if ((v = json_object_get(parsed, "reasoning_content")) && json_string_length(v)) json_object_set(d, "reasoning_content", v);
	json_t* content = bare_filter(j, d, json_object_get(parsed, "content"), end);
	if (json_string_length(content)) json_object_set(d, "content", content);
	json_decref(content);
	add_calls(j, d, json_object_get(parsed, "tool_calls"));
	return d;
}

static void add_calls(struct srv_job* j, json_t* d, json_t* calls)
{
	if (json_array_size(calls)) {
		json_t* out = json_array();
		size_t i;
		json_t* c;
		json_array_foreach(calls, i, c)
		{
			char id[64];
			snprintf(id, sizeof id, "call_%s_%d", j->id + (strncmp(j->id, "chatcmpl-", 9) ? 0 : 9), j->n_tool_calls);
			json_t* f = json_object_get(c, "function");
			json_array_append_new(out, json_pack("{s:i,s:s,s:s,s:{s:O,s:O}}", "index", j->n_tool_calls, "id", id, "type",
			                                     "function", "function", "name", json_object_get(f, "name"),
			                                     "arguments", json_object_get(f, "arguments")));
			j->n_tool_calls++;
		}
		json_object_set_new(d, "tool_calls", out);
	}
}

/* Text leaves the stop-string hold-back: into the parser (chat), the stream or the body. */
static void release(struct srv_job* j, const char* s, size_t n, json_t* lp_entries, int end)
{
	if (!j->stream) {
		if (n && !grow(&j->text, &j->cap_text, j->n_text + n + 1)) {
			memcpy(j->text + j->n_text, s, n);
			j->n_text += n;
			j->text[j->n_text] = 0;
		}
		if (lp_entries) {
			size_t i;
			json_t* e;
			json_array_foreach(lp_entries, i, e) json_array_append(j->lp, e);
		}
		return;
	}
	json_t* c = chunk_base(j);
	json_t* ch = json_object();
	json_object_set_new(ch, "index", json_integer(0));
	int any = 0;
	if (j->kind == SRV_CHAT) {
		json_t* parsed = j->cs ? pv_chat_stream_feed(j->cs, s, n, end) : NULL;
		json_t* d = parsed ? chat_delta(j, parsed, end) : json_object();
		json_decref(parsed);
		if (!j->sent_role) {
			json_object_set_new(d, "role", json_string("assistant"));
			if (!json_object_get(d, "content")) json_object_set_new(d, "content", json_string(""));
			j->sent_role = 1;
		}
		any = json_object_size(d) > 0;
		json_object_set_new(ch, "delta", d);
		if (lp_entries && json_array_size(lp_entries)) {
			json_object_set_new(ch, "logprobs", json_pack("{s:O}", "content", lp_entries));
			any = 1;
		} else {
			json_object_set_new(ch, "logprobs", json_null());
		}
	} else {
		json_object_set_new(ch, "text", jstr(s, n));
		any = n > 0;
		if (lp_entries && json_array_size(lp_entries)) {
			json_object_set_new(ch, "logprobs", completion_logprobs(lp_entries, j->n_text));
			any = 1;
		} else {
			json_object_set_new(ch, "logprobs", json_null());
		}
		j->n_text += n; /* the text offset of the next chunk */
	}
	json_object_set_new(ch, "finish_reason", json_null());
	json_object_set_new(c, "choices", json_pack("[o]", ch));
	if (any) sse(j, c);
	else json_decref(c);
}

/* Looks for a stop string in the held-back text; releases what can no longer be part of one.
 * Returns 1 when a stop string was found (the text from it on is dropped). */
static int settle(struct srv_job* j, json_t* lp_entries, int all)
{
	size_t cut = j->n_pend, stop_at = (size_t)-1;
	for (int i = 0; i < j->n_stop && j->n_pend; i++) {
		const char* p = memmem(j->pend, j->n_pend, j->stop[i], (size_t)j->stop_len[i]);
		if (p && (size_t)(p - j->pend) < stop_at) stop_at = (size_t)(p - j->pend);
	}
	if (stop_at != (size_t)-1) cut = stop_at;
	else if (!all && j->max_stop > 1) {
		/* keep the last max_stop - 1 bytes: a stop string may start there; cut on a character */
		cut = j->n_pend > (size_t)(j->max_stop - 1) ? j->n_pend - (size_t)(j->max_stop - 1) : 0;
		while (cut > 0 && cut < j->n_pend && ((unsigned char)j->pend[cut] & 0xc0) == 0x80) cut--;
	}
	if (cut > 0 || lp_entries) release(j, j->pend ? j->pend : "", cut, lp_entries, 0);
	if (stop_at != (size_t)-1) {
		j->n_pend = 0;
		return 1;
	}
	if (cut) memmove(j->pend, j->pend + cut, j->n_pend - cut);
	j->n_pend -= cut;
	return 0;
}

void out_begin(struct srv_job* j, const struct pv_tok* tok)
{
	pv_tok_stream_new(&j->dec, tok, PV_TOK_DECODE_SKIP_SPECIAL);
	if (j->kind == SRV_CHAT && j->dialect >= 0 && j->stream) j->cs = pv_chat_stream_new(j->dialect, j->parse_flags, j->tools, NULL, 0);
	if (j->logprobs && !j->stream) j->lp = json_array();
	j->in_think = (j->parse_flags & PV_CHAT_PARSE_IN_THINK) != 0;
	for (int i = 0; i < j->n_stop; i++)
		if (j->stop_len[i] > j->max_stop) j->max_stop = j->stop_len[i];
	j->t_start = now_s();
}

int out_token(struct srv_job* j, const pv_model* m, const struct pv_tok* tok, int32_t id, const struct pv_token_logprob* lp)
{
	const int32_t* eos;
	int ne = pv_model_eos(m, &eos);
	if (!j->t_first) j->t_first = now_s();
	for (int i = 0; i < ne; i++)
		if (id == eos[i]) {
			j->finish = SRV_FIN_STOP;
			return 1;
		}
	j->n_gen++;
	const char* text = pv_tok_text(tok, id);
	if (text && !strcmp(text, "<think>")) j->in_think = 1;
	if (j->in_think) j->n_reasoning++;
	if (text && !strcmp(text, "</think>")) j->in_think = 0;
	json_t* lpe = NULL;
	if (j->logprobs && lp) lpe = json_pack("[o]", logprob_entry(j, tok, lp));
	const char* b = NULL;
	size_t n = 0;
	if (j->dec) pv_tok_stream_push(j->dec, id, &b, &n);
	if (n && !grow(&j->pend, &j->cap_pend, j->n_pend + n)) {
		memcpy(j->pend + j->n_pend, b, n);
		j->n_pend += n;
	}
	int stopped = settle(j, lpe, 0);
	json_decref(lpe);
	if (stopped) {
		j->finish = SRV_FIN_STOP;
		j->stop_hit = 1;
		return 1;
	}
	if (j->max_tokens > 0 && j->n_gen >= j->max_tokens) {
		j->finish = SRV_FIN_LENGTH;
		return 1;
	}
	return 0;
}

static json_t* usage_json(const struct srv_job* j)
{
	json_t* u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", j->n_gen, "total_tokens",
	                      j->n_prompt + j->n_gen, "prompt_tokens_details", "cached_tokens", j->cached);
	if (j->kind == SRV_CHAT) json_object_set_new(u, "completion_tokens_details", json_pack("{s:i}", "reasoning_tokens", j->n_reasoning));
	return u;
}

static json_t* timings_json(const struct srv_job* j)
{
	double pms = (j->t_first - j->t_start) * 1e3, gms = (j->t_end - j->t_first) * 1e3;
	if (pms < 0) pms = 0;
	if (gms < 0) gms = 0;
	/* the first token is decided by the prompt's evaluation: predicted_n counts the tokens after it */
	int pn = j->n_gen > 1 ? j->n_gen - 1 : 0;
	return json_pack("{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:I,s:I,s:f}", "cache_n", j->cached, "prompt_n", j->evaluated,
	                 "prompt_ms", pms, "prompt_per_token_ms", j->evaluated ? pms / j->evaluated : 0.0, "prompt_per_second",
	                 pms > 0 ? j->evaluated * 1e3 / pms : 0.0, "predicted_n", j->n_gen, "predicted_ms", gms,
	                 "predicted_per_token_ms", pn ? gms / pn : 0.0, "predicted_per_second", gms > 0 ? pn * 1e3 / gms : 0.0,
	                 "draft_n", (json_int_t)j->drafted, "draft_n_accepted", (json_int_t)j->accepted, "queue_ms",
	                 (j->t_start - j->t_submit) * 1e3 > 0 ? (j->t_start - j->t_submit) * 1e3 : 0.0);
}

static const char* finish_name(const struct srv_job* j)
{
	if (j->finish == SRV_FIN_LENGTH) return "length";
	if (j->n_tool_calls > 0) return "tool_calls";
	return "stop";
}

/* Ends the job: the last bytes, status and done under one lock, so the reader never sees a
 * half-written end. */
static void finish_with(struct srv_job* j, int status, char* tail, size_t n)
{
	pthread_mutex_lock(&j->mu);
	j->status = status;
	pthread_mutex_unlock(&j->mu);
	if (tail && n) out_append(j, tail, n);
	pthread_mutex_lock(&j->mu);
	j->done = 1;
	pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	free(tail);
}

static void end_error(struct srv_job* j)
{
	int st = j->err_status ? j->err_status : 500;
	char* body = out_error_json(st, j->err[0] ? j->err : "generation failed", NULL);
	pthread_mutex_lock(&j->mu);
	int started = j->begun;
	pthread_mutex_unlock(&j->mu);
	if (j->stream && started) {
		/* the stream is under way (status 200 sent): an error event, then the end marker */
		size_t n = strlen(body);
		char* t = malloc(n + 32);
		int k = t ? snprintf(t, n + 32, "data: %s\n\ndata: [DONE]\n\n", body) : 0;
		free(body);
		finish_with(j, 200, t, (size_t)k);
		return;
	}
	finish_with(j, st, body, body ? strlen(body) : 0);
}

void out_end(struct srv_job* j, const struct pv_tok* tok)
{
	if (!j->t_end) j->t_end = now_s();
	if (!j->t_first) j->t_first = j->t_end;
	if (j->finish == SRV_FIN_CANCELLED) {
		finish_with(j, 499, NULL, 0);
		return;
	}
	if (j->finish == SRV_FIN_ERROR) {
		end_error(j);
		return;
	}
	if (!j->stop_hit) {
		/* what the decoder held back (an incomplete character), then everything still pending */
		const char* b = NULL;
		size_t n = 0;
		if (j->dec) pv_tok_stream_flush(j->dec, &b, &n);
		if (n && !grow(&j->pend, &j->cap_pend, j->n_pend + n)) {
			memcpy(j->pend + j->n_pend, b, n);
			j->n_pend += n;
		}
		if (settle(j, NULL, 1)) j->stop_hit = 1;
	}
	if (j->stream) {
		if (j->kind == SRV_CHAT) release(j, "", 0, NULL, 1); /* the parser's held-back text, and the role if nothing came */
		json_t* c = chunk_base(j);
		json_t* ch = json_pack("{s:i,s:n,s:s}", "index", 0, "logprobs", "finish_reason", finish_name(j));
		if (j->kind == SRV_CHAT) json_object_set_new(ch, "delta", json_object());
		else json_object_set_new(ch, "text", json_string(""));
		json_object_set_new(c, "choices", json_pack("[o]", ch));
		json_object_set_new(c, "timings", timings_json(j));
		sse(j, c);
		if (j->include_usage) {
			c = chunk_base(j);
			json_object_set_new(c, "choices", json_array());
			json_object_set_new(c, "usage", usage_json(j));
			sse(j, c);
		}
		finish_with(j, 200, strdup("data: [DONE]\n\n"), 14);
		return;
	}
	json_t* choice = json_pack("{s:i}", "index", 0);
	if (j->kind == SRV_CHAT) {
		json_t* msg = json_pack("{s:s}", "role", "assistant");
		json_t* parsed = j->dialect >= 0 ? pv_chat_parse(j->dialect, j->text ? j->text : "", j->n_text, j->parse_flags, j->tools, NULL, 0) : NULL;
		if (parsed && hermes(j) && !json_array_size(json_object_get(parsed, "tool_calls"))) {
			json_t* bare = bare_calls(j, json_string_value(json_object_get(parsed, "content")),
			                          json_string_length(json_object_get(parsed, "content")));
			if (bare) {
				json_object_set_new(parsed, "tool_calls", bare);
				json_object_set_new(parsed, "content", json_string(""));
			}
		}
		if (parsed) {
			json_t* content = json_object_get(parsed, "content");
			json_t* calls = json_object_get(parsed, "tool_calls");
			json_object_set(msg, "content", json_string_length(content) || !json_array_size(calls) ? content : json_null());
			json_t* rc = json_object_get(parsed, "reasoning_content");
			if (json_is_string(rc)) json_object_set(msg, "reasoning_content", rc);
			if (json_array_size(calls)) {
				json_t* d = json_object();
				add_calls(j, d, calls); /* ids and indexes, as the stream gives them */
				json_object_set(msg, "tool_calls", json_object_get(d, "tool_calls"));
				size_t i;
				json_t* tc;
				json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) json_object_del(tc, "index");
				json_decref(d);
			}
		} else {
			json_object_set_new(msg, "content", jstr(j->text ? j->text : "", j->n_text));
		}
		json_decref(parsed);
		json_object_set_new(choice, "message", msg);
		json_object_set_new(choice, "logprobs", j->lp ? json_pack("{s:O}", "content", j->lp) : json_null());
	} else {
		json_object_set_new(choice, "text", jstr(j->text ? j->text : "", j->n_text));
		json_object_set_new(choice, "logprobs", j->lp ? completion_logprobs(j->lp, 0) : json_null());
	}
	json_object_set_new(choice, "finish_reason", json_string(finish_name(j)));
	json_t* root = json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o,s:o}", "id", j->id, "object",
	                         j->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)j->created, "model",
	                         j->model_name, "choices", choice, "usage", usage_json(j), "timings", timings_json(j));
	char* body = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	if (!body) {
		snprintf(j->err, sizeof j->err, "out of memory writing the response");
		j->err_status = 503;
		end_error(j);
		return;
	}
	finish_with(j, 200, body, strlen(body));
}
