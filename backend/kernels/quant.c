/* Quantized weights (formats and layout in quant.h): float rows to GGUF blocks, GGUF blocks to
   the product's panels, and back to float for references. None of this is on a step's path:
   it runs once, when a model is loaded.

   The quantizers are the formats' reference rules, as llama.cpp's quantizer applies them
   without an importance matrix (ggml's quantize_row_*_ref):
     Q8_0  d = max|x| / 127,             q = round(x / d)
     Q4_0  d = (the x of largest |x|) / -8, q = min(15, trunc(x / d + 8.5))
     Q4_1  d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5))
     Q5_0, Q5_1  the same with 16 and 31 levels a side
     Q4_K, Q5_K  per sub-block of 32: a scale and a min by a weighted least-squares search over
                 21 (16) trial scales (weights |x| + rms(x)); the 8 scales and 8 mins then
                 quantized to 6 bits against the block's largest, and q re-rounded with them
     Q6_K  per sub-block of 16: the scale of largest |x| refined over 18 trial scales (weights
           x^2); the 16 scales quantized to int8 against the largest
     F16, BF16  rounded to nearest even
   with d (and m, dmin) stored as fp16. The K-quant searches follow ggml's order of float
   operations, with contraction into fused multiply-adds turned off (as ggml's own build has it),
   so that they write the bytes llama.cpp writes (tests/models/test_quant.py compares them). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

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

static uint16_t float_to_bf16(float f) {     /* round to nearest even; NaN stays a (quiet) NaN */
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) x = (x & 0xffff0000) | 0x400000;
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static float bf16_to_float(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    const uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* ggml's nearest_int: round half to even through the float adder (|f| < 2^22). */
static int nearest(float f) {
    const float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

/* Q4_0 / Q5_0: symmetric, levels 2 half; Q4_1 / Q5_1: min and range, levels - 1 steps. */
static void quantize_32(int kind, const float *x, uint8_t *b) {
    const int five = kind == PSK_Q5_0 || kind == PSK_Q5_1, offset = kind == PSK_Q4_1 || kind == PSK_Q5_1;
    const int top = five ? 31 : 15;
    uint8_t q[32];
    if (!offset) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
        const float d = max / (five ? -16.0f : -8.0f), id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int i = 0; i < 32; i++) q[i] = (uint8_t)imin(top, (int8_t)(x[i] * id + (five ? 16.5f : 8.5f)));
    } else {
        float min = x[0], max = x[0];
        for (int i = 1; i < 32; i++) { min = fminf(min, x[i]); max = fmaxf(max, x[i]); }
        const float d = (max - min) / (float)top, id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        put_half(b + 2, min);
        for (int i = 0; i < 32; i++) q[i] = (uint8_t)imin(top, (int)((x[i] - min) * id + 0.5f));
    }
    uint8_t *qs = b + 2 + 2 * offset;
    if (five) {
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) qh |= (uint32_t)((q[i] >> 4) & 1) << i;
        memcpy(qs, &qh, 4);
        qs += 4;
    }
    for (int i = 0; i < 16; i++) qs[i] = (uint8_t)((q[i] & 15) | (q[i + 16] & 15) << 4);
}

/* ggml's make_qkx2_quants: a scale and a min for n values at levels 0..nmax, least squares
   weighted by w over nstep + 1 trial scales; returns the scale, *the_min = -min. */
