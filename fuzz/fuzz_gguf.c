/*
 * fuzz_gguf.c: libFuzzer target for the GGUF parser (src/format/gguf.c). The input is a whole file
 * image. A parse must either fail with a one-line message and leave nothing allocated, or vouch
 * only for bytes inside the input: every accepted tensor's first and last bytes are read and its
 * first and last elements dequantized (ASan reports any range that is not inside), every key
 * must be found by lookup, and the last element of every array (nested ones included) is read
 * through the accessors.
 *
 *   make fuzz && build-fuzz/fuzz_gguf -max_total_time=180 fuzz/seeds/gguf tests/corpus/gguf/valid tests/corpus/gguf/bad
 */
#include <stdint.h>
#include <string.h>

#include "format/gguf.h"
#include "quant/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static volatile unsigned sink;

static void touch_array(const struct pv_gguf_array* a)
{
	const char* s;
	uint64_t len, u;
	int64_t i;
	double d;
	struct pv_gguf_array sub;
	if (!a->n) return;
	uint64_t k = a->n - 1;
	if (!pv_gguf_arr_str(a, k, &s, &len) && len) sink += (unsigned char)s[len - 1];
	if (!pv_gguf_arr_i64(a, k, &i)) sink += (unsigned)i;
	if (!pv_gguf_arr_u64(a, k, &u)) sink += (unsigned)u;
	if (!pv_gguf_arr_f64(a, k, &d)) sink += d > 0;
	if (!pv_gguf_arr_arr(a, k, &sub)) {
		if (sub.nbytes) sink += sub.data[sub.nbytes - 1];
		touch_array(&sub); /* bounded by the nesting limit */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
	struct pv_gguf g;
	char err[512];

	err[0] = 0;
	if (pv_gguf_parse(&g, "fuzz", data, size, err, sizeof err)) {
		if (!err[0] || strchr(err, '\n') || strncmp(err, "fuzz: ", 6) || g.kv || g.tensors || g.n_kv ||
		    g.n_tensors)
			__builtin_trap();
		return 0;
	}
	if (g.data_offset > size || (g.alignment & (g.alignment - 1))) __builtin_trap();
	for (int64_t i = 0; i < g.n_tensors; i++) {
		const struct pv_gguf_tensor* t = &g.tensors[i];
		const uint8_t* p = t->data;
		if (p < data || t->nbytes > size || (size_t)(p - data) > size - t->nbytes) __builtin_trap();
		if (pv_gguf_find_tensor(&g, t->name) != t) __builtin_trap();
		if (t->nbytes) sink += p[0] ^ p[t->nbytes - 1];
		struct pv_tensor v;
		pv_gguf_tensor_view(t, &v);
		if (v.rows > 0 && v.cols > 0) {
			float a = pv_tensor_get(&v, 0, 0), b = pv_tensor_get(&v, v.rows - 1, v.cols - 1);
			sink += (a == a) + (b > 0);
		}
	}
	for (int64_t i = 0; i < g.n_kv; i++) {
		const struct pv_gguf_kv* kv = &g.kv[i];
		if (pv_gguf_find(&g, kv->key) != kv) __builtin_trap();
		if (kv->type == PV_GGUF_STRING && kv->str_len) sink += (unsigned char)kv->str[kv->str_len - 1];
		if (kv->type == PV_GGUF_ARRAY) touch_array(&kv->arr);
		uint32_t u;
		float f;
		(void)pv_gguf_get_u32(&g, kv->key, &u, err, sizeof err);
		(void)pv_gguf_get_f32(&g, kv->key, &f, err, sizeof err);
	}
	pv_gguf_close(&g);
	return 0;
}
