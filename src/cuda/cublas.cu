/*
 * cublas.cu: cuBLAS loaded at run time (dlopen), for the prefill GEMMs (prefill.cu).
 *
 * Why dlopen: the binaries link the CUDA runtime statically and must run where cuBLAS is absent
 * (then prompts keep the 16-row GEMV path, after a one-time message). cublas_api.h is included
 * for its types and enum values only; no cuBLAS symbol is referenced at link time.
 *
 * Contexts: the static runtime in our binaries and the runtime inside libcublas both use the
 * device's primary context (cudart always does), so device pointers and the cudaStream_t
 * (a driver CUstream) created by our runtime are valid in cuBLAS's calls; cuBLAS launches on the
 * stream it is given and works in the context current on the calling thread (ours, after
 * cudaSetDevice). This is the ordinary nvcc setup (static cudart + shared libcublas).
 *
 * Where: $PV_CUBLAS (a file), then libcublas.so.13 / libcublas.so through the loader's search
 * path, then $CUDA_HOME/lib64, /usr/local/cuda/lib64, and the pip wheels' nvidia/cublas/lib and
 * nvidia/cu13/lib under the usual Python prefixes. libcublasLt.so.13 is found through
 * libcublas's RUNPATH ($ORIGIN).
 */
#include "prefill.cuh"

#include <cublas_api.h>
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

namespace {

typedef cublasStatus_t (*create_fn)(cublasHandle_t*);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*ws_fn)(cublasHandle_t, void*, size_t);
typedef cublasStatus_t (*math_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*version_fn)(cublasHandle_t, int*);
typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                                  cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);

struct lib {
	void* so;
	create_fn create;
	destroy_fn destroy;
	stream_fn set_stream;
	ws_fn set_ws;       /* optional */
	math_fn set_math;
	version_fn version; /* optional */
	gemm_fn gemm;
	const char* why;
	char path[512];
};

struct lib L;
pthread_once_t once = PTHREAD_ONCE_INIT;

int try_open(const char* path)
{
	void* so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!so) return 0;
	struct lib l;
	memset(&l, 0, sizeof l);
	l.so = so;
	l.create = (create_fn)dlsym(so, "cublasCreate_v2");
	l.destroy = (destroy_fn)dlsym(so, "cublasDestroy_v2");
	l.set_stream = (stream_fn)dlsym(so, "cublasSetStream_v2");
	l.set_ws = (ws_fn)dlsym(so, "cublasSetWorkspace_v2");
	l.set_math = (math_fn)dlsym(so, "cublasSetMathMode");
	l.version = (version_fn)dlsym(so, "cublasGetVersion_v2");
	l.gemm = (gemm_fn)dlsym(so, "cublasGemmEx");
	if (!l.create || !l.destroy || !l.set_stream || !l.set_math || !l.gemm) {
		dlclose(so);
		return 0;
	}
	snprintf(l.path, sizeof l.path, "%s", path);
	L = l;
	return 1;
}

