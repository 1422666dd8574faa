/*
 * safetensors.c: mmap + header validation for one .safetensors file. Everything in the file is
 * treated as hostile: sizes are checked before use, arithmetic is overflow-checked, and every
 * problem becomes a one-line message naming the file and the tensor.
 */
#include "format/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/util.h"
#include "format/json_util.h"

/* Real headers are a few MiB even for 100k-tensor checkpoints. */
#define MAX_HEADER_BYTES ((uint64_t)256 << 20)

struct dtype_info {
	const char* name;
	int bits;
	int pv; /* enum pv_dtype, -1: not usable by the engine */
};

static const struct dtype_info dtypes[] = {
	{ "F32", 32, PV_F32 },   { "F16", 16, PV_F16 },   { "BF16", 16, PV_BF16 },
	{ "F64", 64, -1 },       { "I64", 64, -1 },       { "U64", 64, -1 },
	{ "I32", 32, -1 },       { "U32", 32, -1 },       { "I16", 16, -1 },
	{ "U16", 16, -1 },       { "I8", 8, -1 },         { "U8", 8, -1 },
	{ "BOOL", 8, -1 },       { "F8_E4M3", 8, -1 },    { "F8_E5M2", 8, -1 },
	{ "F8_E8M0", 8, -1 },    { "F6_E2M3", 6, -1 },    { "F6_E3M2", 6, -1 },
	{ "F4", 4, -1 },         { "C64", 64, -1 },
};

static const struct dtype_info* find_dtype(const char* s)
{
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (!strcmp(dtypes[i].name, s)) return &dtypes[i];
	return NULL;
}

int pv_st_dtype_bits(const char* dtype)
{
	const struct dtype_info* d = find_dtype(dtype);
	return d ? d->bits : 0;
}

const char* pv_printable(char* dst, size_t dstlen, const char* s)
{
	size_t n = 0, len = strlen(s);
	int cut = len >= dstlen;

	if (cut && dstlen < 8) cut = 0; /* no room for the ellipsis: just truncate */
	for (; n + 1 < dstlen && n < len; n++) {
		unsigned char ch = (unsigned char)s[n];
		dst[n] = (ch < 0x20 || ch >= 0x7f) ? '?' : (char)ch;
	}
	dst[n] = 0;
	if (cut) memcpy(dst + dstlen - 4, "...", 4);
	return dst;
}

/* Parsing state shared by the helpers below. */
struct parse {
	const char* label;
	const unsigned char* data; /* start of the data section */
	uint64_t data_len;
	char* err;
	size_t errlen;
};

