/*
 * test_gguf.c: the GGUF reader (src/format/gguf.c).
 *
 *   - a GGUF v3 file built here with every metadata type (scalars, arrays of each, arrays of
 *     strings, nested arrays, empty arrays), a custom alignment and tensors of every supported
 *     type, read back from memory and through mmap, with every accessor;
 *   - files written by the gguf Python package (tests/corpus/gguf/valid/, made by
 *     tools/reference/make_quant_vectors.py --gguf-corpus): metadata values, tensor shapes,
 *     and tensor bytes (quantized by gguf-py) against pv_quant_row / dequantized values;
 *   - a table of crafted hostile files, each failing cleanly with a one-line message naming
 *     the file (and the key or tensor) and saying what is wrong; the same files are committed
 *     under tests/corpus/gguf/bad/ (`test_gguf --write-corpus DIR`) and replayed through mmap;
 *   - every truncation of a valid file, and random byte mutations: a clean failure, or a
 *     success whose tensors lie inside the input (ASan checks the reads).
 */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/gguf.h"
#include "harness.h"
#include "quant/quant.h"

/* ---- a small GGUF writer ------------------------------------------------------------------ */

struct gb {
	unsigned char* p;
	size_t n, cap;
};

static void put(struct gb* b, const void* d, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
	}
	if (n) memcpy(b->p + b->n, d, n);
	b->n += n;
}
static void u8(struct gb* b, uint8_t v) { put(b, &v, 1); }
static void u16(struct gb* b, uint16_t v) { u8(b, (uint8_t)v), u8(b, (uint8_t)(v >> 8)); }
static void u32(struct gb* b, uint32_t v) { u16(b, (uint16_t)v), u16(b, (uint16_t)(v >> 16)); }
static void u64(struct gb* b, uint64_t v) { u32(b, (uint32_t)v), u32(b, (uint32_t)(v >> 32)); }
static void f32(struct gb* b, float f) { uint32_t u; memcpy(&u, &f, 4); u32(b, u); }
static void f64(struct gb* b, double f) { uint64_t u; memcpy(&u, &f, 8); u64(b, u); }
static void strn(struct gb* b, const char* s, size_t n) { u64(b, n), put(b, s, n); }
static void str(struct gb* b, const char* s) { strn(b, s, strlen(s)); }
static void header(struct gb* b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
	put(b, "GGUF", 4), u32(b, version), u64(b, n_tensors), u64(b, n_kv);
}
static void kv(struct gb* b, const char* key, uint32_t type) { str(b, key), u32(b, type); }
static void kv_u32(struct gb* b, const char* key, uint32_t v) { kv(b, key, PV_GGUF_UINT32), u32(b, v); }
static void kv_str(struct gb* b, const char* key, const char* v) { kv(b, key, PV_GGUF_STRING), str(b, v); }
static void tinfo(struct gb* b, const char* name, uint32_t nd, const int64_t* ne, uint32_t type, uint64_t off)
{
	str(b, name), u32(b, nd);
	for (uint32_t i = 0; i < nd; i++) u64(b, (uint64_t)ne[i]);
	u32(b, type), u64(b, off);
}
static void pad(struct gb* b, size_t align)
{
	while (b->n % align) u8(b, 0);
}
static void zeros(struct gb* b, size_t n)
{
	for (size_t i = 0; i < n; i++) u8(b, (uint8_t)(i * 7));
}

/* ---- the valid file -------------------------------------------------------------------------- */

/* Tensors of the valid file: name, ggml type, ne, and their values. */
struct vt {
	const char* name;
	int ggml;
	enum pv_dtype type;
	int64_t ne[4];
	int nd;
};
static const struct vt vts[] = {
	{ "f32.vec", 0, PV_F32, { 5 }, 1 },
	{ "f16.mat", 1, PV_F16, { 8, 3 }, 2 },
	{ "bf16.3d", 30, PV_BF16, { 4, 2, 2 }, 3 },
	{ "q8_0", 8, PV_Q8_0, { 64, 2 }, 2 },
	{ "q4_0", 2, PV_Q4_0, { 32, 3 }, 2 },
	{ "q4_1", 3, PV_Q4_1, { 32 }, 1 },
	{ "q5_0", 6, PV_Q5_0, { 96 }, 1 },
	{ "q5_1", 7, PV_Q5_1, { 32, 1, 1, 2 }, 4 },
	{ "blk.0.ffn_down.weight", 12, PV_Q4_K, { 256, 3 }, 2 },
	{ "q5_k", 13, PV_Q5_K, { 512 }, 1 },
	{ "q6_k", 14, PV_Q6_K, { 256, 2 }, 2 },
	{ "scalar", 0, PV_F32, { 1 }, 0 },
	{ "empty", 0, PV_F32, { 0, 4 }, 2 },
};
#define NVT (int)(sizeof vts / sizeof vts[0])

static float vt_value(int t, int64_t i) { return (float)((i * 37 + t * 11) % 101) * 0.03125f - 1.5f; }

static int64_t vt_numel(const struct vt* v)
{
	int64_t n = 1;
	for (int i = 0; i < v->nd; i++) n *= v->ne[i];
	return n;
}

static void vt_bytes(int t, unsigned char* out)
{
	const struct vt* v = &vts[t];
	int64_t n = vt_numel(v);
	float* x = malloc((size_t)(n ? n : 1) * 4);
	for (int64_t i = 0; i < n; i++) x[i] = vt_value(t, i);
	pv_quant_row(v->type, x, out, n);
	free(x);
}

