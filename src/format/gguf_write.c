/*
 * gguf_write.c: the streaming GGUF v3 writer (gguf_write.h).
 */
#include "format/gguf_write.h"
#include "format/gguf.h"
#include "quant/quant.h"
#include "base/hash.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define GGML_MAX_NAME 64 /* ggml's tensor name buffer, terminator included */

struct tinfo {
	char* name;
	int n_dims;
	int64_t ne[PV_GGUF_MAX_DIMS];
	int type;
	uint64_t offset, nbytes;
};

struct pv_gguf_writer {
	FILE* f;
	char* path;
	char* tmp;
	uint32_t align;
	/* key-value section, serialised as it is added */
	unsigned char* kv;
	size_t kv_len, kv_cap;
	uint64_t n_kv;
	char** keys;
	size_t n_keys, cap_keys;
	/* tensor infos, and their names in an open-addressing set (index + 1; 0 empty, at most half
	 * full): the duplicate check stays linear in the tensor count (a synth of 4096 layers has
	 * 75k tensors, and a scan per tensor took 15 s) */
	struct tinfo* t;
	size_t n_t, cap_t;
	uint32_t* names;
	size_t names_cap;
	uint64_t data_size;
	/* data phase */
	int state;            /* 0 metadata, 1 data */
	size_t cur;           /* tensor being written */
	uint64_t cur_written; /* bytes of it so far */
	uint64_t file_pos;
	int failed;
	int was_absent; /* nothing was at path when the writer opened: nothing may be replaced */
	char err[512];
};

static int fail(struct pv_gguf_writer* w, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct pv_gguf_writer* w, const char* fmt, ...)
{
	if (!w->failed) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->err, sizeof w->err, fmt, ap);
		va_end(ap);
		w->failed = 1;
	}
	return -1;
}

const char* pv_gguf_writer_error(const struct pv_gguf_writer* w)
{
	return w && w->failed ? w->err : NULL;
}

static int host_is_little_endian(void)
{
	const uint16_t one = 1;
	unsigned char b;
	memcpy(&b, &one, 1);
	return b == 1;
}

/* ---------------------------------------------------------------- metadata buffer --- */

static int kv_put(struct pv_gguf_writer* w, const void* p, size_t n)
{
	if (w->kv_len + n < w->kv_len) return fail(w, "%s: metadata too large", w->path);
	if (w->kv_len + n > w->kv_cap) {
		size_t cap = w->kv_cap ? w->kv_cap : 4096;
		while (cap < w->kv_len + n) {
			if (cap > SIZE_MAX / 2) return fail(w, "%s: metadata too large", w->path);
			cap *= 2;
		}
		unsigned char* q = realloc(w->kv, cap);
		if (!q) return fail(w, "%s: out of memory for metadata", w->path);
		w->kv = q;
		w->kv_cap = cap;
	}
	memcpy(w->kv + w->kv_len, p, n);
	w->kv_len += n;
	return 0;
}

static int kv_u32(struct pv_gguf_writer* w, uint32_t v) { return kv_put(w, &v, 4); }
static int kv_u64(struct pv_gguf_writer* w, uint64_t v) { return kv_put(w, &v, 8); }

static int kv_string(struct pv_gguf_writer* w, const char* s, uint64_t len)
{
	if (kv_u64(w, len)) return -1;
	return len ? kv_put(w, s, (size_t)len) : 0;
}

static int valid_name(const char* s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > max) return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
	return 1;
}

/* Starts a key: checks state, name and uniqueness, writes the key string and the type. */
static int kv_begin(struct pv_gguf_writer* w, const char* key, int type)
{
	if (w->failed) return -1;
	if (w->state != 0) return fail(w, "%s: key %s added after the data section began", w->path, key ? key : "(null)");
	if (!valid_name(key, PV_GGUF_MAX_NAME)) return fail(w, "%s: invalid key name", w->path);
	for (size_t i = 0; i < w->n_keys; i++)
		if (!strcmp(w->keys[i], key)) return fail(w, "%s: duplicate key %s", w->path, key);
	if (w->n_keys == w->cap_keys) {
		size_t cap = w->cap_keys ? 2 * w->cap_keys : 64;
		char** k = realloc(w->keys, cap * sizeof *k);
		if (!k) return fail(w, "%s: out of memory", w->path);
		w->keys = k;
		w->cap_keys = cap;
	}
	char* copy = strdup(key);
	if (!copy) return fail(w, "%s: out of memory", w->path);
	w->keys[w->n_keys++] = copy;
	w->n_kv++;
	if (kv_string(w, key, strlen(key)) || kv_u32(w, (uint32_t)type)) return -1;
	return 0;
}

