/*
 * bench_spec.c: `proven bench spec`, when speculation pays: per prompt class, the same cases
 * generated plainly and speculatively, alternating (A B A B, so drifting load hits both arms),
 * with two scopes labelled: decode-only (the generated tokens over the decode time) and
 * end-to-end (all generated tokens over prefill + decode). Greedy or seeded as each case says;
 * the tokens of both arms are compared (a mismatch is reported and fails the run: a benchmark of
 * a wrong answer is no benchmark).
 *
 *   proven bench spec --model M --draft D --cases FILE.jsonl [--per-class N] [--max-tokens N]
 *                     [--reps R] [--class C] [--threads N] [--trace-out T.jsonl] [--greedy] [speculation options]
 *
 * --trace-out records the speculative arm's acceptance trace, (drafted, accepted) per step, per
 * case; --draft replay:T.jsonl replays such a trace on another model of the same vocabulary (a
 * synth file of a published shape, where no drafter would be accepted): each case's plain output
 * is the oracle, so the verify calls have the recorded shapes and acceptance (spec/replay.c).
 */
#include "cli.h"
#include "proven_dev.h"
#include "proven_text.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CLASSES 16

/* One case's acceptance trace: (drafted, accepted) per generator step. */
struct trace {
	char cls[32];
	int index; /* the case's ordinal within its class */
	uint8_t* steps;
	int n;
};

/* Reads --trace-out's JSON lines; NULL with a message on a bad file. */
static struct trace* read_traces(const char* path, int* count)
{
	FILE* f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "proven bench spec: %s: cannot open the trace\n", path);
		return NULL;
	}
	struct trace* t = NULL;
	int n = 0, bad = 0;
	char* line = NULL;
	size_t cap = 0;
	while (!bad && getline(&line, &cap, f) > 0) {
		json_t* j = json_loads(line, 0, NULL);
		json_t* steps = json_object_get(j, "steps");
		const char* cls = json_string_value(json_object_get(j, "class"));
		json_t* idx = json_object_get(j, "case");
		if (!cls || !json_is_integer(idx) || !json_is_array(steps)) {
			bad = 1;
		} else {
			struct trace* nt = realloc(t, sizeof *t * (size_t)(n + 1));
			if (!nt)
				bad = 1;
			else {
				t = nt;
				struct trace* c = &t[n++];
				snprintf(c->cls, sizeof c->cls, "%s", cls);
				c->index = (int)json_integer_value(idx);
				c->n = (int)json_array_size(steps);
				c->steps = calloc((size_t)c->n * 2 + 1, 1);
				for (int i = 0; c->steps && i < c->n; i++) {
					json_t* p = json_array_get(steps, (size_t)i);
					json_int_t d = json_integer_value(json_array_get(p, 0)),
					           a = json_integer_value(json_array_get(p, 1));
					if (!json_is_array(p) || d < 0 || d > 16 || a < 0 || a > d) bad = 1;
					c->steps[2 * i] = (uint8_t)d;
					c->steps[2 * i + 1] = (uint8_t)a;
				}
				if (!c->steps) bad = 1;
			}
		}
		json_decref(j);
	}
	free(line);
	fclose(f);
	if (bad || !n) {
		fprintf(stderr, "proven bench spec: %s: %s\n", path,
		        n ? "a line is not {\"class\", \"case\", \"steps\": [[drafted, accepted], ...]}" : "no traces");
		for (int i = 0; i < n; i++) free(t[i].steps);
		free(t);
		return NULL;
	}
	*count = n;
	return t;
}

struct klass {
	char name[32];
	int cases;
	double plain_prefill, plain_decode, spec_prefill, spec_decode; /* seconds, summed over reps */
	int64_t tokens;                                                /* generated per arm, summed  */
	int64_t steps, verify, drafted, accepted;
	int mismatches;
};

