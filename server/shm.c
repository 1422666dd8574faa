/*
 * shm.c: the local shared-memory protocol (proven_wire.h, proven_client.h): a UNIX socket whose
 * every connection is one remote session of the loaded model.
 *
 * Each connection gets a thread that owns its session (sessions are single-threaded; the session
 * runs on the engine's shared thread pool, where sessions take turns a step at a time) and a
 * memfd segment (mode 0600) that the thread maps and passes to the client over the socket, so
 * ids, logits and hidden rows never go through the socket. Only peers of the allowed uid (the
 * server's own by default) are served: the socket file is 0600 and SO_PEERCRED is checked on
 * every connection. A client that closes, crashes or is killed ends its connection: the thread
 * sees it (at once when idle, at the next token during a generation) and frees everything.
 *
 * Every request passes srv_wire_check (wire.c, fuzzed) before it is acted on, and the inputs in
 * the segment (ids, text) are copied out first: the client can write the segment at any time,
 * and the library must never see an id change between its check and its use.
 */
#include "shm.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TEXT_CAP (4u << 20)
/* connections served at once: each holds a thread (and, after its hello, a session), so a client
 * that opens connections in a loop is refused rather than allowed to exhaust the process */
#define MAX_CLIENTS 64

struct client {
	struct srv_shm* sh;
	int fd;
	pthread_t thread;
	int done; /* the thread has ended (under sh->mu) */
	struct client* next;
};

struct srv_shm {
	struct srv_engine* e;
	char path[108];
	int lfd;
	uid_t uid;
	pthread_t thread;
	atomic_int stop;
	pthread_mutex_t mu;
	struct client* clients;
};

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* One client's state. */
struct sess {
	struct srv_shm* sh;
	int fd, mfd;
	pv_session* s;
	unsigned char* map;
	size_t bytes;
	int n_ctx, max_rows, V, H;
	uint64_t off_tokens, off_out, off_argmax, off_logits, off_hidden, off_text;
	int32_t* ids; /* [n_ctx]: the private copy of the ids a request reads                  */
};

static int send_rep(int fd, struct pvw_rep* r, int pass_fd)
{
	r->magic = PVW_MAGIC;
	struct iovec iov = { r, sizeof *r };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	char cbuf[CMSG_SPACE(sizeof(int))];
	if (pass_fd >= 0) {
		memset(cbuf, 0, sizeof cbuf);
		m.msg_control = cbuf;
		m.msg_controllen = sizeof cbuf;
		struct cmsghdr* c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)sizeof *r ? 0 : -1;
}

static void rep_err(struct pvw_rep* r, int status, const char* msg)
{
	r->status = status;
	snprintf(r->err, sizeof r->err, "%s", msg && *msg ? msg : pv_status_name(status));
}

