"""GGUF files (llama.cpp's format): shape from the metadata, tensors dequantized to float32, tokenizer from the vocab.

Tensors stored as Q8_0, Q4_0 or Q4_1 are also kept as their blocks (Checkpoint.blocks), which a
quantized run packs as they are."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from backend.errors import InputError
from backend.loaders.hf import Checkpoint
from backend.shape import ModelShape
from backend.loaders.tokenizer import Tokenizer

ARCHITECTURES = ("llama", "qwen2", "qwen3", "phi3")
BLOCK_FORMATS = ("q8_0", "q4_0", "q4_1")   # GGUF types the CPU kernels run as stored
_TOP_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_qkv": "self_attn.qkv_proj",   # Phi-3's fused projection (hf.copy_weights splits it)
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def _hf_name(name: str, arch: str = "llama") -> str:
    """llama.cpp tensor name -> transformers name (unknown names pass through, and copy_weights rejects them)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _BLOCK.fullmatch(name)
    if m and arch == "phi3" and m.group(2) == "ffn_up":   # Phi-3's ffn_up holds gate and up, fused
        return f"model.layers.{m.group(1)}.mlp.gate_up_proj.{m.group(3)}"
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"
    return name


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order for its interleaved rotary, back to HF's half-split one.

    The converter turns each head's rows [first half; second half] into pairs (i, i + hd/2)
    side by side; we rotate halves, so the pairs go back to the two halves.
    """
    return w.reshape(heads, -1, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)  # (heads, hd/2, 2, ...) -> (heads, 2, hd/2, ...)


def _shape(fields: dict, tensor_shapes: dict[str, tuple[int, ...]], path: Path) -> ModelShape:
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise InputError(f"{path}: GGUF architecture {arch!r} is not supported; supported: {', '.join(ARCHITECTURES)}")
    p = arch + "."
    try:
        d, heads = int(fields[p + "embedding_length"]), int(fields[p + "attention.head_count"])
        head_dim = int(fields.get(p + "attention.key_length", d // heads))
        if int(fields.get(p + "rope.dimension_count", head_dim)) != head_dim:
            raise InputError(f"{path}: partial rotary embeddings are not supported")
        return ModelShape(
            arch="llama", vocab_size=tensor_shapes["token_embd.weight"][0], hidden_size=d,
            num_layers=int(fields[p + "block_count"]), num_heads=heads,
            num_kv_heads=int(fields.get(p + "attention.head_count_kv", heads)), head_dim=head_dim,
            intermediate_size=int(fields[p + "feed_forward_length"]), max_position=int(fields[p + "context_length"]),
            rope_theta=float(fields.get(p + "rope.freq_base", 10000.0)),
            norm_eps=float(fields.get(p + "attention.layer_norm_rms_epsilon", 1e-5)),
            tie_embeddings="output.weight" not in tensor_shapes,
            attention_bias="blk.0.attn_q.bias" in tensor_shapes,
            qk_norm="blk.0.attn_q_norm.weight" in tensor_shapes,
            sliding_window=int(fields[p + "attention.sliding_window"]) if p + "attention.sliding_window" in fields
            else None)
    except KeyError as exc:
        raise InputError(f"{path}: missing GGUF key or tensor {exc.args[0]!r}") from None


def gguf_checkpoint(path: Path, name: str | None = None) -> Checkpoint:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(path)
        fields = {key: field.contents() for key, field in reader.fields.items()}
        tensors = {t.name: t for t in reader.tensors}
    except Exception as exc:  # noqa: BLE001 -- a truncated or corrupt file fails in many ways inside gguf
        raise InputError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    # gguf lists dimensions innermost first; torch wants them outermost first.
    shape = _shape(fields, {n: tuple(int(x) for x in reversed(t.shape)) for n, t in tensors.items()}, path)
    arch = fields["general.architecture"]
    permuted = arch == "llama"  # the llama converter reorders q/k rows; the others' do not
    if "rope_factors_long.weight" in tensors:
        raise InputError(f"{path}: long-context rope scaling (longrope: rope_factors_long) is not supported")

    def read(tensor) -> torch.Tensor:
        try:
            # Unquantized tensors come back as read-only views of the memory-mapped file.
            return torch.from_numpy(np.require(dequantize(tensor.data, tensor.tensor_type), requirements="W"))
        except Exception as exc:  # noqa: BLE001 -- same as above, for data cut off past the header
            raise InputError(f"{path}: cannot read tensor {tensor.name} ({type(exc).__name__}: {exc})") from None

    factors = None
    scaling = fields.get(shape.arch + ".rope.scaling.type", "none")
    if "rope_freqs.weight" in tensors:  # Llama 3.1+: per-frequency divisors
        factors = read(tensors["rope_freqs.weight"])
    elif scaling == "linear":
        factors = torch.full((shape.head_dim // 2,), float(fields[shape.arch + ".rope.scaling.factor"]))
    elif scaling != "none":
        raise InputError(f"{path}: rope scaling {scaling!r} is not supported")

    blocks: dict[str, torch.Tensor] = {}

    def tensors_hf() -> Iterator[tuple[str, torch.Tensor]]:
        for gguf_name, tensor in tensors.items():
            if gguf_name == "rope_freqs.weight":
                continue
            w = read(tensor)
            raw = None
            if tensor.tensor_type.name.lower() in BLOCK_FORMATS:   # (rows, row bytes): a block row per weight row
                raw = torch.from_numpy(np.array(tensor.data, dtype=np.uint8).reshape(w.shape[0], -1))
            if permuted and gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
                w, raw = (None if t is None else _unpermute(t, shape.num_heads) for t in (w, raw))
            elif permuted and gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
                w, raw = (None if t is None else _unpermute(t, shape.num_kv_heads) for t in (w, raw))
            if raw is not None:
                blocks[_hf_name(gguf_name, arch)] = raw
            yield _hf_name(gguf_name, arch), w

    kinds = sorted({t.tensor_type.name for t in tensors.values()})
    tokenizer = Tokenizer.from_gguf(fields, path)
    formats = {_hf_name(n, arch): t.tensor_type.name.lower() for n, t in tensors.items()}
    return Checkpoint(name or path.stem, shape, factors, tensors_hf, tokenizer,
                      f"{'bundled ' if name else ''}GGUF {path.name if name else path} ({' + '.join(kinds)})",
                      formats, blocks)
