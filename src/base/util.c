/* util.c: error formatting, checked allocation, invariant aborts. */
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pv_errf(char* err, size_t errlen, const char* fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
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
