/* A plain read of memory on the pool's threads: the ceiling a memory-bound kernel is held to.
   Each thread sums its own contiguous part with independent accumulators, so nothing but the
   memory system limits it; the sum is returned so the compiler cannot drop the reads. */
#include <stdint.h>

#include "pool.h"
#include "simd.h"

#define MAX_PARTS 64

typedef struct {
    const float *p;
    int64_t n;
    float sums[MAX_PARTS];
} read_job;

static void read_part(void *arg, int part, int parts) {
    read_job *j = arg;
    const int64_t lo = j->n * part / parts, hi = j->n * (part + 1) / parts;
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int64_t i = lo;
    for (; i + 32 <= hi; i += 32) {
        a0 += load8(j->p + i);
        a1 += load8(j->p + i + 8);
        a2 += load8(j->p + i + 16);
        a3 += load8(j->p + i + 24);
    }
    a0 += a1 + a2 + a3;
    float s = 0.0f;
    for (int c = 0; c < 8; c++) s += a0[c];
    for (; i < hi; i++) s += j->p[i];
    j->sums[part % MAX_PARTS] += s;
}

float psk_read(const float *p, int64_t n) {
    read_job job = {p, n, {0}};
    pool_run(read_part, &job);
    float s = 0.0f;
    for (int i = 0; i < MAX_PARTS; i++) s += job.sums[i];
    return s;
}
