"""Fit the simulator's cost-model terms to published figures (bench/sim_vs_published.py --fit).

Each fitted figure is simulated once with the profile's own terms while every step's roofline is
recorded: the seconds of its matmuls and of its attention at the peak, of its bytes at the full
bandwidth, of its collectives, its layers, tokens and requests. A candidate's price of that step is then

    max(dense matmuls / mfu + experts / efu', (weights + activations) / mbu) + max(attention / afu, KV / mbu)
        + collectives' fixed costs x link_latency_x + their bytes / (link_eff, or pcie_link_eff over PCIe)
        + (layer_us [+ prefill_layer_us on a step that prefills]) x layers
        + request_layer_us x requests x layers + step_ms + token_ms x tokens + request_ms x requests

(efu' = efu x m / (m + efu_rows) for m rows an expert gets; request_layer_us, efu_rows, link_latency_x and
pcie_link_eff are the candidate terms, at their placeholders (0, 0, 1, 1) and fitted only in the structures that
name them: "+attn-fixed", "+efu-rows", "+link-latency", "+pcie")

(the cost model with serial = 1: products and attention each at their own roofline, in turn; a
recorded base model without serial is checked with its own formula)

(StepPricer's formula for one pipeline stage, checked against the simulator's own price of every
recorded step), and the figure's metric moves with the time of the steps it is made of (a TTFT
with its prefill steps, an ITL with its decode steps, a batch's latency and throughput with all).
That is exact for a fixed batch and for one closed-loop user; for more users it is the first-order
change, and the reported errors always come from the full simulator afterwards.

The loss is the median absolute log error plus a quarter of the mean, minimized by Nelder-Mead in a
space that keeps the terms physical (efficiencies in [0.2, 0.95], overheads >= 0 and bounded).
First one set of terms shared by every figure; then, for each group of a structure (one per GPU
profile, or one per precision: fp8 against 16-bit) with at least MIN_PER_GROUP fitted figures,
its own efficiencies (mfu, afu, mbu, and in the "+efu" structures the experts' efu) over the shared
overheads; in the "+efu-by-precision" structures the experts' efu is one per precision (efu@fp8,
efu@16-bit), fitted with the shared terms (a profile carries the fp8 one in [simulation.fp8]). `select_structure` picks the
structure by 5-fold cross-validation on the fitted set alone: the held-out set plays no part.

Engines as a dimension (the "+engine" structures): after the shared fit, each engine family (backend/sim/engines.py,
read from the figure's source's `engine` text) with at least MIN_PER_ENGINE fitted figures gets its own host terms
(ENGINE_FIT: the fixed cost per step, per request and per layer; "+engine-links" adds the collectives' fixed-cost
multiple, link_latency_x), fitted on its own figures over the shared efficiencies. A family with fewer figures, or
none, takes the shared terms (fitted on every figure).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from backend.sim import parallel
from backend.sim.engines import EngineFamily, family_of
from backend.roofline.cost import step_cost
from backend.roofline.roofs import compute_seconds
from backend.sim.step_time import CostModel

EFFICIENCY = ("mfu", "afu", "mbu")
BOUNDS = {"mfu": (0.2, 0.95), "afu": (0.1, 0.95), "mbu": (0.2, 0.95), "efu": (0.05, 0.95), "step_ms": (0.0, 20.0),
          "token_ms": (0.0, 0.05), "request_ms": (0.0, 0.5), "layer_us": (0.0, 300.0), "prefill_layer_us": (0.0, 300.0),
          "link_eff": (0.05, 1.0), "request_layer_us": (0.0, 5.0), "efu_rows": (0.0, 1024.0),
          "link_latency_x": (0.2, 20.0), "pcie_link_eff": (0.05, 1.0)}
# not fitted: serial is structural (a GPU runs a step's products and attention as separate kernels). efu, the routed
# experts' own efficiency, is fitted (shared by every GPU): the fitted set holds 16 Mixtral figures since F46-F111
FIXED = {"serial": 1.0}
STARTS = {"efu": 0.5, "request_layer_us": 0.3, "efu_rows": 32.0}   # a term whose placeholder is 0 (unused) starts here
# a fraction whose placeholder is its bound (1) starts inside (a logit at the bound hardly moves)
INSIDE = {"link_eff": 0.9, "pcie_link_eff": 0.5}
EFU_STARTS = (0.5, 0.2)   # an efu per precision starts from each (an FP8 MoE kernel far below the dense one is a
                          # minimum Nelder-Mead misses from the higher start alone)
# the candidate terms, fitted only in the structures that name them
OPTIONAL = {"request_layer_us": "+attn-fixed", "efu_rows": "+efu-rows", "link_latency_x": "+link-latency",
            "pcie_link_eff": "+pcie"}
MIN_PER_GROUP = 6
# an engine family's own host terms need this many fitted figures of it (fewer: the shared terms); 5 lets the
# vLLM family (8 fitted figures: the nightly CI's and OCI's) keep its terms in most cross-validation folds
MIN_PER_ENGINE = 5
ENGINE_FIT = ("step_ms", "request_ms", "layer_us")
HUGE = 1e30


@dataclass(slots=True)
class Trace:
    """One figure's steps as roofline parts (numpy arrays, one entry per step) and its simulated metric."""

    figure: object
    base_value: float
    base_model: CostModel
    parts: dict[str, list[float]] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    _mask: np.ndarray | None = None
    _base: float = 0.0

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.parts.setdefault(key, []).append(value)

    def freeze(self) -> None:
        self.arrays = {k: np.asarray(v, dtype=float) for k, v in self.parts.items()}

    def step_seconds(self, terms: dict) -> np.ndarray:
        return price(self.arrays, terms)

    def relevant(self) -> np.ndarray:
        """The steps the figure's metric is made of."""
        fig, prefill = self.figure, self.arrays["is_prefill"] > 0
        if fig.metric == "ttft_ms":
            return prefill
        if fig.metric == "itl_ms" and fig.concurrency <= 1:
            return ~prefill
        return np.ones_like(prefill, dtype=bool)

    @property
    def base_seconds(self) -> float:
        """The relevant steps' seconds at the recorded terms (counted once: the fit asks thousands of times)."""
        if self._mask is None:
            self._mask = self.relevant()
            self._base = self.step_seconds(self.base_terms)[self._mask].sum()
        return self._base

    def predict(self, terms: dict) -> float:
        ratio = self.step_seconds(terms)[self._mask if self._mask is not None else self.relevant()].sum()
        return self.from_ratio(ratio / self.base_seconds)

    def from_ratio(self, ratio):
        """The metric when its steps take `ratio` times their recorded time."""
        return self.base_value / ratio if self.figure.metric.startswith("tok_s") else self.base_value * ratio

    @property
    def base_terms(self) -> dict:
        return self.base_model.terms()


