"""Remote target: workloads streamed to a real llama.cpp server (and a misbehaving fake one) on loopback."""
import argparse
import math
import socket
from pathlib import Path

import httpx
import pytest

from backend.config import RemoteEndpoint, RunConfig
from backend.errors import InputError
from backend.events import RequestsArrived
from backend.results.export import read_run
from backend.records import RecordBatch, RequestStatus
from backend.targets.remote.target import add_remote_flags, endpoint_from_args, run_remote
from backend.targets.remote.client import connect_failure
from backend.targets.remote.metrics import ServerMetrics, metrics_url, server_metrics
from backend.workload.spec import workload_from_dict
from tests.fakes.llama_server import FakeServer, free_port, llama_server

SENTINEL = "sk-SENTINEL-4f1c9e-never-written"


def workload(**fields):
    data = {"arrival": "burst", "num_requests": 2, "prompt_len": 8, "output_len": 4, "prompt_source": "text",
            "seed": 0}
    return workload_from_dict({**data, **fields}, "test")


def drive(endpoint, spec, out=None, stop=lambda: False, on_event=lambda e: None, ignore_eos=False):
    events = []

    def emit(event):
        events.append(event)
        on_event(event)

    config = RunConfig(mode="load", workload=spec, out_dir=None if out is None else str(out), endpoint=endpoint)
    config.sampling.ignore_eos = ignore_eos
    return run_remote(config, emit, stop), events


def assert_key_nowhere(folder: Path, key: str):
    for path in folder.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), f"the API key leaked into {path.name}"


# ---- a real llama.cpp server ---------------------------------------------------------------

@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with llama_server(api_key=SENTINEL, log_path=log) as server:
        yield server.url


def test_poisson_workload_records_every_token(llama, tmp_path):
    # a rate this CPU keeps up with: llama-cpp-python's server slows down sharply with many requests queued
    spec = workload(arrival="poisson", rate=4.0, num_requests=20, prompt_len="16:32", output_len="8:12", seed=3)
    endpoint = RemoteEndpoint(llama, "smollm2", SENTINEL, "chat", 60.0, True)
    finished, events = drive(endpoint, spec, out=tmp_path / "run", ignore_eos=True)
    assert finished.error is None and not finished.stopped
    data = finished.data
    assert sorted(r.request_id for r in data.requests) == list(range(20))
    for r in data.requests:
        assert r.status is RequestStatus.FINISHED, r.finish_reason
        tokens = sorted((t for t in data.tokens if t.request_id == r.request_id), key=lambda t: t.index)
        assert [t.index for t in tokens] == list(range(r.output_tokens))   # llama.cpp: one token per event
        assert 1 <= r.output_tokens <= 12 and r.text
        times = [t.time_ms for t in tokens]
        assert times == sorted(times) and times[0] == r.first_token_ms
        assert r.ttft_ms == r.first_token_ms - r.arrival_ms > 0
        assert r.finish_ms >= times[-1] and r.queue_ms == 0
        assert (r.tpot_ms is None) == (r.output_tokens == 1)
    arrived = [i for e in events if isinstance(e, RequestsArrived) for i in e.request_ids]
    batches = [e for e in events if isinstance(e, RecordBatch)]
    assert sorted(arrived) == list(range(20))
    assert sum(len(b.tokens) for b in batches) == len(data.tokens) and not any(b.steps for b in batches)
    saved = read_run(tmp_path / "run")
    assert saved.requests == data.requests and saved.tokens == data.tokens and saved.steps == []
    assert saved.info.remote.endpoint == llama and saved.info.remote.served_model == "smollm2"
    assert saved.summary.num_finished == 20 and math.isfinite(saved.summary.itl_p50_ms)
    assert_key_nowhere(tmp_path / "run", SENTINEL)
    assert SENTINEL not in repr(endpoint) and not any(SENTINEL in repr(e) for e in events)


