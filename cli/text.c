/*
 * text.c: `proven run` (raw completion) and `proven chat` (interactive, chat template), with
 * streamed tokens, sampling, a load progress line and a tokens/s summary.
 */
#include "cli.h"
#include "proven.h"
#include "proven_text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct gen_opts {
	const char* model;
	const char* prompt;
	const char* system;
	const char* backend; /* "cpu" (default) or "cuda" */
	int max_tokens, threads, ctx, no_special, no_thinking, hide_thinking;
	struct cli_gen go;       /* sampling and speculation */
	int dialect;
};

struct gen {
	pv_model* m;
	pv_session* s;
	pv_generator* gen;       /* plain or speculative: the same tokens either way */
	const struct pv_tok* tok;
	struct gen_opts* o;
	int vocab, use_color;
	int32_t think_open, think_close;
};

static int parse_common(int argc, char** argv, struct gen_opts* o, int chat)
{
	memset(o, 0, sizeof(*o));
	o->max_tokens = chat ? 2048 : 256;
	cli_gen_defaults(&o->go, chat ? 0.7f : 0.0f, chat ? 0.8f : 1.0f, chat ? 20 : 0);
	o->dialect = -1;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) {
			cli_usage(chat ? "chat" : "run", stdout);
			return -1; /* done: exit 0 */
		}
		if (!strcmp(a, "--no-special")) { o->no_special = 1; continue; }
		if (!strcmp(a, "--no-thinking")) { o->no_thinking = 1; continue; }
		if (!strcmp(a, "--hide-thinking")) { o->hide_thinking = 1; continue; }
		if (cli_gen_flag(&o->go, a)) continue;
		if (i + 1 >= argc) {
			fprintf(stderr, "proven %s: unknown option or missing value: %s\n", chat ? "chat" : "run", a);
			return 2;
		}
		const char* v = argv[++i];
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) o->model = v;
		else if (!chat && (!strcmp(a, "-p") || !strcmp(a, "--prompt"))) o->prompt = v;
		else if (chat && !strcmp(a, "--system")) o->system = v;
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "-n")) o->max_tokens = cli_int(a, v, 1, 1 << 24);
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) o->threads = cli_int(a, v, 1, 1024);
		else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) o->ctx = cli_int(a, v, 1, 1 << 24);
		else if (!strcmp(a, "--backend")) {
			if (cli_check_backend(chat ? "chat" : "run", v)) return 2;
			o->backend = v;
		} else if (cli_gen_option(&o->go, chat ? "chat" : "run", a, v)) {
		} else if (chat && !strcmp(a, "--dialect")) {
			if ((o->dialect = pv_chat_dialect_from_name(v)) < 0) {
				fprintf(stderr, "proven chat: unknown dialect \"%s\" (qwen3, qwen3.5, qwen2.5)\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "proven %s: unknown option %s\n", chat ? "chat" : "run", a);
			return 2;
		}
	}
	if (!o->model) {
		fprintf(stderr, "proven %s: --model PATH is required\n", chat ? "chat" : "run");
		return 2;
	}
	if (!chat && !o->prompt) {
		fprintf(stderr, "proven run: -p TEXT is required\n");
		return 2;
	}
	return 0;
}

static void gen_close(struct gen* g)
{
	pv_generator_free(g->gen);
	pv_session_free(g->s);
	cli_gen_close(&g->o->go);
	pv_model_close(g->m);
}

