/* Causal attention for a prefill segment: L query tokens of one request, at positions start..start+L-1,
   against its keys 0..start+L-1 in the paged KV cache (the caller wrote the segment's keys and
   values there first). The cache is a pool of blocks per kv head (kv_heads, num_blocks, 1 << block_shift, hd)
   and the request's row of the block table lists its blocks in position order (attention.c); the
   keys are read through it only here, where each key block is packed (below), so the paging costs
   one table look-up per packed key and nothing in the products.

   Blocked as flash attention is: a unit of work is one kv head and 16 to 64 consecutive query
   tokens, whose rows are the group of query heads sharing that kv head times those tokens (GQA
   without copying the cache; more tokens for smaller groups, so a unit has 48-64 rows to share
   each key block). Over blocks of KB keys, the scores S = Q K^T and the update O += P V are
   panel products of linear.c's kernel: each key block transposed into a (hd, 32) panel for the
   scores, each value block cut into (32, 32) panels for the update, both packed once per call. The softmax runs online (a
   running maximum and sum per row, the output rescaled when the maximum grows), so nothing grows
   with the context; key blocks past a unit's last query are never touched, and with a window
   neither are those before its first visible key. Same arithmetic as attention.c (scale, Gemma
   2's soft cap, a sliding window), float32 throughout. Torch's SDPA took about 3.6 ms a layer for
   the bundled model's 512-token prefill on the reference CPU, a third of the time the products did.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "pool.h"
#include "simd.h"

#define KB 32                  /* keys per block: one panel's width */

typedef struct {
    const float *q;            /* (L, heads, hd), q_stride floats from token to token */
    int64_t q_stride;
    const float *k, *v;        /* the block pools: (kv_heads, num_blocks, 1 << block_shift, hd) */
    const int32_t *table;      /* the request's blocks, in position order */
    float *out;                /* (L, heads * hd) */
    int64_t start, len, heads, kv_heads, num_blocks, block_shift, hd, window;
    float scale, softcap;
    int64_t qb, units;         /* query tokens per unit, units */
    int64_t k_lo, blocks;      /* the first key block packed (keys k_lo * KB ...) and how many */
    float *kt, *vp;            /* per kv head and block: K^T (hd, KB), V as hd / KB panels (KB, KB) */
    volatile int failed;       /* a thread had no memory for its scratch */
} prefill_job;

/* Scratch of one thread: Q rows, scores, outputs and each row's running maximum and sum. */
typedef struct {
    float *qb, *s, *o, *m, *l;
} scratch;

static int grow(scratch *sc, int64_t rows, int64_t hd) {
    const int64_t floats = rows * hd + rows * KB + rows * hd + 2 * rows;
    float *buf = pool_scratch(SCRATCH_ATTENTION, floats * (int64_t)sizeof *buf);
    if (!buf) return -1;
    sc->qb = buf;
    sc->s = sc->qb + rows * hd;
    sc->o = sc->s + rows * KB;
    sc->m = sc->o + rows * hd;
    sc->l = sc->m + rows;
    return 0;
}

static int64_t vpanels(int64_t hd) { return (hd + KB - 1) / KB; }

/* Packing: (kv head, block) pairs dealt over the threads; keys past the segment are zeros. */
static void pack_part(void *arg, int part, int parts) {
    const prefill_job *job = arg;
    const int64_t hd = job->hd, last = job->start + job->len, np = vpanels(hd);
    for (int64_t i = part; i < job->kv_heads * job->blocks; i += parts) {
        const int64_t g = i / job->blocks, b = i % job->blocks, k0 = (job->k_lo + b) * KB;
        const float *keys[KB], *values[KB];   /* key k0 + j's row of kv head g, through the table */
        const int64_t bs = (int64_t)1 << job->block_shift;
        for (int64_t j = 0; j < KB; j++) {
            const int64_t p = k0 + j < last ? k0 + j : last - 1;   /* past the segment: any valid row, zeroed below */
            const int64_t at = ((g * job->num_blocks + job->table[p >> job->block_shift]) * bs + (p & (bs - 1))) * hd;
            keys[j] = job->k + at;
            values[j] = job->v + at;
        }
        float *kt = job->kt + i * hd * KB, *vp = job->vp + i * np * KB * KB;
        for (int64_t d = 0; d < hd; d++)
            for (int64_t j = 0; j < KB; j++) kt[d * KB + j] = k0 + j < last ? keys[j][d] : 0.0f;
        for (int64_t c = 0; c < np; c++)
            for (int64_t j = 0; j < KB; j++)
                for (int64_t d = 0; d < KB; d++)
                    vp[(c * KB + j) * KB + d] = k0 + j < last && c * KB + d < hd ? values[j][c * KB + d] : 0.0f;
    }
}

