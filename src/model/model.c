/*
 * model.c: loading a model (an HF directory: config.json, the safetensors, the text side; or a
 * GGUF file), its summary, prefaulting and the weights' digest. Attaching a backend is api.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>
#include <pthread.h>

#include "base/clock.h"
#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"
#include "model/config.h"
#include "model/gguf_load.h"
#include "model/hf_load.h"
#include "model/model.h"
#include "base/util.h"

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

static void log_summary(const struct pv_model* m, const struct pv_load_stats* st, double secs)
{
	const struct pv_model_info* in = &m->info;
	char params[32], mtp[32], bytes[32];
	pv_log(PV_LOG_INFO, "%s: %s, %d layers (%d attention, %d linear)%s, %s params (%s MTP), %s %s in %d shard%s, %.2f s",
	       m->path, in->arch_name, in->n_layers, in->n_attn_layers, in->n_linear_layers, in->n_mtp_layers ? " + 1 MTP" : "",
	       fmt_count(params, sizeof params, (double)in->n_params), fmt_count(mtp, sizeof mtp, (double)in->n_params_mtp),
	       fmt_bytes(bytes, sizeof bytes, (double)in->weight_bytes), in->dtype, st->n_shards, st->n_shards == 1 ? "" : "s",
	       secs);
}

/* The memory maps of the weight files, in order (GGUF: one; HF: the shards). */
static int mappings(const struct pv_model* m, const void** maps, size_t* lens, int max)
{
	int n = 0;
	if (m->gguf) n = pv_gguf_model_mapping(m->gguf, &maps[0], &lens[0]);
	else
		while (n < max && pv_hf_mapping(m->files, n, &maps[n], &lens[n])) n++;
	return n;
}

/* Reads every page of the mappings once, so the weights are in memory before the first token
 * (a cold file would otherwise be paged in by the first forward pass). */
static void prefault(const struct pv_model* m, const struct pv_model_params* p)
{
	const void* maps[64];
	size_t lens[64], total = 0, done = 0;
	int n = mappings(m, maps, lens, 64);
	for (int i = 0; i < n; i++) total += lens[i];
	volatile unsigned char sink = 0;
	int last = -1;
	for (int i = 0; i < n; i++) {
		const unsigned char* q = maps[i];
		for (size_t off = 0; off < lens[i]; off += 4096) {
			sink ^= q[off];
			done += lens[i] - off < 4096 ? lens[i] - off : 4096;
			int pct = total ? (int)(done * 100 / total) : 100;
			if (p->progress && pct != last) p->progress(p->progress_user, pct / 100.0);
			last = pct;
		}
	}
	(void)sink;
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
	if (verbose) pv_log(PV_LOG_INFO, "%s: %s config, %d layers, mapping weights", path, pv_arch_name(m->cfg.arch), m->cfg.n_layers);
	if (pv_hf_open(&m->files, path, err, errlen) || pv_hf_bind(m->files, &m->cfg, &m->w, &m->owned, st, err, errlen)) return -1;
	return pv_model_text_hf(m, path, err, errlen);
}

int pv_model_load(struct pv_model* m, const char* path, const struct pv_model_params* p, char* err, size_t errlen)
{
	struct pv_load_stats st;
	const int verbose = p->verbose;
	const double t0 = pv_now_s();
	m->path = pv_xstrdup(path);
	int rc, e, kind = pv_path_kind(path, &e);
	if (kind == PV_PATH_FILE) {
		/* a single file: GGUF */
		if (verbose) pv_log(PV_LOG_INFO, "%s: mapping GGUF", path);
		rc = pv_gguf_model_load(m, path, &st, err, errlen);
	} else if (kind == PV_PATH_DIR) {
		rc = load_hf(m, path, verbose, &st, err, errlen);
	} else if (kind == PV_PATH_OTHER) {
		/* never opened: a FIFO would block, a device would stream */
		return pv_errf(err, errlen, "%s: not a regular file or directory (a model is a GGUF file or a Hugging Face directory)",
		               path), PV_E_IO;
	} else {
		return pv_path_err(path, kind, e, err, errlen), PV_E_IO;
	}
	if (rc) return PV_E_FORMAT;
	fill_info(m, &st);
	if (p->prefault) prefault(m, p);
	if (verbose) log_summary(m, &st, pv_now_s() - t0);
	return PV_OK;
}

