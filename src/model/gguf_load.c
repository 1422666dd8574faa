/*
 * gguf_load.c: binding a GGUF file's metadata and tensors to the engine's model structs.
 * See gguf_load.h for the conventions. Every tensor in the file must be used (an unexpected one
 * is an error, as for HF directories), except the tokenizer-only files' absence of weights is
 * reported as "no tensors".
 */
#include "model/gguf_load.h"
#include "model/config.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "text/tokenizer.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pv_gguf_model {
	struct pv_gguf g;
	struct pv_owner* owner; /* the model's: f32 vectors, expert tables, the layer array */
	unsigned char* used; /* [n_tensors] */
	char* arch;
};

struct gbind {
	struct pv_gguf_model* gm;
	struct pv_config* c;
	struct pv_load_stats* st;
	char* err;
	size_t errlen;
	int mixed;
	enum pv_dtype dtype;
	char key[256];
};

static void* own(struct pv_gguf_model* gm, void* p) { return pv_own(gm->owner, p); }

void pv_gguf_model_free(struct pv_gguf_model* gm)
{
	if (!gm) return;
	free(gm->used);
	free(gm->arch);
	pv_gguf_close(&gm->g);
	free(gm);
}

/* ---------------------------------------------------------------- settings --- */

static int key_u32(struct gbind* b, const char* suffix, int* out, int required, int def)
{
	char key[256];
	snprintf(key, sizeof key, "%s.%s", b->gm->arch, suffix);
	uint32_t v;
	if (!pv_gguf_find(&b->gm->g, key)) {
		if (required) return pv_errf(b->err, b->errlen, "%s: missing metadata key %s", b->gm->g.path, key);
		*out = def;
		return 0;
	}
	if (pv_gguf_get_u32(&b->gm->g, key, &v, b->err, b->errlen)) return -1;
	if (v > (1u << 24)) return pv_errf(b->err, b->errlen, "%s: %s = %u is out of range", b->gm->g.path, key, v);
	*out = (int)v;
	return 0;
}

/* "ARCH.suffix" in a buffer of b's (valid until the next call) */
static const char* arch_key(struct gbind* b, const char* suffix)
{
	snprintf(b->key, sizeof b->key, "%s.%s", b->gm->arch, suffix);
	return b->key;
}
#define ARCH_KEY(b, s) arch_key(b, s)

static int bad_key(struct gbind* b, const char* suffix, long long v, const char* why)
{
	return pv_errf(b->err, b->errlen, "%s: %s.%s = %lld %s", b->gm->g.path, b->gm->arch, suffix, v, why);
}

static int key_f32(struct gbind* b, const char* suffix, float* out, float def)
{
	char key[256];
	snprintf(key, sizeof key, "%s.%s", b->gm->arch, suffix);
	if (!pv_gguf_find(&b->gm->g, key)) {
		*out = def;
		return 0;
	}
	if (pv_gguf_get_f32(&b->gm->g, key, out, b->err, b->errlen)) return -1;
	if (!isfinite(*out) || *out <= 0)
		return pv_errf(b->err, b->errlen, "%s: %s = %g is out of range", b->gm->g.path, key, *out);
	return 0;
}

static const struct pv_gguf_tensor* tensor(struct gbind* b, const char* name)
{
	return pv_gguf_find_tensor(&b->gm->g, name);
}

