"""Named model shapes, and the one place that turns a shape into a model class."""
from __future__ import annotations

import torch

from backend.errors import InputError
from backend.shape import ModelShape
from backend.models.gemma import GemmaModel
from backend.models.gpt2 import GPT2Model
from backend.models.llama import LlamaModel

# Real shapes (their published configs); the synthetic presets load random weights.
SHAPES: dict[str, ModelShape] = {
    "tiny": ModelShape(
        arch="llama", vocab_size=512, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        head_dim=16, intermediate_size=128, max_position=2048, rope_theta=10000.0, tie_embeddings=False,
    ),
    "gpt2-124m": ModelShape(
        arch="gpt2", vocab_size=50257, hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=12,
        head_dim=64, intermediate_size=3072, max_position=1024, norm_eps=1e-5, tie_embeddings=True,
    ),
    "llama-1b": ModelShape(  # Llama 3.2 1B
        arch="llama", vocab_size=128256, hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8,
        head_dim=64, intermediate_size=8192, max_position=131072, rope_theta=500000.0, tie_embeddings=True,
    ),
    "llama-8b": ModelShape(  # Llama 3.1 8B
        arch="llama", vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=14336, max_position=131072, rope_theta=500000.0, tie_embeddings=False,
    ),
    "smollm2-135m": ModelShape(  # SmolLM2-135M(-Instruct), the bundled GGUF
        arch="llama", vocab_size=49152, hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3,
        head_dim=64, intermediate_size=1536, max_position=8192, rope_theta=100000.0, tie_embeddings=True,
    ),
}

SYNTHETIC = ("tiny", "gpt2-124m", "llama-1b", "llama-8b")
ARCHS = ("llama", "gemma", "gpt2")


def simulator_only(shape: ModelShape) -> str | None:
    """What of this shape the engine's decoders do not implement (None: it can run it)."""
    if shape.kv_lora_rank:
        return "multi-head latent attention (kv_lora_rank)"
    if shape.num_shared_experts:
        return "shared experts (num_shared_experts)"
    if shape.num_dense_layers:
        return "dense first layers before the mixture-of-experts ones (num_dense_layers)"
    if shape.mlp_bias or shape.o_bias or shape.attention_sinks:
        return "biased experts, output projection bias or attention sinks (gpt-oss)"
    if shape.arch != "gemma" and shape.sliding_window and shape.global_layers:
        return "a sliding window on some layers only"
    return None


def refuse_simulator_only(shape: ModelShape) -> None:
    what = simulator_only(shape)
    if what is not None:
        raise InputError(f"{what} is priced by the simulator (--simulate) but this engine does not run it")


def build_model(shape: ModelShape, rope_freq_factors: torch.Tensor | None = None) -> torch.nn.Module:
    """An uninitialized model of this shape (parameters are torch.empty: load or fill them).

    rope_freq_factors (head_dim // 2,) divide the rotary frequencies (Llama 3 long-context scaling;
    Gemma 3: its global layers' linear factor). A shape only the simulator prices is refused in one line.
    """
    refuse_simulator_only(shape)
    if shape.arch == "llama":
        return LlamaModel(shape, rope_freq_factors)
    if shape.arch == "gemma":
        return GemmaModel(shape, rope_freq_factors)
    if shape.arch == "gpt2":
        if rope_freq_factors is not None:
            raise InputError("rope frequency factors given for a gpt2 model, which has no rotary embeddings")
        return GPT2Model(shape)
    raise InputError(f"unknown architecture {shape.arch!r}; known: {', '.join(ARCHS)}")
