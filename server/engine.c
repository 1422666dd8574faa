/*
 * engine.c: slots, the queue and the engine thread (engine.h).
 *
 * One thread runs every session: the library's sessions are single-threaded, and one thread
 * stepping all decoding slots together (pv_generator_step_many) is what lets their rows share
 * a forward pass: the slots without speculation go through one forward per step (continuous
 * batching: on the CPU for every architecture, hybrids included, src/cpu/forward_many.c; on CUDA
 * for attention-only models, in device steps of up to 16 rows, src/cuda/many.cu); drafting slots
 * (and hybrid models on CUDA) step one slot after another.
 * The tokens are the same either way. Each iteration admits queued jobs into idle slots (the
 * slot whose session shares the longest prefix with the prompt: its KV cache, and for hybrid
 * models the checkpoint the generator took at the end of the previous prompt, are reused),
 * evaluates at most one chunk of one slot's prompt (so a long prompt delays the others' next
 * tokens by one chunk, not by the whole prompt), then steps every decoding slot once.
 */
#include "engine.h"

#include "proven_dev.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

enum { PH_IDLE = 0, PH_PREFILL, PH_DECODE };

struct slot {
	int id;
	pv_session* s;
	pv_session* ds;   /* the draft model's session (--draft PATH / cascade:PATH)            */
	pv_generator* g;  /* the running job's                                                 */
	struct srv_job* job;
	int phase;
	int pos;          /* prefill: prompt tokens the session holds                           */
	uint64_t used;    /* LRU clock of the last admission                                   */
	uint64_t admitted;
	int last_cached;
	int n_past;       /* the session's length for /slots (written under e->mu by the engine) */
};

/* A session outside the slots that keeps a prefix a slot had to give up (LRU). */
struct centry {
	pv_session* s;
	uint64_t used;
};

#define TTFT_BUCKETS 12
static const double ttft_le[TTFT_BUCKETS] = { 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };

struct metrics {
	uint64_t ok, failed, cancelled;
	uint64_t prompt_tokens, evaluated, cached, generated;
	double prompt_s, gen_s;
	uint64_t prefix_queries, prefix_hits; /* in tokens, as vLLM counts them                  */
	uint64_t cache_restores;              /* prefixes brought back from the LRU sessions      */
	uint64_t drafted, accepted;
	uint64_t steps, step_rows;            /* step_many calls and the rows they carried        */
	uint64_t batched_rows;                /* rows that shared a forward with other slots' rows */
	uint64_t ttft[TTFT_BUCKETS + 1];
	double ttft_sum;
	uint64_t http[6];                     /* by status class 1xx..5xx, [0] other             */
	uint64_t http_429, http_503, http_400, http_401, http_413;
	int64_t socket_sessions;
	uint64_t socket_opened, socket_requests;
};

struct srv_engine {
	struct srv_config cfg;
	pv_model* m;
	pv_model* dm;     /* draft model                                                         */
	const struct pv_tok* tok;
	int dialect, n_ctx, n_valid;
	struct pv_spec_params spec;
	pv_pool* pool;
	struct slot* slots;
	int n_slots;
	struct centry* cache;
	int n_cache;
	uint64_t clock;

	pthread_mutex_t mu; /* the queue, the flags, the metrics, the slots' job pointers       */
	pthread_cond_t cv;
	struct srv_job *qhead, *qtail;
	int queued, busy;
	int stopping, draining;
	pthread_t thread;
	int thread_started;
	struct metrics mt;
	double t0;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* pv_status -> HTTP (proven.h: INVALID/CONTEXT are the caller's, NOMEM is load, the rest the machine's) */
static int http_of(int rc)
{
	switch (rc) {
	case PV_E_INVALID:
	case PV_E_CONTEXT: return 400;
	case PV_E_NOMEM: return 503;
	default: return 500;
	}
}

/* Jobs ---------------------------------------------------------------------------------------- */

struct srv_job* srv_job_new(void)
{
	struct srv_job* j = calloc(1, sizeof *j);
	if (!j) return NULL;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->refs = 1;
	j->status = 200;
	j->slot = -1;
	j->max_tokens = -1;
	j->dialect = -1;
	return j;
}

void srv_job_release(struct srv_job* j)
{
	if (!j) return;
	pthread_mutex_lock(&j->mu);
	int last = --j->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (!last) return;
	free(j->prompt);
	for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
	json_decref(j->tools);
	free(j->out);
	pv_tok_stream_free(j->dec);
	pv_chat_stream_free(j->cs);
	free(j->pend);
	free(j->text);
	free(j->hold);
	json_decref(j->lp);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j);
}

void srv_job_cancel(struct srv_engine* e, struct srv_job* j)
{
	atomic_store(&j->cancelled, 1);
	pthread_mutex_lock(&e->mu);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
}

