"""The warm-up steps a run takes before its timed ones: every step shape it will time, within its cache."""
import pytest

from backend.config import SamplingConfig
from backend.engine.runner import Runner
from backend.engine.warmup import WarmupStep, warmup_steps
from tests.engine.test_cuda_graphs import loaded


def names(steps: list[WarmupStep]) -> list[str]:
    return [s.name for s in steps]


def test_a_continuous_run_warms_prefill_a_plain_decode_and_a_masked_one():
    steps = warmup_steps("continuous", 4, 512)
    assert names(steps) == ["prefill", "decode", "prefill", "masked decode"]
    assert steps[0].prefill == ((0, 0, 16),) and steps[1].decode == ((0, 16),)
    masked = steps[-1].decode
    assert len(masked) == 2 and masked[0][1] != masked[1][1]   # different positions: the mask path
    assert not any(s.prefill and s.decode for s in steps)      # continuous never mixes
    assert not any(start > 0 for s in steps for _, start, _ in s.prefill)
    assert not any(s.samples for s in steps)                   # greedy: argmax only


def test_a_chunked_run_warms_a_mixed_step_and_a_later_chunk():
    steps = warmup_steps("chunked", 4, 512, chunk_tokens=256)
    assert names(steps) == ["prefill", "decode", "mixed", "later chunk", "masked mixed", "masked decode"]
    mixed = steps[2]
    assert mixed.prefill and len(mixed.decode) == 1
    (slot, start, length), = steps[3].prefill
    assert start > 0 and (slot, 0, start) == mixed.prefill[0]   # the rest of the mixed step's prompt
    masked = steps[4]
    assert masked.prefill and len({pos for _, pos in masked.decode}) == 2   # two decode positions: a mask
    assert names(warmup_steps("chunked", 2, 512)) == ["prefill", "decode", "mixed", "later chunk", "masked decode"]


def test_one_slot_has_no_mixed_or_masked_steps_and_a_static_run_none_mixed():
    assert names(warmup_steps("chunked", 1, 512)) == ["prefill", "decode"]
    assert names(warmup_steps("static", 8, 512)) == ["prefill", "decode", "prefill", "masked decode"]


def test_sampling_with_a_temperature_runs_the_sampler_on_every_step():
    assert all(s.samples for s in warmup_steps("chunked", 4, 512, temperature=0.7))


def test_a_window_shorter_than_the_cache_warms_a_decode_past_it():
    steps = warmup_steps("continuous", 2, 512, window=64)
    assert steps[-1].name == "decode past the window" and steps[-1].decode[0][1] >= 64
    assert "decode past the window" not in names(warmup_steps("continuous", 2, 512, window=4096))


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
@pytest.mark.parametrize("max_len", [2, 3, 4, 5, 8, 17, 40])
def test_every_step_stays_inside_the_cache_and_its_slots(policy, max_len):
    steps = warmup_steps(policy, 3, max_len, chunk_tokens=4, temperature=1.0, window=3)
    assert steps and steps[0].name == "prefill"
    for s in steps:
        assert s.last_position < max_len
        assert all(slot in (0, 1, 2) for slot, *_ in s.prefill + s.decode)
        assert len({slot for slot, *_ in s.prefill + s.decode}) == len(s.prefill) + len(s.decode)   # a slot once
        assert all(length >= 1 for _, _, length in s.prefill)


def test_the_runner_runs_the_steps_and_samples_each_one(monkeypatch):
    """(The run's own draws are keyed by request and position, so the warm-up cannot move them:
    tests/engine/test_runner.py's test_warmup_leaves_no_trace_in_the_results.)"""
    sampling = SamplingConfig(temperature=0.9, top_p=0.9, seed=3)
    runner = Runner(loaded("llama", "cpu"), 3, 40, sampling)
    sampled = []
    import backend.engine.runner as runner_module
    real = runner_module.sample
    monkeypatch.setattr(runner_module, "sample", lambda logits, *a: sampled.append(logits.shape[0]) or real(logits, *a))
    steps = warmup_steps("chunked", 3, 40, chunk_tokens=8, temperature=0.9)
    runner.warmup(steps)
    assert sampled == [len(s.prefill) + len(s.decode) for s in steps]   # each step's logits went to the sampler
