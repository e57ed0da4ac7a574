/* The kernels' products on fixed inputs, for checking one build against another (tools/kernel_check).

   Built with backend/kernels/*.c for any target (an aarch64 cross compiler and qemu-user, or a native
   compiler with a portable -march), it runs every kernel on the same pseudo-random inputs (an integer
   generator, so every target draws the same floats) and:
     - prints one line per check: its name, the largest difference from a plain double-precision
       reference computed here from the dequantized weights, relative to the reference's largest value;
     - writes each check's outputs to the file named by argv[1], for the caller to compare two builds.
   The file is a sequence of records: 32 bytes of name (NUL-padded), an int64 count, count floats.
   Quantized bytes are written as floats too (one a byte), and compared exactly: the quantizers have
   contraction off, so every target writes the bytes llama.cpp writes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "qint8.h"
#include "quant.h"

int psk_set_threads(int n);
void psk_quantize_rows(int kind, const float *w, int64_t rows, int64_t in, uint8_t *dst);
void psk_dequantize_rows(int kind, const uint8_t *src, int64_t rows, int64_t in, float *w);
int64_t psk_quant_packed_bytes(int kind, int64_t out, int64_t in);
void psk_quant_pack(int kind, const uint8_t *rows, int64_t out, int64_t in, uint8_t *dst);
void psk_rotary(const float *x, int64_t x_stride, const float *cos, const float *sin, float *out, int64_t n,
                int64_t heads, int64_t hd);
int psk_decode_attention_scaled(const float *q, int64_t q_stride, const float *k, int64_t k_stride, const float *v,
                                int64_t v_stride, float *cache_k, float *cache_v, const int32_t *table,
                                int64_t num_blocks, int64_t max_blocks, int64_t block_shift, const int64_t *slots,
                                const int64_t *positions, const float *cos, const float *sin, float *out, int64_t d,
                                int64_t heads, int64_t kv_heads, int64_t hd, int64_t window, float scale,
                                float softcap);
int psk_prefill_attention(const float *q, int64_t q_stride, const float *k, const float *v, const int32_t *table,
                          float *out, int64_t start, int64_t len, int64_t heads, int64_t kv_heads,
                          int64_t num_blocks, int64_t block_shift, int64_t hd, int64_t window, float scale,
                          float softcap);

static FILE *dump;
static int failures;
static uint64_t seed = 0x9e3779b97f4a7c15ull;

/* splitmix64 -> a float in [-1, 1) with 24 bits: exact on every target */
static float uniform(void) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

static float *randoms(int64_t n, float scale) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = uniform() * scale;
    return p;
}

static void write_record(const char *name, const float *v, int64_t n) {
    char padded[32] = {0};
    strncpy(padded, name, 31);
    fwrite(padded, 1, 32, dump);
    fwrite(&n, sizeof n, 1, dump);
    fwrite(v, sizeof *v, (size_t)n, dump);
}

/* One check: the kernel's outputs against the double reference, printed and recorded. */
static void report(const char *name, const float *got, const double *want, int64_t n, double tol) {
    double worst = 0.0, top = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]);
        worst = e > worst || e != e ? e : worst;
        top = fabs(want[i]) > top ? fabs(want[i]) : top;
    }
    const double rel = worst / top;
    const int ok = rel <= tol;   /* NaN fails */
    failures += !ok;
    printf("%-28s %s rel_err %.3g (tolerance %.0e)\n", name, ok ? "ok  " : "FAIL", rel, tol);
    write_record(name, got, n);
}

/* y (n, out) = x @ W^T + bias + residual in double, W (out, in) float. */
static double *reference_product(const float *w, const float *x, const float *bias, const float *res, int64_t n,
                                 int64_t out, int64_t in) {
    double *y = malloc((size_t)(n * out) * sizeof *y);
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < out; o++) {
            double s = (bias ? bias[o] : 0.0) + (res ? res[i * out + o] : 0.0);
            for (int64_t k = 0; k < in; k++) s += (double)w[o * in + k] * x[i * in + k];
            y[i * out + o] = s;
        }
    return y;
}

