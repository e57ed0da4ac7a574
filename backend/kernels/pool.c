/* The kernels' thread pool (see pool.h).

   The caller runs part 0 and nthreads-1 workers the others. A worker that has finished spins
   (with a pause) for up to SPIN_NS for the next call before it sleeps on a condition variable:
   a decode step runs 4 matrix products and an attention per layer, tens of microseconds
   apart, and waking a sleeping thread costs about as much as one of them. After the last
   call of a step the workers sleep within SPIN_NS, leaving the cores to the rest of the program.
*/
#include <pthread.h>
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
                while (atomic_load(&generation) == seen) pthread_cond_wait(&wake, &wake_lock);
                sleepers--;
                pthread_mutex_unlock(&wake_lock);
                break;
            }
        }
        seen = atomic_load(&generation);
        if (atomic_load(&quitting)) return NULL;
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
        publish();
        fn(job, 0, nthreads);
        while (atomic_load_explicit(&pending, memory_order_acquire) > 0) CPU_PAUSE();
    }
    pthread_mutex_unlock(&call_lock);
}
