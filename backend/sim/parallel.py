"""One model spread over devices: tensor, pipeline, expert and data parallelism, priced per step.

A replica is tp x pp devices (`--tp`, `--pp`); `--dp` replicas sit behind a router
(backend/sim/replicas.py). Within a replica:

  * Tensor parallelism splits every matrix tp ways (attention by heads, the MLP by its width, the
    LM head by the vocabulary): each device does 1/tp of the FLOPs and reads 1/tp of the weights
    and of the KV cache, whose heads split too -- down to one head a device: with fewer KV heads
    than devices each is replicated (GQA's 8 heads over 16 devices), and MLA's one latent is
    replicated on every device. The residual stream is whole on every device. Each layer ends its
    attention and its MLP with an all-reduce of the step's hidden states (tokens x hidden): a
    fixed collective cost (the link's collective_us) plus 2 (tp - 1) / tp of the bytes at the
    link's bandwidth, the ring's bus traffic. Nothing overlaps it: it sits between the layers.
  * Expert parallelism (a mixture of experts, `--ep`, ep dividing tp) gives each of ep groups of
    tp / ep devices a 1/ep share of the experts, whole. The bytes and FLOPs per device are
    tensor parallelism's (in expectation: uniform routing); what changes is the traffic: each MoE
    layer dispatches its tokens' hidden states to their experts' devices and combines them back,
    two all-to-alls of tokens x k x hidden x (ep - 1) / ep, instead of the MLP's all-reduce (which
    stays within a group of more than one device).
  * Pipeline parallelism puts ceil(layers / pp) layers on each of pp stages (the LM head on the
    last, the slowest). A step's requests go through as m = min(pp, requests) microbatches; a
    stage works on one at a time, so a round that advances every request takes
        sum_i stage(mb_i) + (pp - m) x max_i stage(mb_i) + (pp - 1) x hop
    -- pp stage-times when the pipe is full (m = pp), and the same when a lone request walks the
    stages (m = 1): a pipeline buys memory and throughput, never one request's latency. The
    (pp - m) term is the bubble, the hop each microbatch's hidden state crossing to the next stage.

No torch here; `StepPricer` is what the simulator's runner calls.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from backend.config import ROUTERS, Deployment
from backend.errors import InputError
from backend.sim.step_line import CHECK_EVERY, StepLine
from backend.roofline.cost import StepCost, _cost as cost_of_sums, step_cost
from backend.roofline.attention import capped_sum, kv_heads_for_sharding, layer_sums, windowed_layers
from backend.sim.links import KVLink, device_link
from backend.shape import is_mla, moe_layers

if TYPE_CHECKING:
    from backend.precision import Precision
    from backend.roofline.profiles import GpuProfile
    from backend.sim.step_time import CostModel


def kv_shards(shape, tp: int) -> int:
    """Ways the KV cache splits over tp devices: its heads', at most; MLA's latent not at all."""
    return max(1, min(tp, kv_heads_for_sharding(shape)))


def _whole(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"--{name} must be a whole number of devices >= 1, got {value!r}")
    return value


def validate(deployment: Deployment, shape, model_name: str = "the model") -> None:
    """One line for a layout the model cannot take: TP that does not divide its heads, more stages than
    layers, EP on a dense model or not dividing TP or the experts."""
    tp, pp = _whole("tp", deployment.tp), _whole("pp", deployment.pp)
    _whole("dp", deployment.dp)
    ep = _whole("ep", deployment.ep)
    for name in ("prefill_tp", "decode_tp"):
        value = getattr(deployment, name)
        if value is not None:
            check_tp(_whole(name.replace("_", "-"), value), shape, model_name, f"--{name.replace('_', '-')}")
    if deployment.link is not None:
        from backend.sim.links import known_links
        if deployment.link not in known_links():
            raise InputError(f"--link: unknown link {deployment.link!r} (known: {', '.join(known_links())})")
    if deployment.router not in ROUTERS:
        raise InputError(f"--router {deployment.router!r}: use one of {', '.join(ROUTERS)}")
    check_tp(tp, shape, model_name, "--tp")
    if pp > shape.num_layers:
        raise InputError(f"--pp {pp}: {model_name} has only {shape.num_layers} layers to put in stages")
    if ep > 1:
        experts = getattr(shape, "num_experts", 0)
        if not experts:
            raise InputError(f"--ep {ep}: {model_name} is dense; expert parallelism needs a mixture-of-experts model")
        if tp % ep:
            raise InputError(f"--ep {ep} spreads the experts over the devices of a tensor-parallel group: it must "
                             f"divide --tp (give --tp {ep * math.ceil(tp / ep) if tp > 1 else ep})")
        if experts % ep:
            raise InputError(f"--ep {ep} does not divide {model_name}'s {experts} experts")


def check_tp(tp: int, shape, model_name: str, flag: str) -> None:
    if shape.num_heads % tp:
        raise InputError(f"{flag} {tp} does not divide {model_name}'s {shape.num_heads} attention heads")
    kv = shape.num_kv_heads
    if not is_mla(shape) and kv % tp and tp % kv:
        raise InputError(f"{flag} {tp} and {model_name}'s {kv} KV heads: one must divide the other")


@dataclass(slots=True, frozen=True)
class Layout:
    """A replica's devices and the link between them (validated)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    link: KVLink | None = None

    @property
    def devices(self) -> int:
        return self.tp * self.pp

    @classmethod
    def of(cls, deployment: Deployment, profile, tp: int | None = None) -> Layout:
        """The replica of a deployment (tp: a disaggregated pool's own); its link resolved on the profile."""
        tp = deployment.tp if tp is None else tp
        ep = deployment.ep if tp % max(1, deployment.ep) == 0 else 1
        needs_link = tp > 1 or deployment.pp > 1
        return cls(tp, deployment.pp, ep, device_link(deployment.link, profile) if needs_link else None)

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep,
                "link": self.link.as_dict() if self.link is not None else None}