static float scale_min_search(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                              float rmin, float rdelta, int nstep) {
    uint8_t aux[32];
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest(iscale * (x[i] - min))));
        const float diff = scale * L[i] + min - x[i];
        best += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest(iscale * (x[i] - min))));
            aux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float diff = this_scale * aux[i] + this_min - x[i];
                err += w[i] * (diff * diff);
            }
            if (err < best) {
                memcpy(L, aux, (size_t)n);
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Sub-block j's 6-bit scale and min from a K-quant's 12 scale bytes (ggml's get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void quantize_k45(int kind, const float *x, uint8_t *b) {
    const int five = kind == PSK_Q5_K, nmax = five ? 31 : 15;
    uint8_t L[256], *scales = b + 4;
    float mins[8], sc[8], w[32], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        sc[j] = scale_min_search(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], five ? -0.5f : -1.0f, 0.1f,
                                 five ? 15 : 20);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f, inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales, 0, 12);
    for (int j = 0; j < 8; j++) {
        const int ls = imin(63, (uint8_t)nearest(inv_scale * sc[j])), lm = imin(63, (uint8_t)nearest(inv_min * mins[j]));
        if (j < 4) {
            scales[j] = (uint8_t)ls;
            scales[j + 4] = (uint8_t)lm;
        } else {
            scales[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    put_half(b, max_scale / 63.f);
    put_half(b + 2, max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        int s, m;
        scale_min_k4(j, scales, &s, &m);
        const float d = get_half(b) * s;
        if (!d) continue;
        const float dm = get_half(b + 2) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest((x[32 * j + i] + dm) / d)));
    }
    uint8_t *qh = b + 16, *qs = b + 16 + (five ? 32 : 0);
    if (five) memset(qh, 0, 32);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
            qs[32 * g + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
            if (five) qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
        }
}

/* ggml's make_qx_quants with rmse_type 1 (weights x^2): a signed scale for 16 values at -32..31. */
static float scale_search_q6(const float *x, int8_t *L) {
    const int n = 16, nmax = 32;
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest(iscale * x[i])));
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

static void quantize_q6_k(const float *x, uint8_t *b) {
    int8_t L[256];
    float sc[16], max_scale = 0, max_abs = 0;
    for (int s = 0; s < 16; s++) {
        sc[s] = scale_search_q6(x + 16 * s, L + 16 * s);
        if (fabsf(sc[s]) > max_abs) { max_abs = fabsf(sc[s]); max_scale = sc[s]; }
    }
    memset(b, 0, 210);
    if (max_abs < 1e-15f) return;   /* all zero: d = 0 */
    uint8_t *ql = b, *qh = b + 128, *scales = b + 192;
    const float iscale = -128.f / max_scale;
    put_half(b + 208, 1 / iscale);
    for (int s = 0; s < 16; s++) scales[s] = (uint8_t)(int8_t)imin(127, nearest(iscale * sc[s]));
    for (int s = 0; s < 16; s++) {
        const float d = get_half(b + 208) * (int8_t)scales[s];
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * s + i] = (int8_t)(imax(-32, imin(31, nearest(x[16 * s + i] / d))) + 32);
    }
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t q1 = (uint8_t)L[128 * h + l], q2 = (uint8_t)L[128 * h + l + 32];
            const uint8_t q3 = (uint8_t)L[128 * h + l + 64], q4 = (uint8_t)L[128 * h + l + 96];
            ql[64 * h + l] = (uint8_t)((q1 & 15) | (q3 & 15) << 4);
            ql[64 * h + l + 32] = (uint8_t)((q2 & 15) | (q4 & 15) << 4);
            qh[32 * h + l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
        }
}

static void quantize_block(int kind, const float *x, uint8_t *b) {
    switch (kind) {
    case PSK_Q8_0: {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        put_half(b, d);
        for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
        break;
    }
    case PSK_Q4_K: case PSK_Q5_K: quantize_k45(kind, x, b); break;
    case PSK_Q6_K: quantize_q6_k(x, b); break;
    case PSK_F16: for (int i = 0; i < 32; i++) put_half(b + 2 * i, x[i]); break;
    case PSK_BF16:
        for (int i = 0; i < 32; i++) { const uint16_t h = float_to_bf16(x[i]); memcpy(b + 2 * i, &h, 2); }
        break;
    default: quantize_32(kind, x, b); break;
    }
}

/* w (rows, in) float -> rows of GGUF blocks, (rows, in / QK * block bytes); in % QK == 0. */
void psk_quantize_rows(int kind, const float *w, int64_t rows, int64_t in, uint8_t *dst) {
    const int64_t bb = quant_block_bytes(kind), qk = quant_block_size(kind);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < in; k += qk) quantize_block(kind, w + r * in + k, dst + (r * in + k) / qk * bb);
}

/* One GGUF block -> its QK floats, by the formats' rules in quant.h, in the order of float
   operations of the gguf package's reference (scales times sub-block scales first). */
