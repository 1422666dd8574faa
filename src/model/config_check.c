/*
 * config_check.c: the one validator of a struct pv_config, whichever file it came from (an HF
 * config.json or GGUF metadata), with one set of limits (config.h). The loaders reject what they
 * cannot parse with messages that name the key; this check then holds every config to the same
 * ranges, so no later code (session sizes, kernels' dimensions) meets a value the other loader
 * would have refused.
 */
#include "model/arch.h"
#include "model/config.h"
#include "base/util.h"

#include <math.h>

#define RANGE(v, lo, hi, what)                                                                              \
	do {                                                                                                \
		if ((int64_t)(v) < (int64_t)(lo) || (int64_t)(v) > (int64_t)(hi))                                   \
			return pv_errf(err, errlen, "%s: %s = %lld is out of range [%lld, %lld]", label, what,      \
			               (long long)(v), (long long)(lo), (long long)(hi));                           \
	} while (0)

int pv_config_check(const struct pv_config* c, const char* label, char* err, size_t errlen)
{
	const struct pv_arch_info* ai = pv_arch_info(c->arch);
	if (!ai) return pv_errf(err, errlen, "%s: unknown architecture %d", label, (int)c->arch);
	RANGE(c->n_layers, 1, PV_MAX_LAYERS, "layers");
	RANGE(c->hidden, 1, PV_MAX_DIM, "hidden size");
	RANGE(c->vocab, 1, PV_MAX_VOCAB, "vocabulary");
	RANGE(c->max_pos, 1, PV_MAX_CONTEXT, "context length");
	RANGE(c->n_heads, 1, PV_MAX_HEADS, "attention heads");
	RANGE(c->n_kv_heads, 1, PV_MAX_HEADS, "key/value heads");
	RANGE(c->head_dim, 1, PV_MAX_HEADS, "head dim");
	if (c->n_heads % c->n_kv_heads)
		return pv_errf(err, errlen, "%s: %d key/value heads do not divide %d attention heads", label, c->n_kv_heads,
		               c->n_heads);
	if (c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > c->head_dim)
		return pv_errf(err, errlen, "%s: %d rotary dims (must be even, >= 2 and <= head dim %d)", label, c->rope_dim,
		               c->head_dim);
	if (!isfinite(c->rope_theta) || !(c->rope_theta >= 1e-3f && c->rope_theta <= 1e12f))
		return pv_errf(err, errlen, "%s: rope theta %g is out of range [1e-3, 1e12]", label, c->rope_theta);
	if (!(c->rms_eps >= 1e-30f && c->rms_eps <= 0.1f))
		return pv_errf(err, errlen, "%s: rms_norm_eps %g is out of range [1e-30, 0.1]", label, c->rms_eps);
	RANGE(c->n_mtp_layers, 0, 1, "MTP layers");

	int any_dense = 0, any_moe = 0, any_linear = 0;
	for (int i = 0; i < c->n_layers; i++) {
		if (c->layer_kind[i] != PV_LAYER_ATTN && c->layer_kind[i] != PV_LAYER_LINEAR)
			return pv_errf(err, errlen, "%s: layer %d has kind %d", label, i, c->layer_kind[i]);
		any_linear |= c->layer_kind[i] == PV_LAYER_LINEAR;
		any_moe |= c->layer_moe[i] != 0;
		any_dense |= !c->layer_moe[i];
	}
	if (any_linear && !ai->hybrid)
		return pv_errf(err, errlen, "%s: linear-attention layers on %s, which has none", label, ai->hf);
	if (any_moe && !ai->moe) return pv_errf(err, errlen, "%s: MoE layers on %s, which has none", label, ai->hf);
	any_moe |= c->n_experts > 0 && c->n_mtp_layers > 0; /* the MTP layer's FFN follows the model's */
	if (any_dense) RANGE(c->intermediate, 1, PV_MAX_DIM, "FFN width");
	else RANGE(c->intermediate, 0, PV_MAX_DIM, "FFN width");
	if (any_moe) {
		RANGE(c->n_experts, 1, PV_MAX_EXPERTS, "experts");
		RANGE(c->n_experts_used, 1, c->n_experts, "experts per token");
		RANGE(c->moe_inter, 1, PV_MAX_DIM, "expert FFN width");
		RANGE(c->shared_inter, 0, PV_MAX_DIM, "shared expert FFN width");
	}
	if (any_linear) {
		RANGE(c->lin_k_heads, 1, PV_MAX_HEADS, "linear key heads");
		RANGE(c->lin_v_heads, 1, PV_MAX_HEADS, "linear value heads");
		RANGE(c->lin_k_dim, 1, PV_MAX_HEADS, "linear key head dim");
		RANGE(c->lin_v_dim, 1, PV_MAX_HEADS, "linear value head dim");
		RANGE(c->conv_kernel, 1, 64, "conv kernel");
		if (c->lin_v_heads % c->lin_k_heads)
			return pv_errf(err, errlen, "%s: %d linear value heads are not a multiple of %d key heads", label,
			               c->lin_v_heads, c->lin_k_heads);
	}
	/* projection widths built from several keys must stay far from int overflow */
	const struct { const char* what; int64_t v; } d[] = {
		{ "attention heads x head dim x 2", (int64_t)c->n_heads * c->head_dim * 2 },
		{ "key/value heads x head dim", (int64_t)c->n_kv_heads * c->head_dim },
		{ "linear key + value widths", 2 * (int64_t)c->lin_k_heads * c->lin_k_dim + 2 * (int64_t)c->lin_v_heads * c->lin_v_dim },
		{ "linear value heads x conv kernel", (int64_t)c->lin_v_heads * c->conv_kernel },
		{ "experts x experts per token", (int64_t)c->n_experts * c->n_experts_used },
	};
	for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
		if (d[i].v > PV_MAX_DERIVED)
			return pv_errf(err, errlen, "%s: %s = %lld is too large", label, d[i].what, (long long)d[i].v);
	return 0;
}
