/*
 * chat_render.c: the native Qwen chat templates (qwen3, qwen3.5, qwen2.5). Each render_*
 * function follows its Jinja template statement by statement, so where two templates do the
 * same thing their blocks look alike on purpose: each mirrors its template, not the other
 * function. The comments quote the template where the logic is not obvious; the Python
 * semantics the templates rely on are in chat_py.c.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "text/chat_internal.h"

/* Messages ------------------------------------------------------------------------------------ */

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL };

struct cmsg {
	int role;
	const json_t* j;
	struct strbuf text;      /* the content as the template sees it (before any trim) */
	const json_t* reasoning; /* reasoning_content when a string, else NULL */
	const json_t* calls;     /* tool_calls when a non-empty array, else NULL */
};

struct ctx {
	int dialect;
	char* err;
	size_t errlen;
	struct cmsg* m;
	size_t n;
	struct strbuf out;
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
		pv_msg_clean(c->err); /* a role or a JSON error quotes the client's text */
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
		strbuf_putv(&m->text, strview_json(v));
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
			strbuf_puts(&m->text, image ? "<|vision_start|><|image_pad|><|vision_end|>"
			                            : "<|vision_start|><|video_pad|><|vision_end|>");
		} else if (json_object_get(it, "text")) {
			const json_t* t = json_object_get(it, "text");
			if (!json_is_string(t))
				return fail(c, "messages[%zu].content[%zu].text must be a string, not %s", i, k, kind(t));
			strbuf_putv(&m->text, strview_json(t));
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

static struct strview text_of(const struct cmsg* m) { return (struct strview){ m->text.p ? m->text.p : "", m->text.n }; }

/* The function object of tool call j of message i, with its name. */
static int call_fn(struct ctx* c, size_t i, size_t j, const json_t** fn, struct strview* name)
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
	*name = strview_json(nm);
	return 0;
}

/* Hermes JSON call (qwen3, qwen2.5): {"name": "...", "arguments": ...}. */
static int hermes_call(struct ctx* c, size_t i, size_t j, int string_args_raw)
{
	const json_t* fn;
	struct strview name;
	if (call_fn(c, i, j, &fn, &name)) return -1;
	const json_t* a = json_object_get(fn, "arguments");
	if (!a) return fail(c, "messages[%zu].tool_calls[%zu]: arguments missing (tojson of Undefined fails)", i, j);
	strbuf_puts(&c->out, "<tool_call>\n{\"name\": \"");
	strbuf_putv(&c->out, name);
	strbuf_puts(&c->out, "\", \"arguments\": ");
	if (string_args_raw && json_is_string(a)) strbuf_putv(&c->out, strview_json(a));
	else if (pv_py_json(&c->out, a, 0)) return fail(c, "messages[%zu].tool_calls[%zu]: arguments nested too deeply", i, j);
	strbuf_puts(&c->out, "}\n</tool_call>");
	return 0;
}

static void tools_json(struct ctx* c, const json_t* tools)
{
	size_t k;
	json_t* t;
	json_array_foreach(tools, k, t) {
		strbuf_put(&c->out, "\n", 1);
		pv_py_json(&c->out, t, 0);
	}
}

/* The tools section the Qwen3 and Qwen2.5 templates put in the system turn, from "# Tools" to the
 * end of the turn (Hermes-style JSON tool calls). */
