/*
 * config.c: config.json -> struct pv_config. Defaults follow the transformers config classes
 * (qwen2, qwen3, qwen3_moe, qwen3_next, qwen3_5[_moe]) for the keys that have harmless defaults;
 * the dimensions that define the weights are required. Layer patterns follow
 * shared/docs/qwen-models.md §5.1, §6.1 and §6.5.
 */
#include "model/config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/json_util.h"
#include "format/safetensors.h" /* pv_printable */
#include "base/file.h"
#include "base/util.h"

#define MAX_CONFIG_BYTES (16 << 20)
#define MAX_LAYERS PV_MAX_LAYERS
#define MAX_DIM PV_MAX_DIM
#define MAX_HEADS PV_MAX_HEADS
#define MAX_EXPERTS PV_MAX_EXPERTS
#define MAX_VOCAB PV_MAX_VOCAB
#define MAX_CONTEXT PV_MAX_CONTEXT

/* Where keys are read from, for messages: "config.json: key 'text_config.hidden_size': ...". */
struct scope {
	const char* label;
	const char* prefix; /* "" or "text_config." */
	char* err;
	size_t errlen;
};

static int key_err(const struct scope* s, const char* key, const char* fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int key_err(const struct scope* s, const char* key, const char* fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return pv_errf(s->err, s->errlen, "%s: key '%s%s': %s", s->label, s->prefix, key, msg);
}

/* A key whose value is null counts as absent (transformers writes null for unset options). */
static const json_t* get(const json_t* o, const char* key)
{
	const json_t* v = json_object_get(o, key);
	return json_is_null(v) ? NULL : v;
}

static int get_int(const struct scope* s, const json_t* o, const char* key, int required, int def,
                   int lo, int hi, int* out)
{
	const json_t* v = get(o, key);

	if (!v) {
		if (required) return key_err(s, key, "missing (an integer is required)");
		*out = def;
		return 0;
	}
	if (!json_is_integer(v)) return key_err(s, key, "must be an integer, not %s", pv_json_kind(v));
	json_int_t x = json_integer_value(v);
	if (x < lo || x > hi) return key_err(s, key, "%lld is out of range [%d, %d]", (long long)x, lo, hi);
	*out = (int)x;
	return 0;
}

static int get_num(const struct scope* s, const json_t* o, const char* key, double def, double lo,
                   double hi, double* out)
{
	const json_t* v = get(o, key);

	if (!v) {
		*out = def;
		return 0;
	}
	if (!json_is_number(v)) return key_err(s, key, "must be a number, not %s", pv_json_kind(v));
	double x = json_number_value(v);
	if (!(x >= lo && x <= hi)) return key_err(s, key, "%g is out of range [%g, %g]", x, lo, hi);
	*out = x;
	return 0;
}

static int get_bool(const struct scope* s, const json_t* o, const char* key, int def, int* out)
{
	const json_t* v = get(o, key);

	if (!v) {
		*out = def;
		return 0;
	}
	if (!json_is_boolean(v)) return key_err(s, key, "must be true or false, not %s", pv_json_kind(v));
	*out = json_is_true(v);
	return 0;
}

/* NULL in *out when absent. */
static int get_str(const struct scope* s, const json_t* o, const char* key, const char** out)
{
	const json_t* v = get(o, key);

	*out = NULL;
	if (!v) return 0;
	if (!json_is_string(v)) return key_err(s, key, "must be a string, not %s", pv_json_kind(v));
	*out = json_string_value(v);
	return 0;
}

static int get_obj(const struct scope* s, const json_t* o, const char* key, const json_t** out)
{
	const json_t* v = get(o, key);

	*out = NULL;
	if (!v) return 0;
	if (!json_is_object(v)) return key_err(s, key, "must be an object, not %s", pv_json_kind(v));
	*out = v;
	return 0;
}

/* Attention shape: heads, head_dim, flags that follow from the architecture. */
static int parse_attention(struct pv_config* c, const struct scope* s, const json_t* t)
{
	int flag;

	if (get_int(s, t, "num_attention_heads", 1, 0, 1, MAX_HEADS, &c->n_heads) ||
	    get_int(s, t, "num_key_value_heads", 1, 0, 1, MAX_HEADS, &c->n_kv_heads))
		return -1;
	if (c->n_heads % c->n_kv_heads)
		return key_err(s, "num_key_value_heads", "%d does not divide num_attention_heads %d",
		               c->n_kv_heads, c->n_heads);
	/* head_dim is explicit from Qwen3 on and is not H/nh there; Qwen2 derives it (§3.1, §4.1). */
	if (!get(t, "head_dim") && c->hidden % c->n_heads)
		return key_err(s, "num_attention_heads", "%d does not divide hidden_size %d and head_dim is absent",
		               c->n_heads, c->hidden);
	if (get_int(s, t, "head_dim", 0, c->hidden / c->n_heads, 1, MAX_HEADS, &c->head_dim)) return -1;

	c->attn_bias = pv_arch_info(c->arch)->attn_bias;
	c->qk_norm = pv_arch_info(c->arch)->qk_norm;
	c->norm_zc = pv_arch_is_hybrid(c->arch);
	c->attn_gate = 0;
	if (c->norm_zc && get_bool(s, t, "attn_output_gate", 1, &c->attn_gate)) return -1;
	if (c->arch != PV_ARCH_QWEN2) { /* Qwen2 always has q/k/v biases and no such key */
		if (get_bool(s, t, "attention_bias", 0, &flag)) return -1;
		if (flag) return key_err(s, "attention_bias", "unsupported: attention biases on %s", pv_arch_name(c->arch));
	}
	if (get_bool(s, t, "use_sliding_window", 0, &flag)) return -1;
	if (flag) return key_err(s, "use_sliding_window", "unsupported: sliding-window attention");
	return 0;
}

/* A RoPE type other than plain ("default"; "mrope" is its legacy name for Qwen-VL text positions)
 * changes the frequencies and is not implemented. */
static int check_rope_type(const struct scope* s, const json_t* o, const char* okey)
{
	const char *type, *key = "rope_type";
	char pt[64], full[64];

	struct scope in = *s;
	snprintf(full, sizeof full, "%s%s.", s->prefix, okey);
	in.prefix = full;
	if (get_str(&in, o, "rope_type", &type)) return -1;
	if (!type) {
		key = "type";
		if (get_str(&in, o, "type", &type)) return -1;
	}
	if (type && strcmp(type, "default") && strcmp(type, "mrope"))
		return key_err(&in, key, "unsupported rope scaling '%s'", pv_printable(pt, sizeof pt, type));
	return 0;
}

/* RoPE base and width: transformers 5 "rope_parameters" win over "rope_scaling", which wins over
 * the top-level keys. */
static int parse_rope(struct pv_config* c, const struct scope* s, const json_t* t)
{
	const char* names[2] = { "rope_parameters", "rope_scaling" };
	const char* prf_key = "partial_rotary_factor"; /* where the factor came from, for messages */
	char prf_src[64] = "";
	double theta, prf;

	double def_prf = pv_arch_is_hybrid(c->arch) ? 0.25 : 1.0;
	if (get_num(s, t, "rope_theta", 10000.0, 1e-3, 1e12, &theta) ||
	    get_num(s, t, prf_key, def_prf, 1e-6, 1.0, &prf))
		return -1;
	for (int i = 1; i >= 0; i--) {
		const json_t *src, *per_type;
		char full[64];
		struct scope in = *s;
		snprintf(full, sizeof full, "%s%s.", s->prefix, names[i]);
		in.prefix = full;
		if (get_obj(s, t, names[i], &src)) return -1;
		if (!src) continue;
		/* per-layer-type form {"full_attention": {...}, ...}: attention layers use that entry */
		if (get_obj(&in, src, "full_attention", &per_type)) return -1;
		if (per_type) src = per_type;
		if (check_rope_type(s, src, names[i]) ||
		    get_num(&in, src, "rope_theta", theta, 1e-3, 1e12, &theta) ||
		    get_num(&in, src, prf_key, prf, 1e-6, 1.0, &prf))
			return -1;
		if (get(src, prf_key)) snprintf(prf_src, sizeof prf_src, "%s.", names[i]);
	}
	c->rope_theta = (float)theta;
	c->rope_dim = (int)(c->head_dim * prf); /* int() truncation, as transformers does */
	if (c->rope_dim < 2 || c->rope_dim % 2)
		return key_err(s, strcat(prf_src, prf_key),
		               "%g x head_dim %d gives %d rotary dims (must be even and >= 2)", prf, c->head_dim,
		               c->rope_dim);
	return 0;
}

/* layer_kind[]: an explicit layer_types list, else every full_attention_interval-th layer is
 * attention on hybrids (§6.1); all attention elsewhere. */
static int parse_layer_kinds(struct pv_config* c, const struct scope* s, const json_t* t)
{
	const json_t* lt = get(t, "layer_types");
	int hybrid = pv_arch_is_hybrid(c->arch);

	if (lt) {
		if (!json_is_array(lt)) return key_err(s, "layer_types", "must be an array, not %s", pv_json_kind(lt));
		if (json_array_size(lt) != (size_t)c->n_layers)
			return key_err(s, "layer_types", "has %zu entries, num_hidden_layers is %d",
			               json_array_size(lt), c->n_layers);
		for (int i = 0; i < c->n_layers; i++) {
			const json_t* v = json_array_get(lt, (size_t)i);
			const char* name = json_string_value(v);
			char pn[64];
			if (!name) return key_err(s, "layer_types", "entry %d must be a string, not %s", i, pv_json_kind(v));
			if (!strcmp(name, "full_attention") || !strcmp(name, "attention"))
				c->layer_kind[i] = PV_LAYER_ATTN;
			else if (hybrid && !strcmp(name, "linear_attention"))
				c->layer_kind[i] = PV_LAYER_LINEAR;
			else
				return key_err(s, "layer_types", "entry %d: unsupported layer type '%s' for %s", i,
				               pv_printable(pn, sizeof pn, name), pv_arch_name(c->arch));
		}
		return 0;
	}
	int interval = 1;
	if (hybrid && get_int(s, t, "full_attention_interval", 0, 4, 1, MAX_LAYERS, &interval)) return -1;
	for (int i = 0; i < c->n_layers; i++)
		c->layer_kind[i] = (i + 1) % interval == 0 ? PV_LAYER_ATTN : PV_LAYER_LINEAR;
	return 0;
}

/* layer_moe[] for qwen3_moe / qwen3_next: MoE iff not in mlp_only_layers, experts exist and
 * (i + 1) % decoder_sparse_step == 0 (transformers Qwen3MoeDecoderLayer). */
static int parse_sparse_layers(struct pv_config* c, const struct scope* s, const json_t* t)
{
	const json_t* only = get(t, "mlp_only_layers");
	int step;

	if (get_int(s, t, "decoder_sparse_step", 0, 1, 1, MAX_LAYERS, &step)) return -1;
	for (int i = 0; i < c->n_layers; i++) c->layer_moe[i] = c->n_experts > 0 && (i + 1) % step == 0;
	if (!only) return 0;
	if (!json_is_array(only)) return key_err(s, "mlp_only_layers", "must be an array, not %s", pv_json_kind(only));
	for (size_t j = 0; j < json_array_size(only); j++) {
		const json_t* v = json_array_get(only, j);
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= c->n_layers)
			return key_err(s, "mlp_only_layers", "entry %zu must be a layer index in [0, %d)", j, c->n_layers);
		c->layer_moe[json_integer_value(v)] = 0;
	}
	return 0;
}