/* One generation; the generated ids into out. */
static int gen(pv_session* s, const struct pv_sampling* smp, const struct pv_spec_params* sp, const int32_t* ids, int n,
               int max, int32_t* out, int* n_out, struct pv_gen_stats* st, uint8_t* trace, int* n_trace)
{
	pv_generator* g = NULL;
	char err[512];
	if (pv_session_truncate(s, 0) || pv_generator_new(&g, s, smp, sp, err, sizeof err)) {
		fprintf(stderr, "proven bench spec: %s\n", pv_session_error(s)[0] ? pv_session_error(s) : err);
		return -1;
	}
	int k = 0, rc = pv_generator_prompt(g, ids, n, &out[0]);
	if (!rc) k = 1;
	struct pv_gen_stats prev = { 0 };
	if (trace) *n_trace = 0;
	while (!rc && k < max) {
		int got = 0;
		rc = pv_generator_step(g, out + k, max - k, &got);
		k += got;
		if (trace && !rc && *n_trace < max) { /* this step's (drafted, accepted), from the counters */
			pv_generator_stats(g, st);
			trace[2 * *n_trace] = (uint8_t)(st->drafted - prev.drafted);
			trace[2 * *n_trace + 1] = (uint8_t)(st->accepted - prev.accepted);
			++*n_trace;
			prev = *st;
		}
	}
	if (rc) fprintf(stderr, "proven bench spec: %s\n", pv_generator_error(g));
	pv_generator_stats(g, st);
	pv_generator_free(g);
	*n_out = k < max ? k : max;
	return rc ? -1 : 0;
}