/* Unit (kv head g, tokens t0..t1-1): rows r = h_in_group * n + (t - t0). */
static void run_unit(const prefill_job *job, int64_t g, int64_t t0, int64_t t1, scratch *sc) {
    const int64_t hd = job->hd, group = job->heads / job->kv_heads, n = t1 - t0, rows = group * n, np = vpanels(hd);
    for (int64_t h = 0; h < group; h++)
        for (int64_t t = 0; t < n; t++) {
            const float *q = job->q + (t0 + t) * job->q_stride + (g * group + h) * hd;
            float *row = sc->qb + (h * n + t) * hd;
            for (int64_t d = 0; d < hd; d++) row[d] = q[d] * job->scale;
        }
    memset(sc->o, 0, (size_t)(rows * hd) * sizeof *sc->o);
    for (int64_t r = 0; r < rows; r++) {
        sc->m[r] = -INFINITY;
        sc->l[r] = 0.0f;
    }
    const int64_t first_pos = job->start + t0, last_pos = job->start + t1 - 1;
    const int64_t lo = job->window > 0 && first_pos - job->window + 1 > 0 ? first_pos - job->window + 1 : 0;
    for (int64_t k0 = lo / KB * KB; k0 <= last_pos; k0 += KB) {
        const int64_t nk = last_pos + 1 - k0 < KB ? last_pos + 1 - k0 : KB;
        const int64_t packed = g * job->blocks + k0 / KB - job->k_lo;
        psk_linear_panel(job->kt + packed * hd * KB, sc->qb, NULL, NULL, sc->s, rows, KB, hd, 0, KB);   /* S (rows, 32) */
        for (int64_t r = 0; r < rows; r++) {
            /* the row's visible keys in this block are one run, [a, b) of its 32 */
            const int64_t pos = job->start + t0 + r % n;
            const int64_t first = job->window > 0 ? pos - job->window + 1 : 0;
            const int64_t a = first > k0 ? first - k0 : 0, b = pos + 1 - k0 < nk ? pos + 1 - k0 : nk;
            float *s = sc->s + r * KB, top = sc->m[r];
            if (a >= b) {                           /* nothing visible to this row in the block */
                memset(s, 0, KB * sizeof *s);
                continue;
            }
            if (job->softcap > 0.0f)
                for (int64_t j = a; j < b; j++) s[j] = job->softcap * tanhf(s[j] / job->softcap);
            for (int64_t j = a; j < b; j++) top = s[j] > top ? s[j] : top;
            const float rescale = sc->m[r] == -INFINITY ? 0.0f : expf(sc->m[r] - top);
            for (int64_t j = 0; j < KB; j += 8) store8(s + j, exp8(load8(s + j) - top));
            float sum = 0.0f;
            for (int64_t j = 0; j < KB; j++) {
                s[j] = j >= a && j < b ? s[j] : 0.0f;
                sum += s[j];
            }
            sc->l[r] = sc->l[r] * rescale + sum;
            sc->m[r] = top;
            if (rescale != 1.0f)
                for (int64_t d = 0; d < hd; d++) sc->o[r * hd + d] *= rescale;
        }
        for (int64_t c = 0; c < np; c++) {          /* O += P V, 32 of the head's dimensions a panel */
            const int64_t width = hd - c * KB < KB ? hd - c * KB : KB;
            psk_linear_panel(job->vp + (packed * np + c) * KB * KB, sc->s, NULL, sc->o, sc->o, rows, hd, KB, c * KB,
                             width);
        }
    }
    for (int64_t h = 0; h < group; h++)
        for (int64_t t = 0; t < n; t++) {
            const int64_t r = h * n + t;
            const float inv = sc->l[r] > 0.0f ? 1.0f / sc->l[r] : 0.0f;
            float *dst = job->out + (t0 + t) * job->heads * hd + (g * group + h) * hd;
            for (int64_t d = 0; d < hd; d++) dst[d] = sc->o[r * hd + d] * inv;
        }
}

static void prefill_part(void *arg, int part, int parts) {
    prefill_job *job = arg;
    scratch sc;
    if (grow(&sc, job->heads / job->kv_heads * job->qb, job->hd)) {
        job->failed = 1;
        return;
    }
    /* units dealt round-robin: causal units grow with their position, so neighbours share the load */
    for (int64_t u = part; u < job->units; u += parts) {
        const int64_t g = u % job->kv_heads, b = u / job->kv_heads;
        const int64_t t0 = b * job->qb, t1 = t0 + job->qb < job->len ? t0 + job->qb : job->len;
        run_unit(job, g, t0, t1, &sc);
    }
}

/* out (len, heads * hd) = causal attention of q (len, heads, hd; q_stride floats per token) over
   keys 0..start+len-1 of the block pools k and v ((kv_heads, num_blocks, 1 << block_shift, hd)),
   read through table, the request's row of the block table. Returns -1 for heads that do not
   share kv heads evenly, -2 without memory for the packed keys and values. */
int psk_prefill_attention(const float *q, int64_t q_stride, const float *k, const float *v, const int32_t *table,
                          float *out, int64_t start, int64_t len, int64_t heads, int64_t kv_heads,
                          int64_t num_blocks, int64_t block_shift, int64_t hd, int64_t window, float scale,
                          float softcap) {
    if (kv_heads <= 0 || heads % kv_heads || len <= 0 || block_shift < 0 || block_shift > 20) return len == 0 ? 0 : -1;
    const int64_t group = heads / kv_heads, qb = group >= 4 ? 16 : group >= 2 ? 32 : 64;
    const int64_t lo = window > 0 && start - window + 1 > 0 ? (start - window + 1) / KB : 0;
    const int64_t blocks = (start + len + KB - 1) / KB - lo;
    const int64_t floats = kv_heads * blocks * (hd * KB + vpanels(hd) * KB * KB);
    float *packed = pool_scratch(SCRATCH_PACKED, floats * (int64_t)sizeof *packed);
    if (!packed) return -2;
    prefill_job job = {q, q_stride, k, v, table, out, start, len, heads, kv_heads, num_blocks, block_shift, hd, window,
                       scale,
                       softcap,
                       qb, kv_heads * ((len + qb - 1) / qb), lo, blocks, packed,
                       packed + kv_heads * blocks * hd * KB, 0};
    pool_run(pack_part, &job);
    pool_run(prefill_part, &job);
    return job.failed ? -2 : 0;
}
