/*
 * pool.c: a persistent thread pool for the compute kernels.
 *
 * The forward pass calls pv_pool_run hundreds of times per token, often with only a few
 * microseconds of work per call, so starting a run must be cheap: the workers live for the
 * whole life of the pool and wait for the next run by spinning for a while, then sleeping on
 * a futex. A run is one "generation":
 *
 *   caller: writes fn/ctx/n_tasks, resets the task counter and the check-in counter, then
 *           publishes the new generation number (release) and wakes sleepers if there are any;
 *   worker: sees the new generation (acquire), takes tasks from the shared atomic counter
 *           until none are left, then checks in (release);
 *   caller: takes tasks too, then waits until every worker has checked in (acquire).
 *
 * Waiting for every worker (not just for every task) means that when pv_pool_run returns, no
 * worker still reads fn/ctx, so the next run may overwrite them without further ordering.
 *
 * Sleeping uses the "announce, then re-check" pattern with sequentially consistent atomics:
 * a waiter increments a sleeper count before re-checking the condition and entering
 * futex_wait, and a waker changes the condition before reading the sleeper count. One of the
 * two must see the other's write, so no wake-up is lost; futex_wait itself also re-checks the
 * word in the kernel. Where there is no futex (not Linux) a mutex and condition variable play
 * the same role.
 *
 * Not supported: calling pv_pool_run from inside a task, or from two threads on one pool at the
 * same time. Sessions that share a pool hold its lock (pv_pool_lock) around each step instead.
 *
 * The pool also owns PV_POOL_SCRATCH bytes of scratch per thread, allocated with it, so kernels
 * that need a per-thread buffer never allocate during evaluation.
 */
#include "base/pool.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* Waiting spins on the flag with pause instructions (a pause is some tens of cycles), calls
 * sched_yield every PV_YIELD_EVERY spins so that on an oversubscribed machine (two pools, or
 * other programs) a spinner hands the core to a thread with real work, and sleeps after
 * PV_SPIN_ITERS: all told some tens of microseconds, longer than the serial gaps between
 * kernel calls in a decode step, short enough that an idle pool soon stops using cores. */
#define PV_SPIN_ITERS 4096
#define PV_YIELD_EVERY 256

#define PV_MAX_THREADS 512

struct pv_worker {
	struct pv_pool* pool;
	int index; /* thread number passed to tasks, 1..n_threads-1 */
};

struct pv_pool {
	int n_threads;              /* workers + the caller                                */
	int n_workers;              /* threads actually started                            */
	pthread_t* threads;
	struct pv_worker* workers;
	unsigned char* scratch;     /* n_threads * PV_POOL_SCRATCH bytes, 64-aligned         */
	pthread_mutex_t lock;       /* held by one session's step at a time (pv_pool_lock)   */

	/* The current run; written by the caller before the generation is published. */
	pv_task_fn fn;
	void* ctx;
	int n_tasks;

