"""The Speculation view's numbers, without Qt: acceptance from the requests' records or, live, from the steps;
decode and verification step times; the roofline's price of one request's step of n tokens."""
import math

import numpy as np

from backend.models.shapes import SHAPES
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, StepRecord
from backend.results.spec_figures import spec_figures
from backend.roofline.profiles import find_profile
from gui.state.run_store import RunStore
from gui.state.spec_state import acceptance, predicted_steps, store_acceptance, store_step_times


def _step(i, phase, tokens, proposed=0, kept=0, requests=1, prefill=0, duration=10.0, context=100):
    return StepRecord.measured(run_id="r", step=i, phase=phase, prefill_tokens=[prefill] if prefill else [],
                               num_decode=0 if prefill else requests, contexts=[context] * requests,
                               start_ms=10.0 * i, duration_ms=duration, num_proposed_tokens=proposed,
                               num_accepted_tokens=kept)


def test_acceptance_counts_verifications_by_guesses_kept_and_each_position_among_those_reaching_it():
    # K=4 kept 4, 2, 0; then a verification of 2 guesses (the budget's end) kept 1
    a = acceptance([(4, 4), (4, 2), (4, 0), (2, 1)], "requests")
    assert a.histogram.tolist() == [1, 1, 1, 0, 1]
    assert a.reached.tolist() == [4, 4, 3, 3]   # the short verification had no 3rd and 4th guess
    # position 1 kept by 3 of 4, position 2 by 2 of 4, 3 and 4 by 1 of the 3 that had them
    assert np.allclose(a.by_position, [0.75, 0.5, 1 / 3, 1 / 3])
    assert a.mean_length == (5 + 3 + 1 + 2) / 4
    # the summary's figures from the same verifications (backend/results/spec_figures.py)
    records = [RequestRecord(0, RequestStatus.FINISHED, 8, 11, 0.0, spec_proposed="4 4 4 2", spec_accepted="4 2 0 1")]
    figures = spec_figures(records, 0.0, 1.0)
    assert figures["spec_acceptance_by_position"] == ",".join(f"{r:.3f}" for r in a.by_position)
    assert figures["spec_acceptance_histogram"] == ",".join(str(int(n)) for n in a.histogram)
    assert figures["spec_mean_acceptance_length"] == a.mean_length
    empty = acceptance([], "steps")
    assert empty.num_verifications == 0 and math.isnan(empty.mean_length) and len(empty.histogram) == 0


def test_live_acceptance_comes_from_single_request_verifications_until_a_record_replaces_it():
    store = RunStore()
    store.add_batch(RecordBatch(steps=[
        _step(0, Phase.PREFILL, 50, prefill=50),
        _step(1, Phase.DECODE, 1),
        _step(2, Phase.DECODE, 5, proposed=4, kept=3),
        _step(3, Phase.DECODE, 10, proposed=8, kept=8, requests=2),   # two requests' guesses summed: not split
        _step(4, Phase.DECODE, 5, proposed=4, kept=1)]))
    live = store_acceptance(store)
    assert live.source == "steps" and live.pairs == [(4, 3), (4, 1)]
    record = RequestRecord(0, RequestStatus.FINISHED, 50, 9, arrival_ms=0.0, spec_proposed="4 4 4",
                           spec_accepted="3 4 1")
    store.add_batch(RecordBatch(requests=[record]))
    done = store_acceptance(store)
    assert done.source == "requests" and done.pairs == [(4, 3), (4, 4), (4, 1)]
    times = store_step_times(store)
    # the prefill is left out; the plain decode and the verifications are told apart by their guesses
    assert times.decode_tokens.tolist() == [1] and times.verify_tokens.tolist() == [5, 10, 5]
    assert times.verify_proposed.tolist() == [4, 8, 4] and not times.single


def test_the_strip_marks_verification_bars_and_keeps_them_marked_when_merged():
    store = RunStore(bars_kept=4)
    store.add_batch(RecordBatch(steps=[_step(i, Phase.DECODE, 5 if i % 2 else 1, proposed=4 if i % 2 else 0)
                                       for i in range(12)]))
    proposed = store.bars.column("proposed")
    assert proposed.max() == 4 and (proposed[-store.bars.num_exact:] == [4 if i % 2 else 0 for i in
                                                                      range(12 - store.bars.num_exact, 12)]).all()


def test_one_requests_step_costs_one_weight_read_until_the_crossover_then_grows():
    shape, profile = SHAPES["smollm2-135m"], find_profile("h100-sxm")   # its crossover: a few hundred tokens
    p = predicted_steps(shape, 2, profile, "bf16", None, context=64)
    one = p.ms[0]
    assert p.crossover is not None and p.crossover > 5
    below = p.tokens < p.crossover
    # memory-bound: a verification of a few guesses within a few percent of one decode step (the weights are read
    # once; the activations, the new tokens' KV and the logits grow a little with the tokens)
    assert (p.ms[p.tokens <= 16] < one * 1.05).all() and (p.ms[below] < one * 1.5).all()
    # compute-bound: time grows with the tokens, about in proportion past the crossover
    at_crossover = p.ms[np.searchsorted(p.tokens, p.crossover)]
    assert p.ms[-1] / at_crossover > 0.8 * p.tokens[-1] / p.crossover and np.all(np.diff(p.ms[~below]) >= 0)
