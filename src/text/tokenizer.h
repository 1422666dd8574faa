/*
 * tokenizer.h: the Qwen byte-level BPE tokenizer (shared/docs/qwen-models.md §9).
 *
 * A struct pv_tok is immutable once built: any number of threads may encode and decode with one
 * tokenizer at the same time (every call allocates its own scratch). Functions that can fail
 * return 0 on success and -1 on failure, with a one-line message in the caller's err buffer when
 * one is given. Nothing here prints or exits.
 *
 * Encoding (what Hugging Face `tokenizers` does with the same tokenizer.json):
 *   1. Invalid UTF-8 in the input is replaced first (see below).
 *   2. Added tokens are matched before anything else, leftmost-longest, and are atomic. With
 *      parse_special = 1 every added token is matched; with parse_special = 0 only the
 *      non-special ones (`special: false` in tokenizer.json, USER_DEFINED in GGUF, e.g. <think>,
 *      <tool_call>) are, and the text of special tokens (<|im_start|>, ...) is tokenized as
 *      ordinary text. parse_special = 0 is HF's `encode_special_tokens = True` and llama.cpp's
 *      parse_special = false. No BOS/EOS is ever added.
 *   3. The text between added tokens is NFC-normalised (utf8proc) when tokenizer.json's
 *      normalizer is NFC, or when pv_tok_from_vocab got PV_TOK_NFC.
 *   4. It is split with the pre-tokenizer regex (PCRE2, UTF + UCP, JIT when available;
 *      leftmost-first; every match is a piece, as is any unmatched gap).
 *   5. Each piece's bytes go through GPT-2's bytes_to_unicode map and are merged by merge rank
 *      (lowest rank first, leftmost on ties), then looked up in the vocabulary.
 *
 * Regex dialect: tokenizer.json regexes are written for Oniguruma (what HF uses). PCRE2 runs them
 * verbatim except for two differences that proven corrects by rewriting the pattern:
 *   - `\s`: Oniguruma's set is U+0009-000D, U+0085 and the Zs/Zl/Zp characters; PCRE2's adds
 *     U+180E (MONGOLIAN VOWEL SEPARATOR). `\s` and `\S` outside brackets and `\s` inside are
 *     replaced by Oniguruma's explicit set.
 *   - Unicode versions: HF tokenizers 0.23's Oniguruma knows Unicode 16.0, Debian 12's PCRE2
 *     10.42 knows 14.0. `\p{L}`, `\p{N}`, `\p{M}` get the code points that Unicode 15.0-16.0
 *     added to those categories (a fixed table, made by tools/reference/make_tokenizer_corpus.py
 *     --class-table).
 * NFC: HF's normaliser has older Unicode tables than utf8proc (Unicode 15.0). The 109 code
 * points where that shows (marks from Unicode 10-15 that HF gives combining class 0, and
 * U+11930, whose composition U+11935 U+11930 -> U+11938 HF lacks) are copied through unchanged
 * and the text between them is normalised separately, which reproduces HF exactly (a fixed
 * table, from the same tool). Both tables assume Debian 12's libraries (PCRE2 10.42, utf8proc
 * 2.8); with newer ones the corpus test in tests/test_tokenizer.c shows whether they still hold.
 * Text without characters NFC could change skips utf8proc (a quick check built at load time).
 *
 * Invalid UTF-8 input: proven replaces every ill-formed sequence by U+FFFD, one U+FFFD per
 * "maximal subpart" (the W3C/Unicode practice; exactly what Python's
 * bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do), and then
 * tokenizes the repaired text. Overlong forms, surrogates (ED A0..BF ..), code points above
 * U+10FFFF, stray continuation bytes and truncated sequences all count as invalid. So encoding
 * raw bytes B gives the ids HF gives for B.decode("utf-8", "replace"). NUL bytes are ordinary
 * characters (the length is explicit).
 *
 * Decoding: each token's text is mapped back to bytes through the inverse byte map (a token with a
 * character outside the map, e.g. an added token containing a plain space, contributes its own
 * UTF-8 bytes, as HF's ByteLevel decoder does); the bytes are concatenated. By default invalid
 * UTF-8 in the result becomes U+FFFD per maximal subpart (HF's decode, errors="replace");
 * PV_TOK_DECODE_RAW returns the bytes untouched. The streaming decoder returns only complete
 * UTF-8 sequences and holds an incomplete one back until the next token completes it (or flush
 * replaces it); the concatenation of everything it returns equals pv_tok_decode of all the ids.
 */
