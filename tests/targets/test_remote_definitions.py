"""Streams as they really arrive: chunks of several tokens, role-only and empty first chunks, each
definition on the records of real runs (the fake server, whose truth is known, and llama.cpp)."""
import io

import numpy as np
import pytest

from backend.cli.report import print_run
from backend.config import RemoteEndpoint, RunConfig
from backend.results.definitions import FirstChunk, itl_token_split, tpot_e2e
from backend.results.summary import arrival_of
from backend.workload.spec import workload_from_dict
from backend.targets.remote.target import run_remote
from tests.fakes.fake_openai import Behaviour, FakeOpenAI
from tests.fakes.llama_server import llama_server


def workload(**fields):
    data = {"arrival": "burst", "num_requests": 4, "prompt_len": 16, "output_len": 12, "prompt_source": "text",
            "seed": 0}
    return workload_from_dict({**data, **fields}, "test")


def drive(url, spec, api="completions", timeout_s=10.0):
    ep = RemoteEndpoint(url, "m", None, api, timeout_s, False, None, 1)
    config = RunConfig(mode="load", workload=spec, endpoint=ep)
    config.sampling.ignore_eos = True
    return run_remote(config, lambda e: None, lambda: False)


def console(finished, definitions=False) -> str:
    buf = io.StringIO()
    print_run(RunConfig(mode="load"), finished, out=buf, definitions=definitions)
    return buf.getvalue()


def by_request(data):
    chunks = {}
    for t in data.tokens:
        chunks.setdefault(t.request_id, []).append((t.index, t.time_ms))
    return {r.request_id: arrival_of(r, sorted(chunks.get(r.request_id, []))) for r in data.requests}


def test_chunks_of_three_tokens_are_counted_by_the_running_usage_and_the_run_is_flagged():
    with FakeOpenAI(Behaviour(gap_ms=5.0, chunk_tokens=3)) as fake:
        finished = drive(fake.url, workload())
    s = finished.summary
    assert finished.error is None and s.num_finished == 4
    for arrival in by_request(finished.data).values():   # 12 tokens in 4 chunks of 3, each chunk 5 ms apart
        assert arrival.chunk_tokens == [3, 3, 3, 3] and arrival.num_tokens == 12
        assert len(itl_token_split(arrival)) == 11
    assert s.num_chunks == 16 and s.num_multi_token_chunks == 16
    # a gap per chunk reads ~5 ms; split over its 3 tokens ~1.7 ms; the first chunk's two extra tokens are 0
    assert s.itl_split_p50_ms < 0.5 * s.itl_p50_ms
    assert s.definitions_differ == 1
    assert any(w.startswith("definitions: ITL p50") and "16 of 16 chunks carried several tokens" in w
               for w in finished.data.info.remote.warnings)
    text = console(finished, definitions=True)
    assert "ITL split over tokens" in text and "GenAI-Perf" in text and "[headline]" in text


def test_a_role_only_first_chunk_is_recorded_and_ttft_to_it_is_shown_beside_ttft_to_the_first_token():
    with FakeOpenAI(Behaviour(gap_ms=2.0, ttft_ms=40.0, first_chunk="role")) as fake:
        finished = drive(fake.url, workload(output_len=4), api="chat")
    s = finished.summary
    assert finished.error is None and s.num_finished == 4
    assert {r.first_chunk for r in finished.data.requests} == {"role"} and s.num_first_chunk_role == 4
    for r in finished.data.requests:   # the role chunk comes at once; the first token after the 40 ms prefill
        assert r.first_chunk_ms < r.first_token_ms - 30.0
    assert s.ttft_first_chunk_p50_ms < s.ttft_p50_ms - 30.0
    assert s.definitions_differ == 1
    assert any("TTFT p50" in w and "4 role-only" in w for w in finished.data.info.remote.warnings)


def test_an_empty_first_chunk_on_completions_and_one_token_chunks_otherwise_leave_itl_alone():
    with FakeOpenAI(Behaviour(gap_ms=2.0, first_chunk="empty")) as fake:
        finished = drive(fake.url, workload(output_len=6))
    s = finished.summary
    assert {r.first_chunk for r in finished.data.requests} == {"empty"} and s.num_first_chunk_empty == 4
    assert s.num_multi_token_chunks == 0 and s.itl_split_p50_ms == s.itl_p50_ms


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    with llama_server(log_path=tmp_path_factory.mktemp("llama") / "server.log") as server:
        yield server.url


