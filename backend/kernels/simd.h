/* 8-float vectors (GCC/Clang vector extensions: AVX, AVX-512 or NEON, whatever the target has)
   and the few helpers the kernels share. */
#pragma once

#include <stdint.h>
#include <string.h>

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8 load8(const float *p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float *p, v8 v) { memcpy(p, &v, sizeof v); }

/* e^x, 8 at a time: 2^n * e^r, n = floor(x / ln 2), r in [0, ln 2) by a degree-6 polynomial
   (relative error about 1e-7). x is clamped to [-87, 88]: no denormals, no overflow past 2^127. */
static inline v8 exp8(v8 x) {
    const v8 zero = {0};
    v8i out = x < -87.0f;                                 /* all ones where true */
    x = (v8)((out & (v8i)(zero - 87.0f)) | (~out & (v8i)x));
    out = x > 88.0f;
    x = (v8)((out & (v8i)(zero + 88.0f)) | (~out & (v8i)x));
    const v8 t = x * 1.44269504f;
    v8i n = __builtin_convertvector(t, v8i);             /* toward zero */
    n -= (v8i)(__builtin_convertvector(n, v8) > t) & 1;  /* -> floor */
    const v8 nf = __builtin_convertvector(n, v8);
    const v8 r = x - nf * 0.693145751953125f - nf * 1.428606765330187e-06f;
    v8 p = zero + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    v8 scale;
    const v8i bits = (n + 127) << 23;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}
