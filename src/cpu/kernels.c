/*
 * kernels.c: the choice of kernel set and numerics (struct pv_kernels, ops.h), the panels of the
 * fast numerics, and pv_mm_rows, which sends a product to the kernels that implement it:
 *
 *   exact numerics, or F32/F16 weights, or BF16 without AVX512-BF16:
 *       matmul.c / qmatmul.c (AVX2/FMA kernels for the avx2 and avx512 sets, else portable)
 *   fast numerics, quantized weights:   activation rows -> Q8 / Q8K once per call, then
 *       avx512 / avx2: qgemm_avx512.c / qgemm_avx2.c on the panels;  generic (or no panels):
 *       qdot.c's reference
 *   fast numerics, BF16 weights, AVX512-BF16:  activation rows -> bf16, then vdpbf16ps
 *
 * Work is split into pool tasks by output rows (whole panels; one task writes a contiguous run
 * of outputs, so threads never share a cache line of y except at the ends of a call's range)
 * and, when there are too few row blocks, by activation rows. The split never changes a result.
 */
#include "cpu/kern.h"
#include "cpu/qdot.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#define PV_X86 1
#else
#define PV_X86 0
#endif

/* ---- the CPU ---------------------------------------------------------------------------- */

static atomic_int g_best = -1, g_bf16 = -1;

static void probe(void)
{
	int best = PV_ISA_GENERIC, bf16 = 0;
#if PV_X86
	__builtin_cpu_init();
	/* libgcc also checks that the OS saves the ymm / zmm state */
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) {
		best = PV_ISA_AVX2;
		if (pv_have_avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
		    __builtin_cpu_supports("avx512vnni")) {
			best = PV_ISA_AVX512;
			bf16 = __builtin_cpu_supports("avx512bf16");
		}
	}
#endif
	/* racing probes store the same answers */
	atomic_store_explicit(&g_bf16, bf16, memory_order_relaxed);
	atomic_store_explicit(&g_best, best, memory_order_relaxed);
}

int pv_isa_best(void)
{
	int v = atomic_load_explicit(&g_best, memory_order_relaxed);
	if (v < 0) {
		probe();
		v = atomic_load_explicit(&g_best, memory_order_relaxed);
	}
	return v;
}

int pv_isa_has_bf16(void)
{
	pv_isa_best();
	return atomic_load_explicit(&g_bf16, memory_order_relaxed);
}

const char* pv_isa_name(int isa) { return isa == PV_ISA_AVX512 ? "avx512" : isa == PV_ISA_AVX2 ? "avx2" : "generic"; }

const char* pv_isa_describe(void)
{
	const int b = pv_isa_best();
	return b == PV_ISA_AVX512 ? (pv_isa_has_bf16() ? "avx512+vnni+bf16" : "avx512+vnni") : b == PV_ISA_AVX2 ? "avx2+fma" : "generic";
}

/* ---- kernel choice and panels ----------------------------------------------------------- */

struct pv_packed {
	const unsigned char* src; /* the matrix as stored                 */
	size_t src_bytes;
	enum pv_dtype type;
	int64_t rows, cols;
	unsigned char* data; /* ceil(rows / 16) panels              */
	size_t bytes;
};

void pv_kernels_init(struct pv_kernels* k, int isa, int exact)
{
	memset(k, 0, sizeof *k);
	const int best = pv_isa_best();
	k->isa = isa < PV_ISA_GENERIC ? PV_ISA_GENERIC : isa > best ? best : isa;
	k->exact = exact ? 1 : 0;
	k->bf16 = !k->exact && k->isa >= PV_ISA_AVX512 && pv_isa_has_bf16();
	k->moe_group = 1;
}

static int cmp_packed(const void* a, const void* b)
{
	const struct pv_packed *x = a, *y = b;
	return x->src < y->src ? -1 : x->src > y->src;
}

/* The panels of all of a model's matrices live in one region: 2 MiB pages where the kernel
 * grants them (decode streams the panels, so fewer TLB misses; and 512 times fewer faults when
 * they are written at model open). */
#define REGION_ALIGN ((size_t)2 << 20)