/* FFN kinds and widths: dense I, MoE E/k/Ie, shared expert Is (§5.1, §6.5). */
static int parse_ffn(struct pv_config* c, const struct scope* s, const json_t* t)
{
	int moe_arch = pv_arch_info(c->arch)->moe;
	int any_moe = 0, any_dense = 0;

	if (moe_arch) {
		/* transformers 5 may save Qwen3-MoE's num_experts under its attribute name num_local_experts */
		const char* ekey = get(t, "num_experts") || !get(t, "num_local_experts") ? "num_experts" : "num_local_experts";
		int min_e = c->arch == PV_ARCH_QWEN3_5_MOE ? 1 : 0;
		if (get_int(s, t, ekey, 1, 0, min_e, MAX_EXPERTS, &c->n_experts)) return -1;
	}
	if (c->arch == PV_ARCH_QWEN3_5_MOE)
		memset(c->layer_moe, 1, (size_t)c->n_layers);
	else if (moe_arch && parse_sparse_layers(c, s, t))
		return -1;
	for (int i = 0; i < c->n_layers; i++) {
		any_moe |= c->layer_moe[i];
		any_dense |= !c->layer_moe[i];
	}
	/* the MTP layer has the model's FFN kind: MoE whenever the model has experts */
	any_moe |= c->n_experts > 0 && c->n_mtp_layers > 0;

	if (get_int(s, t, "intermediate_size", any_dense, 0, 1, MAX_DIM, &c->intermediate)) return -1;
	if (any_moe) {
		if (get_int(s, t, "num_experts_per_tok", 1, 0, 1, c->n_experts, &c->n_experts_used) ||
		    get_int(s, t, "moe_intermediate_size", 1, 0, 1, MAX_DIM, &c->moe_inter))
			return -1;
		if (c->arch != PV_ARCH_QWEN3_MOE &&
		    get_int(s, t, "shared_expert_intermediate_size", 1, 0, 1, MAX_DIM, &c->shared_inter))
			return -1;
	}
	c->norm_topk = 1; /* Qwen3.5-MoE always renormalises */
	if (c->arch == PV_ARCH_QWEN3_MOE || c->arch == PV_ARCH_QWEN3_NEXT) {
		int def = c->arch == PV_ARCH_QWEN3_NEXT; /* transformers defaults: False / True */
		if (get_bool(s, t, "norm_topk_prob", def, &c->norm_topk)) return -1;
	}
	return 0;
}

