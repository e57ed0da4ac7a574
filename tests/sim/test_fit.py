"""The cost model by hand, its fit to steps with known terms, `calibrate --fit`, the simulated
sweeps, the load sweep's Pareto front, and the cost per million tokens."""
import csv
import json
import math
import statistics

import pytest

from backend.cli.main import main
from backend.errors import InputError
from backend.summary import Summary
from backend.results.cost import cost_figures
from backend.shape import ModelShape
from backend.precision import precision
from backend.records import Phase, StepRecord
from backend.sim.fit import MeasuredRun, batch_bucket, fit_cost_model, step_errors
from backend.roofline.profiles import GpuProfile, find_profile, load_profile
from backend.sim.step_time import CostModel
from backend.sweeps.load import mark_front
from backend.events import LoadPoint

# one layer, no attention heads worth speaking of: every FLOP and byte can be counted by hand
SHAPE = ModelShape(arch="llama", vocab_size=10, hidden_size=4, num_layers=1, num_heads=1, num_kv_heads=1,
                   head_dim=4, intermediate_size=8, max_position=4096)
FP32 = precision("float32")
FAKE = GpuProfile(key="fake", name="Fake device", vendor="Test", memory_gb=1, bandwidth_gbs=1.0,
                  tflops={"fp32": 1e-6}, source="round numbers")   # 1 MFLOP/s, 1 GB/s


def test_a_step_priced_by_hand():
    # matrices per layer: q,k,v,o 4x4 each (64) + MLP 3 x 4x8 (96) = 160; head 10x4 = 40
    # one decode token at context 1: matmul FLOPs 2*160 + head 2*40 = 400; attention 4*1*4*1 = 16
    model = CostModel(mfu=0.5, afu=0.25, mbu=1.0, step_ms=1.0, token_ms=0.5, request_ms=0.25)
    compute_s = 400 / (1e6 * 0.5) + 16 / (1e6 * 0.25)            # 0.000864 s
    # bytes: matrices (160 + 40) * 4 + norms (2*4 + 4) * 4 + one gathered row 4*4 + KV (1 + 1) * 2*4*4
    #   + activations (4 + 4*4*1 + 4 + 10) * 4 = 800 + 48 + 16 + 64 + 136 = 1064
    memory_s = 1064 / 1e9
    expected = max(compute_s, memory_s) + (1.0 + 0.5 + 0.25) / 1000
    assert model.step_seconds(SHAPE, FP32, FAKE, [1], [1]) == pytest.approx(expected, rel=1e-12)
    # a prefill of 3 tokens: matmul 3*400 = 1200... the head reads one row: 2*160*3 + 80 = 1040;
    # attention pairs 3*4/2 = 6 -> 4*4*6 = 96 FLOPs
    expected = (1040 / 0.5e6 + 96 / 0.25e6) + (1.0 + 1.5 + 0.25) / 1000
    assert model.step_seconds(SHAPE, FP32, FAKE, [3], [3]) == pytest.approx(expected, rel=1e-12)

    # a fixed attention cost per request and layer: 2 requests x 1 layer x 3 microseconds more, nothing else moves
    fixed = CostModel(mfu=0.5, afu=0.25, mbu=1.0, request_layer_us=3.0)
    assert fixed.step_seconds(SHAPE, FP32, FAKE, [1, 1], [5, 9]) - CostModel(mfu=0.5, afu=0.25, mbu=1.0).step_seconds(
        SHAPE, FP32, FAKE, [1, 1], [5, 9]) == pytest.approx(2 * 3.0e-6, rel=1e-9)


def test_the_experts_efficiency_falls_with_the_rows_each_expert_gets():
    """efu x m / (m + efu_rows): a decode step's few rows per expert pay much more than a prefill's many."""
    from backend.roofline.model_configs import sim_shape
    from backend.roofline.cost import step_cost
    shape, prec, h100 = sim_shape("mixtral-8x7b"), precision("bfloat16"), find_profile("h100-sxm")
    flat = CostModel(mfu=0.6, afu=0.3, mbu=0.8, serial=1.0, efu=0.5)
    rows = CostModel(mfu=0.6, afu=0.3, mbu=0.8, serial=1.0, efu=0.5, efu_rows=256.0)
    decode = step_cost(shape, prec, [1] * 256, [512] * 256)       # 256 tokens x 2 of 8 experts: 64 rows each
    prefill = step_cost(shape, prec, [4096], [4096])              # 1,024 rows each
    assert decode.expert_rows == pytest.approx(64.0, rel=0.01) and prefill.expert_rows == pytest.approx(1024, rel=0.01)
    slower = [rows.cost_seconds(c, h100, prec) / flat.cost_seconds(c, h100, prec) for c in (decode, prefill)]
    assert slower[0] > slower[1] > 1.0   # both compute-bound in their experts: the decode step's at a fifth of efu
    assert CostModel(efu_rows=0.0).terms() == {**CostModel().terms(), "efu_rows": 0.0}   # absent: no effect


