/*
 * chat.c: native Qwen chat templates (qwen3, qwen3.5, qwen2.5) and the parser for generated
 * assistant text. Each render_* function follows its Jinja template statement by statement; the
 * comments quote the template where the logic is not obvious. The Python semantics the templates
 * rely on are reproduced here: json.dumps (transformers' tojson: ensure_ascii=False, default
 * separators, keys in the given order), float repr, str() of values, str.strip() with Python's
 * whitespace set (Jinja's trim), and split/lstrip/rstrip on "\n".
 */
#include "proven_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Growing output buffer --------------------------------------------------------------------- */

struct sb {
	char* p;
	size_t n, cap;
	int oom;
};

static void sb_put(struct sb* b, const char* s, size_t n)
{
	if (b->oom || !n) return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1) {
			if (cap > SIZE_MAX / 2) {
				b->oom = 1;
				return;
			}
			cap *= 2;
		}
		char* g = realloc(b->p, cap);
		if (!g) {
			b->oom = 1;
			return;
		}
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void sb_puts(struct sb* b, const char* s) { sb_put(b, s, strlen(s)); }

/* A string slice (not NUL-terminated in general). */
struct sv {
	const char* p;
	size_t n;
};

static void sb_sv(struct sb* b, struct sv s) { sb_put(b, s.p, s.n); }

static struct sv sv_of(const char* s) { return (struct sv){ s, strlen(s) }; }

static struct sv sv_json(const json_t* s) { return (struct sv){ json_string_value(s), json_string_length(s) }; }

/* Python string helpers ---------------------------------------------------------------------- */

static const char* sv_find(struct sv s, const char* needle)
{
	size_t m = strlen(needle);
	if (m > s.n) return NULL;
	return memmem(s.p, s.n, needle, m);
}

static const char* sv_rfind(struct sv s, const char* needle)
{
	size_t m = strlen(needle);
	if (m > s.n) return NULL;
	for (size_t i = s.n - m + 1; i-- > 0;)
		if (!memcmp(s.p + i, needle, m)) return s.p + i;
	return NULL;
}

static int sv_starts(struct sv s, const char* pre)
{
	size_t m = strlen(pre);
	return s.n >= m && !memcmp(s.p, pre, m);
}

static int sv_ends(struct sv s, const char* suf)
{
	size_t m = strlen(suf);
	return s.n >= m && !memcmp(s.p + s.n - m, suf, m);
}

static struct sv sv_lstrip_nl(struct sv s)
{
	while (s.n && *s.p == '\n') s.p++, s.n--;
	return s;
}

static struct sv sv_rstrip_nl(struct sv s)
{
	while (s.n && s.p[s.n - 1] == '\n') s.n--;
	return s;
}

/* Python's str.isspace() set (what str.strip() and Jinja's trim remove). */
static int py_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Decodes the UTF-8 character at p (n bytes available); returns its length (1 for a stray byte). */
static size_t utf8_dec(const unsigned char* p, size_t n, uint32_t* cp)
{
	unsigned c = p[0];
	size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
	if (len > n) len = 1;
	if (len == 1) {
		*cp = c;
		return 1;
	}
	uint32_t v = c & (0x7f >> len);
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80) {
			*cp = c;
			return 1;
		}
		v = v << 6 | (p[i] & 0x3f);
	}
	*cp = v;
	return len;
}

static struct sv sv_trim(struct sv s)
{
	uint32_t cp;
	while (s.n) {
		size_t l = utf8_dec((const unsigned char*)s.p, s.n, &cp);
		if (!py_space(cp)) break;
		s.p += l;
		s.n -= l;
	}
	while (s.n) {
		size_t st = s.n - 1; /* start of the last character */
		while (st > 0 && s.n - st < 4 && ((unsigned char)s.p[st] & 0xc0) == 0x80) st--;
		size_t l = utf8_dec((const unsigned char*)s.p + st, s.n - st, &cp);
		if (st + l != s.n) { /* not a whole character: treat the last byte alone */
			st = s.n - 1;
			cp = (unsigned char)s.p[st];
		}
		if (!py_space(cp)) break;
		s.n = st;
	}
	return s;
}

/* Python float repr (shortest round-trip digits; exponent form when the decimal point position
 * is <= -4 or > 16), and json.dumps' spelling of the non-finite values. */
static void py_float(struct sb* b, double v, int for_json)
{
	char tmp[40], out[48];
	if (isnan(v)) {
		sb_puts(b, for_json ? "NaN" : "nan");
		return;
	}
	if (isinf(v)) {
		sb_puts(b, v < 0 ? (for_json ? "-Infinity" : "-inf") : (for_json ? "Infinity" : "inf"));
		return;
	}
	if (v == 0) {
		sb_puts(b, signbit(v) ? "-0.0" : "0.0");
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
		if (strtod(tmp, NULL) == v) break;
	}
	/* tmp: [-]d[.ddd]e[+-]XX */
	char digits[24];
	int nd = 0, neg = 0;
	const char* q = tmp;
	if (*q == '-') neg = 1, q++;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9' && nd < 20) digits[nd++] = *q;
	int e = atoi(q + 1);
	while (nd > 1 && digits[nd - 1] == '0') nd--;
	digits[nd] = 0;
	int decpt = e + 1;
	size_t o = 0;
	if (neg) out[o++] = '-';
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			out[o++] = '0';
			out[o++] = '.';
			for (int i = 0; i < -decpt; i++) out[o++] = '0';
			for (int i = 0; i < nd; i++) out[o++] = digits[i];
		} else if (decpt >= nd) {
			for (int i = 0; i < nd; i++) out[o++] = digits[i];
			for (int i = nd; i < decpt; i++) out[o++] = '0';
			out[o++] = '.';
			out[o++] = '0';
		} else {
			for (int i = 0; i < nd; i++) {
				if (i == decpt) out[o++] = '.';
				out[o++] = digits[i];
			}
		}
		out[o] = 0;
	} else {
		out[o++] = digits[0];
		if (nd > 1) {
			out[o++] = '.';
			for (int i = 1; i < nd; i++) out[o++] = digits[i];
		}
		snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	sb_puts(b, out);
}

