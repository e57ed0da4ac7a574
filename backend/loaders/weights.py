"""load_model: the bundled GGUF, any .gguf, a Hugging Face folder or hub id, or a synthetic shape with random weights."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.loaders import quant
from backend.loaders.device import dtype_name, resolve_device, resolve_dtype
from backend.errors import InputError
from backend.events import ModelLoaded
from backend.loaders.gguf import gguf_checkpoint
from backend.loaders.hf import Checkpoint, copy_weights, hf_folder_checkpoint, hub_checkpoint
from backend.models import build_model, SHAPES, SYNTHETIC
from backend.shape import ModelShape
from backend.precision import BLOCK_FORMATS, Precision, canonical, precision
from backend.loaders.tokenizer import ByteTokenizer, Tokenizer
from backend.models.fidelity import MathChoice
# the catalog's names, here too for the many callers that import them from the loader
from backend.loaders.catalog import (BUNDLED, BUNDLED_FILE, _INSTALL_BUNDLED, ModelInfo, bundled_gguf,  # noqa: F401
                                     is_hub_id, list_models)

_POOL = 1_048_573  # random-fill period; prime, so that rows of any width do not line up with it
_STD = 0.02


@dataclass(slots=True)
class LoadedModel:
    name: str
    model: torch.nn.Module      # eval mode, on `device`, activations in `dtype`
    shape: ModelShape
    tokenizer: Tokenizer
    device: torch.device
    dtype: torch.dtype          # activations, norms, KV cache (float32 for the GGUF block formats)
    source: str                 # where the weights came from, for people
    random_weights: bool
    weight_bytes: int           # what a step reads: the layers, the final norm and the LM head
    precision: Precision | None = None   # the matrices' format; None: plain `dtype`
    math: MathChoice | None = None       # the products' arithmetic (--prefill-math), chosen after loading

    def __post_init__(self):
        if self.precision is None:
            self.precision = precision(dtype_name(self.dtype))

    def loaded_event(self, device_name: str, kv_capacity: int, reused: bool) -> ModelLoaded:
        """The ModelLoaded event a run emits for this model."""
        p = self.precision
        return ModelLoaded(self.name, str(self.device), device_name, p.name, self.source, self.random_weights,
                           self.shape.num_params(), self.weight_bytes, kv_capacity, self.shape, reused,
                           p.weight_bits, p.activation, None if self.math is None else self.math.as_dict())


def load_model(name_or_path: str, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """A model ready to run. dtype: a float dtype, a GGUF format (q8_0, q4_0, q4_1, q5_0, q5_1, q4_k,
    q5_k, q6_k, f16, bf16w: the CPU kernels), int8 (weight-only, torch), or auto: bfloat16 on CUDA,
    float16 on MPS, and on the CPU float32 -- or, for a GGUF the kernels can run, the formats it
    stores (Q4_1 stays Q4_1, a Q4_K_M file its Q5_0, Q8_0, Q4_K and Q6_K tensors)."""
    dev = resolve_device(device)
    wanted = canonical(dtype)
    synthetic = config_shape(name_or_path)
    ckpt = None if synthetic is not None else _find_checkpoint(name_or_path)
    target = quant.choose(wanted, dev, ckpt)   # None: plain floats
    dt = resolve_dtype("auto" if target is not None or wanted in BLOCK_FORMATS else wanted, dev)
    if target is not None and target != "int8":
        dt = torch.float32                      # the block formats' activations
    if ckpt is None:
        shape, factors = synthetic
        name = name_or_path if name_or_path in SYNTHETIC or is_hub_id(name_or_path) else _config_name(name_or_path)
    else:
        shape, factors, name = ckpt.shape, ckpt.rope_freq_factors, ckpt.name
    _check_memory(name, shape, dev, dt)
    model = _empty_model(shape, factors, dev, dt)
    if ckpt is None:
        _fill_random(model, seed=0)
        what = "synthetic shape" if name_or_path in SYNTHETIC else "the shape of"
        cached = " (its cached config.json)" if is_hub_id(name_or_path) and not Path(name_or_path).exists() else ""
        source = f"random weights (seed 0, std {_STD}), {what} {name_or_path}{cached}"
    else:
        if ckpt.floats_unused is not None:   # the rows packed from the file's blocks are never dequantized
            ckpt.floats_unused.update(quant.floats_unused(model, target, ckpt))
        copy_weights(model, ckpt.tensors(), ckpt.source, ckpt.floats_unused or ())
        source = ckpt.source
    tokenizer = ByteTokenizer(shape.vocab_size) if ckpt is None else ckpt.tokenizer
    if target is None:
        return LoadedModel(name, model, shape, tokenizer, dev, dt, f"{source} to {dtype_name(dt)}" if ckpt else source,
                           ckpt is None, _weight_bytes(model))
    how = quant.apply(model, target, ckpt)
    if ckpt is not None:
        ckpt.blocks.clear()                     # packed: the file's copies are no longer needed
    prec, weight_bytes = quant.effective(model, target, dt)
    return LoadedModel(name, model, shape, tokenizer, dev, dt, f"{source}: {how}", ckpt is None, weight_bytes, prec)


def config_shape(name_or_path: str) -> tuple[ModelShape, torch.Tensor | None] | None:
    """A shape without weights: a known synthetic name, or a transformers config.json (Llama-3.1-70B
    or Qwen3-8B named by its config); None for anything else (a checkpoint with weights)."""
    if name_or_path in SYNTHETIC:
        return SHAPES[name_or_path], None
    path = Path(name_or_path).expanduser()
    if is_hub_id(name_or_path) and not path.exists():
        path = _cached_config_only(name_or_path) or path
    if path.suffix.lower() != ".json":
        return None
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    from backend.files import read_config_json
    from backend.loaders.hf import shape_from_config
    return shape_from_config(read_config_json(path), path)


def _cached_config_only(repo_id: str) -> Path | None:
    """The cached config.json of a hub model whose weights are not cached (a shape to name, such
    as Qwen/Qwen3-30B-A3B's, without its 60 GB); None when the weights are there or nothing is."""
    try:
        from huggingface_hub import try_to_load_from_cache
        from backend.loaders.discover import hf_cache   # the environment read now, not at import
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hf_cache())
    except Exception:  # noqa: BLE001 -- a malformed id or cache is the same as nothing cached
        return None
    if not isinstance(found, str):
        return None
    snapshot = Path(found).parent
    has_weights = any(snapshot.glob("*.safetensors")) or any(snapshot.glob("*.safetensors.index.json"))
    return None if has_weights else Path(found)


