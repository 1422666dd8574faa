/*
 * convert.c: Hugging Face directory -> GGUF (convert.h). Three parts: the tensor plan (names,
 * shapes, sources and the permutations of §8.4/§8.5), the metadata (model keys and the
 * tokenizer), and the streaming, multi-threaded data writer.
 */
#include "convert/convert.h"
#include "model/config.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "format/json_util.h"
#include "model/model.h"
#include "base/pool.h"
#include "quant/quant.h"
#include "text/tokenizer.h"
#include "base/utf8.h"
#include "base/util.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ types --- */

static const struct {
	const char* name;
	enum pv_dtype base;
	uint32_t ftype; /* llama_ftype */
} g_types[PV_CONVERT_TYPE_COUNT] = {
	[PV_CONVERT_F32] = { "f32", PV_F32, 0 },
	[PV_CONVERT_F16] = { "f16", PV_F16, 1 },
	[PV_CONVERT_BF16] = { "bf16", PV_BF16, 32 },
	[PV_CONVERT_Q8_0] = { "q8_0", PV_Q8_0, 7 },
	[PV_CONVERT_Q4_0] = { "q4_0", PV_Q4_0, 2 },
	[PV_CONVERT_Q4_K] = { "q4_k", PV_Q4_K, 14 }, /* every matrix Q4_K; 14 (Q4_K_S) is the nearest label */
	[PV_CONVERT_Q6_K] = { "q6_k", PV_Q6_K, 18 },
	[PV_CONVERT_Q4_K_M] = { "q4_k_m", PV_Q4_K, 15 },
};

int pv_convert_type_parse(const char* s)
{
	for (int i = 0; s && i < PV_CONVERT_TYPE_COUNT; i++)
		if (!strcasecmp(s, g_types[i].name)) return i;
	return -1;
}

const char* pv_convert_type_name(enum pv_convert_type t)
{
	return (unsigned)t < PV_CONVERT_TYPE_COUNT ? g_types[t].name : "?";
}

uint32_t pv_convert_file_type(enum pv_convert_type t)
{
	return (unsigned)t < PV_CONVERT_TYPE_COUNT ? g_types[t].ftype : 0;
}

/* llama-quantize's choice of the layers that get more bits in the Q4_K_M mix. */
static int use_more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int has_suffix(const char* s, const char* suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && !strcmp(s + n - k, suf);
}

/* The row-length fallback of llama-quantize (tensor_type_fallback). */
static enum pv_dtype fit(enum pv_dtype t, int64_t cols, int* fallback)
{
	int64_t blk = pv_dtype_block(t);
	if (blk <= 1 || cols % blk == 0) return t;
	*fallback = 1;
	enum pv_dtype f = t == PV_Q4_K ? PV_Q5_0 : t == PV_Q5_K ? PV_Q5_1 : t == PV_Q6_K ? PV_Q8_0 : t;
	return cols % pv_dtype_block(f) == 0 ? f : PV_F16;
}

enum pv_dtype pv_convert_matrix_type(enum pv_convert_type t, const char* name, int64_t cols, int layer, int n_layers,
                                     int tied, int* fallback)
{
	*fallback = 0;
	if ((unsigned)t >= PV_CONVERT_TYPE_COUNT) return PV_F32;
	enum pv_dtype ty = g_types[t].base;
	int is_output = !strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"));
	if (is_output && pv_dtype_is_quant(ty)) {
		/* llama-quantize: the output matrix gets Q6_K (Q8_0 stays Q8_0), or Q8_0 when its rows
		 * are not a whole number of 256-blocks */
		if (ty != PV_Q8_0) {
			if (cols % PV_QK_K) {
				*fallback = 1;
				ty = PV_Q8_0;
			} else {
				ty = PV_Q6_K;
			}
		}
	} else if (t == PV_CONVERT_Q4_K_M && layer >= 0 &&
	           (has_suffix(name, ".attn_v.weight") || has_suffix(name, ".attn_qkv.weight") || strstr(name, ".ffn_down"))) {
		if (use_more_bits(layer, n_layers)) ty = PV_Q6_K;
	}
	int fb = 0;
	ty = fit(ty, cols, &fb);
	*fallback |= fb;
	return ty;
}

/* ------------------------------------------------------------------ the plan --- */

struct ent {
	char name[64];
	int n_dims;
	int64_t ne[3];
	int64_t rows, cols;      /* rows = ne[1] * ne[2], cols = ne[0]                         */
	int layer;               /* block index, -1 outside the blocks                         */
	int always_f32;
	int fallback;
	enum pv_dtype type;      /* chosen output type                                         */
	struct pv_tensor* views; /* n_views sources of rows_per_view x cols, stacked by rows   */
	int n_views;
	int64_t rows_per_view;
	int32_t* row_map;        /* output row -> stacked source row (NULL: identity)          */
	int32_t* col_map;        /* output column -> source column (NULL: identity)            */
};

struct plan {
	struct ent* e;
	int n, cap;
	char* err;
	size_t errlen;
};

static void plan_free(struct plan* p)
{
	for (int i = 0; i < p->n; i++) {
		free(p->e[i].views);
		free(p->e[i].row_map);
		free(p->e[i].col_map);
	}
	free(p->e);
	memset(p, 0, sizeof *p);
}

static struct ent* ent_new(struct plan* p, int layer, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

static struct ent* ent_new(struct plan* p, int layer, const char* fmt, ...)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 256;
		struct ent* e = realloc(p->e, sizeof(*e) * (size_t)p->cap);
		if (!e) pv_abort(__FILE__, __LINE__, "out of memory for the tensor plan");
		p->e = e;
	}
	struct ent* e = &p->e[p->n++];
	memset(e, 0, sizeof *e);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->name, sizeof e->name, fmt, ap);
	va_end(ap);
	e->layer = layer;
	return e;
}

