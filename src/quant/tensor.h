/*
 * tensor.h: a read-only view of weight bytes, as stored in the file (never copied).
 *
 * A view is 1-D [cols] or 2-D [rows, cols] row-major with cols contiguous, which is how both
 * PyTorch nn.Linear weights ([out, in]) and ggml ({in, out}) lay them out. 3-D checkpoint
 * tensors (fused MoE experts [E, A, B]) are sliced into 2-D views at load time.
 */
#ifndef PV_TENSOR_H
#define PV_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Quantized types (ggml block formats, see quant.h) follow the float types; a quantized row of
 * cols elements is cols / pv_dtype_block(t) blocks of pv_dtype_block_bytes(t) bytes. */
enum pv_dtype {
	PV_F32 = 0, PV_F16, PV_BF16,
	PV_Q8_0, PV_Q4_0, PV_Q4_1, PV_Q5_0, PV_Q5_1, PV_Q4_K, PV_Q5_K, PV_Q6_K,
	PV_DTYPE_COUNT
};

struct pv_tensor {
	const void* data;   /* NULL when absent                                  */
	enum pv_dtype type;
	int64_t rows;       /* 1 for vectors                                      */
	int64_t cols;       /* contiguous dimension                               */
};

/* Bytes per element of the float types; 0 for quantized types (use pv_dtype_block_bytes). */
static inline size_t pv_dtype_size(enum pv_dtype t)
{
	return t == PV_F32 ? 4 : (t == PV_F16 || t == PV_BF16) ? 2 : 0;
}
const char* pv_dtype_name(enum pv_dtype t);

/* Element i of a tensor row as float (slow path: loaders, tests, small vectors). Quantized
 * types are dequantized exactly (quant.h). */
float pv_tensor_get(const struct pv_tensor* t, int64_t row, int64_t col);
/* Copies n elements starting at (row, 0) into f32 dst. */
void pv_tensor_row_f32(const struct pv_tensor* t, int64_t row, float* dst);

static inline float pv_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
	return v.f;
}
float pv_f16_to_f32(uint16_t h);

#endif
