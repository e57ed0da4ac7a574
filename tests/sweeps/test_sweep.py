"""Sweeps on the real `tiny` model: points, predictions, the crossover, and a clean stop when memory runs out."""
import csv
import json

import pytest

from backend.config import ModelChoice, RunConfig, SweepSpec
from backend.errors import InputError
from backend.events import ModelLoaded, SweepPoint
from backend.session import execute
from backend.sweeps.steps import measured_crossover
from backend.sweeps.parse import parse_sizes


def sweep_config(tmp_path, spec: SweepSpec, profile="h100-sxm") -> RunConfig:
    return RunConfig(mode=f"sweep-{spec.kind}", model=ModelChoice("tiny", "cpu", "float32"), sweep=spec,
                     profile=profile, out_dir=str(tmp_path))


def run(config):
    events = []
    finished = execute(config, events.append, lambda: False)
    return finished, [e for e in events if isinstance(e, SweepPoint)]


def test_batch_sweep_tokens_per_second_grow_with_batch_at_small_batches(tmp_path):
    finished, points = run(sweep_config(tmp_path, SweepSpec("batch", batches=[1, 8], context=64, steps=15)))
    assert [p.x for p in points] == [1, 8]
    # 8 requests share one weight read: far more than twice the tokens per second of one request
    assert points[1].tokens_per_s > 2 * points[0].tokens_per_s
    for p in points:
        assert p.predicted_ms > 0 and p.predicted_local_ms > 0 and p.bound in ("memory", "compute")
        assert 0 < p.mbu and 0 < p.mfu
    with open(tmp_path / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["batch"]) for r in rows] == [1, 8]
    assert finished.summary.largest_fit == 8


def test_prompt_sweep_reports_prefill_rate(tmp_path):
    finished, points = run(sweep_config(tmp_path, SweepSpec("prompt", lengths=[16, 64], steps=2), profile="cpu"))
    assert [p.x for p in points] == [16, 64]
    assert all(p.tokens_per_s == pytest.approx(p.x / (p.step_ms / 1000)) for p in points)
    assert (tmp_path / "sweep.csv").read_text().startswith("prompt_len,")


def test_a_batch_that_does_not_fit_stops_the_sweep_and_keeps_what_fit(tmp_path, monkeypatch):
    import backend.loaders.weights
    from backend.models.shapes import SHAPES
    per_slot = SHAPES["tiny"].kv_bytes_per_token(4) * (64 + 2 + 2)   # a point's run: 64 + 2 + 2 + 1 tokens a slot
    points = []

    def emit(event):
        if isinstance(event, ModelLoaded) and not points:
            # the model is loaded: from now on the device has room for 3 sequences' KV cache
            monkeypatch.setattr(backend.loaders.weights, "free_memory", lambda device: 3 * per_slot)
        if isinstance(event, SweepPoint):
            points.append(event)
    config = sweep_config(tmp_path, SweepSpec("batch", batches=[1, 2, 4, 8], context=64, steps=2))
    finished = execute(config, emit, lambda: False)
    assert [p.x for p in points] == [1, 2]
    assert finished.summary.largest_fit == 2
    assert "stopped at batch 4: it does not fit in memory" in finished.summary.note
    assert "GiB is free" in finished.summary.note


def test_measured_crossover_is_the_knee_of_the_whole_curve():
    def point(x, tps):
        return SweepPoint("batch", x, 1.0, tps, 0, 0, None, None, None, None, "memory")
    # steps of 100, 105, 111 and 200 ms: the fitted t = a + b·B bends between batch 4 and 8
    assert measured_crossover([point(1, 10), point(2, 19), point(4, 36), point(8, 40)]) == 7
    assert measured_crossover([point(1, 10), point(2, 20), point(4, 40)]) is None


def test_bad_sizes_are_refused():
    with pytest.raises(InputError, match="--batches"):
        parse_sizes("1,0", "--batches")
    assert parse_sizes("8,1,2,2", "--batches") == [1, 2, 8]


def test_a_sweep_folder_reads_back_its_points(tmp_path):
    from backend.sweeps.points import read_points
    _, points = run(sweep_config(tmp_path, SweepSpec("batch", batches=[1, 2], context=16, steps=2)))
    kind, back = read_points(tmp_path)
    assert kind == "batch" and json.loads((tmp_path / "run.json").read_text())["info"]["sweep_kind"] == "batch"
    assert [(p.x, p.bound) for p in back] == [(p.x, p.bound) for p in points]
    assert back[0].tokens_per_s == pytest.approx(points[0].tokens_per_s)
    assert read_points(tmp_path / "nothing-here") == (None, [])
