/* Matrix products with quantized or half-width weights (formats and panel layout in quant.h).

   y (n, out) = x (n, in) @ W^T (+ bias) (+ residual), x and y float32, W packed in any of
   quant.h's formats -- or a list of row segments, each in its own format (PSK_SEGMENTS: a
   fused q|k|v matrix whose GGUF pieces are Q5_0 and Q8_0 runs as stored, in one pass of the
   pool). The weights are dequantized in registers and the arithmetic is float32, so a product
   equals the float32 one on the same dequantized weights up to the order of its additions --
   unless the rows are many and a bfloat16 unit was chosen (bf16.h: psk_set_math): then each unit
   of 32 outputs is dequantized to floats, rounded to bfloat16 and multiplied there (bf16.c).
   (llama.cpp quantizes the activations to int8 as well and multiplies integers; that flips the
   bundled Q4_1 model's answer to the Paris question, so here it is the opt-in --decode-math int8:
   qint8.c, for Q8_0/Q4_x/Q5_x products of a few rows.)

   Per sub-block of inputs sharing a scale, and per row of x, the formats leave one scale and
   one offset:
     Q8_0   sum_k d q_k x_k              = d t
     Q4_0   sum_k d (q_k - 8) x_k        = d (t - 8 s)      (Q5_0: 16)
     Q4_1   sum_k (d q_k + m) x_k        = d t + m s        (Q5_1)
     Q4_K   sum_k (d sc q_k - dmin mn) x_k = (d sc) t - (dmin mn) s, per sub-block of 32 (Q5_K)
     Q6_K   sum_k d sc (q_k - 32) x_k    = (d sc) t, q_k - 32 taken in the integer lanes
     F16    sum_k w_k x_k                = t
   with t = sum_k q_k x_k, the raw quants (small integers, exact in float) times x, for 16
   output rows at once in the lanes of one vector, and s = sum_k x_k over 32 inputs, once per
   activation block. A K-quant's 6-bit scales are decoded for the 16 rows at once, in vector
   lanes, from its transposed scale bytes.
   A thread takes a contiguous range of panels (of equal bytes, across segments) and reads them
   front to back (a decode step streams the weights once; from SHARED_ROWS rows of x, where the
   FMAs take longer than the read, the threads take units one at a time); up to XB rows of x share each
   widened weight vector. The register helpers are in qvec.h, the prefill path's dequantized
   panels in qdequant.c; AVX2 without AVX-512 runs qtile8.h's tile instead (8-lane registers,
   half a panel at a time: qtile's 16-lane vectors do not fit its 16 registers).
*/
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "pool.h"
#include "qint8.h"
#include "quant.h"
#include "qvec.h"

#if defined(__AVX512F__)
#define XB 8                          /* rows of x per tile: 8 float accumulators of 16 lanes */
#else
#define XB 2
#endif
/* From more rows than this a pair of panels is dequantized once to floats (linear.c's tile multiplies
   it); up to it the quantized tile runs in passes of XB rows, widening the weights in registers at each
   pass. Measured in one process, alternating (AVX-512, the bundled model's Q4_1 decode batches, 1 and 2
   threads): the passes took 0.56-0.63x the dequantized route's time at 12 rows, 0.74-0.81x at 16,
   0.90-0.96x at 32, 0.98-1.05x at 48. The AVX2 tile (2 rows a pass) is left at one pass. */
#if defined(__AVX512F__)
#define DEQUANT_ROWS 32
#else
#define DEQUANT_ROWS XB
#endif
#define QK 32                         /* inputs per activation sum */
#define FP 32                         /* outputs per float32 panel (linear.c) */
#ifndef PREFETCH
#define PREFETCH 4096                 /* bytes ahead of the chunk being read that a tile prefetches */
#endif

/* One tile: rows [0, NB) of x against one panel, into y's columns [o, o + width). xs holds each
   row's sums of 32 inputs, (n, in / 32). NB is a constant at every call, so the sums stay in
   registers. */