static size_t scalar_size(int type)
{
	switch (type) {
	case PV_GGUF_UINT8: case PV_GGUF_INT8: case PV_GGUF_BOOL: return 1;
	case PV_GGUF_UINT16: case PV_GGUF_INT16: return 2;
	case PV_GGUF_UINT32: case PV_GGUF_INT32: case PV_GGUF_FLOAT32: return 4;
	case PV_GGUF_UINT64: case PV_GGUF_INT64: case PV_GGUF_FLOAT64: return 8;
	default: return 0;
	}
}

static int scalar(struct pv_gguf_writer* w, const char* key, int type, const void* v)
{
	if (kv_begin(w, key, type)) return -1;
	return kv_put(w, v, scalar_size(type));
}

int pv_gguf_w_u8(struct pv_gguf_writer* w, const char* key, uint8_t v) { return scalar(w, key, PV_GGUF_UINT8, &v); }
int pv_gguf_w_i8(struct pv_gguf_writer* w, const char* key, int8_t v) { return scalar(w, key, PV_GGUF_INT8, &v); }
int pv_gguf_w_u16(struct pv_gguf_writer* w, const char* key, uint16_t v) { return scalar(w, key, PV_GGUF_UINT16, &v); }
int pv_gguf_w_i16(struct pv_gguf_writer* w, const char* key, int16_t v) { return scalar(w, key, PV_GGUF_INT16, &v); }
int pv_gguf_w_u32(struct pv_gguf_writer* w, const char* key, uint32_t v) { return scalar(w, key, PV_GGUF_UINT32, &v); }
int pv_gguf_w_i32(struct pv_gguf_writer* w, const char* key, int32_t v) { return scalar(w, key, PV_GGUF_INT32, &v); }
int pv_gguf_w_u64(struct pv_gguf_writer* w, const char* key, uint64_t v) { return scalar(w, key, PV_GGUF_UINT64, &v); }
int pv_gguf_w_i64(struct pv_gguf_writer* w, const char* key, int64_t v) { return scalar(w, key, PV_GGUF_INT64, &v); }
int pv_gguf_w_f32(struct pv_gguf_writer* w, const char* key, float v) { return scalar(w, key, PV_GGUF_FLOAT32, &v); }
int pv_gguf_w_f64(struct pv_gguf_writer* w, const char* key, double v) { return scalar(w, key, PV_GGUF_FLOAT64, &v); }

int pv_gguf_w_bool(struct pv_gguf_writer* w, const char* key, int v)
{
	uint8_t b = v ? 1 : 0;
	return scalar(w, key, PV_GGUF_BOOL, &b);
}

int pv_gguf_w_strn(struct pv_gguf_writer* w, const char* key, const char* s, uint64_t len)
{
	if (kv_begin(w, key, PV_GGUF_STRING)) return -1;
	return kv_string(w, s, len);
}

int pv_gguf_w_str(struct pv_gguf_writer* w, const char* key, const char* s)
{
	return pv_gguf_w_strn(w, key, s ? s : "", s ? strlen(s) : 0);
}

int pv_gguf_w_arr(struct pv_gguf_writer* w, const char* key, int elem_type, const void* data, uint64_t n)
{
	size_t es = scalar_size(elem_type);
	if (!es) {
		if (!w->failed) fail(w, "%s: key %s: array element type %d is not a scalar type", w->path, key, elem_type);
		return -1;
	}
	if (n > SIZE_MAX / es) return fail(w, "%s: key %s: array too large", w->path, key);
	if (kv_begin(w, key, PV_GGUF_ARRAY) || kv_u32(w, (uint32_t)elem_type) || kv_u64(w, n)) return -1;
	if (elem_type == PV_GGUF_BOOL) {
		const unsigned char* b = data;
		for (uint64_t i = 0; i < n; i++)
			if (b[i] > 1) return fail(w, "%s: key %s: bool element %llu is %u", w->path, key, (unsigned long long)i, b[i]);
	}
	return n ? kv_put(w, data, (size_t)n * es) : 0;
}

int pv_gguf_w_arr_str(struct pv_gguf_writer* w, const char* key, const char* const* s, uint64_t n)
{
	if (kv_begin(w, key, PV_GGUF_ARRAY) || kv_u32(w, PV_GGUF_STRING) || kv_u64(w, n)) return -1;
	for (uint64_t i = 0; i < n; i++)
		if (kv_string(w, s[i] ? s[i] : "", s[i] ? strlen(s[i]) : 0)) return -1;
	return 0;
}

/* ---------------------------------------------------------------- tensor infos --- */

