/* Matrix products with quantized weights (formats and panel layout in quant.h).

   y (n, out) = x (n, in) @ W^T (+ bias) (+ residual), x and y float32, W packed Q8_0, Q4_0 or
   Q4_1. The weights are dequantized in registers and the arithmetic is float32, so a product
   equals the float32 one on the same dequantized weights up to the order of its additions.
   (llama.cpp quantizes the activations to int8 as well and multiplies integers; tried here,
   that flips the bundled model's answer to the Paris question, as it does in llama.cpp.)

   Per block of 32 inputs and per row of x, the formats leave one scale and one offset:
     Q8_0   sum_k d q_k x_k        = d * t
     Q4_0   sum_k d (q_k - 8) x_k  = d * (t - 8 s)
     Q4_1   sum_k (d q_k + m) x_k  = d * t + m * s
   with t = sum_k q_k x_k, the raw quants (small integers, exact in float) times x, for 16
   output rows at once in the lanes of one vector, and s = sum_k x_k, once per activation block.
   As in linear.c, a thread takes a contiguous range of panels and reads them front to back (a
   decode step streams the weights once); up to XB rows of x share each widened weight vector.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "kernels.h"
#include "pool.h"
#include "quant.h"

#if defined(__AVX512F__)
#define XB 8                          /* rows of x per tile: 8 float accumulators of 16 lanes */
#else
#define XB 2
#endif

typedef float v16f __attribute__((vector_size(64)));
typedef uint8_t v16u __attribute__((vector_size(16)));

static inline v16u load16(const uint8_t *p) { v16u v; memcpy(&v, p, 16); return v; }

/* 16 bytes -> 16 floats, unsigned or signed (GCC's generic conversion of these types goes byte by byte). */
static inline __attribute__((always_inline)) v16f widen(v16u b, const int is_signed) {
    v16f f;
#if defined(__AVX512F__)
    __m128i x;
    memcpy(&x, &b, 16);
    const __m512 v = _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(x) : _mm512_cvtepu8_epi32(x));
    memcpy(&f, &v, 64);
#elif defined(__AVX2__)
    __m128i x;
    memcpy(&x, &b, 16);
    const __m128i hi = _mm_unpackhi_epi64(x, x);
    const __m256 v0 = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(x) : _mm256_cvtepu8_epi32(x));
    const __m256 v1 = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi));
    memcpy(&f, &v0, 32);
    memcpy((char *)&f + 32, &v1, 32);
#else
    for (int r = 0; r < 16; r++) f[r] = is_signed ? (float)(int8_t)b[r] : (float)b[r];
#endif
    return f;
}

/* 16 bytes of 4-bit pairs -> the 16 low nibbles and the 16 high ones as floats: widened to 32 bits
   first, so that the masking and the shift are one instruction each (bytes have no shift). */
static inline __attribute__((always_inline)) void nibbles(v16u b, v16f *lo, v16f *hi) {
#if defined(__AVX512F__)
    __m128i x;
    memcpy(&x, &b, 16);
    const __m512i v = _mm512_cvtepu8_epi32(x);
    const __m512 l = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    const __m512 h = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    memcpy(lo, &l, 64);
    memcpy(hi, &h, 64);
#else
    *lo = widen(b & 0x0f, 0);
    *hi = widen(b >> 4, 0);
#endif
}

/* 16 fp16 scales -> floats. */
static inline __attribute__((always_inline)) v16f halves(const uint8_t *p) {
    v16f f;
#if defined(__AVX512F__)
    __m256i h;
    memcpy(&h, p, 32);
    const __m512 v = _mm512_cvtph_ps(h);
    memcpy(&f, &v, 64);
#elif defined(__F16C__)
    __m128i h0, h1;
    memcpy(&h0, p, 16);
    memcpy(&h1, p + 16, 16);
    const __m256 v0 = _mm256_cvtph_ps(h0), v1 = _mm256_cvtph_ps(h1);
    memcpy(&f, &v0, 32);
    memcpy((char *)&f + 32, &v1, 32);
#else
    for (int r = 0; r < 16; r++) {
        uint16_t h;
        memcpy(&h, p + 2 * r, 2);
        f[r] = quant_half_to_float(h);
    }
#endif
    return f;
}

/* One tile: rows [0, NB) of x against one panel, into y's columns [o, o + width). xs holds each
   row's block sums, (n, in / 32). NB is a constant at every call, so the sums stay in registers. */