/* The valid GGUF: version, alignment (0: the default 32, no key). */
static void build_valid(struct gb* b, uint32_t version, uint32_t alignment)
{
	uint32_t al = alignment ? alignment : 32;
	int n_kv = 33 + (alignment ? 1 : 0);
	header(b, version, NVT, (uint64_t)n_kv);
	kv_str(b, "general.architecture", "qwen3");
	kv(b, "t.u8", PV_GGUF_UINT8), u8(b, 250);
	kv(b, "t.i8", PV_GGUF_INT8), u8(b, (uint8_t)-7);
	kv(b, "t.u16", PV_GGUF_UINT16), u16(b, 60000);
	kv(b, "t.i16", PV_GGUF_INT16), u16(b, (uint16_t)-30000);
	kv(b, "t.u32", PV_GGUF_UINT32), u32(b, 4000000000u);
	kv(b, "t.i32", PV_GGUF_INT32), u32(b, (uint32_t)-2000000000);
	kv(b, "t.f32", PV_GGUF_FLOAT32), f32(b, 1e-6f);
	kv(b, "t.bool", PV_GGUF_BOOL), u8(b, 1);
	kv(b, "t.bool0", PV_GGUF_BOOL), u8(b, 0);
	kv_str(b, "t.str", "h\xc3\xa9llo");
	kv_str(b, "t.empty_str", "");
	kv(b, "t.u64", PV_GGUF_UINT64), u64(b, 0xfedcba9876543210ull);
	kv(b, "t.i64", PV_GGUF_INT64), u64(b, (uint64_t)INT64_MIN);
	kv(b, "t.f64", PV_GGUF_FLOAT64), f64(b, 3.141592653589793);
	kv(b, "t.f64big", PV_GGUF_FLOAT64), f64(b, 1e300);
	kv(b, "t.i64small", PV_GGUF_INT64), u64(b, 77);
	/* arrays of every scalar type */
	kv(b, "a.u8", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT8), u64(b, 3), u8(b, 1), u8(b, 2), u8(b, 255);
	kv(b, "a.i8", PV_GGUF_ARRAY), u32(b, PV_GGUF_INT8), u64(b, 2), u8(b, 0x80), u8(b, 0x7f);
	kv(b, "a.u16", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT16), u64(b, 1), u16(b, 65535);
	kv(b, "a.i16", PV_GGUF_ARRAY), u32(b, PV_GGUF_INT16), u64(b, 1), u16(b, 0x8000);
	kv(b, "a.u32", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT32), u64(b, 2), u32(b, 7), u32(b, 0xffffffffu);
	kv(b, "a.i32", PV_GGUF_ARRAY), u32(b, PV_GGUF_INT32), u64(b, 4), u32(b, 11), u32(b, 11), u32(b, 10), u32(b, 0);
	kv(b, "a.f32", PV_GGUF_ARRAY), u32(b, PV_GGUF_FLOAT32), u64(b, 2), f32(b, 0.5f), f32(b, -2.0f);
	kv(b, "a.bool", PV_GGUF_ARRAY), u32(b, PV_GGUF_BOOL), u64(b, 3), u8(b, 1), u8(b, 0), u8(b, 1);
	kv(b, "a.u64", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT64), u64(b, 1), u64(b, UINT64_MAX);
	kv(b, "a.i64", PV_GGUF_ARRAY), u32(b, PV_GGUF_INT64), u64(b, 1), u64(b, (uint64_t)-5);
	kv(b, "a.f64", PV_GGUF_ARRAY), u32(b, PV_GGUF_FLOAT64), u64(b, 1), f64(b, -0.25);
	kv(b, "a.empty", PV_GGUF_ARRAY), u32(b, PV_GGUF_INT32), u64(b, 0);
	/* strings: tokenizer-like, with an empty one and a non-ASCII one */
	kv(b, "tokenizer.ggml.tokens", PV_GGUF_ARRAY), u32(b, PV_GGUF_STRING), u64(b, 5);
	str(b, "<|im_start|>"), str(b, ""), str(b, "\xc4\xa0the"), strn(b, "a\0b", 3), str(b, "z");
	/* nested: [[1, 2], [], [3]] of i32; [["x"], ["yy", ""]]; and [[[ 9 ]]] */
	kv(b, "n.i32", PV_GGUF_ARRAY), u32(b, PV_GGUF_ARRAY), u64(b, 3);
	u32(b, PV_GGUF_INT32), u64(b, 2), u32(b, 1), u32(b, 2);
	u32(b, PV_GGUF_INT32), u64(b, 0);
	u32(b, PV_GGUF_INT32), u64(b, 1), u32(b, 3);
	kv(b, "n.str", PV_GGUF_ARRAY), u32(b, PV_GGUF_ARRAY), u64(b, 2);
	u32(b, PV_GGUF_STRING), u64(b, 1), str(b, "x");
	u32(b, PV_GGUF_STRING), u64(b, 2), str(b, "yy"), str(b, "");
	kv(b, "n.deep", PV_GGUF_ARRAY), u32(b, PV_GGUF_ARRAY), u64(b, 1);
	u32(b, PV_GGUF_ARRAY), u64(b, 1), u32(b, PV_GGUF_UINT8), u64(b, 1), u8(b, 9);
	if (alignment) kv_u32(b, "general.alignment", alignment);

	/* tensor infos, offsets packed with alignment */
	uint64_t off = 0;
	uint64_t offs[NVT];
	for (int t = 0; t < NVT; t++) {
		offs[t] = off;
		size_t nb = (size_t)vt_numel(&vts[t]) / (size_t)pv_dtype_block(vts[t].type) * pv_dtype_block_bytes(vts[t].type);
		off += (nb + al - 1) / al * al;
	}
	for (int t = NVT - 1; t >= 0; t--) /* reverse order: offsets need not follow the info order */
		tinfo(b, vts[t].name, (uint32_t)vts[t].nd, vts[t].ne, (uint32_t)vts[t].ggml, offs[t]);
	pad(b, al);
	size_t base = b->n;
	for (int t = 0; t < NVT; t++) {
		while (b->n < base + offs[t]) u8(b, 0xee);
		size_t nb = (size_t)vt_numel(&vts[t]) / (size_t)pv_dtype_block(vts[t].type) * pv_dtype_block_bytes(vts[t].type);
		unsigned char* tmp = malloc(nb + 1);
		vt_bytes(t, tmp);
		put(b, tmp, nb);
		free(tmp);
	}
}

static int str_is(const char* s, uint64_t len, const char* want)
{
	return len == strlen(want) && !memcmp(s, want, len);
}