static int read_config(struct gbind* b)
{
	struct pv_config* c = b->c;
	const char* a = b->gm->arch;
	const struct pv_arch_info* ai = pv_arch_from_gguf(a);
	char names[128];
	if (!ai)
		return pv_errf(b->err, b->errlen, "%s: general.architecture \"%s\" is not a Qwen architecture proven runs (%s)",
		               b->gm->g.path, a, pv_arch_list(1, names, sizeof names));
	c->arch = ai->arch;
	int hybrid = ai->hybrid, moe = ai->moe;
	int blocks, nextn;
	if (key_u32(b, "block_count", &blocks, 1, 0) || key_u32(b, "nextn_predict_layers", &nextn, 0, 0) ||
	    key_u32(b, "embedding_length", &c->hidden, 1, 0) || key_u32(b, "attention.head_count", &c->n_heads, 1, 0) ||
	    key_u32(b, "attention.head_count_kv", &c->n_kv_heads, 0, c->n_heads) ||
	    key_u32(b, "context_length", &c->max_pos, 1, 0) || key_u32(b, "feed_forward_length", &c->intermediate, 0, 0))
		return -1;
	if (nextn > 1 || nextn >= blocks)
		return pv_errf(b->err, b->errlen, "%s: nextn_predict_layers %d with block_count %d is not supported", b->gm->g.path, nextn, blocks);
	c->n_layers = blocks - nextn;
	c->n_mtp_layers = nextn;
	/* each key that is wrong is named with its value */
	if (c->hidden <= 0) return bad_key(b, "embedding_length", c->hidden, "must be at least 1");
	if (c->n_heads <= 0) return bad_key(b, "attention.head_count", c->n_heads, "must be at least 1");
	if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads)
		return bad_key(b, "attention.head_count_kv", c->n_kv_heads, "must be at least 1 and divide attention.head_count");
	if (c->max_pos <= 0) return bad_key(b, "context_length", c->max_pos, "must be at least 1");
	int has_kl = pv_gguf_find(&b->gm->g, ARCH_KEY(b, "attention.key_length")) != NULL;
	if (key_u32(b, "attention.key_length", &c->head_dim, 0, c->hidden / c->n_heads)) return -1;
	if (c->head_dim <= 0)
		return has_kl ? bad_key(b, "attention.key_length", c->head_dim, "must be at least 1")
		              : pv_errf(b->err, b->errlen, "%s: %s.attention.key_length is missing and embedding_length %d / head_count %d "
		                        "gives a head of 0 dimensions", b->gm->g.path, b->gm->arch, c->hidden, c->n_heads);
	int vlen;
	if (key_u32(b, "attention.value_length", &vlen, 0, c->head_dim)) return -1;
	if (vlen != c->head_dim)
		return pv_errf(b->err, b->errlen, "%s: %s.attention.value_length %d differs from attention.key_length %d (proven needs "
		               "equal key and value head dimensions)", b->gm->g.path, b->gm->arch, vlen, c->head_dim);
	if (key_u32(b, "rope.dimension_count", &c->rope_dim, 0, c->head_dim)) return -1;
	if (c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > c->head_dim)
		return pv_errf(b->err, b->errlen, "%s: rope.dimension_count %d does not fit head dim %d", b->gm->g.path, c->rope_dim, c->head_dim);
	if (key_f32(b, "rope.freq_base", &c->rope_theta, 10000.0f) || key_f32(b, "attention.layer_norm_rms_epsilon", &c->rms_eps, 1e-6f))
		return -1;
	char key[256];
	const char* s;
	uint64_t sl;
	snprintf(key, sizeof key, "%s.rope.scaling.type", a);
	if (pv_gguf_find(&b->gm->g, key) && !pv_gguf_get_str(&b->gm->g, key, &s, &sl, NULL, 0) && !(sl == 4 && !memcmp(s, "none", 4)))
		return pv_errf(b->err, b->errlen, "%s: unsupported rope scaling \"%.*s\"", b->gm->g.path, (int)(sl < 32 ? sl : 32), s);

	c->attn_bias = ai->attn_bias;
	c->qk_norm = ai->qk_norm;
	c->attn_gate = c->norm_zc = hybrid;
	c->v_head_tiled = ai->v_tiled;
	if (moe) {
		if (key_u32(b, "expert_count", &c->n_experts, 1, 0) || key_u32(b, "expert_used_count", &c->n_experts_used, 1, 0) ||
		    key_u32(b, "expert_feed_forward_length", &c->moe_inter, 1, 0) ||
		    key_u32(b, "expert_shared_feed_forward_length", &c->shared_inter, 0, 0))
			return -1;
		if (c->n_experts <= 0 || c->n_experts_used <= 0 || c->n_experts_used > c->n_experts)
			return pv_errf(b->err, b->errlen, "%s: bad expert counts %d/%d", b->gm->g.path, c->n_experts_used, c->n_experts);
		c->norm_topk = 1; /* llama.cpp renormalises the top-k weights for every Qwen MoE */
	}
	if (hybrid) {
		int inner;
		if (key_u32(b, "ssm.conv_kernel", &c->conv_kernel, 1, 0) || key_u32(b, "ssm.state_size", &c->lin_k_dim, 1, 0) ||
		    key_u32(b, "ssm.group_count", &c->lin_k_heads, 1, 0) || key_u32(b, "ssm.time_step_rank", &c->lin_v_heads, 1, 0) ||
		    key_u32(b, "ssm.inner_size", &inner, 1, 0))
			return -1;
		if (c->lin_v_heads <= 0 || c->lin_k_heads <= 0 || c->lin_v_heads % c->lin_k_heads || inner % c->lin_v_heads ||
		    c->conv_kernel < 1 || c->conv_kernel > 64 || c->lin_k_dim <= 0)
			return pv_errf(b->err, b->errlen, "%s: inconsistent ssm settings", b->gm->g.path);
		c->lin_v_dim = inner / c->lin_v_heads;
	}
	c->layer_kind = pv_xcalloc((size_t)c->n_layers, 1);
	c->layer_moe = pv_xcalloc((size_t)c->n_layers, 1);
	if (hybrid) {
		struct pv_gguf_array arr;
		snprintf(key, sizeof key, "%s.attention.recurrent_layers", a);
		int interval;
		if (pv_gguf_find(&b->gm->g, key)) {
			if (pv_gguf_get_arr(&b->gm->g, key, -1, &arr, b->err, b->errlen)) return -1;
			if (arr.n < (uint64_t)c->n_layers)
				return pv_errf(b->err, b->errlen, "%s: %s has %llu entries for %d layers", b->gm->g.path, key,
				               (unsigned long long)arr.n, c->n_layers);
			for (int i = 0; i < c->n_layers; i++) {
				int64_t v;
				if (pv_gguf_arr_i64(&arr, (uint64_t)i, &v)) return pv_errf(b->err, b->errlen, "%s: bad %s", b->gm->g.path, key);
				c->layer_kind[i] = v ? PV_LAYER_LINEAR : PV_LAYER_ATTN;
			}
		} else {
			if (key_u32(b, "full_attention_interval", &interval, 0, 4)) return -1;
			if (interval <= 0) return pv_errf(b->err, b->errlen, "%s: full_attention_interval %d", b->gm->g.path, interval);
			for (int i = 0; i < c->n_layers; i++) c->layer_kind[i] = (i + 1) % interval ? PV_LAYER_LINEAR : PV_LAYER_ATTN;
		}
	}
	for (int i = 0; i < c->n_layers; i++) {
		snprintf(key, sizeof key, "blk.%d.ffn_gate_inp.weight", i);
		c->layer_moe[i] = moe && tensor(b, key) != NULL;
	}
	const struct pv_gguf_tensor* emb = tensor(b, "token_embd.weight");
	if (!emb) return pv_errf(b->err, b->errlen, "%s: missing tensor token_embd.weight", b->gm->g.path);
	if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > PV_MAX_VOCAB)
		return pv_errf(b->err, b->errlen, "%s: tensor token_embd.weight has %d dimensions ne {%lld, %lld, %lld, %lld}, expected "
		               "2: {embedding_length %d, vocabulary of 1 to %d}", b->gm->g.path, emb->n_dims, (long long)emb->ne[0],
		               (long long)emb->ne[1], (long long)emb->ne[2], (long long)emb->ne[3], c->hidden, PV_MAX_VOCAB);
	c->vocab = (int)emb->ne[1];
	c->tied = tensor(b, "output.weight") == NULL;
	return pv_config_check(c, b->gm->g.path, b->err, b->errlen);
}

