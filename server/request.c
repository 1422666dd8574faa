/*
 * request.c: request bodies -> struct srv_request (request.h). Pure: it allocates, parses and
 * validates, and touches nothing else, so the fuzzer calls it as the server does.
 */
#include "request.h"

#include "proven_spec.h" /* PV_TOP_LOGPROBS */
#include "proven_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ctx {
	char* msg;
	size_t msglen;
	const char** param;
	const char* key; /* the field being read */
};

static int bad(struct ctx* c, int status, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(struct ctx* c, int status, const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->msg, c->msglen, fmt, ap);
	va_end(ap);
	/* one line, whatever the client's field names or jansson's excerpt of the body hold */
	for (char* p = c->msg; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = ' ';
	if (c->param) *c->param = c->key;
	return status;
}

static int get_bool(struct ctx* c, json_t* v, int* out)
{
	if (!json_is_boolean(v)) return bad(c, 400, "'%s' must be a boolean", c->key);
	*out = json_is_true(v);
	return 0;
}

/* An integer in [lo, hi]; a real with an integral value is accepted (some clients send 16.0). */
static int get_int(struct ctx* c, json_t* v, long long lo, long long hi, long long* out)
{
	double d;
	if (json_is_integer(v)) d = (double)json_integer_value(v);
	else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v)) d = json_real_value(v);
	else return bad(c, 400, "'%s' must be an integer", c->key);
	if (!(d >= (double)lo && d <= (double)hi))
		return bad(c, 400, "'%s' must be between %lld and %lld", c->key, lo, hi);
	*out = json_is_integer(v) ? (long long)json_integer_value(v) : (long long)d;
	return 0;
}

static int get_num(struct ctx* c, json_t* v, double lo, double hi, double* out)
{
	if (!json_is_number(v)) return bad(c, 400, "'%s' must be a number", c->key);
	double d = json_number_value(v);
	if (!(d >= lo && d <= hi)) return bad(c, 400, "'%s' must be between %g and %g", c->key, lo, hi);
	*out = d;
	return 0;
}

static char* dup_bytes(const char* s, size_t n)
{
	char* p = malloc(n + 1);
	if (!p) return NULL;
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

/* Token ids: an array of integers in [0, n_vocab). */
static int get_ids(struct ctx* c, json_t* v, const struct srv_limits* lim, int32_t** out, int* n)
{
	if (!json_is_array(v)) return bad(c, 400, "'%s' must be an array of token ids", c->key);
	size_t k = json_array_size(v);
	if (lim->n_ctx > 0 && k > (size_t)lim->n_ctx)
		return bad(c, 400, "'%s' has %zu tokens; the context holds %d", c->key, k, lim->n_ctx);
	int32_t* ids = malloc(sizeof(int32_t) * (k ? k : 1));
	if (!ids) return bad(c, 503, "out of memory");
	for (size_t i = 0; i < k; i++) {
		json_t* e = json_array_get(v, i);
		if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) >= lim->n_vocab) {
			free(ids);
			return bad(c, 400, "'%s'[%zu] must be a token id in [0, %d)", c->key, i, lim->n_vocab);
		}
		ids[i] = (int32_t)json_integer_value(e);
	}
	*out = ids;
	*n = (int)k;
	return 0;
}

/* stop: a string or an array of strings. */
static int get_stop(struct ctx* c, json_t* v, struct srv_request* r)
{
	json_t* one[1] = { v };
	json_t** list = one;
	size_t k = 1;
	if (json_is_array(v)) {
		k = json_array_size(v);
		if (k > SRV_MAX_STOP) return bad(c, 400, "'stop' has %zu strings (at most %d)", k, SRV_MAX_STOP);
		list = NULL;
	} else if (!json_is_string(v)) {
		return bad(c, 400, "'stop' must be a string or an array of strings");
	}
	for (size_t i = 0; i < k; i++) {
		json_t* s = list ? list[i] : json_array_get(v, i);
		if (!json_is_string(s)) return bad(c, 400, "'stop' must be a string or an array of strings");
		size_t n = json_string_length(s);
		if (n == 0) continue; /* an empty stop string would stop before the first token: ignored as OpenAI does */
		if (n > SRV_MAX_STOP_LEN) return bad(c, 400, "a 'stop' string is %zu bytes (at most %d)", n, SRV_MAX_STOP_LEN);
		if (!(r->stop[r->n_stop] = dup_bytes(json_string_value(s), n))) return bad(c, 503, "out of memory");
		r->stop_len[r->n_stop++] = (int)n;
	}
	return 0;
}

