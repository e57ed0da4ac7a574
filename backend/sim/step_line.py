"""A step's price as a function of its attention sums, for the simulator's hot path.

A simulated run's steps repeat their tokens and logit rows (a decode step of b requests: b and b; a
chunked step filled to its budget: the budget) but hardly ever their context: a 1,000-request run of
1,024/256 tokens prices some 13,000 distinct steps. Priced through the general chain (cost._cost ->
parallel.shard -> CostModel.cost_seconds) each costs tens of microseconds of Python, and most of that
arithmetic depends on the tokens and rows alone. A StepLine holds, for one (tokens, rows), every term
that does not depend on the attention pairs and KV reads, and replays only the rest: the same
operations in the same order on the same values, so its price is the chain's to the last bit.

That is a second copy of the chain's arithmetic, so it is never trusted blind: each line is checked
against the chain on its first step and on every CHECK_EVERY-th after, and a pricer whose line ever
differs prices every step through the chain from then on (the figures stay the chain's; only the
speed is lost). tests/sim/test_step_memo.py holds every line to the chain on varied shapes,
precisions and layouts, so a change to the chain's formulas that this copy misses fails there.
Only what the simulator runs takes this path: one roof (no CPU matrix-unit math).
"""
from __future__ import annotations

from backend.roofline.attention import layer_sums
from backend.roofline.cost import _rows_per_expert, _terms, sizes
from backend.roofline.moe import unread_expert_params

CHECK_EVERY = 64


class StepLine:
    """The roofline part of the price (CostModel.cost_seconds of the stage's sharded StepCost) of a step or
    microbatch of `tokens` tokens and `rows` logit rows, from its attention sums."""

    def __init__(self, pricer, tokens: int, rows: int):
        shape, prec, layout, model = pricer.shape, pricer.prec, pricer.layout, pricer.cost_model
        matrix_bytes, element_bytes = sizes(prec)
        d, layers, vocab = shape.hidden_size, shape.num_layers, shape.vocab_size
        t = _terms(shape)
        self.shape, self.layers, self.tokens = shape, layers, tokens
        # cost._cost with steps = 1: every term but attention's FLOPs and the KV bytes
        self.flops_per_pair = t.flops_per_pair
        routed_flops = 2 * t.routed_per_token * tokens
        self.linear = 2 * t.used_per_token * tokens
        self.head = 2 * d * vocab * rows
        gathered_rows = 2 * tokens if t.gpt2 else tokens
        unread = t.sparse * unread_expert_params(shape, tokens / 1) if t.sparse else 0.0
        weight = 1 * ((t.matrices - unread) * matrix_bytes + t.small * element_bytes) + gathered_rows * d * element_bytes
        expert = 1 * (t.all_experts - unread) * matrix_bytes if t.sparse else 0.0
        self.kv_per_layer_token = t.kv_elements_per_layer_token * prec.kv_bytes
        activation = (tokens * (d + 4 * d * layers) + rows * (d + vocab)) * element_bytes
        self.weight, self.activation = float(weight), float(activation)
        self.expert_weight, self.expert_flops = float(expert), float(routed_flops)
        # parallel.shard
        self.tp, self.sharded = layout.tp, layout.tp > 1 or layout.pp > 1
        if self.sharded:
            tp = layout.tp
            self.fraction = pricer.stage_layers / layers
            head_bytes = vocab * d * prec.weight_bytes
            self.kv_split = pricer.kv_split
            self.weight = (max(0.0, self.weight - head_bytes) * self.fraction + head_bytes) / tp
            self.activation = self.activation * self.fraction
            self.linear_s = float(self.linear) * self.fraction / tp
            self.head_s = float(self.head) / tp
            self.expert_weight = self.expert_weight * self.fraction / tp
            self.expert_flops = self.expert_flops * self.fraction / tp
        # CostModel.cost_seconds on one roof (roofs.compute_parts / compute_seconds with math None)
        self.serial = model.serial
        self.mfu, self.afu, self.efu = model.mfu, model.afu, model.efu or model.mfu
        expert_rows = _rows_per_expert(shape, tokens / 1) if t.sparse else 0.0
        if model.efu_rows and expert_rows > 0:   # few rows an expert: its grouped product further below the peak
            self.efu = self.efu * expert_rows / (expert_rows + model.efu_rows)
        self.request_layer_us = model.request_layer_us
        self.base = pricer.profile.peak_flops(prec)
        self.bandwidth = pricer.profile.bandwidth_bytes_per_s * model.mbu
        self.plain_bandwidth = pricer.profile.bandwidth_bytes_per_s
        self.mbu = model.mbu
        self.gemm_bytes = self.weight + self.activation

    def seconds(self, requests: int, pairs: int, context: int, window_pairs: int = 0, window_context: int = 0) -> float:
        """The roofline part of the step's price (CostModel.cost_seconds of the sharded StepCost)."""
        layer_pairs, kv_read = layer_sums(self.shape, pairs, context, window_pairs, window_context)
        request_layers = float(requests * self.layers)   # the attention kernels' per-sequence work
        if self.sharded:
            request_layers = request_layers * self.fraction
        fixed = self.request_layer_us * request_layers / 1e6
        attention = self.flops_per_pair * layer_pairs
        kv = float((kv_read + self.tokens * self.layers) * self.kv_per_layer_token)
        flops = float(self.linear + attention + self.head)
        attention = float(attention)
        if self.sharded:
            kv = kv * self.fraction / self.kv_split
            attention = attention * self.fraction / self.tp
            flops = self.linear_s + attention + self.head_s
            all_bytes = self.weight + kv + self.activation
        else:
            all_bytes = float(self.weight + kv + self.activation)
        if not self.serial:
            if self.mfu == self.afu == 1.0:
                compute = flops / self.base
            else:
                compute = (flops - attention) / (self.base * self.mfu) + attention / (self.base * self.afu)
            return max(compute, all_bytes / (self.plain_bandwidth * self.mbu)) + fixed
        products = flops - attention
        matmul_s, attention_s = products / self.base, attention / self.base
        expert_s = matmul_s * self.expert_flops / products if products > 0 else 0.0
        gemms = max((matmul_s - expert_s) / self.mfu + expert_s / self.efu, self.gemm_bytes / self.bandwidth)
        return gemms + max(attention_s / self.afu, kv / self.bandwidth) + fixed