static void check_valid(const struct pv_gguf* g, const char* what, uint32_t alignment)
{
	char err[512];
	uint32_t u;
	int32_t i;
	uint64_t u64v;
	int64_t i64v;
	float f;
	double d;
	int bv;
	const char* s;
	uint64_t len;

	CHECK(g->n_kv == 33 + (alignment ? 1 : 0) && g->n_tensors == NVT, "%s: counts %lld/%lld", what,
	      (long long)g->n_kv, (long long)g->n_tensors);
	CHECK(g->alignment == (alignment ? alignment : 32) && g->data_offset % g->alignment == 0, "%s: alignment", what);
	CHECK(!pv_gguf_get_str(g, "general.architecture", &s, &len, err, sizeof err) && str_is(s, len, "qwen3"), "%s: arch",
	      what);
	CHECK(!pv_gguf_get_u32(g, "t.u8", &u, err, sizeof err) && u == 250, "%s: u8 as u32", what);
	CHECK(!pv_gguf_get_i32(g, "t.i8", &i, err, sizeof err) && i == -7, "%s: i8", what);
	CHECK(pv_gguf_get_u32(g, "t.i8", &u, err, sizeof err) == -1 && strstr(err, "out of range"), "%s: i8 as u32: %s",
	      what, err);
	CHECK(!pv_gguf_get_u32(g, "t.u16", &u, err, sizeof err) && u == 60000, "%s: u16", what);
	CHECK(!pv_gguf_get_i32(g, "t.i16", &i, err, sizeof err) && i == -30000, "%s: i16", what);
	CHECK(!pv_gguf_get_u32(g, "t.u32", &u, err, sizeof err) && u == 4000000000u, "%s: u32", what);
	CHECK(pv_gguf_get_i32(g, "t.u32", &i, err, sizeof err) == -1 && strstr(err, "t.u32"), "%s: u32 as i32", what);
	CHECK(!pv_gguf_get_i32(g, "t.i32", &i, err, sizeof err) && i == -2000000000, "%s: i32", what);
	CHECK(!pv_gguf_get_f32(g, "t.f32", &f, err, sizeof err) && f == 1e-6f, "%s: f32", what);
	CHECK(!pv_gguf_get_bool(g, "t.bool", &bv, err, sizeof err) && bv == 1, "%s: bool", what);
	CHECK(!pv_gguf_get_bool(g, "t.bool0", &bv, err, sizeof err) && bv == 0, "%s: bool 0", what);
	CHECK(pv_gguf_get_u32(g, "t.bool", &u, err, sizeof err) == -1 && strstr(err, "is bool, not a u32"),
	      "%s: bool as u32: %s", what, err);
	CHECK(!pv_gguf_get_str(g, "t.str", &s, &len, err, sizeof err) && str_is(s, len, "h\xc3\xa9llo"), "%s: str", what);
	CHECK(!pv_gguf_get_str(g, "t.empty_str", &s, &len, err, sizeof err) && len == 0, "%s: empty str", what);
	CHECK(!pv_gguf_get_u64(g, "t.u64", &u64v, err, sizeof err) && u64v == 0xfedcba9876543210ull, "%s: u64", what);
	CHECK(pv_gguf_get_i64(g, "t.u64", &i64v, err, sizeof err) == -1, "%s: big u64 as i64", what);
	CHECK(!pv_gguf_get_i64(g, "t.i64", &i64v, err, sizeof err) && i64v == INT64_MIN, "%s: i64", what);
	CHECK(!pv_gguf_get_u32(g, "t.i64small", &u, err, sizeof err) && u == 77, "%s: small i64 as u32", what);
	CHECK(!pv_gguf_get_f64(g, "t.f64", &d, err, sizeof err) && d == 3.141592653589793, "%s: f64", what);
	CHECK(!pv_gguf_get_f32(g, "t.f64", &f, err, sizeof err) && f == (float)3.141592653589793, "%s: f64 as f32", what);
	CHECK(pv_gguf_get_f32(g, "t.f64big", &f, err, sizeof err) == -1 && strstr(err, "does not fit"), "%s: 1e300 f32",
	      what);
	CHECK(pv_gguf_get_f32(g, "t.u32", &f, err, sizeof err) == -1 && strstr(err, "not a float"), "%s: u32 as f32",
	      what);
	CHECK(pv_gguf_get_str(g, "t.u32", &s, &len, err, sizeof err) == -1 && strstr(err, "not a string"), "%s: u32 str",
	      what);
	CHECK(pv_gguf_get_u32(g, "no.such.key", &u, err, sizeof err) == -1 && strstr(err, "'no.such.key' is missing") &&
	          !strncmp(err, g->path, strlen(g->path)),
	      "%s: missing key: %s", what, err);
	CHECK(pv_gguf_find(g, "t.u8") && !pv_gguf_find(g, "t.u") && !pv_gguf_find(g, "t.u80") && !pv_gguf_find(g, ""),
	      "%s: find", what);

	/* arrays */
	struct pv_gguf_array a, sub, sub2;
	CHECK(!pv_gguf_get_arr(g, "a.u8", PV_GGUF_UINT8, &a, err, sizeof err) && a.n == 3 && !pv_gguf_arr_u64(&a, 2, &u64v) &&
	          u64v == 255 && pv_gguf_arr_u64(&a, 3, &u64v) == -1,
	      "%s: a.u8", what);
	CHECK(!pv_gguf_get_arr(g, "a.i8", -1, &a, err, sizeof err) && !pv_gguf_arr_i64(&a, 0, &i64v) && i64v == -128 &&
	          pv_gguf_arr_u64(&a, 0, &u64v) == -1 && !pv_gguf_arr_i64(&a, 1, &i64v) && i64v == 127,
	      "%s: a.i8", what);
	CHECK(!pv_gguf_get_arr(g, "a.u16", -1, &a, err, sizeof err) && !pv_gguf_arr_u64(&a, 0, &u64v) && u64v == 65535,
	      "%s: a.u16", what);
	CHECK(!pv_gguf_get_arr(g, "a.i16", -1, &a, err, sizeof err) && !pv_gguf_arr_i64(&a, 0, &i64v) && i64v == -32768,
	      "%s: a.i16", what);
	CHECK(!pv_gguf_get_arr(g, "a.u32", -1, &a, err, sizeof err) && !pv_gguf_arr_u64(&a, 1, &u64v) &&
	          u64v == 0xffffffffu,
	      "%s: a.u32", what);
	int ok = !pv_gguf_get_arr(g, "a.i32", PV_GGUF_INT32, &a, err, sizeof err) && a.n == 4;
	int64_t want_i32[4] = { 11, 11, 10, 0 };
	for (uint64_t k = 0; ok && k < 4; k++) ok = !pv_gguf_arr_i64(&a, k, &i64v) && i64v == want_i32[k];
	CHECK(ok, "%s: a.i32", what);
	CHECK(pv_gguf_get_arr(g, "a.i32", PV_GGUF_STRING, &a, err, sizeof err) == -1 && strstr(err, "array of i32, not of str"),
	      "%s: a.i32 as strings: %s", what, err);
	CHECK(!pv_gguf_get_arr(g, "a.f32", -1, &a, err, sizeof err) && !pv_gguf_arr_f64(&a, 1, &d) && d == -2.0 &&
	          pv_gguf_arr_i64(&a, 0, &i64v) == -1,
	      "%s: a.f32", what);
	CHECK(!pv_gguf_get_arr(g, "a.bool", PV_GGUF_BOOL, &a, err, sizeof err) && !pv_gguf_arr_i64(&a, 2, &i64v) &&
	          i64v == 1 && !pv_gguf_arr_i64(&a, 1, &i64v) && i64v == 0,
	      "%s: a.bool", what);
	CHECK(!pv_gguf_get_arr(g, "a.u64", -1, &a, err, sizeof err) && !pv_gguf_arr_u64(&a, 0, &u64v) &&
	          u64v == UINT64_MAX && pv_gguf_arr_i64(&a, 0, &i64v) == -1,
	      "%s: a.u64", what);
	CHECK(!pv_gguf_get_arr(g, "a.i64", -1, &a, err, sizeof err) && !pv_gguf_arr_i64(&a, 0, &i64v) && i64v == -5,
	      "%s: a.i64", what);
	CHECK(!pv_gguf_get_arr(g, "a.f64", -1, &a, err, sizeof err) && !pv_gguf_arr_f64(&a, 0, &d) && d == -0.25, "%s: a.f64",
	      what);
	CHECK(!pv_gguf_get_arr(g, "a.empty", -1, &a, err, sizeof err) && a.n == 0 && pv_gguf_arr_i64(&a, 0, &i64v) == -1,
	      "%s: a.empty", what);
	CHECK(pv_gguf_get_arr(g, "t.u8", -1, &a, err, sizeof err) == -1 && strstr(err, "not an array"), "%s: scalar as arr",
	      what);
	ok = !pv_gguf_get_arr(g, "tokenizer.ggml.tokens", PV_GGUF_STRING, &a, err, sizeof err) && a.n == 5;
	ok = ok && !pv_gguf_arr_str(&a, 0, &s, &len) && str_is(s, len, "<|im_start|>");
	ok = ok && !pv_gguf_arr_str(&a, 1, &s, &len) && len == 0;
	ok = ok && !pv_gguf_arr_str(&a, 2, &s, &len) && str_is(s, len, "\xc4\xa0the");
	ok = ok && !pv_gguf_arr_str(&a, 3, &s, &len) && len == 3 && !memcmp(s, "a\0b", 3);
	ok = ok && !pv_gguf_arr_str(&a, 4, &s, &len) && str_is(s, len, "z") && pv_gguf_arr_str(&a, 5, &s, &len) == -1;
	CHECK(ok, "%s: string array", what);
	ok = !pv_gguf_get_arr(g, "n.i32", PV_GGUF_ARRAY, &a, err, sizeof err) && a.n == 3;
	ok = ok && !pv_gguf_arr_arr(&a, 0, &sub) && sub.type == PV_GGUF_INT32 && sub.n == 2 &&
	     !pv_gguf_arr_i64(&sub, 1, &i64v) && i64v == 2;
	ok = ok && !pv_gguf_arr_arr(&a, 1, &sub) && sub.n == 0;
	ok = ok && !pv_gguf_arr_arr(&a, 2, &sub) && sub.n == 1 && !pv_gguf_arr_i64(&sub, 0, &i64v) && i64v == 3;
	ok = ok && pv_gguf_arr_arr(&a, 3, &sub) == -1 && pv_gguf_arr_str(&a, 0, &s, &len) == -1;
	CHECK(ok, "%s: nested i32 arrays", what);
	ok = !pv_gguf_get_arr(g, "n.str", PV_GGUF_ARRAY, &a, err, sizeof err) && a.n == 2;
	ok = ok && !pv_gguf_arr_arr(&a, 1, &sub) && sub.type == PV_GGUF_STRING && sub.n == 2;
	ok = ok && !pv_gguf_arr_str(&sub, 0, &s, &len) && str_is(s, len, "yy") && !pv_gguf_arr_str(&sub, 1, &s, &len) &&
	     len == 0;
	ok = ok && !pv_gguf_arr_arr(&a, 0, &sub) && !pv_gguf_arr_str(&sub, 0, &s, &len) && str_is(s, len, "x");
	CHECK(ok, "%s: nested string arrays", what);
	ok = !pv_gguf_get_arr(g, "n.deep", -1, &a, err, sizeof err) && !pv_gguf_arr_arr(&a, 0, &sub) &&
	     !pv_gguf_arr_arr(&sub, 0, &sub2) && sub2.depth == 3 && !pv_gguf_arr_u64(&sub2, 0, &u64v) && u64v == 9;
	CHECK(ok, "%s: 3-level array", what);

	/* tensors: shape, type, bytes, values */
	int tens_ok = 1;
	for (int t = 0; t < NVT; t++) {
		const struct pv_gguf_tensor* gt = pv_gguf_find_tensor(g, vts[t].name);
		if (!gt) {
			tens_ok = 0;
			continue;
		}
		int64_t n = vt_numel(&vts[t]);
		size_t nb = (size_t)n / (size_t)pv_dtype_block(vts[t].type) * pv_dtype_block_bytes(vts[t].type);
		unsigned char* want = malloc(nb + 1);
		vt_bytes(t, want);
		if (gt->type != vts[t].type || gt->ggml_type != vts[t].ggml || gt->n_dims != vts[t].nd ||
		    gt->n_elements != n || gt->nbytes != nb || memcmp(gt->data, want, nb))
			tens_ok = 0;
		for (int k = 0; k < 4; k++)
			if (gt->ne[k] != (k < vts[t].nd ? vts[t].ne[k] : 1)) tens_ok = 0;
		if (g->map && (uintptr_t)gt->data % g->alignment) tens_ok = 0; /* the mapping is page-aligned */
		struct pv_tensor v;
		pv_gguf_tensor_view(gt, &v);
		if (v.cols != vts[t].ne[0] || v.rows * v.cols != n) tens_ok = 0;
		/* values: quantized tensors dequantize to what pv_dequant_row gives for the bytes */
		if (n > 0 && v.rows > 0) {
			float* row = malloc((size_t)v.cols * 4);
			float* ref = malloc((size_t)v.cols * 4);
			pv_tensor_row_f32(&v, v.rows - 1, row);
			pv_dequant_row(v.type, want + (size_t)(v.rows - 1) * pv_dtype_row_bytes(v.type, v.cols), ref, v.cols);
			if (memcmp(row, ref, (size_t)v.cols * 4)) tens_ok = 0;
			if (v.type == PV_F32 && pv_tensor_get(&v, 0, v.cols - 1) != vt_value(t, v.cols - 1)) tens_ok = 0;
			free(row);
			free(ref);
		}
		free(want);
	}
	CHECK(tens_ok, "%s: tensors", what);
	CHECK(!pv_gguf_find_tensor(g, "q4_") && !pv_gguf_find_tensor(g, "zzz"), "%s: absent tensors", what);
}