uint64_t pv_gguf_tensor_bytes(int n_dims, const int64_t* ne, int ggml_type)
{
	int dt = pv_gguf_dtype(ggml_type);
	if (dt < 0 || n_dims < 1 || n_dims > PV_GGUF_MAX_DIMS) return 0;
	for (int i = 0; i < n_dims; i++)
		if (ne[i] <= 0) return 0;
	uint64_t bytes = pv_dtype_row_bytes((enum pv_dtype)dt, ne[0]);
	if (!bytes) return 0;
	for (int i = 1; i < n_dims; i++)
		if (!pv_mul_ok(bytes, (uint64_t)ne[i], &bytes)) return 0;
	return bytes;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* The slot of name in the set: where it is, or the empty one where it would go. */
static uint32_t* name_slot(const struct pv_gguf_writer* w, const char* name)
{
	size_t mask = w->names_cap - 1;
	for (size_t i = (size_t)pv_fnv1a_str(name) & mask;; i = (i + 1) & mask)
		if (!w->names[i] || !strcmp(w->t[w->names[i] - 1].name, name)) return &w->names[i];
}

static int names_grow(struct pv_gguf_writer* w)
{
	if (2 * (w->n_t + 1) <= w->names_cap) return 0;
	size_t cap = w->names_cap ? 2 * w->names_cap : 512;
	uint32_t* old = w->names;
	size_t old_cap = w->names_cap;
	if (!(w->names = calloc(cap, sizeof *w->names))) {
		w->names = old;
		return -1;
	}
	w->names_cap = cap;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i]) *name_slot(w, w->t[old[i] - 1].name) = old[i];
	free(old);
	return 0;
}

int pv_gguf_w_tensor(struct pv_gguf_writer* w, const char* name, int n_dims, const int64_t* ne, int ggml_type)
{
	if (w->failed) return -1;
	if (w->state != 0) return fail(w, "%s: tensor %s added after the data section began", w->path, name ? name : "(null)");
	if (!valid_name(name, GGML_MAX_NAME - 1)) return fail(w, "%s: invalid tensor name \"%s\"", w->path, name ? name : "");
	if (w->n_t >= UINT32_MAX - 1 || names_grow(w)) return fail(w, "%s: out of memory", w->path);
	uint32_t* slot = name_slot(w, name);
	if (*slot) return fail(w, "%s: duplicate tensor %s", w->path, name);
	uint64_t nbytes = pv_gguf_tensor_bytes(n_dims, ne, ggml_type);
	if (!nbytes)
		return fail(w, "%s: tensor %s: bad shape or type (n_dims %d, ne[0] %lld, type %d)", w->path, name, n_dims,
		            n_dims > 0 ? (long long)ne[0] : 0LL, ggml_type);
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? 2 * w->cap_t : 256;
		struct tinfo* t = realloc(w->t, cap * sizeof *t);
		if (!t) return fail(w, "%s: out of memory", w->path);
		w->t = t;
		w->cap_t = cap;
	}
	struct tinfo* t = &w->t[w->n_t];
	memset(t, 0, sizeof *t);
	if (!(t->name = strdup(name))) return fail(w, "%s: out of memory", w->path);
	t->n_dims = n_dims;
	for (int i = 0; i < PV_GGUF_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
	t->type = ggml_type;
	t->offset = w->data_size;
	t->nbytes = nbytes;
	w->n_t++;
	*slot = (uint32_t)w->n_t;
	uint64_t end = pad_to(w->data_size + nbytes, w->align);
	if (end < w->data_size) return fail(w, "%s: data section too large", w->path);
	w->data_size = end;
	return 0;
}

/* ---------------------------------------------------------------- the file --- */

static int out(struct pv_gguf_writer* w, const void* p, size_t n)
{
	if (w->failed) return -1;
	if (n && fwrite(p, 1, n, w->f) != n)
		return fail(w, "%s: write failed: %s", w->tmp, strerror(errno ? errno : EIO));
	w->file_pos += n;
	return 0;
}

static int out_zeros(struct pv_gguf_writer* w, uint64_t n)
{
	static const unsigned char z[256];
	while (n) {
		size_t k = n < sizeof z ? (size_t)n : sizeof z;
		if (out(w, z, k)) return -1;
		n -= k;
	}
	return 0;
}

static const char* kind_name(mode_t m)
{
	return S_ISLNK(m) ? "a symbolic link" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : "a special file";
}

/* What may be at the output path: nothing, or a regular file (which is replaced). Anything else
 * is refused: a rename would put the file in place of a device node, a FIFO or a symbolic link
 * (not through it). *absent: nothing is there. */
