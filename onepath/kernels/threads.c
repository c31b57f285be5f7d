/* threads.c: parallel-for on plain pthreads (no OpenMP: the process may also host libgomp/libiomp).

   op_parallel_for(nthreads, ntasks, fn, ctx) runs fn(ctx, task, tid) for every task in [0, ntasks)
   on at most nthreads threads; the caller is thread tid 0 and tid in [0, nthreads) identifies the
   thread, e.g. to index per-thread scratch buffers allocated by the caller. Tasks are claimed
   dynamically through an atomic counter. Returns the number of threads the tasks were offered to
   (>= 1); a pool worker that wakes late may run none of them, as the caller claims what is left.

   Workers come from a persistent pool (one per level module), created on first use and grown on
   demand. After a job a worker spins (yielding the CPU every 64 pauses) for OP_POOL_SPIN_NS before
   it sleeps on a condition variable, so back-to-back calls find it awake: creating and joining
   threads per call, or waking a halted vCPU, costs tens of microseconds on a VM, a large share of
   a 512 x 512 product. One call uses the pool at a time; a concurrent call (another Python thread)
   or a nested one creates and joins its own threads instead, so callers never wait for each other
   (op_parallel_for_short, for work of a few microseconds: runs it on the calling thread instead).
   A call returns once every task has run; it never waits for a worker that has not claimed one.
   After fork() the child starts with an empty pool (pthread_atfork). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define OP_CPU_RELAX() _mm_pause()
#else
#define OP_CPU_RELAX() ((void)0)
#endif

#define OP_POOL_SPIN_NS 200000   /* 0.2 ms: covers the gap between back-to-back calls */
#define OP_POOL_CROWDED_NS 100000000   /* 0.1 s of one-thread short calls when crowded */
#define OP_POOL_MAX 256

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

/* Create nthreads - 1 threads for this call only (the fallback when the pool is in use). */
static int op_parallel_for_spawn(int nthreads, op_pf_shared *s)
{
    pthread_t *th = (pthread_t *)malloc(sizeof(pthread_t) * (size_t)nthreads);
    op_pf_worker *w = (op_pf_worker *)malloc(sizeof(op_pf_worker) * (size_t)nthreads);
    int created = 0;
    if (th && w) {
        for (int i = 1; i < nthreads; i++) {
            w[i].shared = s;
            w[i].tid = i;
            if (pthread_create(&th[i], NULL, op_pf_thread, &w[i]) != 0) break;
            created++;
        }
    }
    op_pf_run(s, 0);
    for (int i = 1; i <= created; i++) pthread_join(th[i], NULL);
    free(th);
    free(w);
    return created + 1;
}

static int64_t op_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Every 64 pauses of a spin-wait (a worker waiting for a job, the caller waiting for its workers):
   past ``until`` the waiter goes to sleep (returns 1); before it, it yields the CPU (returns 0).
   On a 2-vCPU Zen 4 VM the scheduler was seen, after an idle spell, to put the caller and a worker
   on one vCPU; a pure spin then took that vCPU from the very thread it waited for, and a 2-thread
   depthwise call of ~100 us ran at 16-17 GFLOP/s instead of ~66 with the yield (paired in one
   process, 10 pairs twice, 2026-12-01; matmul 512 and a 2.5 ms conv unchanged within noise). With
   nothing else runnable on the CPU the yield returns at once. */
static int op_pool_yield_or_stop(int64_t until)
{
    if (op_now_ns() > until) return 1;
    sched_yield();
    return 0;
}

/* The CPU the calling thread runs on, or -1 where that is unknown. */
static int op_getcpu(void)
{
#if defined(__linux__)
    return sched_getcpu();
#else
    return -1;
#endif
}

#if defined(__linux__)
typedef cpu_set_t op_cpu_mask;
#else
typedef int op_cpu_mask;
#endif

/* Narrow ``thread``'s affinity to ``mask`` without ``cpu`` (so the scheduler moves it off that CPU
   at once), then set ``mask`` again. ``mask`` is the worker's affinity saved when it was created,
   never read back: the caller (op_parallel_for_pool) and the worker itself may both do this at the
   same time, and whichever sets ``mask`` last leaves it whole. (Reading the live mask to restore it
   could read the other side's narrowed one and keep it for good: found by the review, a worker
   left on one CPU.) */
static void op_pool_push_off(pthread_t thread, const op_cpu_mask *mask, int cpu)
{
#if defined(__linux__)
    cpu_set_t other = *mask;
    if (cpu < 0 || !CPU_ISSET(cpu, &other)) return;
    CPU_CLR(cpu, &other);
    if (CPU_COUNT(&other) == 0) return;
    if (pthread_setaffinity_np(thread, sizeof other, &other) == 0)
        pthread_setaffinity_np(thread, sizeof *mask, mask);
#else
    (void)thread;
    (void)mask;
    (void)cpu;
#endif
}