int srv_engine_submit(struct srv_engine* e, struct srv_job* j, char* msg, size_t msglen)
{
	pthread_mutex_lock(&e->mu);
	if (e->draining || e->stopping) {
		pthread_mutex_unlock(&e->mu);
		snprintf(msg, msglen, "the server is shutting down");
		return 503;
	}
	if (e->queued >= e->cfg.queue_max && e->busy >= e->n_slots) {
		pthread_mutex_unlock(&e->mu);
		snprintf(msg, msglen, "too many requests: %d running and %d waiting (--parallel %d, --queue %d)", e->busy, e->queued,
		         e->n_slots, e->cfg.queue_max);
		return 429;
	}
	pthread_mutex_lock(&j->mu);
	j->refs++;
	pthread_mutex_unlock(&j->mu);
	j->t_submit = now_s();
	j->next = NULL;
	if (e->qtail) e->qtail->next = j;
	else e->qhead = j;
	e->qtail = j;
	e->queued++;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return 0;
}

/* Slots ----------------------------------------------------------------------------------------- */

static int lcp(const pv_session* s, const int32_t* p, int n)
{
	const int32_t* h = pv_session_tokens(s);
	int len = pv_session_length(s), k = 0;
	while (k < len && k < n - 1 && h[k] == p[k]) k++; /* the last prompt token is always evaluated */
	return k;
}

/* Under e->mu: the idle slot for a job, and maybe a prefix restored into it from the LRU cache. */
static struct slot* pick_slot(struct srv_engine* e, struct srv_job* j, int* restore_from, int* restore_n)
{
	struct slot* best = NULL;
	int best_l = -1;
	*restore_from = -1;
	for (int i = 0; i < e->n_slots; i++) {
		struct slot* s = &e->slots[i];
		if (s->phase != PH_IDLE) continue;
		int l = j->cache_prompt ? lcp(s->s, j->prompt, j->n_prompt) : 0;
		if (l > best_l || (l == best_l && s->used < best->used)) best = s, best_l = l;
	}
	if (!best || !j->cache_prompt) return best;
	for (int i = 0; i < e->n_cache; i++) {
		int l = lcp(e->cache[i].s, j->prompt, j->n_prompt);
		/* worth a copy only when it saves a real amount of prompt work */
		if (l > best_l + 32 && l > *restore_n) *restore_from = i, *restore_n = l;
	}
	if (*restore_from >= 0) {
		/* restore into the least recently used idle slot (the best match is kept for its owner) */
		for (int i = 0; i < e->n_slots; i++) {
			struct slot* s = &e->slots[i];
			if (s->phase == PH_IDLE && s->used < best->used) best = s;
		}
	}
	return best;
}

/* The slot's sequence goes to the LRU cache before the slot takes another one (when long enough
 * to be worth keeping); the oldest entry other than `keep` is overwritten. */
static void stash(struct srv_engine* e, struct slot* s, int keep)
{
	int len = pv_session_length(s->s);
	if (!e->n_cache || len < 64) return;
	int victim = -1;
	for (int i = 0; i < e->n_cache; i++) {
		if (i == keep) continue;
		if (victim < 0 || e->cache[i].used < e->cache[victim].used) victim = i;
	}
	if (victim < 0) return;
	if (pv_session_copy_prefix(e->cache[victim].s, s->s, len) == PV_OK) e->cache[victim].used = ++e->clock;
}

/* A cancelled job: the client went away (1), or the server is stopping (2, an error event). */
static int cancelled(struct srv_job* j)
{
	int c = atomic_load(&j->cancelled);
	if (!c) return 0;
	if (c == 2) {
		j->finish = SRV_FIN_ERROR;
		j->err_status = 503;
		snprintf(j->err, sizeof j->err, "the server is shutting down");
	} else {
		j->finish = SRV_FIN_CANCELLED;
	}
	return 1;
}

/* Under e->mu: queued jobs into idle slots. */
static void admit(struct srv_engine* e)
{
	while (e->qhead && e->busy < e->n_slots) {
		struct srv_job* j = e->qhead;
		e->qhead = j->next;
		if (!e->qhead) e->qtail = NULL;
		e->queued--;
		if (cancelled(j)) {
			if (j->finish == SRV_FIN_CANCELLED) e->mt.cancelled++;
			else e->mt.failed++;
			out_end(j, e->tok);
			srv_job_release(j);
			continue;
		}
		int from = -1, n_from = 0;
		struct slot* s = pick_slot(e, j, &from, &n_from);
		if (from >= 0 && pv_session_length(s->s) > 0 && lcp(s->s, j->prompt, j->n_prompt) < n_from) stash(e, s, from);
		if (from >= 0 && pv_session_copy_prefix(s->s, e->cache[from].s, n_from) == PV_OK) {
			e->cache[from].used = ++e->clock;
			e->mt.cache_restores++;
		} else if (from < 0 && e->n_cache && lcp(s->s, j->prompt, j->n_prompt) + 64 < pv_session_length(s->s)) {
			stash(e, s, -1);
		}
		s->job = j;
		s->phase = PH_PREFILL;
		s->pos = -1;
		s->used = ++e->clock;
		s->admitted = s->used;
		j->slot = s->id;
		e->busy++;
		out_begin(j, e->tok);
	}
}