INLINE void
qtile(const int kind, const uint8_t *panel, const float *xb, const float *xs, const float *bias,
      const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, const int NB) {
    const int64_t bs = quant_block_size(kind), nb = in / bs, chunk = quant_chunk_bytes(kind), ns = in / QK;
    /* C independent sums per row of x: a fused multiply-add takes 4 cycles and two issue per cycle,
       so the tile needs at least 8 chains of them in flight. One sum per row left a tile of 5 to 7
       rows (a speculative verification of K+1 = 5 tokens) waiting on its chains: about 72 GFMA/s
       there against 96 at 8 rows on an AMD EPYC (Zen 5). Two sums per row from
       3 rows up (at most 16 registers of sums), four for one or two rows. A K-quant's tile has two
       sums per row already (its low and high halves), and C2 of each for up to 4 rows. */
    const int C = NB <= 2 ? 4 : 2, C2 = NB <= 4 ? 2 : 1;
    v16f acc[XB];
    for (int j = 0; j < NB; j++) acc[j] = (v16f){0};
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + qs_at(kind);
        const float *xk = xb + kb * bs;
        const float *sk = xs + kb * bs / QK;
        /* the bytes PREFETCH ahead, a chunk's worth a chunk: a K-quant chunk is read out of order
           (its scales after its quants), which the hardware's stream prefetcher follows poorly */
        for (int64_t at = 0; at < chunk; at += 64) __builtin_prefetch(c + PREFETCH + at);
        if (kind == PSK_Q4_K || kind == PSK_Q5_K) {
            const v16f d = halves(c), dmin = halves(c + 2 * QR);
            for (int g = 0; g < 4; g++) {
                v16f tl[XB][2], th[XB][2];
                for (int j = 0; j < NB; j++)
                    for (int a = 0; a < C2; a++) tl[j][a] = th[j][a] = (v16f){0};
                for (int l = 0; l < 32; l += 2) {
                    v16f lo0, hi0, lo1, hi1;
                    const uint8_t *q = qs + QR * (32 * g + l);
                    if (kind == PSK_Q4_K) {
                        nibbles(load16(q), &lo0, &hi0);
                        nibbles(load16(q + QR), &lo1, &hi1);
                    } else {
                        const uint8_t *h = c + 16 * QR + QR * l;
                        const v16i h0 = widen_i(load16(h), 0) << 4, h1 = widen_i(load16(h + QR), 0) << 4;
                        fives(load16(q), h0, 2 * g, h0, 2 * g + 1, &lo0, &hi0);
                        fives(load16(q + QR), h1, 2 * g, h1, 2 * g + 1, &lo1, &hi1);
                    }
                    for (int j = 0; j < NB; j++) {
                        const float *xj = xk + j * in + 64 * g + l;
                        tl[j][0] += lo0 * xj[0];
                        th[j][0] += hi0 * xj[32];
                        tl[j][1 % C2] += lo1 * xj[1];
                        th[j][1 % C2] += hi1 * xj[33];
                    }
                }
                v16i sl, ml, sh, mh;
                k_scales(c + 4 * QR, 2 * g, &sl, &ml);
                k_scales(c + 4 * QR, 2 * g + 1, &sh, &mh);
                const v16f Dl = d * tof(sl), Ml = dmin * tof(ml), Dh = d * tof(sh), Mh = dmin * tof(mh);
                for (int j = 0; j < NB; j++) {
                    const float *s = sk + j * ns + 2 * g;
                    acc[j] += Dl * sum_of(tl[j], C2) + Dh * sum_of(th[j], C2) - (Ml * s[0] + Mh * s[1]);
                }
            }
            continue;
        }
        if (kind == PSK_Q6_K) {
            const v16f d = halves(c + 208 * QR);
            for (int h = 0; h < 2; h++)
                for (int p = 0; p < 2; p++)
                    for (int lh = 0; lh < 32; lh += 16) {
                        v16f ta[XB][2], tb[XB][2];
                        for (int j = 0; j < NB; j++)
                            for (int a = 0; a < C2; a++) ta[j][a] = tb[j][a] = (v16f){0};
                        for (int l = lh; l < lh + 16; l += 2) {
                            v16f a0, b0, a1, b1;
                            const uint8_t *ql = c + QR * (64 * h + 32 * p + l), *qh = c + QR * (128 + 32 * h + l);
                            sixes(load16(ql), load16(qh), p, &a0, &b0);
                            sixes(load16(ql + QR), load16(qh + QR), p, &a1, &b1);
                            for (int j = 0; j < NB; j++) {
                                const float *xj = xk + j * in + 128 * h + 32 * p + l;
                                ta[j][0] += a0 * xj[0];
                                tb[j][0] += b0 * xj[64];
                                ta[j][1 % C2] += a1 * xj[1];
                                tb[j][1 % C2] += b1 * xj[65];
                            }
                        }
                        const int sa = 8 * h + 2 * p + lh / 16, sb = sa + 4;
                        const v16f Da = d * widen(load16(c + QR * (192 + sa)), 1);
                        const v16f Db = d * widen(load16(c + QR * (192 + sb)), 1);
                        for (int j = 0; j < NB; j++) acc[j] += Da * sum_of(ta[j], C2) + Db * sum_of(tb[j], C2);
                    }
            continue;
        }
        v16f t[XB][4];
        for (int j = 0; j < NB; j++)
            for (int a = 0; a < C; a++) t[j][a] = (v16f){0};
        /* four inputs at a time, so that every index into t is a constant and t lives in registers */
        if (kind == PSK_Q8_0 || kind == PSK_F16 || kind == PSK_BF16) {
            for (int k = 0; k < 32; k += 4) {
                v16f w[4];
                for (int i = 0; i < 4; i++)
                    w[i] = kind == PSK_Q8_0 ? widen(load16(qs + QR * (k + i)), 1)
                         : kind == PSK_F16 ? halves(qs + 2 * QR * (k + i)) : bhalves(qs + 2 * QR * (k + i));
                for (int j = 0; j < NB; j++) {
                    const float *xj = xk + j * in + k;
                    t[j][0] += w[0] * xj[0];
                    t[j][1 % C] += w[1] * xj[1];
                    t[j][2 % C] += w[2] * xj[2];
                    t[j][3 % C] += w[3] * xj[3];
                }
            }
        } else {
            const v16i qh = kind == PSK_Q5_0 || kind == PSK_Q5_1 ? load_i32(qs - 4 * QR) : (v16i){0};
            const v16i hl = qh << 4, hh = qh >> 12;   /* input k's bit at k + 4, input k + 16's at k + 4 */
            for (int k = 0; k < 16; k += 2) {
                v16f lo0, hi0, lo1, hi1;
                if (kind == PSK_Q4_0 || kind == PSK_Q4_1) {
                    nibbles(load16(qs + QR * k), &lo0, &hi0);
                    nibbles(load16(qs + QR * (k + 1)), &lo1, &hi1);
                } else {
                    fives(load16(qs + QR * k), hl, k, hh, k, &lo0, &hi0);
                    fives(load16(qs + QR * (k + 1)), hl, k + 1, hh, k + 1, &lo1, &hi1);
                }
                for (int j = 0; j < NB; j++) {
                    const float *xj = xk + j * in + k;
                    t[j][0] += lo0 * xj[0];
                    t[j][1 % C] += hi0 * xj[16];
                    t[j][2 % C] += lo1 * xj[1];
                    t[j][3 % C] += hi1 * xj[17];
                }
            }
        }
        const v16f d = kind == PSK_F16 || kind == PSK_BF16 ? (v16f){0} : halves(c);
        const v16f m = kind == PSK_Q4_1 || kind == PSK_Q5_1 ? halves(c + 2 * QR) : (v16f){0};
        for (int j = 0; j < NB; j++) {
            const v16f sum = sum_of(t[j], C);
            const float s = sk[j * ns];
            if (kind == PSK_Q8_0) acc[j] += d * sum;
            else if (kind == PSK_F16 || kind == PSK_BF16) acc[j] += sum;
            else if (kind == PSK_Q4_0) acc[j] += d * (sum - 8.0f * s);
            else if (kind == PSK_Q5_0) acc[j] += d * (sum - 16.0f * s);
            else acc[j] += d * sum + m * s;
        }
    }
    for (int j = 0; j < NB; j++) {
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++) yr[r] = acc[j][r] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}

