"""Every definition of TTFT, ITL and TPOT on crafted streams, against values worked out by hand."""
import math

import pytest

from backend.records import RequestRecord, RequestStatus, TokenRecord
from backend.results.definitions import (Arrival, FirstChunk, chunk_tokens_from_indices, differences, figures,
                                         itl_chunk_gaps, itl_request_mean, itl_token_split, tpot_e2e,
                                         ttft_first_chunk, ttft_first_token)
from backend.results.export import read_run
from backend.results.summary import RunAccumulator, summarize
from backend.records import RecordBatch

# sent at 0; chunks of 1, 1, 3 and 1 tokens at 100, 110, 130 and 140 ms; the stream ends at 150
MULTI = Arrival(0.0, [100.0, 110.0, 130.0, 140.0], [1, 1, 3, 1], finish_ms=150.0, first_chunk=FirstChunk.CONTENT)
# a chat stream that opens with a role-only chunk at 50 ms, then one token at 100 and one at 120, ending at 120
ROLE = Arrival(0.0, [100.0, 120.0], [1, 1], finish_ms=120.0, first_chunk_ms=50.0, first_chunk=FirstChunk.ROLE)
# an empty first chunk at 80 ms, then a chunk of two tokens at 100 and one at 104; the end at 110
EMPTY = Arrival(0.0, [100.0, 104.0], [2, 1], finish_ms=110.0, first_chunk_ms=80.0, first_chunk=FirstChunk.EMPTY)


def test_a_stream_of_multi_token_chunks_under_each_definition():
    assert ttft_first_token(MULTI) == 100.0 and ttft_first_chunk(MULTI) == 100.0
    assert itl_chunk_gaps(MULTI) == [10.0, 20.0, 10.0]                     # one sample per chunk gap
    assert itl_token_split(MULTI) == pytest.approx([10.0, 20 / 3, 20 / 3, 20 / 3, 10.0])   # 6 tokens, 5 gaps
    assert sum(itl_token_split(MULTI)) == pytest.approx(140.0 - 100.0)
    assert itl_request_mean(MULTI) == pytest.approx(40.0 / 5)            # (last - first) / (tokens - 1)
    assert tpot_e2e(MULTI) == pytest.approx(50.0 / 5)                    # (e2e - TTFT) / (tokens - 1)
    f = figures(MULTI)
    assert f.num_chunks == 4 and f.num_multi_token_chunks == 1


def test_a_role_only_first_chunk_moves_only_the_first_chunk_ttft():
    assert ttft_first_token(ROLE) == 100.0 and ttft_first_chunk(ROLE) == 50.0
    assert itl_chunk_gaps(ROLE) == itl_token_split(ROLE) == [20.0]
    assert itl_request_mean(ROLE) == tpot_e2e(ROLE) == 20.0


def test_an_empty_first_chunk_and_a_first_chunk_of_two_tokens():
    assert ttft_first_chunk(EMPTY) == 80.0 and ttft_first_token(EMPTY) == 100.0
    assert itl_chunk_gaps(EMPTY) == [4.0]
    assert itl_token_split(EMPTY) == [0.0, 4.0]     # the first chunk's second token came with the first
    assert itl_request_mean(EMPTY) == 2.0 and tpot_e2e(EMPTY) == 5.0


def test_one_token_has_no_gap_and_no_tpot():
    one = Arrival(0.0, [30.0], [1], finish_ms=31.0)
    assert itl_chunk_gaps(one) == itl_token_split(one) == []
    assert itl_request_mean(one) is None and tpot_e2e(one) is None and ttft_first_token(one) == 30.0


def test_tokens_per_chunk_come_from_the_running_usage_index():
    assert chunk_tokens_from_indices([0, 1, 4, 5]) == [1, 1, 3, 1]
    assert chunk_tokens_from_indices([1, 2]) == [2, 1]
    # a final usage count larger than the chunks indexed: the rest came with the last chunk
    assert chunk_tokens_from_indices([0, 1, 2], num_tokens=8) == [1, 1, 6]


def _records(arrival: Arrival, rid: int):
    """The request and token records the remote client writes for a stream: one token record per chunk, at
    the chunk's last token index."""
    indices, last = [], -1
    for k in arrival.chunk_tokens:
        last += k
        indices.append(last)
    request = RequestRecord.from_times(request_id=rid, status=RequestStatus.FINISHED, prompt_tokens=4,
                                       output_tokens=arrival.num_tokens, arrival_ms=arrival.sent_ms,
                                       first_token_ms=arrival.chunk_ms[0], last_token_ms=arrival.chunk_ms[-1],
                                       finish_ms=arrival.finish_ms)
    request.first_chunk_ms, request.first_chunk = arrival.first_chunk_ms, arrival.first_chunk.value
    tokens = [TokenRecord(rid, i, t) for i, t in zip(indices, arrival.chunk_ms)]
    return request, tokens