/* Gated DeltaNet dimensions (§6.4); needed only when some layer is linear. */
static int parse_deltanet(struct pv_config* c, const struct scope* s, const json_t* t)
{
	int any_linear = 0;

	for (int i = 0; i < c->n_layers; i++) any_linear |= c->layer_kind[i] == PV_LAYER_LINEAR;
	if (!any_linear) return 0;
	if (get_int(s, t, "linear_num_key_heads", 1, 0, 1, MAX_HEADS, &c->lin_k_heads) ||
	    get_int(s, t, "linear_num_value_heads", 1, 0, 1, MAX_HEADS, &c->lin_v_heads) ||
	    get_int(s, t, "linear_key_head_dim", 1, 0, 1, MAX_HEADS, &c->lin_k_dim) ||
	    get_int(s, t, "linear_value_head_dim", 1, 0, 1, MAX_HEADS, &c->lin_v_dim) ||
	    get_int(s, t, "linear_conv_kernel_dim", 0, 4, 1, 64, &c->conv_kernel))
		return -1;
	if (c->lin_v_heads % c->lin_k_heads)
		return key_err(s, "linear_num_value_heads", "%d is not a multiple of linear_num_key_heads %d",
		               c->lin_v_heads, c->lin_k_heads);
	c->v_head_tiled = 0; /* HF order: value head j reads key head j / r */
	return 0;
}

