"""Engine families: the serving engine whose host costs a simulated step carries.

Engines on the same GPU differ less in their matmuls than around them: the scheduler's and the sampler's work
per step and per request, how many kernels a layer launches, and how fast their collectives' kernels start.
TensorRT-LLM's compiled engine with static batches, vLLM's and SGLang's Python schedulers over CUDA graphs, and a
compiled batch-1 loop like gpt-fast (the whole step one captured graph, no scheduler) each pay their own. So a
profile's [simulation] table may hold, per family, a sub-table of host terms ([simulation.vllm]) fitted on the
published figures that name that engine (backend/sim/published_fit.py); a family without one takes the shared
terms. A published figure's engine is its source's free text; `family_of` reads the family from it.
No torch here.
"""
from __future__ import annotations

from enum import Enum

from backend.errors import InputError
from backend.roofline.profiles import ENGINE_KEYS, ENGINE_TERMS


class EngineFamily(str, Enum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"          # TensorRT-LLM, and NVIDIA NIM on its TensorRT-LLM backend
    COMPILED = "compiled"      # a compiled batch-1 loop: gpt-fast and the like (torch.compile, one graph a step)
    OTHER = "other"            # any engine the others do not name: priced with the shared terms


DEFAULT_ENGINE = EngineFamily.VLLM
# what --engine takes (other is what an unnamed published engine parses to, not a choice)
ENGINE_CHOICES = tuple(f.value for f in EngineFamily if f is not EngineFamily.OTHER)
# ENGINE_KEYS (backend.roofline.profiles, which the simulator's layers sit above): the same names, as a profile's
# [simulation.<family>] keys (tests/sim/test_engines.py holds them equal)
# ENGINE_TERMS (backend.roofline.profiles): the host terms a family's sub-table may hold, each over the shared one
__all__ = ["DEFAULT_ENGINE", "ENGINE_CHOICES", "ENGINE_HELP", "ENGINE_KEYS", "ENGINE_TERMS", "EngineFamily",
           "family_of", "parse_engine"]
ENGINE_HELP = {
    EngineFamily.VLLM: "vLLM: a Python scheduler over CUDA graphs, continuous batching",
    EngineFamily.SGLANG: "SGLang: a Python scheduler over CUDA graphs, overlapped with the GPU",
    EngineFamily.TRTLLM: "TensorRT-LLM (and NIM on it): a compiled engine, in-flight or static batches",
    EngineFamily.COMPILED: "a compiled batch-1 loop such as gpt-fast: the whole step one graph, no scheduler",
}

# order matters: NIM's text names its TensorRT-LLM backend; "gpt-fast" and "torch.compile" name a compiled loop
_MARKERS = ((EngineFamily.SGLANG, ("sglang",)),
            (EngineFamily.TRTLLM, ("tensorrt-llm", "tensorrt llm", "trt-llm", "trtllm")),
            (EngineFamily.COMPILED, ("gpt-fast", "gptfast", "torch.compile", "compiled batch-1")),
            (EngineFamily.VLLM, ("vllm",)))


def family_of(engine_text: str) -> EngineFamily:
    """The family a published figure's engine text names (OTHER when it names none of them)."""
    text = engine_text.lower()
    for family, markers in _MARKERS:
        if any(m in text for m in markers):
            return family
    return EngineFamily.OTHER


def parse_engine(name: str | None) -> EngineFamily:
    """--engine's value (or run.json's) as a family (None: the default); one line for an unknown name. "other"
    (a published figure's unnamed engine: the shared terms) is taken, though --engine does not offer it."""
    if name is None or name == "":
        return DEFAULT_ENGINE
    try:
        return EngineFamily(name.strip().lower())
    except ValueError:
        raise InputError(f"--engine: unknown engine {name!r} (known: {', '.join(ENGINE_CHOICES)}; "
                         f"default {DEFAULT_ENGINE.value})") from None
