/*
 * qmatmul.c: the portable and dispatching halves of the quantized matrix-vector products (the
 * AVX2 kernels are in qmatmul_avx2.c).
 *
 * Design: dequantize, then multiply-add in f32. A quantized weight row enters the engine's f32
 * dot product (matmul.c) exactly as its dequantized F32 row would: eight lanes, 8-element groups
 * in increasing order, the same horizontal sum; the AVX2 set fuses the multiply-add, the portable
 * set rounds the product then the sum. Every output is therefore bit for bit pv_matmul_rows over
 * the dequantized matrix with the same kernel set, and the summation order depends on the row
 * length alone (not on T, the thread count or the split). Activations are not quantized
 * (llama.cpp quantizes them to 8 bits per row for integer dot products, which is faster when
 * compute-bound but changes every result by the activation rounding); here quantization error
 * comes from the weights alone.
 *   - generic: per row, each block is dequantized into a small buffer and accumulated in the
 *     lane order above against up to 8 activation rows at a time;
 *   - AVX2, T <= 4 (decode, short verification): fused tiles that dequantize 8 weights into a
 *     register and feed them to R x C accumulators (qmatmul_avx2.c);
 *   - AVX2, T > 4 (prefill): blocks of rows are dequantized once into a per-thread f32 buffer
 *     that stays in L2 and passed to pv_matmul_rows, which reuses them across all T rows. If the
 *     buffer cannot be allocated the fused tiles are used for every T (same results).
 */
#include "cpu/ops.h"
#include "cpu/kern.h"
#include "base/util.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) || defined(__i386__)
#define PV_HAVE_QAVX2 1
/* qmatmul_avx2.c */
void pv_qmm_avx2(enum pv_dtype t, float* y, int ldy, const float* x, int ldx, int T,
                 const unsigned char* w, size_t row_bytes, int64_t n, int64_t o0, int64_t o1);
void pv_qdequant_avx2(enum pv_dtype t, const unsigned char* w, float* out, int64_t n);
#else
#define PV_HAVE_QAVX2 0
#endif

/* ---- products: portable kernel ----------------------------------------------------------- */

#define GEN_TT 8

/* ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), as matmul.c. */
static inline float hsum8(const float a[8])
{
	float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
	return (s0 + s2) + (s1 + s3);
}

/* Rows [o0, o1) times all T activation rows; each block is dequantized once per tile of up to
 * GEN_TT activation rows, then each lane adds its products group by group in order. */
static void qmm_generic(float* y, int ldy, const float* x, int ldx, int T, const struct pv_tensor* W,
                        int64_t o0, int64_t o1)
{
	const enum pv_dtype t = W->type;
	const int64_t n = W->cols, blk = pv_dtype_block(t);
	const size_t bb = pv_dtype_block_bytes(t), rb = pv_dtype_row_bytes(t, n);
	float wb[PV_QK_K];
	float acc[GEN_TT][8];

	for (int64_t o = o0; o < o1; o++) {
		const unsigned char* wr = (const unsigned char*)W->data + (size_t)o * rb;
		for (int t0 = 0; t0 < T; t0 += GEN_TT) {
			int tt = T - t0 < GEN_TT ? T - t0 : GEN_TT;
			memset(acc, 0, sizeof acc);
			for (int64_t b = 0; b < n / blk; b++) {
				pv_dequant_block(t, wr + (size_t)b * bb, wb);
				for (int r = 0; r < tt; r++) {
					const float* xr = x + (size_t)(t0 + r) * ldx + b * blk;
					for (int i = 0; i < blk; i += 8)
						for (int l = 0; l < 8; l++) acc[r][l] = acc[r][l] + wb[i + l] * xr[i + l];
				}
			}
			for (int r = 0; r < tt; r++) y[(size_t)(t0 + r) * ldy + o] = hsum8(acc[r]);
		}
	}
}

/* ---- products: driver ------------------------------------------------------------------- */

/* f32 bytes of dequantized rows per thread in the prefill path (stays in L2): the pool's
 * per-thread scratch, so the product never allocates. */
#define DEQ_BUF_BYTES PV_POOL_SCRATCH

struct qmm_job {
	float* y;
	int ldy;
	const float* x;
	int ldx;
	int T;
	const struct pv_tensor* W;
	int64_t o0, o1;
	int64_t rows_per_task;
	int t_per_task;
	int n_row_tasks;
	int avx2;
	struct pv_pool* pool; /* prefill path: per-thread buffers from the pool's scratch */
	int buffered;
	int64_t buf_rows;     /* rows per buffer                                  */
};

