/*
 * test_server.c: proven-server end to end on loopback. Each case runs one case of
 * tests/server/server_test.py (Python's standard library as the HTTP client) against a server it
 * starts, and counts its "ok" / "FAIL" lines as checks; "skip" lines are passed on.
 *
 * The model: a small random Qwen3 HF directory with the real Qwen3 tokenizer and chat template
 * (built once in BUILD/tests/server-fixture from $PV_SHARED/data/qwen-tokenizer: without it those
 * cases skip), and the real Qwen2.5-Coder-0.5B (tools/get-model.sh) for `real` and `openai_real`.
 */
#include "fixture.h"
#include "harness.h"
#include "proven.h"
#include "proven_client.h"
#include "proven_spec.h"
#include "proven_text.h"
#include "proven_wire.h"

#include <arpa/inet.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/un.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/socket.h>

static char build_dir[PATH_MAX];
static char fixture[PATH_MAX + 64];

static const char* build(void)
{
	if (!build_dir[0]) {
		const char* b = getenv("PV_BUILD");
		snprintf(build_dir, sizeof build_dir, "%s", b && *b ? b : "build");
	}
	return build_dir;
}

static uint16_t rnd_bf16(uint64_t* s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	float f = ((float)((*s >> 40) & 0xffff) / 65536.0f - 0.5f) * 0.2f;
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)(u >> 16);
}

/* A 2-layer random Qwen3 (H 32) with the real vocabulary size, tokenizer and chat template. */
static int make_fixture(const char* dir, const char* shared)
{
	const int V = 151936, H = 32, I = 64, L = 2, nh = 2, nkv = 1, hd = 16;
	char path[PATH_MAX + 128];
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE* f = fopen(path, "w");
	if (!f) return -1;
	fprintf(f,
	        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": %d, "
	        "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
	        "\"head_dim\": %d, \"max_position_embeddings\": 8192, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, "
	        "\"tie_word_embeddings\": true, \"vocab_size\": %d, \"bos_token_id\": 151643, \"eos_token_id\": 151645}\n",
	        H, I, L, nh, nkv, hd, V);
	fclose(f);
	struct {
		char name[96];
		int64_t r, c;
	} ts[32];
	int nt = 0;
#define T(R, C, ...) (snprintf(ts[nt].name, sizeof ts[nt].name, __VA_ARGS__), ts[nt].r = (R), ts[nt].c = (C), nt++)
	T(V, H, "model.embed_tokens.weight");
	T(0, H, "model.norm.weight");
	for (int l = 0; l < L; l++) {
		T(0, H, "model.layers.%d.input_layernorm.weight", l);
		T(0, H, "model.layers.%d.post_attention_layernorm.weight", l);
		T(nh * hd, H, "model.layers.%d.self_attn.q_proj.weight", l);
		T(nkv * hd, H, "model.layers.%d.self_attn.k_proj.weight", l);
		T(nkv * hd, H, "model.layers.%d.self_attn.v_proj.weight", l);
		T(H, nh * hd, "model.layers.%d.self_attn.o_proj.weight", l);
		T(0, hd, "model.layers.%d.self_attn.q_norm.weight", l);
		T(0, hd, "model.layers.%d.self_attn.k_norm.weight", l);
		T(I, H, "model.layers.%d.mlp.gate_proj.weight", l);
		T(I, H, "model.layers.%d.mlp.up_proj.weight", l);
		T(H, I, "model.layers.%d.mlp.down_proj.weight", l);
	}
#undef T
	char hdr[8192];
	size_t hl = 0;
	uint64_t off = 0;
	hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{");
	for (int i = 0; i < nt; i++) {
		uint64_t nel = (uint64_t)(ts[i].r ? ts[i].r : 1) * (uint64_t)ts[i].c;
		char shape[64];
		if (ts[i].r) snprintf(shape, sizeof shape, "[%lld,%lld]", (long long)ts[i].r, (long long)ts[i].c);
		else snprintf(shape, sizeof shape, "[%lld]", (long long)ts[i].c);
		hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":%s,\"data_offsets\":[%llu,%llu]}",
		                       i ? "," : "", ts[i].name, shape, (unsigned long long)off, (unsigned long long)(off + 2 * nel));
		off += 2 * nel;
	}
	hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
	while (hl % 8) hdr[hl++] = ' ';
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	if (!f) return -1;
	uint64_t hl64 = hl;
	fwrite(&hl64, 8, 1, f);
	fwrite(hdr, 1, hl, f);
	uint64_t seed = 2026;
	uint16_t buf[4096];
	for (int i = 0; i < nt; i++) {
		uint64_t nel = (uint64_t)(ts[i].r ? ts[i].r : 1) * (uint64_t)ts[i].c;
		while (nel) {
			size_t k = nel < 4096 ? (size_t)nel : 4096;
			for (size_t j = 0; j < k; j++) buf[j] = ts[i].r ? rnd_bf16(&seed) : 0x3f80; /* norms 1.0 */
			fwrite(buf, 2, k, f);
			nel -= k;
		}
	}
	if (fclose(f)) return -1;
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof cmd, "xz -dc '%s/tokenizer.json.xz' > '%s/tokenizer.json' && cp '%s/tokenizer_config.json' '%s/'", shared, dir,
	         shared, dir);
	return system(cmd) ? -1 : 0;
}

