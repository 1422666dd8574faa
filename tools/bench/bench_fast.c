/*
 * bench_fast.c: the CPU products per weight type and numerics (pv_mm), next to a plain stream
 * read of the same bytes by the same pool, alternating in one run (not a test).
 *
 *   ./build/tools/bench_fast [threads] [isa] [T...]       (defaults 2, best, "1 512")
 *
 * Decode (T = 1) cycles through matrices holding more bytes than the L3; "of stream" is its
 * GB/s (stored bytes / time) over the stream read's, the share of the bandwidth a decode step
 * can reach. Prefill (T > 1) reports multiply-adds per second (GMAC/s) on one L3-resident set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "cpu/ops.h"
#include "quant/quant.h"

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

static int cmpd(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

struct stream_job {
	const unsigned char* p;
	size_t n;
	int tasks;
	volatile uint64_t sink[64];
};
static void stream_task(void* ctx, int task, int thread)
{
	struct stream_job* j = ctx;
	size_t share = j->n / (size_t)j->tasks / 64 * 64;
	const uint64_t* q = (const uint64_t*)(const void*)(j->p + share * (size_t)task);
	uint64_t a = 0, b = 0, c = 0, d = 0;
	for (size_t i = 0; i < share / 8; i += 8) {
		a += q[i] ^ q[i + 4];
		b += q[i + 1] ^ q[i + 5];
		c += q[i + 2] ^ q[i + 6];
		d += q[i + 3] ^ q[i + 7];
	}
	j->sink[thread] += a + b + c + d;
}

int main(int argc, char** argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	int isa = argc > 2 ? atoi(argv[2]) : pv_isa_best();
	int Ts[8] = { 1, 512 }, nT = 2;
	if (argc > 3) {
		nT = 0;
		for (int i = 3; i < argc && nT < 8; i++) Ts[nT++] = atoi(argv[i]);
	}
	struct pv_pool* pool = pv_pool_new(threads);
	printf("isa %s (best %s), %d threads\n", pv_isa_name(isa), pv_isa_name(pv_isa_best()), pv_pool_threads(pool));
	static const enum pv_dtype types[] = { PV_Q8_0, PV_Q4_0, PV_Q5_0, PV_Q4_K, PV_Q5_K, PV_Q6_K, PV_BF16 };
	const int rows = 4864, cols = 1024, n_mats = 24; /* ~ 60-240 MB per type */
	float* row = malloc(sizeof(float) * cols);
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
		const enum pv_dtype t = types[ti];
		const size_t rb = pv_dtype_is_quant(t) ? pv_dtype_row_bytes(t, cols) : (size_t)cols * 2;
		struct pv_tensor W[24];
		const struct pv_tensor* Wl[24];
		for (int m = 0; m < n_mats; m++) {
			unsigned char* d = pv_aligned_alloc(rb * rows);
			for (int r = 0; r < rows; r++) {
				for (int c = 0; c < cols; c++) row[c] = frand() * 0.05f;
				pv_quant_row(t, row, d + (size_t)r * rb, cols);
			}
			W[m] = (struct pv_tensor){ d, t, rows, cols };
			Wl[m] = &W[m];
		}
		const size_t total = rb * rows * n_mats;
		unsigned char* sbuf = pv_aligned_alloc(total);
		memset(sbuf, 1, total);
		for (int exact = 1; exact >= 0; exact--) {
			struct pv_kernels k;
			pv_kernels_init(&k, isa, exact);
			pv_kernels_pack(&k, Wl, n_mats);
			const int Tmax = 512;
			void* act = pv_aligned_alloc(pv_mm_act_bytes(Tmax, cols));
			struct pv_mm c = { pool, &k, act, pv_mm_act_bytes(Tmax, cols) };
			float* x = pv_aligned_alloc(sizeof(float) * Tmax * cols);
			float* y = pv_aligned_alloc(sizeof(float) * Tmax * rows);
			for (int i = 0; i < Tmax * cols; i++) x[i] = frand();
			for (int ti2 = 0; ti2 < nT; ti2++) {
				const int T = Ts[ti2] > Tmax ? Tmax : Ts[ti2];
				if (T == 1) {
					enum { REPS = 15 };
					double gm[REPS], gs[REPS];
					for (int r = 0; r < REPS; r++) {
						double t0 = now();
						for (int m = 0; m < n_mats; m++) pv_mm(&c, y, rows, x, cols, 1, &W[m]);
						double t1 = now();
						struct stream_job sj = { sbuf, total, 4 * pv_pool_threads(pool), { 0 } };
						pv_pool_run(pool, stream_task, &sj, sj.tasks);
						double t2 = now();
						gm[r] = (double)total / (t1 - t0) / 1e9;
						gs[r] = (double)total / (t2 - t1) / 1e9;
					}
					qsort(gm, REPS, sizeof(double), cmpd);
					qsort(gs, REPS, sizeof(double), cmpd);
					printf("%-5s %-5s T=1    %6.1f GB/s (best %6.1f) | stream %6.1f GB/s (best %6.1f) | of stream %5.1f%%\n",
					       pv_dtype_name(t), exact ? "exact" : "fast", gm[REPS / 2], gm[REPS - 1],
					       gs[REPS / 2], gs[REPS - 1], 100 * gm[REPS / 2] / gs[REPS / 2]);
				} else {
					/* a set that fits the L3: 4 matrices */
					double best = 1e9;
					for (int r = 0; r < 5; r++) {
						double t0 = now();
						for (int m = 0; m < 4; m++) pv_mm(&c, y, rows, x, cols, T, &W[m]);
						double dt = now() - t0;
						best = dt < best ? dt : best;
					}
					printf("%-5s %-5s T=%-4d %7.1f GMAC/s (%.2f ms per %dx%d)\n", pv_dtype_name(t),
					       exact ? "exact" : "fast", T, 4.0 * rows * cols * T / best / 1e9, best / 4 * 1e3,
					       rows, cols);
				}
				fflush(stdout);
			}
			pv_kernels_free(&k);
			free(act);
			free(x);
			free(y);
		}
		for (int m = 0; m < n_mats; m++) free((void*)W[m].data);
		free(sbuf);
	}
	free(row);
	pv_pool_free(pool);
	return 0;
}
