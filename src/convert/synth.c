/*
 * synth.c: random-weight GGUF files with published Qwen shapes (synth.h). Three parts: the
 * presets, the plan (config -> tensor names, shapes and types, as gguf_load.c binds them), and
 * the writer (block generators on the thread pool, a writer thread streaming to the file).
 */
#include "convert/synth.h"
#include "model/config.h"
#include "format/gguf.h"
#include "format/gguf_write.h"
#include "base/pool.h"
#include "quant/quant.h"
#include "base/hash.h"
#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ presets --- */

/* Published shapes (shared/docs/qwen-models.md §3.3, §4.2, §5.2, §6.8; cross-checked with the
 * models' config.json). Hybrids: Hk = 16, dk = dv = 128, Kc = 4, hd = 256, R = 64, interval 4. */
#define Q2(n, m, L, H, nh, nkv, hd, I, V, tied, maxp) \
	{ n, "qwen2", m, PV_ARCH_QWEN2, L, H, nh, nkv, hd, I, V, tied, 0, 0, 0, 0, 0, 0, 0, 0, hd, 1e6f, maxp }
#define Q3(n, m, L, H, nh, nkv, hd, I, V, tied) \
	{ n, "qwen3", m, PV_ARCH_QWEN3, L, H, nh, nkv, hd, I, V, tied, 0, 0, 0, 0, 0, 0, 0, 0, hd, 1e6f, 40960 }
#define Q3M(n, m, L, H, nh, nkv, hd, I, E, k, Ie, V) \
	{ n, "qwen3moe", m, PV_ARCH_QWEN3_MOE, L, H, nh, nkv, hd, I, V, 0, E, k, Ie, 0, 0, 0, 0, 0, hd, 1e6f, 40960 }
#define Q35(n, m, L, H, nh, nkv, Hv, I, tied) \
	{ n, "qwen35", m, PV_ARCH_QWEN3_5, L, H, nh, nkv, 256, I, 248320, tied, 0, 0, 0, 0, 16, Hv, 128, 4, 64, 1e7f, 262144 }
#define Q35M(n, m, L, H, nh, nkv, Hv, E, k, Ie) \
	{ n, "qwen35moe", m, PV_ARCH_QWEN3_5_MOE, L, H, nh, nkv, 256, 0, 248320, 0, E, k, Ie, Ie, 16, Hv, 128, 4, 64, 1e7f, 262144 }

