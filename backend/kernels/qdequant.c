/* Quantized panels back to floats, for the prefill path of the products (qlinear.c): with many
   rows of x, a pair of 16-row panels is dequantized once into one float panel of linear.c's
   layout and multiplied by its float kernel, instead of widening the weights again in every
   tile of a few rows. The values are exactly psk_dequantize_rows' (quant.c). */
#include <stdint.h>

#include "quant.h"
#include "qvec.h"

/* A panel's weights as floats into columns [half * 16, half * 16 + 16) of a float panel (in, 32),
   input k of block kb at row kb * block + k. */
INLINE void dequantize_panel(const int kind, const uint8_t *panel, int64_t in, float *wf, int half) {
    const int64_t bs = quant_block_size(kind), nb = in / bs, chunk = quant_chunk_bytes(kind);
    float *cols = wf + QR * half;
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint8_t *c = panel + kb * chunk, *qs = c + qs_at(kind);
        float *out = cols + kb * bs * 2 * QR;   /* input k of the block at out + 2 * QR * k */
        if (kind == PSK_Q4_K || kind == PSK_Q5_K) {
            const v16f d = halves(c), dmin = halves(c + 2 * QR);
            for (int g = 0; g < 4; g++) {
                v16i sl, ml, sh, mh;
                k_scales(c + 4 * QR, 2 * g, &sl, &ml);
                k_scales(c + 4 * QR, 2 * g + 1, &sh, &mh);
                const v16f Dl = d * tof(sl), Ml = dmin * tof(ml), Dh = d * tof(sh), Mh = dmin * tof(mh);
                for (int l = 0; l < 32; l++) {
                    v16f lo, hi;
                    if (kind == PSK_Q4_K) nibbles(load16(qs + QR * (32 * g + l)), &lo, &hi);
                    else {
                        const v16i h = widen_i(load16(c + QR * (16 + l)), 0) << 4;
                        fives(load16(qs + QR * (32 * g + l)), h, 2 * g, h, 2 * g + 1, &lo, &hi);
                    }
                    put(out + 2 * QR * (64 * g + l), Dl * lo - Ml);
                    put(out + 2 * QR * (64 * g + 32 + l), Dh * hi - Mh);
                }
            }
        } else if (kind == PSK_Q6_K) {
            const v16f d = halves(c + 208 * QR);
            for (int h = 0; h < 2; h++)
                for (int p = 0; p < 2; p++)
                    for (int l = 0; l < 32; l++) {
                        v16f a, b;
                        sixes(load16(c + QR * (64 * h + 32 * p + l)), load16(c + QR * (128 + 32 * h + l)), p, &a, &b);
                        const int sa = 8 * h + 2 * p + l / 16;
                        put(out + 2 * QR * (128 * h + 32 * p + l), (d * widen(load16(c + QR * (192 + sa)), 1)) * a);
                        put(out + 2 * QR * (128 * h + 32 * p + 64 + l), (d * widen(load16(c + QR * (196 + sa)), 1)) * b);
                    }
        } else if (kind == PSK_Q8_0 || kind == PSK_F16 || kind == PSK_BF16) {
            const v16f d = kind == PSK_Q8_0 ? halves(c) : (v16f){0};
            for (int k = 0; k < 32; k++)
                put(out + 2 * QR * k, kind == PSK_Q8_0 ? d * widen(load16(qs + QR * k), 1)
                                      : kind == PSK_F16 ? halves(qs + 2 * QR * k) : bhalves(qs + 2 * QR * k));
        } else {
            const v16f d = halves(c), m = kind == PSK_Q4_1 || kind == PSK_Q5_1 ? halves(c + 2 * QR) : (v16f){0};
            const v16i qh = kind == PSK_Q5_0 || kind == PSK_Q5_1 ? load_i32(qs - 4 * QR) : (v16i){0};
            const v16i hl = qh << 4, hh = qh >> 12;
            const float z = kind == PSK_Q4_0 ? 8.0f : kind == PSK_Q5_0 ? 16.0f : 0.0f;
            for (int k = 0; k < 16; k++) {
                v16f lo, hi;
                if (kind == PSK_Q4_0 || kind == PSK_Q4_1) nibbles(load16(qs + QR * k), &lo, &hi);
                else fives(load16(qs + QR * k), hl, k, hh, k, &lo, &hi);
                put(out + 2 * QR * k, d * (lo - z) + m);
                put(out + 2 * QR * (k + 16), d * (hi - z) + m);
            }
        }
    }
}

#define DEFINE_DEQUANT(NAME, KIND) \
    static void dequant_##NAME(const uint8_t *panel, int64_t in, float *wf, int half) { \
        dequantize_panel(KIND, panel, in, wf, half);                                   \
    }
DEFINE_DEQUANT(q8_0, PSK_Q8_0)
DEFINE_DEQUANT(q4_0, PSK_Q4_0)
DEFINE_DEQUANT(q4_1, PSK_Q4_1)
DEFINE_DEQUANT(q5_0, PSK_Q5_0)
DEFINE_DEQUANT(q5_1, PSK_Q5_1)
DEFINE_DEQUANT(q4_k, PSK_Q4_K)
DEFINE_DEQUANT(q5_k, PSK_Q5_K)
DEFINE_DEQUANT(q6_k, PSK_Q6_K)
DEFINE_DEQUANT(f16, PSK_F16)
DEFINE_DEQUANT(bf16, PSK_BF16)

static void (*const DEQUANTS[PSK_KINDS])(const uint8_t *, int64_t, float *, int) = {
    NULL, dequant_q8_0, dequant_q4_0, dequant_q4_1, dequant_q5_0, dequant_q5_1, dequant_q4_k, dequant_q5_k,
    dequant_q6_k, dequant_f16, dequant_bf16};

/* One packed panel (16 rows, in inputs) -> columns [16 half, 16 half + 16) of a float panel (in, 32). */
void psk_dequantize_panel(int kind, const uint8_t *panel, int64_t in, float *wf, int half) {
    DEQUANTS[kind](panel, in, wf, half);
}
