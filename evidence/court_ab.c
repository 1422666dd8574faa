/*
 * court_ab.c: the promotion court's judgement. Given the receipts of an A/B run (ABBA blocks,
 * warm-up already discarded), it computes the ratio B/A of one figure per block, its 95 %
 * interval (Student t over the blocks' log ratios), and the verdict: faster, slower or no
 * difference; or "invalid" when a veto holds:
 *
 *   identity     the arms' runtime identities (build, flags, backend, knobs, CPU, GPU, model,
 *                workload) differ in anything but the switch under test
 *   host-load    a run's load average (less its own share) or other processes' CPU time above
 *                the limits (a run so marked is not clean)
 *   clock-drift  a CPU or GPU clock, or the GPU temperature, moved across the court
 *   too-few      fewer clean ABBA blocks than the minimum
 *   exactness    the exactness court failed for an arm, or the arms generated different tokens
 *                when the change claims not to change them
 *   acceptance   drafted / accepted / rollback counts differ when the change claims not to
 *                affect them
 *   status       a run did not end ok
 *   unexercised  a count the switch needs (rollbacks for a rollback switch) is 0 in a run: the
 *                arms did the same work and a "no difference" would say nothing
 */
#include "evidence.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ev_court_limits_default(struct ev_court_limits* l)
{
	l->max_load_per_core = 0.75;
	l->max_foreign_share = 0.10;
	l->max_clock_drift = 0.05;
	l->max_temp_drift_c = 10;
	l->min_clean_pairs = 3;
	l->same_acceptance = 0;
	l->same_tokens = 1;
	l->n_needs = 0;
}

static double figure(const json_t* r, const char* name)
{
	size_t i;
	json_t* f;
	json_array_foreach(json_object_get(r, "figures"), i, f)
	if (!strcmp(json_string_value(json_object_get(f, "name")), name)) return json_number_value(json_object_get(f, "value"));
	return NAN;
}

/* 97.5 % quantile of Student's t with df degrees of freedom */
static double t975(int df)
{
	static const double t[] = { 0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
		                    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052,
		                    2.048, 2.045, 2.042 };
	return df < 1 ? INFINITY : df <= 30 ? t[df] : 1.96 + 2.4 / df;
}

/* The identity of a run as flat "path=value" pairs. */
static void flatten(const char* prefix, const json_t* v, json_t* out)
{
	if (json_is_object(v)) {
		const char* k;
		json_t* x;
		json_object_foreach((json_t*)v, k, x)
		{
			char p[256];
			snprintf(p, sizeof p, "%s.%s", prefix, k);
			flatten(p, x, out);
		}
		return;
	}
	char* s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
	json_object_set_new(out, prefix, json_string(s ? s : "?"));
	free(s);
}

static json_t* identity(const json_t* r)
{
	json_t* id = json_object();
	flatten("runtime", json_object_get(r, "runtime"), id);
	const json_t* m = json_object_get(r, "model");
	flatten("model.sha256", json_object_get(m, "sha256"), id);
	const json_t* w = json_object_get(r, "workload");
	const char* keys[] = { "class", "prompt_digest", "n_prompt", "n_gen", "depth", "seed" };
	for (int i = 0; i < 6; i++) {
		char p[64];
		snprintf(p, sizeof p, "workload.%s", keys[i]);
		flatten(p, json_object_get(w, keys[i]), id);
	}
	flatten("args", json_object_get(r, "args"), id);
	json_object_del(id, "runtime.gpu.sm_clock_mhz"); /* clocks are judged by the drift rule */
	json_object_del(id, "runtime.gpu.mem_clock_mhz");
	return id;
}

static int allowed(const char* path, const char* const* sw, int n)
{
	for (int i = 0; i < n; i++) {
		size_t l = strlen(sw[i]);
		if (!strncmp(path, sw[i], l) && (path[l] == 0 || path[l] == '.')) return 1;
	}
	return 0;
}

