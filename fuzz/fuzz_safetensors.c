/*
 * fuzz_safetensors.c: libFuzzer target for the safetensors header parser (src/format/safetensors.c).
 * The input is a whole file image. A parse must either fail with a one-line message or vouch for
 * byte ranges that really lie inside the input: every accepted tensor's first and last bytes are
 * read (ASan reports any range that does not), and supported tensors are read as elements.
 *
 *   make fuzz && build-fuzz/fuzz_safetensors -max_total_time=180 fuzz/seeds/safetensors tests/corpus/safetensors
 */
#include <stdint.h>
#include <string.h>

#include "format/safetensors.h"
#include "quant/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	struct pv_st_file f;
	char err[512];
	volatile float sink = 0;

	err[0] = 0;
	if (pv_st_parse(&f, "fuzz", data, size, err, sizeof err)) {
		if (!err[0] || strchr(err, '\n') || f.tensors || f.n_tensors) __builtin_trap();
		return 0;
	}
	for (int i = 0; i < f.n_tensors; i++) {
		const struct pv_st_tensor* t = &f.tensors[i];
		const uint8_t* p = t->data;
		if (p < data || t->nbytes > size || p + t->nbytes > data + size) __builtin_trap();
		if (t->nbytes) sink += (float)(p[0] ^ p[t->nbytes - 1]);
		if (t->dtype >= 0 && t->numel > 0) {
			struct pv_tensor v = { t->data, (enum pv_dtype)t->dtype, 1, t->numel };
			sink += pv_tensor_get(&v, 0, 0) + pv_tensor_get(&v, 0, t->numel - 1);
		}
	}
	pv_st_close(&f);
	(void)sink;
	return 0;
}