def test_completions_api_streams_text(llama):
    endpoint = RemoteEndpoint(llama, "smollm2", SENTINEL, "completions", 60.0, False)
    # --ignore-eos reaches llama.cpp as min_tokens: every answer runs to its full length
    finished, _ = drive(endpoint, workload(num_requests=3, output_len=6), ignore_eos=True)
    assert finished.error is None
    for r in finished.data.requests:
        tokens = [t for t in finished.data.tokens if t.request_id == r.request_id]
        assert r.status is RequestStatus.FINISHED and r.finish_reason == "length"
        assert len(tokens) == r.output_tokens == 6


def test_wrong_api_key_gets_the_servers_401(llama):
    finished, _ = drive(RemoteEndpoint(llama, "smollm2", "wrong-key", "completions", 30.0, False), workload())
    assert finished.error.startswith("every request failed:")
    assert finished.summary.errors["http_401"] == 2
    assert all(r.finish_reason.startswith("http_401: ") for r in finished.data.requests)


def test_token_id_prompts_get_the_servers_own_message(llama):
    # llama-cpp-python takes text prompts only; vLLM and llama.cpp's C++ server take token ids
    spec = workload(prompt_source="synthetic")
    finished, _ = drive(RemoteEndpoint(llama, "smollm2", SENTINEL, "completions", 30.0, False), spec)
    assert finished.summary.errors["http_500"] == 2
    assert "valid string" in finished.data.requests[0].finish_reason
    assert finished.error.startswith("the server refused token-id prompts") and "\n" not in finished.error


def test_prompt_beyond_the_context_is_an_error(llama):
    finished, _ = drive(RemoteEndpoint(llama, "smollm2", SENTINEL, "completions", 30.0, False),
                        workload(num_requests=1, prompt_len=3000))
    assert finished.data.requests[0].status is RequestStatus.ERROR
    assert finished.summary.errors["empty_stream"] == 1


def test_killed_server_gives_errors_not_a_hang(tmp_path):
    with llama_server(log_path=tmp_path / "server.log") as server:
        def kill_at_first_token(event):
            if isinstance(event, RecordBatch) and event.tokens and server.proc.poll() is None:
                server.kill()

        finished, _ = drive(RemoteEndpoint(server.url, "smollm2", None, "completions", 30.0, False),
                            workload(num_requests=6, output_len=64, prompt_len=32), on_event=kill_at_first_token,
                            ignore_eos=True)
    requests = finished.data.requests
    assert sorted(r.request_id for r in requests) == list(range(6))
    errors = [r for r in requests if r.status is RequestStatus.ERROR]
    reasons = [r.finish_reason for r in requests]
    assert errors, reasons
    assert {r.finish_reason.split(":")[0] for r in errors} <= {"stream_cut", "connection_refused"}, reasons
    # the server runs requests one at a time, so at most one was done; after four failures and no
    # success the run gives up on the requests still in flight
    finished_ok = [r for r in requests if r.status is RequestStatus.FINISHED]
    given_up = [r for r in requests if r.finish_reason.startswith("cancelled: every request failed")]
    assert len(finished_ok) <= 1 and len(finished_ok) + len(errors) + len(given_up) == 6, reasons


def test_a_server_that_stops_part_way_is_named_and_what_it_answered_is_kept(tmp_path):
    with llama_server(log_path=tmp_path / "server.log") as server:
        finished_ids: set[int] = set()

        def kill_after_two(event):
            if isinstance(event, RecordBatch):
                finished_ids.update(r.request_id for r in event.requests if r.status is RequestStatus.FINISHED)
                if len(finished_ids) >= 2 and server.proc.poll() is None:
                    server.kill()

        # arrivals spread out, so most requests find the port closed rather than a stream cut
        spec = workload(arrival="poisson", rate=5.0, num_requests=24, prompt_len=8, output_len=4, seed=2)
        finished, _ = drive(RemoteEndpoint(server.url, "smollm2", None, "completions", 30.0, False), spec,
                            out=tmp_path / "run", on_event=kill_after_two, ignore_eos=True)
    requests = finished.data.requests
    ok = [r for r in requests if r.status is RequestStatus.FINISHED]
    assert len(ok) >= 2 and all(r.output_tokens == 4 for r in ok)   # one more may finish before the kill lands
    assert finished.error == f"the server at {server.url} stopped answering after {len(ok)} requests (connection refused)"
    assert finished.summary.errors["connection_refused"] >= 4
    assert len(requests) < 24   # the run ended without sending the rest
    saved = read_run(tmp_path / "run")   # what it answered before is on disk, as for any early end
    assert sorted(r.request_id for r in saved.requests if r.status is RequestStatus.FINISHED) == \
        sorted(r.request_id for r in ok)


