"""uvicorn inside a tollgate service: the runtime owns the signals, and over TLS a renewed certificate is served
without a restart (the webhook's HTTPS, the xds debug API)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from tollgate.runtime.certificates import ServingCertificate


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT belong to tollgate.runtime, which sets the stop event."""
        yield


class HTTPServer:
    """Serves the ASGI `app` on host:port until `stop()`: HTTPS when `tls` is given, its files read again every
    `reload_seconds` while serving, else plain HTTP."""

    def __init__(
        self,
        app: Callable[..., Any],
        host: str,
        port: int,
        tls: ServingCertificate | None = None,
        *,
        reload_seconds: float = 1.0,
        keep_alive_seconds: int = 5,
        max_concurrency: int | None = None,
    ) -> None:
        self.tls = tls
        self.reload_seconds = reload_seconds
        self.socket = _listen(host, port)
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(
            app,
            ssl_context_factory=None if tls is None else lambda _config, _default: tls.ssl_context(),
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_keep_alive=keep_alive_seconds,
            limit_concurrency=max_concurrency,  # above it: 503 at once, instead of a queue an attacker can grow
        )
        self.server = _Server(config)

    @property
    def started(self) -> bool:
        return bool(self.server.started)

    async def serve(self) -> None:
        reloading = None if self.tls is None else asyncio.create_task(self._reload_certificates(self.tls))
        try:
            await self.server.serve(sockets=[self.socket])
        finally:
            if reloading is not None:
                reloading.cancel()

    async def _reload_certificates(self, tls: ServingCertificate) -> None:
        while True:
            await asyncio.sleep(self.reload_seconds)
            tls.reload()

    def stop(self) -> None:
        self.server.should_exit = True


async def capped_body(headers: dict[bytes, bytes], receive: Receive, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to be over `limit` bytes: by its Content-Length before reading
    any of it, else (chunked) once more than `limit` bytes have arrived. A client gone before the end raises
    ClientDisconnect."""
    declared = headers.get(b"content-length", b"")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Its protocol is set explicitly: asyncio disables Nagle's algorithm only on sockets
    whose proto is IPPROTO_TCP, and without that every response waits ~40 ms for a delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock
