"""The summary's speculative-decoding figures, from the requests' acceptance lengths and the steps' sums.

The plain acceptance rate (kept / proposed guesses) falls as the budget K grows even when the draft is as
good: the later guesses are only reached after the earlier ones are kept. So beside it: the rate at each
guess position (conditional on reaching it), the mean acceptance length, and `spec_alpha`, the
per-guess acceptance a that, guesses being kept independently with probability a, would give the measured
mean acceptance length with each verification's own number of guesses k: E[length] = (1 - a^(k+1)) / (1 - a)
(Leviathan et al. 2023, eq. 1). It does not depend on K, so runs with different budgets compare.
"""
from __future__ import annotations

from collections.abc import Sequence

from backend.records import RequestRecord


def expected_length(alpha: float, k: int) -> float:
    """Tokens a verification of k guesses emits, each guess kept with probability alpha: 1 + a + ... + a^k."""
    return float(k + 1) if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def solve_alpha(pairs: Sequence[tuple[int, int]]) -> float:
    """The alpha whose expected mean length over these (proposed, kept) verifications is the measured one."""
    if not pairs:
        return float("nan")
    target = sum(kept + 1 for _, kept in pairs) / len(pairs)
    low, high = 0.0, 1.0
    for _ in range(60):   # the mean expected length rises with alpha: bisection
        mid = (low + high) / 2
        if sum(expected_length(mid, k) for k, _ in pairs) / len(pairs) < target:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def spec_figures(requests: Sequence[RequestRecord], draft_ms: float, step_ms: float) -> dict[str, float | str]:
    """{} when no request speculated; else every spec_* figure of the Summary."""
    pairs = [pair for r in requests if r.spec_proposed for pair in r.acceptance_lengths]
    if not pairs:
        return {}
    proposed = sum(k for k, _ in pairs)
    kept = sum(a for _, a in pairs)
    longest = max(k for k, _ in pairs)
    reached = [sum(1 for k, _ in pairs if k > i) for i in range(longest)]
    passed = [sum(1 for _, a in pairs if a > i) for i in range(longest)]
    histogram = [sum(1 for _, a in pairs if a == n) for n in range(longest + 1)]
    return {"spec_verifications": len(pairs), "spec_proposed_tokens": proposed, "spec_accepted_tokens": kept,
            "spec_acceptance_rate": kept / proposed if proposed else float("nan"),
            "spec_mean_acceptance_length": (kept + len(pairs)) / len(pairs),
            "spec_acceptance_by_position": ",".join(f"{p / n:.3f}" for p, n in zip(passed, reached)),
            "spec_acceptance_histogram": ",".join(map(str, histogram)),
            "spec_alpha": solve_alpha(pairs), "spec_draft_time_ms": draft_ms,
            "spec_draft_share": draft_ms / (draft_ms + step_ms) if draft_ms + step_ms > 0 else float("nan")}