static void hermes_tools(struct ctx* c, const json_t* tools)
{
	struct strbuf* b = &c->out;
	strbuf_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
	               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
	tools_json(c, tools);
	strbuf_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
	               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
	               "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

static int has_tools(const json_t* tools) { return json_is_array(tools) && json_array_size(tools); }

/* qwen3 ----------------------------------------------------------------------------------------- */

static int render_qwen3(struct ctx* c, const json_t* tools, const struct pv_chat_opts* o)
{
	struct strbuf* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		strbuf_puts(b, "<|im_start|>system\n");
		if (c->m[0].role == R_SYSTEM) {
			strbuf_putv(b, text_of(&c->m[0]));
			strbuf_puts(b, "\n\n");
		}
		hermes_tools(c, tools);
	} else if (c->m[0].role == R_SYSTEM) {
		strbuf_puts(b, "<|im_start|>system\n");
		strbuf_putv(b, text_of(&c->m[0]));
		strbuf_puts(b, "<|im_end|>\n");
	}
	/* the last user message that is not a bare tool response */
	size_t last_query = n - 1;
	for (size_t k = n; k-- > 0;) {
		struct strview t = text_of(&c->m[k]);
		if (c->m[k].role == R_USER && !(strview_starts(t, "<tool_response>") && strview_ends(t, "</tool_response>"))) {
			last_query = k;
			break;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct strview text = text_of(m);
		if (m->role == R_USER || (m->role == R_SYSTEM && i > 0)) {
			strbuf_puts(b, m->role == R_USER ? "<|im_start|>user\n" : "<|im_start|>system\n");
			strbuf_putv(b, text);
			strbuf_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			struct strview content = text, reasoning = { "", 0 };
			if (m->reasoning) {
				reasoning = strview_json(m->reasoning);
			} else if (strview_find(text, "</think>")) {
				const char* last = strview_rfind(text, "</think>");
				content = strview_lstrip_nl((struct strview){ last + 8, (size_t)(text.p + text.n - last - 8) });
				struct strview before = strview_rstrip_nl((struct strview){ text.p, (size_t)(strview_find(text, "</think>") - text.p) });
				const char* open = strview_rfind(before, "<think>");
				if (open) before = (struct strview){ open + 7, (size_t)(before.p + before.n - open - 7) };
				reasoning = strview_lstrip_nl(before);
			}
			if (i > last_query && (i == n - 1 || reasoning.n)) {
				strbuf_puts(b, "<|im_start|>assistant\n<think>\n");
				strbuf_putv(b, strview_rstrip_nl(strview_lstrip_nl(reasoning)));
				strbuf_puts(b, "\n</think>\n\n");
				strbuf_putv(b, strview_lstrip_nl(content));
			} else {
				strbuf_puts(b, "<|im_start|>assistant\n");
				strbuf_putv(b, content);
			}
			for (size_t j = 0; m->calls && j < json_array_size(m->calls); j++) {
				if (j > 0 || content.n) strbuf_put(b, "\n", 1);
				if (hermes_call(c, i, j, 1)) return -1;
			}
			strbuf_puts(b, "<|im_end|>\n");
		} else if (m->role == R_TOOL) {
			if (i == 0 || c->m[i - 1].role != R_TOOL) strbuf_puts(b, "<|im_start|>user");
			strbuf_puts(b, "\n<tool_response>\n");
			strbuf_putv(b, text);
			strbuf_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) strbuf_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt) {
		strbuf_puts(b, "<|im_start|>assistant\n");
		if (!o->enable_thinking) strbuf_puts(b, "<think>\n\n</think>\n\n");
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
	struct strbuf* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		strbuf_puts(b, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
		tools_json(c, tools);
		strbuf_puts(b, "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
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
			struct strview s = pv_py_strip(text_of(&c->m[0]));
			if (s.n) {
				strbuf_puts(b, "\n\n");
				strbuf_putv(b, s);
			}
		}
		strbuf_puts(b, "<|im_end|>\n");
	} else if (c->m[0].role == R_SYSTEM) {
		strbuf_puts(b, "<|im_start|>system\n");
		strbuf_putv(b, pv_py_strip(text_of(&c->m[0])));
		strbuf_puts(b, "<|im_end|>\n");
	}
	size_t last_query = 0;
	int found = 0;
	for (size_t k = n; k-- > 0;) {
		struct strview t = pv_py_strip(text_of(&c->m[k]));
		if (c->m[k].role == R_USER && !(strview_starts(t, "<tool_response>") && strview_ends(t, "</tool_response>"))) {
			last_query = k;
			found = 1;
			break;
		}
	}
	if (!found) return fail(c, "No user query found in messages.");
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct strview content = pv_py_strip(text_of(m));
		if (m->role == R_SYSTEM) {
			if (i > 0) return fail(c, "messages[%zu]: System message must be at the beginning.", i);
		} else if (m->role == R_USER) {
			strbuf_puts(b, "<|im_start|>user\n");
			strbuf_putv(b, content);
			strbuf_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			struct strview reasoning = { "", 0 };
			if (m->reasoning) {
				reasoning = strview_json(m->reasoning);
			} else if (strview_find(content, "</think>")) {
				struct strview before = strview_rstrip_nl((struct strview){ content.p, (size_t)(strview_find(content, "</think>") - content.p) });
				const char* open = strview_rfind(before, "<think>");
				if (open) before = (struct strview){ open + 7, (size_t)(before.p + before.n - open - 7) };
				reasoning = strview_lstrip_nl(before);
				const char* last = strview_rfind(content, "</think>");
				content = strview_lstrip_nl((struct strview){ last + 8, (size_t)(content.p + content.n - last - 8) });
			}
			reasoning = pv_py_strip(reasoning);
			if (i > last_query) {
				strbuf_puts(b, "<|im_start|>assistant\n<think>\n");
				strbuf_putv(b, reasoning);
				strbuf_puts(b, "\n</think>\n\n");
			} else {
				strbuf_puts(b, "<|im_start|>assistant\n");
			}
			strbuf_putv(b, content);
			for (size_t j = 0; m->calls && j < json_array_size(m->calls); j++) {
				const json_t* fn;
				struct strview name;
				if (call_fn(c, i, j, &fn, &name)) return -1;
				if (j == 0) strbuf_puts(b, pv_py_strip(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=");
				else strbuf_puts(b, "\n<tool_call>\n<function=");
				strbuf_putv(b, name);
				strbuf_puts(b, ">\n");
				const json_t* a = json_object_get(fn, "arguments");
				if (a) {
					const json_t* obj;
					json_t* owned;
					if (q35_args(c, i, j, a, &obj, &owned)) return -1;
					const char* k;
					json_t* v;
					int bad = 0;
					json_object_foreach((json_t*)obj, k, v) {
						strbuf_puts(b, "<parameter=");
						strbuf_puts(b, k);
						strbuf_puts(b, ">\n");
						/* args_value | tojson if mapping or (sequence and not string) else args_value | string */
						if (json_is_object(v) || json_is_array(v)) bad |= pv_py_json(b, v, 0);
						else pv_py_str(b, v);
						strbuf_puts(b, "\n</parameter>\n");
					}
					json_decref(owned);
					if (bad) return fail(c, "messages[%zu].tool_calls[%zu]: arguments nested too deeply", i, j);
				}
				strbuf_puts(b, "</function>\n</tool_call>");
			}
			strbuf_puts(b, "<|im_end|>\n");
		} else { /* tool */
			if (i > 0 && c->m[i - 1].role != R_TOOL) strbuf_puts(b, "<|im_start|>user");
			strbuf_puts(b, "\n<tool_response>\n");
			strbuf_putv(b, content);
			strbuf_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) strbuf_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt)
		strbuf_puts(b, o->enable_thinking ? "<|im_start|>assistant\n<think>\n" : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
	return 0;
}

/* qwen2.5 --------------------------------------------------------------------------------------- */

#define QWEN25_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static int render_qwen25(struct ctx* c, const json_t* tools, const struct pv_chat_opts* o)
{
	struct strbuf* b = &c->out;
	size_t n = c->n;
	if (has_tools(tools)) {
		strbuf_puts(b, "<|im_start|>system\n");
		if (c->m[0].role == R_SYSTEM) strbuf_putv(b, text_of(&c->m[0]));
		else strbuf_puts(b, QWEN25_DEFAULT_SYSTEM);
		strbuf_puts(b, "\n\n");
		hermes_tools(c, tools);
	} else if (c->m[0].role == R_SYSTEM) {
		strbuf_puts(b, "<|im_start|>system\n");
		strbuf_putv(b, text_of(&c->m[0]));
		strbuf_puts(b, "<|im_end|>\n");
	} else {
		strbuf_puts(b, "<|im_start|>system\n" QWEN25_DEFAULT_SYSTEM "<|im_end|>\n");
	}
	for (size_t i = 0; i < n; i++) {
		struct cmsg* m = &c->m[i];
		struct strview text = text_of(m);
		if (m->role == R_USER || (m->role == R_SYSTEM && i > 0) || (m->role == R_ASSISTANT && !m->calls)) {
			strbuf_puts(b, m->role == R_USER ? "<|im_start|>user\n"
			               : m->role == R_SYSTEM ? "<|im_start|>system\n" : "<|im_start|>assistant\n");
			strbuf_putv(b, text);
			strbuf_puts(b, "<|im_end|>\n");
		} else if (m->role == R_ASSISTANT) {
			strbuf_puts(b, "<|im_start|>assistant");
			if (text.n) {
				strbuf_put(b, "\n", 1);
				strbuf_putv(b, text);
			}
			for (size_t j = 0; j < json_array_size(m->calls); j++) {
				strbuf_put(b, "\n", 1);
				if (hermes_call(c, i, j, 0)) return -1;
			}
			strbuf_puts(b, "<|im_end|>\n");
		} else if (m->role == R_TOOL) {
			if (i == 0 || c->m[i - 1].role != R_TOOL) strbuf_puts(b, "<|im_start|>user");
			strbuf_puts(b, "\n<tool_response>\n");
			strbuf_putv(b, text);
			strbuf_puts(b, "\n</tool_response>");
			if (i == n - 1 || c->m[i + 1].role != R_TOOL) strbuf_puts(b, "<|im_end|>\n");
		}
	}
	if (o->add_generation_prompt) strbuf_puts(b, "<|im_start|>assistant\n");
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
