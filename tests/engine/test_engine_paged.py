"""The local engine with the paged accounting (blocks admit and preempt; the cache is still one slot per
request, so prefix caching stays off): on the real `tiny` model, the same greedy tokens as the slot layout."""
import pytest

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.records import RequestStatus
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload


def load_config(policy: str, layout: str, kv_tokens: int | None = None, prompt_len: str = "8:40",
                output_len: str = "2:12") -> RunConfig:
    spec = apply_overrides(load_workload("mixed-lengths"), num_requests=10, arrival="burst", prompt_len=prompt_len,
                           output_len=output_len)
    return RunConfig(mode="load", model=ModelChoice("tiny", "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=4, chunk_tokens=16, kv_tokens=kv_tokens,
                                         kv_layout=layout, kv_block_size=8), workload=spec)


def tokens_of(config: RunConfig) -> tuple[dict[int, list[int]], object]:
    finished = execute(config, lambda e: None, lambda: False)
    assert finished.error is None
    data = finished.data
    assert all(r.status is RequestStatus.FINISHED for r in data.requests)
    out: dict[int, list[int]] = {}
    for t in sorted(data.tokens, key=lambda t: (t.request_id, t.index)):
        out.setdefault(t.request_id, []).append(t.token_id)
    return out, finished


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_paged_accounting_gives_the_slot_layouts_tokens(policy):
    slots, _ = tokens_of(load_config(policy, "slots"))
    paged, finished = tokens_of(load_config(policy, "paged"))
    assert paged == slots
    assert finished.data.config["engine"]["kv_layout"] == "paged"
    assert finished.data.config["engine"]["prefix_caching"] is False


def test_a_small_paged_cache_preempts_and_still_finishes_everything():
    # 8 blocks of 8: prompts are admitted in 2 or 3 blocks, then their decodes grow to 6
    _, finished = tokens_of(load_config("chunked", "paged", kv_tokens=64, prompt_len="8:16", output_len="20:30"))
    assert finished.summary.num_preemptions > 0
    assert all(s.kv_tokens <= 64 for s in finished.data.steps)