typedef void tile_fn(const uint8_t *, const float *, const float *, const float *, const float *, float *,
                     int64_t, int64_t, int64_t, int64_t, int);

#if defined(__AVX2__) && !defined(__AVX512F__)
#include "qtile8.h"   /* AVX2: the tile in 8-lane registers, half a panel at a time */
#define TILE(KIND, NB) qtile8(KIND, panel, xb, xs, bias, rb, yb, out, in, o, width, NB)
#else
#define TILE(KIND, NB) qtile(KIND, panel, xb, xs, bias, rb, yb, out, in, o, width, NB)
#endif
#define DEFINE_TILES(NAME, KIND)                                                                            \
    static void tile_##NAME(const uint8_t *panel, const float *xb, const float *xs, const float *bias,    \
                            const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, \
                            int nb) {                                                                      \
        switch (nb) {                                                                                      \
        case 1: TILE(KIND, 1); break;                                                                      \
        MORE_TILES(KIND)                                                                                   \
        default: TILE(KIND, XB); break;                                                                    \
        }                                                                                                  \
    }
#if XB > 2
#define MORE_TILES(KIND) \
    case 2: TILE(KIND, 2); break; case 3: TILE(KIND, 3); break; case 4: TILE(KIND, 4); break; \
    case 5: TILE(KIND, 5); break; case 6: TILE(KIND, 6); break; case 7: TILE(KIND, 7); break;
