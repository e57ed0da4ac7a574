"""The published figures (backend/sim/published_figures.py): every record complete and cited, the held-out
rule kept, and the simulator runs one figure of each kind."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from backend.sim.published_figures import FIGURES, HELD_OUT_EVERY, METRICS, held_out, fitted, is_held_out
from profiles import __file__ as profiles_init

PROFILE_KEYS = {p.stem for p in Path(profiles_init).parent.glob("*.toml")}


def test_enough_figures_in_both_sets():
    assert len(FIGURES) >= 15
    assert held_out() and fitted()
    assert len(held_out()) + len(fitted()) == len(FIGURES)


def test_ids_are_unique_and_numbered_in_order():
    ids = [f.id for f in FIGURES]
    assert len(set(ids)) == len(ids)
    assert [int(i[1:]) for i in ids] == list(range(1, len(ids) + 1))


def test_held_out_follows_the_rule():
    for fig in FIGURES:
        assert is_held_out(fig) == (int(fig.id[1:]) % HELD_OUT_EVERY == 0), fig.id


@pytest.mark.parametrize("fig", FIGURES, ids=lambda f: f.id)
def test_record_is_complete(fig):
    src = fig.source
    for text in (src.title, src.publisher, src.url_or_file, src.date, src.engine, src.method, fig.quote):
        assert isinstance(text, str) and len(text.strip()) > 3, fig.id
    assert fig.profile in PROFILE_KEYS, fig.profile
    assert fig.precision in ("bfloat16", "float16", "fp8")
    assert fig.kv_dtype in ("auto", "fp8")
    assert fig.metric in METRICS
    assert fig.value > 0 and math.isfinite(fig.value)
    assert fig.unit
    assert fig.tp >= 1 and fig.pp >= 1 and fig.num_gpus == fig.tp * fig.pp
    assert fig.prompt_len > 0 and fig.output_len > 0
    if fig.kind == "batch":
        assert fig.batch >= 1 and fig.concurrency == 0 and fig.num_requests == fig.batch
    else:
        assert fig.kind == "closed" and fig.concurrency >= 1 and fig.num_requests >= fig.concurrency
    if fig.metric == "ttft_ms" and fig.kind == "batch":
        assert fig.batch == 1 and fig.output_len == 1


def test_models_have_shapes():
    from bench.sim_vs_published import model_name
    for key in {f.model for f in FIGURES}:
        assert model_name(key)


KINDS = {}
for _fig in FIGURES:
    KINDS.setdefault((_fig.kind, _fig.metric), _fig)


@pytest.mark.parametrize("fig", sorted(KINDS.values(), key=lambda f: f.num_gpus * f.batch),
                         ids=lambda f: f"{f.kind}-{f.metric}")
def test_simulator_runs_one_figure_of_each_kind(fig):
    from dataclasses import replace
    from bench.sim_vs_published import simulate
    small = fig
    if fig.kind == "closed":      # a few requests are enough to see the run through
        small = replace(fig, num_requests=fig.concurrency, output_len=min(fig.output_len, 16))
    elif fig.output_len > 1:
        small = replace(fig, output_len=min(fig.output_len, 16), batch=min(fig.batch, 8),
                        num_requests=min(fig.batch, 8))
    result = simulate(small)
    assert result.simulated is not None, result.reason
    assert result.simulated > 0 and math.isfinite(result.simulated)
