"""The local engine's speculator from the run's settings: the n-gram proposer, or a draft model loaded
beside the target (same vocabulary, checked), with its own runner and KV cache. Here, above the engine,
because a draft model is loaded as the target is (backend/loaders)."""
from __future__ import annotations

from dataclasses import replace

from backend.config import ModelChoice, RunConfig, SamplingConfig
from backend.errors import InputError
from backend.events import Emit, Progress

_PROBE = "The quick brown fox jumps over the lazy dog. 12345 ünïcödé"   # tokenizers that agree here agree widely


def build_speculator(config: RunConfig, loaded, num_slots: int, max_len: int, warmup, emit: Emit):
    from backend.engine.spec.speculator import Speculator
    spec = config.spec
    spec.validate()
    limit = loaded.shape.max_position
    if spec.num_tokens >= limit:
        raise InputError(f"--spec-tokens {spec.num_tokens}: beyond {loaded.name}'s context of {limit} tokens")
    if spec.method == "ngram":
        from backend.engine.spec.ngram import NgramProposer
        return Speculator(NgramProposer(spec.ngram_min, spec.ngram_max), spec.num_tokens)
    from backend.engine.runner import build_runner
    from backend.engine.spec.draft import DraftProposer
    from backend.loaders.cache import load
    choice = ModelChoice(spec.draft_model, config.model.device, spec.draft_dtype, config.model.prefill_math)
    draft, _ = load(replace(config, model=choice), lambda event: emit(_as_draft(event)))
    check_same_vocabulary(loaded, draft)
    if draft.shape.max_position < max_len:
        raise InputError(f"--spec draft:{spec.draft_model}: its context of {draft.shape.max_position} tokens is "
                         f"shorter than this run's sequences ({max_len})")
    emit(Progress("warming up the draft model", None))
    runner = build_runner(draft, num_slots, max_len, SamplingConfig(), use_cuda_graphs=False, warmup=warmup)
    return Speculator(DraftProposer(runner), spec.num_tokens)


def _as_draft(event):
    """The draft's load announced as the draft's."""
    return Progress(f"draft model: {event.message}", event.fraction) if isinstance(event, Progress) else event


def check_same_vocabulary(target, draft) -> None:
    """One line unless the draft's token ids mean what the target's do: the same vocabulary size and the
    same encoding of a probe text."""
    if draft.shape.vocab_size != target.shape.vocab_size:
        raise InputError(f"--spec draft:{draft.name}: its vocabulary has {draft.shape.vocab_size:,} tokens, "
                         f"{target.name}'s {target.shape.vocab_size:,}: a draft must share the target's tokenizer")
    if draft.tokenizer.encode(_PROBE) != target.tokenizer.encode(_PROBE):
        raise InputError(f"--spec draft:{draft.name}: its tokenizer splits text differently from {target.name}'s: "
                         "a draft must share the target's tokenizer")
