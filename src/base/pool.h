/*
 * pool.h: a fixed pool of worker threads that run numbered tasks (pool.c has the ordering
 * argument). Results never depend on the thread count: callers give each task its own outputs.
 */
#ifndef PV_POOL_H
#define PV_POOL_H

#include "proven.h" /* pv_pool, pv_pool_new, pv_pool_free */

#define PV_POOL_SCRATCH (256 * 1024) /* bytes of per-thread scratch a pool owns */


/* pv_pool_new(n): n - 1 workers plus the calling thread; n <= 0: online cores (proven.h). */
int pv_pool_threads(const struct pv_pool* p);
/* PV_POOL_SCRATCH bytes (64-aligned) that only tasks running as `thread` use; NULL pool: NULL. */
void* pv_pool_scratch(struct pv_pool* p, int thread);
/* One step at a time on a pool shared by several sessions (NULL pool: no-op). */
void pv_pool_lock(struct pv_pool* p);
void pv_pool_unlock(struct pv_pool* p);

/* Runs fn(ctx, task, thread) for task = 0..n_tasks-1 across the pool and waits for all.
 * thread is in [0, pv_pool_threads) and lets tasks use per-thread scratch. May be NULL pool:
 * runs inline. */
typedef void (*pv_task_fn)(void* ctx, int task, int thread);
void pv_pool_run(struct pv_pool* p, pv_task_fn fn, void* ctx, int n_tasks);

#endif
