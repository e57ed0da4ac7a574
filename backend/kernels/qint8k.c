/* The integer decode products (--decode-math int8, qint8.c) of the K-quants: Q4_K, Q5_K, Q6_K.

   The activations are qint8.c's: int8 per block of 32 with one float scale and the sum of the
   quants. A K-quant super-block of 256 weights is 8 such blocks, each with its own scale (and
   Q4_K/Q5_K a min; Q6_K two 16-weight scales a block), so per block of 32:
     Q4_K, Q5_K   d sc_b d_x (sum q q_x) - dmin m_b d_x S       q the raw 4- or 5-bit quant
     Q6_K         d d_x (sc_lo (sum_lo q q_x - 32 S_lo) + sc_hi (sum_hi q q_x - 32 S_hi))
   with the sums over the block's two 16-input halves for Q6_K (S_lo, S_hi the halves of S): the
   dot products are integer, the scales float. The panel bytes (quant.h) are transposed in
   registers as qint8.c does, 4 inputs of 16 rows at a time, and multiplied with vpmaddubsw +
   vpmaddwd (AVX2), or vpdpbusd where AVX-VNNI or AVX-512 VNNI exists (256-bit: this file is the
   same code in an AVX-512 build). Built where AVX2 is (x86-64-v3 and up); elsewhere the K-quants
   keep the float32 products (psk_int8k_built() is 0).
*/
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "qint8.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)
#define KINT8 1
#include "qvec8.h"
#else
#define KINT8 0
#endif

int psk_int8k_built(void) { return KINT8; }

#if KINT8
/* 64 bytes: inputs l..l+3, 16 rows each -> z[0] rows 0-7, z[1] rows 8-15, a row's 4 inputs a lane. */
static inline void rows4(const uint8_t *p, __m256i z[2]) {
    const __m256i idx = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    const __m256i p0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)p), idx);
    const __m256i p1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(p + 32)), idx);
    const __m256i shuf = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    z[0] = _mm256_shuffle_epi8(_mm256_unpacklo_epi64(p0, p1), shuf);
    z[1] = _mm256_shuffle_epi8(_mm256_unpackhi_epi64(p0, p1), shuf);
}

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* acc + the dot products of unsigned weight bytes u0, u1 with signed activation bytes s0, s1, in
   fours. Without VNNI the two 16-bit pair sums are added before widening: the weights are at most
   63, so 4 x 63 x 128 fits in int16. */
static inline __m256i dot2(__m256i acc, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(acc, u0, s0), u1, s1);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, u0, s0), u1, s1);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* bit b of each byte moved to bit `to` (b, to in 0..7), the other bits cleared: 16-bit shifts,
   whose bits crossing into the neighbour byte land outside the mask */
static inline __m256i bit_at(__m256i z, int b, int to) {
    const __m256i s = b <= to ? _mm256_slli_epi16(z, to - b) : _mm256_srli_epi16(z, b - to);
    return _mm256_and_si256(s, _mm256_set1_epi8((char)(1 << to)));
}

/* the sum of 16 int8 (as unsigned x + 128, summed by vpsadbw) */
static inline int32_t sum16(const int8_t *p) {
    const __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)0x80));
    const __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi32(s, 2) - 16 * 128;
}

static inline v8f tofi(__m256i v) { return tof8((v8s)v); }

#define ALWAYS static inline __attribute__((always_inline))

/* One Q4_K/Q5_K super-block chunk c against nb rows of x (xk: this super-block's inputs, row
   stride in; xd, xs: the block scales and sums of row 0 at this super-block, row stride nblk). */
