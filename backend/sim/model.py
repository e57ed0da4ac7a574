"""What a simulated run prices, before any step: the model's shape from its name (no weights are
read), its precision on a profile, and the bytes its weights and KV cache take on each device,
with the memory check that refuses a run those exceed. The simulated target, the disaggregated
simulation, the planner and the window's simulation settings all ask these.
"""
from __future__ import annotations

from backend.errors import DoesNotFit, InputError
from backend.precision import GPU_FORMATS, Precision, canonical, precision
from backend.roofline.cost import matrix_params
from backend.roofline.profiles import GpuProfile
from backend.shape import kv_elements_per_token
from backend.sim import parallel
from backend.sim.parallel import Layout
from backend.sim.step_time import is_cpu_profile


def resolve_model(name: str):
    """The shape of a known model name, a shipped config (profiles/models/) or a config.json; one line
    refusing anything else (no weights are read)."""
    from backend.models.shapes import SHAPES
    if name.lower() in SHAPES:
        return SHAPES[name.lower()]
    from backend.roofline.model_configs import SHIPPED_CONFIGS, sim_shape
    if name.lower() in SHIPPED_CONFIGS or name.lower().endswith(".json") or _holds_config(name):
        return sim_shape(name)
    from backend.loaders.weights import config_shape
    found = config_shape(name)
    if found is None:
        known = ", ".join([*SHAPES, *SHIPPED_CONFIGS])
        raise InputError(f"--simulate needs a known model shape ({known}) or a config.json, not "
                         f"{name!r}: the simulator reads no weights")
    return found[0]


def _holds_config(name: str) -> bool:
    from pathlib import Path
    return (Path(name).expanduser() / "config.json").is_file()


def resolve_precision(dtype: str, profile: GpuProfile, kv_dtype: str = "auto") -> Precision:
    """auto: bfloat16 on a GPU profile (float16 on one without a bf16 peak, as a T4), float32 on a CPU one.

    On a GPU profile int8 and the GGUF block formats run weight-only: their weights' bytes, the
    products in the activations' bfloat16 (float16) at its peak. fp8, nvfp4 and mxfp4 need the
    profile's FP8 or FP4 tensor peak; a CPU profile prices only what this engine's kernels run."""
    name = canonical(dtype)
    cpu = is_cpu_profile(profile)
    gpu_float = "bfloat16" if profile.has_peak("bf16") else "float16"
    if name == "auto":
        name = "float32" if cpu else gpu_float
    if name in GPU_FORMATS and cpu:
        raise InputError(f"--dtype {name} is a GPU tensor-core format; profile {profile.key} is a CPU's: "
                         "simulate it on a GPU profile (see `profiles`)")
    prec = precision(name, activation="float32" if cpu else gpu_float)
    if not profile.has_peak(prec):
        key = prec.compute
        raise InputError(f"profile {profile.key} ({profile.name}) has no {key} peak, so it cannot run --dtype {name}"
                         f" (its peaks: {', '.join(profile.dtypes)})")
    return prec.with_kv(kv_dtype)


def model_bytes(shape, prec: Precision) -> int:
    """The weights' bytes: the matrices (and the LM head) at the precision, the rest at the activation dtype."""
    matrices = matrix_params(shape)
    rest = max(0, shape.num_params() - matrices)
    return int(matrices * prec.weight_bytes + rest * prec.activation_bytes)


def kv_bytes_per_token(shape, prec: Precision) -> float:
    """Bytes one token's keys and values take over every layer (MLA: its latent), at the KV dtype."""
    return kv_elements_per_token(shape) * prec.kv_bytes


def per_device_bytes(shape, prec: Precision, layout: Layout | None = None) -> tuple[float, float]:
    """(weight bytes, KV cache bytes a token) one of a replica's tp x pp devices holds: the weights split
    evenly over them, the KV cache over the stages and the KV heads tensor parallelism splits (replicated
    past their count, MLA's one latent on every rank: parallel.kv_shards), at the KV dtype. The memory
    check's arithmetic and the planner's (backend/planner/candidates.py)."""
    layout = layout or Layout()
    kv_share = layout.pp * parallel.kv_shards(shape, layout.tp)
    return model_bytes(shape, prec) / (layout.tp * layout.pp), kv_bytes_per_token(shape, prec) / kv_share


def check_memory(shape, prec: Precision, profile: GpuProfile, kv_capacity: int, layout: Layout | None = None) -> None:
    """Refuse a run whose weights and KV cache exceed a device's memory (each of a replica's tp x pp
    devices holds its share of both: per_device_bytes)."""
    layout = layout or Layout()
    devices = layout.tp * layout.pp
    weights, kv_token = per_device_bytes(shape, prec, layout)
    need = weights + kv_capacity * kv_token
    have = profile.memory_gb * 1e9
    if need > have:
        each = f" per device over {devices} devices (tp {layout.tp} x pp {layout.pp})" if devices > 1 else ""
        raise DoesNotFit(f"the weights and a KV cache of {kv_capacity:,} tokens need {need / 1e9:,.1f} GB{each}; "
                         f"{profile.key} has {profile.memory_gb:,.0f} GB: lower --max-batch, --kv-tokens or the "
                         f"lengths, or spread the model (--tp, --pp)")