static const struct pv_synth_preset g_presets[] = {
	/* tiny: every K-quant row length a multiple of 256, 1024 tokens; value heads r = 2 */
	{ "tiny", "qwen2", "tiny qwen2", PV_ARCH_QWEN2, 2, 256, 4, 2, 64, 512, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 1e6f, 4096 },
	{ "tiny", "qwen3", "tiny qwen3", PV_ARCH_QWEN3, 2, 256, 4, 2, 64, 512, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 1e6f, 4096 },
	{ "tiny", "qwen3moe", "tiny qwen3moe", PV_ARCH_QWEN3_MOE, 2, 256, 4, 2, 64, 512, 1024, 0, 8, 2, 256, 0, 0, 0, 0, 0, 64, 1e6f, 4096 },
	{ "tiny", "qwen3next", "tiny qwen3next", PV_ARCH_QWEN3_NEXT, 4, 256, 2, 1, 128, 0, 1024, 0, 8, 2, 256, 256, 2, 4, 64, 4, 32, 1e7f, 4096 },
	{ "tiny", "qwen35", "tiny qwen35", PV_ARCH_QWEN3_5, 4, 256, 2, 1, 128, 512, 1024, 0, 0, 0, 0, 0, 2, 4, 64, 4, 32, 1e7f, 4096 },
	{ "tiny", "qwen35moe", "tiny qwen35moe", PV_ARCH_QWEN3_5_MOE, 4, 256, 2, 1, 128, 0, 1024, 0, 8, 2, 256, 256, 2, 4, 64, 4, 32, 1e7f, 4096 },

	Q2("qwen2.5-0.5b", "Qwen2.5-0.5B", 24, 896, 14, 2, 64, 4864, 151936, 1, 32768),
	Q2("qwen2.5-7b", "Qwen2.5-7B", 28, 3584, 28, 4, 128, 18944, 152064, 0, 131072),

	Q3("qwen3-0.6b", "Qwen3-0.6B", 28, 1024, 16, 8, 128, 3072, 151936, 1),
	Q3("qwen3-1.7b", "Qwen3-1.7B", 28, 2048, 16, 8, 128, 6144, 151936, 1),
	Q3("qwen3-4b", "Qwen3-4B", 36, 2560, 32, 8, 128, 9728, 151936, 1),
	Q3("qwen3-8b", "Qwen3-8B", 36, 4096, 32, 8, 128, 12288, 151936, 0),
	Q3("qwen3-14b", "Qwen3-14B", 40, 5120, 40, 8, 128, 17408, 151936, 0),
	Q3("qwen3-32b", "Qwen3-32B", 64, 5120, 64, 8, 128, 25600, 151936, 0),

	/* the dense intermediate_size of the MoE configs is unused but written, as convert does */
	Q3M("qwen3-30b-a3b", "Qwen3-30B-A3B", 48, 2048, 32, 4, 128, 6144, 128, 8, 768, 151936),
	Q3M("qwen3-235b-a22b", "Qwen3-235B-A22B", 94, 4096, 64, 4, 128, 12288, 128, 8, 1536, 151936),

	{ "qwen3-next-80b-a3b", "qwen3next", "Qwen3-Next-80B-A3B", PV_ARCH_QWEN3_NEXT, 48, 2048, 16, 2, 256, 0, 151936, 0, 512,
	  10, 512, 512, 16, 32, 128, 4, 64, 1e7f, 262144 },

	Q35("qwen3.5-0.8b", "Qwen3.5-0.8B", 24, 1024, 8, 2, 16, 3584, 1),
	Q35("qwen3.5-2b", "Qwen3.5-2B", 24, 2048, 8, 2, 16, 6144, 1),
	Q35("qwen3.5-4b", "Qwen3.5-4B", 32, 2560, 16, 4, 32, 9216, 1),
	Q35("qwen3.5-9b", "Qwen3.5-9B", 32, 4096, 16, 4, 32, 12288, 0),
	Q35("qwen3.5-27b", "Qwen3.5-27B / Qwen3.6-27B", 64, 5120, 24, 4, 48, 17408, 0),

	Q35M("qwen3.5-35b-a3b", "Qwen3.5-35B-A3B / Qwen3.6-35B-A3B", 40, 2048, 16, 2, 32, 256, 8, 512),
	Q35M("qwen3.6-35b-a3b", "Qwen3.6-35B-A3B (same shapes as Qwen3.5-35B-A3B)", 40, 2048, 16, 2, 32, 256, 8, 512),
	Q35M("qwen3.5-122b-a10b", "Qwen3.5-122B-A10B", 48, 3072, 32, 2, 64, 256, 8, 1024),
	Q35M("qwen3.5-397b-a17b", "Qwen3.5-397B-A17B", 60, 4096, 32, 2, 64, 512, 10, 1024),
};
#define N_PRESETS ((int)(sizeof g_presets / sizeof g_presets[0]))

const struct pv_synth_preset* pv_synth_presets(int* n)
{
	*n = N_PRESETS;
	return g_presets;
}

/* "qwen3_5_moe" -> "qwen35moe"; GGUF names pass through; NULL if unknown. */
static const char* arch_gguf(const char* a)
{
	for (int i = 0; i < PV_ARCH_COUNT; i++) {
		const char* g = pv_convert_arch_name(i);
		if (g && (!strcasecmp(a, g) || !strcasecmp(a, pv_arch_name((enum pv_arch)i)))) return g;
	}
	return NULL;
}

const struct pv_synth_preset* pv_synth_find(const char* arch, const char* name, char* err, size_t errlen)
{
	const char* ga = NULL;
	if (arch && !(ga = arch_gguf(arch))) {
		pv_errf(err, errlen, "unknown architecture \"%s\" (qwen2, qwen3, qwen3moe, qwen3next, qwen35, qwen35moe)", arch);
		return NULL;
	}
	const struct pv_synth_preset* hit = NULL;
	int n_hit = 0;
	for (int i = 0; i < N_PRESETS; i++)
		if ((!ga || !strcmp(ga, g_presets[i].arch)) && name && !strcasecmp(name, g_presets[i].name)) {
			hit = &g_presets[i];
			n_hit++;
		}
	if (n_hit == 1) return hit;
	char list[1024];
	size_t k = 0;
	list[0] = 0;
	for (int i = 0; i < N_PRESETS && k < sizeof list; i++)
		if (!ga || !strcmp(ga, g_presets[i].arch))
			k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", g_presets[i].name);
	if (n_hit > 1) pv_errf(err, errlen, "preset \"%s\" exists for several architectures; give --arch", name);
	else pv_errf(err, errlen, "unknown preset \"%s\"%s%s (presets: %s)", name ? name : "", ga ? " for " : "", ga ? ga : "", list);
	return NULL;
}