/* The pool's job word: (job generation, task count, next task) in one 64-bit atomic that lives
   in the pool, not on the caller's stack. A thread claims a task with a compare-and-swap that
   checks the generation, so a worker that wakes after its job is over finds another generation and
   touches nothing, and the caller waits only for tasks already claimed, never for a worker that
   has not started: after numpy's OpenBLAS ran, its threads spin for ~0.1 s and a worker may get
   no core for that long; waiting for it made a 25 us small product take ~4 ms (2026-12-05, 2
   cores). */
#define OP_JOB_IDX_BITS 22
#define OP_JOB_MAX_TASKS ((INT64_C(1) << OP_JOB_IDX_BITS) - 1)
#define OP_JOB_MASK ((UINT64_C(1) << OP_JOB_IDX_BITS) - 1)
#define OP_JOB_WORD(gen, nt, idx) (((uint64_t)(gen) << (2 * OP_JOB_IDX_BITS)) \
                                   | ((uint64_t)(nt) << OP_JOB_IDX_BITS) | (uint64_t)(idx))
#define OP_JOB_GEN(w) ((w) >> (2 * OP_JOB_IDX_BITS))   /* 20 bits: wraps after ~1M jobs */
#define OP_JOB_NT(w) (((w) >> OP_JOB_IDX_BITS) & OP_JOB_MASK)
#define OP_JOB_IDX(w) ((w) & OP_JOB_MASK)

/* One mailbox per worker: the caller posts a job to exactly the workers taking part (so a worker's
   tid is always below the job's thread count). */
typedef struct {
    _Alignas(64) _Atomic uint64_t gen;   /* bumped once per job posted to this worker */
    _Atomic uint64_t jobgen;    /* the posted job's generation (OP_JOB_GEN), written before gen */
    _Atomic int caller_cpu;     /* the CPU the caller posted the job from (-1: unknown) */
    _Atomic uint64_t ack;       /* the last job generation the worker picked up */
    _Atomic int awake;          /* 1 from a job picked up until the worker sleeps on the pool's
                                   condition variable (a worker just woken is not awake yet) */
    pthread_t thread;
    op_cpu_mask mask;           /* the worker's affinity when it was created (op_pool_push_off) */
} op_mailbox;

typedef struct {
    pthread_mutex_t busy;       /* held by the one call using the pool */
    pthread_mutex_t mu;         /* guards the sleeping side of wake/done */
    pthread_cond_t wake;        /* workers sleep here between jobs */
    pthread_cond_t done;        /* the caller sleeps here until the claimed tasks are finished */
    int nworkers;               /* workers created (tids 1 .. nworkers) */
    uint64_t gen;               /* the current job's generation (the caller's, under busy) */
    op_task_fn fn;              /* the current job; read by a worker only after it claimed a */
    void *ctx;                  /* task of it, so while the job is still running */
    _Atomic uint64_t word;      /* OP_JOB_WORD of the current job */
    _Atomic int64_t ndone;      /* tasks of the current job finished */
    _Atomic int64_t crowded_until;   /* op_now_ns() before which short jobs run on the caller */
    int crowded_run;            /* pool calls in a row that found a worker without a CPU (busy) */
    op_mailbox box[OP_POOL_MAX + 1];
} op_pool_t;

static op_pool_t op_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                            PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL,
                            0, 0, 0, 0, {{0}}};
static pthread_once_t op_pool_once = PTHREAD_ONCE_INIT;

static void op_pool_after_fork_child(void)
{
    /* Only the forking thread survives: no worker exists and no call is under way. */
    pthread_mutex_init(&op_pool.busy, NULL);
    pthread_mutex_init(&op_pool.mu, NULL);
    pthread_cond_init(&op_pool.wake, NULL);
    pthread_cond_init(&op_pool.done, NULL);
    op_pool.nworkers = 0;
    atomic_store(&op_pool.word, 0);
    atomic_store(&op_pool.ndone, 0);
    atomic_store(&op_pool.crowded_until, 0);
    op_pool.crowded_run = 0;
    for (int i = 0; i <= OP_POOL_MAX; i++) {
        atomic_store(&op_pool.box[i].gen, 0);
        atomic_store(&op_pool.box[i].ack, 0);
    }
}

static void op_pool_register_fork(void) { pthread_atfork(NULL, NULL, op_pool_after_fork_child); }

