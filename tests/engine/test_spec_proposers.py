"""The n-gram proposer's lookup and the speculator's caps and backoff (no model)."""
from backend.engine.request import Request
from backend.engine.spec.ngram import NgramProposer, lookup
from backend.engine.spec.speculator import Speculator
from backend.records import Phase, RequestStatus, StepRecord


def test_lookup_proposes_what_followed_the_most_recent_longest_match():
    ids = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    # suffix (2, 3) last occurred at 6..7, followed by 7 8 5
    assert lookup(ids, 3, 1, 4) == [7, 8, 5]
    # the longest suffix wins over a more recent shorter one: (5, 2, 3)? no; (8, 5, 2, 3)? no -> (2, 3) as above
    ids = [4, 5, 6, 1, 6, 2, 4, 5, 6]
    assert lookup(ids, 2, 1, 3) == [1, 6]      # (4, 5, 6) at 0..2, followed by 1 6
    assert lookup(ids, 2, 1, 1) == [2, 4]      # n = 1: (6) most recently at 4, followed by 2 4
    assert lookup(ids, 5, 2, 3) == [1, 6, 2, 4, 5]


def test_lookup_finds_nothing_without_an_earlier_occurrence_or_below_the_minimum():
    assert lookup([1, 2, 3, 4], 3, 1, 4) == []
    assert lookup([1, 2, 9, 2], 3, 2, 4) == []   # only the 1-token suffix (2) occurs earlier
    assert lookup([1, 2, 9, 2], 3, 1, 4) == [9, 2]


def _decoding(rid: int, ids: list[int], max_new: int = 50) -> Request:
    r = Request(rid, ids[:-1], max_new, 0.0)
    r.output_ids = [ids[-1]]
    r.status = RequestStatus.DECODING
    return r


class _Fixed:
    def __init__(self, guess):
        self.guess = guess
        self.asked = 0

    def guesses(self, requests, ks):
        self.asked += len(requests)
        return [self.guess[:k] for k in ks]


def test_speculator_caps_the_guesses_at_k_and_at_what_the_request_may_still_emit():
    spec = Speculator(_Fixed([1, 2, 3, 4, 5, 6]), num_tokens=4)
    a, b = _decoding(0, [1, 2, 3]), _decoding(1, [1, 2, 3], max_new=3)   # b has 1 token out, 2 to go
    waiting = Request(2, [1, 2], 10, 0.0)
    spec.propose([a, b, waiting])
    assert a.spec_ids == [1, 2, 3, 4]
    assert b.spec_ids == [1]          # 2 tokens left: 1 guess + the step's own token
    assert waiting.spec_ids == []


def _pattern(spec: Speculator, r: Request, kept: int, steps: int) -> list[bool]:
    """Whether the request guessed at each step, every verification keeping `kept` guesses."""
    pattern = []
    for _ in range(steps):
        spec.propose([r])
        pattern.append(bool(r.spec_ids))
        if r.spec_ids:
            r.spec_proposed.append(len(r.spec_ids))
            r.spec_accepted.append(kept)
    return pattern


def test_a_request_whose_guesses_all_miss_sits_out_doubling_pauses():
    r = _decoding(0, [5, 6, 7])
    pattern = _pattern(Speculator(_Fixed([1, 2]), num_tokens=2), r, 0, 12)
    # guess, sit 2, guess, sit 4, guess, sit 8 ...
    assert pattern == [True, False, False, True, False, False, False, False, True, False, False, False]


def _step(phase: Phase, ms: float, proposed: int) -> StepRecord:
    return StepRecord.measured(run_id="r", step=0, phase=phase, prefill_tokens=(), num_decode=1, contexts=[10],
                               start_ms=0.0, duration_ms=ms, num_proposed_tokens=proposed)


def test_guessing_goes_on_while_a_verification_emits_more_tokens_than_it_costs_steps():
    spec = Speculator(_Fixed([1, 2, 3, 4]), num_tokens=4)
    spec.observe(_step(Phase.DECODE, 10.0, 0))
    spec.observe(_step(Phase.DECODE, 25.0, 4))   # a verification costs 2.5 decode steps
    spec.observe(_step(Phase.PREFILL, 1000.0, 0))   # not a decode step: no bearing
    assert spec.cost_ratio == 2.5
    assert all(_pattern(spec, _decoding(0, [5, 6, 7]), 3, 8))   # 4 tokens a verification: pays
    assert not all(_pattern(spec, _decoding(1, [5, 6, 7]), 1, 8))   # 2 tokens: does not


def test_ngram_proposer_reads_prompt_and_output():
    r = _decoding(0, [7, 8, 9, 7, 8])
    assert NgramProposer(1, 3).guesses([r], [2]) == [[9, 7]]
