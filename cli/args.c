/*
 * args.c: what the commands share: option values, token id lists, the --backend name, opening
 * the model, and the clock.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int cli_stdout_reported;

int cli_parse_ids(const char* s, int32_t** out)
{
	int cap = 16, n = 0;
	int32_t* ids = malloc(sizeof(int32_t) * cap);
	if (!ids) return -1;
	const char* p = s;
	while (*p) {
		char* end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
			fprintf(stderr, "proven: bad token id list near \"%.20s\" (expected comma-separated non-negative integers)\n", p);
			free(ids);
			return -1;
		}
		if (n == cap) {
			int32_t* g = realloc(ids, sizeof(int32_t) * (cap *= 2));
			if (!g) { free(ids); return -1; }
			ids = g;
		}
		ids[n++] = (int32_t)v;
		p = *end ? end + 1 : end;
		if (*end == ',' && !*p) {
			fprintf(stderr, "proven: bad token id list: trailing comma\n");
			free(ids);
			return -1;
		}
	}
	*out = ids;
	return n;
}

int cli_int(const char* opt, const char* v, int lo, int hi)
{
	char* end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || end == v || *end || errno || x < lo || x > hi) {
		fprintf(stderr, "proven: %s needs an integer in [%d, %d], got \"%s\"\n", opt, lo, hi, v ? v : "");
		exit(2);
	}
	return (int)x;
}

int cli_cache_option(int* cache_type, const char* a, const char* v)
{
	const int kv = !strcmp(a, "-ctk") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-k") || !strcmp(a, "--cache-type-v");
	if (!kv && strcmp(a, "--cache-type")) return 0;
	const int t = pv_cache_type_parse(v);
	if (t < 0) {
		fprintf(stderr, "proven: %s must be f32, f16, bf16 or q8_0 (got \"%s\")\n", a, v ? v : "");
		exit(2);
	}
	if (kv && *cache_type && *cache_type != t) {
		fprintf(stderr, "proven: -ctk and -ctv name different types (%s, %s); proven keeps K and V in one type\n",
		        pv_cache_type_name(*cache_type), pv_cache_type_name(t));
		exit(2);
	}
	*cache_type = t;
	return 1;
}

double cli_double(const char* opt, const char* v, double lo, double hi)
{
	char* end;
	errno = 0;
	double x = v ? strtod(v, &end) : 0;
	if (!v || end == v || *end || errno || !(x >= lo && x <= hi)) {
		fprintf(stderr, "proven: %s needs a number in [%g, %g], got \"%s\"\n", opt, lo, hi, v ? v : "");
		exit(2);
	}
	return x;
}

double cli_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cli_check_backend(const char* cmd, const char* name)
{
	if (!name || !strcmp(name, "cpu") || !strcmp(name, "cuda")) return 0;
	fprintf(stderr, "proven %s: --backend must be cpu or cuda (got \"%s\")\n", cmd, name);
	return -1;
}

pv_model* cli_open_model(const char* dir, int verbose, const char* backend)
{
	if (!dir) {
		fprintf(stderr, "proven: --model DIR is required\n");
		return NULL;
	}
	char err[512];
	pv_model* m = NULL;
	struct pv_model_params mp = cli_model_params(verbose, backend);
	if (pv_model_open(&m, dir, &mp, err, sizeof(err))) {
		fprintf(stderr, "proven: cannot load model: %s\n", err);
		return NULL;
	}
	return m;
}

static const char* kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "a special file";
}

FILE* cli_open_input(const char* cmd, const char* path)
{
	struct stat st;
	/* the type first: a directory reads as nothing and a device (/dev/zero) never ends */
	if (stat(path, &st)) {
		fprintf(stderr, "proven %s: cannot open %s: %s\n", cmd, path, strerror(errno));
		return NULL;
	}
	if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
		fprintf(stderr, "proven %s: %s is %s, not a regular file or a pipe\n", cmd, path, kind_of(st.st_mode));
		return NULL;
	}
	FILE* f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "proven %s: cannot open %s: %s\n", cmd, path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) || (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))) { /* swapped since the stat */
		fprintf(stderr, "proven %s: %s is not a regular file or a pipe\n", cmd, path);
		fclose(f);
		return NULL;
	}
	return f;
}

char* cli_read_input(const char* cmd, const char* path, size_t max, size_t* len)
{
	FILE* f = cli_open_input(cmd, path);
	if (!f) return NULL;
	size_t cap = 1 << 16, n = 0;
	char* buf = malloc(cap + 1);
	for (;;) {
		if (!buf) {
			fprintf(stderr, "proven %s: out of memory reading %s\n", cmd, path);
			break;
		}
		if (n == cap) {
			if (cap > max) {
				fprintf(stderr, "proven %s: %s is larger than %zu MiB\n", cmd, path, max >> 20);
				break;
			}
			size_t nc = cap > max / 2 ? max + 1 : 2 * cap;
			char* g = realloc(buf, nc + 1);
			if (!g) {
				free(buf);
				buf = NULL;
				continue;
			}
			buf = g;
			cap = nc;
		}
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r) continue;
		if (ferror(f)) {
			fprintf(stderr, "proven %s: cannot read %s: %s\n", cmd, path, strerror(errno ? errno : EIO));
			break;
		}
		if (n > max) {
			fprintf(stderr, "proven %s: %s is larger than %zu MiB\n", cmd, path, max >> 20);
			break;
		}
		fclose(f);
		buf[n] = 0;
		if (len) *len = n;
		return buf;
	}
	fclose(f);
	free(buf);
	return NULL;
}

int cli_stdout_failed(const char* cmd)
{
	errno = 0;
	int f = fflush(stdout);
	if (!f && !ferror(stdout)) return 0;
	int e = errno;
	if (!cli_stdout_reported) /* the first failure only: a streaming command stops on it */
		fprintf(stderr, "proven%s%s: cannot write to standard output%s%s\n", cmd[0] == '-' ? "" : " ", cmd[0] == '-' ? "" : cmd,
		        e ? ": " : "", e ? strerror(e) : "");
	cli_stdout_reported = 1;
	return 1;
}

int cli_stdout_check(const char* cmd, int rc)
{
	int bad = cli_stdout_failed(cmd);
	if (!bad && fclose(stdout)) { /* the last bytes may fail only now */
		int e = errno;
		fprintf(stderr, "proven%s%s: cannot write to standard output: %s\n", cmd[0] == '-' ? "" : " ", cmd[0] == '-' ? "" : cmd,
		        strerror(e));
		bad = 1;
	}
	return bad && !rc ? 1 : rc;
}
