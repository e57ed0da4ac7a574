"""A remote run's prefix-cache hit rate, the server's and the client's: the engines' /metrics names, the
counters as per-run gains, each answer's cached tokens as each engine reports them, and the console line;
against the fake server, whose prefix cache is real (tests/fakes/fake_openai.py) and logs every request's
cached tokens, the truth both views are held to."""
import csv
import io
from pathlib import Path

import pytest

from backend.cli.report import print_run
from backend.config import RemoteEndpoint, RunConfig
from backend.records import RequestStatus
from backend.results.export import read_run
from backend.summary import Summary
from backend.targets.remote.metrics import ServerMetrics, server_metrics
from backend.targets.remote.prefix_cache import prefix_line
from backend.targets.remote.server_log import ServerLog, read_server_metrics
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.fake_openai import Behaviour, FakeOpenAI

# vLLM 0.9 publishes each count twice (the gpu_ names are the deprecated ones), per engine core
VLLM_PAGE = """\
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 600.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 250.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 150.0
vllm:gpu_prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:gpu_prefix_cache_queries_total{engine="1",model_name="m"} 600.0
vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 250.0
vllm:gpu_prefix_cache_hits_total{engine="1",model_name="m"} 150.0
vllm:num_requests_running{engine="0",model_name="m"} 2.0
"""


def test_vllm_counters_add_over_engine_cores_and_are_not_counted_twice():
    got = server_metrics(VLLM_PAGE, 0.0)
    assert got.engine == "vllm" and got.counters == {"prefix_queries": 1600.0, "prefix_hits": 400.0}
    assert got.fields() == ["running", "prefix_queries", "prefix_hits"]


def test_vllm_before_0_10_is_read_by_its_gpu_names():
    old = "\n".join(line for line in VLLM_PAGE.splitlines() if ":prefix_cache_" not in line)
    assert server_metrics(old, 0.0).counters == {"prefix_queries": 1600.0, "prefix_hits": 400.0}


def test_sglang_gauge_and_counters():
    page = ('sglang:num_running_reqs{model_name="m"} 1\nsglang:cache_hit_rate{model_name="m"} 0.25\n'
            'sglang:prompt_tokens_total{model_name="m"} 80\n')   # no hit yet: cached_tokens_total is not there
    got = server_metrics(page, 0.0)
    assert got.engine == "sglang" and got.cache_hit_rate == 0.25 and got.counters == {"prefix_queries": 80.0}


def reading(t, queries=None, hits=None, **gauges):
    counters = {k: v for k, v in (("prefix_queries", queries), ("prefix_hits", hits)) if v is not None}
    return ServerMetrics(t, engine="vllm", counters=counters, **gauges)


def test_counters_count_from_the_reading_before_the_run():
    log = ServerLog()
    log.baseline(reading(-5.0, 1000.0, 300.0))    # other work the server did before this run
    log.add(reading(0.0, 1100.0, 320.0))           # the first poll came after the first requests were counted
    log.add(reading(250.0, 1400.0, 420.0))
    s = log.summary()
    assert (s["server_prefix_queries"], s["server_prefix_hits"]) == (400.0, 120.0)
    assert s["server_prefix_hit_rate"] == pytest.approx(0.3)


def test_a_counter_absent_at_the_start_counts_from_zero_and_a_reset_from_zero():
    log = ServerLog()
    log.add(reading(0.0, 50.0))                    # SGLang before its first hit
    log.add(reading(250.0, 150.0, 30.0))
    assert (log.summary()["server_prefix_queries"], log.summary()["server_prefix_hits"]) == (100.0, 30.0)
    log.add(reading(500.0, 20.0, 5.0))             # the server restarted: 20 since then
    assert log.gained(log.readings[-1], "prefix_queries") == 20.0


def test_the_csv_keeps_the_gains_and_reads_them_back(tmp_path):
    log = ServerLog()
    log.write_to(tmp_path)
    log.baseline(reading(-1.0, 100.0, 10.0))
    log.add(reading(0.0, 100.0, 10.0, cache_hit_rate=0.5))
    log.add(reading(250.0, 160.0, 40.0, cache_hit_rate=0.25))
    log.close()
    rows = list(csv.DictReader(open(tmp_path / "server_metrics.csv")))
    assert [(r["prefix_queries"], r["prefix_hits"]) for r in rows] == [("0.0", "0.0"), ("60.0", "30.0")]
    back = read_server_metrics(tmp_path)
    assert [r.counters for r in back] == [{"prefix_queries": 0.0, "prefix_hits": 0.0},
                                         {"prefix_queries": 60.0, "prefix_hits": 30.0}]
    assert [r.cache_hit_rate for r in back] == [0.5, 0.25]
    assert log.summary()["server_cache_hit_rate_mean"] == pytest.approx(0.375)


# ---- against the fake server ------------------------------------------------------------------

def drive(server, out, seed=0, num_requests=24):
    # text prompts start with one of the shipped prompts: drawn 24 times, starts repeat, and their blocks hit
    spec = workload_from_dict({"arrival": "poisson", "rate": 200.0, "num_requests": num_requests, "prompt_len": 24,
                               "output_len": 3, "prompt_source": "text", "seed": seed}, "test")
    config = RunConfig(mode="load", workload=spec, out_dir=str(out),
                       endpoint=RemoteEndpoint(server.url, "fake", None, "completions", 30.0, True, None, 1))
    finished = run_remote(config, lambda e: None, lambda: False)
    assert finished.error is None
    assert all(r.status is RequestStatus.FINISHED for r in finished.data.requests)
    return finished


