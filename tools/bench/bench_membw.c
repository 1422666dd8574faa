/*
 * bench_membw.c: the DRAM read bandwidth a decode step can hope for, measured the way decode
 * reads weights: each thread streams its own contiguous share of a buffer much larger than the
 * L3 (summing it, so nothing is optimised away), all threads at once. Not a test.
 *
 *   ./build/tools/bench_membw [threads] [MiB] [reps]     (defaults 2, 1024, 10)
 *
 * Prints one line per thread count 1..threads: median and best GB/s (1e9 bytes/s) over reps,
 * and a last JSON line {"membw_gb_s": best of the largest thread count, ...} for scripts
 * (tools/bench/peer-cpu.sh divides decode bytes x tok/s by it).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef uint64_t v8u __attribute__((vector_size(64)));

struct part {
	const unsigned char* p;
	size_t n;
	uint64_t sum;
	pthread_barrier_t* bar;
	double t0, t1;
};

/* Sums n bytes (a multiple of 256) with four independent 64-byte accumulators: one copy for
 * the build's flags, one with AVX-512 / AVX2 loads where the CPU has them (the loads' width
 * decides how few instructions a cache line costs, so how close one thread gets to DRAM). */
#define STREAM_BODY                                     \
	v8u a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 }; \
	for (size_t i = 0; i < n; i += 256) {           \
		v8u x, y, z, w;                         \
		memcpy(&x, p + i, 64);                  \
		memcpy(&y, p + i + 64, 64);             \
		memcpy(&z, p + i + 128, 64);            \
		memcpy(&w, p + i + 192, 64);            \
		a += x;                                 \
		b += y;                                 \
		c += z;                                 \
		d += w;                                 \
	}                                               \
	a += b + c + d;                                 \
	uint64_t s = 0;                                 \
	for (int i = 0; i < 8; i++) s += a[i];          \
	return s;
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static uint64_t stream512(const unsigned char* p, size_t n) { STREAM_BODY }
__attribute__((target("avx2"))) static uint64_t stream256(const unsigned char* p, size_t n) { STREAM_BODY }
#endif
static uint64_t stream_plain(const unsigned char* p, size_t n) { STREAM_BODY }

static uint64_t stream(const unsigned char* p, size_t n)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("avx512f")) return stream512(p, n);
	if (__builtin_cpu_supports("avx2")) return stream256(p, n);
#endif
	return stream_plain(p, n);
}

static void* worker(void* arg)
{
	struct part* pt = arg;
	pthread_barrier_wait(pt->bar);
	pt->t0 = now();
	pt->sum = stream(pt->p, pt->n);
	pt->t1 = now();
	return NULL;
}

static int cmpd(const void* a, const void* b)
{
	double x = *(const double*)a, y = *(const double*)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char** argv)
{
	int threads = argc > 1 ? atoi(argv[1]) : 2;
	size_t mib = argc > 2 ? (size_t)atoi(argv[2]) : 1024;
	int reps = argc > 3 ? atoi(argv[3]) : 10;
	if (threads < 1 || threads > 64 || mib < 64 || reps < 1 || reps > 1000) {
		fprintf(stderr, "usage: bench_membw [threads 1..64] [MiB >= 64] [reps]\n");
		return 2;
	}
	size_t n = mib << 20;
	unsigned char* buf = aligned_alloc(4096, n);
	if (!buf) return 1;
	for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 131u);
	double best_last = 0;
	uint64_t check = 0;
	for (int th = 1; th <= threads; th++) {
		double* gbs = calloc((size_t)reps, sizeof(double));
		for (int r = 0; r < reps; r++) {
			pthread_barrier_t bar;
			pthread_barrier_init(&bar, NULL, (unsigned)th);
			struct part pt[64];
			pthread_t tid[64];
			size_t share = n / (size_t)th / 256 * 256;
			for (int i = 0; i < th; i++) pt[i] = (struct part){ buf + (size_t)i * share, share, 0, &bar, 0, 0 };
			for (int i = 1; i < th; i++) pthread_create(&tid[i], NULL, worker, &pt[i]);
			worker(&pt[0]);
			for (int i = 1; i < th; i++) pthread_join(tid[i], NULL);
			pthread_barrier_destroy(&bar);
			double t0 = pt[0].t0, t1 = pt[0].t1;
			for (int i = 0; i < th; i++) {
				t0 = pt[i].t0 < t0 ? pt[i].t0 : t0;
				t1 = pt[i].t1 > t1 ? pt[i].t1 : t1;
				check += pt[i].sum;
			}
			gbs[r] = (double)share * th / (t1 - t0) / 1e9;
		}
		qsort(gbs, (size_t)reps, sizeof *gbs, cmpd);
		printf("threads %d: median %.2f GB/s, best %.2f GB/s (%zu MiB, %d reps)\n", th, gbs[reps / 2], gbs[reps - 1],
		       mib, reps);
		best_last = gbs[reps - 1];
		free(gbs);
	}
	printf("{\"membw_gb_s\":%.3f,\"threads\":%d,\"mib\":%zu,\"reps\":%d,\"check\":%llu}\n", best_last, threads, mib, reps,
	       (unsigned long long)(check & 0xff));
	free(buf);
	return 0;
}