ALWAYS void block45(const int kind, const uint8_t *c, const int8_t *xk, const float *xd, const int32_t *xs, int64_t in,
                    int64_t nblk, const int nb, v8f acc[][2]) {
    const uint8_t *qs = c + (kind == PSK_Q4_K ? 16 : 48) * QR, *qh = c + 16 * QR;
    const v8f d[2] = {halves8(c), halves8(c + 16)}, dm[2] = {halves8(c + 2 * QR), halves8(c + 2 * QR + 16)};
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; g++) {
        __m256i lo[INT8_ROWS][2], hi[INT8_ROWS][2];
        for (int j = 0; j < nb; j++) lo[j][0] = lo[j][1] = hi[j][0] = hi[j][1] = _mm256_setzero_si256();
        for (int l = 0; l < 32; l += 8) {
            __m256i wl[2][2], wh[2][2];
            for (int t = 0; t < 2; t++) {
                __m256i z[2];
                rows4(qs + QR * (32 * g + l + 4 * t), z);
                for (int r = 0; r < 2; r++) {
                    wl[t][r] = _mm256_and_si256(z[r], m4);
                    wh[t][r] = _mm256_and_si256(_mm256_srli_epi16(z[r], 4), m4);
                }
                if (kind == PSK_Q5_K) {   /* input l's fifth bits: bit 2g (low quants), 2g + 1 (high) */
                    __m256i h[2];
                    rows4(qh + QR * (l + 4 * t), h);
                    for (int r = 0; r < 2; r++) {
                        wl[t][r] = _mm256_or_si256(wl[t][r], bit_at(h[r], 2 * g, 4));
                        wh[t][r] = _mm256_or_si256(wh[t][r], bit_at(h[r], 2 * g + 1, 4));
                    }
                }
            }
            for (int j = 0; j < nb; j++) {
                const int8_t *x = xk + j * in + 64 * g + l;
                const __m256i x0 = bcast4(x), x1 = bcast4(x + 4), x2 = bcast4(x + 32), x3 = bcast4(x + 36);
                for (int r = 0; r < 2; r++) {
                    lo[j][r] = dot2(lo[j][r], wl[0][r], x0, wl[1][r], x1);
                    hi[j][r] = dot2(hi[j][r], wh[0][r], x2, wh[1][r], x3);
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            v8s sl, ml, sh, mh;
            k_scales8(c + 4 * QR, 2 * g, 8 * r, &sl, &ml);
            k_scales8(c + 4 * QR, 2 * g + 1, 8 * r, &sh, &mh);
            const v8f Dl = d[r] * tof8(sl), Ml = dm[r] * tof8(ml), Dh = d[r] * tof8(sh), Mh = dm[r] * tof8(mh);
            for (int j = 0; j < nb; j++) {
                const float dl = xd[j * nblk + 2 * g], dh = xd[j * nblk + 2 * g + 1];
                const float ml_s = dl * (float)xs[j * nblk + 2 * g], mh_s = dh * (float)xs[j * nblk + 2 * g + 1];
                acc[j][r] += Dl * dl * tofi(lo[j][r]) + Dh * dh * tofi(hi[j][r]) - (Ml * ml_s + Mh * mh_s);
            }
        }
    }
}

/* One Q6_K super-block chunk c (ql: 128 rows of bytes, qh: 64, scales: 16 int8, d) likewise:
   pass (h, p) takes ql bytes 64h + 32p + l, the low nibbles inputs 128h + 32p + l, the high ones
   64 further, their top two bits from qh byte 32h + l, bits 2p (low) and 2p + 4 (high). */
ALWAYS void block6(const uint8_t *c, const int8_t *xk, const float *xd, int64_t in, int64_t nblk, const int nb,
                   v8f acc[][2]) {
    const v8f d[2] = {halves8(c + 208 * QR), halves8(c + 208 * QR + 16)};
    const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 2; p++)
            for (int lh = 0; lh < 32; lh += 16) {
                __m256i A[INT8_ROWS][2], B[INT8_ROWS][2];
                for (int j = 0; j < nb; j++) A[j][0] = A[j][1] = B[j][0] = B[j][1] = _mm256_setzero_si256();
                for (int l = lh; l < lh + 16; l += 8) {
                    __m256i wa[2][2], wb[2][2];
                    for (int t = 0; t < 2; t++) {
                        __m256i z[2], q[2];
                        rows4(c + QR * (64 * h + 32 * p + l + 4 * t), z);
                        rows4(c + QR * (128 + 32 * h + l + 4 * t), q);
                        for (int r = 0; r < 2; r++) {
                            wa[t][r] = _mm256_or_si256(_mm256_and_si256(z[r], m4),
                                                       _mm256_and_si256(_mm256_slli_epi16(q[r], 4 - 2 * p), m6));
                            wb[t][r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(z[r], 4), m4),
                                                       _mm256_and_si256(_mm256_srli_epi16(q[r], 2 * p), m6));
                        }
                    }
                    for (int j = 0; j < nb; j++) {
                        const int8_t *x = xk + j * in + 128 * h + 32 * p + l;
                        const __m256i x0 = bcast4(x), x1 = bcast4(x + 4), x2 = bcast4(x + 64), x3 = bcast4(x + 68);
                        for (int r = 0; r < 2; r++) {
                            A[j][r] = dot2(A[j][r], wa[0][r], x0, wa[1][r], x1);
                            B[j][r] = dot2(B[j][r], wb[0][r], x2, wb[1][r], x3);
                        }
                    }
                }
                const int sa = 8 * h + 2 * p + lh / 16, sb = sa + 4;   /* the 16-weight scales */
                const int ba = 4 * h + p, bb = ba + 2;                  /* the blocks of 32 */
                for (int r = 0; r < 2; r++) {
                    const v8f Sa = d[r] * widen8(c + QR * (192 + sa) + 8 * r, 1);
                    const v8f Sb = d[r] * widen8(c + QR * (192 + sb) + 8 * r, 1);
                    for (int j = 0; j < nb; j++) {
                        const int8_t *x = xk + j * in + 128 * h + 32 * p + lh;
                        const __m256i oa = _mm256_set1_epi32(32 * sum16(x)), ob = _mm256_set1_epi32(32 * sum16(x + 64));
                        acc[j][r] += Sa * xd[j * nblk + ba] * tofi(_mm256_sub_epi32(A[j][r], oa)) +
                                     Sb * xd[j * nblk + bb] * tofi(_mm256_sub_epi32(B[j][r], ob));
                    }
                }
            }
}

