/*
 * main.c: proven-server, the OpenAI-compatible HTTP server (and the local shared-memory socket)
 * over one loaded model. `proven serve ARGS` runs this program with the same arguments.
 *
 * It listens first and loads the model second, so /health can answer 503 "loading" at once and
 * 200 when ready. SIGTERM or SIGINT drains: new requests get 503, the running and queued ones
 * finish (for at most --drain-timeout seconds, then they end with an error event), then it exits.
 */
#include "engine.h"
#include "http.h"
#include "shm.h"

#include "proven_dev.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE* f)
{
	fprintf(f,
	        "usage: proven-server --model PATH [options]     (also: proven serve --model PATH [options])\n"
	        "  --host ADDR            listen address (default 127.0.0.1: loopback only)\n"
	        "  --port N               TCP port (default 8080; 0: any free port, printed on stderr)\n"
	        "  --api-key KEY          require `Authorization: Bearer KEY` (or X-Api-Key) on every endpoint but\n"
	        "                         /health and the chat page; --api-key-file F: one key per line\n"
	        "  --parallel N           slots: requests generated at the same time (default 4)\n"
	        "  --queue N              requests waiting for a slot before 429 (default 64)\n"
	        "  --ctx N                context per slot (default min(model, 4096))\n"
	        "  --threads N            threads of the shared pool (default: all cores)\n"
	        "  --backend cpu|cuda     where the model runs (default cpu)\n"
	        "  --draft ngram|mtp|PATH|cascade:PATH   speculative decoding (the same tokens, faster); --draft-max K\n"
	        "  --socket PATH          also serve the shared-memory protocol on this UNIX socket (proven_client.h)\n"
	        "  --socket-uid UID       the one uid allowed on the socket (default: the server's own)\n"
	        "  --temp T --top-p P --top-k K --min-p P   sampling defaults (0.7, 0.8, 20, 0)\n"
	        "  --alias NAME           the model id /v1/models reports (default: the file name)\n"
	        "  --dialect qwen3|qwen3.5|qwen2.5   chat format when the model's template is not recognised\n"
	        "  --prefill-chunk N      prompt tokens per engine step (default 256)\n"
	        "  --cache-entries N      LRU prefix cache: extra sessions keeping evicted prefixes (default 0)\n"
	        "  --exact-prefill 0|1    hybrid models: prompts on the exact (recurrent) path, so that outputs never depend\n"
	        "                         on prefill chunking or prefix reuse (slower prefill; default 0)\n"
	        "  --max-body BYTES       largest request body (default 8388608)\n"
	        "  --request-timeout S    seconds a request's headers and body may take to arrive (default 30)\n"
	        "  --send-timeout S       seconds a client may stall reading a response (default 60)\n"
	        "  --max-connections N    (default 256)      --drain-timeout S   on SIGTERM (default 30)\n"
	        "  --port-file F          write the port to F once listening\n"
	        "  --version              the build identity (commit, compiler, flags)\n");
}

static void log_line(void* user, int level, const char* line)
{
	(void)user;
	fprintf(stderr, "proven-server: %s%s\n", level == PV_LOG_WARN ? "warning: " : level == PV_LOG_ERROR ? "error: " : "", line);
}

static void progress(void* user, double f) { srv_http_set_load_progress(user, f); }

static long num(const char* opt, const char* v, long lo, long hi)
{
	char* end;
	errno = 0;
	long x = v ? strtol(v, &end, 10) : 0;
	if (!v || end == v || *end || errno || x < lo || x > hi) {
		fprintf(stderr, "proven-server: %s needs an integer in [%ld, %ld], got \"%s\"\n", opt, lo, hi, v ? v : "");
		exit(2);
	}
	return x;
}

static double real(const char* opt, const char* v, double lo, double hi)
{
	char* end;
	errno = 0;
	double x = v ? strtod(v, &end) : 0;
	if (!v || end == v || *end || errno || !(x >= lo && x <= hi)) {
		fprintf(stderr, "proven-server: %s needs a number in [%g, %g], got \"%s\"\n", opt, lo, hi, v ? v : "");
		exit(2);
	}
	return x;
}

