"""The roofline model of one engine step: FLOPs, bytes moved, and the time a device needs.

Pure arithmetic, no torch. The shape is anything with ModelShape's attribute names
(arch, vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim,
intermediate_size, attention_bias; the others default as ModelShape's do); tied or not, the LM head reads the whole vocabulary
matrix, so tie_embeddings does not change the count.

What is counted, and the choices made:
  * Linear layers: 2 FLOPs per weight per token (one multiply, one add). Llama layers have
    q, k, v, o and a SwiGLU MLP of three matrices; GPT-2 layers have the fused qkv, o and
    an MLP of two. Biases, norms, activations and rotary are left out of the FLOPs: they
    are O(hidden) per token against O(hidden^2) for the matmuls.
  * Attention: per layer, 2 x head_dim FLOPs per (head, query, key) pair for the scores and
    as many for the weighted sum of values. A request with n new tokens and c context
    tokens (c includes the n) has n x (c - n) pairs with the cached prefix plus the causal
    triangle n x (n + 1) / 2 among the new tokens. We count only the pairs the causal mask
    keeps -- the useful work, what a flash kernel does; a kernel that computes the whole
    n x c rectangle and masks it does up to twice the attention FLOPs of a long prefill,
    and that waste shows up as lower MFU, not as higher counted FLOPs.
  * LM head: 2 x hidden x vocab FLOPs per row that needs logits. Our engine computes logits
    only for the last token of each prefill and for each decode token, one row per request
    (an intermediate chunk of a chunked prefill needs none: pass logit_rows).
  * Weight bytes: every layer weight and the LM head are read once per step, whatever the
    number of tokens -- the reason batching decode is nearly free until the compute bound.
    The embedding table is gathered, so only the rows of the step's tokens are read (GPT-2
    also gathers its position embeddings). With a Precision (see `sizes`), the matrices are
    counted at their format's bytes per weight, block scales included (Q4_1: 20 bytes per 32
    weights), and the norms, KV cache and activations at the activation dtype.
  * A mixture of experts (num_experts > 0; backend/roofline/moe.py): a token multiplies by its
    experts_per_token experts and the router, so the linear FLOPs count those; a step reads the
    shared matrices and the expected union of the experts its tokens were routed to, under
    uniform routing (a phase's steps priced at their mean tokens per step).
  * A shape whose layers differ (backend/shape.py's accounting): DeepSeek's first layers have a
    dense MLP of their own width and the rest are MoE layers with shared experts, which every
    token multiplies by and every step reads. Multi-head latent attention (kv_lora_rank > 0)
    multiplies by its down and up projections per token and prices attention in the absorbed
    form (attention_flops_per_pair).
  * Counted for the cost model's fixed terms, not as FLOPs or bytes: the step's (request, layer) pairs
    (an attention kernel's per-sequence work whatever its context) and, in an MoE, the rows each routed
    expert multiplies (a grouped GEMM of few rows per expert runs far below the peak).
  * KV cache bytes: each request reads the keys and values of its whole context and writes
    those of its new tokens; MLA's cache is one latent of kv_lora_rank + qk_rope_head_dim per
    token and layer. On a layer with a sliding window (Mistral every layer, Gemma and gpt-oss
    every other) a request's pairs and KV reads stop at the window: exactly in step_cost, which
    has each request's lengths; from the totals only (cost_of_totals, phase_cost) the window
    caps each token's pairs and each request's reads (totals_sums), exact for decode steps
    whose contexts reach the window and an overestimate otherwise.
  * The compute roof: each product at the peak of the unit that runs it (backend/roofline/roofs.py).
    Every function that predicts takes the run's `math` (a MatMath, or None: one peak, the
    run's precision's): the CPU kernels' bfloat16 path runs products of many rows on the bf16
    roof, so a prefill and a large decode batch are priced there, a small batch at fp32.
  * Activation bytes, a small term: the residual stream. Each layer's two sub-blocks
    (attention, MLP) read the hidden state and write it back, 4 x hidden per token per
    layer, plus the embedding output and, per logit row, the final hidden state read and
    the logits written. Intermediate tensors (q, k, v, the MLP's hidden, attention scores)
    are taken to stay on chip: in a decode step they are a few MB that live in the L2 cache
    or inside fused kernels. In a long prefill they do spill to memory, but prefill is
    compute-bound, so the bytes do not set its predicted time.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

from backend.errors import InputError
from backend.precision import Precision
from backend.roofline.moe import expected_experts, expert_params, moe_layers, unread_expert_params, unused_expert_params
from backend.roofline.attention import (  # noqa: F401 -- kv_heads_for_sharding: part of this module's face
    attention_flops_per_pair, capped_sum, kv_heads_for_sharding, layer_sums, totals_sums, windowed_layers,
)
from backend.shape import kv_elements_per_token, layer_matrix_params, small_params
from backend.summary import Summary
from backend.roofline.roofs import compute_key, compute_seconds, effective_peak

if TYPE_CHECKING:
    from backend.kernels.matmath import MatMath
    from backend.shape import ModelShape
    from backend.roofline.profiles import GpuProfile

CROSSOVER_CAP = 1 << 20   # crossover_batch's answer when decode never turns compute-bound


class Bound(str, Enum):
    COMPUTE = "compute"
    MEMORY = "memory"


@dataclass(slots=True, frozen=True)
class StepCost:
    flops: float
    bytes: float
    weight_bytes: float
    kv_bytes: float
    activation_bytes: float
    linear_flops: float = 0.0
    attention_flops: float = 0.0
    head_flops: float = 0.0
    rows: float = 0.0          # rows of the layers' products per step: the step's tokens
    head_rows: float = 0.0     # rows of the LM head's product per step: its logit rows
    expert_weight_bytes: float = 0.0   # the routed experts' part of weight_bytes (what expert parallelism splits)
    expert_flops: float = 0.0          # the routed experts' part of linear_flops
    request_layers: float = 0.0        # (request, layer) pairs: the attention kernels' per-sequence work
    expert_rows: float = 0.0           # rows each routed expert multiplies per step (mean, uniform routing)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/byte."""
        return self.flops / self.bytes


