"""The CLI run summary on hand-built records: each bound from the device's roofline, the latency broken down."""
import io
from dataclasses import asdict

import pytest

from backend.config import BatchRun, RunConfig
from backend.events import RunFinished
from backend.results.summary import summarize
from backend.run_info import LocalInfo, RunInfo
from backend.shape import ModelShape
from backend.roofline.profiles import local_profile_path
from backend.records import Phase, RequestRecord, RequestStatus, RunData, StepRecord, TokenRecord
from backend.cli.report import print_run
from backend.results.text import breakdown_text
from backend.roofline.cost import PhaseTotals, phase_cost

SHAPE = ModelShape("llama", vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3,
                   head_dim=64, intermediate_size=1536, max_position=2048, tie_embeddings=True)
CPU = "Test CPU 9000"


@pytest.fixture(autouse=True)
def empty_config(tmp_path, monkeypatch):
    """No calibrated profile unless a test writes one: never the user's real configuration folder."""
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))


def calibrate(bandwidth_gbs: float, fp32_tflops: float = 0.5) -> None:
    """This machine's profile as `calibrate` writes it, named for the CPU the run reports."""
    local_profile_path().parent.mkdir(parents=True, exist_ok=True)
    local_profile_path().write_text(
        f'name = "This machine: {CPU} (2 threads)"\nvendor = "x"\nmemory_gb = 16\nbandwidth_gbs = {bandwidth_gbs}\n'
        f'measured = true\nsource = "a test"\n\n[tflops]\nfp32 = {fp32_tflops}\n')


def step(i, phase, start, duration, prefill=0, decode=0, context=0):
    return StepRecord("r", i, phase, num_requests=1, num_prefill_requests=int(prefill > 0),
                      num_decode_requests=decode, num_tokens=prefill + decode, num_prefill_tokens=prefill,
                      num_decode_tokens=decode, context_tokens=context, max_context_tokens=context, start_ms=start,
                      duration_ms=duration, kv_tokens=context, kv_capacity=1024)


def summary_of(output_tokens: int = 4, prompt: int = 512):
    """One request: a 500 ms prefill of `prompt` tokens, then 15 ms decode steps."""
    steps = [step(0, Phase.PREFILL, 0.0, 500.0, prefill=prompt, context=prompt)]
    tokens = [TokenRecord(0, 0, 500.0)]
    for i in range(1, output_tokens):
        steps.append(step(i, Phase.DECODE, 500.0 + 15.0 * (i - 1), 15.0, decode=1, context=prompt + i))
        tokens.append(TokenRecord(0, i, 500.0 + 15.0 * i))
    end = tokens[-1].time_ms
    request = RequestRecord(0, RequestStatus.FINISHED, prompt, output_tokens, 0.0, 0.0, 500.0, end, ttft_ms=500.0,
                            tpot_ms=15.0 if output_tokens > 1 else None, e2e_ms=end, queue_ms=0.0)
    return steps, [request], tokens


def printed(output_tokens: int = 4, dtype: str = "float32", device: str = "cpu",
            device_name: str = CPU) -> tuple[str, dict]:
    steps, requests, tokens = summary_of(output_tokens)
    summary = summarize(steps, requests, tokens)
    info = RunInfo(model="test", num_params=SHAPE.num_params(), weight_bytes=4 * SHAPE.num_params(),
                   shape=asdict(SHAPE), device=device, device_name=device_name, dtype=dtype, local=LocalInfo(threads=2))
    data = RunData(run_id="r", info=info, requests=requests, summary=summary)   # no steps kept, as the CLI runs
    out = io.StringIO()
    print_run(RunConfig(mode="batch", batch=BatchRun(prompt_len=512, output_len=output_tokens)),
              RunFinished("r", summary, data=data), out)
    return out.getvalue(), summary


def line(text: str, start: str) -> str:
    found = [ln for ln in text.splitlines() if ln.startswith(start)]
    assert len(found) == 1, text
    return found[0]


