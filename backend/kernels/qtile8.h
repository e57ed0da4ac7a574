/* qlinear.c's tile for AVX2 without AVX-512: the same sums as its qtile (the formulas in
   qlinear.c's head), in 8-lane registers. Each block of a panel is taken in two halves of 8
   rows (qvec8.h), one after the other, so that a half's weights, sums and accumulators fit in
   AVX2's 16 ymm registers; the second half reads the chunk from L1. The arithmetic is float32
   on the dequantized weights, as in qtile, so a product's rounding is that of the other paths
   (tests/models/test_quant.py checks each instruction-set level against the float64 product).
   This takes Q8_0 to the weight-read floor; the 4- and 5-bit formats stay compute-bound (about
   4 weights a cycle a core). llama.cpp's integer dot products (x quantized to int8 per block,
   vpmaddubsw / vpdpbusd) would do more a cycle, but change the rounding beyond that test's
   bound, and qlinear.c's head records that int8 activations flip the bundled model's answer:
   they are the opt-in --decode-math int8 (qint8.c, the K-quants in qint8k.c). Measured
   (bench.int8_compute): float32 on 8 lanes stays 1.1-1.7x short of the read floor's rate at
   4-6 bits, the int8 route computes faster than the reads at every block format. */
#pragma once

#include "qvec8.h"

