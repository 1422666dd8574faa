/*
 * receipt.c: the receipt document: its field table (JSON check, SQL columns, markdown), the host
 * readings around a run, and the builder the commands use (receipt.h).
 */
#include "evidence.h"
#include "proven_dev.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ==== The field table ========================================================================= */

const struct ev_field ev_receipt_fields[] = {
	{ "schema", "string", 1, NULL, "\"" EV_RECEIPT_SCHEMA "\"" },
	{ "id", "integer", 0, NULL, "the store's id (set when stored; absent before)" },
	{ "sha256", "string", 0, NULL, "sha256 of the document without `id` and `sha256` (set when stored)" },
	{ "created", "string", 1, "created", "UTC time the run ended, ISO 8601" },
	{ "kind", "string", 1, "kind",
	  "what wrote it: bench, bench.spec, bench.workload, court.spec, court.ab, perplexity, server.bench, import; peer.bench: a peer engine's figures (llama.cpp) converted from a committed table" },
	{ "command", "string", 1, NULL, "the command line" },
	{ "status", "string", 1, "status", "ok, or what failed" },
	{ "imported", "boolean", 1, "imported", "true: copied from a committed file (docs/results), not measured here" },
	{ "source", "any", 0, NULL, "imported: {\"file\", \"sha256\", \"line\"} of the record" },
	{ "runtime", "object", 1, NULL, "the runtime identity" },
	{ "runtime.commit", "string", 1, "commit_id", "git commit (12 hex) of the build, without -dirty" },
	{ "runtime.dirty", "boolean", 1, "dirty", "the build's tree had uncommitted changes" },
	{ "runtime.compiler", "string", 1, NULL, "\"gcc 12.2.0\"" },
	{ "runtime.cflags", "string", 1, NULL, "C compiler flags" },
	{ "runtime.nvcc", "string", 0, NULL, "nvcc's version line, \"none\" without CUDA" },
	{ "runtime.nvcc_flags", "string", 0, NULL, "nvcc flags of the CUDA backend" },
	{ "runtime.backend", "string", 1, "backend", "cpu or cuda: where the model ran" },
	{ "runtime.knobs", "object", 1, NULL, "every tuning switch in effect, name -> value (pv_model_knobs)" },
	{ "runtime.threads", "integer", 0, NULL, "CPU threads of the session" },
	{ "runtime.cpu_model", "string", 1, NULL, "/proc/cpuinfo model name" },
	{ "runtime.isa", "string", 1, NULL, "the CPU kernel set used" },
	{ "runtime.gpu", "any", 0, NULL, "{name, cc, driver, runtime, sm_clock_mhz, mem_clock_mhz, sms} or null" },
	{ "model", "any", 0, NULL, "the model's identity; null for a run without one" },
	{ "model.path", "string", 0, NULL, "as given" },
	{ "model.sha256", "string", 0, "model_sha256", "sha256 of the weights as stored (pv_model_digest)" },
	{ "model.arch", "string", 0, "model_arch", "architecture (HF model_type)" },
	{ "model.dtype", "string", 0, NULL, "bf16, f16, f32 or mixed" },
	{ "model.type_mix", "object", 0, NULL, "tensor type -> count, read from the file" },
	{ "model.n_params", "integer", 0, NULL, "parameters" },
	{ "host", "object", 1, NULL, "the host around the run" },
	{ "host.cpus", "integer", 1, NULL, "online CPUs" },
	{ "host.before", "object", 1, NULL, "{load1, load5, load15, mem_avail_mib, cpu_mhz, gpu_temp_c, gpu_sm_mhz, gpu_mem_mhz}" },
	{ "host.after", "object", 1, NULL, "the same, after the run" },
	{ "host.wall_s", "number", 1, NULL, "wall time of the run" },
	{ "host.self_cpu_s", "number", 1, NULL, "CPU time of this process and its children" },
	{ "host.foreign_cpu_s", "number", 1, NULL, "CPU time of every other process during the run (/proc/stat)" },
	{ "host.foreign_share", "number", 1, "foreign_share", "foreign_cpu_s / (wall_s x cpus)" },
	{ "workload", "object", 1, NULL, "what was run" },
	{ "workload.class", "string", 1, "workload_class", "synthetic, a prompt class (tool, chat, code, mtbench) or a workload name" },
	{ "workload.prompt_digest", "string", 1, NULL, "sha256 of the prompt set (the token ids, or the prompts' digests)" },
	{ "workload.n_prompt", "integer", 1, NULL, "prompt tokens (mean per prompt for a prompt set)" },
	{ "workload.n_gen", "integer", 1, NULL, "tokens generated per run" },
	{ "workload.depth", "integer", 0, NULL, "context filled before the timed part" },
	{ "workload.seed", "integer", 0, NULL, "seed (0: greedy)" },
	{ "workload.reps", "integer", 0, NULL, "measured repetitions" },
	{ "workload.warmup", "integer", 0, NULL, "warm-up runs discarded" },
	{ "samples", "array", 1, NULL, "raw samples: [{name, unit, values:[...]}]" },
	{ "figures", "array", 1, NULL, "[{name, scope, unit, value, sd, n}]; scope one of: " EV_SCOPES },
	{ "counts", "object", 1, NULL,
	  "launches, syncs, crossings (host-device), drafted, accepted, rollbacks, fallbacks, tokens (per run or total, "
	  "as named)" },
	{ "args", "object", 0, NULL, "the options that define the run (draft, knobs, rollback, ...)" },
	{ "extra", "object", 0, NULL, "anything else the command reports" },
};
const int ev_receipt_n_fields = (int)(sizeof ev_receipt_fields / sizeof ev_receipt_fields[0]);

