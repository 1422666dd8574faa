/*
 * court.c: `proven court spec`, the exactness court of speculative decoding. Every case runs
 * twice on the same model, plain and speculative, and the two token sequences are compared
 * bit for bit. It prints a table and one JSON summary line, and exits 1 on any mismatch.
 *
 *   proven court spec --model M [--draft ngram|mtp|cascade:PATH|PATH] --cases FILE.jsonl
 *                     [--max-tokens N] [--class C] [--rollback ...] [--draft-max K] [--draft-fixed]
 *                     [--threads N] [--backend cpu|cuda] [--limit N]
 *
 * A case is one JSON object per line: "id", "class", "text" (tokenized with the model's tokenizer
 * when it has one) and/or "ids" (used when there is no tokenizer or no text; taken modulo the
 * vocabulary, which keeps the repetitions that make drafts succeed), optional "max_tokens",
 * "temperature", "top_k", "top_p", "seed".
 */
#include "cli.h"
#include "proven_text.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct court_case {
	char id[64], cls[32];
	int32_t* ids;
	int n;
	int max_tokens;
	struct pv_sampling smp;
};

/* Reads the case at one line; 0 on success, -1 (with a message) on a malformed line. */
static int read_case(const char* line, int lineno, const pv_model* m, int max_default, struct court_case* c)
{
	json_error_t je;
	json_t* j = json_loads(line, 0, &je);
	memset(c, 0, sizeof *c);
	if (!j || !json_is_object(j)) {
		fprintf(stderr, "proven court: cases line %d: not a JSON object (%s)\n", lineno, j ? "" : je.text);
		json_decref(j);
		return -1;
	}
	snprintf(c->id, sizeof c->id, "%s", json_string_value(json_object_get(j, "id")) ? json_string_value(json_object_get(j, "id")) : "?");
	snprintf(c->cls, sizeof c->cls, "%s",
	         json_string_value(json_object_get(j, "class")) ? json_string_value(json_object_get(j, "class")) : "?");
	const int V = pv_model_get_info(m)->vocab;
	const struct pv_tok* tok = pv_model_tokenizer(m);
	const char* text = json_string_value(json_object_get(j, "text"));
	json_t* ids = json_object_get(j, "ids");
	int rc = 0;
	if (tok && text) {
		char err[256];
		if (pv_tok_encode(tok, text, strlen(text), 1, &c->ids, &c->n, err, sizeof err)) {
			fprintf(stderr, "proven court: case %s: %s\n", c->id, err);
			rc = -1;
		}
	} else if (json_is_array(ids) && json_array_size(ids) > 0) {
		c->n = (int)json_array_size(ids);
		c->ids = malloc(sizeof(int32_t) * (size_t)c->n);
		for (int i = 0; c->ids && i < c->n; i++) {
			json_int_t v = json_integer_value(json_array_get(ids, (size_t)i));
			c->ids[i] = (int32_t)(((v % V) + V) % V);
		}
	} else {
		fprintf(stderr, "proven court: case %s has neither ids nor text this model can tokenize\n", c->id);
		rc = -1;
	}
	json_t* v;
	c->max_tokens = (v = json_object_get(j, "max_tokens")) && json_is_integer(v) ? (int)json_integer_value(v) : max_default;
	if (max_default < c->max_tokens) c->max_tokens = max_default;
	c->smp.top_p = 1.0f;
	if ((v = json_object_get(j, "temperature")) && json_is_number(v)) c->smp.temperature = (float)json_number_value(v);
	if ((v = json_object_get(j, "top_k")) && json_is_integer(v)) c->smp.top_k = (int)json_integer_value(v);
	if ((v = json_object_get(j, "top_p")) && json_is_number(v)) c->smp.top_p = (float)json_number_value(v);
	if ((v = json_object_get(j, "seed")) && json_is_integer(v)) c->smp.seed = (uint64_t)json_integer_value(v);
	if (tok) c->smp.n_valid = pv_tok_n_vocab(tok) < V ? pv_tok_n_vocab(tok) : V;
	json_decref(j);
	return rc;
}

