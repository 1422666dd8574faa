/*
 * tuning.cuh: the CUDA backend's tuning switches (the knobs of proven_dev.h), read once per
 * model (tuning.cu) and passed by pointer to every launcher: no process globals. A session keeps
 * a copy of its model's (the test hooks pv_cuda_set_graphs / pv_cuda_set_prefill change only the
 * copy). Why each default is what it is: src/cuda/PERF.md, "Tuning switches".
 *
 * None of them changes a kernel's arithmetic on the exact path: each picks between kernels or
 * launch forms that give the same bits (the README's exactness section says why for each), except
 * the prefill's, which choose among paths that agree within tolerance (never taken by exact calls).
 */
#ifndef PV_CUDA_TUNING_CUH
#define PV_CUDA_TUNING_CUH

#include <stddef.h>
#include <string.h>

struct pv_knob;

struct pv_cuda_tuning {
	int pdl;           /* cuda.pdl: programmatic dependent launch of every kernel            */
	int prefetch;      /* cuda.prefetch: L2 prefetch of the GEMV weight rows                 */
	int gemv_rows;     /* cuda.gemv_rows: weight rows per warp of a one-row GEMV (1 or 2)    */
	int gemv_direct;   /* cuda.gemv_direct: one-row GEMVs read the activation in place        */
	int gemv_pipe;     /* cuda.gemv_pipe: the software-pipelined in-place walk                */
	int gemv_tma;      /* cuda.gemv_tma: 0, or the bulk-copy GEMV's ring variant 1-3          */
	int swiglu_pair;   /* cuda.swiglu_pair: gate/up GEMV with silu(g) * u in its epilogue     */
	int attn_fuse;     /* cuda.attn_fuse: one-row attention does its own input stage          */
	int moe_side;      /* cuda.moe_side: the MoE shared expert on a second stream             */
	int norm_fuse;     /* cuda.norm_fuse: add+RMSNorm in the producing GEMV's last block      */
	int graphs;        /* cuda.graphs: one-row calls replay the decode graph                  */
	int att_split;     /* cuda.att_split: keys per attention split (16, 32, 64)               */
	int prefill;       /* cuda.prefill: 0 off, 1 fast, 2 precise                              */
	int prefill_chunk; /* cuda.prefill_chunk: rows per prefill chunk                          */
	int prefill_attn;  /* cuda.prefill_attn: 0 tensor cores (mma), 1 f32                      */
	int prefill_moe;   /* cuda.prefill_moe: 0 grouped GEMMs, 1 the decode's GEMVs, 2 sync     */
	int prefill_delta; /* cuda.prefill_delta: 0 quad, 1 decode, 2 cols, 3 chunk (WY form)       */
	int gemv_rows_multi; /* cuda.gemv_rows_multi: multi-row GEMVs with one weight row per warp */
	int gemv_shared;     /* cuda.gemv_shared: multi-row GEMVs share activation reads across rows */
	int window_graphs;   /* cuda.window_graphs: exact calls of 2-16 rows replay a graph per row count */
	int batch_graphs;    /* cuda.batch_graphs: multi-session steps (forward_many) replay a graph per row count */
	int batch_hybrid;    /* cuda.batch_hybrid: forward_many covers the hybrids (off until GPU-verified) */
	int q8_act;          /* cuda.q8_act: quantized weights meet int8 activations (qgemv.cu)      */
	int norm_cluster;    /* cuda.norm_cluster: the add+RMSNorm as a cluster of blocks (norm_rope.cu) */
	int q8_rows;         /* cuda.q8_rows: Q4_K weight rows per warp of a one-row integer GEMV      */
	int q8_early;        /* cuda.q8_early: integer GEMVs request their first weights before the PDL wait */
	int gemv_early;      /* cuda.gemv_early: one-row float-activation GEMVs do the same             */
	int attn_early;      /* cuda.attn_early: attention asks L2 for its split's K/V before the PDL wait */
	int delta_early;     /* cuda.delta_early: the DeltaNet recurrence loads its state before the PDL wait */
	int norm_early;      /* cuda.norm_early: the cluster add+RMSNorm loads x and w before the PDL wait */
	/* Not knobs (after them, never read from the table): the session's scratch for the
	 * quantized activations of cuda.q8_act, set when a session lays out its memory; NULL in a
	 * model's copy. Launches on stream q8_side (the MoE shared expert's) use q8_buf2, so two
	 * streams never share one. */
	unsigned char *q8_buf, *q8_buf2;
	size_t q8_bytes;
	void* q8_side; /* cudaStream_t */
	/* set by the enqueuing code between an add+RMSNorm that also wrote its output quantized into
	 * q8_buf (pv_cuda_add_rmsnorm_q8) and the last GEMV that reads it: that output, its block
	 * and rows (GEMVs of x == q8_have on the main stream then skip their own quantization) */
	const float* q8_have;
	int q8_have_blk, q8_have_rows;
};
#define PV_CUDA_N_KNOBS 30

/* whether two settings differ in a knob (not in the session's scratch pointers after them) */
static inline int pv_cuda_knobs_differ(const struct pv_cuda_tuning* a, const struct pv_cuda_tuning* b)
{
	return memcmp(a, b, offsetof(struct pv_cuda_tuning, q8_buf)) != 0;
}

/* The settings: every knob's default, then its environment variable when set and not empty, then
 * spec ("name=value,..." with name "cuda.pdl" or "pdl"; NULL or "": none). knobs (may be NULL)
 * receives [PV_CUDA_N_KNOBS] records of the result (static names and docs). Returns 0, or
 * PV_E_INVALID with a message naming the variable or knob on an unknown name or a bad value. */
int pv_cuda_tuning_read(struct pv_cuda_tuning* tu, struct pv_knob* knobs, const char* spec, char* err, size_t errlen);
/* spec ("name=value,...") over the values already in tu: 0, or PV_E_INVALID with a message */
int pv_cuda_tuning_apply(struct pv_cuda_tuning* tu, const char* spec, char* err, size_t errlen);

#endif