def test_the_summary_holds_every_definition_and_names_the_headlines():
    pairs = [_records(a, i) for i, a in enumerate([MULTI, ROLE, EMPTY])]
    requests = [r for r, _ in pairs]
    tokens = [t for _, ts in pairs for t in ts]
    s = summarize([], requests, tokens)
    assert s.ttft_definition == "ttft" and s.itl_definition == "itl" and s.tpot_definition == "tpot"
    assert s.itl_mean_ms == pytest.approx((10 + 20 + 10 + 20 + 4) / 5)              # chunk gaps
    assert s.itl_split_mean_ms == pytest.approx((40 + 20 + 4) / (5 + 1 + 2))        # token gaps: 8 of them
    assert s.tpot_mean_ms == pytest.approx((8 + 20 + 2) / 3)                        # (last - first) / (n - 1)
    assert s.tpot_e2e_mean_ms == pytest.approx((10 + 20 + 5) / 3)                   # (e2e - TTFT) / (n - 1)
    assert s.ttft_mean_ms == pytest.approx(100.0)
    assert s.ttft_first_chunk_mean_ms == pytest.approx((100 + 50 + 80) / 3)
    assert s.num_chunks == 8 and s.num_multi_token_chunks == 2
    assert s.num_first_chunk_role == 1 and s.num_first_chunk_empty == 1
    assert s.definitions_differ == 1
    lines = differences(s)
    assert any(line.startswith("TTFT p50 100.00 ms here, 80.00 ms to the first chunk (-20%") for line in lines)
    assert any("1 role-only, 1 empty" in line for line in lines)
    # the streaming accumulator (what a local run and the window use) agrees with the in-memory summary
    acc = RunAccumulator()
    for request, toks in pairs:
        acc.add(RecordBatch(tokens=toks, requests=[request]))
    streamed = acc.summary()
    for name in ("itl_split_p50_ms", "tpot_e2e_mean_ms", "ttft_first_chunk_p50_ms", "num_multi_token_chunks"):
        assert getattr(streamed, name) == pytest.approx(getattr(s, name)), name


def test_one_token_per_chunk_and_no_empty_first_chunk_differ_in_nothing():
    steady = Arrival(0.0, [100.0, 110.0, 120.0, 130.0], [1, 1, 1, 1], finish_ms=130.0, first_chunk=FirstChunk.CONTENT)
    request, tokens = _records(steady, 0)
    s = summarize([], [request], tokens)
    assert s.itl_p50_ms == s.itl_split_p50_ms == 10.0 and s.ttft_p50_ms == s.ttft_first_chunk_p50_ms == 100.0
    assert s.tpot_e2e_p50_ms == s.tpot_p50_ms == 10.0
    assert s.definitions_differ == 0 and differences(s) == []


def test_old_run_folders_still_load_with_the_new_columns_absent():
    data = read_run("tests/data/runs_v1/remote-load")
    assert data.requests and all(r.first_chunk == "" and r.first_chunk_ms is None for r in data.requests)
    assert data.summary.itl_split_p50_ms is None   # not recorded then: absent, not zero
    recomputed = summarize([], data.requests, data.tokens)
    assert math.isfinite(recomputed.itl_split_p50_ms) and recomputed.num_first_chunk_role == 0


def test_a_local_run_holds_every_definition_and_one_token_a_chunk_changes_nothing():
    from backend.config import EngineConfig, ModelChoice, RunConfig
    from backend.session import execute
    from backend.workload.spec import apply_overrides, load_workload
    spec = apply_overrides(load_workload("poisson-chat"), num_requests=20, rate=20.0, prompt_len="200",
                           output_len="20")
    config = RunConfig(mode="load", model=ModelChoice("llama-8b"), profile="h100-sxm", simulate=True,
                       engine=EngineConfig(policy="continuous", max_batch=16), workload=spec)
    s = execute(config, lambda e: None, lambda: False).summary
    assert s.num_finished == 20 and s.num_chunks == 20 * 20 and s.num_multi_token_chunks == 0
    assert s.itl_split_p50_ms == s.itl_p50_ms and s.itl_split_p99_ms == s.itl_p99_ms
    assert s.ttft_first_chunk_p50_ms == s.ttft_p50_ms and s.num_first_chunk_role == 0
    assert s.tpot_e2e_p50_ms == pytest.approx(s.tpot_p50_ms)
    assert s.definitions_differ == 0


def test_a_final_count_above_the_chunks_indexed_goes_to_the_last_chunk_in_every_path():
    # three chunks indexed 0, 1, 2 (no running usage), then the final usage says 8 tokens: the last chunk had 6
    request = RequestRecord.from_times(request_id=0, status=RequestStatus.FINISHED, prompt_tokens=4, output_tokens=8,
                                       arrival_ms=0.0, first_token_ms=100.0, last_token_ms=112.0, finish_ms=112.0)
    tokens = [TokenRecord(0, 0, 100.0), TokenRecord(0, 1, 106.0), TokenRecord(0, 2, 112.0)]
    by_hand = [6.0] + [1.0] * 6                      # the gap of 6 ms before the last chunk, split over its 6 tokens
    arrival = Arrival(0.0, [100.0, 106.0, 112.0], chunk_tokens_from_indices([0, 1, 2], 8), finish_ms=112.0)
    assert itl_token_split(arrival) == by_hand
    s = summarize([], [request], tokens)
    assert s.itl_split_mean_ms == pytest.approx(sum(by_hand) / 7) and s.itl_split_p50_ms == 1.0
    assert s.num_multi_token_chunks == 1 and s.itl_p50_ms == 6.0