def test_closed_port_fails_every_request_quickly():
    port = free_port()   # nothing listens there
    spec = workload(arrival="poisson", rate=2.0, num_requests=50)
    finished, _ = drive(RemoteEndpoint(f"http://127.0.0.1:{port}/v1", "m", None, "completions", 5.0, False), spec)
    assert finished.error == f"every request failed: connection refused at http://127.0.0.1:{port}/v1"
    requests = finished.data.requests
    assert len(requests) < 50   # the run ended without sending the rest
    assert finished.summary.errors["connection_refused"] == len(requests)


# ---- a fake server for what a healthy llama.cpp never does -----------------------------------

@pytest.mark.parametrize("model, kind, num_tokens", [("http500", "http_500", 0), ("malformed", "malformed_event", 1),
                                                     ("cut", "stream_cut", 1), ("silent", "timeout", 0),
                                                     ("in_stream_error", "server_error", 1)])
def test_each_failure_is_recorded_by_kind(tmp_path, model, kind, num_tokens):
    with FakeServer(metrics=False) as server:
        endpoint = RemoteEndpoint(server.url, model, SENTINEL, "completions", 0.5, False)
        finished, _ = drive(endpoint, workload(), out=tmp_path)
    assert finished.error.startswith("every request failed: ")
    assert finished.summary.errors[kind] == 2
    for r in finished.data.requests:
        assert r.status is RequestStatus.ERROR and r.finish_reason.startswith(kind + ": ")
        assert len([t for t in finished.data.tokens if t.request_id == r.request_id]) == num_tokens
    assert server.auth == [f"Bearer {SENTINEL}"] * 2
    if model == "http500":   # the server's message is kept, the key it quoted is not
        assert "engine crashed for key Bearer ***" in finished.data.requests[0].finish_reason
    assert_key_nowhere(tmp_path, SENTINEL)


def test_usage_counts_and_closed_loop():
    with FakeServer() as server:
        spec = workload(arrival="closed", concurrency=2, num_requests=6)
        finished, _ = drive(RemoteEndpoint(server.url, "ok", None, "completions", 5.0, False), spec, ignore_eos=True)
    assert [r.status for r in finished.data.requests] == [RequestStatus.FINISHED] * 6
    assert all(r.prompt_tokens == 7 and r.output_tokens == 5 and r.text == "Hello from the fake server"
               for r in finished.data.requests)
    body = server.bodies[0]
    assert body["stream"] and body["ignore_eos"] and body["min_tokens"] == 4 and body["stream_options"]["include_usage"]
    assert body["max_tokens"] == 4 and body["temperature"] == 0 and isinstance(body["prompt"], str)


def test_chunks_of_several_tokens_are_indexed_by_the_servers_count():
    with FakeServer() as server:
        finished, _ = drive(RemoteEndpoint(server.url, "pairs", None, "completions", 5.0, False),
                            workload(num_requests=1))
    assert [t.index for t in finished.data.tokens] == [1, 3, 4]   # 5 tokens in events of 2, 2 and 1
    r = finished.data.requests[0]
    times = [t.time_ms for t in finished.data.tokens]
    assert r.output_tokens == 5 and r.tpot_ms == pytest.approx((times[-1] - times[0]) / 4)   # per token, not per event


def test_rejected_stream_options_are_dropped_and_retried():
    with FakeServer() as server:
        finished, _ = drive(RemoteEndpoint(server.url, "strict", None, "completions", 5.0, False),
                            workload(arrival="constant", rate=50.0, num_requests=3))
    assert finished.error is None
    assert all(r.status is RequestStatus.FINISHED for r in finished.data.requests)
    assert "stream_options" in server.bodies[0] and "stream_options" not in server.bodies[-1]