static void check_linear(void) {
    const int64_t out = 80, in = 96, P = 32, panels = (out + P - 1) / P;
    float *w = randoms(out * in, 0.5f), *bias = randoms(out, 1.0f);
    float *wp = calloc((size_t)(panels * in * P), sizeof *wp);   /* wp[panel][k][32], zero rows past out */
    for (int64_t o = 0; o < out; o++)
        for (int64_t k = 0; k < in; k++) wp[(o / P * in + k) * P + o % P] = w[o * in + k];
    for (int64_t n = 1; n <= 9; n += 4) {
        float *x = randoms(n * in, 1.0f), *res = randoms(n * out, 1.0f), *y = malloc((size_t)(n * out) * 4);
        psk_linear(wp, x, bias, res, y, n, out, in);
        double *want = reference_product(w, x, bias, res, n, out, in);
        char name[32];
        snprintf(name, sizeof name, "linear f32 n=%lld", (long long)n);
        report(name, y, want, n * out, 1e-5);
        free(x), free(res), free(y), free(want);
    }
    free(w), free(bias), free(wp);
}

static const char *KIND_NAMES[PSK_KINDS] = {"f32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k",
                                            "f16", "bf16"};

/* Every block format: quantized (bytes recorded), packed, and multiplied for a decode's rows (the
   register tiles) and a prefill's (dequantized panels), against the dequantized weights in double. */
static void check_qlinear(int kind) {
    const int64_t out = 40, in = 512;   /* 40 rows: a last panel of 8 */
    float *w = randoms(out * in, 1.0f), *bias = randoms(out, 1.0f);
    const int64_t row_bytes = in / quant_block_size(kind) * quant_block_bytes(kind);
    uint8_t *rows = malloc((size_t)(out * row_bytes)), *packed = malloc((size_t)psk_quant_packed_bytes(kind, out, in));
    psk_quantize_rows(kind, w, out, in, rows);
    float *bytes = malloc((size_t)(out * row_bytes) * sizeof *bytes);
    for (int64_t i = 0; i < out * row_bytes; i++) bytes[i] = rows[i];
    char name[32];
    snprintf(name, sizeof name, "quantize %s", KIND_NAMES[kind]);
    write_record(name, bytes, out * row_bytes);
    psk_dequantize_rows(kind, rows, out, in, w);   /* the weights the product multiplies by */
    psk_quant_pack(kind, rows, out, in, packed);
    const int64_t ns[] = {1, 2, 3, 11};
    for (int c = 0; c < 4; c++) {
        const int64_t n = ns[c];
        float *x = randoms(n * in, 1.0f), *res = randoms(n * out, 1.0f), *y = malloc((size_t)(n * out) * 4);
        const int rc = psk_qlinear(kind, packed, x, bias, res, y, n, out, in);
        if (rc) printf("qlinear %s returned %d\n", KIND_NAMES[kind], rc), failures++;
        double *want = reference_product(w, x, bias, res, n, out, in);
        snprintf(name, sizeof name, "qlinear %s n=%lld", KIND_NAMES[kind], (long long)n);
        report(name, y, want, n * out, 2e-5);
        free(x), free(res), free(y), free(want);
    }
    free(w), free(bias), free(rows), free(packed), free(bytes);
}

/* --decode-math int8 (qint8.c): Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 against the integer block dots computed here in
   int64 from the GGUF bytes and the same quantized activations, scaled in double. */