/* Ends the slot's job (finish already set) and frees the slot; the session keeps its tokens. */
static void finish(struct srv_engine* e, struct slot* s)
{
	struct srv_job* j = s->job;
	if (s->g) {
		struct pv_gen_stats st;
		pv_generator_stats(s->g, &st);
		j->drafted = st.drafted;
		j->accepted = st.accepted;
		pv_generator_free(s->g);
		s->g = NULL;
	}
	j->t_end = now_s();
	out_end(j, e->tok);
	pthread_mutex_lock(&e->mu);
	struct metrics* m = &e->mt;
	if (j->finish == SRV_FIN_ERROR) m->failed++;
	else if (j->finish == SRV_FIN_CANCELLED) m->cancelled++;
	else m->ok++;
	m->generated += (uint64_t)j->n_gen;
	m->drafted += (uint64_t)j->drafted;
	m->accepted += (uint64_t)j->accepted;
	if (j->t_first > 0) m->gen_s += j->t_end - j->t_first;
	s->job = NULL;
	s->phase = PH_IDLE;
	s->n_past = pv_session_length(s->s);
	e->busy--;
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	srv_job_release(j);
}

static void fail_job(struct srv_engine* e, struct slot* s, int status, const char* what, const char* detail)
{
	struct srv_job* j = s->job;
	j->finish = SRV_FIN_ERROR;
	j->err_status = status;
	snprintf(j->err, sizeof j->err, "%s: %s", what, detail && detail[0] ? detail : "failed");
	finish(e, s);
}

/* The engine's failure of a session is its own: a device or numeric failure leaves it unusable,
 * so the slot gets a fresh session for the next job. */
static void renew_if_broken(struct srv_engine* e, struct slot* s)
{
	if (pv_session_ok(s->s)) return;
	struct pv_session_params sp = { .n_ctx = e->n_ctx, .pool = e->pool, .chunk_min_tokens = e->cfg.exact_prefill ? 1 << 30 : 0 };
	if (e->spec.draft != PV_DRAFT_NONE) sp.n_snapshots = (e->spec.k_max ? e->spec.k_max : e->spec.draft == PV_DRAFT_NGRAM ? 16 : 8) + 1;
	sp.mtp = e->spec.draft == PV_DRAFT_MTP;
	pv_session* ns = NULL;
	char err[256];
	if (pv_session_new(&ns, e->m, &sp, err, sizeof err) == PV_OK) {
		pthread_mutex_lock(&e->mu);
		pv_session* old = s->s;
		s->s = ns;
		pthread_mutex_unlock(&e->mu);
		pv_session_free(old);
	}
}

