/*
 * gguf_write.h: a streaming GGUF v3 writer (the layout gguf.h describes).
 *
 * Use:
 *   pv_gguf_writer_open(&w, path, ...)            creates PATH.tmp.XXXXXX
 *   pv_gguf_w_u32 / _str / _arr_str / ...         key-value pairs, in the order they are added
 *   pv_gguf_w_tensor(w, name, n_dims, ne, type)  tensor infos, in file order (offsets assigned)
 *   pv_gguf_w_begin_data(w)                       writes the header, the KVs, the infos, padding
 *   pv_gguf_w_data(w, bytes, n) ...               each tensor's bytes, in info order, in pieces
 *                                                 of any size (padding between tensors is added)
 *   pv_gguf_writer_close(w, &err)                 flush, fsync, close, rename to PATH
 * pv_gguf_writer_abort removes the temporary file (any time; also frees w). Only the metadata is held in
 * memory; tensor data goes straight to the file, so a model never sits in memory at once.
 *
 * Every write is checked. The first failure is kept (a one-line message naming the file) and
 * every later call returns -1 without doing anything; pv_gguf_writer_error() returns it.
 * Data written must add up exactly to each tensor's size (pv_gguf_tensor_bytes).
 * The first key of every file is `general.alignment` (u32), written by pv_gguf_writer_open.
 * Keys and tensor names must be unique, 1..PV_GGUF_MAX_NAME bytes (gguf.h); ggml itself limits
 * tensor names to 63 bytes, which the writer enforces too.
 */
#ifndef PV_GGUF_WRITE_H
#define PV_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

struct pv_gguf_writer;

/* Creates a new temporary file beside path (path + ".tmp.XXXXXX", with O_EXCL | O_NOFOLLOW: a
 * planted file or link is never written through) for writing. path must name nothing or a
 * regular file (replaced at close); a directory, a device, a FIFO or a symbolic link is refused.
 * alignment: a power of two (0: 32), recorded as the key `general.alignment`. */
int pv_gguf_writer_open(struct pv_gguf_writer** out, const char* path, uint32_t alignment, char* err, size_t errlen);

/* Scalar keys. */
int pv_gguf_w_u8(struct pv_gguf_writer* w, const char* key, uint8_t v);
int pv_gguf_w_i8(struct pv_gguf_writer* w, const char* key, int8_t v);
int pv_gguf_w_u16(struct pv_gguf_writer* w, const char* key, uint16_t v);
int pv_gguf_w_i16(struct pv_gguf_writer* w, const char* key, int16_t v);
int pv_gguf_w_u32(struct pv_gguf_writer* w, const char* key, uint32_t v);
int pv_gguf_w_i32(struct pv_gguf_writer* w, const char* key, int32_t v);
int pv_gguf_w_u64(struct pv_gguf_writer* w, const char* key, uint64_t v);
int pv_gguf_w_i64(struct pv_gguf_writer* w, const char* key, int64_t v);
int pv_gguf_w_f32(struct pv_gguf_writer* w, const char* key, float v);
int pv_gguf_w_f64(struct pv_gguf_writer* w, const char* key, double v);
int pv_gguf_w_bool(struct pv_gguf_writer* w, const char* key, int v);
/* A string of len bytes (need not be NUL-terminated); pv_gguf_w_str takes a C string. */
int pv_gguf_w_strn(struct pv_gguf_writer* w, const char* key, const char* s, uint64_t len);
int pv_gguf_w_str(struct pv_gguf_writer* w, const char* key, const char* s);

/* Arrays of a scalar element type (enum pv_gguf_type UINT8..FLOAT64 except STRING/ARRAY): n
 * elements of the type's size, little-endian as in memory on this (little-endian) host. BOOL
 * elements are bytes 0/1. */
int pv_gguf_w_arr(struct pv_gguf_writer* w, const char* key, int elem_type, const void* data, uint64_t n);
/* An array of n C strings. */
int pv_gguf_w_arr_str(struct pv_gguf_writer* w, const char* key, const char* const* s, uint64_t n);

/* A tensor info: ne[0] is the contiguous dimension (ggml order), n_dims 1..4, ggml_type a ggml
 * type id (pv_gguf_ggml_type). ne[0] must be a whole number of the type's blocks. */
int pv_gguf_w_tensor(struct pv_gguf_writer* w, const char* name, int n_dims, const int64_t* ne, int ggml_type);
/* Bytes of tensor data for a shape and ggml type (0 if the type is unknown or ne[0] is not a
 * whole number of blocks). */
uint64_t pv_gguf_tensor_bytes(int n_dims, const int64_t* ne, int ggml_type);

/* Writes everything before the data section. No keys or tensors may be added after it. Fails
 * (nothing written) when the file system has less free space than the file will take. */
int pv_gguf_w_begin_data(struct pv_gguf_writer* w);
/* Appends n bytes to the tensor being written (tensors in info order). */
int pv_gguf_w_data(struct pv_gguf_writer* w, const void* data, size_t n);

/* Finishes the file: checks every tensor got all its bytes, flushes, fsyncs, closes and renames
 * the temporary file to PATH (checked again: never over anything but a regular file). Frees w
 * whatever the outcome; on failure the temporary file is removed. */
int pv_gguf_writer_close(struct pv_gguf_writer* w, char* err, size_t errlen);
/* Abandons the file: closes and removes the temporary file, frees w. NULL is fine. */
void pv_gguf_writer_abort(struct pv_gguf_writer* w);
/* The first error, or NULL. */
const char* pv_gguf_writer_error(const struct pv_gguf_writer* w);

#endif
