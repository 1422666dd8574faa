/*
 * ops.h: CPU compute primitives: the matrix-vector kernels over the stored weight types.
 * AVX-512 and AVX2/FMA versions are chosen at run time (cpuid); a portable C version is the
 * fallback and the reference.
 *
 * Two numerics (struct pv_kernels, chosen per model: cpu/backend.c's knobs):
 *   - exact: f32 activations; every output is the f32 dot product of the dequantized weight row
 *     in the kernel set's fixed order (below; the pv_matmul* calls without a context use it);
 *   - fast: each activation row is converted once per call (Q8 blocks for the quantized types,
 *     bf16 for BF16 weights on CPUs with AVX512-BF16) and the products are integer block dot
 *     products (VNNI) with one fixed float sequence per output (cpu/qdot.h), identical in every
 *     kernel set; F32/F16 weights (and BF16 without AVX512-BF16) keep the exact kernels.
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

/* ---- kernel sets and numerics, per model ------------------------------------------------ */

enum pv_isa { PV_ISA_GENERIC = 0, PV_ISA_AVX2 = 1, PV_ISA_AVX512 = 2 };
/* The best kernel set this CPU and build run: AVX512 needs F, BW, VL, DQ and VNNI; AVX2 needs
 * AVX2, FMA and F16C. */
int pv_isa_best(void);
/* Whether the CPU has AVX512-BF16 (vdpbf16ps), used by the AVX512 set's fast numerics. */
int pv_isa_has_bf16(void);
const char* pv_isa_name(int isa); /* "generic", "avx2", "avx512" */
/* pv_isa_best() with its extensions, for build identities: "avx512+vnni+bf16", "avx2+fma", ... */
const char* pv_isa_describe(void);

struct pv_packed; /* one repacked matrix (kernels.c) */

/* A model's kernel choice, fixed when it is opened. */
struct pv_kernels {
	int isa;                  /* enum pv_isa in effect (never above pv_isa_best())          */
	int exact;                /* 1: exact numerics; 0: fast (see the top of this file)       */
	int bf16;                 /* fast numerics use vdpbf16ps on BF16 weights                 */
	int moe_group;            /* MoE: each expert once over all the rows that chose it (1), or
	                           * each row's experts on their own (0: the A/B arm; same bits)  */
	struct pv_packed* packs;  /* fast numerics on AVX2/AVX512: the quantized matrices in 16-row
	                           * panels (cpu/qdot.h), sorted by the address of the original   */
	int n_packs;
	void* region;             /* the panels' memory (kernels.c)                              */
	size_t region_bytes;
	/* set before pv_kernels_pack: a read-only file mapping [lo, hi) whose pages of a matrix's
	 * stored bytes packing drops from the resident set as soon as they are packed, so the peak
	 * holds the weights about once (see pv_kernels_release_sources); NULL: none */
	const unsigned char *release_lo, *release_hi;
};

/* Sets isa (clamped to pv_isa_best()) and the numerics; no panels yet. */
void pv_kernels_init(struct pv_kernels* k, int isa, int exact);
/* Repacks the quantized matrices among W[0..n) (others and duplicates are skipped) for the
 * fast numerics; a no-op for exact numerics or the generic set. Returns 0 or -1 (out of
 * memory: no panels, the products then run the generic fast path, same results). */
int pv_kernels_pack(struct pv_kernels* k, const struct pv_tensor* const* W, int n);
void pv_kernels_free(struct pv_kernels* k);
/* After packing: drops from the process's resident memory the pages of the repacked matrices'
 * original bytes that lie wholly inside [map, map + len), a read-only file mapping (the GGUF):
 * the products read the panels only, so those pages would otherwise stay resident twice (file
 * page + panel). They stay in the page cache; a later read (the tied embedding's rows, a view
 * that falls back to the stored bytes, a digest) faults them back in, same bytes. */
void pv_kernels_release_sources(const struct pv_kernels* k, const void* map, size_t len);
/* Bytes the panels take (0 without). */
uint64_t pv_kernels_packed_bytes(const struct pv_kernels* k);

/* What one session's products need: its pool, its model's kernels, and scratch for the
 * converted activation rows (pv_mm_act_bytes(rows, cols) bytes hold any `rows` rows of up to
 * `cols` elements; with less, a call converts and multiplies its rows in several passes). */
struct pv_mm {
	struct pv_pool* pool;
	const struct pv_kernels* k;
	void* act;
	size_t act_bytes;
};
size_t pv_mm_act_bytes(int rows, int64_t cols);

/* y[t*ldy + o] = sum_i x[t*ldx + i] * W[o, i] for t < T, o in [o0, o1), any weight type, in
 * c->k's numerics and kernel set. Batch-invariant: an output does not depend on T, on the
 * other rows, on the thread count or on the split. y must not alias x. */
void pv_mm_rows(const struct pv_mm* c, float* y, int ldy, const float* x, int ldx, int T, const struct pv_tensor* W,
                int64_t o0, int64_t o1);
static inline void pv_mm(const struct pv_mm* c, float* y, int ldy, const float* x, int ldx, int T,
                         const struct pv_tensor* W)
{
	pv_mm_rows(c, y, ldy, x, ldx, T, W, 0, W->rows);
}

/* Several products of the same activation rows (q/k/v, gate/up): y_i[t*ldy_i + o] for o in
 * [o0_i, o1_i), each exactly as pv_mm_rows would compute it, with the rows converted once per
 * format and one pool run for all (at most 64 outputs; the W_i share cols). */
struct pv_mm_out {
	float* y;
	int ldy;
	const struct pv_tensor* W;
	int64_t o0, o1;
};
void pv_mm_multi(const struct pv_mm* c, const float* x, int ldx, int T, const struct pv_mm_out* outs, int n);

/* Independent products (the routed experts of an MoE layer): y_i = x_i W_i^T over rows [o0_i,
 * o1_i), T_i activation rows each, each exactly as pv_mm_rows would compute it; as many as the
 * scratch holds share a pool run (n at most 64 per run; more are run in turns). */
struct pv_mm_prod {
	const float* x;
	int ldx, T;
	float* y;
	int ldy;
	const struct pv_tensor* W;
	int64_t o0, o1;
};
void pv_mm_batch(const struct pv_mm* c, const struct pv_mm_prod* p, int n);

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
