"""One request's token bookkeeping and its record."""
from __future__ import annotations

from backend.records import RequestStatus
from backend.engine.request import Request


def test_token_model_counts():
    r = Request(1, [5, 6, 7], max_new_tokens=4, arrival_ms=0.0)
    assert r.all_ids == [5, 6, 7] and r.num_uncomputed == 3 and not r.is_finished
    r.num_computed = 3
    r.append_token(9, 10.0)
    assert r.all_ids == [5, 6, 7, 9] and r.num_tokens == 4 and r.num_uncomputed == 1
    assert r.status is RequestStatus.DECODING and r.first_token_ms == 10.0


def test_finishes_on_stop_id_or_length():
    stop = Request(1, [1], 5, 0.0, stop_ids=frozenset({2}))
    stop.append_token(2, 3.0)
    assert stop.is_finished and stop.finish_reason == "eos" and stop.finish_ms == 3.0
    ignore = Request(2, [1], 2, 0.0, stop_ids=frozenset({2}), ignore_eos=True)
    ignore.append_token(2, 3.0)
    assert not ignore.is_finished
    ignore.append_token(2, 4.0)
    assert ignore.is_finished and ignore.finish_reason == "length"


def test_record_latencies():
    r = Request(3, [1, 2], 3, arrival_ms=100.0)
    r.scheduled_ms = 110.0
    for t in (130.0, 150.0, 190.0):
        r.append_token(4, t)
    rec = r.to_record("hi")
    assert rec.status is RequestStatus.FINISHED and rec.text == "hi"
    assert (rec.prompt_tokens, rec.output_tokens) == (2, 3)
    assert rec.queue_ms == 10.0 and rec.ttft_ms == 30.0 and rec.e2e_ms == 90.0
    assert rec.tpot_ms == 30.0     # gaps 20 and 40


def test_record_of_a_one_token_or_rejected_request_has_no_tpot():
    one = Request(4, [1], 1, 0.0)
    one.append_token(4, 5.0)
    assert one.to_record().tpot_ms is None and one.to_record().ttft_ms == 5.0
    rejected = Request(5, [1], 1, 7.0, status=RequestStatus.REJECTED, finish_reason="too long")
    rec = rejected.to_record()
    assert rec.ttft_ms is None and rec.e2e_ms is None and rec.queue_ms is None
    assert rec.finish_reason == "too long"
