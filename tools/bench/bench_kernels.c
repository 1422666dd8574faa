/*
 * bench_kernels.c: throughput of pv_matmul on this machine (not a test).
 *
 *   make build/libproven.a   (or just the kernel objects)
 *   cc -std=c11 -O2 -D_GNU_SOURCE -pthread -Iinclude -Isrc tools/bench_kernels.c \
 *      build/src/matmul.o build/src/matmul_avx2.o build/src/pool.o build/src/util.o -lm \
 *      -o build/bench_kernels
 *   ./build/bench_kernels [threads] [generic]
 *
 * GEMV cycles through several distinct weight matrices (more bytes than the L3) so the
 * figure is the memory-streaming rate decode sees, not a cache-resident one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/ops.h"
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

static void fill(void* data, enum pv_dtype type, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float f = frand() * 0.05f;
		if (type == PV_F32) {
			((float*)data)[i] = f;
		} else if (type == PV_BF16) {
			uint32_t u;
			memcpy(&u, &f, 4);
			((uint16_t*)data)[i] = (uint16_t)(u >> 16);
		} else {
			/* crude f16: fine for timing */
			((uint16_t*)data)[i] = (uint16_t)(0x2000 + (rng & 0x1fff));
		}
	}
}

static int cmp_double(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

static const char* dname(enum pv_dtype t)
{
	return t == PV_F32 ? "f32" : t == PV_F16 ? "f16" : "bf16";
}

static void bench(struct pv_pool* pool, enum pv_dtype type, int rows, int cols, int T, int n_mats,
                  double min_s)
{
	size_t es = pv_dtype_size(type);
	struct pv_tensor* W = calloc((size_t)n_mats, sizeof *W);
	for (int m = 0; m < n_mats; m++) {
		void* d = pv_aligned_alloc((size_t)rows * cols * es);
		fill(d, type, (size_t)rows * cols);
		W[m] = (struct pv_tensor){ d, type, rows, cols };
	}
	float* x = pv_aligned_alloc((size_t)T * cols * 4);
	float* y = pv_aligned_alloc((size_t)T * rows * 4);
	for (size_t i = 0; i < (size_t)T * cols; i++) x[i] = frand();

	for (int m = 0; m < n_mats; m++) pv_matmul(pool, y, rows, x, cols, T, &W[m]); /* warm */
	/* Each call timed alone; the median resists other processes on a shared machine and
	 * the best call shows what the kernel can do. */
	enum { MAXIT = 100000 };
	static double dt[MAXIT];
	int iters = 0;
	double start = now();
	while (iters < MAXIT && (now() - start < min_s || iters < 5)) {
		double t0 = now();
		pv_matmul(pool, y, rows, x, cols, T, &W[iters % n_mats]);
		dt[iters++] = now() - t0;
	}
	qsort(dt, (size_t)iters, sizeof *dt, cmp_double);
	double med = dt[iters / 2], best = dt[0];
	double bytes = (double)rows * cols * es;
	double flops = 2.0 * rows * cols * T;
	printf("%-5s %5dx%-5d T=%-4d mats=%d  median %8.3f ms %6.1f GB/s %6.1f GFLOP/s | best %6.1f GB/s %6.1f GFLOP/s\n",
	       dname(type), rows, cols, T, n_mats, med * 1e3, bytes / med / 1e9, flops / med / 1e9,
	       bytes / best / 1e9, flops / best / 1e9);
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
	bench(pool, PV_BF16, 4096, 4096, 1, 6, 1.0);   /* 192 MiB: streams from DRAM */
	bench(pool, PV_BF16, 4096, 4096, 1, 1, 1.0);   /* 32 MiB: partly L3-resident */
	bench(pool, PV_F16, 4096, 4096, 1, 6, 1.0);
	bench(pool, PV_F32, 4096, 4096, 1, 3, 1.0);
	for (int T = 2; T <= 8; T *= 2) bench(pool, PV_BF16, 4096, 4096, T, 6, 1.0);
	bench(pool, PV_BF16, 4096, 4096, 128, 1, 2.0);
	bench(pool, PV_F16, 4096, 4096, 128, 1, 2.0);
	bench(pool, PV_F32, 4096, 4096, 128, 1, 2.0);
	bench(pool, PV_BF16, 11008, 4096, 128, 1, 2.0);
	bench(pool, PV_BF16, 4096, 11008, 128, 1, 2.0);
	pv_pool_free(pool);
	return 0;
}