/* json.dumps string literal with ensure_ascii=False. */
static void py_json_str(struct sb* b, struct sv s)
{
	sb_put(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < s.n; i++) {
		unsigned char c = (unsigned char)s.p[i];
		const char* esc = NULL;
		char u[8];
		if (c == '"') esc = "\\\"";
		else if (c == '\\') esc = "\\\\";
		else if (c == '\n') esc = "\\n";
		else if (c == '\r') esc = "\\r";
		else if (c == '\t') esc = "\\t";
		else if (c == '\b') esc = "\\b";
		else if (c == '\f') esc = "\\f";
		else if (c < 0x20) {
			snprintf(u, sizeof u, "\\u%04x", c);
			esc = u;
		}
		if (esc) {
			sb_put(b, s.p + run, i - run);
			sb_puts(b, esc);
			run = i + 1;
		}
	}
	sb_put(b, s.p + run, s.n - run);
	sb_put(b, "\"", 1);
}

/* transformers' tojson: json.dumps(x, ensure_ascii=False) (separators ", " and ": "). */
static int py_json(struct sb* b, const json_t* v, int depth)
{
	char num[32];
	if (depth > 512) return -1;
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char* k;
		json_t* x;
		int first = 1;
		sb_put(b, "{", 1);
		json_object_foreach((json_t*)v, k, x) {
			if (!first) sb_put(b, ", ", 2);
			first = 0;
			py_json_str(b, sv_of(k));
			sb_put(b, ": ", 2);
			if (py_json(b, x, depth + 1)) return -1;
		}
		sb_put(b, "}", 1);
		return 0;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t* x;
		sb_put(b, "[", 1);
		json_array_foreach(v, i, x) {
			if (i) sb_put(b, ", ", 2);
			if (py_json(b, x, depth + 1)) return -1;
		}
		sb_put(b, "]", 1);
		return 0;
	}
	case JSON_STRING: py_json_str(b, sv_json(v)); return 0;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		sb_puts(b, num);
		return 0;
	case JSON_REAL: py_float(b, json_real_value(v), 1); return 0;
	case JSON_TRUE: sb_puts(b, "true"); return 0;
	case JSON_FALSE: sb_puts(b, "false"); return 0;
	default: sb_puts(b, "null"); return 0;
	}
}

/* Python str(x) of a JSON value (Jinja's `| string`); containers never reach here. */
static void py_str(struct sb* b, const json_t* v)
{
	char num[32];
	switch (json_typeof(v)) {
	case JSON_STRING: sb_sv(b, sv_json(v)); break;
	case JSON_INTEGER:
		snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
		sb_puts(b, num);
		break;
	case JSON_REAL: py_float(b, json_real_value(v), 0); break;
	case JSON_TRUE: sb_puts(b, "True"); break;
	case JSON_FALSE: sb_puts(b, "False"); break;
	case JSON_NULL: sb_puts(b, "None"); break;
	default: py_json(b, v, 0); break;
	}
}

/* Messages ------------------------------------------------------------------------------------ */

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL };

struct cmsg {
	int role;
	const json_t* j;
	struct sb text;     /* the content as the template sees it (before any trim)           */
	const json_t* reasoning; /* reasoning_content when a string, else NULL             */
	const json_t* calls;     /* tool_calls when a non-empty array, else NULL           */
};

struct ctx {
	int dialect;
	char* err;
	size_t errlen;
	struct cmsg* m;
	size_t n;
	struct sb out;
};

static const char* kind(const json_t* v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: return "an object";
	case JSON_ARRAY: return "an array";
	case JSON_STRING: return "a string";
	case JSON_INTEGER: return "an integer";
	case JSON_REAL: return "a number";
	case JSON_TRUE:
	case JSON_FALSE: return "a boolean";
	default: return "null";
	}
}