static int hello(struct sess* x, const struct pvw_req* q, struct pvw_rep* r)
{
	const pv_model* m = srv_engine_model(x->sh->e);
	const struct pv_model_info* in = pv_model_get_info(m);
	x->V = in->vocab;
	x->H = in->hidden;
	/* the ranges were checked (srv_wire_check); 0 picks the defaults */
	x->n_ctx = q->n_ctx > 0 ? q->n_ctx : srv_engine_n_ctx(x->sh->e);
	if (x->n_ctx > in->max_context) x->n_ctx = in->max_context;
	x->max_rows = q->max_rows > 0 ? q->max_rows : 64;
	if (!(x->ids = malloc(sizeof(int32_t) * (size_t)x->n_ctx))) {
		rep_err(r, PV_E_NOMEM, "hello: out of memory");
		return -1;
	}
	char err[256];
	struct pv_session_params sp = { .n_ctx = x->n_ctx, .pool = srv_engine_pool(x->sh->e), .n_snapshots = q->n_snapshots };
	int rc = pv_session_new(&x->s, m, &sp, err, sizeof err);
	if (rc) {
		rep_err(r, rc, err);
		return -1;
	}
	/* the areas, each 64-byte aligned */
	uint64_t off = 0;
#define AREA(field, bytes) (x->field = off, off += ((uint64_t)(bytes) + 63) & ~63ull)
	AREA(off_tokens, sizeof(int32_t) * (size_t)x->n_ctx);
	AREA(off_out, sizeof(int32_t) * (size_t)x->n_ctx);
	AREA(off_argmax, sizeof(int32_t) * (size_t)x->max_rows);
	AREA(off_logits, sizeof(float) * (size_t)x->max_rows * (size_t)x->V);
	AREA(off_hidden, sizeof(float) * (size_t)x->max_rows * (size_t)x->H);
	AREA(off_text, TEXT_CAP);
#undef AREA
	x->bytes = off;
	/* a memfd has no name: only this process and the peer it is passed to can map it */
	x->mfd = memfd_create("proven-session", MFD_CLOEXEC);
	if (x->mfd < 0 || fchmod(x->mfd, 0600) || ftruncate(x->mfd, (off_t)x->bytes) ||
	    (x->map = mmap(NULL, x->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, x->mfd, 0)) == MAP_FAILED) {
		x->map = NULL;
		rep_err(r, PV_E_NOMEM, strerror(errno));
		pv_session_free(x->s); /* a failed hello leaves no session (nor a count of one) */
		x->s = NULL;
		return -1;
	}
	r->vocab = x->V, r->hidden = x->H, r->n_ctx = x->n_ctx, r->max_rows = x->max_rows;
	r->shm_bytes = x->bytes, r->off_tokens = x->off_tokens, r->off_out = x->off_out, r->off_argmax = x->off_argmax;
	r->off_logits = x->off_logits, r->off_hidden = x->off_hidden, r->off_text = x->off_text, r->text_cap = TEXT_CAP;
	snprintf(r->model, sizeof r->model, "%s", srv_engine_config(x->sh->e)->model_name);
	snprintf(r->arch, sizeof r->arch, "%s", in->arch_name);
	return 0;
}