/* ------------------------------------------------------------------ the plan --- */

/* Value generators (amplitudes in the header comment). */
enum kind {
	K_MAT,        /* uniform +-0.5*sqrt(3/ne0)                                    */
	K_NORM,       /* 1 +- 0.1                                                     */
	K_BIAS,       /* uniform +-0.1                                                */
	K_SSM_A,      /* -A, A in [1, 16]                                             */
	K_DT_BIAS,    /* [-6.9, -2.25]                                                */
	K_ROUTER,     /* uniform +-0.1*sqrt(3/H): nearly uniform routing              */
	K_SHEXP_GATE, /* uniform +-sqrt(3/H): sigmoid gate logits of std ~1           */
};

struct planner {
	struct pv_synth_plan* p;
	enum pv_convert_type type;
	int cap;
};

static void add(struct planner* b, int layer, int kind, int always_f32, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                const char* fmt, ...) __attribute__((format(printf, 9, 10)));

static void add(struct planner* b, int layer, int kind, int always_f32, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                const char* fmt, ...)
{
	struct pv_synth_plan* p = b->p;
	if (p->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 256;
		struct pv_synth_tensor* t = realloc(p->t, sizeof(*t) * (size_t)b->cap);
		if (!t) pv_abort(__FILE__, __LINE__, "out of memory for the tensor plan");
		p->t = t;
	}
	struct pv_synth_tensor* t = &p->t[p->n++];
	memset(t, 0, sizeof *t);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->name, sizeof t->name, fmt, ap);
	va_end(ap);
	t->n_dims = n_dims;
	t->ne[0] = ne0;
	t->ne[1] = ne1;
	t->ne[2] = ne2;
	t->kind = kind;
	t->layer = layer;
	int fb = 0;
	t->type = always_f32 || n_dims == 1 ? PV_F32
	                                    : pv_convert_matrix_type(b->type, t->name, ne0, layer, p->n_blocks, p->cfg.tied, &fb);
	p->n_fallback += fb;
	p->per_type[t->type]++;
	t->bytes = pv_dtype_row_bytes(t->type, ne0) * (uint64_t)(ne1 * ne2);
	p->n_params += ne0 * ne1 * ne2;
	p->data_bytes += t->bytes;
}

#define VEC(b, i, kind, n, ...) add(b, i, kind, 1, 1, n, 1, 1, __VA_ARGS__)
#define MAT(b, i, cols, rows, ...) add(b, i, K_MAT, 0, 2, cols, rows, 1, __VA_ARGS__)

