/*
 * convert.h: a Hugging Face model directory -> one GGUF v3 file, in llama.cpp's conventions
 * (shared/docs/qwen-models.md §8.2-8.5, §9.4), readable by proven and by llama.cpp.
 *
 * The directory is opened with the engine's own loader (pv_model_open), so the converter sees
 * exactly the weights the engine runs, with the engine's shape checks. Then:
 *
 * Names and transforms (§8.3, §8.4): token_embd, output_norm, output (absent when tied), blk.N.*
 * with llama.cpp's names; the hybrids' norms hold 1 + w (the engine's f32 arrays already do;
 * linear_attn.norm stays w), ssm_a = -exp(A_log), ssm_conv1d {Kc, conv_dim}, dt_bias ->
 * ssm_dt.bias; Qwen3-Next in_proj_qkvz regrouped into attn_qkv = [q_all | k_all | v_all] and
 * attn_gate = z_all (in_proj_ba kept key-group-major as ssm_ba); qwen35/qwen35moe value heads
 * moved from grouped to tiled order (HF head g*r + j -> position j*Hk + g) in the v rows of
 * attn_qkv, the rows of attn_gate / ssm_beta / ssm_alpha, ssm_a, ssm_dt.bias, the v channels of
 * ssm_conv1d and the columns of ssm_out; experts stacked into ffn_{gate,up,down}_exps; MTP as
 * blk.{L}.nextn.* plus the MTP layer's tensors at blk.{L} (block_count = L + 1).
 *
 * Tensor types (PV_CONVERT_*; the policy of llama.cpp's converter and llama-quantize):
 *   - 1-D tensors (norms, biases, ssm_a, ssm_dt.bias, ffn_gate_inp_shexp), ssm_conv1d and the
 *     MoE router ffn_gate_inp are always F32;
 *   - every other matrix gets the requested type, except, as llama-quantize does it, the output
 *     matrix (output, or token_embd when tied) at a quantized type: Q6_K (Q8_0 stays Q8_0), or
 *     Q8_0 when its rows are not a whole number of 256-blocks;
 *   - q4_k_m is llama-quantize's Q4_K_M mix: Q4_K, with Q6_K for the output matrix and for
 *     attn_v / attn_qkv / ffn_down* of the blocks that use_more_bits(block, n_blocks incl. MTP)
 *     picks (the first and last eighth of the blocks and every third one between). Not copied:
 *     llama-quantize's special cases for 8-expert models (attn_v/attn_k Q8_0, attn_output Q5_K),
 *     70B and Falcon;
 *   - a row length that is not a whole number of the type's blocks falls back as llama-quantize
 *     does: Q4_K -> Q5_0, Q6_K -> Q8_0, and any 32-element type -> F16 when the row is not a
 *     multiple of 32.
 * With these rules the q8_0, q4_0, q6_k and q4_k_m files of a dense model are byte-identical to
 * what llama-quantize makes of the f32 file (checked against llama.cpp's libllama).
 * Float output is exact where it can be: BF16/F16/F32 sources copied bit for bit to the same
 * type, widened exactly to F32; F32 -> BF16/F16 rounds to nearest even (F16 overflow is an
 * error). Quantization is ggml's reference quantizers (quant.h), row by row, on n_threads.
 *
 * Tokenizer (§9.4): with tokenizer.json, tokenizer.ggml.model "gpt2", pre "qwen2"/"qwen35" (by
 * the pre-tokenizer regex), tokens padded to the embedding's V rows with "[PAD{i}]" (UNUSED),
 * token types NORMAL / CONTROL (special added tokens) / USER_DEFINED (non-special added tokens),
 * merges, bos/eos/padding ids, add_bos_token false, tokenizer.chat_template. Without one (the
 * tiny test models), a synthetic byte-level BPE vocabulary of exactly V tokens: GPT-2's 256
 * bytes_to_unicode characters, then tokens made by merging an existing token with one of
 * "Ġa..z", with those merges, pre "qwen2", so that llama.cpp can load the file.
 */
#ifndef PV_CONVERT_H
#define PV_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "quant/tensor.h"

