/*
 * tuning.cu: the table of the CUDA backend's tuning switches (tuning.cuh): name, environment
 * variable, default, allowed values, a one-line doc, and the field of struct pv_cuda_tuning it
 * sets; and the reader that applies defaults, then the environment, then the model's knobs
 * string. Read once per model (pv_cuda_model_init) and by the test hooks that run kernels without
 * a model. The measurements behind the defaults are in src/cuda/PERF.md ("Tuning switches").
 */
#include "common.cuh"

#include <ctype.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

namespace {

struct knob_def {
	const char* name;                  /* "cuda.pdl"                                          */
	const char* env;                   /* "PV_CUDA_PDL"                                       */
	int def, lo, hi;                   /* default and range                                   */
	const char* words;                 /* NULL, or "a|b|c": value lo + i may be written as word i */
	int step_pow2;                     /* 1: the value must be a power of two (att_split)      */
	const char* doc;
	size_t off;                        /* offsetof(struct pv_cuda_tuning, field)             */
};

#define F(field) offsetof(struct pv_cuda_tuning, field)

const knob_def table[PV_CUDA_N_KNOBS] = {
	{ "cuda.pdl", "PV_CUDA_PDL", 1, 0, 1, NULL, 0,
	  "programmatic dependent launch: a kernel's blocks start while the previous kernel drains", F(pdl) },
	{ "cuda.prefetch", "PV_CUDA_PREFETCH", 0, 0, 1, NULL, 0,
	  "one-row GEMVs prefetch their weight rows into L2 before the PDL wait", F(prefetch) },
	{ "cuda.gemv_rows", "PV_CUDA_GEMV_R", 1, 1, 2, NULL, 0,
	  "weight rows per warp of a one-row GEMV (2: the activation loads shared)", F(gemv_rows) },
	{ "cuda.gemv_direct", "PV_CUDA_GEMV_DIRECT", 1, 0, 1, NULL, 0,
	  "one-row GEMVs read the activation in place (0: staged through shared memory)", F(gemv_direct) },
	{ "cuda.gemv_pipe", "PV_CUDA_GEMV_PIPE", 0, 0, 1, NULL, 0, "one-row GEMVs: the software-pipelined in-place walk",
	  F(gemv_pipe) },
	{ "cuda.gemv_tma", "PV_CUDA_GEMV_TMA", 0, 0, 3, NULL, 0,
	  "one-row BF16/F16/F32 GEMVs fed by the bulk copy engine (gemv_tma.cu), ring variant 1-3; 0 off", F(gemv_tma) },
	{ "cuda.swiglu_pair", "PV_CUDA_SWIGLU_PAIR", 1, 0, 1, NULL, 0, "one-row gate/up GEMV with silu(g) * u in its epilogue",
	  F(swiglu_pair) },
	{ "cuda.attn_fuse", "PV_CUDA_ATTN_FUSE", 1, 0, 1, NULL, 0,
	  "one-row attention does the q/k norm, RoPE and KV write itself", F(attn_fuse) },
	{ "cuda.moe_side", "PV_CUDA_MOE_SIDE", 1, 0, 1, NULL, 0,
	  "MoE: the shared expert on a second stream beside the routed experts", F(moe_side) },
	{ "cuda.norm_fuse", "PV_CUDA_NORM_FUSE", 0, 0, 1, NULL, 0,
	  "one row: the add+RMSNorm done by the last block of the GEMV before it", F(norm_fuse) },
	{ "cuda.graphs", "PV_CUDA_GRAPHS", 1, 0, 1, NULL, 0,
	  "one-row calls replay the decode graph (0: direct launches, for diagnosis)", F(graphs) },
	{ "cuda.att_split", "PV_CUDA_ATT_SPLIT", 32, 16, 64, NULL, 1,
	  "keys per attention split (16, 32 or 64), fixed per session", F(att_split) },
	{ "cuda.prefill", "PV_CUDA_PREFILL", 1, 0, 2, NULL, 0,
	  "prompt path: 0 off (16-row steps), 1 bf16 GEMMs, 2 precise (bf16 hi + lo inputs, f32 attention)", F(prefill) },
	{ "cuda.prefill_chunk", "PV_CUDA_PREFILL_CHUNK", 1024, 1, 1 << 20, NULL, 0,
	  "rows per prefill chunk (at most max_batch)", F(prefill_chunk) },
	{ "cuda.prefill_attn", "PV_CUDA_PREFILL_ATTN", 0, 0, 1, "mma|f32", 0,
	  "prefill attention: 0 mma (tensor cores, f16 inputs), 1 f32 (CUDA cores)", F(prefill_attn) },
	{ "cuda.prefill_moe", "PV_CUDA_PREFILL_MOE", 0, 0, 2, "gemm|gemv|sync", 0,
	  "prefill MoE experts: 0 gemm (grouped GEMMs, BF16/Q8_0 weights through a cp.async pipeline), 1 gemv (the"
	  " decode's GEMVs in 16-row groups), 2 sync (grouped GEMMs with the synchronous loader; the same bits as 0)",
	  F(prefill_moe) },
	{ "cuda.prefill_delta", "PV_CUDA_PREFILL_DELTA", 3, 0, 3, "quad|decode|cols|chunk", 0,
	  "prefill delta rule: 0 quad (4 lanes per column), 1 decode (the decode's kernels), 2 cols (a lane per column),"
	  " 3 chunk (chunks of 64 rows in the WY form: two kernels per layer; quad where dk is not a multiple of 4 or"
	  " dk, dv > 128)",
	  F(prefill_delta) },
	{ "cuda.gemv_rows_multi", "PV_CUDA_GEMV_RM", 0, 0, 2, NULL, 0,
	  "GEMVs of 2-16 activation rows (verify windows, exact steps): 1 one weight row per warp, 2 two at 8-16 rows"
	  " (with cuda.gemv_shared), 0 up to 4",
	  F(gemv_rows_multi) },
	{ "cuda.gemv_shared", "PV_CUDA_GEMV_SHARED", 2, 0, 2, NULL, 0,
	  "GEMVs of 2-16 activation rows: a warp's weight rows share each activation read; 1 staged (conflict-free"
	  " tile), 2 in place through L1; 0 a row at a time, the old walk (same bits)",
	  F(gemv_shared) },
	{ "cuda.window_graphs", "PV_CUDA_WINDOW_GRAPHS", 1, 0, 2, NULL, 0,
	  "exact calls of 2-16 rows (verify windows) replay a graph per row count, with cuda.graphs (0: direct launches;"
	  " 2: also calls that keep DeltaNet snapshots, not yet run on a GPU)",
	  F(window_graphs) },
	{ "cuda.batch_graphs", "PV_CUDA_BATCH_GRAPHS", 1, 0, 1, NULL, 0,
	  "continuous batching: the one-row steps of up to 16 sessions evaluated together replay a graph per row count,"
	  " with cuda.graphs (0: direct launches, the same bits)",
	  F(batch_graphs) },
	{ "cuda.batch_hybrid", "PV_CUDA_BATCH_HYBRID", 1, 0, 1, NULL, 0,
	  "continuous batching of the hybrid models (gated attention, DeltaNet layers over each row's own state;"
	  " bitwise each session alone on the H200, 2026-12-02); 0: they step alone",
	  F(batch_hybrid) },
	{ "cuda.q8_act", "PV_CUDA_Q8_ACT", 2, 0, 2, NULL, 0,
	  "GEMVs of 1-16 rows over Q4_K/Q6_K (2, the default) or also Q8_0 (1) weights take int8 activations and integer"
	  " dot products, the CPU's fast numerics bit for bit (qgemv.cu); 0: f32 activations for every type",
	  F(q8_act) },
	{ "cuda.norm_cluster", "PV_CUDA_NORM_CLUSTER", 1, 0, 1, NULL, 0,
	  "the add+RMSNorm of a row (width a multiple of 4, at most 8192) as a cluster of up to 8 blocks, a warp per"
	  " 256 elements (its own order of the sum of squares); 0: one block per row (the order the GEMV epilogue of"
	  " cuda.norm_fuse keeps, which turns this off)",
	  F(norm_cluster) },
	{ "cuda.q8_rows", "PV_CUDA_Q8_ROWS", 4, 1, 4, NULL, 0,
	  "weight rows per warp of a one-row integer GEMV over Q4_K (cuda.q8_act; 2: every pass of both rows in flight,"
	  " 3: a pass of both rows at a time, 4: 3 for Q6_K too; the activation loads shared, the same bits)",
	  F(q8_rows) },
	{ "cuda.q8_early", "PV_CUDA_Q8_EARLY", 2, 0, 2, NULL, 0,
	  "one-row integer GEMVs (cuda.q8_act) request their first passes of weight bytes before the PDL wait (weights"
	  " never depend on the kernel before; gathered experts do: not those); 2: calls of 2-16 rows too; the same bits",
	  F(q8_early) },
	{ "cuda.gemv_early", "PV_CUDA_GEMV_EARLY", 1, 0, 1, NULL, 0,
	  "one-row GEMVs with f32 activations read in place (not gathered) request their first batch of weight units"
	  " before the PDL wait; the same bits",
	  F(gemv_early) },
	{ "cuda.attn_early", "PV_CUDA_ATTN_EARLY", 1, 0, 1, NULL, 0,
	  "one-session attention: each split block asks L2 for its keys' K and V slices before the PDL wait; the same bits",
	  F(attn_early) },
	{ "cuda.delta_early", "PV_CUDA_DELTA_EARLY", 1, 0, 1, NULL, 0,
	  "the one-session DeltaNet recurrence loads its state into registers before the PDL wait (the conv before it"
	  " never writes the state); the same bits",
	  F(delta_early) },
	{ "cuda.norm_early", "PV_CUDA_NORM_EARLY", 1, 0, 1, NULL, 0,
	  "the cluster add+RMSNorm of a residual add loads the residual row and the norm weights before the PDL wait"
	  " (the kernel before it writes only the delta); the same bits",
	  F(norm_early) },
};
#undef F
static_assert(offsetof(struct pv_cuda_tuning, q8_buf) == (PV_CUDA_N_KNOBS * sizeof(int) + sizeof(void*) - 1) / sizeof(void*) * sizeof(void*),
              "a knob of struct pv_cuda_tuning without its table row");

int* field(struct pv_cuda_tuning* tu, const knob_def& k) { return (int*)((char*)tu + k.off); }

/* The value of text (n bytes) for knob k: a decimal integer or one of its words, in range. */
int parse_value(const knob_def& k, const char* text, size_t n, int* out)
{
	if (n == 0 || n > 15) return -1;
	char buf[16];
	memcpy(buf, text, n);
	buf[n] = 0;
	if (k.words) {
		const char* w = k.words;
		for (int i = 0; *w; i++) {
			const char* e = strchr(w, '|');
			const size_t len = e ? (size_t)(e - w) : strlen(w);
			if (len == n && !memcmp(w, buf, n)) {
				*out = k.lo + i;
				return 0;
			}
			w += len + (e ? 1 : 0);
		}
	}
	char* end = NULL;
	const long v = strtol(buf, &end, 10);
	if (end == buf || *end || v < k.lo || v > k.hi) return -1;
	if (k.step_pow2 && (v & (v - 1))) return -1;
	*out = (int)v;
	return 0;
}

/* "0..1", "16, 32 or 64", "0..2 or mma|f32": what a knob accepts, for messages */
void accepted(const knob_def& k, char* buf, size_t n)
{
	if (k.step_pow2) snprintf(buf, n, "a power of two in %d..%d", k.lo, k.hi);
	else if (k.words) snprintf(buf, n, "%d..%d or %s", k.lo, k.hi, k.words);
	else snprintf(buf, n, "%d..%d", k.lo, k.hi);
}

int find(const char* name, size_t n)
{
	for (int i = 0; i < PV_CUDA_N_KNOBS; i++) {
		const char* full = table[i].name;
		const char* bare = full + 5; /* past "cuda." */
		if ((strlen(full) == n && !memcmp(full, name, n)) || (strlen(bare) == n && !memcmp(bare, name, n))) return i;
	}
	return -1;
}

} // namespace