/* One piece of a slot's prompt; the last piece creates the generator and yields the first token. */
static void prefill_step(struct srv_engine* e, struct slot* s)
{
	struct srv_job* j = s->job;
	if (cancelled(j)) {
		finish(e, s);
		return;
	}
	int rc;
	const double t0 = now_s();
	if (s->pos < 0) {
		/* the prefix this session shares with the prompt is kept; the rest is cut */
		int keep = j->cache_prompt ? lcp(s->s, j->prompt, j->n_prompt) : 0;
		if ((rc = pv_session_truncate(s->s, keep))) {
			renew_if_broken(e, s);
			fail_job(e, s, http_of(rc), "prompt", pv_session_error(s->s));
			return;
		}
		s->pos = keep;
		j->cached = keep;
		j->evaluated = j->n_prompt - keep;
		s->last_cached = keep;
		pthread_mutex_lock(&e->mu);
		e->mt.prefix_queries += (uint64_t)j->n_prompt;
		e->mt.prefix_hits += (uint64_t)keep;
		e->mt.cached += (uint64_t)keep;
		e->mt.prompt_tokens += (uint64_t)j->n_prompt;
		e->mt.evaluated += (uint64_t)(j->n_prompt - keep);
		pthread_mutex_unlock(&e->mu);
	}
	int rest = j->n_prompt - 1 - s->pos;
	/* an MTP drafter needs the hidden rows of every prompt token: one call through the generator */
	if (rest > e->cfg.prefill_chunk && e->spec.draft != PV_DRAFT_MTP) {
		if ((rc = pv_session_run(s->s, j->prompt + s->pos, e->cfg.prefill_chunk, 0, NULL))) {
			renew_if_broken(e, s);
			fail_job(e, s, http_of(rc), "prompt", pv_session_error(s->s));
			return;
		}
		s->pos += e->cfg.prefill_chunk;
		pthread_mutex_lock(&e->mu);
		e->mt.prompt_s += now_s() - t0;
		pthread_mutex_unlock(&e->mu);
		return;
	}
	char err[256] = "";
	struct pv_spec_params sp = e->spec;
	sp.draft_session = s->ds;
	if ((rc = pv_generator_new(&s->g, s->s, &j->smp, &sp, err, sizeof err))) {
		fail_job(e, s, http_of(rc), "generator", err);
		return;
	}
	pv_generator_set_logprobs(s->g, j->logprobs ? j->top_logprobs : -1);
	int32_t first;
	if ((rc = pv_generator_prompt(s->g, j->prompt, j->n_prompt, &first))) {
		renew_if_broken(e, s);
		fail_job(e, s, http_of(rc), "prompt", pv_generator_error(s->g));
		return;
	}
	struct pv_token_logprob lp;
	int nlp = pv_generator_logprobs(s->g, &lp, 1);
	const double t1 = now_s();
	pthread_mutex_lock(&e->mu);
	e->mt.prompt_s += t1 - t0;
	double ttft = t1 - j->t_submit;
	int b = 0;
	while (b < TTFT_BUCKETS && ttft > ttft_le[b]) b++;
	e->mt.ttft[b]++;
	e->mt.ttft_sum += ttft;
	pthread_mutex_unlock(&e->mu);
	s->phase = PH_DECODE;
	if (out_token(j, e->m, e->tok, first, nlp ? &lp : NULL)) finish(e, s);
}

#define STEP_MAX 17 /* a step emits at most 1 + 16 drafts */

static void decode_step(struct srv_engine* e)
{
	pv_generator* gens[e->n_slots];
	int32_t* outs[e->n_slots];
	int32_t buf[e->n_slots][STEP_MAX];
	int max[e->n_slots], n_out[e->n_slots], rc[e->n_slots];
	struct slot* who[e->n_slots];
	int cnt = 0;
	for (int i = 0; i < e->n_slots; i++) {
		struct slot* s = &e->slots[i];
		if (s->phase != PH_DECODE) continue;
		struct srv_job* j = s->job;
		if (cancelled(j)) {
			finish(e, s);
			continue;
		}
		if (pv_session_length(s->s) + 1 >= pv_session_n_ctx(s->s)) {
			j->finish = SRV_FIN_LENGTH; /* the context is full */
			finish(e, s);
			continue;
		}
		int left = j->max_tokens > 0 ? j->max_tokens - j->n_gen : STEP_MAX;
		max[cnt] = left < STEP_MAX ? left : STEP_MAX;
		if (max[cnt] < 1) max[cnt] = 1;
		gens[cnt] = s->g;
		outs[cnt] = buf[cnt];
		who[cnt] = s;
		cnt++;
	}
	if (!cnt) return;
	/* the sessions' own count of rows evaluated together (continuous batching) */
	uint64_t batched = 0;
	struct pv_session_stats ss;
	for (int i = 0; i < cnt; i++)
		if (!pv_session_get_stats(who[i]->s, &ss)) batched -= ss.batched_rows;
	pv_generator_step_many(gens, cnt, outs, max, n_out, rc);
	for (int i = 0; i < cnt; i++)
		if (!pv_session_get_stats(who[i]->s, &ss)) batched += ss.batched_rows;
	pthread_mutex_lock(&e->mu);
	e->mt.steps++;
	e->mt.step_rows += (uint64_t)cnt;
	e->mt.batched_rows += batched;
	pthread_mutex_unlock(&e->mu);
	for (int i = 0; i < cnt; i++) {
		struct slot* s = who[i];
		if (rc[i]) {
			renew_if_broken(e, s);
			fail_job(e, s, http_of(rc[i]), "generation", pv_generator_error(s->g));
			continue;
		}
		if (e->cfg.fail_after > 0 && s->job->n_gen >= e->cfg.fail_after) {
			fail_job(e, s, 500, "generation", "injected fault (PV_SERVER_FAIL_AFTER)");
			continue;
		}
		struct pv_token_logprob lp[STEP_MAX];
		int nlp = pv_generator_logprobs(s->g, lp, STEP_MAX);
		for (int k = 0; k < n_out[i]; k++)
			if (out_token(s->job, e->m, e->tok, outs[i][k], k < nlp ? &lp[k] : NULL)) {
				finish(e, s);
				break;
			}
	}
}

