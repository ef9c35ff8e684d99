import asyncio
import os
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio

from tollgate.testing.echo import TCPEcho, TCPListener, UDPEcho, tcp_request, udp_request
from tollgate.testing.envoy import EnvoyError, EnvoyProcess, static_cluster, tcp_proxy_listener, udp_proxy_listener
from tollgate.testing.net import free_port

HOST = "127.0.0.1"

# --- echo servers on their own ----------------------------------------------------------------------------------


async def test_udp_echo_prefixes_replies_and_counts() -> None:
    async with UDPEcho(HOST, name="udp-a") as echo:
        assert echo.port != 0
        source = (HOST, free_port(HOST, udp=True))
        assert await udp_request(HOST, echo.port, b"ping", source=source) == b"udp-a:ping"
        assert await udp_request(HOST, echo.port, b"pong") == b"udp-a:pong"
        assert echo.received == 2
        assert source in echo.peers
        assert len(echo.peers) == 2


async def test_udp_request_times_out_naming_the_address() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # bound, never answers
        silent.bind((HOST, 0))
        port = silent.getsockname()[1]
        with pytest.raises(TimeoutError, match=f"{HOST}:{port}"):
            await udp_request(HOST, port, b"anyone?", timeout=0.2)


async def test_tcp_echo_serves_concurrent_connections() -> None:
    async with TCPEcho(HOST, name="tcp-a") as echo:
        replies = await asyncio.gather(*(tcp_request(HOST, echo.port, f"m{i}".encode()) for i in range(20)))
        assert replies == [f"tcp-a:m{i}".encode() for i in range(20)]
        assert echo.connections == 20
        assert echo.received == 20


async def test_tcp_echo_echoes_each_chunk_and_stop_closes_open_connections() -> None:
    echo = TCPEcho(HOST, name="tcp-b")
    await echo.start()
    reader, writer = await asyncio.open_connection(HOST, echo.port)
    try:
        for payload in (b"one", b"two"):
            writer.write(payload)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(1024), 2) == b"tcp-b:" + payload
        await asyncio.wait_for(echo.stop(), 5)
        assert await asyncio.wait_for(reader.read(1024), 2) == b""  # server side closed the connection
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(HOST, echo.port)
    finally:
        writer.close()


async def test_tcp_listener_accepts_and_closes_while_up() -> None:
    listener = TCPListener(HOST)
    await listener.start()
    try:
        reader, writer = await asyncio.open_connection(HOST, listener.port)  # what a TCP health check does
        try:
            assert await asyncio.wait_for(reader.read(1024), 2) == b""  # accepted, then closed by the listener
        finally:
            writer.close()
        assert listener.connections == 1
    finally:
        await listener.stop()
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(HOST, listener.port)


# --- a real Envoy in front of the echo servers ----------------------------------------------------------------


def bootstrap(listeners: list[dict[str, Any]], clusters: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": {"id": "test-node", "cluster": "test"},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }


@dataclass
class Proxy:
    envoy: EnvoyProcess
    udp_echo: UDPEcho
    tcp_echo: TCPEcho
    udp_port: int
    tcp_port: int


@pytest_asyncio.fixture(scope="module")
async def proxy() -> AsyncIterator[Proxy]:
    async with UDPEcho(HOST, name="udp-echo") as udp_echo, TCPEcho(HOST, name="tcp-echo") as tcp_echo:
        udp_port, tcp_port = free_port(HOST, udp=True), free_port(HOST)
        config = bootstrap(
            [
                udp_proxy_listener("udp_in", HOST, udp_port, "udp_echo"),
                tcp_proxy_listener("tcp_in", HOST, tcp_port, "tcp_echo"),
            ],
            [static_cluster("udp_echo", [udp_echo.address]), static_cluster("tcp_echo", [tcp_echo.address])],
        )
        async with EnvoyProcess(config) as envoy:
            yield Proxy(envoy, udp_echo, tcp_echo, udp_port, tcp_port)


async def test_envoy_proxies_udp_to_the_echo_server(proxy: Proxy) -> None:
    before = proxy.udp_echo.received
    sources = [(HOST, free_port(HOST, udp=True)) for _ in range(2)]
    for source in sources:
        assert await udp_request(HOST, proxy.udp_port, b"dgram", source=source) == b"udp-echo:dgram"
    assert proxy.udp_echo.received == before + 2
    # The echo server saw Envoy's upstream sockets, not the clients: proof the datagrams went through the proxy.
    assert not set(sources) & proxy.udp_echo.peers
    assert await proxy.envoy.wait_for_stat("udp.udp_in.downstream_sess_rx_datagrams", lambda v: v >= 2, 5) >= 2


async def test_envoy_proxies_tcp_to_the_echo_server(proxy: Proxy) -> None:
    before = proxy.tcp_echo.connections
    assert await tcp_request(HOST, proxy.tcp_port, b"stream") == b"tcp-echo:stream"
    assert proxy.tcp_echo.connections == before + 1
    assert await proxy.envoy.wait_for_stat("tcp.tcp_in.downstream_cx_total", lambda v: v >= 1, 5) >= 1


async def test_admin_reports_both_listeners(proxy: Proxy) -> None:
    dump = await proxy.envoy.config_dump("static_listeners")
    assert {c["listener"]["name"] for c in dump["configs"]} == {"udp_in", "tcp_in"}

    bound = {
        status["name"]: status["local_address"]["socket_address"]["port_value"]
        for status in await proxy.envoy.listeners()
    }
    assert bound == {"udp_in": proxy.udp_port, "tcp_in": proxy.tcp_port}

    clusters = await proxy.envoy.clusters()
    assert f"udp_echo::{HOST}:{proxy.udp_echo.port}::" in clusters
    assert f"tcp_echo::{HOST}:{proxy.tcp_echo.port}::" in clusters


async def test_wait_for_stat_times_out_naming_the_stat(proxy: Proxy) -> None:
    with pytest.raises(TimeoutError, match=r"'tcp.tcp_in.downstream_cx_total'.*last: \d+"):
        await proxy.envoy.wait_for_stat("tcp.tcp_in.downstream_cx_total", lambda v: v < 0, 0.3)
    with pytest.raises(TimeoutError, match=r"'no.such.stat'.*last: absent"):
        await proxy.envoy.wait_for_stat("no.such.stat", lambda v: True, 0.3)


async def test_bad_bootstrap_raises_with_envoys_error() -> None:
    listener = tcp_proxy_listener("bad", HOST, free_port(HOST), "nowhere")
    bad_filter = listener["filter_chains"][0]["filters"][0]
    bad_filter["name"] = "tollgate.no_such_filter"
    del bad_filter["typed_config"]
    envoy = EnvoyProcess(bootstrap([listener], [static_cluster("nowhere", [(HOST, 9)])]))
    expected = "Didn't find a registered implementation for 'tollgate.no_such_filter'"
    with pytest.raises(EnvoyError, match=re.escape(expected)):
        await envoy.start()
    assert envoy.returncode not in (None, 0)


async def test_stop_leaves_no_process() -> None:
    envoy = EnvoyProcess(bootstrap([], []))
    await envoy.start()
    pid = envoy.pid
    assert pid is not None
    os.kill(pid, 0)  # alive
    await envoy.stop()
    assert envoy.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "exiting" in envoy.logs()  # the log outlives the temp dir


async def test_start_deadline_kills_the_process() -> None:
    envoy = EnvoyProcess(bootstrap([], []))
    with pytest.raises(EnvoyError, match="not ready after 0s"):
        await envoy.start(timeout=0)  # one /ready probe, sent before Envoy can possibly be up
    assert envoy.returncode is not None
