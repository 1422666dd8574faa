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

enum pv_dtype { PV_F32 = 0, PV_F16, PV_BF16, PV_DTYPE_COUNT };

struct pv_tensor {
	const void* data;   /* NULL when absent                                  */
	enum pv_dtype type;
	int64_t rows;       /* 1 for vectors                                      */
	int64_t cols;       /* contiguous dimension                               */
};

static inline size_t pv_dtype_size(enum pv_dtype t) { return t == PV_F32 ? 4 : 2; }
const char* pv_dtype_name(enum pv_dtype t);

/* Element i of a tensor row as float (slow path: loaders, tests, small vectors). */
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
