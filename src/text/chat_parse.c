/*
 * chat_parse.c: parsing generated assistant text back into reasoning, answer and tool calls
 * (Hermes JSON calls for qwen3/qwen2.5, XML calls for qwen3.5), for a whole text and as a
 * stream that reports what became certain with each piece.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/util.h"
#include "text/chat_internal.h"

/* Whole text ------------------------------------------------------------------------------------ */

struct pstate {
	int dialect;
	const json_t* tools;
	struct strbuf content;
	json_t* calls;
	json_t* errors;
	int oom;
};

static void perr(struct pstate* s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void perr(struct pstate* s, const char* fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (json_array_append_new(s->errors, json_string(msg))) s->oom = 1;
}

/* A JSON string of s, each byte that starts no well-formed UTF-8 sequence (base/utf8.h, strict:
 * what jansson accepts) replaced by U+FFFD; generated text can end in the middle of a character.
 * NULL only when out of memory. */
static json_t* json_from_view(struct strview s)
{
	struct strbuf b = { 0 };
	size_t run = 0, i = 0;
	while (i < s.n) {
		int bad, l = pv_utf8_seq(s.p + i, s.n - i, &bad);
		if (l > 0) {
			i += (size_t)l;
			continue;
		}
		strbuf_put(&b, s.p + run, i - run);
		strbuf_puts(&b, "\xEF\xBF\xBD");
		run = ++i;
	}
	json_t* j;
	if (!run) {
		j = json_stringn(s.p, s.n);
	} else {
		strbuf_put(&b, s.p + run, s.n - run);
		j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
	}
	free(b.p);
	return j;
}

/* Appends a tool call {"type":"function","function":{"name":..., "arguments": tojson(args)}}. */
static int push_call(struct pstate* s, struct strview name, const json_t* args)
{
	struct strbuf a = { 0 };
	if (json_is_string(args)) strbuf_putv(&a, strview_json(args));
	else pv_py_json(&a, args, 0);
	json_t* fn = json_object();
	json_t* call = json_object();
	json_t* nm = json_from_view(name);
	json_t* as = a.p ? json_stringn(a.p, a.n) : json_string("{}");
	int bad = a.oom || !fn || !call || !nm || !as;
	if (!bad) {
		bad |= json_object_set_new(fn, "name", nm);
		nm = NULL;
		bad |= json_object_set_new(fn, "arguments", as);
		as = NULL;
		bad |= json_object_set_new(call, "type", json_string("function"));
		bad |= json_object_set(call, "function", fn);
		bad |= json_array_append(s->calls, call);
	}
	json_decref(nm);
	json_decref(as);
	json_decref(fn);
	json_decref(call);
	free(a.p);
	return bad ? -1 : 0;
}

/* Hermes JSON body: {"name": "...", "arguments": {...}}. */
static int parse_hermes(struct pstate* s, struct strview body, const char** why)
{
	json_error_t je;
	json_t* j = json_loadb(body.p, body.n, 0, &je);
	const json_t* nm = j ? json_object_get(j, "name") : NULL;
	if (!j || !json_is_object(j)) {
		*why = "the body is not a JSON object";
	} else if (!json_is_string(nm)) {
		*why = "no \"name\" string";
	} else {
		const json_t* a = json_object_get(j, "arguments");
		if (!a) a = json_object_get(j, "parameters");
		json_t* empty = a ? NULL : json_object();
		int rc = push_call(s, strview_json(nm), a ? a : empty);
		json_decref(empty);
		json_decref(j);
		if (rc) s->oom = 1;
		return 0;
	}
	json_decref(j);
	return -1;
}

/* The JSON types the tool definitions give parameter `key` of function `name` (bit set of
 * 1 string, 2 integer, 4 number, 8 boolean, 16 object, 32 array, 64 null); 0 when unknown. */
static int param_types(const json_t* tools, struct strview name, const char* key)
{
	size_t k;
	json_t* t;
	json_array_foreach(tools, k, t) {
		const json_t* f = json_object_get(t, "function");
		if (!json_is_object(f)) f = t;
		const json_t* nm = json_object_get(f, "name");
		if (!json_is_string(nm) || json_string_length(nm) != name.n || memcmp(json_string_value(nm), name.p, name.n))
			continue;
		const json_t* ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), key), "type");
		static const char* const names[] = { "string", "integer", "number", "boolean", "object", "array", "null" };
		int bits = 0;
		for (size_t e = 0; e < (json_is_array(ty) ? json_array_size(ty) : 1); e++) {
			const json_t* x = json_is_array(ty) ? json_array_get(ty, e) : ty;
			for (int b = 0; b < 7; b++)
				if (json_is_string(x) && !strcmp(json_string_value(x), names[b])) bits |= 1 << b;
		}
		return bits;
	}
	return 0;
}

