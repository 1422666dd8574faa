/*
 * fuzz_config.c: libFuzzer target for the config.json parser (src/model/config.c). A parse must either
 * fail with a one-line message or produce a config whose invariants the loader and the forward
 * pass rely on; a broken invariant traps.
 *
 *   make fuzz && build-fuzz/fuzz_config -max_total_time=180 fuzz/seeds/config tests/corpus/config
 */
#include <stdint.h>
#include <string.h>

#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int valid(const struct pv_config* c)
{
	if (c->n_layers < 1 || c->hidden < 1 || c->vocab < 1 || !c->layer_kind || !c->layer_moe) return 0;
	if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->head_dim < 1) return 0;
	if (c->rope_dim < 2 || c->rope_dim % 2 || c->rope_dim > c->head_dim) return 0;
	if (!(c->rms_eps > 0) || !(c->rope_theta > 0) || c->max_pos < 1) return 0;
	if (c->n_mtp_layers < 0 || c->n_mtp_layers > 1) return 0;
	for (int i = 0; i < c->n_layers; i++) {
		if (c->layer_kind[i] > PV_LAYER_LINEAR || c->layer_moe[i] > 1) return 0;
		if (c->layer_kind[i] == PV_LAYER_LINEAR &&
		    (c->lin_k_heads < 1 || c->lin_v_heads % c->lin_k_heads || c->lin_k_dim < 1 || c->lin_v_dim < 1 ||
		     c->conv_kernel < 1 || !pv_arch_is_hybrid(c->arch)))
			return 0;
		if (c->layer_moe[i] && (c->n_experts < 1 || c->n_experts_used < 1 ||
		                        c->n_experts_used > c->n_experts || c->moe_inter < 1))
			return 0;
		if (!c->layer_moe[i] && c->intermediate < 1) return 0;
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	struct pv_config c;
	char err[512];

	err[0] = 0;
	if (pv_config_parse_buffer(&c, "fuzz", (const char*)data, size, err, sizeof err)) {
		if (!err[0] || strchr(err, '\n') || c.layer_kind) __builtin_trap();
		return 0;
	}
	if (!valid(&c)) __builtin_trap();
	pv_config_free(&c);
	return 0;
}
