"""Speculation on the disaggregated policy's decode workers: greedy runs give exactly the tokens of the same
run without it (the bundled model with n-gram guesses; the tiny model drafting for itself, both KV layouts),
the guesses were verified and kept on the decode workers (else the equality would prove nothing), and the
records and the summary carry the spec_* figures as a single engine's run does."""
import pytest

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig, SpecConfig
from backend.records import Phase
from tests.engine.test_engine_paged import tokens_of
from backend.workload.spec import apply_overrides, load_workload


def config(model: str, spec: SpecConfig, layout: str = "slots", **overrides) -> RunConfig:
    workload = apply_overrides(load_workload("mixed-lengths"), **{"num_requests": 4, "arrival": "burst", **overrides})
    return RunConfig(mode="load", model=ModelChoice(model, "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy="disaggregated", max_batch=4, chunk_tokens=64, kv_layout=layout,
                                         kv_block_size=8, prefix_caching=False if layout == "paged" else None),
                     workload=workload, spec=spec)


def verified(finished) -> tuple[int, int]:
    steps = finished.data.steps
    for s in steps:   # guesses are checked on the decode workers only
        assert not s.num_proposed_tokens or (s.worker.startswith("decode") and s.phase is Phase.DECODE)
    return sum(s.num_proposed_tokens for s in steps), sum(s.num_accepted_tokens for s in steps)


def test_the_bundled_model_speculates_on_the_decode_worker_and_changes_no_token():
    """Text prompts (summaries, questions) with n-gram guesses from one token up: the answers repeat the
    prompts' words, so guesses are made and some are kept."""
    text = {"prompt_source": "text", "prompt_len": "20:120", "output_len": "24"}
    plain, _ = tokens_of(config("smollm2-135m", SpecConfig(), **text))
    guessed, finished = tokens_of(config("smollm2-135m", SpecConfig("ngram", num_tokens=4, ngram_min=1), **text))
    assert guessed == plain
    proposed, accepted = verified(finished)
    assert proposed > accepted > 0
    summary = finished.summary
    assert summary.spec_verifications == sum(len(r.acceptance_lengths) for r in finished.data.requests) > 0
    assert summary.spec_mean_acceptance_length == pytest.approx(
        1 + accepted / summary.spec_verifications)


@pytest.mark.parametrize("layout", ["slots", "paged"])
def test_a_draft_model_on_the_decode_worker_keeps_its_guesses_and_changes_no_token(layout):
    """The tiny random model drafting for itself: nearly every guess is kept, so verifications of K+1 tokens
    cross the paged layout's blocks (which the rejected positions give back)."""
    lengths = {"prompt_len": "8:30", "output_len": "12:24"}
    plain, alone = tokens_of(config("tiny", SpecConfig(), layout, **lengths))
    guessed, finished = tokens_of(config("tiny", SpecConfig("draft", "tiny", "float32", num_tokens=3), layout,
                                         **lengths))
    assert guessed == plain
    proposed, accepted = verified(finished)
    assert accepted >= 0.8 * proposed > 0
    assert sum(s.draft_ms for s in finished.data.steps) > 0
    def decode_steps(run) -> int:
        return sum(s.worker.startswith("decode") for s in run.data.steps)
    assert decode_steps(finished) < decode_steps(alone)


def test_sampled_tokens_are_the_seeds_on_the_decode_worker_with_or_without_guesses():
    """Temperature 0.1 (the tiny random model is near uniform at 1): each position's draw is keyed by (seed,
    request, position), so the decode worker verifying a draft's guesses emits the tokens a single engine
    samples without any (docs/speculative.md). float32 products throughout: the single engine computes a
    prompt's last token inside its prefill, where `auto` may take bfloat16, and sampling, unlike the argmax,
    feels that."""
    lengths = {"prompt_len": "8:30", "output_len": "12:24"}
    sampled = SamplingConfig(temperature=0.1, top_p=0.95, seed=5, ignore_eos=True)
    single = config("tiny", SpecConfig(), **lengths)
    single.engine.policy, single.sampling = "continuous", sampled
    single.model.prefill_math = "fp32"
    alone, _ = tokens_of(single)
    pooled = config("tiny", SpecConfig("draft", "tiny", "float32", num_tokens=3), **lengths)
    pooled.sampling = sampled
    pooled.model.prefill_math = "fp32"
    guessed, finished = tokens_of(pooled)
    assert guessed == alone
    proposed, accepted = verified(finished)
    assert 0 < accepted < proposed   # greedy guesses against sampled tokens: some kept, some rejected
