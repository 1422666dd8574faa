/*
 * arch.h: the one table of the Qwen architectures proven runs: their names in Hugging Face
 * configs (model_type) and in GGUF files (general.architecture), and the facts that follow from
 * the architecture alone (qwen-models.md §3-§6). The HF and GGUF loaders, the converter and the
 * synthesizer all read this table; nothing else spells an architecture's name.
 */
#ifndef PV_ARCH_H
#define PV_ARCH_H

#include "proven.h"

#include <stddef.h>

struct pv_arch_info {
	enum pv_arch arch;
	const char* hf;        /* config.json model_type                                       */
	const char* hf_text;   /* the text-only model_type of a multimodal wrapper, or NULL     */
	const char* gguf;      /* general.architecture                                         */
	unsigned hybrid : 1;   /* Gated DeltaNet + gated attention layers, zero-centred norms   */
	unsigned moe : 1;      /* routed experts (some or all layers)                          */
	unsigned attn_bias : 1;/* q/k/v biases (Qwen2)                                         */
	unsigned qk_norm : 1;  /* per-head q/k RMSNorm (Qwen3 on)                              */
	unsigned v_tiled : 1;  /* GGUF stores DeltaNet value heads tiled (llama.cpp's qwen35)  */
};

/* The entry of an architecture (never NULL for a valid enum). */
const struct pv_arch_info* pv_arch_info(enum pv_arch a);
/* By name: HF model_type (the text-only names too) or GGUF general.architecture; NULL if none. */
const struct pv_arch_info* pv_arch_from_hf(const char* model_type);
const struct pv_arch_info* pv_arch_from_gguf(const char* name);
/* "qwen2, qwen3, ..." of one naming (gguf != 0: the GGUF names) into buf, for messages. */
const char* pv_arch_list(int gguf, char* buf, size_t n);

/* The HF model_type of an architecture ("qwen3_5_moe", ...); "unknown" for a bad value. */
const char* pv_arch_name(enum pv_arch a);
/* 1 for the Gated-DeltaNet hybrids (qwen3_next, qwen3_5, qwen3_5_moe). */
int pv_arch_is_hybrid(enum pv_arch a);

#endif
