"""The figures two runs are compared on, from one run's records: each a value, the samples behind
it (requests, tokens or steps, for the bootstrap), or the reason the run cannot have it.

A remote run has no engine steps (the server's are not visible from outside); a sweep has no
requests (it times steps of fixed shapes), only its points; a run without SLOs has no goodput.
Such a figure is missing with its reason, never a zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from backend.config import RunKind, SweepKind
from backend.events import LoadPoint, PDPoint, PrecisionPoint, SweepPoint
from backend.results.stats import statistic_of
from backend.results.summary import _meets, inter_token_latencies
from backend.records import Phase, RequestStatus, RunData
from backend.summary import figure


@dataclass(frozen=True, slots=True)
class Metric:
    key: str
    label: str
    samples: str = ""    # the samples its bootstrap resamples ("": one value per run, no bootstrap)
    stat: str = ""       # the statistic of those samples (backend.results.stats.STATISTICS)
    scale: float = 1.0   # shown as value x scale (a share as %)


LATENCIES = [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")]
METRICS: list[Metric] = [
    *(Metric(f"{name}_{q}_ms", f"{label} {q} (ms)", name, q) for name, label in LATENCIES for q in ("p50", "p90", "p99")),
    Metric("output_tokens_per_s", "output throughput (tok/s)"),
    Metric("goodput_requests_per_s", "goodput (req/s)"),
    Metric("slo_attainment", "SLO attainment (%)", "slo", "mean", 100.0),
    Metric("decode_share", "decode share of latency (%)", "decode_share", "ratio", 100.0),
    *(Metric(f"{p.value}_step_p50_ms", f"{p.value} step p50 (ms)", f"step_{p.value}", "p50") for p in Phase),
    Metric("num_steps", "engine steps"),
]
REQUEST_METRICS = {m.key for m in METRICS if m.samples in {"ttft", "tpot", "itl", "e2e", "decode_share", "slo"}} \
    | {"output_tokens_per_s", "goodput_requests_per_s"}
STEP_METRICS = {m.key for m in METRICS if m.samples.startswith("step_")} | {"num_steps"}


@dataclass(frozen=True, slots=True)
class NamedFigure:
    """A figure another tool's file names and this tool has no record for (llama-bench's pp512 tokens/s)."""

    key: str                 # as the imported summary holds it: "pp512_tokens_per_s"
    label: str
    value: float


def named_figures(run: RunData) -> list[NamedFigure]:
    """An imported run's own rates (backend.results.importers.llama_bench): a row each in compare."""
    return [NamedFigure(k, f"{k.removesuffix('_tokens_per_s')}: tokens/s (imported)", float(v))
            for k, v in run.summary.extra.items()
            if k.endswith("_tokens_per_s") and isinstance(v, (int, float)) and not isinstance(v, bool)]


def point_entries(p) -> list[tuple[tuple, Metric, float]]:
    """(sort key, metric, value) for each figure of one sweep point: per batch size or prompt length,
    per precision, per arrival rate or number of users, per prefill:decode split."""
    if isinstance(p, SweepPoint):
        what = "batch" if p.kind == SweepKind.BATCH else "prompt"
        return [((0, p.kind, p.x, 0), Metric(f"{p.kind}_{p.x}_step_ms", f"{what} {p.x}: step (ms)"), p.step_ms),
                ((0, p.kind, p.x, 1), Metric(f"{p.kind}_{p.x}_tokens_per_s", f"{what} {p.x}: tokens/s"),
                 p.tokens_per_s)]
    if isinstance(p, PrecisionPoint):
        names = [("ttft_ms", "TTFT (ms)"), ("tpot_ms", "TPOT (ms)"), ("prefill_tokens_per_s", "prefill tok/s"),
                 ("decode_tokens_per_s", "decode tok/s")]
        return [((1, p.dtype, p.weight_bits, i), Metric(f"{p.dtype}_{name}", f"{p.dtype}: {label}"),
                 getattr(p, name)) for i, (name, label) in enumerate(names)]
    if isinstance(p, LoadPoint):
        what = f"rate {p.x:g}/s" if p.kind == SweepKind.RATE else f"{p.x:g} users"
        return [((2, p.kind, p.x, i), Metric(f"{p.kind}_{p.x:g}_{name}", f"{what}: {label}"), getattr(p, name))
                for i, (name, label) in enumerate(LOAD_POINT_FIGURES)]
    if isinstance(p, NamedFigure):
        return [((4, p.key, 0, 0), Metric(p.key, p.label), p.value)]
    if isinstance(p, PDPoint):
        return [((3, p.prefill_devices, p.decode_devices, i),
                 Metric(f"pd_{p.prefill_devices}p{p.decode_devices}d_{name}", f"{p.split}: {label}"), getattr(p, name))
                for i, (name, label) in enumerate(PD_POINT_FIGURES)]
    return []


LOAD_POINT_FIGURES = [("tokens_per_s_per_device", "tok/s per device"), ("tokens_per_s_per_user", "tok/s per user"),
                      ("ttft_p50_ms", "TTFT p50 (ms)"), ("tpot_p50_ms", "TPOT p50 (ms)"),
                      ("goodput_requests_per_s", "goodput (req/s)")]
