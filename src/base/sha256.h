/*
 * sha256.h: SHA-256 (FIPS 180-4), for content digests of weight files (pv_model_digest).
 * Streaming: init, update any number of times, final.
 */
#ifndef PV_SHA256_H
#define PV_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct pv_sha256 {
	uint32_t h[8];
	uint64_t bytes;          /* total length so far                 */
	unsigned char buf[64];   /* a partial block                     */
	size_t fill;             /* bytes in buf                        */
};

void pv_sha256_init(struct pv_sha256* s);
void pv_sha256_update(struct pv_sha256* s, const void* data, size_t n);
void pv_sha256_final(struct pv_sha256* s, unsigned char out[32]);
/* 1: the portable block function even where the SHA extensions exist (tests compare the two) */
void pv_sha256_portable(int on);

#endif
