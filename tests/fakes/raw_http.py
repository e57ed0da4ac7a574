"""Byte-exact servers for the streaming client's tests, on 127.0.0.1 at free ports, each on a thread of its own.

`RawServer`: every connection is handed to a script (an async function of reader, writer and the
connection's number) that writes exactly the bytes a test needs: events split across chunks,
CR line ends, a keep-alive connection closed while idle, TLS with a self-signed certificate.
`TunnelProxy`: an HTTP proxy that opens CONNECT tunnels and forwards absolute-form requests, or
refuses both with 403. `self_signed`: a certificate for 127.0.0.1 made with the openssl command.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import threading
from pathlib import Path

import pytest


class _Threaded:
    """An asyncio server on its own thread; `port` once started."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None):
        self.ssl_context = ssl_context
        self.port = 0
        self.num_connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def __enter__(self):
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test server did not start")
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._done.wait()

    async def _accept(self, reader, writer) -> None:
        self.num_connections += 1
        try:
            await self.handle(reader, writer, self.num_connections)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(self, reader, writer, number: int) -> None:
        raise NotImplementedError


class RawServer(_Threaded):
    def __init__(self, script, ssl_context: ssl.SSLContext | None = None):
        super().__init__(ssl_context)
        self.script = script
        self.request_lines: list[str] = []

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}/v1"

    async def handle(self, reader, writer, number: int) -> None:
        await self.script(self, reader, writer, number)

    async def read_request(self, reader) -> dict | None:
        """One request's body (JSON), or None when the client closed the connection."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        self.request_lines.append(lines[0])
        length = next(int(ln.split(":", 1)[1]) for ln in lines if ln.lower().startswith("content-length:"))
        return json.loads(await reader.readexactly(length))


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(text: str, finish: str | None = None, sep: bytes = b"\n") -> bytes:
    obj = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + sep + sep


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class TunnelProxy(_Threaded):
    """CONNECT tunnels and absolute-form forwarding, or `refuse`: 403 to everything."""

    def __init__(self, refuse: bool = False):
        super().__init__()
        self.refuse = refuse
        self.request_lines: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader, writer, number: int) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        first = head.split(b"\r\n", 1)[0].decode("latin-1")
        self.request_lines.append(first)
        if self.refuse:
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        method, target, _ = first.split(" ", 2)
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:   # absolute form: http://host:port/path
            hostport = target.split("://", 1)[1].split("/", 1)[0]
            host, port = hostport.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            path = "/" + target.split("://", 1)[1].split("/", 1)[1]
            up_writer.write(head.replace(target.encode(), path.encode(), 1))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader, writer) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate and key for 127.0.0.1 (and localhost), made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