/* A parameter value as the schema types want it; a string when no typed reading fits. */
static json_t* typed_value(struct strview v, int types)
{
	if (types && !(types & 1)) {
		json_t* x = NULL;
		if ((types & 8) && (strview_starts(v, "True") && v.n == 4)) x = json_true();
		else if ((types & 8) && (strview_starts(v, "False") && v.n == 5)) x = json_false();
		else if ((types & 64) && (strview_starts(v, "None") && v.n == 4)) x = json_null();
		else x = json_loadb(v.p, v.n, JSON_DECODE_ANY, NULL);
		if (x) {
			int ok = (json_is_integer(x) && (types & 6)) || (json_is_real(x) && (types & 4)) ||
			         (json_is_boolean(x) && (types & 8)) || (json_is_object(x) && (types & 16)) ||
			         (json_is_array(x) && (types & 32)) || (json_is_null(x) && (types & 64));
			if (ok) return x;
			json_decref(x);
		}
	}
	return json_from_view(v);
}

static struct strview skip_ws(struct strview s)
{
	while (s.n && (*s.p == ' ' || *s.p == '\n' || *s.p == '\t' || *s.p == '\r')) s.p++, s.n--;
	return s;
}

static const char* first_of(const char* a, const char* b) { return !a ? b : !b ? a : a < b ? a : b; }

/* XML body: <function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>. */
static int parse_xml(struct pstate* s, struct strview body, const char** why)
{
	struct strview p = skip_ws(body);
	if (!strview_starts(p, "<function=")) {
		*why = "no <function=NAME> inside";
		return -1;
	}
	p.p += 10, p.n -= 10;
	const char* gt = memchr(p.p, '>', p.n);
	if (!gt || memchr(p.p, '\n', (size_t)(gt - p.p))) {
		*why = "unterminated <function=NAME>";
		return -1;
	}
	struct strview name = { p.p, (size_t)(gt - p.p) };
	p = (struct strview){ gt + 1, (size_t)(strview_end(p) - gt - 1) };
	json_t* args = json_object();
	if (!args) {
		s->oom = 1;
		return 0;
	}
	for (;;) {
		p = skip_ws(p);
		if (!p.n || strview_starts(p, "</function>")) break;
		if (!strview_starts(p, "<parameter=")) {
			json_decref(args);
			*why = "unexpected text inside <function>";
			return -1;
		}
		p.p += 11, p.n -= 11;
		gt = memchr(p.p, '>', p.n);
		if (!gt || memchr(p.p, '\n', (size_t)(gt - p.p))) {
			json_decref(args);
			*why = "unterminated <parameter=NAME>";
			return -1;
		}
		json_t* jk = json_from_view((struct strview){ p.p, (size_t)(gt - p.p) });
		const char* key = jk ? json_string_value(jk) : "";
		struct strview v = { gt + 1, (size_t)(strview_end(p) - gt - 1) };
		const char* close = strview_find(v, "</parameter>");
		const char* end = first_of(close, first_of(strview_find(v, "<parameter="), strview_find(v, "</function>")));
		if (!end) end = strview_end(v);
		struct strview val = { v.p, (size_t)(end - v.p) };
		if (val.n && val.p[0] == '\n') val.p++, val.n--;
		if (val.n && val.p[val.n - 1] == '\n') val.n--;
		json_t* jv = typed_value(val, s->tools ? param_types(s->tools, name, key) : 0);
		if (!jk || !jv || json_object_set_new(args, key, jv)) s->oom = 1;
		json_decref(jk);
		if (end == close) end += 12;
		p = (struct strview){ end, (size_t)(strview_end(v) - end) };
	}
	if (push_call(s, name, args)) s->oom = 1;
	json_decref(args);
	return 0;
}

