"""The simulator's price of one engine step: the roofline's FLOPs and bytes at achievable
fractions of a profile's peaks, plus the host's fixed costs.

    seconds = max(matmul FLOPs / (peak x mfu) + attention FLOPs / (peak x afu),
                  bytes / (bandwidth x mbu))
              + (step_ms + token_ms x tokens + request_ms x requests) / 1000
              + (layer_us [+ prefill_layer_us on a step that prefills]) x layers / 1e6
              + request_layer_us x requests x layers / 1e6

With `serial` = 1 the step is not one roofline but two kernels' in turn, as a GPU runs them: the
products (the weights and activations their traffic) and attention (the KV cache its traffic):

    seconds = max(matmul FLOPs / (peak x mfu) + expert FLOPs / (peak x efu), (weights + activations) / (bw x mbu))
              + max(attention FLOPs / (peak x afu), KV bytes / (bw x mbu)) + the overheads

A large decode batch is then compute-bound in its products and memory-bound in its attention, and
pays for both, which one roofline over the step hides (it overlaps them); a mixture of experts'
grouped products reach their own fraction of the peak (efu), which with efu_rows falls with the rows
each expert gets (efu x m / (m + efu_rows)). The CPU's fitted profiles and the
placeholders keep serial = 0.

The layer term is the fixed cost each layer adds to a step whatever its size (its kernels' launch
and tail latencies): what keeps a small model's decode step far above its weight-read time on a
big GPU (a 1B model's 2.5 GB read in 0.75 ms on an H100, its step several times that in engines).
A profile's [simulation] table may hold, per precision key, a sub-table of terms that precision
takes over the rest ([simulation.fp8]: FP8 GEMMs reach another fraction of their peak), and per engine
family a sub-table of host terms ([simulation.vllm]: backend/sim/engines.py; --engine picks one, vllm by default).
Tensor, pipeline and expert parallelism are priced around this (backend/sim/parallel.py): each
collective's fixed cost x link_latency_x, its bytes at link_eff of the link's bandwidth (pcie_link_eff over PCIe).

Each product's peak is its unit's (backend/roofline/roofs.py: a CPU's bf16 roof for the products
its bfloat16 path runs, given the run's math). The compute and the memory traffic overlap (the
slower one sets the time, as in the roofline); the overheads do not: kernel launches, the scheduler's bookkeeping, input preparation and
sampling run around the math. Attention has its own efficiency because its kernels reach a
different fraction of the peak than the big matmuls (on this project's CPU kernels, far less).

The terms come from the profile's [simulation] table: a GPU's datasheet profile carries none,
so `for_profile` gives placeholders in the range published serving measurements report, with
that source; `calibrate --fit` writes terms fitted to this machine's measured steps
(backend.sim.fit) into its profile. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from backend.errors import InputError
from backend.precision import Precision
from backend.roofline.cost import StepCost, cost_of_totals, step_cost, step_pairs
# Efficiencies are fractions of the profile's peaks. A datasheet peak is a ceiling (<= 1), but a
# calibrated profile's peak is one measured matmul (torch's), which tuned kernels can beat:
# fitted efficiencies up to MAX_EFFICIENCY are kept as measured, not clipped to 1.
from backend.roofline.profiles import (DTYPE_KEYS, FIT_BANDS, FIT_COUNTS, FIT_FACTS, MAX_EFFICIENCY,
                                      SIMULATION_TERMS as TERMS)
from backend.roofline.roofs import compute_parts, compute_seconds
from backend.sim.engines import parse_engine

if TYPE_CHECKING:
    from backend.kernels.matmath import MatMath
    from backend.roofline.profiles import GpuProfile

GPU_SOURCE = ("placeholders, not fitted: MFU 0.6 and MBU 0.8 are about what serving engines reach on "
              "datacenter GPUs in published measurements (large prefills at 50-60% of the dense peak, "
              "batch-1 decode at 70-80% of the bandwidth); attention at half the matmuls' rate; 0.2 ms of "
              "launches and scheduling per step")
CPU_SOURCE = ("placeholders, not fitted: a CPU engine's plain matmuls at 40% of the peak, 60% of the bandwidth, "
              "1 ms of host work per step; run `calibrate --fit RUN_DIR ...` to fit them to this machine")


@dataclass(slots=True, frozen=True)
class CostModel:
    """One step's time from its roofline cost; see the module's docstring for the formula."""

    mfu: float = 0.6               # matmuls' achievable fraction of the peak FLOP/s
    afu: float = 0.3               # attention's achievable fraction of the peak FLOP/s
    mbu: float = 0.8               # achievable fraction of the memory bandwidth
    step_ms: float = 0.2           # per step: kernel launches, scheduling, the host's bookkeeping
    token_ms: float = 0.0005       # per token processed: input preparation, embedding gather
    request_ms: float = 0.005      # per request in the step: sampling, detokenizing, its metadata
    layer_us: float = 0.0          # per layer per step: its kernels' launch and tail latencies
    prefill_layer_us: float = 0.0  # per layer of a step that prefills: a context phase's kernels, launched one
                                   # by one (decode steps replay a captured graph)
    link_eff: float = 1.0          # collectives and pipeline hops: the fraction of the link's bandwidth an
                                   # engine's all-reduces reach (NVLink, Infinity Fabric, RDMA)
    pcie_link_eff: float = 1.0     # the same over a PCIe link: GPUs without NVLink reduce through the host bridge
    link_latency_x: float = 1.0    # an engine's collective or hop takes this many times the link's nominal fixed
                                   # cost (profiles/links/: collective_us, us): its kernels' launch and barriers
    efu: float = 0.0               # with serial: routed experts' grouped matmuls' fraction of the peak (0: mfu)
    efu_rows: float = 0.0          # with efu: the rows per expert at which the experts reach half of efu (a grouped
                                   # GEMM of m rows an expert runs at efu x m / (m + efu_rows); 0: efu whatever m)
    request_layer_us: float = 0.0  # per request per layer of a step: its attention kernel's fixed work (the
                                   # per-sequence setup and reduction), whatever the KV bytes it reads
    serial: float = 0.0            # 1: the products and attention each at their own roofline, one after the other
    source: str = field(default=GPU_SOURCE, compare=False)   # where the terms come from

    @classmethod
    def for_profile(cls, profile: GpuProfile, prec: Precision | None = None, engine=None) -> CostModel:
        """The profile's own terms (fitted or written by hand; the engine family's host terms and then a
        precision's sub-table over the rest), else the placeholders for its kind. `engine`: an EngineFamily or
        its name (None: the default, vllm); a family without a sub-table takes the shared terms."""
        if profile.simulation:
            family = parse_engine(engine.value if hasattr(engine, "value") else engine)
            terms = {k: v for k, v in profile.simulation.items()   # the fit's facts: backend/sim/fitted.py
                     if not isinstance(v, dict) and k not in (*FIT_FACTS, *FIT_COUNTS, *FIT_BANDS)}
            own = profile.simulation.get(prec.compute) if prec is not None else None
            source = terms.pop("source", "") or f"the [simulation] table of profile {profile.key}"
            hosts = profile.simulation.get(family.value)
            if isinstance(hosts, dict):
                hosts = dict(hosts)
                source = f"{source}; engine {family.value}: " + \
                    (hosts.pop("source", "") or f"its [simulation.{family.value}] table")
                terms.update(hosts)
            elif any(isinstance(v, dict) and k not in DTYPE_KEYS for k, v in profile.simulation.items()):
                source = f"{source}; engine {family.value}: no terms of its own in this profile, the shared ones"
            if isinstance(own, dict):
                own = dict(own)
                source = own.pop("source", "") or f"{source}; its [simulation.{prec.compute}] table"
                terms.update(own)
            return cls.from_terms(terms, source)
        if is_cpu_profile(profile):
            return cls(mfu=0.4, afu=0.2, mbu=0.6, step_ms=1.0, token_ms=0.002, request_ms=0.02, source=CPU_SOURCE)
        return cls()

    @classmethod
    def from_terms(cls, terms: dict, source: str = "") -> CostModel:
        """A model from a plain table (a profile's [simulation], run.json's cost_model); one line for a bad one."""
        unknown = sorted(set(terms) - set(TERMS) - {"source", "fitted"})
        if unknown:
            raise InputError(f"cost model: unknown term {unknown[0]!r} (known: {', '.join(TERMS)})")
        model = cls(**{k: terms[k] for k in TERMS if k in terms}, source=source or terms.get("source", ""))
        model.validate()
        return model

    def terms(self) -> dict[str, float]:
        """The numeric terms, as run.json and the profile's [simulation] table hold them."""
        return {k: getattr(self, k) for k in TERMS}

    def with_source(self, source: str) -> CostModel:
        return replace(self, source=source)

    def validate(self) -> None:
        for name in ("efu", "serial"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_EFFICIENCY:
                raise InputError(f"cost model {name} must be a number in [0, {MAX_EFFICIENCY:g}], got {value!r}")
        for name in ("mfu", "afu", "mbu", "link_eff", "pcie_link_eff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_EFFICIENCY:
                raise InputError(f"cost model {name} must be a fraction of the peak in (0, {MAX_EFFICIENCY:g}], "
                                 f"got {value!r}")
        for name in ("step_ms", "token_ms", "request_ms", "layer_us", "prefill_layer_us", "efu_rows",
                     "request_layer_us", "link_latency_x"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                unit = {"efu_rows": "rows", "link_latency_x": "times"}.get(name) or \
                    ("microseconds" if name.endswith("_us") else "milliseconds")
                raise InputError(f"cost model {name} must be a number of {unit} >= 0, got {value!r}")

    def cost_seconds(self, cost: StepCost, profile: GpuProfile, prec: Precision, math: MatMath | None = None) -> float:
        """The roofline part of a step's time: the slower of its compute (each product at its unit's
        peak, backend.roofline.roofs) and its memory traffic -- over the whole step, or with `serial`
        over each of its two kinds of kernels in turn (module docstring)."""
        fixed = self.request_layer_us * cost.request_layers / 1e6
        if not self.serial:
            compute_s = compute_seconds(cost, profile, prec, math, self.mfu, self.afu)
            memory_s = cost.bytes / (profile.bandwidth_bytes_per_s * self.mbu)
            return max(compute_s, memory_s) + fixed
        matmul_s, attention_s = compute_parts(cost, profile, prec, math)
        products = cost.flops - cost.attention_flops
        expert_s = matmul_s * cost.expert_flops / products if products > 0 else 0.0
        efu = self.efu or self.mfu
        if self.efu_rows and cost.expert_rows > 0:
            efu = efu * cost.expert_rows / (cost.expert_rows + self.efu_rows)
        bandwidth = profile.bandwidth_bytes_per_s * self.mbu
        gemms = max((matmul_s - expert_s) / self.mfu + expert_s / efu,
                    (cost.weight_bytes + cost.activation_bytes) / bandwidth)
        attention = max(attention_s / self.afu, cost.kv_bytes / bandwidth)
        return gemms + attention + fixed

    def link_seconds(self, fixed_s: float, bytes_s: float, link) -> float:
        """A link's transfers as an engine runs them: `fixed_s` of the link's nominal fixed costs and `bytes_s`
        of its bytes at its nominal bandwidth (parallel.collective_parts), at this model's link terms."""
        eff = self.pcie_link_eff if link is not None and link.is_pcie else self.link_eff
        return fixed_s * self.link_latency_x + bytes_s / eff

    def overhead_seconds(self, tokens: int, requests: int) -> float:
        return (self.step_ms + self.token_ms * tokens + self.request_ms * requests) / 1000.0

    def layer_seconds(self, layers: int, prefill: bool = False) -> float:
        """The layers' fixed costs; `prefill`: the step holds a prompt's tokens (more than one of some request)."""
        return (self.layer_us + (self.prefill_layer_us if prefill else 0.0)) * layers / 1e6

    def step_seconds(self, shape, prec: Precision, profile: GpuProfile, new_tokens: list[int],
                     contexts: list[int], logit_rows: int | None = None, math: MatMath | None = None) -> float:
        """The price of one step: request i computes new_tokens[i] tokens attending to contexts[i]."""
        cost = step_cost(shape, prec, new_tokens, contexts, logit_rows)
        return (self.cost_seconds(cost, profile, prec, math) + self.overhead_seconds(sum(new_tokens), len(new_tokens))
                + self.layer_seconds(shape.num_layers, max(new_tokens) > 1))

    def record_seconds(self, shape, prec: Precision, profile: GpuProfile, step, math: MatMath | None = None) -> float:
        """The price of a recorded step (a StepRecord, or anything with its totals): what the
        simulator would have charged for it. Exact for decode steps and for equal prompts;
        unequal requests in one step are priced as if they shared its tokens and context evenly."""
        return self.cost_seconds(record_cost(shape, prec, step), profile, prec, math) + \
            self.overhead_seconds(step.num_tokens, step.num_requests) + \
            self.layer_seconds(shape.num_layers, step.num_tokens > step.num_requests)


def record_cost(shape, prec: Precision, step) -> StepCost:
    """The roofline cost of a recorded step from its totals (StepRecord's fields)."""
    pairs = step_pairs(step.num_requests, step.num_tokens, step.context_tokens)
    return cost_of_totals(shape, prec, step.num_tokens, pairs, step.context_tokens, step.num_requests)


def is_cpu_profile(profile: GpuProfile) -> bool:
    """The generic CPU profile, or a calibrated one of a CPU (GpuProfile.is_cpu)."""
    return profile.is_cpu