/* MTP layers: the loader sets the count to 0 when the checkpoint has no mtp.* tensors. */
static int parse_mtp(struct pv_config* c, const struct scope* s, const json_t* t)
{
	const char* key = get(t, "num_nextn_predict_layers") && !get(t, "mtp_num_hidden_layers")
	                          ? "num_nextn_predict_layers"
	                          : "mtp_num_hidden_layers";

	c->n_mtp_layers = 0;
	if (!pv_arch_is_hybrid(c->arch)) return 0;
	if (get_int(s, t, key, 0, 1, 0, MAX_LAYERS, &c->n_mtp_layers)) return -1;
	if (c->n_mtp_layers > 1)
		return key_err(s, key, "unsupported: %d MTP layers (at most 1)", c->n_mtp_layers);
	return 0;
}

static int parse_arch(struct pv_config* c, const struct scope* s, const json_t* root, const char** type)
{
	char pt[64];

	if (get_str(s, root, "model_type", type)) return -1;
	if (!*type) return key_err(s, "model_type", "missing (a string is required)");
	const struct pv_arch_info* ai = pv_arch_from_hf(*type);
	if (ai) {
		c->arch = ai->arch;
		return 0;
	}
	return key_err(s, "model_type", "unsupported model type '%s'", pv_printable(pt, sizeof pt, *type));
}