def test_synthetic_prompts_are_token_ids_clear_of_special_tokens():
    with FakeServer() as server:
        drive(RemoteEndpoint(server.url, "ok", None, "completions", 5.0, False),
              workload(prompt_source="synthetic", prompt_len=64))
    ids = [i for body in server.bodies for i in body["prompt"]]
    assert len(ids) == 128 and all(isinstance(i, int) and 1000 <= i < 32000 for i in ids)


def test_stop_cancels_in_flight_requests_and_metrics_are_read():
    seen = []

    def on_event(event):
        if isinstance(event, ServerMetrics):
            seen.append(event)

    with FakeServer() as server:
        finished, _ = drive(RemoteEndpoint(server.url, "silent", None, "completions", 30.0, True), workload(),
                            stop=lambda: bool(seen), on_event=on_event)
    assert finished.stopped and finished.error is None
    assert [r.finish_reason for r in finished.data.requests] == ["stopped by user"] * 2
    assert (seen[0].running, seen[0].waiting, seen[0].kv_usage) == (5.0, 1.0, 0.5)
    assert finished.summary.server_running_max == 5.0 and finished.data.info.remote.server_metrics


# ---- parsing and flags ----------------------------------------------------------------------

def test_llama_cpp_metric_names_and_url():
    text = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 4\nllamacpp:kv_cache_usage_ratio 0.125\n"
    assert server_metrics(text, 1.0) == ServerMetrics(1.0, 2.0, 4.0, 0.125, engine="llamacpp")
    assert server_metrics("# nothing known\nprocess_cpu_seconds_total 3\n", 1.0) is None
    assert metrics_url("http://10.0.0.1:8000/v1/") == "http://10.0.0.1:8000/metrics"


def parse(argv):
    parser = argparse.ArgumentParser()
    add_remote_flags(parser)
    return endpoint_from_args(parser.parse_args(argv))


def test_flags_make_an_endpoint_with_a_hidden_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("PHASESCOPE_API_KEY", SENTINEL)
    assert parse([]) is None
    ep = parse(["--endpoint", "http://127.0.0.1:8000", "--served-model", "m", "--api", "chat"])
    assert ep.url == "http://127.0.0.1:8000/v1" and ep.api == "chat" and ep.api_key == SENTINEL
    assert SENTINEL not in repr(ep)
    assert parse(["--endpoint", "http://127.0.0.1:8000/v1", "--served-model", "m", "--api-key", "k"]).api_key == "k"


@pytest.mark.parametrize("argv, words", [
    (["--endpoint", "127.0.0.1:8000", "--served-model", "m"], r"expected an http\(s\) URL"),
    (["--endpoint", "http://127.0.0.1:8000/v1"], "--served-model"),
    (["--served-model", "m"], "needs --endpoint"),
    (["--endpoint", "http://127.0.0.1:8000/v1", "--served-model", "m", "--request-timeout", "0"], "--request-timeout"),
])
def test_bad_flags_say_which(argv, words):
    with pytest.raises(InputError, match=words):
        parse(argv)


def test_chat_needs_text_prompts():
    with pytest.raises(InputError, match="prompt_source"):
        drive(RemoteEndpoint("http://127.0.0.1:9/v1", "m", None, "chat", 5.0, False),
              workload(prompt_source="synthetic"))


def test_connect_failures_are_named_by_their_root_cause():
    def wrapped(cause):
        exc = httpx.ConnectError("All connection attempts failed")
        exc.__cause__ = OSError("All connection attempts failed")
        exc.__cause__.__cause__ = cause
        return exc

    url = "http://127.0.0.1:9/v1"
    assert connect_failure(wrapped(ConnectionRefusedError(111, "refused")), url).kind == "connection_refused"
    dns = connect_failure(wrapped(socket.gaierror(-2, "Name or service not known")), url)
    assert dns.kind == "dns_failure" and "Name or service not known" in dns.detail
    assert connect_failure(wrapped(OSError(113, "No route to host")), url).kind == "connect_failed"
