/*
 * gguf.h: one GGUF file (versions 3 and 2), memory-mapped read-only and validated as hostile
 * input. Weights are never copied: tensor data pointers, string values and arrays point into the
 * mapping.
 *
 * Layout (little-endian; ggml docs/gguf.md):
 *   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x      { string key | i32 value type | value }
 *   n_tensors x { string name | u32 n_dims | i64 ne[n_dims] | i32 ggml type | u64 offset }
 *   padding to general.alignment (u32; default 32), then the data section; each tensor's data
 *   starts at data section + offset.
 * A string is a u64 byte count and the bytes (no terminator); a bool is one byte; an array is
 * i32 element type | u64 count | the elements (strings and arrays, nested ones included, are
 * themselves length-prefixed).
 *
 * After a successful open:
 *   - every key and tensor name is 1..PV_GGUF_MAX_NAME bytes of valid UTF-8 without control
 *     characters, and unique (invalid UTF-8 is rejected);
 *   - every value lies inside the file; bools are 0 or 1; arrays nest at most
 *     PV_GGUF_MAX_DEPTH deep; general.alignment, if present, is a u32 power of two;
 *   - every tensor has 0..4 dims, a supported type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 *     Q5_1, Q4_K, Q5_K, Q6_K), ne[0] a whole number of blocks, an element count and byte size
 *     that do not overflow, an offset that is a multiple of the alignment, and a byte range
 *     inside the file that overlaps no other tensor.
 * Anything else fails with a one-line message naming the file and, where one is at fault, the
 * key or tensor. Nothing is read outside the input, and the work done and memory allocated are
 * bounded by the input's size (lying counts are checked against the bytes that remain).
 */
#ifndef PV_GGUF_H
#define PV_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "quant/tensor.h"

#define PV_GGUF_MAX_DIMS 4
#define PV_GGUF_MAX_NAME 1024  /* bytes of a key or tensor name (ggml itself allows 63 for tensors) */
#define PV_GGUF_MAX_DEPTH 8    /* nesting of arrays in arrays                                        */

enum pv_gguf_type {
	PV_GGUF_UINT8 = 0,
	PV_GGUF_INT8 = 1,
	PV_GGUF_UINT16 = 2,
	PV_GGUF_INT16 = 3,
	PV_GGUF_UINT32 = 4,
	PV_GGUF_INT32 = 5,
	PV_GGUF_FLOAT32 = 6,
	PV_GGUF_BOOL = 7,
	PV_GGUF_STRING = 8,
	PV_GGUF_ARRAY = 9,
	PV_GGUF_UINT64 = 10,
	PV_GGUF_INT64 = 11,
	PV_GGUF_FLOAT64 = 12,
	PV_GGUF_TYPE_COUNT
};

/* An array value (elements in the file). offs is set for the STRING and ARRAY elements of a
 * top-level array (element i starts at data + offs[i]); elements of nested arrays are found by a
 * scan (O(i)). */
struct pv_gguf_array {
	enum pv_gguf_type type; /* element type                      */
	int depth;              /* 1 for a key's array, 2 inside it... */
	uint64_t n;
	const unsigned char* data;
	uint64_t nbytes;
	const uint64_t* offs;
};

struct pv_gguf_kv {
	char* key;                /* NUL-terminated copy                                   */
	enum pv_gguf_type type;
	const unsigned char* val; /* the value's bytes in the file (scalars: little-endian) */
	const char* str;          /* STRING: the bytes (not NUL-terminated) ...           */
	uint64_t str_len;         /* ... and their count                                   */
	struct pv_gguf_array arr; /* ARRAY                                                 */
};

struct pv_gguf_tensor {
	char* name;
	int ggml_type;            /* as stored                                             */
	enum pv_dtype type;
	int n_dims;
	int64_t ne[PV_GGUF_MAX_DIMS]; /* ne[0] is the contiguous dimension; unused dims are 1  */
	int64_t n_elements;
	uint64_t offset;          /* from the start of the data section                    */
	uint64_t nbytes;
	const void* data;         /* inside the mapping                                    */
};

