/*
 * chat.h: native rendering of Qwen chat prompts (no Jinja engine) and parsing of generated
 * assistant text back into reasoning, answer and tool calls.
 *
 * Dialects (one per official template; the texts are in tests/data/chat/, one .jinja file each):
 *   PV_CHAT_QWEN3    Qwen3 hybrid thinking (tokenizer_config.json of Qwen3): reasoning kept only
 *                    after the last user query, Hermes JSON tool calls, empty think block appended
 *                    to the generation prompt when thinking is off.
 *   PV_CHAT_QWEN3_5  Qwen3.5/3.6 (Qwen3.5-4B template): the generation prompt opens <think>, XML
 *                    tool calls <function=NAME><parameter=K>, contents trimmed, system message
 *                    only first, errors for a conversation without a user query.
 *   PV_CHAT_QWEN2_5  Qwen2.5-Instruct: default system prompt, Hermes JSON tool calls, no thinking.
 *
 * Rendering is byte-identical to transformers' apply_chat_template(..., tokenize=False) with the
 * real template (tests/test_chat.c checks every fixture), including tojson's spacing (", " and
 * ": "), key order as given, no ASCII escaping, and Python's float repr and str().
 *
 * Input: messages is a JSON array of OpenAI-style objects {role, content, reasoning_content,
 * tool_calls:[{function:{name, arguments}}]} (a tool call without the "function" wrapper is also
 * accepted, as the templates do). Roles: system, user, assistant, tool. tools is NULL or a JSON
 * array of tool definitions, rendered as given.
 *
 * Where the template would raise (or render garbage) on common client input, the renderer does:
 *   - qwen3, qwen2.5: content null or absent renders as "" (the templates raise on null);
 *     content given as a list of {"type":"text","text":...} parts renders as the texts joined.
 *   - qwen3.5: tool-call arguments given as a JSON string (OpenAI wire format) are parsed and
 *     rendered as the object (the template raises on a string).
 * and reports an error (the template would render something) for: an unknown role; image or
 * video parts in qwen3/qwen2.5 (their templates have no vision tokens); a non-string name or
 * reasoning_content; tool_calls that is not an array. Everything else the template raises on is
 * an error here too, with the template's message where it has one.
 */
#ifndef PV_CHAT_H
#define PV_CHAT_H

#include <jansson.h>
#include <stddef.h>

enum pv_chat_dialect {
	PV_CHAT_QWEN3 = 0,
	PV_CHAT_QWEN3_5,
	PV_CHAT_QWEN2_5,
	PV_CHAT_DIALECT_COUNT
};

struct pv_chat_opts {
	int add_generation_prompt; /* append "<|im_start|>assistant\n" (+ think prefix)           */
	int enable_thinking;       /* 0: enable_thinking=false; nonzero: true (the default)        */
};

/* "qwen3", "qwen3.5", "qwen2.5" (also accepted: "qwen3_5", "qwen35", "qwen2_5", "qwen25"). -1 if
 * unknown. */
int pv_chat_dialect_from_name(const char* name);
const char* pv_chat_dialect_name(int dialect);

/* Picks the dialect from a chat template's text: "<function=" -> qwen3.5; "enable_thinking" ->
 * qwen3; "You are Qwen, created by Alibaba Cloud" -> qwen2.5; -1 if none matches. */
int pv_chat_detect_dialect(const char* template_text);

/* Renders the prompt. On success *out is a malloc'd NUL-terminated string (free() it) and *out_len
 * its length (the prompt has no NUL bytes unless the input strings had them); returns 0. On error
 * returns -1 with a one-line message in err. opts NULL: generation prompt off, thinking on. */
int pv_chat_render(int dialect, const json_t* messages, const json_t* tools,
                   const struct pv_chat_opts* opts, char** out, size_t* out_len,
                   char* err, size_t errlen);

/* Parsing generated assistant text ----------------------------------------------------------- */

enum {
	/* The prompt already opened the think block, so the text starts inside the reasoning (qwen3.5
	 * with thinking on: the generation prompt ends in "<think>\n"). */
	PV_CHAT_PARSE_IN_THINK = 1,
};

/* Splits the text the model generated after the generation prompt (up to, not including,
 * <|im_end|>) into a new JSON object:
 *   "content":            the answer text outside reasoning and tool calls, whitespace-trimmed
 *   "reasoning_content":  the text between <think> and </think>, whitespace-trimmed; null if none
 *   "tool_calls":         [{"type":"function","function":{"name":S,"arguments":S}}], arguments as a
 *                         JSON text (OpenAI wire format) written like the template's tojson
 *   "reasoning_complete": false when the think block was never closed (output cut off)
 *   "errors":             ["..."] problems found: unclosed think block, truncated or malformed tool
 *                         call (its raw text is left in "content"); empty when clean
 * qwen3/qwen2.5 read Hermes JSON tool calls; qwen3.5 reads XML calls, where parameter values are
 * strings unless tools (optional, the tool definitions) gives the parameter a JSON type (integer,
 * number, boolean, object, array, null), in which case the value is converted when it parses.
 * Never fails on odd text: returns NULL only for a bad dialect or out of memory (message in err). */
json_t* pv_chat_parse(int dialect, const char* text, size_t len, int flags, const json_t* tools,
                      char* err, size_t errlen);

/* Streaming parse: feed the generated text in pieces as it is produced; each call returns a new
 * JSON object with what became certain since the previous call, only the non-empty keys of
 *   "reasoning_content": S, "content": S, "tool_calls": [complete calls], "errors": [S]
 * ({} when nothing yet). Text that may still turn out to be a tag (a partial "</think>" or
 * "<tool_call>"), a cut UTF-8 character, leading whitespace and trailing whitespace are held back;
 * a tool call is reported once its </tool_call> arrived. Pass end=1 with the last piece (len may
 * be 0) to flush. Concatenating the deltas gives what pv_chat_parse returns for the whole text,
 * except that without PV_CHAT_PARSE_IN_THINK a "</think>" with no "<think>" before it is content
 * here (pv_chat_parse takes the text before it as reasoning). feed returns NULL only when out of
 * memory; after end=1 further input is ignored. */
typedef struct pv_chat_stream pv_chat_stream;
pv_chat_stream* pv_chat_stream_new(int dialect, int flags, const json_t* tools, char* err, size_t errlen);
json_t* pv_chat_stream_feed(pv_chat_stream* s, const char* text, size_t len, int end);
void pv_chat_stream_free(pv_chat_stream* s);

#endif