static const char* scopes[] = { "kernel", "decode-only", "observed", "end-to-end", "quality", "court" };

int ev_scope_ok(const char* s)
{
	for (size_t i = 0; s && i < sizeof scopes / sizeof scopes[0]; i++)
		if (!strcmp(s, scopes[i])) return 1;
	return 0;
}

/* doc's value at a dotted path; knob names have dots too, so only the table's paths are walked */
const json_t* ev_field_value(const json_t* doc, const char* path)
{
	char buf[128];
	snprintf(buf, sizeof buf, "%s", path);
	const json_t* v = doc;
	for (char *p = buf, *dot; v && p; p = dot ? dot + 1 : NULL) {
		dot = strchr(p, '.');
		if (dot) *dot = 0;
		v = json_is_object(v) ? json_object_get(v, p) : NULL;
	}
	return v;
}

static int type_ok(const json_t* v, const char* t)
{
	if (!strcmp(t, "any")) return 1;
	if (!strcmp(t, "string")) return json_is_string(v);
	if (!strcmp(t, "integer")) return json_is_integer(v);
	if (!strcmp(t, "number")) return json_is_number(v);
	if (!strcmp(t, "boolean")) return json_is_boolean(v);
	if (!strcmp(t, "object")) return json_is_object(v);
	if (!strcmp(t, "array")) return json_is_array(v);
	return 0;
}