static void check_int8(int kind) {
    const int64_t out = 40, in = 256, nb = in / 32, bb = quant_block_bytes(kind);
    float *w = randoms(out * in, 1.0f), *bias = randoms(out, 1.0f);
    uint8_t *rows = malloc((size_t)(out * nb * bb)), *packed = malloc((size_t)psk_quant_packed_bytes(kind, out, in));
    psk_quantize_rows(kind, w, out, in, rows);
    psk_quant_pack(kind, rows, out, in, packed);
    psk_set_decode_math(1, INT8_ROWS);
    const int64_t ns[] = {1, 3, 5, INT8_ROWS};   /* 5: a K+1 = 5 verification, a tile case of its own */
    for (int c = 0; c < 4; c++) {
        const int64_t n = ns[c];
        float *x = randoms(n * in, 2.0f), *res = randoms(n * out, 1.0f), *y = malloc((size_t)(n * out) * 4);
        int8_t *xq = malloc((size_t)(n * in));
        float *xd = malloc((size_t)(n * nb) * sizeof *xd);
        int32_t *xs = malloc((size_t)(n * nb) * sizeof *xs);
        psk_quantize_acts(x, n, in, xq, xd, xs);
        const int rc = psk_qlinear(kind, packed, x, bias, res, y, n, out, in);
        if (rc) printf("int8 %s returned %d\n", KIND_NAMES[kind], rc), failures++;
        double *want = malloc((size_t)(n * out) * sizeof *want);
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < out; o++) {
                double s = bias[o] + res[i * out + o];
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = rows + (o * nb + b) * bb;
                    uint16_t h;
                    memcpy(&h, blk, 2);
                    const double d = quant_half_to_float(h);
                    double m = 0.0;
                    const int has_min = kind == PSK_Q4_1 || kind == PSK_Q5_1, q5 = kind == PSK_Q5_0 || kind == PSK_Q5_1;
                    if (has_min) memcpy(&h, blk + 2, 2), m = quant_half_to_float(h);
                    uint32_t qh = 0;
                    if (q5) memcpy(&qh, blk + (has_min ? 4 : 2), 4);
                    const uint8_t *nib = blk + 2 + 2 * has_min + 4 * q5;
                    const int8_t *q = xq + i * in + 32 * b;
                    int64_t dot = 0;
                    for (int k = 0; k < 32; k++) {
                        const int wq = kind == PSK_Q8_0 ? (int8_t)blk[2 + k]
                                     : ((nib[k % 16] >> (k < 16 ? 0 : 4) & 15) | (int)(qh >> k & 1) << 4)
                                       - (kind == PSK_Q4_0 ? 8 : kind == PSK_Q5_0 ? 16 : 0);
                        dot += (int64_t)wq * q[k];
                    }
                    s += d * xd[i * nb + b] * (double)dot + m * xd[i * nb + b] * xs[i * nb + b];
                }
                want[i * out + o] = s;
            }
        char name[32];
        snprintf(name, sizeof name, "int8 %s n=%lld", KIND_NAMES[kind], (long long)n);
        report(name, y, want, n * out, 2e-6);
        free(x), free(res), free(y), free(xq), free(xd), free(xs), free(want);
    }
    psk_set_decode_math(0, 0);
    free(w), free(bias), free(rows), free(packed);
}

/* A fused matrix of two formats (PSK_SEGMENTS): 32 rows of Q5_0 then 16 of Q8_0. */
static void check_segments(void) {
    const int64_t in = 256, rows[2] = {32, 16}, kinds[2] = {PSK_Q5_0, PSK_Q8_0}, out = 48, n = 2;
    float *w = malloc((size_t)(out * in) * sizeof *w);
    int64_t list[7] = {2};
    uint8_t *packed[2];
    for (int s = 0, o = 0; s < 2; o += (int)rows[s], s++) {
        float *ws = randoms(rows[s] * in, 1.0f);
        uint8_t *q = malloc((size_t)(rows[s] * in / 32 * quant_block_bytes((int)kinds[s])));
        psk_quantize_rows((int)kinds[s], ws, rows[s], in, q);
        psk_dequantize_rows((int)kinds[s], q, rows[s], in, w + o * in);
        packed[s] = malloc((size_t)psk_quant_packed_bytes((int)kinds[s], rows[s], in));
        psk_quant_pack((int)kinds[s], q, rows[s], in, packed[s]);
        list[1 + 3 * s] = kinds[s], list[2 + 3 * s] = rows[s], list[3 + 3 * s] = (int64_t)(intptr_t)packed[s];
        free(ws), free(q);
    }
    float *x = randoms(n * in, 1.0f), *y = malloc((size_t)(n * out) * 4);
    psk_qlinear(PSK_SEGMENTS, (const uint8_t *)list, x, NULL, NULL, y, n, out, in);
    double *want = reference_product(w, x, NULL, NULL, n, out, in);
    report("qlinear segments q5_0|q8_0", y, want, n * out, 2e-5);
    free(w), free(x), free(y), free(want), free(packed[0]), free(packed[1]);
}

