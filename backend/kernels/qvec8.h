/* qvec.h's register helpers for AVX2 without AVX-512: 8 rows of a 16-row panel chunk (the half
   `h`, rows 8h .. 8h + 7) widened to 8 int32 or float lanes, one ymm register each. qvec.h's
   16-lane vectors are two ymm registers on AVX2, and a tile's weights, sums and accumulators in
   them need more than AVX2's 16 registers (the compiler spills them to the stack: the products
   ran at about one weight a cycle); qtile8.h takes a panel half by half in these instead. */
#pragma once

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8s __attribute__((vector_size(32)));

#define INLINE8 static inline __attribute__((always_inline))

INLINE8 v8f tof8(v8s v) { return __builtin_convertvector(v, v8f); }

/* 8 bytes -> 8 int32 lanes, unsigned or signed. */
INLINE8 v8s widen8_i(const uint8_t *p, const int is_signed) {
    const __m128i x = _mm_loadl_epi64((const __m128i *)p);
    const __m256i v = is_signed ? _mm256_cvtepi8_epi32(x) : _mm256_cvtepu8_epi32(x);
    v8s f;
    memcpy(&f, &v, 32);
    return f;
}

INLINE8 v8f widen8(const uint8_t *p, const int is_signed) { return tof8(widen8_i(p, is_signed)); }

/* 8 bytes of 4-bit pairs -> the 8 low nibbles and the 8 high ones as floats. */
INLINE8 void nibbles8(const uint8_t *p, v8f *lo, v8f *hi) {
    const v8s v = widen8_i(p, 0);
    *lo = tof8(v & 15);
    *hi = tof8(v >> 4);
}

/* 8 fp16 values -> floats. */
INLINE8 v8f halves8(const uint8_t *p) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    v8f f;
    memcpy(&f, &v, 32);
    return f;
}

/* 8 bfloat16 values -> floats: the 16 bits become a float's top half. */
INLINE8 v8f bhalves8(const uint8_t *p) {
    const __m256i v = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
    v8f f;
    memcpy(&f, &v, 32);
    return f;
}

INLINE8 v8s load8_i32(const uint8_t *p) { v8s v; memcpy(&v, p, 32); return v; }

/* A K-quant's sub-block j (0..7) scale and min for the 8 rows from byte offset `at` of the 12
   transposed scale bytes' rows (qvec.h's k_scales). */
INLINE8 void k_scales8(const uint8_t *sc, int j, int at, v8s *scale, v8s *min) {
    if (j < 4) {
        *scale = widen8_i(sc + QR * j + at, 0) & 63;
        *min = widen8_i(sc + QR * (j + 4) + at, 0) & 63;
    } else {
        const v8s b = widen8_i(sc + QR * (j + 4) + at, 0);
        *scale = (b & 15) | (widen8_i(sc + QR * (j - 4) + at, 0) >> 6) << 4;
        *min = (b >> 4) | (widen8_i(sc + QR * j + at, 0) >> 6) << 4;
    }
}

/* The 5-bit quants of 8 rows (qvec.h's fives). */
INLINE8 void fives8(const uint8_t *p, v8s hl, int bl, v8s hh, int bh, v8f *lo, v8f *hi) {
    const v8s v = widen8_i(p, 0);
    *lo = tof8((v & 15) | ((hl >> bl) & 16));
    *hi = tof8((v >> 4) | ((hh >> bh) & 16));
}

/* Q6_K: one ql byte and one qh byte of 8 rows -> the two quants (minus 32) that pass p uses. */
INLINE8 void sixes8(const uint8_t *ql, const uint8_t *qh, int p, v8f *a, v8f *b) {
    const v8s v = widen8_i(ql, 0), h = widen8_i(qh, 0);
    *a = tof8(((v & 15) | ((h << (4 - 2 * p)) & 48)) - 32);
    *b = tof8(((v >> 4) | ((h >> (2 * p)) & 48)) - 32);
}

INLINE8 v8f sum8_of(const v8f *t, int C) {
    v8f s = t[0];
    for (int a = 1; a < C; a++) s += t[a];
    return s;
}
