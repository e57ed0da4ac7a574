"""Hugging Face checkpoints: a folder with config.json and *.safetensors, or a hub id downloaded into one.

Also home of `Checkpoint` (what every loader hands to weights.load_model) and `copy_weights`,
which fills a model from tensors named as in transformers' checkpoints.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from backend.errors import InputError
from backend.loaders.hf_gemma import GEMMA_FIELDS, gemma_shape
from backend.shape import ModelShape
from backend.loaders.tokenizer import Tokenizer

ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "Qwen2ForCausalLM": "llama", "Qwen3ForCausalLM": "llama",
    "Phi3ForCausalLM": "llama",
    "MixtralForCausalLM": "llama", "Qwen3MoeForCausalLM": "llama", "OlmoeForCausalLM": "llama",
    "Gemma2ForCausalLM": "gemma", "Gemma3ForCausalLM": "gemma",
    "GPT2LMHeadModel": "gpt2",
}
# The mixture-of-experts families (backend/models/moe.py), and the config fields each sets that
# UNIMPLEMENTED refuses for every other architecture.
MOE_FIELDS = {
    "MixtralForCausalLM": {"num_local_experts"},
    "Qwen3MoeForCausalLM": {"num_experts", "num_local_experts", "moe_intermediate_size"},
    "OlmoeForCausalLM": {"num_experts", "num_local_experts", "clip_qkv"},
}
# Mixtral's checkpoint names for its router and experts -> the names hf_destinations uses (Qwen3-MoE's).
_MIXTRAL_NAMES = {"block_sparse_moe.gate.": "mlp.gate.", "block_sparse_moe.experts.": "mlp.experts.",
                  ".w1.": ".gate_proj.", ".w3.": ".up_proj.", ".w2.": ".down_proj."}
# Checkpoints that store projections fused (Phi-3: qkv_proj, gate_up_proj): split into the parts
# hf_destinations names, at the sizes the model's shape gives them.
FUSED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
         "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}
# Buffers some checkpoints carry that are not weights.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")
_HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.txt"]


@dataclass(slots=True)
class Checkpoint:
    """A model found on disk, before any weight is read."""

    name: str
    shape: ModelShape
    rope_freq_factors: torch.Tensor | None
    tensors: Callable[[], Iterator[tuple[str, torch.Tensor]]]  # yields transformers-named tensors, lazily
    tokenizer: Tokenizer
    source: str
    # transformers name -> the format the file stores it in ("f32", "bf16", "q4_1", "q6_k", ...)
    formats: dict[str, str] = field(default_factory=dict)
    # transformers name -> its GGUF blocks (uint8 rows) for the formats the CPU kernels run
    # (q8_0, q4_0, q4_1): filled while tensors() is read, so a quantized run uses the file's bytes
    blocks: dict[str, torch.Tensor] = field(default_factory=dict)
    # A checkpoint that keeps blocks (a GGUF's) has a set here, which tensors() reads as it goes:
    # the names the loader will never read as floats (quant.floats_unused, filled before tensors()
    # is called), kept as blocks only, never dequantized, and not yielded. None: every tensor is yielded.
    floats_unused: set[str] | None = None


def copy_weights(model: torch.nn.Module, tensors: Iterable[tuple[str, torch.Tensor]], source: str,
                 unfilled: Iterable[str] = ()) -> None:
    """Copy transformers-named tensors into the model (cast to its dtype, moved to its device); the
    `unfilled` ones are left as allocated (packing replaces them from the checkpoint's blocks)."""
    dest = model.hf_destinations()
    tied = model.shape.tie_embeddings
    with torch.no_grad():
        for name, tensor in _split_fused(_split_experts(tensors, model.shape.num_experts), dest):
            if name not in dest and "transformer." + name in dest:
                name = "transformer." + name  # the original GPT-2 checkpoints have no prefix
            if name not in dest:
                if (tied and name == "lm_head.weight") or name.endswith(_IGNORED_SUFFIXES):
                    continue
                raise InputError(f"{source}: unexpected tensor {name!r} for a {model.shape.arch} model of this shape")
            target = dest.pop(name)
            if target.shape != tensor.shape:
                raise InputError(f"{source}: tensor {name!r} has shape {tuple(tensor.shape)}, "
                                 f"the model shape implies {tuple(target.shape)}")
            target.copy_(tensor)
    for name in unfilled:
        dest.pop(name, None)
    if dest:
        missing = sorted(dest)
        raise InputError(f"{source}: {len(missing)} tensors missing, e.g. {', '.join(missing[:3])}")


def _split_experts(tensors: Iterable[tuple[str, torch.Tensor]], num_experts: int) -> Iterator[tuple[str, torch.Tensor]]:
    """An MoE's tensors under the names hf_destinations uses: Mixtral's renamed, and transformers'
    in-memory 3-D experts (mlp.experts.gate_up_proj (E, 2 ff, hidden), down_proj (E, hidden, ff))
    split into one matrix per expert."""
    for name, tensor in tensors:
        if not num_experts or (".experts." not in name and ".block_sparse_moe." not in name):
            yield name, tensor
            continue
        for old, new in _MIXTRAL_NAMES.items():
            name = name.replace(old, new)
        head, _, leaf = name.rpartition(".experts.")
        if leaf in ("gate_up_proj", "down_proj") and tensor.ndim == 3:
            for e, matrix in enumerate(tensor):
                if leaf == "down_proj":
                    yield f"{head}.experts.{e}.down_proj.weight", matrix
                else:
                    gate, up = matrix.chunk(2)   # (ff, hidden) each
                    yield from ((f"{head}.experts.{e}.gate_proj.weight", gate), (f"{head}.experts.{e}.up_proj.weight", up))
        else:
            yield name, tensor


def _split_fused(tensors: Iterable[tuple[str, torch.Tensor]], dest: dict) -> Iterator[tuple[str, torch.Tensor]]:
    """A fused projection's tensor as its parts (views), where the model names the parts instead."""
    for name, tensor in tensors:
        for fused, parts in FUSED.items():
            marker = f".{fused}."
            if marker in name and name not in dest:
                head, kind = name.split(marker)
                names = [f"{head}.{part}.{kind}" for part in parts]
                sizes = [dest[n].shape[0] for n in names if n in dest]
                if len(sizes) == len(parts) and sum(sizes) == tensor.shape[0]:
                    yield from zip(names, torch.split(tensor, sizes))
                    break
        else:
            yield name, tensor


def _rope(config: dict, head_dim: int, theta: float, path: Path | str) -> torch.Tensor | None:
    """Frequency divisors for Llama 3's rope scaling (None for plain rotary)."""
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return None
    if kind != "llama3":
        raise InputError(f"{path}: rope scaling {kind!r} is not supported (only default and llama3)")
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_len = scaling["original_max_position_embeddings"]
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
    smooth = ((old_len / wavelen - low) / (high - low)).clamp(0.0, 1.0)
    divisor = 1.0 / ((1 - smooth) / factor + smooth)
    return torch.where(wavelen > old_len / low, torch.full_like(divisor, factor),
                       torch.where(wavelen < old_len / high, torch.ones_like(divisor), divisor))


# Config fields that change a model's arithmetic and that these decoders do not implement: a config
# that sets one (to anything but its no-op value) is refused in one line, never run with it ignored.
UNIMPLEMENTED = {
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "query_pre_attn_scalar": None,
    "partial_rotary_factor": 1.0, "rotary_pct": 1.0, "qk_layernorm": False, "use_qk_norm": False,
    "num_experts": None, "num_local_experts": None, "n_routed_experts": None, "moe_intermediate_size": None,
    "embedding_multiplier": None, "residual_multiplier": None, "attention_multiplier": None,
    "logits_scaling": None, "clip_qkv": None, "rope_local_base_freq": None, "kv_lora_rank": None,
    "use_bidirectional_attention": False,
}
ACTIVATIONS = {"llama": ("silu",), "gemma": ("gelu_pytorch_tanh",), "gpt2": ("gelu_new", "gelu_pytorch_tanh")}


def _refuse_unimplemented(config: dict, arch: str, names: list[str], path) -> None:
    """One line for a field of config.json that these decoders would otherwise silently ignore."""
    accepted = set().union(*(MOE_FIELDS.get(n, set()) | GEMMA_FIELDS.get(n, set()) for n in names))
    for key, no_op in UNIMPLEMENTED.items():
        value = None if key in accepted else config.get(key)
        if value is not None and value != no_op and value != [] and value != {}:
            raise InputError(f"{path}: config field {key} = {value!r} is not implemented by this engine "
                             f"({', '.join(names)}), so its answers would differ from the reference")
    # transformers' Gemma reads hidden_activation (its configs may carry a hidden_act beside it)
    act = config.get("hidden_activation") if arch == "gemma" else \
        config.get("hidden_act", config.get("activation_function"))
    if act is not None and act not in ACTIVATIONS[arch]:
        raise InputError(f"{path}: activation {act!r} is not implemented for {', '.join(names)} "
                         f"(this engine runs {' or '.join(ACTIVATIONS[arch])})")
    if arch != "gemma" and (config.get("use_sliding_window")
                            or any(t != "full_attention" for t in config.get("layer_types") or [])):
        raise InputError(f"{path}: a sliding window on some layers only (use_sliding_window, layer_types) is not "
                         "implemented yet; Mistral's window on every layer is")


def shape_from_config(config: dict, path: Path | str) -> tuple[ModelShape, torch.Tensor | None]:
    """ModelShape (and rope frequency divisors) from a transformers config.json.

    Mistral's and Phi-3's sliding window (every layer's queries see the last `sliding_window`
    keys) is modelled; Phi-3's fused qkv and gate_up tensors are split as they are copied
    (`_split_fused`); a field these decoders do not implement is refused (`UNIMPLEMENTED`). Gemma 2
    and 3 take the fields only they have from hf_gemma.gemma_shape.
    """
    names = config.get("architectures") or []
    arch = next((ARCHITECTURES[a] for a in names if a in ARCHITECTURES), None)
    if "Gemma3ForConditionalGeneration" in names:
        raise InputError(f"{path}: Gemma3ForConditionalGeneration is Gemma 3 with its vision tower, which this "
                         "engine does not run; use a text-only Gemma 3 checkpoint (Gemma3ForCausalLM, e.g. "
                         "google/gemma-3-1b-it)")
    if arch is None:
        raise InputError(f"{path}: architecture {', '.join(names) or '(none given)'} is not supported; "
                         f"supported: {', '.join(ARCHITECTURES)}")
    _refuse_unimplemented(config, arch, names, path)
    try:
        if arch == "gpt2":
            d, heads = config["n_embd"], config["n_head"]
            shape = ModelShape(
                arch="gpt2", vocab_size=config["vocab_size"], hidden_size=d, num_layers=config["n_layer"],
                num_heads=heads, num_kv_heads=heads, head_dim=d // heads,
                intermediate_size=config.get("n_inner") or 4 * d, max_position=config["n_positions"],
                norm_eps=config.get("layer_norm_epsilon", 1e-5), tie_embeddings=True)
            return shape, None
        if config.get("mlp_bias"):
            raise InputError(f"{path}: mlp_bias is not supported")
        d, heads = config["hidden_size"], config["num_attention_heads"]
        head_dim = config.get("head_dim") or d // heads
        theta = config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0)
        shape = ModelShape(
            arch="llama", vocab_size=config["vocab_size"], hidden_size=d, num_layers=config["num_hidden_layers"],
            num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads, head_dim=head_dim,
            intermediate_size=config["intermediate_size"], max_position=config["max_position_embeddings"],
            rope_theta=float(theta), norm_eps=config.get("rms_norm_eps", 1e-6),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            attention_bias="Qwen2ForCausalLM" in names or bool(config.get("attention_bias", False)),
            # Qwen2's config carries a sliding_window that applies only with use_sliding_window (refused above)
            sliding_window=config.get("sliding_window")
            if {"MistralForCausalLM", "Phi3ForCausalLM", "MixtralForCausalLM"} & set(names)
            else None,
            qk_norm=bool({"Qwen3ForCausalLM", "Qwen3MoeForCausalLM"} & set(names)))
        if MOE_FIELDS.keys() & set(names):
            shape = _moe_shape(shape, config, names, path)
        if arch == "gemma":
            return gemma_shape(shape, config, names, path)
    except KeyError as exc:
        raise InputError(f"{path}: missing field {exc.args[0]!r}") from None
    return shape, _rope(config, head_dim, shape.rope_theta, path)