static void check_elementwise(void) {
    const int64_t n = 3, d = 100, heads = 2, hd = 64;
    float *x = randoms(n * 2 * d, 2.0f), *weight = randoms(d, 1.0f), *y = malloc((size_t)(n * 2 * d) * 4);
    double *want = malloc((size_t)(n * 2 * d) * sizeof *want);
    psk_rms_norm(x, weight, y, n, d, 1e-5f);
    for (int64_t r = 0; r < n; r++) {
        double s = 0.0;
        for (int64_t i = 0; i < d; i++) s += (double)x[r * d + i] * x[r * d + i];
        for (int64_t i = 0; i < d; i++) want[r * d + i] = x[r * d + i] / sqrt(s / d + 1e-5) * weight[i];
    }
    report("rms_norm", y, want, n * d, 1e-5);
    psk_silu_mul(x, y, n, d);   /* rows of x are [gate | up], d each */
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < d; i++) {
            const double g = x[r * 2 * d + i];
            want[r * d + i] = g / (1.0 + exp(-g)) * x[r * 2 * d + d + i];
        }
    report("silu_mul", y, want, n * d, 1e-5);
    float *cs = randoms(n * hd, 1.0f), *sn = randoms(n * hd, 1.0f);
    psk_rotary(x, 2 * d, cs, sn, y, n, heads, hd);
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < hd; i++) {
                const float *xh = x + r * 2 * d + h * hd;
                const int64_t half = hd / 2, j = i < half ? i + half : i - half;
                want[(r * heads + h) * hd + i] = (double)xh[i] * cs[r * hd + i] +
                                                 (i < half ? -1.0 : 1.0) * (double)xh[j] * sn[r * hd + i];
            }
    report("rotary", y, want, n * heads * hd, 1e-6);
    free(x), free(weight), free(y), free(want), free(cs), free(sn);
}

/* Attention's shared shape: 4 query heads on 2 kv heads of 64, blocks of 16 keys, scrambled tables. */
enum { HEADS = 4, KV = 2, HD = 64, SHIFT = 4, BS = 1 << SHIFT, NBLK = 12, MAXB = 6 };
static const int32_t TABLE[2][MAXB] = {{5, 2, 7, 0, 3, 9}, {1, 11, 4, 8, 6, 10}};

static const float *cache_at(const float *cache, const int32_t *table, int64_t h, int64_t p) {
    return cache + ((h * NBLK + table[p >> SHIFT]) * BS + (p & (BS - 1))) * HD;
}

/* softmax(cap(q . K scale)) V over keys lo..hi-1 of one kv head, in double. */
static void reference_attend(const float *q, const float *ck, const float *cv, const int32_t *table, int64_t h,
                             int64_t lo, int64_t hi, double scale, double softcap, double *out) {
    double scores[MAXB * BS], best = -INFINITY, total = 0.0;
    for (int64_t p = lo; p < hi; p++) {
        const float *k = cache_at(ck, table, h, p);
        double s = 0.0;
        for (int i = 0; i < HD; i++) s += (double)q[i] * k[i];
        s *= scale;
        if (softcap > 0) s = softcap * tanh(s / softcap);
        scores[p - lo] = s;
        best = s > best ? s : best;
    }
    for (int i = 0; i < HD; i++) out[i] = 0.0;
    for (int64_t p = lo; p < hi; p++) {
        const double e = exp(scores[p - lo] - best);
        const float *v = cache_at(cv, table, h, p);
        total += e;
        for (int i = 0; i < HD; i++) out[i] += e * v[i];
    }
    for (int i = 0; i < HD; i++) out[i] /= total;
}

