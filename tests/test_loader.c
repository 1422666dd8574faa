/*
 * test_loader.c: safetensors parsing, config.json parsing and Hugging Face directory loading.
 *
 * Builds tiny model directories (config.json + safetensors written here) for every layout the
 * loader supports and checks shapes, flags and info; then feeds it a table of crafted bad inputs,
 * each of which must fail with a message naming the file and the tensor or key at fault; finally
 * replays tests/corpus/{safetensors,config}/, where every file must fail cleanly.
 *
 *   test_loader                      run the tests
 *   test_loader --write-corpus DIR   (re)write the crafted bad files into DIR/{safetensors,config}
 *   test_loader --write-seeds DIR    write valid files of every layout (fuzzing seeds)
 */
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/config.h"
#include "harness.h"
#include "model/hf_load.h"
#include "model/model.h"
#include "proven.h"
#include "format/safetensors.h"

static char g_tmp[256]; /* scratch directory of this run */

/* Files ------------------------------------------------------------------------------------ */

static void write_file(const char* path, const void* data, size_t len)
{
	FILE* f = fopen(path, "wb");
	if (!f || fwrite(data, 1, len, f) != len) {
		fprintf(stderr, "test_loader: cannot write %s\n", path);
		exit(2);
	}
	fclose(f);
}

static void write_text(const char* path, const char* text) { write_file(path, text, strlen(text)); }

static int rm_entry(const char* p, const struct stat* sb, int flag, struct FTW* ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static void remove_tree(const char* dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh, empty directory g_tmp/name. */
static const char* case_dir(const char* name)
{
	static char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
	remove_tree(dir);
	mkdir(dir, 0755);
	return dir;
}

static const char* in_dir(const char* dir, const char* name)
{
	static char buf[4][768];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

/* Tensor lists and the safetensors writer ------------------------------------------------- */

#define PATTERN (-1000.0f) /* fill value meaning "element i holds i % 200" (exact in bf16) */

struct tens {
	char name[160];
	char dtype[16];
	int ndim;
	int64_t shape[4];
	float fill;
};

struct tlist {
	struct tens v[2048];
	int n;
};

#define S1(a) 1, (const int64_t[]){ a }
#define S2(a, b) 2, (const int64_t[]){ a, b }
#define S3(a, b, c) 3, (const int64_t[]){ a, b, c }

static struct tens* add(struct tlist* tl, const char* dtype, float fill, int ndim, const int64_t* shape,
                        const char* fmt, ...) __attribute__((format(printf, 6, 7)));

static struct tens* add(struct tlist* tl, const char* dtype, float fill, int ndim, const int64_t* shape,
                        const char* fmt, ...)
{
	struct tens* t = &tl->v[tl->n++];
	va_list ap;

	if (tl->n > (int)(sizeof tl->v / sizeof tl->v[0])) abort();
	memset(t, 0, sizeof *t);
	va_start(ap, fmt);
	vsnprintf(t->name, sizeof t->name, fmt, ap);
	va_end(ap);
	snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
	t->ndim = ndim;
	memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
	t->fill = fill;
	return t;
}

static struct tens* find_t(struct tlist* tl, const char* name)
{
	for (int i = 0; i < tl->n; i++)
		if (!strcmp(tl->v[i].name, name)) return &tl->v[i];
	return NULL;
}

static void drop_t(struct tlist* tl, const char* name)
{
	struct tens* t = find_t(tl, name);
	if (!t) abort();
	*t = tl->v[--tl->n];
}

static int64_t numel(const struct tens* t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
	return n;
}

static size_t nbytes(const struct tens* t) { return (size_t)(numel(t) * pv_st_dtype_bits(t->dtype) / 8); }

static uint16_t to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16); /* test values are exact in bf16 */
}

static uint16_t to_f16(float f) /* normal, exactly representable values only */
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if (!(u & 0x7fffffffu)) return (uint16_t)(u >> 16);
	uint32_t e = ((u >> 23) & 0xff) - 127 + 15;
	return (uint16_t)((u >> 16 & 0x8000u) | e << 10 | (u >> 13 & 0x3ffu));
}

static void fill_data(const struct tens* t, unsigned char* p)
{
	int64_t n = numel(t);
	for (int64_t i = 0; i < n; i++) {
		float v = t->fill == PATTERN ? (float)(i % 200) : t->fill;
		if (!strcmp(t->dtype, "F32")) {
			memcpy(p + 4 * i, &v, 4);
		} else if (!strcmp(t->dtype, "BF16")) {
			uint16_t h = to_bf16(v);
			memcpy(p + 2 * i, &h, 2);
		} else if (!strcmp(t->dtype, "F16")) {
			uint16_t h = to_f16(v);
			memcpy(p + 2 * i, &h, 2);
		} /* other dtypes: zeros */
	}
}

/* Writes the tensors of tl for which pick(i) is true. pad8: pad the header with spaces to a
 * multiple of 8 (as real writers do); else make its length odd so that data is misaligned. */
static void write_st_subset(const char* path, const struct tlist* tl, int pad8, int n_parts, int part)
{
	json_t* h = json_object();
	size_t off = 0;

	json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
	for (int i = 0; i < tl->n; i++) {
		const struct tens* t = &tl->v[i];
		if (i % n_parts != part) continue;
		json_t* shape = json_array();
		for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
		json_object_set_new(h, t->name,
		                    json_pack("{s:s, s:o, s:[I,I]}", "dtype", t->dtype, "shape", shape, "data_offsets",
		                              (json_int_t)off, (json_int_t)(off + nbytes(t))));
		off += nbytes(t);
	}
	char* hdr = json_dumps(h, JSON_COMPACT);
	json_decref(h);
	size_t hl = strlen(hdr), padded = pad8 ? (hl + 7) / 8 * 8 : hl | 1;
	unsigned char* buf = calloc(1, 8 + padded + off + 1);
	for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	memcpy(buf + 8, hdr, hl);
	memset(buf + 8 + hl, ' ', padded - hl);
	off = 0;
	for (int i = 0; i < tl->n; i++) {
		if (i % n_parts != part) continue;
		fill_data(&tl->v[i], buf + 8 + padded + off);
		off += nbytes(&tl->v[i]);
	}
	write_file(path, buf, 8 + padded + off);
	free(buf);
	free(hdr);
}

static void write_st(const char* path, const struct tlist* tl) { write_st_subset(path, tl, 1, 1, 0); }

/* Model specs: config.json and the tensor list of a tiny model --------------------------- */

struct spec {
	const char* type;            /* model_type                                      */
	int L, H, V, nh, nkv, hd, I; /* hd 0: no head_dim key (Qwen2)                    */
	int E, k, Ie, Is;
	int Hk, Hv, dk, dv, Kc;
	int tied, fused, wrapper, mtp;
	int layer_types;             /* hybrids: explicit list instead of the interval   */
	int mlp_only;                /* qwen3_moe: this layer is dense (-1: none)        */
	int rope_params;             /* transformers-5 "rope_parameters"                 */
	const char* dtype;
};

static int is_hybrid(const struct spec* s) { return !strncmp(s->type, "qwen3_next", 10) || !strncmp(s->type, "qwen3_5", 7); }
static int is_next(const struct spec* s) { return !strcmp(s->type, "qwen3_next"); }
static int is_moe(const struct spec* s) { return s->E > 0; }
static int is_attn(const struct spec* s, int i) { return !is_hybrid(s) || (i + 1) % 4 == 0; }
static int layer_is_moe(const struct spec* s, int i) { return is_moe(s) && i != s->mlp_only; }
static int head_dim(const struct spec* s) { return s->hd ? s->hd : s->H / s->nh; }

static const struct spec SPEC_QWEN2 = {
	.type = "qwen2", .L = 2, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 0, .I = 12,
	.tied = 1, .mlp_only = -1, .dtype = "BF16",
};
static const struct spec SPEC_QWEN3 = {
	.type = "qwen3", .L = 2, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 6, .I = 12,
	.mlp_only = -1, .rope_params = 1, .dtype = "F16",
};
static const struct spec SPEC_QWEN3_MOE = {
	.type = "qwen3_moe", .L = 3, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 6, .I = 12,
	.E = 4, .k = 2, .Ie = 6, .mlp_only = 1, .dtype = "BF16",
};
static const struct spec SPEC_QWEN3_5 = {
	.type = "qwen3_5", .L = 4, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 8, .I = 12,
	.Hk = 1, .Hv = 2, .dk = 4, .dv = 4, .Kc = 4, .tied = 1, .wrapper = 1, .mtp = 1,
	.layer_types = 1, .mlp_only = -1, .rope_params = 1, .dtype = "BF16",
};
static const struct spec SPEC_QWEN3_5_MOE = {
	.type = "qwen3_5_moe", .L = 4, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 8,
	.E = 4, .k = 2, .Ie = 6, .Is = 5, .Hk = 1, .Hv = 2, .dk = 4, .dv = 4, .Kc = 4,
	.fused = 1, .wrapper = 1, .mtp = 1, .mlp_only = -1, .rope_params = 1, .dtype = "BF16",
};
static const struct spec SPEC_QWEN3_NEXT = {
	.type = "qwen3_next", .L = 4, .H = 8, .V = 16, .nh = 2, .nkv = 1, .hd = 8, .I = 12,
	.E = 4, .k = 2, .Ie = 6, .Is = 5, .Hk = 1, .Hv = 2, .dk = 4, .dv = 4, .Kc = 4,
	.mtp = 1, .mlp_only = -1, .dtype = "BF16",
};

