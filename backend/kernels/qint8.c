/* Opt-in integer arithmetic for the decode products of Q8_0, Q4_0/Q4_1 and Q5_0/Q5_1 weights
   (--decode-math int8), and of the K-quants where AVX2 is (qint8k.c).

   The float32 tiles (qlinear.c) widen every weight to a float and multiply it by a float
   activation: on AVX2 that is several instructions a weight, and the 4- and 5-bit formats stay
   above the weight-read floor. Here, as llama.cpp does, the activations are quantized too, per
   block of 32 inputs, to int8 with one float scale (round(x / d), d = max |x| / 127), and each
   block's dot product is integer:
     Q8_0   d_w d_x (sum q_w q_x)
     Q4_0   d_w d_x (sum q_w q_x - 8 S)        q_w the raw nibble 0..15, S = sum q_x
     Q4_1   d_w d_x (sum q_w q_x) + m_w d_x S
     Q5_0, Q5_1 as Q4_0 (offset 16), Q4_1, q_w the nibble with its fifth bit from qh
   exact in int32; only the scale products and the sum over blocks are float. The quantized
   activations move a model's logits (bench/README.md: decode-math fidelity), so it is a
   choice, never the default.

   The panel layout (quant.h) puts the 16 rows' byte for one input side by side; the integer
   dot products want 4 inputs of one row in one 32-bit lane, so each 64 bytes (4 inputs x 16
   rows) are transposed in registers (a dword permute, then a byte shuffle in each 128-bit lane;
   one vpermb with VBMI; four table lookups on NEON) before vpdpbusd (AVX-512 VNNI, AVX-VNNI),
   vpmaddubsw + vpmaddwd (AVX2) or vdotq_s32 (aarch64 with the dot-product extension, signed
   bytes both sides; plain C on NEON without it). vpdpbusd takes
   unsigned bytes times signed ones: the nibbles are unsigned already, Q8_0's weights are taken
   as w + 128 (VNNI: the 128 S it adds is taken off) or as |w| against sign(x, w) (AVX2, whose
   16-bit pair sums would saturate at 255 x 127 x 2). Other formats, and products of more than
   the decode rows, keep the float32 path.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "qint8.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>
#endif

static int decode_int8 = 0;
static int64_t decode_int8_rows = 0;

int psk_set_decode_math(int mode, int64_t max_rows) {
    if (mode != 0 && mode != 1) return -1;
    decode_int8 = mode;
    decode_int8_rows = max_rows;
    return 0;
}

int psk_decode_int8_for(int64_t n) { return decode_int8 && n <= decode_int8_rows; }

int psk_int8_kind(int kind) {
    return (kind >= PSK_Q8_0 && kind <= PSK_Q5_1) || (psk_int8k_built() && kind >= PSK_Q4_K && kind <= PSK_Q6_K);
}

/* Q5's fifth bits: bits 0-3 of a 32-bit lane to bit 0 of its bytes 0-3 (x * 0x204081 adds x
   shifted by 0, 7, 14 and 21: bit i lands on bit 8 i, and no two shifted copies overlap), then to
   bit 4, beside the nibble. */
#define SPREAD_MUL 0x00204081u
#define IS_Q5(kind) ((kind) == PSK_Q5_0 || (kind) == PSK_Q5_1)
#define HAS_MIN(kind) ((kind) == PSK_Q4_1 || (kind) == PSK_Q5_1)

const char *psk_int8_isa(void) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    return "AVX-512 VNNI vpdpbusd";
#elif defined(__AVX2__) && defined(__AVXVNNI__)
    return "AVX-VNNI vpdpbusd";
#elif defined(__AVX2__)
    return "AVX2 vpmaddubsw";
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
    return "NEON vdotq_s32";
#else
    return "portable C";
#endif
}

void psk_quantize_acts(const float *x, int64_t n, int64_t in, int8_t *xq, float *xd, int32_t *xs) {
    const int64_t blocks = n * (in / 32);
    for (int64_t b = 0; b < blocks; b++) {
        const float *v = x + 32 * b;
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(v[k]));
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t s = 0;
        for (int k = 0; k < 32; k++) {
            const int q = (int)lrintf(v[k] * id);
            xq[32 * b + k] = (int8_t)q;
            s += q;
        }
        xd[b] = d;
        xs[b] = s;
    }
}

/* The 16 rows' integer dot products of one block against one row of quantized activations
   (isum), and what the float part needs: Q8_0 and Q4_0's offset times S is folded in here. */