def synthetic_runs(model: CostModel, shape, profile) -> list[MeasuredRun]:
    """Steps whose durations are exactly the model's prices: a batch sweep, a prompt sweep, a mixed load."""
    def step(i, phase, prefill, decode, contexts):
        s = StepRecord.measured(run_id="x", step=i, phase=phase, prefill_tokens=prefill, num_decode=decode,
                                contexts=contexts, start_ms=0, duration_ms=1.0)
        s.duration_ms = model.record_seconds(shape, FP32, profile, s) * 1000
        return s
    batch = [step(i, Phase.DECODE, [], b, [c] * b) for i, (b, c) in enumerate(
        (b, c) for b in (1, 2, 4, 8, 16, 64, 256) for c in (128, 1024))]
    prompt = [step(i, Phase.PREFILL, [n], 0, [n]) for i, n in enumerate((16, 64, 256, 1024, 4096))]
    load = [step(i, Phase.DECODE, [], b, [300 + 7 * i] * b) for i, b in enumerate((3, 5, 6, 7, 12, 20, 33, 48))]
    load += [step(100 + i, Phase.PREFILL, [n, n], 0, [n, n]) for i, n in enumerate((40, 200, 800))]
    return [MeasuredRun("batch", shape, FP32, batch), MeasuredRun("prompt", shape, FP32, prompt),
            MeasuredRun("load", shape, FP32, load)]


def test_fitting_recovers_known_terms():
    from backend.models.shapes import SHAPES
    shape, profile = SHAPES["smollm2-135m"], find_profile("cpu")
    truth = CostModel(mfu=0.7, afu=0.2, mbu=0.55, step_ms=2.0, token_ms=0.01, request_ms=0.3)
    fitted = fit_cost_model(synthetic_runs(truth, shape, profile), profile)
    for name in ("mfu", "afu", "mbu", "step_ms", "request_ms"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=0.05), name
    assert fitted.token_ms == pytest.approx(truth.token_ms, abs=0.002)
    report = step_errors(fitted, synthetic_runs(truth, shape, profile), profile)
    assert report.overall("decode").mape < 1 and report.overall("prefill").mape < 1
    # the placeholders price the same steps far worse: what fitting is for
    assert step_errors(CostModel.for_profile(profile), synthetic_runs(truth, shape, profile),
                       profile).overall("prefill").mape > 10


def test_fitting_learns_the_fixed_cost_only_prefilling_steps_pay():
    """The engine prefills layer by layer and decodes every layer in one call of the C kernels: a fixed cost
    a layer that only prefill (and mixed) steps pay, which no per-step, per-token or per-request term can
    stand for without mispricing the decode steps or the short prompts."""
    from backend.models.shapes import SHAPES
    shape, profile = SHAPES["smollm2-135m"], find_profile("cpu")
    truth = CostModel(mfu=0.7, afu=0.2, mbu=0.55, step_ms=2.0, token_ms=0.01, request_ms=0.3, prefill_layer_us=300.0)
    runs = synthetic_runs(truth, shape, profile)
    fitted = fit_cost_model(runs, profile)
    assert fitted.prefill_layer_us == pytest.approx(300.0, rel=0.05)
    assert fitted.step_ms == pytest.approx(2.0, rel=0.05)   # not folded into every step
    assert step_errors(fitted, runs, profile).overall("prefill").mape < 1
    # without the term the short prompts are priced far too cheap: what the bundled model's local fit missed
    blind = fit_cost_model([MeasuredRun(r.name, r.shape, r.precision, [s for s in r.steps if s.phase == Phase.DECODE])
                            for r in runs], profile)
    assert blind.prefill_layer_us == 0.0   # no prefilling step to learn it from: left at 0, not guessed
    short = StepRecord.measured(run_id="x", step=0, phase=Phase.PREFILL, prefill_tokens=[16], num_decode=0,
                                contexts=[16], start_ms=0, duration_ms=1.0)
    assert fitted.record_seconds(shape, FP32, profile, short) == pytest.approx(
        truth.record_seconds(shape, FP32, profile, short), rel=0.02)


