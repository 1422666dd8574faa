/*
 * gguf_load.h: a GGUF model file -> struct pv_config + struct pv_weights + the text side.
 *
 * Settings come from the {arch}.* metadata (shared/docs/qwen-models.md §8.2), tensors from the
 * llama.cpp names (§8.3) with the converter's transforms already in the file (§8.4): norms hold
 * 1 + w for the hybrids (used as stored), ssm_a = -exp(A_log), conv weights [conv_dim, Kc], and
 * for qwen35/qwen35moe the value heads in "tiled" order (cfg.v_head_tiled). Matrices stay views
 * into the mapping, in whatever type they are stored (F32, F16, BF16 or a quantized type).
 */
#ifndef PV_GGUF_LOAD_H
#define PV_GGUF_LOAD_H

#include "model/hf_load.h"
#include "model/model.h"

/* Opens path and fills m->cfg, m->w, m->gguf and the tokenizer / chat template / eos ids. */
int pv_gguf_model_load(struct pv_model* m, const char* path, struct pv_load_stats* st, char* err, size_t errlen);
/* The file mapping (for prefaulting with progress); 0 when there is none. */
int pv_gguf_model_mapping(const struct pv_gguf_model* g, const void** ptr, size_t* len);
/* Tensor i of the file (0 <= i < count): its name and a view of all of it as rows of ne[0];
 * returns 0 when i is past the last (the weight check walks the file this way). */
int pv_gguf_model_tensor(const struct pv_gguf_model* g, int64_t i, const char** name, struct pv_tensor* view);
/* Unmaps the file and frees everything the binding allocated. NULL is fine. */
void pv_gguf_model_free(struct pv_gguf_model* g);

#endif
