/*
 * model.h: the loaded model as the forward pass sees it: settings (struct pv_config) and
 * weight views (struct pv_weights). Internal; the public face is include/proven.h.
 *
 * Shapes use the notation of shared/docs/qwen-models.md: H hidden, nh/nkv/hd attention heads,
 * I dense FFN width, E/k/Ie/Is experts, Hk/Hv/dk/dv DeltaNet heads, Kc conv kernel, V vocab.
 */
#ifndef PV_MODEL_H
#define PV_MODEL_H

#include "proven.h"

#include <pthread.h>
#include "quant/tensor.h"

enum pv_layer_kind { PV_LAYER_ATTN = 0, PV_LAYER_LINEAR = 1 };

struct pv_config {
	enum pv_arch arch;
	int n_layers;          /* L                                                         */
	int hidden;            /* H                                                         */
	int vocab;             /* V                                                         */
	int n_heads;           /* nh                                                        */
	int n_kv_heads;        /* nkv                                                       */
	int head_dim;          /* hd (config head_dim, or H/nh for Qwen2)                   */
	int rope_dim;          /* R: rotated dims per head (hd, or hd*partial_rotary_factor)*/
	float rope_theta;
	float rms_eps;
	int max_pos;           /* max_position_embeddings                                   */
	int tied;              /* lm_head is embed_tokens                                   */
	int attn_bias;         /* Qwen2: q/k/v biases                                       */
	int qk_norm;           /* Qwen3+: per-head q/k RMSNorm                              */
	int attn_gate;         /* hybrids: q_proj also yields a per-head sigmoid gate       */
	int norm_zc;           /* hybrids: norms apply (1 + w)                              */
	int intermediate;      /* I (dense FFN)                                             */
	/* MoE */
	int n_experts;         /* E (0: dense)                                              */
	int n_experts_used;    /* k                                                         */
	int moe_inter;         /* Ie                                                        */
	int shared_inter;      /* Is (0: no shared expert)                                  */
	int norm_topk;         /* renormalise the top-k weights                             */
	/* Gated DeltaNet */
	int lin_k_heads;       /* Hk                                                        */
	int lin_v_heads;       /* Hv                                                        */
	int lin_k_dim;         /* dk                                                        */
	int lin_v_dim;         /* dv                                                        */
	int conv_kernel;       /* Kc                                                        */
	int v_head_tiled;      /* value head j reads key head j % Hk (GGUF qwen35); else j / r */
	int n_mtp_layers;
	/* per layer, n_layers entries */
	unsigned char* layer_kind; /* enum pv_layer_kind                                    */
	unsigned char* layer_moe;  /* 1: FFN is an MoE block                                */
};

/* Derived sizes. */
static inline int pv_cfg_q_dim(const struct pv_config* c) { return c->n_heads * c->head_dim; }
static inline int pv_cfg_kv_dim(const struct pv_config* c) { return c->n_kv_heads * c->head_dim; }
static inline int pv_cfg_key_dim(const struct pv_config* c) { return c->lin_k_heads * c->lin_k_dim; }
static inline int pv_cfg_value_dim(const struct pv_config* c) { return c->lin_v_heads * c->lin_v_dim; }
static inline int pv_cfg_conv_dim(const struct pv_config* c) { return 2 * pv_cfg_key_dim(c) + pv_cfg_value_dim(c); }

struct pv_expert {
	struct pv_tensor gate; /* [Ie, H] */
	struct pv_tensor up;   /* [Ie, H] */
	struct pv_tensor down; /* [H, Ie] */
};

/*
 * Small per-layer vectors are converted to f32 at load (model-owned), with the zero-centred
 * (1 + w) shift already applied, so the forward pass has one RMSNorm.
 */
struct pv_layer {
	float* attn_norm;            /* [H] input_layernorm                                  */
	float* ffn_norm;             /* [H] post_attention_layernorm                         */

	/* full attention */
	struct pv_tensor wq;         /* [nh*hd, H], or [nh*2*hd, H] with the gate (attn_gate) */
	struct pv_tensor wk, wv;     /* [nkv*hd, H]                                         */
	struct pv_tensor wo;         /* [H, nh*hd]                                          */
	float *bq, *bk, *bv;         /* Qwen2 biases [nh*hd], [nkv*hd], [nkv*hd]; else NULL  */
	float *q_norm, *k_norm;      /* [hd]; NULL without qk_norm                           */

