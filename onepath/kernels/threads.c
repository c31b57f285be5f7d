/* threads.c: parallel-for on plain pthreads (no OpenMP: the process may also host libgomp/libiomp).

   op_parallel_for(nthreads, ntasks, fn, ctx) runs fn(ctx, task, tid) for every task in [0, ntasks)
   on at most nthreads threads: the caller is thread tid 0, nthreads - 1 helpers are created for this
   call and joined before it returns (no global state, so concurrent calls from several Python threads
   are independent). Tasks are claimed dynamically through an atomic counter; tid in [0, nthreads)
   identifies the thread, e.g. to index per-thread scratch buffers allocated by the caller.
   If a helper cannot be created, the threads that exist do the remaining tasks.
   Returns the number of threads that ran (>= 1). */
#include <pthread.h>
#include <stdatomic.h>

typedef void (*op_task_fn)(void *ctx, int64_t task, int tid);

typedef struct {
    op_task_fn fn;
    void *ctx;
    int64_t ntasks;
    _Atomic int64_t next;
} op_pf_shared;

typedef struct {
    op_pf_shared *shared;
    int tid;
} op_pf_worker;

static void op_pf_run(op_pf_shared *s, int tid)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
        if (t >= s->ntasks) break;
        s->fn(s->ctx, t, tid);
    }
}

static void *op_pf_thread(void *arg)
{
    op_pf_worker *w = (op_pf_worker *)arg;
    op_pf_run(w->shared, w->tid);
    return NULL;
}

static int op_parallel_for(int nthreads, int64_t ntasks, op_task_fn fn, void *ctx)
{
    if (ntasks <= 0) return 1;
    if (nthreads > ntasks) nthreads = (int)ntasks;
    if (nthreads <= 1) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
        return 1;
    }
    op_pf_shared s;
    s.fn = fn;
    s.ctx = ctx;
    s.ntasks = ntasks;
    atomic_init(&s.next, 0);

    pthread_t *th = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)nthreads);
    op_pf_worker *w = (op_pf_worker *)malloc(sizeof(op_pf_worker) * (size_t)nthreads);
    int created = 0;
    if (th && w) {
        for (int i = 1; i < nthreads; i++) {
            w[i].shared = &s;
            w[i].tid = i;
            if (pthread_create(&th[i], NULL, op_pf_thread, &w[i]) != 0) break;
            created++;
        }
    }
    op_pf_run(&s, 0);
    for (int i = 1; i <= created; i++) pthread_join(th[i], NULL);
    free(th);
    free(w);
    return created + 1;
}
