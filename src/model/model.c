/* model.c: pv_model_open / close / get_info: config.json, then the safetensors, then the summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>

#include "engine/backend.h"
#include "model/config.h"
#include "cuda/backend.h"
#include "model/gguf_load.h"
#include "model/hf_load.h"
#include "model/model.h"
#include "base/util.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill_info(struct pv_model* m, const struct pv_load_stats* st)
{
	const struct pv_config* c = &m->cfg;
	struct pv_model_info* in = &m->info;

	m->layer_pattern = pv_xmalloc((size_t)c->n_layers + 1);
	for (int i = 0; i < c->n_layers; i++) {
		int attn = c->layer_kind[i] == PV_LAYER_ATTN;
		m->layer_pattern[i] = attn ? 'A' : 'L';
		in->n_attn_layers += attn;
		in->n_linear_layers += !attn;
	}
	m->layer_pattern[c->n_layers] = 0;
	in->arch_name = pv_arch_name(c->arch);
	in->arch = (int)c->arch;
	in->n_layers = c->n_layers;
	in->n_mtp_layers = c->n_mtp_layers;
	in->hidden = c->hidden;
	in->vocab = c->vocab;
	in->n_heads = c->n_heads;
	in->n_kv_heads = c->n_kv_heads;
	in->head_dim = c->head_dim;
	in->n_experts = c->n_experts;
	in->n_experts_used = c->n_experts_used;
	in->max_context = c->max_pos;
	in->tied_embeddings = c->tied;
	in->n_params = st->n_params;
	in->n_params_mtp = st->n_params_mtp;
	in->weight_bytes = st->weight_bytes;
	in->layer_pattern = m->layer_pattern;
	in->dtype = st->dtype;
}

/* "35.95B", "6.31M", "812" */
static const char* fmt_count(char* buf, size_t n, double v)
{
	if (v >= 1e9) snprintf(buf, n, "%.2fB", v * 1e-9);
	else if (v >= 1e6) snprintf(buf, n, "%.2fM", v * 1e-6);
	else snprintf(buf, n, "%.0f", v);
	return buf;
}

static const char* fmt_bytes(char* buf, size_t n, double v)
{
	if (v >= 1 << 30) snprintf(buf, n, "%.2f GiB", v / (1 << 30));
	else if (v >= 1 << 20) snprintf(buf, n, "%.2f MiB", v / (1 << 20));
	else snprintf(buf, n, "%.1f KiB", v / 1024);
	return buf;
}

static void print_summary(const struct pv_model* m, const struct pv_load_stats* st, double secs)
{
	const struct pv_model_info* in = &m->info;
	char params[32], mtp[32], bytes[32];

	fprintf(stderr,
	        "proven: %s: %s, %d layers (%d attention, %d linear)%s, %s params (%s MTP), %s %s in %d shard%s, "
	        "%.2f s\n",
	        m->path, in->arch_name, in->n_layers, in->n_attn_layers, in->n_linear_layers,
	        in->n_mtp_layers ? " + 1 MTP" : "", fmt_count(params, sizeof params, (double)in->n_params),
	        fmt_count(mtp, sizeof mtp, (double)in->n_params_mtp),
	        fmt_bytes(bytes, sizeof bytes, (double)in->weight_bytes), in->dtype, st->n_shards,
	        st->n_shards == 1 ? "" : "s", secs);
}

/* params->backend: the CPU (NULL, "cpu") or "cuda" (weights uploaded now). */
static int attach_backend(struct pv_model* m, const struct pv_model_params* params, char* err, size_t errlen)
{
	const char* b = params ? params->backend : NULL;
	if (!b || !strcmp(b, "cpu")) return 0;
	if (strcmp(b, "cuda")) return pv_errf(err, errlen, "unknown backend \"%s\" (cpu or cuda)", b);
	if (!pv_backend_cuda())
		return pv_errf(err, errlen, "backend cuda: this build of proven has no CUDA backend (rebuild with nvcc on PATH)");
	return pv_cuda_model_init(m, params->verbose, err, errlen);
}