#else
#define MORE_TILES(KIND)
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include "qtile_neon.h"   /* aarch64: the tile in 4-lane NEON registers, a quarter panel at a time */
_Static_assert(XB <= 2, "qtile_neon holds the sums of 2 rows of x");
#undef TILE
#define TILE(KIND, NB) qtile_neon(KIND, panel, xb, xs, bias, rb, yb, out, in, o, width, NB)
#endif
DEFINE_TILES(q8_0, PSK_Q8_0)
DEFINE_TILES(q4_0, PSK_Q4_0)
DEFINE_TILES(q4_1, PSK_Q4_1)
DEFINE_TILES(q5_0, PSK_Q5_0)
DEFINE_TILES(q5_1, PSK_Q5_1)
DEFINE_TILES(q4_k, PSK_Q4_K)
DEFINE_TILES(q5_k, PSK_Q5_K)
DEFINE_TILES(q6_k, PSK_Q6_K)
DEFINE_TILES(f16, PSK_F16)
DEFINE_TILES(bf16, PSK_BF16)

static tile_fn *const TILES[PSK_KINDS] = {NULL, tile_q8_0, tile_q4_0, tile_q4_1, tile_q5_0, tile_q5_1,
                                          tile_q4_k, tile_q5_k, tile_q6_k, tile_f16, tile_bf16};

/* A matrix's row segments: (kind, rows, pointer) int64 triples after their count (PSK_SEGMENTS). */
typedef struct {
    int64_t count;
    const int64_t *segs;
    const float *x, *xs, *bias, *residual;
    float *y;
    int64_t n, out, in;
    int unit;               /* PSK_MATH_FP32, or the bfloat16 unit (bf16.h) that runs this product */
    const uint16_t *xh;     /* unit != FP32: x in bfloat16, (n rounded up to 16, in_pad) */
    int64_t in_pad;         /* in rounded up to 32 */
    const int8_t *xq;       /* --decode-math int8 (qint8.c): x quantized per 32, else NULL */
    const float *xd;        /* its scales, (n, in / 32) */
    const int32_t *xqs;     /* its sums of quants, (n, in / 32) */
    atomic_llong next;      /* n >= SHARED_ROWS: the next unit a part takes (qlinear_part) */
} qlinear_job;

/* A segment's units of work, and the bytes of each: pairs of 16-row panels (the prefill path
   dequantizes a pair into one 32-wide float panel), or float32 panels of 32 rows. */
static int64_t seg_units(int kind, int64_t rows, int64_t in, int64_t *unit_bytes) {
    if (kind == PSK_F32) {
        *unit_bytes = FP * in * 4;
        return (rows + FP - 1) / FP;
    }
    *unit_bytes = 2 * (in / quant_block_size(kind)) * quant_chunk_bytes(kind);
    return ((rows + QR - 1) / QR + 1) / 2;
}

/* Unit u of a segment on a bfloat16 unit: its 32 outputs as a float panel (a float32 panel as it
   is, a pair of quantized panels dequantized), rounded to bfloat16 pairs, times the rounded x.
   0 where there is no memory for the panels (the float32 path runs the unit then). */
static int run_unit_bf16(const qlinear_job *job, int kind, const uint8_t *w, int64_t rows, int64_t o0, int64_t u) {
    const int64_t in = job->in, o = u * FP, width = rows - o < FP ? rows - o : FP;
    const float *wf = (const float *)w + u * in * FP;
    uint16_t *bp = pool_scratch(SCRATCH_BF16_PANEL, job->in_pad * FP * 2);
    if (kind != PSK_F32) {
        float *dq = pool_scratch(SCRATCH_PANEL, in * 2 * QR * 4);
        if (!dq || !bp) return 0;
        const int64_t panel_bytes = in / quant_block_size(kind) * quant_chunk_bytes(kind);
        psk_dequantize_panel(kind, w + 2 * u * panel_bytes, in, dq, 0);
        /* a last lone panel leaves the right half unwritten: zeros, so no NaN is rounded there */
        if (2 * u + 1 < (rows + QR - 1) / QR) psk_dequantize_panel(kind, w + (2 * u + 1) * panel_bytes, in, dq, 1);
        else for (int64_t k = 0; k < in; k++) memset(dq + k * FP + QR, 0, QR * sizeof *dq);
        wf = dq;
    }
    if (!bp) return 0;
    psk_bf16_panel(wf, in, job->in_pad, bp);
    psk_bf16_product(job->unit, bp, job->xh, job->bias, job->residual, job->y, job->n, job->out, job->in_pad,
                     o0 + o, width);
    return 1;
}

