/*
 * matmul.c: matrix-vector products over stored weights, the f32 dot/axpy helpers, and the
 * choice between the AVX2/FMA kernels (matmul_avx2.c) and the portable ones below.
 *
 * Summation order: both kernel sets compute every output y[t][o] as one dot product of the
 * weight row W[o] and the activation row x[t], n = W.cols elements long, in this order:
 *
 *   acc[0..7] = +0
 *   for each block b of 8 elements (the last one, if n % 8 != 0, padded with zeros in both
 *   operands):  acc[l] = acc[l] + w[8b + l] * x[8b + l]      for l = 0..7
 *   result = ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7))
 *
 * The AVX2 set fuses the multiply-add (one rounding, fma(w, x, acc)); the portable set
 * rounds the product and then the sum (this file is compiled in ISO C mode, where GCC does
 * not contract a*b+c into an fma, and without -march flags). The two sets therefore differ in
 * the last bits, and a process uses one of them, chosen once from the CPU. Within a set the
 * order depends on n alone: not on T, on which rows are computed together, on the number of
 * threads or the split of the work, and not on pv_matmul versus pv_matmul_rows.
 * pv_dot_f32(a, b, n) is the same sequence with a as the weight row and b as the activation.
 */
#include "cpu/ops.h"
#include "cpu/kern.h"
#include "quant/quant.h"

#include <stdatomic.h>
#include <string.h>

#include "base/util.h"

#if defined(__x86_64__) || defined(__i386__)
#define PV_HAVE_AVX2_KERNELS 1
/* Defined in matmul_avx2.c. */
void pv_matmul_avx2(float* y, int ldy, const float* x, int ldx, int T,
                    const struct pv_tensor* W, int64_t o0, int64_t o1);
float pv_dot_f32_avx2(const float* a, const float* b, int n);
void pv_axpy_f32_avx2(float* y, float a, const float* x, int n);
#else
#define PV_HAVE_AVX2_KERNELS 0
#endif

/* ---- kernel selection ------------------------------------------------------------------ */

static atomic_int g_cpu_avx2 = -1;  /* -1: not probed yet; 0/1 */
static atomic_int g_force_generic;

static int cpu_has_avx2(void)
{
	int v = atomic_load_explicit(&g_cpu_avx2, memory_order_relaxed);
	if (v < 0) {
#if PV_HAVE_AVX2_KERNELS
		__builtin_cpu_init();
		/* F16C comes with every AVX2 CPU in practice; requiring it keeps one kernel set
		 * for all three weight types. libgcc also checks that the OS saves ymm state. */
		v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		    __builtin_cpu_supports("f16c");
#else
		v = 0;
#endif
		/* Racing probes all store the same answer. */
		atomic_store_explicit(&g_cpu_avx2, v, memory_order_relaxed);
	}
	return v;
}

static int use_avx2(void)
{
	return !atomic_load_explicit(&g_force_generic, memory_order_relaxed) && cpu_has_avx2();
}

const char* pv_ops_isa(void) { return use_avx2() ? "avx2+fma" : "generic"; }

void pv_ops_force_generic(int on) { atomic_store(&g_force_generic, on ? 1 : 0); }

/* ---- portable kernels ------------------------------------------------------------------ */

/* IEEE half to float, exact for every input (F. Giesen's branch-light method): move the
 * exponent and mantissa into place and rebias; infinities and NaNs get the rest of the
 * exponent; zeros and subnormals are renormalised by one exact subtraction (the difference
 * is representable, so it is exact in any rounding mode). */
static inline float f16_to_f32(uint16_t h)
{
	const uint32_t exp_mask = 0x7c00u << 13;
	uint32_t u = (uint32_t)(h & 0x7fff) << 13;
	uint32_t e = u & exp_mask;
	float f;
	u += (127 - 15) << 23;
	if (e == exp_mask) {
		u += (128 - 16) << 23; /* inf, NaN */
		memcpy(&f, &u, 4);
	} else if (e == 0) {
		u += 1 << 23;          /* zero, subnormal: (2^-14 + m 2^-24) - 2^-14 */
		memcpy(&f, &u, 4);
		f -= 6.103515625e-05f; /* 2^-14 */
	} else {
		memcpy(&f, &u, 4);
	}
	uint32_t bits;
	memcpy(&bits, &f, 4);
	bits |= (uint32_t)(h & 0x8000) << 16;
	memcpy(&f, &bits, 4);
	return f;
}

#define INLINE static inline __attribute__((always_inline))

/* Converts n weights at p (any alignment) to f32. */
INLINE void convert_row(float* dst, const char* p, int n, int type)
{
	if (type == PV_F32) {
		memcpy(dst, p, (size_t)n * 4);
		return;
	}
	for (int i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, p + (size_t)i * 2, 2);
		dst[i] = type == PV_F16 ? f16_to_f32(h) : pv_bf16_to_f32(h);
	}
}

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as in matmul_avx2.c. */
INLINE float hsum8(const float a[8])
{
	float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
	return (s0 + s2) + (s1 + s3);
}