def _moe_shape(shape: ModelShape, config: dict, names: list[str], path) -> ModelShape:
    """The mixture-of-experts fields: every layer sparse (Qwen3-MoE's dense layers are refused)."""
    if config.get("decoder_sparse_step", 1) != 1 or config.get("mlp_only_layers"):
        raise InputError(f"{path}: dense MLP layers between the sparse ones (decoder_sparse_step "
                         f"{config.get('decoder_sparse_step', 1)}, mlp_only_layers {config.get('mlp_only_layers')}) "
                         "are not implemented; every layer must be a mixture of experts")
    if config.get("shared_expert_intermediate_size"):
        raise InputError(f"{path}: shared experts (shared_expert_intermediate_size) are not implemented")
    experts = config.get("num_local_experts") or config["num_experts"]
    olmoe = "OlmoeForCausalLM" in names
    return replace(shape, num_experts=int(experts), experts_per_token=int(config["num_experts_per_tok"]),
                   intermediate_size=int(config.get("moe_intermediate_size") or config["intermediate_size"]),
                   norm_topk_prob="MixtralForCausalLM" in names or bool(config.get("norm_topk_prob", False)),
                   qk_norm=shape.qk_norm or olmoe, qk_norm_full=olmoe,
                   clip_qkv=float(config["clip_qkv"]) if olmoe and config.get("clip_qkv") is not None else None)


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise InputError(f"{index}: not a safetensors index ({exc})") from None
        files = [folder / f for f in sorted(set(weight_map.values()))]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no *.safetensors weights (other formats are not supported)")
    for f in files:
        if not f.is_file():
            raise InputError(f"{f}: listed in the safetensors index but missing")
    return files