/* The client hung up (or the server stops): a generation in progress ends there. */
static int gone(struct sess* x)
{
	if (atomic_load(&x->sh->stop)) return 1;
	struct pollfd p = { x->fd, POLLRDHUP, 0 };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void generate(struct sess* x, const struct pvw_req* q, struct pvw_rep* r)
{
	const pv_model* m = srv_engine_model(x->sh->e);
	const int32_t* prompt = x->ids; /* copied out of the segment by request() */
	int32_t* out = (int32_t*)(x->map + x->off_out);
	struct pv_sampling smp = { q->temperature, q->top_k, q->top_p, q->min_p, q->seed, srv_engine_config(x->sh->e)->defaults.n_valid };
	struct pv_spec_params sp = { .draft = q->draft ? PV_DRAFT_NGRAM : PV_DRAFT_NONE, .k_max = q->draft_max };
	pv_generator* g = NULL;
	char err[256];
	int rc = pv_generator_new(&g, x->s, &smp, &sp, err, sizeof err);
	if (rc) {
		rep_err(r, rc, err);
		return;
	}
	const int32_t* eos;
	int ne = pv_model_eos(m, &eos), n = 0, stop = 0;
	int32_t buf[17];
	int nb = 0;
	rc = pv_generator_prompt(g, prompt, q->n, &buf[0]);
	nb = rc ? 0 : 1;
	while (!rc && !stop) {
		for (int i = 0; i < nb && !stop; i++) {
			for (int k = 0; k < ne; k++)
				if (buf[i] == eos[k]) stop = r->stopped_eos = 1;
			if (!stop) out[n++] = buf[i];
			if (n >= q->max_tokens) stop = 1;
		}
		if (stop) break;
		if (pv_session_length(x->s) + 1 >= pv_session_n_ctx(x->s)) break;
		if (gone(x)) {
			rc = PV_E_IO;
			snprintf(err, sizeof err, "generate: the client went away");
			break;
		}
		int room = q->max_tokens - n < 17 ? q->max_tokens - n : 17;
		rc = pv_generator_step(g, buf, room, &nb);
	}
	if (rc) rep_err(r, rc, rc == PV_E_IO ? err : pv_generator_error(g));
	struct pv_gen_stats st;
	pv_generator_stats(g, &st);
	r->drafted = st.drafted;
	r->accepted = st.accepted;
	r->n = n;
	pv_generator_free(g);
}

/* q has passed srv_wire_check for this session's numbers. */
static void request(struct sess* x, const struct pvw_req* q, struct pvw_rep* r)
{
	int rc = PV_OK;
	const int32_t* tokens = x->ids;
	if (q->op == PVW_RUN || q->op == PVW_SYNC || q->op == PVW_GENERATE || q->op == PVW_DETOKENIZE)
		memcpy(x->ids, x->map + x->off_tokens, sizeof(int32_t) * (size_t)q->n);
	switch (q->op) {
	case PVW_RUN:
	case PVW_SYNC: {
		const int n = q->n;
		const int sync = q->op == PVW_SYNC;
		int r0[3] = { sync ? 0 : q->logits_row0, sync ? 0 : q->argmax_row0, sync ? 0 : q->hidden_row0 };
		struct pv_eval_out o = {
			q->want & PVW_WANT_LOGITS ? (float*)(x->map + x->off_logits) : NULL, r0[0],
			q->want & PVW_WANT_ARGMAX ? (int32_t*)(x->map + x->off_argmax) : NULL, r0[1],
			q->want & PVW_WANT_HIDDEN ? (float*)(x->map + x->off_hidden) : NULL, r0[2],
		};
		int reused = 0;
		rc = sync ? pv_session_sync(x->s, tokens, n, q->flags, &o, &reused) : pv_session_run(x->s, tokens, n, q->flags, &o);
		r->reused = reused;
		break;
	}
	case PVW_TRUNCATE: rc = pv_session_truncate(x->s, q->n); break;
	case PVW_ROLLBACK: rc = pv_session_rollback(x->s, q->n); break;
	case PVW_CHECKPOINT: rc = pv_session_checkpoint(x->s); break;
	case PVW_GENERATE: generate(x, q, r); break;
	case PVW_TOKENIZE: {
		int32_t* ids = NULL;
		int k = 0;
		char err[256];
		char* text = malloc((size_t)q->n + 1); /* the tokenizer reads a copy (see the top) */
		if (!text) {
			rep_err(r, PV_E_NOMEM, "tokenize: out of memory");
			return;
		}
		memcpy(text, x->map + x->off_text, (size_t)q->n);
		int erc = pv_tok_encode(srv_engine_tok(x->sh->e), text, (size_t)q->n, q->parse_special, &ids, &k, err, sizeof err);
		free(text);
		if (erc) {
			rep_err(r, PV_E_INVALID, err);
		} else if (k > x->n_ctx) {
			rep_err(r, PV_E_CONTEXT, "tokenize: more tokens than the session's context");
		} else {
			memcpy(x->map + x->off_out, ids, sizeof(int32_t) * (size_t)k);
			r->n = k;
		}
		free(ids);
		break;
	}
	case PVW_DETOKENIZE: {
		char* s = NULL;
		size_t len = 0;
		char err[256];
		if (pv_tok_decode(srv_engine_tok(x->sh->e), tokens, q->n, 0, &s, &len, err, sizeof err)) rep_err(r, PV_E_INVALID, err);
		else if (len > TEXT_CAP) rep_err(r, PV_E_INVALID, "detokenize: text longer than the text area");
		else {
			memcpy(x->map + x->off_text, s, len);
			r->n = (int32_t)len;
		}
		free(s);
		break;
	}
	default: rep_err(r, PV_E_INVALID, "unknown operation"); return;
	}
	if (rc) rep_err(r, rc, pv_session_error(x->s));
}

static void* client_main(void* arg)
{
	struct client* c = arg;
	struct sess x = { .sh = c->sh, .fd = c->fd, .mfd = -1 };
	struct pvw_req q;
	const pv_model* m = srv_engine_model(c->sh->e);
	for (;;) {
		/* MSG_TRUNC: the message's real length, so that a longer message is refused, not cut */
		union {
			struct pvw_req q;
			unsigned char b[sizeof(struct pvw_req) + 1];
		} in;
		ssize_t k = recv(c->fd, &in, sizeof in, MSG_TRUNC);
		if (k <= 0) break; /* the client is gone (or the server stops) */
		struct pvw_rep r;
		memset(&r, 0, sizeof r);
		memset(&q, 0, sizeof q);
		const double t0 = now_ms();
		int pass = -1, hello_failed = 0;
		struct srv_wire_limits lim = { x.s != NULL, pv_model_get_info(m)->max_context, x.n_ctx, x.max_rows, TEXT_CAP };
		char err[256];
		if (srv_wire_check(&in, (size_t)k < sizeof in ? (size_t)k : sizeof in, &lim, &q, err, sizeof err)) {
			r.op = (size_t)k >= sizeof(uint32_t) * 2 ? in.q.op : 0;
			rep_err(&r, PV_E_INVALID, err);
		} else if (q.op == PVW_HELLO) {
			r.op = q.op;
			if (!hello(&x, &q, &r)) pass = x.mfd;
			else hello_failed = 1;
		} else {
			r.op = q.op;
			request(&x, &q, &r);
		}
		r.length = x.s ? pv_session_length(x.s) : 0;
		r.server_ms = now_ms() - t0;
		srv_engine_count_socket(c->sh->e, q.op == PVW_HELLO && !r.status ? 1 : 0, 1);
		if (send_rep(c->fd, &r, pass)) break;
		if (hello_failed) break; /* the server could not make a session: nothing else to serve */
	}
	if (x.map) munmap(x.map, x.bytes);
	if (x.mfd >= 0) close(x.mfd);
	if (x.s) srv_engine_count_socket(c->sh->e, -1, 0);
	pv_session_free(x.s);
	free(x.ids);
	pthread_mutex_lock(&c->sh->mu);
	c->done = 1;
	pthread_mutex_unlock(&c->sh->mu);
	return NULL;
}

/* Joins the threads of clients that have ended (under sh->mu). */
static void reap(struct srv_shm* sh, int all)
{
	for (struct client** p = &sh->clients; *p;) {
		struct client* c = *p;
		if (!c->done && !all) {
			p = &c->next;
			continue;
		}
		*p = c->next;
		pthread_mutex_unlock(&sh->mu);
		pthread_join(c->thread, NULL);
		close(c->fd);
		free(c);
		pthread_mutex_lock(&sh->mu);
	}
}

static void* accept_main(void* arg)
{
	struct srv_shm* sh = arg;
	while (!atomic_load(&sh->stop)) {
		int fd = accept4(sh->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED) continue;
			if (atomic_load(&sh->stop)) break;
			usleep(10000);
			continue;
		}
		struct ucred cr;
		socklen_t cl = sizeof cr;
		char m[160];
		m[0] = 0;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != sh->uid) {
			snprintf(m, sizeof m, "refused: the peer's uid %u is not the server's allowed uid %u", (unsigned)cr.uid, (unsigned)sh->uid);
		} else {
			int n = 0;
			pthread_mutex_lock(&sh->mu);
			reap(sh, 0);
			for (struct client* c = sh->clients; c; c = c->next) n++;
			pthread_mutex_unlock(&sh->mu);
			if (n >= MAX_CLIENTS) snprintf(m, sizeof m, "refused: %d socket clients are connected already (the most served at once)", n);
		}
		if (m[0]) {
			/* the refusal answers the hello (closing with it unread would reset the
			 * connection before the client reads why); a peer that sends nothing in a
			 * second is simply closed */
			struct timeval tv = { 1, 0 };
			struct pvw_req q;
			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
			ssize_t got = recv(fd, &q, sizeof q, 0);
			(void)got;
			struct pvw_rep r;
			memset(&r, 0, sizeof r);
			r.op = PVW_HELLO;
			rep_err(&r, PV_E_INVALID, m);
			send_rep(fd, &r, -1);
			fprintf(stderr, "proven-server: socket: %s (pid %d)\n", m, (int)cr.pid);
			close(fd);
			continue;
		}
		struct client* c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->sh = sh;
		c->fd = fd;
		pthread_mutex_lock(&sh->mu);
		reap(sh, 0);
		if (pthread_create(&c->thread, NULL, client_main, c)) {
			pthread_mutex_unlock(&sh->mu);
			close(fd);
			free(c);
			continue;
		}
		c->next = sh->clients;
		sh->clients = c;
		pthread_mutex_unlock(&sh->mu);
	}
	return NULL;
}

