/* The integer decode products (qint8.c), for qlinear.c. */
#pragma once

#include <stdint.h>

#define INT8_ROWS 8   /* rows of x per integer tile */

/* mode 0: float32 products; 1: products of at most max_rows rows on int8 activations. */
int psk_set_decode_math(int mode, int64_t max_rows);
int psk_decode_int8_for(int64_t n);
int psk_int8_kind(int kind);
const char *psk_int8_isa(void);
/* x (n, in) -> per block of 32: xq int8 (n, in), scale xd and sum of the quants xs, (n, in / 32). */
void psk_quantize_acts(const float *x, int64_t n, int64_t in, int8_t *xq, float *xd, int32_t *xs);
/* One panel of 16 rows against nb <= INT8_ROWS quantized rows of x, into y's columns [o, o + width). */
void psk_int8_tile(int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                   const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o,
                   int64_t width, int nb);
/* The K-quants' tile (qint8k.c), built where AVX2 is; psk_int8k_built() says whether it was. */
int psk_int8k_built(void);
void psk_int8k_tile(int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                    const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o,
                    int64_t width, int nb);
