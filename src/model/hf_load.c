/*
 * hf_load.c: find and map the safetensors shards of a Hugging Face directory, index their
 * tensors by name, and bind struct pv_weights with the shapes of shared/docs/qwen-models.md §8.1.
 */
#include "model/hf_load.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "format/json_util.h"
#include "format/safetensors.h"
#include "base/file.h"
#include "base/hash.h"
#include "base/util.h"

#define MAX_INDEX_BYTES (64 << 20)
#define MAX_SHARDS 65536

struct entry {
	const char* name; /* NULL: empty slot */
	struct pv_st_tensor* t;
	int shard;
};

struct pv_files {
	char* dir;
	struct pv_st_file* shards;
	int n_shards;
	struct entry* table; /* open addressing, cap a power of two, at most half full */
	size_t cap;
	int n_tensors;
};

/* Name index ---------------------------------------------------------------------------- */

static struct entry* slot(const struct pv_files* f, const char* name)
{
	size_t i = (size_t)pv_fnv1a_str(name) & (f->cap - 1);
	while (f->table[i].name && strcmp(f->table[i].name, name)) i = (i + 1) & (f->cap - 1);
	return &f->table[i];
}

const struct pv_st_tensor* pv_hf_find(const struct pv_files* f, const char* name)
{
	const struct entry* e = f->cap ? slot(f, name) : NULL;
	return e && e->name ? e->t : NULL;
}

static int build_index(struct pv_files* f, char* err, size_t errlen)
{
	size_t n = 0;

	for (int s = 0; s < f->n_shards; s++) n += (size_t)f->shards[s].n_tensors;
	if (n > INT32_MAX / 2) return pv_errf(err, errlen, "%s: too many tensors", f->dir);
	f->n_tensors = (int)n;
	for (f->cap = 16; f->cap < 2 * n; f->cap *= 2) {}
	f->table = pv_xcalloc(f->cap, sizeof *f->table);
	for (int s = 0; s < f->n_shards; s++) {
		for (int i = 0; i < f->shards[s].n_tensors; i++) {
			struct pv_st_tensor* t = &f->shards[s].tensors[i];
			struct entry* e = slot(f, t->name);
			if (e->name) {
				char pn[160];
				return pv_errf(err, errlen, "%s: tensor '%s' also appears in %s", f->shards[s].path,
				               pv_printable(pn, sizeof pn, t->name), f->shards[e->shard].path);
			}
			*e = (struct entry){ t->name, t, s };
		}
	}
	return 0;
}

/* Finding the shards -------------------------------------------------------------------- */

static char* join(const char* dir, const char* name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char* p = pv_xmalloc(n);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* A shard named by the index must be a plain file name inside the directory (HF cache snapshots
 * make it a symlink, which is fine). */
static int plain_name(const char* s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 255 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '/' || s[i] == '\\' || (unsigned char)s[i] < 0x20) return 0;
	return 1;
}

static int open_shard(struct pv_files* f, const char* name, char* err, size_t errlen)
{
	char* path = join(f->dir, name);
	int rc = pv_st_open(&f->shards[f->n_shards], path, err, errlen);
	free(path);
	if (!rc) f->n_shards++;
	return rc;
}

static int cmp_str(const void* a, const void* b)
{
	return strcmp(*(const char* const*)a, *(const char* const*)b);
}

static json_t* read_json(const char* path, char* err, size_t errlen)
{
	return pv_json_read_file(path, MAX_INDEX_BYTES, JSON_REJECT_DUPLICATES, err, errlen);
}

/* Every weight_map entry must name a plain shard file that really holds the tensor. */
static int check_weight_map(struct pv_files* f, const char* path, const json_t* map, char* err,
                            size_t errlen)
{
	const char* name;
	const json_t* v;
	char pn[160], ps[160];

	json_object_foreach((json_t*)map, name, v) {
		const struct entry* e = slot(f, name);
		const char* shard = json_string_value(v);
		const char* base = e->name ? strrchr(f->shards[e->shard].path, '/') + 1 : NULL;
		if (!base || strcmp(base, shard))
			return pv_errf(err, errlen, "%s: tensor '%s' is mapped to '%s' but that shard does not hold it",
			               path, pv_printable(pn, sizeof pn, name), pv_printable(ps, sizeof ps, shard));
	}
	return 0;
}