static inline __attribute__((always_inline)) void
qtile(const int kind, const uint8_t *panel, const float *xb, const float *xs, const float *bias,
      const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, const int NB) {
    const int64_t nb = in / QK, chunk = quant_chunk_bytes(kind), scales = quant_scale_bytes(kind);
    /* C independent sums per row of x: a fused multiply-add takes several cycles, so a tile of
       one or two rows would otherwise wait on one chain of 32 of them per block. */
    const int C = NB <= 2 ? 4 : NB <= 4 ? 2 : 1;
    v16f acc[XB];
    for (int j = 0; j < NB; j++) acc[j] = (v16f){0};
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + scales;
        const float *xk = xb + kb * QK;
        v16f t[XB][4];
        for (int j = 0; j < NB; j++)
            for (int a = 0; a < C; a++) t[j][a] = (v16f){0};
        /* four inputs at a time, so that every index into t is a constant and t lives in registers */
        if (kind == PSK_Q8_0) {
            for (int k = 0; k < QK; k += 4) {
                const v16f w0 = widen(load16(qs + QR * k), 1), w1 = widen(load16(qs + QR * (k + 1)), 1);
                const v16f w2 = widen(load16(qs + QR * (k + 2)), 1), w3 = widen(load16(qs + QR * (k + 3)), 1);
                for (int j = 0; j < NB; j++) {
                    const float *xj = xk + j * in + k;
                    t[j][0] += w0 * xj[0];
                    t[j][1 % C] += w1 * xj[1];
                    t[j][2 % C] += w2 * xj[2];
                    t[j][3 % C] += w3 * xj[3];
                }
            }
        } else {
            for (int k = 0; k < QK / 2; k += 2) {
                v16f lo0, hi0, lo1, hi1;
                nibbles(load16(qs + QR * k), &lo0, &hi0);
                nibbles(load16(qs + QR * (k + 1)), &lo1, &hi1);
                for (int j = 0; j < NB; j++) {
                    const float *xj = xk + j * in + k;
                    t[j][0] += lo0 * xj[0];
                    t[j][1 % C] += hi0 * xj[16];
                    t[j][2 % C] += lo1 * xj[1];
                    t[j][3 % C] += hi1 * xj[17];
                }
            }
        }
        const v16f d = halves(c);
        const v16f m = kind == PSK_Q4_1 ? halves(c + 2 * QR) : (v16f){0};
        for (int j = 0; j < NB; j++) {
            v16f sum = t[j][0];
            for (int a = 1; a < C; a++) sum += t[j][a];
            const float s = xs[j * nb + kb];
            if (kind == PSK_Q8_0) acc[j] += d * sum;
            else if (kind == PSK_Q4_0) acc[j] += d * (sum - 8.0f * s);
            else acc[j] += d * sum + m * s;
        }
    }
    for (int j = 0; j < NB; j++) {
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++) yr[r] = acc[j][r] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}

/* A panel's weights as floats, w = d (q - z) or d q + m (the exact values psk_dequantize_rows
   gives), into columns [half * 16, half * 16 + 16) of a float panel (in, 32) as linear.c lays
   them out. For many rows of x (a prefill) two panels are dequantized once and multiplied by
   linear.c's float kernel, instead of dequantizing them again for every tile of XB rows. */
static void dequantize_panel(const int kind, const uint8_t *panel, int64_t in, float *wf, int half) {
    const int64_t nb = in / QK, chunk = quant_chunk_bytes(kind), scales = quant_scale_bytes(kind);
    float *cols = wf + QR * half;
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + scales;
        const v16f d = halves(c), m = kind == PSK_Q4_1 ? halves(c + 2 * QR) : (v16f){0};
        float *out = cols + kb * QK * 2 * QR;
        if (kind == PSK_Q8_0) {
            for (int k = 0; k < QK; k++) {
                const v16f w = d * widen(load16(qs + QR * k), 1);
                memcpy(out + 2 * QR * k, &w, sizeof w);
            }
        } else {
            const float z = kind == PSK_Q4_0 ? 8.0f : 0.0f;
            for (int k = 0; k < QK / 2; k++) {
                v16f lo, hi;
                nibbles(load16(qs + QR * k), &lo, &hi);
                lo = d * (lo - z) + m;
                hi = d * (hi - z) + m;
                memcpy(out + 2 * QR * k, &lo, sizeof lo);
                memcpy(out + 2 * QR * (k + 16), &hi, sizeof hi);
            }
        }
    }
}

