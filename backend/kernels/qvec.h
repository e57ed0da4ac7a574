/* The quantized products' register helpers (qlinear.c's tiles, qdequant.c's panels): 16 rows'
   bytes of a panel chunk (quant.h) widened to 16 int32 or float lanes, fp16 / bf16 scales and
   weights to floats, a K-quant's 6-bit scales decoded in lanes, 5- and 6-bit quants assembled.
   Each has an AVX-512, an AVX2 and a plain-C form, chosen at compile time. */
#pragma once

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#endif

#include "quant.h"

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint8_t v16u __attribute__((vector_size(16)));

#define INLINE static inline __attribute__((always_inline))
INLINE v16u load16(const uint8_t *p) { v16u v; memcpy(&v, p, 16); return v; }
INLINE v16i load_i32(const uint8_t *p) { v16i v; memcpy(&v, p, 64); return v; }
INLINE v16f tof(v16i v) { return __builtin_convertvector(v, v16f); }

/* 16 bytes -> 16 int32 lanes, unsigned or signed (GCC's generic conversion goes byte by byte). */
INLINE v16i widen_i(v16u b, const int is_signed) {
    v16i f;
#if defined(__AVX512F__)
    __m128i x;
    memcpy(&x, &b, 16);
    const __m512i v = is_signed ? _mm512_cvtepi8_epi32(x) : _mm512_cvtepu8_epi32(x);
    memcpy(&f, &v, 64);
#elif defined(__AVX2__)
    __m128i x;
    memcpy(&x, &b, 16);
    const __m128i hi = _mm_unpackhi_epi64(x, x);
    const __m256i v0 = is_signed ? _mm256_cvtepi8_epi32(x) : _mm256_cvtepu8_epi32(x);
    const __m256i v1 = is_signed ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
    memcpy(&f, &v0, 32);
    memcpy((char *)&f + 32, &v1, 32);
#else
    for (int r = 0; r < 16; r++) f[r] = is_signed ? (int32_t)(int8_t)b[r] : (int32_t)b[r];
#endif
    return f;
}

INLINE v16f widen(v16u b, const int is_signed) { return tof(widen_i(b, is_signed)); }

/* 16 bytes of 4-bit pairs -> the 16 low nibbles and the 16 high ones as floats: widened to 32 bits
   first with AVX-512, so that the masking and the shift are one instruction each (bytes have no shift). */
INLINE void nibbles(v16u b, v16f *lo, v16f *hi) {
#if defined(__AVX512F__)
    const v16i v = widen_i(b, 0);
    *lo = tof(v & 15);
    *hi = tof(v >> 4);
#else
    *lo = widen(b & 0x0f, 0);
    *hi = widen(b >> 4, 0);
#endif
}

/* 16 fp16 values -> floats. */
INLINE v16f halves(const uint8_t *p) {
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
#if defined(__aarch64__) && defined(__ARM_NEON)
    for (int r = 0; r < 16; r += 4) {   /* aarch64: fcvtl, 4 a time (the loop below is a call a value) */
        float16x4_t h;
        memcpy(&h, p + 2 * r, 8);
        const float32x4_t v = vcvt_f32_f16(h);
        memcpy((char *)&f + 4 * r, &v, 16);
    }
#else
    for (int r = 0; r < 16; r++) {
        uint16_t h;
        memcpy(&h, p + 2 * r, 2);
        f[r] = quant_half_to_float(h);
    }
#endif
#endif
    return f;
}

/* 16 bfloat16 values -> floats: the 16 bits become a float's top half. */
INLINE v16f bhalves(const uint8_t *p) {
    v16i w;
#if defined(__AVX512F__)
    __m256i h;
    memcpy(&h, p, 32);
    const __m512i v = _mm512_cvtepu16_epi32(h);
    memcpy(&w, &v, 64);
#elif defined(__AVX2__)
    __m128i h0, h1;
    memcpy(&h0, p, 16);
    memcpy(&h1, p + 16, 16);
    const __m256i v0 = _mm256_cvtepu16_epi32(h0), v1 = _mm256_cvtepu16_epi32(h1);
    memcpy(&w, &v0, 32);
    memcpy((char *)&w + 32, &v1, 32);
#else
    for (int r = 0; r < 16; r++) {
        uint16_t h;
        memcpy(&h, p + 2 * r, 2);
        w[r] = h;
    }
#endif
    w <<= 16;
    v16f f;
    memcpy(&f, &w, 64);
    return f;
}

/* Where the quant bytes start in a chunk (quant.h's fields, times 16 rows). */
static inline int64_t qs_at(const int kind) {
    switch (kind) {
    case PSK_Q4_1: return 64;
    case PSK_Q5_0: return 96;
    case PSK_Q5_1: return 128;
    case PSK_Q4_K: return 256;
    case PSK_Q5_K: return 768;
    case PSK_Q6_K: case PSK_F16: case PSK_BF16: return 0;
    default: return 32;   /* Q8_0, Q4_0 */
    }
}

/* A K-quant's sub-block j (0..7) scale and min for 16 rows, from its 12 transposed scale bytes. */
INLINE void k_scales(const uint8_t *sc, int j, v16i *scale, v16i *min) {
    if (j < 4) {
        *scale = widen_i(load16(sc + QR * j), 0) & 63;
        *min = widen_i(load16(sc + QR * (j + 4)), 0) & 63;
    } else {
        const v16i b = widen_i(load16(sc + QR * (j + 4)), 0);
        *scale = (b & 15) | (widen_i(load16(sc + QR * (j - 4)), 0) >> 6) << 4;
        *min = (b >> 4) | (widen_i(load16(sc + QR * j), 0) >> 6) << 4;
    }
}

/* The 5-bit quants of 16 rows: the low and high nibbles of one byte each plus their 5th bits,
   bit 4 of hl >> bl and of hh >> bh (32-bit lanes; the callers shift qh once a block so that a
   shift and a mask bring each bit to 16, and the compiler folds mask-and-or into one AVX-512
   ternary-logic instruction). */
INLINE void fives(v16u b, v16i hl, int bl, v16i hh, int bh, v16f *lo, v16f *hi) {
    const v16i v = widen_i(b, 0);
    *lo = tof((v & 15) | ((hl >> bl) & 16));
    *hi = tof((v >> 4) | ((hh >> bh) & 16));
}

/* Q6_K: one ql byte and one qh byte of 16 rows -> the two quants (minus 32) that pass p uses. */
INLINE void sixes(v16u ql, v16u qh, int p, v16f *a, v16f *b) {
    const v16i v = widen_i(ql, 0), h = widen_i(qh, 0);   /* h's bits 2p, 2p + 1 and 2p + 4, 2p + 5 to 16, 32 */
    *a = tof(((v & 15) | ((h << (4 - 2 * p)) & 48)) - 32);
    *b = tof(((v >> 4) | ((h >> (2 * p)) & 48)) - 32);
}

INLINE v16f sum_of(const v16f *t, int C) {
    v16f s = t[0];
    for (int a = 1; a < C; a++) s += t[a];
    return s;
}

INLINE void put(float *p, v16f v) { memcpy(p, &v, sizeof v); }
