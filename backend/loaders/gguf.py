"""GGUF files (llama.cpp's format): shape from the metadata, tensors dequantized to float32, tokenizer from the vocab.

Tensors stored in a format the CPU kernels run (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
F16, BF16: backend.precision.GGUF_FORMATS) are also kept as their bytes (Checkpoint.blocks, rows
of blocks), which a quantized run packs as they are; those it never reads as floats
(Checkpoint.floats_unused) are not dequantized at all."""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from backend.errors import InputError
from backend.loaders.hf import Checkpoint
from backend.shape import ModelShape
from backend.loaders.gguf_file import read_gguf
from backend.loaders.tokenizer import Tokenizer
from backend.precision import GGUF_FORMATS

ARCHITECTURES = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "olmoe")
BLOCK_FORMATS = tuple(GGUF_FORMATS)   # GGUF types the CPU kernels run as stored
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
    "ffn_gate_inp": "mlp.gate",   # an MoE's router
}
# Gemma's norms as llama.cpp names them (its attn_post_norm, ffn_pre_norm and ffn_post_norm)
_GEMMA_NAMES = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
# An MoE layer's experts, one 3-D tensor (experts, out, in) per matrix, as llama.cpp's converter stacks them
_EXPERTS = re.compile(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight")


def _expert_names(name: str, count: int) -> list[str] | None:
    """The transformers names of a stacked expert tensor's matrices, one per expert (None: not one)."""
    m = _EXPERTS.fullmatch(name)
    if m is None:
        return None
    return [f"model.layers.{m.group(1)}.mlp.experts.{e}.{m.group(2)}_proj.weight" for e in range(count)]


def _hf_name(name: str, arch: str = "llama") -> str:
    """llama.cpp tensor name -> transformers name (unknown names pass through, and copy_weights rejects them)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _BLOCK.fullmatch(name)
    if m and arch == "phi3" and m.group(2) == "ffn_up":   # Phi-3's ffn_up holds gate and up, fused
        return f"model.layers.{m.group(1)}.mlp.gate_up_proj.{m.group(3)}"
    if m and arch.startswith("gemma") and m.group(2) in _GEMMA_NAMES:
        return f"model.layers.{m.group(1)}.{_GEMMA_NAMES[m.group(2)]}.{m.group(3)}"
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"
    return name


def _unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row order for its interleaved rotary, back to HF's half-split one.

    The converter turns each head's rows [first half; second half] into pairs (i, i + hd/2)
    side by side; we rotate halves, so the pairs go back to the two halves.
    """
    return w.reshape(heads, -1, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)  # (heads, hd/2, 2, ...) -> (heads, 2, hd/2, ...)


def _gemma(fields: dict, arch: str, d: int, heads: int, head_dim: int, layers: int) -> dict:
    """Gemma's ModelShape fields from llama.cpp's metadata, with llama.cpp's defaults where a key is
    absent. llama.cpp keeps no query_pre_attn_scalar: it scales by head_dim ** -0.5, or for the 27B
    models (46 layers of Gemma 2, 62 of Gemma 3) by (hidden / heads) ** -0.5, the scalar Google set."""
    p = arch + "."
    gemma2 = arch == "gemma2"
    window = int(fields.get(p + "attention.sliding_window", 4096 if gemma2 else 0)) or None
    pattern = fields.get(p + "attention.sliding_window_pattern", 2 if gemma2 else 6)
    if isinstance(pattern, list):   # one flag per layer: does it slide
        sliding = [bool(x) for x in pattern]
    else:
        n = int(pattern)
        sliding = [n == 0 or i % n < n - 1 for i in range(layers)]
    if window is None:
        sliding = [False] * layers
    final = float(fields.get(p + "final_logit_softcapping", 30.0 if gemma2 else 0.0)) or None
    return dict(
        arch="gemma", sliding_window=window,
        global_layers=tuple(i for i in range(layers) if not sliding[i]),
        query_pre_attn_scalar=float(d // heads if layers == (46 if gemma2 else 62) else head_dim),
        attn_softcap=float(fields.get(p + "attn_logit_softcapping", 50.0)) if gemma2 else None, final_softcap=final,
        rope_local_theta=None if gemma2 or window is None else float(fields.get(p + "rope.freq_base_swa", 10000.0)))


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
        layers = int(fields[p + "block_count"])
        gemma = _gemma(fields, arch, d, heads, head_dim, layers) if arch.startswith("gemma") else {}
        shape = ModelShape(
            arch="llama", vocab_size=tensor_shapes["token_embd.weight"][0], hidden_size=d,
            num_layers=layers, num_heads=heads,
            num_kv_heads=int(fields.get(p + "attention.head_count_kv", heads)), head_dim=head_dim,
            intermediate_size=int(fields[p + "feed_forward_length"]), max_position=int(fields[p + "context_length"]),
            rope_theta=float(fields.get(p + "rope.freq_base", 10000.0)),
            norm_eps=float(fields.get(p + "attention.layer_norm_rms_epsilon", 1e-5)),
            tie_embeddings="output.weight" not in tensor_shapes,
            attention_bias="blk.0.attn_q.bias" in tensor_shapes,
            qk_norm="blk.0.attn_q_norm.weight" in tensor_shapes,
            sliding_window=int(fields[p + "attention.sliding_window"]) if p + "attention.sliding_window" in fields
            else None)
        return replace(shape, **gemma, **_moe_fields(fields, arch, path))
    except KeyError as exc:
        raise InputError(f"{path}: missing GGUF key or tensor {exc.args[0]!r}") from None


def _moe_fields(fields: dict, arch: str, path: Path) -> dict:
    """ModelShape's mixture-of-experts fields from the metadata (none for a dense model). llama.cpp
    renormalizes the top-k weights for Mixtral (llama) and Qwen3-MoE, never for OLMoE, unless the
    file says (expert_weights_norm); OLMoE's q and k norms span the whole projections."""
    p = arch + "."
    experts = int(fields.get(p + "expert_count", 0))
    if not experts:
        return {"qk_norm_full": arch == "olmoe"}
    if fields.get(p + "expert_shared_count") or fields.get(p + "expert_shared_feed_forward_length"):
        raise InputError(f"{path}: shared experts are not implemented")
    if int(fields.get(p + "expert_gating_func", 1)) != 1:   # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
        raise InputError(f"{path}: expert gating function {fields[p + 'expert_gating_func']} is not implemented "
                         "(only softmax)")
    clip = fields.get(p + "attention.clamp_kqv")
    return dict(num_experts=experts, experts_per_token=int(fields[p + "expert_used_count"]),
                intermediate_size=int(fields.get(p + "expert_feed_forward_length") or fields[p + "feed_forward_length"]),
                norm_topk_prob=bool(fields.get(p + "expert_weights_norm", arch != "olmoe")),
                qk_norm_full=arch == "olmoe", clip_qkv=None if clip is None else float(clip))


def gguf_checkpoint(path: Path, name: str | None = None) -> Checkpoint:
    from gguf.quants import dequantize

    try:
        file = read_gguf(path)
        fields, tensors = file.fields, file.tensors
    except ValueError as exc:
        if "GGMLQuantizationType" in str(exc):   # a tensor type newer than this gguf package
            raise InputError(f"{path}: a tensor has an unknown GGUF type ({exc}); a newer llama.cpp wrote it, "
                             "and this gguf package cannot read it") from None
        raise InputError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    except Exception as exc:  # noqa: BLE001 -- a truncated or corrupt file fails in many ways inside gguf
        raise InputError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    # gguf lists dimensions innermost first; torch wants them outermost first.
    shape = _shape(fields, {n: tuple(reversed(t.shape)) for n, t in tensors.items()}, path)
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
    scaling = fields.get(arch + ".rope.scaling.type", "none")
    if "rope_freqs.weight" in tensors:  # Llama 3.1+: per-frequency divisors
        factors = read(tensors["rope_freqs.weight"])
    elif scaling == "linear":
        factors = torch.full((shape.head_dim // 2,), float(fields[arch + ".rope.scaling.factor"]))
    elif scaling != "none":
        raise InputError(f"{path}: rope scaling {scaling!r} is not supported")

    blocks: dict[str, torch.Tensor] = {}
    unused: set[str] = set()   # Checkpoint.floats_unused: the loader fills it before reading

    def tensors_hf() -> Iterator[tuple[str, torch.Tensor]]:
        for gguf_name, tensor in tensors.items():
            if gguf_name == "rope_freqs.weight":
                continue
            dims = tuple(int(n) for n in reversed(tensor.shape))   # outermost first, as read() gives it
            experts = _expert_names(gguf_name, dims[0])
            names = experts if experts is not None else [_hf_name(gguf_name, arch)]
            # dequantizing is most of a load's time: a tensor the run uses only as blocks skips it
            w = None if all(n in unused for n in names) else read(tensor)
            raw = None
            if tensor.tensor_type.name.lower() in BLOCK_FORMATS:   # (rows, row bytes): a block row per weight row
                raw = torch.from_numpy(np.array(tensor.data).view(np.uint8).reshape(dims[0], -1))
            if permuted and gguf_name.endswith(("attn_q.weight", "attn_q.bias")):
                w, raw = (None if t is None else _unpermute(t, shape.num_heads) for t in (w, raw))
            elif permuted and gguf_name.endswith(("attn_k.weight", "attn_k.bias")):
                w, raw = (None if t is None else _unpermute(t, shape.num_kv_heads) for t in (w, raw))
            elif shape.arch == "gemma" and gguf_name.endswith("norm.weight"):
                w, raw = (None if w is None else w - 1), None   # stored as 1 + weight; the model adds the 1
            if experts is not None:   # (experts, out, in): one matrix (and its rows of blocks) per expert
                for e, name in enumerate(experts):
                    if raw is not None:
                        blocks[name] = raw[e].reshape(dims[1], -1)
                    if name not in unused:
                        yield name, w[e]
                continue
            if raw is not None:
                blocks[names[0]] = raw
            if w is not None:
                yield names[0], w

    kinds = sorted({t.tensor_type.name for t in tensors.values()})
    tokenizer = Tokenizer.from_gguf(fields, path)
    formats = {hf: t.tensor_type.name.lower() for n, t in tensors.items()
               for hf in _expert_names(n, int(t.shape[-1])) or [_hf_name(n, arch)]}
    return Checkpoint(name or path.stem, shape, factors, tensors_hf, tokenizer,
                      f"{'bundled ' if name else ''}GGUF {path.name if name else path} ({' + '.join(kinds)})",
                      formats, blocks, unused)