static int tensor_err(const struct parse* p, const char* name, const char* fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int tensor_err(const struct parse* p, const char* name, const char* fmt, ...)
{
	char msg[256], pname[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return pv_errf(p->err, p->errlen, "%s: tensor '%s': %s", p->label,
	               pv_printable(pname, sizeof pname, name), msg);
}

/* "shape": [d0, d1, ...] with non-negative integer dims; the element count must not overflow. */
static int parse_shape(const struct parse* p, struct pv_st_tensor* t, const char* name, const json_t* sh)
{
	uint64_t numel = 1;

	if (!json_is_array(sh)) return tensor_err(p, name, "\"shape\" must be an array, not %s", pv_json_kind(sh));
	if (json_array_size(sh) > PV_ST_MAX_DIMS)
		return tensor_err(p, name, "%zu dimensions (at most %d supported)", json_array_size(sh),
		                  PV_ST_MAX_DIMS);
	t->ndim = (int)json_array_size(sh);
	for (int i = 0; i < t->ndim; i++) {
		const json_t* d = json_array_get(sh, (size_t)i);
		if (!json_is_integer(d))
			return tensor_err(p, name, "shape[%d] must be an integer, not %s", i, pv_json_kind(d));
		json_int_t v = json_integer_value(d);
		if (v < 0) return tensor_err(p, name, "shape[%d] = %lld is negative", i, (long long)v);
		t->shape[i] = v;
		if (!pv_mul_ok(numel, (uint64_t)v, &numel) || numel > (uint64_t)INT64_MAX)
			return tensor_err(p, name, "element count overflows");
	}
	t->numel = (int64_t)numel;
	return 0;
}

/* "data_offsets": [begin, end] inside the data section, end - begin = numel * element size. */
static int parse_offsets(const struct parse* p, struct pv_st_tensor* t, const char* name,
                         const json_t* off, int bits)
{
	if (!json_is_array(off) || json_array_size(off) != 2)
		return tensor_err(p, name, "\"data_offsets\" must be an array of two integers");
	const json_t* jb = json_array_get(off, 0);
	const json_t* je = json_array_get(off, 1);
	if (!json_is_integer(jb) || !json_is_integer(je))
		return tensor_err(p, name, "\"data_offsets\" must be an array of two integers");
	json_int_t b = json_integer_value(jb), e = json_integer_value(je);
	if (b < 0 || e < b)
		return tensor_err(p, name, "bad data_offsets [%lld, %lld]", (long long)b, (long long)e);
	if ((uint64_t)e > p->data_len)
		return tensor_err(p, name, "data_offsets [%lld, %lld] run past the data section (%llu bytes)",
		                  (long long)b, (long long)e, (unsigned long long)p->data_len);
	t->offset = (uint64_t)b;
	t->nbytes = (uint64_t)(e - b);
	t->data = p->data + t->offset;

	if (bits > 0) { /* known dtype: the byte count must match the shape exactly */
		uint64_t total_bits;
		if (!pv_mul_ok((uint64_t)t->numel, (uint64_t)bits, &total_bits))
			return tensor_err(p, name, "byte size of %lld elements of %s overflows",
			                  (long long)t->numel, t->dtype_str);
		if (total_bits % 8)
			return tensor_err(p, name, "%lld elements of %s do not fill whole bytes",
			                  (long long)t->numel, t->dtype_str);
		if (total_bits / 8 != t->nbytes)
			return tensor_err(p, name, "holds %llu bytes but shape and %s need %llu",
			                  (unsigned long long)t->nbytes, t->dtype_str,
			                  (unsigned long long)(total_bits / 8));
	}
	return 0;
}

static int parse_tensor(const struct parse* p, struct pv_st_tensor* t, const char* name, json_t* v)
{
	const char* key;
	json_t* x;

	if (!json_is_object(v)) return tensor_err(p, name, "entry must be an object, not %s", pv_json_kind(v));
	json_object_foreach(v, key, x) {
		if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets")) {
			char pk[64];
			return tensor_err(p, name, "unknown field '%s'", pv_printable(pk, sizeof pk, key));
		}
	}
	const json_t* dt = json_object_get(v, "dtype");
	const json_t* sh = json_object_get(v, "shape");
	const json_t* off = json_object_get(v, "data_offsets");
	if (!dt || !sh || !off)
		return tensor_err(p, name, "missing \"%s\"", !dt ? "dtype" : !sh ? "shape" : "data_offsets");
	if (!json_is_string(dt)) return tensor_err(p, name, "\"dtype\" must be a string, not %s", pv_json_kind(dt));

	const struct dtype_info* d = find_dtype(json_string_value(dt));
	pv_printable(t->dtype_str, sizeof t->dtype_str, json_string_value(dt));
	t->dtype = d ? d->pv : -1;
	t->name = pv_xstrdup(name);
	if (parse_shape(p, t, name, sh)) return -1;
	return parse_offsets(p, t, name, off, d ? d->bits : 0);
}

/* "__metadata__" is a string -> string map (format, producer, ...); its content is not used. */
static int check_metadata(const struct parse* p, const json_t* md)
{
	const char* key;
	const json_t* x;

	if (!json_is_object(md))
		return pv_errf(p->err, p->errlen, "%s: \"__metadata__\" must be an object, not %s", p->label,
		               pv_json_kind(md));
	json_object_foreach((json_t*)md, key, x) {
		if (!json_is_string(x)) {
			char pk[64];
			return pv_errf(p->err, p->errlen, "%s: \"__metadata__\" value '%s' must be a string, not %s",
			               p->label, pv_printable(pk, sizeof pk, key), pv_json_kind(x));
		}
	}
	return 0;
}

static int cmp_offset(const void* a, const void* b)
{
	const struct pv_st_tensor* x = *(const struct pv_st_tensor* const*)a;
	const struct pv_st_tensor* y = *(const struct pv_st_tensor* const*)b;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two non-empty byte ranges may share a byte. */
static int check_overlaps(const struct parse* p, struct pv_st_tensor* ts, int n)
{
	struct pv_st_tensor** order = pv_xcalloc((size_t)n, sizeof *order);
	const struct pv_st_tensor* prev = NULL;
	int rc = 0;

	for (int i = 0; i < n; i++) order[i] = &ts[i];
	qsort(order, (size_t)n, sizeof *order, cmp_offset);
	for (int i = 0; i < n && !rc; i++) {
		const struct pv_st_tensor* t = order[i];
		if (!t->nbytes) continue;
		if (prev && t->offset < prev->offset + prev->nbytes) {
			char other[160];
			rc = tensor_err(p, t->name, "bytes [%llu, %llu) overlap tensor '%s'",
			                (unsigned long long)t->offset,
			                (unsigned long long)(t->offset + t->nbytes),
			                pv_printable(other, sizeof other, prev->name));
		}
		if (!prev || t->offset + t->nbytes > prev->offset + prev->nbytes) prev = t;
	}
	free(order);
	return rc;
}

static int parse_header(struct pv_st_file* f, const struct parse* p, json_t* root)
{
	const char* key;
	json_t* v;
	int i = 0;

	if (!json_is_object(root))
		return pv_errf(p->err, p->errlen, "%s: header must be a JSON object, not %s", p->label,
		               pv_json_kind(root));
	size_t n = json_object_size(root) - (json_object_get(root, "__metadata__") ? 1 : 0);
	if (n > INT32_MAX) return pv_errf(p->err, p->errlen, "%s: too many tensors", p->label);
	f->tensors = pv_xcalloc(n, sizeof *f->tensors);
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "__metadata__")) {
			if (check_metadata(p, v)) return -1;
			continue;
		}
		f->n_tensors = i + 1; /* so that pv_st_close frees the name on failure */
		if (parse_tensor(p, &f->tensors[i], key, v)) return -1;
		i++;
	}
	return check_overlaps(p, f->tensors, f->n_tensors);
}