/* Unit u of a segment whose rows start at y's column o0. */
static void run_unit(const qlinear_job *job, int kind, const uint8_t *w, int64_t rows, int64_t o0, int64_t u) {
    const int64_t n = job->n, out = job->out, in = job->in;
    if (job->unit != PSK_MATH_FP32 && run_unit_bf16(job, kind, w, rows, o0, u)) return;
    if (kind == PSK_F32) {
        const int64_t o = u * FP, width = rows - o < FP ? rows - o : FP;
        psk_linear_panel((const float *)w + u * in * FP, job->x, job->bias, job->residual, job->y, n, out, in,
                         o0 + o, width);
        return;
    }
    const int64_t panels = (rows + QR - 1) / QR, panel_bytes = in / quant_block_size(kind) * quant_chunk_bytes(kind);
    const int64_t p = 2 * u;
    if (job->xq && psk_int8_kind(kind)) {   /* integer products on the quantized activations */
        const int64_t nb = in / QK;
        for (int64_t q = p; q < p + 2 && q < panels; q++) {
            const int64_t o = q * QR, width = rows - o < QR ? rows - o : QR;
            for (int64_t b = 0; b < n; b += INT8_ROWS) {
                const float *rb = job->residual ? job->residual + b * out : NULL;
                const int nrows = n - b < INT8_ROWS ? (int)(n - b) : INT8_ROWS;
                psk_int8_tile(kind, w + q * panel_bytes, job->xq + b * in, job->xd + b * nb, job->xqs + b * nb,
                              job->bias, rb, job->y + b * out, out, in, o0 + o, width, nrows);
            }
        }
        return;
    }
    float *wf = n > DEQUANT_ROWS ? pool_scratch(SCRATCH_PANEL, in * 2 * QR * 4) : NULL;
    if (wf) {   /* a prefill: the pair of panels dequantized once, then float products */
        psk_dequantize_panel(kind, w + p * panel_bytes, in, wf, 0);
        if (p + 1 < panels)   /* else a last lone panel: the right half's columns are not written out */
            psk_dequantize_panel(kind, w + (p + 1) * panel_bytes, in, wf, 1);
        const int64_t o = p * QR, width = rows - o < 2 * QR ? rows - o : 2 * QR;
        psk_linear_panel(wf, job->x, job->bias, job->residual, job->y, n, out, in, o0 + o, width);
        return;
    }
    for (int64_t q = p; q < p + 2 && q < panels; q++) {
        const int64_t o = q * QR, width = rows - o < QR ? rows - o : QR;
        for (int64_t b = 0; b < n; b += XB) {
            const float *rb = job->residual ? job->residual + b * out : NULL;
            const int nrows = n - b < XB ? (int)(n - b) : XB;
            TILES[kind](w + q * panel_bytes, job->x + b * in, job->xs + b * (in / QK), job->bias, rb, job->y + b * out,
                        out, in, o0 + o, width, nrows);
        }
    }
}

/* From this many rows of x a unit is its FMAs' time, not its weights' read: the parts take units one
   at a time, so a core slowed by other work (a shared machine's neighbours, a hybrid CPU's small
   cores) does fewer, instead of the others waiting for its fixed share at the end. A 2-thread
   prefill on a shared 2-core machine spent 7-15% of its time waiting there. Fewer rows keep each
   part's one contiguous run of weights, the read a core's prefetcher serves best. */
#define SHARED_ROWS 16

