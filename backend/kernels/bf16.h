/* The bfloat16 products' entry points (bf16.c), for qlinear.c and layer.c. */
#pragma once

#include <stdint.h>

enum { PSK_MATH_FP32 = 0, PSK_MATH_AVX512BF16 = 1, PSK_MATH_AMX = 2 };

/* The units this build compiled (bit 1 << PSK_MATH_*), and the one products of at least min_rows
   rows use from now on (-1 for a unit not compiled); psk_math_for(n) is the unit for n rows. */
int psk_math_compiled(void);
int psk_set_math(int unit, int64_t min_rows);
int psk_math_for(int64_t n);
int psk_amx_request(void);
/* x (n, in) float32 -> xh (n_pad, in_pad) bfloat16, zero-padded. */
void psk_bf16_rows(const float *x, int64_t n, int64_t in, int64_t in_pad, int64_t n_pad, uint16_t *xh);
/* A float panel (in, 32) -> bfloat16 pairs (in_pad / 2, 32, 2), zero-padded. */
void psk_bf16_panel(const float *wf, int64_t in, int64_t in_pad, uint16_t *bp);
/* y[:, o:o + width] = xh @ bp (+ bias) (+ residual) for the n rows of xh on `unit`. */
void psk_bf16_product(int unit, const uint16_t *bp, const uint16_t *xh, const float *bias, const float *residual,
                      float *y, int64_t n, int64_t out, int64_t in_pad, int64_t o, int64_t width);
