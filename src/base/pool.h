/*
 * pool.h: a fixed pool of worker threads that run numbered tasks (pool.c has the ordering
 * argument). Results never depend on the thread count: callers give each task its own outputs.
 */
#ifndef PV_POOL_H
#define PV_POOL_H

struct pv_pool;

/* A pool of n_threads - 1 workers plus the calling thread. n_threads <= 0: online cores. */
struct pv_pool* pv_pool_new(int n_threads);
void pv_pool_free(struct pv_pool* p);
int pv_pool_threads(const struct pv_pool* p);

/* Runs fn(ctx, task, thread) for task = 0..n_tasks-1 across the pool and waits for all.
 * thread is in [0, pv_pool_threads) and lets tasks use per-thread scratch. May be NULL pool:
 * runs inline. */
typedef void (*pv_task_fn)(void* ctx, int task, int thread);
void pv_pool_run(struct pv_pool* p, pv_task_fn fn, void* ctx, int n_tasks);

#endif