/* ---------------------------------------------------------------- tensors --- */

/* Takes tensor `name` with ggml shape {ne0, ne1, ne2} (0 = absent dim). Optional: *v stays empty
 * when missing. Matrices may be any supported type; vectors are converted to f32 by vec(). */
static int take(struct gbind* b, const char* name, int64_t ne0, int64_t ne1, int64_t ne2, int optional,
                const struct pv_gguf_tensor** out)
{
	const struct pv_gguf_tensor* t = tensor(b, name);
	*out = NULL;
	if (!t) {
		if (optional) return 0;
		return pv_errf(b->err, b->errlen, "%s: missing tensor %s (expected ne {%lld, %lld, %lld})", b->gm->g.path, name,
		               (long long)ne0, (long long)ne1, (long long)ne2);
	}
	int64_t want[4] = { ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1 };
	if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] || t->ne[3] != 1)
		return pv_errf(b->err, b->errlen, "%s: tensor %s has ne {%lld, %lld, %lld, %lld}, expected {%lld, %lld, %lld}",
		               b->gm->g.path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
		               (long long)t->ne[3], (long long)want[0], (long long)want[1], (long long)want[2]);
	b->gm->used[t - b->gm->g.tensors] = 1;
	b->st->n_params += t->n_elements;
	b->st->weight_bytes += t->nbytes;
	*out = t;
	return 0;
}