static unsigned char* region_alloc(size_t bytes, void** base, size_t* mapped)
{
#ifdef __linux__
	*mapped = (bytes + 2 * REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
	void* p = mmap(NULL, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) return NULL;
	*base = p;
	unsigned char* a = (unsigned char*)(((uintptr_t)p + REGION_ALIGN - 1) & ~(uintptr_t)(REGION_ALIGN - 1));
	madvise(a, *mapped - (size_t)(a - (unsigned char*)p), MADV_HUGEPAGE); /* a hint: failure is fine */
	return a;
#else
	*mapped = bytes;
	*base = pv_aligned_alloc(bytes ? bytes : 64);
	return *base;
#endif
}

static void region_free(void* base, size_t mapped)
{
	if (!base) return;
#ifdef __linux__
	munmap(base, mapped);
#else
	(void)mapped;
	free(base);
#endif
}

/* Packing work, cut into pieces of about 1 MiB of panels, shared by a few threads. */
struct pack_work {
	const struct pv_packed* pk;
	int m;
	int64_t chunk_bytes;
	atomic_int next;
	int n_items;
	int* item_mat;    /* per item: the matrix ...        */
	int64_t* item_p0; /* ... and its first panel         */
	const unsigned char *release_lo, *release_hi; /* pv_kernels.release_lo/hi */
};

/* madvise(MADV_DONTNEED) over the whole pages inside [s0, s1) when that range lies in the file
 * mapping [lo, hi) (clean, read-only pages: they leave the resident set and stay in the page
 * cache; a later read faults the same bytes back in). */
static void release_range(const unsigned char* s0, const unsigned char* s1, const unsigned char* lo, const unsigned char* hi)
{
	const long pg = sysconf(_SC_PAGESIZE);
	if (!lo || pg <= 0 || s0 < lo || s1 > hi) return;
	const uintptr_t ps = (uintptr_t)pg, a = ((uintptr_t)s0 + ps - 1) / ps * ps, b = (uintptr_t)s1 / ps * ps;
	if (b > a) madvise((void*)a, b - a, MADV_DONTNEED); /* a hint: failure is fine */
}

static void* pack_worker(void* arg)
{
	struct pack_work* w = arg;
	for (;;) {
		int it = atomic_fetch_add(&w->next, 1);
		if (it >= w->n_items) break;
		const struct pv_packed* e = &w->pk[w->item_mat[it]];
		const int64_t np = (e->rows + PV_PANEL - 1) / PV_PANEL, per = e->bytes / (size_t)np;
		const int64_t span = w->chunk_bytes / per > 0 ? w->chunk_bytes / per : 1;
		const int64_t p0 = w->item_p0[it], p1 = np - p0 < span ? np : p0 + span;
		pv_pack_panels_range(e->type, e->src, e->rows, e->cols, e->data, p0, p1);
		/* the stored rows of these panels are done with: off the resident set */
		const size_t rb = pv_dtype_row_bytes(e->type, e->cols);
		const int64_t r1 = p1 * PV_PANEL < e->rows ? p1 * PV_PANEL : e->rows;
		release_range(e->src + (size_t)(p0 * PV_PANEL) * rb, e->src + (size_t)r1 * rb, w->release_lo, w->release_hi);
	}
	return NULL;
}

int pv_kernels_pack(struct pv_kernels* k, const struct pv_tensor* const* W, int n)
{
	if (k->exact || k->isa < PV_ISA_AVX2) return 0;
	struct pv_packed* pk = calloc((size_t)(n > 0 ? n : 1), sizeof *pk);
	if (!pk) return -1;
	int m = 0;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		const struct pv_tensor* w = W[i];
		if (!w || !w->data || !pv_dtype_is_quant(w->type) || w->rows <= 0 || w->cols <= 0 ||
		    w->cols % pv_dtype_block(w->type))
			continue;
		int dup = 0;
		for (int j = 0; j < m; j++) dup |= pk[j].src == w->data;
		if (dup) continue;
		pk[m] = (struct pv_packed){
			w->data, pv_dtype_row_bytes(w->type, w->cols) * (size_t)w->rows, w->type, w->rows, w->cols, NULL, 0
		};
		pk[m].bytes = (size_t)((w->rows + PV_PANEL - 1) / PV_PANEL) * pv_panel_bytes(w->type, w->cols);
		total += pv_a64(pk[m].bytes);
		m++;
	}
	unsigned char* region = m ? region_alloc(total, &k->region, &k->region_bytes) : NULL;
	if (m && !region) {
		free(pk);
		return -1;
	}
	/* work items: each matrix in pieces of about 1 MiB */
	const int64_t chunk = (int64_t)1 << 20;
	int n_items = 0;
	for (int i = 0; i < m; i++) {
		pk[i].data = region;
		region += pv_a64(pk[i].bytes);
		const int64_t np = (pk[i].rows + PV_PANEL - 1) / PV_PANEL, per = (int64_t)(pk[i].bytes / (size_t)np);
		const int64_t span = chunk / per > 0 ? chunk / per : 1;
		n_items += (int)((np + span - 1) / span);
	}
	struct pack_work w = { pk,
		               m,
		               chunk,
		               0,
		               n_items,
		               calloc((size_t)n_items + 1, sizeof(int)),
		               calloc((size_t)n_items + 1, sizeof(int64_t)),
		               k->release_lo,
		               k->release_hi };
	if (!w.item_mat || !w.item_p0) {
		free(w.item_mat);
		free(w.item_p0);
		region_free(k->region, k->region_bytes);
		k->region = NULL;
		free(pk);
		return -1;
	}
	for (int i = 0, it = 0; i < m; i++) {
		const int64_t np = (pk[i].rows + PV_PANEL - 1) / PV_PANEL, per = (int64_t)(pk[i].bytes / (size_t)np);
		const int64_t span = chunk / per > 0 ? chunk / per : 1;
		for (int64_t p = 0; p < np; p += span, it++) {
			w.item_mat[it] = i;
			w.item_p0[it] = p;
		}
	}
	/* a few threads (the work is memory-bound beyond that); where the system refuses one, the
	 * caller does more of the work */
	enum { MAX_PACKERS = 8 };
	pthread_t th[MAX_PACKERS];
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	int nth = online < 1 ? 1 : online > MAX_PACKERS ? MAX_PACKERS : (int)online, started = 0;
	for (int i = 1; i < nth && i < n_items; i++)
		if (!pthread_create(&th[started], NULL, pack_worker, &w)) started++;
	pack_worker(&w);
	for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
	free(w.item_mat);
	free(w.item_p0);
	qsort(pk, (size_t)m, sizeof *pk, cmp_packed);
	k->packs = pk;
	k->n_packs = m;
	return 0;
}

