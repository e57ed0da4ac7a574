"""Which of a profile's compute roofs a step's products run under.

On a GPU, and on a CPU whose kernels multiply in float32, every FLOP of a step runs at one peak:
the run's precision's (Precision.compute; the block formats are widened to float32). The CPU
kernels' bfloat16 path (backend/kernels/matmath.py) makes the roof depend on the rows of each
product: a product of at least `min_rows` rows runs on the bfloat16 unit (AVX512-BF16, AMX), at
the profile's bf16 peak, and fewer rows stay on the float32 FMAs. A step has three kinds of
products, priced each at its own roof:

  * the layers' matrices multiply every token of the step: `StepCost.rows` rows (a prefill's
    prompt, a decode step's batch);
  * the LM head multiplies the rows that need logits: `StepCost.head_rows` (one per request);
  * attention runs in its own float32 kernel, whatever the math.

A mixture of experts' expert products are priced at the step's rows too, though each expert
sees only the tokens routed to it (fewer rows): an approximation on the generous side.

The run's math is an explicit argument everywhere (`math`, a MatMath or None): None, or a
float32 MatMath, prices exactly as before the bfloat16 path existed. It applies only to a CPU
profile (a GPU's datasheet says nothing of this CPU's units) with a bf16 peak. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from backend.roofline.profiles import dtype_key

if TYPE_CHECKING:   # `cost` arguments are backend.roofline.cost.StepCost, which imports this module: unnamed here
    from backend.kernels.matmath import MatMath
    from backend.roofline.profiles import GpuProfile
    from backend.run_info import RunInfo


def math_from_info(info: RunInfo | None) -> MatMath | None:
    """The arithmetic a run's products ran in, from run.json's info.local.matmul (backend.targets.local.run_info);
    None for a run that recorded none (an older run, a remote or simulated one) or a malformed entry."""
    from backend.kernels.matmath import CODES, MatMath
    entry = info.host.matmul if info is not None else None
    if not isinstance(entry, dict):
        return None
    unit, min_rows = entry.get("unit"), entry.get("min_rows")
    if unit not in CODES or isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 0:
        return None
    return MatMath(unit, min_rows)


def runs_bf16(profile: GpuProfile, dtype, math: MatMath | None) -> bool:
    """Whether `math` moves some of a run's products to this profile's bf16 roof: a bfloat16 unit, a CPU
    profile with a bf16 peak, and a run whose products the kernels would otherwise compute in float32."""
    return (math is not None and math.bf16 and profile.is_cpu and profile.has_peak("bf16")
            and dtype_key(dtype) == "fp32")


def compute_key(profile: GpuProfile, dtype, math: MatMath | None, rows: float) -> str:
    """The [tflops] key a product of `rows` rows runs at ('bf16' on the bfloat16 unit, else the run's)."""
    if runs_bf16(profile, dtype, math) and math.math_for(rows) == "bf16":
        return "bf16"
    return dtype_key(dtype)


def _one_roof(cost, profile: GpuProfile, dtype, math: MatMath | None) -> bool:
    """Whether every product of the step runs on the run's own roof, as without the math."""
    key = dtype_key(dtype)
    return compute_key(profile, dtype, math, cost.rows) == compute_key(profile, dtype, math, cost.head_rows) == key


def compute_parts(cost, profile: GpuProfile, dtype, math: MatMath | None = None) -> tuple[float, float]:
    """(the matmuls' seconds, attention's seconds) at the peaks of the units that compute them: the
    step's compute at efficiency 1, in the two parts the cost model gives efficiencies to."""
    base = profile.peak_flops(dtype)
    if _one_roof(cost, profile, dtype, math):
        return (cost.flops - cost.attention_flops) / base, cost.attention_flops / base
    layers = profile.peak_flops(compute_key(profile, dtype, math, cost.rows))
    head = profile.peak_flops(compute_key(profile, dtype, math, cost.head_rows))
    return cost.linear_flops / layers + cost.head_flops / head, cost.attention_flops / base


def compute_seconds(cost, profile: GpuProfile, dtype, math: MatMath | None = None,
                    matmul_share: float = 1.0, attention_share: float = 1.0) -> float:
    """The step's FLOPs at the peaks of the units that compute them (see the module's docstring).

    The shares are the achievable fractions of those peaks (the cost model's mfu and afu); 1
    is the roofline itself."""
    if _one_roof(cost, profile, dtype, math):   # the one-peak formulas, to the last bit as before the math
        base = profile.peak_flops(dtype)
        if matmul_share == attention_share == 1.0:
            return cost.flops / base
        matmul_flops = cost.flops - cost.attention_flops
        return matmul_flops / (base * matmul_share) + cost.attention_flops / (base * attention_share)
    matmul_s, attention_s = compute_parts(cost, profile, dtype, math)
    return matmul_s / matmul_share + attention_s / attention_share


def effective_peak(cost, profile: GpuProfile, dtype, math: MatMath | None = None) -> float:
    """The one FLOP/s a step's FLOPs run at on average over its units: its MFU's denominator."""
    if cost.flops <= 0 or _one_roof(cost, profile, dtype, math):
        return profile.peak_flops(dtype)
    return cost.flops / compute_seconds(cost, profile, dtype, math)


@dataclass(slots=True, frozen=True)
class Roof:
    """One compute roof of a profile, as the throughput view draws it."""

    key: str          # the [tflops] key: fp32, bf16, fp16
    label: str        # e.g. "fp32 FMA roof", "bf16 roof (AVX512-BF16)"
    flops: float      # FLOP/s
    used: bool        # whether some of the run's products ran under it


def compute_roofs(profile: GpuProfile, dtype, math: MatMath | None = None) -> list[Roof]:
    """A CPU profile's two roofs, fp32 (the FMA units) and bf16 (its matrix unit), each labelled; a GPU
    profile's one, the run's precision's. `used` marks those the run's products ran under."""
    key = dtype_key(dtype)
    if not profile.is_cpu:
        return [Roof(key, f"{key} roof", profile.peak_flops(key), True)] if profile.has_peak(key) else []
    bf16 = runs_bf16(profile, dtype, math)
    unit = math.unit if bf16 else profile.bf16_unit
    unit_text = {"": "", "none": " (no bf16 unit: widened to fp32)"}.get(unit, f" ({unit})")
    labels = {"fp32": "fp32 FMA roof", "bf16": f"bf16 roof{unit_text}"}
    return [Roof(k, labels[k], profile.peak_flops(k), k == key or (k == "bf16" and bf16))
            for k in ("fp32", "bf16") if profile.has_peak(k)]
