/* A whole Llama decoder layer for a decode-only step, in one call: the same kernels the Python
   layer calls one by one (RMSNorm, the q/k/v product, attention with rotary and the cache write,
   the output product plus the residual, RMSNorm, gate/up, SwiGLU, down plus the residual),
   chained here so that a step of a small model is not mostly Python between kernels: at batch 1
   each layer is about ten calls of a few microseconds of interpreter each.

   Each matrix comes with its kind (quant.h): float32 panels, quantized panels, or row segments
   each in its own format (PSK_SEGMENTS), so one layer -- and one fused matrix -- may mix them. x (n, hidden) is updated in place; scratch holds n * (hidden + qkv + heads*hd + 3 ff) floats.
*/
#include <stddef.h>
#include <stdint.h>

#include "bf16.h"
#include "kernels.h"
#include "quant.h"

int psk_matmul(int kind, const void *w, const float *x, const float *bias, const float *residual, float *y,
               int64_t n, int64_t out, int64_t in) {
    if (kind == PSK_F32 && psk_math_for(n) == PSK_MATH_FP32) {   /* else qlinear.c's bfloat16 path */
        psk_linear(w, x, bias, residual, y, n, out, in);
        return 0;
    }
    return psk_qlinear(kind, w, x, bias, residual, y, n, out, in);
}


int psk_llama_decode_layer(float *x, int64_t n, const float *attn_norm, const void *qkv, const float *qkv_bias,
                           const void *o, const float *mlp_norm, const void *gate_up, const void *down,
                           int64_t qkv_kind, int64_t o_kind, int64_t gate_up_kind, int64_t down_kind,
                           float *cache_k, float *cache_v, const int32_t *table, int64_t num_blocks,
                           int64_t max_blocks, int64_t block_shift, const int64_t *slots, const int64_t *positions,
                           const float *cos, const float *sin, float *scratch, int64_t hidden, int64_t heads,
                           int64_t kv_heads, int64_t hd, int64_t ff, float eps) {
    const int64_t q_size = heads * hd, qkv_size = (heads + 2 * kv_heads) * hd;
    float *h = scratch;                      /* (n, hidden) */
    float *proj = h + n * hidden;            /* (n, qkv_size): q | k | v per row */
    float *attn = proj + n * qkv_size;       /* (n, q_size) */
    float *gate_up_out = attn + n * q_size;  /* (n, 2 ff) */
    float *act = gate_up_out + n * 2 * ff;   /* (n, ff) */

    psk_rms_norm(x, attn_norm, h, n, hidden, eps);
    if (psk_matmul((int)qkv_kind, qkv, h, qkv_bias, NULL, proj, n, qkv_size, hidden)) return -2;
    if (psk_decode_attention(proj, qkv_size, proj + q_size, qkv_size, proj + q_size + kv_heads * hd, qkv_size,
                             cache_k, cache_v, table, num_blocks, max_blocks, block_shift, slots, positions, cos,
                             sin, attn, n,
                             heads, kv_heads, hd))
        return -1;
    if (psk_matmul((int)o_kind, o, attn, NULL, x, x, n, hidden, q_size)) return -2;   /* x += attn @ o^T, in place */
    psk_rms_norm(x, mlp_norm, h, n, hidden, eps);
    if (psk_matmul((int)gate_up_kind, gate_up, h, NULL, NULL, gate_up_out, n, 2 * ff, hidden)) return -2;
    psk_silu_mul(gate_up_out, act, n, ff);
    if (psk_matmul((int)down_kind, down, act, NULL, x, x, n, hidden, ff)) return -2;   /* x += act @ down^T, in place */
    return 0;
}

/* Every layer of a decode-only step in one call: layer l's seven weight pointers are
   weights[7 l .. 7 l + 6] (as psk_llama_decode_layer takes them, the bias may be NULL), its four
   matrix kinds kinds[4 l .. 4 l + 3], its cache cache_k[l] and cache_v[l] (block pools that every
   layer reads through the one block table, attention.c). One call instead of one
   per layer keeps the interpreter out of the step (a few microseconds a layer otherwise). */
int psk_llama_decode_layers(int64_t layers, float *x, int64_t n, const void *const *weights, const int64_t *kinds,
                            float *const *cache_k, float *const *cache_v, const int32_t *table,
                            int64_t num_blocks, int64_t max_blocks, int64_t block_shift, const int64_t *slots,
                            const int64_t *positions, const float *cos, const float *sin, float *scratch,
                            int64_t hidden, int64_t heads, int64_t kv_heads, int64_t hd, int64_t ff, float eps) {
    for (int64_t l = 0; l < layers; l++) {
        const void *const *w = weights + 7 * l;
        const int64_t *k = kinds + 4 * l;
        const int failed = psk_llama_decode_layer(x, n, w[0], w[1], w[2], w[3], w[4], w[5], w[6], k[0], k[1], k[2], k[3],
                                                  cache_k[l], cache_v[l], table, num_blocks, max_blocks,
                                                  block_shift, slots,
                                                  positions, cos, sin, scratch, hidden, heads, kv_heads, hd, ff, eps);
        if (failed) return failed;
    }
    return 0;
}
