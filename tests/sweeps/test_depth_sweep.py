"""`sweep depth`: the axis and its bad input, every prompt unique from its first token, the pairs'
figures, and the sweep against servers whose prefix caches are real: the fake one (vLLM's counters,
each answer's cached tokens) and llama.cpp's server with its prompt cache on, whose log says whether any
prompt was served from it. Locally, a tiny sweep on the bundled model."""
import math
import re

import httpx
import pytest

from backend.cli.main import main
from backend.config import RemoteEndpoint, RunConfig, RunKind, SweepKind, SweepSpec
from backend.errors import InputError
from backend.run_info import RunInfo, TargetKind
from backend.session import execute
from backend.summary import Summary
from backend.sweeps.depth import cache_line, point
from backend.sweeps.depth_probes import NONCE_LEN, Probe, ServerProbe
from backend.sweeps.parse import parse_depths
from backend.sweeps.points import read_points
from tests.fakes.fake_openai import Behaviour, FakeOpenAI
from tests.fakes.llama_server import llama_server


def test_depths_parse_with_zero_and_refuse_negatives_in_one_line():
    assert parse_depths("256,0,64,64") == [0, 64, 256]
    for bad in ("-5", "1,x", ""):
        with pytest.raises(InputError) as refused:
            parse_depths(bad)
        assert "\n" not in str(refused.value) and "--depths" in str(refused.value)


def test_bad_flags_get_one_line_and_status_2(capsys):
    assert main(["sweep", "depth", "--depths=-1"]) == 2
    assert main(["sweep", "depth", "--depths", "0", "--prompt-len", "0"]) == 2
    assert main(["sweep", "depth", "--endpoint", "http://127.0.0.1:9/v1", "--served-model", "m", "--api-key", "k",
                 "--depths", "0", "--tokenizer", "nope.gguf", "--steps", "0"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("... ")]
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)


def probe_of(seed: int = 1) -> ServerProbe:
    config = RunConfig(mode=RunKind.SWEEP_DEPTH, sweep=SweepSpec(SweepKind.DEPTH),
                       endpoint=RemoteEndpoint("http://127.0.0.1:9/v1", "m"))
    return ServerProbe(config, seed)


def test_every_prompt_starts_with_its_own_token_and_the_depths_share_the_body():
    probe = probe_of()
    prompts = [probe.prompt(NONCE_LEN + n) for n in range(0, 600)]
    assert [len(p) for p in prompts] == [NONCE_LEN + n for n in range(0, 600)]
    assert len({p[0] for p in prompts}) == len(prompts)   # no two share even their first token
    short, long = prompts[64], prompts[64 + 32]
    assert long[NONCE_LEN:NONCE_LEN + 64] == short[NONCE_LEN:]   # the same text after the unique start
    # a second sweep (its own seed) starts its prompts otherwise
    assert probe_of(seed=2).prompt(NONCE_LEN + 16)[:NONCE_LEN] != probe_of(seed=1).prompt(NONCE_LEN + 16)[:NONCE_LEN]


def test_a_point_is_pp_over_the_pairs_median_difference_and_decode_over_its_own_time():
    spec = SweepSpec(SweepKind.DEPTH, prompt_len=100, output_len=10)
    pairs = [(Probe(50.0, 100.0, 10, 0), Probe(150.0, 0.0, 0, 0)),     # 100 ms for 100 tokens
             (Probe(60.0, 200.0, 10, 0), Probe(260.0, 0.0, 0, None)),    # 200 ms
             (Probe(55.0, 125.0, 10, None), Probe(180.0, 0.0, 0, None))]  # 125 ms
    p = point(4096, spec, pairs)
    assert p.prefill_ms == 125.0 and p.prefill_tokens_per_s == pytest.approx(800.0)
    assert p.decode_tokens_per_s == pytest.approx(80.0) and p.tpot_ms == pytest.approx(12.5)
    assert p.ttft_ms == 55.0 and p.cached_tokens == 0 and p.num_measured == 3
    slower = point(0, spec, [(Probe(100.0, 1.0, 1, None), Probe(90.0, 0.0, 0, None))])   # noise: B before A
    assert math.isnan(slower.prefill_tokens_per_s) and slower.cached_tokens is None