enum pv_convert_type {
	PV_CONVERT_F32 = 0,
	PV_CONVERT_F16,
	PV_CONVERT_BF16,
	PV_CONVERT_Q8_0,
	PV_CONVERT_Q4_0,
	PV_CONVERT_Q4_K,
	PV_CONVERT_Q6_K,
	PV_CONVERT_Q4_K_M,
	PV_CONVERT_TYPE_COUNT
};

/* "f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "q4_k_m" (case-insensitive) -> type;
 * -1 if unknown. */
int pv_convert_type_parse(const char* s);
const char* pv_convert_type_name(enum pv_convert_type t);
/* The general.file_type (llama_ftype) written for a conversion type. */
uint32_t pv_convert_file_type(enum pv_convert_type t);

/* Per-tensor progress: i of n (0-based), the GGUF name and the type written. */
typedef void (*pv_convert_progress_fn)(void* ud, int i, int n, const char* name, const char* type);

struct pv_convert_params {
	const char* model_dir;            /* Hugging Face directory                          */
	const char* out_path;             /* the GGUF (new or a regular file; never one of the model's own files); written beside it, then renamed */
	enum pv_convert_type type;
	int n_threads;                    /* quantization threads; 0: all online cores      */
	pv_convert_progress_fn progress;  /* optional                                        */
	void* progress_ud;
};

struct pv_convert_stats {
	char arch[16];                    /* general.architecture                            */
	int n_tensors;
	int n_fallback;                   /* matrices not in the requested (mix) type because
	                                     of their row length                             */
	int per_type[PV_DTYPE_COUNT];     /* tensors written per type                        */
	int64_t n_params;                 /* elements written                                 */
	uint64_t file_bytes;
	int vocab;                        /* tokens written (= embedding rows)               */
	int synthetic_vocab;              /* 1: no tokenizer.json; synthetic vocabulary       */
	const char* llama_cpp_note;       /* non-NULL: why llama.cpp will not load this file
	                                     (proven does): a static string                   */
};

/* Converts. 0 on success; -1 with a one-line message (out_path is left as it was and the
 * temporary file is removed). An out_path that is, or resolves to, a file of the model
 * directory is refused before anything is written. Never prints. */
int pv_convert(const struct pv_convert_params* p, struct pv_convert_stats* st, char* err, size_t errlen);

/* The type-selection policy above, for one matrix (2-D or stacked 3-D, not an always-F32
 * tensor): name is the GGUF name, cols its row length, layer its block index (-1 for
 * token_embd/output), n_layers the block count including MTP, tied whether token_embd doubles
 * as output. *fallback is set to 1 when the row length forced another type. */
enum pv_dtype pv_convert_matrix_type(enum pv_convert_type t, const char* name, int64_t cols, int layer, int n_layers,
                                     int tied, int* fallback);

/* Pieces of the writer that `proven synth` (synth.h) shares, so that both produce the same
 * metadata for the same settings. */
struct pv_gguf_writer;
struct pv_config;
/* general.architecture for an enum pv_arch ("qwen3", "qwen35moe", ...); NULL if it has none. */
const char* pv_convert_arch_name(int arch);
/* general.* and {arch}.* keys for a config, as pv_convert writes them. n_mtp_blocks: MTP blocks
 * in the file (0, or c->n_mtp_layers); rope_sections: qwen35/qwen35moe rope.dimension_sections
 * (NULL: [11, 11, 10, 0]); name: general.name. 0 or -1 (pv_gguf_writer_error has the reason). */
int pv_convert_write_model_keys(struct pv_gguf_writer* w, const struct pv_config* c, int n_mtp_blocks,
                                const int32_t* rope_sections, enum pv_convert_type type, const char* name);
/* The synthetic vocabulary above, exactly V tokens (V >= 256), as tokenizer.ggml.* keys, plus
 * add_bos_token false. 0, or -1 with a message. */
int pv_convert_write_synthetic_vocab(struct pv_gguf_writer* w, int64_t V, char* err, size_t errlen);

#endif
