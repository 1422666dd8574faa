/*
 * gguf.c: mmap + validation of one GGUF file. Everything in the file is hostile: every count,
 * length and offset is checked against the bytes that remain before it is used or allocated
 * for, arithmetic is overflow-checked, and every problem becomes a one-line message naming the
 * file and the key or tensor. Tables grow as entries are actually read, so a lying count costs
 * nothing before the truncation it implies is found.
 */
#include "format/gguf.h"

#include <errno.h>
#include <float.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"
#include "base/file.h"
#include "base/util.h"

#define PV_GGUF_MAX_KEY 65535 /* the GGUF spec's limit for keys */

/* ---- type tables ------------------------------------------------------------------------ */

static const char* const ggml_names[] = {
	[0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",    [6] = "Q5_0",
	[7] = "Q5_1",     [8] = "Q8_0",     [9] = "Q8_1",     [10] = "Q2_K",   [11] = "Q3_K",
	[12] = "Q4_K",    [13] = "Q5_K",    [14] = "Q6_K",    [15] = "Q8_K",   [16] = "IQ2_XXS",
	[17] = "IQ2_XS",  [18] = "IQ3_XXS", [19] = "IQ1_S",   [20] = "IQ4_NL", [21] = "IQ3_S",
	[22] = "IQ2_S",   [23] = "IQ4_XS",  [24] = "I8",      [25] = "I16",    [26] = "I32",
	[27] = "I64",     [28] = "F64",     [29] = "IQ1_M",   [30] = "BF16",   [34] = "TQ1_0",
	[35] = "TQ2_0",   [39] = "MXFP4",   [40] = "NVFP4",   [41] = "Q1_0",   [42] = "Q2_0",
};

const char* pv_gguf_ggml_type_name(int t)
{
	if (t < 0 || (size_t)t >= sizeof ggml_names / sizeof ggml_names[0]) return NULL;
	return ggml_names[t];
}

static const struct { int ggml; enum pv_dtype pv; } type_map[] = {
	{ 0, PV_F32 },   { 1, PV_F16 },   { 30, PV_BF16 }, { 8, PV_Q8_0 },  { 2, PV_Q4_0 }, { 3, PV_Q4_1 },
	{ 6, PV_Q5_0 },  { 7, PV_Q5_1 },  { 12, PV_Q4_K }, { 13, PV_Q5_K }, { 14, PV_Q6_K },
};

int pv_gguf_dtype(int ggml_type)
{
	for (size_t i = 0; i < sizeof type_map / sizeof type_map[0]; i++)
		if (type_map[i].ggml == ggml_type) return (int)type_map[i].pv;
	return -1;
}

int pv_gguf_ggml_type(enum pv_dtype t)
{
	for (size_t i = 0; i < sizeof type_map / sizeof type_map[0]; i++)
		if (type_map[i].pv == t) return type_map[i].ggml;
	return -1;
}

static const char* const value_names[PV_GGUF_TYPE_COUNT] = {
	"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};

const char* pv_gguf_type_name(int t)
{
	return t >= 0 && t < PV_GGUF_TYPE_COUNT ? value_names[t] : "?";
}

/* Bytes of a fixed-size value; 0 for STRING and ARRAY. */
static uint64_t scalar_size(int t)
{
	switch (t) {
	case PV_GGUF_UINT8: case PV_GGUF_INT8: case PV_GGUF_BOOL: return 1;
	case PV_GGUF_UINT16: case PV_GGUF_INT16: return 2;
	case PV_GGUF_UINT32: case PV_GGUF_INT32: case PV_GGUF_FLOAT32: return 4;
	case PV_GGUF_UINT64: case PV_GGUF_INT64: case PV_GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

/* The fewest bytes one element of type t can take: what a count is checked against. */
static uint64_t min_size(int t)
{
	if (t == PV_GGUF_STRING) return 8;     /* u64 length                 */
	if (t == PV_GGUF_ARRAY) return 12;     /* i32 type + u64 count       */
	return scalar_size(t);
}

/* ---- little-endian reads (from validated ranges) --------------------------------------- */

static uint64_t rd_le(const unsigned char* p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
	return v;
}

/* ---- messages ---------------------------------------------------------------------------- */

/* Up to 80 bytes of s (len bytes, not terminated) for a message: control and non-ASCII bytes
 * become '?', longer names end in "...". */
static const char* printable(char dst[96], const char* s, uint64_t len)
{
	size_t n = 0;
	for (; n < len && n < 80; n++) {
		unsigned char c = (unsigned char)s[n];
		dst[n] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
	}
	if (len > 80) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = 0;
	return dst;
}

struct rd {
	const char* label;
	const unsigned char* b;
	uint64_t len;
	uint64_t pos;
	char* err;
	size_t errlen;
	const char* what;     /* "key" or "tensor", while one is being read */
	char name[96];        /* its printable name                         */
};

static int fail(struct rd* r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct rd* r, const char* fmt, ...)
{
	char msg[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (r->what)
		return pv_errf(r->err, r->errlen, "%s: %s '%s': %s", r->label, r->what, r->name, msg);
	return pv_errf(r->err, r->errlen, "%s: %s", r->label, msg);
}

/* n more bytes available at the cursor? what: what they would hold. */
static int need(struct rd* r, uint64_t n, const char* what)
{
	if (n > r->len - r->pos)
		return fail(r, "truncated: %s needs %llu bytes at offset %llu, %llu left", what,
		            (unsigned long long)n, (unsigned long long)r->pos,
		            (unsigned long long)(r->len - r->pos));
	return 0;
}

static int rd_u32(struct rd* r, uint32_t* v, const char* what)
{
	if (need(r, 4, what)) return -1;
	*v = (uint32_t)rd_le(r->b + r->pos, 4);
	r->pos += 4;
	return 0;
}

static int rd_u64(struct rd* r, uint64_t* v, const char* what)
{
	if (need(r, 8, what)) return -1;
	*v = rd_le(r->b + r->pos, 8);
	r->pos += 8;
	return 0;
}

/* A length-prefixed string: *s points into the input. */
static int rd_str(struct rd* r, const char** s, uint64_t* len, const char* what)
{
	if (rd_u64(r, len, what)) return -1;
	if (*len > r->len - r->pos)
		return fail(r, "%s of %llu bytes at offset %llu runs past the end of the file (%llu bytes)",
		            what, (unsigned long long)*len, (unsigned long long)r->pos,
		            (unsigned long long)r->len);
	*s = (const char*)r->b + r->pos;
	r->pos += *len;
	return 0;
}

/* Valid UTF-8 (no overlong forms, surrogates or code points above U+10FFFF) without control
 * characters (C0, DEL): what keys and tensor names must be. */
static int valid_name(const unsigned char* s, uint64_t n)
{
	for (uint64_t i = 0; i < n;) {
		unsigned c = s[i];
		if (c < 0x80) {
			if (c < 0x20 || c == 0x7f) return 0;
			i++;
			continue;
		}
		int k;
		uint32_t cp, lo;
		if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; lo = 0x80; }
		else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; lo = 0x800; }
		else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; lo = 0x10000; }
		else return 0;
		if (n - i <= (uint64_t)k) return 0;
		for (int j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80) return 0;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if (cp < lo || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
		i += (uint64_t)k + 1;
	}
	return 1;
}

/* A key or tensor name: read, validated, copied NUL-terminated; sets r->what/r->name. */
static int rd_name(struct rd* r, const char* what, uint64_t max, char** out)
{
	const char* s;
	uint64_t len;
	r->what = NULL;
	if (rd_str(r, &s, &len, what)) return -1;
	printable(r->name, s, len);
	if (len == 0) return fail(r, "empty %s at offset %llu", what, (unsigned long long)(r->pos - 8));
	r->what = what;
	if (len > max) return fail(r, "name of %llu bytes exceeds the limit of %llu", (unsigned long long)len,
	                           (unsigned long long)max);
	if (!valid_name((const unsigned char*)s, len)) return fail(r, "name is not valid UTF-8 or holds control characters");
	*out = malloc((size_t)len + 1);
	if (!*out) return fail(r, "out of memory");
	memcpy(*out, s, (size_t)len);
	(*out)[len] = 0;
	return 0;
}

/* ---- values ------------------------------------------------------------------------------ */

static int rd_type(struct rd* r, int* t, const char* what)
{
	uint32_t v = 0;
	if (rd_u32(r, &v, what)) return -1;
	if (v >= PV_GGUF_TYPE_COUNT) return fail(r, "invalid %s %lld", what, (long long)(int32_t)v);
	*t = (int)v;
	return 0;
}

static int check_bools(struct rd* r, const unsigned char* p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i] > 1) return fail(r, "bool value %u is not 0 or 1", p[i]);
	return 0;
}

/* The body of an array (after its element type and count): validates every element. With
 * offs, records where each STRING/ARRAY element starts. */
static int rd_array_body(struct rd* r, struct pv_gguf_array* a, uint64_t* offs)
{
	const uint64_t start = r->pos;
	uint64_t ms = min_size(a->type);
	if (a->n > (r->len - r->pos) / ms)
		return fail(r, "array of %llu %s elements (at least %llu bytes each) cannot fit in the %llu bytes left",
		            (unsigned long long)a->n, pv_gguf_type_name(a->type), (unsigned long long)ms,
		            (unsigned long long)(r->len - r->pos));
	a->data = r->b + r->pos;
	if (a->type != PV_GGUF_STRING && a->type != PV_GGUF_ARRAY) {
		r->pos += a->n * ms; /* fits: checked above */
		if (a->type == PV_GGUF_BOOL && check_bools(r, a->data, a->n)) return -1;
	} else {
		for (uint64_t i = 0; i < a->n; i++) {
			if (offs) offs[i] = r->pos - start;
			if (a->type == PV_GGUF_STRING) {
				const char* s;
				uint64_t len;
				if (rd_str(r, &s, &len, "array string")) return -1;
			} else {
				if (a->depth >= PV_GGUF_MAX_DEPTH)
					return fail(r, "arrays nest deeper than %d levels", PV_GGUF_MAX_DEPTH);
				struct pv_gguf_array sub = { 0 };
				uint64_t n;
				int et = 0;
				sub.depth = a->depth + 1;
				if (rd_type(r, &et, "array element type") || rd_u64(r, &n, "array count")) return -1;
				sub.type = (enum pv_gguf_type)et;
				sub.n = n;
				if (rd_array_body(r, &sub, NULL)) return -1;
			}
		}
	}
	a->nbytes = r->pos - start;
	return 0;
}

static int rd_value(struct rd* r, struct pv_gguf_kv* kv)
{
	int t = 0;
	if (rd_type(r, &t, "value type")) return -1;
	kv->type = (enum pv_gguf_type)t;
	kv->val = r->b + r->pos;
	if (t == PV_GGUF_STRING) return rd_str(r, &kv->str, &kv->str_len, "string value");
	if (t == PV_GGUF_ARRAY) {
		struct pv_gguf_array* a = &kv->arr;
		uint64_t n;
		a->depth = 1;
		if (rd_type(r, &t, "array element type") || rd_u64(r, &n, "array count")) return -1;
		a->type = (enum pv_gguf_type)t;
		a->n = n;
		uint64_t* offs = NULL;
		if ((t == PV_GGUF_STRING || t == PV_GGUF_ARRAY) && n > 0) {
			/* Bounded by the bytes left: each element takes at least 8. */
			if (n > (r->len - r->pos) / min_size(t))
				return fail(r, "array of %llu %s elements (at least %llu bytes each) cannot fit in the %llu bytes left",
				            (unsigned long long)n, pv_gguf_type_name(t), (unsigned long long)min_size(t),
				            (unsigned long long)(r->len - r->pos));
			offs = malloc((size_t)n * sizeof *offs);
			if (!offs) return fail(r, "out of memory for an array of %llu elements", (unsigned long long)n);
			a->offs = offs;
		}
		return rd_array_body(r, a, offs);
	}
	uint64_t sz = scalar_size(t);
	if (need(r, sz, "value")) return -1;
	r->pos += sz;
	if (t == PV_GGUF_BOOL && check_bools(r, kv->val, 1)) return -1;
	return 0;
}

/* ---- sorting and lookup ------------------------------------------------------------------- */

/* Sorted index of n names (strings at base + i*stride), merge sort: no global context, so
 * parses in several threads at once are fine. Returns NULL when out of memory. */
static int64_t* sort_names(const void* base, size_t stride, int64_t n)
{
	int64_t* idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
	int64_t* tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
	if (!idx || !tmp) {
		free(idx);
		free(tmp);
		return NULL;
	}
#define NAME(i) (*(char* const*)((const char*)base + (size_t)(i) * stride))
	for (int64_t i = 0; i < n; i++) idx[i] = i;
	for (int64_t w = 1; w < n; w *= 2) {
		for (int64_t lo = 0; lo < n; lo += 2 * w) {
			int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int64_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi) tmp[k++] = strcmp(NAME(idx[i]), NAME(idx[j])) <= 0 ? idx[i++] : idx[j++];
			while (i < mid) tmp[k++] = idx[i++];
			while (j < hi) tmp[k++] = idx[j++];
		}
		memcpy(idx, tmp, (size_t)n * sizeof *idx);
	}
#undef NAME
	free(tmp);
	return idx;
}