def test_the_cache_line_warns_when_hits_moved():
    info = RunInfo(target=TargetKind.REMOTE)
    clean = cache_line(Summary(server_prefix_queries=900.0, server_prefix_hits=0.0), info)
    assert clean.startswith("prefix cache: no hits") and "0 of 900" in clean
    hit = cache_line(Summary(server_prefix_queries=900.0, server_prefix_hits=64.0), info)
    assert hit.startswith("WARNING") and "\n" not in hit
    assert cache_line(Summary(client_cached_requests=3, client_cached_prompt_tokens=16), info).startswith("WARNING")


def sweep_argv(url: str, out, *more: str) -> list[str]:
    return ["sweep", "depth", "--endpoint", url, "--served-model", "smollm2", "--depths", "0,16,48",
            "--prompt-len", "16", "--output-len", "4", "--steps", "2", "--out", str(out), *more]


def test_against_a_real_prefix_cache_no_token_is_served_from_it(tmp_path, capsys):
    with FakeOpenAI(Behaviour(gap_ms=1.0, metrics="vllm", prefix_block=4, cached_usage="details")) as server:
        assert main(sweep_argv(server.url, tmp_path / "sweep")) == 0
        logged = list(server.log)
    printed = capsys.readouterr().out
    assert re.search(r"prefix cache: no hits \(server /metrics \(vllm\): 0 of [\d,]+ prompt tokens", printed)
    assert len(logged) == 1 + 3 * 2 * 2 and all(r.cached_tokens == 0 for r in logged)
    kind, points = read_points(tmp_path / "sweep")
    assert kind is SweepKind.DEPTH and [p.depth for p in points] == [0, 16, 48]
    assert all(p.cached_tokens == 0 and p.num_measured == 2 for p in points)
    assert all(p.decode_tokens_per_s > 0 for p in points)


def test_the_same_server_warns_when_prompts_share_their_start(tmp_path, capsys, monkeypatch):
    """The check can fail: prompts without their unique start hit the cache, and the line says so."""
    monkeypatch.setattr(ServerProbe, "prompt", lambda self, n: list(range(1000, 1000 + n)))
    with FakeOpenAI(Behaviour(gap_ms=1.0, metrics="vllm", prefix_block=4, cached_usage="details")) as server:
        assert main(sweep_argv(server.url, tmp_path / "sweep")) == 0
    printed = capsys.readouterr().out
    assert "WARNING: a prefix cache served part of the prompts" in printed
    _, points = read_points(tmp_path / "sweep")
    assert sum(p.cached_tokens for p in points) > 0


def test_a_server_that_refuses_token_ids_gets_words_of_one_token_each(tmp_path, capsys):
    with FakeOpenAI(Behaviour(gap_ms=1.0, metrics="vllm", prefix_block=4, refuse_token_ids=True)) as server:
        assert main(sweep_argv(server.url, tmp_path / "sweep")) == 0
        answered = [r for r in server.log if r.num_tokens]
    assert len(answered) == 1 + 3 * 2 * 2 and all(r.cached_tokens == 0 for r in answered)
    assert "prefix cache: no hits" in capsys.readouterr().out


