/* Matrix products on the CPU's bfloat16 units, float32 accumulation: the rows-heavy products
   (a prefill, a mixed step, a decode batch of at least `min_rows` requests), where the float32
   FMA rate, not the memory, is the roof.

   The activations are rounded to bfloat16 once per product (round to nearest even), into rows
   of in_pad values (in rounded up to 32, zero-padded) and n rounded up to 16 rows. Each unit of
   work (32 outputs: one float32 panel, or a pair of 16-row quantized panels that qlinear.c
   dequantizes into one) is rounded to a bfloat16 panel of input pairs:
       bp[kp][o][t] = W[o][2 kp + t],  kp < in_pad / 2, o < 32, t in {0, 1}
   -- 64 bytes of one pair for 16 outputs, the operand both units take:
     * AVX512-BF16 (vdpbf16ps): one instruction adds, for 16 outputs, the two products of a pair
       of inputs: the weights' 64 bytes times x's pair broadcast. Outer-product form, as linear.c,
       with twice the arithmetic of a float32 FMA per instruction.
     * AMX (Intel, since Sapphire Rapids): tiles of 16 rows x 64 bytes; tdpbf16ps multiplies a
       16 x 32 tile of x by a 32 x 16 tile of pairs (16 rows of bp, 128 bytes apart) into 16 x 16
       floats. Linux gives a process the tile state only once asked (psk_amx_request); without
       it the first tile instruction faults, so the Python side asks before it picks the unit.
   Both are compiled with target attributes, whatever -march the rest is built for, and chosen
   at run time (psk_set_math): a CPU without them never executes them.
*/
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "bf16.h"
#include "pool.h"

#if defined(__x86_64__) && (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define HAVE_DPBF16 1
#define DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif
#if defined(__x86_64__) && defined(__linux__) && (defined(__clang__) ? __clang_major__ >= 12 : __GNUC__ >= 11)
#define HAVE_AMX 1
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))
#endif

#define BP 32                        /* outputs per unit */
#define DB 12                        /* rows of x per vdpbf16ps tile: 12 x 2 accumulators (8 and 16 measured slower) */

static int math_unit = PSK_MATH_FP32;
static int64_t math_min_rows = 1;

int psk_math_compiled(void) {
    int units = 0;
#ifdef HAVE_DPBF16
    units |= 1 << PSK_MATH_AVX512BF16;
#endif
#ifdef HAVE_AMX
    units |= 1 << PSK_MATH_AMX;
#endif
    return units;
}

int psk_set_math(int unit, int64_t min_rows) {
    if (unit != PSK_MATH_FP32 && !(psk_math_compiled() & (1 << unit))) return -1;
    math_unit = unit;
    math_min_rows = min_rows < 1 ? 1 : min_rows;
    return 0;
}

int psk_math_for(int64_t n) { return n >= math_min_rows ? math_unit : PSK_MATH_FP32; }

/* Ask Linux for the AMX tile state (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), then check
   it was granted: 0, or an errno (ENOSYS off Linux x86-64, or where the kernel predates 5.16). */
int psk_amx_request(void) {
#if defined(__linux__) && defined(__x86_64__)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) return errno ? errno : EPERM;
    uint64_t granted = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &granted)) return errno ? errno : EPERM;
    return granted & (1ull << XFEATURE_XTILEDATA) ? 0 : EPERM;
#else
    return ENOSYS;
#endif
}

/* float32 -> bfloat16 bits, 16 lanes, round to nearest even (NaNs stay NaN: their top bits are kept quiet). */
typedef uint32_t v16u32 __attribute__((vector_size(64)));
typedef float v16f32 __attribute__((vector_size(64)));
typedef uint16_t v16u16 __attribute__((vector_size(32)));
static inline v16u32 round16(const float *p) {
    v16u32 u;
    memcpy(&u, p, 64);
    const v16u32 nan = (u & 0x7fffffffu) > 0x7f800000u;
    const v16u32 rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (nan & ((u >> 16) | 0x40u)) | (~nan & rounded);
}

