/* A whole Llama decoder layer for a decode-only step, in one call: the same kernels the Python
   layer calls one by one (RMSNorm, the q/k/v product, attention with rotary and the cache write,
   the output product plus the residual, RMSNorm, gate/up, SwiGLU, down plus the residual),
   chained here so that a step of a small model is not mostly Python between kernels: at batch 1
   each layer is about ten calls of a few microseconds of interpreter each.

   x (n, hidden) is updated in place; scratch holds n * (hidden + qkv + heads*hd + 3 ff) floats.
*/
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"


int psk_llama_decode_layer(float *x, int64_t n, const float *attn_norm, const float *qkv, const float *qkv_bias,
                           const float *o, const float *mlp_norm, const float *gate_up, const float *down,
                           float *cache_k, float *cache_v, const int64_t *slots, const int64_t *positions,
                           const float *cos, const float *sin, float *scratch, int64_t hidden, int64_t heads,
                           int64_t kv_heads, int64_t hd, int64_t ff, int64_t max_len, float eps) {
    const int64_t q_size = heads * hd, qkv_size = (heads + 2 * kv_heads) * hd;
    float *h = scratch;                      /* (n, hidden) */
    float *proj = h + n * hidden;            /* (n, qkv_size): q | k | v per row */
    float *attn = proj + n * qkv_size;       /* (n, q_size) */
    float *gate_up_out = attn + n * q_size;  /* (n, 2 ff) */
    float *act = gate_up_out + n * 2 * ff;   /* (n, ff) */

    psk_rms_norm(x, attn_norm, h, n, hidden, eps);
    psk_linear(qkv, h, qkv_bias, NULL, proj, n, qkv_size, hidden);
    if (psk_decode_attention(proj, qkv_size, proj + q_size, qkv_size, proj + q_size + kv_heads * hd, qkv_size,
                             cache_k, cache_v, slots, positions, cos, sin, attn, n, heads, kv_heads, max_len, hd))
        return -1;
    psk_linear(o, attn, NULL, x, x, n, hidden, q_size);        /* x += attn @ o^T, in place */
    psk_rms_norm(x, mlp_norm, h, n, hidden, eps);
    psk_linear(gate_up, h, NULL, NULL, gate_up_out, n, 2 * ff, hidden);
    psk_silu_mul(gate_up_out, act, n, ff);
    psk_linear(down, act, NULL, x, x, n, hidden, ff);           /* x += act @ down^T, in place */
    return 0;
}
