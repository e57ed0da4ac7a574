"""The streaming client's HTTP/1.1 against servers that write exact bytes: chunks, SSE line ends,
keep-alive, TLS and proxies, on asyncio's own loop and on uvloop (the workers' loop)."""
import asyncio
import gzip
import json
import time

import pytest

from backend.config import RemoteEndpoint, RunConfig, SamplingConfig
from backend.targets.remote.client import RemoteFailure, Streamer, StreamState
from backend.targets.remote.connect import origin_of, proxy_for
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.raw_http import STREAM_HEAD, RawServer, TunnelProxy, chunk, event, self_signed, server_tls
from tests.fakes.llama_server import free_port

LOOPS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("uvloop") is None, reason="uvloop is not installed"))]
PROXY_VARS = ["http_proxy", "https_proxy", "all_proxy", "no_proxy"]


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def stream(url: str, n: int = 1, loop: str = "asyncio", timeout_s: float = 5.0, api: str = "completions"):
    """Send n requests one after another; [(kind or "ok", text or detail)] and the connections opened."""
    async def go():
        t0 = time.perf_counter()
        streamer = Streamer(url, "m", api, {"Authorization": "Bearer k"}, SamplingConfig(), timeout_s,
                            lambda: (time.perf_counter() - t0) * 1000.0)
        results = []
        for i in range(n):
            state, texts = StreamState(i, 0.0), []
            try:
                await streamer.send("hi", 4, state, lambda s, text, now: texts.append(text))
                results.append(("ok", "".join(texts)))
            except RemoteFailure as failure:
                results.append((failure.kind, failure.detail))
        streamer.close()
        return results, streamer.num_connections

    factory = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(go())


WORDS = ["Hello", " from", " raw", " bytes"]


def full_stream(sep: bytes = b"\n") -> bytes:
    body = b"".join(event(w, "length" if i == len(WORDS) - 1 else None, sep) for i, w in enumerate(WORDS))
    return body + b"data: [DONE]" + sep + sep


async def serve_each(server, reader, writer, number, body_for=lambda n: [chunk(full_stream())]):
    """Answer every request on the connection with STREAM_HEAD and the given writes, then the last chunk."""
    while await server.read_request(reader) is not None:
        writer.write(STREAM_HEAD)
        for piece in body_for(number):
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.005)   # a separate read on the client's side
        writer.write(b"0\r\n\r\n")
        await writer.drain()


# ---- chunks, SSE and keep-alive ------------------------------------------------------------

@pytest.mark.parametrize("loop", LOOPS)
def test_events_split_across_chunks_and_reads_are_joined(loop):
    data = full_stream()
    framed = b"".join(chunk(data[i:i + 7]) for i in range(0, len(data), 7))   # every event cut mid-JSON
    pieces = [framed[i:i + 5] for i in range(0, len(framed), 5)]            # and the chunk framing cut too

    async def script(server, reader, writer, number):
        await serve_each(server, reader, writer, number, lambda n: pieces)

    with RawServer(script) as server:
        results, _ = stream(server.url, loop=loop)
    assert results == [("ok", "Hello from raw bytes")]


@pytest.mark.parametrize("sep", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_crlf_and_cr_line_ends(sep):
    async def script(server, reader, writer, number):
        await serve_each(server, reader, writer, number, lambda n: [chunk(full_stream(sep)[:9]),
                                                                     chunk(full_stream(sep)[9:])])

    with RawServer(script) as server:
        results, _ = stream(server.url, n=2)
    assert results == [("ok", "Hello from raw bytes")] * 2


@pytest.mark.parametrize("loop", LOOPS)
def test_sequential_requests_reuse_one_keep_alive_connection(loop):
    with RawServer(serve_each) as server:
        results, opened = stream(server.url, n=5, loop=loop)
    assert results == [("ok", "Hello from raw bytes")] * 5
    assert opened == 1 and server.num_connections == 1
    assert server.request_lines == ["POST /v1/completions HTTP/1.1"] * 5


def test_an_idle_connection_the_server_dropped_is_replaced_without_an_error():
    async def script(server, reader, writer, number):
        if number == 1:   # answer one request, then read the next and hang up without a word
            await server.read_request(reader)
            writer.write(STREAM_HEAD + chunk(full_stream()) + b"0\r\n\r\n")
            await writer.drain()
            await server.read_request(reader)
            return
        await serve_each(server, reader, writer, number)

    with RawServer(script) as server:
        results, opened = stream(server.url, n=3)
    assert results == [("ok", "Hello from raw bytes")] * 3 and opened == 2


def test_a_fresh_connection_closed_unanswered_is_a_stream_cut_not_a_retry_loop():
    async def script(server, reader, writer, number):
        await server.read_request(reader)

    with RawServer(script) as server:
        results, opened = stream(server.url, n=1)
    assert results[0][0] == "stream_cut" and opened == 1


@pytest.mark.parametrize("framing", ["content-length", "until-close", "gzip"])
def test_bodies_without_chunks_and_compressed(framing):
    async def script(server, reader, writer, number):
        await server.read_request(reader)
        data = full_stream()
        if framing == "content-length":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data), data))
        elif framing == "until-close":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + data)
        else:
            packed = gzip.compress(data)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n" + chunk(packed[:20]) + chunk(packed[20:]) + b"0\r\n\r\n")
        await writer.drain()

    with RawServer(script) as server:
        results, _ = stream(server.url)
    assert results == [("ok", "Hello from raw bytes")]


