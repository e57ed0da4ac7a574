/* Decode attention against the paged KV cache, one call per layer for all the step's decode tokens.

   The cache is a pool of blocks per kv head, (kv_heads, num_blocks, BS, hd), BS = 1 << block_shift
   keys a block; row r of the block table (max_blocks entries apart) lists the blocks of the
   request in table row r, in position order: position p of that request is at offset p % BS of
   block table[r][p / BS], in every head's pool. For decode token d (in table row s at position p)
   and kv head h: write its new key (rotated here when the caller passes the rotary tables) and
   value into its block (every token's first, so several tokens of one row see each other causally),
   then attend each query head that shares kv head h to keys 0..p of that
   row, read block by block in place (each block's BS keys of a head are one contiguous run; no
   gathering copy): softmax(q . K * scale) . V, scale 1 / sqrt(hd) unless the model says otherwise
   (Gemma's query_pre_attn_scalar). With a soft cap c > 0 (Gemma 2) each score s becomes
   c * tanh(s / c) before the softmax, as transformers caps them. With a window W > 0 (a
   sliding-window layer) the token sees only keys p - W + 1 .. p. Torch's SDPA takes about 100 us
   a layer for this on a batch of one (a kernel sized for long sequences); the arithmetic is a few
   microseconds.

   Softmax runs online over blocks of BLOCK keys (a running maximum and sum, rescaling the output
   when the maximum grows), so no buffer grows with the context. Work items (token, kv head) are
   split evenly over the pool's threads.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pool.h"
#include "simd.h"

#define BLOCK 64             /* keys per softmax block (a multiple of 8) */

typedef struct {
    const float *q, *k, *v;          /* rows of the step's decode tokens, with their own strides */
    int64_t q_stride, k_stride, v_stride;
    float *cache_k, *cache_v;        /* (kv_heads, num_blocks, 1 << block_shift, hd) */
    const int32_t *table;            /* (rows, max_blocks): each row's blocks in position order */
    int64_t num_blocks, max_blocks, block_shift;
    const int64_t *slots, *positions;
    const float *cos, *sin;          /* (D, hd) per token, to rotate q and k here; NULL: already rotated */
    float *out;                      /* (D, heads * hd) */
    int64_t d, heads, kv_heads, hd;
    int64_t window;                  /* keys each token sees, its own included; 0: every earlier key */
    float scale, softcap;            /* softcap 0: scores are not capped */
} attention_job;

/* Rotary embedding, the Hugging Face "rotate half" convention: pairs (i, i + hd/2). */
static void rotate(const float *x, const float *cos, const float *sin, float *out, int64_t hd) {
    const int64_t half = hd / 2;
    for (int64_t i = 0; i < half; i++) out[i] = x[i] * cos[i] - x[i + half] * sin[i];
    for (int64_t i = half; i < hd; i++) out[i] = x[i] * cos[i] + x[i - half] * sin[i];
}

/* A score's soft cap (Gemma 2's attn_logit_softcapping): c * tanh(s / c), or s itself for c = 0. */
static inline float cap(float score, float softcap) {
    return softcap > 0.0f ? softcap * tanhf(score / softcap) : score;
}

/* Where the keys (and values) of one kv head are: the row's block table, the head's pool (keys,
   values) and the stride from block to block (BS * hd).
   Position p is at base + table[p >> shift] * stride + (p & (BS - 1)) * hd. */
typedef struct {
    const float *keys, *values;
    const int32_t *table;
    int64_t stride, shift;
} paged_head;

static inline const float *key_at(const paged_head *ph, const float *base, int64_t p, int64_t hd) {
    return base + (int64_t)ph->table[p >> ph->shift] * ph->stride + (p & ((1 << ph->shift) - 1)) * hd;
}

#define AHEAD 2   /* blocks ahead of the one being read that its keys prefetch */