def test_bounds_come_from_this_machines_calibrated_profile():
    calibrate(bandwidth_gbs=50.0)
    text, summary = printed()
    assert "(compute-bound)" not in text and "(memory-bound)" not in text   # no fixed words any more
    assert "this machine (calibrated)" in line(text, "roofline")
    prefill = phase_cost(SHAPE, 4, PhaseTotals.from_summary(summary, "prefill"))
    decode = phase_cost(SHAPE, 4, PhaseTotals.from_summary(summary, "decode"))
    assert prefill.intensity > 0.5e12 / 50e9 > decode.intensity   # either side of the ridge, 10 FLOP/byte
    assert line(text, "  prefill ").endswith(f"= {100 * prefill.flops / 0.5 / 0.5e12:.0f}% of the fp32 matmul peak; "
                                            f"{prefill.intensity:,.0f} FLOP/byte, above the ridge: compute-bound")
    assert f"= {100 * decode.bytes / 0.045 / 50e9:.0f}% of the bandwidth" in line(text, "  decode  ")
    assert line(text, "  decode  ").endswith("below the ridge: memory-bound")


def test_an_absurd_bandwidth_turns_decode_compute_bound():
    calibrate(bandwidth_gbs=1e9)   # a ridge of 0.0002 FLOP/byte: even decode is above it
    text, summary = printed()
    decode = phase_cost(SHAPE, 4, PhaseTotals.from_summary(summary, "decode"))
    assert line(text, "  decode  ").endswith("above the ridge: compute-bound")
    assert f"= {100 * decode.flops / 0.045 / 0.5e12:.0f}% of the fp32 matmul peak" in line(text, "  decode  ")


def test_a_rate_above_the_profiles_peak_is_flagged():
    calibrate(bandwidth_gbs=50.0, fp32_tflops=0.1)   # prefill runs at 236 GFLOP/s: more than this "peak"
    text, _ = printed()
    assert "= 236% of the fp32 matmul peak (so the profile is low);" in line(text, "  prefill ")
    assert "profile is low" not in line(text, "  decode  ")


def test_without_a_calibration_the_generic_cpu_profile_is_named():
    text, _ = printed()
    assert "generic CPU profile (run `calibrate` for this machine's)" in line(text, "roofline")
    assert "ridge 25.7 FLOP/byte" in line(text, "roofline")   # 2.3 TFLOP/s over 89.6 GB/s
    assert line(text, "  decode  ").endswith("memory-bound")


def test_no_bound_without_a_peak_for_the_dtype_or_a_profile_for_the_device():
    text, _ = printed(dtype="float16")   # the generic CPU profile has no fp16 peak
    assert line(text, "roofline").endswith("generic CPU profile (run `calibrate` for this machine's) has no fp16 "
                                           "peak, so no bound is given")
    assert "-bound" not in text
    text, _ = printed(device="cuda:0", device_name="NVIDIA GeForce GTX 1080")   # no shipped profile matches
    assert "no profile for NVIDIA GeForce GTX 1080" in line(text, "roofline") and "-bound" not in text
    text, _ = printed(dtype="bfloat16", device="cuda:0", device_name="NVIDIA H100 80GB HBM3")
    assert "H100 SXM" in line(text, "roofline") and "datasheet profile" in line(text, "roofline")
    assert line(text, "  decode  ").endswith("memory-bound")


def test_a_phase_without_steps_gets_no_bound():
    calibrate(bandwidth_gbs=50.0)
    text, _ = printed(output_tokens=1)   # a one-token answer: no decode step
    assert "memory-bound" not in text and "compute-bound" in line(text, "  prefill ")
    assert line(text, "total").endswith("TTFT 500.0 ms = 500.0 ms: one output token, no decode step")


def test_the_total_is_a_breakdown_not_a_check():
    text, _ = printed()
    assert line(text, "total") == "total    TTFT 500.0 ms + 3 decode steps x 15.00 ms = 545.0 ms, decode 8%"
    assert "measured" not in line(text, "total")


def test_breakdown_of_unequal_requests_says_so():
    text = breakdown_text(10.0, 7.5, 17.5, 2, 3, 2.83, times="×")
    assert text == "TTFT 10.0 ms + decode 7.5 ms (2 to 3 decode steps, TPOT 2.83 ms on average) = 17.5 ms, decode 43%"


def test_the_cost_model_line_names_the_candidate_terms_only_when_set():
    from backend.results.text import cost_model_text
    from backend.sim.step_time import CostModel
    plain = cost_model_text(CostModel().terms())
    assert "request/layer" not in plain and "rows" not in plain
    text = cost_model_text(CostModel(request_layer_us=0.26, efu=0.5, efu_rows=48.0, serial=1.0).terms())
    assert "0.26 us/request/layer of attention" in text and "half-efficient at 48" in text
