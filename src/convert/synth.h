/*
 * synth.h: random-weight GGUF files with the published shapes of Qwen models (`proven synth`),
 * for benchmarking big models where no real checkpoint exists.
 *
 * A preset is one published configuration (shared/docs/qwen-models.md §3.3, §4.2, §5.2, §6.8)
 * or a tiny one per architecture for tests. The file follows the same llama.cpp conventions as
 * `proven convert` (convert.h): the model keys and the synthetic byte-level BPE vocabulary of
 * exactly V tokens are written by convert.c's own functions, the tensor names and shapes are
 * those gguf_load.c binds, and the tensor types follow pv_convert_matrix_type (the Q4_K_M mix,
 * Q6_K output, row-length fallbacks); norms, biases, ssm_a, ssm_dt.bias, ssm_conv1d and the MoE
 * router are F32.
 *
 * Values are "numerically tame" so that activations stay O(1) through the real depth: matrices
 * uniform in +-0.5*sqrt(3/fan_in) (std 0.5/sqrt(fan_in), fan_in = the row length), norm weights
 * 1 +- 0.1, ssm_a = -A with A in [1, 16] (decay exp(ssm_a * softplus(.)) in (0, 1)),
 * ssm_dt.bias in [-6.9, -2.25] (softplus^-1 of dt in [1e-3, 0.1], as HF initialises it), a small
 * router. Quantized blocks are made directly in the quantized domain (random codes under one
 * per-tensor scale chosen so the block spans +-amplitude), never by quantizing floats, so
 * writing runs at disk speed.
 *
 * Determinism: every block is a function of (seed, tensor name, block index) through a
 * counter-based splitmix64, so the file is byte-identical for any thread count, and a
 * --layers N file holds the same blk.0..N-1 weights as the full-depth one.
 */
#ifndef PV_SYNTH_H
#define PV_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "convert/convert.h"
#include "model/model.h"

struct pv_synth_preset {
	const char* name;   /* "qwen3-8b", "tiny", ...                                     */
	const char* arch;   /* GGUF general.architecture                                   */
	const char* model;  /* the published model ("Qwen3-8B"), or a description           */
	int arch_id;        /* enum pv_arch                                                */
	int L, H, nh, nkv, hd, I, V, tied;
	int E, k, Ie, Is;   /* MoE; E = 0: dense                                           */
	int Hk, Hv, dk, Kc; /* Gated DeltaNet (dv = dk, as llama.cpp assumes)              */
	int rope_dim;
	float theta;
	int max_pos;
};

/* The preset table; *n gets its length. */
const struct pv_synth_preset* pv_synth_presets(int* n);
/* Looks up a preset by architecture (GGUF name "qwen35moe" or HF model_type "qwen3_5_moe"; NULL:
 * any) and name (case-insensitive). NULL with a message (listing the choices) if there is
 * none or the name is ambiguous without an architecture. */
const struct pv_synth_preset* pv_synth_find(const char* arch, const char* name, char* err, size_t errlen);

/* Progress: bytes of tensor data written so far of total. */
typedef void (*pv_synth_progress_fn)(void* ud, uint64_t done, uint64_t total);

struct pv_synth_params {
	const struct pv_synth_preset* preset;
	enum pv_convert_type type;
	const char* out_path;   /* new or a regular file; written beside it, then renamed   */
	uint64_t seed;
	int n_layers;           /* 0: the preset's; else this many (hybrids keep the 3:1 pattern,
	                           the last layer is attention when the pattern has none)   */
	int mtp;                /* qwen35/qwen35moe: also write one MTP block (nextn)       */
	int n_threads;          /* 0: all online cores                                      */
	pv_synth_progress_fn progress;
	void* progress_ud;
};

struct pv_synth_tensor {
	char name[64];
	int n_dims;
	int64_t ne[3];          /* ggml order: ne[0] contiguous                             */
	enum pv_dtype type;
	int kind;               /* value generator (synth.c)                                */
	int layer;              /* block index, -1 outside the blocks                       */
	uint64_t bytes;
};

/* What a file will hold, computed without writing it. */
struct pv_synth_plan {
	struct pv_config cfg;   /* the model settings (layer_kind / layer_moe owned)        */
	int n_blocks;           /* cfg.n_layers + MTP blocks                                */
	struct pv_synth_tensor* t;
	int n;
	int64_t n_params;       /* elements of every tensor                                 */
	uint64_t data_bytes;    /* tensor data, without alignment padding                    */
	int per_type[PV_DTYPE_COUNT];
	int n_fallback;         /* matrices not in the requested type because of row length */
};

int pv_synth_plan(struct pv_synth_plan* plan, const struct pv_synth_params* p, char* err, size_t errlen);
void pv_synth_plan_free(struct pv_synth_plan* plan);

/* Writes the file. 0, or -1 with a one-line message (out_path is left as it was and the
 * temporary file is removed). Never prints. file_bytes (may be NULL) gets the size written. */
int pv_synth_write(const struct pv_synth_params* p, uint64_t* file_bytes, char* err, size_t errlen);

#endif