int ev_receipt_check(const json_t* doc, char* err, size_t errlen)
{
	if (!json_is_object(doc)) {
		snprintf(err, errlen, "a receipt is a JSON object");
		return -1;
	}
	for (int i = 0; i < ev_receipt_n_fields; i++) {
		const struct ev_field* f = &ev_receipt_fields[i];
		/* a field under an optional null parent (model.* of a run without a model) is not needed */
		const char* dot = strchr(f->path, '.');
		if (dot) {
			char parent[64];
			snprintf(parent, sizeof parent, "%.*s", (int)(dot - f->path), f->path);
			const json_t* pv = ev_field_value(doc, parent);
			if (!pv || json_is_null(pv)) continue;
		}
		const json_t* v = ev_field_value(doc, f->path);
		if (!v || json_is_null(v)) {
			if (f->required) {
				snprintf(err, errlen, "receipt field %s is missing", f->path);
				return -1;
			}
			continue;
		}
		if (!type_ok(v, f->type)) {
			snprintf(err, errlen, "receipt field %s must be %s", f->path, f->type);
			return -1;
		}
	}
	if (strcmp(json_string_value(json_object_get(doc, "schema")), EV_RECEIPT_SCHEMA)) {
		snprintf(err, errlen, "receipt schema is not %s", EV_RECEIPT_SCHEMA);
		return -1;
	}
	size_t i;
	json_t* fg;
	json_array_foreach(json_object_get(doc, "figures"), i, fg)
	{
		const char* name = json_string_value(json_object_get(fg, "name"));
		const char* scope = json_string_value(json_object_get(fg, "scope"));
		const char* unit = json_string_value(json_object_get(fg, "unit"));
		if (!name || !unit || !unit[0] || !json_is_number(json_object_get(fg, "value"))) {
			snprintf(err, errlen, "figure %zu needs a name, a unit and a value", i);
			return -1;
		}
		if (!ev_scope_ok(scope)) {
			snprintf(err, errlen, "figure %s has no valid scope (%s)", name, EV_SCOPES);
			return -1;
		}
	}
	return 0;
}

void ev_receipt_schema_md(FILE* f)
{
	fprintf(f, "# The receipt schema (`%s`)\n\n", EV_RECEIPT_SCHEMA);
	fprintf(f, "Generated from the field table in `evidence/receipt.c` (`proven receipts schema`); `make test` checks\n"
	           "that this file is its output. `proven receipts export` writes one receipt per line in this form;\n"
	           "fields are only ever added (a reader ignores the ones it does not know).\n\n");
	fprintf(f, "| field | type | required | indexed column | meaning |\n| --- | --- | --- | --- | --- |\n");
	for (int i = 0; i < ev_receipt_n_fields; i++) {
		const struct ev_field* x = &ev_receipt_fields[i];
		fprintf(f, "| `%s` | %s | %s | %s | ", x->path, x->type, x->required ? "yes" : "", x->column ? x->column : "");
		for (const char* p = x->doc; *p; p++) fputs(*p == '|' ? "\\|" : (char[]){ *p, 0 }, f);
		fputs(" |\n", f);
	}
	fprintf(f, "\nScopes: %s. A figure's `name` is what it measures (`pp`, `tg`, `e2e`, `ppl`, ...), its `unit`\n"
	           "what it counts in (`tok/s`, `ratio`, `ppl`).\n", EV_SCOPES);
}

/* ==== SHA-256 (FIPS 180-4) ==================================================================== */

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
	0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
	0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
	0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
	0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(struct ev_sha256* s, const unsigned char* p)
{
	uint32_t w[64], a[8];
	for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(a, s->h, sizeof a);
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = a[7] + (ROR(a[4], 6) ^ ROR(a[4], 11) ^ ROR(a[4], 25)) + ((a[4] & a[5]) ^ (~a[4] & a[6])) + K[i] + w[i];
		uint32_t t2 = (ROR(a[0], 2) ^ ROR(a[0], 13) ^ ROR(a[0], 22)) + ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
		memmove(a + 1, a, 7 * sizeof a[0]);
		a[4] += t1;
		a[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++) s->h[i] += a[i];
}

void ev_sha256_init(struct ev_sha256* s)
{
	static const uint32_t h0[8] = { 0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19 };
	memcpy(s->h, h0, sizeof h0);
	s->len = 0;
	s->fill = 0;
}