static json_t* gen_config(const struct spec* s)
{
	json_t* t = json_object();
	json_object_set_new(t, "model_type", json_string(s->type));
	json_object_set_new(t, "hidden_size", json_integer(s->H));
	json_object_set_new(t, "num_hidden_layers", json_integer(s->L));
	json_object_set_new(t, "vocab_size", json_integer(s->V));
	json_object_set_new(t, "num_attention_heads", json_integer(s->nh));
	json_object_set_new(t, "num_key_value_heads", json_integer(s->nkv));
	if (s->hd) json_object_set_new(t, "head_dim", json_integer(s->hd));
	if (s->I) json_object_set_new(t, "intermediate_size", json_integer(s->I));
	json_object_set_new(t, "rms_norm_eps", json_real(1e-6));
	json_object_set_new(t, "max_position_embeddings", json_integer(4096));
	json_object_set_new(t, "hidden_act", json_string("silu"));
	json_object_set_new(t, "tie_word_embeddings", json_boolean(s->tied));
	json_object_set_new(t, "use_sliding_window", json_false());
	if (s->rope_params) {
		json_object_set_new(t, "rope_parameters",
		                    json_pack("{s:s, s:f, s:f, s:[i,i,i]}", "rope_type", "default", "rope_theta", 1e7,
		                              "partial_rotary_factor", is_hybrid(s) ? 0.25 : 1.0, "mrope_section", 1, 0, 0));
	} else {
		json_object_set_new(t, "rope_theta", json_real(1e6));
		json_object_set_new(t, "rope_scaling", json_null());
	}
	if (is_moe(s)) {
		json_object_set_new(t, s->fused ? "num_local_experts" : "num_experts", json_integer(s->E));
		json_object_set_new(t, "num_experts_per_tok", json_integer(s->k));
		json_object_set_new(t, "moe_intermediate_size", json_integer(s->Ie));
		json_object_set_new(t, "norm_topk_prob", json_true());
		json_object_set_new(t, "decoder_sparse_step", json_integer(1));
		json_object_set_new(t, "mlp_only_layers", s->mlp_only >= 0 ? json_pack("[i]", s->mlp_only) : json_array());
		if (s->Is) json_object_set_new(t, "shared_expert_intermediate_size", json_integer(s->Is));
	}
	if (is_hybrid(s)) {
		json_object_set_new(t, "linear_num_key_heads", json_integer(s->Hk));
		json_object_set_new(t, "linear_num_value_heads", json_integer(s->Hv));
		json_object_set_new(t, "linear_key_head_dim", json_integer(s->dk));
		json_object_set_new(t, "linear_value_head_dim", json_integer(s->dv));
		json_object_set_new(t, "linear_conv_kernel_dim", json_integer(s->Kc));
		json_object_set_new(t, "attn_output_gate", json_true());
		if (s->layer_types) {
			json_t* lt = json_array();
			for (int i = 0; i < s->L; i++)
				json_array_append_new(lt, json_string(is_attn(s, i) ? "full_attention" : "linear_attention"));
			json_object_set_new(t, "layer_types", lt);
		} else {
			json_object_set_new(t, "full_attention_interval", json_integer(4));
		}
		json_object_set_new(t, is_next(s) ? "num_nextn_predict_layers" : "mtp_num_hidden_layers", json_integer(1));
	}
	if (!s->wrapper) return t;

	/* Qwen3.5 wrapper: text settings nested; the inner tie flag disagrees and must be ignored */
	char inner[32];
	snprintf(inner, sizeof inner, "%s_text", s->type);
	json_object_set_new(t, "model_type", json_string(inner));
	json_object_set_new(t, "tie_word_embeddings", json_boolean(!s->tied));
	return json_pack("{s:s, s:o, s:b, s:{s:i, s:i}, s:i}", "model_type", s->type, "text_config", t,
	                 "tie_word_embeddings", s->tied, "vision_config", "depth", 2, "hidden_size", 4,
	                 "image_token_id", 5);
}

static void gen_swiglu(struct tlist* tl, const struct spec* s, const char* base, int inter)
{
	add(tl, s->dtype, PATTERN, S2(inter, s->H), "%s.gate_proj.weight", base);
	add(tl, s->dtype, PATTERN, S2(inter, s->H), "%s.up_proj.weight", base);
	add(tl, s->dtype, PATTERN, S2(s->H, inter), "%s.down_proj.weight", base);
}

static void gen_layer(struct tlist* tl, const struct spec* s, const char* p, int attn, int moe)
{
	const char* dt = s->dtype;
	int H = s->H, hd = head_dim(s), q = s->nh * hd, kv = s->nkv * hd, hyb = is_hybrid(s);
	int kd = s->Hk * s->dk, vd = s->Hv * s->dv, conv = 2 * kd + vd;
	char base[160];

	add(tl, dt, 0.5f, S1(H), "%sinput_layernorm.weight", p);
	add(tl, dt, 0.5f, S1(H), "%spost_attention_layernorm.weight", p);
	if (attn) {
		add(tl, dt, PATTERN, S2(hyb ? 2 * q : q, H), "%sself_attn.q_proj.weight", p);
		add(tl, dt, PATTERN, S2(kv, H), "%sself_attn.k_proj.weight", p);
		add(tl, dt, PATTERN, S2(kv, H), "%sself_attn.v_proj.weight", p);
		add(tl, dt, PATTERN, S2(H, q), "%sself_attn.o_proj.weight", p);
		if (!strcmp(s->type, "qwen2")) {
			add(tl, dt, 0.25f, S1(q), "%sself_attn.q_proj.bias", p);
			add(tl, dt, 0.25f, S1(kv), "%sself_attn.k_proj.bias", p);
			add(tl, dt, 0.25f, S1(kv), "%sself_attn.v_proj.bias", p);
		} else {
			add(tl, dt, 0.5f, S1(hd), "%sself_attn.q_norm.weight", p);
			add(tl, dt, 0.5f, S1(hd), "%sself_attn.k_norm.weight", p);
		}
	} else {
		if (is_next(s)) {
			add(tl, dt, PATTERN, S2(2 * kd + 2 * vd, H), "%slinear_attn.in_proj_qkvz.weight", p);
			add(tl, dt, PATTERN, S2(2 * s->Hv, H), "%slinear_attn.in_proj_ba.weight", p);
		} else {
			add(tl, dt, PATTERN, S2(conv, H), "%slinear_attn.in_proj_qkv.weight", p);
			add(tl, dt, PATTERN, S2(vd, H), "%slinear_attn.in_proj_z.weight", p);
			add(tl, dt, PATTERN, S2(s->Hv, H), "%slinear_attn.in_proj_b.weight", p);
			add(tl, dt, PATTERN, S2(s->Hv, H), "%slinear_attn.in_proj_a.weight", p);
		}
		add(tl, dt, 0.25f, S3(conv, 1, s->Kc), "%slinear_attn.conv1d.weight", p);
		add(tl, "F32", 0.5f, S1(s->Hv), "%slinear_attn.A_log", p); /* real checkpoints keep it f32 */
		add(tl, dt, 0.125f, S1(s->Hv), "%slinear_attn.dt_bias", p);
		add(tl, dt, 0.75f, S1(s->dv), "%slinear_attn.norm.weight", p);
		add(tl, dt, PATTERN, S2(H, vd), "%slinear_attn.out_proj.weight", p);
	}
	if (!moe) {
		snprintf(base, sizeof base, "%smlp", p);
		gen_swiglu(tl, s, base, s->I);
		return;
	}
	add(tl, dt, PATTERN, S2(s->E, H), "%smlp.gate.weight", p);
	if (s->fused) {
		add(tl, dt, PATTERN, S3(s->E, 2 * s->Ie, H), "%smlp.experts.gate_up_proj", p);
		add(tl, dt, PATTERN, S3(s->E, H, s->Ie), "%smlp.experts.down_proj", p);
	} else {
		for (int e = 0; e < s->E; e++) {
			snprintf(base, sizeof base, "%smlp.experts.%d", p, e);
			gen_swiglu(tl, s, base, s->Ie);
		}
	}
	if (s->Is) {
		snprintf(base, sizeof base, "%smlp.shared_expert", p);
		gen_swiglu(tl, s, base, s->Is);
		add(tl, dt, 0.375f, S2(1, H), "%smlp.shared_expert_gate.weight", p);
	}
}

