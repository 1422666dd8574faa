/* file.c: see file.h. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

int pv_path_kind(const char* path, int* err_no)
{
	struct stat st;
	if (err_no) *err_no = 0;
	if (!stat(path, &st)) {
		if (S_ISREG(st.st_mode)) return PV_PATH_FILE;
		if (S_ISDIR(st.st_mode)) return PV_PATH_DIR;
		return PV_PATH_OTHER;
	}
	int e = errno;
	/* ENOENT with a link in place: the link dangles */
	if ((e == ENOENT || e == ENOTDIR) && lstat(path, &st)) return PV_PATH_ABSENT;
	if (err_no) *err_no = e;
	return PV_PATH_BROKEN;
}

static const char* other_kind(mode_t m)
{
	if (S_ISFIFO(m)) return "a FIFO";
	if (S_ISCHR(m)) return "a character device";
	if (S_ISBLK(m)) return "a block device";
	if (S_ISSOCK(m)) return "a socket";
	return "a special file";
}

int pv_path_err(const char* path, int kind, int e, char* err, size_t errlen)
{
	struct stat st;
	switch (kind) {
	case PV_PATH_ABSENT: return pv_errf(err, errlen, "%s: cannot open: %s", path, strerror(ENOENT));
	case PV_PATH_DIR: return pv_errf(err, errlen, "%s: not a regular file (a directory)", path);
	case PV_PATH_OTHER:
		return pv_errf(err, errlen, "%s: not a regular file (%s)", path,
		               stat(path, &st) ? "a special file" : other_kind(st.st_mode));
	case PV_PATH_BROKEN:
		if (e == ENOENT) return pv_errf(err, errlen, "%s: cannot open: a symbolic link to nothing", path);
		if (e == ELOOP) return pv_errf(err, errlen, "%s: cannot open: a symbolic link that loops", path);
		return pv_errf(err, errlen, "%s: cannot open: %s", path, strerror(e ? e : EIO));
	default: return pv_errf(err, errlen, "%s: not a regular file", path);
	}
}

int pv_file_open(const char* path, uint64_t* size, char* err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		int e_open = errno, e, kind = pv_path_kind(path, &e);
		if (kind == PV_PATH_ABSENT || kind == PV_PATH_BROKEN) return pv_path_err(path, kind, e, err, errlen);
		return pv_errf(err, errlen, "%s: cannot open: %s", path, strerror(e_open));
	}
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return pv_errf(err, errlen, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		if (S_ISDIR(st.st_mode)) return pv_path_err(path, PV_PATH_DIR, 0, err, errlen);
		return pv_errf(err, errlen, "%s: not a regular file (%s)", path, other_kind(st.st_mode));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		int e = errno;
		close(fd);
		return pv_errf(err, errlen, "%s: cannot open: %s", path, strerror(e));
	}
	if (size) *size = (uint64_t)st.st_size;
	return fd;
}

char* pv_file_read(const char* path, size_t max, size_t* len, char* err, size_t errlen)
{
	uint64_t size;
	int fd = pv_file_open(path, &size, err, errlen);
	if (fd < 0) return NULL;
	if (size > max) {
		close(fd);
		pv_errf(err, errlen, "%s: %llu bytes, larger than the %zu-byte limit", path, (unsigned long long)size, max);
		return NULL;
	}
	/* read up to max + 1 bytes whatever the size said: a file may grow, /proc files say 0 */
	size_t cap = (size_t)size + 1 < 4096 ? 4096 : (size_t)size + 1, n = 0;
	char* buf = malloc(cap + 1);
	if (!buf) {
		close(fd);
		pv_errf(err, errlen, "%s: out of memory for %zu bytes", path, cap);
		return NULL;
	}
	for (;;) {
		if (n == cap) {
			if (cap > max) break;
			size_t nc = cap > max / 2 ? max + 1 : 2 * cap;
			char* g = realloc(buf, nc + 1);
			if (!g) {
				free(buf);
				close(fd);
				pv_errf(err, errlen, "%s: out of memory for %zu bytes", path, nc);
				return NULL;
			}
			buf = g;
			cap = nc;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR) continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			pv_errf(err, errlen, "%s: read error: %s", path, strerror(e));
			return NULL;
		}
		if (r == 0) break;
		n += (size_t)r;
	}
	close(fd);
	if (n > max) {
		free(buf);
		pv_errf(err, errlen, "%s: larger than the %zu-byte limit", path, max);
		return NULL;
	}
	buf[n] = 0;
	if (len) *len = n;
	return buf;
}
