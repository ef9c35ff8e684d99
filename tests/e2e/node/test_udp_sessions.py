"""UDP proxy capacity end to end: thousands of concurrent client sessions through a real Envoy UDP listener that
tollgate-xds configures from a VirtualService, none dropped; a small `max_sessions` overflows, and `idle_timeout`
closes idle sessions.

Every client is a socket of its own (a distinct source port), all held open at once, so that Envoy's UDP proxy
keeps one session per client. Datagrams go out a window at a time and every one must be answered: nothing is
sent twice. The window keeps the socket buffers (212992 bytes by default, a few hundred small datagrams)
from overflowing in the kernel, which would drop datagrams before Envoy could count them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import resource
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.models.udp import DEFAULT_MAX_SESSIONS
from tollgate.testing import xds
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.wait import eventually

pytestmark = pytest.mark.e2e

SESSIONS = 2500  # more than twice Envoy's default circuit breaker (1024 sessions)
SMALL_LIMIT = 100
SMALL_IDLE_TIMEOUT_MS = 1000
WINDOW = 100
# Client sockets in this process, upstream sockets in Envoy, and room for the rest.
OPEN_FILES = SESSIONS + 3 * SMALL_LIMIT + 1024


@pytest.fixture
def open_files() -> Iterator[None]:
    """This process's soft RLIMIT_NOFILE raised to OPEN_FILES: a socket per client session."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard >= OPEN_FILES, f"RLIMIT_NOFILE hard limit {hard} is below the {OPEN_FILES} this test needs"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, OPEN_FILES), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class _Client(asyncio.DatagramProtocol):
    def __init__(self, number: int) -> None:
        self.payload = b"session %d" % number
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if not self.reply.done():
            self.reply.set_result(data)


@contextlib.asynccontextmanager
async def clients(host: str, port: int, count: int) -> AsyncIterator[list[_Client]]:
    """`count` UDP sockets connected to host:port, each from a source port of its own, open until the end."""
    loop = asyncio.get_running_loop()
    opened: list[_Client] = []
    try:
        for number in range(count):
            _, protocol = await loop.create_datagram_endpoint(
                functools.partial(_Client, number), remote_addr=(host, port)
            )
            opened.append(protocol)
        yield opened
    finally:
        for protocol in opened:
            if protocol.transport is not None:
                protocol.transport.close()


def send(sessions: list[_Client]) -> None:
    for session in sessions:
        assert session.transport is not None
        session.transport.sendto(session.payload)


async def exchange(sessions: list[_Client]) -> int:
    """One datagram from each client, WINDOW in flight at a time, until a window is not answered in full; how many
    clients got their own datagram echoed."""
    answered = 0
    for start in range(0, len(sessions), WINDOW):
        window = sessions[start : start + WINDOW]
        send(window)
        await asyncio.wait([s.reply for s in window], timeout=5)
        echoed = sum(s.reply.done() and s.reply.result() == b"echo:" + s.payload for s in window)
        answered += echoed
        if echoed < len(window):
            break
    return answered


async def overflowed(envoy_ip: str, cluster: str, count: int) -> None:
    async def reached() -> bool:
        return (await xds.stats(envoy_ip)).get(f"cluster.{cluster}.upstream_cx_overflow", 0) >= count

    await eventually(reached, f"{count} session overflows on {cluster}", timeout=10)


def open_files_limit(pid: int) -> int:
    """The soft RLIMIT_NOFILE of process `pid`."""
    line = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines() if "open files" in line)
    return int(line.split()[3])


async def test_thousands_of_udp_sessions_fit_and_a_small_limit_overflows(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    open_files: None,
) -> None:
    server = xds.start_xds(run_service, xds.xds_settings(cluster.host_address))
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        wide = xds.udp_virtual_service("wide", "wide-l", 3101, "wide-c", target)
        narrow = xds.udp_virtual_service(
            "narrow", "narrow-l", 3102, "narrow-c", target, max_sessions=SMALL_LIMIT, idle_timeout=SMALL_IDLE_TIMEOUT_MS
        )
        # Stats carry the Envoy names of the listeners and clusters: <namespace>/<virtual service>/<name>.
        wide_l, wide_c = f"{namespace}/wide/wide-l", f"{namespace}/wide/wide-c"
        narrow_l, narrow_c = f"{namespace}/narrow/narrow-l", f"{namespace}/narrow/narrow-c"
        for body in (wide, narrow):
            custom.create_namespaced_custom_object(xds.GROUP, xds.VERSION, namespace, xds.PLURAL, body)
        xds.envoy_pod(core, namespace, "edge", server, {"app": "edge"}, delta=True)
        envoy_ip, container = await xds.running_envoy(core, namespace, "edge")
        envoy_pid = cluster.node().container_pid(container)
        assert open_files_limit(envoy_pid) >= OPEN_FILES, "Envoy cannot open a socket a session"
        for name in ("wide", "narrow"):
            await xds.condition(custom, namespace, name, "Programmed", "Programmed")

        async def listening() -> bool:
            return (await xds.stats(envoy_ip)).get("listener_manager.total_listeners_active") == 2

        await eventually(listening, "both UDP listeners to be active on the Envoy")

        async with clients(envoy_ip, 3101, SESSIONS) as many:
            started = time.monotonic()
            answered = await exchange(many)
            seconds = time.monotonic() - started
            assert answered == SESSIONS, f"only {answered} of {SESSIONS} sessions got their datagram echoed"
            after = await xds.stats(envoy_ip)
            assert after[f"udp.{wide_l}.downstream_sess_active"] >= SESSIONS
            assert after[f"cluster.{wide_c}.upstream_cx_overflow"] == 0
            assert after[f"cluster.{wide_c}.circuit_breakers.default.remaining_cx"] == DEFAULT_MAX_SESSIONS - SESSIONS
            print(f"\n{answered} concurrent UDP sessions, every datagram echoed once, in {seconds:.2f} s")

            async with clients(envoy_ip, 3102, 3 * SMALL_LIMIT) as few:
                assert await exchange(few[:SMALL_LIMIT]) == SMALL_LIMIT
                for start in range(SMALL_LIMIT, len(few), WINDOW):
                    send(few[start : start + WINDOW])
                    await overflowed(envoy_ip, narrow_c, start + WINDOW - SMALL_LIMIT)
                assert not [c for c in few[SMALL_LIMIT:] if c.reply.done()], "datagrams over max_sessions are dropped"
                narrowed = await xds.stats(envoy_ip)
                assert narrowed[f"cluster.{narrow_c}.upstream_cx_overflow"] == 2 * SMALL_LIMIT
                assert narrowed[f"udp.{narrow_l}.downstream_sess_active"] == SMALL_LIMIT
                assert narrowed[f"cluster.{narrow_c}.circuit_breakers.default.remaining_cx"] == 0

                async def idle_closed() -> dict[str, int] | None:
                    now = await xds.stats(envoy_ip)
                    return now if now[f"udp.{narrow_l}.downstream_sess_active"] == 0 else None

                closed = await eventually(idle_closed, "the narrow listener's sessions to time out", timeout=10)
                assert closed[f"udp.{narrow_l}.idle_timeout"] == SMALL_LIMIT
                assert closed[f"udp.{wide_l}.downstream_sess_active"] >= SESSIONS, "the wide listener keeps sessions"
                assert closed[f"cluster.{wide_c}.upstream_cx_overflow"] == 0
