/*
 * proven_dev.h: diagnostics for benchmarks, tests and the evidence tools: the build identity,
 * backend-neutral counters and tuning switches. Not needed to run a model (proven.h is).
 */
#ifndef PROVEN_DEV_H
#define PROVEN_DEV_H

#include "proven.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What built this library. Static strings; never NULL. */
struct pv_build_info {
	const char* commit;     /* git commit (12 hex) with "-dirty" when the tree had changes  */
	const char* cflags;     /* C compiler flags                                             */
	const char* compiler;   /* "gcc 12.2.0", ...                                            */
	const char* nvcc_flags; /* nvcc flags of the CUDA backend, "none" without one           */
	const char* nvcc;       /* nvcc's version line, "none" without CUDA                     */
	const char* backends;   /* "cpu" or "cpu,cuda"                                          */
	const char* cpu_isa;    /* CPU kernel set chosen at run time ("avx2+fma", "generic")    */
};
const struct pv_build_info* pv_build_info(void);

/* A tuning switch of a backend: read once when the model is opened (from the environment
 * variable `env`, then from pv_model_params.knobs "name=value,..."), fixed for the model's life.
 * Receipts list them all. */
struct pv_knob {
	const char* name;   /* "cuda.pdl"                                                   */
	const char* env;    /* "PV_CUDA_PDL", or NULL                                       */
	int value;          /* in effect for this model                                     */
	int def;            /* the default                                                  */
	const char* doc;    /* one line: what it switches                                   */
};

#ifdef __cplusplus
}
#endif
#endif