static int64_t find_sorted(const int64_t* idx, int64_t n, const void* base, size_t stride, const char* key)
{
	int64_t lo = 0, hi = n;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		const char* s = *(char* const*)((const char*)base + (size_t)idx[mid] * stride);
		int c = strcmp(s, key);
		if (!c) return idx[mid];
		if (c < 0) lo = mid + 1;
		else hi = mid;
	}
	return -1;
}

const struct pv_gguf_kv* pv_gguf_find(const struct pv_gguf* g, const char* key)
{
	if (!g->kv_sorted) return NULL;
	int64_t i = find_sorted(g->kv_sorted, g->n_kv, g->kv, sizeof *g->kv, key);
	return i < 0 ? NULL : &g->kv[i];
}

const struct pv_gguf_tensor* pv_gguf_find_tensor(const struct pv_gguf* g, const char* name)
{
	if (!g->t_sorted) return NULL;
	int64_t i = find_sorted(g->t_sorted, g->n_tensors, g->tensors, sizeof *g->tensors, name);
	return i < 0 ? NULL : &g->tensors[i];
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* Grows *arr (elements of size sz) to hold at least n + 1; 0 or -1. */
static int grow(void** arr, int64_t* cap, int64_t n, size_t sz)
{
	if (n < *cap) return 0;
	int64_t nc = *cap ? *cap * 2 : 16;
	void* p = realloc(*arr, (size_t)nc * sz);
	if (!p) return -1;
	memset((char*)p + (size_t)*cap * sz, 0, (size_t)(nc - *cap) * sz);
	*arr = p;
	*cap = nc;
	return 0;
}

static int parse_kvs(struct pv_gguf* g, struct rd* r, uint64_t n_kv)
{
	int64_t cap = 0;
	for (uint64_t i = 0; i < n_kv; i++) {
		if (grow((void**)&g->kv, &cap, g->n_kv, sizeof *g->kv)) return fail(r, "out of memory");
		struct pv_gguf_kv* kv = &g->kv[g->n_kv++];
		r->what = NULL;
		if (rd_name(r, "key", PV_GGUF_MAX_KEY, &kv->key)) return -1;
		if (rd_value(r, kv)) return -1;
	}
	r->what = NULL;
	if (!(g->kv_sorted = sort_names(g->kv, sizeof *g->kv, g->n_kv))) return fail(r, "out of memory");
	for (int64_t i = 1; i < g->n_kv; i++) {
		const char* a = g->kv[g->kv_sorted[i - 1]].key;
		if (!strcmp(a, g->kv[g->kv_sorted[i]].key)) {
			r->what = "key";
			printable(r->name, a, strlen(a));
			return fail(r, "duplicate key");
		}
	}
	const struct pv_gguf_kv* al = pv_gguf_find(g, "general.alignment");
	g->alignment = 32;
	if (al) {
		r->what = "key";
		printable(r->name, al->key, strlen(al->key));
		if (al->type != PV_GGUF_UINT32)
			return fail(r, "must be a u32, not %s", pv_gguf_type_name(al->type));
		uint32_t a = (uint32_t)rd_le(al->val, 4);
		if (a == 0 || (a & (a - 1))) return fail(r, "alignment %u is not a power of two", a);
		g->alignment = a;
		r->what = NULL;
	}
	return 0;
}

static int parse_tensor_info(struct pv_gguf* g, struct rd* r, struct pv_gguf_tensor* t)
{
	uint32_t nd, ty;
	if (rd_name(r, "tensor", PV_GGUF_MAX_NAME, &t->name)) return -1;
	if (rd_u32(r, &nd, "number of dimensions")) return -1;
	if (nd > PV_GGUF_MAX_DIMS) return fail(r, "%u dimensions (at most %d)", nd, PV_GGUF_MAX_DIMS);
	t->n_dims = (int)nd;
	uint64_t numel = 1;
	for (int i = 0; i < PV_GGUF_MAX_DIMS; i++) {
		uint64_t v = 1;
		if (i < t->n_dims && rd_u64(r, &v, "dimension")) return -1;
		if (v > (uint64_t)INT64_MAX) return fail(r, "ne[%d] = %lld is negative", i, (long long)v);
		t->ne[i] = (int64_t)v;
		if (!pv_mul_ok(numel, v, &numel) || numel > (uint64_t)INT64_MAX)
			return fail(r, "element count overflows");
	}
	t->n_elements = (int64_t)numel;
	/* With ne[0] = 0 the count is 0 whatever the rest: the row count (what views use) must
	 * fit on its own. */
	uint64_t rows = 1;
	for (int i = 1; i < PV_GGUF_MAX_DIMS; i++)
		if (!pv_mul_ok(rows, (uint64_t)t->ne[i], &rows) || rows > (uint64_t)INT64_MAX)
			return fail(r, "row count overflows");
	if (rd_u32(r, &ty, "type")) return -1;
	t->ggml_type = (int32_t)ty;
	int pt = pv_gguf_dtype(t->ggml_type);
	if (pt < 0) {
		const char* nm = pv_gguf_ggml_type_name(t->ggml_type);
		if (nm) return fail(r, "ggml type %s (%d) is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
		                       "Q5_0, Q5_1, Q4_K, Q5_K, Q6_K are)", nm, t->ggml_type);
		return fail(r, "unknown ggml type %d", t->ggml_type);
	}
	t->type = (enum pv_dtype)pt;
	int64_t blk = pv_dtype_block(t->type);
	if (t->ne[0] % blk)
		return fail(r, "ne[0] = %lld is not a multiple of the %s block size %lld", (long long)t->ne[0],
		            pv_gguf_ggml_type_name(t->ggml_type), (long long)blk);
	/* bytes = (ne0 / blk) * block_bytes * ne1 * ne2 * ne3 */
	uint64_t nb = (uint64_t)(t->ne[0] / blk);
	if (!pv_mul_ok(nb, pv_dtype_block_bytes(t->type), &nb)) return fail(r, "byte size overflows");
	for (int i = 1; i < PV_GGUF_MAX_DIMS; i++)
		if (!pv_mul_ok(nb, (uint64_t)t->ne[i], &nb)) return fail(r, "byte size overflows");
	t->nbytes = nb;
	if (rd_u64(r, &t->offset, "offset")) return -1;
	if (t->offset % g->alignment)
		return fail(r, "offset %llu is not a multiple of the alignment %u", (unsigned long long)t->offset,
		            g->alignment);
	return 0;
}

static int cmp_offset(const void* a, const void* b)
{
	const struct pv_gguf_tensor* x = *(const struct pv_gguf_tensor* const*)a;
	const struct pv_gguf_tensor* y = *(const struct pv_gguf_tensor* const*)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Data ranges inside the file and pairwise disjoint (empty tensors take no bytes). */
static int check_ranges(struct pv_gguf* g, struct rd* r)
{
	const uint64_t avail = r->len - g->data_offset;
	for (int64_t i = 0; i < g->n_tensors; i++) {
		struct pv_gguf_tensor* t = &g->tensors[i];
		if (t->offset > avail || t->nbytes > avail - t->offset) {
			r->what = "tensor";
			printable(r->name, t->name, strlen(t->name));
			return fail(r, "data [%llu, +%llu) runs past the end of the data section (%llu bytes)",
			            (unsigned long long)t->offset, (unsigned long long)t->nbytes,
			            (unsigned long long)avail);
		}
		t->data = r->b + g->data_offset + t->offset;
	}
	const struct pv_gguf_tensor** order = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *order);
	if (!order) return fail(r, "out of memory");
	for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
	qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_offset);
	const struct pv_gguf_tensor* prev = NULL;
	int rc = 0;
	for (int64_t i = 0; i < g->n_tensors && !rc; i++) {
		const struct pv_gguf_tensor* t = order[i];
		if (!t->nbytes) continue;
		if (prev && t->offset < prev->offset + prev->nbytes) {
			char other[96];
			r->what = "tensor";
			printable(r->name, t->name, strlen(t->name));
			rc = fail(r, "data [%llu, %llu) overlaps tensor '%s'", (unsigned long long)t->offset,
			          (unsigned long long)(t->offset + t->nbytes), printable(other, prev->name, strlen(prev->name)));
		}
		if (!prev || t->offset + t->nbytes > prev->offset + prev->nbytes) prev = t;
	}
	free(order);
	return rc;
}