/* The block AHEAD blocks past the one that holds p in this head's pool `base`, or NULL past the
   block of the last key (end - 1). Blocks of a scrambled table are nowhere near each other, so the
   hardware prefetcher, which follows one stream within a page, stops at every block boundary: the
   key pass asks for the keys AHEAD blocks on and for the values of the block it reads (which the
   value pass reads after the softmax block's keys). One block ahead, asked for in one burst of 64
   lines at the start of a run, was 1.3-1.7x slower than the slot layout at batch 32 (kernel alone). */
static inline const char *ahead(const paged_head *ph, const float *base, int64_t p, int64_t end) {
    const int64_t b = (p >> ph->shift) + AHEAD;
    if (b > (end - 1) >> ph->shift) return NULL;
    return (const char *)(base + (int64_t)ph->table[b] * ph->stride);
}

/* Key i of a block's run asks for its own share of a block's lines (the key or value at offset i):
   a run of the block's keys asks for the whole block, a few lines at a time, not all at once (a
   burst of 64 lines fills the core's miss buffers and stalls the reads that need them now). */
static inline void prefetch_share(const char *block, int64_t i, int64_t hd) {
    if (!block) return;
    const int64_t bytes = hd * (int64_t)sizeof(float);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(block + i * bytes + b);
}

/* One query head against keys first..first+n_keys-1 of its kv head, read through the table:
   out = softmax(cap(q . K * scale)) . V, a cache block's run of keys at a time, prefetching (above)
   where `prefetch` (the group's first query head: the others find the keys in cache). HD is a
   constant at the calls that matter (64, 128), so q and the output's partial sums stay in
   registers across the keys. HD must be a multiple of 8 here. */
static inline __attribute__((always_inline)) void
attend_head(const float *q, const paged_head *ph, int64_t first, int64_t n_keys, float scale,
            float softcap, float *out, int prefetch, const int64_t HD) {
    const int64_t nv = HD / 8, bs = (int64_t)1 << ph->shift;
    v8 qv[nv], acc[nv];
    for (int64_t c = 0; c < nv; c++) {
        qv[c] = load8(q + 8 * c) * scale;
        acc[c] = (v8){0};
    }
    float scores[BLOCK] = {0}, best = -INFINITY, total = 0.0f;
    for (int64_t start = 0; start < n_keys; start += BLOCK) {
        const int64_t n = n_keys - start < BLOCK ? n_keys - start : BLOCK;
        float block_best = -INFINITY;
        for (int64_t i = 0; i < n;) {   /* a run of keys inside one cache block: contiguous, as slots were */
            const int64_t p = first + start + i, in_block = bs - (p & (bs - 1));
            const int64_t run = n - i < in_block ? n - i : in_block;
            const float *key = key_at(ph, ph->keys, p, HD);
            const char *next_keys = prefetch ? ahead(ph, ph->keys, p, first + n_keys) : NULL;
            const char *values = prefetch ? (const char *)(ph->values + (int64_t)ph->table[p >> ph->shift] * ph->stride)
                                          : NULL;   /* this block's values, for the value pass */
            for (int64_t e = i + run, o = p & (bs - 1); i < e; i++, o++, key += HD) {
                prefetch_share(next_keys, o, HD);
                prefetch_share(values, o, HD);
                v8 dot = {0};
                for (int64_t c = 0; c < nv; c++) dot += qv[c] * load8(key + 8 * c);
                float sc = 0.0f;
                for (int l = 0; l < 8; l++) sc += dot[l];
                sc = cap(sc, softcap);
                scores[i] = sc;
                if (sc > block_best) block_best = sc;
            }
        }
        if (block_best > best) {   /* rescale what was summed under the old maximum */
            const float r = expf(best - block_best);
            total *= r;
            for (int64_t c = 0; c < nv; c++) acc[c] *= r;
            best = block_best;
        }
        for (int64_t i = 0; i < n; i += 8) {   /* scores past n are exp'd but unused */
            const v8 e = exp8(load8(scores + i) - best);
            memcpy(scores + i, &e, sizeof e);
        }
        for (int64_t i = 0; i < n;) {
            const int64_t pos = first + start + i, in_block = bs - (pos & (bs - 1));
            const int64_t run = n - i < in_block ? n - i : in_block;
            const float *value = key_at(ph, ph->values, pos, HD);
            for (int64_t e = i + run; i < e; i++, value += HD) {
                const float p = scores[i];
                total += p;
                for (int64_t c = 0; c < nv; c++) acc[c] += load8(value + 8 * c) * p;
            }
        }
    }
    for (int64_t c = 0; c < nv; c++) store8(out + 8 * c, acc[c] / total);
}

