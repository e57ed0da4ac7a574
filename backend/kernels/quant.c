/* Quantized weights (formats and layout in quant.h): float rows to GGUF blocks, GGUF blocks to
   the product's panels, and back to float for references. None of this is on a step's path:
   it runs once, when a model is loaded.

   The quantizers are the formats' reference rules, as llama.cpp's quantizer applies them
   without an importance matrix:
     Q8_0  d = max|x| / 127,             q = round(x / d)
     Q4_0  d = (the x of largest |x|) / -8, q = min(15, trunc(x / d + 8.5))
     Q4_1  d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5))
   with d (and m) stored as fp16. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

static uint16_t float_to_half(float f) {     /* round to nearest even; overflow to infinity */
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000, a = x & 0x7fffffff;
    if (a >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000 ? 0x200 : 0));
    if (a >= 0x477ff000) return (uint16_t)(sign | 0x7c00);            /* >= 65520: rounds to inf */
    if (a < 0x38800000) {                                              /* below 2^-14: subnormal */
        if (a < 0x33000000) return (uint16_t)sign;
        const uint32_t m = (a & 0x7fffff) | 0x800000, shift = 126 - (a >> 23);
        uint32_t h = m >> shift;
        const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((a >> 13) - (112 << 10));
    const uint32_t rest = a & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float quant_half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t x;
    if (e == 0) {
        if (m == 0) {
            x = sign;
        } else {                                                       /* subnormal: normalize */
            int shift = 0;
            uint32_t mm = m;
            while (!(mm & 0x400)) { mm <<= 1; shift++; }
            x = sign | ((uint32_t)(113 - shift) << 23) | ((mm & 0x3ff) << 13);
        }
    } else if (e == 31) {
        x = sign | 0x7f800000 | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void put_half(uint8_t *p, float f) { const uint16_t h = float_to_half(f); memcpy(p, &h, 2); }
static float get_half(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return quant_half_to_float(h); }

static void quantize_block(int kind, const float *x, uint8_t *b) {
    if (kind == PSK_Q8_0) {
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int i = 0; i < QK; i++) b[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
    } else if (kind == PSK_Q4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < QK; i++)
            if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
        const float d = max / -8.0f, id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int i = 0; i < QK / 2; i++) {
            const int lo = (int)fminf(15.0f, x[i] * id + 8.5f), hi = (int)fminf(15.0f, x[i + 16] * id + 8.5f);
            b[2 + i] = (uint8_t)(lo | hi << 4);
        }
    } else {
        float min = x[0], max = x[0];
        for (int i = 1; i < QK; i++) { min = fminf(min, x[i]); max = fmaxf(max, x[i]); }
        const float d = (max - min) / 15.0f, id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        put_half(b + 2, min);
        for (int i = 0; i < QK / 2; i++) {
            const int lo = (int)fminf(15.0f, (x[i] - min) * id + 0.5f), hi = (int)fminf(15.0f, (x[i + 16] - min) * id + 0.5f);
            b[4 + i] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* w (rows, in) float -> rows of GGUF blocks, (rows, in / 32 * block bytes); in % 32 == 0. */
void psk_quantize_rows(int kind, const float *w, int64_t rows, int64_t in, uint8_t *dst) {
    const int64_t bb = quant_block_bytes(kind);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < in; k += QK) quantize_block(kind, w + r * in + k, dst + (r * in + k) / QK * bb);
}

/* The 32 weights of one GGUF block as integers: q (Q8_0, signed), or 0..15 (4-bit). */
static void block_quants(int kind, const uint8_t *b, int q[QK]) {
    if (kind == PSK_Q8_0) {
        for (int i = 0; i < QK; i++) q[i] = (int8_t)b[2 + i];
        return;
    }
    const uint8_t *qs = b + (kind == PSK_Q4_1 ? 4 : 2);
    for (int i = 0; i < QK / 2; i++) { q[i] = qs[i] & 0x0f; q[i + 16] = qs[i] >> 4; }
}

/* Bytes of a packed (out, in) matrix: out rounded up to whole panels. */
int64_t psk_quant_packed_bytes(int kind, int64_t out, int64_t in) {
    return (out + QR - 1) / QR * (in / QK) * quant_chunk_bytes(kind);
}

/* GGUF rows (out, in / 32 blocks) -> panels (quant.h); rows past `out` in the last panel are zeros. */
void psk_quant_pack(int kind, const uint8_t *rows, int64_t out, int64_t in, uint8_t *dst) {
    const int64_t bb = quant_block_bytes(kind), nb = in / QK, chunk = quant_chunk_bytes(kind);
    const int64_t panels = (out + QR - 1) / QR, scales = quant_scale_bytes(kind);
    memset(dst, 0, (size_t)(panels * nb * chunk));
    for (int64_t p = 0; p < panels; p++) {
        for (int64_t kb = 0; kb < nb; kb++) {
            uint8_t *c = dst + (p * nb + kb) * chunk, *qs = c + scales;
            for (int r = 0; r < QR && p * QR + r < out; r++) {
                const uint8_t *b = rows + ((p * QR + r) * nb + kb) * bb;
                memcpy(c + 2 * r, b, 2);                                   /* d */
                if (kind == PSK_Q4_1) memcpy(c + 2 * QR + 2 * r, b + 2, 2);  /* m */
                const uint8_t *bq = b + (kind == PSK_Q4_1 ? 4 : 2);           /* the block's quant bytes */
                for (int k = 0; k < (kind == PSK_Q8_0 ? QK : QK / 2); k++) qs[k * QR + r] = bq[k];
            }
        }
    }
}

/* GGUF rows -> float (rows, in): the values the product multiplies by, for references and lookups. */
void psk_dequantize_rows(int kind, const uint8_t *src, int64_t rows, int64_t in, float *w) {
    const int64_t bb = quant_block_bytes(kind);
    for (int64_t blk = 0; blk < rows * in / QK; blk++) {
        const uint8_t *b = src + blk * bb;
        int q[QK];
        block_quants(kind, b, q);
        const float d = get_half(b), m = kind == PSK_Q4_1 ? get_half(b + 2) : 0.0f;
        const int z = kind == PSK_Q4_0 ? 8 : 0;
        for (int i = 0; i < QK; i++) w[blk * QK + i] = d * (float)(q[i] - z) + m;
    }
}