/* The fixture model's directory, built once; NULL (with a skip) without the real tokenizer. */
static const char* need_fixture(void)
{
	static int state; /* 0 unknown, 1 ready, -1 unavailable */
	if (state > 0) return fixture;
	if (state < 0) {
		t_skip("no fixture model (the real tokenizer is missing)");
		return NULL;
	}
	char shared[PATH_MAX];
	if (!t_shared_path(shared, sizeof shared, "data/qwen-tokenizer")) {
		state = -1;
		t_skip("needs the real tokenizer at %s (PV_SHARED)", shared);
		return NULL;
	}
	snprintf(fixture, sizeof fixture, "%s/tests/server-fixture", build());
	char stamp[PATH_MAX + 100];
	snprintf(stamp, sizeof stamp, "%s/tokenizer_config.json", fixture);
	if (!t_exists(stamp) && make_fixture(fixture, shared)) {
		state = -1;
		CHECK(0, "cannot build the fixture model in %s", fixture);
		return NULL;
	}
	state = 1;
	return fixture;
}

/* Built with AddressSanitizer: the server under test is too (build-asan/proven-server). */
static int sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
	return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
	return 1;
#endif
#endif
	return 0;
}

/* Runs one case of server_test.py; its ok/FAIL lines become checks. */
static void py_case_args(const char* name, const char* model, int timeout_s, const char* extra)
{
	char cmd[3 * PATH_MAX];
	snprintf(cmd, sizeof cmd, "PV_SANITIZED=%d timeout -k 5 %d python3 tests/server/server_test.py --build '%s' --model '%s' %s %s 2>&1",
	         sanitized(), timeout_s, build(), model, name, extra ? extra : "");
	FILE* p = popen(cmd, "r");
	CHECK(p != NULL, "cannot run %s", cmd);
	if (!p) return;
	char line[4096];
	int checks = 0;
	char tail[8][512];
	int nt = 0;
	while (fgets(line, sizeof line, p)) {
		size_t l = strlen(line);
		while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = 0;
		snprintf(tail[nt++ % 8], sizeof tail[0], "%s", line);
		if (!strncmp(line, "ok ", 3)) {
			CHECK(1, "%s", line);
			checks++;
		} else if (!strncmp(line, "FAIL ", 5)) {
			CHECK(0, "%s: %s", name, line + 5);
			checks++;
		} else if (!strncmp(line, "skip ", 5)) {
			t_skip("%s", line + 5);
		}
	}
	int st = pclose(p);
	int rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (rc != 0 || checks == 0)
		for (int i = nt > 8 ? nt - 8 : 0; i < nt; i++) fprintf(stderr, "  | %s\n", tail[i % 8]);
	CHECK(rc == 0, "server_test.py %s exited %d%s", name, rc, rc == 124 ? " (timed out)" : "");
}

static void py_case(const char* name, const char* model, int timeout_s) { py_case_args(name, model, timeout_s, NULL); }