static int mat(struct gbind* b, const char* name, int64_t cols, int64_t rows, int optional, struct pv_tensor* v)
{
	const struct pv_gguf_tensor* t;
	memset(v, 0, sizeof(*v));
	if (take(b, name, cols, rows, 0, optional, &t)) return -1;
	if (!t) return 0;
	pv_gguf_tensor_view(t, v);
	if (b->dtype != v->type && b->st->n_params > t->n_elements) b->mixed = 1;
	b->dtype = v->type;
	return 0;
}

static int vec(struct gbind* b, const char* name, int64_t n, int optional, float** out)
{
	const struct pv_gguf_tensor* t;
	*out = NULL;
	if (take(b, name, n, 0, 0, optional, &t)) return -1;
	if (!t) return 0;
	struct pv_tensor v;
	pv_gguf_tensor_view(t, &v);
	float* f = own(b->gm, pv_xmalloc(sizeof(float) * (size_t)n));
	if (!f) return pv_errf(b->err, b->errlen, "out of memory");
	pv_tensor_row_f32(&v, 0, f);
	*out = f;
	return 0;
}

/* 3-D expert tensor {cols, rows, E} -> E row views. */
static int experts(struct gbind* b, const char* name, int64_t cols, int64_t rows, int E, struct pv_expert* ex,
                   size_t field)
{
	const struct pv_gguf_tensor* t;
	if (take(b, name, cols, rows, E, 0, &t)) return -1;
	struct pv_tensor v;
	pv_gguf_tensor_view(t, &v);
	size_t slab = pv_dtype_row_bytes(v.type, cols) * (size_t)rows;
	for (int e = 0; e < E; e++) {
		struct pv_tensor* dst = (struct pv_tensor*)((char*)&ex[e] + field);
		*dst = (struct pv_tensor){ (const char*)t->data + (size_t)e * slab, v.type, rows, cols };
	}
	return 0;
}