/* One block's tensors in convert.c's order, with gguf_load.c's names and ggml shapes. */
static void plan_layer(struct planner* b, int i, int kind, int moe)
{
	const struct pv_config* c = &b->p->cfg;
	int64_t H = c->hidden, hd = c->head_dim, qd = pv_cfg_q_dim(c), kvd = pv_cfg_kv_dim(c);
	int hybrid = pv_arch_is_hybrid(c->arch);
	VEC(b, i, K_NORM, H, "blk.%d.attn_norm.weight", i);
	VEC(b, i, K_NORM, H, "blk.%d.%s", i, hybrid ? "post_attention_norm.weight" : "ffn_norm.weight");
	if (kind == PV_LAYER_ATTN) {
		MAT(b, i, H, c->attn_gate ? 2 * qd : qd, "blk.%d.attn_q.weight", i); /* hybrids: per head [q | gate] */
		MAT(b, i, H, kvd, "blk.%d.attn_k.weight", i);
		MAT(b, i, H, kvd, "blk.%d.attn_v.weight", i);
		MAT(b, i, qd, H, "blk.%d.attn_output.weight", i);
		if (c->attn_bias) {
			VEC(b, i, K_BIAS, qd, "blk.%d.attn_q.bias", i);
			VEC(b, i, K_BIAS, kvd, "blk.%d.attn_k.bias", i);
			VEC(b, i, K_BIAS, kvd, "blk.%d.attn_v.bias", i);
		}
		if (c->qk_norm) {
			VEC(b, i, K_NORM, hd, "blk.%d.attn_q_norm.weight", i);
			VEC(b, i, K_NORM, hd, "blk.%d.attn_k_norm.weight", i);
		}
	} else {
		int64_t Hv = c->lin_v_heads, vd = pv_cfg_value_dim(c), cd = pv_cfg_conv_dim(c);
		MAT(b, i, H, cd, "blk.%d.attn_qkv.weight", i); /* [q_all | k_all | v_all] */
		MAT(b, i, H, vd, "blk.%d.attn_gate.weight", i); /* z */
		if (c->arch == PV_ARCH_QWEN3_NEXT) {
			MAT(b, i, H, 2 * Hv, "blk.%d.ssm_ba.weight", i);
		} else {
			MAT(b, i, H, Hv, "blk.%d.ssm_beta.weight", i);
			MAT(b, i, H, Hv, "blk.%d.ssm_alpha.weight", i);
		}
		add(b, i, K_MAT, 1, 2, c->conv_kernel, cd, 1, "blk.%d.ssm_conv1d.weight", i); /* {Kc, conv_dim}, fan_in Kc */
		VEC(b, i, K_DT_BIAS, Hv, "blk.%d.ssm_dt.bias", i);
		VEC(b, i, K_SSM_A, Hv, "blk.%d.ssm_a", i);
		VEC(b, i, K_NORM, c->lin_v_dim, "blk.%d.ssm_norm.weight", i);
		MAT(b, i, vd, H, "blk.%d.ssm_out.weight", i);
	}
	if (moe) {
		int64_t E = c->n_experts, Ie = c->moe_inter, Is = c->shared_inter;
		add(b, i, K_ROUTER, 1, 2, H, E, 1, "blk.%d.ffn_gate_inp.weight", i);
		add(b, i, K_MAT, 0, 3, H, Ie, E, "blk.%d.ffn_gate_exps.weight", i);
		add(b, i, K_MAT, 0, 3, H, Ie, E, "blk.%d.ffn_up_exps.weight", i);
		add(b, i, K_MAT, 0, 3, Ie, H, E, "blk.%d.ffn_down_exps.weight", i);
		if (Is > 0) {
			VEC(b, i, K_SHEXP_GATE, H, "blk.%d.ffn_gate_inp_shexp.weight", i);
			MAT(b, i, H, Is, "blk.%d.ffn_gate_shexp.weight", i);
			MAT(b, i, H, Is, "blk.%d.ffn_up_shexp.weight", i);
			MAT(b, i, Is, H, "blk.%d.ffn_down_shexp.weight", i);
		}
	} else {
		MAT(b, i, H, c->intermediate, "blk.%d.ffn_gate.weight", i);
		MAT(b, i, H, c->intermediate, "blk.%d.ffn_up.weight", i);
		MAT(b, i, c->intermediate, H, "blk.%d.ffn_down.weight", i);
	}
}

void pv_synth_plan_free(struct pv_synth_plan* plan)
{
	if (!plan) return;
	free(plan->t);
	pv_config_free(&plan->cfg);
	memset(plan, 0, sizeof *plan);
}