#ifndef PV_TOKENIZER_H
#define PV_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct pv_tok;
struct pv_tok_stream;

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

/* pv_tok_decode / pv_tok_stream_new flags */
#define PV_TOK_DECODE_SKIP_SPECIAL 1u /* drop special (CONTROL) tokens; non-special added tokens stay */
#define PV_TOK_DECODE_RAW 2u          /* pv_tok_decode only: no U+FFFD repair of the bytes            */

/* Opens a Hugging Face tokenizer.json, or a directory that contains one. Supported: model BPE
 * (no byte fallback, no continuing-subword prefix or end-of-word suffix, no dropout), normalizer
 * null or NFC, pre_tokenizer Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)],
 * added tokens without lstrip/rstrip/single_word (added tokens marked `normalized: true` are
 * matched on the raw text like the others). Anything else is refused with a message. */
int pv_tok_open_json(struct pv_tok** out, const char* path, char* err, size_t errlen);

/* Builds a tokenizer from GGUF-style arrays: tokens[i] is the text of id i (byte-level encoded
 * for BPE entries, plain for added tokens), token_types[i] an enum pv_tok_type (NULL: all
 * NORMAL), merges[r] "left right" for rank r. pre names the pre-tokenizer regex: "qwen2"
 * (Qwen2/2.5/3/3-MoE/3-Next) or "qwen35" (Qwen3.5/3.6). flags: PV_TOK_NFC or 0. */
int pv_tok_from_vocab(struct pv_tok** out, const char* const* tokens, const int* token_types, int n_tokens,
                      const char* const* merges, int n_merges, const char* pre, unsigned flags, char* err,
                      size_t errlen);

void pv_tok_free(struct pv_tok* t);

/* Number of ids (largest id + 1, added tokens included). */
int pv_tok_n_vocab(const struct pv_tok* t);
/* Id of a token given its stored text ("<|im_end|>", "user", "Ġworld"); -1 if there is none.
 * Added tokens are looked up first. */
int32_t pv_tok_id(const struct pv_tok* t, const char* token);
/* Stored text of an id (NUL-terminated), NULL if the id has none. */
const char* pv_tok_text(const struct pv_tok* t, int32_t id);
/* 1 for a special (CONTROL) added token, 0 otherwise. */
int pv_tok_is_special(const struct pv_tok* t, int32_t id);
/* The regex the splitter runs (as given, before proven's rewriting). */
const char* pv_tok_pattern(const struct pv_tok* t);

/* Encodes len bytes of text. On success *ids is a malloc'd array of *n ids (free() it; non-NULL
 * even when *n is 0). Fails only on out-of-memory, a text longer than 1 GiB, a regex engine
 * failure (a custom pattern hitting PCRE2's limits), or a byte with no token in a vocabulary that
 * lacks some of the 256 byte tokens (never with Qwen's). Long runs of one character class are
 * fine: the splitter is linear in the text, the merge loop O(n log n) per piece. */
int pv_tok_encode(const struct pv_tok* t, const char* text, size_t len, int parse_special, int32_t** ids,
                  int* n, char* err, size_t errlen);

/* Decodes n ids. On success *out is a malloc'd, NUL-terminated buffer of *len bytes (free() it).
 * Fails on an id outside [0, n_vocab) or an id with no text. */
int pv_tok_decode(const struct pv_tok* t, const int32_t* ids, int n, unsigned flags, char** out, size_t* len,
                  char* err, size_t errlen);

/* Streaming decoder. push returns the bytes that became complete with this token (possibly
 * none); flush returns what is held back, as U+FFFD. The returned pointer stays valid until the
 * next call on the stream. push fails (and changes nothing) on a bad id. */
int pv_tok_stream_new(struct pv_tok_stream** out, const struct pv_tok* t, unsigned flags);
int pv_tok_stream_push(struct pv_tok_stream* s, int32_t id, const char** bytes, size_t* len);
int pv_tok_stream_flush(struct pv_tok_stream* s, const char** bytes, size_t* len);
void pv_tok_stream_free(struct pv_tok_stream* s);

#endif
