/*
 * hash.h: FNV-1a (64-bit) of byte strings: the key hash of the library's lookup tables and of
 * synth's per-tensor seeds (synth's output bytes depend on it: do not change it).
 */
#ifndef PV_HASH_H
#define PV_HASH_H

#include <stddef.h>
#include <stdint.h>

#define PV_FNV1A_BASIS 0xcbf29ce484222325ull
#define PV_FNV1A_PRIME 0x100000001b3ull

static inline uint64_t pv_fnv1a(const void* p, size_t n)
{
	const unsigned char* s = (const unsigned char*)p;
	uint64_t h = PV_FNV1A_BASIS;
	for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * PV_FNV1A_PRIME;
	return h;
}

/* Of a NUL-terminated string (the NUL not included). */
static inline uint64_t pv_fnv1a_str(const char* str)
{
	uint64_t h = PV_FNV1A_BASIS;
	for (const unsigned char* s = (const unsigned char*)str; *s; s++) h = (h ^ *s) * PV_FNV1A_PRIME;
	return h;
}

#endif