static void* engine_main(void* arg)
{
	struct srv_engine* e = arg;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		for (;;) {
			admit(e);
			if (e->busy > 0) break;
			if (e->stopping && !e->qhead) {
				pthread_mutex_unlock(&e->mu);
				return NULL;
			}
			pthread_cond_wait(&e->cv, &e->mu);
		}
		pthread_mutex_unlock(&e->mu);
		/* the prompt of the earliest admitted prefilling slot: one chunk */
		struct slot* p = NULL;
		for (int i = 0; i < e->n_slots; i++)
			if (e->slots[i].phase == PH_PREFILL && (!p || e->slots[i].admitted < p->admitted)) p = &e->slots[i];
		if (p) prefill_step(e, p);
		/* jobs of slots that are prefilling but not next still notice a cancellation */
		for (int i = 0; i < e->n_slots; i++) {
			struct slot* s = &e->slots[i];
			if (s->phase == PH_PREFILL && s != p && cancelled(s->job)) finish(e, s);
		}
		decode_step(e);
		/* what /slots shows: other threads never touch the sessions themselves */
		pthread_mutex_lock(&e->mu);
		for (int i = 0; i < e->n_slots; i++) e->slots[i].n_past = pv_session_length(e->slots[i].s);
		pthread_mutex_unlock(&e->mu);
	}
}

/* Set-up ------------------------------------------------------------------------------------------ */

static void close_all(struct srv_engine* e)
{
	for (int i = 0; i < e->n_slots; i++) {
		pv_generator_free(e->slots[i].g);
		pv_session_free(e->slots[i].s);
		pv_session_free(e->slots[i].ds);
	}
	free(e->slots);
	for (int i = 0; i < e->n_cache; i++) pv_session_free(e->cache[i].s);
	free(e->cache);
	pv_pool_free(e->pool);
	pv_model_close(e->dm);
	pv_model_close(e->m);
}

int srv_engine_new(struct srv_engine** out, const struct srv_config* cfg, char* err, size_t errlen)
{
	*out = NULL;
	struct srv_engine* e = calloc(1, sizeof *e);
	if (!e) return snprintf(err, errlen, "out of memory"), -1;
	e->cfg = *cfg;
	e->t0 = now_s();
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv, NULL);
	struct pv_model_params mp = { .verbose = 1, .prefault = 1, .backend = cfg->backend, .progress = cfg->progress,
		                      .progress_user = cfg->progress_user };
	if (pv_model_open(&e->m, cfg->model, &mp, err, errlen)) goto fail;
	e->tok = pv_model_tokenizer(e->m);
	if (!e->tok) {
		snprintf(err, errlen, "%s has no tokenizer (tokenizer.json or GGUF tokenizer metadata)", cfg->model);
		goto fail;
	}
	const struct pv_model_info* in = pv_model_get_info(e->m);
	e->n_valid = pv_tok_n_vocab(e->tok) < in->vocab ? pv_tok_n_vocab(e->tok) : in->vocab;
	e->cfg.defaults.n_valid = e->n_valid;
	e->dialect = cfg->dialect;
	if (e->dialect < 0 && pv_model_chat_template(e->m)) e->dialect = pv_chat_detect_dialect(pv_model_chat_template(e->m));
	e->n_ctx = cfg->n_ctx ? cfg->n_ctx : (in->max_context < 4096 ? in->max_context : 4096);
	if (cfg->draft) {
		const char* d = cfg->draft;
		e->spec.draft = !strcmp(d, "ngram") ? PV_DRAFT_NGRAM : !strcmp(d, "mtp") ? PV_DRAFT_MTP
		                : !strncmp(d, "cascade:", 8) ? PV_DRAFT_CASCADE : PV_DRAFT_MODEL;
		e->spec.k_max = cfg->draft_max;
	}
	if (!(e->pool = pv_pool_new(cfg->threads))) {
		snprintf(err, errlen, "cannot start a thread pool");
		goto fail;
	}
	if (e->spec.draft == PV_DRAFT_MODEL || e->spec.draft == PV_DRAFT_CASCADE) {
		const char* path = e->spec.draft == PV_DRAFT_CASCADE ? cfg->draft + 8 : cfg->draft;
		struct pv_model_params dp = { .prefault = 1, .backend = cfg->backend };
		char derr[400];
		if (pv_model_open(&e->dm, path, &dp, derr, sizeof derr)) {
			snprintf(err, errlen, "draft model: %s", derr);
			goto fail;
		}
	}
	struct pv_session_params sp = { .n_ctx = e->n_ctx, .pool = e->pool, .chunk_min_tokens = cfg->exact_prefill ? 1 << 30 : 0 };
	if (e->spec.draft != PV_DRAFT_NONE) {
		int k = e->spec.k_max ? e->spec.k_max : e->spec.draft == PV_DRAFT_NGRAM ? 16 : 8;
		sp.n_snapshots = k + 1;
	}
	sp.mtp = e->spec.draft == PV_DRAFT_MTP;
	e->slots = calloc((size_t)cfg->parallel, sizeof *e->slots);
	e->cache = calloc((size_t)(cfg->cache_entries > 0 ? cfg->cache_entries : 1), sizeof *e->cache);
	if (!e->slots || !e->cache) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	for (int i = 0; i < cfg->parallel; i++) {
		struct slot* s = &e->slots[i];
		s->id = i;
		if (pv_session_new(&s->s, e->m, &sp, err, errlen)) goto fail;
		e->n_slots++;
		if (e->dm) {
			struct pv_session_params dp = { .n_ctx = e->n_ctx, .pool = e->pool };
			if (pv_session_new(&s->ds, e->dm, &dp, err, errlen)) goto fail;
		}
	}
	struct pv_session_params cp = { .n_ctx = e->n_ctx, .pool = e->pool, .chunk_min_tokens = sp.chunk_min_tokens };
	for (int i = 0; i < cfg->cache_entries; i++) {
		if (pv_session_new(&e->cache[i].s, e->m, &cp, err, errlen)) goto fail;
		e->n_cache++;
	}
	if (pthread_create(&e->thread, NULL, engine_main, e)) {
		snprintf(err, errlen, "cannot start the engine thread");
		goto fail;
	}
	e->thread_started = 1;
	*out = e;
	return 0;