#define ROWS QR
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define INT8_PATH 512
#elif defined(__AVX2__)
#define INT8_PATH 256
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define INT8_PATH 128
#else
#define INT8_PATH 0
#endif

#if INT8_PATH
/* in a 128-bit lane [A0 r0..3][A1 r0..3][A2 r0..3][A3 r0..3] -> [r0: A0..A3][r1: ...]... */
#define TRANSPOSE_BYTES 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15
#endif

#if INT8_PATH == 512
/* 64 bytes: inputs k..k+3, 16 rows each -> lane r holds row r's 4 inputs. */
static inline __m512i transpose4x16(const uint8_t *p) {
    const __m512i v = _mm512_loadu_si512(p);
#if defined(__AVX512VBMI__)   /* one byte permute: output byte 4 r + i is input byte 16 i + r */
    const __m512i idx = _mm512_set_epi8(63, 47, 31, 15, 62, 46, 30, 14, 61, 45, 29, 13, 60, 44, 28, 12,
                                        59, 43, 27, 11, 58, 42, 26, 10, 57, 41, 25, 9, 56, 40, 24, 8,
                                        55, 39, 23, 7, 54, 38, 22, 6, 53, 37, 21, 5, 52, 36, 20, 4,
                                        51, 35, 19, 3, 50, 34, 18, 2, 49, 33, 17, 1, 48, 32, 16, 0);
    return _mm512_permutexvar_epi8(idx, v);
#endif
    const __m512i d = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
    return _mm512_shuffle_epi8(d, _mm512_broadcast_i32x4(_mm_setr_epi8(TRANSPOSE_BYTES)));
}
static inline int32_t load4(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
#endif

#if INT8_PATH == 256
/* 64 bytes: inputs k..k+3, 16 rows each -> rows 0-7 (*z0) and 8-15 (*z1), a row's 4 inputs a lane. */
static inline void transpose4x16(const uint8_t *p, __m256i *z0, __m256i *z1) {
    const __m256i idx = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    const __m256i p0 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)p), idx);
    const __m256i p1 = _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)(p + 32)), idx);
    const __m256i shuf = _mm256_broadcastsi128_si256(_mm_setr_epi8(TRANSPOSE_BYTES));
    *z0 = _mm256_shuffle_epi8(_mm256_unpacklo_epi64(p0, p1), shuf);
    *z1 = _mm256_shuffle_epi8(_mm256_unpackhi_epi64(p0, p1), shuf);
}
static inline int32_t load4(const int8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
/* u unsigned bytes times s signed ones, summed in fours into acc */
static inline __m256i dot4(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
/* two of those, u at most 31 (the 4- and 5-bit quants): without VNNI the 16-bit pair sums are
   added before widening (4 x 31 x 128 fits in int16), one vpmaddwd for both */
static inline __m256i dot4x2(__m256i acc, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, u0, s0), u1, s1);
#else
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}
/* Q5's fifth bits of inputs b..b+3 (b a multiple of 4) of each lane's 32-bit qh, to bit 4 of the
   lane's bytes 0-3: the qh byte holding them copied to the 4 bytes (vpshufb), each byte's own
   bit picked and compared (no 32-bit multiply) */
static inline __m256i fifth4(__m256i qh, int b) {
    const __m256i idx = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12,
                                                         0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12),
                                        _mm256_set1_epi8((char)(b / 8)));
    const __m256i m = _mm256_set1_epi32((int)(0x08040201u << (b % 8)));
    const __m256i bits = _mm256_and_si256(_mm256_shuffle_epi8(qh, idx), m);
    return _mm256_and_si256(_mm256_cmpeq_epi8(bits, m), _mm256_set1_epi8(0x10));
}
#endif

#if INT8_PATH == 128
/* 64 bytes: inputs k..k+3, 16 rows each -> z[q] holds rows 4q..4q+3, a row's 4 inputs a lane
   (byte 4 r + i of z[q] is table byte 16 i + 4 q + r) */
static inline void transpose4x16(const uint8_t *p, int8x16_t z[4]) {
    static const uint8_t idx[4][16] = {
        {0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51},
        {4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55},
        {8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59},
        {12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63}};
    const uint8x16x4_t t = {{vld1q_u8(p), vld1q_u8(p + 16), vld1q_u8(p + 32), vld1q_u8(p + 48)}};
    for (int q = 0; q < 4; q++) z[q] = vreinterpretq_s8_u8(vqtbl4q_u8(t, vld1q_u8(idx[q])));
}
static inline int8x16_t bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}
#endif