def replica_profile(profile, tp: int = 1, pp: int = 1):
    """The roofline of a simulated run's replica (run.json's "deployment", a config's): tp x pp of the
    profile's devices as one, every peak and the bandwidth times the devices; the profile itself for one
    device."""
    devices = int(tp or 1) * int(pp or 1)
    if devices <= 1:
        return profile
    return replace(profile, name=f"{devices} x {profile.name}", memory_gb=profile.memory_gb * devices,
                   bandwidth_gbs=profile.bandwidth_gbs * devices,
                   tflops={k: v * devices for k, v in profile.tflops.items()})


def stage_layers(shape, pp: int) -> int:
    """Layers of the largest stage."""
    return math.ceil(shape.num_layers / pp)


def shard(cost: StepCost, shape, prec: Precision, layout: Layout) -> StepCost:
    """One device's share of a step on the slowest stage: 1/tp of the matrices' FLOPs and bytes, of
    attention and of the KV cache (by heads), the stage's layers of 1/pp, the LM head on it too."""
    tp, pp = layout.tp, layout.pp
    if tp == 1 and pp == 1:
        return cost
    fraction = stage_layers(shape, pp) / shape.num_layers        # of the layers' work on the slowest stage
    head_bytes = shape.vocab_size * shape.hidden_size * prec.weight_bytes
    layer_bytes = max(0.0, cost.weight_bytes - head_bytes)
    weight_bytes = (layer_bytes * fraction + head_bytes) / tp
    kv_bytes = cost.kv_bytes * fraction / kv_shards(shape, tp)
    activation_bytes = cost.activation_bytes * fraction            # the residual stream: whole on every rank
    linear = cost.linear_flops * fraction / tp
    attention = cost.attention_flops * fraction / tp
    head = cost.head_flops / tp
    return StepCost(flops=linear + attention + head, bytes=weight_bytes + kv_bytes + activation_bytes,
                    weight_bytes=weight_bytes, kv_bytes=kv_bytes, activation_bytes=activation_bytes,
                    linear_flops=linear, attention_flops=attention, head_flops=head, rows=cost.rows,
                    head_rows=cost.head_rows, expert_weight_bytes=cost.expert_weight_bytes * fraction / tp,
                    expert_flops=cost.expert_flops * fraction / tp,
                    request_layers=cost.request_layers * fraction, expert_rows=cost.expert_rows)