int pv_synth_plan(struct pv_synth_plan* plan, const struct pv_synth_params* p, char* err, size_t errlen)
{
	memset(plan, 0, sizeof *plan);
	const struct pv_synth_preset* s = p ? p->preset : NULL;
	if (!s) return pv_errf(err, errlen, "synth: no preset");
	if ((unsigned)p->type >= PV_CONVERT_TYPE_COUNT) return pv_errf(err, errlen, "synth: unknown type %d", (int)p->type);
	if (p->n_layers < 0 || p->n_layers > 4096) return pv_errf(err, errlen, "synth: %d layers is out of range", p->n_layers);
	int hybrid = pv_arch_is_hybrid((enum pv_arch)s->arch_id);
	if (p->mtp && s->arch_id != PV_ARCH_QWEN3_5 && s->arch_id != PV_ARCH_QWEN3_5_MOE)
		return pv_errf(err, errlen, "synth: an MTP block is written for qwen35/qwen35moe only (%s has none in GGUF)", s->arch);
	struct pv_config* c = &plan->cfg;
	c->arch = (enum pv_arch)s->arch_id;
	c->n_layers = p->n_layers ? p->n_layers : s->L;
	c->hidden = s->H;
	c->vocab = s->V;
	c->n_heads = s->nh;
	c->n_kv_heads = s->nkv;
	c->head_dim = s->hd;
	c->rope_dim = s->rope_dim;
	c->rope_theta = s->theta;
	c->rms_eps = 1e-6f;
	c->max_pos = s->max_pos;
	c->tied = s->tied;
	c->attn_bias = pv_arch_info(c->arch)->attn_bias;
	c->qk_norm = pv_arch_info(c->arch)->qk_norm;
	c->attn_gate = c->norm_zc = hybrid;
	c->intermediate = s->I;
	c->n_experts = s->E;
	c->n_experts_used = s->k;
	c->moe_inter = s->Ie;
	c->shared_inter = s->Is;
	c->norm_topk = s->E > 0;
	c->lin_k_heads = s->Hk;
	c->lin_v_heads = s->Hv;
	c->lin_k_dim = c->lin_v_dim = s->dk;
	c->conv_kernel = s->Kc;
	c->v_head_tiled = pv_arch_info(c->arch)->v_tiled;
	c->n_mtp_layers = p->mtp ? 1 : 0;
	c->layer_kind = pv_xcalloc((size_t)c->n_layers, 1);
	c->layer_moe = pv_xcalloc((size_t)c->n_layers, 1);
	int n_attn = 0;
	for (int i = 0; i < c->n_layers; i++) {
		/* hybrids: full attention at (i + 1) % 4 == 0, DeltaNet elsewhere (§6.1) */
		c->layer_kind[i] = hybrid && (i + 1) % 4 ? PV_LAYER_LINEAR : PV_LAYER_ATTN;
		c->layer_moe[i] = s->E > 0;
		n_attn += c->layer_kind[i] == PV_LAYER_ATTN;
	}
	if (!n_attn) c->layer_kind[c->n_layers - 1] = PV_LAYER_ATTN; /* a cut hybrid keeps one attention layer */
	plan->n_blocks = c->n_layers + c->n_mtp_layers;

	struct planner b = { .p = plan, .type = p->type };
	int64_t H = c->hidden;
	MAT(&b, -1, H, c->vocab, "token_embd.weight");
	VEC(&b, -1, K_NORM, H, "output_norm.weight");
	if (!c->tied) MAT(&b, -1, H, c->vocab, "output.weight");
	for (int i = 0; i < c->n_layers; i++) plan_layer(&b, i, c->layer_kind[i], c->layer_moe[i]);
	if (c->n_mtp_layers) {
		int L = c->n_layers;
		MAT(&b, L, 2 * H, H, "blk.%d.nextn.eh_proj.weight", L);
		VEC(&b, L, K_NORM, H, "blk.%d.nextn.enorm.weight", L);
		VEC(&b, L, K_NORM, H, "blk.%d.nextn.hnorm.weight", L);
		VEC(&b, L, K_NORM, H, "blk.%d.nextn.shared_head_norm.weight", L);
		plan_layer(&b, L, PV_LAYER_ATTN, c->n_experts > 0);
	}
	return 0;
}

/* ------------------------------------------------------------------ values --- */

#define GAMMA 0x9e3779b97f4a7c15ull

/* splitmix64's output function: word i of a stream is mix64(key + (i + 1) * GAMMA), so any word
 * is computed directly from its index (thread-count independent, no sequential state). */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t tensor_key(uint64_t seed, const char* name)
{
	return mix64(seed * GAMMA ^ pv_fnv1a_str(name));
}

struct gen {
	enum pv_dtype type;
	int kind;
	uint64_t key;
	float amp;          /* half-width of the value range                    */
	uint16_t d, dmin;   /* quantized types: the per-tensor f16 scales        */
	size_t unit_bytes;  /* a block (quantized) or an element (float)        */
	int words;          /* random 64-bit words per block                    */
	void* lut;          /* float types, big tensors: the output bytes of each
	                       16-bit random (65536 entries), so an element is one
	                       table load instead of float arithmetic            */
};

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16); /* round to nearest even; values are finite */
}