static int bind_layer(struct gbind* b, struct pv_layer* l, int i, int kind, int moe)
{
	const struct pv_config* c = b->c;
	char n[128];
	int64_t H = c->hidden, hd = c->head_dim, qd = (int64_t)c->n_heads * hd, kvd = (int64_t)c->n_kv_heads * hd;
	int hybrid = pv_arch_is_hybrid(c->arch);
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, i), n)
	if (vec(b, NAME("attn_norm.weight"), H, 0, &l->attn_norm)) return -1;
	snprintf(n, sizeof n, "blk.%d.%s", i, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight");
	if (vec(b, n, H, 0, &l->ffn_norm)) return -1;
	if (kind == PV_LAYER_ATTN) {
		if (mat(b, NAME("attn_q.weight"), H, c->attn_gate ? 2 * qd : qd, 0, &l->wq) ||
		    mat(b, NAME("attn_k.weight"), H, kvd, 0, &l->wk) || mat(b, NAME("attn_v.weight"), H, kvd, 0, &l->wv) ||
		    mat(b, NAME("attn_output.weight"), qd, H, 0, &l->wo))
			return -1;
		if (c->attn_bias && (vec(b, NAME("attn_q.bias"), qd, 0, &l->bq) || vec(b, NAME("attn_k.bias"), kvd, 0, &l->bk) ||
		                     vec(b, NAME("attn_v.bias"), kvd, 0, &l->bv)))
			return -1;
		if (c->qk_norm && (vec(b, NAME("attn_q_norm.weight"), hd, 0, &l->q_norm) || vec(b, NAME("attn_k_norm.weight"), hd, 0, &l->k_norm)))
			return -1;
	} else {
		int64_t kd = pv_cfg_key_dim(c), vd = pv_cfg_value_dim(c), cd = pv_cfg_conv_dim(c), Hv = c->lin_v_heads;
		if (tensor(b, NAME("ssm_in.weight"))) { /* legacy qwen3next: the unsplit, group-major in_proj_qkvz */
			if (mat(b, n, H, 2 * kd + 2 * vd, 0, &l->in_qkvz)) return -1;
		} else if (mat(b, NAME("attn_qkv.weight"), H, cd, 0, &l->in_qkv) || mat(b, NAME("attn_gate.weight"), H, vd, 0, &l->in_z)) {
			return -1;
		}
		if (c->arch == PV_ARCH_QWEN3_NEXT) {
			if (mat(b, NAME("ssm_ba.weight"), H, 2 * Hv, 0, &l->in_ba)) return -1;
		} else if (mat(b, NAME("ssm_beta.weight"), H, Hv, 0, &l->in_b) || mat(b, NAME("ssm_alpha.weight"), H, Hv, 0, &l->in_a)) {
			return -1;
		}
		const struct pv_gguf_tensor* cw;
		if (take(b, NAME("ssm_conv1d.weight"), c->conv_kernel, cd, 0, 0, &cw)) return -1;
		struct pv_tensor cv;
		pv_gguf_tensor_view(cw, &cv);
		l->conv_w = own(b->gm, pv_xmalloc(sizeof(float) * (size_t)(cd * c->conv_kernel)));
		for (int64_t r = 0; r < cd; r++) pv_tensor_row_f32(&cv, r, l->conv_w + r * c->conv_kernel);
		if (vec(b, NAME("ssm_dt.bias"), Hv, 0, &l->dt_bias) || vec(b, NAME("ssm_a"), Hv, 0, &l->ssm_a) ||
		    vec(b, NAME("ssm_norm.weight"), c->lin_v_dim, 0, &l->lin_norm) ||
		    mat(b, NAME("ssm_out.weight"), vd, H, 0, &l->out_proj))
			return -1;
	}
	if (moe) {
		int E = c->n_experts;
		int64_t Ie = c->moe_inter;
		if (mat(b, NAME("ffn_gate_inp.weight"), H, E, 0, &l->router)) return -1;
		l->experts = own(b->gm, pv_xcalloc((size_t)E, sizeof(struct pv_expert)));
		if (tensor(b, NAME("ffn_gate_up_exps.weight"))) {
			/* fused {H, 2 Ie, E}: per expert, rows [0, Ie) gate and [Ie, 2 Ie) up */
			if (experts(b, n, H, 2 * Ie, E, l->experts, offsetof(struct pv_expert, gate))) return -1;
			for (int e = 0; e < E; e++) {
				l->experts[e].gate.rows = Ie;
				l->experts[e].up = l->experts[e].gate;
				l->experts[e].up.data = (const char*)l->experts[e].gate.data + pv_dtype_row_bytes(l->experts[e].gate.type, H) * (size_t)Ie;
			}
		} else if (experts(b, NAME("ffn_gate_exps.weight"), H, Ie, E, l->experts, offsetof(struct pv_expert, gate)) ||
		           experts(b, NAME("ffn_up_exps.weight"), H, Ie, E, l->experts, offsetof(struct pv_expert, up))) {
			return -1;
		}
		if (experts(b, NAME("ffn_down_exps.weight"), Ie, H, E, l->experts, offsetof(struct pv_expert, down))) return -1;
		if (c->shared_inter) {
			int64_t Is = c->shared_inter;
			if (mat(b, NAME("ffn_gate_shexp.weight"), H, Is, 0, &l->shexp.gate) ||
			    mat(b, NAME("ffn_up_shexp.weight"), H, Is, 0, &l->shexp.up) ||
			    mat(b, NAME("ffn_down_shexp.weight"), Is, H, 0, &l->shexp.down) ||
			    vec(b, NAME("ffn_gate_inp_shexp.weight"), H, 0, &l->shexp_gate))
				return -1;
		}
	} else {
		int64_t I = c->intermediate;
		if (I <= 0) return pv_errf(b->err, b->errlen, "%s: layer %d is dense but feed_forward_length is missing", b->gm->g.path, i);
		if (mat(b, NAME("ffn_gate.weight"), H, I, 0, &l->ffn_gate) || mat(b, NAME("ffn_up.weight"), H, I, 0, &l->ffn_up) ||
		    mat(b, NAME("ffn_down.weight"), I, H, 0, &l->ffn_down))
			return -1;
	}
#undef NAME
	return 0;
}