#define FIXTURE_CASE(name, secs)                                 \
	TEST_CASE(name)                                          \
	{                                                        \
		const char* m = need_fixture();                  \
		if (m) py_case(#name, m, secs);                  \
	}

FIXTURE_CASE(basics, 60)
FIXTURE_CASE(chat, 120)
FIXTURE_CASE(completions, 120)
FIXTURE_CASE(errors, 120)
FIXTURE_CASE(batching, 120)
FIXTURE_CASE(prefix, 120)
FIXTURE_CASE(cancel, 60)
FIXTURE_CASE(drain, 90)
FIXTURE_CASE(fault, 120)
FIXTURE_CASE(soak, 300)
FIXTURE_CASE(openai, 600)
FIXTURE_CASE(schemathesis, 600)

/* a hybrid model (Gated DeltaNet + attention) with a tokenizer: `proven synth`'s tiny qwen3.5
 * (random weights, a synthetic byte-level vocabulary of 1024, no chat template) */
TEST_CASE(hybrid)
{
	static char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/tests/server-hybrid.gguf", build());
	if (!t_exists(path)) {
		char cmd[3 * PATH_MAX], out[4096];
		snprintf(cmd, sizeof cmd, "'%s/proven' synth --arch qwen35 --preset tiny --seed 7 --out '%s' 2>&1", build(), path);
		int rc = t_run_cmd(cmd, out, sizeof out);
		CHECK(rc == 0, "proven synth: %s", out);
		if (rc) return;
	}
	py_case("hybrid", path, 300);
}

static const char* need_real(void)
{
	static char buf[PATH_MAX];
	const char* m = fx_real_model(buf, sizeof buf);
	if (!m) t_skip("the real model is not available (tools/get-model.sh; PV_REAL_MODEL)");
	return m;
}

/* the real Qwen2.5-Coder-0.5B: fewer tokens under the sanitizers, where it runs ~10x slower */
TEST_CASE(real)
{
	const char* m = need_real();
	if (m) py_case_args("real", m, 600, sanitized() ? "--real --quick" : "--real");
}

/* the chat page in headless Chromium (skips without it): the real model's answer when it is here */
TEST_CASE(page)
{
	char buf[PATH_MAX];
	const char* m = sanitized() ? NULL : fx_real_model(buf, sizeof buf);
	if (m) {
		py_case_args("page", m, 600, "--real");
		return;
	}
	if ((m = need_fixture())) py_case("page", m, 300);
}

TEST_CASE(openai_real)
{
	const char* m = need_real();
	if (!m) return;
	if (sanitized()) {
		t_skip("the openai client on the real model runs in the optimized build (make test): under the sanitizers the "
		       "fixture's `openai` case covers the same server code");
		return;
	}
	py_case_args("openai", m, 600, "--real");
}

/* The shared-memory protocol ------------------------------------------------------------------- */

struct srv {
	pid_t pid;
	char dir[PATH_MAX], sock[PATH_MAX + 16];
	int port;
};

/* proven-server --socket DIR/sock (and HTTP on a free port) on the model; 0 when ready. */
static int srv_start(struct srv* s, const char* model, const char* extra1, const char* extra2)
{
	memset(s, 0, sizeof *s);
	snprintf(s->dir, sizeof s->dir, "%s/pv-sock-XXXXXX", t_tmpdir());
	if (!mkdtemp(s->dir)) return -1;
	chmod(s->dir, 0755); /* others may reach the socket file: its own mode must stop them */
	snprintf(s->sock, sizeof s->sock, "%s/sock", s->dir);
	char exe[PATH_MAX + 32], pf[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(exe, sizeof exe, "%s/proven-server", build());
	snprintf(pf, sizeof pf, "%s/port", s->dir);
	snprintf(log, sizeof log, "%s/log", s->dir);
	s->pid = fork();
	if (s->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) dup2(fd, 2), dup2(fd, 1);
		char* argv[] = { exe, "--model", (char*)model, "--port", "0", "--port-file", pf, "--socket", s->sock, "--parallel", "1",
			         (char*)extra1, (char*)extra2, NULL };
		execv(exe, argv);
		_exit(127);
	}
	for (int i = 0; i < 3000; i++) {
		FILE* f = fopen(pf, "r");
		if (f) {
			if (fscanf(f, "%d", &s->port) != 1) s->port = 0;
			fclose(f);
		}
		if (s->port && t_exists(s->sock)) return 0;
		int st;
		if (waitpid(s->pid, &st, WNOHANG) == s->pid) return -1;
		usleep(10000);
	}
	return -1;
}

static int srv_stop(struct srv* s)
{
	int st = -1;
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, &st, 0);
	}
	char cmd[PATH_MAX + 32];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
	if (system(cmd)) {
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* GET path on 127.0.0.1:port; the body (NUL-terminated) in buf; the status, or -1. */
static int http_get(int port, const char* path, char* buf, size_t n)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr*)&a, sizeof a)) {
		if (fd >= 0) close(fd);
		return -1;
	}
	char req[256];
	int k = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	if (write(fd, req, (size_t)k) != k) {
		close(fd);
		return -1;
	}
	size_t got = 0;
	ssize_t r;
	while (got + 1 < n && (r = read(fd, buf + got, n - 1 - got)) > 0) got += (size_t)r;
	buf[got] = 0;
	close(fd);
	int status = -1;
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1) return -1;
	char* body = strstr(buf, "\r\n\r\n");
	if (body) memmove(buf, body + 4, strlen(body + 4) + 1);
	return status;
}

static double metric(int port, const char* name)
{
	static char buf[1 << 16];
	if (http_get(port, "/metrics", buf, sizeof buf) != 200) return -1;
	char key[128];
	snprintf(key, sizeof key, "\nproven:%s ", name);
	char* p = strstr(buf, key);
	return p ? atof(p + strlen(key)) : -1;
}

static const char* need_socket_server(struct srv* s)
{
	const char* m = need_fixture();
	if (!m) return NULL;
	if (srv_start(s, m, NULL, NULL)) {
		CHECK(0, "proven-server with --socket did not start (log in %s)", s->dir);
		return NULL;
	}
	return m;
}

