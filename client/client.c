/*
 * client.c: libproven_client.a, the client of proven-server's shared-memory protocol
 * (proven_client.h, proven_wire.h). One connection and one mapped segment per remote session;
 * every call is one request and one reply on the socket, the data stays in the segment.
 */
#include "proven_client.h"
#include "proven_wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct pvc_session {
	int fd;
	unsigned char* map;
	size_t bytes;
	struct pvc_info info;
	struct pvw_rep last; /* offsets from hello */
	int length;
	struct pvc_stats st;
	char err[256];
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int fail(pvc_session* s, int rc, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(pvc_session* s, int rc, const char* fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
	return rc;
}

/* One crossing: the request out, the reply (and a passed descriptor) back. */
static int call(pvc_session* s, struct pvw_req* q, struct pvw_rep* r, int* fd_out)
{
	q->magic = PVW_MAGIC;
	const double t0 = now_ms();
	if (send(s->fd, q, sizeof *q, MSG_NOSIGNAL) != (ssize_t)sizeof *q)
		return fail(s, PV_E_IO, "the server is gone (send: %s)", strerror(errno));
	struct iovec iov = { r, sizeof *r };
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	ssize_t k;
	do k = recvmsg(s->fd, &m, MSG_CMSG_CLOEXEC);
	while (k < 0 && errno == EINTR);
	s->st.crossings++;
	s->st.wait_ms += now_ms() - t0;
	if (k != (ssize_t)sizeof *r || r->magic != PVW_MAGIC)
		return fail(s, PV_E_IO, "the server is gone or speaks another protocol (recv: %s)", k < 0 ? strerror(errno) : "short reply");
	struct cmsghdr* c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
		int fd;
		memcpy(&fd, CMSG_DATA(c), sizeof fd);
		if (fd_out) *fd_out = fd;
		else close(fd);
	}
	if (r->op != PVW_HELLO || !r->status) s->length = r->length;
	if (r->status) return fail(s, r->status, "%s", r->err);
	s->err[0] = 0;
	return PV_OK;
}

int pvc_open(pvc_session** out, const char* path, const struct pvc_params* p, char* err, size_t errlen)
{
	*out = NULL;
	pvc_session* s = calloc(1, sizeof *s);
	if (!s) return snprintf(err, errlen, "out of memory"), PV_E_NOMEM;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof a.sun_path) {
		free(s);
		return snprintf(err, errlen, "socket path too long: %s", path), PV_E_INVALID;
	}
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	s->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s->fd < 0 || connect(s->fd, (struct sockaddr*)&a, sizeof a)) {
		snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(errno));
		if (s->fd >= 0) close(s->fd);
		free(s);
		return PV_E_IO;
	}
	struct pvw_req q = { .op = PVW_HELLO };
	if (p) q.n_ctx = p->n_ctx, q.max_rows = p->max_rows, q.n_snapshots = p->n_snapshots;
	struct pvw_rep r;
	int mfd = -1;
	int rc = call(s, &q, &r, &mfd);
	if (!rc && mfd < 0) rc = fail(s, PV_E_IO, "the server passed no shared-memory segment");
	if (!rc && (s->map = mmap(NULL, r.shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)) == MAP_FAILED) {
		s->map = NULL;
		rc = fail(s, PV_E_NOMEM, "cannot map the segment: %s", strerror(errno));
	}
	if (mfd >= 0) close(mfd); /* the mapping keeps the segment */
	if (rc) {
		snprintf(err, errlen, "%s", s->err);
		pvc_close(s);
		return rc;
	}
	s->bytes = r.shm_bytes;
	s->last = r;
	s->info.vocab = r.vocab, s->info.hidden = r.hidden, s->info.n_ctx = r.n_ctx, s->info.max_rows = r.max_rows;
	s->info.shm_bytes = r.shm_bytes;
	snprintf(s->info.model, sizeof s->info.model, "%s", r.model);
	snprintf(s->info.arch, sizeof s->info.arch, "%s", r.arch);
	*out = s;
	return PV_OK;
}

void pvc_close(pvc_session* s)
{
	if (!s) return;
	if (s->map) munmap(s->map, s->bytes);
	if (s->fd >= 0) close(s->fd);
	free(s);
}

const struct pvc_info* pvc_get_info(const pvc_session* s) { return &s->info; }
const char* pvc_error(const pvc_session* s) { return s->err; }
int pvc_length(const pvc_session* s) { return s->length; }
void pvc_stats(const pvc_session* s, struct pvc_stats* st) { *st = s->st; }

static int put_tokens(pvc_session* s, const int32_t* t, int n)
{
	if (n < 0 || n > s->info.n_ctx) return fail(s, PV_E_INVALID, "%d tokens: the session holds %d", n, s->info.n_ctx);
	memcpy(s->map + s->last.off_tokens, t, sizeof(int32_t) * (size_t)n);
	return PV_OK;
}