void ev_sha256_update(struct ev_sha256* s, const void* data, size_t n)
{
	const unsigned char* p = data;
	s->len += n;
	while (n) {
		size_t k = 64 - s->fill < n ? 64 - s->fill : n;
		memcpy(s->buf + s->fill, p, k);
		s->fill += k;
		p += k;
		n -= k;
		if (s->fill == 64) {
			block(s, s->buf);
			s->fill = 0;
		}
	}
}

void ev_sha256_final_hex(struct ev_sha256* s, char hex[65])
{
	uint64_t bits = s->len * 8;
	unsigned char pad = 0x80, zero = 0, len[8];
	ev_sha256_update(s, &pad, 1);
	while (s->fill != 56) ev_sha256_update(s, &zero, 1);
	for (int i = 0; i < 8; i++) len[i] = (unsigned char)(bits >> (56 - 8 * i));
	ev_sha256_update(s, len, 8);
	for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", s->h[i]);
}

void ev_sha256_hex(const void* data, size_t n, char hex[65])
{
	struct ev_sha256 s;
	ev_sha256_init(&s);
	ev_sha256_update(&s, data, n);
	ev_sha256_final_hex(&s, hex);
}

int ev_sha256_file(const char* path, char hex[65])
{
	FILE* f = fopen(path, "rb");
	if (!f) return -1;
	struct ev_sha256 s;
	ev_sha256_init(&s);
	unsigned char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0) ev_sha256_update(&s, buf, n);
	int bad = ferror(f);
	fclose(f);
	if (bad) return -1;
	ev_sha256_final_hex(&s, hex);
	return 0;
}

void ev_sha256_json(const json_t* v, char hex[65])
{
	char* s = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENCODE_ANY);
	ev_sha256_hex(s ? s : "", s ? strlen(s) : 0, hex);
	free(s);
}

void ev_utc_now(char buf[32])
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ==== The host ================================================================================ */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void gpu_read(struct ev_host* h)
{
	h->gpu_temp_c = h->gpu_sm_mhz = h->gpu_mem_mhz = -1;
	if (access("/usr/bin/nvidia-smi", X_OK) && access("/usr/local/bin/nvidia-smi", X_OK)) return;
	FILE* p = popen("nvidia-smi --query-gpu=temperature.gpu,clocks.sm,clocks.mem --format=csv,noheader,nounits -i 0 2>/dev/null", "r");
	if (!p) return;
	int t, s, m;
	if (fscanf(p, "%d, %d, %d", &t, &s, &m) == 3) {
		h->gpu_temp_c = t;
		h->gpu_sm_mhz = s;
		h->gpu_mem_mhz = m;
	}
	pclose(p);
}

void ev_host_read(struct ev_host* h, int with_gpu)
{
	memset(h, 0, sizeof *h);
	h->gpu_temp_c = h->gpu_sm_mhz = h->gpu_mem_mhz = -1;
	FILE* f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf %lf %lf", &h->load1, &h->load5, &h->load15) != 3) h->load1 = h->load5 = h->load15 = 0;
		fclose(f);
	}
	char line[512];
	if ((f = fopen("/proc/meminfo", "r"))) {
		while (fgets(line, sizeof line, f)) {
			unsigned long long kb;
			if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) h->mem_avail_mib = kb / 1024.0;
		}
		fclose(f);
	}
	if ((f = fopen("/proc/cpuinfo", "r"))) {
		double sum = 0, mhz;
		int n = 0;
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 || sscanf(line, "cpu MHz\t: %lf", &mhz) == 1) sum += mhz, n++;
		h->cpu_mhz = n ? sum / n : 0;
		fclose(f);
	}
	if ((f = fopen("/proc/stat", "r"))) {
		unsigned long long v[10] = { 0 };
		if (fgets(line, sizeof line, f) &&
		    sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) >= 4)
			h->busy_ticks = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; /* user nice system irq softirq steal */
		fclose(f);
	}
	struct rusage a, b;
	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	h->self_cpu_s = a.ru_utime.tv_sec + a.ru_utime.tv_usec * 1e-6 + a.ru_stime.tv_sec + a.ru_stime.tv_usec * 1e-6 +
	                b.ru_utime.tv_sec + b.ru_utime.tv_usec * 1e-6 + b.ru_stime.tv_sec + b.ru_stime.tv_usec * 1e-6;
	h->wall = now_s();
	if (with_gpu) gpu_read(h);
}