int try_glob(const char* pattern)
{
	glob_t g;
	memset(&g, 0, sizeof g);
	int ok = 0;
	if (glob(pattern, 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc && !ok; i++) ok = try_open(g.gl_pathv[i]);
	globfree(&g);
	return ok;
}

void load_once(void)
{
	const char* env = getenv("PV_CUBLAS");
	if (env && *env) {
		if (!try_open(env)) L.why = "PV_CUBLAS names a file that dlopen cannot load as cuBLAS";
		return;
	}
	if (try_open("libcublas.so.13") || try_open("libcublas.so")) return;
	char buf[600];
	const char* ch = getenv("CUDA_HOME");
	if (ch && *ch) {
		snprintf(buf, sizeof buf, "%s/lib64/libcublas.so.13", ch);
		if (try_open(buf)) return;
	}
	static const char* const fixed[] = { "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so",
		                             "/usr/lib/x86_64-linux-gnu/libcublas.so.13" };
	for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
		if (try_open(fixed[i])) return;
	static const char* const pats[] = {
		"/usr/local/lib/python3*/dist-packages/nvidia/cublas/lib/libcublas.so.13",
		"/usr/local/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.13",
		"/usr/lib/python3*/dist-packages/nvidia/cublas/lib/libcublas.so.13",
		"/usr/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.13",
		"/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
		"/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/usr/lib/python3*/dist-packages/nvidia/cu13/lib/libcublas.so.13",
		"/usr/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/opt/*/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.13",
		"/opt/*/lib/python3*/site-packages/nvidia/cu13/lib/libcublas.so.13",
		"/opt/conda/lib/libcublas.so.13",
		"/usr/local/cuda-*/lib64/libcublas.so.13",
	};
	for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
		if (try_glob(pats[i])) return;
	const char* home = getenv("HOME");
	if (home && *home) {
		snprintf(buf, sizeof buf, "%s/.local/lib/python3*/site-packages/nvidia/c*/lib/libcublas.so.13", home);
		if (try_glob(buf)) return;
	}
	L.why = "libcublas.so.13 not found (set PV_CUBLAS to its path)";
}

const char* status_name(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS: return "success";
	case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
	case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
	case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
	case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
	case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
	default: return "unknown status";
	}
}

int fail(char* err, size_t errlen, const char* what, cublasStatus_t s)
{
	return pv_errf(err, errlen, "CUDA backend: cuBLAS %s: %s (%d)", what, status_name(s), (int)s);
}

} // namespace

int pv_cublas_load(const char** why)
{
	pthread_once(&once, load_once);
	if (why) *why = L.so ? NULL : L.why;
	return L.so != NULL;
}

int pv_cublas_create(void** h, cudaStream_t st, void* ws, size_t ws_bytes, char* err, size_t errlen)
{
	*h = NULL;
	const char* why = NULL;
	if (!pv_cublas_load(&why)) return pv_errf(err, errlen, "CUDA backend: no cuBLAS: %s", why ? why : "?");
	cublasHandle_t hd = NULL;
	cublasStatus_t s = L.create(&hd);
	if (s != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "create", s);
	s = L.set_stream(hd, st);
	/* default math: bf16 inputs take the tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F);
	 * no TF32 anywhere (no f32 inputs) */
	if (s == CUBLAS_STATUS_SUCCESS) s = L.set_math(hd, CUBLAS_DEFAULT_MATH);
	/* our own workspace: cuBLAS then never allocates during a call, and with one stream and one
	 * workspace its results are the same run to run */
	if (s == CUBLAS_STATUS_SUCCESS && L.set_ws && ws && ws_bytes) s = L.set_ws(hd, ws, ws_bytes);
	if (s != CUBLAS_STATUS_SUCCESS) {
		L.destroy(hd);
		return fail(err, errlen, "set-up", s);
	}
	*h = hd;
	return 0;
}

void pv_cublas_destroy(void* h)
{
	if (h && L.so) L.destroy((cublasHandle_t)h);
}

int pv_cublas_gemm(void* h, const __nv_bfloat16* W, int ldw, const __nv_bfloat16* X, int ldx, float* Y, int ldy, int N, int T,
                   int K, float beta, char* err, size_t errlen)
{
	if (N < 1 || T < 1 || K < 1 || ldw < K || ldx < K || ldy < N)
		return pv_errf(err, errlen, "CUDA backend: gemm [%d x %d] x [%d] with ld %d/%d/%d", N, K, T, ldw, ldx, ldy);
	const float alpha = 1.0f;
	/* column-major: C (N x T, ldc ldy) = op_T(A) (A: K x N, lda ldw: the weight rows) * B (K x T, ldb ldx) */
	cublasStatus_t s = L.gemm((cublasHandle_t)h, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &alpha, W, CUDA_R_16BF, ldw, X, CUDA_R_16BF, ldx,
	                          &beta, Y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS) return fail(err, errlen, "gemm", s);
	return 0;
}