/* isum[j][r] for the nb rows of x (quantized, row stride in, at this block's inputs) and one
   block chunk c of a panel. */
static inline __attribute__((always_inline)) void block_dots(int kind, const uint8_t *c, const int8_t *xq, int64_t in, const int32_t *xs,
                              int64_t ns, int nb, int32_t isum[][ROWS]) {
    /* the chunk's fields (quant.h): d, [m], [qh: 16 uint32], qs */
    const uint8_t *qs = c + (kind == PSK_Q5_1 ? 8 : kind == PSK_Q5_0 ? 6 : kind == PSK_Q4_1 ? 4 : 2) * ROWS;
    const uint8_t *qh = qs - 4 * ROWS;
    const int off = kind == PSK_Q4_0 ? 8 : kind == PSK_Q5_0 ? 16 : 0;
#if INT8_PATH == 512
    /* 8 groups of 4 inputs: Q8_0 inputs 4g.., the 4-bit formats' low nibbles (inputs 4g..) then high (16 + 4g..) */
    __m512i w[8];
    int at[8];
    int adjust = off;
    if (kind == PSK_Q8_0) {
        for (int g = 0; g < 8; g++) {
            w[g] = _mm512_xor_si512(transpose4x16(qs + 64 * g), _mm512_set1_epi8((char)0x80));
            at[g] = 4 * g;
        }
        adjust = 128;
    } else {
        const __m512i m = _mm512_set1_epi8(0x0F);
        for (int g = 0; g < 4; g++) {
            const __m512i t = transpose4x16(qs + 64 * g);
            w[g] = _mm512_and_si512(t, m);
            w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(t, 4), m);
            if (IS_Q5(kind)) {   /* lane r's qh: bits 4g.. for the low quants, 16 + 4g.. for the high */
                const __m512i h = _mm512_loadu_si512(qh), f = _mm512_set1_epi32(15), s = _mm512_set1_epi32(SPREAD_MUL);
                const __m512i one = _mm512_set1_epi32(0x01010101);
                w[g] = _mm512_or_si512(w[g], _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(
                    _mm512_and_si512(_mm512_srli_epi32(h, 4 * g), f), s), one), 4));
                w[g + 4] = _mm512_or_si512(w[g + 4], _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(
                    _mm512_and_si512(_mm512_srli_epi32(h, 16 + 4 * g), f), s), one), 4));
            }
            at[g] = 4 * g;
            at[g + 4] = 16 + 4 * g;
        }
    }
    for (int j = 0; j < nb; j++) {
        const int8_t *x = xq + j * in;
        __m512i a = _mm512_set1_epi32(-adjust * xs[j * ns]), b = _mm512_setzero_si512();
        for (int g = 0; g < 8; g += 2) {
            a = _mm512_dpbusd_epi32(a, w[g], _mm512_set1_epi32(load4(x + at[g])));
            b = _mm512_dpbusd_epi32(b, w[g + 1], _mm512_set1_epi32(load4(x + at[g + 1])));
        }
        _mm512_storeu_si512(isum[j], _mm512_add_epi32(a, b));
    }
#elif INT8_PATH == 256
    __m256i acc[8][2];
    for (int j = 0; j < nb; j++) {
        acc[j][0] = acc[j][1] = _mm256_set1_epi32(-off * xs[j * ns]);
    }
    if (kind == PSK_Q8_0) {
        for (int g = 0; g < 8; g++) {
            __m256i z[2];
            transpose4x16(qs + 64 * g, &z[0], &z[1]);
            const __m256i u0 = _mm256_abs_epi8(z[0]), u1 = _mm256_abs_epi8(z[1]);
            for (int j = 0; j < nb; j++) {
                const __m256i xb = _mm256_set1_epi32(load4(xq + j * in + 4 * g));
                acc[j][0] = dot4(acc[j][0], u0, _mm256_sign_epi8(xb, z[0]));
                acc[j][1] = dot4(acc[j][1], u1, _mm256_sign_epi8(xb, z[1]));
            }
        }
    } else {
        const __m256i m = _mm256_set1_epi8(0x0F);
        for (int g = 0; g < 4; g++) {
            __m256i z[2];
            transpose4x16(qs + 64 * g, &z[0], &z[1]);
            __m256i l0 = _mm256_and_si256(z[0], m), l1 = _mm256_and_si256(z[1], m);
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(z[0], 4), m);
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(z[1], 4), m);
            if (IS_Q5(kind)) {
                const __m256i q0 = _mm256_loadu_si256((const __m256i *)qh), q1 = _mm256_loadu_si256((const __m256i *)(qh + 32));
                l0 = _mm256_or_si256(l0, fifth4(q0, 4 * g));
                l1 = _mm256_or_si256(l1, fifth4(q1, 4 * g));
                h0 = _mm256_or_si256(h0, fifth4(q0, 16 + 4 * g));
                h1 = _mm256_or_si256(h1, fifth4(q1, 16 + 4 * g));
            }
            for (int j = 0; j < nb; j++) {
                const __m256i xl = _mm256_set1_epi32(load4(xq + j * in + 4 * g));
                const __m256i xh = _mm256_set1_epi32(load4(xq + j * in + 16 + 4 * g));
                acc[j][0] = dot4x2(acc[j][0], l0, xl, h0, xh);
                acc[j][1] = dot4x2(acc[j][1], l1, xl, h1, xh);
            }
        }
    }
    for (int j = 0; j < nb; j++) {
        _mm256_storeu_si256((__m256i *)isum[j], acc[j][0]);
        _mm256_storeu_si256((__m256i *)(isum[j] + 8), acc[j][1]);
    }