static void gen_tensors(struct tlist* tl, const struct spec* s)
{
	const char* P = s->wrapper ? "model.language_model." : "model.";
	char p[128];

	tl->n = 0;
	add(tl, s->dtype, PATTERN, S2(s->V, s->H), "%sembed_tokens.weight", P);
	add(tl, s->dtype, 0.5f, S1(s->H), "%snorm.weight", P);
	if (!s->tied) add(tl, s->dtype, PATTERN, S2(s->V, s->H), "lm_head.weight");
	for (int i = 0; i < s->L; i++) {
		snprintf(p, sizeof p, "%slayers.%d.", P, i);
		gen_layer(tl, s, p, is_attn(s, i), layer_is_moe(s, i));
	}
	if (s->mtp) {
		add(tl, s->dtype, PATTERN, S2(s->H, 2 * s->H), "mtp.fc.weight");
		add(tl, s->dtype, 0.5f, S1(s->H), "mtp.pre_fc_norm_embedding.weight");
		add(tl, s->dtype, 0.5f, S1(s->H), "mtp.pre_fc_norm_hidden.weight");
		add(tl, s->dtype, 0.5f, S1(s->H), "mtp.norm.weight");
		gen_layer(tl, s, "mtp.layers.0.", 1, is_moe(s));
	}
	if (s->wrapper) /* vision tower: ignored, even in a dtype the engine cannot use */
		add(tl, "F8_E4M3", 0.0f, S2(4, 4), "model.visual.blocks.0.attn.qkv.weight");
}

static void write_config(const char* dir, json_t* cfg)
{
	char* text = json_dumps(cfg, JSON_INDENT(2));
	write_text(in_dir(dir, "config.json"), text);
	free(text);
}

/* Writes a whole model directory: config.json and one safetensors file (or n_shards + index). */
static void write_model(const char* dir, const struct spec* s, const struct tlist* tl, int n_shards)
{
	json_t* cfg = gen_config(s);
	write_config(dir, cfg);
	json_decref(cfg);
	if (n_shards <= 1) {
		write_st(in_dir(dir, "model.safetensors"), tl);
		return;
	}
	json_t* map = json_object();
	for (int part = 0; part < n_shards; part++) {
		char name[64];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", part + 1, n_shards);
		write_st_subset(in_dir(dir, name), tl, 1, n_shards, part);
		for (int i = part; i < tl->n; i += n_shards) json_object_set_new(map, tl->v[i].name, json_string(name));
	}
	json_t* index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
	char* text = json_dumps(index, JSON_INDENT(1));
	write_text(in_dir(dir, "model.safetensors.index.json"), text);
	free(text);
	json_decref(index);
}

/* Good models ------------------------------------------------------------------------------ */

static int near(float a, float b) { return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b)); }

/* The totals the loader must report, from the tensor list (vision tensors excluded). */
static void expected_totals(const struct tlist* tl, int64_t* params, int64_t* mtp, uint64_t* bytes)
{
	*params = *mtp = 0;
	*bytes = 0;
	for (int i = 0; i < tl->n; i++) {
		const struct tens* t = &tl->v[i];
		if (!strncmp(t->name, "model.visual.", 13)) continue;
		*params += numel(t);
		*bytes += nbytes(t);
		if (!strncmp(t->name, "mtp.", 4)) *mtp += numel(t);
	}
}

static void check_layer(const char* what, const struct spec* s, const struct pv_layer* l, int attn, int moe)
{
	float zc = is_hybrid(s) ? 1.0f : 0.0f;
	int hd = head_dim(s);

	CHECK(l->attn_norm && near(l->attn_norm[0], 0.5f + zc), "%s: attn_norm", what);
	CHECK(l->ffn_norm && near(l->ffn_norm[s->H - 1], 0.5f + zc), "%s: ffn_norm", what);
	if (attn) {
		CHECK(l->wq.rows == (int64_t)s->nh * hd * (is_hybrid(s) ? 2 : 1) && l->wq.cols == s->H, "%s: wq", what);
		CHECK(l->wo.rows == s->H && l->wo.cols == (int64_t)s->nh * hd, "%s: wo", what);
		CHECK(l->wk.data && l->wv.data, "%s: wk/wv", what);
		if (!strcmp(s->type, "qwen2")) {
			CHECK(l->bq && near(l->bq[0], 0.25f) && l->bk && l->bv && !l->q_norm, "%s: qwen2 biases", what);
		} else {
			CHECK(!l->bq && l->q_norm && near(l->q_norm[hd - 1], 0.5f + zc) && l->k_norm, "%s: q/k norm", what);
		}
	} else {
		int conv = 2 * s->Hk * s->dk + s->Hv * s->dv;
		CHECK(near(l->ssm_a[0], -expf(0.5f)) && near(l->ssm_a[s->Hv - 1], -expf(0.5f)), "%s: ssm_a", what);
		CHECK(near(l->dt_bias[0], 0.125f), "%s: dt_bias", what);
		CHECK(near(l->lin_norm[s->dv - 1], 0.75f), "%s: linear_attn.norm stays plain", what);
		CHECK(near(l->conv_w[conv * s->Kc - 1], 0.25f), "%s: conv_w", what);
		CHECK(l->out_proj.rows == s->H && l->out_proj.cols == s->Hv * s->dv, "%s: out_proj", what);
		if (is_next(s))
			CHECK(l->in_qkvz.rows == 2 * s->Hk * s->dk + 2 * s->Hv * s->dv && l->in_ba.rows == 2 * s->Hv &&
			              !l->in_qkv.data, "%s: qkvz", what);
		else
			CHECK(l->in_qkv.rows == conv && l->in_z.rows == s->Hv * s->dv && l->in_b.rows == s->Hv &&
			              l->in_a.rows == s->Hv && !l->in_qkvz.data, "%s: qkv/z/b/a", what);
	}
	if (!moe) {
		CHECK(l->ffn_gate.rows == s->I && l->ffn_down.cols == s->I && !l->experts, "%s: dense ffn", what);
		return;
	}
	CHECK(l->router.rows == s->E && l->experts && !l->ffn_gate.data, "%s: moe", what);
	if (!l->experts) return;
	for (int e = 0; e < s->E; e++) {
		const struct pv_expert* x = &l->experts[e];
		CHECK(x->gate.rows == s->Ie && x->gate.cols == s->H && x->up.rows == s->Ie && x->down.rows == s->H &&
		              x->down.cols == s->Ie, "%s: expert %d shape", what, e);
		/* element (r, c) of a view is element r*cols+c of its source tensor (pattern i % 200) */
		int64_t gi = s->fused ? ((int64_t)e * 2 * s->Ie + 1) * s->H + 2 : (int64_t)1 * s->H + 2;
		int64_t ui = s->fused ? ((int64_t)e * 2 * s->Ie + s->Ie + 1) * s->H + 2 : gi;
		int64_t di = s->fused ? ((int64_t)e * s->H + 3) * s->Ie + 1 : (int64_t)3 * s->Ie + 1;
		CHECK(pv_tensor_get(&x->gate, 1, 2) == (float)(gi % 200), "%s: expert %d gate slice", what, e);
		CHECK(pv_tensor_get(&x->up, 1, 2) == (float)(ui % 200), "%s: expert %d up slice", what, e);
		CHECK(pv_tensor_get(&x->down, 3, 1) == (float)(di % 200), "%s: expert %d down slice", what, e);
	}
	if (s->Is) {
		CHECK(l->shexp.gate.rows == s->Is && l->shexp.down.cols == s->Is, "%s: shared expert", what);
		CHECK(l->shexp_gate && near(l->shexp_gate[s->H - 1], 0.375f), "%s: shared gate", what);
	} else {
		CHECK(!l->shexp.gate.data && !l->shexp_gate, "%s: no shared expert", what);
	}
}

