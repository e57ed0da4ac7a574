"""The server's /metrics: the Prometheus text format, each engine's names, and a run that samples a
fake server whose gauges and histograms are its real state (tests/fakes/fake_metrics.py)."""
import csv
import json

import pytest

from backend.config import RemoteEndpoint, RunConfig
from backend.targets.remote.metrics import Histogram, ServerMetrics, parse_prometheus, server_metrics
from backend.targets.remote.server_log import ServerLog, bucket_quantile, read_server_metrics
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.fake_openai import Behaviour, FakeOpenAI

VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
vllm:request_prefill_time_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="1.0",model_name="m"} 3.0
vllm:request_prefill_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 6.5
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 4.0
vllm:request_prefill_time_seconds_bucket{engine="1",le="0.1",model_name="m"} 1.0
vllm:request_prefill_time_seconds_bucket{engine="1",le="1.0",model_name="m"} 1.0
vllm:request_prefill_time_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0
vllm:request_prefill_time_seconds_sum{engine="1",model_name="m"} 0.05
vllm:request_prefill_time_seconds_count{engine="1",model_name="m"} 1.0
vllm:gpu_prefix_cache_hits_total{model_name="m"} NaN
"""


def test_labels_escapes_and_values():
    page = 'a_metric{x="1",note="say \\"hi\\", then \\\\ go",le="+Inf"} 2.5 1700000000\nplain 3\nbad{x="1"} NaN\n'
    assert parse_prometheus(page) == [("a_metric", {"x": "1", "note": 'say "hi", then \\ go', "le": "+Inf"}, 2.5),
                                      ("plain", {}, 3.0)]


def test_vllm_page_combines_ranks():
    got = server_metrics(VLLM_PAGE, 5.0)
    assert (got.engine, got.running, got.waiting, got.kv_usage) == ("vllm", 5.0, 7.0, 0.375)
    prefill = got.histograms["prefill_s"]
    assert (prefill.count, prefill.total) == (5.0, 6.55)
    assert prefill.buckets == [(0.1, 2.0), (1.0, 4.0), (float("inf"), 5.0)]
    assert got.fields() == ["running", "waiting", "kv_usage", "prefill_s"]


def test_tgi_forward_duration_is_split_by_method():
    page = ('tgi_queue_size 4\n'
            'tgi_batch_forward_duration_sum{method="prefill"} 2\ntgi_batch_forward_duration_count{method="prefill"} 4\n'
            'tgi_batch_forward_duration_sum{method="decode"} 3\ntgi_batch_forward_duration_count{method="decode"} 30\n')
    got = server_metrics(page, 0.0)
    assert got.engine == "tgi" and got.waiting == 4.0 and got.running is None
    assert got.histograms["prefill_s"].count == 4.0 and got.histograms["decode_s"].total == 3.0


def test_bucket_quantile_interpolates_like_prometheus():
    buckets = [(0.1, 10.0), (0.2, 30.0), (float("inf"), 40.0)]
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.15)     # rank 20: halfway through (0.1, 0.2]
    assert bucket_quantile(0.125, buckets) == pytest.approx(0.05)   # rank 5 in the first, from 0
    assert bucket_quantile(0.9, buckets) == 0.2                     # in +Inf: the last finite bound
    assert bucket_quantile(0.5, []) is None


def test_log_counts_from_the_runs_first_reading():
    log = ServerLog()
    log.add(ServerMetrics(0.0, running=1.0, engine="vllm", histograms={"ttft_s": Histogram(10.0, 5.0, [(1.0, 10.0)])}))
    log.add(ServerMetrics(250.0, running=4.0, engine="vllm", histograms={"ttft_s": Histogram(12.0, 5.5, [(1.0, 12.0)])}))
    summary = log.summary()
    assert summary["server_running_max"] == 4.0 and summary["server_ttft_count"] == 2.0
    assert summary["server_ttft_mean_ms"] == pytest.approx(250.0)   # 0.5 s over the run's 2 requests
    assert log.info()["fields"] == ["running", "ttft_s"]


def drive(url, out, num_requests=8):
    spec = workload_from_dict({"arrival": "burst", "num_requests": num_requests, "prompt_len": 16, "output_len": 40,
                               "prompt_source": "synthetic", "seed": 0}, "test")
    config = RunConfig(mode="load", workload=spec, out_dir=str(out),
                       endpoint=RemoteEndpoint(url, "fake", None, "completions", 30.0, True, None, 1))
    return run_remote(config, lambda e: None, lambda: False)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
def test_a_run_samples_the_servers_real_state(engine, tmp_path):
    # 8 requests at once, 2 decoding at a time: the server's own queue must show in its gauges
    with FakeOpenAI(Behaviour(gap_ms=5.0, ttft_ms=30.0, max_batch=2, metrics=engine)) as server:
        finished = drive(server.url, tmp_path)
    assert finished.error is None
    assert all(r.status.value == "finished" for r in finished.data.requests)
    rows = list(csv.DictReader(open(tmp_path / "server_metrics.csv")))
    assert len(rows) >= 3
    running = [float(r["running"]) for r in rows]
    waiting = [float(r["waiting"]) for r in rows]
    assert max(running) == 2.0 and max(waiting) >= 1.0 and min(waiting) == 0.0   # changes with the load
    info = json.loads((tmp_path / "run.json").read_text())["info"]["server_metrics"]
    assert info["engine"] == engine and info["readings"] == len(rows)
    summary = finished.summary
    assert summary.server_running_max == 2.0
    assert (summary.server_kv_usage_max is not None) == (engine != "tgi") == ("kv_usage" in info["fields"])
    assert summary.server_e2e_count >= 1
    # the server's own end-to-end times lie within those it logged for each request
    truth = [(r.done_s - r.read_s) * 1000.0 for r in server.log]
    assert min(truth) - 0.01 <= summary.server_e2e_mean_ms <= max(truth) + 0.01
    back = read_server_metrics(tmp_path)
    assert [r.running for r in back] == running and back[-1].histograms["e2e_s"].count == summary.server_e2e_count


class Crash(Exception):
    pass


def test_a_run_that_crashes_midway_keeps_the_rows_it_read(tmp_path):
    """Each reading is on the disk (flushed, readable by another reader) as it arrives, and a run that
    fails midway leaves them: server_metrics.csv is appended, not written at the end."""
    on_disk = []

    def emit(event):   # on the calling thread; the file is read as another process would
        if isinstance(event, ServerMetrics):
            on_disk.append(len(read_server_metrics(tmp_path)))
            if len(on_disk) == 3:
                raise Crash("the caller failed midway")

    spec = workload_from_dict({"arrival": "burst", "num_requests": 8, "prompt_len": 16, "output_len": 40,
                               "prompt_source": "synthetic", "seed": 0}, "test")
    # 8 requests of 40 tokens, 2 at a time, 10 ms a token: about 1.6 s, several readings at 4 a second
    with FakeOpenAI(Behaviour(gap_ms=10.0, max_batch=2, metrics="vllm")) as server:
        config = RunConfig(mode="load", workload=spec, out_dir=str(tmp_path),
                           endpoint=RemoteEndpoint(server.url, "fake", None, "completions", 30.0, True, None, 1))
        with pytest.raises(Crash):
            run_remote(config, emit, lambda: False)
    assert on_disk == [1, 2, 3]   # every reading already in the file when the caller saw it
    rows = read_server_metrics(tmp_path)
    assert len(rows) >= 3 and [r.time_ms for r in rows] == sorted(r.time_ms for r in rows)
    assert max(r.running for r in rows) >= 1.0   # the server's real state, read while requests were in flight
    assert not (tmp_path / "run.json").exists()   # the run did not end: only what was streamed is there


def test_a_quantity_first_seen_later_widens_the_file(tmp_path):
    log = ServerLog()
    log.write_to(tmp_path)
    log.add(ServerMetrics(0.0, running=1.0, engine="vllm"))
    log.add(ServerMetrics(250.0, running=2.0, engine="vllm", histograms={"ttft_s": Histogram(3.0, 1.5, [])}))
    log.add(ServerMetrics(500.0, running=0.0, waiting=1.0, engine="vllm",
                          histograms={"ttft_s": Histogram(5.0, 2.5, [])}))
    log.add(ServerMetrics(750.0, running=4.0, engine="vllm", histograms={"ttft_s": Histogram(6.0, 3.0, [])}))
    log.close()
    assert (tmp_path / "server_metrics.csv").read_text() == log.csv_text()
    back = read_server_metrics(tmp_path)
    assert [r.running for r in back] == [1.0, 2.0, 0.0, 4.0] and [r.waiting for r in back] == [None, None, 1.0, None]
    assert [r.histograms["ttft_s"].count for r in back[1:]] == [0.0, 2.0, 3.0]   # counted from the first reading


def test_a_server_without_metrics_has_none(tmp_path):
    with FakeOpenAI(Behaviour(gap_ms=1.0)) as server:
        finished = drive(server.url, tmp_path, num_requests=2)
    assert finished.error is None and finished.data.info.remote.server_metrics == {}
    assert not (tmp_path / "server_metrics.csv").exists() and read_server_metrics(tmp_path) == []