/* Eval through the socket = in-process eval, bit for bit; one crossing per call. */
TEST_CASE(socket_eval)
{
	struct srv sv;
	const char* model = need_socket_server(&sv);
	if (!model) return;
	char err[512];
	pv_model* m = NULL;
	pv_session* ls = NULL;
	pvc_session* rs = NULL;
	CHECK(pv_model_open(&m, model, NULL, err, sizeof err) == 0, "%s", err);
	struct pv_session_params sp = { .n_ctx = 512, .n_threads = 1 };
	CHECK(m && pv_session_new(&ls, m, &sp, err, sizeof err) == 0, "%s", err);
	struct pvc_params cp = { .n_ctx = 512, .max_rows = 32 };
	CHECK(pvc_open(&rs, sv.sock, &cp, err, sizeof err) == 0, "pvc_open: %s", err);
	if (m && ls && rs) {
		const int V = pv_model_get_info(m)->vocab, H = pv_model_get_info(m)->hidden;
		CHECK(pvc_get_info(rs)->vocab == V && pvc_get_info(rs)->hidden == H && pvc_get_info(rs)->n_ctx == 512, "info");
		const char* text = "The quick brown fox jumps over the lazy dog. <|im_start|>user\nHello<|im_end|>";
		int32_t *ids = NULL, *rids = NULL;
		int n = 0, rn = 0;
		pv_tok_encode(pv_model_tokenizer(m), text, strlen(text), 1, &ids, &n, NULL, 0);
		CHECK(pvc_tokenize(rs, text, strlen(text), 1, &rids, &rn) == 0 && rn == n && !memcmp(ids, rids, sizeof(int32_t) * (size_t)n),
		      "pvc_tokenize = pv_tok_encode (%d ids)", n);
		char* back = NULL;
		size_t bl = 0;
		CHECK(pvc_detokenize(rs, ids, n, &back, &bl) == 0 && bl == strlen(text) && !memcmp(back, text, bl), "pvc_detokenize");
		free(back);
		float *la = malloc(sizeof(float) * (size_t)V * 32), *lb = malloc(sizeof(float) * (size_t)V * 32);
		float *ha = malloc(sizeof(float) * (size_t)H * 32), *hb = malloc(sizeof(float) * (size_t)H * 32);
		int32_t aa[32], ab[32];
		struct pvc_stats s0, s1;
		pvc_stats(rs, &s0);
		/* the prompt with outputs for the last 16 rows, then single rows */
		struct pv_eval_out oa = { la, n - 16, aa, n - 16, ha, n - 16 }, ob = { lb, n - 16, ab, n - 16, hb, n - 16 };
		int ra = pv_session_run(ls, ids, n, PV_EVAL_EXACT, &oa), rb = pvc_run(rs, ids, n, PV_EVAL_EXACT, &ob);
		CHECK(ra == 0 && rb == 0, "run: %d %d %s", ra, rb, pvc_error(rs));
		CHECK(!memcmp(la, lb, sizeof(float) * (size_t)V * 16) && !memcmp(aa, ab, sizeof(int32_t) * 16) &&
		              !memcmp(ha, hb, sizeof(float) * (size_t)H * 16),
		      "the prompt's logits, argmax and hidden rows are bitwise the in-process ones");
		int same = 1;
		for (int i = 0; i < 8; i++) {
			int32_t t = aa[15];
			struct pv_eval_out o1 = { la, 0, aa + 15, 0, NULL, 0 }, o2 = { lb, 0, ab + 15, 0, NULL, 0 };
			same &= pv_session_run(ls, &t, 1, PV_EVAL_EXACT, &o1) == 0 && pvc_run(rs, &t, 1, PV_EVAL_EXACT, &o2) == 0 &&
			        !memcmp(la, lb, sizeof(float) * (size_t)V) && aa[15] == ab[15];
		}
		CHECK(same && pvc_length(rs) == pv_session_length(ls), "8 one-row steps: the same logits, length %d", pvc_length(rs));
		pvc_stats(rs, &s1);
		CHECK(s1.crossings - s0.crossings == 9 && s1.runs - s0.runs == 9, "one crossing per forward (%llu for 9)",
		      (unsigned long long)(s1.crossings - s0.crossings));
		/* truncate, checkpoint, rollback, sync */
		CHECK(pvc_truncate(rs, 10) == 0 && pv_session_truncate(ls, 10) == 0 && pvc_length(rs) == 10, "truncate");
		CHECK(pvc_checkpoint(rs) == 0 && pv_session_checkpoint(ls) == 0, "checkpoint");
		CHECK(pvc_run(rs, ids + 10, 5, 0, NULL) == 0 && pv_session_run(ls, ids + 10, 5, 0, NULL) == 0, "run without outputs");
		CHECK(pvc_rollback(rs, 12) == 0 && pv_session_rollback(ls, 12) == 0 && pvc_length(rs) == 12, "rollback");
		int ru = -1, lu = -2;
		struct pv_eval_out s1o = { la, 0, aa, 0, NULL, 0 }, s2o = { lb, 0, ab, 0, NULL, 0 };
		CHECK(pv_session_sync(ls, ids, n, PV_EVAL_EXACT, &s1o, &lu) == 0 && pvc_sync(rs, ids, n, PV_EVAL_EXACT, &s2o, &ru) == 0 &&
		              ru == lu && ru == 12 && !memcmp(la, lb, sizeof(float) * (size_t)V) && aa[0] == ab[0],
		      "sync reuses %d tokens and gives the in-process last row", ru);
		/* bad requests are errors, not crashes */
		CHECK(pvc_run(rs, ids, 0, 0, NULL) == PV_E_INVALID, "an empty run is INVALID");
		int32_t bad = V + 5;
		CHECK(pvc_run(rs, &bad, 1, 0, NULL) == PV_E_INVALID && pvc_error(rs)[0], "a bad id is INVALID: %s", pvc_error(rs));
		struct pv_eval_out big = { la, 0, NULL, 0, NULL, 0 };
		int32_t many[40];
		for (int i = 0; i < 40; i++) many[i] = ids[i % n];
		CHECK(pvc_run(rs, many, 40, 0, &big) == PV_E_INVALID, "more output rows than max_rows is INVALID");
		CHECK(pvc_truncate(rs, 100000) != PV_OK, "truncating beyond the length fails");
		CHECK(pvc_run(rs, ids, 3, 0, NULL) == 0, "the session still works after errors");
		free(la), free(lb), free(ha), free(hb), free(ids), free(rids);
	}
	pvc_close(rs);
	pv_session_free(ls);
	pv_model_close(m);
	CHECK(srv_stop(&sv) == 0, "the server exits 0");
}