static int bind_mtp(struct gbind* b, struct pv_weights* w)
{
	const struct pv_config* c = b->c;
	int L = c->n_layers;
	char n[128];
	struct pv_mtp* mt = own(b->gm, pv_xcalloc(1, sizeof(*mt)));
	int64_t H = c->hidden;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, L), n)
	if (mat(b, NAME("nextn.eh_proj.weight"), 2 * H, H, 0, &mt->fc) || vec(b, NAME("nextn.enorm.weight"), H, 0, &mt->norm_emb) ||
	    vec(b, NAME("nextn.hnorm.weight"), H, 0, &mt->norm_hidden) ||
	    vec(b, NAME("nextn.shared_head_norm.weight"), H, 0, &mt->norm_out))
		return -1;
	struct pv_tensor opt;
	if (mat(b, NAME("nextn.embed_tokens.weight"), H, c->vocab, 1, &opt) || mat(b, NAME("nextn.shared_head_head.weight"), H, c->vocab, 1, &opt))
		return -1;
#undef NAME
	int moe = c->n_experts > 0;
	if (bind_layer(b, &mt->layer, L, PV_LAYER_ATTN, moe)) return -1;
	w->mtp = mt;
	return 0;
}

/* -------------------------------------------------------------- text side --- */

static int load_text(struct pv_model* m, struct pv_gguf_model* gm, char* err, size_t errlen)
{
	const struct pv_gguf* g = &gm->g;
	const char* s;
	uint64_t sl;
	if (!pv_gguf_find(g, "tokenizer.ggml.tokens")) return 0; /* no tokenizer in this file */
	if (pv_gguf_get_str(g, "tokenizer.ggml.model", &s, &sl, err, errlen)) return -1;
	if (!(sl == 4 && !memcmp(s, "gpt2", 4)))
		return pv_errf(err, errlen, "%s: tokenizer.ggml.model \"%.*s\" is not the byte-level BPE (gpt2) Qwen uses", g->path,
		               (int)(sl < 32 ? sl : 32), s);
	char pre[32] = "qwen2";
	if (pv_gguf_find(g, "tokenizer.ggml.pre")) {
		if (pv_gguf_get_str(g, "tokenizer.ggml.pre", &s, &sl, err, errlen)) return -1;
		snprintf(pre, sizeof pre, "%.*s", (int)(sl < 31 ? sl : 31), s);
	}
	if (strcmp(pre, "qwen2") && strcmp(pre, "qwen35"))
		return pv_errf(err, errlen, "%s: tokenizer.ggml.pre \"%s\" is not a Qwen pre-tokenizer (qwen2, qwen35)", g->path, pre);
	struct pv_gguf_array tok, typ, mer;
	int has_types = pv_gguf_find(g, "tokenizer.ggml.token_type") != NULL;
	if (pv_gguf_get_arr(g, "tokenizer.ggml.tokens", PV_GGUF_STRING, &tok, err, errlen) ||
	    pv_gguf_get_arr(g, "tokenizer.ggml.merges", PV_GGUF_STRING, &mer, err, errlen) ||
	    (has_types && pv_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &typ, err, errlen)))
		return -1;
	if (tok.n > (1u << 24) || mer.n > (1u << 24) || (has_types && typ.n != tok.n))
		return pv_errf(err, errlen, "%s: tokenizer arrays have inconsistent sizes", g->path);
	/* NUL-terminated copies for the tokenizer builder: one arena for all strings */
	size_t bytes = 0;
	for (uint64_t i = 0; i < tok.n; i++) pv_gguf_arr_str(&tok, i, &s, &sl), bytes += sl + 1;
	for (uint64_t i = 0; i < mer.n; i++) pv_gguf_arr_str(&mer, i, &s, &sl), bytes += sl + 1;
	char* arena = malloc(bytes ? bytes : 1);
	const char** toks = malloc(sizeof(char*) * (tok.n ? tok.n : 1));
	const char** mers = malloc(sizeof(char*) * (mer.n ? mer.n : 1));
	int* types = has_types ? malloc(sizeof(int) * (tok.n ? tok.n : 1)) : NULL;
	int rc = -1;
	if (!arena || !toks || !mers || (has_types && !types)) {
		pv_errf(err, errlen, "out of memory reading the tokenizer");
		goto done;
	}
	char* p = arena;
	for (uint64_t i = 0; i < tok.n; i++) {
		pv_gguf_arr_str(&tok, i, &s, &sl);
		memcpy(p, s, sl);
		p[sl] = 0;
		toks[i] = p;
		p += sl + 1;
		if (types) {
			int64_t v = 1;
			pv_gguf_arr_i64(&typ, i, &v);
			types[i] = (int)v;
		}
	}
	for (uint64_t i = 0; i < mer.n; i++) {
		pv_gguf_arr_str(&mer, i, &s, &sl);
		memcpy(p, s, sl);
		p[sl] = 0;
		mers[i] = p;
		p += sl + 1;
	}
	/* NFC as Hugging Face tokenizers apply it for Qwen (llama.cpp does not; see proven_text.h) */
	char msg[384];
	if (pv_tok_from_vocab(&m->tok, toks, types, (int)tok.n, mers, (int)mer.n, pre, PV_TOK_NFC, msg, sizeof msg)) {
		/* the key at fault: the builder's messages start with what they are about */
		const char* key = !strncmp(msg, "merge", 5) ? "tokenizer.ggml.merges"
		                  : strstr(msg, "unknown type") ? "tokenizer.ggml.token_type"
		                                                : "tokenizer.ggml.tokens";
		pv_errf(err, errlen, "%s: %s: %s", g->path, key, msg);
		goto done;
	}
	if (pv_tok_n_vocab(m->tok) > m->cfg.vocab) {
		pv_errf(err, errlen, "%s: the tokenizer has %d ids but token_embd has %d rows", g->path, pv_tok_n_vocab(m->tok), m->cfg.vocab);
		goto done;
	}
	uint32_t eos;
	if (pv_gguf_find(g, "tokenizer.ggml.eos_token_id") && !pv_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &eos, NULL, 0))
		pv_model_add_eos(m, (int32_t)eos);
	pv_model_add_eos(m, pv_tok_id(m->tok, "<|im_end|>"));
	pv_model_add_eos(m, pv_tok_id(m->tok, "<|endoftext|>"));
	if (pv_gguf_find(g, "tokenizer.chat_template") && !pv_gguf_get_str(g, "tokenizer.chat_template", &s, &sl, NULL, 0)) {
		m->chat_template = pv_xmalloc(sl + 1);
		memcpy(m->chat_template, s, sl);
		m->chat_template[sl] = 0;
	}
	rc = 0;
