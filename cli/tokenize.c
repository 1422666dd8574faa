/*
 * tokenize.c: `proven tokenize --tokenizer PATH [--jsonl] [--no-special]`.
 * Reads text from stdin and prints its token ids, comma-separated, on one line. With --jsonl
 * every input line is one JSON string and every output line holds the ids of that string.
 * --no-special tokenizes the text of special tokens (<|im_start|>, ...) as ordinary text.
 */
#include "cli.h"
#include "proven.h"
#include "proven_text.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the most text pv_tok_encode takes; more (stdin on /dev/zero) is refused, not read forever */
#define MAX_INPUT ((size_t)1 << 30)

static char* read_stdin(size_t* n)
{
	size_t cap = 1 << 16, len = 0;
	char* buf = malloc(cap);
	if (!buf) return NULL;
	for (;;) {
		if (len == cap) {
			char* g = cap >= MAX_INPUT ? NULL : realloc(buf, cap *= 2);
			if (!g) {
				if (cap >= MAX_INPUT) fprintf(stderr, "proven tokenize: standard input is larger than %zu MiB\n", MAX_INPUT >> 20);
				else fprintf(stderr, "proven tokenize: out of memory reading standard input\n");
				free(buf);
				return NULL;
			}
			buf = g;
		}
		size_t k = fread(buf + len, 1, cap - len, stdin);
		if (!k) break;
		len += k;
	}
	if (ferror(stdin)) {
		fprintf(stderr, "proven tokenize: cannot read standard input: %s\n", strerror(errno));
		free(buf);
		return NULL;
	}
	*n = len;
	return buf;
}

static void print_ids(const int32_t* ids, int n)
{
	for (int i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
	putchar('\n');
}

static int encode_print(const struct pv_tok* t, const char* s, size_t n, int special, const char* where)
{
	int32_t* ids;
	int k;
	char err[512];
	if (pv_tok_encode(t, s, n, special, &ids, &k, err, sizeof err)) {
		fprintf(stderr, "proven tokenize: %s%s\n", where, err);
		return -1;
	}
	print_ids(ids, k);
	free(ids);
	return 0;
}

int cmd_tokenize(int argc, char** argv)
{
	const char* path = NULL;
	int jsonl = 0, special = 1;
	for (int i = 1; i < argc; i++) {
		if (cli_is_help(argv[i])) return cli_usage("tokenize", stdout);
		if (!strcmp(argv[i], "--tokenizer")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "proven tokenize: option --tokenizer needs a value\n");
				return 2;
			}
			path = argv[++i];
		} else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
		else if (!strcmp(argv[i], "--no-special")) special = 0;
		else {
			fprintf(stderr, "proven tokenize: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (!path) {
		fprintf(stderr, "proven tokenize: --tokenizer PATH is required (a tokenizer.json or a Hugging Face model directory)\n");
		return 2;
	}
	size_t pl = strlen(path);
	char err[1024];
	struct pv_tok* t = NULL;
	pv_model* gm = NULL; /* a GGUF's tokenizer lives in its metadata: load the (mapped) model */
	if (pl >= 5 && !strcmp(path + pl - 5, ".gguf")) {
		if (pv_model_open(&gm, path, NULL, err, sizeof err)) {
			fprintf(stderr, "proven tokenize: cannot load %s: %s\n", path, err);
			return 1;
		}
		t = (struct pv_tok*)pv_model_tokenizer(gm);
		if (!t) {
			fprintf(stderr, "proven tokenize: %s has no tokenizer metadata\n", path);
			pv_model_close(gm);
			return 1;
		}
	} else if (pv_tok_open_json(&t, path, err, sizeof err)) {
		fprintf(stderr, "proven tokenize: cannot load tokenizer: %s\n", err);
		return 1;
	}
	size_t n;
	char* in = read_stdin(&n);
	if (!in) { /* said by read_stdin */
		if (gm) pv_model_close(gm); else pv_tok_free(t);
		return 1;
	}
	int rc = 0;
	if (!jsonl) {
		rc = encode_print(t, in, n, special, "") ? 1 : 0;
	} else {
		size_t pos = 0;
		for (long line = 1; pos < n && !rc; line++) {
			char* nl = memchr(in + pos, '\n', n - pos);
			size_t ll = nl ? (size_t)(nl - (in + pos)) : n - pos;
			json_error_t je;
			json_t* v = json_loadb(in + pos, ll, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
			char where[64];
			snprintf(where, sizeof where, "line %ld: ", line);
			if (!v) {
				fprintf(stderr, "proven tokenize: line %ld: not JSON (%s)\n", line, je.text);
				rc = 1;
			} else if (!json_is_string(v)) {
				fprintf(stderr, "proven tokenize: line %ld: expected a JSON string\n", line);
				rc = 1;
			} else if (encode_print(t, json_string_value(v), json_string_length(v), special, where)) {
				rc = 1;
			}
			json_decref(v);
			pos += ll + 1;
			if (ferror(stdout)) rc = 1; /* said below; the rest would be lost too */
		}
	}
	free(in);
	if (gm) pv_model_close(gm); else pv_tok_free(t);
	if (cli_stdout_failed("tokenize")) return 1;
	return rc;
}