/* The same for any head dimension, one float at a time (no model here has one that is not a
   multiple of 8). */
static void attend_head_any(const float *q, const paged_head *ph, int64_t first, int64_t n_keys,
                            float scale, float softcap, float *out, int64_t hd) {
    float best = -INFINITY, total = 0.0f, acc[hd];
    memset(acc, 0, sizeof acc);
    for (int64_t i = 0; i < n_keys; i++) {
        const float *key = key_at(ph, ph->keys, first + i, hd), *value = key_at(ph, ph->values, first + i, hd);
        float sc = 0.0f;
        for (int64_t c = 0; c < hd; c++) sc += q[c] * key[c];
        sc = cap(sc * scale, softcap);
        if (sc > best) {
            const float r = expf(best - sc);
            total *= r;
            for (int64_t c = 0; c < hd; c++) acc[c] *= r;
            best = sc;
        }
        const float p = expf(sc - best);
        total += p;
        for (int64_t c = 0; c < hd; c++) acc[c] += p * value[c];
    }
    for (int64_t c = 0; c < hd; c++) out[c] = acc[c] / total;
}

/* Token t's place in kv head h's pool. */
static paged_head head_of(const attention_job *j, int64_t t, int64_t h) {
    const int64_t bs = (int64_t)1 << j->block_shift, head = h * j->num_blocks * bs * j->hd;   /* the head's pool */
    return (paged_head){j->cache_k + head, j->cache_v + head, j->table + j->slots[t] * j->max_blocks, bs * j->hd,
                        j->block_shift};
}

/* Token t's key (rotated) and value for kv head h into its block. Every token's are written before
   any token attends: several tokens of one row (a speculative verification's K+1 positions) then
   each see the ones before them, which is causal attention within the segment. */
static void write_one(const attention_job *j, int64_t t, int64_t h) {
    const int64_t hd = j->hd, pos = j->positions[t];
    const paged_head ph = head_of(j, t, h);
    float *key = (float *)key_at(&ph, ph.keys, pos, hd), *value = (float *)key_at(&ph, ph.values, pos, hd);
    const float *k = j->k + t * j->k_stride + h * hd;
    if (j->cos) rotate(k, j->cos + t * hd, j->sin + t * hd, key, hd);
    else memcpy(key, k, hd * sizeof(float));
    memcpy(value, j->v + t * j->v_stride + h * hd, hd * sizeof(float));
}

static void attend_one(const attention_job *j, int64_t t, int64_t h) {
    const int64_t hd = j->hd, group = j->heads / j->kv_heads, pos = j->positions[t];
    const paged_head ph = head_of(j, t, h);
    const int64_t first = j->window > 0 && pos >= j->window ? pos - j->window + 1 : 0, n_keys = pos + 1 - first;
    for (int64_t g = 0; g < group; g++) {
        const int64_t qh = h * group + g;
        const float *q = j->q + t * j->q_stride + qh * hd;
        float rotated[hd];
        if (j->cos) {
            rotate(q, j->cos + t * hd, j->sin + t * hd, rotated, hd);
            q = rotated;
        }
        float *o = j->out + t * j->heads * hd + qh * hd;
        const float scale = j->scale, softcap = j->softcap;
        switch (hd) {
        case 64: attend_head(q, &ph, first, n_keys, scale, softcap, o, g == 0, 64); break;
        case 128: attend_head(q, &ph, first, n_keys, scale, softcap, o, g == 0, 128); break;
        default:
            if (hd % 8 == 0) attend_head(q, &ph, first, n_keys, scale, softcap, o, g == 0, hd);
            else attend_head_any(q, &ph, first, n_keys, scale, softcap, o, hd);
        }
    }
}