static void qlinear_part(void *arg, int part, int parts) {
    qlinear_job *job = arg;
    int64_t total = 0, unit_bytes;
    if (job->n >= SHARED_ROWS && parts > 1) {
        for (;;) {
            int64_t u = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed), o0 = 0, s = 0;
            for (; s < job->count; o0 += job->segs[3 * s + 1], s++) {   /* the segment unit u falls in */
                const int64_t units = seg_units((int)job->segs[3 * s], job->segs[3 * s + 1], job->in, &unit_bytes);
                if (u < units) break;
                u -= units;
            }
            if (s == job->count) return;
            run_unit(job, (int)job->segs[3 * s], (const uint8_t *)(intptr_t)job->segs[3 * s + 2], job->segs[3 * s + 1],
                     o0, u);
        }
    }
    for (int64_t s = 0; s < job->count; s++)
        total += seg_units((int)job->segs[3 * s], job->segs[3 * s + 1], job->in, &unit_bytes) * unit_bytes;
    /* contiguous ranges of units of about equal bytes: unit i goes to the part its middle falls in */
    int64_t start = 0, o0 = 0;
    for (int64_t s = 0; s < job->count; s++) {
        const int kind = (int)job->segs[3 * s];
        const int64_t rows = job->segs[3 * s + 1];
        const uint8_t *w = (const uint8_t *)(intptr_t)job->segs[3 * s + 2];
        const int64_t units = seg_units(kind, rows, job->in, &unit_bytes);
        for (int64_t u = 0; u < units; u++, start += unit_bytes)
            if ((start + unit_bytes / 2) * parts / total == part) run_unit(job, kind, w, rows, o0, u);
        o0 += rows;
    }
}

/* The formats whose products need the activations' sums of 32 (an offset or a min per block). */
static int needs_sums(int kind) {
    return kind == PSK_Q4_0 || kind == PSK_Q4_1 || kind == PSK_Q5_0 || kind == PSK_Q5_1 || kind == PSK_Q4_K ||
           kind == PSK_Q5_K;
}

/* y = x @ W^T (+ bias) (+ residual) for W packed by psk_quant_pack (in a multiple of the
   format's block), or for kind PSK_SEGMENTS a list of row segments (qlinear_job) whose rows
   add up to out. Returns -1 when there is no memory for the activations' block sums, -3 for
   segments that do not add up. */
int psk_qlinear(int kind, const uint8_t *wp, const float *x, const float *bias, const float *residual, float *y,
                int64_t n, int64_t out, int64_t in) {
    const int64_t one[3] = {kind, out, (int64_t)(intptr_t)wp};
    const int64_t *segs = kind == PSK_SEGMENTS ? (const int64_t *)wp + 1 : one;
    const int64_t count = kind == PSK_SEGMENTS ? ((const int64_t *)wp)[0] : 1;
    int64_t rows = 0;
    int sums_needed = 0, int8_kinds = 0;
    for (int64_t s = 0; s < count; s++) {
        if (segs[3 * s] != PSK_F32 && !quant_is_kind((int)segs[3 * s])) return -3;
        rows += segs[3 * s + 1];
        sums_needed |= needs_sums((int)segs[3 * s]);
        int8_kinds |= psk_int8_kind((int)segs[3 * s]);
    }
    if (rows != out) return -3;
    const int64_t nb = in / QK;
    float *sums = pool_scratch(SCRATCH_SUMS, n * nb * (int64_t)sizeof(float));
    if (!sums && n * nb) return -1;
    const int unit = psk_math_for(n);
    const int64_t in_pad = (in + 31) / 32 * 32, n_pad = (n + 15) / 16 * 16;
    uint16_t *xh = NULL;
    if (unit != PSK_MATH_FP32) {   /* x rounded once for every unit of the product */
        xh = pool_scratch(SCRATCH_ROUNDED, n_pad * in_pad * (int64_t)sizeof *xh);
        if (!xh) return -1;
        psk_bf16_rows(x, n, in, in_pad, n_pad, xh);
    }
    if (sums_needed)   /* only the formats with an offset or a min need the sums */
        for (int64_t i = 0; i < n * nb; i++) {
            float s = 0.0f;
            for (int k = 0; k < QK; k++) s += x[i * QK + k];
            sums[i] = s;
        }
    int8_t *xq = NULL;
    float *xd = NULL;
    int32_t *xqs = NULL;
    if (unit == PSK_MATH_FP32 && int8_kinds && psk_decode_int8_for(n) && n * nb > 0) {   /* --decode-math int8 */
        xq = pool_scratch(SCRATCH_INT8, n * in + 8 * n * nb);
        if (!xq) return -1;
        xd = (float *)(xq + n * in);   /* in is a multiple of 32: aligned for floats */
        xqs = (int32_t *)(xd + n * nb);
        psk_quantize_acts(x, n, in, xq, xd, xqs);
    }
    qlinear_job job = {count, segs, x, sums, bias, residual, y, n, out, in, unit, xh, in_pad, xq, xd, xqs};
    atomic_init(&job.next, 0);
    pool_run(qlinear_part, &job);
    return 0;
}