/* A 2-D matrix [rows, cols] from one view: ggml ne {cols, rows}. */
static struct ent* add_view(struct plan* p, const struct pv_tensor* v, int layer, int always_f32, const char* name)
{
	struct ent* e = ent_new(p, layer, "%s", name);
	e->views = pv_xmalloc(sizeof *e->views);
	e->views[0] = *v;
	e->n_views = 1;
	e->rows_per_view = v->rows;
	e->rows = v->rows;
	e->cols = v->cols;
	e->n_dims = 2;
	e->ne[0] = v->cols;
	e->ne[1] = v->rows;
	e->ne[2] = 1;
	e->always_f32 = always_f32;
	return e;
}

/* A model-owned f32 vector [n]: ggml ne {n}, always F32. */
static struct ent* add_vec(struct plan* p, const float* x, int64_t n, int layer, const char* name)
{
	struct pv_tensor v = { x, PV_F32, 1, n };
	struct ent* e = add_view(p, &v, layer, 1, name);
	e->n_dims = 1;
	e->ne[1] = 1;
	return e;
}

/* E expert matrices of [rows, cols] stacked: ggml ne {cols, rows, E}. field: offset of the
 * struct pv_tensor in struct pv_expert. */
static struct ent* add_experts(struct plan* p, const struct pv_expert* ex, int E, size_t field, int layer, const char* name)
{
	const struct pv_tensor* first = (const struct pv_tensor*)((const char*)&ex[0] + field);
	struct ent* e = ent_new(p, layer, "%s", name);
	e->views = pv_xmalloc(sizeof *e->views * (size_t)E);
	for (int i = 0; i < E; i++) e->views[i] = *(const struct pv_tensor*)((const char*)&ex[i] + field);
	e->n_views = E;
	e->rows_per_view = first->rows;
	e->rows = first->rows * E;
	e->cols = first->cols;
	e->n_dims = 3;
	e->ne[0] = first->cols;
	e->ne[1] = first->rows;
	e->ne[2] = E;
	return e;
}

/* qwen35 value-head reorder (§8.5) as an index map over n entries: entries [0, offset) stay;
 * then Hv heads of hd entries each, where position p = j*Hk + g takes HF head g*r + j. */
static int32_t* vhead_map(int64_t n, int64_t offset, int Hk, int Hv, int64_t hd)
{
	int32_t* m = pv_xmalloc(sizeof *m * (size_t)n);
	for (int64_t i = 0; i < n; i++) m[i] = (int32_t)i;
	int r = Hv / Hk;
	for (int p = 0; p < Hv; p++) {
		int j = p / Hk, g = p % Hk, src = g * r + j;
		for (int64_t d = 0; d < hd; d++) m[offset + p * hd + d] = (int32_t)(offset + src * hd + d);
	}
	return m;
}

struct names {
	char b[128];
};

static const char* nm(struct names* s, int layer, const char* suffix)
{
	snprintf(s->b, sizeof s->b, "blk.%d.%s", layer, suffix);
	return s->b;
}

