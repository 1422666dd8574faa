/*
 * config.h: Hugging Face config.json -> struct pv_config (model.h), for model_type qwen2, qwen3,
 * qwen3_moe, qwen3_next, qwen3_5 and qwen3_5_moe (and the text-only qwen3_5_text,
 * qwen3_5_moe_text). Qwen3.5/3.6 wrappers keep the text settings under "text_config"; the outer
 * tie_word_embeddings decides tying. RoPE settings are read from transformers-5 "rope_parameters"
 * or the older top-level keys. Every key is type- and range-checked; a message names the file and
 * the key. The config is hostile input like the weights.
 */
#ifndef PV_CONFIG_H
#define PV_CONFIG_H

#include <stddef.h>

#include "model/model.h"

/* Reads and validates json_path. On failure c holds nothing that needs freeing. */
int pv_config_parse(struct pv_config* c, const char* json_path, char* err, size_t errlen);

/* Same from a buffer already in memory (the fuzzing entry point); label names it in messages. */
int pv_config_parse_buffer(struct pv_config* c, const char* label, const char* buf, size_t len,
                           char* err, size_t errlen);

/* Frees the per-layer arrays and zeroes c. */
void pv_config_free(struct pv_config* c);

/* The HF model_type of an architecture ("qwen3_5_moe", ...). */
const char* pv_arch_name(enum pv_arch a);

/* 1 for the Gated-DeltaNet hybrids (qwen3_next, qwen3_5, qwen3_5_moe). */
int pv_arch_is_hybrid(enum pv_arch a);

#endif