static void veto(json_t* vetoes, const char* rule, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void veto(json_t* vetoes, const char* rule, const char* fmt, ...)
{
	char d[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(d, sizeof d, fmt, ap);
	va_end(ap);
	/* one entry per rule and detail */
	size_t i;
	json_t* v;
	json_array_foreach(vetoes, i, v)
	if (!strcmp(json_string_value(json_object_get(v, "rule")), rule) && !strcmp(json_string_value(json_object_get(v, "detail")), d)) return;
	json_array_append_new(vetoes, json_pack("{s:s,s:s}", "rule", rule, "detail", d));
}

/* a run's own host problem, or NULL when clean */
static const char* run_dirty(const json_t* r, const struct ev_court_limits* lim, char* why, size_t n)
{
	const json_t* h = json_object_get(r, "host");
	double cpus = (double)json_integer_value(json_object_get(h, "cpus"));
	if (cpus <= 0) cpus = 1;
	double wall = json_number_value(json_object_get(h, "wall_s"));
	double self = wall > 0 ? json_number_value(json_object_get(h, "self_cpu_s")) / wall : 0;
	double l0 = json_number_value(json_object_get(json_object_get(h, "before"), "load1"));
	double l1 = json_number_value(json_object_get(json_object_get(h, "after"), "load1"));
	/* the 1-minute load counts this run's own threads: they are taken out */
	double load = (l0 > l1 ? l0 : l1) - self;
	double share = json_number_value(json_object_get(h, "foreign_share"));
	if (load / cpus > lim->max_load_per_core) {
		snprintf(why, n, "receipt %lld: load %.2f per core besides the run (limit %.2f)", (long long)json_integer_value(json_object_get(r, "id")),
		         load / cpus, lim->max_load_per_core);
		return why;
	}
	/* /proc/stat counts in ticks of 10 ms: a run shorter than half a second cannot be judged by it */
	if (wall >= 0.5 && share > lim->max_foreign_share) {
		snprintf(why, n, "receipt %lld: other processes used %.1f%% of the CPUs (limit %.1f%%)",
		         (long long)json_integer_value(json_object_get(r, "id")), 100 * share, 100 * lim->max_foreign_share);
		return why;
	}
	return NULL;
}

static double count_of(const json_t* r, const char* k) { return json_number_value(json_object_get(json_object_get(r, "counts"), k)); }

static void range_of(json_t* const* rs, int n, const char* side, const char* key, double* lo, double* hi, int* have)
{
	*have = 0;
	for (int i = 0; i < n; i++)
		for (int s = 0; s < 2; s++) {
			const json_t* v = json_object_get(json_object_get(json_object_get(rs[i], "host"), s ? "after" : "before"), key);
			(void)side;
			if (!json_is_number(v)) continue;
			double x = json_number_value(v);
			if (!*have || x < *lo) *lo = x;
			if (!*have || x > *hi) *hi = x;
			*have = 1;
		}
}

/* the ABBA blocks: receipts 4k..4k+3 in the order the court ran them */
static int block_ratio(json_t* const* rs, const int* arm, int k, const char* fig, double* ratio)
{
	double a = 0, b = 0;
	int na = 0, nb = 0;
	for (int j = 4 * k; j < 4 * k + 4; j++) {
		double v = figure(rs[j], fig);
		if (!isfinite(v) || v <= 0) return -1;
		if (arm[j]) b += v, nb++;
		else a += v, na++;
	}
	if (na != 2 || nb != 2) return -1;
	*ratio = (b / nb) / (a / na);
	return 0;
}

static void interval(const double* lr, int n, double* m, double* lo, double* hi)
{
	double s = 0, q = 0;
	for (int i = 0; i < n; i++) s += lr[i];
	*m = n ? s / n : 0;
	for (int i = 0; i < n; i++) q += (lr[i] - *m) * (lr[i] - *m);
	double se = n > 1 ? sqrt(q / (n - 1) / n) : INFINITY;
	*lo = *m - t975(n - 1) * se;
	*hi = *m + t975(n - 1) * se;
}

double ev_court_halfwidth(json_t* const* rs, const int* arm, int n, const char* fig)
{
	double lr[256];
	int nb = 0;
	for (int k = 0; k < n / 4 && nb < 256; k++) {
		double r;
		if (!block_ratio(rs, arm, k, fig, &r)) lr[nb++] = log(r);
	}
	if (nb < 2) return INFINITY;
	double m, lo, hi;
	interval(lr, nb, &m, &lo, &hi);
	return (exp(hi) - exp(lo)) / 2 / exp(m);
}

json_t* ev_court_judge(json_t* const* rs, const int* arm, int n, const char* const* sw, int nsw, const char* fig,
                       const struct ev_court_limits* lim, int exact_a, int exact_b)
{
	json_t* vetoes = json_array();
	char why[512];
	/* identity: every run against the first run of arm A (same arm: nothing may differ) */
	int first_a = -1;
	for (int i = 0; i < n && first_a < 0; i++)
		if (!arm[i]) first_a = i;
	json_t* ref = first_a >= 0 ? identity(rs[first_a]) : json_object();
	for (int i = 0; i < n; i++) {
		json_t* id = identity(rs[i]);
		const char* k;
		json_t* v;
		json_object_foreach(ref, k, v)
		{
			json_t* o = json_object_get(id, k);
			if (o && json_equal(o, v)) continue;
			if (arm[i] && allowed(k, sw, nsw)) continue;
			veto(vetoes, "identity", "%s: %s in A, %s in %s", k, json_string_value(v), o ? json_string_value(o) : "(absent)",
			     arm[i] ? "B" : "a later A");
		}
		json_object_foreach(id, k, v)
		if (!json_object_get(ref, k) && !(arm[i] && allowed(k, sw, nsw)))
			veto(vetoes, "identity", "%s: absent in A, %s in %s", k, json_string_value(v), arm[i] ? "B" : "a later A");
		json_decref(id);
		const char* st = json_string_value(json_object_get(rs[i], "status"));
		if (!st || strcmp(st, "ok"))
			veto(vetoes, "status", "receipt %lld ended %s", (long long)json_integer_value(json_object_get(rs[i], "id")), st ? st : "?");
	}
	json_decref(ref);
	/* clocks and temperature across the court */
	const char* clocks[] = { "cpu_mhz", "gpu_sm_mhz", "gpu_mem_mhz" };
	for (int c = 0; c < 3; c++) {
		double lo = 0, hi = 0;
		int have;
		range_of(rs, n, NULL, clocks[c], &lo, &hi, &have);
		if (have && hi > 0 && (hi - lo) / hi > lim->max_clock_drift)
			veto(vetoes, "clock-drift", "%s moved from %.0f to %.0f MHz (%.1f%%, limit %.1f%%)", clocks[c], lo, hi, 100 * (hi - lo) / hi,
			     100 * lim->max_clock_drift);
	}
	double tlo = 0, thi = 0;
	int have_t;
	range_of(rs, n, NULL, "gpu_temp_c", &tlo, &thi, &have_t);
	if (have_t && thi - tlo > lim->max_temp_drift_c)
		veto(vetoes, "clock-drift", "GPU temperature moved from %.0f to %.0f C (limit %.0f)", tlo, thi, lim->max_temp_drift_c);
	/* exactness */
	if (exact_a == 0) veto(vetoes, "exactness", "the exactness court failed for arm A");
	if (exact_b == 0) veto(vetoes, "exactness", "the exactness court failed for arm B");
	if (lim->same_tokens) {
		const char* ta = NULL;
		for (int i = 0; i < n; i++) {
			const char* t = json_string_value(json_object_get(json_object_get(rs[i], "extra"), "tokens_digest"));
			if (!t) continue;
			if (!ta) ta = t;
			else if (strcmp(ta, t))
				veto(vetoes, "exactness", "receipt %lld generated other tokens than the first run (%.12s vs %.12s)",
				     (long long)json_integer_value(json_object_get(rs[i], "id")), t, ta);
		}
	}
	if (lim->same_acceptance) {
		const char* keys[] = { "drafted", "accepted", "rollbacks" };
		for (int c = 0; c < 3; c++)
			for (int i = 1; i < n; i++) {
				double x = count_of(rs[0], keys[c]), y = count_of(rs[i], keys[c]);
				if (x != y)
					veto(vetoes, "acceptance", "%s: %.0f in receipt %lld, %.0f in receipt %lld (the change claims not to affect it)",
					     keys[c], x, (long long)json_integer_value(json_object_get(rs[0], "id")), y,
					     (long long)json_integer_value(json_object_get(rs[i], "id")));
			}
	}
	for (int c = 0; c < lim->n_needs; c++) {
		int zero = 0;
		long long first = 0;
		for (int i = 0; i < n; i++) {
			double x = count_of(rs[i], lim->needs[c]);
			if (!(x > 0) && !zero++) first = (long long)json_integer_value(json_object_get(rs[i], "id"));
		}
		if (zero)
			veto(vetoes, "unexercised", "%s is 0 in %d of %d runs (first: receipt %lld): the switch under test was not exercised",
			     lim->needs[c], zero, n, first);
	}
	/* blocks: clean ones only */
	int blocks = n / 4, clean = 0;
	double* lr = calloc((size_t)(blocks + 1), sizeof(double));
	json_t* dirty = json_array();
	for (int k = 0; k < blocks; k++) {
		int ok = 1;
		for (int j = 4 * k; j < 4 * k + 4; j++)
			if (run_dirty(rs[j], lim, why, sizeof why)) {
				json_array_append_new(dirty, json_string(why));
				ok = 0;
			}
		double r;
		if (ok && !block_ratio(rs, arm, k, fig, &r)) lr[clean++] = log(r);
	}
	if (clean < lim->min_clean_pairs) {
		veto(vetoes, "too-few", "%d clean ABBA blocks of %d (minimum %d)%s%s", clean, blocks, lim->min_clean_pairs,
		     json_array_size(dirty) ? "; " : "", json_array_size(dirty) ? json_string_value(json_array_get(dirty, 0)) : "");
		/* the load rule is named as such when it is what left too few */
		if (json_array_size(dirty)) veto(vetoes, "host-load", "%s", json_string_value(json_array_get(dirty, 0)));
	}
	double m = 0, lo = -INFINITY, hi = INFINITY;
	if (clean >= 1) interval(lr, clean, &m, &lo, &hi);
	free(lr);
	/* for the record when the clean blocks are too few: the ratio over every block */
	double all_lr[256];
	int nall = 0;
	for (int k = 0; k < blocks && nall < 256; k++) {
		double r;
		if (!block_ratio(rs, arm, k, fig, &r)) all_lr[nall++] = log(r);
	}
	double am = 0, alo = 0, ahi = 0;
	if (nall) interval(all_lr, nall, &am, &alo, &ahi);
	const char* verdict = json_array_size(vetoes) ? "invalid" : lo > 0 ? "faster" : hi < 0 ? "slower" : "no difference";
	json_t* out = json_pack("{s:s,s:s,s:f,s:o,s:o,s:i,s:i,s:o,s:o}", "court", "ab", "verdict", verdict, "ratio", clean ? exp(m) : 0.0, "lo",
	                        isfinite(lo) ? json_real(exp(lo)) : json_null(), "hi", isfinite(hi) ? json_real(exp(hi)) : json_null(),
	                        "blocks", blocks, "clean_blocks", clean, "vetoes", vetoes, "dirty_runs", dirty);
	json_object_set_new(out, "figure", json_string(fig));
	if (nall)
		json_object_set_new(out, "all_blocks", json_pack("{s:f,s:o,s:o,s:i}", "ratio", exp(am), "lo", isfinite(alo) ? json_real(exp(alo)) : json_null(),
		                                                 "hi", isfinite(ahi) ? json_real(exp(ahi)) : json_null(), "blocks", nall));
	json_t* s = json_array();
	for (int i = 0; i < nsw; i++) json_array_append_new(s, json_string(sw[i]));
	json_object_set_new(out, "switch", s);
	json_t* ids = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(ids, json_pack("{s:I,s:s}", "id", json_integer_value(json_object_get(rs[i], "id")), "arm", arm[i] ? "B" : "A"));
	json_object_set_new(out, "receipts", ids);
	return out;
}