static int parse(struct pv_gguf* g, struct rd* r)
{
	uint32_t version;
	uint64_t n_tensors, n_kv;

	if (r->len < 4 || memcmp(r->b, "GGUF", 4)) return fail(r, "not a GGUF file (no \"GGUF\" magic)");
	r->pos = 4;
	if (rd_u32(r, &version, "version")) return -1;
	if (version != 2 && version != 3) {
		if (version && !(version & 0xffff))
			return fail(r, "version %u looks byte-swapped: big-endian GGUF files are not supported", version);
		if (version == 1) return fail(r, "GGUF version 1 is not supported (only 2 and 3)");
		return fail(r, "unsupported GGUF version %u (only 2 and 3)", version);
	}
	g->version = version;
	if (rd_u64(r, &n_tensors, "tensor count") || rd_u64(r, &n_kv, "key-value count")) return -1;
	/* A KV takes at least 8 + 1 + 4 + 1 bytes, a tensor info 8 + 1 + 4 + 4 + 8. */
	if (n_kv > (r->len - r->pos) / 14)
		return fail(r, "key-value count %llu cannot fit in the %llu bytes left", (unsigned long long)n_kv,
		            (unsigned long long)(r->len - r->pos));
	if (n_tensors > (r->len - r->pos) / 25)
		return fail(r, "tensor count %llu cannot fit in the %llu bytes left", (unsigned long long)n_tensors,
		            (unsigned long long)(r->len - r->pos));
	if (parse_kvs(g, r, n_kv)) return -1;

	int64_t cap = 0;
	for (uint64_t i = 0; i < n_tensors; i++) {
		r->what = NULL;
		if (grow((void**)&g->tensors, &cap, g->n_tensors, sizeof *g->tensors)) return fail(r, "out of memory");
		if (parse_tensor_info(g, r, &g->tensors[g->n_tensors++])) return -1;
	}
	r->what = NULL;
	if (!(g->t_sorted = sort_names(g->tensors, sizeof *g->tensors, g->n_tensors))) return fail(r, "out of memory");
	for (int64_t i = 1; i < g->n_tensors; i++) {
		const char* a = g->tensors[g->t_sorted[i - 1]].name;
		if (!strcmp(a, g->tensors[g->t_sorted[i]].name)) {
			r->what = "tensor";
			printable(r->name, a, strlen(a));
			return fail(r, "duplicate tensor name");
		}
	}
	/* The data section starts at the next multiple of the alignment. */
	uint64_t pad = (g->alignment - r->pos % g->alignment) % g->alignment;
	g->data_offset = r->pos + pad;
	if (g->n_tensors > 0 && pad > r->len - r->pos)
		return fail(r, "data section (offset %llu after alignment to %u) starts past the end of the file "
		               "(%llu bytes)", (unsigned long long)(r->pos + pad), g->alignment,
		            (unsigned long long)r->len);
	if (g->data_offset > r->len) g->data_offset = r->len; /* no tensors: no data section */
	return check_ranges(g, r);
}

