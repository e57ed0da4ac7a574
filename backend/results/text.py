"""Text the CLI and the window both show: a run's phases under their roofline, a request's latency
broken into TTFT and decode steps, the cost model's terms, a fit's report. The CLI prints these lines
(backend/cli/report.py, backend/cli/fit.py) and the window's metrics panel and dialogs show the same
ones, so the two cannot say different things about one run."""
from __future__ import annotations

import math
from types import SimpleNamespace

from backend.precision import from_info
from backend.roofline.cost import Bound, PhaseRoofline, phase_roofline
from backend.run_info import RunInfo


def ms_text(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.1f} ms"


def cost_model_text(c: dict) -> str:
    """'matmuls 0.60, attention 0.30, memory 0.80 of peak; 0.2 ms/step, ...' from run.json's cost_model."""
    def g(key):
        value = c.get(key)
        return "?" if value is None else f"{value:.3g}"
    experts = f", experts {g('efu')}" if c.get("efu") else ""
    layers = f", {g('layer_us')} us/layer" if c.get("layer_us") else ""
    layers += f", {g('prefill_layer_us')} us/layer in prefill" if c.get("prefill_layer_us") else ""
    layers += f", {g('request_layer_us')} us/request/layer of attention" if c.get("request_layer_us") else ""
    layers += f", experts' rows half-efficient at {g('efu_rows')}" if c.get("efu_rows") else ""
    layers += f", links at {g('link_eff')} of their bandwidth" if c.get("link_eff", 1.0) != 1.0 else ""
    layers += f", PCIe at {g('pcie_link_eff')} of its bandwidth" if c.get("pcie_link_eff", 1.0) != 1.0 else ""
    layers += f", collectives' fixed costs x{g('link_latency_x')}" if c.get("link_latency_x", 1.0) != 1.0 else ""
    serial = "; products and attention each at their own roofline" if c.get("serial") else ""
    return (f"matmuls {g('mfu')}{experts}, attention {g('afu')}, memory {g('mbu')} of peak; {g('step_ms')} ms/step, "
            f"{g('token_ms')} ms/token, {g('request_ms')} ms/request{layers}{serial}")


def precision_text(info: RunInfo) -> str:
    """'float32', or for quantized weights 'q4_1 weights (5.74 bits), float32 activations'."""
    p = from_info(info)
    kv = f", {p.kv_dtype} KV cache" if p is not None and p.kv else ""   # --kv-dtype other than the activations'
    if p is None or not p.is_quantized:
        return str(info.dtype) + kv
    return f"{p.name} weights ({p.weight_bits:.2f} bits), {p.activation} activations{kv}"


