/*
 * test_tokenizer.c: the Qwen byte-level BPE tokenizer against the real Qwen tokenizer.json
 * (<repository>/../shared/data/qwen-tokenizer/, or $PV_SHARED/data/qwen-tokenizer/; without it
 * the cases say "skip"): llama.cpp's 46 Qwen2 vectors, the qwen-models.md §9.6 samples,
 * parity with Hugging Face `tokenizers` on the corpus made by
 * tools/reference/make_tokenizer_corpus.py (tests/data/tokenizer/corpus.jsonl.xz), special
 * tokens, invalid UTF-8, long single-class runs, streaming decode, the GGUF-style constructor,
 * bad files, thread safety and the `proven tokenize` command.
 */
#include "harness.h"
#include "text/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

static const char* build_dir;
static char shared_tok[1024]; /* the shared/data/qwen-tokenizer directory */
static char tok_path[1024];   /* unpacked tokenizer.json in the build directory */
static struct pv_tok* tok;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Whole output of a shell command (NULL on failure); *n bytes, NUL-terminated. */
static char* run_read(const char* cmd, size_t* n, int* status)
{
	FILE* p = popen(cmd, "r");
	if (!p) return NULL;
	size_t cap = 1 << 16, len = 0;
	char* buf = malloc(cap);
	for (;;) {
		if (len + 4096 + 1 > cap) buf = realloc(buf, cap *= 2);
		size_t k = fread(buf + len, 1, 4096, p);
		if (!k) break;
		len += k;
	}
	buf[len] = 0;
	int st = pclose(p);
	if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	if (n) *n = len;
	return buf;
}

static char* read_file(const char* path, size_t* n)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	rewind(f);
	char* b = malloc((size_t)sz + 1);
	if (fread(b, 1, (size_t)sz, f) != (size_t)sz) sz = 0;
	b[sz] = 0;
	fclose(f);
	*n = (size_t)sz;
	return b;
}

/* The real tokenizer beside the repository (harness.h t_shared_path). */
static int find_shared(void)
{
	char p[1100];
	if (!t_shared_path(shared_tok, sizeof shared_tok, "data/qwen-tokenizer")) return -1;
	snprintf(p, sizeof p, "%s/tokenizer.json.xz", shared_tok);
	return t_exists(p) ? 0 : -1;
}

/* Unpacks tokenizer.json.xz into the build directory once. */
static int unpack_tokenizer(void)
{
	struct stat st;
	char cmd[3000];
	snprintf(tok_path, sizeof tok_path, "%s/tests/tokenizer.json", build_dir);
	if (!stat(tok_path, &st) && st.st_size == 11422654) return 0;
	snprintf(cmd, sizeof cmd, "mkdir -p '%s/tests' && xz -dc '%s/tokenizer.json.xz' > '%s.tmp' && mv '%s.tmp' '%s'",
	         build_dir, shared_tok, tok_path, tok_path, tok_path);
	return system(cmd) ? -1 : 0;
}

static int enc(const char* s, size_t n, int special, int32_t** ids)
{
	int k;
	char err[256];
	if (pv_tok_encode(tok, s, n, special, ids, &k, err, sizeof err)) {
		fprintf(stderr, "encode failed: %s\n", err);
		*ids = NULL;
		return -1;
	}
	return k;
}

static int same_ids(const int32_t* a, int na, const int32_t* b, int nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, sizeof(int32_t) * (size_t)na));
}

static void print_ids(FILE* f, const char* label, const int32_t* ids, int n)
{
	fprintf(f, "  %s:", label);
	for (int i = 0; i < n && i < 60; i++) fprintf(f, " %d", ids[i]);
	fprintf(f, n > 60 ? " ... (%d)\n" : "\n", n);
}

/* "1 2 3" -> ids */
static int parse_ids(const char* s, int32_t* out, int cap)
{
	int n = 0;
	while (*s) {
		char* end;
		long v = strtol(s, &end, 10);
		if (end == s) break;
		if (n < cap) out[n] = (int32_t)v;
		n++;
		s = end;
	}
	return n;
}

/* The tokenizer every case uses: found, unpacked and opened by the first case that needs it.
 * Without the data (a clone without shared/) each case says it skipped. */
static int tok_state; /* 0 not tried, 1 open, -1 no data, -2 failed */

static int need_tok(void)
{
	if (!tok_state) {
		tok_state = -1;
		if (!find_shared()) {
			tok_state = -2;
			char err[600];
			double t0 = now();
			int ok = !unpack_tokenizer();
			CHECK(ok, "cannot unpack %s/tokenizer.json.xz into %s", shared_tok, tok_path);
			int rc = pv_tok_open_json(&tok, tok_path, err, sizeof err);
			CHECK(rc == 0, "open %s: %s", tok_path, err);
			if (!rc) {
				printf("tokenizer.json loaded in %.2f s\n", now() - t0);
				tok_state = 1;
			}
		}
	}
	if (tok_state == -1)
		t_skip("needs the real tokenizer, not at %s (PV_SHARED names the directory holding data/)", shared_tok);
	return tok_state == 1;
}

static int setup(void)
{
	build_dir = getenv("PV_BUILD") ? getenv("PV_BUILD") : "build";
	return 0;
}

static void teardown(void)
{
	pv_tok_free(tok);
}