/* model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor: shard file}}. */
static int open_sharded(struct pv_files* f, const char* path, char* err, size_t errlen)
{
	const json_t *map, *v;
	const char* name;
	char pn[160], ps[160];
	int rc = -1;

	json_t* root = read_json(path, err, errlen);
	if (!root) return -1;
	map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
	if (!json_is_object(map)) {
		json_decref(root);
		return pv_errf(err, errlen, "%s: \"weight_map\" must be an object", path);
	}
	size_t n = json_object_size(map), k = 0, u = 0;
	const char** files = pv_xcalloc(n, sizeof *files);
	json_object_foreach((json_t*)map, name, v) {
		if (!json_is_string(v) || !plain_name(json_string_value(v))) {
			pv_errf(err, errlen, "%s: tensor '%s': shard must be a plain file name in the directory, not %s%s%s",
			        path, pv_printable(pn, sizeof pn, name), json_is_string(v) ? "'" : "a non-string",
			        json_is_string(v) ? pv_printable(ps, sizeof ps, json_string_value(v)) : "",
			        json_is_string(v) ? "'" : "");
			goto out;
		}
		files[k++] = json_string_value(v);
	}
	/* the distinct shard names, sorted */
	qsort(files, n, sizeof *files, cmp_str);
	for (k = 0; k < n; k++)
		if (!u || strcmp(files[u - 1], files[k])) files[u++] = files[k];
	if (u == 0 || u > MAX_SHARDS) {
		pv_errf(err, errlen, "%s: %zu shards (expected 1 to %d)", path, u, MAX_SHARDS);
		goto out;
	}
	f->shards = pv_xcalloc(u, sizeof *f->shards);
	for (k = 0; k < u; k++)
		if (open_shard(f, files[k], err, errlen)) goto out;
	rc = build_index(f, err, errlen);
	if (!rc) rc = check_weight_map(f, path, map, err, errlen);
out:
	free(files);
	json_decref(root);
	return rc;
}