def _significant(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def flops_text(flops_per_s: float) -> str:
    return f"{_significant(flops_per_s / 1e12)} TFLOP/s" if flops_per_s >= 1e12 \
        else f"{_significant(flops_per_s / 1e9)} GFLOP/s"


def bandwidth_text(bytes_per_s: float) -> str:
    return f"{_significant(bytes_per_s / 1e12)} TB/s" if bytes_per_s >= 1e12 \
        else f"{_significant(bytes_per_s / 1e9)} GB/s"


def profile_label(profile) -> str:
    """Which roofline a run's bounds were judged against, said so the reader can weigh them."""
    if profile.measured:
        return "this machine (calibrated)"
    if profile.key == "cpu":
        return "generic CPU profile (run `calibrate` for this machine's)"
    return f"{profile.name} datasheet profile (run `calibrate` for this device's measured figures)"


def bound_text(r: PhaseRoofline, dtype_key: str) -> str:
    """A measured phase against the roof over it, e.g. '154 GFLOP/s = 85% of the fp32 matmul peak;
    240 FLOP/byte, above the ridge: compute-bound'."""
    over = " (so the profile is low)" if r.peak_share > 1 else ""
    if r.bound is Bound.COMPUTE:
        return (f"{flops_text(r.flops_per_s)} = {100 * r.mfu:.0f}% of the {dtype_key} matmul peak{over}; "
                f"{_significant(r.intensity)} FLOP/byte, above the ridge: compute-bound")
    return (f"{bandwidth_text(r.bytes_per_s)} = {100 * r.mbu:.0f}% of the bandwidth{over}; "
            f"{_significant(r.intensity)} FLOP/byte, below the ridge: memory-bound")


def roofline_lines(shape, dtype, device: str, device_name: str, totals: dict, profile,
                   matmul=None) -> list[tuple[str, str]]:
    """(label, text) lines placing each measured phase under the roof of the run's own device.

    shape: a ModelShape or its dict (run.json's info "shape"); totals: {"prefill": PhaseTotals
    or None, "decode": ...}; profile: the device's, from profiles.run_profile (None: there is
    none); matmul: the MatMath the run's products ran in (roofs.math_from_info), which puts a CPU
    phase of many rows under the bf16 roof. Nothing where nothing can be computed: no shape,
    no steps of a phase, no profile peak.
    """
    from backend.errors import InputError
    from backend.roofline.profiles import dtype_key
    from backend.roofline.roofs import compute_key, runs_bf16
    if shape is None or not dtype or not any(t is not None and t.steps for t in totals.values()):
        return []
    if isinstance(shape, dict):
        shape = SimpleNamespace(**shape)
    try:
        key = dtype_key(dtype)
    except InputError:
        return []
    if profile is None:
        return [("roofline", f"no profile for {device_name or device}, so no bound is given "
                             f"(run `calibrate` to measure this device's)")]
    if not profile.has_peak(dtype):
        return [("roofline", f"{profile_label(profile)} has no {key} peak, so no bound is given")]
    used = profile.peak_key(dtype)
    bf16 = runs_bf16(profile, dtype, matmul)
    roofs = (f"; bf16 {flops_text(profile.peak_flops('bf16'))} on {matmul.unit} for products of "
             f"{matmul.min_rows}+ rows, ridge {_significant(profile.ridge('bf16'))} FLOP/byte" if bf16 else "")
    lines = [("roofline", f"{profile_label(profile)}: {key} {flops_text(profile.peak_flops(dtype))}, "
                          f"{bandwidth_text(profile.bandwidth_bytes_per_s)}, "
                          f"ridge {_significant(profile.ridge(dtype))} FLOP/byte{roofs}")]
    for phase in ("prefill", "decode"):
        t = totals.get(phase)
        r = phase_roofline(shape, dtype, t, profile, matmul)
        if r is not None:
            roof = compute_key(profile, dtype, matmul, t.tokens / t.steps) if bf16 else used
            lines.append((phase, bound_text(r, f"{roof} ({matmul.unit})" if roof != used else used)))
    return lines


def breakdown_of(requests) -> tuple | None:
    """(TTFT, decode ms, total, fewest and most decode steps, TPOT) means over finished requests, or None.

    Per request the latency is its TTFT plus its decode steps' time, by the definition of TPOT
    ((last token - first token) / (output tokens - 1)): a breakdown of the latency, not a check of it.
    """
    timed = [r for r in requests if r.ttft_ms is not None and r.e2e_ms is not None and r.output_tokens >= 1]
    if not timed:
        return None
    n = len(timed)
    ttft = sum(r.ttft_ms for r in timed) / n
    total = sum(r.e2e_ms for r in timed) / n
    steps = [r.output_tokens - 1 for r in timed]
    tpots = [r.tpot_ms for r in timed if r.tpot_ms is not None]
    tpot = sum(tpots) / len(tpots) if tpots else math.nan
    return ttft, total - ttft, total, min(steps), max(steps), tpot


def breakdown_text(ttft_ms: float, decode_ms: float, total_ms: float, fewest_steps: int, most_steps: int,
                   tpot_ms: float, times: str = "x") -> str:
    """'TTFT 780.1 ms + 63 decode steps x 15.41 ms = 1,749.0 ms, decode 55%' (means over requests)."""
    if most_steps <= 0:
        return f"TTFT {ms_text(ttft_ms)} = {ms_text(total_ms)}: one output token, no decode step"
    share = f"decode {100 * decode_ms / total_ms:.0f}%" if total_ms > 0 else ""
    if fewest_steps == most_steps:
        steps = f"{most_steps} decode step{'s' if most_steps != 1 else ''} {times} {tpot_ms:,.2f} ms"
    else:
        steps = (f"decode {ms_text(decode_ms)} ({fewest_steps} to {most_steps} decode steps, "
                 f"TPOT {tpot_ms:,.2f} ms on average)")
    return f"TTFT {ms_text(ttft_ms)} + {steps} = {ms_text(total_ms)}" + (f", {share}" if share else "")


# ---- a fit of the cost model (calibrate --fit, the window's Fit…) ------------------------------

def error_rows(report) -> list[tuple[str, list[tuple]]]:
    """A backend.fitting.FitReport's held-out sets: each set's name and its table (a header row, then a row per phase and batch size)."""
    tables = []
    for name, fitted, placeholder in report.held_out:
        rows = [("phase", "batch", "steps", "MAPE", "worst", "bias", "placeholder MAPE")]
        for row, base in zip(fitted.rows, placeholder.rows):
            rows.append((row.phase, row.batch, row.num_steps, f"{row.mape:.1f}%", f"{row.worst:.1f}%",
                         f"{row.bias:+.1f}%", f"{base.mape:.1f}%"))
        tables.append((name, rows))
    return tables


def terms_text(report) -> str:
    """A FitReport's fitted terms in one sentence."""
    model = report.model
    prefill = f", {model.prefill_layer_us:.0f} us per layer of a step that prefills" if model.prefill_layer_us else ""
    return (f"matmuls at {model.mfu:.3f} of the peak, attention at {model.afu:.3f}, memory at {model.mbu:.3f} "
            f"of the bandwidth; {model.step_ms:.3f} ms per step, {model.token_ms:.4f} ms per token, "
            f"{model.request_ms:.3f} ms per request{prefill}")
