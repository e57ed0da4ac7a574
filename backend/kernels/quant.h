/* Quantized and half-width weights: GGUF's block formats, and the panel layout the products read.

   A GGUF row of `in` weights is in / QK blocks (ggml's block_q8_0, ..., block_q6_K), QK = 32 or 256:
     Q8_0  fp16 d, 32 int8 q                          w = d q                         34 bytes / 32
     Q4_0  fp16 d, 16 bytes of 4-bit q                w = d (q - 8)                   18 bytes / 32
     Q4_1  fp16 d, fp16 m, 16 bytes of 4-bit q        w = d q + m                     20 bytes / 32
     Q5_0  fp16 d, 4 bytes qh, 16 bytes of 4-bit q    w = d (q - 16), q 5 bits        22 bytes / 32
     Q5_1  fp16 d, fp16 m, qh, 16 bytes of 4-bit q    w = d q + m                     24 bytes / 32
     Q4_K  fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32,
           128 bytes of 4-bit q                       w = d sc q - dmin mn            144 bytes / 256
     Q5_K  as Q4_K plus 32 bytes qh (5th bits)        w = d sc q - dmin mn            176 bytes / 256
     Q6_K  128 bytes ql (low 4 bits), 64 bytes qh (2 high bits), 16 int8 scales for sub-blocks
           of 16, fp16 d                              w = d sc (q - 32)               210 bytes / 256
     F16, BF16  one 2-byte float a weight (taken here in blocks of 32)                64 bytes / 32
   (32-blocks, 4-bit: byte j holds element j in its low nibble and j + 16 in its high one, Q5's
   5th bit of element j is bit j of qh. K-quants: bytes 32 g + l of qs hold elements 64 g + l
   (low) and 64 g + 32 + l (high); Q5_K's qh byte l bit 2g / 2g + 1 is their 5th bit; Q6_K's
   element 128 h + 32 s + l is ql byte 64 h + 32 (s & 1) + l, nibble s >> 1, and qh byte
   32 h + l, bits 2s and 2s + 1, scale 8 h + 2 s + l / 16.)

   Packed for the product (quant_pack), a matrix is panels of R = 16 output rows; a panel is its
   in / QK blocks one after another, and one block of a panel is one contiguous chunk holding
   the 16 rows' GGUF blocks transposed: each field of the block (quant_fields: its unit width
   and count, in the block's order) becomes, unit by unit, 16 rows' units side by side -- unit
   u of row r at field start + (16 u + r) * width. So a chunk holds exactly the bytes of the 16
   rows' blocks (a decode step reads the format's own bytes, scales included), one 16-byte load
   is 16 rows' quant byte for one input (two for 4-bit), the 16 fp16 scales are one 32-byte load,
   Q5's qh is one 64-byte load of 16 uint32, and a K-quant's 12 scale bytes are 12 loads that
   decode 16 rows' 6-bit scales at once in vector lanes. The weights are widened to a vector of
   16 floats in registers and multiplied by an input's activation broadcast to every lane:
   linear.c's outer-product form, with the weights dequantized on the way into the registers.
*/
#pragma once

#include <stdint.h>

enum {
    PSK_F32 = 0, PSK_Q8_0 = 1, PSK_Q4_0 = 2, PSK_Q4_1 = 3, PSK_Q5_0 = 4, PSK_Q5_1 = 5,
    PSK_Q4_K = 6, PSK_Q5_K = 7, PSK_Q6_K = 8, PSK_F16 = 9, PSK_BF16 = 10, PSK_KINDS = 11,
    /* not a format: the weight pointer is a list of row segments, each in its own format (qlinear.c) */
    PSK_SEGMENTS = 64,
};

#define QR 16                         /* output rows per panel */

/* A block's fields in order: {unit bytes, units}; at most 5 fields, {0, 0} ends the list. */
typedef struct { int width, count; } quant_field;
static const quant_field QUANT_FIELDS[PSK_KINDS][6] = {
    [PSK_Q8_0] = {{2, 1}, {1, 32}},
    [PSK_Q4_0] = {{2, 1}, {1, 16}},
    [PSK_Q4_1] = {{2, 1}, {2, 1}, {1, 16}},
    [PSK_Q5_0] = {{2, 1}, {4, 1}, {1, 16}},
    [PSK_Q5_1] = {{2, 1}, {2, 1}, {4, 1}, {1, 16}},
    [PSK_Q4_K] = {{2, 1}, {2, 1}, {1, 12}, {1, 128}},
    [PSK_Q5_K] = {{2, 1}, {2, 1}, {1, 12}, {1, 32}, {1, 128}},
    [PSK_Q6_K] = {{1, 128}, {1, 64}, {1, 16}, {2, 1}},
    [PSK_F16] = {{2, 32}},
    [PSK_BF16] = {{2, 32}},
};

static inline int quant_is_kind(int kind) { return kind > PSK_F32 && kind < PSK_KINDS; }

/* Weights per block: 256 for the K-quants, 32 for the others. */
static inline int64_t quant_block_size(int kind) { return kind >= PSK_Q4_K && kind <= PSK_Q6_K ? 256 : 32; }

/* Bytes of one GGUF block, and of one panel chunk (16 rows' blocks); 0 for an unknown kind. */
static inline int64_t quant_block_bytes(int kind) {
    if (!quant_is_kind(kind)) return 0;
    int64_t bytes = 0;
    for (const quant_field *f = QUANT_FIELDS[kind]; f->width; f++) bytes += f->width * f->count;
    return bytes;
}
static inline int64_t quant_chunk_bytes(int kind) { return QR * quant_block_bytes(kind); }

/* Where field i starts in a block (a chunk's is QR times that). */
static inline int64_t quant_field_offset(int kind, int i) {
    int64_t off = 0;
    for (int f = 0; f < i; f++) off += QUANT_FIELDS[kind][f].width * QUANT_FIELDS[kind][f].count;
    return off;
}

float quant_half_to_float(uint16_t h);
/* One packed panel (16 rows) -> columns [16 half, 16 half + 16) of a float panel (in, 32) (qdequant.c). */
void psk_dequantize_panel(int kind, const uint8_t *panel, int64_t in, float *wf, int half);