static void qmm_task(void* ctx, int task, int thread)
{
	const struct qmm_job* j = ctx;
	const struct pv_tensor* W = j->W;
	int64_t a = j->o0 + (int64_t)(task % j->n_row_tasks) * j->rows_per_task;
	int64_t b = j->o1 - a < j->rows_per_task ? j->o1 : a + j->rows_per_task;
	int t0 = (task / j->n_row_tasks) * j->t_per_task;
	int nt = j->T - t0 < j->t_per_task ? j->T - t0 : j->t_per_task;
	float* y = j->y + (size_t)t0 * j->ldy;
	const float* x = j->x + (size_t)t0 * j->ldx;
	const size_t rb = pv_dtype_row_bytes(W->type, W->cols);

	if (!j->avx2) {
		qmm_generic(y, j->ldy, x, j->ldx, nt, W, a, b);
		return;
	}
#if PV_HAVE_QAVX2
	if (!j->buffered) {
		pv_qmm_avx2(W->type, y, j->ldy, x, j->ldx, nt, W->data, rb, W->cols, a, b);
		return;
	}
	float* buf = pv_pool_scratch(j->pool, thread);
	for (int64_t r = a; r < b; r += j->buf_rows) {
		int64_t nr = b - r < j->buf_rows ? b - r : j->buf_rows;
		const unsigned char* src = (const unsigned char*)W->data + (size_t)r * rb;
		for (int64_t i = 0; i < nr; i++)
			pv_qdequant_avx2(W->type, src + (size_t)i * rb, buf + (size_t)i * (size_t)W->cols, W->cols);
		struct pv_tensor v = { buf, PV_F32, nr, W->cols };
		pv_matmul_rows_set(NULL, 1, y + r, j->ldy, x, j->ldx, nt, &v, 0, nr);
	}
#endif
}

#define MIN_PARALLEL_MACS (64 * 1024)

void pv_quant_matmul_rows(struct pv_pool* p, float* y, int ldy, const float* x, int ldx, int T,
                          const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	pv_quant_matmul_rows_set(p, !strcmp(pv_ops_isa(), "avx2+fma"), y, ldy, x, ldx, T, W, o0, o1);
}

void pv_quant_matmul_rows_set(struct pv_pool* p, int avx2, float* y, int ldy, const float* x, int ldx, int T,
                              const struct pv_tensor* W, int64_t o0, int64_t o1)
{
	PV_ASSERT(W && W->data && (unsigned)W->type < PV_DTYPE_COUNT);
	PV_ASSERT(0 <= o0 && o0 <= o1 && o1 <= W->rows);
	if (!pv_dtype_is_quant(W->type)) {
		pv_matmul_rows_set(p, avx2, y, ldy, x, ldx, T, W, o0, o1);
		return;
	}
	PV_ASSERT(W->cols % pv_dtype_block(W->type) == 0);
	if (T <= 0 || o1 == o0) return;

	const int64_t rows = o1 - o0, n = W->cols;
	const int threads = pv_pool_threads(p);
	struct qmm_job j = { y, ldy, x, ldx, T, W, o0, o1, rows, T, 1, 0, p, 0, 1 };
	j.avx2 = PV_HAVE_QAVX2 && avx2 && pv_isa_best() >= PV_ISA_AVX2;

	/* Prefill on AVX2: dequantize blocks of rows once per thread and reuse them for all T. */
	int64_t align = 24; /* row multiple per task; the buffer height when buffering */
	if (j.avx2 && T > 4 && n > 0 && p && (int64_t)(DEQ_BUF_BYTES / 4) / n >= 1) {
		j.buf_rows = (int64_t)(DEQ_BUF_BYTES / 4) / n;
		j.buffered = 1;
		align = j.buf_rows;
	}

	uint64_t macs = (uint64_t)rows * (uint64_t)n * (uint64_t)T;
	if (threads <= 1 || macs < MIN_PARALLEL_MACS) {
		qmm_task(&j, 0, 0);
		return;
	}
	struct pv_mm_split sp = pv_mm_split(rows, T, threads, align); /* ops.h */
	j.rows_per_task = sp.rows_per_task;
	j.t_per_task = sp.t_per_task;
	j.n_row_tasks = sp.n_row_tasks;
	pv_pool_run(p, qmm_task, &j, sp.n_tasks);
}

float pv_quant_dot(enum pv_dtype t, const void* w, const float* x, int64_t n)
{
	float r = 0.0f;
	struct pv_tensor v = { w, t, 1, n };
	if (n <= 0) return 0.0f;
	pv_quant_matmul_rows(NULL, &r, 1, x, (int)n, 1, &v, 0, 1);
	return r;
}