def test_the_host_time_between_steps_is_priced_as_the_steps():
    """A token waits for its step and for what the engine does before the next one (scheduling, recording):
    the fit prices each step to the next one's start when that follows at once, so the simulated TPOT
    carries it; a long gap (the engine idle, a sweep between points) and another worker's step do not count."""
    from backend.models.shapes import SHAPES
    from backend.sim.fit import HOST_GAP_MS, busy_ms
    shape, profile = SHAPES["smollm2-135m"], find_profile("cpu")
    truth = CostModel(mfu=0.7, afu=0.2, mbu=0.55, step_ms=2.0, token_ms=0.01, request_ms=0.3)
    host_ms = 0.5   # of truth's step_ms, spent between a step's end and the next one's start
    runs = synthetic_runs(truth, shape, profile)
    for run in runs:
        clock = 0.0
        for s in run.steps:
            price = s.duration_ms
            s.start_ms, s.duration_ms = clock, price - host_ms
            clock += price
    fitted = fit_cost_model(runs, profile)
    assert fitted.step_ms == pytest.approx(2.0, rel=0.05)   # with only the durations: 1.5
    last = runs[0].steps[-1]
    assert busy_ms(runs[0].steps)[-1] == last.duration_ms   # no next step: its duration
    a = StepRecord.measured(run_id="x", step=0, phase=Phase.DECODE, prefill_tokens=[], num_decode=1,
                            contexts=[9], start_ms=0.0, duration_ms=3.0)
    b = StepRecord.measured(run_id="x", step=1, phase=Phase.DECODE, prefill_tokens=[], num_decode=1,
                            contexts=[10], start_ms=3.0 + HOST_GAP_MS + 5, duration_ms=3.0)
    assert busy_ms([a, b])[0] == 3.0            # the engine waited for an arrival: not the step's
    b.start_ms, b.worker = 3.2, 1
    assert busy_ms([a, b])[0] == 3.0            # another worker's step
    b.worker = a.worker
    assert busy_ms([a, b])[0] == pytest.approx(3.2)


def test_batch_buckets():
    assert [batch_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 300)] == ["1", "2", "3-4", "3-4", "5-8", "5-8", "9-16",
                                                                    "257-512"]


def test_a_bad_simulation_table_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\nvendor = "y"\nmemory_gb = 1\nbandwidth_gbs = 1\nsource = ""\n[tflops]\nfp32 = 1\n'
                    '[simulation]\nmfu = -1\n')
    with pytest.raises(InputError, match=r"bad.toml: field .simulation.mfu. is a fraction of the peak"):
        load_profile(path)
    path.write_text('name = "x"\nvendor = "y"\nmemory_gb = 1\nbandwidth_gbs = 1\nsource = ""\nprice_per_hour = 2\n'
                    '[tflops]\nfp32 = 1\n')
    with pytest.raises(InputError, match="price_source"):
        load_profile(path)