/* Decode: 2 tokens in two table rows write their key and value and attend, plain, with a soft cap
   and a window; prefill: 40 tokens after 21 cached ones, causal, plain and windowed. */
static void check_attention(void) {
    const int64_t cache_floats = KV * NBLK * BS * HD, d = 2, positions[2] = {37, 70}, slots[2] = {0, 1};
    float *ck = randoms(cache_floats, 1.0f), *cv = randoms(cache_floats, 1.0f);
    float *q = randoms(d * HEADS * HD, 1.0f), *k = randoms(d * KV * HD, 1.0f), *v = randoms(d * KV * HD, 1.0f);
    float *out = malloc((size_t)(64 * HEADS * HD) * sizeof *out);
    double *want = malloc((size_t)(64 * HEADS * HD) * sizeof *want);
    const float variants[3][2] = {{0, 0}, {30.0f, 0}, {0, 20}};   /* {softcap, window} */
    const char *names[3] = {"decode attention", "decode attention softcap", "decode attention window"};
    for (int c = 0; c < 3; c++) {
        const float scale = 0.125f, softcap = variants[c][0];
        const int64_t window = (int64_t)variants[c][1];
        psk_decode_attention_scaled(q, HEADS * HD, k, KV * HD, v, KV * HD, ck, cv, &TABLE[0][0], NBLK, MAXB, SHIFT,
                                    slots, positions, NULL, NULL, out, d, HEADS, KV, HD, window, scale, softcap);
        for (int64_t t = 0; t < d; t++)
            for (int64_t h = 0; h < HEADS; h++) {
                const int64_t p = positions[t], lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
                reference_attend(q + (t * HEADS + h) * HD, ck, cv, TABLE[slots[t]], h / (HEADS / KV), lo, p + 1,
                                 scale, softcap, want + (t * HEADS + h) * HD);
            }
        report(names[c], out, want, d * HEADS * HD, 1e-5);
    }
    const int64_t start = 21, len = 40;
    float *qp = randoms(len * HEADS * HD, 1.0f);
    for (int c = 0; c < 2; c++) {
        const int64_t window = c ? 17 : 0;
        const int rc = psk_prefill_attention(qp, HEADS * HD, ck, cv, TABLE[1], out, start, len, HEADS, KV, NBLK,
                                             SHIFT, HD, window, 0.125f, 0.0f);
        if (rc) printf("prefill attention returned %d\n", rc), failures++;
        for (int64_t t = 0; t < len; t++)
            for (int64_t h = 0; h < HEADS; h++) {
                const int64_t p = start + t, lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
                reference_attend(qp + (t * HEADS + h) * HD, ck, cv, TABLE[1], h / (HEADS / KV), lo, p + 1, 0.125,
                                 0.0, want + (t * HEADS + h) * HD);
            }
        report(c ? "prefill attention window" : "prefill attention", out, want, len * HEADS * HD, 1e-5);
    }
    free(ck), free(cv), free(q), free(k), free(v), free(out), free(want), free(qp);
}

int main(int argc, char **argv) {
    if (argc != 2 || !(dump = fopen(argv[1], "wb"))) {
        fprintf(stderr, "usage: kernel_check OUTPUT_FILE\n");
        return 2;
    }
    printf("isa %s:%s\n", psk_isa(), psk_isa_features());
    psk_set_threads(3);   /* more parts than one, so the pool's splits are checked too */
    check_linear();
    for (int kind = PSK_Q8_0; kind < PSK_KINDS; kind++) check_qlinear(kind);
    for (int kind = PSK_Q8_0; kind <= PSK_Q5_1; kind++) check_int8(kind);
    check_segments();
    check_elementwise();
    check_attention();
    fclose(dump);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