static char g_tmp[256];

static void write_file(const char* path, const void* p, size_t n)
{
	FILE* f = fopen(path, "wb");
	if (!f) return;
	fwrite(p, 1, n, f);
	fclose(f);
}

TEST_CASE(valid)
{
	char err[512], path[512];
	static const uint32_t aligns[] = { 0, 1, 64, 4096 };
	for (int v = 2; v <= 3; v++)
		for (size_t ai = 0; ai < 4; ai++) {
			struct gb b = { 0 };
			struct pv_gguf g;
			char what[64];
			build_valid(&b, (uint32_t)v, aligns[ai]);
			snprintf(what, sizeof what, "valid v%d align %u (memory)", v, aligns[ai]);
			int rc = pv_gguf_parse(&g, "mem.gguf", b.p, b.n, err, sizeof err);
			CHECK(rc == 0, "%s: %s", what, err);
			if (!rc) {
				CHECK(g.version == (uint32_t)v, "%s: version", what);
				check_valid(&g, what, aligns[ai]);
				pv_gguf_close(&g);
			}
			snprintf(path, sizeof path, "%s/valid_%d_%u.gguf", g_tmp, v, aligns[ai]);
			write_file(path, b.p, b.n);
			snprintf(what, sizeof what, "valid v%d align %u (mmap)", v, aligns[ai]);
			rc = pv_gguf_open(&g, path, err, sizeof err);
			CHECK(rc == 0, "%s: %s", what, err);
			if (!rc) {
				check_valid(&g, what, aligns[ai]);
				pv_gguf_close(&g);
			}
			unlink(path);
			free(b.p);
		}
	/* open errors */
	struct pv_gguf g;
	CHECK(pv_gguf_open(&g, "/nonexistent/x.gguf", err, sizeof err) == -1 && strstr(err, "/nonexistent/x.gguf: cannot open"),
	      "missing file: %s", err);
	CHECK(pv_gguf_open(&g, g_tmp, err, sizeof err) == -1 && strstr(err, "not a regular file"), "directory: %s", err);
	memset(&g, 0, sizeof g);
	pv_gguf_close(&g); /* safe on a zeroed struct */
	CHECK(!strcmp(pv_gguf_ggml_type_name(12), "Q4_K") && !pv_gguf_ggml_type_name(4) && !pv_gguf_ggml_type_name(-1) &&
	          !pv_gguf_ggml_type_name(1000) && pv_gguf_dtype(30) == PV_BF16 && pv_gguf_dtype(10) == -1 &&
	          pv_gguf_ggml_type(PV_Q6_K) == 14 && pv_gguf_ggml_type(PV_Q8_0) == 8,
	      "ggml type table");
	CHECK(!strcmp(pv_gguf_type_name(PV_GGUF_FLOAT64), "f64") && !strcmp(pv_gguf_type_name(13), "?"), "value type names");
}

/* ---- files from the gguf Python package ------------------------------------------------------ */

/* t_main runs the cases from the repository root */
static const char* corpus_root(void)
{
	const char* env = getenv("PV_CORPUS");
	return env ? env : "tests/corpus";
}

