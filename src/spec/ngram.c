/*
 * ngram.c: prompt-lookup drafting (llama.cpp's lookup, vLLM's ngram): the last n tokens of the
 * history, for n from ngram_max down to ngram_min, are looked up among the earlier tokens; at
 * the latest earlier match the tokens that followed it are the draft. Free to compute, and
 * right exactly where a model copies: code edits, quotes, extraction from a given text.
 */
#include "spec/drafter.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* How far back a lookup searches: the cost per step stays bounded on long contexts. */
#define NGRAM_WINDOW 65536

struct ngram {
	int nmin, nmax;
};

/* The continuation (up to k tokens) after a match of hist[n - len, n) that ends before n - 1:
 * the latest match that still has k tokens after it, else the one with the longest continuation
 * (a match inside the text just generated may be followed by only a token or two). 0: none. */
static int lookup(const int32_t* hist, int n, int len, int k, int32_t* out)
{
	if (n < len + 1) return 0;
	const int32_t* key = hist + n - len;
	int lo = n - NGRAM_WINDOW > 0 ? n - NGRAM_WINDOW : 0;
	int best = -1, best_m = 0;
	for (int j = n - len - 1; j >= lo; j--) {
		if (hist[j] != key[0] || memcmp(hist + j, key, sizeof(int32_t) * (size_t)len)) continue;
		int m = n - (j + len) < k ? n - (j + len) : k;
		if (m > best_m) {
			best = j;
			best_m = m;
			if (m == k) break;
		}
	}
	for (int i = 0; i < best_m; i++) out[i] = hist[best + len + i];
	return best_m;
}

static int ngram_propose(void* ctx, const int32_t* hist, int n, int k, int32_t* out, char* err, size_t errlen)
{
	struct ngram* g = ctx;
	for (int len = g->nmax; len >= g->nmin; len--) {
		int m = lookup(hist, n, len, k, out);
		if (m) return m;
	}
	return 0;
}

static int ngram_accept(void* ctx, const int32_t* hist, int n, const float* hidden, int hn, char* err, size_t errlen)
{
	return 0;
}

int pv_drafter_ngram(struct pv_drafter* d, int ngram_min, int ngram_max)
{
	struct ngram* g = pv_xcalloc(1, sizeof *g);
	g->nmin = ngram_min > 0 ? ngram_min : 2;
	g->nmax = ngram_max >= g->nmin ? ngram_max : (g->nmin > 4 ? g->nmin : 4);
	*d = (struct pv_drafter){ "ngram", g, ngram_propose, ngram_accept, free, 0 };
	return 0;
}
