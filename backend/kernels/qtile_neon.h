/* qlinear.c's tile for aarch64: the same sums as its qtile (the formulas in qlinear.c's head), in
   NEON's 4-lane registers. GCC keeps qvec.h's 16-lane generic vectors on the stack on aarch64 (a
   load and a store around every multiply-add) and converts their fp16 scales one call a lane, so
   here each block of a panel is taken a quarter (4 rows) at a time: a quarter's weights are
   widened with NEON's lengthening moves (uxtl/sxtl), its scales converted by fcvtl, and its sums
   and accumulators stay in the 32 vector registers; the other quarters read the chunk from L1.
   The arithmetic is float32 on the dequantized weights, as in qtile, so a product rounds as the
   other paths do (tools/kernel_check.py checks it under qemu against the portable C build).
   Integer dot products (dotprod's sdot) would need the activations in int8 as well, which
   qlinear.c's head explains this project does not do. */
#pragma once

#include <arm_neon.h>

#include "qvec.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

INLINE v4f tof4(v4i v) { return __builtin_convertvector(v, v4f); }

/* 4 bytes (4 rows' quant byte) -> 4 int32 lanes, unsigned or signed. */
INLINE v4i widen4_i(const uint8_t *p, const int is_signed) {
    uint32_t word;
    memcpy(&word, p, 4);
    const uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(word));
    const int32x4_t v = is_signed ? vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(b))))
                                  : vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(b))));
    v4i f;
    memcpy(&f, &v, 16);
    return f;
}

INLINE v4f widen4(const uint8_t *p, const int is_signed) { return tof4(widen4_i(p, is_signed)); }

INLINE void nibbles4(const uint8_t *p, v4f *lo, v4f *hi) {
    const v4i v = widen4_i(p, 0);
    *lo = tof4(v & 15);
    *hi = tof4(v >> 4);
}

/* 4 fp16 values -> floats (fcvtl). */
INLINE v4f halves4(const uint8_t *p) {
    float16x4_t h;
    memcpy(&h, p, 8);
    const float32x4_t v = vcvt_f32_f16(h);
    v4f f;
    memcpy(&f, &v, 16);
    return f;
}

/* 4 bfloat16 values -> floats: the 16 bits become a float's top half (ushll #16). */
INLINE v4f bhalves4(const uint8_t *p) {
    uint16x4_t h;
    memcpy(&h, p, 8);
    const uint32x4_t v = vshll_n_u16(h, 16);
    v4f f;
    memcpy(&f, &v, 16);
    return f;
}

INLINE v4i load4_i32(const uint8_t *p) { v4i v; memcpy(&v, p, 16); return v; }

/* qvec.h's k_scales for the 4 rows at byte `at` of each 16-row unit. */
INLINE void k_scales4(const uint8_t *sc, int j, int at, v4i *scale, v4i *min) {
    if (j < 4) {
        *scale = widen4_i(sc + QR * j + at, 0) & 63;
        *min = widen4_i(sc + QR * (j + 4) + at, 0) & 63;
    } else {
        const v4i b = widen4_i(sc + QR * (j + 4) + at, 0);
        *scale = (b & 15) | (widen4_i(sc + QR * (j - 4) + at, 0) >> 6) << 4;
        *min = (b >> 4) | (widen4_i(sc + QR * j + at, 0) >> 6) << 4;
    }
}

/* qvec.h's fives and sixes, 4 rows. */
INLINE void fives4(const uint8_t *p, v4i hl, int bl, v4i hh, int bh, v4f *lo, v4f *hi) {
    const v4i v = widen4_i(p, 0);
    *lo = tof4((v & 15) | ((hl >> bl) & 16));
    *hi = tof4((v >> 4) | ((hh >> bh) & 16));
}

INLINE void sixes4(const uint8_t *ql, const uint8_t *qh, int p, v4f *a, v4f *b) {
    const v4i v = widen4_i(ql, 0), h = widen4_i(qh, 0);
    *a = tof4(((v & 15) | ((h << (4 - 2 * p)) & 48)) - 32);
    *b = tof4(((v >> 4) | ((h >> (2 * p)) & 48)) - 32);
}

