"""Speculative decoding end to end on real models: greedy runs with speculation give exactly the tokens of
runs without it, for both proposers, with the slot and the paged layout, under every policy; and the
guesses were verified and kept (else the equality would prove nothing)."""
from dataclasses import replace

import pytest

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig, SpecConfig
from backend.engine.spec.speculator import Speculator
from backend.errors import InputError
from backend.loaders.cache import ModelCache
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload
from tests.engine.test_engine_paged import tokens_of as finished_tokens

GROUNDED = ("Repeat the following text exactly: The committee met on Tuesday to review the budget for the new "
            "library. After a long discussion, the members agreed to fund the children's reading room, to repair "
            "the roof before winter, and to extend the opening hours on weekends.")


@pytest.fixture(scope="module")
def models():
    return ModelCache()


_PLAIN: dict[str, tuple] = {}   # runs without speculation, shared by the tests that compare against them


def tokens_of(config: RunConfig, models) -> tuple[dict[int, list[int]], object]:
    if not config.spec.is_on:
        key = repr(config)
        if key not in _PLAIN:
            _PLAIN[key] = _tokens_of(config, models)
        return _PLAIN[key]
    return _tokens_of(config, models)


def _tokens_of(config: RunConfig, models) -> tuple[dict[int, list[int]], object]:
    out, finished = finished_tokens(config, models)
    for rid, ids in out.items():   # every token recorded once, in order
        assert len(ids) == next(r.output_tokens for r in finished.data.requests if r.request_id == rid)
    return out, finished


def batch_config(spec: SpecConfig, layout: str, dtype: str = "float32") -> RunConfig:
    return RunConfig(mode="batch", model=ModelChoice("smollm2-135m", "cpu", dtype),
                     batch=BatchRun(prompt=GROUNDED, chat=True, output_len=40, batch=2),
                     engine=EngineConfig(policy="static", kv_layout=layout, kv_block_size=16), spec=spec)


def spec_figures(finished) -> tuple[int, int]:
    steps = finished.data.steps
    return sum(s.num_proposed_tokens for s in steps), sum(s.num_accepted_tokens for s in steps)


@pytest.mark.parametrize("layout", ["slots", "paged"])
@pytest.mark.parametrize("spec", [SpecConfig("ngram", num_tokens=4),
                                  SpecConfig("draft", "smollm2-135m", "q4_0", num_tokens=3)], ids=["ngram", "draft"])
def test_the_bundled_model_gives_the_same_greedy_tokens_with_speculation(spec, layout, models):
    plain, _ = tokens_of(batch_config(SpecConfig(), layout), models)
    guessed, finished = tokens_of(batch_config(spec, layout), models)
    assert guessed == plain
    proposed, accepted = spec_figures(finished)
    assert accepted >= 10 and proposed >= accepted   # it copies the text: most guesses are kept
    verifying = [s for s in finished.data.steps if s.is_verification]
    assert len(finished.data.steps) < 1 + 40   # fewer steps than tokens
    assert all(s.num_decode_tokens == s.num_decode_requests + s.num_proposed_tokens for s in verifying)
    lengths = [pair for r in finished.data.requests for pair in r.acceptance_lengths]
    assert sum(kept for _, kept in lengths) == accepted and sum(p for p, _ in lengths) == proposed
    if spec.method == "draft":
        assert sum(s.draft_ms for s in finished.data.steps) > 0


def load_config(policy: str, layout: str, spec: SpecConfig) -> RunConfig:
    workload = apply_overrides(load_workload("mixed-lengths"), num_requests=6, arrival="burst",
                               prompt_len="8:30", output_len="6:20")
    return RunConfig(mode="load", model=ModelChoice("tiny", "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=3, chunk_tokens=12, kv_layout=layout,
                                         kv_block_size=8, prefix_caching=False if layout == "paged" else None),
                     workload=workload, spec=spec)


