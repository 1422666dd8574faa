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

#include "model/arch.h"
#include "model/model.h"

/* Reads and validates json_path. On failure c holds nothing that needs freeing. */
int pv_config_parse(struct pv_config* c, const char* json_path, char* err, size_t errlen);

/* Same from a buffer already in memory (the fuzzing entry point); label names it in messages. */
int pv_config_parse_buffer(struct pv_config* c, const char* label, const char* buf, size_t len,
                           char* err, size_t errlen);

/* Frees the per-layer arrays and zeroes c. */
void pv_config_free(struct pv_config* c);

/* The limits every config is held to, whichever loader read it (config_check.c). */
#define PV_MAX_LAYERS (1 << 14)
#define PV_MAX_DIM (1 << 20)
#define PV_MAX_HEADS (1 << 16)
#define PV_MAX_EXPERTS (1 << 16)
#define PV_MAX_VOCAB (1 << 24)
#define PV_MAX_CONTEXT (1 << 24)
#define PV_MAX_DERIVED ((int64_t)1 << 26) /* any projection width built from several settings */

/* config_check.c: the one validator, run by both loaders on what they read. label names the
 * file in messages. Returns 0 or -1 with a message. */
int pv_config_check(const struct pv_config* c, const char* label, char* err, size_t errlen);

#endif
