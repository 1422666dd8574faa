/* sha256.c: SHA-256 as FIPS 180-4 specifies it; checked against sha256sum in tests/test_api.c.
 *
 * The digest of a weight file names the model in every receipt, and a 9B BF16 file is 18 GB: the
 * portable block function hashes ~250 MB/s (75 s for that file, longer than the GPU work it
 * describes), so x86-64 processors with the SHA extensions (cpuid 7.EBX bit 29: Zen, Ice Lake and
 * later) take sha256rnds2/msg1/msg2 instead, several times faster. Both give the same words;
 * tests/test_kernels.c compares them on random lengths and alignments. */
#include "base/sha256.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define PV_SHA_NI 1
#endif

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void block(uint32_t h[8], const unsigned char* p)
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
		uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		k = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += k;
}

#ifdef PV_SHA_NI
/* n blocks with the SHA extensions. The state lives in two vectors in the order the instructions
 * want: s0 = (A, B, E, F), s1 = (C, D, G, H) (high lane first); each sha256rnds2 does two rounds
 * and the two vectors swap roles, so after four rounds they are back in place. Message words:
 * group g (words 4g .. 4g+3) for g >= 4 is msg2(msg1(W[g-4], W[g-3]) + W[g-2..g-1] shifted by one
 * word, W[g-1]): w[t-16] + s0(w[t-15]) + w[t-7] + s1(w[t-2]). */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_ni(uint32_t h[8], const unsigned char* p, size_t n)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
	__m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&h[0]), 0xB1); /* C D A B */
	__m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&h[4]), 0x1B); /* E F G H */
	__m128i s0 = _mm_alignr_epi8(t, s1, 8);                                         /* A B E F */
	s1 = _mm_blend_epi16(s1, t, 0xF0);                                              /* C D G H */
	for (; n; n--, p += 64) {
		const __m128i a0 = s0, c0 = s1;
		__m128i w[4];
		for (int g = 0; g < 16; g++) {
			__m128i m;
			if (g < 4) {
				m = w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 16 * g)), bswap);
			} else {
				m = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
				m = _mm_add_epi32(m, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
				m = w[g & 3] = _mm_sha256msg2_epu32(m, w[(g + 3) & 3]);
			}
			m = _mm_add_epi32(m, _mm_loadu_si128((const __m128i*)&K[4 * g]));
			s1 = _mm_sha256rnds2_epu32(s1, s0, m);
			s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
		}
		s0 = _mm_add_epi32(s0, a0);
		s1 = _mm_add_epi32(s1, c0);
	}
	t = _mm_shuffle_epi32(s0, 0x1B);                                       /* F E B A */
	s1 = _mm_shuffle_epi32(s1, 0xB1);                                      /* D C H G */
	_mm_storeu_si128((__m128i*)&h[0], _mm_blend_epi16(t, s1, 0xF0)); /* D C B A */
	_mm_storeu_si128((__m128i*)&h[4], _mm_alignr_epi8(s1, t, 8));    /* H G F E */
}

static int have_ni(void)
{
	static int have = -1; /* a benign race: every thread computes the same answer */
	if (have < 0) {
		unsigned a, b, c, d;
		have = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 29 & 1);
	}
	return have;
}
#endif

static int portable_only; /* pv_sha256_portable: tests compare the two paths */

void pv_sha256_portable(int on) { portable_only = on; }

static void blocks(uint32_t h[8], const unsigned char* p, size_t n)
{
#ifdef PV_SHA_NI
	if (!portable_only && have_ni()) {
		blocks_ni(h, p, n);
		return;
	}
#endif
	for (; n; n--, p += 64) block(h, p);
}

void pv_sha256_init(struct pv_sha256* s)
{
	static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, h0, sizeof h0);
	s->bytes = 0;
	s->fill = 0;
}

void pv_sha256_update(struct pv_sha256* s, const void* data, size_t n)
{
	const unsigned char* p = data;
	s->bytes += n;
	if (s->fill) {
		size_t take = 64 - s->fill < n ? 64 - s->fill : n;
		memcpy(s->buf + s->fill, p, take);
		s->fill += take;
		p += take;
		n -= take;
		if (s->fill < 64) return;
		blocks(s->h, s->buf, 1);
		s->fill = 0;
	}
	blocks(s->h, p, n / 64);
	p += n / 64 * 64;
	n %= 64;
	memcpy(s->buf, p, n);
	s->fill = n;
}

void pv_sha256_final(struct pv_sha256* s, unsigned char out[32])
{
	uint64_t bits = s->bytes * 8;
	unsigned char pad[72] = { 0x80 };
	size_t padn = (s->fill < 56 ? 56 : 120) - s->fill;
	for (int i = 0; i < 8; i++) pad[padn + i] = (unsigned char)(bits >> (56 - 8 * i));
	pv_sha256_update(s, pad, padn + 8);
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(s->h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
		out[4 * i + 3] = (unsigned char)s->h[i];
	}
}