@pytest.mark.parametrize("layout", ["slots", "paged"])
@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_a_model_drafting_for_itself_keeps_most_guesses_and_changes_no_token(policy, layout, models):
    """The tiny random model as its own draft: the guesses are its own greedy tokens, so nearly all are
    kept, through every policy's batching of verifications with prefills and decodes."""
    plain, _ = tokens_of(load_config(policy, layout, SpecConfig()), models)
    guessed, finished = tokens_of(load_config(policy, layout, SpecConfig("draft", "tiny", "float32", num_tokens=3)),
                                  models)
    assert guessed == plain
    proposed, accepted = spec_figures(finished)
    assert accepted >= 0.8 * proposed > 0


@pytest.mark.parametrize("layout", ["slots", "paged"])
def test_ngram_guesses_on_random_weights_change_no_token(layout, models):
    plain, _ = tokens_of(load_config("chunked", layout, SpecConfig()), models)
    guessed, _ = tokens_of(load_config("chunked", layout, SpecConfig("ngram", num_tokens=4, ngram_min=1)), models)
    assert guessed == plain


def test_bad_speculation_settings_are_one_line(models):
    with pytest.raises(InputError, match="at least 1"):
        execute(batch_config(SpecConfig("ngram", num_tokens=0), "slots"), lambda e: None, lambda: False, models=models)
    with pytest.raises(InputError, match="context"):
        execute(batch_config(SpecConfig("ngram", num_tokens=10**6), "slots"), lambda e: None, lambda: False,
                models=models)
    with pytest.raises(InputError, match="vocabulary"):   # tiny: 512 tokens, SmolLM2 49,152
        execute(batch_config(SpecConfig("draft", "tiny", num_tokens=2), "slots"), lambda e: None, lambda: False,
                models=models)
    priced = batch_config(SpecConfig("ngram", acceptance=0.5), "slots")   # the simulator's pricing, not the engine's
    with pytest.raises(InputError, match="--simulate"):
        execute(priced, lambda e: None, lambda: False, models=models)


def test_sampled_tokens_depend_on_the_seed_not_on_when_the_backoff_lets_requests_guess(models, monkeypatch):
    """Temperature 0.7, top-p 0.95, n-gram guesses on the copying task. The backoff decides from measured step
    times which steps guess; here it is forced both ways (a cost ratio of 1: guess whenever it pays at all; of
    50: sit out after every verification), and a run without speculation beside them. Each position's draw is
    keyed by (seed, request, position), so all three give the same tokens, and the rejection rule still keeps
    some guesses and rejects others. Another seed gives other tokens."""
    config = batch_config(SpecConfig("ngram", num_tokens=4), "paged")
    config.sampling = SamplingConfig(temperature=0.7, top_p=0.95, seed=3)
    runs = {}
    for ratio in (1.0, 50.0):
        monkeypatch.setattr(Speculator, "cost_ratio", property(lambda self, ratio=ratio: ratio))
        runs[ratio] = tokens_of(config, models)
    eager, finished = runs[1.0]
    shy, shy_finished = runs[50.0]
    plain, _ = tokens_of(replace(config, spec=SpecConfig()), models)
    assert eager == shy == plain
    proposed, accepted = spec_figures(finished)
    assert 0 < accepted < proposed
    assert spec_figures(shy_finished)[0] < proposed   # the shy run guessed less: the timing did differ
    assert finished.summary.spec_verifications == sum(len(r.acceptance_lengths) for r in finished.data.requests)
    other = replace(config, sampling=SamplingConfig(temperature=0.7, top_p=0.95, seed=4))
    assert tokens_of(other, models)[0] != eager


@pytest.mark.parametrize("layout", ["slots", "paged"])
def test_preempted_requests_speculate_again_after_their_recompute(layout, models):
    """A cache too small for every sequence at once: the newest requests are preempted and recomputed; the
    draft model's rows follow (a row taken by another request is recomputed there) and no token changes."""
    def config(spec):
        c = load_config("chunked", layout, spec)
        c.engine.kv_tokens = 72
        c.workload = apply_overrides(c.workload, prompt_len="20:30", output_len="20:30")
        return c
    plain, base = tokens_of(config(SpecConfig()), models)
    guessed, finished = tokens_of(config(SpecConfig("draft", "tiny", "float32", num_tokens=3)), models)
    assert base.summary.num_preemptions > 0 and finished.summary.num_preemptions > 0
    assert guessed == plain
    assert spec_figures(finished)[1] > 0