static void parse_calls(struct pstate* s, struct strview body)
{
	const char* cur = body.p;
	const char* end = strview_end(body);
	for (;;) {
		struct strview rest = { cur, (size_t)(end - cur) };
		const char* open = strview_find(rest, "<tool_call>");
		if (!open) {
			strbuf_putv(&s->content, rest);
			return;
		}
		strbuf_put(&s->content, cur, (size_t)(open - cur));
		struct strview after = { open + 11, (size_t)(end - open - 11) };
		const char* close = strview_find(after, "</tool_call>");
		if (!close) {
			perr(s, "truncated tool call: <tool_call> without </tool_call> (%zu bytes kept in content)", (size_t)(end - open));
			strbuf_put(&s->content, open, (size_t)(end - open));
			return;
		}
		struct strview inner = { after.p, (size_t)(close - after.p) };
		const char* why = NULL;
		int rc = s->dialect == PV_CHAT_QWEN3_5 ? parse_xml(s, inner, &why) : parse_hermes(s, inner, &why);
		if (rc) {
			perr(s, "malformed tool call (%s); kept in content", why);
			strbuf_put(&s->content, open, (size_t)(close + 12 - open));
		}
		cur = close + 12;
	}
}

json_t* pv_chat_parse(int dialect, const char* text, size_t len, int flags, const json_t* tools, char* err,
                      size_t errlen)
{
	if (dialect < 0 || dialect >= PV_CHAT_DIALECT_COUNT) {
		pv_errf(err, errlen, "unknown chat dialect %d", dialect);
		return NULL;
	}
	struct pstate s = { .dialect = dialect, .tools = json_is_array(tools) ? tools : NULL };
	struct strview t = { text ? text : "", text ? len : 0 };
	struct strview reasoning = { NULL, 0 }, body = t;
	int complete = 1;
	s.calls = json_array();
	s.errors = json_array();
	json_t* res = json_object();
	if (!s.calls || !s.errors || !res) goto oom;

	if (flags & PV_CHAT_PARSE_IN_THINK) {
		const char* close = strview_find(t, "</think>");
		if (close) {
			reasoning = (struct strview){ t.p, (size_t)(close - t.p) };
			body = (struct strview){ close + 8, (size_t)(strview_end(t) - close - 8) };
		} else {
			reasoning = t;
			body = (struct strview){ strview_end(t), 0 };
			complete = 0;
		}
	} else {
		struct strview lead = pv_py_strip(t);
		const char* close = strview_find(t, "</think>");
		const char* call = strview_find(t, "<tool_call>");
		if (strview_starts(lead, "<think>")) {
			struct strview in = { lead.p + 7, (size_t)(strview_end(t) - lead.p - 7) };
			close = strview_find(in, "</think>");
			if (close) {
				reasoning = (struct strview){ in.p, (size_t)(close - in.p) };
				body = (struct strview){ close + 8, (size_t)(strview_end(t) - close - 8) };
			} else {
				reasoning = in;
				body = (struct strview){ strview_end(t), 0 };
				complete = 0;
			}
		} else if (close && (!call || close < call)) {
			/* the opening tag came from the prompt (qwen3.5) */
			reasoning = (struct strview){ t.p, (size_t)(close - t.p) };
			body = (struct strview){ close + 8, (size_t)(strview_end(t) - close - 8) };
		}
	}
	if (!complete) perr(&s, "unclosed think block: no </think> (output cut off?)");
	parse_calls(&s, body);
	if (s.oom || s.content.oom) goto oom;

	struct strview content = pv_py_strip((struct strview){ s.content.p ? s.content.p : "", s.content.n });
	json_t* jc = json_from_view(content);
	json_t* jr = reasoning.p ? json_from_view(pv_py_strip(reasoning)) : json_null();
	int bad = !jc || !jr;
	bad |= json_object_set_new(res, "content", jc);
	bad |= json_object_set_new(res, "reasoning_content", jr);
	bad |= json_object_set(res, "tool_calls", s.calls);
	bad |= json_object_set_new(res, "reasoning_complete", json_boolean(complete));
	bad |= json_object_set(res, "errors", s.errors);
	if (bad || s.oom) goto oom;
	json_decref(s.calls);
	json_decref(s.errors);
	free(s.content.p);
	return res;
oom:
	json_decref(s.calls);
	json_decref(s.errors);
	json_decref(res);
	free(s.content.p);
	pv_errf(err, errlen, "out of memory parsing generated text");
	return NULL;
}