fail:
	close_all(e);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
	return -1;
}

void srv_engine_drain(struct srv_engine* e, double timeout_s)
{
	pthread_mutex_lock(&e->mu);
	e->draining = 1;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	double until = ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
	while (e->busy > 0 || e->queued > 0) {
		clock_gettime(CLOCK_REALTIME, &ts);
		if (ts.tv_sec + ts.tv_nsec * 1e-9 >= until) break;
		struct timespec w = { (time_t)until, (long)((until - floor(until)) * 1e9) };
		pthread_cond_timedwait(&e->cv, &e->mu, &w);
	}
	pthread_mutex_unlock(&e->mu);
}

int srv_engine_draining(const struct srv_engine* e) { return e->draining; }

void srv_engine_stop(struct srv_engine* e)
{
	if (!e || !e->thread_started) return;
	/* what still runs or waits ends with an error event at the engine's next step; the engine
	 * thread exits once no slot is busy and the queue is empty */
	pthread_mutex_lock(&e->mu);
	e->stopping = 1;
	for (int i = 0; i < e->n_slots; i++)
		if (e->slots[i].job) atomic_store(&e->slots[i].job->cancelled, 2);
	for (struct srv_job* j = e->qhead; j; j = j->next) atomic_store(&j->cancelled, 2);
	pthread_cond_broadcast(&e->cv);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->thread, NULL);
	e->thread_started = 0;
}

void srv_engine_free(struct srv_engine* e)
{
	if (!e) return;
	srv_engine_stop(e);
	close_all(e);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cv);
	free(e);
}

const pv_model* srv_engine_model(const struct srv_engine* e) { return e->m; }
const struct pv_tok* srv_engine_tok(const struct srv_engine* e) { return e->tok; }
int srv_engine_dialect(const struct srv_engine* e) { return e->dialect; }
int srv_engine_n_ctx(const struct srv_engine* e) { return e->n_ctx; }
pv_pool* srv_engine_pool(const struct srv_engine* e) { return e->pool; }
const struct srv_config* srv_engine_config(const struct srv_engine* e) { return &e->cfg; }

void srv_engine_count_http(struct srv_engine* e, int status)
{
	pthread_mutex_lock(&e->mu);
	int c = status / 100;
	e->mt.http[c >= 1 && c <= 5 ? c : 0]++;
	if (status == 429) e->mt.http_429++;
	if (status == 503) e->mt.http_503++;
	if (status == 400) e->mt.http_400++;
	if (status == 401) e->mt.http_401++;
	if (status == 413) e->mt.http_413++;
	pthread_mutex_unlock(&e->mu);
}

void srv_engine_count_socket(struct srv_engine* e, int sessions, int requests)
{
	pthread_mutex_lock(&e->mu);
	e->mt.socket_sessions += sessions;
	if (sessions > 0) e->mt.socket_opened += (uint64_t)sessions;
	e->mt.socket_requests += (uint64_t)requests;
	pthread_mutex_unlock(&e->mu);
}

/* Views ------------------------------------------------------------------------------------------- */