TEST_CASE(basics)
{
	if (!need_tok()) return;
	CHECK(pv_tok_n_vocab(tok) == 151669, "n_vocab %d", pv_tok_n_vocab(tok));
	CHECK(pv_tok_id(tok, "<|im_end|>") == 151645, "im_end %d", pv_tok_id(tok, "<|im_end|>"));
	CHECK(pv_tok_id(tok, "<|im_start|>") == 151644, "im_start");
	CHECK(pv_tok_id(tok, "<|endoftext|>") == 151643, "endoftext");
	CHECK(pv_tok_id(tok, "<think>") == 151667 && pv_tok_id(tok, "</think>") == 151668, "think");
	CHECK(pv_tok_id(tok, "\xc4\xa0world") == 1879, "Gworld");
	CHECK(pv_tok_id(tok, "user") == 872, "user");
	CHECK(pv_tok_id(tok, "no such token at all") == -1, "missing token");
	CHECK(pv_tok_is_special(tok, 151645) && !pv_tok_is_special(tok, 151667) && !pv_tok_is_special(tok, 872),
	      "special flags");
	CHECK(pv_tok_text(tok, 151667) && !strcmp(pv_tok_text(tok, 151667), "<think>"), "text of 151667");
	CHECK(!pv_tok_text(tok, -1) && !pv_tok_text(tok, 151669), "text out of range");
	CHECK(pv_tok_pattern(tok) && strstr(pv_tok_pattern(tok), "\\p{L}+"), "pattern");
}