/* Streaming parse --------------------------------------------------------------------------------- */

enum { ST_START, ST_THINK, ST_BODY, ST_CALL, ST_DONE };

/* Whitespace-trimmed output assembled from certain segments: leading whitespace is dropped,
 * trailing whitespace is held until something else follows it. */
struct trimmed {
	int started;
	struct strbuf hold;
};

struct pv_chat_stream {
	int phase;
	struct pstate ps;     /* calls, errors, tools; ps.content unused */
	json_t* tools_ref;
	struct strbuf buf;    /* everything fed so far */
	size_t pos;           /* bytes of buf consumed */
	size_t call_start;    /* in ST_CALL: where "<tool_call>" begins */
	size_t calls_out, errors_out;
	struct trimmed r, c;
	struct strbuf dr, dc; /* this feed's deltas */
};

static void trimmed_add(struct trimmed* t, struct strbuf* out, struct strview seg)
{
	if (!seg.n) return; /* nothing (seg.p may be NULL: no arithmetic on it) */
	/* split seg into [body][trailing whitespace] */
	struct strview body = pv_py_rstrip(seg);
	struct strview tail = { body.p + body.n, seg.n - body.n };
	if (!t->started) body = pv_py_strip(body); /* leading whitespace (body has no trailing) */
	if (body.n) {
		if (t->started) strbuf_put(out, t->hold.p, t->hold.n);
		strbuf_putv(out, body);
		t->hold.n = 0;
		t->started = 1;
	}
	if (t->started) strbuf_putv(&t->hold, tail);
}

/* Length of the longest proper prefix of tag that s ends with. */
static size_t partial_tag(struct strview s, const char* tag)
{
	size_t m = strlen(tag);
	for (size_t k = m - 1; k > 0; k--)
		if (s.n >= k && !memcmp(s.p + s.n - k, tag, k)) return k;
	return 0;
}

pv_chat_stream* pv_chat_stream_new(int dialect, int flags, const json_t* tools, char* err, size_t errlen)
{
	if (dialect < 0 || dialect >= PV_CHAT_DIALECT_COUNT) {
		pv_errf(err, errlen, "unknown chat dialect %d", dialect);
		return NULL;
	}
	pv_chat_stream* s = calloc(1, sizeof *s);
	if (!s || !(s->ps.calls = json_array()) || !(s->ps.errors = json_array())) {
		if (s) json_decref(s->ps.calls);
		free(s);
		pv_errf(err, errlen, "out of memory");
		return NULL;
	}
	s->ps.dialect = dialect;
	if (json_is_array(tools)) s->ps.tools = s->tools_ref = json_incref((json_t*)tools);
	s->phase = (flags & PV_CHAT_PARSE_IN_THINK) ? ST_THINK : ST_START;
	return s;
}

void pv_chat_stream_free(pv_chat_stream* s)
{
	if (!s) return;
	json_decref(s->ps.calls);
	json_decref(s->ps.errors);
	json_decref(s->tools_ref);
	free(s->buf.p);
	free(s->r.hold.p);
	free(s->c.hold.p);
	free(s->dr.p);
	free(s->dc.p);
	free(s);
}

/* Consumes certain text of the current phase up to (not including) `to`. */
static void stream_take(pv_chat_stream* s, size_t to)
{
	if (to == s->pos) return; /* buf.p is NULL until something was fed */
	struct strview seg = { s->buf.p + s->pos, to - s->pos };
	if (s->phase == ST_THINK) trimmed_add(&s->r, &s->dr, seg);
	else trimmed_add(&s->c, &s->dc, seg);
	s->pos = to;
}