/* Claim and run tasks of job generation `gen` until none is left (or another job is current). */
static void op_pool_run(uint64_t gen, int tid)
{
    uint64_t w = atomic_load_explicit(&op_pool.word, memory_order_acquire);
    for (;;) {
        if (OP_JOB_GEN(w) != gen || OP_JOB_IDX(w) >= OP_JOB_NT(w)) return;
        if (!atomic_compare_exchange_weak_explicit(&op_pool.word, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;  /* w now holds the current word */
        /* task OP_JOB_IDX(w) of job gen is ours: the job cannot end before we finish it */
        op_pool.fn(op_pool.ctx, (int64_t)OP_JOB_IDX(w), tid);
        const int64_t nt = (int64_t)OP_JOB_NT(w);
        if (atomic_fetch_add_explicit(&op_pool.ndone, 1, memory_order_acq_rel) + 1 == nt && tid) {
            pthread_mutex_lock(&op_pool.mu);
            pthread_cond_signal(&op_pool.done);
            pthread_mutex_unlock(&op_pool.mu);
        }
        w = atomic_load_explicit(&op_pool.word, memory_order_acquire);
    }
}

static void *op_pool_worker(void *arg)
{
    const int tid = (int)(intptr_t)arg;
    op_mailbox *box = &op_pool.box[tid];
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "onepath-pool");  /* (top -H, /proc/PID/task/TID/comm) */
#endif
    uint64_t seen = 0;  /* a worker's box starts at 0 (also after fork); its first job makes it 1 */
    for (;;) {
        uint64_t g;
        const int64_t until = op_now_ns() + OP_POOL_SPIN_NS;
        int spins = 0;
        while ((g = atomic_load_explicit(&box->gen, memory_order_acquire)) == seen) {
            OP_CPU_RELAX();
            if ((++spins & 63) == 0 && op_pool_yield_or_stop(until)) {
                atomic_store_explicit(&box->awake, 0, memory_order_relaxed);
                pthread_mutex_lock(&op_pool.mu);
                while ((g = atomic_load_explicit(&box->gen, memory_order_acquire)) == seen)
                    pthread_cond_wait(&op_pool.wake, &op_pool.mu);
                pthread_mutex_unlock(&op_pool.mu);
                break;
            }
        }
        seen = g;
        const uint64_t job = atomic_load_explicit(&box->jobgen, memory_order_relaxed);
        /* A worker on the caller's CPU moves to another one it may run on. On a 2-vCPU Zen 4 VM a
           worker woken while the other vCPU was busy (e.g. another library's spinning threads)
           was placed on the caller's vCPU and stayed there, both spinning between calls: a
           2-thread call then ran at 1-thread speed for as long as the process kept calling
           (MobileNet-v2 depthwise 112x112 s2, 42 instead of 70-76 GFLOP/s, 2026-12-01). */
        const int ccpu = atomic_load_explicit(&box->caller_cpu, memory_order_relaxed);
        if (ccpu >= 0 && op_getcpu() == ccpu) op_pool_push_off(pthread_self(), &box->mask, ccpu);
        atomic_store_explicit(&box->ack, job, memory_order_relaxed);
        atomic_store_explicit(&box->awake, 1, memory_order_relaxed);
        op_pool_run(job, tid);
    }
    return NULL;
}

/* spawn: when the pool is in use (a concurrent or nested call), create threads for this call (1)
   or run the tasks on the calling thread (0: op_parallel_for_short) */
static int op_parallel_for_pool(int nthreads, int64_t ntasks, op_task_fn fn, void *ctx, int spawn)
{
    if (ntasks <= 0) return 1;
    if (nthreads > ntasks) nthreads = (int)ntasks;
    if (nthreads <= 1) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
        return 1;
    }
    if (nthreads > OP_POOL_MAX || ntasks > OP_JOB_MAX_TASKS
        || pthread_mutex_trylock(&op_pool.busy) != 0) {
        op_pf_shared s;  /* pool busy (concurrent / nested call) or too many tasks for its word */
        s.fn = fn;
        s.ctx = ctx;
        s.ntasks = ntasks;
        atomic_init(&s.next, 0);
        if (spawn) return op_parallel_for_spawn(nthreads, &s);
        op_pf_run(&s, 0);
        return 1;
    }
    const int cpu = op_getcpu();

    pthread_once(&op_pool_once, op_pool_register_fork);
    while (op_pool.nworkers < nthreads - 1) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        op_mailbox *box = &op_pool.box[op_pool.nworkers + 1];
        atomic_store_explicit(&box->awake, 0, memory_order_relaxed);
        const int rc = pthread_create(&th, &attr, op_pool_worker,
                                      (void *)(intptr_t)(op_pool.nworkers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        box->thread = th;
#if defined(__linux__)
        if (pthread_getaffinity_np(th, sizeof box->mask, &box->mask) != 0) CPU_ZERO(&box->mask);
#endif
        op_pool.nworkers++;
    }
    const int want = op_pool.nworkers < nthreads - 1 ? op_pool.nworkers : nthreads - 1;
    const uint64_t gen = op_pool.gen = (op_pool.gen + 1) & ((UINT64_C(1) << 20) - 1);
    op_pool.fn = fn;
    op_pool.ctx = ctx;
    atomic_store_explicit(&op_pool.ndone, 0, memory_order_relaxed);
    atomic_store_explicit(&op_pool.word, OP_JOB_WORD(gen, ntasks, 0), memory_order_release);
    for (int i = 1; i <= want; i++) {
        atomic_store_explicit(&op_pool.box[i].jobgen, gen, memory_order_relaxed);
        atomic_store_explicit(&op_pool.box[i].caller_cpu, cpu, memory_order_relaxed);
        atomic_fetch_add_explicit(&op_pool.box[i].gen, 1, memory_order_release);
    }
    pthread_mutex_lock(&op_pool.mu);
    pthread_cond_broadcast(&op_pool.wake);
    pthread_mutex_unlock(&op_pool.mu);
    op_pool_run(gen, 0);

    /* Every task is claimed. A worker that is awake (spinning) but never picked the job up did
       not get a CPU during the whole call: another thread holds it (e.g. numpy's OpenBLAS or
       torch's OpenMP threads spinning after their own call), or it waits for this very one (placed
       here when woken while the other CPU was busy) and would get it only when the scheduler next
       preempts the caller, a slice of ~3 ms later. Move it off this CPU now, so it helps from the
       next call on, and mark the pool crowded (op_parallel_for_short). */
    int crowded = 0;
    for (int i = 1; i <= want; i++)
        if (atomic_load_explicit(&op_pool.box[i].ack, memory_order_relaxed) != gen
            && atomic_load_explicit(&op_pool.box[i].awake, memory_order_relaxed)) {
            op_pool_push_off(op_pool.box[i].thread, &op_pool.box[i].mask, cpu);
            crowded = 1;
        }
    /* wait for the tasks still running on a worker (none, when no worker woke in time: the
       caller ran them all); past the spin, a worker lost its CPU in a task: crowded too */
    if (atomic_load_explicit(&op_pool.ndone, memory_order_acquire) < ntasks) {
        const int64_t until = op_now_ns() + OP_POOL_SPIN_NS;
        int spins = 0;
        while (atomic_load_explicit(&op_pool.ndone, memory_order_acquire) < ntasks) {
            OP_CPU_RELAX();
            if ((++spins & 63) == 0 && op_pool_yield_or_stop(until)) {
                crowded = 1;
                pthread_mutex_lock(&op_pool.mu);
                while (atomic_load_explicit(&op_pool.ndone, memory_order_acquire) < ntasks)
                    pthread_cond_wait(&op_pool.done, &op_pool.mu);
                pthread_mutex_unlock(&op_pool.mu);
                break;
            }
        }
    }
    /* two such calls in a row: one alone happens on an idle machine too (~0.3% of back-to-back
       2-thread calls of 10 us, the review) and would cost 0.1 s of one-thread short calls */
    op_pool.crowded_run = crowded ? op_pool.crowded_run + 1 : 0;
    if (op_pool.crowded_run >= 2)
        atomic_store_explicit(&op_pool.crowded_until, op_now_ns() + OP_POOL_CROWDED_NS,
                              memory_order_relaxed);
    pthread_mutex_unlock(&op_pool.busy);
    return want + 1;
}

static int op_parallel_for(int nthreads, int64_t ntasks, op_task_fn fn, void *ctx)
{
    return op_parallel_for_pool(nthreads, ntasks, fn, ctx, 1);
}

/* op_parallel_for for work of a few microseconds (the small GEMM): the tasks run on the calling
   thread when the pool is in use (creating threads for the call would cost more than the work
   saves) and for OP_POOL_CROWDED_NS after two calls in a row found a worker without a CPU. Calls
   of ~20 us then lose nothing to a worker that cannot run: linear 4 x 768 x 384 at 2 threads right
   after numpy (with torch loaded) took 56 us at the median instead of one thread's 32, and up to
   ms when a worker lost its CPU in a task (the review, 2026-12-05). */
static int op_parallel_for_short(int nthreads, int64_t ntasks, op_task_fn fn, void *ctx)
{
    if (nthreads > 1 && ntasks > 1
        && op_now_ns() < atomic_load_explicit(&op_pool.crowded_until, memory_order_relaxed)) {
        for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
        return 1;
    }
    return op_parallel_for_pool(nthreads, ntasks, fn, ctx, 0);
}
