/* The small per-token operations between a layer's matrix products, each one pass in C.

   In torch each is several kernels (RMSNorm is six: square, mean, add, rsqrt, two multiplies),
   each with its own few microseconds of dispatch and its own pass over memory; at a decode step's
   few rows the dispatch is most of the cost (bench/README.md). Rows are split over the pool's
   threads when there are enough of them to pay for it.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pool.h"
#include "simd.h"

#define PARALLEL_FROM (1 << 16)   /* elements: below this one thread does it all */

typedef struct {
    const float *x, *weight;
    float *out;
    int64_t n, d;
    float eps;
} rows_job;

static void rms_norm_part(void *arg, int part, int parts) {
    const rows_job *j = arg;
    for (int64_t r = j->n * part / parts; r < j->n * (part + 1) / parts; r++) {
        const float *x = j->x + r * j->d;
        float *o = j->out + r * j->d;
        v8 acc = {0};
        int64_t i = 0;
        for (; i + 8 <= j->d; i += 8) acc += load8(x + i) * load8(x + i);
        float s = 0.0f;
        for (int c = 0; c < 8; c++) s += acc[c];
        for (; i < j->d; i++) s += x[i] * x[i];
        const float scale = 1.0f / sqrtf(s / (float)j->d + j->eps);
        for (i = 0; i < j->d; i++) o[i] = x[i] * scale * j->weight[i];
    }
}

/* out (n, d) = x / sqrt(mean(x^2) + eps) * weight, row by row. */
void psk_rms_norm(const float *x, const float *weight, float *out, int64_t n, int64_t d, float eps) {
    rows_job job = {x, weight, out, n, d, eps};
    if (n * d < PARALLEL_FROM) rms_norm_part(&job, 0, 1);
    else pool_run(rms_norm_part, &job);
}

static void silu_mul_part(void *arg, int part, int parts) {
    const rows_job *j = arg;   /* x: (n, 2d) = [gate | up]; out: (n, d) */
    for (int64_t r = j->n * part / parts; r < j->n * (part + 1) / parts; r++) {
        const float *gate = j->x + r * 2 * j->d, *up = gate + j->d;
        float *o = j->out + r * j->d;
        int64_t i = 0;
        for (; i + 8 <= j->d; i += 8) {
            const v8 g = load8(gate + i);
            store8(o + i, g / (exp8(-g) + 1.0f) * load8(up + i));
        }
        for (; i < j->d; i++) o[i] = gate[i] / (expf(-gate[i]) + 1.0f) * up[i];
    }
}

/* out (n, d) = silu(gate) * up, where each row of x (n, 2d) is [gate | up]: SwiGLU's middle. */
void psk_silu_mul(const float *x, float *out, int64_t n, int64_t d) {
    rows_job job = {x, NULL, out, n, d, 0.0f};
    if (n * d < PARALLEL_FROM) silu_mul_part(&job, 0, 1);
    else pool_run(silu_mul_part, &job);
}

typedef struct {
    const float *x, *cos, *sin;
    float *out;
    int64_t n, heads, hd, x_stride;
} rotary_job;

static void rotary_part(void *arg, int part, int parts) {
    const rotary_job *j = arg;
    const int64_t half = j->hd / 2;
    for (int64_t r = j->n * part / parts; r < j->n * (part + 1) / parts; r++) {
        const float *c = j->cos + r * j->hd, *s = j->sin + r * j->hd;
        for (int64_t h = 0; h < j->heads; h++) {
            const float *x = j->x + r * j->x_stride + h * j->hd;
            float *o = j->out + (r * j->heads + h) * j->hd;
            for (int64_t i = 0; i < half; i++) o[i] = x[i] * c[i] - x[i + half] * s[i];
            for (int64_t i = half; i < j->hd; i++) o[i] = x[i] * c[i] + x[i - half] * s[i];
        }
    }
}

/* out (n, heads, hd) = x rotated by cos, sin (n, hd): pairs (i, i + hd/2), the Hugging Face
   "rotate half" convention (as attention.c rotates a decode token). x's rows are x_stride floats
   apart (a view into the fused projection), its heads contiguous. */
void psk_rotary(const float *x, int64_t x_stride, const float *cos, const float *sin, float *out, int64_t n,
                int64_t heads, int64_t hd) {
    rotary_job job = {x, cos, sin, out, n, heads, hd, x_stride};
    if (n * heads * hd < PARALLEL_FROM) rotary_part(&job, 0, 1);
    else pool_run(rotary_part, &job);
}
