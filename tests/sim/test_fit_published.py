"""backend/sim/published_fit.py's pricing of recorded steps: the one-pass loss is the per-figure sums', an efu per
precision reaches each figure's steps, and a fit finds the experts' efficiency that made the figures."""
from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np
import pytest

from backend.sim.step_time import CostModel
from backend.sim import published_fit as fp
from backend.sim.published_figures import FIGURES

BASE = CostModel(mfu=0.5, afu=0.3, mbu=0.7, step_ms=0.5, serial=1.0, efu=0.5)


def synthetic(fig, steps: int, experts: float, seed: int) -> fp.Trace:
    """A trace of `steps` decode-like steps, half of whose product seconds are the experts' when `experts`."""
    rng = np.random.default_rng(seed)
    trace = fp.Trace(fig, 0.0, BASE)
    for _ in range(steps):
        matmul = rng.uniform(1e-3, 5e-3)
        trace.add(matmul=matmul, experts=matmul * experts, attention=rng.uniform(1e-4, 1e-3), memory=0.0,
                  gemm_memory=rng.uniform(1e-4, 3e-3), kv_memory=rng.uniform(1e-4, 1e-3), coll_fixed=0.0,
                  coll_bytes=0.0, pcie=0.0,
                  layers=32.0, tokens=64.0, requests=64.0, is_prefill=0.0)
    trace.freeze()
    trace.base_value = float(fp.price(trace.arrays, BASE.terms()).sum() * 1e3)
    return trace


def figure_like(fig_id: str, value: float):
    fig = next(f for f in FIGURES if f.id == fig_id)
    return replace(fig, metric="e2e_ms", value=value)


def test_the_one_pass_loss_is_the_per_figure_one():
    traces = [synthetic(figure_like(i, 100.0 + 10 * n), 20 + n, 0.5 * (n % 2), n)
              for n, i in enumerate(("F01", "F13", "F18", "F83", "F31"))]
    terms = {**BASE.terms(), "mfu": 0.4, "efu": 0.2, "step_ms": 1.0}
    errors = [abs(math.log(t.predict(terms) / t.figure.value)) for t in traces]
    assert fp.loss(traces, terms) == pytest.approx(statistics.median(errors) + 0.25 * statistics.fmean(errors))


def test_an_efu_per_precision_prices_each_figure_at_its_own():
    fp8, fp16 = figure_like("F18", 1.0), figure_like("F83", 1.0)   # Mixtral in fp8 (H100) and float16 (A100)
    assert (fp8.precision, fp16.precision) == ("fp8", "float16")
    terms = {**BASE.terms(), "efu@fp8": 0.1, "efu@16-bit": 0.6}
    assert fp.efu_of(terms, fp8)["efu"] == 0.1 and fp.efu_of(terms, fp16)["efu"] == 0.6
    assert "efu@fp8" not in fp.efu_of(terms, fp8)
    a, b = synthetic(fp8, 10, 0.5, 1), synthetic(fp16, 10, 0.5, 2)
    # the stack's per-step efu gives each trace what pricing it alone at its own efu gives
    for trace in (a, b):
        alone = {**terms, "efu": fp.efu_of(terms, trace.figure)["efu"]}
        alone = {k: v for k, v in alone.items() if not k.startswith("efu@")}
        trace.figure = replace(trace.figure, value=trace.predict(alone))
    assert fp.loss([a, b], terms) == pytest.approx(0.0, abs=1e-12)


def test_the_fit_finds_the_experts_efficiency_that_made_the_figures():
    truth = {**BASE.terms(), "efu": 0.15}
    traces = []
    for n, fig_id in enumerate(("F18", "F50", "F62", "F83", "F94", "F01", "F13", "F31")):
        trace = synthetic(figure_like(fig_id, 1.0), 30, 0.6 if n < 5 else 0.0, n)
        trace.figure = replace(trace.figure, value=trace.predict(truth))   # "measured" with efu 0.15
        traces.append(trace)
    fit = fp.fit_traces(traces, "shared")
    assert fit.shared["efu"] == pytest.approx(0.15, rel=0.1)
    assert all(abs(t.predict(fit.terms_for(t.figure)) / t.figure.value - 1) < 0.02 for t in traces)


def test_the_fit_prices_the_candidate_terms_as_the_simulator_does():
    """record() checks the fit's step formula against the simulator's price of every step: with a fixed attention
    cost per request and layer, an experts' efficiency that falls with their rows, the links' fixed costs tripled
    and PCIe's own fraction of its bandwidth, on a tensor-parallel Mixtral run over NVLink (F63), a
    tensor-parallel dense one over PCIe (F75) and a one-GPU one (F55)."""
    from bench.sim_vs_published import simulate
    model = CostModel(mfu=0.5, afu=0.3, mbu=0.7, step_ms=0.5, serial=1.0, efu=0.4, efu_rows=48.0,
                      request_layer_us=0.8, link_eff=0.8, pcie_link_eff=0.4, link_latency_x=3.0)
    plain = replace(model, efu_rows=0.0, request_layer_us=0.0, link_eff=1.0, pcie_link_eff=1.0, link_latency_x=1.0)
    for fig_id in ("F63", "F75", "F55"):
        fig = next(f for f in FIGURES if f.id == fig_id)
        fig = replace(fig, output_len=min(fig.output_len, 64))   # a short run: the formula, not the figure
        trace = fp.record(fig, lambda f: simulate(f, model))      # raises if the formula and the simulator differ
        assert trace.arrays["request_layers"].min() > 0
        assert (trace.arrays["expert_rows"] > 0).all() == (fig_id == "F63")
        assert (trace.arrays["coll_fixed"] > 0).all() == (trace.arrays["coll_bytes"] > 0).all() == (fig_id != "F55")
        assert (trace.arrays["pcie"] > 0).all() == (fig_id == "F75")
        # the candidate terms cost time: the same steps priced without them are faster
        assert trace.step_seconds(plain.terms()).sum() < trace.arrays["seconds"].sum()


def test_a_candidate_term_is_fitted_only_in_the_structures_that_name_it():
    truth = {**BASE.terms(), "request_layer_us": 0.6}
    traces = []
    for n, fig_id in enumerate(("F01", "F13", "F31", "F18", "F50", "F62")):
        trace = synthetic(figure_like(fig_id, 1.0), 20, 0.0, n)
        trace.parts["request_layers"] = list(np.arange(20) * (n + 1) * 64.0)   # many requests' steps and few
        trace.parts["expert_rows"] = [0.0] * 20
        trace.freeze()
        trace.figure = replace(trace.figure, value=trace.predict(truth))
        traces.append(trace)
    assert fp.fit_traces(traces, "shared").shared.get("request_layer_us", 0.0) == 0.0
    # fitted from the placeholders and from the terms that made the figures: the better of the two is kept
    fitted = fp.fit_traces(traces, "shared+attn-fixed", starts=(truth,)).shared
    assert fitted["request_layer_us"] == pytest.approx(0.6, rel=0.05) and "efu_rows" not in fitted
    assert fp.loss(traces, fitted) < 1e-3