/* Keys from a file: one per line, blank lines and #comments skipped. */
static int read_keys(const char* path, const char*** keys, int* n)
{
	FILE* f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "proven-server: cannot read --api-key-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	char line[1024];
	while (fgets(line, sizeof line, f)) {
		size_t l = strlen(line);
		while (l && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ')) line[--l] = 0;
		if (!l || line[0] == '#') continue;
		const char** g = realloc(*keys, sizeof(char*) * (size_t)(*n + 1));
		if (!g) break;
		*keys = g;
		(*keys)[(*n)++] = strdup(line);
	}
	fclose(f);
	if (!*n) {
		fprintf(stderr, "proven-server: --api-key-file %s holds no key\n", path);
		return -1;
	}
	return 0;
}

static int is_loopback(const char* host)
{
	return !strcmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1") || !strcmp(host, "[::1]");
}

int main(int argc, char** argv)
{
	struct srv_config cfg = { 0 };
	struct http_config hc = { 0 };
	const char *socket_path = NULL, *port_file = NULL, *key_file = NULL;
	int socket_uid = -1;
	const char** keys = NULL;
	int n_keys = 0;
	double drain_timeout = 30;
	cfg.parallel = 4;
	cfg.queue_max = 64;
	cfg.prefill_chunk = 256;
	cfg.dialect = -1;
	cfg.defaults.temperature = 0.7f;
	cfg.defaults.top_p = 0.8f;
	cfg.defaults.top_k = 20;
	hc.host = "127.0.0.1";
	hc.port = 8080;
	hc.max_body = 8u << 20;
	hc.request_timeout = 30;
	hc.send_timeout = 60;
	hc.max_connections = 256;
	for (int i = 1; i < argc; i++) {
		const char* a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--version") || !strcmp(a, "-V")) { /* what a benchmark receipt names */
			const struct pv_build_info* b = pv_build_info();
			printf("proven-server %s\ncompiler  %s\nbackends  %s\ncpu       %s\ncflags    %s\n", b->commit, b->compiler, b->backends,
			       b->cpu_isa, b->cflags);
			return 0;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "proven-server: unknown option or missing value: %s\n", a);
			usage(stderr);
			return 2;
		}
		const char* v = argv[++i];
		if (!strcmp(a, "--model") || !strcmp(a, "-m")) cfg.model = v;
		else if (!strcmp(a, "--host")) hc.host = v;
		else if (!strcmp(a, "--port")) hc.port = (int)num(a, v, 0, 65535);
		else if (!strcmp(a, "--api-key")) {
			const char** g = realloc(keys, sizeof(char*) * (size_t)(n_keys + 1));
			if (!g) return 1;
			keys = g;
			keys[n_keys++] = strdup(v);
		} else if (!strcmp(a, "--api-key-file")) key_file = v;
		else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) cfg.parallel = (int)num(a, v, 1, 256);
		else if (!strcmp(a, "--queue")) cfg.queue_max = (int)num(a, v, 0, 1 << 20);
		else if (!strcmp(a, "--ctx") || !strcmp(a, "-c")) cfg.n_ctx = (int)num(a, v, 16, 1 << 24);
		else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) cfg.threads = (int)num(a, v, 1, 1024);
		else if (!strcmp(a, "--backend")) {
			if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
				fprintf(stderr, "proven-server: --backend must be cpu or cuda (got \"%s\")\n", v);
				return 2;
			}
			cfg.backend = v;
		} else if (!strcmp(a, "--draft")) cfg.draft = v;
		else if (!strcmp(a, "--draft-max")) cfg.draft_max = (int)num(a, v, 1, 16);
		else if (!strcmp(a, "--socket")) socket_path = v;
		else if (!strcmp(a, "--socket-uid")) socket_uid = (int)num(a, v, 0, 0x7fffffff);
		else if (!strcmp(a, "--temp")) cfg.defaults.temperature = (float)real(a, v, 0, 100);
		else if (!strcmp(a, "--top-p")) cfg.defaults.top_p = (float)real(a, v, 0, 1);
		else if (!strcmp(a, "--top-k")) cfg.defaults.top_k = (int)num(a, v, 0, 1 << 24);
		else if (!strcmp(a, "--min-p")) cfg.defaults.min_p = (float)real(a, v, 0, 1);
		else if (!strcmp(a, "--alias")) cfg.model_name = v;
		else if (!strcmp(a, "--dialect")) {
			if ((cfg.dialect = pv_chat_dialect_from_name(v)) < 0) {
				fprintf(stderr, "proven-server: unknown dialect \"%s\" (qwen3, qwen3.5, qwen2.5)\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--prefill-chunk")) cfg.prefill_chunk = (int)num(a, v, 1, 1 << 20);
		else if (!strcmp(a, "--cache-entries")) cfg.cache_entries = (int)num(a, v, 0, 1024);
		else if (!strcmp(a, "--exact-prefill")) cfg.exact_prefill = (int)num(a, v, 0, 1);
		else if (!strcmp(a, "--max-body")) hc.max_body = (size_t)num(a, v, 1024, 1l << 40);
		else if (!strcmp(a, "--request-timeout")) hc.request_timeout = (int)num(a, v, 1, 86400);
		else if (!strcmp(a, "--send-timeout")) hc.send_timeout = (int)num(a, v, 1, 86400);
		else if (!strcmp(a, "--max-connections")) hc.max_connections = (int)num(a, v, 1, 65536);
		else if (!strcmp(a, "--drain-timeout")) drain_timeout = real(a, v, 0, 86400);
		else if (!strcmp(a, "--port-file")) port_file = v;
		else {
			fprintf(stderr, "proven-server: unknown option %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	/* the error path of a generation that fails midway, for the tests */
	const char* fa = getenv("PV_SERVER_FAIL_AFTER");
	if (fa) cfg.fail_after = (int)num("PV_SERVER_FAIL_AFTER", fa, 0, 1 << 30);
	if (!cfg.model) {
		fprintf(stderr, "proven-server: --model PATH is required\n");
		usage(stderr);
		return 2;
	}
	if (key_file && read_keys(key_file, &keys, &n_keys)) return 2;
	hc.keys = keys;
	hc.n_keys = n_keys;
	/* the model's id: its file or directory name */
	static char name[256];
	if (!cfg.model_name) {
		const char* b = strrchr(cfg.model, '/');
		b = b && b[1] ? b + 1 : cfg.model;
		snprintf(name, sizeof name, "%s", b);
		size_t l = strlen(name);
		while (l > 1 && name[l - 1] == '/') name[--l] = 0;
		if (l > 5 && !strcmp(name + l - 5, ".gguf")) name[l - 5] = 0;
		cfg.model_name = name;
	}
	if (!is_loopback(hc.host) && !n_keys)
		fprintf(stderr, "proven-server: WARNING: listening on %s (not loopback) without an API key: anyone who can reach this "
		                "port can use the model; pass --api-key or --api-key-file\n",
		        hc.host);

	/* signals: SIGTERM/SIGINT are taken by sigwait below (every thread inherits the mask);
	 * a client that hangs up must not kill the process */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	pv_set_log(log_line, NULL, PV_LOG_INFO);

	char err[512];
	struct srv_http* h = NULL;
	if (srv_http_start(&h, &hc, err, sizeof err)) {
		fprintf(stderr, "proven-server: %s\n", err);
		return 1;
	}
	int port = srv_http_port(h);
	fprintf(stderr, "proven-server: listening on http://%s%s%s:%d (%s)\n", strchr(hc.host, ':') ? "[" : "", hc.host,
	        strchr(hc.host, ':') ? "]" : "", port, pv_build_info()->commit);
	if (port_file) {
		FILE* f = fopen(port_file, "w");
		if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f)) {
			fprintf(stderr, "proven-server: cannot write --port-file %s\n", port_file);
			srv_http_stop(h);
			return 1;
		}
	}
	cfg.progress = progress;
	cfg.progress_user = h;
	struct srv_engine* e = NULL;
	if (srv_engine_new(&e, &cfg, err, sizeof err)) {
		fprintf(stderr, "proven-server: cannot load the model: %s\n", err);
		srv_http_set_load_error(h, err);
		srv_http_stop(h);
		return 1;
	}
	struct srv_shm* sh = NULL;
	if (socket_path && srv_shm_start(&sh, socket_path, socket_uid, e, err, sizeof err)) {
		fprintf(stderr, "proven-server: %s\n", err);
		srv_engine_free(e);
		srv_http_stop(h);
		return 1;
	}
	srv_http_set_engine(h, e);
	const struct pv_model_info* in = pv_model_get_info(srv_engine_model(e));
	fprintf(stderr, "proven-server: ready: %s (%s, %d slots x %d context, chat %s%s%s)\n", cfg.model_name, in->arch_name,
	        cfg.parallel, srv_engine_n_ctx(e),
	        srv_engine_dialect(e) >= 0 ? pv_chat_dialect_name(srv_engine_dialect(e)) : "none", socket_path ? ", socket " : "",
	        socket_path ? socket_path : "");

	int sig = 0;
	sigwait(&set, &sig);
	fprintf(stderr, "proven-server: %s: draining (at most %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", drain_timeout);
	srv_engine_drain(e, drain_timeout);
	srv_shm_stop(sh);
	srv_engine_stop(e);
	srv_http_stop(h);
	srv_engine_free(e);
	for (int i = 0; i < n_keys; i++) free((void*)keys[i]);
	free(keys);
	fprintf(stderr, "proven-server: stopped\n");
	return 0;
}
