"""run.json's typed records: RunInfo and Summary round-trip through their one to_json/from_json, and
run folders an earlier version wrote (tests/data/runs_v1) open through the one upgrade."""
import io
import json
import math
from argparse import Namespace
from pathlib import Path

import pytest

from backend.errors import InputError
from backend.records import RunData
from backend.results.export import FORMAT, read_meta, read_run, upgrade, write_run
from backend.run_info import RemoteInfo, ReplicasInfo, RunInfo, SweepInfo, TargetKind, now_created
from backend.summary import Crossovers, PrecisionGain, Summary

DATA = Path(__file__).resolve().parents[1] / "data"
V1 = DATA / "runs_v1"
# every run folder under tests/data (a sweep's point folders too)
FOLDERS = sorted(p.parent for p in DATA.rglob("run.json"))
TARGETS = {"local-run": TargetKind.LOCAL, "sweep-batch": TargetKind.LOCAL, "remote-load": TargetKind.REMOTE,
           "sim-load": TargetKind.SIMULATED, "sim-disagg": TargetKind.SIMULATED, "sim-replicas": TargetKind.SIMULATED,
           "sweep-batch-sim": TargetKind.SIMULATED, "sweep-precision-sim": TargetKind.SIMULATED,
           "sweep-rate-sim": TargetKind.SIMULATED, "sweep-pd-sim": TargetKind.SIMULATED}