static void plan_layer(struct plan* p, const struct pv_config* c, const struct pv_layer* l, int i, int kind, int moe)
{
	struct names s;
	int hybrid = pv_arch_is_hybrid(c->arch);
	int tiled = pv_arch_info(c->arch)->v_tiled;
	int64_t H = c->hidden;

	add_vec(p, l->attn_norm, H, i, nm(&s, i, "attn_norm.weight"));
	add_vec(p, l->ffn_norm, H, i, nm(&s, i, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight"));
	if (kind == PV_LAYER_ATTN) {
		int64_t qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
		add_view(p, &l->wq, i, 0, nm(&s, i, "attn_q.weight"));
		add_view(p, &l->wk, i, 0, nm(&s, i, "attn_k.weight"));
		add_view(p, &l->wv, i, 0, nm(&s, i, "attn_v.weight"));
		add_view(p, &l->wo, i, 0, nm(&s, i, "attn_output.weight"));
		if (c->attn_bias) {
			add_vec(p, l->bq, qd, i, nm(&s, i, "attn_q.bias"));
			add_vec(p, l->bk, kvd, i, nm(&s, i, "attn_k.bias"));
			add_vec(p, l->bv, kvd, i, nm(&s, i, "attn_v.bias"));
		}
		if (c->qk_norm) {
			add_vec(p, l->q_norm, c->head_dim, i, nm(&s, i, "attn_q_norm.weight"));
			add_vec(p, l->k_norm, c->head_dim, i, nm(&s, i, "attn_k_norm.weight"));
		}
	} else {
		int Hk = c->lin_k_heads, Hv = c->lin_v_heads, r = Hv / Hk;
		int64_t dk = c->lin_k_dim, dv = c->lin_v_dim, kd = pv_cfg_key_dim(c), vd = pv_cfg_value_dim(c);
		int64_t cd = pv_cfg_conv_dim(c);
		struct ent* e;
		if (l->in_qkvz.data) {
			/* Qwen3-Next: per key group g [q_g | k_g | v_g (r dv) | z_g (r dv)] -> q_all | k_all | v_all, z_all */
			int64_t gw = 2 * dk + 2 * r * dv;
			e = add_view(p, &l->in_qkvz, i, 0, nm(&s, i, "attn_qkv.weight"));
			e->rows = e->ne[1] = cd;
			e->row_map = pv_xmalloc(sizeof(int32_t) * (size_t)cd);
			for (int g = 0; g < Hk; g++) {
				for (int64_t x = 0; x < dk; x++) {
					e->row_map[g * dk + x] = (int32_t)(g * gw + x);
					e->row_map[kd + g * dk + x] = (int32_t)(g * gw + dk + x);
				}
				for (int64_t x = 0; x < r * dv; x++) e->row_map[2 * kd + g * r * dv + x] = (int32_t)(g * gw + 2 * dk + x);
			}
			e = add_view(p, &l->in_qkvz, i, 0, nm(&s, i, "attn_gate.weight"));
			e->rows = e->ne[1] = vd;
			e->row_map = pv_xmalloc(sizeof(int32_t) * (size_t)vd);
			for (int g = 0; g < Hk; g++)
				for (int64_t x = 0; x < r * dv; x++) e->row_map[g * r * dv + x] = (int32_t)(g * gw + 2 * dk + r * dv + x);
		} else {
			e = add_view(p, &l->in_qkv, i, 0, nm(&s, i, "attn_qkv.weight"));
			if (tiled) e->row_map = vhead_map(cd, 2 * kd, Hk, Hv, dv);
			e = add_view(p, &l->in_z, i, 0, nm(&s, i, "attn_gate.weight"));
			if (tiled) e->row_map = vhead_map(vd, 0, Hk, Hv, dv);
		}
		if (l->in_ba.data) {
			add_view(p, &l->in_ba, i, 0, nm(&s, i, "ssm_ba.weight")); /* kept key-group-major */
		} else {
			e = add_view(p, &l->in_b, i, 0, nm(&s, i, "ssm_beta.weight"));
			if (tiled) e->row_map = vhead_map(Hv, 0, Hk, Hv, 1);
			e = add_view(p, &l->in_a, i, 0, nm(&s, i, "ssm_alpha.weight"));
			if (tiled) e->row_map = vhead_map(Hv, 0, Hk, Hv, 1);
		}
		struct pv_tensor conv = { l->conv_w, PV_F32, cd, c->conv_kernel };
		e = add_view(p, &conv, i, 1, nm(&s, i, "ssm_conv1d.weight"));
		if (tiled) e->row_map = vhead_map(cd, 2 * kd, Hk, Hv, dv);
		e = add_vec(p, l->dt_bias, Hv, i, nm(&s, i, "ssm_dt.bias"));
		if (tiled) e->col_map = vhead_map(Hv, 0, Hk, Hv, 1);
		e = add_vec(p, l->ssm_a, Hv, i, nm(&s, i, "ssm_a"));
		if (tiled) e->col_map = vhead_map(Hv, 0, Hk, Hv, 1);
		add_vec(p, l->lin_norm, dv, i, nm(&s, i, "ssm_norm.weight"));
		e = add_view(p, &l->out_proj, i, 0, nm(&s, i, "ssm_out.weight"));
		if (tiled) e->col_map = vhead_map(vd, 0, Hk, Hv, dv);
	}
	if (moe) {
		add_view(p, &l->router, i, 1, nm(&s, i, "ffn_gate_inp.weight"));
		add_experts(p, l->experts, c->n_experts, offsetof(struct pv_expert, gate), i, nm(&s, i, "ffn_gate_exps.weight"));
		add_experts(p, l->experts, c->n_experts, offsetof(struct pv_expert, up), i, nm(&s, i, "ffn_up_exps.weight"));
		add_experts(p, l->experts, c->n_experts, offsetof(struct pv_expert, down), i, nm(&s, i, "ffn_down_exps.weight"));
		if (c->shared_inter > 0) {
			add_vec(p, l->shexp_gate, H, i, nm(&s, i, "ffn_gate_inp_shexp.weight"));
			add_view(p, &l->shexp.gate, i, 0, nm(&s, i, "ffn_gate_shexp.weight"));
			add_view(p, &l->shexp.up, i, 0, nm(&s, i, "ffn_up_shexp.weight"));
			add_view(p, &l->shexp.down, i, 0, nm(&s, i, "ffn_down_shexp.weight"));
		}
	} else {
		add_view(p, &l->ffn_gate, i, 0, nm(&s, i, "ffn_gate.weight"));
		add_view(p, &l->ffn_up, i, 0, nm(&s, i, "ffn_up.weight"));
		add_view(p, &l->ffn_down, i, 0, nm(&s, i, "ffn_down.weight"));
	}
}

static void build_plan(struct plan* p, const struct pv_model* m)
{
	const struct pv_config* c = &m->cfg;
	const struct pv_weights* w = &m->w;
	add_view(p, &w->embed, -1, 0, "token_embd.weight");
	add_vec(p, w->final_norm, c->hidden, -1, "output_norm.weight");
	if (!c->tied) add_view(p, &w->lm_head, -1, 0, "output.weight");
	for (int i = 0; i < c->n_layers; i++) plan_layer(p, c, &w->layers[i], i, c->layer_kind[i], c->layer_moe[i]);
	if (w->mtp && c->n_mtp_layers > 0) {
		int L = c->n_layers;
		struct names s;
		add_view(p, &w->mtp->fc, L, 0, nm(&s, L, "nextn.eh_proj.weight"));
		add_vec(p, w->mtp->norm_emb, c->hidden, L, nm(&s, L, "nextn.enorm.weight"));
		add_vec(p, w->mtp->norm_hidden, c->hidden, L, nm(&s, L, "nextn.hnorm.weight"));
		add_vec(p, w->mtp->norm_out, c->hidden, L, nm(&s, L, "nextn.shared_head_norm.weight"));
		plan_layer(p, c, &w->mtp->layer, L, PV_LAYER_ATTN, c->n_experts > 0);
	}
}

/* ------------------------------------------------------------------ JSON side files --- */

#define MAX_JSON_BYTES ((size_t)256 << 20)

/* Read like the model loader reads them (a FIFO or a device fails, never blocks). */
static json_t* load_json(const char* dir, const char* file, char* err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, file);
	return pv_json_read_file(path, MAX_JSON_BYTES, 0, err, errlen);
}

static int file_exists(const char* dir, const char* file)
{
	char path[4096];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", dir, file);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* config.json value under text_config first, then the top level. */
static json_t* cfg_get(json_t* cfg, const char* key)
{
	json_t* tc = json_object_get(cfg, "text_config");
	json_t* v = json_is_object(tc) ? json_object_get(tc, key) : NULL;
	return v ? v : json_object_get(cfg, key);
}

/* An id: an integer or the first integer of a list; -1 if none. */
static int64_t json_id(json_t* v)
{
	if (json_is_array(v) && json_array_size(v)) v = json_array_get(v, 0);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* tokenizer_config.json "<kind>_token": a string or {"content": ...}. */
static const char* tok_cfg_string(json_t* tc, const char* key)
{
	json_t* v = json_object_get(tc, key);
	if (json_is_object(v)) v = json_object_get(v, "content");
	return json_string_value(v);
}

/* ------------------------------------------------------------------ tokenizer --- */

static const char re_qwen2[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen35[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct vocab {
	char** tokens;   /* V entries; point into the JSON or to owned strings */
	int32_t* types;  /* V entries */
	char** merges;
	int64_t n_merges;
	char** owned;    /* separately allocated strings */
	int64_t n_owned, cap_owned;
	const char* pre;
};

static void vocab_free(struct vocab* v)
{
	for (int64_t i = 0; i < v->n_owned; i++) free(v->owned[i]);
	free(v->owned);
	free(v->tokens);
	free(v->types);
	free(v->merges);
	memset(v, 0, sizeof *v);
}

static char* vocab_own(struct vocab* v, char* s)
{
	if (v->n_owned == v->cap_owned) {
		v->cap_owned = v->cap_owned ? 2 * v->cap_owned : 1024;
		char** o = realloc(v->owned, sizeof(char*) * (size_t)v->cap_owned);
		if (!o) pv_abort(__FILE__, __LINE__, "out of memory");
		v->owned = o;
	}
	v->owned[v->n_owned++] = s;
	return s;
}

/* The synthetic vocabulary of convert.h. */
static int synthetic_vocab(struct vocab* v, int64_t V, char* err, size_t errlen)
{
	if (V < 256) return pv_errf(err, errlen, "vocabulary of %lld tokens is smaller than the 256 byte tokens; a tokenizer.json is needed", (long long)V);
	v->tokens = pv_xcalloc((size_t)V, sizeof(char*));
	v->types = pv_xcalloc((size_t)V, sizeof(int32_t));
	v->merges = pv_xcalloc((size_t)(V - 256 + 1), sizeof(char*));
	for (int b = 0; b < 256; b++) {
		char buf[4];
		int n = pv_utf8_put(buf, pv_tok_byte_cp(b));
		buf[n] = 0;
		v->tokens[b] = vocab_own(v, pv_xstrdup(buf));
		v->types[b] = PV_TOK_NORMAL;
	}
	/* alphabet: "Ġ" (the space byte) and a..z */
	const char* alpha[27];
	alpha[0] = v->tokens[' '];
	for (int k = 0; k < 26; k++) alpha[k + 1] = v->tokens['a' + k];
	/* level 1: alphabet x alphabet; level n+1: each level-n token x alphabet (unique strings) */
	int64_t id = 256, lvl_start = -1, lvl_end = -1;
	while (id < V) {
		int64_t start = id;
		if (lvl_start < 0) {
			for (int a = 0; a < 27 && id < V; a++)
				for (int b = 0; b < 27 && id < V; b++) {
					size_t la = strlen(alpha[a]), lb = strlen(alpha[b]);
					char* t = pv_xmalloc(la + lb + 1);
					memcpy(t, alpha[a], la);
					memcpy(t + la, alpha[b], lb + 1);
					char* mg = pv_xmalloc(la + lb + 2);
					memcpy(mg, alpha[a], la);
					mg[la] = ' ';
					memcpy(mg + la + 1, alpha[b], lb + 1);
					v->tokens[id] = vocab_own(v, t);
					v->types[id] = PV_TOK_NORMAL;
					v->merges[v->n_merges++] = vocab_own(v, mg);
					id++;
				}
		} else {
			for (int64_t pfx = lvl_start; pfx < lvl_end && id < V; pfx++)
				for (int b = 0; b < 27 && id < V; b++) {
					size_t la = strlen(v->tokens[pfx]), lb = strlen(alpha[b]);
					char* t = pv_xmalloc(la + lb + 1);
					memcpy(t, v->tokens[pfx], la);
					memcpy(t + la, alpha[b], lb + 1);
					char* mg = pv_xmalloc(la + lb + 2);
					memcpy(mg, v->tokens[pfx], la);
					mg[la] = ' ';
					memcpy(mg + la + 1, alpha[b], lb + 1);
					v->tokens[id] = vocab_own(v, t);
					v->types[id] = PV_TOK_NORMAL;
					v->merges[v->n_merges++] = vocab_own(v, mg);
					id++;
				}
		}
		lvl_start = start;
		lvl_end = id;
	}
	v->pre = "qwen2";
	return 0;
}

/* tokenizer.json -> tokens / types / merges padded to V. */
static int json_vocab(struct vocab* v, json_t* tj, const struct pv_tok* tok, int64_t V, const char* path, char* err,
                      size_t errlen)
{
	json_t* model = json_object_get(tj, "model");
	const char* mtype = json_string_value(json_object_get(model, "type"));
	json_t* vmap = json_object_get(model, "vocab");
	json_t* merges = json_object_get(model, "merges");
	if (!model || (mtype && strcmp(mtype, "BPE")) || !json_is_object(vmap) || !json_is_array(merges))
		return pv_errf(err, errlen, "%s: not a BPE tokenizer with model.vocab and model.merges", path);
	const char* pat = pv_tok_pattern(tok);
	if (pat && !strcmp(pat, re_qwen2)) v->pre = "qwen2";
	else if (pat && !strcmp(pat, re_qwen35)) v->pre = "qwen35";
	else
		return pv_errf(err, errlen, "%s: the pre-tokenizer regex is neither Qwen2's nor Qwen3.5's; no GGUF pre-tokenizer name fits", path);
	v->tokens = pv_xcalloc((size_t)V, sizeof(char*));
	v->types = pv_xcalloc((size_t)V, sizeof(int32_t));
	const char* key;
	json_t* val;
	json_object_foreach(vmap, key, val) {
		int64_t id = json_is_integer(val) ? (int64_t)json_integer_value(val) : -1;
		if (id < 0 || id >= V)
			return pv_errf(err, errlen, "%s: token id %lld is outside the embedding's %lld rows", path, (long long)id, (long long)V);
		v->tokens[id] = (char*)key;
		v->types[id] = PV_TOK_NORMAL;
	}
	json_t* added = json_object_get(tj, "added_tokens");
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t* a = json_array_get(added, i);
		int64_t id = json_id(json_object_get(a, "id"));
		const char* content = json_string_value(json_object_get(a, "content"));
		if (id < 0 || id >= V || !content)
			return pv_errf(err, errlen, "%s: added token %zu has a bad id or content", path, i);
		v->tokens[id] = (char*)content;
		v->types[id] = json_is_true(json_object_get(a, "special")) ? PV_TOK_CONTROL : PV_TOK_USER_DEFINED;
	}
	for (int64_t id = 0; id < V; id++)
		if (!v->tokens[id]) {
			char buf[32];
			snprintf(buf, sizeof buf, "[PAD%lld]", (long long)id);
			v->tokens[id] = vocab_own(v, pv_xstrdup(buf));
			v->types[id] = PV_TOK_UNUSED;
		}
	size_t nm_ = json_array_size(merges);
	v->merges = pv_xcalloc(nm_ ? nm_ : 1, sizeof(char*));
	for (size_t i = 0; i < nm_; i++) {
		json_t* mj = json_array_get(merges, i);
		if (json_is_string(mj)) {
			v->merges[i] = (char*)json_string_value(mj);
		} else if (json_is_array(mj) && json_array_size(mj) == 2 && json_is_string(json_array_get(mj, 0)) &&
		           json_is_string(json_array_get(mj, 1))) {
			const char *a = json_string_value(json_array_get(mj, 0)), *b = json_string_value(json_array_get(mj, 1));
			size_t la = strlen(a), lb = strlen(b);
			char* s = pv_xmalloc(la + lb + 2);
			memcpy(s, a, la);
			s[la] = ' ';
			memcpy(s + la + 1, b, lb + 1);
			v->merges[i] = vocab_own(v, s);
		} else {
			return pv_errf(err, errlen, "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path, i);
		}
		v->n_merges++;
	}
	return 0;
}

/* ------------------------------------------------------------------ metadata --- */

const char* pv_convert_arch_name(int arch)
{
	const struct pv_arch_info* ai = pv_arch_info((enum pv_arch)arch);
	return ai ? ai->gguf : NULL;
}

struct meta_ctx {
	struct pv_gguf_writer* w;
	const char* arch;
	char key[160];
};

static const char* K(struct meta_ctx* x, const char* suffix)
{
	snprintf(x->key, sizeof x->key, "%s.%s", x->arch, suffix);
	return x->key;
}

int pv_convert_write_model_keys(struct pv_gguf_writer* w, const struct pv_config* c, int n_mtp_blocks,
                                const int32_t* rope_sections, enum pv_convert_type type, const char* name)
{
	struct meta_ctx xs = { .w = w, .arch = pv_convert_arch_name(c->arch) };
	struct meta_ctx* x = &xs;
	if (!x->arch) return -1;
	int hybrid = pv_arch_is_hybrid(c->arch);
	int moe = c->n_experts > 0;
	int blocks = c->n_layers + n_mtp_blocks;
	int rc = 0;

	rc |= pv_gguf_w_str(w, "general.architecture", x->arch);
	rc |= pv_gguf_w_str(w, "general.type", "model");
	rc |= pv_gguf_w_str(w, "general.name", name);
	rc |= pv_gguf_w_u32(w, "general.file_type", pv_convert_file_type(type));
	rc |= pv_gguf_w_u32(w, "general.quantization_version", 2);
	rc |= pv_gguf_w_u32(w, K(x, "block_count"), (uint32_t)blocks);
	rc |= pv_gguf_w_u32(w, K(x, "context_length"), (uint32_t)c->max_pos);
	rc |= pv_gguf_w_u32(w, K(x, "embedding_length"), (uint32_t)c->hidden);
	if (c->intermediate > 0) rc |= pv_gguf_w_u32(w, K(x, "feed_forward_length"), (uint32_t)c->intermediate);
	rc |= pv_gguf_w_u32(w, K(x, "attention.head_count"), (uint32_t)c->n_heads);
	rc |= pv_gguf_w_u32(w, K(x, "attention.head_count_kv"), (uint32_t)c->n_kv_heads);
	if (c->arch != PV_ARCH_QWEN2) {
		rc |= pv_gguf_w_u32(w, K(x, "attention.key_length"), (uint32_t)c->head_dim);
		rc |= pv_gguf_w_u32(w, K(x, "attention.value_length"), (uint32_t)c->head_dim);
	}
	rc |= pv_gguf_w_f32(w, K(x, "attention.layer_norm_rms_epsilon"), c->rms_eps);
	rc |= pv_gguf_w_f32(w, K(x, "rope.freq_base"), c->rope_theta);
	rc |= pv_gguf_w_u32(w, K(x, "rope.dimension_count"), (uint32_t)c->rope_dim);
	if (c->arch == PV_ARCH_QWEN3_5 || c->arch == PV_ARCH_QWEN3_5_MOE) {
		static const int32_t def[4] = { 11, 11, 10, 0 };
		rc |= pv_gguf_w_arr(w, K(x, "rope.dimension_sections"), PV_GGUF_INT32, rope_sections ? rope_sections : def, 4);
	}
	if (moe) {
		rc |= pv_gguf_w_u32(w, K(x, "expert_count"), (uint32_t)c->n_experts);
		rc |= pv_gguf_w_u32(w, K(x, "expert_used_count"), (uint32_t)c->n_experts_used);
		rc |= pv_gguf_w_u32(w, K(x, "expert_feed_forward_length"), (uint32_t)c->moe_inter);
		if (c->shared_inter > 0) rc |= pv_gguf_w_u32(w, K(x, "expert_shared_feed_forward_length"), (uint32_t)c->shared_inter);
	}
	if (hybrid) {
		rc |= pv_gguf_w_u32(w, K(x, "ssm.conv_kernel"), (uint32_t)c->conv_kernel);
		rc |= pv_gguf_w_u32(w, K(x, "ssm.state_size"), (uint32_t)c->lin_k_dim);
		rc |= pv_gguf_w_u32(w, K(x, "ssm.group_count"), (uint32_t)c->lin_k_heads);
		rc |= pv_gguf_w_u32(w, K(x, "ssm.time_step_rank"), (uint32_t)c->lin_v_heads);
		rc |= pv_gguf_w_u32(w, K(x, "ssm.inner_size"), (uint32_t)(c->lin_v_heads * c->lin_v_dim));
		/* the per-layer pattern (MTP blocks are attention), and the interval when it is periodic */
		unsigned char* rec = pv_xcalloc((size_t)blocks, 1);
		for (int i = 0; i < c->n_layers; i++) rec[i] = c->layer_kind[i] == PV_LAYER_LINEAR;
		rc |= pv_gguf_w_arr(w, K(x, "attention.recurrent_layers"), PV_GGUF_BOOL, rec, (uint64_t)blocks);
		free(rec);
		for (int k = 1; k <= c->n_layers; k++) {
			int ok = 1;
			for (int i = 0; i < c->n_layers && ok; i++) ok = (c->layer_kind[i] == PV_LAYER_LINEAR) == ((i + 1) % k != 0);
			if (ok) {
				rc |= pv_gguf_w_u32(w, K(x, "full_attention_interval"), (uint32_t)k);
				break;
			}
		}
	}
	if (n_mtp_blocks > 0) rc |= pv_gguf_w_u32(w, K(x, "nextn_predict_layers"), (uint32_t)n_mtp_blocks);
	return rc ? -1 : 0;
}

/* The HF model's keys: the checkpoint's own mrope_section when it has one. */
static int write_model_keys(struct pv_gguf_writer* w, const struct pv_model* m, json_t* cfg, enum pv_convert_type type,
                            const char* name)
{
	const struct pv_config* c = &m->cfg;
	int32_t sec[4] = { 11, 11, 10, 0 };
	json_t* rp = cfg_get(cfg, "rope_parameters");
	if (!json_is_object(rp)) rp = cfg_get(cfg, "rope_scaling");
	json_t* ms = json_is_object(rp) ? json_object_get(rp, "mrope_section") : NULL;
	if (json_is_array(ms) && json_array_size(ms) >= 1 && json_array_size(ms) <= 4) {
		memset(sec, 0, sizeof sec);
		for (size_t i = 0; i < json_array_size(ms); i++) sec[i] = (int32_t)json_integer_value(json_array_get(ms, i));
	}
	return pv_convert_write_model_keys(w, c, m->w.mtp ? c->n_mtp_layers : 0, sec, type, name);
}

static int write_tokenizer_keys(struct pv_gguf_writer* w, const struct vocab* v, int64_t V)
{
	int rc = 0;
	rc |= pv_gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
	rc |= pv_gguf_w_str(w, "tokenizer.ggml.pre", v->pre);
	rc |= pv_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char* const*)v->tokens, (uint64_t)V);
	rc |= pv_gguf_w_arr(w, "tokenizer.ggml.token_type", PV_GGUF_INT32, v->types, (uint64_t)V);
	rc |= pv_gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char* const*)v->merges, (uint64_t)v->n_merges);
	return rc ? -1 : 0;
}

int pv_convert_write_synthetic_vocab(struct pv_gguf_writer* w, int64_t V, char* err, size_t errlen)
{
	struct vocab voc = { 0 };
	if (synthetic_vocab(&voc, V, err, errlen)) return -1;
	int rc = write_tokenizer_keys(w, &voc, V) || pv_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
	vocab_free(&voc);
	if (rc) return pv_errf(err, errlen, "%s", pv_gguf_writer_error(w) ? pv_gguf_writer_error(w) : "GGUF write failed");
	return 0;
}

/* bos / eos / padding ids as llama.cpp's converter finds them: tokenizer_config.json's
 * "<kind>_token" text first, then config.json's "<kind>_token_id". */
static int write_special_ids(struct pv_gguf_writer* w, const struct pv_model* m, json_t* cfg, json_t* tcfg, int64_t V)
{
	static const char* kinds[3][3] = {
		{ "bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id" },
		{ "eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id" },
		{ "pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id" },
	};
	int rc = 0;
	for (int k = 0; k < 3; k++) {
		int64_t id = -1;
		const char* s = tcfg ? tok_cfg_string(tcfg, kinds[k][0]) : NULL;
		if (s && m->tok) id = pv_tok_id(m->tok, s);
		if (id < 0) id = json_id(cfg_get(cfg, kinds[k][1]));
		if (id >= 0 && id < V) rc |= pv_gguf_w_u32(w, kinds[k][2], (uint32_t)id);
	}
	rc |= pv_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
	return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ data --- */

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

enum { ERR_NONE = 0, ERR_NONFINITE, ERR_F16_RANGE };

struct job {
	const struct ent* e;
	int64_t r0, n;         /* rows of this chunk                          */
	size_t row_bytes;
	unsigned char* out;    /* n * row_bytes                               */
	float* scratch;        /* per thread: 2 * cols floats                 */
	int n_tasks;
	int* task_err;         /* per task: ERR_*                            */
	int64_t* task_row;     /* per task: the failing row                  */
};

static void fetch_row(const struct ent* e, int64_t r, float* dst, float* tmp)
{
	int64_t sr = e->row_map ? e->row_map[r] : r;
	const struct pv_tensor* v = &e->views[sr / e->rows_per_view];
	int64_t vr = sr % e->rows_per_view;
	if (e->col_map) {
		pv_tensor_row_f32(v, vr, tmp);
		for (int64_t c = 0; c < e->cols; c++) dst[c] = tmp[e->col_map[c]];
	} else {
		pv_tensor_row_f32(v, vr, dst);
	}
}

/* Writes output row r into o; returns ERR_*. */
static int make_row(const struct ent* e, int64_t r, unsigned char* o, float* x, float* tmp)
{
	int64_t sr = e->row_map ? e->row_map[r] : r;
	const struct pv_tensor* v = &e->views[sr / e->rows_per_view];
	if (!e->col_map && v->type == e->type && !pv_dtype_is_quant(v->type)) {
		/* same float type: the bytes as stored */
		size_t rb = pv_dtype_size(v->type) * (size_t)e->cols;
		memcpy(o, (const char*)v->data + (size_t)(sr % e->rows_per_view) * rb, rb);
		return ERR_NONE;
	}
	fetch_row(e, r, x, tmp);
	switch (e->type) {
	case PV_F32:
		memcpy(o, x, sizeof(float) * (size_t)e->cols);
		return ERR_NONE;
	case PV_BF16:
		for (int64_t c = 0; c < e->cols; c++) {
			uint16_t h = f32_to_bf16(x[c]);
			memcpy(o + 2 * c, &h, 2);
		}
		return ERR_NONE;
	case PV_F16:
		for (int64_t c = 0; c < e->cols; c++) {
			uint16_t h = pv_f32_to_f16(x[c]);
			if (isfinite(x[c]) && (h & 0x7c00) == 0x7c00) return ERR_F16_RANGE;
			memcpy(o + 2 * c, &h, 2);
		}
		return ERR_NONE;
	default:
		return pv_quant_row(e->type, x, o, e->cols) ? ERR_NONFINITE : ERR_NONE;
	}
}

static void job_task(void* ctx, int task, int thread)
{
	struct job* j = ctx;
	int64_t a = j->n * task / j->n_tasks, b = j->n * (task + 1) / j->n_tasks;
	float* x = j->scratch + (size_t)thread * 2 * (size_t)j->e->cols;
	float* tmp = x + j->e->cols;
	j->task_err[task] = ERR_NONE;
	for (int64_t i = a; i < b; i++) {
		int rc = make_row(j->e, j->r0 + i, j->out + (size_t)i * j->row_bytes, x, tmp);
		if (rc) {
			j->task_err[task] = rc;
			j->task_row[task] = j->r0 + i;
			return;
		}
	}
}

#define CHUNK_BYTES ((size_t)32 << 20)

static int write_tensor(struct pv_gguf_writer* w, struct pv_pool* pool, const struct ent* e, char* err, size_t errlen)
{
	size_t row_bytes = pv_dtype_row_bytes(e->type, e->cols);
	int64_t chunk = (int64_t)(CHUNK_BYTES / (sizeof(float) * (size_t)e->cols));
	if (chunk < 1) chunk = 1;
	if (chunk > e->rows) chunk = e->rows;
	int threads = pv_pool_threads(pool);
	int max_tasks = 4 * threads;
	struct job j = { .e = e, .row_bytes = row_bytes };
	j.out = malloc(row_bytes * (size_t)chunk);
	j.scratch = malloc(sizeof(float) * 2 * (size_t)e->cols * (size_t)threads);
	j.task_err = malloc(sizeof(int) * (size_t)max_tasks);
	j.task_row = malloc(sizeof(int64_t) * (size_t)max_tasks);
	int rc = 0;
	if (!j.out || !j.scratch || !j.task_err || !j.task_row) {
		rc = pv_errf(err, errlen, "out of memory converting %s", e->name);
		goto done;
	}
	for (int64_t r0 = 0; r0 < e->rows && !rc; r0 += chunk) {
		j.r0 = r0;
		j.n = e->rows - r0 < chunk ? e->rows - r0 : chunk;
		j.n_tasks = j.n < max_tasks ? (int)j.n : max_tasks;
		pv_pool_run(j.n_tasks > 1 ? pool : NULL, job_task, &j, j.n_tasks);
		for (int t = 0; t < j.n_tasks; t++) {
			if (j.task_err[t] == ERR_NONFINITE) {
				rc = pv_errf(err, errlen, "tensor %s: row %lld holds a NaN or an infinity; cannot quantize it", e->name,
				             (long long)j.task_row[t]);
				break;
			}
			if (j.task_err[t] == ERR_F16_RANGE) {
				rc = pv_errf(err, errlen, "tensor %s: row %lld has values beyond the F16 range; use --type bf16 or f32",
				             e->name, (long long)j.task_row[t]);
				break;
			}
		}
		if (!rc && pv_gguf_w_data(w, j.out, row_bytes * (size_t)j.n))
			rc = pv_errf(err, errlen, "%s", pv_gguf_writer_error(w));
	}
done:
	free(j.out);
	free(j.scratch);
	free(j.task_err);
	free(j.task_row);
	return rc;
}

/* ------------------------------------------------------------------ driver --- */

static void base_name(char* out, size_t n, const char* dir)
{
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/') len--;
	size_t s = len;
	while (s > 0 && dir[s - 1] != '/') s--;
	size_t k = len - s;
	if (k == 0 || k >= n) {
		snprintf(out, n, "model");
		return;
	}
	memcpy(out, dir + s, k);
	out[k] = 0;
}

/* The output must not be one of the files convert reads: any entry of the model directory (the
 * shards, the index, config.json, the tokenizer files), compared by identity (device and inode),
 * so a hard link, a symbolic link or another spelling of the path is caught too. */
static int output_is_input(const char* dir, const char* out, char* err, size_t errlen)
{
	struct stat so, si;
	if (stat(out, &so) || !S_ISREG(so.st_mode)) return 0; /* absent, or refused by the writer */
	DIR* d = opendir(dir);
	if (!d) return pv_errf(err, errlen, "%s: cannot read the directory: %s", dir, strerror(errno));
	int rc = 0;
	for (struct dirent* e; !rc && (e = readdir(d));) {
		if (fstatat(dirfd(d), e->d_name, &si, 0) || !S_ISREG(si.st_mode)) continue;
		if (si.st_dev == so.st_dev && si.st_ino == so.st_ino)
			rc = pv_errf(err, errlen, "%s: is the model's own file %s/%s: convert will not overwrite its input (choose another --out)",
			             out, dir, e->d_name);
	}
	closedir(d);
	return rc;
}

int pv_convert(const struct pv_convert_params* p, struct pv_convert_stats* st, char* err, size_t errlen)
{
	struct pv_convert_stats dummy;
	if (!st) st = &dummy;
	memset(st, 0, sizeof *st);
	if (!p || !p->model_dir || !p->out_path) return pv_errf(err, errlen, "convert: model directory and output path are required");
	if ((unsigned)p->type >= PV_CONVERT_TYPE_COUNT) return pv_errf(err, errlen, "convert: unknown output type %d", (int)p->type);
	struct stat sb;
	if (stat(p->model_dir, &sb)) return pv_errf(err, errlen, "%s: %s", p->model_dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return pv_errf(err, errlen, "%s: not a directory (convert reads a Hugging Face model directory)", p->model_dir);
	if (!stat(p->out_path, &sb) && S_ISDIR(sb.st_mode)) return pv_errf(err, errlen, "%s: is a directory", p->out_path);
	if (output_is_input(p->model_dir, p->out_path, err, errlen)) return -1;

	pv_model* m = NULL;
	if (pv_model_open(&m, p->model_dir, NULL, err, errlen)) return -1;
	const struct pv_config* c = &m->cfg;
	const char* arch = pv_convert_arch_name(c->arch);
	int rc = -1;
	struct plan plan = { 0 };
	struct vocab voc = { 0 };
	json_t *cfg = NULL, *tcfg = NULL, *tj = NULL;
	struct pv_gguf_writer* w = NULL;
	struct pv_pool* pool = NULL;
	int64_t V = c->vocab;

	if (!arch) {
		pv_errf(err, errlen, "%s: architecture has no GGUF name", p->model_dir);
		goto out;
	}
	if (c->n_experts > 0 && !c->norm_topk) {
		pv_errf(err, errlen, "%s: norm_topk_prob is false, but GGUF %s models always renormalise the top-k expert weights "
		        "(llama.cpp and proven); the converted model would compute something else", p->model_dir, arch);
		goto out;
	}
	snprintf(st->arch, sizeof st->arch, "%s", arch);
	if (c->n_experts > 0)
		for (int i = 0; i < c->n_layers; i++)
			if (!c->layer_moe[i])
				st->llama_cpp_note = "some layers are dense (mlp_only_layers / decoder_sparse_step), but llama.cpp's MoE "
				                     "architectures require every layer to be MoE";
	if (pv_arch_is_hybrid(c->arch) && c->lin_k_dim != c->lin_v_dim)
		st->llama_cpp_note = "linear_key_head_dim != linear_value_head_dim, but llama.cpp uses ssm.state_size for both";
	if (!(cfg = load_json(p->model_dir, "config.json", err, errlen))) goto out;
	if (file_exists(p->model_dir, "tokenizer_config.json") &&
	    !(tcfg = load_json(p->model_dir, "tokenizer_config.json", err, errlen)))
		goto out;

	/* the vocabulary */
	if (m->tok && file_exists(p->model_dir, "tokenizer.json")) {
		char path[4096];
		snprintf(path, sizeof path, "%s/tokenizer.json", p->model_dir);
		if (!(tj = load_json(p->model_dir, "tokenizer.json", err, errlen))) goto out;
		if (json_vocab(&voc, tj, m->tok, V, path, err, errlen)) goto out;
	} else {
		if (synthetic_vocab(&voc, V, err, errlen)) goto out;
		st->synthetic_vocab = 1;
	}
	st->vocab = (int)V;

	/* the tensors and their types */
	build_plan(&plan, m);
	int n_blocks = c->n_layers + (m->w.mtp ? c->n_mtp_layers : 0);
	for (int i = 0; i < plan.n; i++) {
		struct ent* e = &plan.e[i];
		if (e->always_f32) e->type = PV_F32;
		else e->type = pv_convert_matrix_type(p->type, e->name, e->cols, e->layer, n_blocks, c->tied, &e->fallback);
		st->n_fallback += e->fallback;
		st->per_type[e->type]++;
		st->n_params += e->rows * e->cols;
	}
	st->n_tensors = plan.n;

	/* the file */
	if (pv_gguf_writer_open(&w, p->out_path, 32, err, errlen)) goto out;
	char name[256];
	base_name(name, sizeof name, p->model_dir);
	if (write_model_keys(w, m, cfg, p->type, name) || write_tokenizer_keys(w, &voc, V) ||
	    write_special_ids(w, m, cfg, st->synthetic_vocab ? NULL : tcfg, st->synthetic_vocab ? 0 : V))
		goto werr;
	if (m->chat_template && pv_gguf_w_str(w, "tokenizer.chat_template", m->chat_template)) goto werr;
	for (int i = 0; i < plan.n; i++) {
		const struct ent* e = &plan.e[i];
		if (pv_gguf_w_tensor(w, e->name, e->n_dims, e->ne, pv_gguf_ggml_type(e->type))) goto werr;
	}
	if (pv_gguf_w_begin_data(w)) goto werr;
	pool = pv_pool_new(p->n_threads);
	for (int i = 0; i < plan.n; i++) {
		const struct ent* e = &plan.e[i];
		if (p->progress) p->progress(p->progress_ud, i, plan.n, e->name, pv_dtype_name(e->type));
		if (write_tensor(w, pool, e, err, errlen)) goto out;
	}
	struct pv_gguf_writer* done = w;
	w = NULL;
	if (pv_gguf_writer_close(done, err, errlen)) goto out;
	if (!stat(p->out_path, &sb)) st->file_bytes = (uint64_t)sb.st_size;
	rc = 0;
	goto out;
werr:
	pv_errf(err, errlen, "%s", pv_gguf_writer_error(w) ? pv_gguf_writer_error(w) : "GGUF write failed");
out:
	pv_gguf_writer_abort(w);
	pv_pool_free(pool);
	vocab_free(&voc);
	plan_free(&plan);
	json_decref(cfg);
	json_decref(tcfg);
	json_decref(tj);
	pv_model_close(m);
	return rc;
}
