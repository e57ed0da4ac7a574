"""Opening a connection to the server as users expect of an HTTP client: TLS where the URL says https,
proxies from the environment, a connect timeout.

- TLS: the ssl module with verification on; the CA bundle is SSL_CERT_FILE / SSL_CERT_DIR when
  set, else certifi's (what httpx trusted before, so the same servers verify).
- Proxies: HTTP_PROXY / HTTPS_PROXY / ALL_PROXY and NO_PROXY (upper or lower case, read as urllib
  reads them). A plain-http URL goes through the proxy in absolute form (`POST http://host/...`);
  an https URL through a CONNECT tunnel, inside which TLS is to the server itself.
Failures keep their root cause (ConnectionRefusedError, socket.gaierror, ssl.SSLError) or are a
ProxyRefused, so the client can name each in one line.
"""
from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
import urllib.request
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

MAX_PROXY_HEAD = 16_384


class ProxyRefused(Exception):
    """The proxy answered CONNECT with something other than 200."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str   # "http" or "https"
    host: str
    port: int

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}"


@dataclass(frozen=True, slots=True)
class Proxy:
    origin: Origin
    auth: str | None   # the Proxy-Authorization header's value

    @property
    def shown(self) -> str:
        return self.origin.url   # never the credentials


def origin_of(url: str) -> Origin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r} (http or https)")
    return Origin(scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))


def proxy_for(origin: Origin) -> Proxy | None:
    """The proxy the environment names for this origin, or None (none set, or NO_PROXY covers it)."""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(origin.scheme) or proxies.get("all")
    if not url or urllib.request.proxy_bypass_environment(origin.host, proxies):
        return None
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    auth = None
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = "Basic " + base64.b64encode(user_pass.encode()).decode()
    return Proxy(origin_of(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"), auth)


def tls_context() -> ssl.SSLContext:
    cafile, capath = os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        try:
            import certifi
            cafile = certifi.where()
        except ImportError:   # the system's store, then
            pass
    context = ssl.create_default_context(cafile=cafile, capath=capath)
    context.set_alpn_protocols(["http/1.1"])
    return context


def opener(origin: Origin, proxy: Proxy | None, timeout_s: float):
    """A coroutine function `open(protocol_factory)` -> a connected protocol, for backend.targets.remote.http11.Pool."""
    loop = asyncio.get_running_loop()
    context = tls_context() if origin.scheme == "https" or (proxy and proxy.origin.scheme == "https") else None

    async def connect(factory):
        if proxy is None:
            _, protocol = await loop.create_connection(factory, origin.host, origin.port,
                                                       ssl=context if origin.scheme == "https" else None)
        elif origin.scheme == "http":   # requests go to the proxy in absolute form
            p = proxy.origin
            _, protocol = await loop.create_connection(factory, p.host, p.port,
                                                       ssl=context if p.scheme == "https" else None)
        else:
            sock = await _tunnel(loop, proxy, origin)
            try:
                _, protocol = await loop.create_connection(factory, sock=sock, ssl=context,
                                                           server_hostname=origin.host)
            except BaseException:
                sock.close()
                raise
        protocol.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return protocol

    async def open_(factory):
        try:
            return await asyncio.wait_for(connect(factory), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no connection within {timeout_s:g} s") from None

    return open_


async def _tunnel(loop, proxy: Proxy, origin: Origin) -> socket.socket:
    """A socket to the server through the proxy's CONNECT; TLS to the server goes inside it."""
    if proxy.origin.scheme == "https":
        raise ProxyRefused(f"the proxy {proxy.shown} is https: a CONNECT tunnel through TLS to the proxy "
                           "is not supported (give the proxy as http://)")
    error: OSError | None = None
    for family, kind, proto, _, address in await loop.getaddrinfo(proxy.origin.host, proxy.origin.port,
                                                                   type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
            break
        except OSError as exc:
            sock.close()
            error = exc
    else:
        raise error or OSError(f"no address for {proxy.origin.host}")
    try:
        head = f"CONNECT {origin.authority} HTTP/1.1\r\nHost: {origin.authority}\r\n"
        if proxy.auth:
            head += f"Proxy-Authorization: {proxy.auth}\r\n"
        await loop.sock_sendall(sock, (head + "\r\n").encode("latin-1"))
        reply = b""
        while b"\r\n\r\n" not in reply:
            piece = await loop.sock_recv(sock, 4096)
            if not piece or len(reply) > MAX_PROXY_HEAD:
                raise ProxyRefused(f"the proxy {proxy.shown} closed the connection instead of answering CONNECT")
            reply += piece
        status_line = reply.split(b"\r\n", 1)[0].decode("latin-1")
        status = status_line.split(" ", 2)
        if len(status) < 2 or status[1] != "200":
            raise ProxyRefused(f"the proxy {proxy.shown} refused the tunnel to {origin.authority}: {status_line}")
        return sock
    except BaseException:
        sock.close()
        raise
