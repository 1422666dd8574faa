/*
 * test_kernels.c: the thread pool and the matmul/dot/axpy kernels (src/base/pool.c, src/cpu/matmul.c,
 * src/matmul_avx2.c).
 *
 * What is checked, for F32, F16 and BF16 weights, for the AVX2/FMA kernels (when the CPU has
 * them) and the portable ones:
 *   - accuracy against a double-precision reference, with the bound justified at err_bound();
 *   - batch invariance, bit for bit: every row alone, all 128 rows together and random subsets
 *     of 1..20 rows in random order give the same bytes for a row;
 *   - invariance across thread counts (inline, 1, 2, 3 threads) and between pv_matmul and
 *     pv_matmul_rows over arbitrary splits of the output rows;
 *   - every output element is written (buffers are poisoned with NaN first), and nothing
 *     outside [o0, o1) or between rows (ldy > out) is;
 *   - 2-byte weights at odd addresses;
 * plus pv_dot_f32, pv_axpy_f32 and a stress test of the pool.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "cpu/ops.h"

/* ---- helpers -------------------------------------------------------------------------- */

/* every case starts from the same state, so that it sees the same numbers run alone or not */
#define RNG_SEED 0x9e3779b97f4a7c15ull
static uint64_t rng_state = RNG_SEED;
static int have_avx2;
static uint32_t rnd(void)
{
	/* xorshift64*: reproducible across platforms */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float frnd(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* Decoders written independently of the library's (ldexp, not bit surgery). */
static double f16_ref(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return s ? -v : v;
}
static double bf16_ref(uint16_t h)
{
	int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
	double v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
	return s ? -v : v;
}

/* A random finite weight of each type, with zeros, negative zeros and (for F16) subnormals
 * mixed in, so the conversions see their awkward cases. */
static void rand_weight(void* dst, enum pv_dtype type)
{
	uint32_t r = rnd();
	int special = (r & 63) == 0; /* 1 in 64 */
	if (type == PV_F32) {
		float f = special ? ((r & 64) ? -0.0f : 0.0f) : frnd();
		memcpy(dst, &f, 4);
	} else if (type == PV_BF16) {
		uint16_t h = special ? (uint16_t)((r & 64) ? 0x8000 : 0) : (uint16_t)(f2u(frnd()) >> 16);
		memcpy(dst, &h, 2);
	} else {
		uint16_t h;
		if (special) {
			/* zero, negative zero, or a subnormal */
			h = (r & 64) ? (uint16_t)(0x8000 | (rnd() & 0x3ff)) : (uint16_t)(rnd() & 0x3ff);
		} else {
			/* exponent 1..15: magnitudes up to 2 */
			h = (uint16_t)((rnd() & 0x8000) | ((1 + rnd() % 15) << 10) | (rnd() & 0x3ff));
		}
		memcpy(dst, &h, 2);
	}
}

static double weight_ref(const unsigned char* w, enum pv_dtype type, size_t idx)
{
	if (type == PV_F32) {
		float f;
		memcpy(&f, w + idx * 4, 4);
		return f;
	}
	uint16_t h;
	memcpy(&h, w + idx * 2, 2);
	return type == PV_F16 ? f16_ref(h) : bf16_ref(h);
}

static const char* type_name(enum pv_dtype t)
{
	return t == PV_F32 ? "f32" : t == PV_F16 ? "f16" : "bf16";
}

static void fill_nan(float* p, size_t n)
{
	for (size_t i = 0; i < n; i++) p[i] = NAN;
}

/*
 * Error bound. Each output is sum_i w_i x_i over n terms, computed as 8 lanes that each add
 * ceil(n/8) products (the padded tail adds exact zeros) and then 3 levels of pairwise adds.
 * Every product reaches the result through at most k = 1 (product rounding; none with FMA)
 * + ceil(n/8) (lane adds) + 3 (reduction) roundings, so the classic bound for summation
 * (Higham, Accuracy and Stability, 3.1) gives |y - exact| <= gamma_k * sum_i |w_i x_i| with
 * gamma_k = k u / (1 - k u), u = 2^-24. The conversions to f32 are exact, so `exact` is the
 * double-precision reference (its own error, ~n * 2^-53 relative, is far below this).
 */
static double err_bound(int64_t n, double abs_sum)
{
	double k = (double)((n + 7) / 8) + 4.0, u = ldexp(1.0, -24);
	return k * u / (1.0 - k * u) * abs_sum * 1.000001 + 1e-30;
}

/* ---- matmul --------------------------------------------------------------------------- */

enum { TMAX = 128 };
static const int ins[] = { 1, 7, 8, 9, 33, 130, 1000 };
static const int outs[] = { 1, 3, 17, 64, 257 };

struct fixture {
	enum pv_dtype type;
	int in, out, ldx, ldy;
	unsigned char* wbuf;     /* allocation                                  */
	struct pv_tensor W;      /* view, possibly at an odd address into wbuf */
	float* x;                /* [TMAX, ldx]                                 */
	double* ref;             /* [TMAX, out]                                 */
	double* bound;           /* [TMAX, out]                                 */
};

static struct pv_pool* pools[4]; /* NULL (inline), 1, 2, 3 threads */

static void fixture_make(struct fixture* f, enum pv_dtype type, int in, int out, int odd)
{
	size_t es = pv_dtype_size(type);
	f->type = type;
	f->in = in;
	f->out = out;
	f->ldx = in + 3;   /* strides differ from the widths: catches ld mix-ups */
	f->ldy = out + 5;
	f->wbuf = malloc((size_t)out * in * es + 8);
	unsigned char* w = f->wbuf + (odd ? 1 : 0);
	for (size_t i = 0; i < (size_t)out * in; i++) rand_weight(w + i * es, type);
	f->W = (struct pv_tensor){ w, type, out, in };
	f->x = malloc(sizeof(float) * TMAX * f->ldx);
	for (int i = 0; i < TMAX * f->ldx; i++) f->x[i] = frnd();
	f->ref = malloc(sizeof(double) * TMAX * out);
	f->bound = malloc(sizeof(double) * TMAX * out);
	double* wd = malloc(sizeof(double) * out * in);
	for (size_t i = 0; i < (size_t)out * in; i++) wd[i] = weight_ref(w, type, i);
	for (int t = 0; t < TMAX; t++)
		for (int o = 0; o < out; o++) {
			double s = 0, a = 0;
			for (int i = 0; i < in; i++) {
				double p = wd[(size_t)o * in + i] * f->x[t * f->ldx + i];
				s += p;
				a += fabs(p);
			}
			f->ref[t * out + o] = s;
			f->bound[t * out + o] = err_bound(in, a);
		}
	free(wd);
}

static void fixture_free(struct fixture* f)
{
	free(f->wbuf);
	free(f->x);
	free(f->ref);
	free(f->bound);
}

/* Rows [t0, t0+T) of y hold rows idx[0..T) of the full batch `all`: bitwise equal? */
static int rows_equal(const struct fixture* f, const float* y, const float* all, const int* idx,
                      int T)
{
	for (int t = 0; t < T; t++)
		if (memcmp(y + (size_t)t * f->ldy, all + (size_t)idx[t] * f->ldy,
		           sizeof(float) * f->out))
			return 0;
	return 1;
}

/* Elements of y outside the [o0, o1) columns of each of T rows are still NaN? */
static int untouched_outside(const struct fixture* f, const float* y, int T, int o0, int o1)
{
	for (int t = 0; t < T; t++)
		for (int o = 0; o < f->ldy; o++)
			if ((o < o0 || o >= o1) && !isnan(y[(size_t)t * f->ldy + o])) return 0;
	return 1;
}

static void check_matmul(const struct fixture* f, const char* path)
{
	const int out = f->out, ldy = f->ldy;
	const size_t ysz = (size_t)TMAX * ldy;
	float* all = malloc(sizeof(float) * ysz);
	float* y = malloc(sizeof(float) * ysz);
	float* xs = malloc(sizeof(float) * TMAX * f->ldx);
	int idx[TMAX];
	char what[96];
	snprintf(what, sizeof what, "%s %s in=%d out=%d", path, type_name(f->type), f->in, out);

	/* All rows at once (2 threads); everything written, nothing between rows; accuracy. */
	fill_nan(all, ysz);
	pv_matmul(pools[2], all, ldy, f->x, f->ldx, TMAX, &f->W);
	int written = 1, accurate = 1;
	double worst = 0;
	for (int t = 0; t < TMAX; t++)
		for (int o = 0; o < out; o++) {
			float v = all[(size_t)t * ldy + o];
			if (isnan(v)) written = 0;
			double e = fabs((double)v - f->ref[t * out + o]);
			if (!(e <= f->bound[t * out + o])) accurate = 0;
			if (f->bound[t * out + o] > 0 && e / f->bound[t * out + o] > worst)
				worst = e / f->bound[t * out + o];
		}
	CHECK(written, "%s: an output was not written", what);
	CHECK(untouched_outside(f, all, TMAX, 0, out), "%s: wrote between rows", what);
	CHECK(accurate, "%s: error above bound (worst %.3g x bound)", what, worst);

	/* Every row alone. */
	int alone_ok = 1;
	for (int t = 0; t < TMAX; t++) {
		fill_nan(y, (size_t)ldy);
		pv_matmul(pools[t % 4], y, ldy, f->x + (size_t)t * f->ldx, f->ldx, 1, &f->W);
		idx[0] = t;
		if (!rows_equal(f, y, all, idx, 1)) alone_ok = 0;
	}
	CHECK(alone_ok, "%s: a row computed alone differs from the batch", what);

	/* Random subsets of 1..20 rows in random order, through every pool. */
	int subset_ok = 1;
	for (int T = 1; T <= 20; T++) {
		int perm[TMAX];
		for (int i = 0; i < TMAX; i++) perm[i] = i;
		for (int i = 0; i < T; i++) {
			int j = i + (int)(rnd() % (uint32_t)(TMAX - i));
			int tmp = perm[i];
			perm[i] = perm[j];
			perm[j] = tmp;
			idx[i] = perm[i];
			memcpy(xs + (size_t)i * f->ldx, f->x + (size_t)idx[i] * f->ldx, sizeof(float) * f->in);
		}
		fill_nan(y, (size_t)T * ldy);
		pv_matmul(pools[T % 4], y, ldy, xs, f->ldx, T, &f->W);
		if (!rows_equal(f, y, all, idx, T)) subset_ok = 0;
	}
	CHECK(subset_ok, "%s: a random subset of rows differs from the batch", what);

	/* The first T rows for T = 1..20 (contiguous batches, as decode/verify use them). */
	int prefix_ok = 1;
	for (int T = 1; T <= 20; T++) {
		fill_nan(y, (size_t)T * ldy);
		pv_matmul(pools[(T + 1) % 4], y, ldy, f->x, f->ldx, T, &f->W);
		for (int i = 0; i < T; i++) idx[i] = i;
		if (!rows_equal(f, y, all, idx, T)) prefix_ok = 0;
	}
	CHECK(prefix_ok, "%s: a prefix batch differs from the full batch", what);

	/* pv_matmul_rows over a random split of the output rows, each piece on a random pool:
	 * same bytes, and one piece alone writes only its own columns. */
	int split_ok = 1, confined = 1;
	int T = (out * f->in > 20000) ? 24 : TMAX;
	fill_nan(y, ysz);
	for (int o0 = 0; o0 < out;) {
		int o1 = o0 + 1 + (int)(rnd() % (uint32_t)(out - o0 > 40 ? 40 : out - o0));
		pv_matmul_rows(pools[rnd() % 4], y, ldy, f->x, f->ldx, T, &f->W, o0, o1);
		o0 = o1;
	}
	for (int i = 0; i < T; i++) idx[i] = i;
	if (!rows_equal(f, y, all, idx, T)) split_ok = 0;
	{
		int o0 = out > 2 ? 1 : 0, o1 = out > 2 ? out - 1 : out;
		fill_nan(y, ysz);
		pv_matmul_rows(pools[3], y, ldy, f->x, f->ldx, 5, &f->W, o0, o1);
		confined = untouched_outside(f, y, 5, o0, o1);
		for (int t = 0; t < 5; t++)
			if (memcmp(y + (size_t)t * ldy + o0, all + (size_t)t * ldy + o0, sizeof(float) * (o1 - o0)))
				split_ok = 0;
		fill_nan(y, ysz);
		pv_matmul_rows(pools[2], y, ldy, f->x, f->ldx, 3, &f->W, o0, o0); /* empty */
		if (!untouched_outside(f, y, 3, 0, 0)) confined = 0;
	}
	CHECK(split_ok, "%s: pv_matmul_rows split differs from pv_matmul", what);
	CHECK(confined, "%s: pv_matmul_rows wrote outside its rows", what);

	free(all);
	free(y);
	free(xs);
}

/* The two kernel sets agree with each other as closely as each agrees with the reference. */
static void check_sets_agree(const struct fixture* f)
{
	size_t n = (size_t)8 * f->ldy;
	float* a = malloc(sizeof(float) * n);
	float* b = malloc(sizeof(float) * n);
	pv_ops_force_generic(0);
	pv_matmul(pools[2], a, f->ldy, f->x, f->ldx, 8, &f->W);
	pv_ops_force_generic(1);
	pv_matmul(pools[2], b, f->ldy, f->x, f->ldx, 8, &f->W);
	pv_ops_force_generic(0);
	int ok = 1;
	for (int t = 0; t < 8; t++)
		for (int o = 0; o < f->out; o++)
			if (!(fabs((double)a[t * f->ldy + o] - b[t * f->ldy + o]) <= 2 * f->bound[t * f->out + o]))
				ok = 0;
	CHECK(ok, "avx2 and generic disagree beyond the bound (in=%d out=%d)", f->in, f->out);
	free(a);
	free(b);
}

TEST_CASE(matmul)
{
	rng_state = RNG_SEED;
	static const enum pv_dtype types[] = { PV_F32, PV_F16, PV_BF16 };
	int k = 0;
	for (int ti = 0; ti < 3; ti++)
		for (size_t ii = 0; ii < sizeof ins / sizeof *ins; ii++)
			for (size_t oi = 0; oi < sizeof outs / sizeof *outs; oi++, k++) {
				struct fixture f;
				/* 2-byte weights at an odd address every other time */
				int odd = types[ti] != PV_F32 && (k & 1);
				fixture_make(&f, types[ti], ins[ii], outs[oi], odd);
				if (have_avx2) {
					pv_ops_force_generic(0);
					check_matmul(&f, "avx2");
					check_sets_agree(&f);
				}
				pv_ops_force_generic(1);
				check_matmul(&f, "generic");
				pv_ops_force_generic(0);
				fixture_free(&f);
			}
}

/* ---- dot, axpy ------------------------------------------------------------------------ */

TEST_CASE(dot_axpy)
{
	rng_state = RNG_SEED;
	for (int g = have_avx2 ? 0 : 1; g < 2; g++) {
		pv_ops_force_generic(g);
		const char* path = g ? "generic" : "avx2";
		int same_as_matmul = 1, accurate = 1, axpy_exact = 1, axpy_pos = 1;
		for (int n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
			float* a = malloc(sizeof(float) * (n + 1));
			float* b = malloc(sizeof(float) * (n + 1));
			for (int i = 0; i < n; i++) {
				a[i] = frnd();
				b[i] = frnd();
			}
			/* dot equals the F32 matmul of the same row (a as weights) */
			float d = pv_dot_f32(a, b, n), y = NAN;
			if (n > 0) {
				struct pv_tensor W = { a, PV_F32, 1, n };
				pv_matmul(NULL, &y, 1, b, n, 1, &W);
				if (f2u(y) != f2u(d)) same_as_matmul = 0;
			} else if (d != 0.0f) {
				same_as_matmul = 0;
			}
			double s = 0, abs_sum = 0;
			for (int i = 0; i < n; i++) {
				s += (double)a[i] * b[i];
				abs_sum += fabs((double)a[i] * b[i]);
			}
			if (!(fabs(d - s) <= err_bound(n, abs_sum))) accurate = 0;

			/* axpy: each element is fma(a, x, y) (avx2) or y + a*x (generic), and does not
			 * depend on where in the vector it sits */
			float* y1 = malloc(sizeof(float) * (n + 1));
			float* y2 = malloc(sizeof(float) * (n + 1));
			float alpha = frnd();
			for (int i = 0; i < n; i++) y1[i] = y2[i] = frnd();
			for (int i = 0; i < n; i++) {
				float want = g ? y1[i] + alpha * b[i] : fmaf(alpha, b[i], y1[i]);
				float yi = y1[i];
				pv_axpy_f32(&yi, alpha, b + i, 1);
				if (f2u(yi) != f2u(want)) axpy_exact = 0;
			}
			pv_axpy_f32(y1, alpha, b, n);
			int cut = n / 3;
			pv_axpy_f32(y2 + cut, alpha, b + cut, n - cut);
			pv_axpy_f32(y2, alpha, b, cut);
			if (n && memcmp(y1, y2, sizeof(float) * n)) axpy_pos = 0;
			free(a);
			free(b);
			free(y1);
			free(y2);
		}
		CHECK(same_as_matmul, "%s: pv_dot_f32 differs from the F32 matmul", path);
		CHECK(accurate, "%s: pv_dot_f32 error above bound", path);
		CHECK(axpy_exact, "%s: pv_axpy_f32 element differs from its formula", path);
		CHECK(axpy_pos, "%s: pv_axpy_f32 depends on the split", path);
	}
	pv_ops_force_generic(0);
}

/* ---- pool ----------------------------------------------------------------------------- */

struct count_ctx {
	atomic_int* hits; /* per task */
	int n_threads;
	atomic_int bad_thread;
};

static void count_task(void* ctx, int task, int thread)
{
	struct count_ctx* c = ctx;
	atomic_fetch_add_explicit(&c->hits[task], 1, memory_order_relaxed);
	if (thread < 0 || thread >= c->n_threads) atomic_store(&c->bad_thread, 1);
}

/* Plain (non-atomic) per-thread writes, read after the run: the run must order them. */
struct slot_ctx {
	int* slot;
	int value;
};
static void slot_task(void* ctx, int task, int thread)
{
	struct slot_ctx* c = ctx;
	c->slot[task] = c->value + task;
}

TEST_CASE(pool)
{
	rng_state = RNG_SEED;
	enum { MAXT = 1000 };
	static atomic_int hits[MAXT];
	int threads_ok = 1, once_ok = 1, bad = 0;

	for (int pi = 0; pi < 4; pi++) {
		struct pv_pool* p = pools[pi];
		int nt = pv_pool_threads(p);
		if (nt != (pi == 0 ? 1 : pi)) threads_ok = 0;
		/* many runs of assorted sizes, including 0, 1, fewer and more tasks than threads */
		for (int run = 0; run < 3000; run++) {
			int n = run % 7 == 0 ? 0 : run % 11 == 0 ? MAXT : (int)(rnd() % 9);
			for (int i = 0; i < n; i++) atomic_store(&hits[i], 0);
			struct count_ctx c = { hits, nt, 0 };
			pv_pool_run(p, count_task, &c, n);
			for (int i = 0; i < n; i++)
				if (atomic_load(&hits[i]) != 1) once_ok = 0;
			if (atomic_load(&c.bad_thread)) bad = 1;
		}
	}
	CHECK(threads_ok, "pv_pool_threads");
	CHECK(once_ok, "a task ran other than exactly once");
	CHECK(!bad, "a task saw a thread index out of range");

	/* Plain writes made by tasks are visible to the caller after the run. */
	{
		int slot[64];
		int ok = 1;
		for (int run = 0; run < 2000; run++) {
			struct slot_ctx c = { slot, run };
			pv_pool_run(pools[3], slot_task, &c, 64);
			for (int i = 0; i < 64; i++)
				if (slot[i] != run + i) ok = 0;
		}
		CHECK(ok, "task writes not visible after pv_pool_run");
	}

	/* Pools created and freed at once, after one run, and after the workers fell asleep. */
	{
		int ok = 1;
		for (int i = 0; i < 40; i++) {
			struct pv_pool* p = pv_pool_new(1 + i % 4);
			if (!p) {
				ok = 0;
				continue;
			}
			if (i % 2) {
				for (int k = 0; k < 16; k++) atomic_store(&hits[k], 0);
				struct count_ctx c = { hits, pv_pool_threads(p), 0 };
				pv_pool_run(p, count_task, &c, 16);
				for (int k = 0; k < 16; k++)
					if (atomic_load(&hits[k]) != 1) ok = 0;
			}
			pv_pool_free(p);
		}
		CHECK(ok, "create / run / free cycles");
		struct pv_pool* p = pv_pool_new(0);
		CHECK(p && pv_pool_threads(p) >= 1, "pv_pool_new(0)");
		pv_pool_free(p);
		pv_pool_free(NULL);
		CHECK(pv_pool_threads(NULL) == 1, "NULL pool has one thread");
	}

	/* Wake-up after sleep: workers stop spinning after a while; a run must still work. */
	{
		struct timespec ts = { 0, 30 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		for (int k = 0; k < 64; k++) atomic_store(&hits[k], 0);
		struct count_ctx c = { hits, 3, 0 };
		pv_pool_run(pools[3], count_task, &c, 64);
		int ok = 1;
		for (int k = 0; k < 64; k++)
			if (atomic_load(&hits[k]) != 1) ok = 0;
		CHECK(ok, "run after the workers went to sleep");
	}
}

static int setup(void)
{
	pools[0] = NULL;
	for (int i = 1; i < 4; i++) pools[i] = pv_pool_new(i);
	have_avx2 = strcmp(pv_ops_isa(), "avx2+fma") == 0;
	if (!have_avx2) printf("test_kernels: no AVX2/FMA here, testing the generic kernels only\n");
	return 0;
}

static void teardown(void)
{
	for (int i = 1; i < 4; i++) pv_pool_free(pools[i]);
}

TEST_CASE(isa)
{
	pv_ops_force_generic(1);
	CHECK(strcmp(pv_ops_isa(), "generic") == 0, "forced generic isa is %s", pv_ops_isa());
	pv_ops_force_generic(0);
	CHECK(have_avx2 || strcmp(pv_ops_isa(), "generic") == 0, "isa %s", pv_ops_isa());
}

int main(int argc, char** argv)
{
	return t_main(argc, argv, "test_kernels", setup, teardown);
}