def truth(server) -> tuple[int, int]:
    return sum(r.prompt_tokens for r in server.log), sum(r.cached_tokens for r in server.log)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_both_views_match_the_servers_own_cache_run_after_run(engine, tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics=engine, prefix_block=4, cached_usage="details")) as server:
        first = drive(server, tmp_path / "a")
        prompt, cached = truth(server)
        server.reset()   # the log only: the cache and the counters go on, as a real server's do
        second = drive(server, tmp_path / "b", seed=1)
        prompt2, cached2 = truth(server)
    assert 0 < cached < prompt and cached2 > 0
    for finished, (p, c) in ((first, (prompt, cached)), (second, (prompt2, cached2))):
        s = finished.summary
        # the server's counters over this run only: the second starts where the first left them
        assert (s.server_prefix_queries, s.server_prefix_hits) == (p, c)
        assert s.server_prefix_hit_rate == pytest.approx(c / p)
        # the client's own view, from each answer's usage
        assert (s.client_cached_requests, s.client_cached_prompt_tokens, s.client_reported_prompt_tokens) == \
            (len(finished.data.requests), c, p)
        assert s.client_prefix_hit_rate == pytest.approx(s.server_prefix_hit_rate)
    back = read_run(tmp_path / "b")
    assert sum(r.cached_prompt_tokens for r in back.requests) == cached2
    assert back.summary.server_prefix_hits == cached2
    if engine == "sglang":   # its gauge: the last prefill's cached share, read as the run went
        assert 0.0 <= second.summary.server_cache_hit_rate_mean <= second.summary.server_cache_hit_rate_max <= 1.0
    else:
        assert second.summary.server_cache_hit_rate_mean is None
    line = console(second)
    assert f"server /metrics ({engine}, its counters over the run): {cached2:,} / {prompt2:,} = " \
           f"{100 * cached2 / prompt2:.1f}%" in line
    assert f"client (cached tokens its answers reported, 24 of 24 requests): {cached2:,} / {prompt2:,}" in line


def test_llamacpp_reports_in_its_timings_and_publishes_no_cache_counter(tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics="llamacpp", prefix_block=4, cached_usage="timings")) as server:
        finished = drive(server, tmp_path)
        prompt, cached = truth(server)
    s = finished.summary
    assert cached > 0 and s.server_prefix_queries is None and s.server_running_max is not None
    assert (s.client_cached_prompt_tokens, s.client_reported_prompt_tokens) == (cached, prompt)
    assert "server /metrics (llamacpp): no prefix-cache counters (llama.cpp publishes none)" in console(finished)


def test_usage_details_win_over_timings(tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=2.0, prefix_block=4, cached_usage="both")) as server:
        finished = drive(server, tmp_path, num_requests=12)
        _, cached = truth(server)
    assert sum(r.cached_prompt_tokens for r in finished.data.requests) == cached


def test_answers_that_do_not_say_leave_it_unknown(tmp_path):
    # vLLM without --enable-prompt-tokens-details: prompt_tokens_details is null
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics="vllm", prefix_block=4)) as server:
        finished = drive(server, tmp_path, num_requests=12)
        _, cached = truth(server)
    assert all(r.cached_prompt_tokens is None for r in finished.data.requests)
    assert finished.summary.client_cached_requests is None and finished.summary.server_prefix_hits == cached
    assert "client: the answers did not report cached tokens" in console(finished)
    rows = list(csv.DictReader(open(tmp_path / "requests.csv")))
    assert {r["cached_prompt_tokens"] for r in rows} == {""}


def test_no_line_when_neither_side_counts():
    assert prefix_line(Summary(num_finished=3), None) is None
    line = prefix_line(Summary(num_finished=3, client_cached_requests=3, client_cached_prompt_tokens=0,
                               client_reported_prompt_tokens=30), None)
    assert line == "prefix   server: no /metrics; client (cached tokens its answers reported, 3 of 3 requests): " \
                   "0 / 30 = 0.0%"


def console(finished) -> str:
    buf = io.StringIO()
    print_run(RunConfig(mode="load"), finished, out=buf)
    return next(line for line in buf.getvalue().splitlines() if line.startswith("prefix"))


def test_a_run_folder_from_before_reads_as_unknown():
    old = read_run(Path(__file__).resolve().parents[1] / "data" / "runs_v1" / "remote-load")
    assert old.requests and all(r.cached_prompt_tokens is None for r in old.requests)
    assert old.summary.server_prefix_hit_rate is None and old.summary.client_prefix_hit_rate is None
    assert prefix_line(old.summary, old.info.remote.server_metrics.get("engine")) is None


def test_a_shared_prefix_remote_run_shows_the_workloads_infinite_ceiling_beside_the_servers(tmp_path):
    """The server's pool is unknown: only the infinite cache's rate, from the run's own prompts."""
    spec = workload_from_dict({"arrival": "poisson", "rate": 200.0, "num_requests": 10, "prompt_len": 40,
                               "shared_prefix_len": 32, "output_len": 3, "prompt_source": "synthetic", "seed": 0},
                              "test")
    with FakeOpenAI(Behaviour(gap_ms=2.0, metrics="vllm", prefix_block=4, cached_usage="details")) as server:
        config = RunConfig(mode="load", workload=spec,
                           endpoint=RemoteEndpoint(server.url, "fake", None, "completions", 30.0, True, None, 1))
        finished = run_remote(config, lambda e: None, lambda: False)
    s = finished.summary
    assert finished.error is None and s.prefix_ideal_num_blocks is None and s.prefix_ideal_block_size == 16
    assert 0.4 < s.prefix_ideal_hit_rate < 0.8   # 9 of 10 prompts find 32 of their 40 tokens (2 blocks of 16)
    assert f"theoretical (one at a time, 16-token blocks): infinite cache {100 * s.prefix_ideal_hit_rate:.1f}%" \
        in console(finished)
    assert "this cache" not in console(finished)
