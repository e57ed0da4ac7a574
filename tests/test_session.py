"""The run kinds and session's two tables: every kind has a runner, every target kind a target, the
settings pick the target they always did, and a kind without its settings is refused in one line."""
import json
from dataclasses import replace
from functools import partial

import pytest

from backend import session
from backend.config import (LOAD_SWEEPS, STEP_SWEEPS, EngineConfig, RemoteEndpoint, RunConfig, RunKind, SweepKind,
                            SweepSpec, config_dict)
from backend.errors import InputError
from backend.loaders.cache import ModelCache
from backend.session import RUNNERS, TARGETS, TargetKind, target_for, target_kind
from backend.sweeps.load import run_load_sweep
from backend.sweeps.pd_ratio import run_pd_ratio_sweep
from backend.sweeps.steps import run_step_sweep
from backend.targets.disaggregated.coordinator import run_disaggregated
from backend.sim.disaggregated import run_simulated_disaggregated
from backend.targets.local import run_local
from backend.targets.remote.target import run_remote
from backend.sim.target import run_simulated
from backend.workload.spec import LengthDist, WorkloadSpec

# the words run.json has always recorded as the config's mode, and the `sweep` sub-commands' words
WORDS = ["batch", "load", "sweep-batch", "sweep-prompt", "sweep-precision", "sweep-rate", "sweep-concurrency",
         "sweep-pd-ratio", "sweep-depth"]
SWEEP_WORDS = ["batch", "prompt", "precision", "rate", "concurrency", "pd-ratio", "depth"]
ENDPOINT = RemoteEndpoint("http://127.0.0.1:8000/v1", "served")


def workload() -> WorkloadSpec:
    return WorkloadSpec("w", num_requests=4, arrival="burst", rate=None, prompt_len=LengthDist("fixed", 16),
                        output_len=LengthDist("fixed", 4))


def config_of(kind: RunKind, **changes) -> RunConfig:
    """A config with exactly the settings `kind` needs."""
    axis = kind.sweep_kind
    return RunConfig(mode=kind, workload=workload() if kind.needs_workload else None,
                     sweep=SweepSpec(axis) if axis is not None else None, **changes)


def function_of(target):
    return target.func if isinstance(target, partial) else target


def test_the_kinds_keep_the_words_that_run_json_and_the_cli_use():
    assert [kind.value for kind in RunKind] == WORDS
    assert [kind.value for kind in SweepKind] == SWEEP_WORDS
    assert [kind.command for kind in RunKind] == ["run", "load", *(f"sweep {w}" for w in SWEEP_WORDS)]
    # run.json holds plain words, and a config read back from them is the same kind
    data = json.loads(json.dumps(config_dict(config_of(RunKind.SWEEP_RATE))))
    assert data["mode"] == "sweep-rate" and data["sweep"]["kind"] == "rate"
    assert RunConfig(mode=data["mode"], sweep=SweepSpec(data["sweep"]["kind"])).mode is RunKind.SWEEP_RATE


def test_each_sweep_kind_is_one_run_kind_and_back():
    sweeps = [kind for kind in RunKind if kind.sweep_kind is not None]
    assert sweeps == [*STEP_SWEEPS, *LOAD_SWEEPS, RunKind.SWEEP_DEPTH]   # depth: pairs of requests (sweeps/depth.py)
    assert [kind.sweep_kind for kind in sweeps] == list(SweepKind)
    assert all(axis.run_kind.sweep_kind is axis for axis in SweepKind)
    assert RunKind.BATCH.sweep_kind is None and RunKind.LOAD.sweep_kind is None


def test_every_run_kind_has_a_runner_and_every_target_kind_a_target():
    assert set(RUNNERS) == set(RunKind)
    assert set(TARGETS) == set(TargetKind)
    for kind in RunKind:   # each builds a callable target from the settings alone (nothing loads)
        assert callable(target_for(config_of(kind), ModelCache(), retain_records=False))


def test_an_unknown_kind_is_refused_in_one_line_naming_every_kind():
    with pytest.raises(InputError) as built:
        RunConfig(mode="sweep-batches")
    message = str(built.value)
    assert "\n" not in message and "'sweep-batches'" in message
    assert all(word in message for word in WORDS)
    # a mode set after the config was built is read again where the run is dispatched, with the same line
    config = RunConfig()
    config.mode = "sweep-batches"
    with pytest.raises(InputError) as dispatched:
        session.execute(config, lambda event: None, lambda: False)
    assert str(dispatched.value) == message


def test_an_unknown_sweep_kind_is_refused():
    with pytest.raises(InputError, match="unknown sweep 'batches': use batch, prompt, precision"):
        SweepSpec("batches")


@pytest.mark.parametrize("kind", [kind for kind in RunKind if kind.needs_workload])
def test_a_kind_that_runs_a_workload_needs_one(kind):
    config = replace(config_of(kind), workload=None)
    with pytest.raises(InputError, match=f"`{kind.command}` needs a workload"):
        target_for(config, ModelCache(), retain_records=False)
    with pytest.raises(InputError, match="needs a workload"):
        config.load_workload


