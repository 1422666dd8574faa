/*
 * hf_load.h: a Hugging Face model directory -> struct pv_weights.
 *
 * pv_hf_open maps model.safetensors, or every shard that model.safetensors.index.json names, and
 * indexes the tensors by name. pv_hf_bind then binds the weights the config implies with their
 * exact shapes (shared/docs/qwen-models.md §8.1): large matrices become views into the mappings,
 * small vectors become model-owned f32 arrays (norms with the hybrids' 1 + w already applied,
 * except linear_attn.norm; biases; conv weights; ssm_a = -exp(A_log); dt_bias; the shared-expert
 * gate). Every tensor under the text prefix, lm_head.* and mtp.* must be consumed; other tensors
 * (the vision tower) are ignored.
 */
#ifndef PV_HF_LOAD_H
#define PV_HF_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

struct pv_st_tensor;

/* What the binding found, for struct pv_model_info. */
struct pv_load_stats {
	int64_t n_params;        /* elements of every bound tensor, MTP included (tied lm_head once) */
	int64_t n_params_mtp;    /* of which under mtp.*                                             */
	uint64_t weight_bytes;   /* bytes of those tensors as stored                                 */
	const char* dtype;       /* of the matrix views: "bf16", "f16", "f32" or "mixed"             */
	int n_shards;
	int n_tensors;           /* in all shards, ignored ones included                             */
	const char* prefix;      /* "model." or "model.language_model."                              */
};

/* Maps the safetensors files of directory dir. */
int pv_hf_open(struct pv_files** out, const char* dir, char* err, size_t errlen);

/* Binds w for cfg. Sets cfg->n_mtp_layers to 0 when the checkpoint has no mtp.* tensors. The
 * arrays it allocates are recorded in owner (the model's); the views stay valid until
 * pv_hf_close. */
int pv_hf_bind(struct pv_files* f, struct pv_config* cfg, struct pv_weights* w, struct pv_owner* owner,
               struct pv_load_stats* st, char* err, size_t errlen);

/* A tensor by full name, or NULL (for tests and tools). */
const struct pv_st_tensor* pv_hf_find(const struct pv_files* f, const char* name);

/* The i-th file mapping (for prefaulting with progress); 0 when i is out of range. */
int pv_hf_mapping(const struct pv_files* f, int i, const void** ptr, size_t* len);
/* Tensor i of all shards in order (0 <= i < count), when its dtype is one the engine reads: its
 * name and a view of all of it as rows of the last dimension (view->data NULL for a tensor of
 * another dtype or no elements); returns 0 when i is past the last. */
int pv_hf_tensor(const struct pv_files* f, int i, const char** name, struct pv_tensor* view);

/* Unmaps everything. NULL is fine. */
void pv_hf_close(struct pv_files* f);

#endif