@dataclass(slots=True, frozen=True)
class Prediction:
    time_s: float
    compute_s: float   # FLOPs / peak FLOP/s
    memory_s: float    # bytes / bandwidth
    bound: Bound


class Utilization(NamedTuple):
    """A tuple so callers can unpack it: flops, bytes_s, mfu, mbu = utilization(...)."""

    achieved_flops: float    # FLOP/s
    achieved_bytes_s: float  # bytes/s
    mfu: float               # achieved FLOP/s / peak
    mbu: float               # achieved bytes/s / bandwidth


def _is_gpt2(shape: ModelShape) -> bool:
    return shape.arch == "gpt2"


def linear_params_per_layer(shape: ModelShape) -> int:
    """Weights of a layer's matrices (no biases or norms), an MoE's every expert and router included.

    A shape whose layers differ (DeepSeek's dense first layers) gets their mean, rounded: use
    matrix_params for an exact total."""
    return round(layer_matrix_params(shape) / shape.num_layers)


def layer_params(shape: ModelShape) -> int:
    """Every parameter of one layer: matrices, biases and norms (as ModelShape.num_params counts); the mean
    over the layers where they differ."""
    return round((layer_matrix_params(shape) + small_params(shape)) / shape.num_layers)


def matrix_params(shape: ModelShape) -> int:
    """Every matrix a step multiplies by at the matrices' precision: all layers' and the LM head (vocab x hidden)."""
    return layer_matrix_params(shape) + shape.vocab_size * shape.hidden_size


def sizes(dtype_bytes: int | Precision) -> tuple[float, int]:
    """(bytes per matrix weight, bytes per activation and KV element) for a byte count or a Precision.

    Every cost function takes either: a plain count prices weights, KV and activations alike;
    a Precision prices the matrices at its format's bytes (block scales included) and the rest
    at its activation dtype. Norms and the gathered embedding rows stay at the activation dtype."""
    if isinstance(dtype_bytes, Precision):
        return dtype_bytes.weight_bytes, dtype_bytes.activation_bytes
    if dtype_bytes <= 0:
        raise InputError(f"dtype_bytes must be positive, got {dtype_bytes}")
    return float(dtype_bytes), int(dtype_bytes)