def record(fig, simulate) -> Trace | None:
    """Simulate `fig` with its profile's terms, recording every step's parts (StepPricer.seconds wrapped)."""
    original = parallel.StepPricer.seconds
    trace: list[Trace] = []

    def recording(pricer, new_tokens, contexts, logit_rows=None):
        seconds = original(pricer, new_tokens, contexts, logit_rows)
        if not trace:
            trace.append(Trace(fig, 0.0, pricer.cost_model))
        if pricer.layout.pp != 1:
            raise NotImplementedError("the fit's step formula is one pipeline stage's (pp = 1)")
        needs = logit_rows if logit_rows is not None else [True] * len(new_tokens)
        shape, prec, layout, profile = pricer.shape, pricer.prec, pricer.layout, pricer.profile
        coll_fixed, coll_bytes = parallel.collective_parts(shape, prec, layout, sum(new_tokens))
        cost = parallel.shard(step_cost(shape, prec, new_tokens, contexts, sum(needs)), shape, prec, layout)
        matmul = compute_seconds(cost, profile, prec, pricer.math, 1.0, HUGE)
        products = cost.flops - cost.attention_flops
        bandwidth = profile.bandwidth_bytes_per_s
        parts = dict(matmul=matmul, experts=matmul * cost.expert_flops / products if products > 0 else 0.0,
                     attention=compute_seconds(cost, profile, prec, pricer.math, HUGE, 1.0),
                     memory=cost.bytes / bandwidth, gemm_memory=(cost.weight_bytes + cost.activation_bytes) / bandwidth,
                     kv_memory=cost.kv_bytes / bandwidth,
                     coll_fixed=coll_fixed, coll_bytes=coll_bytes, pcie=float(bool(layout.link and layout.link.is_pcie)),
                     layers=parallel.stage_layers(shape, layout.pp), tokens=sum(new_tokens),
                     requests=len(new_tokens), is_prefill=float(max(new_tokens) > 1),
                     request_layers=cost.request_layers, expert_rows=cost.expert_rows)
        trace[0].add(**parts)
        trace[0].add(seconds=seconds)
        return seconds

    parallel.StepPricer.seconds = recording
    try:
        result = simulate(fig)
    finally:
        parallel.StepPricer.seconds = original
    if result.simulated is None or not trace:
        return None
    t = trace[0]
    t.base_value = result.simulated
    t.freeze()
    check = t.step_seconds(t.base_terms)
    if not np.allclose(check, t.arrays["seconds"], rtol=1e-6, atol=1e-9):
        raise RuntimeError(f"{fig.id}: the fit's step formula no longer matches the simulator's price "
                           f"(StepPricer changed): update backend/sim/published_fit.py")
    return t