void* pv_own(struct pv_owner* o, void* p)
{
	if (!p) return NULL;
	if (o->n == o->cap) {
		o->cap = o->cap ? 2 * o->cap : 64;
		void** g = realloc(o->p, o->cap * sizeof *g);
		if (!g) pv_abort(__FILE__, __LINE__, "growing the model's allocation list");
		o->p = g;
	}
	return o->p[o->n++] = p;
}

void pv_owner_free(struct pv_owner* o)
{
	for (size_t i = 0; i < o->n; i++) free(o->p[i]);
	free(o->p);
	memset(o, 0, sizeof *o);
}

void pv_model_unload(struct pv_model* m)
{
	pv_hf_close(m->files); /* unmaps the shards */
	pv_gguf_model_free(m->gguf);
	pv_owner_free(&m->owned); /* every array bound into m->w */
	pv_model_text_free(m);
	pv_config_free(&m->cfg);
	free(m->layer_pattern);
	free(m->path);
	pthread_mutex_destroy(&m->digest_lock);
}

int pv_model_digest(const pv_model* cm, char hex[65])
{
	struct pv_model* m = (struct pv_model*)cm; /* the cache is the only mutable part */
	pthread_mutex_lock(&m->digest_lock);
	if (!m->digest[0]) {
		const void* maps[64];
		size_t lens[64];
		int n = mappings(m, maps, lens, 64);
		struct pv_sha256 h;
		pv_sha256_init(&h);
		for (int i = 0; i < n; i++) pv_sha256_update(&h, maps[i], lens[i]);
		unsigned char d[32];
		pv_sha256_final(&h, d);
		for (int i = 0; i < 32; i++) snprintf(m->digest + 2 * i, 3, "%02x", d[i]);
	}
	memcpy(hex, m->digest, 65);
	pthread_mutex_unlock(&m->digest_lock);
	return PV_OK;
}

/* Scans one tensor; 1 (and *f filled) when it holds a non-finite value. */
static int check_tensor(const char* name, const struct pv_tensor* v, float* row, struct pv_weight_fault* f)
{
	int found = 0;
	for (int64_t r = 0; r < v->rows; r++) {
		pv_tensor_row_f32(v, r, row);
		for (int64_t c = 0; c < v->cols; c++) {
			if (isfinite(row[c])) continue;
			if (!found) {
				memset(f, 0, sizeof *f);
				snprintf(f->tensor, sizeof f->tensor, "%s", name);
				f->rows = v->rows;
				f->cols = v->cols;
				f->row = r;
				f->col = c;
				f->value = row[c];
				found = 1;
			}
			f->count++;
		}
	}
	return found;
}

int pv_model_check(const pv_model* m, struct pv_weight_fault* faults, int max, void (*progress)(void* user, double fraction),
                   void* user)
{
	int n = 0;
	float* row = NULL;
	size_t row_cap = 0;
	uint64_t total = 0, done = 0;
	const char* name;
	struct pv_tensor v;
	/* the file's tensors by index, GGUF or HF alike */
#define TENSOR(i) (m->gguf ? pv_gguf_model_tensor(m->gguf, i, &name, &v) : pv_hf_tensor(m->files, (int)(i), &name, &v))
	for (int64_t i = 0; TENSOR(i); i++)
		if (v.data) total += (uint64_t)(v.rows * v.cols);
	for (int64_t i = 0; TENSOR(i); i++) {
		if (!v.data || v.rows <= 0 || v.cols <= 0) continue;
		if ((size_t)v.cols > row_cap) {
			free(row);
			row_cap = (size_t)v.cols;
			row = pv_xmalloc(sizeof *row * row_cap);
		}
		struct pv_weight_fault f;
		if (check_tensor(name, &v, row, &f)) {
			if (n < max && faults) faults[n] = f;
			n++;
		}
		done += (uint64_t)(v.rows * v.cols);
		if (progress) progress(user, total ? (double)done / (double)total : 1.0);
	}
#undef TENSOR
	free(row);
	return n;
}

const struct pv_model_info* pv_model_get_info(const pv_model* m)
{
	return &m->info;
}
