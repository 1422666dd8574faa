/*
 * ops.h: CPU compute primitives: the matrix-vector kernels over the stored weight types.
 * AVX2/FMA versions are chosen at run time (cpuid); a portable C version is the fallback and
 * the reference.
 *
 * Exactness: every output element y[t][o] is one dot product computed by one thread with a
 * fixed summation order that depends only on the row length `in` (never on T, on which rows
 * are computed together, on the thread count or on the split of work). That is the batch
 * invariance the engine promises.
 */
#ifndef PV_OPS_H
#define PV_OPS_H

#include "base/pool.h"
#include "quant/tensor.h"

/*
 * y[t*ldy + o] = sum_i x[t*ldx + i] * W[o, i]     for t < T, o < W.rows, i < W.cols
 * x: [T, in] f32; W: [out, in] as stored (F32, F16 or BF16); y: [T, out] f32.
 * Parallel over output rows. y must not alias x.
 */
void pv_matmul(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
               const struct pv_tensor* W);

/* Same as pv_matmul restricted to output rows [o0, o1) (y still indexed by absolute o). */
void pv_matmul_rows(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
                    const struct pv_tensor* W, int64_t o0, int64_t o1);

/* How a matmul of `rows` output rows by T activation rows is cut into pool tasks: about four
 * per thread, output rows in multiples of `align`, and when there are too few output-row blocks
 * (small projections in a prompt) activation rows too, in multiples of 4. Task i covers output
 * block i % n_row_tasks and activation block i / n_row_tasks. The split never changes a result. */
struct pv_mm_split {
	int64_t rows_per_task;
	int t_per_task;
	int n_row_tasks;
	int n_tasks;
};
struct pv_mm_split pv_mm_split(int64_t rows, int T, int threads, int64_t align);

/* Fixed-order f32 dot product (same result for the same inputs, whatever the caller). */
float pv_dot_f32(const float* a, const float* b, int n);
/* y[i] += a * x[i] */
void pv_axpy_f32(float* y, float a, const float* x, int n);

/* Which kernel set was selected ("avx2+fma" or "generic"); for build identity in benchmarks. */
const char* pv_ops_isa(void);
/* Force the portable kernels (tests compare both). */
void pv_ops_force_generic(int on);

/* ---- products --------------------------------------------------------------------------- */

/*
 * Dot product of a weight row w (n elements of type t, any type) with f32 activations x.
 * The result is bit for bit what pv_dot_f32 (above) gives for the dequantized row: weights are
 * dequantized exactly and enter the engine's fixed-order f32 dot product (matmul.c), so
 * the summation order depends on n alone.
 */
float pv_quant_dot(enum pv_dtype t, const void* w, const float* x, int64_t n);

/*
 * y[t*ldy + o] = sum_i x[t*ldx + i] * W[o, i]   for t < T, o in [o0, o1)
 * Same contract as pv_matmul_rows (above), for every weight type (float types are passed on to
 * pv_matmul_rows). Every output is bit for bit what pv_matmul_rows gives for the F32 matrix of
 * dequantized weights, with the same kernel set (AVX2/FMA or generic, chosen as above):
 * batch-invariant, independent of T, of the thread count and of the split of the work.
 * W->cols must be a whole number of blocks. y must not alias x.
 */
void pv_quant_matmul_rows(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
                          const struct pv_tensor* W, int64_t o0, int64_t o1);

#endif