static int gen_open(struct gen* g, struct gen_opts* o)
{
	memset(g, 0, sizeof(*g));
	g->o = o;
	char err[512];
	struct pv_model_params mp = cli_model_params(1, o->backend);
	if (pv_model_open(&g->m, o->model, &mp, err, sizeof(err))) {
		fprintf(stderr, "proven: cannot load model: %s\n", err);
		return 1;
	}
	g->tok = pv_model_tokenizer(g->m);
	if (!g->tok) {
		fprintf(stderr, "proven: %s has no tokenizer (tokenizer.json or GGUF tokenizer metadata)\n", o->model);
		gen_close(g);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(g->m);
	g->vocab = in->vocab;
	/* padded vocabulary rows (embedding rows without a token) are never chosen */
	o->go.smp.n_valid = pv_tok_n_vocab(g->tok) < g->vocab ? pv_tok_n_vocab(g->tok) : g->vocab;
	int ctx = o->ctx ? o->ctx : (in->max_context < 4096 ? in->max_context : 4096);
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = o->threads };
	cli_gen_session_params(&o->go, &sp);
	const char* cmd = o->prompt ? "run" : "chat";
	if (pv_session_new(&g->s, g->m, &sp, err, sizeof(err))) {
		fprintf(stderr, "proven: %s\n", err);
		gen_close(g);
		return 1;
	}
	if (cli_gen_open(&o->go, cmd, g->m, &sp, o->backend) || pv_generator_new(&g->gen, g->s, &o->go.smp, &o->go.sp, err, sizeof err)) {
		if (!g->gen && err[0]) fprintf(stderr, "proven %s: %s\n", cmd, err);
		gen_close(g);
		return 1;
	}
	g->use_color = isatty(STDOUT_FILENO);
	g->think_open = pv_tok_id(g->tok, "<think>");
	g->think_close = pv_tok_id(g->tok, "</think>");
	return 0;
}

static int is_eos(const struct gen* g, int32_t t)
{
	const int32_t* ids;
	int n = pv_model_eos(g->m, &ids);
	for (int i = 0; i < n; i++)
		if (ids[i] == t) return 1;
	return 0;
}

/* Makes the session hold ids[0, n) (reusing the prefix it shares with what it has seen: the
 * generator syncs), then generates and streams up to max tokens, plain or speculative (the same
 * tokens). in_think: the prompt already opened a think block. Generated ids are appended to *out;
 * *evaluated: prompt tokens that were not reused. */
static int generate(struct gen* g, const int32_t* ids, int n, int max, int in_think, int hide_think,
                    int32_t** out, int* n_out, double* t_prompt, double* t_gen, int* evaluated)
{
	double t0 = cli_now();
	int len0 = pv_session_length(g->s);
	const int32_t* hist = pv_session_tokens(g->s);
	int shared = 0;
	while (shared < len0 && shared < n - 1 && hist[shared] == ids[shared]) shared++;
	int32_t buf[17];
	int nb = 1, at = 0;
	if (pv_generator_prompt(g->gen, ids, n, &buf[0])) {
		fprintf(stderr, "\nproven: %s\n", pv_generator_error(g->gen));
		return 1;
	}
	*evaluated = n - shared;
	double t1 = cli_now();
	struct pv_tok_stream* st = NULL;
	if (pv_tok_stream_new(&st, g->tok, PV_TOK_DECODE_SKIP_SPECIAL)) {
		fprintf(stderr, "\nproven: out of memory\n");
		return 1;
	}
	int thinking = in_think, rc = 0;
	if (thinking && g->use_color && !hide_think) fputs("\x1b[2m", stdout);
	for (int i = 0; i < max; i++) {
		if (at == nb) {
			/* the next step: the pending token, and the drafts it accepts */
			if (pv_session_length(g->s) >= pv_session_n_ctx(g->s) - 1) {
				fprintf(stderr, "\nproven: context full (%d tokens)\n", pv_session_n_ctx(g->s));
				break;
			}
			if (pv_generator_step(g->gen, buf, max - i < 17 ? max - i : 17, &nb)) {
				fprintf(stderr, "\nproven: %s\n", pv_generator_error(g->gen));
				rc = 1;
				break;
			}
			at = 0;
		}
		int32_t t = buf[at++];
		if (is_eos(g, t)) break;
		int32_t* grown = realloc(*out, sizeof(int32_t) * (size_t)(*n_out + 1));
		if (!grown) { rc = 1; break; }
		*out = grown;
		(*out)[(*n_out)++] = t;
		const char* bytes;
		size_t len;
		if (t == g->think_open) {
			thinking = 1;
			if (g->use_color && !hide_think) fputs("\x1b[2m", stdout);
		}
		pv_tok_stream_push(st, t, &bytes, &len);
		if (!(thinking && hide_think)) fwrite(bytes, 1, len, stdout);
		if (t == g->think_close) {
			thinking = 0;
			if (g->use_color && !hide_think) fputs("\x1b[0m", stdout);
		}
		if (cli_stdout_failed(g->o->prompt ? "run" : "chat")) { /* nobody reads what follows */
			rc = 1;
			break;
		}
	}
	const char* bytes;
	size_t len;
	pv_tok_stream_flush(st, &bytes, &len);
	fwrite(bytes, 1, len, stdout);
	if (g->use_color) fputs("\x1b[0m", stdout);
	pv_tok_stream_free(st);
	*t_prompt += t1 - t0;
	*t_gen += cli_now() - t1;
	return rc;
}