int srv_shm_start(struct srv_shm** out, const char* path, int uid, struct srv_engine* e, char* err, size_t errlen)
{
	*out = NULL;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof a.sun_path) return snprintf(err, errlen, "--socket %s: path too long", path), -1;
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	struct srv_shm* sh = calloc(1, sizeof *sh);
	if (!sh) return snprintf(err, errlen, "out of memory"), -1;
	sh->e = e;
	sh->uid = uid >= 0 ? (uid_t)uid : geteuid();
	snprintf(sh->path, sizeof sh->path, "%s", path);
	pthread_mutex_init(&sh->mu, NULL);
	sh->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	/* a socket file left by a previous run is replaced; anything else at the path is not */
	struct stat st;
	if (!lstat(path, &st) && S_ISSOCK(st.st_mode)) unlink(path);
	/* created 0600 (umask 0177 around bind): other users cannot even connect */
	mode_t old = umask(0177);
	int brc = sh->lfd < 0 ? -1 : bind(sh->lfd, (struct sockaddr*)&a, sizeof a);
	umask(old);
	/* another allowed uid gets the socket file, so that it can connect (only root can give it) */
	if (!brc && sh->uid != geteuid() && chown(path, sh->uid, (gid_t)-1))
		fprintf(stderr, "proven-server: warning: cannot give %s to uid %u (%s): only that uid passes the check, and it "
		                "cannot open the file\n",
		        path, (unsigned)sh->uid, strerror(errno));
	if (brc || listen(sh->lfd, 64)) {
		snprintf(err, errlen, "--socket %s: %s", path, strerror(errno));
		if (sh->lfd >= 0) close(sh->lfd);
		pthread_mutex_destroy(&sh->mu);
		free(sh);
		return -1;
	}
	if (pthread_create(&sh->thread, NULL, accept_main, sh)) {
		close(sh->lfd);
		unlink(path);
		free(sh);
		return snprintf(err, errlen, "cannot start the socket thread"), -1;
	}
	*out = sh;
	return 0;
}

void srv_shm_stop(struct srv_shm* sh)
{
	if (!sh) return;
	atomic_store(&sh->stop, 1);
	shutdown(sh->lfd, SHUT_RDWR); /* wakes accept() */
	pthread_join(sh->thread, NULL);
	close(sh->lfd);
	unlink(sh->path);
	pthread_mutex_lock(&sh->mu);
	for (struct client* c = sh->clients; c; c = c->next) shutdown(c->fd, SHUT_RDWR); /* wakes recv() */
	reap(sh, 1);
	pthread_mutex_unlock(&sh->mu);
	pthread_mutex_destroy(&sh->mu);
	free(sh);
}