TEST_CASE(pygguf)
{
	char path[640], err[512];
	struct pv_gguf g;
	snprintf(path, sizeof path, "%s/gguf/valid/pygguf_all_types.gguf", corpus_root());
	int rc = pv_gguf_open(&g, path, err, sizeof err);
	CHECK(rc == 0, "gguf-py file: %s", err);
	if (rc) return;
	uint32_t u;
	int32_t i;
	uint64_t u64v, len;
	int64_t i64v;
	float f;
	double d;
	int bv;
	const char* s;
	CHECK(g.version == 3 && g.alignment == 32, "gguf-py: version %u alignment %u", g.version, g.alignment);
	CHECK(!pv_gguf_get_str(&g, "general.architecture", &s, &len, err, sizeof err) && str_is(s, len, "qwen3"), "py arch");
	CHECK(!pv_gguf_get_u32(&g, "t.u8", &u, err, sizeof err) && u == 200, "py u8");
	CHECK(!pv_gguf_get_i32(&g, "t.i8", &i, err, sizeof err) && i == -100, "py i8");
	CHECK(!pv_gguf_get_u32(&g, "t.u16", &u, err, sizeof err) && u == 65000, "py u16");
	CHECK(!pv_gguf_get_i32(&g, "t.i16", &i, err, sizeof err) && i == -32000, "py i16");
	CHECK(!pv_gguf_get_u32(&g, "t.u32", &u, err, sizeof err) && u == 4000000000u, "py u32");
	CHECK(!pv_gguf_get_i32(&g, "t.i32", &i, err, sizeof err) && i == -2000000000, "py i32");
	CHECK(!pv_gguf_get_f32(&g, "t.f32", &f, err, sizeof err) && f == 0.15625f, "py f32");
	CHECK(!pv_gguf_get_bool(&g, "t.bool", &bv, err, sizeof err) && bv == 1, "py bool");
	CHECK(!pv_gguf_get_str(&g, "t.str", &s, &len, err, sizeof err) && str_is(s, len, "h\xc3\xa9llo, w\xc3\xb6rld"),
	      "py str");
	CHECK(!pv_gguf_get_u64(&g, "t.u64", &u64v, err, sizeof err) && u64v == 18000000000000000000ull, "py u64");
	CHECK(!pv_gguf_get_i64(&g, "t.i64", &i64v, err, sizeof err) && i64v == -9000000000000000000ll, "py i64");
	CHECK(!pv_gguf_get_f64(&g, "t.f64", &d, err, sizeof err) && d == -2.718281828459045, "py f64");
	CHECK(!pv_gguf_get_u32(&g, "qwen3.context_length", &u, err, sizeof err) && u == 40960, "py context_length");
	CHECK(!pv_gguf_get_f32(&g, "qwen3.rope.freq_base", &f, err, sizeof err) && f == 1e6f, "py freq_base");
	struct pv_gguf_array a, sub;
	CHECK(!pv_gguf_get_arr(&g, "t.arr_i32", PV_GGUF_INT32, &a, err, sizeof err) && a.n == 3 &&
	          !pv_gguf_arr_i64(&a, 1, &i64v) && i64v == -2,
	      "py arr_i32");
	CHECK(!pv_gguf_get_arr(&g, "t.arr_str", PV_GGUF_STRING, &a, err, sizeof err) && a.n == 4 &&
	          !pv_gguf_arr_str(&a, 3, &s, &len) && str_is(s, len, "<|im_end|>") && !pv_gguf_arr_str(&a, 1, &s, &len) &&
	          len == 0,
	      "py arr_str");
	CHECK(!pv_gguf_get_arr(&g, "t.arr_f32", PV_GGUF_FLOAT32, &a, err, sizeof err) && !pv_gguf_arr_f64(&a, 1, &d) &&
	          d == -1.25,
	      "py arr_f32");
	CHECK(!pv_gguf_get_arr(&g, "t.arr_bool", PV_GGUF_BOOL, &a, err, sizeof err) && a.n == 3, "py arr_bool");
	CHECK(!pv_gguf_get_arr(&g, "t.arr_nested", PV_GGUF_ARRAY, &a, err, sizeof err) && a.n == 2 &&
	          !pv_gguf_arr_arr(&a, 1, &sub) && sub.n == 3 && !pv_gguf_arr_i64(&sub, 2, &i64v) && i64v == 5,
	      "py nested");
	CHECK(!pv_gguf_get_arr(&g, "t.arr_nested_str", PV_GGUF_ARRAY, &a, err, sizeof err) &&
	          !pv_gguf_arr_arr(&a, 1, &sub) && !pv_gguf_arr_str(&sub, 0, &s, &len) && str_is(s, len, "zzz"),
	      "py nested strings");

	/* 32-element types and floats: gguf-py quantized i * 0.01 - 1; we quantize the same values */
	static const struct { const char* name; enum pv_dtype t; int cols; } ts[] = {
		{ "t.f32", PV_F32, 64 },   { "t.f16", PV_F16, 64 },   { "t.bf16", PV_BF16, 64 }, { "t.q8_0", PV_Q8_0, 64 },
		{ "t.q4_0", PV_Q4_0, 64 }, { "t.q4_1", PV_Q4_1, 64 }, { "t.q5_0", PV_Q5_0, 64 }, { "t.q5_1", PV_Q5_1, 64 },
	};
	for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
		const struct pv_gguf_tensor* t = pv_gguf_find_tensor(&g, ts[k].name);
		CHECK(t && t->type == ts[k].t && t->n_dims == 2 && t->ne[0] == ts[k].cols && t->ne[1] == 2,
		      "py tensor %s: shape/type", ts[k].name);
		if (!t) continue;
		float x[128];
		unsigned char q[512];
		for (int e = 0; e < 128; e++) x[e] = (float)e * 0.01f - 1.0f;
		pv_quant_row(ts[k].t, x, q, 128);
		CHECK(t->nbytes == pv_dtype_row_bytes(ts[k].t, 128) && !memcmp(t->data, q, t->nbytes),
		      "py tensor %s: bytes differ from pv_quant_row", ts[k].name);
	}
	/* K types: raw blocks, dequantized by gguf-py into the .f32 companions */
	static const char* const kt[] = { "t.q4_k", "t.q5_k", "t.q6_k" };
	for (int k = 0; k < 3; k++) {
		char fname[32];
		snprintf(fname, sizeof fname, "%s.f32", kt[k]);
		const struct pv_gguf_tensor* t = pv_gguf_find_tensor(&g, kt[k]);
		const struct pv_gguf_tensor* e = pv_gguf_find_tensor(&g, fname);
		CHECK(t && e && t->ne[0] == 256 && t->ne[1] == 2 && e->type == PV_F32, "py %s present", kt[k]);
		if (!t || !e) continue;
		float y[512];
		pv_dequant_row(t->type, t->data, y, 512);
		CHECK(!memcmp(y, e->data, sizeof y), "py %s: dequantization differs from gguf-py", kt[k]);
	}
	pv_gguf_close(&g);

	snprintf(path, sizeof path, "%s/gguf/valid/pygguf_no_tensors.gguf", corpus_root());
	rc = pv_gguf_open(&g, path, err, sizeof err);
	CHECK(rc == 0 && g.n_tensors == 0 && g.alignment == 64, "gguf-py file without tensors: %s", err);
	if (!rc) pv_gguf_close(&g);
}

/* ---- hostile files ------------------------------------------------------------------------------- */

struct bad_case {
	const char* name;
	const char* expect; /* substring of the message */
	void (*build)(struct gb* b);
};

