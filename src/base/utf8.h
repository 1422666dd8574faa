/*
 * utf8.h: UTF-8 helpers shared by the tokenizer, the chat code and the GGUF converter.
 *
 * Bytes that may be invalid are read in one of two ways:
 *   strict  Unicode's well-formed sequences (Table 3-7: no overlongs, surrogates or values past
 *           U+10FFFF, as jansson also checks) and its "maximal subpart" rule for what one U+FFFD
 *           replaces (what HF tokenizers and Python's decode(errors="replace") do).
 *   loose   the length comes from the lead byte and only the continuation bytes are checked
 *           (overlongs and surrogates decode); a byte that starts no sequence stands for itself.
 *           The chat code uses it to find whitespace and cut points in generated text.
 */
#ifndef PV_UTF8_H
#define PV_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Strict. The sequence at s[0..n), n >= 1: its length (1-4) when well-formed; 0 when not, with
 * *bad the length of the maximal subpart to replace by one U+FFFD; -1 when s[0..n) is a proper
 * prefix of a well-formed sequence (the input ended inside it). */
int pv_utf8_seq(const char* s, size_t n, int* bad);
/* Strict. Length of the well-formed prefix of s[0..n). */
size_t pv_utf8_valid_prefix(const char* s, size_t n);

/* Writes code point cp (< 0x110000) to o[0..4); returns the byte count (1-4). */
int pv_utf8_put(char* o, uint32_t cp);

/* Loose. Decodes the character at s[0..n), n >= 1; returns its length (1 for a stray byte, then
 * *cp is the byte itself). */
size_t pv_utf8_decode(const char* s, size_t n, uint32_t* cp);
/* Loose. Where the last character of s[0..n) starts (n >= 1), its code point in *cp; a
 * continuation byte that no lead byte claims is a character of its own. */
size_t pv_utf8_last(const char* s, size_t n, uint32_t* cp);
/* Loose. Bytes at the end of s[0..n) that start a character still missing continuation bytes
 * (0-3): what a stream holds back until more text arrives. */
size_t pv_utf8_incomplete(const char* s, size_t n);

#endif