/* Generation through the socket = in-process generation; one crossing per request. */
TEST_CASE(socket_generate)
{
	struct srv sv;
	const char* model = need_socket_server(&sv);
	if (!model) return;
	char err[512];
	pv_model* m = NULL;
	pv_session* ls = NULL;
	pvc_session* rs = NULL;
	pv_model_open(&m, model, NULL, err, sizeof err);
	struct pv_session_params sp = { .n_ctx = 1024, .n_threads = 1 };
	if (m) pv_session_new(&ls, m, &sp, err, sizeof err);
	struct pvc_params cp = { .n_ctx = 1024 };
	CHECK(ls && pvc_open(&rs, sv.sock, &cp, err, sizeof err) == 0, "%s", err);
	if (ls && rs) {
		const struct pv_tok* tok = pv_model_tokenizer(m);
		const int nv = pv_tok_n_vocab(tok);
		int32_t* ids = NULL;
		int n = 0;
		pv_tok_encode(tok, "def fibonacci(n): fibonacci fibonacci", 37, 1, &ids, &n, NULL, 0);
		const int32_t* eos;
		int ne = pv_model_eos(m, &eos);
		struct {
			float t;
			int k, draft;
		} runs[] = { { 0, 0, 0 }, { 0.8f, 20, 0 }, { 0, 0, 1 }, { 1.0f, 40, 1 } };
		for (int r = 0; r < 4; r++) {
			struct pv_sampling smp = { runs[r].t, runs[r].k, 1.0f, 0, 99, nv };
			struct pv_spec_params spec = { .draft = runs[r].draft ? PV_DRAFT_NGRAM : PV_DRAFT_NONE };
			pv_generator* g = NULL;
			int32_t local[64], remote[64];
			int nl = 0, stop = 0;
			pv_session_truncate(ls, 0);
			if (pv_generator_new(&g, ls, &smp, &spec, err, sizeof err)) break;
			int32_t buf[17];
			int nb = 1;
			pv_generator_prompt(g, ids, n, &buf[0]);
			while (!stop) {
				for (int i = 0; i < nb && !stop; i++) {
					for (int e = 0; e < ne; e++) stop |= buf[i] == eos[e];
					if (!stop) local[nl++] = buf[i];
					if (nl == 48) stop = 1;
				}
				if (!stop && pv_generator_step(g, buf, 48 - nl < 17 ? 48 - nl : 17, &nb)) break;
			}
			pv_generator_free(g);
			struct pvc_gen_params gp = { 48, runs[r].t, runs[r].k, 1.0f, 0, 99, runs[r].draft, 0 };
			struct pvc_gen_result res;
			struct pvc_stats s0, s1;
			pvc_stats(rs, &s0);
			int rc = pvc_generate(rs, ids, n, &gp, remote, &res);
			pvc_stats(rs, &s1);
			CHECK(rc == 0 && res.n == nl && !memcmp(local, remote, sizeof(int32_t) * (size_t)nl),
			      "generation %d (temp %.1f, top-k %d, %s): %d remote ids = %d in-process ids", r, runs[r].t, runs[r].k,
			      runs[r].draft ? "n-gram drafts" : "plain", res.n, nl);
			CHECK(s1.crossings - s0.crossings == 1, "one crossing for a generation of %d tokens", res.n);
			if (runs[r].draft) CHECK(res.drafted >= res.accepted, "drafted %lld, accepted %lld", (long long)res.drafted, (long long)res.accepted);
		}
		free(ids);
	}
	pvc_close(rs);
	pv_session_free(ls);
	pv_model_close(m);
	CHECK(srv_stop(&sv) == 0, "the server exits 0");
}