@pytest.mark.parametrize("reply, kind, words", [
    (b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n{\"detail\":\"Not Found\"}",
     "http_404", "Not Found"),
    (b"HELLO THERE\r\n\r\n", "bad_response", "not valid HTTP/1.1"),
    (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{not json", "malformed_event", ""),
    (STREAM_HEAD + chunk(b"data: {\"choices\": [{\"text\": \"a\"}]}\n\ndata: {oops}\n\n"), "malformed_event", "oops"),
])
def test_bad_answers_are_named(reply, kind, words):
    async def script(server, reader, writer, number):
        await server.read_request(reader)
        writer.write(reply)
        await writer.drain()
        await asyncio.sleep(0.2)

    with RawServer(script) as server:
        results, _ = stream(server.url)
    assert results[0][0] == kind and words in results[0][1]


def test_a_non_streamed_json_answer_is_taken_whole():
    body = json.dumps({"choices": [{"index": 0, "message": {"content": "all at once"}, "finish_reason": "stop"}]})

    async def script(server, reader, writer, number):
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body.encode()))
        await writer.drain()

    with RawServer(script) as server:
        results, _ = stream(server.url, api="chat")
    assert results == [("ok", "all at once")]
    assert server.request_lines == ["POST /v1/chat/completions HTTP/1.1"]


# ---- TLS -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize("loop", LOOPS)
def test_tls_to_a_self_signed_server_trusted_through_ssl_cert_file(cert, monkeypatch, loop):
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    with RawServer(serve_each, ssl_context=server_tls(*cert)) as server:
        results, opened = stream(server.url, n=3, loop=loop)
    assert results == [("ok", "Hello from raw bytes")] * 3 and opened == 1


def test_an_untrusted_certificate_is_one_clear_line(cert, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with RawServer(serve_each, ssl_context=server_tls(*cert)) as server:
        results, _ = stream(server.url)
    kind, detail = results[0]
    assert kind == "tls_failure" and "\n" not in detail
    assert detail.startswith(f"the TLS certificate of {server.url} was not accepted: self") and "SSL_CERT_FILE" in detail


def test_https_to_a_plain_http_server_is_a_tls_failure():
    async def plain(server, reader, writer, number):   # what a plain HTTP server says to a TLS hello
        await reader.read(1)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()

    with RawServer(plain) as server:
        results, _ = stream(server.url.replace("http://", "https://"))
    assert results[0][0] == "tls_failure" and "TLS handshake" in results[0][1]


# ---- proxies -------------------------------------------------------------------------------

def test_https_goes_through_a_connect_tunnel(cert, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
    with RawServer(serve_each, ssl_context=server_tls(*cert)) as server, TunnelProxy() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        results, opened = stream(server.url, n=2)
    assert results == [("ok", "Hello from raw bytes")] * 2 and opened == 1
    assert proxy.request_lines == [f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"]


def test_plain_http_goes_to_the_proxy_in_absolute_form(monkeypatch):
    with RawServer(serve_each) as server, TunnelProxy() as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        results, _ = stream(server.url)
    assert results == [("ok", "Hello from raw bytes")]
    assert proxy.request_lines == [f"POST http://127.0.0.1:{server.port}/v1/completions HTTP/1.1"]
    assert server.request_lines == ["POST /v1/completions HTTP/1.1"]


def test_no_proxy_reaches_the_server_directly(monkeypatch):
    with RawServer(serve_each) as server, TunnelProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert proxy_for(origin_of(server.url)) is None
        results, _ = stream(server.url)
    assert results == [("ok", "Hello from raw bytes")] and proxy.request_lines == []


def test_a_proxy_that_refuses_or_is_down_is_one_clear_line(monkeypatch):
    with TunnelProxy(refuse=True) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        refused, _ = stream("https://127.0.0.1:9/v1")
    assert refused == [("proxy_error", f"the proxy {proxy.url} refused the tunnel to 127.0.0.1:9: "
                        "HTTP/1.1 403 Forbidden")]
    down_port = free_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:secret@127.0.0.1:{down_port}")
    down, _ = stream("https://127.0.0.1:9/v1")
    assert down[0][0] == "proxy_error" and down[0][1].startswith(f"connection refused at the proxy "
                                                                 f"http://127.0.0.1:{down_port} ")
    assert "secret" not in down[0][1]


# ---- the whole driver: one line for the run ------------------------------------------------

def drive(url: str):
    spec = workload_from_dict({"arrival": "burst", "num_requests": 4, "prompt_len": 8, "output_len": 4,
                               "prompt_source": "text", "seed": 0}, "test")
    config = RunConfig(mode="load", workload=spec, endpoint=RemoteEndpoint(url, "m", None, "completions", 5.0, False))
    return run_remote(config, lambda e: None, lambda: False)


def test_a_run_against_an_untrusted_server_ends_with_one_line(cert, monkeypatch):
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with RawServer(serve_each, ssl_context=server_tls(*cert)) as server:
        finished = drive(server.url)
    assert finished.error.startswith(f"every request failed: the TLS certificate of {server.url} was not accepted")
    assert "\n" not in finished.error and finished.summary.errors["tls_failure"] == 4


def test_a_run_through_a_refusing_proxy_ends_with_one_line(monkeypatch):
    with TunnelProxy(refuse=True) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        finished = drive("https://127.0.0.1:9/v1")
    assert finished.error == (f"every request failed: the proxy {proxy.url} refused the tunnel to 127.0.0.1:9: "
                              "HTTP/1.1 403 Forbidden")