INLINE v4f sum4_of(const v4f *t, int C) {
    v4f s = t[0];
    for (int a = 1; a < C; a++) s += t[a];
    return s;
}

INLINE void
qtile_neon(const int kind, const uint8_t *panel, const float *xb, const float *xs, const float *bias,
           const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, const int NB) {
    const int64_t bs = quant_block_size(kind), nb = in / bs, chunk = quant_chunk_bytes(kind), ns = in / QK;
    const int C = NB == 1 ? 4 : 2, C2 = NB == 1 ? 2 : 1;   /* independent chains of multiply-adds per row */
    const int quarters = (int)((width + 3) / 4);          /* a last panel's rows past out are not summed */
    v4f acc[2][4];   /* [row of x][quarter] */
    for (int j = 0; j < NB; j++)
        for (int qt = 0; qt < 4; qt++) acc[j][qt] = (v4f){0};
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + qs_at(kind);
        const float *xk = xb + kb * bs;
        const float *sk = xs + kb * bs / QK;
        for (int64_t at = 0; at < chunk; at += 64) __builtin_prefetch(c + PREFETCH + at);
        for (int qt = 0; qt < quarters; qt++) {
            const int r4 = 4 * qt;   /* byte offset of the quarter's rows in a 16-row unit */
            if (kind == PSK_Q4_K || kind == PSK_Q5_K) {
                const v4f d = halves4(c + 2 * r4), dmin = halves4(c + 2 * QR + 2 * r4);
                for (int g = 0; g < 4; g++) {
                    v4f tl[2][2], th[2][2];
                    for (int j = 0; j < NB; j++)
                        for (int a = 0; a < C2; a++) tl[j][a] = th[j][a] = (v4f){0};
                    for (int l = 0; l < 32; l += 2) {
                        v4f lo0, hi0, lo1, hi1;
                        const uint8_t *q = qs + QR * (32 * g + l) + r4;
                        if (kind == PSK_Q4_K) {
                            nibbles4(q, &lo0, &hi0);
                            nibbles4(q + QR, &lo1, &hi1);
                        } else {
                            const uint8_t *h = c + 16 * QR + QR * l + r4;
                            const v4i h0 = widen4_i(h, 0) << 4, h1 = widen4_i(h + QR, 0) << 4;
                            fives4(q, h0, 2 * g, h0, 2 * g + 1, &lo0, &hi0);
                            fives4(q + QR, h1, 2 * g, h1, 2 * g + 1, &lo1, &hi1);
                        }
                        for (int j = 0; j < NB; j++) {
                            const float *xj = xk + j * in + 64 * g + l;
                            tl[j][0] += lo0 * xj[0];
                            th[j][0] += hi0 * xj[32];
                            tl[j][1 % C2] += lo1 * xj[1];
                            th[j][1 % C2] += hi1 * xj[33];
                        }
                    }
                    v4i sl, ml, sh, mh;
                    k_scales4(c + 4 * QR, 2 * g, r4, &sl, &ml);
                    k_scales4(c + 4 * QR, 2 * g + 1, r4, &sh, &mh);
                    const v4f Dl = d * tof4(sl), Ml = dmin * tof4(ml), Dh = d * tof4(sh), Mh = dmin * tof4(mh);
                    for (int j = 0; j < NB; j++) {
                        const float *s = sk + j * ns + 2 * g;
                        acc[j][qt] += Dl * sum4_of(tl[j], C2) + Dh * sum4_of(th[j], C2) - (Ml * s[0] + Mh * s[1]);
                    }
                }
                continue;
            }
            if (kind == PSK_Q6_K) {
                const v4f d = halves4(c + 208 * QR + 2 * r4);
                for (int h = 0; h < 2; h++)
                    for (int p = 0; p < 2; p++)
                        for (int lh = 0; lh < 32; lh += 16) {
                            v4f ta[2][2], tb[2][2];
                            for (int j = 0; j < NB; j++)
                                for (int a = 0; a < C2; a++) ta[j][a] = tb[j][a] = (v4f){0};
                            for (int l = lh; l < lh + 16; l += 2) {
                                v4f a0, b0, a1, b1;
                                const uint8_t *ql = c + QR * (64 * h + 32 * p + l) + r4;
                                const uint8_t *qh = c + QR * (128 + 32 * h + l) + r4;
                                sixes4(ql, qh, p, &a0, &b0);
                                sixes4(ql + QR, qh + QR, p, &a1, &b1);
                                for (int j = 0; j < NB; j++) {
                                    const float *xj = xk + j * in + 128 * h + 32 * p + l;
                                    ta[j][0] += a0 * xj[0];
                                    tb[j][0] += b0 * xj[64];
                                    ta[j][1 % C2] += a1 * xj[1];
                                    tb[j][1 % C2] += b1 * xj[65];
                                }
                            }
                            const int sa = 8 * h + 2 * p + lh / 16, sb = sa + 4;
                            const v4f Da = d * widen4(c + QR * (192 + sa) + r4, 1);
                            const v4f Db = d * widen4(c + QR * (192 + sb) + r4, 1);
                            for (int j = 0; j < NB; j++)
                                acc[j][qt] += Da * sum4_of(ta[j], C2) + Db * sum4_of(tb[j], C2);
                        }
                continue;
            }
            v4f t[2][4];
            for (int j = 0; j < NB; j++)
                for (int a = 0; a < C; a++) t[j][a] = (v4f){0};
            if (kind == PSK_Q8_0 || kind == PSK_F16 || kind == PSK_BF16) {
                for (int k = 0; k < 32; k += 4) {
                    v4f w[4];
                    for (int i = 0; i < 4; i++)
                        w[i] = kind == PSK_Q8_0 ? widen4(qs + QR * (k + i) + r4, 1)
                             : kind == PSK_F16 ? halves4(qs + 2 * QR * (k + i) + 2 * r4)
                             : bhalves4(qs + 2 * QR * (k + i) + 2 * r4);
                    for (int j = 0; j < NB; j++) {
                        const float *xj = xk + j * in + k;
                        t[j][0] += w[0] * xj[0];
                        t[j][1 % C] += w[1] * xj[1];
                        t[j][2 % C] += w[2] * xj[2];
                        t[j][3 % C] += w[3] * xj[3];
                    }
                }
            } else {
                const v4i qh = kind == PSK_Q5_0 || kind == PSK_Q5_1 ? load4_i32(qs - 4 * QR + 4 * r4) : (v4i){0};
                const v4i hl = qh << 4, hh = qh >> 12;   /* input k's bit at k + 4, input k + 16's at k + 4 */
                for (int k = 0; k < 16; k += 2) {
                    v4f lo0, hi0, lo1, hi1;
                    if (kind == PSK_Q4_0 || kind == PSK_Q4_1) {
                        nibbles4(qs + QR * k + r4, &lo0, &hi0);
                        nibbles4(qs + QR * (k + 1) + r4, &lo1, &hi1);
                    } else {
                        fives4(qs + QR * k + r4, hl, k, hh, k, &lo0, &hi0);
                        fives4(qs + QR * (k + 1) + r4, hl, k + 1, hh, k + 1, &lo1, &hi1);
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
            const v4f d = kind == PSK_F16 || kind == PSK_BF16 ? (v4f){0} : halves4(c + 2 * r4);
            const v4f m = kind == PSK_Q4_1 || kind == PSK_Q5_1 ? halves4(c + 2 * QR + 2 * r4) : (v4f){0};
            for (int j = 0; j < NB; j++) {
                const v4f sum = sum4_of(t[j], C);
                const float s = sk[j * ns];
                if (kind == PSK_Q8_0) acc[j][qt] += d * sum;
                else if (kind == PSK_F16 || kind == PSK_BF16) acc[j][qt] += sum;
                else if (kind == PSK_Q4_0) acc[j][qt] += d * (sum - 8.0f * s);
                else if (kind == PSK_Q5_0) acc[j][qt] += d * (sum - 16.0f * s);
                else acc[j][qt] += d * sum + m * s;
            }
        }
    }
    for (int j = 0; j < NB; j++) {
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++)
            yr[r] = acc[j][r / 4][r % 4] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}