/* Copies rows [row0, n) of the outputs asked for out of the segment. */
static void get_outputs(pvc_session* s, const struct pv_eval_out* o, int n, int sync)
{
	if (!o) return;
	const size_t V = (size_t)s->info.vocab, H = (size_t)s->info.hidden;
	int r0 = sync ? n - 1 : o->logits_row0;
	if (o->logits) memcpy(o->logits, s->map + s->last.off_logits, sizeof(float) * V * (size_t)(n - r0));
	r0 = sync ? n - 1 : o->argmax_row0;
	if (o->argmax) memcpy(o->argmax, s->map + s->last.off_argmax, sizeof(int32_t) * (size_t)(n - r0));
	r0 = sync ? n - 1 : o->hidden_row0;
	if (o->hidden) memcpy(o->hidden, s->map + s->last.off_hidden, sizeof(float) * H * (size_t)(n - r0));
}

static int run(pvc_session* s, int op, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* o, int* reused)
{
	int rc = put_tokens(s, tokens, n);
	if (rc) return rc;
	struct pvw_req q = { .op = (uint32_t)op, .n = n, .flags = flags };
	if (o) {
		q.want = (o->logits ? PVW_WANT_LOGITS : 0) | (o->argmax ? PVW_WANT_ARGMAX : 0) | (o->hidden ? PVW_WANT_HIDDEN : 0);
		q.logits_row0 = o->logits_row0, q.argmax_row0 = o->argmax_row0, q.hidden_row0 = o->hidden_row0;
	}
	struct pvw_rep r;
	s->st.runs++;
	if ((rc = call(s, &q, &r, NULL))) return rc;
	if (reused) *reused = r.reused;
	get_outputs(s, o, n, op == PVW_SYNC);
	return PV_OK;
}

int pvc_run(pvc_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out)
{
	return run(s, PVW_RUN, tokens, n, flags, out, NULL);
}

int pvc_sync(pvc_session* s, const int32_t* tokens, int n, unsigned flags, const struct pv_eval_out* out, int* reused)
{
	return run(s, PVW_SYNC, tokens, n, flags, out, reused);
}

static int simple(pvc_session* s, int op, int n)
{
	struct pvw_req q = { .op = (uint32_t)op, .n = n };
	struct pvw_rep r;
	return call(s, &q, &r, NULL);
}

int pvc_truncate(pvc_session* s, int n) { return simple(s, PVW_TRUNCATE, n); }
int pvc_rollback(pvc_session* s, int n) { return simple(s, PVW_ROLLBACK, n); }
int pvc_checkpoint(pvc_session* s) { return simple(s, PVW_CHECKPOINT, 0); }

int pvc_generate(pvc_session* s, const int32_t* prompt, int n, const struct pvc_gen_params* p, int32_t* out,
                 struct pvc_gen_result* res)
{
	memset(res, 0, sizeof *res);
	int rc = put_tokens(s, prompt, n);
	if (rc) return rc;
	struct pvw_req q = { .op = PVW_GENERATE, .n = n, .max_tokens = p->max_tokens, .top_k = p->top_k, .draft = p->draft,
		             .draft_max = p->draft_max, .temperature = p->temperature, .top_p = p->top_p, .min_p = p->min_p,
		             .seed = p->seed };
	struct pvw_rep r;
	s->st.generates++;
	rc = call(s, &q, &r, NULL);
	/* what was generated before a failure is returned too */
	int k = r.n > 0 && r.n <= p->max_tokens && r.n <= s->info.n_ctx ? r.n : 0;
	memcpy(out, s->map + s->last.off_out, sizeof(int32_t) * (size_t)k);
	res->n = k;
	res->stopped_eos = r.stopped_eos;
	res->drafted = r.drafted;
	res->accepted = r.accepted;
	res->server_ms = r.server_ms;
	return rc;
}

int pvc_tokenize(pvc_session* s, const char* text, size_t len, int parse_special, int32_t** ids, int* n)
{
	*ids = NULL;
	*n = 0;
	if (len > s->last.text_cap) return fail(s, PV_E_INVALID, "text of %zu bytes: the text area holds %llu", len, (unsigned long long)s->last.text_cap);
	memcpy(s->map + s->last.off_text, text, len);
	struct pvw_req q = { .op = PVW_TOKENIZE, .n = (int32_t)len, .parse_special = parse_special != 0 };
	struct pvw_rep r;
	int rc = call(s, &q, &r, NULL);
	if (rc) return rc;
	if (!(*ids = malloc(sizeof(int32_t) * (size_t)(r.n > 0 ? r.n : 1)))) return fail(s, PV_E_NOMEM, "out of memory");
	memcpy(*ids, s->map + s->last.off_out, sizeof(int32_t) * (size_t)r.n);
	*n = r.n;
	return PV_OK;
}

int pvc_detokenize(pvc_session* s, const int32_t* ids, int n, char** text, size_t* len)
{
	*text = NULL;
	*len = 0;
	int rc = put_tokens(s, ids, n);
	if (rc) return rc;
	struct pvw_req q = { .op = PVW_DETOKENIZE, .n = n };
	struct pvw_rep r;
	if ((rc = call(s, &q, &r, NULL))) return rc;
	if (!(*text = malloc((size_t)r.n + 1))) return fail(s, PV_E_NOMEM, "out of memory");
	memcpy(*text, s->map + s->last.off_text, (size_t)r.n);
	(*text)[r.n] = 0;
	*len = (size_t)r.n;
	return PV_OK;
}
