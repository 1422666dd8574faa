/* util.c: error formatting, checked allocation, invariant aborts. */
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

void pv_msg_clean(char* s)
{
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f) s[i] = '?';
			i++;
			continue;
		}
		int bad, k = pv_utf8_seq(s + i, n - i, &bad);
		if (k > 0) {
			i += (size_t)k;
			continue;
		}
		if (k < 0) bad = (int)(n - i); /* cut at the end (a truncated %s) */
		for (int j = 0; j < bad; j++) s[i + (size_t)j] = '?';
		i += (size_t)bad;
	}
}

int pv_errf(char* err, size_t errlen, const char* fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
		pv_msg_clean(err); /* names and values from the input must not break the line */
	}
	return -1;
}

static void oom(size_t bytes)
{
	fprintf(stderr, "proven: out of memory allocating %zu bytes\n", bytes);
	abort();
}

void* pv_xcalloc(size_t n, size_t size)
{
	void* p = calloc(n ? n : 1, size ? size : 1);
	if (!p) oom(n * size);
	return p;
}

void* pv_xmalloc(size_t size)
{
	void* p = malloc(size ? size : 1);
	if (!p) oom(size);
	return p;
}

char* pv_xstrdup(const char* s)
{
	size_t n = strlen(s) + 1;
	char* p = pv_xmalloc(n);
	memcpy(p, s, n);
	return p;
}

void* pv_aligned_alloc(size_t bytes)
{
	void* p = NULL;
	if (posix_memalign(&p, 64, bytes ? (bytes + 63) / 64 * 64 : 64)) return NULL;
	return p;
}

void pv_abort(const char* file, int line, const char* what)
{
	fprintf(stderr, "proven: internal error at %s:%d: assertion '%s' failed\n", file, line, what);
	abort();
}