class _ShapeTerms(NamedTuple):
    """What _cost needs of a shape that does not depend on the step: counted once per shape."""

    sparse: int                       # MoE layers
    routed_per_token: float           # routed experts' weights a token multiplies by, over the layers
    used_per_token: float             # every matrix weight a token multiplies by, over the layers
    flops_per_pair: float             # attention FLOPs per (query, key) pair in one layer
    matrices: float                   # the layers' matrices and the LM head
    small: float                      # norms and biases, the final norm included
    all_experts: float                # every routed expert's weights, over the layers
    kv_elements_per_layer_token: float
    gpt2: bool


def _count_terms(shape) -> _ShapeTerms:
    sparse = moe_layers(shape)
    gpt2 = _is_gpt2(shape)
    d = shape.hidden_size
    return _ShapeTerms(
        sparse=sparse, routed_per_token=sparse * getattr(shape, "experts_per_token", 0) * expert_params(shape),
        used_per_token=layer_matrix_params(shape) - sparse * unused_expert_params(shape),
        flops_per_pair=attention_flops_per_pair(shape), matrices=matrix_params(shape),
        small=small_params(shape) + (2 * d if gpt2 else d),
        all_experts=sparse * getattr(shape, "num_experts", 0) * expert_params(shape) if sparse else 0.0,
        kv_elements_per_layer_token=kv_elements_per_token(shape) / shape.num_layers, gpt2=gpt2)


_count_terms_cached = lru_cache(maxsize=64)(_count_terms)


def _terms(shape) -> _ShapeTerms:
    """The shape's step-independent terms: cached for a ModelShape (the simulator prices thousands of steps
    of one), counted afresh for anything else with its attributes (a run.json's shape)."""
    try:
        return _count_terms_cached(shape)
    except TypeError:   # not hashable
        return _count_terms(shape)


def _cost(shape: ModelShape, dtype_bytes: int | Precision, tokens: int, layer_pairs: float, kv_read: float,
          logit_rows: int, steps: int = 1, requests: int | None = None) -> StepCost:
    """The cost of `steps` steps from their totals: tokens, attention (query, key) pairs summed over the
    layers, KV tokens read summed over the layers.

    Everything is linear in the totals but the weights, which every step reads once: a
    phase's cost is this over its steps' sums. `requests` defaults to the logit rows (one per request).
    """
    matrix_bytes, element_bytes = sizes(dtype_bytes)
    d, layers, vocab = shape.hidden_size, shape.num_layers, shape.vocab_size
    t = _terms(shape)
    sparse = t.sparse
    routed_flops = 2 * t.routed_per_token * tokens
    linear_flops = 2 * t.used_per_token * tokens
    attention_flops = t.flops_per_pair * layer_pairs
    head_flops = 2 * d * vocab * logit_rows

    gathered_rows = 2 * tokens if t.gpt2 else tokens   # GPT-2: token + position rows
    unread = sparse * unread_expert_params(shape, tokens / steps) if sparse else 0.0   # experts no token was routed to
    matrices = t.matrices - unread                   # the layers' and the head's
    weight_bytes = steps * (matrices * matrix_bytes + t.small * element_bytes) + gathered_rows * d * element_bytes
    expert_bytes = steps * (t.all_experts - unread) * matrix_bytes if sparse else 0.0

    # KV: each layer reads its keys and values (MLA: its latent) of the context it attends to, and writes the new tokens'
    kv_element = dtype_bytes.kv_bytes if isinstance(dtype_bytes, Precision) else element_bytes   # --kv-dtype fp8: 1
    kv_per_layer_token = t.kv_elements_per_layer_token * kv_element
    kv_bytes = (kv_read + tokens * layers) * kv_per_layer_token

    # embedding output, the residual stream through every layer, and per logit row the final hidden state and logits
    activation_elements = tokens * (d + 4 * d * layers) + logit_rows * (d + vocab)
    activation_bytes = activation_elements * element_bytes

    return StepCost(
        flops=float(linear_flops + attention_flops + head_flops),
        bytes=float(weight_bytes + kv_bytes + activation_bytes),
        weight_bytes=float(weight_bytes), kv_bytes=float(kv_bytes), activation_bytes=float(activation_bytes),
        linear_flops=float(linear_flops), attention_flops=float(attention_flops), head_flops=float(head_flops),
        rows=tokens / steps, head_rows=logit_rows / steps,
        expert_weight_bytes=float(expert_bytes), expert_flops=float(routed_flops),
        request_layers=float((logit_rows if requests is None else requests) * layers),
        expert_rows=_rows_per_expert(shape, tokens / steps) if sparse else 0.0,
    )


