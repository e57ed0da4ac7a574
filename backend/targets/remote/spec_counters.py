"""A remote run's speculative decoding, as the server counts it on /metrics.

vLLM (v1) counts verifications (`spec_decode_num_drafts`), the guesses they verified and kept, and the
kept ones at each draft position (`..._per_pos`, label `position`). Over the run (each counter at the end
less at the start, backend.targets.remote.server_log) they give the figures the local engine's summary
has: the mean acceptance length 1 + kept / verifications, the rate kept / verified, and the rate at each
position, kept there / verifications (a guess is kept only after every one before it, so the rates fall
with the position, as the engine's `spec_acceptance_by_position`). SGLang publishes one gauge,
`spec_accept_length`: the mean tokens a verification emitted over its last logging interval; the run's
figure is the mean of the readings (there are no counters to take a difference of). Either counts every
request the server verified meanwhile, other clients' too.
"""
from __future__ import annotations

from collections.abc import Callable

from backend.summary import Summary
from backend.targets.remote.metrics import SPEC_POSITIONS


def server_spec_figures(gained: Callable[[str], float | None]) -> dict[str, float | str]:
    """The summary's server_spec_* figures from the counters' gains over the run ({} when vLLM counted no
    verification); `gained(quantity)` is the gain or None where the server does not publish the counter."""
    drafts = gained("spec_drafts")
    if not drafts:
        return {}
    out: dict[str, float | str] = {"server_spec_drafts": drafts}
    proposed, kept = gained("spec_draft_tokens"), gained("spec_accepted_tokens")
    positions = [gained(f"spec_accepted_pos{j}") for j in range(SPEC_POSITIONS)]
    positions = positions[:next((j for j, v in enumerate(positions) if v is None), SPEC_POSITIONS)]
    if kept is None and positions:   # an older server without the total: the positions add up to it
        kept = sum(positions)
    if kept is not None:
        out["server_spec_accepted_tokens"] = kept
        out["server_spec_mean_acceptance_length"] = 1.0 + kept / drafts
    if proposed is not None:
        out["server_spec_draft_tokens"] = proposed
        if kept is not None and proposed > 0:
            out["server_spec_acceptance_rate"] = kept / proposed
    if positions:
        out["server_spec_acceptance_by_position"] = ",".join(f"{v / drafts:.3f}" for v in positions)
    return out


def server_spec_line(summary: Summary, engine: str | None) -> str | None:
    """One console line of the server's speculation over the run; None when it published none."""
    s = summary
    if s.server_spec_drafts is not None:
        parts = [f"{s.server_spec_drafts:,.0f} verifications"]
        if s.server_spec_accepted_tokens is not None and s.server_spec_draft_tokens is not None:
            parts.append(f"kept {s.server_spec_accepted_tokens:,.0f} of {s.server_spec_draft_tokens:,.0f} guesses"
                         + (f" ({100.0 * s.server_spec_acceptance_rate:.1f}%)"
                            if s.server_spec_acceptance_rate is not None else ""))
        if s.server_spec_mean_acceptance_length is not None:
            parts.append(f"{s.server_spec_mean_acceptance_length:.2f} tokens a verification")
        if s.server_spec_acceptance_by_position:
            parts.append(f"by position {s.server_spec_acceptance_by_position}")
        return f"spec     server /metrics ({engine or '?'}, its counters over the run): " + "; ".join(parts)
    if s.server_spec_accept_length_mean is not None:
        return (f"spec     server /metrics ({engine or '?'}): accept length gauge, mean of the readings "
                f"{s.server_spec_accept_length_mean:.2f} tokens a verification "
                f"(max {s.server_spec_accept_length_max:.2f})")
    return None
