"""uvicorn over TLS inside a tollgate service: the runtime owns the signals, the certificate reloads live."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from tollgate.runtime.certificates import ServingCertificate

log = logging.getLogger("tollgate.webhook.server")

# Longer than the API server's idle-connection timeout (90 s), so it never reuses a connection we just closed.
KEEP_ALIVE_SECONDS = 120


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT belong to tollgate.runtime, which sets the stop event."""
        yield


class AdmissionServer:
    """Serves `app` over HTTPS on host:port until `stop()`; `tls` is polled for new certificate files."""

    def __init__(self, app: FastAPI, host: str, port: int, tls: ServingCertificate) -> None:
        self.tls = tls
        self.socket = _listen(host, port)
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(
            app,
            ssl_context_factory=lambda _config, _default: tls.ssl_context(),
            http="httptools",
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
        )
        self.server = _Server(config)

    @property
    def started(self) -> bool:
        return bool(self.server.started)

    async def serve(self) -> None:
        await self.server.serve(sockets=[self.socket])

    async def reload_certificates(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.tls.reload()

    def stop(self) -> None:
        self.server.should_exit = True


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