static void b_empty(struct gb* b) { (void)b; }
static void b_magic(struct gb* b) { put(b, "GGUG", 4), u32(b, 3), u64(b, 0), u64(b, 0); }
static void b_short(struct gb* b) { put(b, "GGUF", 4), u16(b, 3); }
static void b_v1(struct gb* b) { header(b, 1, 0, 0); }
static void b_v4(struct gb* b) { header(b, 4, 0, 0); }
static void b_big_endian(struct gb* b) { header(b, 0x03000000u, 0, 0); }
static void b_no_counts(struct gb* b) { put(b, "GGUF", 4), u32(b, 3), u64(b, 0); }
static void b_kv_count_huge(struct gb* b) { header(b, 3, 0, 1ull << 60), kv_u32(b, "a", 1); }
static void b_tensor_count_huge(struct gb* b) { header(b, 3, 1ull << 60, 0), zeros(b, 100); }
static void b_kv_count_negative(struct gb* b) { header(b, 3, 0, (uint64_t)-1), kv_u32(b, "a", 1); }
static void b_kv_missing(struct gb* b) { header(b, 3, 0, 2), kv_str(b, "general.architecture", "qwen3"), u64(b, 9), put(b, "ab", 2); }
static void b_key_len_huge(struct gb* b) { header(b, 3, 0, 1), u64(b, 1ull << 63), put(b, "abc", 3), u32(b, 4), u32(b, 1); }
static void b_key_empty(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "", 1); }
static void b_key_ctrl(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "gen\neral", 1); }
static void b_key_nul(struct gb* b) { header(b, 3, 0, 1), strn(b, "a\0b", 3), u32(b, PV_GGUF_UINT32), u32(b, 1); }
static void b_key_overlong(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "k\xc0\xaf", 1); }
static void b_key_surrogate(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "k\xed\xa0\x80", 1); }
static void b_key_cut_utf8(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "k\xe2\x82", 1); }
static void b_key_too_long(struct gb* b)
{
	header(b, 3, 0, 1);
	u64(b, 70000);
	for (int i = 0; i < 70000; i++) u8(b, 'k');
	u32(b, PV_GGUF_UINT8), u8(b, 1);
}
static void b_value_type(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.x", 13), u32(b, 0); }
static void b_value_type_neg(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.x", (uint32_t)-1), u32(b, 0); }
static void b_value_cut(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.x", PV_GGUF_UINT64), u32(b, 5); }
static void b_string_huge(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.name", PV_GGUF_STRING), u64(b, 1ull << 62), zeros(b, 8); }
static void b_string_past_end(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.name", PV_GGUF_STRING), u64(b, 9), put(b, "12345678", 8); }
static void b_bool(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.flag", PV_GGUF_BOOL), u8(b, 2); }
static void b_arr_count_huge(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT8), u64(b, 1ull << 60), zeros(b, 16); }
static void b_arr_count_u64(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY), u32(b, PV_GGUF_UINT64), u64(b, (1ull << 61) + 1), zeros(b, 16); }
static void b_arr_str_count_huge(struct gb* b) { header(b, 3, 0, 1), kv(b, "tokenizer.ggml.tokens", PV_GGUF_ARRAY), u32(b, PV_GGUF_STRING), u64(b, 1ull << 60), str(b, "a"); }
static void b_arr_str_past_end(struct gb* b) { header(b, 3, 0, 1), kv(b, "tokenizer.ggml.tokens", PV_GGUF_ARRAY), u32(b, PV_GGUF_STRING), u64(b, 2), str(b, "a"), u64(b, 100), put(b, "b", 1); }
static void b_arr_elem_type(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY), u32(b, 77), u64(b, 1), u32(b, 0); }
static void b_arr_bool(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY), u32(b, PV_GGUF_BOOL), u64(b, 3), u8(b, 0), u8(b, 1), u8(b, 0xff); }
static void b_arr_deep(struct gb* b)
{
	header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY);
	for (int i = 0; i < 9; i++) u32(b, PV_GGUF_ARRAY), u64(b, 1);
	u32(b, PV_GGUF_UINT8), u64(b, 1), u8(b, 1);
}
static void b_arr_nested_huge(struct gb* b) { header(b, 3, 0, 1), kv(b, "x.a", PV_GGUF_ARRAY), u32(b, PV_GGUF_ARRAY), u64(b, 1), u32(b, PV_GGUF_INT32), u64(b, 1ull << 61), u32(b, 1); }
static void b_dup_key(struct gb* b) { header(b, 3, 0, 3), kv_u32(b, "b", 1), kv_u32(b, "a", 2), kv_u32(b, "b", 3); }
static void b_align_str(struct gb* b) { header(b, 3, 0, 1), kv_str(b, "general.alignment", "32"); }
static void b_align_u64(struct gb* b) { header(b, 3, 0, 1), kv(b, "general.alignment", PV_GGUF_UINT64), u64(b, 32); }
static void b_align_zero(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "general.alignment", 0); }
static void b_align_48(struct gb* b) { header(b, 3, 0, 1), kv_u32(b, "general.alignment", 48); }

static const int64_t ne_64x2[] = { 64, 2 };
static void one_tensor(struct gb* b, const char* name, uint32_t nd, const int64_t* ne, uint32_t type, uint64_t off,
                       size_t data)
{
	header(b, 3, 1, 1), kv_str(b, "general.architecture", "qwen3");
	tinfo(b, name, nd, ne, type, off);
	pad(b, 32);
	zeros(b, data);
}
static void b_t_dims(struct gb* b) { static const int64_t ne[5] = { 1, 1, 1, 1, 1 }; one_tensor(b, "t", 5, ne, 0, 0, 4); }
static void b_t_ne_neg(struct gb* b) { static const int64_t ne[2] = { 4, -1 }; one_tensor(b, "t", 2, ne, 0, 0, 64); }
static void b_t_ne_overflow(struct gb* b) { static const int64_t ne[3] = { 1ll << 40, 1ll << 40, 1 }; one_tensor(b, "t", 3, ne, 0, 0, 64); }
static void b_t_rows_overflow(struct gb* b) { static const int64_t ne[4] = { 0, 1ll << 40, 1ll << 40, 1 }; one_tensor(b, "t", 4, ne, 0, 0, 64); }
static void b_t_bytes_overflow(struct gb* b) { static const int64_t ne[1] = { 1ll << 62 }; one_tensor(b, "t", 1, ne, 0, 0, 64); }
static void b_t_type_unknown(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 99, 0, 512); }
static void b_t_type_neg(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, (uint32_t)-3, 0, 512); }
static void b_t_type_q2k(struct gb* b) { static const int64_t ne[1] = { 256 }; one_tensor(b, "blk.0.attn_q.weight", 1, ne, 10, 0, 84); }
static void b_t_type_i32(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 26, 0, 512); }
static void b_t_type_removed(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 4, 0, 512); }
static void b_t_block(struct gb* b) { static const int64_t ne[2] = { 100, 2 }; one_tensor(b, "t", 2, ne, 12, 0, 512); }
static void b_t_block_q8(struct gb* b) { static const int64_t ne[1] = { 33 }; one_tensor(b, "t", 1, ne, 8, 0, 64); }
static void b_t_unaligned(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 0, 16, 1024); }
static void b_t_past_end(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 0, 0, 511); }
static void b_t_offset_past_end(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 0, 1ull << 40, 512); }
static void b_t_offset_wrap(struct gb* b) { one_tensor(b, "t", 2, ne_64x2, 0, (uint64_t)-32, 512); }
static void b_t_name_empty(struct gb* b) { one_tensor(b, "", 2, ne_64x2, 0, 0, 512); }
static void b_t_name_bad(struct gb* b) { one_tensor(b, "blk.\xff.x", 2, ne_64x2, 0, 0, 512); }
static void b_t_info_cut(struct gb* b)
{
	header(b, 3, 1, 0);
	str(b, "t"), u32(b, 4), u64(b, 64), u64(b, 2);
}
static void b_t_missing(struct gb* b) { header(b, 3, 2, 0), tinfo(b, "t", 2, ne_64x2, 0, 0), pad(b, 32), zeros(b, 512); }
static void b_t_data_start(struct gb* b) { header(b, 3, 1, 0), tinfo(b, "t", 0, NULL, 0, 0); }
static void b_t_overlap(struct gb* b)
{
	header(b, 3, 3, 0);
	tinfo(b, "a", 2, ne_64x2, 0, 0);
	tinfo(b, "b", 2, ne_64x2, 0, 1024);
	tinfo(b, "c", 2, ne_64x2, 0, 480); /* [480, 992) overlaps a's [0, 512) */
	pad(b, 32);
	zeros(b, 1536);
}
static void b_t_same_offset(struct gb* b)
{
	static const int64_t ne[1] = { 8 };
	header(b, 3, 2, 0);
	tinfo(b, "a", 1, ne, 0, 64);
	tinfo(b, "b", 1, ne, 0, 64);
	pad(b, 32);
	zeros(b, 128);
}
static void b_t_dup(struct gb* b)
{
	header(b, 3, 2, 0);
	tinfo(b, "output.weight", 2, ne_64x2, 0, 0);
	tinfo(b, "output.weight", 2, ne_64x2, 0, 512);
	pad(b, 32);
	zeros(b, 1024);
}
static void b_t_align_data(struct gb* b)
{
	/* alignment 4096 and a data section that would start past the end */
	header(b, 3, 1, 1), kv_u32(b, "general.alignment", 4096);
	tinfo(b, "t", 1, ne_64x2, 0, 0);
	zeros(b, 100);
}

