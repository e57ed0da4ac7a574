"""The summary's speculation figures from acceptance lengths (backend/results/spec_figures.py)."""
import math

from backend.records import RequestRecord, RequestStatus
from backend.results.spec_figures import expected_length, solve_alpha, spec_figures


def record(proposed: str, accepted: str) -> RequestRecord:
    r = RequestRecord(0, RequestStatus.FINISHED, 10, 10, 0.0)
    r.spec_proposed, r.spec_accepted = proposed, accepted
    return r


def test_the_figures_of_a_few_verifications():
    figures = spec_figures([record("4 4 2", "4 1 0"), record("", ""), record("3", "3")], draft_ms=30.0, step_ms=90.0)
    assert figures["spec_verifications"] == 4
    assert (figures["spec_proposed_tokens"], figures["spec_accepted_tokens"]) == (13, 8)
    assert figures["spec_mean_acceptance_length"] == (8 + 4) / 4
    # position 1: 4 reached, 3 kept; 2: 4 reached, 2 kept; 3: 3 reached (4, 4, 3 guesses), 2 kept; 4: 2 reached, 1 kept
    assert figures["spec_acceptance_by_position"] == "0.750,0.500,0.667,0.500"
    assert figures["spec_acceptance_histogram"] == "1,1,0,1,1"
    assert figures["spec_draft_share"] == 0.25
    assert spec_figures([record("", "")], 0.0, 10.0) == {}


def test_alpha_is_the_per_guess_rate_that_gives_the_mean_length_whatever_k():
    """Verifications drawn to the expected length of a = 0.6 give back 0.6, at K = 2 and at K = 8 alike,
    where the plain acceptance rate differs."""
    for k in (2, 8):
        mean = expected_length(0.6, k)   # as if every verification emitted the expected length
        whole = int(mean - 1)
        frac = (mean - 1) - whole
        n = 1000
        pairs = [(k, whole + 1)] * round(n * frac) + [(k, whole)] * (n - round(n * frac))
        assert abs(solve_alpha(pairs) - 0.6) < 0.01
    assert solve_alpha([(4, 4)] * 5) > 0.999 and solve_alpha([(4, 0)] * 5) < 0.001
    assert math.isnan(solve_alpha([]))