static void dequantize_block(int kind, const uint8_t *b, float *w) {
    switch (kind) {
    case PSK_Q8_0: {
        const float d = get_half(b);
        for (int i = 0; i < 32; i++) w[i] = d * (float)(int8_t)b[2 + i];
        return;
    }
    case PSK_Q4_K: case PSK_Q5_K: {
        const int five = kind == PSK_Q5_K;
        const float d = get_half(b), dmin = get_half(b + 2);
        const uint8_t *qh = b + 16, *qs = b + 16 + (five ? 32 : 0);
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            scale_min_k4(j, b + 4, &sc, &mn);
            const float D = d * (float)sc, M = dmin * (float)mn;
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 15;
                if (five) q |= ((qh[l] >> j) & 1) << 4;
                w[32 * j + l] = D * (float)q - M;
            }
        }
        return;
    }
    case PSK_Q6_K: {
        const float d = get_half(b + 208);
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, s = (e % 128) / 32, l = e % 32;
            const int lo = (b[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 15;
            const int hi = (b[128 + 32 * h + l] >> (2 * s)) & 3;
            w[e] = (d * (float)(int8_t)b[192 + 8 * h + 2 * s + l / 16]) * (float)((lo | hi << 4) - 32);
        }
        return;
    }
    case PSK_F16: for (int i = 0; i < 32; i++) w[i] = get_half(b + 2 * i); return;
    case PSK_BF16: for (int i = 0; i < 32; i++) w[i] = bf16_to_float(b + 2 * i); return;
    default: {   /* Q4_0, Q4_1, Q5_0, Q5_1 */
        const int five = kind == PSK_Q5_0 || kind == PSK_Q5_1, offset = kind == PSK_Q4_1 || kind == PSK_Q5_1;
        const float d = get_half(b), m = offset ? get_half(b + 2) : 0.0f;
        const uint8_t *qs = b + 2 + 2 * offset + 4 * five;
        uint32_t qh = 0;
        if (five) memcpy(&qh, b + 2 + 2 * offset, 4);
        const int z = offset ? 0 : five ? 16 : 8;
        for (int i = 0; i < 32; i++) {
            const int q = ((qs[i % 16] >> (4 * (i / 16))) & 15) | (int)((qh >> i) & 1) << 4;
            w[i] = offset ? d * (float)q + m : d * (float)(q - z);
        }
        return;
    }
    }
}

/* Bytes of a packed (out, in) matrix: out rounded up to whole panels. */
int64_t psk_quant_packed_bytes(int kind, int64_t out, int64_t in) {
    return (out + QR - 1) / QR * (in / quant_block_size(kind)) * quant_chunk_bytes(kind);
}

/* GGUF rows (out, in / QK blocks) -> panels (quant.h); rows past `out` in the last panel are zeros. */
void psk_quant_pack(int kind, const uint8_t *rows, int64_t out, int64_t in, uint8_t *dst) {
    const int64_t bb = quant_block_bytes(kind), nb = in / quant_block_size(kind), chunk = quant_chunk_bytes(kind);
    const int64_t panels = (out + QR - 1) / QR;
    memset(dst, 0, (size_t)(panels * nb * chunk));
    for (int64_t p = 0; p < panels; p++)
        for (int64_t kb = 0; kb < nb; kb++) {
            uint8_t *c = dst + (p * nb + kb) * chunk;
            for (int r = 0; r < QR && p * QR + r < out; r++) {
                const uint8_t *b = rows + ((p * QR + r) * nb + kb) * bb;
                int64_t off = 0;
                for (const quant_field *f = QUANT_FIELDS[kind]; f->width; f++) {
                    for (int u = 0; u < f->count; u++)
                        memcpy(c + QR * off + (QR * u + r) * f->width, b + off + u * f->width, (size_t)f->width);
                    off += f->width * f->count;
                }
            }
        }
}

/* GGUF rows -> float (rows, in): the values the product multiplies by, for references and lookups. */
void psk_dequantize_rows(int kind, const uint8_t *src, int64_t rows, int64_t in, float *w) {
    const int64_t bb = quant_block_bytes(kind), qk = quant_block_size(kind);
    for (int64_t blk = 0; blk < rows * in / qk; blk++) dequantize_block(kind, src + blk * bb, w + blk * qk);
}