/* Generates up to c->max_tokens tokens with one generator; -1 on a failure (message printed). */
static int run_case(pv_session* s, const struct court_case* c, const struct pv_spec_params* sp, int32_t* out, int* n_out,
                    struct pv_gen_stats* st)
{
	pv_generator* g = NULL;
	char err[512];
	*n_out = 0;
	if (pv_session_truncate(s, 0) || pv_generator_new(&g, s, &c->smp, sp, err, sizeof err)) {
		fprintf(stderr, "proven court: case %s: %s\n", c->id, pv_session_error(s)[0] ? pv_session_error(s) : err);
		return -1;
	}
	int rc = 0, n = 0;
	if (c->max_tokens > 0 && pv_generator_prompt(g, c->ids, c->n, &out[0])) rc = -1;
	else n = c->max_tokens > 0;
	while (!rc && n < c->max_tokens) {
		int got = 0;
		if (pv_generator_step(g, out + n, c->max_tokens - n, &got)) rc = -1;
		n += got;
	}
	if (rc) fprintf(stderr, "proven court: case %s: %s\n", c->id, pv_generator_error(g));
	pv_generator_stats(g, st);
	pv_generator_free(g);
	*n_out = n;
	return rc;
}

struct tally {
	struct pv_gen_stats st; /* summed over the cases, for the receipt */
	int cases, exact;
	int64_t tokens, drafted, accepted, steps, verify_calls, rollbacks, restores, replayed, fallbacks;
};

static void add(struct tally* t, const struct pv_gen_stats* st)
{
	t->tokens += st->tokens + 1; /* + the prompt's first token */
	t->drafted += st->drafted;
	t->accepted += st->accepted;
	t->steps += st->steps;
	t->verify_calls += st->verify_calls;
	t->rollbacks += st->rollbacks;
	t->restores += st->snapshot_restores;
	t->replayed += st->replayed_rows;
	t->fallbacks += st->fallback_tokens;
	t->st.tokens += st->tokens + 1;
	t->st.steps += st->steps;
	t->st.verify_calls += st->verify_calls;
	t->st.drafted += st->drafted;
	t->st.accepted += st->accepted;
	t->st.rollbacks += st->rollbacks;
	t->st.snapshot_restores += st->snapshot_restores;
	t->st.replayed_rows += st->replayed_rows;
	t->st.fallback_tokens += st->fallback_tokens;
	for (int i = 0; i < 17; i++) t->st.accepted_len[i] += st->accepted_len[i];
	t->st.prefill_s += st->prefill_s;
	t->st.decode_s += st->decode_s;
}