/* Loads spec from a fresh directory and checks what the model reports. */
static void check_good(const char* name, const struct spec* s, int n_shards, int drop_mtp)
{
	struct tlist* tl = calloc(1, sizeof *tl);
	char err[512] = "";
	pv_model* m = NULL;
	struct pv_model_params mp = { 0 };
	const char* dir = case_dir(name);
	int64_t params, mtp;
	uint64_t bytes;

	gen_tensors(tl, s);
	if (drop_mtp)
		for (int i = tl->n - 1; i >= 0; i--)
			if (!strncmp(tl->v[i].name, "mtp.", 4)) drop_t(tl, tl->v[i].name);
	write_model(dir, s, tl, n_shards);
	int rc = pv_model_open(&m, dir, &mp, err, sizeof err);
	CHECK(rc == 0 && m, "%s: open failed: %s", name, err);
	if (rc || !m) {
		free(tl);
		return;
	}
	const struct pv_model_info* in = pv_model_get_info(m);
	const struct pv_config* c = &m->cfg;
	int has_mtp = s->mtp && !drop_mtp;
	expected_totals(tl, &params, &mtp, &bytes);

	CHECK(!strncmp(in->arch_name, s->type, strlen(in->arch_name)), "%s: arch_name %s", name, in->arch_name);
	CHECK(in->n_layers == s->L && in->hidden == s->H && in->vocab == s->V, "%s: sizes", name);
	CHECK(in->n_heads == s->nh && in->n_kv_heads == s->nkv && in->head_dim == head_dim(s), "%s: heads", name);
	CHECK(in->n_experts == s->E && in->n_experts_used == s->k, "%s: experts", name);
	CHECK(in->tied_embeddings == s->tied && in->max_context == 4096, "%s: tied/context", name);
	CHECK(in->n_mtp_layers == has_mtp && c->n_mtp_layers == has_mtp, "%s: mtp layers %d", name, in->n_mtp_layers);
	CHECK(in->n_params == params && in->n_params_mtp == mtp, "%s: params %lld (mtp %lld), expected %lld (%lld)",
	      name, (long long)in->n_params, (long long)in->n_params_mtp, (long long)params, (long long)mtp);
	CHECK(in->weight_bytes == bytes, "%s: weight bytes %llu, expected %llu", name,
	      (unsigned long long)in->weight_bytes, (unsigned long long)bytes);
	CHECK(!strcmp(in->dtype, !strcmp(s->dtype, "F16") ? "f16" : "bf16"), "%s: dtype %s", name, in->dtype);
	int n_attn = 0;
	for (int i = 0; i < s->L; i++) {
		n_attn += is_attn(s, i);
		CHECK(in->layer_pattern[i] == (is_attn(s, i) ? 'A' : 'L'), "%s: pattern %s", name, in->layer_pattern);
	}
	CHECK(in->n_attn_layers == n_attn && in->n_linear_layers == s->L - n_attn, "%s: layer counts", name);
	CHECK((int)strlen(in->layer_pattern) == s->L, "%s: pattern length", name);

	int hyb = is_hybrid(s);
	CHECK(c->head_dim == head_dim(s) && c->rope_dim == (hyb ? head_dim(s) / 4 : head_dim(s)), "%s: rope_dim %d",
	      name, c->rope_dim);
	CHECK(c->attn_bias == !strcmp(s->type, "qwen2") && c->qk_norm == !!strcmp(s->type, "qwen2"), "%s: flags", name);
	CHECK(c->attn_gate == hyb && c->norm_zc == hyb && c->v_head_tiled == 0, "%s: hybrid flags", name);
	CHECK(near(c->rope_theta, s->rope_params ? 1e7f : 1e6f) && near(c->rms_eps, 1e-6f), "%s: theta/eps", name);
	CHECK(c->norm_topk == 1, "%s: norm_topk", name);
	CHECK(c->lin_k_heads == s->Hk && c->lin_v_heads == s->Hv && c->conv_kernel == (hyb ? s->Kc : 0), "%s: deltanet",
	      name);

	const struct pv_weights* w = &m->w;
	CHECK(w->embed.rows == s->V && w->embed.cols == s->H, "%s: embed", name);
	CHECK(s->tied ? w->lm_head.data == w->embed.data : w->lm_head.data != w->embed.data && w->lm_head.rows == s->V,
	      "%s: lm_head", name);
	CHECK(near(w->final_norm[0], hyb ? 1.5f : 0.5f), "%s: final norm", name);
	CHECK(pv_tensor_get(&w->embed, 1, 3) == (float)((s->H + 3) % 200), "%s: embed element", name);
	for (int i = 0; i < s->L; i++) {
		char what[64];
		snprintf(what, sizeof what, "%s layer %d", name, i);
		check_layer(what, s, &w->layers[i], is_attn(s, i), layer_is_moe(s, i));
	}
	CHECK(!!w->mtp == has_mtp, "%s: mtp pointer", name);
	if (w->mtp) {
		char what[64];
		snprintf(what, sizeof what, "%s mtp", name);
		CHECK(w->mtp->fc.rows == s->H && w->mtp->fc.cols == 2 * s->H, "%s: mtp fc", name);
		CHECK(near(w->mtp->norm_emb[0], 1.5f) && near(w->mtp->norm_hidden[0], 1.5f) &&
		              near(w->mtp->norm_out[0], 1.5f), "%s: mtp norms", name);
		check_layer(what, s, &w->mtp->layer, 1, is_moe(s));
	}
	pv_model_close(m);
	free(tl);
}

TEST_CASE(good_models)
{
	struct spec s;

	check_good("qwen2", &SPEC_QWEN2, 1, 0);
	check_good("qwen3_f16", &SPEC_QWEN3, 1, 0);
	check_good("qwen3_moe_per_expert", &SPEC_QWEN3_MOE, 1, 0);
	s = SPEC_QWEN3_MOE;
	s.fused = 1;
	s.rope_params = 1;
	check_good("qwen3_moe_fused", &s, 1, 0);
	check_good("qwen3_5_wrapper_mtp", &SPEC_QWEN3_5, 1, 0);
	check_good("qwen3_5_no_mtp_tensors", &SPEC_QWEN3_5, 1, 1);
	check_good("qwen3_5_moe_wrapper_fused", &SPEC_QWEN3_5_MOE, 1, 0);
	s = SPEC_QWEN3_5_MOE;
	s.fused = 0;
	s.tied = 1;
	s.layer_types = 1;
	check_good("qwen3_5_moe_per_expert_tied", &s, 1, 0);
	check_good("qwen3_next_sharded", &SPEC_QWEN3_NEXT, 3, 0);
	s = SPEC_QWEN3_5;
	s.type = "qwen3_5_text"; /* flat text-only config, "model." prefix */
	s.wrapper = 0;
	check_good("qwen3_5_text", &s, 2, 0);
}

/* Bad model directories --------------------------------------------------------------------- */

/* Opens dir, which must fail with a message containing every non-NULL string. */
static void expect_fail(const char* what, const char* dir, const char* s1, const char* s2, const char* s3)
{
	char err[512] = "";
	pv_model* m = NULL;
	int rc = pv_model_open(&m, dir, NULL, err, sizeof err);

	CHECK(rc < 0 && !m, "%s: opened a bad model", what);
	CHECK(!strchr(err, '\n') && strlen(err) > 0, "%s: message '%s'", what, err);
	const char* want[3] = { s1, s2, s3 };
	for (int i = 0; i < 3; i++)
		CHECK(!want[i] || strstr(err, want[i]), "%s: message '%s' lacks '%s'", what, err, want[i]);
	if (m) pv_model_close(m);
}

enum mutation { DROP, EXTRA, RESHAPE, REDTYPE, MISALIGN };

struct tensor_case {
	const char* name;
	const struct spec* spec;
	enum mutation op;
	const char* tensor;
	const char* expect;
};

TEST_CASE(bad_tensors)
{
	static const struct tensor_case cases[] = {
		{ "missing_down", &SPEC_QWEN3_MOE, DROP, "model.layers.1.mlp.down_proj.weight", "expected shape [8, 12]" },
		{ "missing_expert", &SPEC_QWEN3_MOE, DROP, "model.layers.2.mlp.experts.3.up_proj.weight", "missing" },
		{ "missing_embed", &SPEC_QWEN2, DROP, "model.embed_tokens.weight", "missing" },
		{ "missing_bias", &SPEC_QWEN2, DROP, "model.layers.1.self_attn.k_proj.bias", "expected shape [4]" },
		{ "missing_lm_head", &SPEC_QWEN3, DROP, "lm_head.weight", "missing" },
		{ "missing_a_log", &SPEC_QWEN3_5, DROP, "model.language_model.layers.0.linear_attn.A_log", "missing" },
		{ "missing_mtp_norm", &SPEC_QWEN3_5, DROP, "mtp.norm.weight", "missing" },
		{ "missing_mtp_expert", &SPEC_QWEN3_NEXT, DROP, "mtp.layers.0.mlp.experts.2.gate_proj.weight", "missing" },
		{ "missing_fused_down", &SPEC_QWEN3_5_MOE, DROP, "model.language_model.layers.1.mlp.experts.down_proj",
		  "expected shape [4, 8, 6]" },
		{ "missing_shared_gate", &SPEC_QWEN3_NEXT, DROP, "model.layers.3.mlp.shared_expert_gate.weight", "[1, 8]" },
		{ "missing_ba", &SPEC_QWEN3_NEXT, DROP, "model.layers.0.linear_attn.in_proj_ba.weight", "[4, 8]" },
		{ "extra_under_prefix", &SPEC_QWEN3, EXTRA, "model.layers.0.self_attn.extra.weight", "unexpected tensor" },
		{ "extra_layer", &SPEC_QWEN2, EXTRA, "model.layers.2.input_layernorm.weight", "unexpected tensor" },
		{ "extra_lm_head_bias", &SPEC_QWEN2, EXTRA, "lm_head.bias", "unexpected tensor" },
		{ "extra_mtp_on_qwen3", &SPEC_QWEN3, EXTRA, "mtp.fc.weight", "unexpected tensor" },
		{ "extra_expert", &SPEC_QWEN3_MOE, EXTRA, "model.layers.0.mlp.experts.4.up_proj.weight", "unexpected" },
		{ "extra_per_expert_beside_fused", &SPEC_QWEN3_5_MOE, EXTRA,
		  "model.language_model.layers.0.mlp.experts.0.up_proj.weight", "unexpected" },
		{ "extra_wrapper_text", &SPEC_QWEN3_5, EXTRA, "model.language_model.layers.0.linear_attn.conv1d.bias",
		  "unexpected" },
		{ "shape_q", &SPEC_QWEN3_5, RESHAPE, "model.language_model.layers.3.self_attn.q_proj.weight",
		  "expected [32, 8]" },
		{ "shape_conv", &SPEC_QWEN3_5, RESHAPE, "model.language_model.layers.0.linear_attn.conv1d.weight",
		  "expected [16, 1, 4]" },
		{ "shape_router", &SPEC_QWEN3_MOE, RESHAPE, "model.layers.0.mlp.gate.weight", "expected [4, 8]" },
		{ "shape_fused", &SPEC_QWEN3_5_MOE, RESHAPE, "model.language_model.layers.0.mlp.experts.gate_up_proj",
		  "expected [4, 12, 8]" },
		{ "shape_norm", &SPEC_QWEN2, RESHAPE, "model.norm.weight", "expected [8]" },
		{ "shape_mtp_fc", &SPEC_QWEN3_5, RESHAPE, "mtp.fc.weight", "expected [8, 16]" },
		{ "dtype_i64", &SPEC_QWEN3, REDTYPE, "model.layers.1.mlp.up_proj.weight", "unsupported dtype 'I64'" },
		{ "dtype_norm", &SPEC_QWEN3_5, REDTYPE, "model.language_model.norm.weight", "unsupported dtype" },
		{ "misaligned", &SPEC_QWEN2, MISALIGN, "model.embed_tokens.weight", "not aligned" },
	};
	struct tlist* tl = calloc(1, sizeof *tl);

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct tensor_case* k = &cases[i];
		const char* dir = case_dir(k->name);
		gen_tensors(tl, k->spec);
		struct tens* t = find_t(tl, k->tensor);
		json_t* cfg = gen_config(k->spec);
		write_config(dir, cfg);
		json_decref(cfg);
		switch (k->op) {
		case DROP: drop_t(tl, k->tensor); break;
		case EXTRA: add(tl, "BF16", 0.0f, S2(2, 2), "%s", k->tensor); break;
		case RESHAPE: t->shape[0] += 1; break;
		case REDTYPE: snprintf(t->dtype, sizeof t->dtype, "I64"); break;
		case MISALIGN: break;
		}
		write_st_subset(in_dir(dir, "model.safetensors"), tl, k->op != MISALIGN, 1, 0);
		expect_fail(k->name, dir, k->tensor, k->op == DROP ? dir : "model.safetensors", k->expect);
	}
	free(tl);
}