/* Weights are converted GEN_CHUNK at a time into a stack buffer, then dotted against up to
 * GEN_TT activation rows while they are in L1. Chunks are whole 8-blocks, so only the last
 * one can end in a partial block, and each lane still adds its products block by block in
 * increasing order: the contract's order, whatever T and the chunking. */
#define GEN_CHUNK 1024
typedef float v4f __attribute__((vector_size(16)));
#define GEN_TT 8

INLINE void matmul_generic_t(float* y, int ldy, const float* x, int ldx, int T, const char* w,
                             int64_t n, int64_t o0, int64_t o1, int type)
{
	const size_t es = type == PV_F32 ? 4 : 2;
	const size_t ws = (size_t)n * es;
	float wf[GEN_CHUNK];
	float acc[GEN_TT][8];

	for (int64_t o = o0; o < o1; o++) {
		const char* wr = w + (size_t)o * ws;
		for (int t0 = 0; t0 < T; t0 += GEN_TT) {
			int tt = T - t0 < GEN_TT ? T - t0 : GEN_TT;
			memset(acc, 0, sizeof acc);
			for (int64_t c0 = 0; c0 < n; c0 += GEN_CHUNK) {
				int len = n - c0 < GEN_CHUNK ? (int)(n - c0) : GEN_CHUNK;
				int full = len / 8 * 8;
				convert_row(wf, wr + (size_t)c0 * es, len, type);
				for (int t = 0; t < tt; t++) {
					const float* xr = x + (size_t)(t0 + t) * ldx + c0;
					/* Lanes 0-3 and 4-7 as two 4-float vectors (GCC vector extension:
					 * element-wise IEEE multiply and add, SIMD where the target has it). */
					v4f lo, hi;
					memcpy(&lo, acc[t], 16);
					memcpy(&hi, acc[t] + 4, 16);
					for (int i = 0; i < full; i += 8) {
						v4f wl, wh, xl, xh;
						memcpy(&wl, wf + i, 16);
						memcpy(&wh, wf + i + 4, 16);
						memcpy(&xl, xr + i, 16);
						memcpy(&xh, xr + i + 4, 16);
						lo = lo + wl * xl;
						hi = hi + wh * xh;
					}
					if (full < len) {
						/* Padded block: lanes past the end add +0 * +0 = +0, as the
						 * zero-padded AVX2 block does. */
						float wp[8] = { 0 }, xp[8] = { 0 };
						memcpy(wp, wf + full, sizeof(float) * (size_t)(len - full));
						memcpy(xp, xr + full, sizeof(float) * (size_t)(len - full));
						v4f wl, wh, xl, xh;
						memcpy(&wl, wp, 16);
						memcpy(&wh, wp + 4, 16);
						memcpy(&xl, xp, 16);
						memcpy(&xh, xp + 4, 16);
						lo = lo + wl * xl;
						hi = hi + wh * xh;
					}
					memcpy(acc[t], &lo, 16);
					memcpy(acc[t] + 4, &hi, 16);
				}
			}
			for (int t = 0; t < tt; t++) y[(size_t)(t0 + t) * ldy + o] = hsum8(acc[t]);
		}
	}
}

/* One output in the contract's order: the same code path as a one-row matmul. */
static float dot_generic_f32(const float* a, const float* b, int n)
{
	float r;
	matmul_generic_t(&r, 1, b, n, 1, (const char*)a, n, 0, 1, PV_F32);
	return r;
}

static void matmul_generic(float* y, int ldy, const float* x, int ldx, int T,
                           const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	const char* w = W->data;
	switch (W->type) {
	case PV_F32: matmul_generic_t(y, ldy, x, ldx, T, w, W->cols, o0, o1, PV_F32); break;
	case PV_F16: matmul_generic_t(y, ldy, x, ldx, T, w, W->cols, o0, o1, PV_F16); break;
	default: matmul_generic_t(y, ldy, x, ldx, T, w, W->cols, o0, o1, PV_BF16); break;
	}
}

/* ---- parallel driver ------------------------------------------------------------------- */

struct mm_job {
	float* y;
	int ldy;
	const float* x;
	int ldx;
	int T;
	const struct pv_tensor* W;
	int64_t o0, o1;
	int64_t rows_per_task; /* a task is a block of output rows ...                     */
	int t_per_task;        /* ... times a block of activation rows                    */
	int n_row_tasks;
	int avx2;              /* chosen once per call: one call never mixes kernel sets  */
};