double ev_foreign_cpu_s(const struct ev_host* a, const struct ev_host* b)
{
	double hz = (double)sysconf(_SC_CLK_TCK);
	double busy = (double)(b->busy_ticks - a->busy_ticks) / (hz > 0 ? hz : 100);
	double x = busy - (b->self_cpu_s - a->self_cpu_s);
	return x > 0 ? x : 0;
}

static json_t* num_or_null(double v, int ok) { return ok ? json_real(v) : json_null(); }

json_t* ev_host_json(const struct ev_host* h)
{
	return json_pack("{s:f,s:f,s:f,s:f,s:o,s:o,s:o,s:o}", "load1", h->load1, "load5", h->load5, "load15", h->load15,
	                 "mem_avail_mib", h->mem_avail_mib, "cpu_mhz", num_or_null(h->cpu_mhz, h->cpu_mhz > 0), "gpu_temp_c",
	                 h->gpu_temp_c >= 0 ? json_integer(h->gpu_temp_c) : json_null(), "gpu_sm_mhz",
	                 h->gpu_sm_mhz >= 0 ? json_integer(h->gpu_sm_mhz) : json_null(), "gpu_mem_mhz",
	                 h->gpu_mem_mhz >= 0 ? json_integer(h->gpu_mem_mhz) : json_null());
}

/* ==== The builder ============================================================================= */

struct ev_receipt {
	json_t* doc;
	struct ev_host before;
	int gpu;
};

static void cpu_model(char* buf, size_t n)
{
	snprintf(buf, n, "unknown");
	FILE* f = fopen("/proc/cpuinfo", "r");
	if (!f) return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		char* p = strchr(line, ':');
		if (!strncmp(line, "model name", 10) && p) {
			for (p++; *p == ' '; p++) {}
			p[strcspn(p, "\n")] = 0;
			snprintf(buf, n, "%s", p);
			break;
		}
	}
	fclose(f);
}

ev_receipt* ev_receipt_begin(const char* kind, int argc, char** argv)
{
	if (!ev_ledger_path()) return NULL;
	ev_receipt* r = calloc(1, sizeof *r);
	if (!r) return NULL;
	size_t len = 8;
	for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 3;
	char* cmd = malloc(len);
	if (!cmd) {
		free(r);
		return NULL;
	}
	strcpy(cmd, "proven");
	for (int i = 0; i < argc; i++) {
		int q = !argv[i][0] || strpbrk(argv[i], " \t\"'") != NULL;
		strcat(cmd, q ? " '" : " ");
		strcat(cmd, argv[i]);
		if (q) strcat(cmd, "'");
	}
	r->doc = json_pack("{s:s,s:s,s:s,s:s,s:b,s:{},s:n,s:{},s:[],s:[],s:{},s:{},s:{}}", "schema", EV_RECEIPT_SCHEMA, "kind", kind,
	                   "command", cmd, "status", "running", "imported", 0, "runtime", "model", "host", "samples", "figures",
	                   "counts", "args", "extra");
	free(cmd);
	json_object_set_new(r->doc, "workload",
	                    json_pack("{s:s,s:s,s:i,s:i}", "class", "none", "prompt_digest", "none", "n_prompt", 0, "n_gen", 0));
	ev_receipt_runtime(r, NULL, "cpu", 0);
	ev_host_read(&r->before, 0);
	return r;
}

