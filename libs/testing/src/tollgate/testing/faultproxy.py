"""A TCP proxy that injects network faults between a service and a server it calls (the API server, a gRPC
peer), for tests that need an uncertain outcome for real rather than a mocked exception.

Modes, switched at any moment, for open connections and new ones alike:

- `PASS`: bytes flow both ways.
- `DROP_RESPONSES`: requests reach the server, whatever it answers is discarded. A write the server applied
  looks to the caller like a timeout: the uncertain outcome.
- `FREEZE`: nothing flows either way (bytes are held, not lost) until the mode changes: a half-open or stalled
  connection, as a frozen peer or a partitioned network shows it. Held bytes flow again afterwards.
- `FREEZE_OPEN`: the connections open at the switch freeze as in FREEZE, new ones pass: a half-open connection as
  it really looks after a NAT, a load balancer or the peer lost its state. Only a client that gives up on the old
  connection and opens a new one gets through.
- `REFUSE`: new connections are closed at once and open ones are cut: the server is unreachable.

TLS passes through untouched: the proxy sees only bytes, so the client verifies the server's certificate as
usual (for an IP SAN, only the address must match, not the port).

The proxy runs its own event loop in a thread, so a synchronous test and an asyncio test drive it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import yaml

from tollgate.testing.net import free_port

CHUNK = 65536


class Mode(enum.Enum):
    PASS = "pass"
    DROP_RESPONSES = "drop-responses"
    FREEZE = "freeze"
    FREEZE_OPEN = "freeze-open"
    REFUSE = "refuse"


class FaultProxy:
    """`with FaultProxy("127.0.0.1", 6443) as proxy:` listens on `proxy.address` and forwards to the target."""

    def __init__(self, target_host: str, target_port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.host = listen_host
        self.port = free_port(listen_host)
        self._mode = Mode.PASS
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.Event] = {}  # each one's "bytes may flow" flag
        self.accepted = 0
        self.dropped_bytes = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode) -> None:
        """Switch the fault; returns once open connections see it (REFUSE has cut them)."""
        asyncio.run_coroutine_threadsafe(self._switch(mode), self._loop).result(timeout=10)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)

    async def _switch(self, mode: Mode) -> None:
        self._mode = mode
        for flowing in self._connections.values():
            if mode in (Mode.FREEZE, Mode.FREEZE_OPEN):
                flowing.clear()
            else:
                flowing.set()
        if mode is Mode.REFUSE:
            for task in list(self._connections):
                task.cancel()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._mode is Mode.REFUSE:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        flowing = asyncio.Event()
        if self._mode is not Mode.FREEZE:
            flowing.set()
        self._connections[task] = flowing
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
            await asyncio.gather(
                self._pump(reader, upstream_writer, flowing, response=False),
                self._pump(upstream_reader, writer, flowing, response=True),
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._connections.pop(task, None)
            for stream in (writer, upstream_writer):
                if stream is not None:
                    stream.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, flowing: asyncio.Event, *, response: bool
    ) -> None:
        while True:
            data = await source.read(CHUNK)
            if not data:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            await flowing.wait()
            if response and self._mode is Mode.DROP_RESPONSES:
                self.dropped_bytes += len(data)
                continue
            sink.write(data)
            await sink.drain()


async def break_the_network(
    proxy: FaultProxy, until: asyncio.Event, seed: int, calm: tuple[float, float] = (2, 4)
) -> int:
    """Until `until` is set: let calls through for a while (`calm` seconds, drawn), then forward requests but drop
    the answers, then cut every connection (calls waiting for a dropped answer fail: they may or may not have been
    applied); the number of such rounds."""
    rng, rounds = random.Random(seed), 0
    while not until.is_set():
        await asyncio.sleep(rng.uniform(*calm))
        await asyncio.to_thread(proxy.set_mode, Mode.DROP_RESPONSES)
        await asyncio.sleep(rng.uniform(0.3, 0.8))
        await asyncio.to_thread(proxy.set_mode, Mode.REFUSE)
        await asyncio.to_thread(proxy.set_mode, Mode.PASS)
        rounds += 1
    return rounds


def proxied_kubeconfig(kubeconfig: Path, proxy: FaultProxy, destination: Path) -> Path:
    """A copy of `kubeconfig` whose current cluster's server is `proxy` (same scheme and CA)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    parts = urlsplit(cluster["server"])
    cluster["server"] = urlunsplit(parts._replace(netloc=proxy.address))
    destination.write_text(yaml.safe_dump(config))
    return destination


def server_of(kubeconfig: Path) -> tuple[str, int]:
    """The (host, port) of the API server that `kubeconfig`'s current context talks to."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    server = urlsplit(next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]["server"])
    assert server.hostname is not None and server.port is not None, server
    return server.hostname, server.port


@contextlib.contextmanager
def api_server_proxy(kubeconfig: Path, directory: Path) -> Iterator[tuple[FaultProxy, Path]]:
    """A FaultProxy in front of `kubeconfig`'s API server, and a kubeconfig that goes through it."""
    with FaultProxy(*server_of(kubeconfig)) as proxy:
        yield proxy, proxied_kubeconfig(kubeconfig, proxy, directory / f"kubeconfig-via-{proxy.port}")
