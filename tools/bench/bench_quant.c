/*
 * bench_quant.c: throughput of the quantized matrix-vector products (pv_quant_matmul_rows) next
 * to the BF16 path (pv_matmul), in the same run (not a test).
 *
 *   make build/libproven.a
 *   cc -std=c11 -O2 -D_GNU_SOURCE -pthread -Iinclude -Isrc tools/bench_quant.c \
 *      build/libproven.a -ljansson -lm -o build/bench_quant     (plus whatever LDLIBS lists)
 *   ./build/bench_quant [threads] [generic]
 *
 * GEMV cycles through several distinct matrices (more bytes than the L3) so the figure is the
 * streaming rate decode sees. GB/s counts the weight bytes as stored; Gw/s is weights per second,
 * which compares types of different sizes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/ops.h"
#include "quant/quant.h"
#include "base/util.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t rng = 12345;
static float frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int cmp_double(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

static void bench(struct pv_pool* pool, enum pv_dtype type, int rows, int cols, int T, int n_mats, double min_s)
{
	size_t rb = pv_dtype_row_bytes(type, cols);
	struct pv_tensor* W = calloc((size_t)n_mats, sizeof *W);
	float* row = malloc((size_t)cols * 4);
	for (int m = 0; m < n_mats; m++) {
		unsigned char* d = pv_aligned_alloc(rb * (size_t)rows);
		for (int r = 0; r < rows; r++) {
			for (int c = 0; c < cols; c++) row[c] = frand() * 0.05f;
			pv_quant_row(type, row, d + (size_t)r * rb, cols);
		}
		W[m] = (struct pv_tensor){ d, type, rows, cols };
	}
	free(row);
	float* x = pv_aligned_alloc((size_t)T * cols * 4);
	float* y = pv_aligned_alloc((size_t)T * rows * 4);
	for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand();

	for (int m = 0; m < n_mats; m++) pv_quant_matmul_rows(pool, y, rows, x, cols, T, &W[m], 0, rows);
	enum { MAXIT = 100000 };
	static double dt[MAXIT];
	int iters = 0;
	double start = now();
	while (iters < MAXIT && (now() - start < min_s || iters < 5)) {
		double t0 = now();
		pv_quant_matmul_rows(pool, y, rows, x, cols, T, &W[iters % n_mats], 0, rows);
		dt[iters++] = now() - t0;
	}
	qsort(dt, (size_t)iters, sizeof *dt, cmp_double);
	double med = dt[iters / 2], best = dt[0];
	double bytes = (double)rb * rows, w = (double)rows * cols;
	printf("%-5s %5dx%-5d T=%-4d mats=%d  median %8.3f ms %6.1f GB/s %6.2f Gw/s %7.1f GFLOP/s | best %6.1f GB/s\n",
	       pv_dtype_name(type), rows, cols, T, n_mats, med * 1e3, bytes / med / 1e9, w / med / 1e9,
	       2.0 * w * T / med / 1e9, bytes / best / 1e9);
	fflush(stdout);
	for (int m = 0; m < n_mats; m++) free((void*)W[m].data);
	free(W);
	free(x);
	free(y);
}

int main(int argc, char** argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 0;
	if (argc > 2) pv_ops_force_generic(1);
	struct pv_pool* pool = pv_pool_new(threads);
	printf("isa %s, %d threads\n", pv_ops_isa(), pv_pool_threads(pool));
	static const enum pv_dtype types[] = { PV_BF16, PV_Q8_0, PV_Q4_K, PV_Q6_K, PV_Q4_0, PV_Q5_K };
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) bench(pool, types[i], 4096, 4096, 1, 6, 1.0);
	for (size_t i = 0; i < 4; i++) bench(pool, types[i], 4096, 4096, 4, 6, 1.0);
	for (size_t i = 0; i < 4; i++) bench(pool, types[i], 4096, 4096, 128, 1, 2.0);
	pv_pool_free(pool);
	return 0;
}