/* The float value of a 16-bit random r for generator g. */
static inline float value(const struct gen* g, uint16_t r)
{
	float s = (float)(int16_t)r * (1.0f / 32768.0f); /* [-1, 1) */
	float u = (float)r * (1.0f / 65536.0f);          /* [0, 1)  */
	switch (g->kind) {
	case K_NORM: return 1.0f + 0.1f * s;
	case K_SSM_A: return -(1.0f + 15.0f * u);
	case K_DT_BIAS: return -6.9f + 4.65f * u;
	default: return g->amp * s;
	}
}

/* The stored bytes (F32, F16 or BF16) of the value of random r. */
static void float_out(const struct gen* g, uint16_t r, unsigned char* o)
{
	float x = value(g, r);
	if (g->type == PV_F32) {
		memcpy(o, &x, 4);
	} else {
		uint16_t h = g->type == PV_BF16 ? f32_to_bf16(x) : pv_f32_to_f16(x);
		memcpy(o, &h, 2);
	}
}

static void gen_free(struct gen* g)
{
	free(g->lut);
	g->lut = NULL;
}

static void gen_init(struct gen* g, const struct pv_synth_tensor* t, const struct pv_config* c, uint64_t seed)
{
	memset(g, 0, sizeof *g);
	g->type = t->type;
	g->kind = t->kind;
	g->key = tensor_key(seed, t->name);
	switch (t->kind) {
	case K_BIAS: g->amp = 0.1f; break;
	case K_ROUTER: g->amp = 0.1f * sqrtf(3.0f / (float)c->hidden); break;
	case K_SHEXP_GATE: g->amp = sqrtf(3.0f / (float)c->hidden); break;
	default: g->amp = 0.5f * sqrtf(3.0f / (float)t->ne[0]); break;
	}
	g->unit_bytes = pv_dtype_block_bytes(t->type);
	/* scales so that the codes span +-amp (quant.h gives the block formulas) */
	switch (t->type) {
	case PV_Q8_0: g->d = pv_f32_to_f16(g->amp / 127.0f), g->words = 4; break; /* d*q, q in [-128, 127]         */
	case PV_Q4_0: g->d = pv_f32_to_f16(g->amp / 8.0f), g->words = 2; break;   /* d*(q-8), q in [0, 15]         */
	case PV_Q5_0: g->d = pv_f32_to_f16(g->amp / 16.0f), g->words = 3; break;  /* d*(q-16), q in [0, 31]        */
	case PV_Q4_K: /* (d*8)*q - dmin*8 with dmin = 7.5 d: 8d(q - 7.5), q in [0, 15] */
		g->d = pv_f32_to_f16(g->amp / 60.0f);
		g->dmin = pv_f32_to_f16(7.5f * g->amp / 60.0f);
		g->words = 16;
		break;
	case PV_Q6_K: g->d = pv_f32_to_f16(g->amp / 128.0f), g->words = 24; break; /* (d*4)*(q-32), q in [0, 63] */
	default: break;
	}
	if (!pv_dtype_is_quant(t->type) && (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]) >= ((uint64_t)1 << 20)) {
		unsigned char* lut = malloc(g->unit_bytes << 16);
		if (lut) /* without it, the direct path computes the same bytes */
			for (uint32_t r = 0; r < 65536; r++) float_out(g, (uint16_t)r, lut + r * g->unit_bytes);
		g->lut = lut;
	}
}

