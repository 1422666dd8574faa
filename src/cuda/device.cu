/*
 * device.cu: what the benchmark reports about the GPU: its identity and clocks, and the
 * device-to-device copy bandwidth that decode speed is measured against.
 */
#include "common.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

thread_local struct pv_launch_rec pv_last_launch;

int pv_cuda_trace_seconds(void)
{
	static int v = -1; /* read once; a benign race between threads reads the same value */
	if (v < 0) {
		const char* e = getenv("PV_CUDA_TRACE");
		const int t = e ? atoi(e) : 0;
		v = t > 0 ? t : 0;
	}
	return v;
}

int pv_cuda_trace(const char* what, char* err, size_t errlen)
{
	enum { RING = 8 };
	static thread_local const char* names[RING];
	static thread_local unsigned long long count;
	const struct pv_launch_rec r = pv_last_launch;
	const unsigned long long n = ++count;
	names[n % RING] = what;
	cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	if (cudaStreamIsCapturing(r.st, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone) return 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		const cudaError_t e = cudaStreamQuery(r.st);
		if (e == cudaSuccess) return 0;
		if (e != cudaErrorNotReady) return pv_cuda_fail(err, errlen, what, e);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec >= pv_cuda_trace_seconds()) break;
		usleep(200);
	}
	fprintf(stderr,
	        "PV_CUDA_TRACE: launch %llu (%s, grid %u x %u x %u, block %u, dynamic smem %zu, pdl %d) still running after %d s; "
	        "launches before it:",
	        n, what, r.grid.x, r.grid.y, r.grid.z, r.block.x, r.smem, r.pdl, pv_cuda_trace_seconds());
	for (unsigned long long i = n > RING ? n - RING + 1 : 1; i < n; i++) fprintf(stderr, " %s", names[i % RING]);
	fprintf(stderr, "\n");
	fflush(stderr);
	_exit(3);
}

int pv_cuda_device_info(struct pv_cuda_device* d, char* err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	if (pv_cuda_select_device(err, errlen)) return -1;
	int dev = 0, v = 0;
	CU(cudaGetDevice(&dev), err, errlen);
	d->device = dev;
	cudaDeviceProp p;
	CU(cudaGetDeviceProperties(&p, dev), err, errlen);
	snprintf(d->name, sizeof d->name, "%s", p.name);
	d->cc_major = p.major;
	d->cc_minor = p.minor;
	d->sm_count = p.multiProcessorCount;
	d->l2_bytes = p.l2CacheSize;
	d->bus_width = p.memoryBusWidth;
	CU(cudaDeviceGetAttribute(&v, cudaDevAttrClockRate, dev), err, errlen);
	d->sm_clock_mhz = v / 1000;
	CU(cudaDeviceGetAttribute(&v, cudaDevAttrMemoryClockRate, dev), err, errlen);
	d->mem_clock_mhz = v / 1000;
	CU(cudaDriverGetVersion(&d->driver_version), err, errlen);
	CU(cudaRuntimeGetVersion(&d->runtime_version), err, errlen);
	d->nvcc_major = __CUDACC_VER_MAJOR__;
	d->nvcc_minor = __CUDACC_VER_MINOR__;
	size_t fr = 0, tot = 0;
	CU(cudaMemGetInfo(&fr, &tot), err, errlen);
	d->mem_free = fr;
	d->mem_total = tot;
	return 0;
}

static int cmp_float(const void* a, const void* b)
{
	float x = *(const float*)a, y = *(const float*)b;
	return x < y ? -1 : x > y;
}

int pv_cuda_membw(size_t bytes, int reps, double* gb_s, char* err, size_t errlen)
{
	*gb_s = 0;
	if (reps < 1 || reps > 1000 || bytes < 1024) return pv_errf(err, errlen, "membw: bad parameters");
	if (pv_cuda_select_device(err, errlen)) return -1;
	unsigned char *a = NULL, *b = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	float* ms = (float*)calloc((size_t)reps, sizeof(float));
	int rc = -1;
	if (!ms) {
		pv_errf(err, errlen, "out of memory");
		goto done;
	}
	CU_OR(cudaMalloc((void**)&a, bytes), done);
	CU_OR(cudaMalloc((void**)&b, bytes), done);
	CU_OR(cudaMemset(a, 0x5a, bytes), done); /* not zeros: nothing may run faster on zeros */
	CU_OR(cudaMemset(b, 0xa5, bytes), done);
	CU_OR(cudaEventCreate(&e0), done);
	CU_OR(cudaEventCreate(&e1), done);
	CU_OR(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), done); /* warm-up */
	for (int r = 0; r < reps; r++) {
		CU_OR(cudaEventRecord(e0, 0), done);
		CU_OR(r & 1 ? cudaMemcpyAsync(a, b, bytes, cudaMemcpyDeviceToDevice, 0)
		            : cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0),
		      done);
		CU_OR(cudaEventRecord(e1, 0), done);
		CU_OR(cudaEventSynchronize(e1), done);
		CU_OR(cudaEventElapsedTime(&ms[r], e0, e1), done);
	}
	qsort(ms, (size_t)reps, sizeof(float), cmp_float);
	*gb_s = 2.0 * (double)bytes / (ms[reps / 2] * 1e-3) / 1e9;
	rc = 0;
done:
	if (e0) cudaEventDestroy(e0);
	if (e1) cudaEventDestroy(e1);
	if (a) cudaFree(a);
	if (b) cudaFree(b);
	free(ms);
	return rc;
}