int pv_gguf_parse(struct pv_gguf* g, const char* label, const void* buf, size_t len, char* err,
                  size_t errlen)
{
	struct rd r;
	memset(g, 0, sizeof *g);
	memset(&r, 0, sizeof r);
	r.label = label;
	r.b = buf;
	r.len = len;
	r.err = err;
	r.errlen = errlen;
	g->path = malloc(strlen(label) + 1);
	if (!g->path) return pv_errf(err, errlen, "%s: out of memory", label);
	memcpy(g->path, label, strlen(label) + 1);
	if (parse(g, &r)) {
		pv_gguf_close(g);
		return -1;
	}
	return 0;
}

int pv_gguf_open(struct pv_gguf* g, const char* path, char* err, size_t errlen)
{
	uint64_t size;

	memset(g, 0, sizeof *g);
	int fd = pv_file_open(path, &size, err, errlen); /* a FIFO or a device fails here, never blocks */
	if (fd < 0) return -1;
	if (size < 24) {
		close(fd);
		return pv_errf(err, errlen, "%s: %llu bytes is too short for a GGUF file", path, (unsigned long long)size);
	}
	size_t len = (size_t)size;
	void* map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) return pv_errf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
	if (pv_gguf_parse(g, path, map, len, err, errlen)) {
		munmap(map, len);
		return -1;
	}
	g->map = map;
	g->map_len = len;
	return 0;
}