def test_llama_cpp_with_its_prompt_cache_on_serves_nothing_from_it(tmp_path, capsys):
    """llama.cpp's Python server keeps the last prompt's KV and, with --cache, earlier prompts' states:
    its log says "prefix-match hit" or "cache hit" whenever either serves a prompt. It publishes no
    counters, so its log is the truth here; two identical prompts after the sweep show the check bites."""
    log = tmp_path / "server.log"
    with llama_server(log_path=log, extra=("--cache", "true", "--verbose", "true")) as server:
        status = main(sweep_argv(server.url, tmp_path / "sweep", "--steps", "1"))
        printed = capsys.readouterr().out
        sweep_log = log.read_text(errors="replace")
        for _ in range(2):   # the same prompt twice: the second is served from the cache
            httpx.post(f"{server.url}/completions", json={"model": "smollm2", "prompt": "The sky is blue because",
                                                           "max_tokens": 2}, timeout=60).raise_for_status()
        after = log.read_text(errors="replace")[len(sweep_log):]
    assert status == 0, printed
    assert "prefix cache: no hits" in printed
    hits = re.compile(r"prefix-match hit|cache hit|full prompt already cached")
    assert sweep_log.count("cache miss") == 1 + 3 * 2 and not hits.search(sweep_log)
    assert hits.search(after)
    _, points = read_points(tmp_path / "sweep")
    assert [p.depth for p in points] == [0, 16, 48] and all(p.decode_tokens_per_s > 0 for p in points)


def test_the_engine_sweep_on_the_bundled_model_records_no_cached_token(tmp_path):
    from dataclasses import replace
    config = RunConfig(mode=RunKind.SWEEP_DEPTH, sweep=SweepSpec(SweepKind.DEPTH, depths=[0, 64, 256], prompt_len=32,
                                                                 output_len=4, steps=1),
                       out_dir=str(tmp_path / "sweep"), threads=1)
    config.engine = replace(config.engine, kv_layout="paged", prefix_caching=True)
    events = []
    finished = execute(config, events.append, lambda: False)
    assert finished.error is None and finished.summary.num_points == 3
    assert finished.summary.client_cached_prompt_tokens == 0 and finished.summary.client_cached_requests == 3 * 2   # the warm-up is not counted
    kind, points = read_points(tmp_path / "sweep")
    assert kind is SweepKind.DEPTH and [p.depth for p in points] == [0, 64, 256]
    assert all(p.cached_tokens == 0 and p.decode_tokens_per_s > 0 and p.ttft_with_prompt_ms > 0 for p in points)


def test_a_depth_beyond_the_models_context_is_one_line(capsys):
    assert main(["sweep", "depth", "--depths", "0,9000", "--prompt-len", "8", "--output-len", "2", "--steps", "1",
                 "--threads", "1"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("... ")]   # not progress
    assert len(err) == 1 and "beyond smollm2-135m's context of 8,192" in err[0]


def remote_config(url: str, **spec) -> RunConfig:
    return RunConfig(mode=RunKind.SWEEP_DEPTH, endpoint=RemoteEndpoint(url, "m"),
                     sweep=SweepSpec(SweepKind.DEPTH, **{"depths": [0, 16], "prompt_len": 8, "output_len": 3,
                                                         "steps": 2, **spec}))


def test_the_pairs_alternate_and_a_stop_keeps_the_depths_measured(monkeypatch):
    sent = []

    def measure(self, prompt_len, max_tokens):
        sent.append((prompt_len, max_tokens))
        return Probe(10.0 + prompt_len, 30.0, max(max_tokens - 1, 0), None)
    monkeypatch.setattr(ServerProbe, "measure", measure)
    monkeypatch.setattr(ServerProbe, "counters", lambda self: None)
    finished = execute(remote_config("http://127.0.0.1:9/v1"), lambda e: None, lambda: len(sent) >= 5)
    a, b = (NONCE_LEN, 4), (NONCE_LEN + 8, 1)
    assert sent[1:5] == [a, b, b, a]   # after the warm-up: A B, then B A
    assert finished.stopped and finished.summary.num_points == 1 and finished.summary.note == "stopped by user"


def test_a_difference_that_is_not_positive_is_said_not_drawn(monkeypatch):
    monkeypatch.setattr(ServerProbe, "measure", lambda self, n, m: Probe(100.0 - n, 30.0, max(m - 1, 0), None))
    monkeypatch.setattr(ServerProbe, "counters", lambda self: None)
    finished = execute(remote_config("http://127.0.0.1:9/v1", depths=[0]), lambda e: None, lambda: False)
    assert "no prefill figure at depth 0" in finished.summary.note and not finished.stopped