/* One chat message, as docs/openapi.yaml describes it (the renderer is lenient about shapes;
 * the server is not, so that a malformed message is a 400 that names it). */
static int check_message(struct ctx* c, json_t* m, size_t k)
{
	static const char* const roles[] = { "system", "user", "assistant", "tool" };
	if (!json_is_object(m)) return bad(c, 400, "'messages'[%zu] must be an object with a role and content", k);
	json_t* role = json_object_get(m, "role");
	int known = 0;
	for (int i = 0; i < 4 && json_is_string(role); i++) known |= !strcmp(json_string_value(role), roles[i]);
	if (!known) return bad(c, 400, "'messages'[%zu].role must be system, user, assistant or tool", k);
	json_t* content = json_object_get(m, "content");
	if (json_is_array(content)) {
		size_t i;
		json_t* part;
		json_array_foreach(content, i, part)
		{
			json_t* type = json_object_get(part, "type");
			if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") ||
			    !json_is_string(json_object_get(part, "text")))
				return bad(c, 400, "'messages'[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} parts (a text model)", k, i);
		}
	} else if (content && !json_is_null(content) && !json_is_string(content)) {
		return bad(c, 400, "'messages'[%zu].content must be a string, an array of text parts or null", k);
	}
	static const char* const strs[] = { "reasoning_content", "name", "tool_call_id" };
	for (int i = 0; i < 3; i++) {
		json_t* v = json_object_get(m, strs[i]);
		if (v && !json_is_null(v) && !json_is_string(v)) return bad(c, 400, "'messages'[%zu].%s must be a string", k, strs[i]);
	}
	json_t* calls = json_object_get(m, "tool_calls");
	if (calls && !json_is_null(calls)) {
		if (!json_is_array(calls)) return bad(c, 400, "'messages'[%zu].tool_calls must be an array", k);
		size_t i;
		json_t* call;
		json_array_foreach(calls, i, call)
		{
			json_t* f = json_object_get(call, "function");
			json_t* args = json_object_get(f, "arguments");
			json_t* id = json_object_get(call, "id");
			json_t* type = json_object_get(call, "type");
			if (!json_is_object(call) || !json_is_object(f) || !json_is_string(json_object_get(f, "name")) ||
			    !(json_is_string(args) || json_is_object(args)) || (id && !json_is_string(id)) ||
			    (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
				return bad(c, 400,
				           "'messages'[%zu].tool_calls[%zu] must be {\"id\", \"type\": \"function\", \"function\": {\"name\": S, "
				           "\"arguments\": S}}",
				           k, i);
		}
	}
	return 0;
}

/* A field accepted only at its neutral value. */
static int neutral_num(struct ctx* c, json_t* v, double neutral, const char* what)
{
	if (!json_is_number(v)) return bad(c, 400, "'%s' must be a number", c->key);
	if (json_number_value(v) != neutral) return bad(c, 400, "'%s' is not supported (%s); only %g is accepted", c->key, what, neutral);
	return 0;
}

static int parse_tools(struct ctx* c, json_t* v, struct srv_request* r)
{
	if (!json_is_array(v)) return bad(c, 400, "'tools' must be an array");
	size_t i;
	json_t* t;
	json_array_foreach(v, i, t)
	{
		json_t* f = json_object_get(t, "function");
		if (!json_is_object(t) || !json_is_object(f) || !json_is_string(json_object_get(f, "name")))
			return bad(c, 400, "'tools'[%zu] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
		json_t* type = json_object_get(t, "type");
		if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
			return bad(c, 400, "'tools'[%zu].type must be \"function\"", i);
		json_t* params = json_object_get(f, "parameters");
		json_t* desc = json_object_get(f, "description");
		if ((params && !json_is_object(params)) || (desc && !json_is_string(desc)))
			return bad(c, 400, "'tools'[%zu].function: parameters must be a JSON Schema object, description a string", i);
	}
	r->tools = json_array_size(v) ? v : NULL;
	return 0;
}

static int parse_tool_choice(struct ctx* c, json_t* v, int* none)
{
	if (json_is_string(v)) {
		const char* s = json_string_value(v);
		if (!strcmp(s, "none")) *none = 1;
		else if (!strcmp(s, "auto")) *none = 0;
		else if (!strcmp(s, "required"))
			return bad(c, 400, "tool_choice \"required\" is not supported (no constrained decoding); use \"auto\"");
		else return bad(c, 400, "'tool_choice' must be \"none\", \"auto\" or \"required\"");
		return 0;
	}
	if (json_is_object(v)) return bad(c, 400, "a named tool_choice is not supported (no constrained decoding); use \"auto\"");
	return bad(c, 400, "'tool_choice' must be a string or an object");
}

static int parse_template_kwargs(struct ctx* c, json_t* v, struct srv_request* r)
{
	if (!json_is_object(v)) return bad(c, 400, "'chat_template_kwargs' must be an object");
	const char* k;
	json_t* x;
	json_object_foreach(v, k, x)
	{
		if (!strcmp(k, "enable_thinking")) {
			if (json_is_null(x)) continue;
			if (!json_is_boolean(x)) return bad(c, 400, "chat_template_kwargs.enable_thinking must be a boolean");
			r->enable_thinking = json_is_true(x);
		} else {
			c->key = "chat_template_kwargs";
			return bad(c, 400, "chat_template_kwargs.%.64s is not supported (the native renderer knows enable_thinking)", k);
		}
	}
	return 0;
}

/* The fields of each endpoint (a field not listed is a 400). */
enum field {
	F_MODEL, F_MESSAGES, F_PROMPT, F_STREAM, F_STREAM_OPTIONS, F_MAX_TOKENS, F_MAX_COMPLETION_TOKENS, F_STOP,
	F_TEMPERATURE, F_TOP_P, F_TOP_K, F_MIN_P, F_SEED, F_LOGPROBS, F_TOP_LOGPROBS, F_TOOLS, F_TOOL_CHOICE,
	F_PARALLEL_TOOL_CALLS, F_N, F_RESPONSE_FORMAT, F_TEMPLATE_KWARGS, F_REASONING_EFFORT, F_PRESENCE_PENALTY,
	F_FREQUENCY_PENALTY, F_REPETITION_PENALTY, F_LOGIT_BIAS, F_USER, F_METADATA, F_STORE, F_CACHE_PROMPT, F_ECHO,
	F_SUFFIX, F_BEST_OF, F_CONTENT, F_TOKENS, F_ADD_SPECIAL, F_PARSE_SPECIAL, F_WITH_PIECES, F_ADD_GEN_PROMPT,
	F_COUNT
};
static const char* const field_names[F_COUNT] = {
	"model", "messages", "prompt", "stream", "stream_options", "max_tokens", "max_completion_tokens", "stop",
	"temperature", "top_p", "top_k", "min_p", "seed", "logprobs", "top_logprobs", "tools", "tool_choice",
	"parallel_tool_calls", "n", "response_format", "chat_template_kwargs", "reasoning_effort", "presence_penalty",
	"frequency_penalty", "repetition_penalty", "logit_bias", "user", "metadata", "store", "cache_prompt", "echo",
	"suffix", "best_of", "content", "tokens", "add_special", "parse_special", "with_pieces", "add_generation_prompt",
};

#define B(f) (1ull << (f))
#define GEN_FIELDS                                                                                                  \
	(B(F_MODEL) | B(F_STREAM) | B(F_STREAM_OPTIONS) | B(F_MAX_TOKENS) | B(F_STOP) | B(F_TEMPERATURE) | B(F_TOP_P) | \
	 B(F_TOP_K) | B(F_MIN_P) | B(F_SEED) | B(F_LOGPROBS) | B(F_N) | B(F_PRESENCE_PENALTY) | B(F_FREQUENCY_PENALTY) | \
	 B(F_REPETITION_PENALTY) | B(F_LOGIT_BIAS) | B(F_USER) | B(F_METADATA) | B(F_STORE) | B(F_CACHE_PROMPT))
static const unsigned long long allowed[SRV_KIND_COUNT] = {
	[SRV_CHAT] = GEN_FIELDS | B(F_MESSAGES) | B(F_MAX_COMPLETION_TOKENS) | B(F_TOP_LOGPROBS) | B(F_TOOLS) |
	             B(F_TOOL_CHOICE) | B(F_PARALLEL_TOOL_CALLS) | B(F_RESPONSE_FORMAT) | B(F_TEMPLATE_KWARGS) |
	             B(F_REASONING_EFFORT),
	[SRV_COMPLETION] = GEN_FIELDS | B(F_PROMPT) | B(F_ECHO) | B(F_SUFFIX) | B(F_BEST_OF),
	[SRV_TOKENIZE] = B(F_MODEL) | B(F_CONTENT) | B(F_ADD_SPECIAL) | B(F_PARSE_SPECIAL) | B(F_WITH_PIECES),
	[SRV_DETOKENIZE] = B(F_MODEL) | B(F_TOKENS),
	[SRV_APPLY_TEMPLATE] = B(F_MODEL) | B(F_MESSAGES) | B(F_TOOLS) | B(F_TOOL_CHOICE) | B(F_TEMPLATE_KWARGS) |
	                       B(F_REASONING_EFFORT) | B(F_ADD_GEN_PROMPT),
};

static int completion_prompt(struct ctx* c, json_t* v, const struct srv_limits* lim, struct srv_request* r)
{
	/* a string, token ids, or a one-element array of either */
	if (json_is_array(v) && json_array_size(v) == 1 && (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
		v = json_array_get(v, 0);
	else if (json_is_array(v) && json_array_size(v) > 1 && !json_is_integer(json_array_get(v, 0)))
		return bad(c, 400, "several prompts in one request are not supported; send one prompt per request");
	if (json_is_string(v)) {
		if (!(r->prompt = dup_bytes(json_string_value(v), json_string_length(v)))) return bad(c, 503, "out of memory");
		r->prompt_len = json_string_length(v);
		return 0;
	}
	if (json_is_array(v)) return get_ids(c, v, lim, &r->ids, &r->n_ids);
	return bad(c, 400, "'prompt' must be a string or an array of token ids");
}

static int one_field(struct ctx* c, int f, json_t* v, const struct srv_limits* lim, struct srv_request* r, int* tool_none,
                     json_t** tools, int* has_max, int* has_top_lp)
{
	long long i;
	double d;
	int b = 0, rc;
	switch (f) {
	case F_MODEL:
		if (!json_is_string(v)) return bad(c, 400, "'model' must be a string");
		return 0; /* one model is loaded: any name selects it */
	case F_MESSAGES:
		if (!json_is_array(v) || json_array_size(v) == 0) return bad(c, 400, "'messages' must be a non-empty array");
		for (size_t k = 0; k < json_array_size(v); k++)
			if ((rc = check_message(c, json_array_get(v, k), k))) return rc;
		r->messages = v;
		return 0;
	case F_PROMPT: return completion_prompt(c, v, lim, r);
	case F_STREAM: return get_bool(c, v, &r->stream);
	case F_STREAM_OPTIONS: {
		if (!json_is_object(v)) return bad(c, 400, "'stream_options' must be an object");
		const char* k;
		json_t* x;
		json_object_foreach(v, k, x)
		{
			if (strcmp(k, "include_usage") || (!json_is_boolean(x) && !json_is_null(x)))
				return bad(c, 400, "stream_options accepts include_usage (a boolean)");
			r->include_usage = json_is_true(x);
		}
		return 0;
	}
	case F_MAX_TOKENS:
	case F_MAX_COMPLETION_TOKENS:
		if ((rc = get_int(c, v, 1, 1ll << 30, &i))) return rc;
		if (*has_max && r->max_tokens != (int)i)
			return bad(c, 400, "'max_tokens' and 'max_completion_tokens' disagree");
		r->max_tokens = (int)i;
		*has_max = 1;
		return 0;
	case F_STOP: return get_stop(c, v, r);
	case F_TEMPERATURE:
		if ((rc = get_num(c, v, 0, 2, &d))) return rc;
		r->temperature = (float)d, r->has_temperature = 1;
		return 0;
	case F_TOP_P:
		if ((rc = get_num(c, v, 0, 1, &d))) return rc;
		r->top_p = (float)d, r->has_top_p = 1;
		return 0;
	case F_TOP_K:
		if ((rc = get_int(c, v, -1, 1 << 24, &i))) return rc;
		r->top_k = i < 0 ? 0 : (int)i, r->has_top_k = 1; /* -1: off, as vLLM */
		return 0;
	case F_MIN_P:
		if ((rc = get_num(c, v, 0, 1, &d))) return rc;
		r->min_p = (float)d, r->has_min_p = 1;
		return 0;
	case F_SEED:
		/* any 64-bit integer (negative ones wrap) */
		if (!json_is_integer(v)) return bad(c, 400, "'seed' must be an integer");
		r->seed = (uint64_t)json_integer_value(v), r->has_seed = 1;
		return 0;
	case F_LOGPROBS:
		if (r->kind == SRV_CHAT) return get_bool(c, v, &r->logprobs);
		/* completions: logprobs is the number of alternatives */
		if ((rc = get_int(c, v, 0, PV_TOP_LOGPROBS, &i))) return rc;
		r->logprobs = 1, r->top_logprobs = (int)i;
		return 0;
	case F_TOP_LOGPROBS:
		if ((rc = get_int(c, v, 0, PV_TOP_LOGPROBS, &i))) return rc;
		r->top_logprobs = (int)i;
		*has_top_lp = 1;
		return 0;
	case F_TOOLS: *tools = v; return 0;
	case F_TOOL_CHOICE: return parse_tool_choice(c, v, tool_none);
	case F_PARALLEL_TOOL_CALLS: return get_bool(c, v, &b); /* the model emits what it emits; both are parsed */
	case F_N:
		if ((rc = get_int(c, v, 1, 1 << 30, &i))) return rc;
		if (i != 1) return bad(c, 400, "n = %lld is not supported: one choice per request (send several requests)", i);
		return 0;
	case F_BEST_OF:
		if ((rc = get_int(c, v, 1, 1 << 30, &i))) return rc;
		if (i != 1) return bad(c, 400, "best_of = %lld is not supported", i);
		return 0;
	case F_RESPONSE_FORMAT: {
		json_t* t = json_object_get(v, "type");
		if (!json_is_object(v) || !json_is_string(t)) return bad(c, 400, "'response_format' must be {\"type\": ...}");
		if (!strcmp(json_string_value(t), "text")) return 0;
		return bad(c, 400,
		           "response_format \"%.32s\" is not supported: this server has no constrained decoding (only \"text\")",
		           json_string_value(t));
	}
	case F_TEMPLATE_KWARGS: return parse_template_kwargs(c, v, r);
	case F_REASONING_EFFORT:
		if (!json_is_string(v)) return bad(c, 400, "'reasoning_effort' must be a string");
		if (!strcmp(json_string_value(v), "none")) r->enable_thinking = 0;
		else if (strcmp(json_string_value(v), "minimal") && strcmp(json_string_value(v), "low") &&
		         strcmp(json_string_value(v), "medium") && strcmp(json_string_value(v), "high"))
			return bad(c, 400, "'reasoning_effort' must be none, minimal, low, medium or high");
		return 0;
	case F_PRESENCE_PENALTY: return neutral_num(c, v, 0, "no penalties");
	case F_FREQUENCY_PENALTY: return neutral_num(c, v, 0, "no penalties");
	case F_REPETITION_PENALTY: return neutral_num(c, v, 1, "no penalties");
	case F_LOGIT_BIAS:
		if (!json_is_object(v)) return bad(c, 400, "'logit_bias' must be an object");
		if (json_object_size(v)) return bad(c, 400, "'logit_bias' is not supported (only an empty object)");
		return 0;
	case F_USER:
		if (!json_is_string(v)) return bad(c, 400, "'user' must be a string");
		return 0;
	case F_METADATA:
		if (!json_is_object(v)) return bad(c, 400, "'metadata' must be an object");
		return 0;
	case F_STORE:
		if ((rc = get_bool(c, v, &b))) return rc;
		if (b) return bad(c, 400, "'store' true is not supported (nothing is stored)");
		return 0;
	case F_CACHE_PROMPT: return get_bool(c, v, &r->cache_prompt);
	case F_ECHO:
		if ((rc = get_bool(c, v, &b))) return rc;
		if (b) return bad(c, 400, "'echo' true is not supported");
		return 0;
	case F_SUFFIX:
		if (!json_is_string(v)) return bad(c, 400, "'suffix' must be a string");
		if (json_string_length(v)) return bad(c, 400, "'suffix' (fill-in-the-middle) is not supported");
		return 0;
	case F_CONTENT:
		if (!json_is_string(v)) return bad(c, 400, "'content' must be a string");
		if (!(r->content = dup_bytes(json_string_value(v), json_string_length(v)))) return bad(c, 503, "out of memory");
		r->content_len = json_string_length(v);
		return 0;
	case F_TOKENS: return get_ids(c, v, lim, &r->ids, &r->n_ids);
	case F_ADD_SPECIAL: return get_bool(c, v, &b); /* Qwen adds no BOS/EOS either way */
	case F_PARSE_SPECIAL: return get_bool(c, v, &r->parse_special);
	case F_WITH_PIECES: return get_bool(c, v, &r->with_pieces);
	case F_ADD_GEN_PROMPT: return get_bool(c, v, &r->add_generation_prompt);
	}
	return bad(c, 400, "unknown field '%s'", c->key);
}

int srv_request_parse(int kind, const char* body, size_t len, const struct srv_limits* lim, struct srv_request* r,
                      char* msg, size_t msglen, const char** param)
{
	memset(r, 0, sizeof *r);
	r->kind = kind;
	r->enable_thinking = -1;
	r->add_generation_prompt = 1;
	r->max_tokens = -1;
	r->cache_prompt = 1;
	r->parse_special = 1;
	struct ctx c = { msg, msglen, param, NULL };
	if (param) *param = NULL;
	if (kind < 0 || kind >= SRV_KIND_COUNT) return bad(&c, 404, "unknown endpoint");
	json_error_t je;
	/* duplicate keys are an error: two values for one field cannot both be honoured */
	r->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!r->root) return bad(&c, 400, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
	if (!json_is_object(r->root)) return bad(&c, 400, "the request body must be a JSON object");
	int tool_none = 0, has_max = 0, has_top_lp = 0;
	json_t* tools = NULL;
	const char* k;
	json_t* v;
	json_object_foreach(r->root, k, v)
	{
		c.key = k;
		int f = 0;
		while (f < F_COUNT && strcmp(field_names[f], k)) f++;
		if (f == F_COUNT || !(allowed[kind] & B(f))) {
			/* the name is the client's text: quote it safely (it is valid UTF-8, jansson checked) */
			if (strlen(k) > 64) return bad(&c, 400, "unknown field '%.64s...'", k);
			return bad(&c, 400, "unknown field '%s'", k);
		}
		if (json_is_null(v)) continue;
		int rc = one_field(&c, f, v, lim, r, &tool_none, &tools, &has_max, &has_top_lp);
		if (rc) return rc;
	}
	c.key = NULL;
	if (tools) {
		c.key = "tools";
		int rc = parse_tools(&c, tools, r);
		if (rc) return rc;
	}
	if (tool_none) r->tools = NULL; /* "none": the model is not told about tools */
	switch (kind) {
	case SRV_CHAT:
	case SRV_APPLY_TEMPLATE:
		c.key = "messages";
		if (!r->messages) return bad(&c, 400, "'messages' is required");
		break;
	case SRV_COMPLETION:
		c.key = "prompt";
		if (!r->prompt && !r->ids) return bad(&c, 400, "'prompt' is required");
		if (r->ids && r->n_ids == 0) return bad(&c, 400, "'prompt' is empty");
		break;
	case SRV_TOKENIZE:
		c.key = "content";
		if (!r->content) return bad(&c, 400, "'content' is required");
		break;
	case SRV_DETOKENIZE:
		c.key = "tokens";
		if (!r->ids) return bad(&c, 400, "'tokens' is required");
		break;
	}
	if (kind == SRV_CHAT && has_top_lp && !r->logprobs) {
		c.key = "top_logprobs";
		if (r->top_logprobs > 0) return bad(&c, 400, "'top_logprobs' needs 'logprobs': true");
	}
	if (r->include_usage && !r->stream) {
		c.key = "stream_options";
		return bad(&c, 400, "'stream_options' is only allowed with 'stream': true");
	}
	return 0;
}

void srv_request_free(struct srv_request* r)
{
	json_decref(r->root);
	free(r->prompt);
	free(r->ids);
	free(r->content);
	for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
	memset(r, 0, sizeof *r);
}

int srv_render_chat(const struct srv_request* r, int dialect, char** out, size_t* out_len, char* msg, size_t msglen)
{
	struct pv_chat_opts o = { r->kind == SRV_APPLY_TEMPLATE ? r->add_generation_prompt : 1, r->enable_thinking != 0 };
	return pv_chat_render(dialect, r->messages, r->tools, &o, out, out_len, msg, msglen);
}
