"""Loopback UDP/TCP/HTTP echo servers and one-shot clients for tests.

Every echo reply is ``name.encode() + b":" + payload`` (for HTTP, the request path as the payload) so a test can
tell which server answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self, cast

from aiohttp import web

__all__ = ["HTTPEcho", "TCPEcho", "TCPListener", "UDPEcho", "tcp_request", "udp_request"]

_READ_SIZE = 65536


class _Server:
    """Shared start/stop/``async with`` plumbing; subclasses implement ``_open`` and ``_close``."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.host = host
        self.port = port
        self._running = False

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    async def start(self) -> None:
        if self._running:
            raise RuntimeError(f"{self!r} already started")
        self.port = await self._open()
        self._running = True

    async def stop(self) -> None:
        if self._running:
            self._running = False
            await self._close()

    async def _open(self) -> int:
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.host}:{self.port})"


class _UDPEchoProtocol(asyncio.DatagramProtocol):
    def __init__(self, owner: UDPEcho) -> None:
        self._owner = owner
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance() check: on Python 3.11 the selector datagram transport does not subclass DatagramTransport.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        self._owner.received += 1
        self._owner.peers.add((str(addr[0]), addr[1]))
        assert self.transport is not None
        self.transport.sendto(self._owner.prefix + data, addr)


class UDPEcho(_Server):
    """UDP echo server; ``received`` counts datagrams, ``peers`` holds the distinct source addresses seen."""

    def __init__(self, host: str, port: int = 0, *, name: str) -> None:
        super().__init__(host, port)
        self.name = name
        self.prefix = name.encode() + b":"
        self.received = 0
        self.peers: set[tuple[str, int]] = set()
        self._transport: asyncio.DatagramTransport | None = None

    async def _open(self) -> int:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _UDPEchoProtocol(self), local_addr=(self.host, self.port)
        )
        self._transport = transport
        port: int = transport.get_extra_info("sockname")[1]
        return port

    async def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


class _StreamServer(_Server):
    """TCP server that tracks its connections so ``stop()`` closes them and waits for their handlers."""

    def __init__(self, host: str, port: int = 0) -> None:
        super().__init__(host, port)
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    async def _open(self) -> int:
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        try:
            if self._running:  # else accepted just before stop(): drop it
                await self._serve(reader, writer)
        except ConnectionError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        # Closing the transports feeds EOF to the readers, so every handler returns on its own. This must come
        # before wait_closed(), which on Python >= 3.12 waits for every open connection.
        for writer in list(self._writers):
            writer.close()
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=5)
        await self._server.wait_closed()
        self._server = None


class TCPEcho(_StreamServer):
    """TCP echo server: echoes every chunk it reads, prefixed; ``received`` counts chunks."""

    def __init__(self, host: str, port: int = 0, *, name: str) -> None:
        super().__init__(host, port)
        self.name = name
        self.prefix = name.encode() + b":"
        self.received = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(_READ_SIZE):
            self.received += 1
            writer.write(self.prefix + chunk)
            await writer.drain()


class TCPListener(_StreamServer):
    """Accepts TCP connections and closes them at once: a health-check port that is "up" while started."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None


class HTTPEcho(_Server):
    """HTTP server answering every request with ``name:path``; ``received`` counts requests."""

    def __init__(self, host: str, port: int, *, name: str) -> None:
        super().__init__(host, port)
        self.name = name
        self.received = 0
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.Response:
        self.received += 1
        return web.Response(text=f"{self.name}:{request.path}")

    async def _open(self) -> int:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        return self.port

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class _UDPClientProtocol(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        if not self.reply.done():
            self.reply.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.reply.done():
            self.reply.set_exception(exc)


async def udp_request(
    host: str,
    port: int,
    payload: bytes,
    timeout: float = 2.0,
    source: tuple[str, int] | None = None,
) -> bytes:
    """Send one datagram (optionally from ``source``) and return the first datagram that comes back.

    An ICMP "port unreachable" surfaces as ConnectionRefusedError; silence as TimeoutError.
    """
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        _UDPClientProtocol, remote_addr=(host, port), local_addr=source
    )
    try:
        transport.sendto(payload)
        async with asyncio.timeout(timeout):
            return await protocol.reply
    except TimeoutError:
        raise TimeoutError(f"no UDP reply from {host}:{port} within {timeout}s") from None
    finally:
        transport.close()


async def tcp_request(host: str, port: int, payload: bytes, timeout: float = 2.0) -> bytes:
    """Connect, send ``payload``, return the first chunk read back, close.

    Raises ConnectionError if the peer closes without replying.
    """
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(payload)
            await writer.drain()
            reply = await reader.read(_READ_SIZE)
    except TimeoutError:
        raise TimeoutError(f"no TCP reply from {host}:{port} within {timeout}s") from None
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
    if not reply:
        raise ConnectionError(f"{host}:{port} closed the connection without replying")
    return reply