typedef struct {
    const float *x;
    int64_t n, in, in_pad, n_pad;
    uint16_t *xh;
} rows_job;

static void rows_part(void *arg, int part, int parts) {
    const rows_job *j = arg;
    const float *x = j->x;
    const int64_t n = j->n, in = j->in, in_pad = j->in_pad;
    uint16_t *xh = j->xh;
    for (int64_t r = j->n_pad * part / parts; r < j->n_pad * (part + 1) / parts; r++) {
        uint16_t *row = xh + r * in_pad;
        int64_t k = 0;
        if (r < n) {
            const float *xr = x + r * in;
            for (; k + 16 <= in; k += 16) {
                const v16u16 h = __builtin_convertvector(round16(xr + k), v16u16);
                memcpy(row + k, &h, sizeof h);
            }
            for (; k < in; k++) {
                float tail[16] = {xr[k]};
                row[k] = (uint16_t)round16(tail)[0];
            }
        }
        memset(row + k, 0, (size_t)(in_pad - k) * sizeof *row);
    }
}

void psk_bf16_rows(const float *x, int64_t n, int64_t in, int64_t in_pad, int64_t n_pad, uint16_t *xh) {
    rows_job job = {x, n, in, in_pad, n_pad, xh};
    if (n_pad * in_pad < (1 << 15)) rows_part(&job, 0, 1);   /* a few rows: not worth waking the pool */
    else pool_run(rows_part, &job);
}

void psk_bf16_panel(const float *wf, int64_t in, int64_t in_pad, uint16_t *bp) {
    static const float zeros[BP];
    for (int64_t kp = 0; kp < in_pad / 2; kp++) {
        const float *k0 = 2 * kp < in ? wf + 2 * kp * BP : zeros;
        const float *k1 = 2 * kp + 1 < in ? wf + (2 * kp + 1) * BP : zeros;
        for (int h = 0; h < BP; h += 16) {
            const v16u32 pair = round16(k0 + h) | (round16(k1 + h) << 16);   /* lane o: (W[o][2kp], W[o][2kp+1]) */
            memcpy(bp + (kp * BP + h) * 2, &pair, 64);
        }
    }
}

/* The 32 outputs of NB rows (c: NB x 32 floats) into y's columns [o, o + width), with bias and residual. */
static inline void put_rows(const float *c, int nb, const float *bias, const float *residual, float *y,
                            int64_t out, int64_t o, int64_t width) {
    float b[BP] = {0};
    if (bias) memcpy(b, bias + o, (size_t)width * sizeof *b);
    for (int j = 0; j < nb; j++) {
        float *yr = y + j * out + o;
        const float *rr = residual ? residual + j * out + o : NULL;   /* may be yr itself: read before written */
        if (width == BP) {   /* whole panels: 16 lanes at a time */
            for (int h = 0; h < BP; h += 16) {
                v16f32 v, add;
                memcpy(&v, c + j * BP + h, 64);
                memcpy(&add, b + h, 64);
                v += add;
                if (rr) {
                    memcpy(&add, rr + h, 64);
                    v += add;
                }
                memcpy(yr + h, &v, 64);
            }
        } else {
            for (int64_t col = 0; col < width; col++) yr[col] = c[j * BP + col] + b[col] + (rr ? rr[col] : 0.0f);
        }
    }
}

#ifdef HAVE_DPBF16
DP_TARGET static inline __attribute__((always_inline)) void
dp_tile(const uint16_t *bp, const uint16_t *xh, int64_t in_pad, float *c, const int NB) {
    __m512 acc[DB][2];
    for (int j = 0; j < NB; j++) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < in_pad / 2; kp++) {
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(bp + kp * 2 * BP);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(bp + kp * 2 * BP + BP);
        for (int j = 0; j < NB; j++) {
            int32_t pair;
            memcpy(&pair, xh + j * in_pad + 2 * kp, 4);
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);
            acc[j][0] = _mm512_dpbf16_ps(acc[j][0], w0, xv);
            acc[j][1] = _mm512_dpbf16_ps(acc[j][1], w1, xv);
        }
    }
    for (int j = 0; j < NB; j++) {
        _mm512_storeu_ps(c + j * BP, acc[j][0]);
        _mm512_storeu_ps(c + j * BP + 16, acc[j][1]);
    }
}

