/* buildinfo.c: the build identity (proven_dev.h), compiled on every make so the commit is current. */
#include "proven_dev.h"
#include "cpu/ops.h"

#ifndef PV_GIT_COMMIT
#define PV_GIT_COMMIT "unknown"
#endif
#ifndef PV_BUILD_FLAGS
#define PV_BUILD_FLAGS "unknown"
#endif
#ifndef PV_BUILD_NVCC_FLAGS
#define PV_BUILD_NVCC_FLAGS "none"
#endif
#ifndef PV_BUILD_NVCC
#define PV_BUILD_NVCC "none"
#endif

static struct pv_build_info info = {
	.commit = PV_GIT_COMMIT,
	.cflags = PV_BUILD_FLAGS,
	.nvcc_flags = PV_BUILD_NVCC_FLAGS,
	.nvcc = PV_BUILD_NVCC,
	.compiler =
#if defined(__clang__)
	        "clang " __clang_version__,
#elif defined(__GNUC__)
	        "gcc " __VERSION__,
#else
	        "unknown",
#endif
#ifdef PV_HAVE_CUDA
	.backends = "cpu,cuda",
#else
	.backends = "cpu",
#endif
};

const struct pv_build_info* pv_build_info(void)
{
	info.cpu_isa = pv_isa_describe();
	return &info;
}