ALWAYS void ktile(const int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                  const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width,
                  const int nb) {
    const int64_t supers = in / 256, nblk = in / 32, chunk = quant_chunk_bytes(kind);
    v8f acc[INT8_ROWS][2];
    for (int j = 0; j < nb; j++) acc[j][0] = acc[j][1] = (v8f){0};
    for (int64_t kb = 0; kb < supers; kb++) {
        const uint8_t *c = panel + kb * chunk;
        for (int64_t at = 0; at < chunk; at += 64) __builtin_prefetch(c + chunk + at);
        if (kind == PSK_Q6_K) block6(c, xq + 256 * kb, xd + 8 * kb, in, nblk, nb, acc);
        else block45(kind, c, xq + 256 * kb, xd + 8 * kb, xs + 8 * kb, in, nblk, nb, acc);
    }
    for (int j = 0; j < nb; j++) {
        float a[QR];
        memcpy(a, &acc[j][0], 32);
        memcpy(a + 8, &acc[j][1], 32);
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++) yr[r] = a[r] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}

#define K_CASES(KIND)                                                                                     \
    switch (nb) {                                                                                         \
    case 1: ktile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 1); break;                    \
    case 2: ktile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 2); break;                    \
    default: ktile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, nb); break;                  \
    }

void psk_int8k_tile(int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                    const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o,
                    int64_t width, int nb) {
    if (kind == PSK_Q4_K) K_CASES(PSK_Q4_K)
    else if (kind == PSK_Q5_K) K_CASES(PSK_Q5_K)
    else K_CASES(PSK_Q6_K)
}
#else
void psk_int8k_tile(int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                    const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o,
                    int64_t width, int nb) {
    (void)kind, (void)panel, (void)xq, (void)xd, (void)xs, (void)bias, (void)rb, (void)yb;
    (void)out, (void)in, (void)o, (void)width, (void)nb;   /* never called: psk_int8_kind says no */
}
#endif