#elif INT8_PATH == 128
    /* vdotq_s32: signed bytes times signed bytes, so Q8_0's weights go in as they are */
    int32x4_t acc[INT8_ROWS][4];
    for (int j = 0; j < nb; j++)
        for (int q = 0; q < 4; q++) acc[j][q] = vdupq_n_s32(-off * xs[j * ns]);
    if (kind == PSK_Q8_0) {
        for (int g = 0; g < 8; g++) {
            int8x16_t z[4];
            transpose4x16(qs + 64 * g, z);
            for (int j = 0; j < nb; j++) {
                const int8x16_t xb = bcast4(xq + j * in + 4 * g);
                for (int q = 0; q < 4; q++) acc[j][q] = vdotq_s32(acc[j][q], z[q], xb);
            }
        }
    } else {
        for (int g = 0; g < 4; g++) {
            int8x16_t z[4], lo[4], hi[4];
            transpose4x16(qs + 64 * g, z);
            for (int q = 0; q < 4; q++) {
                lo[q] = vandq_s8(z[q], vdupq_n_s8(0x0F));
                hi[q] = vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(z[q]), 4));
                if (IS_Q5(kind)) {
                    const uint32x4_t h = vld1q_u32((const uint32_t *)(qh + 16 * q)), f = vdupq_n_u32(15);
                    const uint32x4_t one = vdupq_n_u32(0x01010101), sm = vdupq_n_u32(SPREAD_MUL);
                    const uint32x4_t bl = vshlq_n_u32(vandq_u32(vmulq_u32(vandq_u32(
                        vshlq_u32(h, vdupq_n_s32(-4 * g)), f), sm), one), 4);
                    const uint32x4_t bh = vshlq_n_u32(vandq_u32(vmulq_u32(vandq_u32(
                        vshlq_u32(h, vdupq_n_s32(-16 - 4 * g)), f), sm), one), 4);
                    lo[q] = vorrq_s8(lo[q], vreinterpretq_s8_u32(bl));
                    hi[q] = vorrq_s8(hi[q], vreinterpretq_s8_u32(bh));
                }
            }
            for (int j = 0; j < nb; j++) {
                const int8x16_t xl = bcast4(xq + j * in + 4 * g), xh = bcast4(xq + j * in + 16 + 4 * g);
                for (int q = 0; q < 4; q++) acc[j][q] = vdotq_s32(vdotq_s32(acc[j][q], lo[q], xl), hi[q], xh);
            }
        }
    }
    for (int j = 0; j < nb; j++)
        for (int q = 0; q < 4; q++) vst1q_s32(isum[j] + 4 * q, acc[j][q]);
#else
    for (int j = 0; j < nb; j++) {
        const int8_t *x = xq + j * in;
        int32_t s[ROWS];
        for (int r = 0; r < ROWS; r++) s[r] = -off * xs[j * ns];
        if (kind == PSK_Q8_0) {
            for (int k = 0; k < 32; k++)
                for (int r = 0; r < ROWS; r++) s[r] += (int8_t)qs[ROWS * k + r] * x[k];
        } else {
            for (int k = 0; k < 16; k++)
                for (int r = 0; r < ROWS; r++) {
                    const int q = qs[ROWS * k + r];
                    uint32_t h = 0;
                    if (IS_Q5(kind)) memcpy(&h, qh + 4 * r, 4);
                    s[r] += ((q & 15) | (h >> k & 1) << 4) * x[k] + ((q >> 4) | (h >> (k + 16) & 1) << 4) * x[k + 16];
                }
        }
        memcpy(isum[j], s, sizeof s);
    }