/* Units [u0, u0 + n) of a tensor into out: blocks for quantized types, elements otherwise. */
static void gen_units(const struct gen* g, uint64_t u0, uint64_t n, unsigned char* out)
{
	uint64_t w[24];
	if (!pv_dtype_is_quant(g->type)) {
		/* element e takes 16 bits (lane e % 4) of word e / 4 */
		for (uint64_t e = u0, end = u0 + n; e < end;) {
			uint64_t word = mix64(g->key + ((e >> 2) + 1) * GAMMA);
			for (unsigned lane = (unsigned)(e & 3); lane < 4 && e < end; lane++, e++) {
				uint16_t r = (uint16_t)(word >> (16 * lane));
				unsigned char* o = out + (e - u0) * g->unit_bytes;
				if (!g->lut) float_out(g, r, o);
				else if (g->unit_bytes == 2) memcpy(o, (const uint16_t*)g->lut + r, 2); /* fixed sizes: plain stores */
				else memcpy(o, (const float*)g->lut + r, 4);
			}
		}
		return;
	}
	for (uint64_t bi = u0; bi < u0 + n; bi++) {
		unsigned char* o = out + (bi - u0) * g->unit_bytes;
		uint64_t base = g->key + (bi * (uint64_t)g->words + 1) * GAMMA;
		for (int j = 0; j < g->words; j++) w[j] = mix64(base + (uint64_t)j * GAMMA);
		switch (g->type) {
		case PV_Q8_0: /* d | qs[32] */
		case PV_Q4_0: /* d | qs[16] */
			memcpy(o, &g->d, 2);
			memcpy(o + 2, w, g->unit_bytes - 2);
			break;
		case PV_Q5_0: /* d | qh[4] | qs[16] */
			memcpy(o, &g->d, 2);
			memcpy(o + 2, w, 20);
			break;
		case PV_Q4_K: { /* d | dmin | scales[12] | qs[128]; every sub-block scale and min 8 */
			static const unsigned char sc[12] = { 8, 8, 8, 8, 8, 8, 8, 8, 0x88, 0x88, 0x88, 0x88 };
			memcpy(o, &g->d, 2);
			memcpy(o + 2, &g->dmin, 2);
			memcpy(o + 4, sc, 12);
			memcpy(o + 16, w, 128);
			break;
		}
		case PV_Q6_K: { /* ql[128] | qh[64] | scales[16] | d */
			memcpy(o, w, 192);
			memset(o + 192, 4, 16);
			memcpy(o + 208, &g->d, 2);
			break;
		}
		default: break;
		}
	}
}

/* ------------------------------------------------------------------ writer --- */

/* The writer thread: takes one buffer at a time and appends it to the GGUF, while the pool
 * fills the other buffer (double buffering). */
struct wthread {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct pv_gguf_writer* w;
	const unsigned char* buf;
	size_t n;
	int busy, quit, failed;
};