void ev_receipt_runtime(ev_receipt* r, const pv_model* m, const char* backend, int threads)
{
	if (!r) return;
	const struct pv_build_info* bi = pv_build_info();
	char commit[64], cpu[256];
	snprintf(commit, sizeof commit, "%s", bi->commit);
	int dirty = 0;
	char* d = strstr(commit, "-dirty");
	if (d) {
		*d = 0;
		dirty = 1;
	}
	cpu_model(cpu, sizeof cpu);
	json_t* knobs = json_object();
	if (m) {
		const struct pv_knob* kn;
		int nk = pv_model_knobs(m, &kn);
		for (int i = 0; i < nk; i++) json_object_set_new(knobs, kn[i].name, json_integer(kn[i].value));
	}
	backend = backend ? backend : "cpu";
	json_t* rt = json_pack("{s:s,s:b,s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:s}", "commit", commit, "dirty", dirty, "compiler", bi->compiler,
	                       "cflags", bi->cflags, "nvcc", bi->nvcc, "nvcc_flags", bi->nvcc_flags, "backend", backend, "backends",
	                       bi->backends, "knobs", knobs, "cpu_model", cpu, "isa", bi->cpu_isa);
	if (threads > 0) json_object_set_new(rt, "threads", json_integer(threads));
	json_t* gpu = json_null();
	r->gpu = !strcmp(backend, "cuda");
	struct pv_device_info di;
	char err[256];
	if (r->gpu && pv_device_info("cuda", &di, err, sizeof err) == 0)
		gpu = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i}", "name", di.name, "cc", (char[16]){ 0 }, "driver", di.driver_version, "runtime",
		                di.runtime_version, "sm_clock_mhz", di.sm_clock_mhz, "mem_clock_mhz", di.mem_clock_mhz, "sms", di.sm_count);
	if (json_is_object(gpu)) {
		char cc[16];
		snprintf(cc, sizeof cc, "%d.%d", di.cc_major, di.cc_minor);
		json_object_set_new(gpu, "cc", json_string(cc));
	}
	json_object_set_new(rt, "gpu", gpu);
	json_object_set_new(r->doc, "runtime", rt);
	if (r->gpu) gpu_read(&r->before);
}

/* The tensor types of a GGUF file or a safetensors directory, name -> count. */
static const char* gguf_type_name(uint32_t t)
{
	static const char* names[] = { "f32", "f16", "q4_0", "q4_1", "4", "5", "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k",
		                       "q5_k", "q6_k", "q8_k", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl", "iq3_s", "iq2_s",
		                       "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m", "bf16" };
	return t < sizeof names / sizeof names[0] ? names[t] : "other";
}

static int rd(FILE* f, void* p, size_t n) { return fread(p, 1, n, f) == n ? 0 : -1; }

static int gguf_skip_value(FILE* f, uint32_t type, int depth)
{
	static const int size[] = { 1, 1, 2, 2, 4, 4, 4, 1, -1, -1, 8, 8, 8 }; /* 8 string, 9 array */
	if (type == 8) {
		uint64_t n;
		return rd(f, &n, 8) || n > (1u << 30) || fseek(f, (long)n, SEEK_CUR) ? -1 : 0;
	}
	if (type == 9) {
		uint32_t et;
		uint64_t n;
		if (depth > 2 || rd(f, &et, 4) || rd(f, &n, 8) || et > 12 || n > (1u << 28)) return -1;
		if (et != 8 && et != 9) return fseek(f, (long)(n * (uint64_t)size[et]), SEEK_CUR) ? -1 : 0;
		for (uint64_t i = 0; i < n; i++)
			if (gguf_skip_value(f, et, depth + 1)) return -1;
		return 0;
	}
	return type > 12 || fseek(f, size[type], SEEK_CUR) ? -1 : 0;
}

