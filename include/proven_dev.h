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
	const char* cpu_isa;    /* the best CPU kernel set of this machine and build ("avx512+vnni+bf16",
	                         * "avx512+vnni", "avx2+fma", "generic"); a model's own is its
	                         * cpu.isa knob                                                  */
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
/* The model's knobs (*out points into the model); returns their count (0 on the CPU today). */
int pv_model_knobs(const pv_model* m, const struct pv_knob** out);

/* Counters of one session since it was created, whatever the backend (0 where not applicable). */
struct pv_session_stats {
	uint64_t calls;           /* pv_session_run calls, replays included                     */
	uint64_t rows;            /* rows evaluated                                             */
	uint64_t exact_rows;      /* ... on the exact (batch-invariant) path                    */
	uint64_t fast_rows;       /* ... on a fast path (CPU chunked DeltaNet, CUDA prefill)    */
	uint64_t steps;           /* backend forward calls                                      */
	uint64_t logits_rows;     /* logits rows returned to the caller                         */
	uint64_t argmax_rows;     /* argmax ids returned                                        */
	uint64_t hidden_rows;     /* hidden rows returned                                       */
	uint64_t checkpoints;     /* recurrent states saved by pv_session_checkpoint            */
	uint64_t snapshot_rows;   /* per-row states kept by PV_EVAL_SNAPSHOT calls              */
	uint64_t snapshot_loads;  /* truncations served by a snapshot                           */
	uint64_t rollbacks;       /* truncations served by checkpoint + replay                  */
	uint64_t replayed_rows;   /* rows those replays evaluated again                         */
	uint64_t prefix_copies;   /* pv_session_copy_prefix calls into this session             */
	uint64_t batched_rows;    /* rows evaluated in one forward with other sessions' rows
	                           * (pv_generator_step_many: continuous batching)               */
	/* device backends */
	uint64_t graph_launches;  /* CUDA graph launches                                        */
	uint64_t kernels;         /* kernels run (graph nodes and direct launches)              */
	uint64_t syncs;           /* host synchronisations                                      */
	uint64_t memcpys;         /* host-issued copies                                         */
	uint64_t device_bytes;    /* memory the session holds on the device                     */
	uint64_t device_used;     /* device memory in use after the session was created          */
	double fast_ms;           /* device time of fast-path (prefill) calls                   */
	uint64_t fast_kernels;    /* kernels of those calls                                     */
	uint64_t fast_gemms;      /* library GEMMs of those calls                               */
	const char* path_last;    /* the last call's path: "exact", "fast" or "precise"         */
	const char* fallback;     /* NULL, or why a faster path is off for this session          */
};
int pv_session_get_stats(const pv_session* s, struct pv_session_stats* st);

/* The device behind a backend ("cuda"); PV_E_UNSUPPORTED for "cpu" or a build without it. */
struct pv_device_info {
	char name[256];
	int cc_major, cc_minor;     /* compute capability                                   */
	int sm_count;
	int driver_version;         /* 13000 = CUDA 13.0                                     */
	int runtime_version;
	int compiler_major, compiler_minor; /* the nvcc that built the backend               */
	int sm_clock_mhz, mem_clock_mhz, bus_width, l2_bytes;
	uint64_t mem_total, mem_free;
};
int pv_device_info(const char* backend, struct pv_device_info* d, char* err, size_t errlen);
/* Device-to-device copy bandwidth: median of `reps` timed copies of `bytes` after a warm-up;
 * *gb_s = (bytes read + bytes written) / time, in GB/s (1e9). */
int pv_device_membw(const char* backend, size_t bytes, int reps, double* gb_s, char* err, size_t errlen);

/* What the model put on its device (PV_E_UNSUPPORTED on the CPU). */
struct pv_model_device_stats {
	uint64_t weight_bytes;    /* device bytes of every uploaded weight                     */
	uint64_t bytes_per_token; /* weights one decode token reads (every layer matrix, the LM
	                           * head, the f32 vectors; not the one embedding row)           */
	uint64_t used_before;     /* device memory in use before the upload                     */
	uint64_t used_after;      /* ... and after                                              */
	double upload_s;
};
int pv_model_device_stats(const pv_model* m, struct pv_model_device_stats* st);

/* Where a decode token's time goes (PV_E_UNSUPPORTED on the CPU): the one-row step replayed
 * `reps` times at the session's position with timing between its op groups. It rewrites the KV
 * row at the position and advances recurrent states: profile a session you then free. */
#define PV_PROFILE_GROUPS 24
struct pv_profile {
	int n;                                /* groups that occurred                         */
	const char* name[PV_PROFILE_GROUPS];  /* "gemv q/k/v", "attention", ...                */
	double us[PV_PROFILE_GROUPS];         /* microseconds per token                        */
	int kernels[PV_PROFILE_GROUPS];       /* per token                                     */
	double bytes[PV_PROFILE_GROUPS];      /* weight bytes per token                        */
	double total_us;                      /* the step, first to last event                 */
};
int pv_session_profile(pv_session* s, int32_t token, int reps, struct pv_profile* out);

/* The CPU's profiler (PV_E_UNSUPPORTED on CUDA): start, then evaluate as usual (a prompt, decode
 * steps), then stop: out gets the wall time of each op group ("matmul q/k/v", "attention",
 * "norms + residual", "deltanet", "matmul experts", "lm head", ...) over the steps in between, in
 * microseconds per row evaluated (us), calls per row (kernels), and total_us the sum. Timing
 * adds a clock read per op; results are unchanged. bytes is 0 (not counted here). */
int pv_session_profile_start(pv_session* s);
int pv_session_profile_stop(pv_session* s, struct pv_profile* out);

#ifdef __cplusplus
}
#endif
#endif