/* Reads every page of the mappings once, so the weights are in memory before the first token
 * (a cold file would otherwise be paged in by the first forward pass), drawing a progress bar
 * on stderr. */
static void prefault(const struct pv_model* m)
{
	const void* maps[64];
	size_t lens[64], total = 0, done = 0;
	int n = 0;
	if (m->gguf) n = pv_gguf_model_mapping(m->gguf, &maps[0], &lens[0]);
	else
		while (n < 64 && pv_hf_mapping(m->files, n, &maps[n], &lens[n])) n++;
	for (int i = 0; i < n; i++) total += lens[i];
	int tty = isatty(STDERR_FILENO), last = -1;
	volatile unsigned char sink = 0;
	for (int i = 0; i < n; i++) {
		const unsigned char* p = maps[i];
		for (size_t off = 0; off < lens[i]; off += 4096) {
			sink ^= p[off];
			done += lens[i] - off < 4096 ? lens[i] - off : 4096;
			int pct = total ? (int)(done * 100 / total) : 100;
			if (tty && pct != last) {
				last = pct;
				fprintf(stderr, "\rproven: loading [%-40.*s] %3d%% %.0f/%.0f MiB", pct * 40 / 100,
				        "########################################", pct, done / 1048576.0, total / 1048576.0);
			}
		}
	}
	(void)sink;
	if (tty) fprintf(stderr, "\n");
}

/* An HF directory: config.json, the safetensors, the text side. */
static int load_hf(struct pv_model* m, const char* path, int verbose, struct pv_load_stats* st, char* err, size_t errlen)
{
	size_t n = strlen(path) + sizeof "/config.json";
	char* cfg_path = pv_xmalloc(n);
	snprintf(cfg_path, n, "%s/config.json", path);
	int rc = pv_config_parse(&m->cfg, cfg_path, err, errlen);
	free(cfg_path);
	if (rc) return rc;
	if (verbose)
		fprintf(stderr, "proven: %s: %s config, %d layers, mapping weights\n", path, pv_arch_name(m->cfg.arch),
		        m->cfg.n_layers);
	if (pv_hf_open(&m->files, path, err, errlen) || pv_hf_bind(m->files, &m->cfg, &m->w, st, err, errlen)) return -1;
	return pv_model_text_hf(m, path, err, errlen);
}

int pv_model_open(pv_model** out, const char* path, const struct pv_model_params* params, char* err,
                  size_t errlen)
{
	struct pv_load_stats st;
	int verbose = params && params->verbose;
	double t0 = now_s();

	*out = NULL;
	struct pv_model* m = pv_xcalloc(1, sizeof *m);
	m->path = pv_xstrdup(path);
	struct stat sb;
	int rc;
	if (stat(path, &sb)) {
		rc = pv_errf(err, errlen, "%s: %s", path, strerror(errno));
	} else if (S_ISREG(sb.st_mode)) {
		/* a single file: GGUF */
		if (verbose) fprintf(stderr, "proven: %s: mapping GGUF\n", path);
		rc = pv_gguf_model_load(m, path, &st, err, errlen);
	} else {
		rc = load_hf(m, path, verbose, &st, err, errlen);
	}
	if (!rc) {
		fill_info(m, &st);
		if (verbose) {
			prefault(m);
			print_summary(m, &st, now_s() - t0);
		}
		rc = attach_backend(m, params, err, errlen);
	}
	if (rc) {
		pv_model_close(m);
		return -1;
	}
	*out = m;
	return 0;
}

void pv_model_close(pv_model* m)
{
	if (!m) return;
	if (m->backend && m->backend->model_free) m->backend->model_free(m); /* device weights */
	pv_hf_close(m->files); /* unmaps the shards and frees every array bound into m->w */
	pv_gguf_model_free(m->gguf);
	pv_model_text_free(m);
	pv_config_free(&m->cfg);
	free(m->layer_pattern);
	free(m->path);
	free(m);
}

const struct pv_model_info* pv_model_get_info(const pv_model* m)
{
	return &m->info;
}
