"""What a run cost: device-seconds in prefill and in decode steps at the profile's hourly price.

The price per million input tokens is the device time spent in prefill steps over the prompt
tokens processed; per million output tokens, the time in decode steps over the tokens
generated. A mixed step (chunked prefill beside decodes) is split between the two by its
tokens. Idle time between steps is charged to neither; the wall-clock figure (the whole run's
device time over its output tokens) includes it. A profile without a price gives no cost
figures at all, never a zero.
"""
from __future__ import annotations

import math

from backend.summary import Summary


def phase_ms(summary: Summary) -> tuple[float, float]:
    """(prefill ms, decode ms) of a run's steps: each phase's own steps, and a mixed step's time split
    between the two by its tokens (the cost figures' split, and the planner's)."""
    mixed_ms = summary.mixed_time_ms or 0.0
    p_tokens, d_tokens = summary.mixed_prefill_tokens or 0, summary.mixed_decode_tokens or 0
    prefill_share = p_tokens / (p_tokens + d_tokens) if p_tokens + d_tokens else 0.0
    prefill_ms = (summary.prefill_time_ms or 0.0) + mixed_ms * prefill_share
    decode_ms = (summary.decode_time_ms or 0.0) + mixed_ms * (1 - prefill_share)
    return prefill_ms, decode_ms


def cost_figures(summary: Summary, price_per_hour: float | None, num_devices: int = 1) -> dict[str, float]:
    """The summary's cost entries (empty without a price): US dollars per million tokens."""
    if price_per_hour is None:
        return {}
    per_ms = price_per_hour * num_devices / 3_600_000
    prefill_ms, decode_ms = phase_ms(summary)
    inputs, outputs = summary.num_input_tokens or 0, summary.num_output_tokens or 0

    def per_million(ms: float, tokens: int) -> float:
        return ms * per_ms / tokens * 1e6 if tokens else math.nan
    return {"price_per_hour": price_per_hour * num_devices,
            "cost_prefill_usd": prefill_ms * per_ms, "cost_decode_usd": decode_ms * per_ms,
            "cost_per_m_input_usd": per_million(prefill_ms, inputs),
            "cost_per_m_output_usd": per_million(decode_ms, outputs),
            "cost_per_m_output_wall_usd": per_million((summary.duration_s or 0.0) * 1000, outputs)}


def cost_text(summary: Summary, priced_on: str) -> str | None:
    """The summary's cost line, or None for a run without a price."""
    if summary.cost_per_m_input_usd is None:
        return None

    def usd(value: float) -> str:
        return "n/a" if value is None or math.isnan(value) else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
    return (f"cost    {usd(summary.cost_per_m_input_usd)} per million input tokens (prefill), "
            f"{usd(summary.cost_per_m_output_usd)} per million output tokens (decode), at "
            f"${summary.price_per_hour:,.2f}/h for {priced_on}; {usd(summary.cost_per_m_output_wall_usd)} per "
            f"million output tokens for the run's whole device time (prefill and idle included)")
