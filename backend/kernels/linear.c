/* Matrix products: a decode step's few rows streaming the weights at memory speed, and the same
   kernel for a prefill's many rows at the matrix-multiply rate.

   y (n, out) = x (n, in) @ W^T (+ bias) (+ residual), float32, where W (out, in) is given packed in panels
   of P = 32 outputs: wp[panel][k][32] = W[panel * 32 + j][k] (outputs padded with zero rows to
   a multiple of 32). A panel is one contiguous run of memory read front to back, so a thread
   streams its share of the matrix as one sequential read -- the pattern a core's prefetcher
   serves at full speed. The plain (out, in) layout, read a few rows at a time, reached about
   half of that here (bench/README.md).

   Each thread takes a contiguous range of panels. Within a panel, up to XB rows of x at a time
   are multiplied in outer-product form: for each k, the panel's 32 weights times x[j][k]
   broadcast, accumulated in XB x 32 registers -- no horizontal sums, and for more rows of x the
   panel is read again from cache, not from memory.
*/
#include <stdint.h>
#include <string.h>

#include "pool.h"

#define P 32                         /* outputs per panel */
#if defined(__AVX512F__)
#define VW 16                        /* floats per vector register */
#define XB 8                         /* rows of x per register tile: XB * P / VW = 16 accumulators */
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
/* 12 accumulators of the 16 ymm registers, the weights FMA memory operands (GCC keeps them there:
   12 + a broadcast is all it needs). 2 rows gave 8 accumulators, exactly FMA latency x throughput,
   so any stall idled the FMA units: a 3-row tile ran 1.33x as many FLOP/s at 32 to 512 rows on
   panels held in cache (about the FMA peak: AMD EPYC Zen 5, one thread), 1.2-1.3x at 8 and 32
   rows streamed from memory, the same at 1. A 6-row x 16-column tile (BLIS's Haswell shape) matched
   it in cache but was slower from memory (each half-panel pass reads every other cache line). */
#define XB 3
#else
#define VW 8
#define XB 2                         /* 8 accumulators of 16 registers (NEON: 32 x 128-bit) */
#endif
#if defined(__aarch64__)
/* NEON: vectors of one 128-bit register. GCC keeps wider generic vectors on the stack on aarch64
   (every multiply-add a load and a store), so 8 floats were two stack slots, not two registers:
   2 x 8 accumulators and 8 weight vectors here, of the 32 registers. */
#undef VW
#define VW 4
#endif
#define V (P / VW)
/* Bytes ahead of the weights being read that a tile prefetches. The hardware's stream prefetcher
   alone left a tile of 5 to 8 rows (a K+1 = 5 verification, a small decode batch) about 1.2-1.4x a
   one-row tile's time over the same panels, though its FMAs take half the read's time: while the
   core is busy multiplying, too few lines are in flight. Asked for 8 KiB ahead, 5 rows cost
   1.03x and 8 rows 1.06x of one (AMD EPYC Zen 5, one thread); 4 KiB gave 1.07x and 1.13x. */
#ifndef LPREFETCH
#define LPREFETCH 8192
#endif
typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf load(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
/* s - 0 is s for every s (s + 0 is not, for -0), so the compiler drops it: one broadcast, from memory */
static inline vf splat(float s) { return s - (vf){0}; }

/* One tile: rows [0, NB) of x (from xb) against one panel, written to y's columns [o, o + width).
   NB is a constant at every call, so the partial sums stay in registers. */
static inline __attribute__((always_inline)) void
tile(const float *panel, const float *xb, const float *bias, const float *rb, float *yb,
     int64_t out, int64_t in, int64_t o, int64_t width, const int NB) {
    vf acc[XB][V];
    for (int j = 0; j < NB; j++)
        for (int v = 0; v < V; v++) acc[j][v] = (vf){0};
    for (int64_t k = 0; k < in; k++) {
        __builtin_prefetch((const char *)(panel + k * P) + LPREFETCH);        /* a row's 32 weights: */
        __builtin_prefetch((const char *)(panel + k * P) + LPREFETCH + 64);   /* two cache lines */
        vf wv[V];
        for (int v = 0; v < V; v++) wv[v] = load(panel + k * P + v * VW);
        for (int j = 0; j < NB; j++) {
            vf xv = splat(xb[j * in + k]);
            for (int v = 0; v < V; v++) acc[j][v] += wv[v] * xv;
        }
    }
    for (int j = 0; j < NB; j++) {
        float row[P];
        memcpy(row, acc[j], sizeof row);
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int c = 0; c < width; c++) yr[c] = row[c] + (bias ? bias[o + c] : 0.0f) + (rr ? rr[c] : 0.0f);
    }
}

/* One panel (in, 32) against all n rows of x, into y's columns [o, o + width). Also what
   qlinear.c's prefill path runs on a pair of its 16-row panels dequantized to floats. */
void psk_linear_panel(const float *panel, const float *x, const float *bias, const float *residual, float *y,
                      int64_t n, int64_t out, int64_t in, int64_t o, int64_t width) {
    for (int64_t b = 0; b < n; b += XB) {
        const float *xb = x + b * in;
        float *yb = y + b * out;
        const float *rb = residual ? residual + b * out : NULL;
        switch (n - b < XB ? n - b : XB) {
        case 1: tile(panel, xb, bias, rb, yb, out, in, o, width, 1); break;
#if XB == 3
        case 2: tile(panel, xb, bias, rb, yb, out, in, o, width, 2); break;
#elif XB > 3
        case 3: tile(panel, xb, bias, rb, yb, out, in, o, width, 3); break;
        case 4: tile(panel, xb, bias, rb, yb, out, in, o, width, 4); break;
        case 5: tile(panel, xb, bias, rb, yb, out, in, o, width, 5); break;
        case 6: tile(panel, xb, bias, rb, yb, out, in, o, width, 6); break;
        case 7: tile(panel, xb, bias, rb, yb, out, in, o, width, 7); break;
        case 2: tile(panel, xb, bias, rb, yb, out, in, o, width, 2); break;
#endif
        default: tile(panel, xb, bias, rb, yb, out, in, o, width, XB); break;
        }
    }
}

/* Panels [p0, p1) of the product, for all n rows of x. */
static void linear_panels(const float *wp, const float *x, const float *bias, const float *residual, float *y,
                          int64_t n, int64_t out, int64_t in, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
        const int64_t o = p * P, width = out - o < P ? out - o : P;
        psk_linear_panel(wp + p * in * P, x, bias, residual, y, n, out, in, o, width);
    }
}

typedef struct {
    const float *w, *x, *bias, *residual;
    float *y;
    int64_t n, out, in;
} linear_job;

static void linear_part(void *arg, int part, int parts) {
    const linear_job *job = arg;
    int64_t panels = (job->out + P - 1) / P;   /* as even a split as the panel count allows */
    int64_t p0 = panels * part / parts, p1 = panels * (part + 1) / parts;
    if (p0 < p1) linear_panels(job->w, job->x, job->bias, job->residual, job->y, job->n, job->out, job->in, p0, p1);
}

/* y = x @ W^T (+ bias) (+ residual); bias and residual may be NULL; residual is (n, out) and may
   be y itself (an in-place residual add); x must not overlap y. */
void psk_linear(const float *wp, const float *x, const float *bias, const float *residual, float *y,
                int64_t n, int64_t out, int64_t in) {
    linear_job job = {wp, x, bias, residual, y, n, out, in};
    pool_run(linear_part, &job);
}

int psk_panel_width(void) { return P; }
