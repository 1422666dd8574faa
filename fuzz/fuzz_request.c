/*
 * fuzz_request.c: libFuzzer target for the server's request path before the engine: the JSON
 * body parser and validator (server/request.c) and the chat rendering it feeds. The first byte
 * picks the endpoint, the rest is the body. A body is either refused with a status and a one-line
 * message, or yields a request whose invariants the server relies on; a broken one traps.
 *
 *   make fuzz && build-fuzz/fuzz_request -max_total_time=180 fuzz/seeds/request
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/request.h"
#include "proven_text.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void check(int cond)
{
	if (!cond) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	if (size < 1) return 0;
	int kind = data[0] % SRV_KIND_COUNT;
	struct srv_limits lim = { 151936, 4096 };
	struct srv_request r;
	char msg[512];
	const char* param = NULL;
	int st = srv_request_parse(kind, (const char*)data + 1, size - 1, &lim, &r, msg, sizeof msg, &param);
	if (st) {
		check(st == 400 || st == 413 || st == 503);
		check(msg[0] && strlen(msg) < sizeof msg && !strchr(msg, '\n'));
		srv_request_free(&r);
		return 0;
	}
	check(r.max_tokens == -1 || (r.max_tokens >= 1 && r.max_tokens <= (1 << 30)));
	check(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
	for (int i = 0; i < r.n_stop; i++) check(r.stop[i] && r.stop_len[i] > 0 && r.stop_len[i] <= SRV_MAX_STOP_LEN);
	check(!r.has_temperature || (r.temperature >= 0 && r.temperature <= 2));
	check(!r.has_top_p || (r.top_p >= 0 && r.top_p <= 1));
	check(r.top_logprobs >= 0 && r.top_logprobs <= 20);
	for (int i = 0; i < r.n_ids; i++) check(r.ids[i] >= 0 && r.ids[i] < lim.n_vocab);
	if (kind == SRV_COMPLETION) check(r.prompt || (r.ids && r.n_ids > 0 && r.n_ids <= lim.n_ctx));
	if (kind == SRV_CHAT || kind == SRV_APPLY_TEMPLATE) {
		check(json_is_array(r.messages) && json_array_size(r.messages) > 0);
		for (int d = 0; d < PV_CHAT_DIALECT_COUNT; d++) {
			char* out = NULL;
			size_t len = 0;
			if (!srv_render_chat(&r, d, &out, &len, msg, sizeof msg)) check(out && strlen(out) <= len);
			else check(msg[0] != 0);
			free(out);
		}
	}
	srv_request_free(&r);
	return 0;
}