int pv_cuda_tuning_apply(struct pv_cuda_tuning* tu, const char* spec, char* err, size_t errlen)
{
	char acc[64];
	for (const char* p = spec; p && *p;) {
		while (*p == ',' || isspace((unsigned char)*p)) p++;
		if (!*p) break;
		const char* e = p;
		while (*e && *e != ',') e++;
		const char* eq = (const char*)memchr(p, '=', (size_t)(e - p));
		const char* ne = eq ? eq : e;
		while (ne > p && isspace((unsigned char)ne[-1])) ne--;
		const int i = find(p, (size_t)(ne - p));
		if (i < 0)
			return pv_errf(err, errlen, "CUDA backend: unknown knob \"%.*s\" (pv_model_knobs lists them)",
			               (int)(ne - p), p),
			       PV_E_INVALID;
		const knob_def& k = table[i];
		const char* vs = eq ? eq + 1 : e;
		const char* ve = e;
		while (vs < ve && isspace((unsigned char)*vs)) vs++;
		while (ve > vs && isspace((unsigned char)ve[-1])) ve--;
		if (!eq || parse_value(k, vs, (size_t)(ve - vs), field(tu, k))) {
			accepted(k, acc, sizeof acc);
			return pv_errf(err, errlen, "CUDA backend: knob \"%.*s\": %s takes %s", (int)(e - p), p, k.name, acc),
			       PV_E_INVALID;
		}
		p = e;
	}
	return 0;
}

int pv_cuda_tuning_read(struct pv_cuda_tuning* tu, struct pv_knob* knobs, const char* spec, char* err, size_t errlen)
{
	char acc[64];
	memset(tu, 0, sizeof *tu); /* the scratch pointers too */
	for (int i = 0; i < PV_CUDA_N_KNOBS; i++) {
		const knob_def& k = table[i];
		*field(tu, k) = k.def;
		const char* v = getenv(k.env);
		if (!v || !*v) continue;
		if (parse_value(k, v, strlen(v), field(tu, k))) {
			accepted(k, acc, sizeof acc);
			return pv_errf(err, errlen, "CUDA backend: %s=%s: %s takes %s", k.env, v, k.name, acc), PV_E_INVALID;
		}
	}
	if (pv_cuda_tuning_apply(tu, spec, err, errlen)) return PV_E_INVALID;
	for (int i = 0; knobs && i < PV_CUDA_N_KNOBS; i++) {
		knobs[i].name = table[i].name;
		knobs[i].env = table[i].env;
		knobs[i].value = *field(tu, table[i]);
		knobs[i].def = table[i].def;
		knobs[i].doc = table[i].doc;
	}
	return 0;
}