int pv_st_parse(struct pv_st_file* f, const char* label, const void* buf, size_t len, char* err,
                size_t errlen)
{
	const unsigned char* b = buf;
	uint64_t hlen = 0;
	json_error_t jerr;

	memset(f, 0, sizeof *f);
	if (len < 8)
		return pv_errf(err, errlen, "%s: %zu bytes is too short for a safetensors file", label, len);
	for (int i = 7; i >= 0; i--) hlen = hlen << 8 | b[i]; /* little-endian u64 */
	if (hlen > len - 8)
		return pv_errf(err, errlen, "%s: header length %llu runs past the end of the file (%zu bytes)",
		               label, (unsigned long long)hlen, len);
	if (hlen > MAX_HEADER_BYTES)
		return pv_errf(err, errlen, "%s: header length %llu exceeds the %llu-byte limit", label,
		               (unsigned long long)hlen, (unsigned long long)MAX_HEADER_BYTES);

	json_t* root = json_loadb((const char*)b + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		char text[sizeof jerr.text];
		return pv_errf(err, errlen, "%s: header is not valid JSON (line %d, column %d): %s", label,
		               jerr.line, jerr.column, pv_printable(text, sizeof text, jerr.text));
	}
	struct parse p = { label, b + 8 + hlen, len - 8 - hlen, err, errlen };
	f->path = pv_xstrdup(label);
	int rc = parse_header(f, &p, root);
	json_decref(root);
	if (rc) pv_st_close(f);
	return rc;
}

int pv_st_open(struct pv_st_file* f, const char* path, char* err, size_t errlen)
{
	uint64_t size;

	memset(f, 0, sizeof *f);
	int fd = pv_file_open(path, &size, err, errlen); /* a FIFO or a device fails here, never blocks */
	if (fd < 0) return -1;
	if (size < 8) {
		close(fd);
		return pv_errf(err, errlen, "%s: %llu bytes is too short for a safetensors file", path,
		               (unsigned long long)size);
	}
	size_t len = (size_t)size;
	void* map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED) return pv_errf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));

	if (pv_st_parse(f, path, map, len, err, errlen)) {
		munmap(map, len);
		return -1;
	}
	f->map = map;
	f->map_len = len;
	return 0;
}

void pv_st_close(struct pv_st_file* f)
{
	for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
	free(f->tensors);
	free(f->path);
	if (f->map) munmap(f->map, f->map_len);
	memset(f, 0, sizeof *f);
}