static void mm_task(void* ctx, int task, int thread)
{
	(void)thread;
	const struct mm_job* j = ctx;
	int64_t a = j->o0 + (int64_t)(task % j->n_row_tasks) * j->rows_per_task;
	int64_t b = j->o1 - a < j->rows_per_task ? j->o1 : a + j->rows_per_task;
	int t0 = (task / j->n_row_tasks) * j->t_per_task;
	int nt = j->T - t0 < j->t_per_task ? j->T - t0 : j->t_per_task;
	float* y = j->y + (size_t)t0 * j->ldy;
	const float* x = j->x + (size_t)t0 * j->ldx;
#if PV_HAVE_AVX2_KERNELS
	if (j->avx2) {
		pv_matmul_avx2(y, j->ldy, x, j->ldx, nt, j->W, a, b);
		return;
	}
#endif
	matmul_generic(y, j->ldy, x, j->ldx, nt, j->W, a, b);
}

/* Below this many multiply-adds a call runs on the calling thread: waking the pool costs
 * about a microsecond. */
#define MIN_PARALLEL_MACS (64 * 1024)

void pv_matmul_rows(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
                    const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	pv_matmul_rows_set(p, use_avx2(), y, ldy, x, ldx, T, W, o0, o1);
}

void pv_matmul_rows_set(struct pv_pool* p, int avx2, float* y, int ldy, const float* x, int ldx, int T,
                        const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	PV_ASSERT(W && W->data && (unsigned)W->type < PV_DTYPE_COUNT);
	PV_ASSERT(0 <= o0 && o0 <= o1 && o1 <= W->rows);
	if (T <= 0 || o1 == o0) return;
	if (pv_dtype_is_quant(W->type)) {
		/* block-quantized weights (qmatmul.c; same batch-invariance contract) */
		pv_quant_matmul_rows_set(p, avx2, y, ldy, x, ldx, T, W, o0, o1);
		return;
	}

	int64_t rows = o1 - o0;
	int threads = pv_pool_threads(p);
	uint64_t macs = (uint64_t)rows * (uint64_t)W->cols * (uint64_t)T;
	struct mm_job j = { y, ldy, x, ldx, T, W, o0, o1, rows, T, 1, PV_HAVE_AVX2_KERNELS && avx2 && cpu_has_avx2() };

	if (threads <= 1 || macs < MIN_PARALLEL_MACS) {
		mm_task(&j, 0, 0);
		return;
	}
	/* Row blocks are multiples of 24 so the kernels' row tiles (8 rows for one x row, 3 for
	 * several) stay full; activation blocks are multiples of the kernels' 4-row tile. */
	struct pv_mm_split sp = pv_mm_split(rows, T, threads, 24);
	j.rows_per_task = sp.rows_per_task;
	j.t_per_task = sp.t_per_task;
	j.n_row_tasks = sp.n_row_tasks;
	pv_pool_run(p, mm_task, &j, sp.n_tasks);
}

struct pv_mm_split pv_mm_split(int64_t rows, int T, int threads, int64_t align)
{
	struct pv_mm_split sp = { rows, T, 1, 1 };
	const int want = 4 * threads;
	int64_t per = (rows + want - 1) / want;
	per = (per + align - 1) / align * align;
	sp.rows_per_task = per;
	sp.n_row_tasks = (int)((rows + per - 1) / per);
	if (sp.n_row_tasks < want && T >= 8) {
		int n_t = (want + sp.n_row_tasks - 1) / sp.n_row_tasks;
		if (n_t > T / 4) n_t = T / 4;
		int t_per = (T + n_t - 1) / n_t;
		sp.t_per_task = (t_per + 3) / 4 * 4;
	}
	sp.n_tasks = sp.n_row_tasks * ((T + sp.t_per_task - 1) / sp.t_per_task);
	return sp;
}

void pv_matmul(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
               const struct pv_tensor* W)
{
	pv_matmul_rows(p, y, ldy, x, ldx, T, W, 0, W->rows);
}

float pv_dot_f32(const float* a, const float* b, int n) { return pv_dot_f32_set(use_avx2(), a, b, n); }

void pv_axpy_f32(float* y, float a, const float* x, int n) { pv_axpy_f32_set(use_avx2(), y, a, x, n); }

float pv_dot_f32_set(int avx2, const float* a, const float* b, int n)
{
#if PV_HAVE_AVX2_KERNELS
	if (avx2 && cpu_has_avx2()) return pv_dot_f32_avx2(a, b, n);
#endif
	return dot_generic_f32(a, b, n);
}

void pv_axpy_f32_set(int avx2, float* y, float a, const float* x, int n)
{
#if PV_HAVE_AVX2_KERNELS
	if (avx2 && cpu_has_avx2()) {
		pv_axpy_f32_avx2(y, a, x, n);
		return;
	}
#endif
	for (int i = 0; i < n; i++) y[i] = y[i] + a * x[i];
}
