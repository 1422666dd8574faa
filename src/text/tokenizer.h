/*
 * tokenizer.h: the library's side of the tokenizer: building one from a GGUF vocabulary (the
 * model loader and the converter) and GPT-2's byte map. The API programs use, and the
 * tokenizer's contract, are in include/proven_text.h.
 */
#ifndef PV_TOKENIZER_H
#define PV_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "proven_text.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum pv_tok_type {
	PV_TOK_NORMAL = 1,       /* ordinary BPE vocabulary entry                               */
	PV_TOK_UNKNOWN = 2,      /* never produced by encoding                                   */
	PV_TOK_CONTROL = 3,      /* special added token (<|im_start|>)                           */
	PV_TOK_USER_DEFINED = 4, /* non-special added token (<think>), matched even without
	                            parse_special                                               */
	PV_TOK_UNUSED = 5,       /* padding ([PAD151700]); never produced, decodes to nothing    */
	PV_TOK_BYTE = 6,         /* treated as NORMAL                                            */
};

/* pv_tok_from_vocab flags */
#define PV_TOK_NFC 1u /* NFC-normalise text between added tokens (what HF does for Qwen) */

/* Builds a tokenizer from GGUF-style arrays: tokens[i] is the text of id i (byte-level encoded
 * for BPE entries, plain for added tokens), token_types[i] an enum pv_tok_type (NULL: all
 * NORMAL), merges[r] "left right" for rank r. pre names the pre-tokenizer regex: "qwen2"
 * (Qwen2/2.5/3/3-MoE/3-Next) or "qwen35" (Qwen3.5/3.6). flags: PV_TOK_NFC or 0. */
int pv_tok_from_vocab(struct pv_tok** out, const char* const* tokens, const int* token_types, int n_tokens,
                      const char* const* merges, int n_merges, const char* pre, unsigned flags, char* err,
                      size_t errlen);

/* GPT-2 bytes_to_unicode, the byte -> code point map of byte-level BPE texts: the printable
 * Latin-1 bytes 21-7E, A1-AC, AE-FF map to themselves; the other 68 bytes, in byte order (00-20,
 * 7F-A0, AD), to U+0100 + k. */
static inline uint32_t pv_tok_byte_cp(int b)
{
	if (b <= 0x20) return 0x100u + (uint32_t)b;
	if (b >= 0x7F && b <= 0xA0) return 0x121u + (uint32_t)(b - 0x7F);
	if (b == 0xAD) return 0x143u;
	return (uint32_t)b;
}

#endif