int cmd_bench_spec(int argc, char** argv)
{
	const char *model = NULL, *cases = NULL, *only = NULL, *backend = NULL, *trace_out = NULL;
	int per_class = 4, max_tokens = 128, reps = 1, threads = 0, greedy = 0;
	struct cli_gen go;
	cli_gen_defaults(&go, 0.0f, 1.0f, 0);
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_gen_flag(&go, a)) continue;
		if (!strcmp(a, "--greedy")) { /* every case greedy, whatever its own sampling says */
			greedy = 1;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "proven bench spec: unknown option or missing value: %s\n", a);
			return 2;
		}
		const char* v = argv[++i];
		if (!strcmp(a, "--model"))
			model = v;
		else if (!strcmp(a, "--cases"))
			cases = v;
		else if (!strcmp(a, "--class"))
			only = v;
		else if (!strcmp(a, "--backend"))
			backend = v;
		else if (!strcmp(a, "--trace-out"))
			trace_out = v;
		else if (!strcmp(a, "--per-class"))
			per_class = cli_int(a, v, 1, 1000);
		else if (!strcmp(a, "--max-tokens"))
			max_tokens = cli_int(a, v, 1, 1 << 16);
		else if (!strcmp(a, "--reps"))
			reps = cli_int(a, v, 1, 100);
		else if (!strcmp(a, "--threads"))
			threads = cli_int(a, v, 1, 1024);
		else if (!cli_gen_option(&go, "bench spec", a, v)) {
			fprintf(stderr, "proven bench spec: unknown option %s\n", a);
			return 2;
		}
	}
	if (!model || !cases || !go.draft) {
		fprintf(stderr, "proven bench spec: --model, --cases and --draft are required\n");
		return 2;
	}
	if (cli_check_backend("bench spec", backend)) return 2;
	struct trace* traces = NULL;
	int n_traces = 0;
	if (!strncmp(go.draft, "replay:", 7) && !(traces = read_traces(go.draft + 7, &n_traces))) return 1;
	FILE* tf = NULL;
	if (trace_out && !(tf = fopen(trace_out, "w"))) {
		perror(trace_out);
		return 1;
	}
	FILE* f = fopen(cases, "r");
	if (!f) {
		perror(cases);
		if (tf) fclose(tf);
		return 1;
	}
	pv_model* m = cli_open_model(model, 1, backend);
	if (!m) {
		fclose(f);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	const struct pv_tok* tok = pv_model_tokenizer(m);
	int ctx = in->max_context < 4096 ? in->max_context : 4096;
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	cli_gen_session_params(&go, &sp);
	pv_session* s = NULL;
	char err[512];
	int rc = 1;
	struct klass cl[MAX_CLASSES];
	int ncl = 0;
	int32_t *a = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17)),
	        *b = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17));
	int32_t* seq = malloc(sizeof(int32_t) * (size_t)ctx);
	uint8_t* tr = malloc((size_t)max_tokens * 2 + 2);
	memset(cl, 0, sizeof cl);
	if (!a || !b || !seq || !tr || pv_session_new(&s, m, &sp, err, sizeof err)) {
		fprintf(stderr, "proven bench spec: %s\n", a && b ? err : "out of memory");
		goto done;
	}
	if (cli_gen_open(&go, "bench spec", m, &sp, backend)) goto done;
	struct pv_spec_params plain = { 0 };
	char* line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0) {
		json_t* j = json_loads(line, 0, NULL);
		const char* cls = j ? json_string_value(json_object_get(j, "class")) : NULL;
		const char* text = j ? json_string_value(json_object_get(j, "text")) : NULL;
		if (!cls || !text || !tok || (only && strcmp(only, cls))) {
			json_decref(j);
			continue;
		}
		int k = 0;
		while (k < ncl && strcmp(cl[k].name, cls)) k++;
		if (k == ncl) {
			if (ncl == MAX_CLASSES) {
				json_decref(j);
				continue;
			}
			snprintf(cl[ncl++].name, sizeof cl[0].name, "%s", cls);
		}
		if (cl[k].cases >= per_class) {
			json_decref(j);
			continue;
		}
		struct pv_sampling smp = go.smp;
		json_t* v;
		if ((v = json_object_get(j, "temperature")) && json_is_number(v)) smp.temperature = (float)json_number_value(v);
		if ((v = json_object_get(j, "top_p")) && json_is_number(v)) smp.top_p = (float)json_number_value(v);
		if ((v = json_object_get(j, "seed")) && json_is_integer(v)) smp.seed = (uint64_t)json_integer_value(v);
		if (greedy) smp.temperature = 0.0f;
		smp.n_valid = pv_tok_n_vocab(tok) < in->vocab ? pv_tok_n_vocab(tok) : in->vocab;
		int32_t* ids = NULL;
		int n = 0;
		if (pv_tok_encode(tok, text, strlen(text), 1, &ids, &n, err, sizeof err) || n + max_tokens + 17 > ctx) {
			free(ids);
			json_decref(j);
			continue;
		}
		json_decref(j);
		const int index = cl[k].cases++;
		struct pv_spec_params spec = go.sp;
		if (traces) { /* this case's trace; the oracle is filled from the plain arm below */
			int t = 0;
			while (t < n_traces && (strcmp(traces[t].cls, cl[k].name) || traces[t].index != index)) t++;
			spec.replay_steps = t < n_traces ? traces[t].steps : NULL;
			spec.replay_n_steps = t < n_traces ? traces[t].n : 0;
			spec.replay_seq = seq;
		}
		int n_tr = 0;
		for (int r = 0; r < reps; r++) {
			struct pv_gen_stats sa, sb;
			int na = 0, nb = 0;
			/* A then B, B then A on the next rep */
			int order = r & 1, ok = 1;
			for (int arm = 0; arm < 2 && ok; arm++) {
				if ((arm ^ order) == 0) {
					ok = !gen(s, &smp, &plain, ids, n, max_tokens, a, &na, &sa, NULL, NULL);
					memcpy(seq, ids, sizeof(int32_t) * (size_t)n);
					memcpy(seq + n, a, sizeof(int32_t) * (size_t)na);
					spec.replay_n_seq = n + na;
				} else {
					ok = !gen(s, &smp, &spec, ids, n, max_tokens, b, &nb, &sb, r == 0 && tf ? tr : NULL,
					          &n_tr);
				}
			}
			if (!ok) {
				free(ids);
				goto out;
			}
			if (na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)na)) cl[k].mismatches++;
			cl[k].plain_prefill += sa.prefill_s;
			cl[k].plain_decode += sa.decode_s;
			cl[k].spec_prefill += sb.prefill_s;
			cl[k].spec_decode += sb.decode_s;
			cl[k].tokens += nb;
			cl[k].steps += sb.steps;
			cl[k].verify += sb.verify_calls;
			cl[k].drafted += sb.drafted;
			cl[k].accepted += sb.accepted;
		}
		if (tf) {
			fprintf(tf, "{\"class\":\"%s\",\"case\":%d,\"steps\":[", cl[k].name, index);
			for (int i = 0; i < n_tr; i++) fprintf(tf, "%s[%d,%d]", i ? "," : "", tr[2 * i], tr[2 * i + 1]);
			fprintf(tf, "]}\n");
		}
		free(ids);
		fprintf(stderr, ".");
	}
	fprintf(stderr, "\n");
	const struct pv_build_info* bi = pv_build_info();
	printf("| class | cases | plain decode tok/s | spec decode tok/s | speedup decode-only | speedup end-to-end | tokens/step | "
	       "acceptance |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	int bad = 0;
	for (int k = 0; k < ncl; k++) {
		struct klass* c = &cl[k];
		/* tokens after the first come from decode steps: the first is the prompt's */
		double toks = (double)c->tokens, dec = toks - c->cases * reps;
		double pd = dec / c->plain_decode, sd = dec / c->spec_decode;
		double e2e = (c->plain_prefill + c->plain_decode) / (c->spec_prefill + c->spec_decode);
		printf("| %s | %d | %.2f | %.2f | %.2fx | %.2fx | %.2f | %.2f |%s\n", c->name, c->cases, pd, sd, sd / pd, e2e,
		       c->steps ? dec / c->steps : 0.0, c->drafted ? (double)c->accepted / c->drafted : 0.0,
		       c->mismatches ? " **MISMATCH**" : "");
		bad |= c->mismatches;
	}
	for (int k = 0; k < ncl; k++) {
		struct klass* c = &cl[k];
		double dec = (double)c->tokens - c->cases * reps;
		printf("{\"bench\":\"spec\",\"model\":\"%s\",\"draft\":\"%s\",\"class\":\"%s\",\"cases\":%d,\"reps\":%d,\"max_tokens\":%d,"
		       "\"threads\":%d,\"backend\":\"%s\",\"plain_decode_tok_s\":%.3f,\"spec_decode_tok_s\":%.3f,"
		       "\"speedup_decode_only\":%.4f,\"speedup_end_to_end\":%.4f,\"plain_prefill_s\":%.4f,\"spec_prefill_s\":%.4f,"
		       "\"steps\":%lld,\"verify_calls\":%lld,\"drafted\":%lld,\"accepted\":%lld,\"mismatches\":%d,"
		       "\"commit\":\"%s\",\"isa\":\"%s\",\"compiler\":\"%s\"}\n",
		       model, go.draft, c->name, c->cases, reps, max_tokens, threads, backend ? backend : "cpu",
		       dec / c->plain_decode, dec / c->spec_decode, c->plain_decode / c->spec_decode,
		       (c->plain_prefill + c->plain_decode) / (c->spec_prefill + c->spec_decode), c->plain_prefill,
		       c->spec_prefill, (long long)c->steps, (long long)c->verify, (long long)c->drafted,
		       (long long)c->accepted, c->mismatches, bi->commit, bi->cpu_isa, bi->compiler);
	}
	rc = bad ? 1 : 0;
out:
	free(line);
done:
	fclose(f);
	if (tf && (ferror(tf) | fclose(tf))) {
		fprintf(stderr, "proven bench spec: failed writing %s\n", trace_out);
		rc = 1;
	}
	for (int i = 0; i < n_traces; i++) free(traces[i].steps);
	free(traces);
	free(seq);
	free(tr);
	free(a);
	free(b);
	pv_session_free(s);
	cli_gen_close(&go);
	pv_model_close(m);
	return rc;
}