static json_t* gguf_type_mix(const char* path)
{
	FILE* f = fopen(path, "rb");
	if (!f) return NULL;
	char magic[4];
	uint32_t ver;
	uint64_t nt, nkv;
	json_t* mix = NULL;
	if (rd(f, magic, 4) || memcmp(magic, "GGUF", 4) || rd(f, &ver, 4) || rd(f, &nt, 8) || rd(f, &nkv, 8) || nt > 1000000) goto out;
	for (uint64_t i = 0; i < nkv; i++) {
		uint64_t kl;
		uint32_t t;
		if (rd(f, &kl, 8) || kl > 65536 || fseek(f, (long)kl, SEEK_CUR) || rd(f, &t, 4) || gguf_skip_value(f, t, 0)) goto out;
	}
	mix = json_object();
	for (uint64_t i = 0; i < nt; i++) {
		uint64_t nl, dim, off;
		uint32_t nd, t;
		if (rd(f, &nl, 8) || nl > 65536 || fseek(f, (long)nl, SEEK_CUR) || rd(f, &nd, 4) || nd > 8) goto bad;
		for (uint32_t k = 0; k < nd; k++)
			if (rd(f, &dim, 8)) goto bad;
		if (rd(f, &t, 4) || rd(f, &off, 8)) goto bad;
		const char* name = gguf_type_name(t);
		json_object_set_new(mix, name, json_integer(json_integer_value(json_object_get(mix, name)) + 1));
	}
	goto out;
bad:
	json_decref(mix);
	mix = NULL;
out:
	fclose(f);
	return mix;
}

static void safetensors_mix(const char* file, json_t* mix)
{
	FILE* f = fopen(file, "rb");
	uint64_t n;
	if (!f) return;
	if (!rd(f, &n, 8) && n < (64u << 20)) {
		char* h = malloc(n + 1);
		if (h && !rd(f, h, n)) {
			json_t* j = json_loadb(h, n, 0, NULL);
			const char* k;
			json_t* v;
			json_object_foreach(j, k, v)
			{
				const char* dt = json_string_value(json_object_get(v, "dtype"));
				if (!dt) continue;
				char lower[16];
				snprintf(lower, sizeof lower, "%s", dt);
				for (char* p = lower; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
				json_object_set_new(mix, lower, json_integer(json_integer_value(json_object_get(mix, lower)) + 1));
			}
			json_decref(j);
		}
		free(h);
	}
	fclose(f);
}

#include <dirent.h>
#include <sys/stat.h>

static json_t* type_mix(const char* path)
{
	struct stat st;
	if (!path || stat(path, &st)) return json_object();
	if (!S_ISDIR(st.st_mode)) {
		json_t* m = gguf_type_mix(path);
		return m ? m : json_object();
	}
	json_t* mix = json_object();
	DIR* d = opendir(path);
	struct dirent* e;
	while (d && (e = readdir(d))) {
		size_t l = strlen(e->d_name);
		if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
			char p[4096];
			snprintf(p, sizeof p, "%s/%s", path, e->d_name);
			safetensors_mix(p, mix);
		}
	}
	if (d) closedir(d);
	return mix;
}

void ev_receipt_model(ev_receipt* r, const pv_model* m, const char* path)
{
	if (!r || !m) return;
	const struct pv_model_info* in = pv_model_get_info(m);
	char hex[65] = "unknown";
	if (pv_model_digest(m, hex)) snprintf(hex, sizeof hex, "unknown");
	json_object_set_new(r->doc, "model",
	                    json_pack("{s:s,s:s,s:s,s:s,s:o,s:I,s:I}", "path", path ? path : "", "sha256", hex, "arch", in->arch_name, "dtype",
	                              in->dtype, "type_mix", type_mix(path), "n_params", (json_int_t)in->n_params, "weight_bytes",
	                              (json_int_t)in->weight_bytes));
}