def _read_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import SafetensorError, safe_open

    for f in files:
        try:
            with safe_open(f, framework="pt", device="cpu") as fh:
                for key in fh.keys():
                    yield key, fh.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise InputError(f"{f}: cannot read safetensors file ({exc})") from None


def hf_folder_checkpoint(folder: Path, name: str | None = None) -> Checkpoint:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InputError(f"{folder}: no config.json (expected a Hugging Face model folder)")
    try:
        config = json.loads(config_path.read_text())
    except ValueError as exc:
        raise InputError(f"{config_path}: not valid JSON ({exc})") from None
    shape, factors = shape_from_config(config, config_path)
    files = _safetensors_files(folder)
    tokenizer = Tokenizer.from_hf_folder(folder)
    return Checkpoint(name or folder.name, shape, factors, lambda: _read_safetensors(files), tokenizer,
                      f"Hugging Face folder {folder} ({len(files)} safetensors file{'s' * (len(files) > 1)})")


def hub_checkpoint(repo_id: str) -> Checkpoint:
    """Download (or find in the local cache) a hub model's config, tokenizer and safetensors."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        folder = snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS, local_files_only=offline)
    except GatedRepoError:
        raise InputError(f"cannot download {repo_id}: the repository is gated (log in with `hf auth login`)") from None
    except RepositoryNotFoundError:
        raise InputError(f"cannot download {repo_id}: no such model on the Hugging Face Hub") from None
    except Exception as exc:  # noqa: BLE001 -- any network or cache failure means the same thing to the user
        why = ("offline (HF_HUB_OFFLINE is set) and not in the local cache" if offline
               else f"offline or unreachable ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        raise InputError(f"cannot download {repo_id}: {why}") from None
    return hf_folder_checkpoint(Path(folder), name=repo_id)