/* Sharded directories with a bad index. */
TEST_CASE(bad_index)
{
	static const struct {
		const char* name;
		const char* tensor; /* NULL: replace the whole index with text */
		const char* value;  /* JSON */
		const char* expect;
	} cases[] = {
		{ "index_parent", "model.norm.weight", "\"../model-00001-of-00002.safetensors\"", "plain file name" },
		{ "index_subdir", "model.norm.weight", "\"sub/x.safetensors\"", "plain file name" },
		{ "index_absolute", "model.norm.weight", "\"/etc/passwd\"", "plain file name" },
		{ "index_dotdot", "model.norm.weight", "\"..\"", "plain file name" },
		{ "index_empty_name", "model.norm.weight", "\"\"", "plain file name" },
		{ "index_not_string", "model.norm.weight", "5", "non-string" },
		{ "index_wrong_shard", "model.embed_tokens.weight", "\"model-00002-of-00002.safetensors\"", "does not hold it" },
		{ "index_missing_shard", "model.norm.weight", "\"model-00003-of-00003.safetensors\"", "cannot open" },
		{ "index_phantom_tensor", "model.phantom.weight", "\"model-00001-of-00002.safetensors\"",
		  "does not hold it" },
		{ NULL, NULL, "{\"weight_map\": 3}", "weight_map" },
		{ NULL, NULL, "{\"weight_map\": {}}", "0 shards" },
		{ NULL, NULL, "[1, 2]", "weight_map" },
		{ NULL, NULL, "{\"weight_map\": {\"a\": \"x\",", "not valid JSON" },
	};
	struct tlist* tl = calloc(1, sizeof *tl);

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char name[64];
		snprintf(name, sizeof name, "%s", cases[i].name ? cases[i].name : "index_text");
		snprintf(name + strlen(name), sizeof name - strlen(name), "_%zu", i);
		const char* dir = case_dir(name);
		gen_tensors(tl, &SPEC_QWEN2);
		write_model(dir, &SPEC_QWEN2, tl, 2);
		const char* ip = in_dir(dir, "model.safetensors.index.json");
		if (cases[i].tensor) {
			json_error_t je;
			json_t* idx = json_load_file(ip, 0, &je);
			json_object_set_new(json_object_get(idx, "weight_map"), cases[i].tensor,
			                    json_loads(cases[i].value, JSON_DECODE_ANY, &je));
			json_dump_file(idx, ip, 0);
			json_decref(idx);
		} else {
			write_text(ip, cases[i].value);
		}
		if (strstr(cases[i].expect, "cannot open")) /* pv_st_open names the missing shard */
			expect_fail(name, dir, "model-00003-of-00003.safetensors", NULL, cases[i].expect);
		else
			expect_fail(name, dir, "model.safetensors.index.json", cases[i].tensor, cases[i].expect);
	}

	/* the same tensor in two shards */
	const char* dir = case_dir("index_duplicate");
	gen_tensors(tl, &SPEC_QWEN2);
	write_model(dir, &SPEC_QWEN2, tl, 2);
	struct tlist* one = calloc(1, sizeof *one);
	*one = *tl;
	one->n = 0;
	add(one, "BF16", 0.5f, S1(8), "model.layers.0.input_layernorm.weight");
	write_st(in_dir(dir, "model-00002-of-00002.safetensors"), one); /* overwrites shard 2 */
	expect_fail("index_duplicate", dir, "model.layers.0.input_layernorm.weight", "also appears", NULL);
	free(one);
	free(tl);

	/* no weights at all; not a directory */
	dir = case_dir("no_weights");
	json_t* cfg = gen_config(&SPEC_QWEN2);
	write_config(dir, cfg);
	json_decref(cfg);
	expect_fail("no_weights", dir, "neither model.safetensors", NULL, NULL);
	expect_fail("not_a_dir", in_dir(dir, "config.json"), "config.json", NULL, NULL);
	expect_fail("no_config", case_dir("empty"), "config.json", "cannot open", NULL);
}

/* Crafted safetensors containers ------------------------------------------------------------ */

struct st_case {
	const char* name;
	const char* header; /* written after the 8-byte length; NULL: raw bytes below */
	size_t data_len;    /* zero bytes after the header                             */
	const char* expect;
	const char* expect2;
};

