"""The simulated target spread over devices: --tp, --pp, --dp, --ep, the GPU precisions, --kv-dtype."""
from __future__ import annotations

import json

import pytest

from backend.config import BatchRun, Deployment, EngineConfig, ModelChoice, RunConfig
from backend.errors import InputError
from backend.sim.disaggregated import run_simulated_disaggregated
from backend.sim.target import run_simulated
from backend.workload.spec import LengthDist, WorkloadSpec


def batch(model="llama-3.1-8b", profile="h100-sxm", dtype="auto", prompt=1024, output=32, size=1, **layout):
    return RunConfig(mode="batch", simulate=True, profile=profile, model=ModelChoice(model, dtype=dtype),
                     batch=BatchRun(prompt_len=prompt, output_len=output, batch=size), deployment=Deployment(**layout))


def load(requests=40, rate=20.0, policy="continuous", out=None, **layout):
    spec = WorkloadSpec(name="t", num_requests=requests, arrival="poisson", rate=rate,
                        prompt_len=LengthDist("fixed", 256), output_len=LengthDist("fixed", 32))
    return RunConfig(mode="load", simulate=True, profile="h100-sxm", model=ModelChoice("llama-3.1-8b"), workload=spec,
                     engine=EngineConfig(policy=policy, max_batch=16), deployment=Deployment(**layout), out_dir=out)


def simulate(config, target=run_simulated):
    finished = target(config, emit=lambda e: None, should_stop=lambda: False)
    assert finished.error is None
    return finished


def test_tensor_parallel_decode_is_faster_but_not_twice_and_recorded(tmp_path):
    one = simulate(batch()).summary
    config = batch(tp=2)
    config.out_dir = str(tmp_path)
    two = simulate(config)
    assert one.tpot_mean_ms / 2 < two.summary.tpot_mean_ms < one.tpot_mean_ms   # the all-reduces cost
    info = json.loads((tmp_path / "run.json").read_text())["info"]
    assert info["deployment"]["tp"] == 2 and info["deployment"]["devices"] == 2
    assert info["deployment"]["link"]["name"] == "nvlink4"
    assert info["device"] == "simulated h100-sxm x 2"


def test_a_pipeline_does_not_speed_one_request():
    one = simulate(batch(output=8)).summary
    piped = simulate(batch(output=8, pp=2)).summary
    assert piped.tpot_mean_ms >= 0.85 * one.tpot_mean_ms


def test_data_parallel_replicas_share_the_arrivals_by_the_router():
    finished = simulate(load(dp=2, router="round-robin"))
    steps = finished.data.steps
    assert {s.worker for s in steps} == {"replica-0", "replica-1"}
    assert finished.summary.num_finished == 40
    least = simulate(load(dp=2, router="least-loaded"))
    assert least.summary.num_finished == 40
    # two replicas of one device each: the whole run's price is two devices'
    assert finished.summary.price_per_hour == pytest.approx(2 * 3.00)


def test_dp_needs_a_workload_and_the_disaggregated_policy_refuses_it():
    with pytest.raises(InputError, match="use `load`"):
        simulate(batch(dp=2))
    config = load(dp=2, policy="disaggregated")
    with pytest.raises(InputError, match="--dp"):
        simulate(config, run_simulated_disaggregated)


def test_disaggregated_pools_take_their_own_tensor_parallelism(tmp_path):
    config = load(policy="disaggregated", out=str(tmp_path), decode_tp=2)
    config.engine.prefill_workers, config.engine.decode_workers = 1, 2
    finished = simulate(config, run_simulated_disaggregated)
    assert finished.summary.num_finished == 40
    layout = json.loads((tmp_path / "run.json").read_text())["info"]["deployment"]
    assert (layout["prefill_tp"], layout["decode_tp"], layout["devices"]) == (1, 2, 5)


def test_int8_on_a_gpu_runs_weight_only_with_bfloat16_math():
    """The bug the issue names: int8 priced with float32 activations at the FP32 peak (2,633 ms for 166)."""
    bf16 = simulate(batch(profile="a100-80gb-sxm", prompt=2048, output=2)).summary.ttft_mean_ms
    int8 = simulate(batch(profile="a100-80gb-sxm", dtype="int8", prompt=2048, output=2)).summary.ttft_mean_ms
    assert int8 < 1.3 * bf16


def test_fp8_and_fp4_where_the_profile_has_the_peak():
    bf16 = simulate(batch(prompt=4096, output=2)).summary.ttft_mean_ms
    fp8 = simulate(batch(dtype="fp8", prompt=4096, output=2)).summary.ttft_mean_ms
    assert fp8 < 0.75 * bf16                                 # a compute-bound prefill at twice the peak
    simulate(batch(profile="b200", dtype="nvfp4"))
    simulate(batch(model="gpt-oss-20b", profile="b200", dtype="mxfp4"))


@pytest.mark.parametrize("profile, dtype, message", [
    ("a100-80gb-sxm", "fp8", "has no fp8 peak"),
    ("h200-sxm", "nvfp4", "has no fp4 peak"),
    ("cpu", "fp8", "GPU tensor-core format"),
])
def test_a_precision_the_profile_cannot_run_is_one_line(profile, dtype, message):
    with pytest.raises(InputError, match=message):
        simulate(batch(profile=profile, dtype=dtype))


def test_an_fp8_kv_cache_halves_the_bytes_a_decode_step_reads(tmp_path):
    long = dict(model="llama-3.1-8b", prompt=16000, output=16, size=16)
    plain = simulate(batch(**long)).summary.tpot_mean_ms
    small = simulate(batch(**long, kv_dtype="fp8")).summary.tpot_mean_ms
    assert small < 0.8 * plain   # at 16k tokens x 16 the KV reads outweigh the weights


def test_memory_is_checked_per_device():
    from backend.errors import DoesNotFit
    with pytest.raises(DoesNotFit, match="--tp"):
        simulate(batch(model="llama-3.1-70b", size=1))          # 141 GB of bf16 weights on one 80 GB H100
    simulate(batch(model="llama-3.1-70b", size=1, tp=4))


def test_expert_parallel_runs_a_mixture_of_experts():
    finished = simulate(batch(model="mixtral-8x7b", tp=4, ep=4, size=8, output=8))
    assert finished.summary.tpot_mean_ms > 0
    with pytest.raises(InputError, match="is dense"):
        simulate(batch(tp=2, ep=2))
