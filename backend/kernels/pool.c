/* The kernels' thread pool (see pool.h).

   The caller runs part 0 and nthreads-1 workers the others. A worker that has finished spins
   (with a pause) for up to SPIN_NS for the next call before it sleeps on a condition variable:
   a decode step runs 4 matrix products and an attention per layer, tens of microseconds
   apart, and waking a sleeping thread costs about as much as one of them. After the last
   call of a step the workers sleep within SPIN_NS, leaving the cores to the rest of the program.

   A worker woken onto the core its caller (or another worker) is running on moves itself to a
   free core of its allowed set before it computes (move_off_shared). Spinning threads that share
   one core wait for each other: the part on the queued thread starts only when the spinning one
   is preempted, and then the spinner of the next call waits the same way, so the whole step runs
   on one core at less than one thread's speed while the other core idles. The scheduler puts a
   woken thread on its waker's core when it judges the waker's core light (wake-affine; a guest
   kernel that packs vCPUs does it more), and then it stays there: the worker sleeps at every
   call (it cannot spin while its caller waits for the core) and each wake puts it back. Measured
   on a 2-core VM (docs/simulate.md, the local fit): the bundled model's prefills at about 0.5 ms a
   token with the parts on two cores, about 1 ms (one thread's rate) in the steps where every one
   of their 330-420 calls found the worker on its caller's core; on that machine shared with other
   processes, 39-95% of a load run's calls did, 0.02-0.19% with the move, and a batch-1 decode step
   took 11-15 ms against 20-63 ms without it. The caller, waiting for a part that has not begun,
   yields its core to it.
*/
#if defined(__linux__)
#define _GNU_SOURCE                  /* sched_getcpu, pthread_getaffinity_np, pthread_setaffinity_np */
#define HAVE_SPREAD 1
#endif
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define CPU_PAUSE() __asm__ __volatile__("yield")
#else
#define CPU_PAUSE() ((void)0)
#endif

#include "pool.h"

#define MAX_THREADS 64
#define SPIN_NS 100000               /* 100 us: as fast as 200 us in a decode step (bench/README.md) */

static pool_fn job_fn;
static void *job_arg;
static int nthreads = 1;
static pid_t pool_pid;               /* a forked child has no workers: it runs alone */
static pthread_t workers[MAX_THREADS];
static atomic_uint generation;       /* bumped once per call */
static unsigned started_at;          /* the generation when the workers were started */
static atomic_int pending;           /* workers still running the current call */
static atomic_int quitting;
static int sleepers;                 /* guarded by wake_lock */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int started;           /* workers that have begun the current call */
static atomic_int part_cpu[MAX_THREADS];   /* the core each part last began on (-1: not known) */
static atomic_int spread = 1;        /* move_off_shared on (psk_pool_spread) */
/* since the pool started: calls, worker starts on a core another part held, moves off it, sleeps */
static atomic_llong n_calls, n_shared, n_moves, n_sleeps;

/* The first of `allowed` (count cores) that no part holds (`used`, nused of them), or -1. */
int psk_pool_pick_cpu(const int *allowed, int count, const int *used, int nused) {
    for (int i = 0; i < count; i++) {
        int taken = 0;
        for (int j = 0; j < nused && !taken; j++) taken = allowed[i] == used[j];
        if (!taken) return allowed[i];
    }
    return -1;
}

/* Part `part` begins on the core it is on; if another part holds that core, move to a free one. */
static void move_off_shared(int part) {
#ifdef HAVE_SPREAD
    const int cpu = sched_getcpu();
    atomic_store_explicit(&part_cpu[part], cpu, memory_order_relaxed);
    if (cpu < 0 || part == 0) return;
    int used[MAX_THREADS], nused = 0, shared = 0;
    for (int p = 0; p < nthreads; p++) {
        const int c = p == part ? -1 : atomic_load_explicit(&part_cpu[p], memory_order_relaxed);
        if (c >= 0) used[nused++] = c;
        shared |= c == cpu;
    }
    if (!shared) return;
    atomic_fetch_add_explicit(&n_shared, 1, memory_order_relaxed);
    if (!atomic_load_explicit(&spread, memory_order_relaxed)) return;
    cpu_set_t mask, one;
    if (pthread_getaffinity_np(pthread_self(), sizeof mask, &mask)) return;
    int allowed[CPU_SETSIZE], count = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mask)) allowed[count++] = c;
    const int to = psk_pool_pick_cpu(allowed, count, used, nused);
    if (to < 0) return;              /* more threads than cores: nowhere better to go */
    CPU_ZERO(&one);
    CPU_SET(to, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one)) return;   /* Linux moves us now */
    pthread_setaffinity_np(pthread_self(), sizeof mask, &mask);            /* free to go anywhere again */
    atomic_store_explicit(&part_cpu[part], to, memory_order_relaxed);
    atomic_fetch_add_explicit(&n_moves, 1, memory_order_relaxed);