INLINE8 void
qtile8(const int kind, const uint8_t *panel, const float *xb, const float *xs, const float *bias,
       const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, const int NB) {
    const int64_t bs = quant_block_size(kind), nb = in / bs, chunk = quant_chunk_bytes(kind), ns = in / QK;
    /* independent chains of fused multiply-adds per row of x (they take 4 cycles, 2 a cycle) */
    const int C = NB == 1 ? 4 : 2, C2 = NB == 1 ? 2 : 1;
    v8f acc[2][2];   /* [row of x][half] */
    for (int j = 0; j < NB; j++) acc[j][0] = acc[j][1] = (v8f){0};
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + qs_at(kind);
        const float *xk = xb + kb * bs;
        const float *sk = xs + kb * bs / QK;
        for (int64_t at = 0; at < chunk; at += 64) __builtin_prefetch(c + PREFETCH + at);
        for (int hf = 0; hf < 2; hf++) {
            const int r8 = 8 * hf;   /* byte offset of the half's rows in a 16-row unit */
            if (kind == PSK_Q4_K || kind == PSK_Q5_K) {
                const v8f d = halves8(c + 2 * r8), dmin = halves8(c + 2 * QR + 2 * r8);
                for (int g = 0; g < 4; g++) {
                    v8f tl[2][2], th[2][2];
                    for (int j = 0; j < NB; j++)
                        for (int a = 0; a < C2; a++) tl[j][a] = th[j][a] = (v8f){0};
                    for (int l = 0; l < 32; l += 2) {
                        v8f lo0, hi0, lo1, hi1;
                        const uint8_t *q = qs + QR * (32 * g + l) + r8;
                        if (kind == PSK_Q4_K) {
                            nibbles8(q, &lo0, &hi0);
                            nibbles8(q + QR, &lo1, &hi1);
                        } else {
                            const uint8_t *h = c + 16 * QR + QR * l + r8;
                            const v8s h0 = widen8_i(h, 0) << 4, h1 = widen8_i(h + QR, 0) << 4;
                            fives8(q, h0, 2 * g, h0, 2 * g + 1, &lo0, &hi0);
                            fives8(q + QR, h1, 2 * g, h1, 2 * g + 1, &lo1, &hi1);
                        }
                        for (int j = 0; j < NB; j++) {
                            const float *xj = xk + j * in + 64 * g + l;
                            tl[j][0] += lo0 * xj[0];
                            th[j][0] += hi0 * xj[32];
                            tl[j][1 % C2] += lo1 * xj[1];
                            th[j][1 % C2] += hi1 * xj[33];
                        }
                    }
                    v8s sl, ml, sh, mh;
                    k_scales8(c + 4 * QR, 2 * g, r8, &sl, &ml);
                    k_scales8(c + 4 * QR, 2 * g + 1, r8, &sh, &mh);
                    const v8f Dl = d * tof8(sl), Ml = dmin * tof8(ml), Dh = d * tof8(sh), Mh = dmin * tof8(mh);
                    for (int j = 0; j < NB; j++) {
                        const float *s = sk + j * ns + 2 * g;
                        acc[j][hf] += Dl * sum8_of(tl[j], C2) + Dh * sum8_of(th[j], C2) - (Ml * s[0] + Mh * s[1]);
                    }
                }
                continue;
            }
            if (kind == PSK_Q6_K) {
                const v8f d = halves8(c + 208 * QR + 2 * r8);
                for (int h = 0; h < 2; h++)
                    for (int p = 0; p < 2; p++)
                        for (int lh = 0; lh < 32; lh += 16) {
                            v8f ta[2][2], tb[2][2];
                            for (int j = 0; j < NB; j++)
                                for (int a = 0; a < C2; a++) ta[j][a] = tb[j][a] = (v8f){0};
                            for (int l = lh; l < lh + 16; l += 2) {
                                v8f a0, b0, a1, b1;
                                const uint8_t *ql = c + QR * (64 * h + 32 * p + l) + r8;
                                const uint8_t *qh = c + QR * (128 + 32 * h + l) + r8;
                                sixes8(ql, qh, p, &a0, &b0);
                                sixes8(ql + QR, qh + QR, p, &a1, &b1);
                                for (int j = 0; j < NB; j++) {
                                    const float *xj = xk + j * in + 128 * h + 32 * p + l;
                                    ta[j][0] += a0 * xj[0];
                                    tb[j][0] += b0 * xj[64];
                                    ta[j][1 % C2] += a1 * xj[1];
                                    tb[j][1 % C2] += b1 * xj[65];
                                }
                            }
                            const int sa = 8 * h + 2 * p + lh / 16, sb = sa + 4;
                            const v8f Da = d * widen8(c + QR * (192 + sa) + r8, 1);
                            const v8f Db = d * widen8(c + QR * (192 + sb) + r8, 1);
                            for (int j = 0; j < NB; j++)
                                acc[j][hf] += Da * sum8_of(ta[j], C2) + Db * sum8_of(tb[j], C2);
                        }
                continue;
            }
            v8f t[2][4];
            for (int j = 0; j < NB; j++)
                for (int a = 0; a < C; a++) t[j][a] = (v8f){0};
            if (kind == PSK_Q8_0 || kind == PSK_F16 || kind == PSK_BF16) {
                for (int k = 0; k < 32; k += 4) {
                    v8f w[4];
                    for (int i = 0; i < 4; i++)
                        w[i] = kind == PSK_Q8_0 ? widen8(qs + QR * (k + i) + r8, 1)
                             : kind == PSK_F16 ? halves8(qs + 2 * QR * (k + i) + 2 * r8)
                                               : bhalves8(qs + 2 * QR * (k + i) + 2 * r8);
                    for (int j = 0; j < NB; j++) {
                        const float *xj = xk + j * in + k;
                        t[j][0] += w[0] * xj[0];
                        t[j][1 % C] += w[1] * xj[1];
                        t[j][2 % C] += w[2] * xj[2];
                        t[j][3 % C] += w[3] * xj[3];
                    }
                }
            } else {
                const v8s qh = kind == PSK_Q5_0 || kind == PSK_Q5_1 ? load8_i32(qs - 4 * QR + 4 * r8) : (v8s){0};
                const v8s hl = qh << 4, hh = qh >> 12;   /* input k's bit at k + 4, input k + 16's at k + 4 */
                for (int k = 0; k < 16; k += 2) {
                    v8f lo0, hi0, lo1, hi1;
                    if (kind == PSK_Q4_0 || kind == PSK_Q4_1) {
                        nibbles8(qs + QR * k + r8, &lo0, &hi0);
                        nibbles8(qs + QR * (k + 1) + r8, &lo1, &hi1);
                    } else {
                        fives8(qs + QR * k + r8, hl, k, hh, k, &lo0, &hi0);
                        fives8(qs + QR * (k + 1) + r8, hl, k + 1, hh, k + 1, &lo1, &hi1);
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
            const v8f d = kind == PSK_F16 || kind == PSK_BF16 ? (v8f){0} : halves8(c + 2 * r8);
            const v8f m = kind == PSK_Q4_1 || kind == PSK_Q5_1 ? halves8(c + 2 * QR + 2 * r8) : (v8f){0};
            for (int j = 0; j < NB; j++) {
                const v8f sum = sum8_of(t[j], C);
                const float s = sk[j * ns];
                if (kind == PSK_Q8_0) acc[j][hf] += d * sum;
                else if (kind == PSK_F16 || kind == PSK_BF16) acc[j][hf] += sum;
                else if (kind == PSK_Q4_0) acc[j][hf] += d * (sum - 8.0f * s);
                else if (kind == PSK_Q5_0) acc[j][hf] += d * (sum - 16.0f * s);
                else acc[j][hf] += d * sum + m * s;
            }
        }
    }
    for (int j = 0; j < NB; j++) {
        float *yr = yb + j * out + o, a[QR];
        memcpy(a, &acc[j][0], 32);
        memcpy(a + 8, &acc[j][1], 32);
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++) yr[r] = a[r] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}