static int fail(struct ctx* c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct ctx* c, const char* fmt, ...)
{
	if (c->err && c->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->err, c->errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int is_str(const json_t* o, const char* key, const char* s)
{
	const json_t* v = json_object_get(o, key);
	return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* The content of message i as text. qwen3.5 follows the template's render_content macro (text
 * parts, vision placeholders, errors); qwen3/qwen2.5 accept text parts and null (see proven_text.h). */
static int content_text(struct ctx* c, size_t i)
{
	struct cmsg* m = &c->m[i];
	const json_t* v = json_object_get(m->j, "content");
	int q35 = c->dialect == PV_CHAT_QWEN3_5;
	int is_system = m->role == R_SYSTEM;

	if (!v || json_is_null(v)) return 0;
	if (json_is_string(v)) {
		sb_sv(&m->text, sv_json(v));
		return 0;
	}
	if (!json_is_array(v))
		return fail(c, "messages[%zu]: Unexpected content type. (content is %s; a string, a list of parts or null is expected)",
		            i, kind(v));
	size_t k;
	json_t* it;
	json_array_foreach(v, k, it) {
		if (!json_is_object(it))
			return fail(c, "messages[%zu].content[%zu]: Unexpected item type in content. (a part must be an object, not %s)",
			            i, k, kind(it));
		int image = json_object_get(it, "image") || json_object_get(it, "image_url") || is_str(it, "type", "image");
		int video = !image && (json_object_get(it, "video") || is_str(it, "type", "video"));
		if (image || video) {
			if (!q35)
				return fail(c, "messages[%zu].content[%zu]: the %s template has no %s placeholders (use qwen3.5)",
				            i, k, pv_chat_dialect_name(c->dialect), image ? "image" : "video");
			if (is_system)
				return fail(c, "messages[%zu]: System message cannot contain %s.", i, image ? "images" : "videos");
			sb_puts(&m->text, image ? "<|vision_start|><|image_pad|><|vision_end|>"
			                        : "<|vision_start|><|video_pad|><|vision_end|>");
		} else if (json_object_get(it, "text")) {
			const json_t* t = json_object_get(it, "text");
			if (!json_is_string(t))
				return fail(c, "messages[%zu].content[%zu].text must be a string, not %s", i, k, kind(t));
			sb_sv(&m->text, sv_json(t));
		} else {
			return fail(c, "messages[%zu].content[%zu]: Unexpected item type in content. (no text, image or video)", i, k);
		}
	}
	return 0;
}

static int load_messages(struct ctx* c, const json_t* messages, const json_t* tools)
{
	if (!json_is_array(messages))
		return fail(c, "messages must be a JSON array, not %s", messages ? kind(messages) : "missing");
	if (tools && !json_is_null(tools)) {
		if (!json_is_array(tools)) return fail(c, "tools must be a JSON array, not %s", kind(tools));
		size_t k;
		json_t* t;
		json_array_foreach(tools, k, t)
			if (!json_is_object(t)) return fail(c, "tools[%zu] must be an object, not %s", k, kind(t));
	}
	c->n = json_array_size(messages);
	if (!c->n)
		return fail(c, c->dialect == PV_CHAT_QWEN3_5 ? "No messages provided." : "no messages (the conversation is empty)");
	c->m = calloc(c->n, sizeof *c->m);
	if (!c->m) return fail(c, "out of memory");
	for (size_t i = 0; i < c->n; i++) {
		struct cmsg* m = &c->m[i];
		m->j = json_array_get(messages, i);
		if (!json_is_object(m->j)) return fail(c, "messages[%zu] must be an object, not %s", i, kind(m->j));
		const json_t* r = json_object_get(m->j, "role");
		if (!json_is_string(r))
			return fail(c, "messages[%zu]: role must be a string, not %s", i, r ? kind(r) : "missing");
		const char* rs = json_string_value(r);
		if (!strcmp(rs, "system")) m->role = R_SYSTEM;
		else if (!strcmp(rs, "user")) m->role = R_USER;
		else if (!strcmp(rs, "assistant")) m->role = R_ASSISTANT;
		else if (!strcmp(rs, "tool")) m->role = R_TOOL;
		else
			return fail(c, "messages[%zu]: Unexpected message role. (\"%.40s\"; expected system, user, assistant or tool)",
			            i, rs);
		const json_t* rc = json_object_get(m->j, "reasoning_content");
		if (rc && !json_is_null(rc)) {
			if (!json_is_string(rc))
				return fail(c, "messages[%zu]: reasoning_content must be a string or null, not %s", i, kind(rc));
			m->reasoning = rc;
		}
		const json_t* tc = json_object_get(m->j, "tool_calls");
		if (tc && !json_is_null(tc)) {
			if (!json_is_array(tc))
				return fail(c, "messages[%zu]: tool_calls must be an array, not %s", i, kind(tc));
			if (json_array_size(tc)) m->calls = tc;
		}
		if (content_text(c, i)) return -1;
		if (m->text.oom) return fail(c, "out of memory");
	}
	return 0;
}

static struct sv text_of(const struct cmsg* m) { return (struct sv){ m->text.p ? m->text.p : "", m->text.n }; }

/* The function object of tool call j of message i, with its name. */
static int call_fn(struct ctx* c, size_t i, size_t j, const json_t** fn, struct sv* name)
{
	const json_t* tc = json_array_get(c->m[i].calls, j);
	if (!json_is_object(tc))
		return fail(c, "messages[%zu].tool_calls[%zu] must be an object, not %s", i, j, kind(tc));
	const json_t* f = json_object_get(tc, "function");
	if (f) {
		if (!json_is_object(f))
			return fail(c, "messages[%zu].tool_calls[%zu].function must be an object, not %s", i, j, kind(f));
		/* qwen3: `{%- if tool_call.function %}`; an empty object is falsy there */
		if (c->dialect == PV_CHAT_QWEN3_5 || json_object_size(f)) tc = f;
	}
	const json_t* nm = json_object_get(tc, "name");
	if (!json_is_string(nm))
		return fail(c, "messages[%zu].tool_calls[%zu]: function name must be a string, not %s", i, j,
		            nm ? kind(nm) : "missing");
	*fn = tc;
	*name = sv_json(nm);
	return 0;
}

/* Hermes JSON call (qwen3, qwen2.5): {"name": "...", "arguments": ...}. */
static int hermes_call(struct ctx* c, size_t i, size_t j, int string_args_raw)
{
	const json_t* fn;
	struct sv name;
	if (call_fn(c, i, j, &fn, &name)) return -1;
	const json_t* a = json_object_get(fn, "arguments");
	if (!a) return fail(c, "messages[%zu].tool_calls[%zu]: arguments missing (tojson of Undefined fails)", i, j);
	sb_puts(&c->out, "<tool_call>\n{\"name\": \"");
	sb_sv(&c->out, name);
	sb_puts(&c->out, "\", \"arguments\": ");
	if (string_args_raw && json_is_string(a)) sb_sv(&c->out, sv_json(a));
	else if (py_json(&c->out, a, 0)) return fail(c, "messages[%zu].tool_calls[%zu]: arguments nested too deeply", i, j);
	sb_puts(&c->out, "}\n</tool_call>");
	return 0;
}

static void tools_json(struct ctx* c, const json_t* tools)
{
	size_t k;
	json_t* t;
	json_array_foreach(tools, k, t) {
		sb_put(&c->out, "\n", 1);
		py_json(&c->out, t, 0);
	}
}

/* The tools section the Qwen3 and Qwen2.5 templates put in the system turn, from "# Tools" to the
 * end of the turn (Hermes-style JSON tool calls). */
static void hermes_tools(struct ctx* c, const json_t* tools)
{
	struct sb* b = &c->out;
	sb_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
	           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
	tools_json(c, tools);
	sb_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
	           "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
	           "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

static int has_tools(const json_t* tools) { return json_is_array(tools) && json_array_size(tools); }

/* qwen3 ----------------------------------------------------------------------------------------- */

static int render_qwen3(struct ctx* c, const json_t* tools, const struct pv_chat_opts* o)
{
	struct sb* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		sb_puts(b, "<|im_start|>system\n");
		if (c->m[0].role == R_SYSTEM) {
			sb_sv(b, text_of(&c->m[0]));
			sb_puts(b, "\n\n");
		}
		hermes_tools(c, tools);
	} else if (c->m[0].role == R_SYSTEM) {
		sb_puts(b, "<|im_start|>system\n");
		sb_sv(b, text_of(&c->m[0]));
		sb_puts(b, "<|im_end|>\n");
	}
	/* the last user message that is not a bare tool response */
	size_t last_query = n - 1;
	for (size_t k = n; k-- > 0;) {
		struct sv t = text_of(&c->m[k]);
		if (c->m[k].role == R_USER && !(sv_starts(t, "<tool_response>") && sv_ends(t, "</tool_response>"))) {
			last_query = k;
			break;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct sv text = text_of(m);
		if (m->role == R_USER || (m->role == R_SYSTEM && i > 0)) {
			sb_puts(b, m->role == R_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
			sb_sv(b, text);
			sb_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			struct sv content = text, reasoning = { "", 0 };
			if (m->reasoning) {
				reasoning = sv_json(m->reasoning);
			} else if (sv_find(text, "</think>")) {
				const char* last = sv_rfind(text, "</think>");
				content = sv_lstrip_nl((struct sv){ last + 8, (size_t)(text.p + text.n - last - 8) });
				struct sv before = sv_rstrip_nl((struct sv){ text.p, (size_t)(sv_find(text, "</think>") - text.p) });
				const char* open = sv_rfind(before, "<think>");
				if (open) before = (struct sv){ open + 7, (size_t)(before.p + before.n - open - 7) };
				reasoning = sv_lstrip_nl(before);
			}
			if (i > last_query && (i == n - 1 || reasoning.n)) {
				sb_puts(b, "<|im_start|>assistant\n<think>\n");
				sb_sv(b, sv_rstrip_nl(sv_lstrip_nl(reasoning)));
				sb_puts(b, "\n</think>\n\n");
				sb_sv(b, sv_lstrip_nl(content));
			} else {
				sb_puts(b, "<|im_start|>assistant\n");
				sb_sv(b, content);
			}
			for (size_t j = 0; m->calls && j < json_array_size(m->calls); j++) {
				if (j > 0 || content.n) sb_put(b, "\n", 1);
				if (hermes_call(c, i, j, 1)) return -1;
			}
			sb_puts(b, "<|im_end|>\n");
		} else if (m->role == R_TOOL) {
			if (i == 0 || c->m[i - 1].role != R_TOOL) sb_puts(b, "<|im_start|>user");
			sb_puts(b, "\n<tool_response>\n");
			sb_sv(b, text);
			sb_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) sb_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt) {
		sb_puts(b, "<|im_start|>assistant\n");
		if (!o->enable_thinking) sb_puts(b, "<think>\n\n</think>\n\n");
	}
	return 0;
}

/* qwen3.5 --------------------------------------------------------------------------------------- */

/* Arguments of a qwen3.5 call as an object: the object itself, or a JSON string parsed (see proven_text.h).
 * *owned receives a reference to drop when the arguments were parsed. */
static int q35_args(struct ctx* c, size_t i, size_t j, const json_t* a, const json_t** obj, json_t** owned)
{
	*owned = NULL;
	if (json_is_object(a)) {
		*obj = a;
		return 0;
	}
	if (json_is_string(a)) {
		json_error_t je;
		json_t* p = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
		if (!p) return fail(c, "messages[%zu].tool_calls[%zu]: arguments string is not valid JSON: %s", i, j, je.text);
		if (!json_is_object(p)) {
			json_decref(p);
			return fail(c, "messages[%zu].tool_calls[%zu]: arguments string must hold a JSON object", i, j);
		}
		*obj = *owned = p;
		return 0;
	}
	return fail(c, "messages[%zu].tool_calls[%zu]: arguments must be an object or a JSON string, not %s", i, j, kind(a));
}

static int render_qwen35(struct ctx* c, const json_t* tools, const struct pv_chat_opts* o)
{
	struct sb* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		sb_puts(b, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
		tools_json(c, tools);
		sb_puts(b, "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
		           "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
		           "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
		           "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
		           "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
		           "nested within <tool_call></tool_call> XML tags\n"
		           "- Required parameters MUST be specified\n"
		           "- You may provide optional reasoning for your function call in natural language BEFORE the function "
		           "call, but NOT after\n"
		           "- If there is no function call available, answer the question like normal with your current knowledge "
		           "and do not tell the user about function calls\n</IMPORTANT>");
		if (c->m[0].role == R_SYSTEM) {
			struct sv s = sv_trim(text_of(&c->m[0]));
			if (s.n) {
				sb_puts(b, "\n\n");
				sb_sv(b, s);
			}
		}
		sb_puts(b, "<|im_end|>\n");
	} else if (c->m[0].role == R_SYSTEM) {
		sb_puts(b, "<|im_start|>system\n");
		sb_sv(b, sv_trim(text_of(&c->m[0])));
		sb_puts(b, "<|im_end|>\n");
	}
	size_t last_query = 0;
	int found = 0;
	for (size_t k = n; k-- > 0;) {
		struct sv t = sv_trim(text_of(&c->m[k]));
		if (c->m[k].role == R_USER && !(sv_starts(t, "<tool_response>") && sv_ends(t, "</tool_response>"))) {
			last_query = k;
			found = 1;
			break;
		}
	}
	if (!found) return fail(c, "No user query found in messages.");
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct sv content = sv_trim(text_of(m));
		if (m->role == R_SYSTEM) {
			if (i > 0) return fail(c, "messages[%zu]: System message must be at the beginning.", i);
		} else if (m->role == R_USER) {
			sb_puts(b, "<|im_start|>user\n");
			sb_sv(b, content);
			sb_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			struct sv reasoning = { "", 0 };
			if (m->reasoning) {
				reasoning = sv_json(m->reasoning);
			} else if (sv_find(content, "</think>")) {
				struct sv before = sv_rstrip_nl((struct sv){ content.p, (size_t)(sv_find(content, "</think>") - content.p) });
				const char* open = sv_rfind(before, "<think>");
				if (open) before = (struct sv){ open + 7, (size_t)(before.p + before.n - open - 7) };
				reasoning = sv_lstrip_nl(before);
				const char* last = sv_rfind(content, "</think>");
				content = sv_lstrip_nl((struct sv){ last + 8, (size_t)(content.p + content.n - last - 8) });
			}
			reasoning = sv_trim(reasoning);
			if (i > last_query) {
				sb_puts(b, "<|im_start|>assistant\n<think>\n");
				sb_sv(b, reasoning);
				sb_puts(b, "\n</think>\n\n");
			} else {
				sb_puts(b, "<|im_start|>assistant\n");
			}
			sb_sv(b, content);
			for (size_t j = 0; m->calls && j < json_array_size(m->calls); j++) {
				const json_t* fn;
				struct sv name;
				if (call_fn(c, i, j, &fn, &name)) return -1;
				if (j == 0) sb_puts(b, sv_trim(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
				else sb_puts(b, "\n<tool_call>\n<function=");
				sb_sv(b, name);
				sb_puts(b, ">\n");
				const json_t* a = json_object_get(fn, "arguments");
				if (a) {
					const json_t* obj;
					json_t* owned;
					if (q35_args(c, i, j, a, &obj, &owned)) return -1;
					const char* k;
					json_t* v;
					int bad = 0;
					json_object_foreach((json_t*)obj, k, v) {
						sb_puts(b, "<parameter=");
						sb_puts(b, k);
						sb_puts(b, ">\n");
						/* args_value | tojson if mapping or (sequence and not string) else args_value | string */
						if (json_is_object(v) || json_is_array(v)) bad |= py_json(b, v, 0);
						else py_str(b, v);
						sb_puts(b, "\n</parameter>\n");
					}
					json_decref(owned);
					if (bad) return fail(c, "messages[%zu].tool_calls[%zu]: arguments nested too deeply", i, j);
				}
				sb_puts(b, "</function>\n</tool_call>");
			}
			sb_puts(b, "<|im_end|>\n");
		} else { /* tool */
			if (i > 0 && c->m[i - 1].role != R_TOOL) sb_puts(b, "<|im_start|>user");
			sb_puts(b, "\n<tool_response>\n");
			sb_sv(b, content);
			sb_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) sb_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt)
		sb_puts(b, o->enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
	return 0;
}

/* qwen2.5 --------------------------------------------------------------------------------------- */

#define QWEN25_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static int render_qwen25(struct ctx* c, const json_t* tools, const struct pv_chat_opts* o)
{
	struct sb* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		sb_puts(b, "<|im_start|>system\n");
		if (c->m[0].role == R_SYSTEM) sb_sv(b, text_of(&c->m[0]));
		else sb_puts(b, QWEN25_DEFAULT_SYSTEM);
		sb_puts(b, "\n\n");
		hermes_tools(c, tools);
	} else if (c->m[0].role == R_SYSTEM) {
		sb_puts(b, "<|im_start|>system\n");
		sb_sv(b, text_of(&c->m[0]));
		sb_puts(b, "<|im_end|>\n");
	} else {
		sb_puts(b, "<|im_start|>system\n" QWEN25_DEFAULT_SYSTEM "<|im_end|>\n");
	}
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct sv text = text_of(m);
		if (m->role == R_USER || (m->role == R_SYSTEM && i > 0) || (m->role == R_ASSISTANT && !m->calls)) {
			sb_puts(b, m->role == R_USER ? "<|im_start|>user\n"
			           : m->role == R_SYSTEM ? "<|im_start|>system\n" : "<|im_start|>assistant\n");
			sb_sv(b, text);
			sb_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			sb_puts(b, "<|im_start|>assistant");
			if (text.n) {
				sb_put(b, "\n", 1);
				sb_sv(b, text);
			}
			for (size_t j = 0; j < json_array_size(m->calls); j++) {
				sb_put(b, "\n", 1);
				if (hermes_call(c, i, j, 0)) return -1;
			}
			sb_puts(b, "<|im_end|>\n");
		} else if (m->role == R_TOOL) {
			if (i == 0 || c->m[i - 1].role != R_TOOL) sb_puts(b, "<|im_start|>user");
			sb_puts(b, "\n<tool_response>\n");
			sb_sv(b, text);
			sb_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) sb_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt) sb_puts(b, "<|im_start|>assistant\n");
	return 0;
}

/* Public: names, detection, render -------------------------------------------------------------- */

static const char* const dialect_names[PV_CHAT_DIALECT_COUNT] = { "qwen3", "qwen3.5", "qwen2.5" };

const char* pv_chat_dialect_name(int d)
{
	return d >= 0 && d < PV_CHAT_DIALECT_COUNT ? dialect_names[d] : "unknown";
}

int pv_chat_dialect_from_name(const char* s)
{
	static const struct { const char* name; int d; } alias[] = {
		{ "qwen3", PV_CHAT_QWEN3 },     { "qwen3.5", PV_CHAT_QWEN3_5 }, { "qwen3_5", PV_CHAT_QWEN3_5 },
		{ "qwen35", PV_CHAT_QWEN3_5 },  { "qwen2.5", PV_CHAT_QWEN2_5 }, { "qwen2_5", PV_CHAT_QWEN2_5 },
		{ "qwen25", PV_CHAT_QWEN2_5 },
	};
	for (size_t i = 0; s && i < sizeof alias / sizeof alias[0]; i++)
		if (!strcmp(s, alias[i].name)) return alias[i].d;
	return -1;
}

int pv_chat_detect_dialect(const char* t)
{
	if (!t) return -1;
	if (strstr(t, "<function=")) return PV_CHAT_QWEN3_5;
	if (strstr(t, "enable_thinking")) return PV_CHAT_QWEN3;
	if (strstr(t, "You are Qwen, created by Alibaba Cloud")) return PV_CHAT_QWEN2_5;
	return -1;
}

int pv_chat_render(int dialect, const json_t* messages, const json_t* tools, const struct pv_chat_opts* opts,
                   char** out, size_t* out_len, char* err, size_t errlen)
{
	static const struct pv_chat_opts defaults = { 0, 1 };
	struct ctx c = { .dialect = dialect, .err = err, .errlen = errlen };
	int rc;

	if (out) *out = NULL;
	if (out_len) *out_len = 0;
	if (!out) return pv_errf(err, errlen, "pv_chat_render: no output pointer");
	if (dialect < 0 || dialect >= PV_CHAT_DIALECT_COUNT) return pv_errf(err, errlen, "unknown chat dialect %d", dialect);
	if (!opts) opts = &defaults;
	rc = load_messages(&c, messages, tools);
	if (!rc) {
		if (dialect == PV_CHAT_QWEN3) rc = render_qwen3(&c, tools, opts);
		else if (dialect == PV_CHAT_QWEN3_5) rc = render_qwen35(&c, tools, opts);
		else rc = render_qwen25(&c, tools, opts);
	}
	if (!rc && c.out.oom) rc = fail(&c, "out of memory rendering the prompt");
	for (size_t i = 0; c.m && i < c.n; i++) free(c.m[i].text.p);
	free(c.m);
	if (rc) {
		free(c.out.p);
		return -1;
	}
	if (!c.out.p) { /* empty prompt */
		c.out.p = malloc(1);
		if (!c.out.p) return pv_errf(err, errlen, "out of memory");
		c.out.p[0] = 0;
	}
	*out = c.out.p;
	if (out_len) *out_len = c.out.n;
	return 0;
}

/* Parsing --------------------------------------------------------------------------------------- */

struct pstate {
	int dialect;
	const json_t* tools;
	struct sb content;
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

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlongs, surrogates or values past
 * U+10FFFF, as jansson checks), 0 if invalid. */
static size_t utf8_valid(const unsigned char* p, size_t n)
{
	unsigned c = p[0];
	if (c < 0x80) return 1;
	size_t len = (c >= 0xc2 && c <= 0xdf) ? 2 : (c >> 4) == 0xe ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
	if (!len || len > n) return 0;
	for (size_t i = 1; i < len; i++)
		if ((p[i] & 0xc0) != 0x80) return 0;
	if (c == 0xe0 && p[1] < 0xa0) return 0;  /* overlong */
	if (c == 0xed && p[1] > 0x9f) return 0;  /* surrogate */
	if (c == 0xf0 && p[1] < 0x90) return 0;  /* overlong */
	if (c == 0xf4 && p[1] > 0x8f) return 0;  /* > U+10FFFF */
	return len;
}

/* A JSON string of s, with each invalid UTF-8 byte replaced by U+FFFD (generated text can end in
 * the middle of a character). NULL only when out of memory. */
static json_t* sv_json_string(struct sv s)
{
	struct sb b = { 0 };
	size_t run = 0, i = 0;
	while (i < s.n) {
		size_t l = utf8_valid((const unsigned char*)s.p + i, s.n - i);
		if (l) {
			i += l;
			continue;
		}
		sb_put(&b, s.p + run, i - run);
		sb_puts(&b, "\xEF\xBF\xBD");
		run = ++i;
	}
	json_t* j;
	if (!run) {
		j = json_stringn(s.p, s.n);
	} else {
		sb_put(&b, s.p + run, s.n - run);
		j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.n);
	}
	free(b.p);
	return j;
}

static const char* sv_end(struct sv s) { return s.p + s.n; }

/* Appends a tool call {"type":"function","function":{"name":..., "arguments": tojson(args)}}. */
static int push_call(struct pstate* s, struct sv name, const json_t* args)
{
	struct sb a = { 0 };
	if (json_is_string(args)) sb_sv(&a, sv_json(args));
	else py_json(&a, args, 0);
	json_t* fn = json_object();
	json_t* call = json_object();
	json_t* nm = sv_json_string(name);
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
static int parse_hermes(struct pstate* s, struct sv body, const char** why)
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
		int rc = push_call(s, sv_json(nm), a ? a : empty);
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
static int param_types(const json_t* tools, struct sv name, const char* key)
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
static json_t* typed_value(struct sv v, int types)
{
	if (types && !(types & 1)) {
		json_t* x = NULL;
		if ((types & 8) && (sv_starts(v, "True") && v.n == 4)) x = json_true();
		else if ((types & 8) && (sv_starts(v, "False") && v.n == 5)) x = json_false();
		else if ((types & 64) && (sv_starts(v, "None") && v.n == 4)) x = json_null();
		else x = json_loadb(v.p, v.n, JSON_DECODE_ANY, NULL);
		if (x) {
			int ok = (json_is_integer(x) && (types & 6)) || (json_is_real(x) && (types & 4)) ||
			         (json_is_boolean(x) && (types & 8)) || (json_is_object(x) && (types & 16)) ||
			         (json_is_array(x) && (types & 32)) || (json_is_null(x) && (types & 64));
			if (ok) return x;
			json_decref(x);
		}
	}
	return sv_json_string(v);
}

static struct sv skip_ws(struct sv s)
{
	while (s.n && (*s.p == ' ' || *s.p == '\n' || *s.p == '\t' || *s.p == '\r')) s.p++, s.n--;
	return s;
}

static const char* first_of(const char* a, const char* b) { return !a ? b : !b ? a : a < b ? a : b; }

/* XML body: <function=NAME>\n<parameter=K>\nV\n</parameter>\n...</function>. */
static int parse_xml(struct pstate* s, struct sv body, const char** why)
{
	struct sv p = skip_ws(body);
	if (!sv_starts(p, "<function=")) {
		*why = "no <function=NAME> inside";
		return -1;
	}
	p.p += 10, p.n -= 10;
	const char* gt = memchr(p.p, '>', p.n);
	if (!gt || memchr(p.p, '\n', (size_t)(gt - p.p))) {
		*why = "unterminated <function=NAME>";
		return -1;
	}
	struct sv name = { p.p, (size_t)(gt - p.p) };
	p = (struct sv){ gt + 1, (size_t)(sv_end(p) - gt - 1) };
	json_t* args = json_object();
	if (!args) {
		s->oom = 1;
		return 0;
	}
	for (;;) {
		p = skip_ws(p);
		if (!p.n || sv_starts(p, "</function>")) break;
		if (!sv_starts(p, "<parameter=")) {
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
		json_t* jk = sv_json_string((struct sv){ p.p, (size_t)(gt - p.p) });
		const char* key = jk ? json_string_value(jk) : "";
		struct sv v = { gt + 1, (size_t)(sv_end(p) - gt - 1) };
		const char* close = sv_find(v, "</parameter>");
		const char* end = first_of(close, first_of(sv_find(v, "<parameter="), sv_find(v, "</function>")));
		if (!end) end = sv_end(v);
		struct sv val = { v.p, (size_t)(end - v.p) };
		if (val.n && val.p[0] == '\n') val.p++, val.n--;
		if (val.n && val.p[val.n - 1] == '\n') val.n--;
		json_t* jv = typed_value(val, s->tools ? param_types(s->tools, name, key) : 0);
		if (!jk || !jv || json_object_set_new(args, key, jv)) s->oom = 1;
		json_decref(jk);
		if (end == close) end += 12;
		p = (struct sv){ end, (size_t)(sv_end(v) - end) };
	}
	if (push_call(s, name, args)) s->oom = 1;
	json_decref(args);
	return 0;
}

static void parse_calls(struct pstate* s, struct sv body)
{
	const char* cur = body.p;
	const char* end = sv_end(body);
	for (;;) {
		struct sv rest = { cur, (size_t)(end - cur) };
		const char* open = sv_find(rest, "<tool_call>");
		if (!open) {
			sb_sv(&s->content, rest);
			return;
		}
		sb_put(&s->content, cur, (size_t)(open - cur));
		struct sv after = { open + 11, (size_t)(end - open - 11) };
		const char* close = sv_find(after, "</tool_call>");
		if (!close) {
			perr(s, "truncated tool call: <tool_call> without </tool_call> (%zu bytes kept in content)", (size_t)(end - open));
			sb_put(&s->content, open, (size_t)(end - open));
			return;
		}
		struct sv inner = { after.p, (size_t)(close - after.p) };
		const char* why = NULL;
		int rc = s->dialect == PV_CHAT_QWEN3_5 ? parse_xml(s, inner, &why) : parse_hermes(s, inner, &why);
		if (rc) {
			perr(s, "malformed tool call (%s); kept in content", why);
			sb_put(&s->content, open, (size_t)(close + 12 - open));
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
	struct sv t = { text ? text : "", text ? len : 0 };
	struct sv reasoning = { NULL, 0 }, body = t;
	int complete = 1;
	s.calls = json_array();
	s.errors = json_array();
	json_t* res = json_object();
	if (!s.calls || !s.errors || !res) goto oom;

	if (flags & PV_CHAT_PARSE_IN_THINK) {
		const char* close = sv_find(t, "</think>");
		if (close) {
			reasoning = (struct sv){ t.p, (size_t)(close - t.p) };
			body = (struct sv){ close + 8, (size_t)(sv_end(t) - close - 8) };
		} else {
			reasoning = t;
			body = (struct sv){ sv_end(t), 0 };
			complete = 0;
		}
	} else {
		struct sv lead = sv_trim(t);
		const char* close = sv_find(t, "</think>");
		const char* call = sv_find(t, "<tool_call>");
		if (sv_starts(lead, "<think>")) {
			struct sv in = { lead.p + 7, (size_t)(sv_end(t) - lead.p - 7) };
			close = sv_find(in, "</think>");
			if (close) {
				reasoning = (struct sv){ in.p, (size_t)(close - in.p) };
				body = (struct sv){ close + 8, (size_t)(sv_end(t) - close - 8) };
			} else {
				reasoning = in;
				body = (struct sv){ sv_end(t), 0 };
				complete = 0;
			}
		} else if (close && (!call || close < call)) {
			/* the opening tag came from the prompt (qwen3.5) */
			reasoning = (struct sv){ t.p, (size_t)(close - t.p) };
			body = (struct sv){ close + 8, (size_t)(sv_end(t) - close - 8) };
		}
	}
	if (!complete) perr(&s, "unclosed think block: no </think> (output cut off?)");
	parse_calls(&s, body);
	if (s.oom || s.content.oom) goto oom;

	struct sv content = sv_trim((struct sv){ s.content.p ? s.content.p : "", s.content.n });
	json_t* jc = sv_json_string(content);
	json_t* jr = reasoning.p ? sv_json_string(sv_trim(reasoning)) : json_null();
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
	struct sb hold;
};

struct pv_chat_stream {
	int phase;
	struct pstate ps;  /* calls, errors, tools; ps.content unused                        */
	json_t* tools_ref;
	struct sb buf;     /* everything fed so far                                            */
	size_t pos;        /* bytes of buf consumed                                            */
	size_t call_start; /* in ST_CALL: where "<tool_call>" begins                            */
	size_t calls_out, errors_out;
	struct trimmed r, c;
	struct sb dr, dc;  /* this feed's deltas                                               */
};

static void trimmed_add(struct trimmed* t, struct sb* out, struct sv seg)
{
	/* split seg into [body][trailing whitespace] */
	struct sv body = seg;
	while (body.n) {
		size_t st = body.n - 1;
		while (st > 0 && body.n - st < 4 && ((unsigned char)body.p[st] & 0xc0) == 0x80) st--;
		uint32_t cp;
		size_t l = utf8_dec((const unsigned char*)body.p + st, body.n - st, &cp);
		if (st + l != body.n) st = body.n - 1, cp = (unsigned char)body.p[st];
		if (!py_space(cp)) break;
		body.n = st;
	}
	struct sv tail = { body.p + body.n, seg.n - body.n };
	if (!t->started) body = sv_trim(body); /* leading whitespace (body has no trailing) */
	if (body.n) {
		if (t->started) sb_put(out, t->hold.p, t->hold.n);
		sb_sv(out, body);
		t->hold.n = 0;
		t->started = 1;
	}
	if (t->started) sb_sv(&t->hold, tail);
}

/* Length of the longest proper prefix of tag that s ends with. */
static size_t partial_tag(struct sv s, const char* tag)
{
	size_t m = strlen(tag);
	for (size_t k = m - 1; k > 0; k--)
		if (s.n >= k && !memcmp(s.p + s.n - k, tag, k)) return k;
	return 0;
}

/* Bytes at the end of s that start a UTF-8 character still missing continuation bytes. */
static size_t partial_utf8(struct sv s)
{
	for (size_t k = 1; k <= 3 && k <= s.n; k++) {
		unsigned c = (unsigned char)s.p[s.n - k];
		if ((c & 0xc0) == 0x80) continue;
		size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
		return len > k ? k : 0;
	}
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
	struct sv seg = { s->buf.p + s->pos, to - s->pos };
	if (s->phase == ST_THINK) trimmed_add(&s->r, &s->dr, seg);
	else trimmed_add(&s->c, &s->dc, seg);
	s->pos = to;
}

/* Advances as far as the text allows; end: no more text will come. */
static void stream_run(pv_chat_stream* s, int end)
{
	for (;;) {
		struct sv rest = { s->buf.p ? s->buf.p + s->pos : "", s->buf.n - s->pos };
		if (s->phase == ST_START) {
			struct sv lead = sv_trim(rest);
			if (sv_starts(lead, "<think>")) {
				s->pos = (size_t)(lead.p - s->buf.p) + 7;
				s->phase = ST_THINK;
				continue;
			}
			if (!end && (!lead.n || (lead.n < 7 && !memcmp(lead.p, "<think>", lead.n)) || partial_utf8(lead) == lead.n))
				return;
			s->phase = ST_BODY;
			continue;
		}
		if (s->phase == ST_THINK || s->phase == ST_BODY) {
			const char* tag = s->phase == ST_THINK ? "</think>" : "<tool_call>";
			const char* f = sv_find(rest, tag);
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
			struct sv safe = { rest.p, rest.n - keep };
			if (!keep) keep = partial_utf8(safe);
			stream_take(s, s->buf.n - (keep > rest.n ? rest.n : keep));
			return;
		}
		if (s->phase == ST_CALL) {
			struct sv after = { s->buf.p + s->call_start + 11, s->buf.n - s->call_start - 11 };
			const char* close = sv_find(after, "</tool_call>");
			if (!close) {
				if (!end) return;
				perr(&s->ps, "truncated tool call: <tool_call> without </tool_call> (%zu bytes kept in content)",
				     s->buf.n - s->call_start);
				trimmed_add(&s->c, &s->dc, (struct sv){ s->buf.p + s->call_start, s->buf.n - s->call_start });
				s->pos = s->buf.n;
				s->phase = ST_DONE;
				return;
			}
			const char* why = NULL;
			struct sv inner = { after.p, (size_t)(close - after.p) };
			int rc = s->ps.dialect == PV_CHAT_QWEN3_5 ? parse_xml(&s->ps, inner, &why) : parse_hermes(&s->ps, inner, &why);
			size_t stop = (size_t)(close - s->buf.p) + 12;
			if (rc) {
				perr(&s->ps, "malformed tool call (%s); kept in content", why);
				trimmed_add(&s->c, &s->dc, (struct sv){ s->buf.p + s->call_start, stop - s->call_start });
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
	if (text && len) sb_put(&s->buf, text, len);
	s->dr.n = s->dc.n = 0;
	stream_run(s, end);
	if (s->buf.oom || s->r.hold.oom || s->c.hold.oom || s->dr.oom || s->dc.oom || s->ps.oom) {
		json_decref(d);
		return NULL;
	}
	int bad = 0;
	if (s->dr.n) bad |= json_object_set_new(d, "reasoning_content", sv_json_string((struct sv){ s->dr.p, s->dr.n }));
	if (s->dc.n) bad |= json_object_set_new(d, "content", sv_json_string((struct sv){ s->dc.p, s->dc.n }));
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