def price(a: dict[str, np.ndarray], terms: dict) -> np.ndarray:
    """Each step's seconds under `terms` (the module docstring's formula; StepPricer's, checked in `record`)."""
    mbu = terms["mbu"]
    if terms.get("serial"):
        efu = terms.get("efu", 0.0)   # a number, or one per step (an efu per precision: Stack.errors)
        efu = np.where(np.asarray(efu) > 0, efu, terms["mfu"])
        rows = terms.get("efu_rows", 0.0)
        if rows:   # a grouped GEMM of m rows an expert: efu x m / (m + efu_rows)
            m = a["expert_rows"]
            efu = np.where(m > 0, efu * m / (m + rows + (m <= 0)), efu)
        gemms = np.maximum((a["matmul"] - a["experts"]) / terms["mfu"] + a["experts"] / efu, a["gemm_memory"] / mbu)
        seconds = gemms + np.maximum(a["attention"] / terms["afu"], a["kv_memory"] / mbu)
    else:
        compute = a["matmul"] / terms["mfu"] + a["attention"] / terms["afu"]
        seconds = np.maximum(compute, a["memory"] / mbu)
    if terms.get("request_layer_us"):   # a fixed attention cost per request and layer
        seconds = seconds + terms["request_layer_us"] * a["request_layers"] / 1e6
    layer_us = terms.get("layer_us", 0.0) + terms.get("prefill_layer_us", 0.0) * a["is_prefill"]
    link_eff = np.where(a["pcie"] > 0, terms.get("pcie_link_eff", 1.0), terms.get("link_eff", 1.0))
    collectives = a["coll_fixed"] * terms.get("link_latency_x", 1.0) + a["coll_bytes"] / link_eff
    seconds = seconds + collectives + layer_us * a["layers"] / 1e6
    fixed = terms["step_ms"] + terms["token_ms"] * a["tokens"] + terms["request_ms"] * a["requests"]
    return seconds + fixed / 1e3


class Stack:
    """Many traces' relevant steps in one set of arrays, so a loss prices them all in one numpy pass (the
    same sums as Trace.predict, tens of times faster: the fit and its cross-validation call it thousands of times)."""

    def __init__(self, traces: list[Trace]):
        masks = [t.relevant() for t in traces]
        if not all(m.any() for m in masks):
            raise ValueError("a figure with no relevant step")
        self.arrays = {k: np.concatenate([t.arrays[k][m] for t, m in zip(traces, masks)]) for k in traces[0].arrays}
        self.starts = np.cumsum([0] + [int(m.sum()) for m in masks[:-1]])
        self.base = np.array([t.base_seconds for t in traces])
        self.base_value = np.array([t.base_value for t in traces])
        self.value = np.array([t.figure.value for t in traces])
        self.rate = np.array([t.figure.metric.startswith("tok_s") for t in traces])
        self.efu_names = [f"efu@{_by_precision(t.figure)}" for t, m in zip(traces, masks) for _ in range(int(m.sum()))]
        self.efu_keys = sorted(set(self.efu_names))
        self.efu_index = np.array([self.efu_keys.index(n) for n in self.efu_names])

    def errors(self, terms: dict) -> np.ndarray:
        """|log(predicted / measured)| of each trace."""
        if any(k.startswith("efu@") for k in terms):   # an efu per precision: each step gets its precision's
            terms = {**terms, "efu": np.array([terms.get(k, terms["efu"]) for k in self.efu_keys])[self.efu_index]}
        ratio = np.add.reduceat(price(self.arrays, terms), self.starts) / self.base
        predicted = np.where(self.rate, self.base_value / ratio, self.base_value * ratio)
        return np.abs(np.log(predicted / self.value))


