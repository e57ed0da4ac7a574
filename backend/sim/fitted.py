"""What a fitted profile remembers of the runs it was fitted on, so a simulated run prices them as they ran.

`calibrate --fit` fits efficiencies that are fractions of some roof. Two things decide which roof a
step ran under, and a simulation that forgets either prices another machine than the one measured:

  * the precision: the bundled model runs as stored (q4_1), not at float32; a simulated run at
    `--dtype auto` of the fitted model takes the fitted runs' precision;
  * the matrix unit: the C kernels multiply products of `min_rows`+ rows in bfloat16 (AVX512-BF16,
    AMX) and fewer in float32; a simulated run on the fitted profile takes the same rule
    (backend/roofline/roofs.py prices each product on its unit's roof).

And the roofs themselves: a run on the C kernels ran at the kernels' rates (the profile's
[kernels_tflops], measured by calibrate), not at torch's matmul ([tflops]), which on an AMX Xeon
is several times faster in bfloat16 and on a loaded machine can come out slower than the kernels in
float32. Fitted against torch's roofs the efficiencies clamp at MAX_EFFICIENCY and the fixed costs
absorb the rest; so the fit prices on the kernels' roofs where the runs ran on the kernels, says so
(`peaks = "kernels"`), and the simulated run prices on the same ones (`priced_profile`).

These facts sit in the profile's [simulation] table beside the terms (profiles.FIT_FACTS). No torch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.kernels.matmath import MatMath
    from backend.roofline.profiles import GpuProfile
    from backend.run_info import RunInfo

KERNELS = "kernels"   # `peaks`: priced on [kernels_tflops]


@dataclass(slots=True, frozen=True)
class FittedOn:
    """The measured runs' model, precision, matrix unit and roofs ("" where the runs disagreed or recorded none)."""

    model: str = ""
    dtype: str = ""
    matmul_unit: str = ""      # MatMath.unit: "fp32", "AVX512-BF16", "AMX"
    matmul_min_rows: int = 0
    peaks: str = ""            # KERNELS, or "" for the profile's [tflops]

    @classmethod
    def of_profile(cls, profile: GpuProfile) -> FittedOn | None:
        """The facts a fitted profile holds; None for a profile not fitted by calibrate."""
        table = profile.simulation or {}
        if not table.get("fitted"):
            return None
        return cls(str(table.get("model", "")), str(table.get("dtype", "")), str(table.get("matmul_unit", "")),
                   int(table.get("matmul_min_rows", 0)), str(table.get("peaks", "")))

    @classmethod
    def of_runs(cls, infos: list[RunInfo], profile: GpuProfile) -> FittedOn:
        """What every run agrees on (a fact they differ in is left out), and the kernels' roofs where
        every run's products ran on the kernels and the profile measured their rates."""
        def agreed(values: list) -> str:
            return values[0] if values and all(v == values[0] for v in values) and values[0] else ""
        matmuls = [info.host.matmul if isinstance(info.host.matmul, dict) else {} for info in infos]
        unit = agreed([m.get("unit", "") for m in matmuls])
        rows = {m.get("min_rows", 0) for m in matmuls}
        on_kernels = bool(matmuls) and all(m and m.get("fp32_unit") != "torch" for m in matmuls)
        return cls(agreed([info.model for info in infos]), agreed([info.dtype or "" for info in infos]), unit,
                   int(rows.pop()) if unit and len(rows) == 1 else 0,
                   KERNELS if on_kernels and _kernel_roofs(profile) else "")

    def terms(self) -> dict:
        """The [simulation] entries (empty ones left out)."""
        found = {"model": self.model, "dtype": self.dtype, "matmul_unit": self.matmul_unit,
                 "matmul_min_rows": self.matmul_min_rows if self.matmul_unit else 0, "peaks": self.peaks}
        return {k: v for k, v in found.items() if v}

    @property
    def math(self) -> MatMath | None:
        from backend.kernels.matmath import CODES, MatMath
        return MatMath(self.matmul_unit, self.matmul_min_rows) if self.matmul_unit in CODES else None

    def text(self) -> str:
        """'q4_1, bfloat16 on AVX512-BF16 for 16+ rows, on the C kernels' roofs'."""
        parts = [self.dtype] if self.dtype else []
        if self.matmul_unit and self.matmul_unit != "fp32":
            parts.append(f"bfloat16 on {self.matmul_unit} for {self.matmul_min_rows}+ rows")
        elif self.matmul_unit:
            parts.append("float32 products")
        parts.append("on the C kernels' roofs" if self.peaks == KERNELS else "on the profile's [tflops] roofs")
        return ", ".join(parts)


def _kernel_roofs(profile: GpuProfile) -> bool:
    return profile.is_cpu and "fp32" in profile.kernels_tflops


def priced_profile(profile: GpuProfile) -> GpuProfile:
    """The profile whose [tflops] are the roofs its fitted terms are fractions of: the C kernels' rates
    where the fit priced on them, else the profile itself."""
    fitted = FittedOn.of_profile(profile)
    if fitted is None or fitted.peaks != KERNELS or not _kernel_roofs(profile):
        return profile
    return replace(profile, tflops={**profile.tflops, **profile.kernels_tflops})


def fit_roofs(profile: GpuProfile, fitted: FittedOn) -> GpuProfile:
    """The profile a fit prices on, given what the runs agree on (as priced_profile will at simulation)."""
    if fitted.peaks == KERNELS and _kernel_roofs(profile):
        return replace(profile, tflops={**profile.tflops, **profile.kernels_tflops})
    return profile


def simulated_dtype(profile: GpuProfile, model: str, dtype: str) -> str:
    """`--dtype auto` of the model a profile was fitted on: the precision its runs ran at (the bundled
    model as stored); anything else as asked."""
    fitted = FittedOn.of_profile(profile)
    if dtype != "auto" or fitted is None or not fitted.dtype or fitted.model.lower() != model.lower():
        return dtype
    return fitted.dtype


def simulated_math(profile: GpuProfile) -> MatMath | None:
    """The matrix-unit rule of the runs a CPU profile was fitted on; None elsewhere (one roof, as before)."""
    fitted = FittedOn.of_profile(profile)
    return None if fitted is None or not profile.is_cpu else fitted.math