def model_header(name_or_path: str) -> tuple[ModelShape, Tokenizer]:
    """A model's shape and tokenizer without reading its weights (the disaggregated policy's
    coordinator draws the workload with them while its engine processes load the model)."""
    synthetic = config_shape(name_or_path)
    if synthetic is not None:
        return synthetic[0], ByteTokenizer(synthetic[0].vocab_size)
    ckpt = _find_checkpoint(name_or_path)
    return ckpt.shape, ckpt.tokenizer


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _config_name(path: str) -> str:
    """A config file's model name: its folder's name for a config.json, else the file's stem."""
    p = Path(path).expanduser()
    return p.parent.name if p.name == "config.json" and p.parent.name else p.stem


def _find_checkpoint(name: str) -> Checkpoint:
    if name == BUNDLED:
        path = bundled_gguf()
        if path is None:
            raise InputError(f"{BUNDLED}: the bundled model is not installed ({_INSTALL_BUNDLED})")
        return gguf_checkpoint(path, name=BUNDLED)
    path = Path(name).expanduser()
    if path.is_dir():
        return hf_folder_checkpoint(path)
    if path.is_file():
        if path.suffix.lower() != ".gguf" and not _starts_with(path, b"GGUF"):   # Ollama's blobs have no suffix
            raise InputError(f"{path}: expected a .gguf file or a Hugging Face model folder")
        return gguf_checkpoint(path)
    if is_hub_id(name):
        return hub_checkpoint(name)
    if os.sep in name or name.startswith((".", "~")) or name.lower().endswith(".gguf"):
        raise InputError(f"{name}: no such file or folder")
    known = ", ".join([BUNDLED, *SYNTHETIC])
    raise InputError(f"unknown model {name!r}; known: {known}; or give a .gguf file, a Hugging Face folder "
                     "or a hub id (owner/name)")


def _empty_model(shape: ModelShape, factors: torch.Tensor | None, device: torch.device,
                 dtype: torch.dtype) -> torch.nn.Module:
    """Parameters allocated once, directly in the target dtype on the target device (never float32 first).

    What Module.to_empty does, with torch.empty in place of its empty_like: on a meta tensor that
    goes through torch's Python reference, which imports sympy on its first call (0.3 s of a load)."""
    with torch.device("meta"):
        model = build_model(shape, factors)
    model = model.to(dtype=dtype)._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
    return model.requires_grad_(False).eval()


def _fill_random(model: torch.nn.Module, seed: int) -> None:
    """Normal(0, 0.02) matrices, unit norms (Gemma's store 0: its norms multiply by 1 + weight), zero biases.

    Drawing 8 billion normals takes minutes on a CPU; tiling one seeded pool, shifted per
    parameter, runs at copy speed, and the values only need to be sane, not independent.
    """
    first = next(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    pool = (torch.randn(_POOL, generator=gen) * _STD).to(first.device, first.dtype)
    shifts = torch.randint(0, _POOL, (len(list(model.parameters())),), generator=gen).tolist()
    unit = 0.0 if model.shape.arch == "gemma" else 1.0
    with torch.no_grad():
        for (name, p), shift in zip(model.named_parameters(), shifts):
            leaf = name.rsplit(".", 1)[-1]
            if p.ndim == 1:
                p.fill_(unit if leaf.endswith("norm") or (leaf.startswith("ln") and leaf.endswith("_w")) else 0.0)
                continue
            src = pool.roll(shift)
            flat = p.view(-1)
            full, rest = divmod(flat.numel(), _POOL)
            if full:
                flat[:full * _POOL].view(full, _POOL).copy_(src.expand(full, _POOL))  # (full, pool) blocks
            flat[full * _POOL:].copy_(src[:rest])


def _weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())  # tied weights counted once


def cuda_free_bytes(driver_free: int, reserved: int, allocated: int) -> int:
    """Bytes new tensors can have on a CUDA device: the driver's free memory plus what torch's caching
    allocator reserves but does not use (a released runner's blocks, reused before the driver is
    asked). Without the second term the second run of a process (repeats, sweeps, the window's next
    run) is refused for memory it has."""
    return driver_free + max(0, reserved - allocated)


def free_memory(device: torch.device) -> int | None:
    """Bytes free for new tensors on the device (None where it cannot be told)."""
    if device.type == "cuda":   # with what the caching allocator holds unused (a released runner's memory)
        return cuda_free_bytes(torch.cuda.mem_get_info(device)[0], torch.cuda.memory_reserved(device),
                               torch.cuda.memory_allocated(device))
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _check_memory(name: str, shape: ModelShape, device: torch.device, dtype: torch.dtype) -> None:
    need = shape.num_params() * torch.empty(0, dtype=dtype).element_size()
    free = free_memory(device)
    if free is not None and need > free:
        raise InputError(f"{name} needs {need / 2**30:.1f} GiB for its {dtype_name(dtype)} weights on {device}, "
                         f"but only {free / 2**30:.1f} GiB is free")