def same_json(a, b) -> bool:
    """Equal as run.json would hold them (NaN equal to NaN, as json writes both the same way)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def known(value):
    """A run.json object without its None entries: a reader takes an absent entry for None."""
    if isinstance(value, dict):
        return {k: known(v) for k, v in value.items() if v is not None}
    return [known(v) for v in value] if isinstance(value, list) else value


def test_the_data_folder_holds_the_earlier_formats_runs():
    assert {p.name for p in V1.iterdir()} == set(TARGETS)
    assert len(FOLDERS) >= 14


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(DATA)))
def test_every_folder_in_tests_data_opens_with_every_key_known(folder):
    run = read_run(folder)
    raw = json.loads((folder / "run.json").read_text())
    assert run.info.extra == {} and run.summary.extra == {}   # every key it holds is a typed field
    top = folder.relative_to(V1).parts[0] if folder.is_relative_to(V1) else None
    if top in TARGETS:
        assert run.info.target is TARGETS[top]
    # nothing lost: the typed records give back what the folder held (v1 left "target" out for a local run)
    info = run.info.to_json()
    if "target" not in raw["info"]:
        assert info.pop("target") == "local"
    held = known(raw["info"])   # every entry it held comes back; what it lacked comes back as the default
    assert same_json({k: v for k, v in known(info).items() if k in held}, held)
    assert all(v in ("", 0, False, []) for k, v in known(info).items() if k not in held)
    summary = {k: v for k, v in raw["summary"].items() if v is not None or k == "measured_crossover_batch"}
    assert same_json(run.summary.to_json(), summary)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(DATA)))
def test_a_folder_written_again_reads_back_the_same(folder, tmp_path):
    run = read_run(folder)
    write_run(tmp_path / "again", run)
    back = read_run(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "run.json").read_text())["format"] == FORMAT
    assert same_json(back.info.to_json(), run.info.to_json())
    assert same_json(back.summary.to_json(), run.summary.to_json())
    assert back.steps == run.steps and back.requests == run.requests


def test_the_sub_records_of_each_target():
    local = read_run(V1 / "local-run").info
    assert local.is_local and local.local.threads == 1 and local.local.matmul["unit"]
    assert local.simulated is None and local.remote is None and local.created_minute.count(":") == 1
    remote = read_run(V1 / "remote-load").info
    assert remote.is_remote and remote.remote.endpoint.startswith("http://127.0.0.1:") and remote.local is None
    assert remote.remote.server_metrics["engine"] == "vllm" and remote.warnings == remote.remote.warnings
    disagg = read_run(V1 / "sim-disagg").info
    assert disagg.is_simulated and disagg.disaggregated.prefill_workers == 1 and disagg.replicas.prefill_tp == 1
    assert disagg.simulated.cost_model["mfu"] > 0
    assert read_run(V1 / "sim-replicas").info.replicas.dp == 2
    sweep = read_run(V1 / "sweep-rate-sim").info
    assert sweep.sweep.sweep_kind == "rate" and sweep.sweep.points == ["rate-5", "rate-20"]


def test_the_summarys_named_families():
    batch = read_run(V1 / "sweep-batch").summary
    assert batch.kind == "batch" and isinstance(batch.crossover, Crossovers)
    precision = read_run(V1 / "sweep-precision-sim").summary
    assert set(precision.precision) == {"bfloat16", "q8_0", "q4_1"}   # each against the first, float32
    assert all(isinstance(g, PrecisionGain) and g.bytes_ratio > 1 for g in precision.precision.values())
    remote = read_run(V1 / "remote-load").summary
    assert remote.server_ttft_count is not None and remote.client_workers >= 1


def test_summary_round_trips_every_family_and_keeps_unknown_names():
    s = Summary(num_requests=3, ttft_p50_ms=math.nan, errors={"http_500": 2}, kind="batch",
                crossover=Crossovers(measured=None, predicted=8), precision={"q8_0": PrecisionGain(2.0, 1.5, 1.1)},
                extra={"from_a_newer_version": 1.0})
    flat = s.to_json()
    assert flat["errors_http_500"] == 2 and flat["measured_crossover_batch"] is None
    assert flat["q8_0_bytes_ratio"] == 2.0 and "num_finished" not in flat   # None: not recorded, not written
    back = Summary.from_json(flat)
    assert same_json(back.to_json(), flat) and back.errors == {"http_500": 2} and back.extra == s.extra
    assert back.merged({"price_per_hour": 3.0}).price_per_hour == 3.0
    assert "kind" not in s.numbers() and s.numbers()["num_requests"] == 3.0


def test_info_round_trips_and_names_its_target():
    info = RunInfo(target=TargetKind.REMOTE, model="m", device="remote", created=now_created(),
                   remote=RemoteInfo(endpoint="http://h:1/v1", warnings=["w"]),
                   replicas=ReplicasInfo(tp=2), sweep=SweepInfo(sweep_kind="rate"), extra={"later": True})
    flat = info.to_json()
    assert flat["target"] == "remote" and flat["endpoint"] == "http://h:1/v1" and flat["deployment"]["tp"] == 2
    assert flat["sweep_kind"] == "rate" and flat["later"] is True
    back = RunInfo.from_json(flat)
    assert back == info
    assert RunInfo.from_json({"model": "m"}).target is TargetKind.LOCAL   # as upgraded: see upgrade()


def test_upgrade_names_a_version_1_local_run_and_its_bool_server_metrics():
    old = {"format": "phasescope-run/1", "run_id": "r", "config": {}, "info": {"model": "m", "server_metrics": True},
           "summary": {"num_requests": 1}}
    new = upgrade(old, Path("run.json"))
    assert new["format"] == FORMAT and new["info"]["target"] == "local" and new["info"]["server_metrics"] == {}
    assert old["info"] == {"model": "m", "server_metrics": True}   # the caller's dict is left alone
    assert upgrade(new, Path("run.json")) == new                   # this version's passes unchanged
    for bad in ({"format": "phasescope-run/0"}, {"format": None}, [], "text"):
        with pytest.raises(InputError, match="format"):
            upgrade(bad, Path("run.json"))
    with pytest.raises(InputError, match="target 'quantum' is not one this version knows"):
        upgrade({**new, "info": {"target": "quantum"}}, Path("run.json"))


def test_read_meta_is_none_for_a_folder_without_a_run(tmp_path):
    assert read_meta(tmp_path) is None
    (tmp_path / "run.json").write_text("{not json")
    assert read_meta(tmp_path) is None
    assert read_meta(V1 / "sim-load")["info"]["target"] == "simulated"


def test_every_v1_run_opens_in_compare():
    from backend.cli.compare import run_compare
    runs = [V1 / "local-run", V1 / "sim-load", V1 / "sim-disagg", V1 / "sim-replicas", V1 / "remote-load"]
    out = io.StringIO()
    assert run_compare(Namespace(runs=[str(r) for r in runs], resamples=100, seed=0, out=None), out=out) == 0
    text = out.getvalue()
    assert "remote http://127.0.0.1" in text and "smollm2-135m" in text and "llama-3.1-8b" in text
    sweeps = [V1 / "sweep-batch", V1 / "sweep-batch-sim"]
    assert run_compare(Namespace(runs=[str(r) for r in sweeps], resamples=100, seed=0, out=None), out=out) == 0


@pytest.mark.parametrize("folder, rows", [("sweep-precision-sim", ["bfloat16: decode tok/s", "q4_1: TPOT (ms)"]),
                                          ("sweep-rate-sim", ["rate 5/s: TTFT p50 (ms)", "rate 20/s: tok/s per user"]),
                                          ("sweep-pd-sim", ["1P:2D: output tok/s", "2P:1D: ITL p50 (ms)"])])
def test_every_v1_sweep_opens_in_compare_with_a_row_per_point(folder, rows, tmp_path):
    from backend.cli.compare import run_compare
    out = io.StringIO()
    args = Namespace(runs=[str(V1 / folder)] * 2, resamples=100, seed=0, out=str(tmp_path))
    assert run_compare(args, out=out) == 0
    table = [line.split("  ")[0] for line in out.getvalue().splitlines()]
    assert all(r in table for r in rows), out.getvalue()
    assert (tmp_path / "compare.csv").read_text().count("\n") > len(rows)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(DATA)))
def test_every_folder_opens_in_the_windows_store(folder):
    from gui.state.live_metrics import compute
    from gui.state.references import read_run_folder, run_label
    from gui.state.run_store import RunStore
    run, sweep, precision = read_run_folder(folder)
    store = RunStore()
    store.load(run, folder, sweep, precision)
    assert store.num_requests == len(run.requests) and store.remote == run.info.is_remote
    assert store.finished.summary is run.summary
    compute(store)   # the metrics panel's figures, from the typed info
    assert run.info.model in run_label(run.config, run.info)
    again = store.to_run_data()
    assert again.info is run.info and again.summary is run.summary


def test_run_data_defaults_are_typed():
    run = RunData()
    assert isinstance(run.info, RunInfo) and isinstance(run.summary, Summary) and run.info.is_local