int cmd_run(int argc, char** argv)
{
	struct gen_opts o;
	int rc = parse_common(argc, argv, &o, 0);
	if (rc) return rc < 0 ? 0 : rc;
	struct gen g;
	if (gen_open(&g, &o)) return 1;
	char err[512];
	int32_t *ids = NULL, *out = NULL;
	int n = 0, n_out = 0;
	double tp = 0, tg = 0;
	if (pv_tok_encode(g.tok, o.prompt, strlen(o.prompt), !o.no_special, &ids, &n, err, sizeof(err))) {
		fprintf(stderr, "proven run: %s\n", err);
		gen_close(&g);
		return 1;
	}
	if (n == 0) {
		fprintf(stderr, "proven run: the prompt encodes to no tokens\n");
		rc = 1;
	} else {
		fwrite(o.prompt, 1, strlen(o.prompt), stdout);
		int evaluated = 0;
		rc = generate(&g, ids, n, o.max_tokens, 0, 0, &out, &n_out, &tp, &tg, &evaluated);
		printf("\n");
		fflush(stdout);
		fprintf(stderr, "proven: prompt %d tokens, %.1f tok/s; generated %d tokens, %.1f tok/s\n", n, tp > 0 ? n / tp : 0.0, n_out,
		        n_out > 0 && tg > 0 ? n_out / tg : 0.0);
	}
	free(ids);
	free(out);
	gen_close(&g);
	return rc;
}

/* the most text pv_tok_encode takes: a longer line (stdin on /dev/zero) ends the chat */
#define MAX_LINE ((size_t)1 << 30)

/* Reads one line from stdin into a growing buffer, NUL bytes included (*len counts them);
 * returns NULL at EOF, and with *len = SIZE_MAX when the line cannot be read (said on stderr). */
static char* read_line(size_t* len)
{
	size_t cap = 256, n = 0;
	char* b = malloc(cap);
	int c = 0;
	flockfile(stdin); /* getc_unlocked: a lock per byte made a long line take seconds */
	while (b && (c = getc_unlocked(stdin)) != EOF && c != '\n') {
		if (n + 1 == cap) {
			char* g = cap >= MAX_LINE ? NULL : realloc(b, cap *= 2);
			if (!g) {
				fprintf(stderr, "\nproven chat: %s\n", cap >= MAX_LINE ? "a line of standard input is longer than 1024 MiB" : "out of memory");
				free(b);
				funlockfile(stdin);
				*len = SIZE_MAX;
				return NULL;
			}
			b = g;
		}
		b[n++] = (char)c;
	}
	funlockfile(stdin);
	if (!b || (c == EOF && n == 0)) {
		free(b);
		return NULL;
	}
	b[n] = 0;
	*len = n;
	return b;
}

/* {"role": role, "content": text} with the text's invalid UTF-8 replaced by U+FFFD as the
 * tokenizer would (jansson refuses invalid UTF-8) and its NUL bytes kept; NULL when out of memory. */
static json_t* message(const char* role, const char* text, size_t len)
{
	size_t n;
	char* fixed = pv_utf8_repair(text, len, &n);
	json_t* content = fixed ? json_stringn(fixed, n) : NULL;
	free(fixed);
	json_t* m = content ? json_pack("{s:s,s:o}", "role", role, "content", content) : NULL;
	return m;
}

