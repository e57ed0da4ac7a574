"""The simulated target: the real scheduler on a virtual clock, each step priced by a cost model."""
import json

import pytest

from backend.cli.main import main
from backend.sim.model import resolve_precision
from backend.sim.runner import VirtualClock
from backend.sim.step_time import CostModel
from backend.results.export import read_run
from backend.models.shapes import SHAPES
from backend.records import Phase, RequestStatus
from backend.roofline.profiles import find_profile

LOAD = ["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b"]


def load(tmp_path, name, *flags):
    out = tmp_path / name
    assert main([*LOAD, *flags, "--out", str(out)], open_window=None) == 0
    return out


@pytest.fixture(scope="module")
def thousand(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    return load(tmp, "thousand", "--requests", "1000", "--arrival", "poisson", "--rate", "50",
                "--prompt-len", "512", "--output-len", "64")


def test_a_thousand_requests_finish_on_virtual_time(thousand, capsys):
    run = read_run(thousand)
    assert len(run.requests) == 1000
    for r in run.requests:
        assert r.status in (RequestStatus.FINISHED, RequestStatus.REJECTED)
        assert r.finish_reason
    finished = [r for r in run.requests if r.status is RequestStatus.FINISHED]
    assert finished and all(r.output_tokens == 64 for r in finished)   # never an early stop token
    assert sum(s.num_decode_tokens + (s.num_prefill_requests) for s in run.steps) >= 64 * len(finished)
    # 1,000 arrivals at 50/s span about 20 s of the simulated device's time
    assert run.summary.duration_s > 10
    assert run.info.simulated.virtual_s == pytest.approx(run.summary.duration_s, rel=0.01)
    assert run.info.wall_s > 0   # recorded; its size is the machine's, shown by bench/sim_speed.py, not asserted


def test_run_json_says_simulated_and_records_the_cost_model(thousand):
    info = json.loads((thousand / "run.json").read_text())["info"]
    assert info["target"] == "simulated"
    assert info["profile"] == "h100-sxm"
    assert info["device"] == "simulated h100-sxm"
    from backend.roofline.profiles import find_profile
    from backend.sim.step_time import CostModel
    fitted = find_profile("h100-sxm").simulation   # the shipped profile's terms, fitted to published figures
    assert info["cost_model"] == CostModel.for_profile(find_profile("h100-sxm")).terms()
    assert info["cost_model"]["mfu"] == fitted["mfu"] and info["cost_model"]["serial"] == 1.0
    assert info["cost_model_source"].startswith("fitted by bench/sim_vs_published.py")
    assert "simulated on h100-sxm" in info["source"]


def test_step_durations_are_the_cost_models_price(thousand):
    run = read_run(thousand)
    shape, profile = SHAPES["llama-8b"], find_profile("h100-sxm")
    prec = resolve_precision("auto", profile)
    model = CostModel.from_terms(run.info.simulated.cost_model)
    assert not any(r.num_preemptions for r in run.requests)   # so every prefill is one whole 512-token prompt
    decodes = [s for s in run.steps if s.phase is Phase.DECODE][::97]
    prefills = [s for s in run.steps if s.phase is Phase.PREFILL][::40]   # paged admits more a step: fewer prefill steps
    assert len(decodes) > 5 and len(prefills) > 5
    for s in decodes:
        # a decode step's cost depends on its contexts' sum only: any split of it prices the same
        n = s.num_requests
        contexts = [s.context_tokens - (n - 1)] + [1] * (n - 1)
        assert s.duration_ms / 1000 == pytest.approx(model.step_seconds(shape, prec, profile, [1] * n, contexts))
    for s in prefills:
        k = s.num_requests
        assert s.num_tokens == s.context_tokens == 512 * k
        assert s.duration_ms / 1000 == pytest.approx(model.step_seconds(shape, prec, profile, [512] * k, [512] * k))


def test_continuous_beats_static_under_a_burst(tmp_path):
    flags = ["--requests", "64", "--arrival", "burst", "--prompt-len", "256", "--output-len", "16:256",
             "--max-batch", "16"]
    static = read_run(load(tmp_path, "static", *flags, "--policy", "static"))
    continuous = read_run(load(tmp_path, "continuous", *flags, "--policy", "continuous"))
    for run in (static, continuous):
        assert sum(r.status is RequestStatus.FINISHED for r in run.requests) == 64
    # deterministic: a simulated time, not a measured one
    assert continuous.summary.duration_s < static.summary.duration_s


def test_the_summary_says_simulated(tmp_path, capsys):
    assert main([*LOAD, "--requests", "20", "--arrival", "poisson", "--rate", "5"], open_window=None) == 0
    text = capsys.readouterr().out
    assert "device  simulated h100-sxm (NVIDIA H100 SXM 80GB)" in text
    assert "SIMULATED" in text and "simulated on h100-sxm" in text


def test_run_simulated_batch_prices_on_the_profile(capsys):
    assert main(["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--batch", "8",
                 "--prompt-len", "512"], open_window=None) == 0
    text = capsys.readouterr().out
    assert "decode  " in text and "memory-bound" in text and "compute-bound" in text


@pytest.mark.parametrize("argv, message", [
    (["load", "--simulate", "--model", "llama-8b"], "--simulate needs --profile"),
    (["load", "--simulate", "--profile", "h100-sxm", "--model", "some/model.gguf"], "needs a known model shape"),
    (["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--prompt", "hi"], "synthetic prompts"),
    (["load", "--simulate", "--profile", "t4", "--model", "llama-8b", "--max-batch", "256", "--prompt-len", "4096",
      "--output-len", "4096"], "GB"),
])
def test_refusals_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv, open_window=None) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cost_model_and_clock():
    clock = VirtualClock()
    clock.advance(0.5)
    clock.advance(-1)   # never backwards
    assert clock.now() == 0.5
    cpu = CostModel.for_profile(find_profile("cpu"))
    assert cpu.step_ms > CostModel().step_ms
    with pytest.raises(Exception, match="mfu"):
        CostModel(mfu=0).validate()