static int check_target(const char* path, int* absent, char* err, size_t errlen)
{
	struct stat st;
	*absent = 0;
	if (lstat(path, &st)) {
		if (errno == ENOENT) {
			*absent = 1;
			return 0;
		}
		return pv_errf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
	}
	if (S_ISREG(st.st_mode)) return 0;
	if (S_ISDIR(st.st_mode)) return pv_errf(err, errlen, "%s: is a directory", path);
	return pv_errf(err, errlen, "%s: is %s, not a regular file: it is not replaced (name a new file or a regular one)", path,
	               kind_name(st.st_mode));
}

/* Creates the temporary file beside path: PATH.tmp.XXXXXX, a new name (O_EXCL) that is never a
 * link followed (O_NOFOLLOW), so a file or link planted at a guessable name is never written
 * through. Returns the descriptor, or -1 with errno. */
static int create_tmp(const char* path, char* tmp, size_t len)
{
	static unsigned counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 20;
	for (int tries = 0; tries < 64; tries++) {
		x += 0x9e3779b97f4a7c15ull + __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
		uint64_t h = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
		snprintf(tmp, len, "%s.tmp.%06llx", path, (unsigned long long)((h ^ (h >> 29)) & 0xffffff));
		int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
		if (fd >= 0 || errno != EEXIST) return fd;
	}
	errno = EEXIST;
	return -1;
}

int pv_gguf_writer_open(struct pv_gguf_writer** res, const char* path, uint32_t alignment, char* err, size_t errlen)
{
	*res = NULL;
	if (!path || !*path) return pv_errf(err, errlen, "no output path given");
	if (!host_is_little_endian()) return pv_errf(err, errlen, "%s: writing GGUF needs a little-endian host", path);
	if (alignment == 0) alignment = 32;
	if (alignment & (alignment - 1)) return pv_errf(err, errlen, "%s: alignment %u is not a power of two", path, alignment);
	int absent;
	if (check_target(path, &absent, err, errlen)) return -1;
	struct pv_gguf_writer* w = calloc(1, sizeof *w);
	if (!w) return pv_errf(err, errlen, "out of memory");
	size_t n = strlen(path);
	w->path = strdup(path);
	w->tmp = malloc(n + 16);
	if (!w->path || !w->tmp) {
		free(w->path);
		free(w->tmp);
		free(w);
		return pv_errf(err, errlen, "out of memory");
	}
	w->align = alignment;
	w->was_absent = absent;
	int fd = create_tmp(path, w->tmp, n + 16);
	if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
		int e = errno;
		pv_errf(err, errlen, "%s: cannot create: %s", w->tmp, strerror(e));
		if (fd >= 0) {
			close(fd);
			unlink(w->tmp);
		}
		free(w->path);
		free(w->tmp);
		free(w);
		return -1;
	}
	setvbuf(w->f, NULL, _IOFBF, 1 << 20);
	if (pv_gguf_w_u32(w, "general.alignment", alignment)) {
		pv_errf(err, errlen, "%s", w->err);
		pv_gguf_writer_abort(w);
		return -1;
	}
	*res = w;
	return 0;
}

/* The file's size is known once the infos are: a file that cannot fit is refused before it
 * fills the disk (synth writes what --layers asks, up to terabytes). */
static int check_space(struct pv_gguf_writer* w)
{
	struct statvfs fs;
	uint64_t need = w->data_size + w->kv_len + 64 * (uint64_t)w->n_t + 4096, avail;
	if (fstatvfs(fileno(w->f), &fs)) return 0; /* unknown: the writes will tell */
	if (!pv_mul_ok((uint64_t)fs.f_bavail, (uint64_t)fs.f_frsize, &avail) || need <= avail) return 0;
	return fail(w, "%s: the file needs %.2f GiB, but its file system has %.2f GiB free", w->path, need / 1073741824.0,
	            avail / 1073741824.0);
}

int pv_gguf_w_begin_data(struct pv_gguf_writer* w)
{
	if (w->failed) return -1;
	if (w->state != 0) return fail(w, "%s: data section already begun", w->path);
	if (check_space(w)) return -1;
	const uint32_t version = 3;
	const uint64_t n_t = w->n_t;
	if (out(w, "GGUF", 4) || out(w, &version, 4) || out(w, &n_t, 8) || out(w, &w->n_kv, 8) || out(w, w->kv, w->kv_len))
		return -1;
	for (size_t i = 0; i < w->n_t; i++) {
		const struct tinfo* t = &w->t[i];
		uint64_t len = strlen(t->name);
		uint32_t nd = (uint32_t)t->n_dims;
		int32_t ty = t->type;
		if (out(w, &len, 8) || out(w, t->name, (size_t)len) || out(w, &nd, 4) || out(w, t->ne, 8 * (size_t)t->n_dims) ||
		    out(w, &ty, 4) || out(w, &t->offset, 8))
			return -1;
	}
	if (out_zeros(w, pad_to(w->file_pos, w->align) - w->file_pos)) return -1;
	free(w->kv); /* the metadata is on its way to the file */
	w->kv = NULL;
	w->kv_len = w->kv_cap = 0;
	w->state = 1;
	w->cur = 0;
	w->cur_written = 0;
	return 0;
}