PD_POINT_FIGURES = [("output_tokens_per_s", "output tok/s"), ("tokens_per_s_per_device", "tok/s per device"),
                    ("goodput_rps", "goodput (req/s)"), ("ttft_p50_ms", "TTFT p50 (ms)"), ("tpot_p50_ms", "TPOT p50 (ms)"),
                    ("itl_p50_ms", "ITL p50 (ms)")]


def point_metrics(points: list) -> list[tuple[tuple, Metric]]:
    """(sort key, metric) for each figure of a sweep's points."""
    return [(order, m) for p in points for order, m, _ in point_entries(p)]


def point_figures(points: list) -> dict[str, float]:
    """A sweep's points as named figures (`batch_4_step_ms`, `q8_0_tpot_ms`, `rate_5_ttft_p50_ms` ...)."""
    return {m.key: value for p in points for _, m, value in point_entries(p)}


@dataclass(slots=True)
class RunFigures:
    """One run (or one repeat) as the comparison sees it."""

    kind: str                                   # a RunKind's word, remote, or sweep (points of no recorded kind)
    values: dict[str, float] = field(default_factory=dict)
    samples: dict[str, np.ndarray] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)   # metric key -> why this run cannot have it
    points: list = field(default_factory=list)


def run_kind(run: RunData, points: list) -> str:
    if run.info.is_remote:
        return "remote"
    if run.info.is_imported:
        return "imported"
    mode = str(run.config.get("mode", ""))
    kind = RunKind.recorded(mode)
    if kind is not None and kind.sweep_kind is not None:
        return kind
    return "sweep" if points else mode or RunKind.LOAD


def figures_of(run: RunData, points: list) -> RunFigures:
    """Every comparable figure of one run folder's records (and its sweep points)."""
    kind = run_kind(run, points)
    fig = RunFigures(kind, points=list(points))
    if kind.startswith("sweep"):
        for key in REQUEST_METRICS:
            fig.missing[key] = "sweep: no requests"
        for key in STEP_METRICS:
            fig.missing[key] = "sweep: per-point rows"
        fig.values.update(point_figures(points))
        return fig
    _request_figures(run, fig)
    if kind == "imported":
        fig.points += named_figures(run)
        fig.values.update(point_figures(fig.points))
    if kind in ("remote", "imported"):
        for key in STEP_METRICS:
            fig.missing[key] = f"{kind}: server steps not visible"
    else:
        for phase in Phase:
            ms = np.array([s.duration_ms for s in run.steps if s.phase is phase], dtype=float)
            if ms.size:
                fig.samples[f"step_{phase.value}"] = ms
            else:
                fig.missing[f"{phase.value}_step_p50_ms"] = f"no {phase.value} steps"
        fig.values["num_steps"] = float(len(run.steps))
    for m in METRICS:
        if m.samples in fig.samples and m.key not in fig.values:
            fig.values[m.key] = statistic_of(fig.samples[m.samples], m.stat)
    return fig


def _request_figures(run: RunData, fig: RunFigures) -> None:
    finished = [r for r in run.requests if r.status is RequestStatus.FINISHED]
    series = {"ttft": [r.ttft_ms for r in finished if r.ttft_ms is not None],
              "tpot": [r.tpot_ms for r in finished if r.tpot_ms is not None],
              "itl": inter_token_latencies(run.tokens),
              "e2e": [r.e2e_ms for r in finished if r.e2e_ms is not None]}
    why = {"ttft": "no finished request", "tpot": "no request of 2+ tokens", "itl": "no token records",
           "e2e": "no finished request"}
    for name, values in series.items():
        if values:
            fig.samples[name] = np.asarray(values, dtype=float)
        else:
            for q in ("p50", "p90", "p99"):
                fig.missing[f"{name}_{q}_ms"] = why[name]
    timed = [r for r in finished if r.first_token_ms is not None and r.finish_ms is not None
             and r.finish_ms > r.arrival_ms]
    if timed:
        fig.samples["decode_share"] = np.array([(r.finish_ms - r.first_token_ms, r.finish_ms - r.arrival_ms)
                                                for r in timed], dtype=float)
    else:
        fig.missing["decode_share"] = "no finished request"
    s = run.summary
    fig.values["output_tokens_per_s"] = figure(s.output_tokens_per_s)
    slo_ttft, slo_tpot = _slo(s.slo_ttft_ms), _slo(s.slo_tpot_ms)
    if s.goodput_requests_per_s is not None and (slo_ttft is not None or slo_tpot is not None):
        fig.values["goodput_requests_per_s"] = float(s.goodput_requests_per_s)
        if finished:
            fig.samples["slo"] = np.array([_meets(r, slo_ttft, slo_tpot) for r in finished], dtype=float)
    else:
        fig.missing["goodput_requests_per_s"] = fig.missing["slo_attainment"] = "no SLO recorded"


def _slo(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