void pv_gguf_close(struct pv_gguf* g)
{
	for (int64_t i = 0; i < g->n_kv; i++) {
		free(g->kv[i].key);
		free((void*)g->kv[i].arr.offs);
	}
	free(g->kv);
	for (int64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
	free(g->tensors);
	free(g->kv_sorted);
	free(g->t_sorted);
	free(g->path);
	if (g->map) munmap(g->map, g->map_len);
	memset(g, 0, sizeof *g);
}

/* ---- typed access -------------------------------------------------------------------------- */

/* A scalar at p of type t as a signed/unsigned integer pair: *neg set for negative values. */
static int int_value(int t, const unsigned char* p, uint64_t* mag, int* neg)
{
	int64_t s;
	*neg = 0;
	switch (t) {
	case PV_GGUF_UINT8: case PV_GGUF_UINT16: case PV_GGUF_UINT32: case PV_GGUF_UINT64: case PV_GGUF_BOOL:
		*mag = rd_le(p, (int)scalar_size(t));
		return 0;
	case PV_GGUF_INT8: s = (int8_t)p[0]; break;
	case PV_GGUF_INT16: s = (int16_t)(uint16_t)rd_le(p, 2); break;
	case PV_GGUF_INT32: s = (int32_t)(uint32_t)rd_le(p, 4); break;
	case PV_GGUF_INT64: s = (int64_t)rd_le(p, 8); break;
	default: return -1;
	}
	*neg = s < 0;
	*mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
	return 0;
}

static double float_value(int t, const unsigned char* p)
{
	if (t == PV_GGUF_FLOAT32) {
		uint32_t u = (uint32_t)rd_le(p, 4);
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	uint64_t u = rd_le(p, 8);
	double d;
	memcpy(&d, &u, 8);
	return d;
}

static const struct pv_gguf_kv* get(const struct pv_gguf* g, const char* key, char* err, size_t errlen)
{
	const struct pv_gguf_kv* kv = pv_gguf_find(g, key);
	if (!kv) {
		char pk[96];
		pv_errf(err, errlen, "%s: key '%s' is missing", g->path, printable(pk, key, strlen(key)));
	}
	return kv;
}

static int type_err(const struct pv_gguf* g, const struct pv_gguf_kv* kv, const char* want, char* err,
                    size_t errlen)
{
	char pk[96];
	return pv_errf(err, errlen, "%s: key '%s' is %s, not %s", g->path, printable(pk, kv->key, strlen(kv->key)),
	               pv_gguf_type_name(kv->type), want);
}

/* Integer in [lo, hi] (lo <= 0 given as its magnitude lo_mag). */
static int get_int(const struct pv_gguf* g, const char* key, uint64_t lo_mag, uint64_t hi, const char* want,
                   uint64_t* mag, int* neg, char* err, size_t errlen)
{
	const struct pv_gguf_kv* kv = get(g, key, err, errlen);
	if (!kv) return -1;
	if (kv->type == PV_GGUF_BOOL || int_value(kv->type, kv->val, mag, neg)) return type_err(g, kv, want, err, errlen);
	if ((*neg && *mag > lo_mag) || (!*neg && *mag > hi)) {
		char pk[96];
		return pv_errf(err, errlen, "%s: key '%s' = %s%llu is out of range for %s", g->path,
		               printable(pk, kv->key, strlen(kv->key)), *neg ? "-" : "", (unsigned long long)*mag, want);
	}
	return 0;
}

int pv_gguf_get_u32(const struct pv_gguf* g, const char* key, uint32_t* out, char* err, size_t errlen)
{
	uint64_t m;
	int neg;
	if (get_int(g, key, 0, UINT32_MAX, "a u32", &m, &neg, err, errlen)) return -1;
	*out = (uint32_t)m;
	return 0;
}

int pv_gguf_get_i32(const struct pv_gguf* g, const char* key, int32_t* out, char* err, size_t errlen)
{
	uint64_t m;
	int neg;
	if (get_int(g, key, (uint64_t)INT32_MAX + 1, INT32_MAX, "an i32", &m, &neg, err, errlen)) return -1;
	*out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
	return 0;
}

int pv_gguf_get_u64(const struct pv_gguf* g, const char* key, uint64_t* out, char* err, size_t errlen)
{
	uint64_t m;
	int neg;
	if (get_int(g, key, 0, UINT64_MAX, "a u64", &m, &neg, err, errlen)) return -1;
	*out = m;
	return 0;
}

int pv_gguf_get_i64(const struct pv_gguf* g, const char* key, int64_t* out, char* err, size_t errlen)
{
	uint64_t m;
	int neg;
	if (get_int(g, key, (uint64_t)INT64_MAX + 1, INT64_MAX, "an i64", &m, &neg, err, errlen)) return -1;
	*out = neg ? (int64_t)(0 - m) : (int64_t)m;
	return 0;
}

int pv_gguf_get_f64(const struct pv_gguf* g, const char* key, double* out, char* err, size_t errlen)
{
	const struct pv_gguf_kv* kv = get(g, key, err, errlen);
	if (!kv) return -1;
	if (kv->type != PV_GGUF_FLOAT32 && kv->type != PV_GGUF_FLOAT64) return type_err(g, kv, "a float", err, errlen);
	*out = float_value(kv->type, kv->val);
	return 0;
}

int pv_gguf_get_f32(const struct pv_gguf* g, const char* key, float* out, char* err, size_t errlen)
{
	double d;
	if (pv_gguf_get_f64(g, key, &d, err, errlen)) return -1;
	if (isfinite(d) && fabs(d) > (double)FLT_MAX) {
		char pk[96];
		return pv_errf(err, errlen, "%s: key '%s' = %g does not fit in a float", g->path,
		               printable(pk, key, strlen(key)), d);
	}
	*out = (float)d;
	return 0;
}

int pv_gguf_get_bool(const struct pv_gguf* g, const char* key, int* out, char* err, size_t errlen)
{
	const struct pv_gguf_kv* kv = get(g, key, err, errlen);
	if (!kv) return -1;
	if (kv->type != PV_GGUF_BOOL) return type_err(g, kv, "a bool", err, errlen);
	*out = kv->val[0];
	return 0;
}

int pv_gguf_get_str(const struct pv_gguf* g, const char* key, const char** s, uint64_t* len, char* err,
                    size_t errlen)
{
	const struct pv_gguf_kv* kv = get(g, key, err, errlen);
	if (!kv) return -1;
	if (kv->type != PV_GGUF_STRING) return type_err(g, kv, "a string", err, errlen);
	*s = kv->str;
	*len = kv->str_len;
	return 0;
}

int pv_gguf_get_arr(const struct pv_gguf* g, const char* key, int elem, struct pv_gguf_array* out, char* err,
                    size_t errlen)
{
	const struct pv_gguf_kv* kv = get(g, key, err, errlen);
	if (!kv) return -1;
	if (kv->type != PV_GGUF_ARRAY) return type_err(g, kv, "an array", err, errlen);
	if (elem >= 0 && (int)kv->arr.type != elem) {
		char pk[96];
		return pv_errf(err, errlen, "%s: key '%s' is an array of %s, not of %s", g->path,
		               printable(pk, kv->key, strlen(kv->key)), pv_gguf_type_name(kv->arr.type),
		               pv_gguf_type_name(elem));
	}
	*out = kv->arr;
	return 0;
}

/* The end of one element of type t starting at p (validated at parse time, so every step stays
 * in bounds; recursion is bounded by PV_GGUF_MAX_DEPTH). */
static const unsigned char* skip_elem(int t, const unsigned char* p)
{
	if (t == PV_GGUF_STRING) return p + 8 + rd_le(p, 8);
	if (t != PV_GGUF_ARRAY) return p + scalar_size(t);
	int et = (int)rd_le(p, 4);
	uint64_t n = rd_le(p + 4, 8);
	p += 12;
	if (et != PV_GGUF_STRING && et != PV_GGUF_ARRAY) return p + n * scalar_size(et);
	for (uint64_t k = 0; k < n; k++) p = skip_elem(et, p);
	return p;
}

/* Start of element i of a STRING/ARRAY array: from the offset table, or by a scan. */
static const unsigned char* var_elem(const struct pv_gguf_array* a, uint64_t i)
{
	if (a->offs) return a->data + a->offs[i];
	const unsigned char* p = a->data;
	for (uint64_t k = 0; k < i; k++) p = skip_elem(a->type, p);
	return p;
}

int pv_gguf_arr_i64(const struct pv_gguf_array* a, uint64_t i, int64_t* out)
{
	uint64_t m;
	int neg;
	if (i >= a->n || int_value(a->type, a->data + i * scalar_size(a->type), &m, &neg)) return -1;
	if (!neg && m > (uint64_t)INT64_MAX) return -1;
	*out = neg ? (int64_t)(0 - m) : (int64_t)m;
	return 0;
}

int pv_gguf_arr_u64(const struct pv_gguf_array* a, uint64_t i, uint64_t* out)
{
	uint64_t m;
	int neg;
	if (i >= a->n || int_value(a->type, a->data + i * scalar_size(a->type), &m, &neg) || neg) return -1;
	*out = m;
	return 0;
}

int pv_gguf_arr_f64(const struct pv_gguf_array* a, uint64_t i, double* out)
{
	if (i >= a->n || (a->type != PV_GGUF_FLOAT32 && a->type != PV_GGUF_FLOAT64)) return -1;
	*out = float_value(a->type, a->data + i * scalar_size(a->type));
	return 0;
}

int pv_gguf_arr_str(const struct pv_gguf_array* a, uint64_t i, const char** s, uint64_t* len)
{
	if (i >= a->n || a->type != PV_GGUF_STRING) return -1;
	const unsigned char* p = var_elem(a, i);
	*len = rd_le(p, 8);
	*s = (const char*)p + 8;
	return 0;
}

int pv_gguf_arr_arr(const struct pv_gguf_array* a, uint64_t i, struct pv_gguf_array* out)
{
	if (i >= a->n || a->type != PV_GGUF_ARRAY) return -1;
	const unsigned char* p = var_elem(a, i);
	memset(out, 0, sizeof *out);
	out->type = (enum pv_gguf_type)rd_le(p, 4);
	out->n = rd_le(p + 4, 8);
	out->depth = a->depth + 1;
	out->data = p + 12;
	out->nbytes = (uint64_t)(skip_elem(PV_GGUF_ARRAY, p) - out->data);
	return 0;
}

void pv_gguf_tensor_view(const struct pv_gguf_tensor* t, struct pv_tensor* out)
{
	out->data = t->data;
	out->type = t->type;
	out->cols = t->ne[0];
	out->rows = t->ne[1] * t->ne[2] * t->ne[3];
}
