"""Which matrix unit ran each phase of a run, and the words for it: run.json's "matmul" and
"matmul_steps", the CLI's device line, the window's metrics panel.

The C kernels choose the unit of each product by its rows (kernels/matmath.MatMath): a step's
layer products have as many rows as the step has tokens (a decode step's rows are its batch), so
the recorder's count of steps by phase and tokens says, after the run, how many of each phase's
steps ran on which unit, with no step kept. (The LM head's product has one row per request
sampled, fewer; the counts name the layers' unit, where nearly all of a step's arithmetic is.)
A model whose products run on torch (a GPU, bfloat16 or int8 weights) has "torch" for every step.
"""
from __future__ import annotations

from collections.abc import Mapping

from backend.run_info import RunInfo


def matmul_info(loaded) -> dict | None:
    """run.json's "matmul": the model's MathChoice (its float32 unit "torch" off the kernels)."""
    return None if loaded.math is None else loaded.math.as_dict()


def unit_steps(loaded, step_rows: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """run.json's "matmul_steps": {phase: {unit: steps}} from the recorder's {(phase, rows): steps}."""
    return steps_by_unit(matmul_info(loaded), step_rows)


def steps_by_unit(matmul: dict | None, step_rows: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """unit_steps from run.json's "matmul" (a disaggregated run's, sent by its workers)."""
    from backend.kernels.matmath import MatMath
    kernels = bool(matmul) and matmul.get("fp32_unit") != "torch"
    math = MatMath(matmul.get("unit", "fp32"), matmul.get("min_rows", 0)) if kernels else None
    found: dict[str, dict[str, int]] = {}
    for (phase, rows), count in sorted(step_rows.items()):
        unit = math.unit_for(rows) if kernels else "torch"
        by_unit = found.setdefault(phase, {})
        by_unit[unit] = by_unit.get(unit, 0) + count
    return found


def products_text(matmul: dict | None) -> str:
    """'bfloat16 on AVX512-BF16 for 16+ rows, float32 (AVX-512 FMA) below', 'float32 (AVX-512 FMA)';
    '' where the run recorded none or its products ran on torch (the kernels' words say so)."""
    if not matmul or matmul.get("fp32_unit") == "torch":
        return ""
    if matmul.get("unit", "fp32") == "fp32":
        return f"float32 ({matmul.get('fp32_unit')})"
    return f"bfloat16 on {matmul['unit']} for {matmul.get('min_rows')}+ rows, float32 ({matmul.get('fp32_unit')}) below"


def units_text(units: dict[str, int] | None) -> str:
    """'AVX-512 FMA (60 steps), AVX512-BF16 (4 steps)': one phase's steps by unit, most first."""
    ordered = sorted((units or {}).items(), key=lambda item: -item[1])
    return ", ".join(f"{unit} ({n:,} step{'s' if n != 1 else ''})" for unit, n in ordered)


def steps_text(matmul_steps: dict | None) -> str:
    """'prefill: AVX512-BF16 (1 step); decode: AVX-512 FMA (60 steps), AVX512-BF16 (4 steps)'."""
    return "; ".join(f"{phase}: {units_text(matmul_steps[phase])}" for phase in ("prefill", "mixed", "decode")
                     if (matmul_steps or {}).get(phase))


def math_lines(info: RunInfo) -> list[tuple[str, str]]:
    """(label, text) lines under the device line: which unit ran each phase where bfloat16 was in
    play, and why this arithmetic (the fidelity probe's figures) where auto or bf16 was asked."""
    matmul, steps = info.host.matmul, info.host.matmul_steps
    if not products_text(matmul):
        return []
    lines = []
    if matmul.get("unit", "fp32") != "fp32" and steps_text(steps):
        lines.append(("ran", steps_text(steps)))
    if matmul.get("mode") != "fp32" and matmul.get("note"):
        lines.append(("math", matmul["note"]))
    return lines
