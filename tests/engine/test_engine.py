"""The engine on the real `tiny` model: records hold their invariants; stop and faults keep what was measured."""
import pytest

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.errors import InputError
from backend.results.export import read_run
from backend.records import Phase, RecordBatch, RequestStatus
from backend.session import execute
from backend.workload.spec import LengthDist, load_workload, apply_overrides


def batch_config(tmp_path=None, **batch) -> RunConfig:
    return RunConfig(mode="batch", model=ModelChoice("tiny", "cpu", "float32"),
                     sampling=SamplingConfig(ignore_eos=True), engine=EngineConfig(policy="static"),
                     batch=BatchRun(**{"prompt_len": 12, "output_len": 6, "batch": 3, **batch}),
                     out_dir=str(tmp_path) if tmp_path else None)


def load_config(policy="continuous", **overrides) -> RunConfig:
    spec = apply_overrides(load_workload("mixed-lengths"), **{"num_requests": 12, "arrival": "burst",
                                                             "prompt_len": "8:40", "output_len": "2:12", **overrides})
    return RunConfig(mode="load", model=ModelChoice("tiny", "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=4, chunk_tokens=16), workload=spec)


def collect(config, should_stop=lambda: False):
    events = []
    finished = execute(config, events.append, should_stop)
    return finished, events


def test_batch_run_records_hold_their_invariants(tmp_path):
    finished, events = collect(batch_config(tmp_path))
    assert finished.error is None and not finished.stopped
    run = read_run(tmp_path)
    prefill = [s for s in run.steps if s.phase is Phase.PREFILL]
    decode = [s for s in run.steps if s.phase is Phase.DECODE]
    assert len(prefill) == 1 and prefill[0].num_requests == 3 and prefill[0].num_tokens == 36   # one pass, all prompts
    assert len(decode) == 6 - 1                                  # decode steps = output tokens - 1
    assert all(s.num_tokens == 3 and s.num_decode_requests == 3 for s in decode)
    starts = [s.start_ms for s in run.steps]
    assert starts == sorted(starts) and all(s.duration_ms > 0 for s in run.steps)
    # 12 + i tokens a request after step i, held in whole blocks of 16 (the paged default)
    assert [s.kv_tokens for s in run.steps] == [3 * 16 * -(-(12 + i) // 16) for i in range(6)]
    for r in run.requests:
        assert r.status is RequestStatus.FINISHED and r.output_tokens == 6 and r.prompt_tokens == 12
        assert 0 < r.ttft_ms < r.e2e_ms
        times = [t.time_ms for t in run.tokens if t.request_id == r.request_id]
        assert len(times) == 6 and times == sorted(times)
        assert r.first_token_ms == times[0] and r.finish_ms == times[-1]
        assert r.tpot_ms == pytest.approx((times[-1] - times[0]) / 5)
    assert sum(isinstance(e, RecordBatch) for e in events) >= len(run.steps)
    assert run.info.random_weights is True and run.config["batch"]["batch"] == 3


def test_every_request_of_a_workload_finishes_under_each_policy():
    for policy in ("static", "continuous", "chunked"):
        finished, _ = collect(load_config(policy))
        data = finished.data
        assert finished.error is None
        assert sorted(r.request_id for r in data.requests) == list(range(12)), policy
        assert all(r.status is RequestStatus.FINISHED for r in data.requests), policy
        if policy == "chunked":
            assert max(s.num_tokens for s in data.steps) <= 16
            assert any(s.phase is Phase.MIXED for s in data.steps)
        if policy == "static":
            assert all(s.num_requests <= 4 for s in data.steps)


def test_a_small_kv_cache_preempts_and_still_finishes_everything():
    config = load_config("continuous", prompt_len="30:40", output_len="10:12")
    config.engine.kv_tokens = 110
    finished, _ = collect(config)
    data = finished.data
    assert all(r.status is RequestStatus.FINISHED for r in data.requests)
    assert finished.summary.num_preemptions > 0
    assert all(s.kv_tokens <= 110 for s in data.steps)


def test_stop_ends_the_run_and_keeps_every_record():
    calls = {"n": 0}

    def stop_after_three_batches():
        calls["n"] += 1
        return calls["n"] > 4
    finished, _ = collect(batch_config(output_len=50), stop_after_three_batches)
    assert finished.stopped
    data = finished.data
    assert 1 <= len(data.steps) < 50
    assert len(data.requests) == 3 and all(r.finish_reason == "stopped by user" for r in data.requests)
    assert len(data.tokens) == 3 * len(data.steps)


def test_a_failure_mid_run_keeps_the_partial_records(monkeypatch):
    from backend.engine.runner import Runner
    real_run = Runner.run
    count = {"n": 0}

    def failing_run(self, out):
        count["n"] += 1
        if count["n"] == 3:
            raise RuntimeError("device lost")
        return real_run(self, out)
    monkeypatch.setattr(Runner, "run", failing_run)
    finished, _ = collect(batch_config(output_len=10))
    assert finished.error == "RuntimeError: device lost"
    assert len(finished.data.steps) == 2 and len(finished.data.requests) == 3


def test_prompt_longer_than_the_context_is_refused():
    with pytest.raises(InputError, match="exceeds tiny's context"):
        collect(batch_config(prompt_len=5000))


def test_out_of_memory_mid_run_says_so_and_keeps_the_records(monkeypatch):
    import torch
    from backend.engine.runner import Runner
    real_run = Runner.run
    count = {"n": 0}

    def oom_on_fourth_step(self, out):
        count["n"] += 1
        if count["n"] == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_run(self, out)
    monkeypatch.setattr(Runner, "run", oom_on_fourth_step)
    finished, _ = collect(batch_config(output_len=10))
    assert finished.error.startswith("out of memory: CUDA out of memory")
    assert len(finished.data.steps) == 3
    assert all(r.finish_reason.startswith("run failed: out of memory") for r in finished.data.requests)


def test_a_failure_is_one_line_and_every_out_of_memory_error_says_so():
    """One rule for the engine, the sweep, the engine process and the window: a MemoryError or a
    CPU allocator's failure is an out-of-memory as much as torch's OutOfMemoryError (the engine's
    line used to name only the latter)."""
    import torch
    from backend.errors import is_out_of_memory, one_line
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:114] DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 8 GiB\nmore detail")
    assert one_line(cpu, typed=True).startswith("out of memory: [enforce fail at alloc_cpu.cpp:114]")
    assert one_line(MemoryError(), typed=True) == "out of memory: MemoryError"
    assert one_line(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), typed=True) \
        == "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert one_line(RuntimeError("device lost\n  at step 3"), typed=True) == "RuntimeError: device lost"
    assert one_line(RuntimeError("device lost\n  at step 3")) == "device lost"
    assert one_line(ValueError("x" * 500), typed=True, limit=10) == "ValueError: " + "x" * 10
    assert one_line(ValueError()) == one_line(ValueError(), typed=True) == "ValueError"
    assert not is_out_of_memory(RuntimeError("device lost"))