/* A client killed in the middle of a generation: its session goes, the others go on. */
TEST_CASE(socket_crash)
{
	struct srv sv;
	if (!need_socket_server(&sv)) return;
	char err[512];
	pvc_session* other = NULL;
	CHECK(pvc_open(&other, sv.sock, NULL, err, sizeof err) == 0, "%s", err);
	pid_t child = fork();
	if (child == 0) {
		pvc_session* s = NULL;
		if (pvc_open(&s, sv.sock, NULL, err, sizeof err)) _exit(3);
		int32_t p[4] = { 9707, 1879, 11, 1052 }, out[4000];
		struct pvc_gen_params gp = { 4000, 0.7f, 20, 1.0f, 0, 5, 0, 0 };
		struct pvc_gen_result r;
		pvc_generate(s, p, 4, &gp, out, &r);
		_exit(0);
	}
	/* wait until both sessions are open and the child's generation runs, then kill it */
	double t0 = (double)clock() / CLOCKS_PER_SEC;
	for (int i = 0; i < 500 && metric(sv.port, "socket_sessions") < 2; i++) usleep(10000);
	CHECK(metric(sv.port, "socket_sessions") == 2, "two sessions open");
	usleep(200000);
	kill(child, SIGKILL);
	int st;
	waitpid(child, &st, 0);
	CHECK(WIFSIGNALED(st), "the child was killed mid-request");
	int i = 0;
	for (; i < 300 && metric(sv.port, "socket_sessions") != 1; i++) usleep(10000);
	CHECK(metric(sv.port, "socket_sessions") == 1, "its session is gone after %d ms", i * 10);
	(void)t0;
	int32_t p[3] = { 9707, 1879, 11 }, out[8];
	struct pvc_gen_params gp = { 8, 0, 0, 1.0f, 0, 0, 0, 0 };
	struct pvc_gen_result r;
	CHECK(other && pvc_generate(other, p, 3, &gp, out, &r) == 0 && r.n == 8, "the other client goes on: %s", other ? pvc_error(other) : "");
	pvc_close(other);
	for (i = 0; i < 300 && metric(sv.port, "socket_sessions") != 0; i++) usleep(10000);
	CHECK(metric(sv.port, "socket_sessions") == 0, "closing frees the session");
	CHECK(srv_stop(&sv) == 0, "the server exits 0");
}

/* One raw request on a proven_wire.h connection: len bytes out, one reply in (its status; a
 * passed descriptor in *fd_out when asked). -1000 when no complete reply came back. */
static int wire_call(int fd, const void* msg, size_t len, struct pvw_rep* rep, int* fd_out)
{
	if (send(fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) return -1000;
	struct iovec iov = { rep, sizeof *rep };
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
	ssize_t k = recvmsg(fd, &m, 0);
	for (struct cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int got;
			memcpy(&got, CMSG_DATA(c), sizeof got);
			if (fd_out) *fd_out = got;
			else close(got);
		}
	if (k != (ssize_t)sizeof *rep || rep->magic != PVW_MAGIC) return -1000;
	return rep->status;
}

static int wire_connect(const char* path)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr*)&a, sizeof a)) {
		close(fd);
		return -1;
	}
	struct timeval tv = { 30, 0 }; /* a server that never answers fails the case, not the run */
	if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return fd;
}