static const struct st_case st_cases[] = {
	{ "bad_json", "{\"a\": {\"dtype\": \"F32\",", 0, "not valid JSON", "line 1" },
	{ "not_object", "[1, 2, 3]", 0, "must be a JSON object", NULL },
	{ "empty_header", "", 0, "not valid JSON", NULL },
	{ "offsets_out_of_range", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "'w'",
	  "past the data section" },
	{ "offsets_far_out", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,9223372036854775807]}}",
	  4, "'w'", "past the data section" },
	{ "overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap", "'a'" },
	{ "overlap_contained", "{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
	                       "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
	                       "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]}}", 16, "overlap", "'a'" },
	{ "size_mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "'w'", "need 12" },
	{ "huge_dims", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 0,
	  "'w'", "overflows" },
	{ "huge_bytes", "{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0, "'w'",
	  "overflows" },
	{ "negative_dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "'w'", "negative" },
	{ "real_dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "'w'", "integer" },
	{ "shape_not_array", "{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "'w'", "array" },
	{ "too_many_dims", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "'w'",
	  "dimensions" },
	{ "dtype_not_string", "{\"w\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'", "dtype" },
	{ "missing_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'w'", "data_offsets" },
	{ "missing_dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'w'", "dtype" },
	{ "offsets_three", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8, "'w'", "two integers" },
	{ "offsets_reversed", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, "'w'", "bad data_offsets" },
	{ "offsets_negative", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8, "'w'", "bad data_offsets" },
	{ "offsets_real", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4.0]}}", 8, "'w'", "two integers" },
	{ "offset_too_big", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999999]}}", 8,
	  "not valid JSON", NULL },
	{ "duplicate_name", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
	                    "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "duplicate", NULL },
	{ "unknown_field", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1, "'w'",
	  "unknown field 'x'" },
	{ "entry_not_object", "{\"w\": 5}", 0, "'w'", "object" },
	{ "metadata_not_object", "{\"__metadata__\": [1]}", 0, "__metadata__", "object" },
	{ "metadata_value_int", "{\"__metadata__\": {\"format\": 1}}", 0, "'format'", "string" },
	{ "f4_half_byte", "{\"w\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2, "'w'", "whole bytes" },
	{ "nul_in_name", "{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "not valid JSON",
	  NULL },
	{ "control_in_name", "{\"bad\\nname\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1, "bad?name",
	  "need 2" },
	{ "deep_nesting", NULL, 0, "not valid JSON", "depth" },
	{ "truncated", NULL, 0, "too short", NULL },
	{ "header_past_end", NULL, 0, "runs past the end", NULL },
	{ "header_len_max", NULL, 0, "runs past the end", NULL },
};

/* The bytes of a crafted file (malloc'd). */
static unsigned char* st_case_bytes(const struct st_case* k, size_t* len)
{
	unsigned char* b;

	if (!strcmp(k->name, "truncated")) {
		*len = 5;
		b = calloc(1, 8);
		b[0] = 2;
		return b;
	}
	if (!strcmp(k->name, "header_past_end") || !strcmp(k->name, "header_len_max")) {
		*len = 8 + 16;
		b = calloc(1, *len);
		memset(b, k->name[7] == 'l' ? 0xff : 0, 8);
		if (k->name[7] != 'l') b[1] = 0x10; /* 4096 */
		memcpy(b + 8, "{}              ", 16);
		return b;
	}
	char deep[4096];
	const char* h = k->header;
	if (!h) { /* far beyond jansson's nesting limit */
		memset(deep, '[', sizeof deep - 1);
		memcpy(deep, "{\"a\":", 5);
		deep[sizeof deep - 1] = 0;
		h = deep;
	}
	size_t hl = strlen(h);
	*len = 8 + hl + k->data_len;
	b = calloc(1, *len);
	for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(b + 8, h, hl);
	return b;
}

TEST_CASE(st_cases)
{
	for (size_t i = 0; i < sizeof st_cases / sizeof st_cases[0]; i++) {
		const struct st_case* k = &st_cases[i];
		struct pv_st_file f;
		char err[512] = "";
		size_t len;
		unsigned char* b = st_case_bytes(k, &len);

		int rc = pv_st_parse(&f, "crafted.safetensors", b, len, err, sizeof err);
		CHECK(rc < 0 && f.n_tensors == 0 && !f.tensors, "%s: parsed", k->name);
		CHECK(!strncmp(err, "crafted.safetensors: ", 21) && !strchr(err, '\n'), "%s: message '%s'", k->name, err);
		CHECK(strstr(err, k->expect), "%s: message '%s' lacks '%s'", k->name, err, k->expect);
		CHECK(!k->expect2 || strstr(err, k->expect2), "%s: message '%s' lacks '%s'", k->name, err, k->expect2);
		free(b);
	}
}

/* Files the parser must accept. */
TEST_CASE(st_good)
{
	const char* h = "{\"__metadata__\":{\"format\":\"pt\"},"
	                "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
	                "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
	                "\"e\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]},"
	                "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]},"
	                "\"q\":{\"dtype\":\"NEWTYPE\",\"shape\":[3],\"data_offsets\":[16,19]}}   ";
	size_t hl = strlen(h), len = 8 + hl + 19;
	unsigned char* b = calloc(1, len);
	struct pv_st_file f;
	char err[256] = "";

	for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(b + 8, h, hl);
	float one = 1.0f;
	memcpy(b + 8 + hl, &one, 4);
	b[8 + hl + 5] = 0x3c; /* f16 1.0 */
	int rc = pv_st_parse(&f, "good", b, len, err, sizeof err);
	CHECK(rc == 0 && f.n_tensors == 5, "good file: %s", err);
	for (int i = 0; i < f.n_tensors && !rc; i++) {
		const struct pv_st_tensor* t = &f.tensors[i];
		if (!strcmp(t->name, "s")) CHECK(t->ndim == 0 && t->numel == 1 && t->dtype == PV_F32, "scalar");
		if (!strcmp(t->name, "z")) CHECK(t->numel == 0 && t->nbytes == 0 && t->dtype == PV_BF16, "empty");
		if (!strcmp(t->name, "i")) CHECK(t->dtype == -1 && !strcmp(t->dtype_str, "I64"), "unsupported kept");
		if (!strcmp(t->name, "q")) CHECK(t->dtype == -1 && t->nbytes == 3, "unknown dtype kept");
		if (!strcmp(t->name, "e")) {
			struct pv_tensor v = { t->data, PV_F16, 1, 2 };
			CHECK(pv_tensor_get(&v, 0, 0) == 1.0f && pv_tensor_get(&v, 0, 1) == 0.0f, "f16 element");
		}
	}
	pv_st_close(&f);
	free(b);

	/* pv_st_open on a real file, and on a path that is not one */
	const char* dir = case_dir("st_open");
	struct tlist* tl = calloc(1, sizeof *tl);
	add(tl, "BF16", PATTERN, S2(3, 5), "m");
	write_st(in_dir(dir, "x.safetensors"), tl);
	rc = pv_st_open(&f, in_dir(dir, "x.safetensors"), err, sizeof err);
	CHECK(rc == 0 && f.n_tensors == 1 && f.map, "pv_st_open: %s", err);
	if (!rc) {
		struct pv_tensor v = { f.tensors[0].data, PV_BF16, 3, 5 };
		CHECK(pv_tensor_get(&v, 2, 4) == 14.0f, "mapped element");
		float row[5];
		pv_tensor_row_f32(&v, 1, row);
		CHECK(row[0] == 5.0f && row[4] == 9.0f, "row_f32");
		pv_st_close(&f);
	}
	CHECK(pv_st_open(&f, dir, err, sizeof err) < 0 && strstr(err, "not a regular file"), "dir: %s", err);
	CHECK(pv_st_open(&f, in_dir(dir, "nope"), err, sizeof err) < 0 && strstr(err, "cannot open"), "missing: %s", err);
	free(tl);
}

/* Crafted config.json files ------------------------------------------------------------------ */

struct cfg_case {
	const char* name;
	const struct spec* base;
	const char* key;   /* dotted path into the generated config; NULL: raw text in value */
	const char* value; /* JSON; NULL deletes the key */
	const char* expect;
	const char* key2, *value2; /* a second change, when one key cannot break it alone */
};

static const struct cfg_case cfg_cases[] = {
	{ "missing_hidden", &SPEC_QWEN3, "hidden_size", NULL, "'hidden_size'", NULL, NULL },
	{ "missing_model_type", &SPEC_QWEN3, "model_type", NULL, "'model_type'", NULL, NULL },
	{ "unknown_model_type", &SPEC_QWEN3, "model_type", "\"llama\"", "unsupported model type 'llama'", NULL, NULL },
	{ "model_type_int", &SPEC_QWEN3, "model_type", "3", "'model_type': must be a string", NULL, NULL },
	{ "hidden_string", &SPEC_QWEN3, "hidden_size", "\"8\"", "'hidden_size': must be an integer", NULL, NULL },
	{ "hidden_real", &SPEC_QWEN3, "hidden_size", "8.0", "'hidden_size': must be an integer", NULL, NULL },
	{ "hidden_zero", &SPEC_QWEN3, "hidden_size", "0", "'hidden_size': 0 is out of range", NULL, NULL },
	{ "hidden_huge", &SPEC_QWEN3, "hidden_size", "9223372036854775807", "'hidden_size'", NULL, NULL },
	{ "layers_zero", &SPEC_QWEN3, "num_hidden_layers", "0", "'num_hidden_layers'", NULL, NULL },
	{ "layers_negative", &SPEC_QWEN3, "num_hidden_layers", "-3", "'num_hidden_layers'", NULL, NULL },
	{ "vocab_huge", &SPEC_QWEN3, "vocab_size", "33554432", "'vocab_size'", NULL, NULL },
	{ "heads_not_divisible", &SPEC_QWEN3, "num_key_value_heads", "3", "'num_key_value_heads'", NULL, NULL },
	{ "kv_missing", &SPEC_QWEN3, "num_key_value_heads", NULL, "'num_key_value_heads'", NULL, NULL },
	{ "qwen2_odd_heads", &SPEC_QWEN2, "num_attention_heads", "3", "'num_attention_heads'", NULL, NULL },
	{ "head_dim_string", &SPEC_QWEN3, "head_dim", "\"6\"", "'head_dim'", NULL, NULL },
	{ "eps_string", &SPEC_QWEN3, "rms_norm_eps", "\"x\"", "'rms_norm_eps': must be a number", NULL, NULL },
	{ "eps_negative", &SPEC_QWEN3, "rms_norm_eps", "-1e-6", "'rms_norm_eps'", NULL, NULL },
	{ "theta_negative", &SPEC_QWEN2, "rope_theta", "-5", "'rope_theta'", NULL, NULL },
	{ "rope_yarn", &SPEC_QWEN2, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}",
	  "unsupported rope scaling 'yarn'", NULL, NULL },
	{ "rope_legacy_type", &SPEC_QWEN2, "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2.0}",
	  "'rope_scaling.type': unsupported rope scaling 'dynamic'", NULL, NULL },
	{ "rope_params_linear", &SPEC_QWEN3_5, "text_config.rope_parameters.rope_type", "\"linear\"",
	  "'text_config.rope_parameters.rope_type': unsupported rope scaling 'linear'", NULL, NULL },
	{ "rope_params_not_object", &SPEC_QWEN3, "rope_parameters", "[1]", "'rope_parameters': must be an object", NULL, NULL },
	{ "rope_odd_dims", &SPEC_QWEN3_5, "text_config.rope_parameters.partial_rotary_factor", "0.2",
	  "'text_config.rope_parameters.partial_rotary_factor': 0.2 x head_dim 8 gives 1", NULL, NULL },
	{ "rope_factor_big", &SPEC_QWEN3, "rope_parameters.partial_rotary_factor", "1.5", "partial_rotary_factor", NULL, NULL },
	{ "sliding_window", &SPEC_QWEN2, "use_sliding_window", "true", "'use_sliding_window': unsupported", NULL, NULL },
	{ "sliding_not_bool", &SPEC_QWEN2, "use_sliding_window", "1", "'use_sliding_window': must be true or false", NULL, NULL },
	{ "attention_bias_qwen3", &SPEC_QWEN3, "attention_bias", "true", "'attention_bias': unsupported", NULL, NULL },
	{ "act_gelu", &SPEC_QWEN3, "hidden_act", "\"gelu\"", "'hidden_act': unsupported activation 'gelu'", NULL, NULL },
	{ "tie_string", &SPEC_QWEN3, "tie_word_embeddings", "\"yes\"", "'tie_word_embeddings'", NULL, NULL },
	{ "layer_types_short", &SPEC_QWEN3_5, "text_config.layer_types", "[\"linear_attention\"]",
	  "'text_config.layer_types': has 1 entries", NULL, NULL },
	{ "layer_types_bad_name", &SPEC_QWEN3_5, "text_config.layer_types",
	  "[\"linear_attention\",\"linear_attention\",\"sliding_attention\",\"full_attention\"]",
	  "unsupported layer type 'sliding_attention'", NULL, NULL },
	{ "layer_types_int", &SPEC_QWEN3_5, "text_config.layer_types", "[1,2,3,4]", "entry 0 must be a string", NULL, NULL },
	{ "layer_types_object", &SPEC_QWEN3_5, "text_config.layer_types", "{}", "'text_config.layer_types'", NULL, NULL },
	{ "layer_types_linear_qwen3", &SPEC_QWEN3, "layer_types", "[\"linear_attention\",\"full_attention\"]",
	  "'layer_types'", NULL, NULL },
	{ "interval_zero", &SPEC_QWEN3_5_MOE, "text_config.full_attention_interval", "0",
	  "'text_config.full_attention_interval'", NULL, NULL },
	{ "text_config_not_object", &SPEC_QWEN3_5, "text_config", "[]", "'text_config': must be an object", NULL, NULL },
	{ "text_model_type_mismatch", &SPEC_QWEN3_5, "text_config.model_type", "\"qwen3_5_moe_text\"",
	  "'text_config.model_type'", NULL, NULL },
	{ "text_missing_layers", &SPEC_QWEN3_5, "text_config.num_hidden_layers", NULL,
	  "'text_config.num_hidden_layers'", NULL, NULL },
	{ "experts_used_too_many", &SPEC_QWEN3_MOE, "num_experts_per_tok", "5", "'num_experts_per_tok': 5 is out of range", NULL, NULL },
	{ "experts_missing", &SPEC_QWEN3_MOE, "num_experts", NULL, "'num_experts'", NULL, NULL },
	{ "experts_negative", &SPEC_QWEN3_5_MOE, "text_config.num_local_experts", "-4", "'text_config.num_local_experts'", NULL, NULL },
	{ "moe_inter_missing", &SPEC_QWEN3_NEXT, "moe_intermediate_size", NULL, "'moe_intermediate_size'", NULL, NULL },
	{ "shared_inter_missing", &SPEC_QWEN3_NEXT, "shared_expert_intermediate_size", NULL,
	  "'shared_expert_intermediate_size'", NULL, NULL },
	{ "mlp_only_out_of_range", &SPEC_QWEN3_MOE, "mlp_only_layers", "[7]", "'mlp_only_layers'", NULL, NULL },
	{ "mlp_only_not_array", &SPEC_QWEN3_MOE, "mlp_only_layers", "7", "'mlp_only_layers'", NULL, NULL },
	{ "sparse_step_zero", &SPEC_QWEN3_MOE, "decoder_sparse_step", "0", "'decoder_sparse_step'", NULL, NULL },
	{ "dense_inter_missing", &SPEC_QWEN3_MOE, "intermediate_size", NULL, "'intermediate_size'", NULL, NULL },
	{ "norm_topk_string", &SPEC_QWEN3_MOE, "norm_topk_prob", "\"true\"", "'norm_topk_prob'", NULL, NULL },
	{ "lin_heads_not_multiple", &SPEC_QWEN3_NEXT, "linear_num_key_heads", "3", "'linear_num_value_heads'", NULL, NULL },
	{ "lin_heads_missing", &SPEC_QWEN3_NEXT, "linear_num_key_heads", NULL, "'linear_num_key_heads'", NULL, NULL },
	{ "conv_kernel_huge", &SPEC_QWEN3_NEXT, "linear_conv_kernel_dim", "100000", "'linear_conv_kernel_dim'", NULL, NULL },
	{ "mtp_two", &SPEC_QWEN3_5, "text_config.mtp_num_hidden_layers", "2", "at most 1", NULL, NULL },
	{ "derived_overflow", &SPEC_QWEN3, "head_dim", "65536", "too large", "num_attention_heads", "1024" },
	{ "attn_gate_string", &SPEC_QWEN3_5, "text_config.attn_output_gate", "\"no\"", "'text_config.attn_output_gate'", NULL, NULL },
	{ "top_array", NULL, NULL, "[{\"model_type\": \"qwen3\"}]", "must be a JSON object", NULL, NULL },
	{ "top_truncated", NULL, NULL, "{\"model_type\": \"qwen3\", \"hidden_size\": ", "not valid JSON", NULL, NULL },
	{ "duplicate_key", NULL, NULL, "{\"model_type\": \"qwen3\", \"model_type\": \"qwen2\"}", "duplicate", NULL, NULL },
	{ "empty_file", NULL, NULL, "", "not valid JSON", NULL, NULL },
	{ "nul_byte", NULL, NULL, "{\"model_type\": \"qwen\\u00003\"}", "not valid JSON", NULL, NULL },
};