struct pv_gguf {
	char* path;               /* for messages                                          */
	void* map;                /* NULL when parsed from a caller's buffer               */
	size_t map_len;
	uint32_t version;
	uint32_t alignment;
	uint64_t data_offset;     /* file offset of the data section (aligned)             */
	int64_t n_kv;
	struct pv_gguf_kv* kv;    /* in file order                                         */
	int64_t n_tensors;
	struct pv_gguf_tensor* tensors; /* in file order                                   */
	int64_t* kv_sorted;       /* indices sorted by key / name, for lookups             */
	int64_t* t_sorted;
};

/* Maps path read-only and parses it. On failure g is left closed and err names the file (and
 * the key or tensor at fault). */
int pv_gguf_open(struct pv_gguf* g, const char* path, char* err, size_t errlen);
/* Parses a whole file image in memory (the fuzzing entry point); buf must outlive g. label
 * names it in messages. */
int pv_gguf_parse(struct pv_gguf* g, const char* label, const void* buf, size_t len, char* err,
                  size_t errlen);
/* Releases everything. Safe on a zeroed or failed struct. */
void pv_gguf_close(struct pv_gguf* g);

/* Lookups (NULL when absent). */
const struct pv_gguf_kv* pv_gguf_find(const struct pv_gguf* g, const char* key);
const struct pv_gguf_tensor* pv_gguf_find_tensor(const struct pv_gguf* g, const char* name);

/*
 * Typed getters: 0 on success; -1 with a message (naming the file and key) when the key is
 * missing or its value does not fit. Integer getters accept any integer type whose value is in
 * range; float getters accept FLOAT32 and FLOAT64 (a finite FLOAT64 must fit in a float);
 * bool wants BOOL; string wants STRING (s points into the file, len bytes, no terminator).
 */
int pv_gguf_get_u32(const struct pv_gguf* g, const char* key, uint32_t* out, char* err, size_t errlen);
int pv_gguf_get_i32(const struct pv_gguf* g, const char* key, int32_t* out, char* err, size_t errlen);
int pv_gguf_get_u64(const struct pv_gguf* g, const char* key, uint64_t* out, char* err, size_t errlen);
int pv_gguf_get_i64(const struct pv_gguf* g, const char* key, int64_t* out, char* err, size_t errlen);
int pv_gguf_get_f32(const struct pv_gguf* g, const char* key, float* out, char* err, size_t errlen);
int pv_gguf_get_f64(const struct pv_gguf* g, const char* key, double* out, char* err, size_t errlen);
int pv_gguf_get_bool(const struct pv_gguf* g, const char* key, int* out, char* err, size_t errlen);
int pv_gguf_get_str(const struct pv_gguf* g, const char* key, const char** s, uint64_t* len,
                    char* err, size_t errlen);
/* elem: the required element type, or -1 for any. */
int pv_gguf_get_arr(const struct pv_gguf* g, const char* key, int elem, struct pv_gguf_array* out,
                    char* err, size_t errlen);

/* Array elements: 0, or -1 when i >= n or the element type does not fit the accessor (the same
 * conversions as the getters; bools read as 0/1 by the integer accessors). */
int pv_gguf_arr_i64(const struct pv_gguf_array* a, uint64_t i, int64_t* out);
int pv_gguf_arr_u64(const struct pv_gguf_array* a, uint64_t i, uint64_t* out);
int pv_gguf_arr_f64(const struct pv_gguf_array* a, uint64_t i, double* out);
int pv_gguf_arr_str(const struct pv_gguf_array* a, uint64_t i, const char** s, uint64_t* len);
int pv_gguf_arr_arr(const struct pv_gguf_array* a, uint64_t i, struct pv_gguf_array* out);

/* A tensor as a 2-D view: cols = ne[0], rows = ne[1] * ne[2] * ne[3]. */
void pv_gguf_tensor_view(const struct pv_gguf_tensor* t, struct pv_tensor* out);

/* ggml type ids: the name ("Q4_K"; NULL for ids ggml does not define), the engine type (-1 if
 * not supported), and the id of an engine type. */
const char* pv_gguf_ggml_type_name(int ggml_type);
int pv_gguf_dtype(int ggml_type);
int pv_gguf_ggml_type(enum pv_dtype t);
/* "u8", "i8", ..., "str", "arr", "f64"; "?" if out of range. */
const char* pv_gguf_type_name(int type);

#endif