static void attention_part(void *arg, int part, int parts) {
    const attention_job *j = arg;
    const int64_t items = j->d * j->kv_heads;
    for (int64_t i = items * part / parts; i < items * (part + 1) / parts; i++)
        attend_one(j, i / j->kv_heads, i % j->kv_heads);
}

/* cos and sin: (d, hd) rows for each token to rotate q and k with, or NULL if they are rotated.
   table: (rows, max_blocks) int32 block table; slots[t] is token t's table row; blocks hold
   1 << block_shift keys. scale multiplies the scores (1 / sqrt(hd) for most models); softcap > 0
   caps them (0: no cap); window > 0 keeps each token to its last window keys (0: all of them).
   Returns 0, or -1 when the query heads do not share the kv heads evenly (or hd is odd with cos). */
int psk_decode_attention_scaled(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
                                const float *v, int64_t v_stride, float *cache_k, float *cache_v,
                                const int32_t *table, int64_t num_blocks, int64_t max_blocks,
                                int64_t block_shift, const int64_t *slots, const int64_t *positions, const float *cos,
                                const float *sin, float *out, int64_t d, int64_t heads, int64_t kv_heads,
                                int64_t hd, int64_t window, float scale, float softcap) {
    if (kv_heads < 1 || heads % kv_heads || (cos && hd % 2) || block_shift < 0 || block_shift > 20) return -1;
    attention_job job = {q, k, v, q_stride, k_stride, v_stride, cache_k, cache_v, table, num_blocks, max_blocks,
                         block_shift,
                         slots, positions, cos, sin, out, d, heads, kv_heads, hd, window, scale, softcap};
    for (int64_t t = 0; t < d; t++)   /* a few hundred floats a token: cheap next to the reads below */
        for (int64_t h = 0; h < kv_heads; h++) write_one(&job, t, h);
    pool_run(attention_part, &job);
    return 0;
}

/* The usual scale, 1 / sqrt(hd), no cap and no window (the fused decode layer's call, layer.c). */
int psk_decode_attention(const float *q, int64_t q_stride, const float *k, int64_t k_stride,
                         const float *v, int64_t v_stride, float *cache_k, float *cache_v,
                         const int32_t *table, int64_t num_blocks, int64_t max_blocks, int64_t block_shift,
                         const int64_t *slots, const int64_t *positions, const float *cos, const float *sin,
                         float *out, int64_t d, int64_t heads, int64_t kv_heads, int64_t hd) {
    return psk_decode_attention_scaled(q, q_stride, k, k_stride, v, v_stride, cache_k, cache_v, table, num_blocks,
                                       max_blocks, block_shift, slots, positions, cos, sin, out, d, heads, kv_heads,
                                       hd, 0,
                                       1.0f / sqrtf((float)hd), 0.0f);
}

/* Write n tokens' keys and values (rows of k and v, k_stride and v_stride floats apart, kv_heads * hd
   each) at positions start.. of one table row (a prefill segment's, before its attention reads
   them): a memcpy of hd floats per token and kv head into its block. Torch's index_put and
   index_copy_ take 3-8 us per token row here, 4 ms a layer for a 512-token prompt; this is the
   slice copy the slot layout had. */
void psk_kv_write(const float *k, int64_t k_stride, const float *v, int64_t v_stride, float *cache_k,
                  float *cache_v, const int32_t *table, int64_t num_blocks, int64_t block_shift, int64_t start,
                  int64_t n, int64_t kv_heads, int64_t hd) {
    const int64_t bs = (int64_t)1 << block_shift, head = num_blocks * bs * hd;
    for (int64_t t = 0; t < n; t++) {
        const int64_t p = start + t;
        const int64_t at = ((int64_t)table[p >> block_shift] * bs + (p & (bs - 1))) * hd;
        for (int64_t h = 0; h < kv_heads; h++) {
            memcpy(cache_k + h * head + at, k + t * k_stride + h * hd, hd * sizeof(float));
            memcpy(cache_v + h * head + at, v + t * v_stride + h * hd, hd * sizeof(float));
        }
    }
}