/* Sets or deletes a dotted path in a config. */
static void mutate(json_t* root, const char* path, const char* value)
{
	char buf[128], *dot, *key = buf;
	json_t* o = root;
	json_error_t je;

	snprintf(buf, sizeof buf, "%s", path);
	while ((dot = strchr(key, '.'))) {
		*dot = 0;
		o = json_object_get(o, key);
		key = dot + 1;
	}
	if (!o) abort();
	if (value)
		json_object_set_new(o, key, json_loads(value, JSON_DECODE_ANY, &je));
	else
		json_object_del(o, key);
}

static char* cfg_case_text(const struct cfg_case* k)
{
	if (!k->key) return strdup(k->value);
	json_t* cfg = gen_config(k->base);
	mutate(cfg, k->key, k->value);
	if (k->key2) mutate(cfg, k->key2, k->value2);
	char* text = json_dumps(cfg, JSON_INDENT(1));
	json_decref(cfg);
	return text;
}

TEST_CASE(cfg_cases)
{
	for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
		const struct cfg_case* k = &cfg_cases[i];
		struct pv_config c;
		char err[512] = "";
		char* text = cfg_case_text(k);

		int rc = pv_config_parse_buffer(&c, "config.json", text, strlen(text), err, sizeof err);
		CHECK(rc < 0 && !c.layer_kind && !c.layer_moe, "%s: accepted", k->name);
		CHECK(!strncmp(err, "config.json: ", 13) && !strchr(err, '\n'), "%s: message '%s'", k->name, err);
		CHECK(strstr(err, k->expect), "%s: message '%s' lacks '%s'", k->name, err, k->expect);
		free(text);
	}
	/* one through the full open path: the message names the directory's config.json */
	const char* dir = case_dir("bad_config_open");
	write_text(in_dir(dir, "config.json"), "{\"model_type\": \"qwen3\"}");
	expect_fail("bad_config_open", dir, "/config.json", "'num_hidden_layers'", NULL);
}