int pv_gguf_w_data(struct pv_gguf_writer* w, const void* data, size_t n)
{
	if (w->failed) return -1;
	if (w->state != 1) return fail(w, "%s: tensor data written before the data section began", w->path);
	const unsigned char* p = data;
	while (n) {
		if (w->cur >= w->n_t) return fail(w, "%s: more tensor data than the tensor infos describe", w->path);
		struct tinfo* t = &w->t[w->cur];
		uint64_t room = t->nbytes - w->cur_written;
		size_t k = n < room ? n : (size_t)room;
		if (out(w, p, k)) return -1;
		p += k;
		n -= k;
		w->cur_written += k;
		if (w->cur_written == t->nbytes) {
			if (out_zeros(w, pad_to(t->nbytes, w->align) - t->nbytes)) return -1;
			w->cur++;
			w->cur_written = 0;
		}
	}
	return 0;
}

static void free_writer(struct pv_gguf_writer* w)
{
	for (size_t i = 0; i < w->n_keys; i++) free(w->keys[i]);
	for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
	free(w->keys);
	free(w->t);
	free(w->names);
	free(w->kv);
	free(w->path);
	free(w->tmp);
	free(w);
}

void pv_gguf_writer_abort(struct pv_gguf_writer* w)
{
	if (!w) return;
	if (w->f) fclose(w->f);
	unlink(w->tmp);
	free_writer(w);
}

/* Renames the finished temporary file to the path: never over anything but a regular file (the
 * path is checked again, it may have changed while the file was written), and never over what
 * appeared at a path that was empty at open (RENAME_NOREPLACE where the file system has it). */
static void install(struct pv_gguf_writer* w)
{
	char msg[512];
	int absent;
	if (check_target(w->path, &absent, msg, sizeof msg)) {
		fail(w, "%s", msg);
		return;
	}
	if (w->was_absent && !absent) {
		fail(w, "%s: appeared while it was written; not replaced", w->path);
		return;
	}
	int rc = -1;
#ifdef RENAME_NOREPLACE
	if (absent) {
		rc = renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE);
		if (rc && errno == EEXIST) {
			fail(w, "%s: appeared while it was written; not replaced", w->path);
			return;
		}
		if (rc && errno != EINVAL && errno != ENOSYS) {
			fail(w, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
			return;
		}
	}
#endif
	if (rc && rename(w->tmp, w->path)) {
		fail(w, "%s: cannot rename to %s: %s", w->tmp, w->path, strerror(errno));
		return;
	}
	/* the new directory entry too, so a crash after we return keeps the file */
	char* dir = strdup(w->path);
	if (dir) {
		char* slash = strrchr(dir, '/');
		const char* d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
		int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
		free(dir);
	}
}

int pv_gguf_writer_close(struct pv_gguf_writer* w, char* err, size_t errlen)
{
	if (!w->failed && w->state != 1) pv_gguf_w_begin_data(w); /* a file without tensor data */
	if (!w->failed && (w->cur != w->n_t || w->cur_written))
		fail(w, "%s: tensor %s got %llu of its %llu bytes", w->path, w->cur < w->n_t ? w->t[w->cur].name : "?",
		     (unsigned long long)w->cur_written, w->cur < w->n_t ? (unsigned long long)w->t[w->cur].nbytes : 0ULL);
	if (!w->failed && fflush(w->f)) fail(w, "%s: write failed: %s", w->tmp, strerror(errno));
	if (!w->failed && fsync(fileno(w->f))) fail(w, "%s: fsync failed: %s", w->tmp, strerror(errno));
	int rc = fclose(w->f);
	w->f = NULL;
	if (!w->failed && rc) fail(w, "%s: close failed: %s", w->tmp, strerror(errno));
	if (!w->failed) install(w);
	if (w->failed) {
		pv_errf(err, errlen, "%s", w->err);
		unlink(w->tmp);
		free_writer(w);
		return -1;
	}
	free_writer(w);
	return 0;
}