#else
    (void)part;
#endif
}

int psk_pool_spread(int on) { return atomic_exchange(&spread, on != 0); }

void psk_pool_stats(int64_t *out) {
    out[0] = atomic_load(&n_calls);
    out[1] = atomic_load(&n_shared);
    out[2] = atomic_load(&n_moves);
    out[3] = atomic_load(&n_sleeps);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *worker_main(void *arg) {
    const int part = (int)(intptr_t)arg;
    unsigned seen = started_at;      /* not generation: a call may come before this thread runs */
    for (;;) {
        const int64_t deadline = now_ns() + SPIN_NS;
        int spins = 0;
        while (atomic_load_explicit(&generation, memory_order_acquire) == seen) {
            CPU_PAUSE();
            if (++spins % 256 == 0 && now_ns() > deadline) {
                pthread_mutex_lock(&wake_lock);
                sleepers++;
                atomic_fetch_add_explicit(&n_sleeps, 1, memory_order_relaxed);
                while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &wake_lock);
                sleepers--;
                pthread_mutex_unlock(&wake_lock);
                break;
            }
        }
        seen = atomic_load(&generation);
        if (atomic_load(&quitting)) return NULL;
        atomic_fetch_add_explicit(&started, 1, memory_order_relaxed);
        move_off_shared(part);
        job_fn(job_arg, part, nthreads);
        atomic_fetch_sub_explicit(&pending, 1, memory_order_release);
    }
}

static void publish(void) {
    pthread_mutex_lock(&wake_lock);
    atomic_fetch_add_explicit(&generation, 1, memory_order_release);
    if (sleepers) pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_lock);
}

static void stop_workers(void) {
    if (nthreads > 1 && pool_pid == getpid()) {
        atomic_store(&quitting, 1);
        publish();
        for (int i = 1; i < nthreads; i++) pthread_join(workers[i], NULL);
        atomic_store(&quitting, 0);
    }
    nthreads = 1;
}

/* Restart the pool with n threads in all, the caller's included; returns how many it got. */
int psk_set_threads(int n) {
    pthread_mutex_lock(&call_lock);
    stop_workers();
    n = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    pool_pid = getpid();
    started_at = atomic_load(&generation);
    for (int i = 0; i < MAX_THREADS; i++) atomic_store(&part_cpu[i], -1);
    for (nthreads = 1; nthreads < n; nthreads++)
        if (pthread_create(&workers[nthreads], NULL, worker_main, (void *)(intptr_t)nthreads) != 0)
            break;   /* run with the threads we got */
    n = nthreads;
    pthread_mutex_unlock(&call_lock);
    return n;
}

int psk_threads(void) { return pool_pid == getpid() ? nthreads : 1; }

void *pool_scratch(int slot, long long bytes) {
    static __thread void *buf[SCRATCH_SLOTS];
    static __thread long long size[SCRATCH_SLOTS];
    if (size[slot] < bytes) {
        free(buf[slot]);
        buf[slot] = malloc((size_t)bytes);
        size[slot] = buf[slot] ? bytes : 0;
    }
    return buf[slot];
}

void pool_run(pool_fn fn, void *job) {
    pthread_mutex_lock(&call_lock);
    if (pool_pid != getpid()) nthreads = 1;
    if (nthreads == 1) {
        fn(job, 0, 1);
    } else {
        job_fn = fn;
        job_arg = job;
        atomic_store_explicit(&pending, nthreads - 1, memory_order_relaxed);
        atomic_store_explicit(&started, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&n_calls, 1, memory_order_relaxed);
        move_off_shared(0);          /* the caller's core, for the workers to keep off */
        publish();
        fn(job, 0, nthreads);
        int spins = 0;
        while (atomic_load_explicit(&pending, memory_order_acquire) > 0) {
            CPU_PAUSE();
            /* a part not begun yet may be queued behind us on this core: let it run */
            if (++spins % 256 == 0 && atomic_load_explicit(&started, memory_order_relaxed) < nthreads - 1)
                sched_yield();
        }
    }
    pthread_mutex_unlock(&call_lock);
}