DP_TARGET static void dp_product(const uint16_t *bp, const uint16_t *xh, const float *bias, const float *residual,
                                 float *y, int64_t n, int64_t out, int64_t in_pad, int64_t o, int64_t width) {
    float c[DB * BP];
    for (int64_t b = 0; b < n; b += DB) {
        const int nb = n - b < DB ? (int)(n - b) : DB;
        const uint16_t *xb = xh + b * in_pad;
        switch (nb) {
        case 1: dp_tile(bp, xb, in_pad, c, 1); break;
        case 2: dp_tile(bp, xb, in_pad, c, 2); break;
        case 3: dp_tile(bp, xb, in_pad, c, 3); break;
        case 4: dp_tile(bp, xb, in_pad, c, 4); break;
        case 5: dp_tile(bp, xb, in_pad, c, 5); break;
        case 6: dp_tile(bp, xb, in_pad, c, 6); break;
        case 7: dp_tile(bp, xb, in_pad, c, 7); break;
        case 8: dp_tile(bp, xb, in_pad, c, 8); break;
        case 9: dp_tile(bp, xb, in_pad, c, 9); break;
        case 10: dp_tile(bp, xb, in_pad, c, 10); break;
        case 11: dp_tile(bp, xb, in_pad, c, 11); break;
        default: dp_tile(bp, xb, in_pad, c, DB); break;
        }
        put_rows(c, nb, bias, residual ? residual + b * out : NULL, y + b * out, out, o, width);
    }
}
#endif

#ifdef HAVE_AMX
/* ldtilecfg's 64 bytes: palette 1; tiles 0 and 1 the two 16 x 16 float sums, 2 the x rows, 3 and 4
   the two halves of the pairs; every tile 16 rows of 64 bytes. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

AMX_TARGET static void amx_product(const uint16_t *bp, const uint16_t *xh, const float *bias, const float *residual,
                                   float *y, int64_t n, int64_t out, int64_t in_pad, int64_t o, int64_t width) {
    tile_config cfg = {.palette = 1};
    for (int t = 0; t < 5; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    float c[16 * BP];
    for (int64_t b = 0; b < n; b += 16) {   /* xh has n rounded up to 16 rows, the padding zeros */
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t k = 0; k < in_pad; k += 32) {
            _tile_loadd(2, xh + b * in_pad + k, in_pad * 2);   /* rows b..b+15, inputs k..k+31 */
            _tile_loadd(3, bp + k * BP, BP * 4);               /* pairs k/2..k/2+15, outputs 0..15 */
            _tile_loadd(4, bp + k * BP + BP, BP * 4);          /* outputs 16..31 */
            _tile_dpbf16ps(0, 2, 3);
            _tile_dpbf16ps(1, 2, 4);
        }
        _tile_stored(0, c, BP * 4);
        _tile_stored(1, c + 16, BP * 4);
        const int nb = n - b < 16 ? (int)(n - b) : 16;
        put_rows(c, nb, bias, residual ? residual + b * out : NULL, y + b * out, out, o, width);
    }
    _tile_release();
}
#endif

void psk_bf16_product(int unit, const uint16_t *bp, const uint16_t *xh, const float *bias, const float *residual,
                      float *y, int64_t n, int64_t out, int64_t in_pad, int64_t o, int64_t width) {
#ifdef HAVE_AMX
    if (unit == PSK_MATH_AMX) {
        amx_product(bp, xh, bias, residual, y, n, out, in_pad, o, width);
        return;
    }
#endif
#ifdef HAVE_DPBF16
    if (unit == PSK_MATH_AVX512BF16) dp_product(bp, xh, bias, residual, y, n, out, in_pad, o, width);
#endif
    (void)unit, (void)bp, (void)xh, (void)bias, (void)residual, (void)y, (void)n, (void)out, (void)in_pad, (void)o,
        (void)width;
}