static uint64_t rng_next(uint64_t* s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

struct scribbler {
	volatile int32_t* ids;
	int n;
	atomic_int stop;
};

/* Writes random ids (valid and not) into the tokens area while the server reads it. */
static void* scribble(void* arg)
{
	struct scribbler* sc = arg;
	uint64_t r = 0x9e3779b97f4a7c15ull;
	while (!atomic_load(&sc->stop))
		for (int i = 0; i < sc->n; i++) {
			uint64_t x = rng_next(&r);
			sc->ids[i] = (x & 3) ? (int32_t)(x >> 32) : (int32_t)((x >> 32) % 1000);
		}
	return NULL;
}

/* Bytes that are not a well-formed request, and well-formed requests with random fields, each
 * get one reply with a status (an error for the bad ones); a client writing the segment while
 * the server works never crashes it; afterwards the server serves a normal client. */
TEST_CASE(socket_malformed)
{
	struct srv sv;
	if (!need_socket_server(&sv)) return;
	int fd = wire_connect(sv.sock);
	CHECK(fd >= 0, "connect to %s", sv.sock);
	if (fd < 0) {
		srv_stop(&sv);
		return;
	}
	struct pvw_req q;
	struct pvw_rep rep;
	unsigned char big[sizeof q + 64];
	memset(big, 0, sizeof big);
	memset(&q, 0, sizeof q);
	q.magic = PVW_MAGIC;
	q.op = PVW_HELLO;
	memcpy(big, &q, sizeof q);
	CHECK(wire_call(fd, big, 10, &rep, NULL) == PV_E_INVALID && strstr(rep.err, "size"), "a short message: %s", rep.err);
	CHECK(wire_call(fd, big, sizeof big, &rep, NULL) == PV_E_INVALID && strstr(rep.err, "size"), "a long message: %s", rep.err);
	struct pvw_req bad = q;
	bad.magic = 0x12345678;
	CHECK(wire_call(fd, &bad, sizeof bad, &rep, NULL) == PV_E_INVALID && strstr(rep.err, "magic"), "bad magic: %s", rep.err);
	bad = q;
	bad.op = PVW_RUN;
	bad.n = 1;
	CHECK(wire_call(fd, &bad, sizeof bad, &rep, NULL) == PV_E_INVALID && strstr(rep.err, "hello"), "run before hello: %s", rep.err);
	bad = q;
	bad.max_rows = 1 << 20;
	CHECK(wire_call(fd, &bad, sizeof bad, &rep, NULL) == PV_E_INVALID, "hello with 2^20 rows: %s", rep.err);
	bad.max_rows = 8;
	bad.n_ctx = -5;
	CHECK(wire_call(fd, &bad, sizeof bad, &rep, NULL) == PV_E_INVALID, "hello with n_ctx -5: %s", rep.err);
	q.n_ctx = 64;
	q.max_rows = 8;
	int mfd = -1;
	struct pvw_rep h;
	CHECK(wire_call(fd, &q, sizeof q, &h, &mfd) == 0 && mfd >= 0 && h.n_ctx == 64, "hello: %s", h.err);
	CHECK(wire_call(fd, &q, sizeof q, &rep, NULL) == PV_E_INVALID && strstr(rep.err, "twice"), "hello twice: %s", rep.err);
	unsigned char* map = mfd >= 0 ? mmap(NULL, h.shm_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0) : MAP_FAILED;
	CHECK(map != MAP_FAILED, "the segment maps");
	const int V = h.vocab, n_ctx = h.n_ctx;
	if (map != MAP_FAILED) {
		struct scribbler sc = { (volatile int32_t*)(map + h.off_tokens), n_ctx, 0 };
		memset(map + h.off_text, 'a', 4096);
		uint64_t r = 12345;
		int replies = 0, ok = 0, errs = 0, scribbling = 0;
		pthread_t th;
		for (int i = 0; i < 400; i++) {
			if (i == 200) scribbling = !pthread_create(&th, NULL, scribble, &sc); /* the second half races the server */
			if (i < 200)
				for (int k = 0; k < n_ctx; k++) ((int32_t*)(map + h.off_tokens))[k] = (int32_t)(rng_next(&r) % (uint64_t)(V + 8));
			struct pvw_req x;
			memset(&x, 0, sizeof x);
			x.magic = PVW_MAGIC;
			x.op = (uint32_t)(2 + rng_next(&r) % 9); /* run .. detokenize, and one unknown op */
			/* small values mostly, the edges and garbage sometimes */
			int32_t* f[] = { &x.n, &x.logits_row0, &x.argmax_row0, &x.hidden_row0, &x.max_tokens, &x.top_k, &x.draft, &x.draft_max, &x.parse_special };
			for (size_t k = 0; k < sizeof f / sizeof *f; k++) {
				uint64_t v = rng_next(&r);
				*f[k] = (v & 7) == 0 ? (int32_t)(v >> 32) : (v & 7) == 1 ? -1 : (int32_t)((v >> 8) % 70);
			}
			if (x.op == PVW_GENERATE && x.max_tokens > 16) x.max_tokens = 16; /* bounded time */
			x.flags = (uint32_t)(rng_next(&r) % 5);
			x.want = (uint32_t)(rng_next(&r) % 9);
			uint64_t v = rng_next(&r);
			x.temperature = (v & 3) == 0 ? NAN : (float)(v % 300) / 100.0f - 0.5f;
			x.top_p = (float)(rng_next(&r) % 130) / 100.0f;
			x.min_p = (float)(rng_next(&r) % 120) / 100.0f;
			x.seed = rng_next(&r);
			int st = wire_call(fd, &x, sizeof x, &rep, NULL);
			replies += st != -1000;
			ok += st == 0;
			errs += st != 0 && st != -1000 && rep.err[0] != 0;
			if (st == -1000) break;
		}
		if (scribbling) {
			atomic_store(&sc.stop, 1);
			pthread_join(th, NULL);
		}
		CHECK(replies == 400, "400 random requests, 400 replies (%d)", replies);
		CHECK(ok > 20 && errs > 100 && ok + errs == replies, "%d served, %d refused with a message", ok, errs);
		munmap(map, h.shm_bytes);
	}
	if (mfd >= 0) close(mfd);
	close(fd);
	char body[256];
	CHECK(http_get(sv.port, "/health", body, sizeof body) == 200, "the server is alive");
	char err[512];
	pvc_session* s = NULL;
	int32_t p[3] = { 9707, 1879, 11 }, out[8];
	struct pvc_gen_params gp = { 8, 0, 0, 1.0f, 0, 0, 0, 0 };
	struct pvc_gen_result gr;
	CHECK(pvc_open(&s, sv.sock, NULL, err, sizeof err) == 0 && pvc_generate(s, p, 3, &gp, out, &gr) == 0 && gr.n == 8,
	      "a normal client is served afterwards: %s", s ? pvc_error(s) : err);
	pvc_close(s);
	for (int i = 0; i < 300 && metric(sv.port, "socket_sessions") != 0; i++) usleep(10000);
	CHECK(metric(sv.port, "socket_sessions") == 0, "every session is freed");
	/* connections in a loop: the 65th is refused with a reply; closing them makes room again */
	int many[64], n_open = 0;
	for (int i = 0; i < 64; i++)
		if ((many[i] = wire_connect(sv.sock)) >= 0) n_open++;
	usleep(100000);
	pvc_session* s65 = NULL;
	int rc65 = pvc_open(&s65, sv.sock, NULL, err, sizeof err);
	CHECK(n_open == 64 && rc65 == PV_E_INVALID && strstr(err, "socket clients"), "64 idle connections, the next refused: %s", err);
	pvc_close(s65);
	for (int i = 0; i < 64; i++)
		if (many[i] >= 0) close(many[i]);
	s = NULL;
	int rc = -1;
	for (int i = 0; i < 100 && rc; i++) {
		rc = pvc_open(&s, sv.sock, NULL, err, sizeof err);
		if (rc) {
			pvc_close(s);
			s = NULL;
			usleep(20000);
		}
	}
	CHECK(rc == 0, "served again once they are closed: %s", err);
	pvc_close(s);
	CHECK(srv_stop(&sv) == 0, "the server exits 0");
}

/* Another user's process cannot attach: the socket file is 0600, and the peer's uid is checked. */
TEST_CASE(socket_other_user)
{
	const char* model = need_fixture();
	if (!model) return;
	char cmd[4 * PATH_MAX], out[4096], err[512];
	struct srv sv;
	if (getuid() == 0 && t_exists("/usr/bin/setpriv")) {
		CHECK(srv_start(&sv, model, NULL, NULL) == 0, "server");
		snprintf(cmd, sizeof cmd, "setpriv --reuid=65534 --regid=65534 --clear-groups '%s/proven' client --socket '%s' --prompt-ids 1,2,3 --max-tokens 2 2>&1",
		         build(), sv.sock);
		int rc = t_run_cmd(cmd, out, sizeof out);
		CHECK(rc != 0 && strstr(out, "Permission denied"), "uid 65534 cannot connect (rc %d: %s)", rc, out);
		CHECK(srv_stop(&sv) == 0, "the server exits 0");
		/* the socket given to uid 65534: that uid is served, root (who can open any file) is not */
		CHECK(srv_start(&sv, model, "--socket-uid", "65534") == 0, "server for uid 65534");
		pvc_session* s = NULL;
		int rc2 = pvc_open(&s, sv.sock, NULL, err, sizeof err);
		CHECK(rc2 == PV_E_INVALID && strstr(err, "uid 0"), "root is refused by the SO_PEERCRED check: %s", err);
		pvc_close(s);
		snprintf(cmd, sizeof cmd, "setpriv --reuid=65534 --regid=65534 --clear-groups '%s/proven' client --socket '%s' --prompt-ids 1,2,3 --max-tokens 2 2>&1",
		         build(), sv.sock);
		rc = t_run_cmd(cmd, out, sizeof out);
		CHECK(rc == 0, "uid 65534 is served (rc %d: %s)", rc, out);
		CHECK(srv_stop(&sv) == 0, "the server exits 0");
		return;
	}
	/* not root: the check itself, with an allowed uid that is not ours */
	char uid[32];
	snprintf(uid, sizeof uid, "%u", (unsigned)getuid() + 1);
	CHECK(srv_start(&sv, model, "--socket-uid", uid) == 0, "server");
	pvc_session* s = NULL;
	CHECK(pvc_open(&s, sv.sock, NULL, err, sizeof err) == PV_E_INVALID && strstr(err, "refused"), "refused: %s", err);
	pvc_close(s);
	CHECK(srv_stop(&sv) == 0, "the server exits 0");
}

TEST_MAIN("test_server")