_STACKS: dict[tuple[int, ...], Stack] = {}


def loss(traces: list[Trace], terms: dict) -> float:
    key = tuple(id(t) for t in traces)
    if key not in _STACKS:
        _STACKS[key] = Stack(traces)
    errors = _STACKS[key].errors(terms)
    return float(np.median(errors) + 0.25 * errors.mean())


def to_unit(name: str, value: float) -> float:
    """A term as an unbounded coordinate (logit of its place in its bounds)."""
    low, high = BOUNDS[name.split("@")[0]]
    # a start at (or next to) a bound is moved 1% inside: a logit far out makes Nelder-Mead's steps there vanish
    x = min(max((value - low) / (high - low), 0.01), 0.99)
    return math.log(x / (1 - x))


def from_unit(name: str, y: float) -> float:
    low, high = BOUNDS[name.split("@")[0]]
    return low + (high - low) / (1 + math.exp(-max(min(y, 50.0), -50.0)))


def nelder_mead(f, x0: list[float], step: float = 0.8, iterations: int = 600) -> list[float]:
    """Plain Nelder-Mead (no scipy here): the simplex's best vertex after `iterations`."""
    n = len(x0)
    simplex = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(p) for p in simplex]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = [sum(p[j] for p in simplex[:-1]) / n for j in range(n)]

        def toward(t):
            return [c + t * (w - c) for c, w in zip(centroid, simplex[-1])]
        reflected = toward(-1.0)
        fr = f(reflected)
        if fr < values[0]:
            expanded = toward(-2.0)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = toward(0.5)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p)] for p in simplex[1:]]
                values = [values[0]] + [f(p) for p in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


def fit_over(traces: list[Trace], start: dict, names: tuple[str, ...]) -> dict:
    """The terms `names` that minimize the loss over `traces`, the rest held at `start`."""
    names = tuple(n for n in names if n not in FIXED)
    def terms_of(y):
        return {**start, **{n: from_unit(n, v) for n, v in zip(names, y)}}
    best = None
    for scale in (1.0, 0.6):    # two restarts: from the start, and from the first answer
        x0 = [to_unit(n, (best or start)[n]) for n in names]
        y = nelder_mead(lambda y: loss(traces, terms_of(y)), x0, step=0.8 * scale)
        best = terms_of(y)
    return best


def _by_gpu(fig) -> str:
    return fig.profile


def _by_precision(fig) -> str:
    return "fp8" if fig.precision == "fp8" else "16-bit"


STRUCTURES = {   # which figures share their efficiencies (the overheads are shared by all in every structure)
    "shared": lambda fig: "*",
    "gpu": _by_gpu,
    "precision": _by_precision,
    # the same groups with the experts' efficiency their own too (one MoE kernel's rate per GPU, or per precision:
    # an engine may run FP8 experts through another kernel than 16-bit ones)
    "gpu+efu": _by_gpu,
    "precision+efu": _by_precision,
    # the experts' efficiency one per precision (fp8, 16-bit), fitted jointly with the shared terms; the
    # efficiencies shared, or per GPU
    "shared+efu-by-precision": lambda fig: "*",
    "gpu+efu-by-precision": _by_gpu,
    # candidate terms shared by every figure (OPTIONAL): a fixed attention cost per request and layer, and an
    # experts' efficiency that falls with the rows each expert gets
    "shared+attn-fixed": lambda fig: "*",
    "shared+efu-rows": lambda fig: "*",
    "shared+attn-fixed+efu-rows": lambda fig: "*",
    # the experts' efficiency per precision with the fixed attention cost, and the links' candidate terms: an
    # engine's collective fixed cost as a multiple of the link's nominal one, PCIe's bandwidth fraction its own
    "shared+attn-fixed+efu-by-precision": lambda fig: "*",
    "shared+attn-fixed+link-latency+efu-by-precision": lambda fig: "*",
    "shared+attn-fixed+pcie+efu-by-precision": lambda fig: "*",
    "shared+attn-fixed+link-latency+pcie+efu-by-precision": lambda fig: "*",
    "shared+attn-fixed+link-latency+pcie": lambda fig: "*",
    # engines as a dimension: the chosen structure above, with each engine family's own host terms (ENGINE_FIT), and
    # with its collectives' fixed-cost multiple too
    "shared+attn-fixed+pcie+efu-by-precision+engine": lambda fig: "*",
    "shared+attn-fixed+pcie+efu-by-precision+engine-links": lambda fig: "*",
}


def engine_of(fig) -> EngineFamily:
    """The engine family that measured a published figure (its source's engine text)."""
    return family_of(fig.source.engine)


def engine_terms(structure: str) -> tuple[str, ...]:
    """The host terms each engine family fits for itself in `structure` (none: not an "+engine" structure)."""
    if structure.endswith("+engine-links"):
        return ENGINE_FIT + ("link_latency_x",)
    return ENGINE_FIT if structure.endswith("+engine") else ()


def group_terms(structure: str) -> tuple[str, ...]:
    """The terms each group of `structure` fits for itself (the rest are the shared fit's)."""
    return EFFICIENCY + ("efu",) if structure.endswith("+efu") else EFFICIENCY


def efu_by_precision(structure: str) -> bool:
    return "+efu-by-precision" in structure


def efu_of(terms: dict, fig) -> dict:
    """`terms` as a CostModel takes them: an efu per precision resolved to the figure's."""
    own = terms.get(f"efu@{_by_precision(fig)}", terms.get("efu", 0.0))
    return {**{k: v for k, v in terms.items() if not k.startswith("efu@")}, "efu": own}


FOLDS = 5


@dataclass(slots=True)
class Fit:
    """Fitted terms: `shared` for every figure, and per group of STRUCTURES[structure] its own efficiencies."""

    structure: str
    shared: dict
    groups: dict = field(default_factory=dict)      # group key -> terms (the shared overheads included)
    counts: dict = field(default_factory=dict)      # group key -> fitted figures behind it
    engines: dict = field(default_factory=dict)     # engine family's value -> its own host terms (over the rest)

    def terms_for(self, fig) -> dict:
        terms = efu_of(self.groups.get(STRUCTURES[self.structure](fig), self.shared), fig)
        return {**terms, **self.engines.get(engine_of(fig).value, {})}

    def model_for(self, fig) -> CostModel:
        key = STRUCTURES[self.structure](fig)
        if key in self.groups:
            source = f"fitted on {self.counts[key]} published figures ({self.structure} {key}: efficiencies; overheads shared)"
        else:
            source = f"fitted on {self.counts.get('*', 0)} published figures, shared"
        family = engine_of(fig).value
        if family in self.engines:
            source += f"; engine {family}: host terms fitted on its {self.counts[family]} figures"
        return CostModel(**self.terms_for(fig), source=source)


def fit_traces(traces: list[Trace], structure: str, starts: tuple[dict, ...] = ()) -> Fit:
    """The shared terms over every trace, then each large-enough group's own efficiencies.

    The shared fit starts from the placeholders and from each of `starts` (terms fitted before, on these figures
    only: the cross-validation passes none, so no fold starts from terms its left-out figures shaped), and keeps
    the lowest loss: from the placeholders alone Nelder-Mead can stop at a worse minimum than terms it was given."""
    names = tuple(n for n in BOUNDS if n in CostModel.__dataclass_fields__
                  and (n not in OPTIONAL or OPTIONAL[n] in structure))
    # the placeholders as the start (a zero overhead starts just inside its bounds: its logit is finite)
    start = {n: min(max(INSIDE.get(n) or getattr(CostModel(), n) or STARTS.get(n, 0.0), BOUNDS[n][0] + 1e-3),
                    BOUNDS[n][1]) for n in names}
    start.update(FIXED)
    if efu_by_precision(structure):   # one efu per precision that has an expert in the traces, fitted with the rest
        keys = sorted({_by_precision(t.figure) for t in traces if t.arrays["experts"].any()})
        names = tuple(n for n in names if n != "efu") + tuple(f"efu@{k}" for k in keys)
        efu_starts = [{f"efu@{k}": value for k in keys} for value in EFU_STARTS]
    else:
        efu_starts = [{}]
    fits = [fit_over(traces, {**start, **efu}, names) for efu in efu_starts]
    for other in starts:
        fits.append(fit_over(traces, {**start, **efu_starts[-1], **{n: other[n] for n in names if other.get(n)}}, names))
    fit = Fit(structure, min(fits, key=lambda terms: loss(traces, terms)), counts={"*": len(traces)})
    fit_engines(fit, traces)
    if STRUCTURES[structure](traces[0].figure) == "*":   # one group: every figure shares every term
        return fit
    key_of = STRUCTURES[structure]
    for key in sorted({key_of(t.figure) for t in traces}):
        own = [t for t in traces if key_of(t.figure) == key]
        if len(own) >= MIN_PER_GROUP:
            terms = fit_over(own, fit.shared, group_terms(structure))
            if not any(t.arrays["experts"].any() for t in own):   # no expert ran in the group: efu is the shared one
                terms["efu"] = fit.shared["efu"]
            fit.groups[key] = terms
            fit.counts[key] = len(own)
    return fit


def fit_engines(fit: Fit, traces: list[Trace]) -> None:
    """Each engine family with at least MIN_PER_ENGINE of `traces` gets its own host terms (engine_terms of the
    structure), fitted on its figures alone over the shared terms; the others keep the shared ones."""
    names = engine_terms(fit.structure)
    if not names:
        return
    start = {**fit.shared, "link_latency_x": fit.shared.get("link_latency_x", 1.0)}
    for family in sorted({engine_of(t.figure) for t in traces}, key=lambda f: f.value):
        own = [t for t in traces if engine_of(t.figure) == family]
        if family is EngineFamily.OTHER or len(own) < MIN_PER_ENGINE:
            continue
        terms = fit_over(own, start, names)
        fit.engines[family.value] = {n: terms[n] for n in names}
        fit.counts[family.value] = len(own)


def record_all(figures, simulate) -> list[Trace]:
    return [t for t in (record(f, simulate) for f in figures) if t is not None]


def cross_validate(traces: list[Trace], structure: str) -> tuple[float, float]:
    """Median and worst |error| (%) of each trace predicted by a fit on the other folds (trace i in fold i mod FOLDS)."""
    errors = []
    for fold in range(FOLDS):
        train = [t for i, t in enumerate(traces) if i % FOLDS != fold]
        fit = fit_traces(train, structure)
        for t in (t for i, t in enumerate(traces) if i % FOLDS == fold):
            errors.append(abs(t.predict(fit.terms_for(t.figure)) / t.figure.value - 1) * 100)
    return statistics.median(errors), max(errors)


def select_structure(traces: list[Trace], names=None) -> tuple[str, dict[str, tuple[float, float]]]:
    """The structure with the lowest cross-validated median error on the fitted set (the held-out set unseen),
    among `names` (None: every structure)."""
    scores = {name: cross_validate(traces, name) for name in (names or STRUCTURES)}
    return min(scores, key=lambda n: scores[n][0]), scores


def terms_report(fit: Fit) -> str:
    lines = [f"Fitted cost-model terms, structure {fit.structure!r} (for the profiles' [simulation] tables; "
             f"the lead writes them in):"]
    for key, terms in [("shared", fit.shared)] + sorted(fit.groups.items()) + sorted(fit.engines.items()):
        text = ", ".join(f"{k} = {v:.4g}" for k, v in terms.items())
        lines.append(f"  [{key}] {text}    # {fit.counts.get(key, fit.counts['*'])} fitted figures")
    return "\n".join(lines)