typedef struct {
    int kind;
    const uint8_t *w;
    const float *x, *xs, *bias, *residual;
    float *y;
    int64_t n, out, in;
} qlinear_job;

#define TILE(KIND, NB) qtile(KIND, panel, xb, xs, bias, rb, yb, out, in, o, width, NB)
#define DEFINE_TILE(NAME, KIND)                                                                            \
    static void NAME(const uint8_t *panel, const float *xb, const float *xs, const float *bias,           \
                     const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, int nb) { \
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
DEFINE_TILE(tile_q8_0, PSK_Q8_0)
DEFINE_TILE(tile_q4_0, PSK_Q4_0)
DEFINE_TILE(tile_q4_1, PSK_Q4_1)

static void qlinear_part(void *arg, int part, int parts) {
    const qlinear_job *job = arg;
    const int64_t panels = (job->out + QR - 1) / QR, nb = job->in / QK;
    /* contiguous ranges of panels, split at even panels (the prefill path takes them in pairs) */
    const int64_t pairs = (panels + 1) / 2;
    const int64_t p0 = 2 * (pairs * part / parts), p1 = 2 * (pairs * (part + 1) / parts) < panels
                                                         ? 2 * (pairs * (part + 1) / parts) : panels;
    const int64_t panel_bytes = nb * quant_chunk_bytes(job->kind);
    void (*tile)(const uint8_t *, const float *, const float *, const float *, const float *, float *,
                 int64_t, int64_t, int64_t, int64_t, int) =
        job->kind == PSK_Q8_0 ? tile_q8_0 : job->kind == PSK_Q4_0 ? tile_q4_0 : tile_q4_1;
    if (job->n > XB) {   /* a prefill: each pair of panels dequantized once, then float products */
        static __thread float *wf;
        static __thread int64_t wf_size;
        if (wf_size < job->in * 2 * QR) {
            free(wf);
            wf = malloc((size_t)(job->in * 2 * QR) * sizeof(float));
            wf_size = wf ? job->in * 2 * QR : 0;
        }
        if (wf) {
            for (int64_t p = p0; p < p1; p += 2) {
                dequantize_panel(job->kind, job->w + p * panel_bytes, job->in, wf, 0);
                if (p + 1 < panels)   /* else a last lone panel: the right half's columns are not written out */
                    dequantize_panel(job->kind, job->w + (p + 1) * panel_bytes, job->in, wf, 1);
                const int64_t o = p * QR, width = job->out - o < 2 * QR ? job->out - o : 2 * QR;
                psk_linear_panel(wf, job->x, job->bias, job->residual, job->y, job->n, job->out, job->in, o, width);
            }
            return;
        }
    }
    for (int64_t p = p0; p < p1; p++) {
        const uint8_t *panel = job->w + p * panel_bytes;
        const int64_t o = p * QR, width = job->out - o < QR ? job->out - o : QR;
        for (int64_t b = 0; b < job->n; b += XB) {
            const float *rb = job->residual ? job->residual + b * job->out : NULL;
            const int rows = job->n - b < XB ? (int)(job->n - b) : XB;
            tile(panel, job->x + b * job->in, job->xs + b * nb, job->bias, rb, job->y + b * job->out,
                 job->out, job->in, o, width, rows);
        }
    }
}

/* y = x @ W^T (+ bias) (+ residual) for W packed by psk_quant_pack; in % 32 == 0. Returns -1
   when there is no memory for the activations' block sums. */
int psk_qlinear(int kind, const uint8_t *wp, const float *x, const float *bias, const float *residual, float *y,
                int64_t n, int64_t out, int64_t in) {
    static __thread float *sums;
    static __thread int64_t sums_size;
    const int64_t nb = in / QK;
    if (n * nb > sums_size) {
        free(sums);
        sums = malloc((size_t)(n * nb) * sizeof(float));
        sums_size = sums ? n * nb : 0;
        if (!sums) return -1;
    }
    if (kind != PSK_Q8_0)   /* only the 4-bit formats' offsets need the sums */
        for (int64_t i = 0; i < n * nb; i++) {
            float s = 0.0f;
            for (int k = 0; k < QK; k++) s += x[i * QK + k];
            sums[i] = s;
        }
    qlinear_job job = {kind, wp, x, sums, bias, residual, y, n, out, in};
    pool_run(qlinear_part, &job);
    return 0;
}