@pytest.mark.parametrize("kind", [kind for kind in RunKind if kind.sweep_kind is not None])
def test_a_sweep_needs_settings_of_its_own_axis(kind):
    with pytest.raises(InputError, match=f"`{kind.command}` needs its sweep settings"):
        replace(config_of(kind), sweep=None).check_kind()
    other = next(axis for axis in SweepKind if axis is not kind.sweep_kind)
    with pytest.raises(InputError, match=f"sweeps {kind.sweep_kind}, but its sweep settings are of kind {other}"):
        replace(config_of(kind), sweep=SweepSpec(other)).check_kind()
    assert config_of(kind).sweep_spec.kind is kind.sweep_kind


@pytest.mark.parametrize("kind", [RunKind.BATCH, RunKind.LOAD])
def test_one_run_takes_no_sweep_settings(kind):
    with pytest.raises(InputError, match=f"`{kind.command}` is not a sweep"):
        replace(config_of(kind), sweep=SweepSpec(SweepKind.BATCH)).check_kind()
    with pytest.raises(InputError, match="is not a sweep: it has no sweep settings"):
        config_of(kind).sweep_spec


DISAGGREGATED = EngineConfig(policy="disaggregated")


@pytest.mark.parametrize("kind, changes, where, function", [
    (RunKind.BATCH, {}, TargetKind.LOCAL, run_local),
    (RunKind.LOAD, {}, TargetKind.LOCAL, run_local),
    (RunKind.LOAD, {"simulate": True}, TargetKind.SIMULATED, run_simulated),
    (RunKind.BATCH, {"simulate": True}, TargetKind.SIMULATED, run_simulated),
    (RunKind.LOAD, {"endpoint": ENDPOINT}, TargetKind.REMOTE, run_remote),
    (RunKind.LOAD, {"endpoint": ENDPOINT, "simulate": True}, TargetKind.SIMULATED, run_simulated),   # refused there
    (RunKind.LOAD, {"engine": DISAGGREGATED}, TargetKind.DISAGGREGATED, run_disaggregated),
    (RunKind.LOAD, {"engine": DISAGGREGATED, "simulate": True}, TargetKind.SIMULATED_DISAGGREGATED,
     run_simulated_disaggregated),
    # the disaggregated pair runs workloads only: a batch under it, or a server's run, goes where the refusal is
    (RunKind.BATCH, {"engine": DISAGGREGATED}, TargetKind.LOCAL, run_local),
    (RunKind.LOAD, {"engine": DISAGGREGATED, "endpoint": ENDPOINT}, TargetKind.REMOTE, run_remote),
])
def test_the_settings_choose_the_target(kind, changes, where, function):
    config = config_of(kind, **changes)
    assert target_kind(config) is where
    assert function_of(target_for(config, ModelCache(), retain_records=True)) is function


def test_a_sweep_runs_its_points_through_the_target_of_one_run():
    models = ModelCache()
    steps = target_for(config_of(RunKind.SWEEP_PRECISION, simulate=True), models, retain_records=False)
    assert steps.func is run_step_sweep
    assert steps.keywords["target"].func is run_simulated and steps.keywords["target"].keywords["retain_records"]
    rates = target_for(config_of(RunKind.SWEEP_RATE, endpoint=ENDPOINT), models, retain_records=True)
    assert rates.func is run_load_sweep and rates.keywords["target"] is run_remote
    users = target_for(config_of(RunKind.SWEEP_CONCURRENCY), models, retain_records=True)
    assert users.func is run_load_sweep and users.keywords["target"].keywords == {"retain_records": False,
                                                                                 "models": models}
    # every split of a pd-ratio sweep is simulated under the disaggregated policy, whatever the form said
    splits = target_for(config_of(RunKind.SWEEP_PD_RATIO), models, retain_records=True)
    assert splits.func is run_pd_ratio_sweep and splits.keywords["target"].func is run_simulated_disaggregated


def test_a_stored_mode_reads_back_as_its_kind_and_an_unknown_one_as_none():
    assert RunKind.recorded("sweep-rate") is RunKind.SWEEP_RATE
    assert [RunKind.recorded(word) for word in ("", None, "remote", "sweep")] == [None] * 4


def test_a_load_sweeps_points_read_back_with_their_kind(tmp_path):
    """sweep.csv holds the axis as its word; read back, the points carry the SweepKind again."""
    from backend.events import LoadPoint
    from backend.records import RunData
    from backend.sweeps.points import read_points, write_points
    point = LoadPoint(SweepKind.CONCURRENCY, 4.0, 10, 0, 2.0, 5.0, 100.0, 20.0, 30.0, 40.0, 9.0, 11.0, 12.0,
                      float("nan"), float("nan"), float("nan"))
    write_points(tmp_path, SweepKind.CONCURRENCY, [point], RunData("r", config={"mode": "sweep-concurrency"}))
    kind, points = read_points(tmp_path)
    assert kind is SweepKind.CONCURRENCY and points[0].kind is SweepKind.CONCURRENCY and points[0].x == 4.0
    assert json.loads((tmp_path / "run.json").read_text())["info"]["sweep_kind"] == "concurrency"