int cmd_chat(int argc, char** argv)
{
	struct gen_opts o;
	int rc = parse_common(argc, argv, &o, 1);
	if (rc) return rc < 0 ? 0 : rc;
	struct gen g;
	if (gen_open(&g, &o)) return 1;
	int dialect = o.dialect;
	const char* tmpl = pv_model_chat_template(g.m);
	if (dialect < 0 && tmpl) dialect = pv_chat_detect_dialect(tmpl);
	if (dialect < 0) {
		fprintf(stderr, "proven chat: cannot tell the chat format of this model; pass --dialect qwen3|qwen3.5|qwen2.5\n");
		gen_close(&g);
		return 1;
	}
	int tty = isatty(STDIN_FILENO);
	json_t* msgs = json_array();
	if (!msgs || (o.system && json_array_append_new(msgs, message("system", o.system, strlen(o.system))))) {
		fprintf(stderr, "proven chat: out of memory\n");
		json_decref(msgs);
		gen_close(&g);
		return 1;
	}
	double tp = 0, tg = 0;
	int total_prompt = 0, total_gen = 0;
	char err[512];
	for (;;) {
		if (tty) fprintf(stderr, "\n> ");
		size_t len = 0;
		char* line = read_line(&len);
		if (!line) {
			if (len == SIZE_MAX) rc = 1;
			break;
		}
		if (!len) { free(line); continue; }
		/* never dropped: a line that is not UTF-8 was once discarded, a NUL byte cut it */
		int bad = json_array_append_new(msgs, message("user", line, len));
		free(line);
		if (bad) {
			fprintf(stderr, "proven chat: out of memory\n");
			rc = 1;
			break;
		}
		struct pv_chat_opts co = { 1, !o.no_thinking };
		char* prompt = NULL;
		size_t plen = 0;
		int32_t *ids = NULL, *out = NULL;
		int n = 0, n_out = 0;
		if (pv_chat_render(dialect, msgs, NULL, &co, &prompt, &plen, err, sizeof(err)) ||
		    pv_tok_encode(g.tok, prompt, plen, 1, &ids, &n, err, sizeof(err))) {
			fprintf(stderr, "proven chat: %s\n", err);
			free(prompt);
			rc = 1;
			break;
		}
		/* the session keeps the prefix the new prompt shares with what it has seen
		 * (pv_session_sync) and evaluates only the rest */
		int in_think = dialect == PV_CHAT_QWEN3_5 && !o.no_thinking;
		int evaluated = 0;
		rc = generate(&g, ids, n, o.max_tokens, in_think, o.hide_thinking, &out, &n_out, &tp, &tg, &evaluated);
		printf("\n");
		if (cli_stdout_failed("chat")) rc = 1;
		total_prompt += evaluated;
		total_gen += n_out;
		char* text = NULL;
		size_t tlen = 0;
		pv_tok_decode(g.tok, out, n_out, PV_TOK_DECODE_SKIP_SPECIAL, &text, &tlen, err, sizeof(err));
		json_t* parsed = pv_chat_parse(dialect, text ? text : "", tlen, in_think ? PV_CHAT_PARSE_IN_THINK : 0, NULL, err, sizeof(err));
		json_t* am = json_pack("{s:s}", "role", "assistant");
		if (parsed) json_object_set(am, "content", json_object_get(parsed, "content"));
		else json_object_set_new(am, "content", json_stringn(text ? text : "", text ? tlen : 0));
		if (parsed && json_is_string(json_object_get(parsed, "reasoning_content")))
			json_object_set(am, "reasoning_content", json_object_get(parsed, "reasoning_content"));
		json_array_append_new(msgs, am);
		json_decref(parsed);
		free(text);
		free(prompt);
		free(ids);
		free(out);
		if (rc) break;
	}
	fprintf(stderr, "proven: %d prompt tokens evaluated, %.1f tok/s; %d generated, %.1f tok/s\n", total_prompt,
	        tp > 0 ? total_prompt / tp : 0.0, total_gen, tg > 0 ? total_gen / tg : 0.0);
	json_decref(msgs);
	gen_close(&g);
	return rc;
}