void pv_kernels_free(struct pv_kernels* k)
{
	free(k->packs);
	region_free(k->region, k->region_bytes);
	k->region = NULL;
	k->region_bytes = 0;
	k->packs = NULL;
	k->n_packs = 0;
}

void pv_kernels_release_sources(const struct pv_kernels* k, const void* map, size_t len)
{
	const unsigned char* lo = map;
	for (int i = 0; map && i < k->n_packs; i++)
		release_range(k->packs[i].src, k->packs[i].src + k->packs[i].src_bytes, lo, lo + len);
}

uint64_t pv_kernels_packed_bytes(const struct pv_kernels* k)
{
	uint64_t b = 0;
	for (int i = 0; i < k->n_packs; i++) b += k->packs[i].bytes;
	return b;
}

/* The panels holding W (a view of a packed matrix starting at a whole panel), or NULL. */
static const unsigned char* find_panels(const struct pv_kernels* k, const struct pv_tensor* W)
{
	const unsigned char* p = W->data;
	int lo = 0, hi = k->n_packs - 1, at = -1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (k->packs[mid].src <= p) {
			at = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	if (at < 0) return NULL;
	const struct pv_packed* e = &k->packs[at];
	const size_t off = (size_t)(p - e->src), rb = pv_dtype_row_bytes(e->type, e->cols);
	if (e->type != W->type || e->cols != W->cols || off >= e->src_bytes || off % rb) return NULL;
	const int64_t row = (int64_t)(off / rb);
	if (row % PV_PANEL || row + W->rows > e->rows) return NULL;
	return e->data + (size_t)(row / PV_PANEL) * pv_panel_bytes(e->type, e->cols);
}

/* ---- products --------------------------------------------------------------------------- */

size_t pv_mm_act_bytes(int rows, int64_t cols)
{
	/* room for the three formats at once (pv_mm_multi converts one row set per format) */
	const int64_t n = (cols + 255) / 256 * 256;
	const size_t b = pv_act_row_bytes(PV_ACT_Q8, n) + pv_act_row_bytes(PV_ACT_Q8K, n) + pv_act_row_bytes(PV_ACT_BF16, n);
	return b * (size_t)(rows > 0 ? rows : 0);
}

/* One product of a fast-numerics run: its matrix, rows, converted activations and share of the
 * pool's tasks. */
struct fout {
	float* y;
	int ldy;
	const struct pv_tensor* W;
	const unsigned char* panels; /* NULL: the portable kernel on the stored rows */
	int fmt, T;
	const float* x;              /* the input (identifies shared conversions)     */
	int ldx;
	const unsigned char* act;    /* T converted rows, as bytes apart              */
	size_t as;
	int64_t base, o0, o1, rows_per_task;
	int t_per_task, n_row_tasks, n_tasks, task0;
};

struct fjob {
	const struct pv_kernels* k;
	struct fout* outs;
	int n;
};

static void fast_task(void* ctx, int task, int thread)
{
	(void)thread;
	const struct fjob* j = ctx;
	int lo = 0, hi = j->n - 1; /* the output whose tasks hold this one */
	while (lo < hi) {
		const int mid = (lo + hi + 1) / 2;
		if (j->outs[mid].task0 <= task) lo = mid;
		else hi = mid - 1;
	}
	const struct fout* f = &j->outs[lo];
	task -= f->task0;
	int64_t a = f->base + (int64_t)(task % f->n_row_tasks) * f->rows_per_task, b = a + f->rows_per_task;
	a = a < f->o0 ? f->o0 : a;
	b = b > f->o1 ? f->o1 : b;
	const int t0 = (task / f->n_row_tasks) * f->t_per_task;
	const int nt = f->T - t0 < f->t_per_task ? f->T - t0 : f->t_per_task;
	if (a >= b || nt <= 0) return;
	float* y = f->y + (size_t)t0 * f->ldy;
	const unsigned char* act = f->act + (size_t)t0 * f->as;
	const struct pv_tensor* W = f->W;
#if PV_X86
	if (f->fmt == PV_ACT_BF16) {
		pv_bf16gemm_avx512(y, f->ldy, act, f->as, nt, W->data, (size_t)W->cols, W->cols, a, b);
		return;
	}
	if (f->panels) {
		if (j->k->isa >= PV_ISA_AVX512) pv_qgemm_avx512(W->type, y, f->ldy, act, f->as, nt, f->panels, W->cols, a, b);
		else pv_qgemm_avx2(W->type, y, f->ldy, act, f->as, nt, f->panels, W->cols, a, b);
		return;
	}
#endif
	pv_qgemm_generic(W->type, y, f->ldy, act, f->as, nt, W->data, W->cols, a, b);
}

/* Below this many multiply-adds a run stays on the calling thread (waking the pool costs about
 * a microsecond). */
#define MIN_PARALLEL_MACS (64 * 1024)

/* The activation format of W's products in k's numerics (PV_ACT_F32: the exact kernels). */
static int fmt_of(const struct pv_kernels* k, const struct pv_tensor* W)
{
	if (k->exact) return PV_ACT_F32;
	if (pv_dtype_is_quant(W->type)) return pv_act_fmt_of(W->type);
	if (W->type == PV_BF16 && k->bf16) return PV_ACT_BF16;
	return PV_ACT_F32;
}

/* Runs a group of products whose activations are converted: all their tasks in one pool run. */
static void run_group(const struct pv_mm* c, struct fout* fo, int nf)
{
	if (!nf) return;
	const int threads = pv_pool_threads(c->pool);
	uint64_t macs = 0;
	for (int i = 0; i < nf; i++) macs += (uint64_t)(fo[i].o1 - fo[i].o0) * (uint64_t)fo[i].W->cols * (uint64_t)fo[i].T;
	const int par = threads > 1 && macs >= MIN_PARALLEL_MACS;
	int tasks = 0;
	for (int i = 0; i < nf; i++) {
		struct fout* f = &fo[i];
		const int64_t align = f->fmt == PV_ACT_BF16 ? 24 : f->panels ? PV_PANEL : 1;
		f->base = f->o0 / align * align;
		const int64_t rows = f->o1 - f->base;
		if (!par) {
			f->rows_per_task = rows;
			f->t_per_task = f->T;
			f->n_row_tasks = 1;
			f->n_tasks = 1;
		} else {
			/* every product is cut as if alone; the pool hands out all the tasks at once */
			struct pv_mm_split sp = pv_mm_split(rows, f->T, threads, align);
			f->rows_per_task = sp.rows_per_task;
			f->t_per_task = sp.t_per_task;
			f->n_row_tasks = sp.n_row_tasks;
			f->n_tasks = sp.n_tasks;
		}
		f->task0 = tasks;
		tasks += f->n_tasks;
	}
	struct fjob j = { c->k, fo, nf };
	if (par) pv_pool_run(c->pool, fast_task, &j, tasks);
	else
		for (int t = 0; t < tasks; t++) fast_task(&j, t, 0);
}

static void convert(const struct pv_kernels* k, int fmt, const float* x, int ldx, int T, int64_t n, void* dst, size_t rb)
{
#if PV_X86
	if (k->isa >= PV_ISA_AVX512) {
		pv_act_convert_avx512(fmt, x, ldx, T, n, dst, rb);
		return;
	}
#endif
	pv_act_convert(fmt, x, ldx, T, n, dst, rb);
}

/* products per pool run (a run's outputs live on the stack) */
#define MAX_GROUP 64

void pv_mm_batch(const struct pv_mm* c, const struct pv_mm_prod* p, int n)
{
	const struct pv_kernels* k = c->k;
	PV_ASSERT(k && n >= 0);
	const int avx2 = k->isa >= PV_ISA_AVX2;
	struct fout fo[MAX_GROUP];
	int nf = 0;
	size_t used = 0; /* scratch bytes the group's conversions take */
	for (int i = 0; i < n; i++) {
		const struct pv_tensor* W = p[i].W;
		PV_ASSERT(W && W->data && (unsigned)W->type < PV_DTYPE_COUNT);
		PV_ASSERT(0 <= p[i].o0 && p[i].o0 <= p[i].o1 && p[i].o1 <= W->rows);
		if (p[i].o1 == p[i].o0 || p[i].T <= 0) continue;
		const int fmt = c->act ? fmt_of(k, W) : PV_ACT_F32;
		if (fmt == PV_ACT_F32) {
			/* exact numerics (also F32/F16 weights, and calls without scratch): one run each */
			pv_matmul_rows_set(c->pool, avx2, p[i].y, p[i].ldy, p[i].x, p[i].ldx, p[i].T, W, p[i].o0, p[i].o1);
			continue;
		}
		const size_t rb = pv_act_row_bytes(fmt, W->cols);
		const int tmax = (int)(c->act_bytes / rb);
		PV_ASSERT(tmax >= 1);
		const unsigned char* panels = fmt != PV_ACT_BF16 && k->isa >= PV_ISA_AVX2 ? find_panels(k, W) : NULL;
		/* rows already converted for an earlier product of the group (the same input)? */
		const unsigned char* act = NULL;
		for (int g = 0; g < nf && !act; g++)
			if (fo[g].x == p[i].x && fo[g].ldx == p[i].ldx && fo[g].T == p[i].T && fo[g].fmt == fmt &&
			    fo[g].W->cols == W->cols)
				act = fo[g].act;
		if (!act && used + rb * (size_t)p[i].T > c->act_bytes) {
			run_group(c, fo, nf);
			nf = 0;
			used = 0;
		}
		if (!act && rb * (size_t)p[i].T > c->act_bytes) {
			/* more rows than the scratch holds: passes of tmax rows, alone */
			for (int t0 = 0; t0 < p[i].T; t0 += tmax) {
				const int nt = p[i].T - t0 < tmax ? p[i].T - t0 : tmax;
				convert(k, fmt, p[i].x + (size_t)t0 * p[i].ldx, p[i].ldx, nt, W->cols, c->act, rb);
				struct fout one = { p[i].y + (size_t)t0 * p[i].ldy, p[i].ldy, W, panels, fmt, nt, NULL, 0, c->act, rb, 0,
					            p[i].o0, p[i].o1, 0, 0, 0, 0, 0 };
				run_group(c, &one, 1);
			}
			continue;
		}
		if (nf == MAX_GROUP) {
			run_group(c, fo, nf);
			nf = 0;
			used = 0;
			act = NULL;
		}
		if (!act) {
			unsigned char* dst = (unsigned char*)c->act + used;
			convert(k, fmt, p[i].x, p[i].ldx, p[i].T, W->cols, dst, rb);
			used += rb * (size_t)p[i].T;
			act = dst;
		}
		fo[nf++] = (struct fout){ p[i].y, p[i].ldy, W, panels, fmt, p[i].T, p[i].x, p[i].ldx, act, rb, 0, p[i].o0, p[i].o1,
			                  0, 0, 0, 0, 0 };
	}
	run_group(c, fo, nf);
}

void pv_mm_multi(const struct pv_mm* c, const float* x, int ldx, int T, const struct pv_mm_out* outs, int n)
{
	struct pv_mm_prod p[MAX_GROUP];
	PV_ASSERT(n <= MAX_GROUP);
	for (int i = 0; i < n; i++) p[i] = (struct pv_mm_prod){ x, ldx, T, outs[i].y, outs[i].ldy, outs[i].W, outs[i].o0, outs[i].o1 };
	pv_mm_batch(c, p, n);
}

void pv_mm_rows(const struct pv_mm* c, float* y, int ldy, const float* x, int ldx, int T, const struct pv_tensor* W, int64_t o0,
                int64_t o1)
{
	PV_ASSERT(W && 0 <= o0 && o0 <= o1 && o1 <= W->rows);
	if (T <= 0 || o1 == o0) return;
	const struct pv_mm_out o = { y, ldy, W, o0, o1 };
	pv_mm_multi(c, x, ldx, T, &o, 1);
}