	/* Each group below is written by different threads at different times: keep them on
	 * separate cache lines so spinning on one does not slow the others. */
	_Alignas(64) atomic_uint generation; /* bumped once per run; futex word for workers   */
	atomic_int sleepers;                 /* workers inside (or about to enter) futex_wait */
	atomic_int stop;                     /* set once by pv_pool_free                      */
	_Alignas(64) atomic_int next_task;   /* next task number to hand out                  */
	_Alignas(64) atomic_uint checked_in; /* workers done with this run; caller's futex    */
	atomic_int caller_sleeping;

#ifndef __linux__
	pthread_mutex_t mu;
	pthread_cond_t cv;
#endif
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline void spin_once(int spins)
{
	if (spins % PV_YIELD_EVERY == 0)
		sched_yield();
	else
		cpu_relax();
}

/* Sleeps while *word == expected (may return spuriously: callers loop). */
static void wait_on(struct pv_pool* p, atomic_uint* word, unsigned expected)
{
#ifdef __linux__
	(void)p;
	/* atomic_uint has the size and representation of unsigned int, which is what the
	 * kernel compares. */
	syscall(SYS_futex, (unsigned*)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
	pthread_mutex_lock(&p->mu);
	if (atomic_load(word) == expected) pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
#endif
}

static void wake_all(struct pv_pool* p, atomic_uint* word)
{
#ifdef __linux__
	(void)p;
	syscall(SYS_futex, (unsigned*)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
	(void)word;
	/* Taking the mutex orders this wake after a waiter's re-check under the mutex. */
	pthread_mutex_lock(&p->mu);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
#endif
}

/* Takes tasks from the shared counter until there are none left. */
static void run_tasks(struct pv_pool* p, pv_task_fn fn, void* ctx, int n_tasks, int thread)
{
	for (;;) {
		int task = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
		if (task >= n_tasks) break;
		fn(ctx, task, thread);
	}
}

static void* worker_main(void* arg)
{
	struct pv_worker* w = arg;
	struct pv_pool* p = w->pool;
	/* Generation 0 is the pool's state at creation. Reading the counter here instead could
	 * miss a run published before this thread got going. */
	unsigned seen = 0;

	for (;;) {
		/* Wait for a new generation: spin first, then sleep. */
		unsigned gen;
		int spins = 0;
		while ((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
			if (++spins < PV_SPIN_ITERS) {
				spin_once(spins);
				continue;
			}
			atomic_fetch_add(&p->sleepers, 1);
			if (atomic_load(&p->generation) == seen) wait_on(p, &p->generation, seen);
			atomic_fetch_sub(&p->sleepers, 1);
			spins = 0;
		}
		seen = gen;
		if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;

		run_tasks(p, p->fn, p->ctx, p->n_tasks, w->index);

		/* Check in; the last one wakes the caller if it went to sleep. */
		unsigned done = atomic_fetch_add(&p->checked_in, 1) + 1;
		if (done == (unsigned)p->n_workers && atomic_load(&p->caller_sleeping))
			wake_all(p, &p->checked_in);
	}
	return NULL;
}

struct pv_pool* pv_pool_new(int n_threads)
{
	if (n_threads <= 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		n_threads = n > 0 ? (int)n : 1;
	}
	if (n_threads > PV_MAX_THREADS) n_threads = PV_MAX_THREADS;

	struct pv_pool* p = calloc(1, sizeof *p);
	if (!p) return NULL;
	p->threads = calloc((size_t)n_threads, sizeof *p->threads);
	p->workers = calloc((size_t)n_threads, sizeof *p->workers);
	p->scratch = aligned_alloc(64, (size_t)n_threads * PV_POOL_SCRATCH);
	if (!p->threads || !p->workers || !p->scratch) {
		free(p->threads);
		free(p->workers);
		free(p->scratch);
		free(p);
		return NULL;
	}
	pthread_mutex_init(&p->lock, NULL);
	atomic_init(&p->generation, 0);
	atomic_init(&p->sleepers, 0);
	atomic_init(&p->stop, 0);
	atomic_init(&p->next_task, 0);
	atomic_init(&p->checked_in, 0);
	atomic_init(&p->caller_sleeping, 0);
#ifndef __linux__
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
#endif

	/* If the system refuses a thread, run with the ones we got: fewer threads change speed,
	 * never results. */
	int started = 0;
	for (int i = 0; i < n_threads - 1; i++) {
		p->workers[started].pool = p;
		p->workers[started].index = started + 1;
		if (pthread_create(&p->threads[started], NULL, worker_main, &p->workers[started]))
			break;
		started++;
	}
	p->n_workers = started;
	p->n_threads = started + 1;
	return p;
}

/* Publishes a new generation and wakes sleeping workers. */
static void publish(struct pv_pool* p)
{
	atomic_fetch_add(&p->generation, 1); /* seq_cst: ordered before the sleeper read */
	if (atomic_load(&p->sleepers) > 0) wake_all(p, &p->generation);
}

void pv_pool_free(struct pv_pool* p)
{
	if (!p) return;
	atomic_store_explicit(&p->stop, 1, memory_order_release);
	publish(p);
	for (int i = 0; i < p->n_workers; i++) pthread_join(p->threads[i], NULL);
#ifndef __linux__
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
#endif
	pthread_mutex_destroy(&p->lock);
	free(p->threads);
	free(p->workers);
	free(p->scratch);
	free(p);
}

void* pv_pool_scratch(struct pv_pool* p, int thread)
{
	return p ? p->scratch + (size_t)thread * PV_POOL_SCRATCH : NULL;
}

void pv_pool_lock(struct pv_pool* p)
{
	if (p) pthread_mutex_lock(&p->lock);
}

void pv_pool_unlock(struct pv_pool* p)
{
	if (p) pthread_mutex_unlock(&p->lock);
}

int pv_pool_threads(const struct pv_pool* p) { return p ? p->n_threads : 1; }

void pv_pool_run(struct pv_pool* p, pv_task_fn fn, void* ctx, int n_tasks)
{
	if (n_tasks <= 0) return;
	/* Inline when there is nobody to share with, or when one task is all there is: waking
	 * the workers would only add latency. */
	if (!p || p->n_workers == 0 || n_tasks == 1) {
		for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
		return;
	}

	p->fn = fn;
	p->ctx = ctx;
	p->n_tasks = n_tasks;
	atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
	atomic_store_explicit(&p->checked_in, 0, memory_order_relaxed);
	publish(p); /* release: the stores above are visible to whoever sees the generation */

	run_tasks(p, fn, ctx, n_tasks, 0);

	/* Wait for every worker to check in: spin, then sleep. */
	unsigned want = (unsigned)p->n_workers;
	int spins = 0;
	for (;;) {
		unsigned done = atomic_load_explicit(&p->checked_in, memory_order_acquire);
		if (done == want) break;
		if (++spins < PV_SPIN_ITERS) {
			spin_once(spins);
			continue;
		}
		atomic_store(&p->caller_sleeping, 1);
		if (atomic_load(&p->checked_in) != want) wait_on(p, &p->checked_in, done);
		atomic_store(&p->caller_sleeping, 0);
		spins = 0;
	}
}
