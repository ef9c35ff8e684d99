"""Services on the embedded cluster: endpoints from the pods, ClusterIP listeners, and the hosts file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tollgate.testing.kubelet.hosts import HEADER, hosts_text, rewrite
from tollgate.testing.kubelet.proxy import ServiceProxy, endpoints, listeners
from tollgate.testing.net import free_port


def pod(name: str, ip: str, ready: bool = True, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "tollgate-system", "labels": labels or {"app": "xds"}, **meta},
        "spec": {"containers": [{"name": "c", "ports": [{"name": "xds", "containerPort": 18000}]}]},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def service(name: str, cluster_ip: str, port: int = 18000, target: int | str = "xds", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": spec.pop("namespace", "tollgate-system")},
        "spec": {
            "clusterIP": cluster_ip,
            "selector": {"app": "xds"},
            "ports": [{"port": port, "targetPort": target}],
            **spec,
        },
    }


PODS = [
    pod("xds-1", "127.1.2.5"),
    pod("xds-2", "127.1.1.3"),
    pod("unready", "127.1.1.1", ready=False),
    pod("leaving", "127.1.1.2", deletionTimestamp="2026-01-01T00:00:00Z"),
    pod("other", "127.1.1.4", labels={"app": "web"}),
]


def test_endpoints_are_the_ready_selected_pods_at_their_target_port() -> None:
    xds = service("tollgate-xds", "127.2.0.9")
    assert endpoints(xds, xds["spec"]["ports"][0], PODS) == [("127.1.1.3", 18000), ("127.1.2.5", 18000)]
    numbered = service("numbered", "127.2.0.10", port=80, target=8080)
    assert endpoints(numbered, numbered["spec"]["ports"][0], PODS[:1]) == [("127.1.2.5", 8080)]


def test_only_local_cluster_ips_are_served_and_only_tcp() -> None:
    udp = service("dns", "127.2.0.11", port=53, target=53)
    udp["spec"]["ports"][0]["protocol"] = "UDP"
    found = listeners([service("xds", "127.2.0.9"), service("old", "10.0.0.9"), service("headless", "None"), udp])
    assert list(found) == [("127.2.0.9", 18000)]


def test_the_hosts_file_maps_service_names_to_addresses_that_work() -> None:
    services = [
        service("tollgate-xds", "127.2.0.9"),
        service("headless", "None"),  # one ready endpoint, the lowest
        service("old", "10.0.0.7"),  # a ClusterIP nothing serves: an endpoint as well
        service("idle", "None", selector={"app": "none"}),  # no endpoint: no name
        service("kubernetes", "10.0.0.1", namespace="default", selector={}),
    ]
    text = hosts_text(services, PODS, "127.0.0.1", {"xds-1": "127.1.2.5"})
    assert text == HEADER + (
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "127.0.0.1\tkubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local\n"
        "127.1.1.3\theadless.tollgate-system.svc headless.tollgate-system.svc.cluster.local\n"
        "127.1.1.3\told.tollgate-system.svc old.tollgate-system.svc.cluster.local\n"
        "127.2.0.9\ttollgate-xds.tollgate-system.svc tollgate-xds.tollgate-system.svc.cluster.local\n"
        "127.1.2.5\txds-1\n"
    )


def test_the_hosts_file_is_rewritten_in_place(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    assert rewrite(hosts, "a long first version\n")
    inode = hosts.stat().st_ino
    assert rewrite(hosts, "short\n")
    assert not rewrite(hosts, "short\n")
    assert hosts.read_text() == "short\n" and hosts.stat().st_ino == inode


async def test_a_cluster_ip_forwards_to_a_ready_endpoint_keeping_the_clients_ip() -> None:
    backend_port, service_port = free_port("127.3.0.2"), free_port("127.3.0.1")

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = str(writer.get_extra_info("peername")[0])
        writer.write(f"pod, from {client}:".encode() + await reader.read(100))
        await writer.drain()
        writer.close()

    backend = await asyncio.start_server(echo, "127.3.0.2", backend_port)
    services = [service("echo", "127.3.0.1", port=service_port, target=backend_port)]
    pods = [pod("dead", "127.3.0.3"), pod("alive", "127.3.0.2")]  # a connection to the dead one is retried
    proxy = ServiceProxy(lambda: services, lambda: pods, ("127.0.0.1", 1))
    await proxy.sync()
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.3.0.1", service_port, local_addr=("127.3.0.9", 0))
            writer.write(b"hello")
            writer.write_eof()
            assert await reader.read() == b"pod, from 127.3.0.9:hello"
            writer.close()
        services.clear()
        await proxy.sync()
        try:
            await asyncio.open_connection("127.3.0.1", service_port)
            raise AssertionError("the listener of a deleted Service still accepts connections")
        except ConnectionRefusedError:
            pass
    finally:
        proxy.close()
        backend.close()