static const char* draft_name(int k)
{
	switch (k) {
	case PV_DRAFT_NGRAM: return "ngram";
	case PV_DRAFT_MODEL: return "model";
	case PV_DRAFT_MTP: return "mtp";
	case PV_DRAFT_CASCADE: return "cascade";
	default: return "none";
	}
}

json_t* srv_engine_props(struct srv_engine* e)
{
	const struct pv_model_info* in = pv_model_get_info(e->m);
	const struct pv_build_info* b = pv_build_info();
	const char* tmpl = pv_model_chat_template(e->m);
	const struct pv_sampling* d = &e->cfg.defaults;
	json_t* caps = json_pack("{s:b,s:b}", "tools", e->dialect >= 0, "reasoning", e->dialect == PV_CHAT_QWEN3 || e->dialect == PV_CHAT_QWEN3_5);
	return json_pack("{s:s,s:s,s:i,s:i,s:i,s:s?,s:s,s:o,s:{s:s,s:s,s:i,s:i,s:i,s:I,s:s,s:s},"
	                 "s:{s:f,s:f,s:i,s:f,s:i},s:{s:s,s:i},s:{s:s,s:s,s:s,s:s}}",
	                 "model_path", e->cfg.model, "model_alias", e->cfg.model_name, "total_slots", e->n_slots, "n_ctx", e->n_ctx,
	                 "queue_max", e->cfg.queue_max, "chat_template", tmpl, "chat_dialect",
	                 e->dialect >= 0 ? pv_chat_dialect_name(e->dialect) : "none", "chat_template_caps", caps, "model", "arch",
	                 in->arch_name, "dtype", in->dtype, "n_layers", in->n_layers, "n_vocab", in->vocab, "hidden", in->hidden,
	                 "n_params", (json_int_t)in->n_params, "backend", e->cfg.backend ? e->cfg.backend : "cpu", "chat_template_source",
	                 tmpl ? "model" : "none", "default_generation_settings", "temperature", (double)d->temperature, "top_p",
	                 (double)d->top_p, "top_k", d->top_k, "min_p", (double)d->min_p, "prefill_chunk", e->cfg.prefill_chunk,
	                 "speculative", "type", draft_name(e->spec.draft), "n_max", e->spec.k_max, "build_info", "commit", b->commit,
	                 "compiler", b->compiler, "backends", b->backends, "cpu_isa", b->cpu_isa);
}

json_t* srv_engine_slots(struct srv_engine* e)
{
	json_t* a = json_array();
	pthread_mutex_lock(&e->mu);
	for (int i = 0; i < e->n_slots; i++) {
		struct slot* s = &e->slots[i];
		const char* st = s->phase == PH_IDLE ? "idle" : s->phase == PH_PREFILL ? "prefill" : "generating";
		/* n_past: the session's length after the engine's last step */
		json_t* o = json_pack("{s:i,s:s,s:b,s:i,s:i,s:i}", "id", i, "state", st, "is_processing", s->phase != PH_IDLE, "n_ctx",
		                      e->n_ctx, "n_past", s->n_past, "last_cached_tokens", s->last_cached);
		if (s->job)
			json_object_set_new(o, "task", json_pack("{s:s,s:i,s:i,s:i}", "id", s->job->id, "n_prompt", s->job->n_prompt,
			                                         "cached", s->job->cached, "n_decoded", s->job->n_gen));
		json_array_append_new(a, o);
	}
	pthread_mutex_unlock(&e->mu);
	return a;
}

#define CAT(...)                                                                   \
	do {                                                                       \
		int k_ = snprintf(b + n, cap - n, __VA_ARGS__);                     \
		if (k_ > 0) n += (size_t)k_ < cap - n ? (size_t)k_ : cap - n - 1; \
	} while (0)
#define METRIC(name, type, help, fmt, val)                                                        \
	CAT("# HELP proven:%s %s\n# TYPE proven:%s %s\nproven:%s " fmt "\n", name, help, name, type, name, val)

