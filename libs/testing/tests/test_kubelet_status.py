"""Probes, restarts and the pod status the kubelet reports."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import grpc
import pytest

from tollgate.runtime.grpc_server import add_standard_services
from tollgate.testing.kubelet.probes import Probe, Threshold, check, parse_probe
from tollgate.testing.kubelet.spec import ContainerConfigError
from tollgate.testing.kubelet.status import ContainerView, pod_status, should_restart, terminated, waiting
from tollgate.testing.net import free_port

CONTAINER: dict[str, Any] = {"name": "c", "ports": [{"name": "health", "containerPort": 8080}]}


def test_probes_aim_at_the_pod_ip_and_named_ports() -> None:
    spec = {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 5}
    probe = parse_probe(spec, CONTAINER, "127.1.1.4")
    assert (probe.target, probe.period, probe.failure_threshold) == ("http://127.1.1.4:8080/readyz", 5, 3)
    assert parse_probe({"tcpSocket": {"port": 9443}}, CONTAINER, "127.1.1.4").target == "tcp 127.1.1.4:9443"
    with pytest.raises(ContainerConfigError, match="no port named 'https'"):
        parse_probe({"tcpSocket": {"port": "https"}}, CONTAINER, "127.1.1.4")


def test_a_threshold_flips_after_enough_outcomes_in_a_row() -> None:
    threshold = Threshold(Probe("tcpSocket", "h", 1, success_threshold=2, failure_threshold=3), passing=False)
    assert [threshold.observe(ok) for ok in (True, False, True, True, False, False, True, False, False, False)] == [
        False, False, False, True, True, True, True, True, True, False,
    ]  # fmt: skip
    assert threshold.failures == 3


async def test_checks_of_http_and_tcp() -> None:
    port = free_port()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        status = b"200 OK" if request.startswith(b"GET /readyz ") else b"503 Service Unavailable"
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", port)
    try:
        async with aiohttp.ClientSession() as session:
            assert await check(Probe("httpGet", "127.0.0.1", port, "/readyz"), session) is None
            assert await check(Probe("httpGet", "127.0.0.1", port, "/x"), session) == (
                "HTTP probe failed with statuscode: 503"
            )
            assert await check(Probe("tcpSocket", "127.0.0.1", port), session) is None
            server.close()
            await server.wait_closed()
            failure = await check(Probe("tcpSocket", "127.0.0.1", port), session)
            assert failure is not None and failure.startswith(f"tcp 127.0.0.1:{port}: ")
    finally:
        server.close()


async def test_checks_of_grpc_health() -> None:
    ready = {"value": False}
    server = grpc.aio.server()
    add_standard_services(server, ["tollgate.Example"], lambda: ready["value"])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    assert parse_probe({"grpc": {"port": port}}, CONTAINER, "127.0.0.1") == Probe("grpc", "127.0.0.1", port, "")
    try:
        async with aiohttp.ClientSession() as session:
            probe = Probe("grpc", "127.0.0.1", port, "tollgate.Example")
            assert await check(probe, session) == "service unhealthy (responded with 'NOT_SERVING')"
            ready["value"] = True
            assert await check(probe, session) is None
            unknown = await check(Probe("grpc", "127.0.0.1", port, "no.Such"), session)
            assert unknown == f"grpc 127.0.0.1:{port} service 'no.Such': NOT_FOUND: "
            await server.stop(None)
            failure = await check(probe, session)
            assert failure is not None and failure.startswith(f"grpc 127.0.0.1:{port} service 'tollgate.Example': ")
    finally:
        await server.stop(None)


def test_restart_policies() -> None:
    cases = [("Always", 0), ("OnFailure", 0), ("OnFailure", 2), ("Never", 1)]
    assert [should_restart(policy, code) for policy, code in cases] == [True, False, True, False]


def test_pod_status_phase_and_conditions() -> None:
    views = [ContainerView("a", "img"), ContainerView("b", "img")]
    creating = pod_status(views, [], "t0")
    assert creating["phase"] == "Pending"
    assert creating["conditions"][0] == {
        "type": "Ready",
        "status": "False",
        "reason": "ContainersNotReady",
        "message": "containers with unready status: [a b]",
        "lastTransitionTime": "t0",
    }
    views[0].state, views[0].ready = {"running": {"startedAt": "t1"}}, True
    running = pod_status(views, creating["conditions"], "t2")
    assert running["phase"] == "Running"
    assert running["conditions"][0]["lastTransitionTime"] == "t0"  # still not Ready: unchanged since t0
    assert running["containerStatuses"][0]["ready"] and not running["containerStatuses"][1]["ready"]
    views[1].state, views[1].ready = {"running": {"startedAt": "t3"}}, True
    ready = pod_status(views, running["conditions"], "t4")
    assert [(c["type"], c["status"], c["lastTransitionTime"]) for c in ready["conditions"]] == [
        ("Ready", "True", "t4"),
        ("ContainersReady", "True", "t4"),
    ]
    for view, code in zip(views, (0, 3), strict=True):
        view.state, view.ready, view.finished = terminated(code, "t1", "t5"), False, True
    assert pod_status(views, ready["conditions"], "t6")["phase"] == "Failed"
    assert views[1].status()["state"]["terminated"]["reason"] == "Error"
    assert waiting("CrashLoopBackOff", "back-off 10s") == {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}
    }
