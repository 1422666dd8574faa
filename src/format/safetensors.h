/*
 * safetensors.h: one .safetensors file, memory-mapped read-only and validated as hostile input.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
 * then the data section; offsets are relative to its start. After a successful open every tensor's
 * byte range lies inside the file, matches its shape and dtype, and overlaps no other tensor.
 * Tensors of dtypes the engine cannot use (I64, F8_E4M3, ...) are kept with dtype = -1 so that
 * only a loader that needs them reports an error.
 */
#ifndef PV_SAFETENSORS_H
#define PV_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "quant/tensor.h"

#define PV_ST_MAX_DIMS 8

struct pv_st_tensor {
	char* name;
	int dtype;                       /* enum pv_dtype, or -1: unsupported (see dtype_str)   */
	char dtype_str[16];              /* the dtype as written (printable, truncated)         */
	int ndim;                        /* 0 for a scalar                                      */
	int64_t shape[PV_ST_MAX_DIMS];
	int64_t numel;                   /* product of shape (1 for a scalar)                   */
	uint64_t offset;                 /* from the start of the data section                  */
	uint64_t nbytes;
	const void* data;                /* inside the mapping                                  */
	int used;                        /* set by the loader when the tensor is bound          */
};

struct pv_st_file {
	char* path;                      /* for messages                                        */
	void* map;                       /* mmap'd file, or NULL when parsed from a caller buffer */
	size_t map_len;
	struct pv_st_tensor* tensors;
	int n_tensors;
};

/* Maps path read-only and parses it. On failure f is left closed and err names the file (and the
 * tensor when one is at fault). */
int pv_st_open(struct pv_st_file* f, const char* path, char* err, size_t errlen);

/* Parses a whole file image already in memory (the fuzzing entry point). buf must outlive f;
 * label names it in messages. */
int pv_st_parse(struct pv_st_file* f, const char* label, const void* buf, size_t len, char* err,
                size_t errlen);

/* Releases the tensor table and the mapping (if any). Safe on a zeroed or failed struct. */
void pv_st_close(struct pv_st_file* f);

/* Element size in bits of a safetensors dtype string (0: unknown). */
int pv_st_dtype_bits(const char* dtype);

/* Copies s into dst (dstlen > 0) for an error message: control and non-ASCII bytes become '?',
 * long strings are cut with "...". Names read from hostile files go through this. */
const char* pv_printable(char* dst, size_t dstlen, const char* s);

#endif