def test_every_definition_on_llama_cpps_real_chat_stream(llama):
    from tests.fakes.llama_server import bundled_gguf
    # the served model's tokenizer counts each chunk (llama.cpp's stream has no usage): plain words, one token each
    ep = RemoteEndpoint(llama, "m", None, "chat", 60.0, False, str(bundled_gguf()), 1)
    config = RunConfig(mode="load", workload=workload(num_requests=2, output_len=8), endpoint=ep)
    config.sampling.ignore_eos = True
    finished = run_remote(config, lambda e: None, lambda: False)
    assert finished.error is None and finished.summary.num_finished == 2
    s = finished.summary
    gaps, split, tpots, e2e, ttfts, first_chunks = [], [], [], [], [], []
    for r, arrival in ((r, by_request(finished.data)[r.request_id]) for r in finished.data.requests):
        # its chat stream opens with a role-only delta, before the first token's text
        assert r.first_chunk == FirstChunk.ROLE.value and r.first_chunk_ms <= r.first_token_ms
        assert arrival.num_tokens == r.output_tokens and r.output_tokens_source == "tokenizer"
        # by hand from the arrival times the run recorded
        times, k = arrival.chunk_ms, arrival.chunk_tokens
        own = [b - a for a, b in zip(times, times[1:])]
        gaps += own
        split += [0.0] * (k[0] - 1) + [g / n for g, n in zip(own, k[1:]) for _ in range(n)]
        ttfts.append(times[0] - r.arrival_ms)
        first_chunks.append(r.first_chunk_ms - r.arrival_ms)
        if r.output_tokens > 1:
            tpots.append((times[-1] - times[0]) / (r.output_tokens - 1))
            e2e.append((r.finish_ms - r.first_token_ms) / (r.output_tokens - 1))
            assert tpot_e2e(arrival) == pytest.approx(e2e[-1]) and e2e[-1] >= r.tpot_ms   # the end is after the last token
    assert s.itl_mean_ms == pytest.approx(np.mean(gaps)) and s.itl_split_mean_ms == pytest.approx(np.mean(split))
    assert s.tpot_mean_ms == pytest.approx(np.mean(tpots)) and s.tpot_e2e_mean_ms == pytest.approx(np.mean(e2e))
    assert s.ttft_mean_ms == pytest.approx(np.mean(ttfts))
    assert s.ttft_first_chunk_mean_ms == pytest.approx(np.mean(first_chunks))
    assert s.ttft_first_chunk_p50_ms <= s.ttft_p50_ms and s.num_first_chunk_role == 2
    assert s.num_chunks >= s.num_finished and s.ttft_definition == "ttft"


def test_chunks_without_a_running_count_are_counted_by_the_tokenizer():
    # no usage at all (as llama.cpp's stream): each chunk of " tok tok tok" is 3 tokens by the served model's tokenizer
    with FakeOpenAI(Behaviour(gap_ms=5.0, chunk_tokens=3, usage=False)) as fake:
        ep = RemoteEndpoint(fake.url, "smollm2", None, "completions", 10.0, False, None, 1)
        config = RunConfig(mode="load", workload=workload(), endpoint=ep)
        config.sampling.ignore_eos = True
        finished = run_remote(config, lambda e: None, lambda: False)
    s = finished.summary
    assert finished.error is None and s.num_finished == 4
    for r in finished.data.requests:
        assert r.output_tokens == 12 and r.output_tokens_source == "tokenizer"
    for arrival in by_request(finished.data).values():
        assert arrival.chunk_tokens == [3, 3, 3, 3]
    assert s.num_multi_token_chunks == 16 and s.itl_split_p50_ms < 0.5 * s.itl_p50_ms and s.definitions_differ == 1


def test_without_a_tokenizer_or_a_running_count_each_chunk_is_one_token_as_before():
    with FakeOpenAI(Behaviour(gap_ms=5.0, chunk_tokens=3, usage=False)) as fake:
        finished = drive(fake.url, workload(prompt_source="synthetic"))
    assert finished.error is None
    for arrival in by_request(finished.data).values():
        assert arrival.chunk_tokens == [1, 1, 1, 1]
    assert finished.summary.num_multi_token_chunks == 0