def collective_parts(shape, prec: Precision, layout: Layout, tokens: int) -> tuple[float, float]:
    """A stage's all-reduces (TP) and all-to-alls (EP) for one pass of `tokens` tokens, at the link's nominal
    figures: (seconds of their fixed costs, seconds of their bytes at the link's bandwidth)."""
    tp, ep, link = layout.tp, layout.ep, layout.link
    if tp == 1 or link is None:
        return 0.0, 0.0
    layers = stage_layers(shape, layout.pp)
    moe = min(layers, math.ceil(moe_layers(shape) / layout.pp))
    hidden = tokens * shape.hidden_size * prec.activation_bytes     # one all-reduce's payload, bytes
    bus, fixed = link.gbs * 1e9, link.collective_us * 1e-6
    reduces = 2 * layers                                            # after attention, after the MLP
    ring = 2 * (tp - 1) / tp * hidden / bus                         # one all-reduce's bytes over the ring
    if ep <= 1:
        return reduces * fixed, reduces * ring
    routed = hidden * shape.experts_per_token * (ep - 1) / ep
    group = tp // ep                                                # an MoE layer's MLP all-reduce spans tp / ep
    expert_reduce = (fixed, 2 * (group - 1) / group * hidden / bus) if group > 1 else (0.0, 0.0)
    fixed_s = layers * fixed + moe * (2 * fixed + expert_reduce[0]) + (layers - moe) * fixed
    bytes_s = layers * ring + moe * (2 * routed / bus + expert_reduce[1]) + (layers - moe) * ring
    return fixed_s, bytes_s


def collective_seconds(shape, prec: Precision, layout: Layout, tokens: int, model=None) -> float:
    """collective_parts priced at a cost model's link terms (CostModel.link_seconds; None: the nominal link)."""
    fixed_s, bytes_s = collective_parts(shape, prec, layout, tokens)
    return fixed_s + bytes_s if model is None else model.link_seconds(fixed_s, bytes_s, layout.link)


def hop_seconds(shape, prec: Precision, layout: Layout, tokens: int, model=None) -> float:
    """A microbatch's hidden states crossing from one pipeline stage to the next."""
    if layout.pp == 1 or layout.link is None:
        return 0.0
    fixed_s, bytes_s = layout.link.parts(tokens * shape.hidden_size * prec.activation_bytes)
    return fixed_s + bytes_s if model is None else model.link_seconds(fixed_s, bytes_s, layout.link)


def microbatches(new_tokens: list[int], contexts: list[int], pp: int) -> list[tuple[list[int], list[int], list[int]]]:
    """The step's requests dealt into min(pp, requests) microbatches: (indices, new tokens, contexts)."""
    m = max(1, min(pp, len(new_tokens)))
    groups = [([], [], []) for _ in range(m)]
    for i, (n, c) in enumerate(zip(new_tokens, contexts)):
        g = groups[i % m]
        g[0].append(i)
        g[1].append(n)
        g[2].append(c)
    return groups