/* Qwen3.5/3.6 wrappers ("qwen3_5", "qwen3_5_moe") keep the language model under text_config. */
static int text_object(const struct scope* s, const json_t* root, const char* type, const json_t** t,
                       struct scope* ts)
{
	const json_t* tc;
	const char* inner;
	char want[32], pi[64];

	*t = root;
	*ts = *s;
	if (strcmp(type, "qwen3_5") && strcmp(type, "qwen3_5_moe")) return 0;
	if (get_obj(s, root, "text_config", &tc)) return -1;
	if (!tc) return 0; /* a flattened wrapper: text keys at the top */
	*t = tc;
	ts->prefix = "text_config.";
	snprintf(want, sizeof want, "%s_text", type);
	if (get_str(ts, tc, "model_type", &inner)) return -1;
	if (inner && strcmp(inner, want))
		return key_err(ts, "model_type", "'%s' does not match the outer model_type '%s'",
		               pv_printable(pi, sizeof pi, inner), type);
	return 0;
}

static int parse_root(struct pv_config* c, const struct scope* s, const json_t* root)
{
	const json_t* t;
	const char *type, *act;
	struct scope ts;
	double eps;

	if (!json_is_object(root))
		return pv_errf(s->err, s->errlen, "%s: must be a JSON object, not %s", s->label, pv_json_kind(root));
	if (parse_arch(c, s, root, &type) || text_object(s, root, type, &t, &ts)) return -1;
	/* tying is decided by the outer config (qwen-models.md §6.8 note 1); default False everywhere */
	if (get_bool(s, root, "tie_word_embeddings", 0, &c->tied)) return -1;

	if (get_int(&ts, t, "num_hidden_layers", 1, 0, 1, MAX_LAYERS, &c->n_layers) ||
	    get_int(&ts, t, "hidden_size", 1, 0, 1, MAX_DIM, &c->hidden) ||
	    get_int(&ts, t, "vocab_size", 1, 0, 1, MAX_VOCAB, &c->vocab) ||
	    get_int(&ts, t, "max_position_embeddings", 0, 32768, 1, MAX_CONTEXT, &c->max_pos) ||
	    get_num(&ts, t, "rms_norm_eps", 1e-6, 1e-30, 0.1, &eps) ||
	    get_str(&ts, t, "hidden_act", &act))
		return -1;
	c->rms_eps = (float)eps;
	if (act && strcmp(act, "silu")) {
		char pa[64];
		return key_err(&ts, "hidden_act", "unsupported activation '%s' (only silu)", pv_printable(pa, sizeof pa, act));
	}
	c->layer_kind = pv_xcalloc((size_t)c->n_layers, 1);
	c->layer_moe = pv_xcalloc((size_t)c->n_layers, 1);
	if (parse_attention(c, &ts, t) || parse_rope(c, &ts, t) || parse_layer_kinds(c, &ts, t) ||
	    parse_mtp(c, &ts, t) || parse_ffn(c, &ts, t) || parse_deltanet(c, &ts, t))
		return -1;
	return pv_config_check(c, s->label, s->err, s->errlen);
}

int pv_config_parse_buffer(struct pv_config* c, const char* label, const char* buf, size_t len,
                           char* err, size_t errlen)
{
	json_error_t jerr;
	struct scope s = { label, "", err, errlen };

	memset(c, 0, sizeof *c);
	json_t* root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char text[sizeof jerr.text];
		return pv_errf(err, errlen, "%s: not valid JSON (line %d, column %d): %s", label, jerr.line,
		               jerr.column, pv_printable(text, sizeof text, jerr.text));
	}
	int rc = parse_root(c, &s, root);
	json_decref(root);
	if (rc) pv_config_free(c);
	return rc;
}

int pv_config_parse(struct pv_config* c, const char* json_path, char* err, size_t errlen)
{
	memset(c, 0, sizeof *c);
	size_t n;
	char* buf = pv_file_read(json_path, MAX_CONFIG_BYTES, &n, err, errlen); /* a directory, FIFO, device: a message */
	if (!buf) return -1;
	int rc = pv_config_parse_buffer(c, json_path, buf, n, err, errlen);
	free(buf);
	return rc;
}

void pv_config_free(struct pv_config* c)
{
	free(c->layer_kind);
	free(c->layer_moe);
	memset(c, 0, sizeof *c);
}
