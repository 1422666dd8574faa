/*
 * fuzz_tokenizer.c: libFuzzer target for the tokenizer: the first input byte picks
 *   even: the bytes are a tokenizer.json (src/text/tokenizer_load.c's JSON reader) -- must load or fail
 *         with a message; when it loads, encode a fixed text and decode it back
 *   odd:  the bytes are text (any bytes, invalid UTF-8 included) for a small fixed byte-level
 *         vocabulary: encode with and without special tokens, decode, stream-decode; the stream
 *         must add up to the one-shot decode
 *
 *   make fuzz && build-fuzz/fuzz_tokenizer -max_total_time=180 fuzz/seeds/tokenizer
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "text/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* GPT-2 bytes_to_unicode of byte b, as UTF-8 */
static void byte_token(int b, char* out)
{
	int cp = b;
	if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
		int n = 0;
		for (int i = 0; i < b; i++)
			if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
		cp = 256 + n;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 63));
		out[2] = 0;
	}
}

static struct pv_tok* small_vocab(void)
{
	static char bytes[256][4];
	static char merged[3][16];
	const char* toks[256 + 3 + 2];
	int types[256 + 3 + 2];
	for (int b = 0; b < 256; b++) {
		byte_token(b, bytes[b]);
		toks[b] = bytes[b];
		types[b] = PV_TOK_NORMAL;
	}
	snprintf(merged[0], 16, "%s%s", bytes['t'], bytes['h']);
	snprintf(merged[1], 16, "%s%s", merged[0], bytes['e']);
	snprintf(merged[2], 16, "%s%s", bytes[' '], bytes['a']);
	for (int i = 0; i < 3; i++) toks[256 + i] = merged[i], types[256 + i] = PV_TOK_NORMAL;
	toks[259] = "<|im_end|>", types[259] = PV_TOK_CONTROL;
	toks[260] = "<think>", types[260] = PV_TOK_USER_DEFINED;
	static char m0[16], m1[16], m2[16];
	snprintf(m0, 16, "%s %s", bytes['t'], bytes['h']);
	snprintf(m1, 16, "%s %s", merged[0], bytes['e']);
	snprintf(m2, 16, "%s %s", bytes[' '], bytes['a']);
	const char* merges[3] = { m0, m1, m2 };
	struct pv_tok* t = NULL;
	char err[256];
	if (pv_tok_from_vocab(&t, toks, types, 261, merges, 3, "qwen2", PV_TOK_NFC, err, sizeof err)) {
		fprintf(stderr, "fuzz_tokenizer: %s\n", err);
		abort();
	}
	return t;
}

static void roundtrip(const struct pv_tok* t, const char* text, size_t len)
{
	for (int special = 0; special < 2; special++) {
		int32_t* ids = NULL;
		int n = 0;
		if (pv_tok_encode(t, text, len, special, &ids, &n, NULL, 0)) continue;
		char* out = NULL;
		size_t olen = 0;
		if (!pv_tok_decode(t, ids, n, 0, &out, &olen, NULL, 0)) {
			struct pv_tok_stream* st = NULL;
			if (!pv_tok_stream_new(&st, t, 0)) {
				size_t got = 0;
				const char* b;
				size_t bl;
				for (int i = 0; i < n; i++) {
					if (pv_tok_stream_push(st, ids[i], &b, &bl)) abort();
					if (got + bl > olen || memcmp(out + got, b, bl)) abort(); /* stream != decode */
					got += bl;
				}
				pv_tok_stream_flush(st, &b, &bl);
				if (got + bl != olen || memcmp(out + got, b, bl)) abort();
				pv_tok_stream_free(st);
			}
			free(out);
		}
		free(ids);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	static struct pv_tok* small;
	if (!small) small = small_vocab();
	if (size < 1) return 0;
	if (data[0] & 1) {
		roundtrip(small, (const char*)data + 1, size - 1);
		return 0;
	}
	/* tokenizer.json from memory, through a memfd so the file path API is used as is */
	int fd = memfd_create("tok", 0);
	if (fd < 0) return 0;
	if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) {
		close(fd);
		return 0;
	}
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct pv_tok* t = NULL;
	char err[256];
	if (!pv_tok_open_json(&t, path, err, sizeof err)) {
		static const char text[] = "Hello world, <|im_end|> 3333 caf\xc3\xa9 \xff\xfe <think>";
		roundtrip(t, text, sizeof text - 1);
		pv_tok_free(t);
	} else if (!err[0]) {
		abort(); /* a failure must say why */
	}
	close(fd);
	return 0;
}