	/* Gated DeltaNet */
	struct pv_tensor in_qkv;     /* [2*Hk*dk + Hv*dv, H] (Qwen3.5 layout)               */
	struct pv_tensor in_z;       /* [Hv*dv, H]                                          */
	struct pv_tensor in_b, in_a; /* [Hv, H]                                             */
	struct pv_tensor in_qkvz;    /* [2*Hk*dk + 2*Hv*dv, H] key-group-major (Qwen3-Next)  */
	struct pv_tensor in_ba;      /* [2*Hv, H] key-group-major (Qwen3-Next)               */
	float* conv_w;               /* [conv_dim, Kc]                                      */
	float* ssm_a;                /* [Hv] = -exp(A_log)                                  */
	float* dt_bias;              /* [Hv]                                                */
	float* lin_norm;             /* [dv] plain weight (no +1)                            */
	struct pv_tensor out_proj;   /* [H, Hv*dv]                                          */

	/* dense FFN */
	struct pv_tensor ffn_gate, ffn_up; /* [I, H] */
	struct pv_tensor ffn_down;         /* [H, I] */

	/* MoE */
	struct pv_tensor router;     /* [E, H]                                              */
	struct pv_expert* experts;   /* E entries (model-owned array of views)              */
	struct pv_expert shexp;      /* shared expert, [Is, H] / [H, Is]; absent: data NULL */
	float* shexp_gate;           /* [H] shared_expert_gate (one output)                  */
};

struct pv_mtp {
	struct pv_tensor fc;             /* [H, 2H]                                          */
	float *norm_emb, *norm_hidden;   /* [H]                                              */
	float* norm_out;                 /* [H]                                              */
	struct pv_layer layer;           /* one full-attention decoder layer                 */
};

struct pv_weights {
	struct pv_tensor embed;   /* [V, H]                                                   */
	struct pv_tensor lm_head; /* [V, H]; equals embed when tied                           */
	float* final_norm;        /* [H]                                                      */
	struct pv_layer* layers;  /* n_layers                                                 */
	struct pv_mtp* mtp;       /* n_mtp_layers (0 or 1), NULL if absent                    */
};



/* What the loaders allocate for the model (f32 vectors, expert tables, the layer array): one
 * list, freed with the model, whichever loader filled it. */
struct pv_owner {
	void** p;
	size_t n, cap;
};
/* Records p (may be NULL: returns NULL) as owned; aborts only if the list cannot grow. */
void* pv_own(struct pv_owner* o, void* p);
void pv_owner_free(struct pv_owner* o);

/* The immutable loaded model behind the public pv_model handle. */
struct pv_files; /* loader-owned: memory maps of the safetensors shards */

struct pv_model {
	struct pv_config cfg;
	struct pv_weights w;
	struct pv_model_info info;
	char* path;            /* the directory or GGUF file it was loaded from       */
	char* layer_pattern;   /* info.layer_pattern storage                          */
	struct pv_files* files;      /* HF directory: the safetensors mappings          */
	struct pv_gguf_model* gguf;  /* GGUF file: its mapping (gguf_load.c)            */
	struct pv_owner owned;       /* arrays bound into w, whichever loader made them */
	const struct pv_backend* backend; /* attached by pv_model_open (api.c); never NULL after */
	void* dev;                   /* backend-private model data (device weights)     */
	const struct pv_backend* dev_owner; /* the backend whose data dev is (a test may run one
	                              * backend's sessions on a model another one holds) */
	pthread_mutex_t digest_lock; /* pv_model_digest computes once                   */
	char digest[65];             /* "" until computed                               */

	/* text side (model_text.c); all optional: the tiny fixtures have no tokenizer */
	struct pv_tok* tok;
	char* chat_template;   /* the Jinja text as shipped (dialect detection only)  */
	int32_t eos[8];        /* end-of-generation ids                               */
	int n_eos;
};

struct pv_gguf_model;

/* model.c: loads path into m (zeroed, digest_lock initialised) without a backend; returns PV_OK
 * or a pv_status. pv_model_unload frees what it loaded (m itself stays). */
int pv_model_load(struct pv_model* m, const char* path, const struct pv_model_params* p, char* err, size_t errlen);
void pv_model_unload(struct pv_model* m);

/* model_text.c: tokenizer, chat template and end-of-generation ids of an HF directory. */
int pv_model_text_hf(struct pv_model* m, const char* dir, char* err, size_t errlen);
void pv_model_text_free(struct pv_model* m);
/* Adds id to the end-of-generation set (ignores negatives and duplicates). */
void pv_model_add_eos(struct pv_model* m, int32_t id);
#endif