done:
	free(arena);
	free(toks);
	free(mers);
	free(types);
	return rc;
}

int pv_gguf_model_load(struct pv_model* m, const char* path, struct pv_load_stats* st, char* err, size_t errlen)
{
	struct pv_gguf_model* gm = pv_xcalloc(1, sizeof(*gm));
	m->gguf = gm;
	gm->owner = &m->owned;
	memset(st, 0, sizeof(*st));
	if (pv_gguf_open(&gm->g, path, err, errlen)) return -1;
	const char* s;
	uint64_t sl;
	if (pv_gguf_get_str(&gm->g, "general.architecture", &s, &sl, err, errlen)) return -1;
	gm->arch = pv_xmalloc(sl + 1);
	memcpy(gm->arch, s, sl);
	gm->arch[sl] = 0;
	gm->used = pv_xcalloc((size_t)gm->g.n_tensors + 1, 1);

	struct gbind b = { .gm = gm, .c = &m->cfg, .st = st, .err = err, .errlen = errlen, .dtype = PV_DTYPE_COUNT };
	if (read_config(&b)) return -1;
	struct pv_config* c = &m->cfg;
	struct pv_weights* w = &m->w;
	if (mat(&b, "token_embd.weight", c->hidden, c->vocab, 0, &w->embed) || vec(&b, "output_norm.weight", c->hidden, 0, &w->final_norm))
		return -1;
	if (c->tied) w->lm_head = w->embed;
	else if (mat(&b, "output.weight", c->hidden, c->vocab, 0, &w->lm_head)) return -1;
	w->layers = own(gm, pv_xcalloc((size_t)c->n_layers, sizeof(struct pv_layer)));
	for (int i = 0; i < c->n_layers; i++)
		if (bind_layer(&b, &w->layers[i], i, c->layer_kind[i], c->layer_moe[i])) return -1;
	int64_t before = st->n_params;
	if (c->n_mtp_layers && bind_mtp(&b, w)) return -1;
	st->n_params_mtp = st->n_params - before;
	for (int64_t i = 0; i < gm->g.n_tensors; i++)
		if (!gm->used[i])
			return pv_errf(err, errlen, "%s: unexpected tensor %s (not part of a %s model as configured)", path,
			               gm->g.tensors[i].name, gm->arch);
	st->dtype = b.mixed ? "mixed" : pv_dtype_name(b.dtype);
	st->n_shards = 1;
	st->n_tensors = (int)gm->g.n_tensors;
	st->prefix = "";
	return load_text(m, gm, err, errlen);
}

int pv_gguf_model_tensor(const struct pv_gguf_model* gm, int64_t i, const char** name, struct pv_tensor* view)
{
	if (!gm || i < 0 || i >= gm->g.n_tensors) return 0;
	*name = gm->g.tensors[i].name;
	pv_gguf_tensor_view(&gm->g.tensors[i], view);
	return 1;
}

int pv_gguf_model_mapping(const struct pv_gguf_model* gm, const void** ptr, size_t* len)
{
	if (!gm || !gm->g.map) return 0;
	*ptr = gm->g.map;
	*len = gm->g.map_len;
	return 1;
}