def test_calibrate_fit_writes_the_terms_and_reports_held_out_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))
    runs = []
    for name, argv in (("b", ["sweep", "batch", "--batches", "1,2,4", "--context", "64", "--steps", "2"]),
                       ("p", ["sweep", "prompt", "--lengths", "16,64", "--steps", "2"]),
                       ("l", ["load", "--requests", "6", "--arrival", "burst", "--prompt-len", "8:40",
                              "--output-len", "4:8", "--max-batch", "4", "--ignore-eos"])):
        assert main([*argv, "--model", "tiny", "--threads", "1", "--out", str(tmp_path / name)], open_window=None) == 0
        runs.append(str(tmp_path / name))
    device = json.loads((tmp_path / "b" / "run.json").read_text())["info"]["device_name"]
    profile = tmp_path / "mine.toml"
    profile.write_text(f'name = "This machine: {device} (1 threads)"\nvendor = "x"\nmemory_gb = 8\n'
                       f'bandwidth_gbs = 20\nmeasured = true\nsource = "test"\n[tflops]\nfp32 = 0.1\n')
    capsys.readouterr()
    assert main(["calibrate", "--fit", *runs, "--out", str(profile)], open_window=None) == 0
    out = capsys.readouterr().out
    assert "step-time error on b (fitted on the other 2)" in out and "placeholder MAPE" in out
    fitted = load_profile(profile)
    assert fitted.simulation["fitted"] is True and "fitted by phasescope calibrate --fit" in fitted.simulation["source"]
    model = CostModel.for_profile(fitted)
    assert model.source.startswith("fitted")
    # the simulator now prices with these terms
    assert main(["run", "--simulate", "--profile", str(profile), "--model", "tiny", "--prompt-len", "32",
                 "--out", str(tmp_path / "sim")], open_window=None) == 0
    info = json.loads((tmp_path / "sim" / "run.json").read_text())["info"]
    assert info["cost_model"] == model.terms()
    # a simulated run is no data to fit on
    assert main(["calibrate", "--fit", str(tmp_path / "sim"), "--out", str(profile)], open_window=None) == 2
    assert "a simulated run" in capsys.readouterr().err


def test_simulated_batch_sweep_writes_the_cost_models_prices(tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", "batch", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b",
                 "--batches", "1,64,256", "--context", "1000", "--out", str(out)], open_window=None) == 0
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    model, profile = CostModel.for_profile(find_profile("h100-sxm")), find_profile("h100-sxm")
    from backend.models.shapes import SHAPES
    for row in rows:
        b = int(row["batch"])
        # a point is the median decode step of a priced run: after 2 warm-up steps, its 8 timed steps
        # attend to the prompt's 1,000 tokens and those sampled since (1,003 to 1,010)
        prices = [model.step_seconds(SHAPES["llama-8b"], precision("bfloat16"), profile, [1] * b, [1003 + k] * b)
                  for k in range(8)]
        assert float(row["step_ms"]) == pytest.approx(statistics.median(prices) * 1000)
    assert float(rows[-1]["tokens_per_s"]) > 10 * float(rows[0]["tokens_per_s"])   # batching pays on the GPU
    info = json.loads((out / "run.json").read_text())["info"]
    assert info["target"] == "simulated" and info["device"] == "simulated h100-sxm"


def test_a_measured_sweep_carries_the_simulated_points_beside_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))   # the generic CPU profile
    out = tmp_path / "sweep"
    assert main(["sweep", "prompt", "--model", "tiny", "--lengths", "16,64", "--steps", "2", "--out", str(out)],
                open_window=None) == 0
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert all(float(r["simulated_ms"]) > 0 for r in rows)
    assert "simulated on cpu beside the measured points" in capsys.readouterr().out
    summary = {r["metric"]: r["value"] for r in csv.DictReader(open(out / "summary.csv"))}
    assert float(summary["simulated_mape"]) >= 0


def test_the_pareto_front_and_the_best_goodput():
    def point(x, device, user, goodput=math.nan):
        return LoadPoint("rate", x, 1, 0, 1, 1, device, user, 1, 1, 1, 1, 1, goodput, 1, math.nan)
    points = [point(1, 100, 50, 1.0), point(2, 180, 45, 1.9), point(4, 150, 40, 2.5), point(8, 300, 20, 0.5)]
    mark_front(points)
    assert [p.pareto for p in points] == [True, True, False, True]   # 4/s is beaten on both by 2/s
    assert [p.best_goodput for p in points] == [False, False, True, False]


def test_a_simulated_rate_sweep_accounts_for_every_request(tmp_path, capsys):
    out = tmp_path / "rates"
    assert main(["sweep", "rate", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--rates", "5,80",
                 "--requests", "120", "--slo-ttft-ms", "500", "--slo-tpot-ms", "30", "--out", str(out)],
                open_window=None) == 0
    text = capsys.readouterr().out
    assert "Pareto front" in text and "best goodput" in text
    rows = list(csv.DictReader(open(out / "sweep.csv")))
    assert [float(r["x"]) for r in rows] == [5, 80]
    for r in rows:
        assert int(r["num_finished"]) + int(r["num_rejected"]) == 120
    assert float(rows[1]["ttft_p99_ms"]) > float(rows[0]["ttft_p99_ms"])   # the queue grows with the rate
    assert (out / "rate-5" / "requests.csv").is_file() and (out / "rate-80" / "steps.csv").is_file()
    # h100-sxm has a price: each point has a cost
    assert all(float(r["cost_per_m_output_usd"]) > 0 for r in rows)


