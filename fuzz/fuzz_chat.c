/*
 * fuzz_chat.c: libFuzzer target for the chat side of src/text/: the renderer's input (a messages
 * array and a tools array as JSON, as a client sends them) and the parser of generated text.
 * The first byte picks the dialect, the options and the mode:
 *   bits 0-1  dialect (3: the parser's text mode below, on qwen3)
 *   bit 2     add_generation_prompt      bit 3  enable_thinking off
 *   bit 4     PV_CHAT_PARSE_IN_THINK      bit 5  tools given (after the first NUL byte)
 * The rest is the messages JSON (up to a NUL byte), then the tools JSON. A render must succeed
 * with a buffer of exactly the length it reports, or fail with a one-line message; the rendered
 * prompt is parsed back, whole and streamed in pieces, and every result must be a JSON object.
 * In text mode the bytes are generated text for pv_chat_parse and the streaming parser.
 *
 *   make fuzz && build-fuzz/fuzz_chat -max_total_time=120 fuzz/seeds/chat
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proven_text.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static volatile size_t sink;

static void parse_all(int dialect, const char* text, size_t n, int flags, const json_t* tools)
{
	char err[256];
	json_t* whole = pv_chat_parse(dialect, text, n, flags, tools, err, sizeof err);
	if (!whole || !json_is_object(whole)) __builtin_trap(); /* NULL only for a bad dialect or OOM */
	sink += json_object_size(whole);
	json_decref(whole);
	/* streamed in pieces of 1..7 bytes, cut anywhere (inside UTF-8 and tags too) */
	pv_chat_stream* s = pv_chat_stream_new(dialect, flags, tools, err, sizeof err);
	if (!s) __builtin_trap();
	size_t at = 0, step = 1;
	while (at < n) {
		size_t k = n - at < step ? n - at : step;
		json_t* d = pv_chat_stream_feed(s, text + at, k, 0);
		if (!d || !json_is_object(d)) __builtin_trap();
		json_decref(d);
		at += k;
		step = step % 7 + 1;
	}
	json_t* d = pv_chat_stream_feed(s, NULL, 0, 1);
	if (!d || !json_is_object(d)) __builtin_trap();
	json_decref(d);
	pv_chat_stream_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size < 1 || size > (1 << 16)) return 0;
	const uint8_t mode = data[0];
	const char* body = (const char*)data + 1;
	size_t n = size - 1;
	int dialect = mode & 3;
	int flags = (mode & 16) ? PV_CHAT_PARSE_IN_THINK : 0;
	if (dialect == 3) {
		parse_all(PV_CHAT_QWEN3, body, n, flags, NULL);
		parse_all(PV_CHAT_QWEN3_5, body, n, flags, NULL);
		return 0;
	}
	const char* nul = memchr(body, 0, n);
	size_t mlen = nul ? (size_t)(nul - body) : n;
	json_t* messages = json_loadb(body, mlen, JSON_DECODE_ANY, NULL);
	json_t* tools = NULL;
	if ((mode & 32) && nul) tools = json_loadb(nul + 1, n - mlen - 1, JSON_DECODE_ANY, NULL);
	if (!messages) {
		json_decref(tools);
		return 0;
	}
	struct pv_chat_opts o = { .add_generation_prompt = !!(mode & 4), .enable_thinking = !(mode & 8) };
	char* out = NULL;
	size_t len = 0;
	char err[512];
	err[0] = 0;
	if (pv_chat_render(dialect, messages, tools, &o, &out, &len, err, sizeof err)) {
		if (out || !err[0] || strchr(err, '\n')) __builtin_trap(); /* a failure says why, in one line */
	} else {
		if (!out || out[len] != 0) __builtin_trap(); /* NUL-terminated at the length it reports */
		if (len) sink += (unsigned char)out[len - 1];
		parse_all(dialect, out, len, flags, tools);
		free(out);
	}
	json_decref(messages);
	json_decref(tools);
	return 0;
}
