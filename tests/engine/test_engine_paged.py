"""The local engine on the paged cache (blocks admit and preempt, the attention reads through each request's
block table, prefixes reused from blocks other requests filled): on the real `tiny` model and the bundled
SmolLM2, the same greedy tokens as the slot layout."""
import pytest

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.records import RequestStatus, token_ids_by_request
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload


def load_config(policy: str, layout: str, kv_tokens: int | None = None, prompt_len: str = "8:40",
                output_len: str = "2:12", caching: bool | None = False, shared: int | None = None,
                model: str = "tiny", requests: int = 10, turns: int | None = None) -> RunConfig:
    spec = apply_overrides(load_workload("mixed-lengths"), num_requests=requests, arrival="burst",
                           prompt_len=prompt_len, output_len=output_len, shared_prefix_len=shared, turns=turns)
    return RunConfig(mode="load", model=ModelChoice(model, "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=4, chunk_tokens=16, kv_tokens=kv_tokens,
                                         kv_layout=layout, kv_block_size=8,
                                         prefix_caching=caching if layout == "paged" else None), workload=spec)


def tokens_of(config: RunConfig, models=None) -> tuple[dict[int, list[int]], object]:
    """Each request's output tokens in order, and the finished run (every request must have finished)."""
    finished = execute(config, lambda e: None, lambda: False, models=models)
    assert finished.error is None
    data = finished.data
    assert all(r.status is RequestStatus.FINISHED for r in data.requests)
    return token_ids_by_request(data.tokens), finished


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


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_prefix_caching_reuses_shared_blocks_and_gives_the_slot_layouts_tokens(policy):
    """A 24-token prefix shared by every prompt: later requests start after its 3 cached blocks, reading
    keys other requests wrote, and sample what the slot cache (every prompt computed whole) samples."""
    slots, _ = tokens_of(load_config(policy, "slots", shared=24, prompt_len="30:40"))
    cached, finished = tokens_of(load_config(policy, "paged", caching=True, shared=24, prompt_len="30:40"))
    assert cached == slots
    s = finished.summary
    assert finished.data.config["engine"]["prefix_caching"] is True
    assert s.prefix_hit_tokens > 0 and s.prefix_hit_tokens % 8 == 0
    assert sum(r.cached_prompt_tokens for r in finished.data.requests) == s.prefix_hit_tokens
    computed = sum(st.num_prefill_tokens for st in finished.data.steps)
    assert computed == sum(r.prompt_tokens for r in finished.data.requests) - s.prefix_hit_tokens


def test_prefix_caching_is_the_local_default_and_a_preempting_small_cache_still_matches():
    # 10 blocks of 8 for 4 rows: decodes outgrow the cache, requests are preempted and recomputed from
    # their own cached blocks
    slots, _ = tokens_of(load_config("chunked", "slots", shared=16, prompt_len="20:24", output_len="20:30"))
    cached, finished = tokens_of(load_config("chunked", "paged", kv_tokens=80, caching=None, shared=16,
                                             prompt_len="20:24", output_len="20:30"))
    assert cached == slots
    assert finished.data.config["engine"]["prefix_caching"] is True
    assert finished.summary.num_preemptions > 0 and finished.summary.prefix_hit_tokens > 0


def test_a_conversation_on_the_bundled_model_reads_its_earlier_turns_from_the_cache():
    """SmolLM2 (a real checkpoint): 2 users x 3 turns, each turn's prompt the conversation so far; the
    paged, prefix-cached run gives the slot cache's greedy tokens while computing only the new part."""
    from backend.loaders.cache import ModelCache
    models = ModelCache()   # both runs on one load of the model: the caches differ, the weights do not
    slots, _ = tokens_of(load_config("continuous", "slots", model="smollm2-135m", requests=2, turns=3,
                                     prompt_len="20:30", output_len="4"), models)
    cached, finished = tokens_of(load_config("continuous", "paged", caching=True, model="smollm2-135m", requests=2,
                                             turns=3, prompt_len="20:30", output_len="4"), models)
    assert cached == slots
    later = [r for r in finished.data.requests if r.turn > 0]
    assert later and all(r.cached_prompt_tokens >= 16 for r in later)


def test_a_block_longer_than_the_models_context_is_one_line_and_a_short_run_takes_the_default():
    from backend.errors import InputError
    config = load_config("chunked", "paged", prompt_len="4", output_len="2")
    config.engine.kv_block_size = 1 << 20
    with pytest.raises(InputError, match="larger than the model's context"):
        execute(config, lambda e: None, lambda: False)
    _, short = tokens_of(load_config("chunked", "paged", prompt_len="4", output_len="2"))   # 6 tokens, blocks of 8
    assert short.summary.num_finished == 10