/* Advances as far as the text allows; end: no more text will come. */
static void stream_run(pv_chat_stream* s, int end)
{
	for (;;) {
		struct strview rest = { s->buf.p ? s->buf.p + s->pos : "", s->buf.n - s->pos };
		if (s->phase == ST_START) {
			struct strview lead = pv_py_strip(rest);
			if (strview_starts(lead, "<think>")) {
				s->pos = (size_t)(lead.p - s->buf.p) + 7;
				s->phase = ST_THINK;
				continue;
			}
			if (!end && (!lead.n || (lead.n < 7 && !memcmp(lead.p, "<think>", lead.n)) || pv_utf8_incomplete(lead.p, lead.n) == lead.n))
				return;
			s->phase = ST_BODY;
			continue;
		}
		if (s->phase == ST_THINK || s->phase == ST_BODY) {
			const char* tag = s->phase == ST_THINK ? "</think>" : "<tool_call>";
			const char* f = strview_find(rest, tag);
			if (f) {
				size_t at = (size_t)(f - s->buf.p);
				stream_take(s, at);
				if (s->phase == ST_THINK) {
					s->r.hold.n = 0;
					s->r.started = 1;
					s->pos = at + 8;
					s->phase = ST_BODY;
				} else {
					s->call_start = at;
					s->phase = ST_CALL;
				}
				continue;
			}
			if (end) {
				stream_take(s, s->buf.n);
				if (s->phase == ST_THINK) perr(&s->ps, "unclosed think block: no </think> (output cut off?)");
				s->phase = ST_DONE;
				return;
			}
			size_t keep = partial_tag(rest, tag);
			struct strview safe = { rest.p, rest.n - keep };
			if (!keep) keep = pv_utf8_incomplete(safe.p, safe.n);
			stream_take(s, s->buf.n - (keep > rest.n ? rest.n : keep));
			return;
		}
		if (s->phase == ST_CALL) {
			struct strview after = { s->buf.p + s->call_start + 11, s->buf.n - s->call_start - 11 };
			const char* close = strview_find(after, "</tool_call>");
			if (!close) {
				if (!end) return;
				perr(&s->ps, "truncated tool call: <tool_call> without </tool_call> (%zu bytes kept in content)",
				     s->buf.n - s->call_start);
				trimmed_add(&s->c, &s->dc, (struct strview){ s->buf.p + s->call_start, s->buf.n - s->call_start });
				s->pos = s->buf.n;
				s->phase = ST_DONE;
				return;
			}
			const char* why = NULL;
			struct strview inner = { after.p, (size_t)(close - after.p) };
			int rc = s->ps.dialect == PV_CHAT_QWEN3_5 ? parse_xml(&s->ps, inner, &why) : parse_hermes(&s->ps, inner, &why);
			size_t stop = (size_t)(close - s->buf.p) + 12;
			if (rc) {
				perr(&s->ps, "malformed tool call (%s); kept in content", why);
				trimmed_add(&s->c, &s->dc, (struct strview){ s->buf.p + s->call_start, stop - s->call_start });
			}
			s->pos = stop;
			s->phase = ST_BODY;
			continue;
		}
		return; /* ST_DONE */
	}
}

json_t* pv_chat_stream_feed(pv_chat_stream* s, const char* text, size_t len, int end)
{
	json_t* d = json_object();
	if (!s || !d) {
		json_decref(d);
		return NULL;
	}
	if (s->phase == ST_DONE) return d;
	if (text && len) strbuf_put(&s->buf, text, len);
	s->dr.n = s->dc.n = 0;
	stream_run(s, end);
	if (s->buf.oom || s->r.hold.oom || s->c.hold.oom || s->dr.oom || s->dc.oom || s->ps.oom) {
		json_decref(d);
		return NULL;
	}
	int bad = 0;
	if (s->dr.n) bad |= json_object_set_new(d, "reasoning_content", json_from_view((struct strview){ s->dr.p, s->dr.n }));
	if (s->dc.n) bad |= json_object_set_new(d, "content", json_from_view((struct strview){ s->dc.p, s->dc.n }));
	size_t nc = json_array_size(s->ps.calls), ne = json_array_size(s->ps.errors);
	if (nc > s->calls_out) {
		json_t* a = json_array();
		for (size_t i = s->calls_out; a && i < nc; i++) bad |= json_array_append(a, json_array_get(s->ps.calls, i));
		bad |= json_object_set_new(d, "tool_calls", a);
		s->calls_out = nc;
	}
	if (ne > s->errors_out) {
		json_t* a = json_array();
		for (size_t i = s->errors_out; a && i < ne; i++) bad |= json_array_append(a, json_array_get(s->ps.errors, i));
		bad |= json_object_set_new(d, "errors", a);
		s->errors_out = ne;
	}
	if (bad) {
		json_decref(d);
		return NULL;
	}
	return d;
}
