/* Quantized weights: GGUF's Q8_0, Q4_0 and Q4_1 blocks, and the panel layout the products read.

   A GGUF row of `in` weights is in / 32 blocks of 32 (ggml's block_q8_0, block_q4_0, block_q4_1):
     Q8_0  fp16 d, 32 int8 q                   w = d * q           34 bytes
     Q4_0  fp16 d, 16 bytes of 4-bit q         w = d * (q - 8)     18 bytes
     Q4_1  fp16 d, fp16 m, 16 bytes of 4-bit q w = d * q + m       20 bytes
   (4-bit: byte j holds element j in its low nibble and element j + 16 in its high one.)

   Packed for the product (quant_pack), a matrix is panels of R = 16 output rows; a panel is its
   in / 32 blocks one after another, and one block of a panel is one contiguous chunk:
     16 fp16 d (one per row) [, 16 fp16 m], then the quants input by input, 16 rows a byte each:
     byte 16 k + r is row r's input k (Q8_0, k < 32), or for 4-bit (k < 16) row r's inputs k (low
     nibble) and k + 16 (high) -- each row's GGUF byte k, so a chunk is the 16 rows' blocks transposed.
   A chunk holds exactly the bytes of the 16 rows' GGUF blocks: the bytes a decode step reads
   are the format's own, scales included. The order makes one 16-byte load the 16 rows' weights
   for one input (two inputs for 4-bit), widened to a vector of 16 floats in registers and
   multiplied by that input's activation broadcast to every lane: linear.c's outer-product
   form, with the weights dequantized on the way into the registers.
*/
#pragma once

#include <stdint.h>

enum { PSK_F32 = 0, PSK_Q8_0 = 1, PSK_Q4_0 = 2, PSK_Q4_1 = 3 };

#define QK 32                         /* weights per block */
#define QR 16                         /* output rows per panel */

/* Bytes of one GGUF block, and of one panel chunk (16 rows' blocks); 0 for an unknown kind. */
static inline int64_t quant_block_bytes(int kind) {
    return kind == PSK_Q8_0 ? 34 : kind == PSK_Q4_0 ? 18 : kind == PSK_Q4_1 ? 20 : 0;
}
static inline int64_t quant_scale_bytes(int kind) { return kind == PSK_Q4_1 ? 4 * QR : 2 * QR; }
static inline int64_t quant_chunk_bytes(int kind) { return QR * quant_block_bytes(kind); }

float quant_half_to_float(uint16_t h);
