/*
 * tokenizer_internal.h: what tokenizer_load.c (building, the tables) and tokenizer.c (encode,
 * decode) share: struct pv_tok and its lookups. Private to src/text/tokenizer*.c.
 *
 * Data layout: every id has a stored text (token string) and a decoded form (its bytes after
 * the inverse byte map), both in arenas. Two open-addressing string tables map text -> id (BPE
 * vocabulary, added tokens); one integer table maps an id pair -> (rank, merged id). Encoding
 * never looks strings up: bytes map to ids through byte_id[], merges through the pair table.
 */
#ifndef PV_TOKENIZER_INTERNAL_H
#define PV_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "text/tokenizer.h"

/* Per-id flags. */
enum { KF_VOCAB = 1, KF_ADDED = 2, KF_SPECIAL = 4, KF_UNUSED = 8 };

/* text -> id, open addressing; slots hold id + 1 (0 = empty). */
struct strmap {
	int32_t* slot;
	uint32_t mask;
};

/* (left id, right id) -> (rank, merged id); one 16-byte slot, one cache line per probe. */
struct pair {
	uint64_t key; /* UINT64_MAX = empty */
	int32_t rank, merged;
};

struct pairmap {
	struct pair* slot;
	uint32_t mask;
};

struct added {
	uint32_t off, len; /* into the text arena */
	int32_t id;
	uint8_t special, first; /* first: the first byte of the text */
};

/* A growing byte buffer (not NUL-terminated unless a NUL is put). */
struct arena {
	char* p;
	size_t n, cap;
};

struct pv_tok {
	int n_vocab;
	uint8_t* flags;
	uint32_t* text_off; /* into text arena; UINT32_MAX = no text */
	uint32_t* text_len;
	uint32_t* dec_off; /* into dec arena */
	uint32_t* dec_len;
	struct arena text, dec;
	struct strmap vocab, addmap;
	struct pairmap merges;
	int32_t byte_id[256];
	struct added* added; /* sorted by first byte, then length descending */
	int n_added;
	uint32_t added_begin[257]; /* added[added_begin[b] .. added_begin[b+1]) start with byte b */
	int nfc, ignore_merges;
	int32_t dup_first, dup_later; /* two vocabulary ids with one text (-1: none), for messages */
	uint8_t* nfc_check; /* bitmap over code points: 1 = NFC may change text containing it */
	char* pattern; /* as given */
	pcre2_code* re;
};

static inline int arena_reserve(struct arena* a, size_t extra)
{
	if (a->n + extra <= a->cap) return 0;
	size_t cap = a->cap ? a->cap : 256;
	while (cap < a->n + extra) cap *= 2;
	char* p = realloc(a->p, cap);
	if (!p) return -1;
	a->p = p;
	a->cap = cap;
	return 0;
}

static inline int arena_put(struct arena* a, const void* s, size_t n)
{
	if (!n) return 0;
	if (arena_reserve(a, n)) return -1;
	memcpy(a->p + a->n, s, n);
	a->n += n;
	return 0;
}

/* The table hash of a string: FNV-1a with its high bits folded into the low ones the tables
 * mask. */
static inline uint64_t hash_bytes(const char* s, size_t n)
{
	uint64_t h = pv_fnv1a(s, n);
	return h ^ (h >> 29);
}

/* The table hash of an id pair: murmur3's 64-bit finalizer. */
static inline uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

static inline int has_text(const struct pv_tok* t, int32_t id)
{
	return t->text_off[id] != UINT32_MAX;
}

static inline const char* tok_text(const struct pv_tok* t, int32_t id, size_t* len)
{
	*len = t->text_len[id];
	return t->text.p + t->text_off[id];
}

static inline int32_t strmap_get(const struct pv_tok* t, const struct strmap* m, const char* s, size_t n)
{
	if (!m->slot) return -1;
	for (uint32_t i = (uint32_t)hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
		int32_t v = m->slot[i];
		if (!v) return -1;
		size_t len;
		const char* x = tok_text(t, v - 1, &len);
		if (len == n && !memcmp(x, s, n)) return v - 1;
	}
}

static inline uint64_t pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

/* The slot of a pair, or NULL. */
static inline const struct pair* pairmap_find(const struct pairmap* m, int32_t a, int32_t b)
{
	uint64_t k = pair_key(a, b);
	for (uint32_t i = (uint32_t)hash_u64(k) & m->mask;; i = (i + 1) & m->mask) {
		if (m->slot[i].key == k) return &m->slot[i];
		if (m->slot[i].key == UINT64_MAX) return NULL;
	}
}

#endif