void ev_receipt_workload(ev_receipt* r, const char* cls, const char* digest, int n_prompt, int n_gen, int depth, uint64_t seed,
                         int reps, int warmup)
{
	if (!r) return;
	json_object_set_new(r->doc, "workload",
	                    json_pack("{s:s,s:s,s:i,s:i,s:i,s:I,s:i,s:i}", "class", cls, "prompt_digest", digest ? digest : "none",
	                              "n_prompt", n_prompt, "n_gen", n_gen, "depth", depth, "seed", (json_int_t)seed, "reps", reps,
	                              "warmup", warmup));
}

void ev_receipt_samples(ev_receipt* r, const char* name, const char* unit, const double* x, int n)
{
	if (!r) return;
	json_t* v = json_array();
	for (int i = 0; i < n; i++) json_array_append_new(v, json_real(x[i]));
	json_array_append_new(json_object_get(r->doc, "samples"), json_pack("{s:s,s:s,s:o}", "name", name, "unit", unit, "values", v));
}

void ev_receipt_figure(ev_receipt* r, const char* name, const char* scope, const char* unit, double value, double sd, int n)
{
	if (!r || !isfinite(value)) return;
	json_array_append_new(json_object_get(r->doc, "figures"), json_pack("{s:s,s:s,s:s,s:f,s:f,s:i}", "name", name, "scope", scope, "unit",
	                                                                    unit, "value", value, "sd", isfinite(sd) ? sd : 0.0, "n", n));
}

void ev_receipt_count(ev_receipt* r, const char* name, double v)
{
	if (!r) return;
	json_object_set_new(json_object_get(r->doc, "counts"), name, v == floor(v) && fabs(v) < 9e15 ? json_integer((json_int_t)v) : json_real(v));
}

void ev_receipt_extra(ev_receipt* r, const char* key, json_t* v)
{
	if (!r) {
		json_decref(v);
		return;
	}
	json_object_set_new(json_object_get(r->doc, "extra"), key, v);
}

json_t* ev_receipt_doc(ev_receipt* r) { return r ? r->doc : NULL; }

void ev_receipt_free(ev_receipt* r)
{
	if (!r) return;
	json_decref(r->doc);
	free(r);
}

int64_t ev_receipt_end(ev_receipt* r, const char* status)
{
	if (!r) return 0;
	struct ev_host after;
	ev_host_read(&after, r->gpu);
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	double wall = after.wall - r->before.wall, foreign = ev_foreign_cpu_s(&r->before, &after);
	char now[32];
	ev_utc_now(now);
	json_object_set_new(r->doc, "created", json_string(now));
	json_object_set_new(r->doc, "status", json_string(status));
	json_object_set_new(r->doc, "host",
	                    json_pack("{s:i,s:o,s:o,s:f,s:f,s:f,s:f}", "cpus", (int)cpus, "before", ev_host_json(&r->before), "after",
	                              ev_host_json(&after), "wall_s", wall, "self_cpu_s", after.self_cpu_s - r->before.self_cpu_s,
	                              "foreign_cpu_s", foreign, "foreign_share", wall > 0 ? foreign / (wall * (double)cpus) : 0.0));
	char err[512];
	int64_t id = -1;
	ev_store* st = NULL;
	const char* path = ev_ledger_path();
	if (ev_receipt_check(r->doc, err, sizeof err) || ev_store_open(&st, path, err, sizeof err) ||
	    (id = ev_store_put_receipt(st, r->doc, err, sizeof err)) < 0) {
		fprintf(stderr, "proven: receipt not written: %s\n", err);
		id = -1;
	} else {
		fprintf(stderr, "proven: receipt %lld in %s\n", (long long)id, path);
		/* the court reads back which receipt its child wrote */
		const char* idf = getenv("PROVEN_RECEIPT_ID_FILE");
		FILE* f = idf && idf[0] ? fopen(idf, "a") : NULL;
		if (f) {
			fprintf(f, "%lld\n", (long long)id);
			fclose(f);
		}
	}
	ev_store_close(st);
	ev_receipt_free(r);
	return id;
}