def test_cost_per_million_tokens_by_phase():
    s = Summary(prefill_time_ms=1000.0, decode_time_ms=3000.0, mixed_time_ms=1000.0, mixed_prefill_tokens=300,
                mixed_decode_tokens=100, num_input_tokens=2000, num_output_tokens=400, duration_s=10.0)
    c = cost_figures(s, 3.6)   # a thousandth of a dollar per device-second
    assert c["cost_prefill_usd"] == pytest.approx(1.75e-3) and c["cost_decode_usd"] == pytest.approx(3.25e-3)
    assert c["cost_per_m_input_usd"] == pytest.approx(1.75e-3 / 2000 * 1e6)
    assert c["cost_per_m_output_usd"] == pytest.approx(3.25e-3 / 400 * 1e6)
    assert c["cost_per_m_output_wall_usd"] == pytest.approx(10e-3 / 400 * 1e6)
    assert cost_figures(s, None) == {}


def test_a_profile_without_a_price_gives_no_cost_line(tmp_path, capsys):
    argv = ["load", "--simulate", "--model", "llama-8b", "--requests", "20", "--rate", "5"]
    assert main([*argv, "--profile", "l4", "--out", str(tmp_path / "l4")], open_window=None) == 0
    assert "per million" not in capsys.readouterr().out
    summary = {r["metric"] for r in csv.DictReader(open(tmp_path / "l4" / "summary.csv"))}
    assert not any(k.startswith("cost_") for k in summary)
    assert main([*argv, "--profile", "h100-sxm"], open_window=None) == 0
    text = capsys.readouterr().out
    assert "per million input tokens (prefill)" in text and "$3.00/h for NVIDIA H100 SXM 80GB" in text


def test_the_worked_example_beside_the_seed(capsys):
    assert main(["example", "--no-measure"], open_window=None) == 0
    text = capsys.readouterr().out
    assert "seed's worked example" in text and "200 ms" in text and "6,200 ms" in text
    assert "llama-8b on h100-sxm, simulated" in text


def test_a_bare_fit_measures_the_standard_runs_first(tmp_path, monkeypatch, capsys):
    import backend.fitting as fit_cli
    from backend.config import EngineConfig, RunConfig
    from backend.config import SweepSpec
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(fit_cli, "STANDARD_MODEL", "tiny")   # the same three kinds of run, small
    monkeypatch.setattr(fit_cli, "standard_runs", lambda: [
        ("batch", RunConfig(mode="sweep-batch", sweep=SweepSpec("batch", batches=[1, 2], context=32, steps=2))),
        ("prompt", RunConfig(mode="sweep-prompt", sweep=SweepSpec("prompt", lengths=[16, 32], steps=2))),
        ("load", RunConfig(mode="load", workload=fit_cli.poisson(1, 50.0, "8:24", "4:8", 6),
                           engine=EngineConfig(max_batch=4)))])
    import json
    assert main(["run", "--model", "tiny", "--prompt-len", "8", "--output-len", "2", "--out", str(tmp_path / "probe")],
                open_window=None) == 0
    device = json.loads((tmp_path / "probe" / "run.json").read_text())["info"]["device_name"]
    profile = tmp_path / "mine.toml"
    profile.write_text(f'name = "This machine: {device} (2 threads)"\nvendor = "x"\nmemory_gb = 8\n'
                       f'bandwidth_gbs = 20\nmeasured = true\nsource = "test"\n[tflops]\nfp32 = 0.1\n')
    capsys.readouterr()
    assert main(["calibrate", "--fit", "--runs", str(tmp_path / "runs"), "--out", str(profile)],
                open_window=None) == 0
    out = capsys.readouterr().out
    assert all((tmp_path / "runs" / name / "steps.csv").is_file() for name in ("batch", "prompt", "load"))
    assert "step-time error on load (fitted on the other 2)" in out
    assert load_profile(profile).simulation["fitted"] is True
    assert main(["calibrate", "--check", str(tmp_path / "runs" / "load")], open_window=None) == 2
    assert "--check needs --fit" in capsys.readouterr().err