/* Config details that the good models do not reach. */
TEST_CASE(cfg_details)
{
	struct pv_config c;
	char err[512];
	json_t* j;
	char* text;

	/* interval pattern, default partial rotary factor, top-level rope keys, default mtp count */
	j = gen_config(&SPEC_QWEN3_NEXT);
	json_object_set_new(j, "partial_rotary_factor", json_real(0.5));
	json_object_del(j, "num_nextn_predict_layers");
	json_object_set_new(j, "norm_topk_prob", json_false());
	json_object_set_new(j, "decoder_sparse_step", json_integer(2));
	json_object_set_new(j, "mlp_only_layers", json_pack("[i]", 3));
	text = json_dumps(j, 0);
	int rc = pv_config_parse_buffer(&c, "next.json", text, strlen(text), err, sizeof err);
	CHECK(rc == 0, "next details: %s", err);
	if (!rc) {
		CHECK(c.rope_dim == 4 && c.n_mtp_layers == 1 && c.norm_topk == 0, "next: rope %d mtp %d topk %d",
		      c.rope_dim, c.n_mtp_layers, c.norm_topk);
		CHECK(c.layer_kind[0] == PV_LAYER_LINEAR && c.layer_kind[3] == PV_LAYER_ATTN, "next: kinds");
		CHECK(!c.layer_moe[0] && c.layer_moe[1] && !c.layer_moe[2] && !c.layer_moe[3], "next: sparse step");
		CHECK(c.shared_inter == 5 && c.moe_inter == 6 && c.intermediate == 12, "next: widths");
	}
	pv_config_free(&c);
	free(text);
	json_decref(j);

	/* qwen3_moe defaults: norm_topk_prob False; attn_output_gate false on a hybrid */
	j = gen_config(&SPEC_QWEN3_MOE);
	json_object_del(j, "norm_topk_prob");
	text = json_dumps(j, 0);
	rc = pv_config_parse_buffer(&c, "moe.json", text, strlen(text), err, sizeof err);
	CHECK(rc == 0 && c.norm_topk == 0 && c.layer_moe[0] && !c.layer_moe[1], "qwen3_moe defaults: %s", err);
	pv_config_free(&c);
	free(text);
	json_decref(j);

	j = gen_config(&SPEC_QWEN3_5);
	mutate(j, "text_config.attn_output_gate", "false");
	mutate(j, "text_config.rope_parameters", "{\"full_attention\": {\"rope_theta\": 5000.0, \"rope_type\": \"default\"}}");
	text = json_dumps(j, 0);
	rc = pv_config_parse_buffer(&c, "q35.json", text, strlen(text), err, sizeof err);
	CHECK(rc == 0 && c.attn_gate == 0 && c.rope_theta == 5000.0f && c.rope_dim == 2 && c.tied == 1,
	      "qwen3_5 per-type rope / gate off: %s", err);
	pv_config_free(&c);
	free(text);
	json_decref(j);

	/* the outer tie flag decides for wrappers: absent outside -> False even if the inner says true */
	j = gen_config(&SPEC_QWEN3_5);
	json_object_del(j, "tie_word_embeddings");
	mutate(j, "text_config.tie_word_embeddings", "true");
	text = json_dumps(j, 0);
	rc = pv_config_parse_buffer(&c, "q35.json", text, strlen(text), err, sizeof err);
	CHECK(rc == 0 && c.tied == 0, "wrapper tie default: %s", err);
	pv_config_free(&c);
	free(text);
	json_decref(j);

	CHECK(!strcmp(pv_arch_name(PV_ARCH_QWEN3_5_MOE), "qwen3_5_moe") && pv_arch_is_hybrid(PV_ARCH_QWEN3_NEXT) &&
	              !pv_arch_is_hybrid(PV_ARCH_QWEN3_MOE), "arch helpers");
	CHECK(pv_config_parse(&c, "/nonexistent/config.json", err, sizeof err) < 0 && strstr(err, "cannot open"),
	      "missing config: %s", err);
}

/* Half precision ---------------------------------------------------------------------------- */

TEST_CASE(f16)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		int e = (h >> 10) & 31, m = h & 1023;
		float want = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25);
		if (h & 0x8000) want = -want;
		float got = pv_f16_to_f32((uint16_t)h);
		if (isnan(want) ? !isnan(got) : (got != want || signbit(got) != signbit(want))) bad++;
	}
	CHECK(bad == 0, "%d half values converted wrongly", bad);
	CHECK(pv_f16_to_f32(0x7bff) == 65504.0f && pv_f16_to_f32(0x0001) == 0x1p-24f, "f16 extremes");
	uint32_t u;
	float f = pv_f16_to_f32(0x7e01);
	memcpy(&u, &f, 4);
	CHECK(u == 0x7fc02000u, "nan payload kept: %08x", u);
	CHECK(pv_bf16_to_f32(0x3f80) == 1.0f && !strcmp(pv_dtype_name(PV_BF16), "bf16") &&
	              !strcmp(pv_dtype_name(PV_F32), "f32") && !strcmp(pv_dtype_name(PV_F16), "f16"), "bf16 / names");
	char p[8];
	CHECK(!strcmp(pv_printable(p, sizeof p, "abc\x01"), "abc?") && !strcmp(pv_printable(p, sizeof p, "0123456789"), "0123..."),
	      "printable: %s", p);
}

/* Corpus ------------------------------------------------------------------------------------ */

/* t_main runs the cases from the repository root */
static const char* corpus_root(void)
{
	const char* env = getenv("PV_CORPUS");
	return env ? env : "tests/corpus";
}

static void write_corpus(const char* root)
{
	char dir[512], path[768];

	mkdir(root, 0755);
	snprintf(dir, sizeof dir, "%s/safetensors", root);
	mkdir(dir, 0755);
	for (size_t i = 0; i < sizeof st_cases / sizeof st_cases[0]; i++) {
		size_t len;
		unsigned char* b = st_case_bytes(&st_cases[i], &len);
		snprintf(path, sizeof path, "%s/%s.safetensors", dir, st_cases[i].name);
		write_file(path, b, len);
		free(b);
	}
	snprintf(dir, sizeof dir, "%s/config", root);
	mkdir(dir, 0755);
	for (size_t i = 0; i < sizeof cfg_cases / sizeof cfg_cases[0]; i++) {
		char* text = cfg_case_text(&cfg_cases[i]);
		snprintf(path, sizeof path, "%s/%s.json", dir, cfg_cases[i].name);
		write_text(path, text);
		free(text);
	}
}

/* Every file under root/kind must fail cleanly with a one-line message naming it. */
static int replay(const char* root, const char* kind)
{
	char dir[512], path[1024], err[512];
	int n = 0;

	snprintf(dir, sizeof dir, "%s/%s", root, kind);
	DIR* d = opendir(dir);
	CHECK(d != NULL, "corpus directory %s missing", dir);
	if (!d) return 0;
	for (struct dirent* e; (e = readdir(d));) {
		if (e->d_name[0] == '.') continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		err[0] = 0;
		int rc;
		if (!strcmp(kind, "safetensors")) {
			struct pv_st_file f;
			rc = pv_st_open(&f, path, err, sizeof err);
			if (!rc) pv_st_close(&f);
		} else {
			struct pv_config c;
			rc = pv_config_parse(&c, path, err, sizeof err);
			if (!rc) pv_config_free(&c);
		}
		CHECK(rc < 0, "corpus file %s was accepted", path);
		CHECK(!strncmp(err, path, strlen(path)) && !strchr(err, '\n'), "corpus %s: message '%s'", path, err);
		n++;
	}
	closedir(d);
	return n;
}

TEST_CASE(corpus)
{
	const char* root = corpus_root();
	int n_st = replay(root, "safetensors");
	int n_cfg = replay(root, "config");
	CHECK(n_st >= (int)(sizeof st_cases / sizeof st_cases[0]) && n_cfg >= (int)(sizeof cfg_cases / sizeof cfg_cases[0]),
	      "corpus %s: %d safetensors, %d config files", root, n_st, n_cfg);
}

/* Valid inputs to seed the fuzzers with: the config.json and safetensors of every spec. */
static void write_seeds(const char* root)
{
	static const struct spec* specs[] = { &SPEC_QWEN2, &SPEC_QWEN3, &SPEC_QWEN3_MOE, &SPEC_QWEN3_5,
	                                      &SPEC_QWEN3_5_MOE, &SPEC_QWEN3_NEXT };
	char dir_st[512], dir_cfg[512], path[768];
	struct tlist* tl = calloc(1, sizeof *tl);

	mkdir(root, 0755);
	snprintf(dir_st, sizeof dir_st, "%s/safetensors", root);
	snprintf(dir_cfg, sizeof dir_cfg, "%s/config", root);
	mkdir(dir_st, 0755);
	mkdir(dir_cfg, 0755);
	for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
		json_t* cfg = gen_config(specs[i]);
		char* text = json_dumps(cfg, JSON_INDENT(2));
		snprintf(path, sizeof path, "%s/%s.json", dir_cfg, specs[i]->type);
		write_text(path, text);
		free(text);
		json_decref(cfg);
		gen_tensors(tl, specs[i]);
		snprintf(path, sizeof path, "%s/%s.safetensors", dir_st, specs[i]->type);
		write_st(path, tl);
	}
	free(tl);
}

static int setup(void)
{
	snprintf(g_tmp, sizeof g_tmp, "%s/pv_loader_XXXXXX", t_tmpdir());
	if (mkdtemp(g_tmp)) return 0;
	CHECK(0, "cannot create a temporary directory %s", g_tmp);
	return 1;
}

static void teardown(void)
{
	remove_tree(g_tmp);
}

int main(int argc, char** argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-corpus")) {
		write_corpus(argv[2]);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "--write-seeds")) {
		write_seeds(argv[2]);
		return 0;
	}
	return t_main(argc, argv, "test_loader", setup, teardown);
}
