/*
 * file.h: opening and reading the files a model is made of, which may be hostile or simply
 * wrong: the type of what a path names is known before anything can block (a FIFO never hangs
 * the open, a device never streams forever), sizes are bounded, and every failure is one line
 * that names the path and what is wrong with it.
 */
#ifndef PV_FILE_H
#define PV_FILE_H

#include <stddef.h>
#include <stdint.h>

/* What a path names (pv_path_kind). */
enum pv_path_kind {
	PV_PATH_ABSENT = 0, /* nothing there, not even a symbolic link                            */
	PV_PATH_FILE,       /* a regular file (symbolic links followed)                            */
	PV_PATH_DIR,        /* a directory (symbolic links followed)                               */
	PV_PATH_OTHER,      /* a FIFO, a device or a socket                                        */
	PV_PATH_BROKEN,     /* a symbolic link that leads nowhere or loops, or stat failed         */
};

/* The kind of path; for PV_PATH_BROKEN *err_no (may be NULL) holds the errno of stat. */
int pv_path_kind(const char* path, int* err_no);

/* "PATH: not a regular file (a directory)", "... (a FIFO)", "PATH: cannot open: a symbolic link
 * that loops"...: why path (of kind k, errno e) cannot be read as a file; returns -1. */
int pv_path_err(const char* path, int kind, int e, char* err, size_t errlen);

/* Opens path for reading only when it is a regular file: the open does not block (O_NONBLOCK,
 * cleared once fstat says it is a regular file), so a FIFO or a device fails fast. Returns the
 * descriptor (close-on-exec) and its size in *size, or -1 with a message. */
int pv_file_open(const char* path, uint64_t* size, char* err, size_t errlen);

/* The whole regular file at path, at most max bytes, in a malloc'd buffer with a NUL after the
 * last byte (*len bytes); NULL with a message (larger than max, unreadable, not a file). */
char* pv_file_read(const char* path, size_t max, size_t* len, char* err, size_t errlen);

#endif