int pv_hf_open(struct pv_files** out, const char* dir, char* err, size_t errlen)
{
	struct pv_files* f = pv_xcalloc(1, sizeof *f);
	int rc, e1, e2;

	*out = NULL;
	f->dir = pv_xstrdup(dir);
	char* single = join(dir, "model.safetensors");
	char* index = join(dir, "model.safetensors.index.json");
	/* a name that is there but cannot be used (a looping or dangling link, a FIFO) is reported as
	 * itself, not as missing */
	int ks = pv_path_kind(single, &e1), ki = pv_path_kind(index, &e2);
	if (pv_path_kind(dir, NULL) != PV_PATH_DIR) {
		rc = pv_errf(err, errlen, "%s: not a directory", dir);
	} else if (ks != PV_PATH_ABSENT) {
		f->shards = pv_xcalloc(1, sizeof *f->shards);
		rc = ks == PV_PATH_BROKEN ? pv_path_err(single, ks, e1, err, errlen) : open_shard(f, "model.safetensors", err, errlen);
		if (!rc) rc = build_index(f, err, errlen);
	} else if (ki != PV_PATH_ABSENT) {
		rc = ki == PV_PATH_FILE ? open_sharded(f, index, err, errlen) : pv_path_err(index, ki, e2, err, errlen);
	} else {
		rc = pv_errf(err, errlen, "%s: neither model.safetensors nor model.safetensors.index.json found", dir);
	}
	free(single);
	free(index);
	if (rc) {
		pv_hf_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

void pv_hf_close(struct pv_files* f)
{
	if (!f) return;
	for (int s = 0; s < f->n_shards; s++) pv_st_close(&f->shards[s]);
	free(f->shards);
	free(f->table);
	free(f->dir);
	free(f);
}

/* Binding ------------------------------------------------------------------------------- */

struct binder {
	struct pv_files* f;
	struct pv_owner* owner;
	const struct pv_config* c;
	struct pv_load_stats* st;
	char* err;
	size_t errlen;
	const char* prefix;   /* prepended to the names below: "model.", "model.layers.3.", "mtp." */
	char name[256];       /* the full name being bound                                      */
	unsigned dtypes_seen; /* bit per enum pv_dtype, matrix views only                       */
};

static void* own(struct binder* b, size_t n, size_t size) { return pv_own(b->owner, pv_xcalloc(n, size)); }

static const char* full_name(struct binder* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static const char* full_name(struct binder* b, const char* fmt, ...)
{
	va_list ap;
	size_t n = (size_t)snprintf(b->name, sizeof b->name, "%s", b->prefix);
	va_start(ap, fmt);
	vsnprintf(b->name + n, sizeof b->name - n, fmt, ap);
	va_end(ap);
	return b->name;
}

static void shape_str(char* buf, size_t len, int ndim, const int64_t* shape)
{
	size_t n = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < ndim && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
	if (n < len) snprintf(buf + n, len - n, "]");
}

static const struct entry* find(const struct binder* b, const char* name)
{
	const struct entry* e = slot(b->f, name);
	return e->name ? e : NULL;
}

/* Looks up b->name, checks its shape and dtype, marks it used and counts it. */
static struct pv_st_tensor* take(struct binder* b, int ndim, const int64_t* shape)
{
	const struct entry* e = find(b, b->name);
	char want[128], have[128];

	shape_str(want, sizeof want, ndim, shape);
	if (!e) {
		pv_errf(b->err, b->errlen, "%s: missing tensor '%s' (expected shape %s)", b->f->dir, b->name, want);
		return NULL;
	}
	struct pv_st_tensor* t = e->t;
	const char* file = b->f->shards[e->shard].path;
	if (t->ndim != ndim || memcmp(t->shape, shape, (size_t)ndim * sizeof *shape)) {
		shape_str(have, sizeof have, t->ndim, t->shape);
		pv_errf(b->err, b->errlen, "%s: tensor '%s' has shape %s, expected %s", file, b->name, have, want);
		return NULL;
	}
	if (t->dtype < 0) {
		pv_errf(b->err, b->errlen, "%s: tensor '%s': unsupported dtype '%s' (need BF16, F16 or F32)", file,
		        b->name, t->dtype_str);
		return NULL;
	}
	/* kernels read whole elements: the bytes must be aligned to the element size (the mapping is
	 * page-aligned, so this is a property of the header length and the offsets) */
	if ((uintptr_t)t->data % pv_dtype_size((enum pv_dtype)t->dtype)) {
		pv_errf(b->err, b->errlen, "%s: tensor '%s': data is not aligned to its %zu-byte elements", file,
		        b->name, pv_dtype_size((enum pv_dtype)t->dtype));
		return NULL;
	}
	t->used = 1;
	b->st->n_params += t->numel;
	b->st->weight_bytes += t->nbytes;
	if (!strncmp(b->name, "mtp.", 4)) b->st->n_params_mtp += t->numel;
	return t;
}

/* A matrix [rows, cols] as a view into the mapping. */
static int matrix(struct binder* b, struct pv_tensor* out, const char* suffix, int64_t rows, int64_t cols)
{
	const int64_t shape[2] = { rows, cols };
	full_name(b, "%s", suffix);
	struct pv_st_tensor* t = take(b, 2, shape);
	if (!t) return -1;
	*out = (struct pv_tensor){ t->data, (enum pv_dtype)t->dtype, rows, cols };
	b->dtypes_seen |= 1u << t->dtype;
	return 0;
}

/* A small tensor of any shape converted to a model-owned f32 array; plus_one applies the
 * zero-centred norm's (1 + w). */
static int small(struct binder* b, float** out, const char* suffix, int ndim, const int64_t* shape,
                 int plus_one)
{
	full_name(b, "%s", suffix);
	struct pv_st_tensor* t = take(b, ndim, shape);
	if (!t) return -1;
	struct pv_tensor v = { t->data, (enum pv_dtype)t->dtype, 1, t->numel };
	float* x = own(b, (size_t)t->numel, sizeof *x);
	pv_tensor_row_f32(&v, 0, x);
	if (plus_one)
		for (int64_t i = 0; i < t->numel; i++) x[i] += 1.0f;
	*out = x;
	return 0;
}

static int vector(struct binder* b, float** out, const char* suffix, int64_t n, int plus_one)
{
	return small(b, out, suffix, 1, &n, plus_one);
}

/* An RMSNorm weight [n]: (1 + w) on the hybrids (§2.1). */
static int norm(struct binder* b, float** out, const char* suffix, int64_t n)
{
	return vector(b, out, suffix, n, b->c->norm_zc);
}

/* Full (gated) attention, §3.1, §4.1, §6.3. */
static int bind_attention(struct binder* b, struct pv_layer* l)
{
	const struct pv_config* c = b->c;
	int64_t H = c->hidden, q = pv_cfg_q_dim(c), kv = pv_cfg_kv_dim(c);

	if (matrix(b, &l->wq, "self_attn.q_proj.weight", c->attn_gate ? 2 * q : q, H) ||
	    matrix(b, &l->wk, "self_attn.k_proj.weight", kv, H) ||
	    matrix(b, &l->wv, "self_attn.v_proj.weight", kv, H) ||
	    matrix(b, &l->wo, "self_attn.o_proj.weight", H, q))
		return -1;
	if (c->attn_bias && (vector(b, &l->bq, "self_attn.q_proj.bias", q, 0) ||
	                     vector(b, &l->bk, "self_attn.k_proj.bias", kv, 0) ||
	                     vector(b, &l->bv, "self_attn.v_proj.bias", kv, 0)))
		return -1;
	if (c->qk_norm && (norm(b, &l->q_norm, "self_attn.q_norm.weight", c->head_dim) ||
	                   norm(b, &l->k_norm, "self_attn.k_norm.weight", c->head_dim)))
		return -1;
	return 0;
}

/* Gated DeltaNet, §6.4: Qwen3-Next fuses the projections by key group, Qwen3.5 keeps four. */
static int bind_deltanet(struct binder* b, struct pv_layer* l)
{
	const struct pv_config* c = b->c;
	int64_t H = c->hidden, kd = pv_cfg_key_dim(c), vd = pv_cfg_value_dim(c), Hv = c->lin_v_heads;
	int64_t conv_dim = pv_cfg_conv_dim(c);
	const int64_t conv_shape[3] = { conv_dim, 1, c->conv_kernel };

	if (c->arch == PV_ARCH_QWEN3_NEXT) {
		if (matrix(b, &l->in_qkvz, "linear_attn.in_proj_qkvz.weight", 2 * kd + 2 * vd, H) ||
		    matrix(b, &l->in_ba, "linear_attn.in_proj_ba.weight", 2 * Hv, H))
			return -1;
	} else if (matrix(b, &l->in_qkv, "linear_attn.in_proj_qkv.weight", conv_dim, H) ||
	           matrix(b, &l->in_z, "linear_attn.in_proj_z.weight", vd, H) ||
	           matrix(b, &l->in_b, "linear_attn.in_proj_b.weight", Hv, H) ||
	           matrix(b, &l->in_a, "linear_attn.in_proj_a.weight", Hv, H)) {
		return -1;
	}
	/* conv1d.weight [conv_dim, 1, Kc] is stored as [conv_dim, Kc] */
	if (small(b, &l->conv_w, "linear_attn.conv1d.weight", 3, conv_shape, 0) ||
	    vector(b, &l->ssm_a, "linear_attn.A_log", Hv, 0) ||
	    vector(b, &l->dt_bias, "linear_attn.dt_bias", Hv, 0) ||
	    vector(b, &l->lin_norm, "linear_attn.norm.weight", c->lin_v_dim, 0) || /* plain w, §6.4 step 9 */
	    matrix(b, &l->out_proj, "linear_attn.out_proj.weight", H, vd))
		return -1;
	for (int64_t h = 0; h < Hv; h++) l->ssm_a[h] = -expf(l->ssm_a[h]); /* A = -exp(A_log) in f32 */
	return 0;
}

static int bind_swiglu(struct binder* b, struct pv_tensor* gate, struct pv_tensor* up,
                       struct pv_tensor* down, const char* base, int64_t inter)
{
	char name[128];
	int64_t H = b->c->hidden;

	snprintf(name, sizeof name, "%s.gate_proj.weight", base);
	if (matrix(b, gate, name, inter, H)) return -1;
	snprintf(name, sizeof name, "%s.up_proj.weight", base);
	if (matrix(b, up, name, inter, H)) return -1;
	snprintf(name, sizeof name, "%s.down_proj.weight", base);
	return matrix(b, down, name, H, inter);
}

/* Fused 3-D experts (transformers 5, Qwen3.5-MoE): gate_up_proj [E, 2*Ie, H] with rows [:Ie] the
 * gate and [Ie:] the up projection of each expert; down_proj [E, H, Ie]. Sliced into 2-D views. */
static int bind_fused_experts(struct binder* b, struct pv_expert* ex)
{
	const struct pv_config* c = b->c;
	int64_t E = c->n_experts, H = c->hidden, Ie = c->moe_inter;
	const int64_t gu_shape[3] = { E, 2 * Ie, H }, down_shape[3] = { E, H, Ie };

	full_name(b, "mlp.experts.gate_up_proj");
	struct pv_st_tensor* gu = take(b, 3, gu_shape);
	if (!gu) return -1;
	full_name(b, "mlp.experts.down_proj");
	struct pv_st_tensor* dn = take(b, 3, down_shape);
	if (!dn) return -1;
	size_t gs = pv_dtype_size((enum pv_dtype)gu->dtype), ds = pv_dtype_size((enum pv_dtype)dn->dtype);
	for (int64_t e = 0; e < E; e++) {
		const char* g = (const char*)gu->data + (size_t)(e * 2 * Ie * H) * gs;
		ex[e].gate = (struct pv_tensor){ g, (enum pv_dtype)gu->dtype, Ie, H };
		ex[e].up = (struct pv_tensor){ g + (size_t)(Ie * H) * gs, (enum pv_dtype)gu->dtype, Ie, H };
		ex[e].down = (struct pv_tensor){ (const char*)dn->data + (size_t)(e * H * Ie) * ds,
		                                 (enum pv_dtype)dn->dtype, H, Ie };
	}
	b->dtypes_seen |= 1u << gu->dtype | 1u << dn->dtype;
	return 0;
}

/* MoE block, §5.1 / §6.5: router, E experts (per-expert tensors or fused), optional gated
 * shared expert. */
static int bind_moe(struct binder* b, struct pv_layer* l)
{
	const struct pv_config* c = b->c;
	int64_t H = c->hidden, Is = c->shared_inter;
	const int64_t sg_shape[2] = { 1, H };

	if (matrix(b, &l->router, "mlp.gate.weight", c->n_experts, H)) return -1;
	l->experts = own(b, (size_t)c->n_experts, sizeof *l->experts);
	if (find(b, full_name(b, "mlp.experts.gate_up_proj"))) {
		if (bind_fused_experts(b, l->experts)) return -1;
	} else {
		for (int e = 0; e < c->n_experts; e++) {
			char base[64];
			struct pv_expert* x = &l->experts[e];
			snprintf(base, sizeof base, "mlp.experts.%d", e);
			if (bind_swiglu(b, &x->gate, &x->up, &x->down, base, c->moe_inter)) return -1;
		}
	}
	if (Is > 0 && (bind_swiglu(b, &l->shexp.gate, &l->shexp.up, &l->shexp.down, "mlp.shared_expert", Is) ||
	               small(b, &l->shexp_gate, "mlp.shared_expert_gate.weight", 2, sg_shape, 0)))
		return -1;
	return 0;
}

/* One decoder layer under prefix: norms, mixer, FFN (§2.5). */
static int bind_layer(struct binder* b, struct pv_layer* l, const char* prefix, int kind, int moe)
{
	int64_t H = b->c->hidden;

	b->prefix = prefix;
	if (norm(b, &l->attn_norm, "input_layernorm.weight", H) ||
	    norm(b, &l->ffn_norm, "post_attention_layernorm.weight", H))
		return -1;
	if (kind == PV_LAYER_ATTN ? bind_attention(b, l) : bind_deltanet(b, l)) return -1;
	if (moe) return bind_moe(b, l);
	return bind_swiglu(b, &l->ffn_gate, &l->ffn_up, &l->ffn_down, "mlp", b->c->intermediate);
}

static int has_prefix(const char* s, const char* p) { return !strncmp(s, p, strlen(p)); }

/* MTP head, §7.2: bound when the checkpoint has any mtp.* tensor (then all of it is required). */
static int bind_mtp(struct binder* b, struct pv_config* cfg, struct pv_weights* w)
{
	int64_t H = cfg->hidden;
	int present = 0;

	for (int s = 0; s < b->f->n_shards && !present; s++)
		for (int i = 0; i < b->f->shards[s].n_tensors && !present; i++)
			present = has_prefix(b->f->shards[s].tensors[i].name, "mtp.");
	if (!present || cfg->n_mtp_layers == 0) {
		cfg->n_mtp_layers = 0; /* stray mtp.* tensors are then reported as unexpected */
		return 0;
	}
	struct pv_mtp* m = w->mtp = own(b, 1, sizeof *w->mtp);
	b->prefix = "mtp.";
	if (matrix(b, &m->fc, "fc.weight", H, 2 * H) ||
	    norm(b, &m->norm_emb, "pre_fc_norm_embedding.weight", H) ||
	    norm(b, &m->norm_hidden, "pre_fc_norm_hidden.weight", H) ||
	    norm(b, &m->norm_out, "norm.weight", H))
		return -1;
	/* one full-attention layer with the model's FFN kind */
	return bind_layer(b, &m->layer, "mtp.layers.0.", PV_LAYER_ATTN, cfg->n_experts > 0);
}

/* Everything under the text prefix, lm_head.* and mtp.* must have been bound. */
static int check_unused(struct binder* b)
{
	for (int s = 0; s < b->f->n_shards; s++) {
		for (int i = 0; i < b->f->shards[s].n_tensors; i++) {
			const struct pv_st_tensor* t = &b->f->shards[s].tensors[i];
			if (t->used || has_prefix(t->name, "model.visual.")) continue;
			if (has_prefix(t->name, b->st->prefix) || has_prefix(t->name, "lm_head.") ||
			    has_prefix(t->name, "mtp.")) {
				char pn[160];
				return pv_errf(b->err, b->errlen, "%s: unexpected tensor '%s' (not part of a %s model)",
				               b->f->shards[s].path, pv_printable(pn, sizeof pn, t->name),
				               pv_arch_name(b->c->arch));
			}
		}
	}
	return 0;
}

static int bind_top(struct binder* b, struct pv_weights* w)
{
	const struct pv_config* c = b->c;

	b->prefix = b->st->prefix;
	if (matrix(b, &w->embed, "embed_tokens.weight", c->vocab, c->hidden) ||
	    norm(b, &w->final_norm, "norm.weight", c->hidden))
		return -1;
	b->prefix = "";
	if (!c->tied) return matrix(b, &w->lm_head, "lm_head.weight", c->vocab, c->hidden);
	w->lm_head = w->embed;
	if (find(b, "lm_head.weight")) { /* a redundant copy of a tied head: check it, count it once */
		struct pv_tensor dup;
		uint64_t bytes = b->st->weight_bytes;
		int64_t params = b->st->n_params;
		if (matrix(b, &dup, "lm_head.weight", c->vocab, c->hidden)) return -1;
		b->st->weight_bytes = bytes;
		b->st->n_params = params;
	}
	return 0;
}

int pv_hf_bind(struct pv_files* f, struct pv_config* cfg, struct pv_weights* w, struct pv_owner* owner,
               struct pv_load_stats* st, char* err, size_t errlen)
{
	struct binder b = { .f = f, .owner = owner, .c = cfg, .st = st, .err = err, .errlen = errlen, .prefix = "" };

	memset(w, 0, sizeof *w);
	memset(st, 0, sizeof *st);
	st->n_shards = f->n_shards;
	st->n_tensors = f->n_tensors;
	/* Qwen3.5/3.6 wrappers put the language model under model.language_model. */
	st->prefix = find(&b, "model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
	if (bind_top(&b, w)) return -1;

	w->layers = own(&b, (size_t)cfg->n_layers, sizeof *w->layers);
	for (int i = 0; i < cfg->n_layers; i++) {
		char prefix[64];
		snprintf(prefix, sizeof prefix, "%slayers.%d.", st->prefix, i);
		if (bind_layer(&b, &w->layers[i], prefix, cfg->layer_kind[i], cfg->layer_moe[i])) return -1;
	}
	if (bind_mtp(&b, cfg, w) || check_unused(&b)) return -1;

	unsigned d = b.dtypes_seen;
	st->dtype = d == 1u << PV_BF16 ? "bf16" : d == 1u << PV_F16 ? "f16" : d == 1u << PV_F32 ? "f32" : "mixed";
	return 0;
}

int pv_hf_tensor(const struct pv_files* f, int i, const char** name, struct pv_tensor* view)
{
	if (!f || i < 0) return 0;
	for (int s = 0; s < f->n_shards; s++) {
		if (i >= f->shards[s].n_tensors) {
			i -= f->shards[s].n_tensors;
			continue;
		}
		const struct pv_st_tensor* t = &f->shards[s].tensors[i];
		*name = t->name;
		memset(view, 0, sizeof *view);
		if (t->dtype < 0 || t->numel <= 0) return 1;
		int64_t cols = t->ndim ? t->shape[t->ndim - 1] : 1;
		*view = (struct pv_tensor){ t->data, (enum pv_dtype)t->dtype, t->numel / cols, cols };
		return 1;
	}
	return 0;
}

int pv_hf_mapping(const struct pv_files* f, int i, const void** ptr, size_t* len)
{
	if (!f || i < 0 || i >= f->n_shards) return 0;
	*ptr = f->shards[i].map;
	*len = f->shards[i].map_len;
	return 1;
}