static void* writer_main(void* arg)
{
	struct wthread* t = arg;
	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (!t->busy && !t->quit) pthread_cond_wait(&t->cv, &t->mu);
		if (!t->busy) break;
		const unsigned char* buf = t->buf;
		size_t n = t->n;
		pthread_mutex_unlock(&t->mu);
		int rc = pv_gguf_w_data(t->w, buf, n);
		pthread_mutex_lock(&t->mu);
		if (rc) t->failed = 1;
		t->busy = 0;
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* Waits until the writer is idle; returns -1 if any write failed. */
static int writer_wait(struct wthread* t)
{
	pthread_mutex_lock(&t->mu);
	while (t->busy) pthread_cond_wait(&t->cv, &t->mu);
	int failed = t->failed;
	pthread_mutex_unlock(&t->mu);
	return failed ? -1 : 0;
}

static int writer_submit(struct wthread* t, const unsigned char* buf, size_t n)
{
	if (writer_wait(t)) return -1;
	pthread_mutex_lock(&t->mu);
	t->buf = buf;
	t->n = n;
	t->busy = 1;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return 0;
}

struct fill {
	const struct gen* g;
	uint64_t u0, n;
	unsigned char* out;
	int n_tasks;
};

static void fill_task(void* ctx, int task, int thread)
{
	const struct fill* f = ctx;
	uint64_t a = f->n * (uint64_t)task / (uint64_t)f->n_tasks, b = f->n * (uint64_t)(task + 1) / (uint64_t)f->n_tasks;
	gen_units(f->g, f->u0 + a, b - a, f->out + a * f->g->unit_bytes);
}

#define CHUNK_BYTES ((size_t)32 << 20)
#define TASK_BYTES ((size_t)256 << 10)

int pv_synth_write(const struct pv_synth_params* p, uint64_t* file_bytes, char* err, size_t errlen)
{
	if (file_bytes) *file_bytes = 0;
	if (!p || !p->out_path || !*p->out_path) return pv_errf(err, errlen, "synth: an output path is required");
	struct stat sb;
	if (!stat(p->out_path, &sb) && S_ISDIR(sb.st_mode)) return pv_errf(err, errlen, "%s: is a directory", p->out_path);
	struct pv_synth_plan plan;
	if (pv_synth_plan(&plan, p, err, errlen)) return -1;
	const struct pv_synth_preset* s = p->preset;
	struct pv_gguf_writer* w = NULL;
	struct pv_pool* pool = NULL;
	unsigned char* buf[2] = { NULL, NULL };
	struct wthread wt = { 0 };
	int started = 0, rc = -1;

	if (pv_gguf_writer_open(&w, p->out_path, 32, err, errlen)) goto out;
	char name[160];
	snprintf(name, sizeof name, "%s (synthetic: proven synth, seed %llu)", s->model, (unsigned long long)p->seed);
	if (pv_convert_write_model_keys(w, &plan.cfg, plan.cfg.n_mtp_layers, NULL, p->type, name) ||
	    pv_gguf_w_str(w, "proven.synth.preset", s->name) || pv_gguf_w_u64(w, "proven.synth.seed", p->seed))
		goto werr;
	if (pv_convert_write_synthetic_vocab(w, plan.cfg.vocab, err, errlen)) goto out;
	for (int i = 0; i < plan.n; i++) {
		const struct pv_synth_tensor* t = &plan.t[i];
		if (pv_gguf_w_tensor(w, t->name, t->n_dims, t->ne, pv_gguf_ggml_type(t->type))) goto werr;
	}
	if (pv_gguf_w_begin_data(w)) goto werr;

	/* buffers no larger than the largest tensor (the tiny presets need little) */
	size_t cap = 0;
	for (int i = 0; i < plan.n; i++)
		if (plan.t[i].bytes > cap) cap = (size_t)plan.t[i].bytes;
	if (cap > CHUNK_BYTES) cap = CHUNK_BYTES;
	buf[0] = malloc(cap ? cap : 1);
	buf[1] = malloc(cap ? cap : 1);
	if (!buf[0] || !buf[1]) {
		pv_errf(err, errlen, "out of memory for the write buffers");
		goto out;
	}
	pool = pv_pool_new(p->n_threads);
	wt.w = w;
	pthread_mutex_init(&wt.mu, NULL);
	pthread_cond_init(&wt.cv, NULL);
	if (pthread_create(&wt.th, NULL, writer_main, &wt)) {
		pthread_mutex_destroy(&wt.mu);
		pthread_cond_destroy(&wt.cv);
		pv_errf(err, errlen, "cannot start the writer thread");
		goto out;
	}
	started = 1;
	int cur = 0, max_tasks = 4 * pv_pool_threads(pool);
	uint64_t done = 0;
	for (int i = 0; i < plan.n; i++) {
		const struct pv_synth_tensor* t = &plan.t[i];
		struct gen g;
		gen_init(&g, t, &plan.cfg, p->seed);
		uint64_t units = t->bytes / g.unit_bytes, per_chunk = cap / g.unit_bytes;
		for (uint64_t u0 = 0; u0 < units; u0 += per_chunk) {
			struct fill f = { .g = &g, .u0 = u0, .n = units - u0 < per_chunk ? units - u0 : per_chunk, .out = buf[cur] };
			size_t nbytes = (size_t)f.n * g.unit_bytes;
			f.n_tasks = (int)(nbytes / TASK_BYTES) + 1;
			if (f.n_tasks > max_tasks) f.n_tasks = max_tasks;
			if ((uint64_t)f.n_tasks > f.n) f.n_tasks = (int)f.n;
			pv_pool_run(f.n_tasks > 1 ? pool : NULL, fill_task, &f, f.n_tasks);
			if (writer_submit(&wt, buf[cur], nbytes)) {
				gen_free(&g);
				goto werr;
			}
			cur ^= 1;
			done += nbytes;
			if (p->progress) p->progress(p->progress_ud, done, plan.data_bytes);
		}
		gen_free(&g);
	}
	if (writer_wait(&wt)) goto werr;
	rc = 0;
	goto out;
werr:
	pv_errf(err, errlen, "%s", pv_gguf_writer_error(w) ? pv_gguf_writer_error(w) : "GGUF write failed");
out:
	if (started) {
		pthread_mutex_lock(&wt.mu);
		wt.quit = 1;
		pthread_cond_broadcast(&wt.cv);
		pthread_mutex_unlock(&wt.mu);
		pthread_join(wt.th, NULL);
		pthread_mutex_destroy(&wt.mu);
		pthread_cond_destroy(&wt.cv);
	}
	if (!rc) {
		struct pv_gguf_writer* fin = w;
		w = NULL;
		if (pv_gguf_writer_close(fin, err, errlen)) rc = -1;
		else if (file_bytes && !stat(p->out_path, &sb)) *file_bytes = (uint64_t)sb.st_size;
	}
	pv_gguf_writer_abort(w);
	pv_pool_free(pool);
	free(buf[0]);
	free(buf[1]);
	pv_synth_plan_free(&plan);
	return rc;
}
