/*
 * util.h: small helpers shared by every file: error messages into caller buffers, checked
 * allocation, and the abort-on-broken-invariant macro.
 */
#ifndef PV_UTIL_H
#define PV_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Formats a one-line message into err (if non-NULL) and returns -1, so callers can write
 * `return pv_errf(err, errlen, "...", ...);`. */
int pv_errf(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
/* Makes s one line of valid UTF-8 in place: control characters and each byte of an ill-formed
 * sequence (a name cut by %.40s included) become '?'. pv_errf applies it to every message, so
 * text from a hostile file or request cannot add lines or break a JSON response. */
void pv_msg_clean(char* s);

/* Allocation that must succeed for the program to make sense (small, internal). Aborts with a
 * message on failure; request-sized buffers use plain malloc and report errors instead. */
void* pv_xcalloc(size_t n, size_t size);
void* pv_xmalloc(size_t size);
char* pv_xstrdup(const char* s);

/* 64-byte aligned allocation for SIMD scratch; free with free(). NULL on failure. */
void* pv_aligned_alloc(size_t bytes);

/* Broken internal invariant: print file, line and expression, then abort. Never used for bad
 * input, only for states the code itself must never reach. */
#define PV_ASSERT(x) do { if (!(x)) pv_abort(__FILE__, __LINE__, #x); } while (0)
void pv_abort(const char* file, int line, const char* what) __attribute__((noreturn));

/* Overflow-checked size arithmetic: returns 0 on overflow. */
static inline int pv_mul_ok(uint64_t a, uint64_t b, uint64_t* out)
{
	return !__builtin_mul_overflow(a, b, out);
}

#endif
