/* The kernels' entry points, for the one that chains them (layer.c). Shapes are in each file. */
#pragma once

#include <stdint.h>

void psk_linear(const float *wp, const float *x, const float *bias, const float *residual, float *y,
                int64_t n, int64_t out, int64_t in);
void psk_linear_panel(const float *panel, const float *x, const float *bias, const float *residual, float *y,
                      int64_t n, int64_t out, int64_t in, int64_t o, int64_t width);
int psk_qlinear(int kind, const uint8_t *wp, const float *x, const float *bias, const float *residual, float *y,
                int64_t n, int64_t out, int64_t in);
/* Either product by the matrix's kind (quant.h: PSK_F32 panels or a quantized panel layout). */
int psk_matmul(int kind, const void *w, const float *x, const float *bias, const float *residual, float *y,
               int64_t n, int64_t out, int64_t in);
void psk_rms_norm(const float *x, const float *weight, float *out, int64_t n, int64_t d, float eps);
void psk_silu_mul(const float *x, float *out, int64_t n, int64_t d);
int psk_decode_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
                         const float *v, int64_t v_stride, float *cache_k, float *cache_v,
                         const int32_t *table, int64_t num_blocks, int64_t max_blocks, int64_t block_shift,
                         const int64_t *slots, const int64_t *positions, const float *cos, const float *sin,
                         float *out, int64_t d, int64_t heads, int64_t kv_heads, int64_t hd);
/* The instruction-set path this build compiled ("AVX-512", "AVX2", "NEON", "portable C"), and its features. */
const char *psk_isa(void);
const char *psk_isa_features(void);