/* qwen-models.md §9.6 */
TEST_CASE(samples)
{
	if (!need_tok()) return;
	static const struct { const char* text; const char* ids; } cases[] = {
		{ "Hello world", "9707 1879" },
		{ " Hello world", "21927 1879" },
		{ "Hello, world!", "9707 11 1879 0" },
		{ "ied 4 \xc2\xbd months", "1122 220 19 220 26062 3951" },
		{ "F\xc3\xbchrer", "37 50753 261" },
		{ "   Hello", "256 21927" },
		{ "3333", "18 18 18 18" },
		{ "user", "872" },
		{ "\n", "198" },
		{ "assistant", "77091" },
		{ "system", "8948" },
		{ "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "151644 872 198 9707 151645 198 151644 77091 198" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int32_t want[64], *ids;
		int nw = parse_ids(cases[i].ids, want, 64);
		int n = enc(cases[i].text, strlen(cases[i].text), 1, &ids);
		CHECK(same_ids(ids, n, want, nw), "sample %zu \"%s\"", i, cases[i].text);
		free(ids);
	}
}

/* llama.cpp's test-tokenizer-0 vectors for qwen2 (special-token parsing off). */
TEST_CASE(llama_vectors)
{
	if (!need_tok()) return;
	char p[1200];
	size_t ni, no;
	snprintf(p, sizeof p, "%s/ggml-vocab-qwen2.gguf.inp", shared_tok);
	char* inp = read_file(p, &ni);
	snprintf(p, sizeof p, "%s/ggml-vocab-qwen2.gguf.out", shared_tok);
	char* out = read_file(p, &no);
	CHECK(inp && out, "llama.cpp vector files missing in %s", shared_tok);
	if (!inp || !out) {
		free(inp);
		free(out);
		return;
	}
	static const char sep[] = "\n__ggml_vocab_test__\n";
	int cases = 0, ok = 0;
	char *s = inp, *line = out;
	for (;;) {
		char* e = strstr(s, sep);
		if (!e) break;
		char* nl = strchr(line, '\n');
		if (!nl) break;
		*nl = 0;
		int32_t want[4096], *ids;
		int nw = parse_ids(line, want, 4096);
		int n = enc(s, (size_t)(e - s), 0, &ids);
		cases++;
		if (same_ids(ids, n, want, nw)) ok++;
		else {
			fprintf(stderr, "llama.cpp case %d \"%.*s\" differs\n", cases, (int)(e - s), s);
			print_ids(stderr, "proven", ids, n);
			print_ids(stderr, "llama.cpp", want, nw);
		}
		free(ids);
		s = e + sizeof sep - 1;
		line = nl + 1;
	}
	/* "N passed, M failed" so that tests/run.sh shows the line (trailing text: never the summary) */
	printf("llama.cpp qwen2 vectors: %d passed, %d failed (%d/%d identical)\n", ok, cases - ok, ok, cases);
	CHECK(cases == 46 && ok == 46, "llama.cpp vectors %d/%d", ok, cases);
	free(inp);
	free(out);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Streams ids through a pv_tok_stream; returns the concatenated bytes (malloc'd). Sets *held
 * when some push returned nothing; *bad when a push returned bytes that are not valid UTF-8. */
static char* stream_all(const int32_t* ids, int n, unsigned flags, size_t* len, int* held, int* bad)
{
	struct pv_tok_stream* st;
	size_t cap = 64, o = 0;
	char* buf = malloc(cap);
	*held = *bad = 0;
	if (pv_tok_stream_new(&st, tok, flags)) return buf;
	for (int i = 0; i <= n; i++) {
		const char* b;
		size_t bl;
		int rc = i < n ? pv_tok_stream_push(st, ids[i], &b, &bl) : pv_tok_stream_flush(st, &b, &bl);
		if (rc) {
			*bad = 1;
			continue;
		}
		if (i < n && bl == 0 && !(flags && pv_tok_is_special(tok, ids[i]))) *held = 1;
		utf8proc_int32_t cp;
		for (size_t k = 0; k < bl;) {
			utf8proc_ssize_t r = utf8proc_iterate((const utf8proc_uint8_t*)b + k, (utf8proc_ssize_t)(bl - k), &cp);
			if (r <= 0) {
				*bad = 1;
				break;
			}
			k += (size_t)r;
		}
		while (o + bl + 1 > cap) buf = realloc(buf, cap *= 2);
		memcpy(buf + o, b, bl);
		o += bl;
	}
	buf[o] = 0;
	*len = o;
	pv_tok_stream_free(st);
	return buf;
}

/* Parity with HF tokenizers on the committed corpus. */
TEST_CASE(corpus)
{
	if (!need_tok()) return;
	int status;
	size_t n;
	char cmd[600];
	snprintf(cmd, sizeof cmd, "xz -dc tests/data/tokenizer/corpus.jsonl.xz");
	char* data = run_read(cmd, &n, &status);
	CHECK(data && status == 0 && n > 0, "cannot read the corpus (xz -dc exit %d)", status);
	if (!data || status || !n) {
		free(data);
		return;
	}
	int cases = 0, ok_sp = 0, ok_ns = 0, ok_dec = 0, ok_stream = 0, n_raw = 0, shown = 0;
	size_t total_bytes = 0;
	double t_enc = 0;
	char* line = data;
	int header_cases = -1;
	while (*line) {
		char* nl = strchr(line, '\n');
		size_t ll = nl ? (size_t)(nl - line) : strlen(line);
		json_error_t je;
		json_t* j = json_loadb(line, ll, JSON_ALLOW_NUL, &je);
		line = nl ? nl + 1 : line + ll;
		if (!j) {
			CHECK(0, "corpus line: %s", je.text);
			continue;
		}
		json_t* h = json_object_get(j, "header");
		if (h) {
			header_cases = (int)json_integer_value(json_object_get(h, "cases"));
			json_decref(j);
			continue;
		}
		json_t* jt = json_object_get(j, "text");
		const char* text = json_string_value(jt);
		size_t tl = json_string_length(jt);
		const char* hex = json_string_value(json_object_get(j, "raw"));
		char* raw = NULL;
		const char* in = text;
		size_t il = tl;
		if (hex) {
			size_t hl = strlen(hex);
			raw = malloc(hl / 2 + 1);
			for (size_t k = 0; k + 1 < hl; k += 2) raw[k / 2] = (char)(hexval(hex[k]) * 16 + hexval(hex[k + 1]));
			in = raw;
			il = hl / 2;
			n_raw++;
		}
		int nw, nwn;
		json_t* jns = json_object_get(j, "ids_ns");
		int32_t *want = NULL, *want_ns = NULL, *ids = NULL, *ids_ns = NULL;
		nw = (int)json_array_size(json_object_get(j, "ids"));
		want = malloc(sizeof(int32_t) * (size_t)(nw + 1));
		for (int k = 0; k < nw; k++) want[k] = (int32_t)json_integer_value(json_array_get(json_object_get(j, "ids"), (size_t)k));
		nwn = jns ? (int)json_array_size(jns) : nw;
		want_ns = malloc(sizeof(int32_t) * (size_t)(nwn + 1));
		for (int k = 0; k < nwn; k++)
			want_ns[k] = jns ? (int32_t)json_integer_value(json_array_get(jns, (size_t)k)) : want[k];

		double t0 = now();
		int ni = enc(in, il, 1, &ids);
		t_enc += now() - t0;
		total_bytes += il;
		int nn = enc(in, il, 0, &ids_ns);
		cases++;
		int g1 = ni >= 0 && same_ids(ids, ni, want, nw), g2 = nn >= 0 && same_ids(ids_ns, nn, want_ns, nwn);
		ok_sp += g1;
		ok_ns += g2;
		if ((!g1 || !g2) && shown++ < 8) {
			fprintf(stderr, "corpus case %d differs (%s): %.*s\n", cases, g1 ? "parse_special=0" : "parse_special=1",
			        (int)(tl > 200 ? 200 : tl), text);
			print_ids(stderr, "proven", g1 ? ids_ns : ids, g1 ? nn : ni);
			print_ids(stderr, "HF", g1 ? want_ns : want, g1 ? nwn : nw);
		}
		/* decode of HF's ids == HF's decode; streaming gives the same bytes */
		json_t* jd = json_object_get(j, "dec");
		const char* wd = jd ? json_string_value(jd) : text;
		size_t wdl = jd ? json_string_length(jd) : tl;
		char* dec;
		size_t dl;
		char err[256];
		int gd = !pv_tok_decode(tok, want, nw, 0, &dec, &dl, err, sizeof err);
		if (gd) {
			gd = dl == wdl && !memcmp(dec, wd, dl);
			int held, bad;
			size_t sl;
			char* sd = stream_all(want, nw, 0, &sl, &held, &bad);
			ok_stream += !bad && sl == dl && !memcmp(sd, dec, dl);
			free(sd);
			free(dec);
		}
		if (!gd && shown++ < 8) fprintf(stderr, "corpus case %d: decode differs from HF: %.*s\n", cases, (int)(tl > 200 ? 200 : tl), text);
		ok_dec += gd;
		free(ids);
		free(ids_ns);
		free(want);
		free(want_ns);
		free(raw);
		json_decref(j);
	}
	free(data);
	printf("HF tokenizers parity: %d passed, %d failed (%d/%d identical with parse_special=1, %d/%d with "
	       "parse_special=0; %d strings from invalid UTF-8)\n",
	       ok_sp + ok_ns, 2 * cases - ok_sp - ok_ns, ok_sp, cases, ok_ns, cases, n_raw);
	printf("HF decode parity: %d passed, %d failed (decode %d/%d identical, streaming decode %d/%d)\n", ok_dec + ok_stream,
	       2 * cases - ok_dec - ok_stream, ok_dec, cases, ok_stream, cases);
	printf("encode throughput on the corpus: %.2f MB/s (%zu bytes, %d strings)\n", total_bytes / t_enc / 1e6,
	       total_bytes, cases);
	CHECK(cases >= 10000 && cases == header_cases, "corpus has %d cases (header says %d)", cases, header_cases);
	CHECK(ok_sp == cases, "parity parse_special=1: %d/%d", ok_sp, cases);
	CHECK(ok_ns == cases, "parity parse_special=0: %d/%d", ok_ns, cases);
	CHECK(ok_dec == cases, "decode parity: %d/%d", ok_dec, cases);
	CHECK(ok_stream == cases, "streaming decode: %d/%d", ok_stream, cases);
	CHECK(n_raw > 500, "invalid-UTF-8 cases: %d", n_raw);
}

TEST_CASE(special)
{
	if (!need_tok()) return;
	const char* s = "<|im_start|>user\n<think>hi</think><|im_end|><tool_call>";
	int32_t *a, *b;
	int na = enc(s, strlen(s), 1, &a);
	int nb = enc(s, strlen(s), 0, &b);
	int32_t want_a[] = { 151644, 872, 198, 151667, 6023, 151668, 151645, 151657 };
	CHECK(same_ids(a, na, want_a, 8), "parse_special=1 ids");
	int think = 0, im = 0;
	for (int i = 0; i < nb; i++) {
		think += b[i] == 151667 || b[i] == 151668 || b[i] == 151657;
		im += b[i] == 151644 || b[i] == 151645;
	}
	CHECK(think == 3 && im == 0, "parse_special=0 keeps non-special added tokens only (%d, %d)", think, im);
	char* d;
	size_t dl;
	CHECK(!pv_tok_decode(tok, b, nb, 0, &d, &dl, NULL, 0) && dl == strlen(s) && !memcmp(d, s, dl), "decode ns");
	free(d);
	CHECK(!pv_tok_decode(tok, a, na, PV_TOK_DECODE_SKIP_SPECIAL, &d, &dl, NULL, 0) &&
	              !strcmp(d, "user\n<think>hi</think><tool_call>"),
	      "skip special: %s", d);
	free(d);
	/* leftmost-longest: adjacent and overlapping candidates */
	const char* s2 = "<<|im_end|>|im_end|>>";
	int32_t* c;
	int nc = enc(s2, strlen(s2), 1, &c);
	int pos = -1;
	for (int i = 0; i < nc; i++)
		if (c[i] == 151645) pos = i;
	CHECK(nc > 2 && pos == 1 && c[0] == 27, "nested special");
	free(a);
	free(b);
	free(c);
	/* bad ids */
	int32_t bad[] = { 1, 151669 }, neg[] = { -1 };
	char err[200];
	CHECK(pv_tok_decode(tok, bad, 2, 0, &d, &dl, err, sizeof err) == -1 && strstr(err, "151669"), "bad id: %s", err);
	CHECK(pv_tok_decode(tok, neg, 1, 0, &d, &dl, err, sizeof err) == -1, "negative id");
	int32_t* e;
	CHECK(enc("", 0, 1, &e) == 0 && e, "empty text");
	free(e);
}

/* Each invalid sequence becomes U+FFFD per maximal subpart (Python errors="replace"). */
TEST_CASE(invalid_utf8)
{
	if (!need_tok()) return;
	static const struct { const char* raw; int rn; const char* fixed; } cases[] = {
		{ "\xff", 1, "\xef\xbf\xbd" },
		{ "a\xc3", 2, "a\xef\xbf\xbd" },
		{ "\xc3(", 2, "\xef\xbf\xbd(" },
		{ "\xe0\x80\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xed\xa0\x80x", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx" },
		{ "\xf0\x9f\x9a", 3, "\xef\xbf\xbd" },
		{ "\xf0\x9f\x9a \xf0\x9f\x9a\x80", 8, "\xef\xbf\xbd \xf0\x9f\x9a\x80" },
		{ "\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd" },
		{ "\xe2\x82", 2, "\xef\xbf\xbd" },
		{ "\xe2\x82\xe2\x82\xac", 5, "\xef\xbf\xbd\xe2\x82\xac" },
		{ "x\0y\x80", 4, "x\0y\xef\xbf\xbd" },
		{ "\xf8\x88\x80\x80\x80", 5, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int32_t *a, *b;
		size_t fl = 0;
		while (fl < 64 && (cases[i].fixed[fl] || (i == 11 && fl == 1))) fl++;
		int na = enc(cases[i].raw, (size_t)cases[i].rn, 1, &a);
		int nb = enc(cases[i].fixed, fl, 1, &b);
		CHECK(na > 0 && same_ids(a, na, b, nb), "invalid UTF-8 case %zu", i);
		char* d;
		size_t dl;
		CHECK(!pv_tok_decode(tok, a, na, 0, &d, &dl, NULL, 0) && dl == fl && !memcmp(d, cases[i].fixed, fl),
		      "invalid UTF-8 case %zu round trip", i);
		free(d);
		free(a);
		free(b);
	}
	/* random bytes: decode(encode(b)) == NFC(repair(b)); the repair is checked by utf8proc */
	uint64_t x = 88172645463325252ull;
	int ok = 0, total = 400;
	for (int r = 0; r < total; r++) {
		unsigned char buf[64];
		int n = 1 + r % 63;
		for (int k = 0; k < n; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			buf[k] = (unsigned char)(r % 3 == 0 ? x : (x % 4 ? 0x20 + x % 90 : 0x80 + x % 128));
		}
		int32_t* ids;
		int ni = enc((const char*)buf, (size_t)n, 1, &ids);
		char* d;
		size_t dl;
		if (ni >= 0 && !pv_tok_decode(tok, ids, ni, PV_TOK_DECODE_RAW, &d, &dl, NULL, 0)) {
			/* the output is valid UTF-8 and NFC-stable */
			utf8proc_uint8_t* o = NULL;
			utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t*)d, (utf8proc_ssize_t)dl, &o,
			                                  UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			ok += m == (utf8proc_ssize_t)dl && !memcmp(o, d, dl);
			free(o);
			free(d);
		}
		free(ids);
	}
	CHECK(ok == total, "random bytes: %d/%d decode to valid NFC UTF-8", ok, total);
}

/* Long single-class runs: no crash, no stack overflow, linear time; exact round trip. */
TEST_CASE(long_runs)
{
	if (!need_tok()) return;
	static const struct { const char* unit; const char* name; } units[] = {
		{ " ", "spaces" }, { "a", "letters" }, { "7", "digits" }, { "\n", "newlines" }, { "!", "punctuation" },
		{ "\xc3\xa9", "e-acute" }, { "\xcc\x81", "combining acute" }, { "\xf0\x9f\x9a\x80", "rockets" },
		{ "\xe3\x80\x80", "ideographic spaces" }, { " \n", "space-newline" }, { "ab ", "words" },
		{ "\xe4\xb8\x96", "CJK" }, { "'s", "contractions" }, { "\t ", "tab-space" },
	};
	const size_t N = 100000;
	double t0 = now();
	for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
		size_t ul = strlen(units[u].unit), n = N * ul;
		char* s = malloc(n + 2);
		for (size_t i = 0; i < N; i++) memcpy(s + i * ul, units[u].unit, ul);
		s[n] = 'x';
		for (int tail = 0; tail < 2; tail++) {
			int32_t* ids;
			double t1 = now();
			int k = enc(s, n + (size_t)tail, 1, &ids);
			double dt = now() - t1;
			CHECK(k > 0, "long run of %s failed", units[u].name);
			char* d = NULL;
			size_t dl = 0;
			if (k > 0) {
				int ok = !pv_tok_decode(tok, ids, k, 0, &d, &dl, NULL, 0);
				/* NFC changes e + combining acute runs only at the start (nothing to compose with) */
				CHECK(ok && dl == n + (size_t)tail && !memcmp(d, s, dl), "long run of %s: round trip", units[u].name);
			}
			CHECK(dt < 20.0, "long run of %s took %.2f s", units[u].name, dt);
			if (getenv("PV_TOK_VERBOSE")) printf("  %s%s: %d ids, %.3f s\n", units[u].name, tail ? " + x" : "", k, dt);
			if (u == 2 && k > 0) CHECK(k == (int)N + tail && ids[0] == 22, "digits are one token each (%d)", k);
			free(d);
			free(ids);
		}
		free(s);
	}
	/* 2 MiB of spaces followed by a word, and 2 MiB of one letter */
	size_t big = 2u << 20;
	char* s = malloc(big + 8);
	memset(s, ' ', big);
	memcpy(s + big, "Hello", 5);
	int32_t* ids;
	int k = enc(s, big + 5, 1, &ids);
	CHECK(k > 2 && ids[k - 1] == 21927, "2 MiB of spaces then \" Hello\" (%d ids)", k);
	free(ids);
	memset(s, 'z', big);
	k = enc(s, big, 1, &ids);
	CHECK(k > 0, "2 MiB letter run");
	free(ids);
	free(s);
	printf("long runs: %.2f s\n", now() - t0);
}

TEST_CASE(streaming)
{
	if (!need_tok()) return;
	/* rare characters split into several byte tokens */
	const char* s = "\xf0\x9f\xa7\xac \xe4\xb9\x82\xe5\x8d\x84\xe4\xb9\x87 \xf0\x90\x8c\xb0\xf0\x90\x8c\xb1 "
	                "\xe1\x9a\xa0\xe1\x9b\x87\xe1\x9a\xbb \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7";
	int32_t* ids;
	int n = enc(s, strlen(s), 1, &ids);
	size_t len;
	int held, bad;
	char* out = stream_all(ids, n, 0, &len, &held, &bad);
	CHECK(!bad && len == strlen(s) && !memcmp(out, s, len), "stream round trip");
	CHECK(held, "some tokens end inside a character (held back)");
	free(out);
	free(ids);
	/* an incomplete character at the end is flushed as U+FFFD; an invalid byte is replaced at once */
	int32_t lone[2] = { pv_tok_id(tok, "\xc3\xb0"), pv_tok_id(tok, "\xc5\x81") }; /* bytes F0 9F */
	out = stream_all(lone, 2, 0, &len, &held, &bad);
	CHECK(!bad && len == 3 && !memcmp(out, "\xef\xbf\xbd", 3) && held, "flush of an incomplete sequence");
	free(out);
	int32_t inv[3] = { 64, pv_tok_id(tok, "\xc3\xbf"), 64 }; /* "a" 0xFF "a" */
	out = stream_all(inv, 3, 0, &len, &held, &bad);
	CHECK(!bad && len == 5 && !memcmp(out, "a\xef\xbf\xbd" "a", 5), "invalid byte in stream");
	free(out);
	struct pv_tok_stream* st;
	const char* b;
	size_t bl;
	CHECK(!pv_tok_stream_new(&st, tok, PV_TOK_DECODE_SKIP_SPECIAL), "stream new");
	CHECK(!pv_tok_stream_push(st, 151645, &b, &bl) && bl == 0, "skip special in stream");
	CHECK(!pv_tok_stream_push(st, 151667, &b, &bl) && bl == 7 && !memcmp(b, "<think>", 7), "keep <think> in stream");
	CHECK(pv_tok_stream_push(st, 999999, &b, &bl) == -1, "bad id in stream");
	pv_tok_stream_free(st);
	int32_t raw_ids[2] = { pv_tok_id(tok, "\xc3\xbf"), 64 };
	char* d;
	CHECK(!pv_tok_decode(tok, raw_ids, 2, PV_TOK_DECODE_RAW, &d, &len, NULL, 0) && len == 2 && !memcmp(d, "\xff" "a", 2),
	      "raw decode");
	free(d);
}

/* The GGUF-style constructor from the same data; the qwen35 regex on llama.cpp's qwen35 cases. */
TEST_CASE(from_vocab)
{
	if (!need_tok()) return;
	json_error_t je;
	json_t* root = json_load_file(tok_path, 0, &je);
	CHECK(root != NULL, "reload tokenizer.json: %s", je.text);
	if (!root) return;
	int nv = pv_tok_n_vocab(tok);
	const char** toks = calloc((size_t)nv, sizeof(char*));
	int* types = calloc((size_t)nv, sizeof(int));
	for (int i = 0; i < nv; i++) {
		toks[i] = pv_tok_text(tok, i);
		types[i] = pv_tok_is_special(tok, i) ? PV_TOK_CONTROL : i >= 151643 ? PV_TOK_USER_DEFINED : PV_TOK_NORMAL;
	}
	json_t* jm = json_object_get(json_object_get(root, "model"), "merges");
	int nm = (int)json_array_size(jm);
	char** merges = calloc((size_t)nm, sizeof(char*));
	for (int i = 0; i < nm; i++) {
		json_t* p = json_array_get(jm, (size_t)i);
		const char* a = json_string_value(json_array_get(p, 0));
		const char* b = json_string_value(json_array_get(p, 1));
		merges[i] = malloc(strlen(a) + strlen(b) + 2);
		sprintf(merges[i], "%s %s", a, b);
	}
	struct pv_tok *g = NULL, *g35 = NULL;
	char err[300];
	int rc = pv_tok_from_vocab(&g, toks, types, nv, (const char* const*)merges, nm, "qwen2", PV_TOK_NFC, err, sizeof err);
	CHECK(rc == 0, "from_vocab qwen2: %s", err);
	rc = pv_tok_from_vocab(&g35, toks, types, nv, (const char* const*)merges, nm, "qwen35", 0, err, sizeof err);
	CHECK(rc == 0, "from_vocab qwen35: %s", err);
	struct pv_tok* bad = NULL;
	CHECK(pv_tok_from_vocab(&bad, toks, types, nv, (const char* const*)merges, nm, "llama-bpe", 0, err, sizeof err) == -1 &&
	          strstr(err, "llama-bpe"),
	      "unknown pre: %s", err);
	const char* bad_merge[] = { "\xc4\xa0 q zz" };
	CHECK(pv_tok_from_vocab(&bad, toks, types, nv, bad_merge, 1, "qwen2", 0, err, sizeof err) == -1, "bad merge");
	const char* oov_merge[] = { "nosuch token" };
	CHECK(pv_tok_from_vocab(&bad, toks, types, nv, oov_merge, 1, "qwen2", 0, err, sizeof err) == -1 && strstr(err, "nosuch"),
	      "merge with unknown token: %s", err);
	/* GGUF oddities: a text given to two ids (the later one wins, as in llama.cpp), empty padding */
	const char* small[] = { "a", "b", "ab", "a", "<s>", "", "[PAD6]" };
	int small_types[] = { PV_TOK_NORMAL, PV_TOK_NORMAL, PV_TOK_NORMAL, PV_TOK_BYTE, PV_TOK_CONTROL, PV_TOK_UNUSED,
		              PV_TOK_UNUSED };
	const char* small_merges[] = { "a b" };
	rc = pv_tok_from_vocab(&bad, small, small_types, 7, small_merges, 1, NULL, 0, err, sizeof err);
	CHECK(rc == 0, "small vocab: %s", err);
	if (!rc) {
		int32_t* ids;
		int n;
		CHECK(pv_tok_id(bad, "a") == 3 && pv_tok_id(bad, "<s>") == 4, "duplicate text: later id");
		CHECK(!pv_tok_encode(bad, "ab<s>a", 6, 1, &ids, &n, err, sizeof err) && n == 3 && ids[0] == 2 && ids[1] == 4 &&
		              ids[2] == 3,
		      "small vocab encode");
		free(ids);
		int32_t pads[] = { 5, 0, 6 };
		char* d;
		size_t dl;
		CHECK(!pv_tok_decode(bad, pads, 3, 0, &d, &dl, err, sizeof err) && dl == 1 && d[0] == 'a', "padding decodes to nothing");
		free(d);
		pv_tok_free(bad);
	}
	if (g) {
		struct pv_tok* keep = tok;
		const char* texts[] = { "Hello, world! It's 2024.\n", "<|im_start|>user\nF\xc3\xbchrer caf\x65\xcc\x81<|im_end|>",
		                        "   \xe4\xbd\xa0\xe5\xa5\xbd  \t\n\n", "<think>3333</think>" };
		for (int i = 0; i < 4; i++) {
			int32_t *a, *b;
			tok = keep;
			int na = enc(texts[i], strlen(texts[i]), 1, &a);
			tok = g;
			int nb = enc(texts[i], strlen(texts[i]), 1, &b);
			CHECK(same_ids(a, na, b, nb), "from_vocab encodes like tokenizer.json: case %d", i);
			free(a);
			free(b);
		}
		tok = keep;
	}
	if (g35) {
		/* llama.cpp ggml-vocab-qwen35 cases (Qwen2 ids, qwen35 regex, no NFC), qwen-models.md §9.6 */
		static const struct { const char* text; const char* ids; } c35[] = {
			{ "\xc3\x84pfel", "86975 15897 301" },
			{ "!!!!!!", "17085 2928" },
			{ "C\xe1\xbb\xad" "a Vi\xe1\xbb\x87t", "34 90063 128324" },
			{ "e\xcc\x81", "68 53839" },
		};
		struct pv_tok* keep = tok;
		tok = g35;
		for (int i = 0; i < 4; i++) {
			int32_t want[16], *ids;
			int nw = parse_ids(c35[i].ids, want, 16);
			int n = enc(c35[i].text, strlen(c35[i].text), 0, &ids);
			CHECK(same_ids(ids, n, want, nw), "qwen35 case %d", i);
			free(ids);
		}
		tok = keep;
	}
	pv_tok_free(g);
	pv_tok_free(g35);
	for (int i = 0; i < nm; i++) free(merges[i]);
	free(merges);
	free(toks);
	free(types);
	json_decref(root);
}

/* Crafted tokenizer files: every one fails with a message, none crashes. */
TEST_CASE(bad_files)
{
	char dir[1100], path[1200], err[600];
	struct pv_tok* t = NULL;
	snprintf(dir, sizeof dir, "%s/tests/tokdir", build_dir);
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	static const struct { const char* json; const char* expect; } cases[] = {
		{ "not json", "tokenizer.json" },
		{ "[]", "not a JSON object" },
		{ "{}", "model" },
		{ "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "pre_tokenizer" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
		  "\"merges\": []}}", "does not compile" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"normalizer\": {\"type\": \"NFKC\"}, \"model\": "
		  "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", "normalizer" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
		  "\"b\": 1}, \"merges\": [\"a b\"]}}", "merged token" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
		  "\"b\": 0}, \"merges\": []}}", "used twice" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -5}, "
		  "\"merges\": []}}", "bad id" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}, "
		  "\"merges\": []}}", "not BPE" },
		{ "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
		  "\"merges\": []}}", "pre_tokenizer" },
		{ "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
		  "\"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
		  "\"merges\": []}, \"added_tokens\": [{\"id\": 1, \"content\": \"<x>\", \"lstrip\": true}]}", "lstrip" },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		FILE* f = fopen(path, "w");
		fputs(cases[i].json, f);
		fclose(f);
		err[0] = 0;
		int rc = pv_tok_open_json(&t, dir, err, sizeof err);
		CHECK(rc == -1 && t == NULL && strstr(err, cases[i].expect), "bad file %zu: rc %d, message \"%s\"", i, rc, err);
	}
	/* a minimal valid file: only bytes 'a' 'b' and one merge; missing bytes are reported at encode */
	FILE* f = fopen(path, "w");
	fputs("{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
	      "\"\\\\p{L}+|\\\\s+\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\"}]}, \"model\": {\"type\": \"BPE\", "
	      "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xc4\xa0\": 3}, \"merges\": [[\"a\", \"b\"]]}, \"added_tokens\": "
	      "[{\"id\": 4, \"content\": \"<s>\", \"special\": true}]}",
	      f);
	fclose(f);
	int rc = pv_tok_open_json(&t, path, err, sizeof err);
	CHECK(rc == 0, "minimal tokenizer: %s", err);
	if (!rc) {
		int32_t* ids;
		int n;
		CHECK(!pv_tok_encode(t, "abab a<s>b", 10, 1, &ids, &n, err, sizeof err) && n == 6 && ids[0] == 2 && ids[1] == 2 &&
		              ids[2] == 3 && ids[3] == 0 && ids[4] == 4 && ids[5] == 1,
		      "minimal encode");
		free(ids);
		CHECK(pv_tok_encode(t, "abc", 3, 1, &ids, &n, err, sizeof err) == -1 && strstr(err, "0x63"), "byte without token: %s", err);
		pv_tok_free(t);
	}
	CHECK(pv_tok_open_json(&t, "/nonexistent/tokenizer.json", err, sizeof err) == -1 && strstr(err, "No such file"),
	      "missing file: %s", err);
	CHECK(pv_tok_open_json(&t, "model.gguf", err, sizeof err) == -1 && strstr(err, "GGUF"), "gguf: %s", err);
	/* the HF directory form: where need_tok unpacked tokenizer.json */
	if (!need_tok()) return;
	snprintf(path, sizeof path, "%s/tests", build_dir);
	rc = pv_tok_open_json(&t, path, err, sizeof err);
	CHECK(rc == 0, "directory form: %s", err);
	pv_tok_free(rc ? NULL : t);
}

struct thr {
	const char* text;
	size_t len;
	int ok;
};

static void* thr_main(void* p)
{
	struct thr* a = p;
	int32_t *ref = NULL, *ids = NULL;
	int nr, n;
	a->ok = !pv_tok_encode(tok, a->text, a->len, 1, &ref, &nr, NULL, 0);
	for (int r = 0; r < 20 && a->ok; r++) {
		a->ok = !pv_tok_encode(tok, a->text, a->len, 1, &ids, &n, NULL, 0) && same_ids(ids, n, ref, nr);
		free(ids);
	}
	free(ref);
	return NULL;
}

TEST_CASE(threads)
{
	if (!need_tok()) return;
	pthread_t th[4];
	struct thr a[4];
	const char* texts[] = { "Hello world, this is thread one. 1234 \xe4\xbd\xa0\xe5\xa5\xbd",
		                "<|im_start|>user\nCaf\x65\xcc\x81 \xf0\x9f\x9a\x80\xf0\x9f\x9a\x80<|im_end|>",
		                "    def f(x):\n        return x\n", "\xff\xfe invalid \xc3" };
	for (int i = 0; i < 4; i++) {
		a[i] = (struct thr){ texts[i], strlen(texts[i]), 0 };
		pthread_create(&th[i], NULL, thr_main, &a[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK(a[i].ok, "thread %d", i);
	}
}

/* `proven tokenize` end to end. */
TEST_CASE(cli)
{
	if (!need_tok()) return;
	char cmd[3000], in[1200];
	int st;
	size_t n;
	char bin[600];
	snprintf(bin, sizeof bin, "%s/proven", build_dir);
	if (access(bin, X_OK)) {
		CHECK(0, "%s is not built", bin);
		return;
	}
	snprintf(cmd, sizeof cmd, "printf 'Hello, world!' | %s tokenize --tokenizer %s", bin, tok_path);
	char* out = run_read(cmd, &n, &st);
	CHECK(st == 0 && out && !strcmp(out, "9707,11,1879,0\n"), "cli plain: %s", out);
	free(out);
	snprintf(in, sizeof in, "%s/tests/tok_cli.jsonl", build_dir);
	FILE* f = fopen(in, "w");
	fputs("\"<|im_start|>user\\nHello<|im_end|>\\n\"\n\"3333\"\n\"\"\n\"a\\u0000b\"\n", f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer %s/tests --jsonl < %s", bin, build_dir, in);
	out = run_read(cmd, &n, &st);
	CHECK(st == 0 && out && !strcmp(out, "151644,872,198,9707,151645,198\n18,18,18,18\n\n64,188,65\n"), "cli jsonl: %s", out);
	free(out);
	snprintf(cmd, sizeof cmd, "printf '<|im_end|><think>' | %s tokenize --tokenizer %s --no-special", bin, tok_path);
	out = run_read(cmd, &n, &st);
	CHECK(st == 0 && out && !strcmp(out, "27,91,318,6213,91,29,151667\n"), "cli no-special: %s", out);
	free(out);
	snprintf(cmd, sizeof cmd, "printf '\"ok\"\\nnot json\\n' | %s tokenize --tokenizer %s --jsonl 2>&1", bin, tok_path);
	out = run_read(cmd, &n, &st);
	CHECK(st != 0 && out && strstr(out, "line 2"), "cli bad jsonl: %s", out);
	free(out);
	snprintf(cmd, sizeof cmd, "printf x | %s tokenize --tokenizer model.gguf 2>&1", bin);
	out = run_read(cmd, &n, &st);
	CHECK(st == 1 && out && strstr(out, "cannot load model.gguf"), "cli gguf: %s", out);
	free(out);
	snprintf(cmd, sizeof cmd, "printf x | %s tokenize 2>&1", bin);
	out = run_read(cmd, &n, &st);
	CHECK(st != 0 && out && strstr(out, "--tokenizer"), "cli missing option: %s", out);
	free(out);
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_tokenizer", setup, teardown);
}
