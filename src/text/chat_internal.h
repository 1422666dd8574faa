/*
 * chat_internal.h: what the chat files share. Private to src/text/chat_*.c.
 *   chat_py.c      the Python semantics the Jinja templates rely on: str.strip() with Python's
 *                  whitespace set (Jinja's trim), json.dumps as transformers' tojson calls it,
 *                  float repr and str() of values
 *   chat_render.c  the three renderers, one per official template
 *   chat_parse.c   the parsers of generated assistant text, whole and streaming
 * The API and its contract are in include/proven_text.h.
 */
#ifndef PV_CHAT_INTERNAL_H
#define PV_CHAT_INTERNAL_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proven_text.h"

/* A growing output buffer, NUL-terminated once anything is in it. oom latches the first failed
 * allocation and drops what is appended after it, so a caller checks it once, at the end. */
struct strbuf {
	char* p;
	size_t n, cap;
	int oom;
};

static inline void strbuf_put(struct strbuf* b, const char* s, size_t n)
{
	if (b->oom || !n) return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1) {
			if (cap > SIZE_MAX / 2) {
				b->oom = 1;
				return;
			}
			cap *= 2;
		}
		char* g = realloc(b->p, cap);
		if (!g) {
			b->oom = 1;
			return;
		}
		b->p = g;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static inline void strbuf_puts(struct strbuf* b, const char* s) { strbuf_put(b, s, strlen(s)); }

/* A slice of a string (not NUL-terminated in general): p[0..n). */
struct strview {
	const char* p;
	size_t n;
};

static inline void strbuf_putv(struct strbuf* b, struct strview s) { strbuf_put(b, s.p, s.n); }

static inline struct strview strview_of(const char* s) { return (struct strview){ s, strlen(s) }; }

static inline struct strview strview_json(const json_t* s)
{
	return (struct strview){ json_string_value(s), json_string_length(s) };
}

static inline const char* strview_end(struct strview s) { return s.p + s.n; }

/* Python's str.find / rfind / startswith / endswith; find and rfind return NULL for -1. */
static inline const char* strview_find(struct strview s, const char* needle)
{
	size_t m = strlen(needle);
	if (m > s.n) return NULL;
	return memmem(s.p, s.n, needle, m);
}

static inline const char* strview_rfind(struct strview s, const char* needle)
{
	size_t m = strlen(needle);
	if (m > s.n) return NULL;
	for (size_t i = s.n - m + 1; i-- > 0;)
		if (!memcmp(s.p + i, needle, m)) return s.p + i;
	return NULL;
}

static inline int strview_starts(struct strview s, const char* pre)
{
	size_t m = strlen(pre);
	return s.n >= m && !memcmp(s.p, pre, m);
}

static inline int strview_ends(struct strview s, const char* suf)
{
	size_t m = strlen(suf);
	return s.n >= m && !memcmp(s.p + s.n - m, suf, m);
}

/* .lstrip("\n") and .rstrip("\n") */
static inline struct strview strview_lstrip_nl(struct strview s)
{
	while (s.n && *s.p == '\n') s.p++, s.n--;
	return s;
}

static inline struct strview strview_rstrip_nl(struct strview s)
{
	while (s.n && s.p[s.n - 1] == '\n') s.n--;
	return s;
}

/* chat_py.c ------------------------------------------------------------------------------------ */

/* str.strip() and str.rstrip() with Python's whitespace set (Jinja's trim is strip). Text that
 * is not valid UTF-8 is read loosely (base/utf8.h). */
struct strview pv_py_strip(struct strview s);
struct strview pv_py_rstrip(struct strview s);
/* transformers' tojson: json.dumps(v, ensure_ascii=False), separators ", " and ": ", keys in the
 * given order. -1 when nested deeper than 512 (what is written then is incomplete). */
int pv_py_json(struct strbuf* b, const json_t* v, int depth);
/* Python's str(v) of a JSON value (Jinja's `| string`): True, None, float repr, ... */
void pv_py_str(struct strbuf* b, const json_t* v);

#endif