char* srv_engine_metrics(struct srv_engine* e)
{
	size_t cap = 16384, n = 0;
	char* b = malloc(cap);
	if (!b) return NULL;
	b[0] = 0;
	pthread_mutex_lock(&e->mu);
	struct metrics m = e->mt;
	int busy = e->busy, queued = e->queued;
	pthread_mutex_unlock(&e->mu);
	METRIC("request_success_total", "counter", "Requests that finished normally.", "%llu", (unsigned long long)m.ok);
	METRIC("request_failure_total", "counter", "Requests that ended with an engine error.", "%llu", (unsigned long long)m.failed);
	METRIC("request_cancelled_total", "counter", "Requests whose client went away before the end.", "%llu",
	       (unsigned long long)m.cancelled);
	METRIC("prompt_tokens_total", "counter", "Prompt tokens of admitted requests (cached ones included).", "%llu",
	       (unsigned long long)m.prompt_tokens);
	METRIC("prompt_tokens_evaluated_total", "counter", "Prompt tokens evaluated (not reused from a cache).", "%llu",
	       (unsigned long long)m.evaluated);
	METRIC("generation_tokens_total", "counter", "Generated tokens.", "%llu", (unsigned long long)m.generated);
	METRIC("prompt_seconds_total", "counter", "Engine time spent on prompts.", "%.6f", m.prompt_s);
	METRIC("generation_seconds_total", "counter", "Request time from the first to the last token, summed.", "%.6f", m.gen_s);
	METRIC("prompt_tokens_per_second", "gauge", "Average prompt throughput (evaluated tokens / engine prompt time).", "%.3f",
	       m.prompt_s > 0 ? m.evaluated / m.prompt_s : 0.0);
	METRIC("generation_tokens_per_second", "gauge", "Average generation speed per request (tokens / request decode time).", "%.3f",
	       m.gen_s > 0 ? m.generated / m.gen_s : 0.0);
	METRIC("num_requests_running", "gauge", "Requests in a slot (prefilling or generating).", "%d", busy);
	METRIC("num_requests_waiting", "gauge", "Requests waiting for a slot.", "%d", queued);
	METRIC("busy_slots", "gauge", "Slots in use.", "%d", busy);
	METRIC("total_slots", "gauge", "Slots (--parallel).", "%d", e->n_slots);
	METRIC("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the slots' caches.", "%llu",
	       (unsigned long long)m.prefix_queries);
	METRIC("prefix_cache_hits_total", "counter", "Prompt tokens found there (reused).", "%llu", (unsigned long long)m.prefix_hits);
	METRIC("prefix_cache_restores_total", "counter", "Prefixes copied back from the LRU prefix cache.", "%llu",
	       (unsigned long long)m.cache_restores);
	METRIC("spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", "%llu", (unsigned long long)m.drafted);
	METRIC("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", "%llu", (unsigned long long)m.accepted);
	METRIC("decode_steps_total", "counter", "Engine decode steps (all busy slots stepped together).", "%llu",
	       (unsigned long long)m.steps);
	METRIC("batched_rows_total", "counter", "Decode rows evaluated in one forward with other slots' rows (continuous batching).",
	       "%llu", (unsigned long long)m.batched_rows);
	METRIC("busy_slots_per_decode", "gauge", "Average slots carried by one decode step.", "%.3f",
	       m.steps ? (double)m.step_rows / m.steps : 0.0);
	CAT("# HELP proven:time_to_first_token_seconds Time from submission to the first token.\n"
	    "# TYPE proven:time_to_first_token_seconds histogram\n");
	uint64_t cum = 0;
	for (int i = 0; i < TTFT_BUCKETS; i++) {
		cum += m.ttft[i];
		CAT("proven:time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n", ttft_le[i], (unsigned long long)cum);
	}
	cum += m.ttft[TTFT_BUCKETS];
	CAT("proven:time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	CAT("proven:time_to_first_token_seconds_sum %.6f\nproven:time_to_first_token_seconds_count %llu\n", m.ttft_sum,
	    (unsigned long long)cum);
	CAT("# HELP proven:http_responses_total HTTP responses by status class and notable code.\n"
	    "# TYPE proven:http_responses_total counter\n");
	for (int c = 1; c <= 5; c++) CAT("proven:http_responses_total{code=\"%dxx\"} %llu\n", c, (unsigned long long)m.http[c]);
	CAT("proven:http_responses_total{code=\"400\"} %llu\n", (unsigned long long)m.http_400);
	CAT("proven:http_responses_total{code=\"401\"} %llu\n", (unsigned long long)m.http_401);
	CAT("proven:http_responses_total{code=\"413\"} %llu\n", (unsigned long long)m.http_413);
	CAT("proven:http_responses_total{code=\"429\"} %llu\n", (unsigned long long)m.http_429);
	CAT("proven:http_responses_total{code=\"503\"} %llu\n", (unsigned long long)m.http_503);
	METRIC("socket_sessions", "gauge", "Sessions open on the shared-memory socket (--socket).", "%lld", (long long)m.socket_sessions);
	METRIC("socket_sessions_total", "counter", "Sessions ever opened on the socket.", "%llu", (unsigned long long)m.socket_opened);
	METRIC("socket_requests_total", "counter", "Requests (crossings) served on the socket.", "%llu", (unsigned long long)m.socket_requests);
	METRIC("uptime_seconds", "gauge", "Seconds since the engine started.", "%.1f", now_s() - e->t0);
	return b;
}