def _rows_per_expert(shape, tokens: float) -> float:
    """The rows each expert a step's tokens were routed to multiplies, on average (uniform routing): one in a
    batch-1 decode step, tokens x k / experts in a long prefill."""
    k = shape.experts_per_token
    return tokens * k / max(expected_experts(shape.num_experts, k, tokens), 1.0)


def step_cost(shape: ModelShape, dtype_bytes: int | Precision, new_tokens: list[int], context: list[int],
              logit_rows: int | None = None) -> StepCost:
    """Cost of one step: request i adds new_tokens[i] tokens and attends to context[i] tokens
    (its cached tokens plus the new ones). logit_rows defaults to one per request.

    On a sliding-window layer the query at position p sees min(p + 1, window) keys, and the request
    reads the KV of its last window + n - 1 tokens only."""
    if len(new_tokens) != len(context):
        raise InputError(f"step_cost: {len(new_tokens)} new-token counts but {len(context)} context lengths")
    if not new_tokens:
        raise InputError("step_cost: a step needs at least one request")
    sizes(dtype_bytes)   # refuses a count that is not positive
    _, window = windowed_layers(shape)
    pairs = window_pairs = window_context = 0
    for n, c in zip(new_tokens, context):
        if n < 1 or c < n:
            raise InputError(f"step_cost: a request needs new tokens >= 1 and context >= new tokens, got {n} and {c}")
        pairs += n * (c - n) + n * (n + 1) // 2
        if window:
            window_pairs += capped_sum(c - n + 1, c, window)   # query p (0-based) sees min(p + 1, window) keys
            window_context += min(c, window + n - 1)
    rows = len(new_tokens) if logit_rows is None else logit_rows
    layer_pairs, kv_read = layer_sums(shape, pairs, sum(context), window_pairs, window_context)
    return _cost(shape, dtype_bytes, sum(new_tokens), layer_pairs, kv_read, rows, requests=len(new_tokens))


def cost_of_totals(shape: ModelShape, dtype_bytes: int | Precision, tokens: int, pairs: float,
                   context_tokens: int, logit_rows: int) -> StepCost:
    """One step's cost from its totals (as a StepRecord has them; pairs from step_pairs)."""
    sizes(dtype_bytes)
    layer_pairs, kv_read = totals_sums(shape, tokens, pairs, context_tokens, logit_rows)
    return _cost(shape, dtype_bytes, tokens, layer_pairs, kv_read, logit_rows)


def predict(cost: StepCost, profile: GpuProfile, dtype, math: MatMath | None = None) -> Prediction:
    """The roofline: the step takes as long as the slower of its compute (each product at its unit's
    peak, `math`) and its memory traffic."""
    compute_s = compute_seconds(cost, profile, dtype, math)
    memory_s = cost.bytes / profile.bandwidth_bytes_per_s
    bound = Bound.COMPUTE if compute_s > memory_s else Bound.MEMORY
    return Prediction(time_s=max(compute_s, memory_s), compute_s=compute_s, memory_s=memory_s, bound=bound)


def predict_prefill(shape: ModelShape, dtype_bytes: int, prompt_len: int, profile: GpuProfile, dtype,
                    math: MatMath | None = None) -> Prediction:
    """TTFT of one request: the prefill step over its whole prompt (which yields the first token)."""
    return predict(step_cost(shape, dtype_bytes, [prompt_len], [prompt_len]), profile, dtype, math)


def _decode_cost(shape: ModelShape, dtype_bytes: int, batch: int, context: int) -> StepCost:
    if batch < 1 or context < 1:
        raise InputError(f"decode step needs batch >= 1 and context >= 1, got {batch} and {context}")
    # each of the batch's requests: one new token attending to `context` tokens
    _, window = windowed_layers(shape)
    capped = batch * min(context, window) if window else 0   # a sliding layer's pairs and KV reads, exactly
    layer_pairs, kv_read = layer_sums(shape, batch * context, batch * context, capped, capped)
    return _cost(shape, dtype_bytes, tokens=batch, layer_pairs=layer_pairs, kv_read=kv_read, logit_rows=batch)