def stage_key(new_tokens: list[int], contexts: list[int], rows: int, prefill: bool,
              window: int | None) -> tuple | None:
    """What a stage's price depends on: the sums step_cost reduces a step's requests to (its tokens, the
    attention pairs of the causal mask, the context, and on sliding-window layers the capped pairs and
    reads: backend/roofline/cost.step_cost), the requests and logit rows, and whether the step holds a
    prompt. Equal keys cost the same to the last bit (tests/sim/test_step_memo.py holds every step of
    varied runs to step_cost's price). None for what step_cost refuses (it says why). A decode step's sums
    are C-level: one token a request, whose pairs are its context."""
    requests = len(new_tokens)
    if not requests or len(contexts) != requests:
        return None
    tokens, context = sum(new_tokens), sum(contexts)
    if tokens == requests and min(new_tokens) >= 1:   # one token each
        if min(contexts) < 1:
            return None
        pairs = context
    elif all(1 <= n <= c for n, c in zip(new_tokens, contexts)):
        pairs = sum(n * (c - n) + n * (n + 1) // 2 for n, c in zip(new_tokens, contexts))
    else:
        return None
    if not window:
        return tokens, requests, pairs, context, rows, prefill
    window_pairs = sum(capped_sum(c - n + 1, c, window) for n, c in zip(new_tokens, contexts))
    window_context = sum(min(c, window + n - 1) for n, c in zip(new_tokens, contexts))
    return tokens, requests, pairs, context, rows, prefill, window_pairs, window_context


class StepPricer:
    """The simulator's price of one step on a replica: each device's share of the roofline at the cost
    model's efficiencies, its collectives, the pipeline's rounds, and the host's fixed costs."""

    def __init__(self, shape, prec: Precision, profile: GpuProfile, cost_model: CostModel,
                 layout: Layout | None = None, math_=None):
        self.shape, self.prec, self.profile, self.cost_model = shape, prec, profile, cost_model
        self.layout = layout or Layout()
        self.math = math_
        # A run prices tens of thousands of steps, most of them decode steps that differ only in their
        # sums: each distinct stage (stage_key) is priced once, its fixed terms once per pricer.
        self._window = windowed_layers(shape)[1]
        self._stages: dict[tuple, float] = {}
        self._steps: dict[tuple, float] = {}
        self._lines: dict[tuple, StepLine] | None = {} if math_ is None else None   # by (tokens, rows); None: the chain
        self._lined = 0
        self._collectives: dict[int, float] = {}
        self.stage_layers = layers = stage_layers(shape, self.layout.pp)   # the slowest stage's (StepLine's too)
        self.kv_split = kv_shards(shape, self.layout.tp)
        self._layers = {False: cost_model.layer_seconds(layers, False), True: cost_model.layer_seconds(layers, True)}

    def stage_seconds(self, new_tokens: list[int], contexts: list[int], rows: int, prefill: bool = False) -> float:
        """One microbatch through the slowest stage: compute or memory, then its collectives."""
        key = stage_key(new_tokens, contexts, rows, prefill, self._window)
        if key is None:   # step_cost refuses it, in one line
            step_cost(self.shape, self.prec, new_tokens, contexts, rows)
        seconds = self._stages.get(key)
        if seconds is None:
            seconds = self._stages[key] = self._stage_seconds(key)
        return seconds

    def _stage_seconds(self, key: tuple) -> float:
        """A stage's price from its sums (stage_key), on the StepLine of its tokens and rows
        (backend/sim/step_line.py): checked against the chain on each line's first stage and every
        CHECK_EVERY-th after; one difference and this pricer keeps to the chain."""
        if self._lines is None:
            return self._chain_seconds(key)
        tokens, requests, pairs, context, rows, prefill, *window = key
        line = self._lines.get((tokens, rows))
        fresh = line is None
        if fresh:
            line = self._lines[(tokens, rows)] = StepLine(self, tokens, rows)
        seconds = line.seconds(requests, pairs, context, *window) + self._collective(tokens)
        seconds = seconds + self._layers[prefill]
        self._lined += 1
        if fresh or self._lined % CHECK_EVERY == 0:
            chain = self._chain_seconds(key)
            if chain != seconds:
                self._lines = None
                return chain
        return seconds

    def _chain_seconds(self, key: tuple) -> float:
        """A stage's price from its sums through the general chain: step_cost's arithmetic from where its loop ends."""
        tokens, requests, pairs, context, rows, prefill, *window = key
        layer_pairs, kv_read = layer_sums(self.shape, pairs, context, *(window or (0, 0)))
        cost = shard(cost_of_sums(self.shape, self.prec, tokens, layer_pairs, kv_read, rows, requests=requests),
                     self.shape, self.prec, self.layout)
        seconds = self.cost_model.cost_seconds(cost, self.profile, self.prec, self.math)
        seconds += self._collective(tokens)
        return seconds + self._layers[prefill]

    def seconds(self, new_tokens: list[int], contexts: list[int], logit_rows: list[bool] | None = None) -> float:
        """The step's time: request i computes new_tokens[i] tokens attending to contexts[i]; logit_rows[i]
        says whether it needs logits (None: every request). Without a pipeline the step is one stage, so
        the whole price is a function of its stage_key (whose tokens and requests say if it holds a prompt)."""
        if self.layout.pp > 1:
            return self._seconds(new_tokens, contexts, logit_rows)
        rows = len(new_tokens) if logit_rows is None else sum(logit_rows)
        key = stage_key(new_tokens, contexts, rows, None, self._window)
        seconds = self._steps.get(key)
        if seconds is None:
            seconds = self._seconds(new_tokens, contexts, logit_rows)
            if key is not None:
                self._steps[key] = seconds
        return seconds

    def _collective(self, tokens: int) -> float:
        collective = self._collectives.get(tokens)
        if collective is None:
            collective = self._collectives[tokens] = \
                collective_seconds(self.shape, self.prec, self.layout, tokens, self.cost_model)
        return collective

    def _seconds(self, new_tokens: list[int], contexts: list[int], logit_rows: list[bool] | None) -> float:
        needs = logit_rows if logit_rows is not None else [True] * len(new_tokens)
        overhead = self.cost_model.overhead_seconds(sum(new_tokens), len(new_tokens))
        prefill = max(new_tokens) > 1
        pp = self.layout.pp
        if pp == 1:
            return self.stage_seconds(new_tokens, contexts, sum(needs), prefill) + overhead
        groups = microbatches(new_tokens, contexts, pp)
        times = [self.stage_seconds(n, c, sum(needs[i] for i in idx), prefill) for idx, n, c in groups]
        hops = (pp - 1) * max(hop_seconds(self.shape, self.prec, self.layout, sum(n), self.cost_model)
                              for _, n, _ in groups)
        return sum(times) + (pp - len(groups)) * max(times) + hops + overhead