static const struct bad_case bad_cases[] = {
	{ "empty_file", "not a GGUF file", b_empty },
	{ "bad_magic", "not a GGUF file", b_magic },
	{ "short_header", "truncated: version", b_short },
	{ "version_1", "version 1 is not supported", b_v1 },
	{ "version_4", "unsupported GGUF version 4", b_v4 },
	{ "big_endian", "big-endian", b_big_endian },
	{ "no_counts", "truncated: key-value count", b_no_counts },
	{ "kv_count_huge", "key-value count 1152921504606846976 cannot fit", b_kv_count_huge },
	{ "kv_count_negative", "key-value count 18446744073709551615 cannot fit", b_kv_count_negative },
	{ "tensor_count_huge", "tensor count 1152921504606846976 cannot fit", b_tensor_count_huge },
	{ "kv_missing", "key of 9 bytes at offset 77 runs past the end of the file (79 bytes)", b_kv_missing },
	{ "key_len_huge", "key of 9223372036854775808 bytes", b_key_len_huge },
	{ "key_empty", "empty key", b_key_empty },
	{ "key_control_char", "key 'gen?eral': name is not valid UTF-8 or holds control characters", b_key_ctrl },
	{ "key_nul", "key 'a?b': name is not valid UTF-8", b_key_nul },
	{ "key_overlong_utf8", "not valid UTF-8", b_key_overlong },
	{ "key_surrogate", "not valid UTF-8", b_key_surrogate },
	{ "key_cut_utf8", "not valid UTF-8", b_key_cut_utf8 },
	{ "key_too_long", "exceeds the limit of 65535", b_key_too_long },
	{ "value_type_13", "key 'general.x': invalid value type 13", b_value_type },
	{ "value_type_negative", "key 'general.x': invalid value type -1", b_value_type_neg },
	{ "value_truncated", "key 'general.x': truncated: value needs 8 bytes", b_value_cut },
	{ "string_huge", "key 'general.name': string value of 4611686018427387904 bytes", b_string_huge },
	{ "string_past_end", "string value of 9 bytes at offset", b_string_past_end },
	{ "bool_2", "key 'x.flag': bool value 2 is not 0 or 1", b_bool },
	{ "array_count_huge", "key 'x.a': array of 1152921504606846976 u8 elements", b_arr_count_huge },
	{ "array_count_u64", "array of 2305843009213693953 u64 elements", b_arr_count_u64 },
	{ "array_strings_count_huge", "key 'tokenizer.ggml.tokens': array of 1152921504606846976 str elements", b_arr_str_count_huge },
	{ "array_string_past_end", "array string of 100 bytes", b_arr_str_past_end },
	{ "array_elem_type", "invalid array element type 77", b_arr_elem_type },
	{ "array_bool_255", "bool value 255", b_arr_bool },
	{ "array_nesting_9", "arrays nest deeper than 8 levels", b_arr_deep },
	{ "array_nested_count_huge", "array of 2305843009213693952 i32 elements", b_arr_nested_huge },
	{ "duplicate_key", "key 'b': duplicate key", b_dup_key },
	{ "alignment_string", "key 'general.alignment': must be a u32, not str", b_align_str },
	{ "alignment_u64", "must be a u32, not u64", b_align_u64 },
	{ "alignment_zero", "alignment 0 is not a power of two", b_align_zero },
	{ "alignment_48", "alignment 48 is not a power of two", b_align_48 },
	{ "tensor_dims_5", "tensor 't': 5 dimensions (at most 4)", b_t_dims },
	{ "tensor_ne_negative", "tensor 't': ne[1] = -1 is negative", b_t_ne_neg },
	{ "tensor_ne_overflow", "tensor 't': element count overflows", b_t_ne_overflow },
	{ "tensor_rows_overflow", "tensor 't': row count overflows", b_t_rows_overflow },
	{ "tensor_bytes_overflow", "tensor 't': byte size overflows", b_t_bytes_overflow },
	{ "tensor_type_unknown", "tensor 't': unknown ggml type 99", b_t_type_unknown },
	{ "tensor_type_negative", "unknown ggml type -3", b_t_type_neg },
	{ "tensor_type_q2_k", "tensor 'blk.0.attn_q.weight': ggml type Q2_K (10) is not supported", b_t_type_q2k },
	{ "tensor_type_i32", "ggml type I32 (26) is not supported", b_t_type_i32 },
	{ "tensor_type_removed_4", "unknown ggml type 4", b_t_type_removed },
	{ "tensor_block_q4_k", "ne[0] = 100 is not a multiple of the Q4_K block size 256", b_t_block },
	{ "tensor_block_q8_0", "ne[0] = 33 is not a multiple of the Q8_0 block size 32", b_t_block_q8 },
	{ "tensor_offset_unaligned", "tensor 't': offset 16 is not a multiple of the alignment 32", b_t_unaligned },
	{ "tensor_data_past_end", "tensor 't': data [0, +512) runs past the end of the data section (511 bytes)", b_t_past_end },
	{ "tensor_offset_past_end", "data [1099511627776, +512) runs past the end", b_t_offset_past_end },
	{ "tensor_offset_wraps", "runs past the end", b_t_offset_wrap },
	{ "tensor_name_empty", "empty tensor", b_t_name_empty },
	{ "tensor_name_bad_utf8", "tensor 'blk.?.x': name is not valid UTF-8", b_t_name_bad },
	{ "tensor_info_truncated", "tensor 't': truncated: dimension needs 8 bytes", b_t_info_cut },
	{ "tensor_missing", "empty tensor at offset 65", b_t_missing },
	{ "tensor_data_section_missing", "data section (offset 64 after alignment to 32) starts past the end", b_t_data_start },
	{ "tensors_overlap", "tensor 'c': data [480, 992) overlaps tensor 'a'", b_t_overlap },
	{ "tensors_same_offset", "overlaps tensor", b_t_same_offset },
	{ "tensor_duplicate", "tensor 'output.weight': duplicate tensor name", b_t_dup },
	{ "alignment_4096_past_end", "starts past the end of the file", b_t_align_data },
};
#define NBAD (int)(sizeof bad_cases / sizeof bad_cases[0])

