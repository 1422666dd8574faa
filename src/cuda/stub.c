/*
 * stub.c: cuda_backend.h for builds without CUDA (make CUDA=0, or no nvcc): there is no CUDA
 * backend, and every call says so.
 */
#include "cuda/backend.h"
#include "base/util.h"

#include <string.h>

#define NO_CUDA "this build of proven has no CUDA backend (rebuild with nvcc on PATH or make CUDA=1)"

const struct pv_backend* pv_backend_cuda(void) { return NULL; }

int pv_cuda_model_init(struct pv_model* m, const struct pv_model_params* params, char* err, size_t errlen)
{
	(void)m, (void)params;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_device_info(struct pv_cuda_device* d, char* err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_membw(size_t bytes, int reps, double* gb_s, char* err, size_t errlen)
{
	(void)bytes, (void)reps;
	*gb_s = 0;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_model_stats(const struct pv_model* m, struct pv_cuda_model_stats* st)
{
	(void)m;
	memset(st, 0, sizeof(*st));
	return -1;
}

int pv_cuda_session_stats(const struct pv_session* s, struct pv_cuda_session_stats* st)
{
	(void)s;
	memset(st, 0, sizeof(*st));
	return -1;
}

const char* pv_cuda_session_error(const struct pv_session* s)
{
	(void)s;
	return NO_CUDA;
}

int pv_cuda_last_token(const struct pv_session* s)
{
	(void)s;
	return -1;
}

void pv_cuda_set_graphs(struct pv_session* s, int on) { (void)s, (void)on; }

int pv_cuda_prefill_available(void) { return 0; }

void pv_cuda_set_prefill(struct pv_session* s, int on, int chunk) { (void)s, (void)on, (void)chunk; }

int pv_cuda_set_knobs(struct pv_session* s, const char* spec, char* err, size_t errlen)
{
	(void)s, (void)spec;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_test_dequant(const struct pv_tensor* W, float* out, float* out_lo, char* err, size_t errlen)
{
	(void)W, (void)out, (void)out_lo;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_test_matmul(const struct pv_tensor* W, const float* x, int T, float* y, char* err, size_t errlen)
{
	(void)W, (void)x, (void)T, (void)y;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_test_norm(float* x, const float* delta, const float* w, int H, int n, float eps, const char* spec, float* xn,
                      int blk, unsigned char* q, char* err, size_t errlen)
{
	(void)x, (void)delta, (void)w, (void)H, (void)n, (void)eps, (void)spec, (void)xn, (void)blk, (void)q;
	return pv_errf(err, errlen, NO_CUDA);
}

int pv_cuda_profile(struct pv_session* s, int32_t token, int reps, struct pv_cuda_profile* out)
{
	(void)s, (void)token, (void)reps;
	memset(out, 0, sizeof(*out));
	return -1;
}
