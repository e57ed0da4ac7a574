"""`calibrate --from`: a server's profile fitted on remote runs against it; bad input in one line each."""
from __future__ import annotations

import json
import shutil

import pytest

from backend.cli.main import main
from backend.records import RequestRecord, RequestStatus
from backend.roofline.profiles import find_profile, load_profile
from backend.sim.fitted import FittedOn
from backend.sim.model import resolve_model
from backend.sim.server_fit import Pricing, band, fit_server, replay, server_run
from backend.sim.step_time import CostModel
from backend.precision import precision
from tests.fakes.llama_server import FakeServer, llama_server

SMALL = ["--arrival", "poisson", "--prompt-len", "16:40", "--output-len", "4:8", "--ignore-eos"]


def _remote(url, out, rate, requests=4, seed=1, served="ok"):
    argv = ["load", "--endpoint", url, "--served-model", served, *SMALL, "--rate", str(rate), "--requests", str(requests),
            "--seed", str(seed), "--out", str(out)]
    assert main(argv, open_window=None) == 0


def _fit_from(runs, out, *extra):
    return main(["calibrate", "--from", *map(str, runs), "--profile", "cpu", "--model", "smollm2-135m",
                 "--dtype", "q4_1", "--out", str(out), *extra], open_window=None)


def _requests(ttft, tpot, n=6, gap=2000.0):
    return [RequestRecord(request_id=i, status=RequestStatus.FINISHED, prompt_tokens=64, output_tokens=16,
                          arrival_ms=i * gap, ttft_ms=ttft, tpot_ms=tpot) for i in range(n)]


def test_the_fit_recovers_a_simulated_servers_terms():
    """Runs simulated with known terms are fitted back to within a few percent of their p50s."""
    pricing = Pricing(resolve_model("smollm2-135m"), precision("q4_1", "float32"), find_profile("cpu"), 1)
    truth = CostModel(mfu=0.05, afu=0.025, mbu=0.1, step_ms=3.0, token_ms=0.0, request_ms=0.0)
    runs = []
    for gap in (4000.0, 400.0, 150.0):   # light, moderate, queued
        run = server_run(f"gap-{gap}", _requests(1.0, 1.0, gap=gap))
        run.ttft_p50_ms, run.tpot_p50_ms, run.service_p50_ms = replay(run, truth, pricing)
        runs.append(run)
    fitted = fit_server(runs, pricing, CostModel.for_profile(pricing.profile, pricing.prec))
    for run in runs:
        ttft, tpot, _ = replay(run, fitted, pricing)
        assert ttft == pytest.approx(run.ttft_p50_ms, rel=0.05) and tpot == pytest.approx(run.tpot_p50_ms, rel=0.05)


def test_the_band_is_the_largest_miss_or_a_quantile():
    assert band([0.1, -0.3, 0.05]) == pytest.approx(0.3)
    assert band([0.0, 0.1, 0.2, 0.3, 0.4, -1.0]) == pytest.approx(0.4)   # 80% of six misses


def test_bad_input_gets_one_line(tmp_path, capsys):
    with FakeServer() as one, FakeServer() as other:
        _remote(one.url, tmp_path / "a", 20)
        _remote(one.url, tmp_path / "b", 40)
        _remote(other.url, tmp_path / "c", 40)
        _remote(one.url, tmp_path / "e", 80)
    assert _fit_from([tmp_path / "a", tmp_path / "b"], tmp_path / "p.toml") == 2
    assert "needs at least 3 runs" in capsys.readouterr().err
    assert _fit_from([tmp_path / "a", tmp_path / "b", tmp_path / "c"], tmp_path / "p.toml") == 2
    err = capsys.readouterr().err
    assert "different servers or models" in err and len(err.strip().splitlines()) == 1
    shutil.copytree(tmp_path / "b", tmp_path / "d")   # the same server, another model named in run.json
    meta = json.loads((tmp_path / "d" / "run.json").read_text())
    meta["info"]["served_model"] = "another-model"
    (tmp_path / "d" / "run.json").write_text(json.dumps(meta))
    assert _fit_from([tmp_path / "a", tmp_path / "b", tmp_path / "d"], tmp_path / "p.toml") == 2
    assert "different servers or models" in capsys.readouterr().err
    assert main(["calibrate", "--from", *(str(tmp_path / n) for n in "abb")], open_window=None) == 2
    assert "needs --profile" in capsys.readouterr().err
    assert main(["run", "--model", "tiny", "--prompt-len", "8", "--output-len", "2", "--out", str(tmp_path / "here")],
                open_window=None) == 0
    assert _fit_from([tmp_path / "a", tmp_path / "b", tmp_path / "here"], tmp_path / "p.toml") == 2
    assert "not a remote run" in capsys.readouterr().err
    assert not (tmp_path / "p.toml").exists()
    # one server's three runs fit on a GPU's profile, though the fake answers in no time at all
    assert main(["calibrate", "--from", *(str(tmp_path / n) for n in "abe"), "--profile", "h100-sxm", "--model",
                 "llama-8b", "--max-batch", "8", "--out", str(tmp_path / "gpu.toml")], open_window=None) == 0
    assert load_profile(tmp_path / "gpu.toml").simulation["band_runs"] == 3


def test_fitted_on_the_llama_cpp_server_the_profile_loads_and_simulates(tmp_path, capsys):
    with llama_server(log_path=tmp_path / "server.log") as server:
        runs = []
        for i, rate in enumerate((0.5, 2.0, 8.0)):
            _remote(server.url, tmp_path / f"r{i}", rate, requests=3, seed=i, served="smollm2")
            runs.append(tmp_path / f"r{i}")
    out = tmp_path / "server.toml"
    assert _fit_from(runs, out) == 0
    text = capsys.readouterr().out
    assert "band (each run left out of a fit on the others)" in text
    profile = load_profile(out)
    table = profile.simulation
    assert table["fitted"] is True and "calibrate --from" in table["source"] and table["band_runs"] == 3
    assert table["band_ttft_p50"] >= 0 and table["band_tpot_p50"] >= 0
    assert FittedOn.of_profile(profile).dtype == "q4_1"
    sim = tmp_path / "sim"
    assert main(["load", "--simulate", "--profile", str(out), "--model", "smollm2-135m", "--max-batch", "1",
                 *SMALL, "--rate", "1", "--requests", "5", "--out", str(sim)], open_window=None) == 0
    info = json.loads((sim / "run.json").read_text())["info"]
    assert info["dtype"] == "q4_1" and info["cost_model"] == CostModel.for_profile(profile).terms()