static int one_line(const char* s) { return s[0] && !strchr(s, '\n'); }

TEST_CASE(bad)
{
	char err[512];
	for (int i = 0; i < NBAD; i++) {
		struct gb b = { 0 };
		struct pv_gguf g;
		bad_cases[i].build(&b);
		err[0] = 0;
		int rc = pv_gguf_parse(&g, "bad.gguf", b.p ? b.p : (unsigned char*)"", b.n, err, sizeof err);
		CHECK(rc == -1, "%s: accepted", bad_cases[i].name);
		if (rc == 0) pv_gguf_close(&g);
		CHECK(!strncmp(err, "bad.gguf: ", 10) && one_line(err) && strstr(err, bad_cases[i].expect),
		      "%s: message '%s' (want '%s')", bad_cases[i].name, err, bad_cases[i].expect);
		CHECK(g.kv == NULL && g.tensors == NULL && g.n_kv == 0, "%s: not left closed", bad_cases[i].name);
		free(b.p);
	}
}

static void write_corpus(const char* root)
{
	char dir[512], path[768];
	snprintf(dir, sizeof dir, "%s/gguf", root);
	mkdir(root, 0755);
	mkdir(dir, 0755);
	snprintf(dir, sizeof dir, "%s/gguf/bad", root);
	mkdir(dir, 0755);
	for (int i = 0; i < NBAD; i++) {
		struct gb b = { 0 };
		bad_cases[i].build(&b);
		snprintf(path, sizeof path, "%s/%s.gguf", dir, bad_cases[i].name);
		write_file(path, b.p, b.n);
		free(b.p);
	}
	/* a valid seed for the fuzzer */
	struct gb b = { 0 };
	build_valid(&b, 3, 64);
	snprintf(path, sizeof path, "%s/gguf/valid/proven_all_types.gguf", root);
	snprintf(dir, sizeof dir, "%s/gguf/valid", root);
	mkdir(dir, 0755);
	write_file(path, b.p, b.n);
	free(b.p);
}

/* Every file under root/gguf/bad fails through mmap with a one-line message naming it; every
 * file under root/gguf/valid opens. */
TEST_CASE(corpus)
{
	char dir[512], path[1024], err[512];
	int n_bad = 0, n_valid = 0;
	for (int pass = 0; pass < 2; pass++) {
		snprintf(dir, sizeof dir, "%s/gguf/%s", corpus_root(), pass ? "valid" : "bad");
		DIR* d = opendir(dir);
		CHECK(d != NULL, "corpus directory %s missing", dir);
		if (!d) continue;
		for (struct dirent* e; (e = readdir(d));) {
			if (e->d_name[0] == '.') continue;
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			struct pv_gguf g;
			err[0] = 0;
			int rc = pv_gguf_open(&g, path, err, sizeof err);
			if (pass) {
				CHECK(rc == 0, "valid corpus file %s: %s", path, err);
				n_valid++;
			} else {
				CHECK(rc == -1, "corpus file %s was accepted", path);
				CHECK(!strncmp(err, path, strlen(path)) && one_line(err), "corpus %s: message '%s'", path, err);
				n_bad++;
			}
			if (!rc) pv_gguf_close(&g);
		}
		closedir(d);
	}
	CHECK(n_bad >= NBAD && n_valid >= 3, "corpus: %d bad, %d valid files", n_bad, n_valid);
}

/* ---- truncations and mutations ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x853c49e6748fea9bull;
static uint32_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* A parse that succeeded must describe only bytes inside buf; read them all (ASan). */
static int sane(const struct pv_gguf* g, const unsigned char* buf, size_t n)
{
	volatile unsigned sink = 0;
	for (int64_t i = 0; i < g->n_tensors; i++) {
		const struct pv_gguf_tensor* t = &g->tensors[i];
		const unsigned char* p = t->data;
		if (p < buf || t->nbytes > n || (size_t)(p - buf) > n - t->nbytes) return 0;
		for (uint64_t k = 0; k < t->nbytes; k += 61) sink += p[k];
		if (t->nbytes) sink += p[t->nbytes - 1];
	}
	for (int64_t i = 0; i < g->n_kv; i++) {
		const struct pv_gguf_kv* kv = &g->kv[i];
		if (pv_gguf_find(g, kv->key) != kv) return 0;
		if (kv->type == PV_GGUF_ARRAY && kv->arr.n) {
			const char* s;
			uint64_t len;
			struct pv_gguf_array sub;
			if (!pv_gguf_arr_str(&kv->arr, kv->arr.n - 1, &s, &len) && len) sink += (unsigned char)s[len - 1];
			if (!pv_gguf_arr_arr(&kv->arr, kv->arr.n - 1, &sub) && sub.nbytes) sink += sub.data[sub.nbytes - 1];
		}
	}
	(void)sink;
	return 1;
}

TEST_CASE(truncations_and_mutations)
{
	struct gb b = { 0 };
	char err[512];
	build_valid(&b, 3, 64);
	int trunc_ok = 1;
	for (size_t n = 0; n < b.n; n++) {
		/* exact-size heap copy so ASan sees any read past the end */
		unsigned char* cp = malloc(n ? n : 1);
		memcpy(cp, b.p, n);
		struct pv_gguf g;
		err[0] = 0;
		int rc = pv_gguf_parse(&g, "cut", cp, n, err, sizeof err);
		if (rc == 0) {
			trunc_ok = 0; /* the last tensor ends at the end of the file */
			pv_gguf_close(&g);
		} else if (strncmp(err, "cut: ", 5) || !one_line(err)) {
			trunc_ok = 0;
		}
		free(cp);
	}
	CHECK(trunc_ok, "every truncation of a valid file fails cleanly");

	int mut_ok = 1, accepted = 0;
	const int N = 20000;
	unsigned char* cp = malloc(b.n);
	for (int it = 0; it < N; it++) {
		memcpy(cp, b.p, b.n);
		int k = 1 + (int)(rnd() % 4);
		for (int j = 0; j < k; j++) {
			size_t pos = rnd() % (uint32_t)(b.n < 2048 ? b.n : 2048); /* mostly the header */
			if (rnd() & 1) pos = rnd() % (uint32_t)b.n;
			uint32_t r = rnd();
			cp[pos] = (r & 3) == 0 ? 0xff : (r & 3) == 1 ? 0 : (unsigned char)(r >> 8);
		}
		struct pv_gguf g;
		err[0] = 0;
		if (pv_gguf_parse(&g, "mut", cp, b.n, err, sizeof err) == 0) {
			accepted++;
			if (!sane(&g, cp, b.n)) mut_ok = 0;
			pv_gguf_close(&g);
		} else if (strncmp(err, "mut: ", 5) || !one_line(err)) {
			mut_ok = 0;
		}
	}
	free(cp);
	CHECK(mut_ok, "mutated files: clean failure or sane success");
	printf("mutations: %d of %d accepted (bytes in data or values)\n", accepted, N);
	free(b.p);
}

static int setup(void)
{
	snprintf(g_tmp, sizeof g_tmp, "%s/pv_gguf_XXXXXX", t_tmpdir());
	if (mkdtemp(g_tmp)) return 0;
	CHECK(0, "cannot create a temporary directory %s", g_tmp);
	return 1;
}

static void teardown(void)
{
	rmdir(g_tmp);
}

int main(int argc, char** argv)
{
	if (argc == 3 && !strcmp(argv[1], "--write-corpus")) {
		write_corpus(argv[2]);
		return 0;
	}
	return t_main(argc, argv, "test_gguf", setup, teardown);
}