def predict_decode(shape: ModelShape, dtype_bytes: int, batch: int, context: int, profile: GpuProfile,
                   dtype, math: MatMath | None = None) -> Prediction:
    """TPOT: one decode step of `batch` requests, each attending to `context` tokens (its new one included)."""
    return predict(_decode_cost(shape, dtype_bytes, batch, context), profile, dtype, math)


def crossover_batch(shape: ModelShape, dtype_bytes: int, context: int, profile: GpuProfile, dtype,
                    math: MatMath | None = None) -> int:
    """The smallest batch from which every decode step is compute-bound, or CROSSOVER_CAP if none is.

    Under one roof FLOPs and bytes both grow linearly with the batch, so the intensity is
    monotonic in it and a bisection finds the flip. With a long context the KV reads grow as
    fast as the FLOPs and decode may never turn compute-bound. Under bfloat16 math the roof
    rises at min_rows (the batches from there run on the bf16 unit): each range of batches is
    bisected under its own roof, and a batch compute-bound at fp32 just below min_rows is
    memory-bound again above it until the bf16 crossover.
    """
    def is_compute(batch: int) -> bool:
        return predict(_decode_cost(shape, dtype_bytes, batch, context), profile, dtype, math).bound is Bound.COMPUTE

    def first_compute(low: int, high: int) -> int | None:
        """The first compute-bound batch in [low, high], one roof over the range; None if none is."""
        if not is_compute(high):
            return None
        while low < high:   # invariant: the answer lies in [low, high]
            mid = (low + high) // 2
            if is_compute(mid):
                high = mid
            else:
                low = mid + 1
        return low

    two_roofs = compute_key(profile, dtype, math, 1) != compute_key(profile, dtype, math, CROSSOVER_CAP)
    switch = math.min_rows if two_roofs else 1   # the first batch on the upper roof
    upper = first_compute(switch, CROSSOVER_CAP)
    if upper is None:
        return CROSSOVER_CAP
    if upper > switch or switch == 1:
        return upper
    lower = first_compute(1, switch - 1)   # compute-bound from min_rows on: maybe from below it already
    return upper if lower is None else lower


def utilization(cost: StepCost, measured_s: float, profile: GpuProfile, dtype,
                math: MatMath | None = None) -> Utilization:
    """Achieved FLOP/s and bytes/s of a measured step, and their fractions of the profile's peaks (for the
    FLOPs, the peaks of the units that ran them: `math`)."""
    if not measured_s > 0:
        raise InputError(f"a measured step time must be positive, got {measured_s}")
    achieved_flops = cost.flops / measured_s
    achieved_bytes_s = cost.bytes / measured_s
    return Utilization(
        achieved_flops=achieved_flops,
        achieved_bytes_s=achieved_bytes_s,
        mfu=achieved_flops / effective_peak(cost, profile, dtype, math),
        mbu=achieved_bytes_s / profile.bandwidth_bytes_per_s,
    )


def step_pairs(requests, tokens, context_tokens):
    """Attention (query, key) pairs of a step known only by its totals, as a StepRecord gives them.

    Exact when the step's requests share one length: every decode step (one new token each, so
    the pairs are the context tokens) and a batch of equal prompts. Otherwise an estimate that
    splits the tokens and the context evenly among the requests; it undercounts the causal
    triangles of unequal prompts, a small term next to the matmuls of a prefill. Works
    elementwise on numpy arrays as on numbers.
    """
    k = requests + (requests == 0)                  # a step with no request adds nothing; no division by zero
    cached = (context_tokens - tokens) * (context_tokens > tokens)
    return tokens * cached / k + tokens * (tokens / k + 1) / 2