int cmd_court(int argc, char** argv)
{
	if (argc >= 2 && cli_is_help(argv[1])) return cli_usage("court", stdout);
	if (argc >= 2 && !strcmp(argv[1], "ab")) return cmd_court_ab(argc - 1, argv + 1); /* court_ab.c */
	if (argc < 2 || strcmp(argv[1], "spec")) {
		fprintf(stderr, "usage: proven court spec --model M [--draft D] --cases FILE.jsonl [--max-tokens N] [--class C]\n");
		return 2;
	}
	const char *model = NULL, *cases = NULL, *backend = NULL, *only = NULL;
	int max_tokens = 32, threads = 0, limit = 0;
	struct cli_gen go;
	cli_gen_defaults(&go, 0.0f, 1.0f, 0);
	for (int i = 2; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("court", stdout);
		if (cli_gen_flag(&go, a)) continue;
		if (i + 1 >= argc) {
			fprintf(stderr, "proven court: unknown option or missing value: %s\n", a);
			return 2;
		}
		const char* v = argv[++i];
		if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--cases")) cases = v;
		else if (!strcmp(a, "--class")) only = v;
		else if (!strcmp(a, "--backend")) backend = v;
		else if (!strcmp(a, "--max-tokens")) max_tokens = cli_int(a, v, 1, 1 << 16);
		else if (!strcmp(a, "--threads")) threads = cli_int(a, v, 1, 1024);
		else if (!strcmp(a, "--limit")) limit = cli_int(a, v, 1, 1 << 20);
		else if (!cli_gen_option(&go, "court", a, v)) {
			fprintf(stderr, "proven court: unknown option %s\n", a);
			return 2;
		}
	}
	if (!model || !cases) {
		fprintf(stderr, "proven court: --model and --cases are required\n");
		return 2;
	}
	if (cli_check_backend("court", backend)) return 2;
	ev_receipt* rec = cli_receipt_begin("court.spec", argc, argv);
	FILE* f = cli_open_input("court", cases);
	if (!f) return 1;
	pv_model* m = cli_open_model(model, 0, backend);
	if (!m) {
		fclose(f);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	int ctx = in->max_context < 4096 ? in->max_context : 4096;
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	cli_gen_session_params(&go, &sp);
	pv_session* s = NULL;
	char err[512];
	int rc = 1;
	int32_t *a = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17)), *b = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17));
	if (!a || !b || pv_session_new(&s, m, &sp, err, sizeof err)) {
		fprintf(stderr, "proven court: %s\n", a && b ? err : "out of memory");
		goto done;
	}
	if (cli_gen_open(&go, "court", m, &sp, backend)) goto done;
	struct pv_spec_params plain = { 0 };
	struct tally t = { 0 };
	char* line = NULL;
	size_t cap = 0;
	int lineno = 0, bad = 0;
	printf("| case | class | prompt | tokens | drafted | accepted | rollbacks | exact |\n");
	printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		if (line[0] == '\n' || line[0] == '#') continue;
		struct court_case c;
		if (read_case(line, lineno, m, max_tokens, &c)) {
			free(c.ids);
			bad = 1;
			break;
		}
		if ((only && strcmp(only, c.cls)) || c.n + c.max_tokens + 17 > ctx) {
			free(c.ids);
			continue;
		}
		int na = 0, nb = 0;
		struct pv_gen_stats sa, sb;
		if (run_case(s, &c, &plain, a, &na, &sa) || run_case(s, &c, &go.sp, b, &nb, &sb)) {
			free(c.ids);
			bad = 1;
			break;
		}
		int same = na == nb && !memcmp(a, b, sizeof(int32_t) * (size_t)na);
		t.cases++;
		t.exact += same;
		add(&t, &sb);
		printf("| %s | %s | %d | %d | %lld | %lld | %lld | %s |\n", c.id, c.cls, c.n, nb, (long long)sb.drafted,
		       (long long)sb.accepted, (long long)sb.rollbacks, same ? "yes" : "**NO**");
		if (!same) {
			int at = 0;
			while (at < na && at < nb && a[at] == b[at]) at++;
			fprintf(stderr, "proven court: case %s: speculative output differs from plain at token %d (%d vs %d)\n", c.id, at,
			        at < na ? a[at] : -1, at < nb ? b[at] : -1);
		}
		free(c.ids);
		if (limit && t.cases >= limit) break;
	}
	free(line);
	printf("{\"court\":\"spec\",\"model\":\"%s\",\"draft\":\"%s\",\"cases\":%d,\"exact\":%d,\"tokens\":%lld,\"steps\":%lld,"
	       "\"verify_calls\":%lld,\"drafted\":%lld,\"accepted\":%lld,\"acceptance_length\":%.3f,\"rollbacks\":%lld,"
	       "\"snapshot_restores\":%lld,\"replayed_rows\":%lld,\"fallbacks\":%lld,\"verdict\":\"%s\"}\n",
	       model, go.draft ? go.draft : "none", t.cases, t.exact, (long long)t.tokens, (long long)t.steps,
	       (long long)t.verify_calls, (long long)t.drafted, (long long)t.accepted,
	       t.verify_calls ? (double)t.accepted / t.verify_calls : 0.0, (long long)t.rollbacks, (long long)t.restores,
	       (long long)t.replayed, (long long)t.fallbacks, bad ? "error" : t.exact == t.cases ? "exact" : "MISMATCH");
	rc = bad ? 1 : t.exact == t.cases && t.cases > 0 ? 0 : 1;
	cli_receipt_court(rec, m, model, backend, threads, only, cases, t.cases, t.exact, max_tokens, go.draft, &t.st,
	                  bad ? "error" : t.exact == t.cases ? "exact" : "MISMATCH");
	if (!t.cases && !bad) fprintf(stderr, "proven court: no case ran\n");
done:
	fclose(f);
	free(a);
	free(b);
	pv_session_free(s);
	cli_gen_close(&go);
	pv_model_close(m);
	return rc;
}