#endif
}

/* 16 lanes, one an output row (GCC vectors: one zmm, two ymm or four xmm, whatever the target has) */
typedef float vf __attribute__((vector_size(64)));
typedef int32_t vi __attribute__((vector_size(64)));

/* 16 fp16 scales -> floats */
static inline void halves16(const uint8_t *c, float *f) {
#if defined(__AVX512F__)
    _mm512_storeu_ps(f, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)c)));
#elif defined(__F16C__)
    _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)c)));
    _mm256_storeu_ps(f + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c + 16))));
#else
    for (int r = 0; r < ROWS; r++) {
        uint16_t h;
        memcpy(&h, c + 2 * r, 2);
        f[r] = quant_half_to_float(h);
    }
#endif
}

/* nb and kind are constants at every call (psk_int8_tile's switch, one case for each nb up to INT8_ROWS),
   so the loops over rows of x unroll and the sums stay in registers. (Until the cases went past 4, a
   K+1 = 5 verification ran the loops with nb unknown: 5 rows cost about as much as 8.) */
static inline __attribute__((always_inline)) void
tile(const int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs, const float *bias,
     const float *rb, float *yb, int64_t out, int64_t in, int64_t o, int64_t width, const int nb) {
    const int64_t blocks = in / 32, chunk = quant_chunk_bytes(kind);
    vf acc[INT8_ROWS];
    int32_t isum[INT8_ROWS][ROWS];
    for (int j = 0; j < nb; j++) acc[j] = (vf){0};
    for (int64_t kb = 0; kb < blocks; kb++) {
        const uint8_t *c = panel + kb * chunk;
        for (int64_t at = 0; at < chunk; at += 64) __builtin_prefetch(c + 4096 + at);
        block_dots(kind, c, xq + 32 * kb, in, xs + kb, blocks, nb, isum);
        float dw[ROWS], mw[ROWS] = {0};
        halves16(c, dw);
        if (HAS_MIN(kind)) halves16(c + 2 * ROWS, mw);
        vf dv, mv;
        memcpy(&dv, dw, sizeof dv);
        memcpy(&mv, mw, sizeof mv);
        for (int j = 0; j < nb; j++) {
            const float d = xd[j * blocks + kb], ms = d * (float)xs[j * blocks + kb];
            vi is;
            memcpy(&is, isum[j], sizeof is);
            acc[j] += dv * d * __builtin_convertvector(is, vf) + mv * ms;
        }
    }
    for (int j = 0; j < nb; j++) {
        float a[ROWS];
        memcpy(a, &acc[j], sizeof a);
        float *yr = yb + j * out + o;
        const float *rr = rb ? rb + j * out + o : NULL;   /* may be yr itself: read before written */
        for (int r = 0; r < width; r++) yr[r] = a[r] + (bias ? bias[o + r] : 0.0f) + (rr ? rr[r] : 0.0f);
    }
}

#define NB_CASES(KIND)                                                                                    \
    switch (nb) {                                                                                         \
    case 1: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 1); break;                     \
    case 2: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 2); break;                     \
    case 3: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 3); break;                     \
    case 4: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 4); break;                     \
    case 5: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 5); break;                     \
    case 6: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 6); break;                     \
    case 7: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, 7); break;                     \
    default: tile(KIND, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, INT8_ROWS); break;            \
    }

void psk_int8_tile(int kind, const uint8_t *panel, const int8_t *xq, const float *xd, const int32_t *xs,
                   const float *bias, const float *rb, float *yb, int64_t out, int64_t in, int64_t o,
                   int64_t width, int nb) {
    if (kind >= PSK_Q4_K && kind <= PSK_Q6_K) psk_int8k_tile(kind, panel, xq, xd, xs, bias, rb, yb, out, in, o, width, nb);
    else if (kind == PSK_Q8_0) NB_CASES(PSK_Q8_0)
    else if (kind == PSK_Q4_0) NB_CASES(PSK_Q4_0)
    else if (kind == PSK_Q4_1) NB_CASES(PSK_Q4_1)
    else if (kind == PSK_Q5_0) NB_CASES(PSK_Q5_0)
    else NB_CASES(PSK_Q5_1)
}