@dataclass(slots=True)
class PhaseTotals:
    """Sums over one phase's steps of what their roofline cost depends on (phase_cost turns them into one)."""

    steps: int = 0
    tokens: int = 0            # new tokens processed
    pairs: float = 0.0         # attention (query, key) pairs, by step_pairs
    context_tokens: int = 0
    logit_rows: int = 0        # one per request per step (an intermediate prefill chunk needs none: overcounted)
    time_ms: float = 0.0

    def add(self, steps: int, tokens: int, pairs: float, context_tokens: int, logit_rows: int,
            time_ms: float) -> None:
        self.steps += int(steps)
        self.tokens += int(tokens)
        self.pairs += float(pairs)
        self.context_tokens += int(context_tokens)
        self.logit_rows += int(logit_rows)
        self.time_ms += float(time_ms)

    def add_step(self, requests: int, tokens: int, context_tokens: int, duration_ms: float) -> None:
        self.add(1, tokens, step_pairs(requests, tokens, context_tokens), context_tokens, requests, duration_ms)

    def to_summary(self, phase: str) -> dict[str, float]:
        """The summary.csv entries of a phase ("prefill" or "decode"; its time is `{phase}_time_ms` already)."""
        return {f"{phase}_steps": self.steps, f"{phase}_tokens": self.tokens,
                f"{phase}_context_tokens": self.context_tokens, f"{phase}_attention_pairs": self.pairs,
                f"{phase}_logit_rows": self.logit_rows}

    @classmethod
    def from_summary(cls, summary: Summary, phase: str) -> PhaseTotals | None:
        """The totals back from a summary; None where it lacks them (a remote run, an older run folder)."""
        s = summary
        values = ([s.prefill_steps, s.prefill_tokens, s.prefill_attention_pairs, s.prefill_context_tokens,
                   s.prefill_logit_rows, s.prefill_time_ms] if phase == "prefill" else
                  [s.decode_steps, s.decode_tokens, s.decode_attention_pairs, s.decode_context_tokens,
                   s.decode_logit_rows, s.decode_time_ms])
        if any(v is None or v != v for v in values):   # missing or NaN
            return None
        steps, tokens, pairs, context, rows, time_ms = values
        return cls(int(steps), int(tokens), float(pairs), int(context), int(rows), float(time_ms))


def phase_cost(shape: ModelShape, dtype_bytes: int, totals: PhaseTotals) -> StepCost:
    """The FLOPs and bytes of all of a phase's steps together."""
    layer_pairs, kv_read = totals_sums(shape, totals.tokens, totals.pairs, totals.context_tokens,
                                        totals.logit_rows)
    return _cost(shape, dtype_bytes, totals.tokens, layer_pairs, kv_read, totals.logit_rows, steps=totals.steps)


@dataclass(slots=True, frozen=True)
class PhaseRoofline:
    """Where a measured phase sits on a device's roofline."""

    flops_per_s: float     # achieved: the phase's FLOPs over its measured time
    bytes_per_s: float
    intensity: float       # FLOP/byte
    ridge: float           # the profile's ridge point for the roof the phase ran under, FLOP/byte
    bound: Bound           # which roof the intensity puts the phase under
    mfu: float             # flops_per_s / the profile's peak
    mbu: float             # bytes_per_s / the profile's bandwidth

    @property
    def peak_share(self) -> float:
        """The measured rate as a fraction of the roof that bounds the phase."""
        return self.mfu if self.bound is Bound.COMPUTE else self.mbu


def phase_roofline(shape: ModelShape, dtype, totals: PhaseTotals | None,
                   profile: GpuProfile | None, math: MatMath | None = None) -> PhaseRoofline | None:
    """A measured phase on a profile's roofline: achieved FLOP/s and bytes/s, intensity, bound, share of peak
    (of the roof of the units that ran its products, `math`; its steps' rows taken at their mean).

    The one place the CLI summary and the window's metrics panel take a phase's bound from.
    None when there is nothing to say: no steps of the phase, no time measured, no profile,
    or a profile without a peak for the run's dtype.
    """
    from backend.roofline.profiles import as_precision
    if totals is None or profile is None or totals.steps <= 0 or totals.tokens <= 0 or not totals.time_ms > 0:
        return None
    if not profile.has_peak(dtype):
        return None
    cost = phase_cost(shape, as_precision(dtype), totals)
    util = utilization(cost, totals.time_ms / 1000.0, profile, dtype, math)
    ridge = effective_peak(cost, profile, dtype, math) / profile.bandwidth_bytes_per_s
    return PhaseRoofline(flops_per_s=util.achieved_flops, bytes_per_s=util.achieved_bytes_s,
                         intensity=cost.intensity, ridge=ridge, bound=predict(cost, profile, dtype, math).bound,
                         mfu=util.mfu, mbu=util.mbu)
