/* arch.c: the architecture table (arch.h). */
#include "model/arch.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const struct pv_arch_info table[PV_ARCH_COUNT] = {
	/*  arch                 hf             hf_text             gguf        hyb moe bias qkn tiled */
	{ PV_ARCH_QWEN2,       "qwen2",       NULL,               "qwen2",     0, 0, 1, 0, 0 },
	{ PV_ARCH_QWEN3,       "qwen3",       NULL,               "qwen3",     0, 0, 0, 1, 0 },
	{ PV_ARCH_QWEN3_MOE,   "qwen3_moe",   NULL,               "qwen3moe",  0, 1, 0, 1, 0 },
	{ PV_ARCH_QWEN3_NEXT,  "qwen3_next",  NULL,               "qwen3next", 1, 1, 0, 1, 0 },
	{ PV_ARCH_QWEN3_5,     "qwen3_5",     "qwen3_5_text",     "qwen35",    1, 0, 0, 1, 1 },
	{ PV_ARCH_QWEN3_5_MOE, "qwen3_5_moe", "qwen3_5_moe_text", "qwen35moe", 1, 1, 0, 1, 1 },
};

const struct pv_arch_info* pv_arch_info(enum pv_arch a)
{
	return (unsigned)a < PV_ARCH_COUNT ? &table[a] : NULL;
}

const struct pv_arch_info* pv_arch_from_hf(const char* model_type)
{
	for (int i = 0; model_type && i < PV_ARCH_COUNT; i++)
		if (!strcmp(table[i].hf, model_type) || (table[i].hf_text && !strcmp(table[i].hf_text, model_type)))
			return &table[i];
	return NULL;
}

const struct pv_arch_info* pv_arch_from_gguf(const char* name)
{
	for (int i = 0; name && i < PV_ARCH_COUNT; i++)
		if (!strcmp(table[i].gguf, name)) return &table[i];
	return NULL;
}

const char* pv_arch_list(int gguf, char* buf, size_t n)
{
	size_t k = 0;
	buf[0] = 0;
	for (int i = 0; i < PV_ARCH_COUNT && k < n; i++)
		k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", gguf ? table[i].gguf : table[i].hf);
	return buf;
}

const char* pv_arch_name(enum pv_arch a)
{
	const struct pv_arch_info* i = pv_arch_info(a);
	return i ? i->hf : "unknown";
}

int pv_arch_is_hybrid(enum pv_arch a)
{
	const struct pv_arch_info* i = pv_arch_info(a);
	return i && i->hybrid;
}
