/* A mixture-of-experts feed-forward (Mixtral, Qwen3-MoE, OLMoE) in one call: the router's product,
   each token's top-k experts and their weights, then one product per touched expert over the
   rows routed to it.

   Grouping the rows by expert is what keeps a step's weight reads to the experts it touches: an
   expert that no token chose is never read, and one chosen by m tokens is read once for all m
   (its gate/up and down products run on the m gathered rows), so a decode step of batch B reads
   the union of its tokens' experts, not B * k experts' worth.

   Routing, as transformers does it for all three families: p = softmax(router logits) over all
   experts; the k largest p (ties: the lower expert index); with norm_topk those k divided by their
   sum (Mixtral always, which is the softmax over the top-k logits). Each matrix comes with its
   kind (quant.h), so experts in float32 panels and in quantized panels run through the same code.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* Each row's k experts and weights into expert (n, k) and weight (n, k), from logits (n, E). */
static void route(const float *logits, int64_t n, int64_t E, int64_t k, int norm_topk, int64_t *expert,
                  float *weight, unsigned char *taken) {
    for (int64_t r = 0; r < n; r++) {
        const float *l = logits + r * E;
        float top = l[0];
        for (int64_t e = 1; e < E; e++) top = l[e] > top ? l[e] : top;
        double sum = 0.0;
        for (int64_t e = 0; e < E; e++) sum += exp((double)(l[e] - top));
        memset(taken, 0, (size_t)E);
        double chosen = 0.0;
        for (int64_t j = 0; j < k; j++) {   /* k passes: k and E are small (8 of 128 at most here) */
            int64_t best = -1;
            for (int64_t e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
            taken[best] = 1;
            expert[r * k + j] = best;
            weight[r * k + j] = (float)(exp((double)(l[best] - top)) / sum);
            chosen += weight[r * k + j];
        }
        if (norm_topk)
            for (int64_t j = 0; j < k; j++) weight[r * k + j] = (float)(weight[r * k + j] / chosen);
    }
}

/* y (n, d) = residual + sum over each row's k experts of weight * down(silu(gate) * up)(x).

   x (n, d): the normalized hidden state; residual may be y itself. router: (E, d) of kind
   router_kind; experts: int64 (E, 4) rows of [gate_up pointer, down pointer, gate_up kind, down
   kind], gate_up (2 ff, d) as [gate | up], down (d, ff). chosen, when not NULL, receives each
   row's experts (n, k). Returns the number of distinct experts the step touched, or -2 when
   there is no memory for the scratch. */
int64_t psk_moe(const float *x, const float *residual, float *y, int64_t n, int64_t d, const void *router,
                int64_t router_kind, const int64_t *experts, int64_t E, int64_t k, int64_t ff, int64_t norm_topk,
                int64_t *chosen) {
    const int64_t slots = n * k;
    float *logits = malloc(sizeof(float) * (size_t)(n * E));
    float *weight = malloc(sizeof(float) * (size_t)slots);
    int64_t *expert = malloc(sizeof(int64_t) * (size_t)slots);
    int64_t *order = malloc(sizeof(int64_t) * (size_t)slots);     /* slots grouped by expert */
    int64_t *start = calloc((size_t)(E + 1), sizeof(int64_t));
    unsigned char *taken = malloc((size_t)E);
    /* per expert, at most n rows: gathered x, gate|up, the activation, the expert's output */
    float *xe = malloc(sizeof(float) * (size_t)(n * (d + 3 * ff + d)));
    int64_t touched = -2;
    if (!logits || !weight || !expert || !order || !start || !taken || !xe) goto done;
    if (psk_matmul((int)router_kind, router, x, NULL, NULL, logits, n, E, d)) goto done;
    route(logits, n, E, k, (int)norm_topk, expert, weight, taken);
    if (chosen) memcpy(chosen, expert, sizeof(int64_t) * (size_t)slots);

    for (int64_t s = 0; s < slots; s++) start[expert[s] + 1]++;   /* a counting sort, stable in row order */
    for (int64_t e = 0; e < E; e++) start[e + 1] += start[e];
    int64_t *fill = calloc((size_t)E, sizeof(int64_t));
    if (!fill) goto done;
    for (int64_t s = 0; s < slots; s++) order[start[expert[s]] + fill[expert[s]]++] = s;
    free(fill);

    if (y != residual) memcpy(y, residual, sizeof(float) * (size_t)(n * d));
    float *gate_up = xe + n * d, *act = gate_up + n * 2 * ff, *out = act + n * ff;
    touched = 0;
    for (int64_t e = 0; e < E; e++) {
        const int64_t m = start[e + 1] - start[e];
        if (m == 0) continue;
        touched++;
        const int64_t *row = experts + e * 4;
        for (int64_t j = 0; j < m; j++)
            memcpy(xe + j * d, x + order[start[e] + j] / k * d, sizeof(float) * (size_t)d);
        const void *gate_up_w = (const void *)(intptr_t)row[0], *down_w = (const void *)(intptr_t)row[1];
        if (psk_matmul((int)row[2], gate_up_w, xe, NULL, NULL, gate_up, m, 2 * ff, d)) goto fail;
        psk_silu_mul(gate_up, act, m, ff);
        if (psk_matmul((int)row[3], down_w, act, NULL, NULL, out, m, d, ff)) goto fail;
        for (int64_t j = 0; j < m; j++) {   /* scatter-add, weighted, in expert order as transformers adds */
            const int64_t s = order[start[e] + j];
            const float w = weight[s];
            float *yr = y + s / k * d;
            const float *o = out + j * d;
            for (int64_t c = 0; c < d; c++) yr[c] += w * o[c];
        }
    }
    goto done;
fail:
    touched = -2;
done:
    free(logits); free(weight); free(expert); free(order); free(start); free(taken); free(xe);
    return touched;
}
