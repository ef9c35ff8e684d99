"""tollgate-xds end to end: the real service, the embedded cluster and Envoy containers on its real node.

Worker pods are pods on KWOK's nodes; their "process" is an echo server this test binds to the pod's IP (put on
this machine). The seed's address endpoint `tcp-echo.default.svc` is resolved by a small DNS server this test runs
where pods reach the host, which the xds service hands to Envoy through TOLLGATE_XDS_DNS_RESOLVERS.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import struct
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import TCPEcho, TCPListener, UDPEcho, tcp_request, udp_request
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import eventually
from tollgate.testing.xds import (
    GROUP,
    PLURAL,
    VERSION,
    admin,
    answer,
    answers,
    apply_vs,
    condition,
    envoy_pod,
    events,
    kwok_pod,
    port_taken,
    running_envoy,
    start_xds,
    stats,
    udp_virtual_service,
    xds_settings,
)

pytestmark = pytest.mark.e2e

SAMPLES = repo_root() / "deploy" / "samples"
SEED_ADDRESS = "tcp-echo.default.svc"


# --- a DNS server for the address endpoint ----------------------------------------------------------------------


class _DNS(asyncio.DatagramProtocol):
    """Answers A queries for the names it knows (NXDOMAIN otherwise); enough for Envoy's c-ares resolver."""

    def __init__(self, records: dict[str, str]) -> None:
        self.records = records
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        query_id = struct.unpack("!H", data[:2])[0]
        offset, labels = 12, []
        while data[offset]:
            length = data[offset]
            labels.append(data[offset + 1 : offset + 1 + length].decode())
            offset += 1 + length
        qtype = struct.unpack("!H", data[offset + 1 : offset + 3])[0]
        question = data[12 : offset + 5]
        name = ".".join(labels).lower()
        answer = b""
        if qtype == 1 and name in self.records:
            answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(self.records[name])
        rcode = 0 if name in self.records else 3
        header = struct.pack("!HHHHHH", query_id, 0x8580 | rcode, 1, 1 if answer else 0, 0, 0)
        assert self.transport is not None
        self.transport.sendto(header + question + answer, addr)


@contextlib.asynccontextmanager
async def dns_server(host: str, records: dict[str, str]) -> AsyncIterator[str]:
    port = free_port(udp=True)
    transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(
        lambda: _DNS(records), local_addr=(host, port)
    )
    try:
        yield f"{host}:{port}"
    finally:
        transport.close()


# --- the services ------------------------------------------------------------------------------------------------


@pytest.fixture
def xds_env(cluster: EmbeddedCluster) -> dict[str, str]:
    return xds_settings(cluster.host_address)


# --- VirtualServices ---------------------------------------------------------------------------------------------


def edit_vs(custom: client.CustomObjectsApi, namespace: str, name: str, edit: Any) -> None:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[assignment]
    edit(obj["spec"])
    custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, obj)


# --- tests -------------------------------------------------------------------------------------------------------


async def test_seed_virtual_service_forwards_udp_by_hash_key_health_and_edits(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    address = cluster.remote_address()
    async with dns_server(cluster.host_address, {SEED_ADDRESS: address}) as resolver:
        xds = start_xds(run_service, {**xds_env, "TOLLGATE_XDS_DNS_RESOLVERS": resolver})
        seed = yaml.safe_load((SAMPLES / "seed-virtualservice.yaml").read_text())
        apply_vs(custom, namespace, seed)
        ips = {name: await kwok_pod(cluster, namespace, name, {"app": "worker"}) for name in ("worker-0", "worker-1")}
        ips["address"] = address
        async with contextlib.AsyncExitStack() as stack:
            echoes = {n: await stack.enter_async_context(UDPEcho(ip, 1234, name=n)) for n, ip in ips.items()}
            checks = {n: await stack.enter_async_context(TCPListener(ip, 1233)) for n, ip in ips.items()}

            envoy_pod(core, namespace, "ingress", xds, {"app": "ingress"}, delta=False)
            envoy_ip, container = await running_envoy(core, namespace, "ingress")
            first = await eventually(
                lambda: answer(envoy_ip, 2001),
                "a UDP reply through Envoy on port 2001",
                timeout=30,
                ignore=(TimeoutError, ConnectionError),
            )
            assert await answers(envoy_ip, 2001) == {first}, "one hash key: every session on one endpoint"

            obj = await condition(custom, namespace, "ingress-callid", "Programmed", "Programmed")
            assert (obj["status"]["proxies"], obj["status"]["programmed_proxies"]) == (1, 1)
            assert obj["status"]["envoys"] == [
                {"node": f"ingress.{namespace}", "state": "Programmed", "generation": obj["metadata"]["generation"]}
            ]

            served = [first]
            while len(served) < len(ips):
                await checks[served[-1]].stop()  # its health-check port goes away: Envoy ejects it

                async def moved(before: str = served[-1]) -> str | None:
                    who = await answer(envoy_ip, 2001)
                    return who if who != before else None

                served.append(
                    await eventually(moved, f"traffic to move off {served[-1]}", timeout=20, ignore=(TimeoutError,))
                )
            assert sorted(served) == sorted(ips), "the selected workers and the address endpoint all served"

            for name in served[:-1]:
                await checks[name].start()
            edit_vs(
                custom,
                namespace,
                "ingress-callid",
                lambda spec: (
                    spec["listeners"][0]["udp"].update(port=2011),
                    spec["listeners"][0]["udp"]["cluster"]["endpoints"].pop(1),
                ),
            )
            await eventually(
                lambda: answer(envoy_ip, 2011),
                "Envoy to listen on the new port 2011",
                timeout=30,
                ignore=(TimeoutError, ConnectionError),
            )
            await eventually(
                lambda: answer(envoy_ip, 2011, b"y"),
                "a worker to serve again",
                timeout=20,
                ignore=(TimeoutError, ConnectionError),
            )
            received = echoes["address"].received
            assert await answers(envoy_ip, 2011) <= {"worker-0", "worker-1"}
            assert echoes["address"].received == received, "the removed endpoint gets nothing"
            with pytest.raises((TimeoutError, ConnectionError)):
                await udp_request(envoy_ip, 2001, b"old port", timeout=0.5)
            assert await running_envoy(core, namespace, "ingress") == (envoy_ip, container), "Envoy was not restarted"
            await condition(custom, namespace, "ingress-callid", "Programmed", "Programmed")
            assert events(core, namespace, "ingress-callid", "Programmed")


async def test_tcp_eds_follows_pods_and_survives_an_xds_restart(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    xds = start_xds(run_service, xds_env)
    apply_vs(custom, namespace, yaml.safe_load((SAMPLES / "virtualservice-tcp-eds.yaml").read_text()))
    first_ip = await kwok_pod(cluster, namespace, "tcp-echo-0", {"app": "tcp-echo"})
    async with TCPEcho(first_ip, 7000, name="tcp-echo-0"):
        envoy_pod(core, namespace, "ingress", xds, {"app": "ingress"}, delta=True)
        envoy_ip, container = await running_envoy(core, namespace, "ingress")
        reply = await eventually(
            lambda: tcp_request(envoy_ip, 2002, b"hello"),
            "a TCP echo through Envoy",
            timeout=30,
            ignore=(TimeoutError, ConnectionError),
        )
        assert reply == b"tcp-echo-0:hello"

        node = f"ingress.{namespace}"
        sync = await eventually(
            lambda: asyncio.to_thread(lambda: [s for s in xds.api(f"/debug/envoys/{node}") if s["in_sync"]]),
            "the Envoy to be in sync",
        )
        listeners = sync[0]["types"]["listeners"]
        assert (sync[0]["api"], listeners["acked_version"], listeners["nack"]) == (
            "delta",
            listeners["sent_version"],
            None,
        )
        dump = xds.api(f"/debug/envoys/{node}/config_dump")
        assert [c["name"] for c in dump["clusters"]] == [f"{namespace}/tcp-echo/tcp-echo-c"]
        assert dump["clusters"][0]["type"] == "EDS"
        before = await stats(envoy_ip)

        second_ip = await kwok_pod(cluster, namespace, "tcp-echo-1", {"app": "tcp-echo"})
        async with TCPEcho(second_ip, 7000, name="tcp-echo-1"):

            async def both() -> bool:
                seen = {(await tcp_request(envoy_ip, 2002, b"x")).split(b":")[0] for _ in range(6)}
                return seen == {b"tcp-echo-0", b"tcp-echo-1"}

            await eventually(both, "the new pod to receive connections", timeout=30, ignore=(ConnectionError,))
            after = await stats(envoy_ip)
            assert after["cluster_manager.cds.update_success"] == before["cluster_manager.cds.update_success"], (
                "endpoints changed without resending the cluster"
            )

            metrics = xds.metrics()
            for name in (
                "tollgate_xds_connected_envoys",
                "tollgate_xds_pushes_total",
                "tollgate_xds_convergence_seconds_bucket",
            ):
                assert name in metrics, f"{name} missing from /metrics"

            xds.process.stop()
            assert await tcp_request(envoy_ip, 2002, b"alone") in (b"tcp-echo-0:alone", b"tcp-echo-1:alone")
            xds = start_xds(run_service, xds_env)
            await eventually(
                lambda: asyncio.to_thread(lambda: [s for s in xds.api(f"/debug/envoys/{node}") if s["in_sync"]]),
                "the Envoy to reconnect and resync",
                timeout=60,
                ignore=(OSError,),
            )
            resynced = await stats(envoy_ip)
            for stat in (
                "listener_manager.listener_modified",
                "listener_manager.listener_added",
                "cluster_manager.cluster_modified",
                "cluster_manager.cluster_added",
            ):
                assert resynced[stat] == after[stat], f"{stat}: the resync changed what Envoy runs"

            core.delete_namespaced_pod("tcp-echo-0", namespace, grace_period_seconds=0)

            async def only_second() -> bool:
                return {(await tcp_request(envoy_ip, 2002, b"x")).split(b":")[0] for _ in range(6)} == {b"tcp-echo-1"}

            await eventually(
                only_second, "the deleted pod to leave the endpoints", timeout=30, ignore=(ConnectionError,)
            )
        assert await running_envoy(core, namespace, "ingress") == (envoy_ip, container)


async def test_rejected_config_keeps_the_last_good_one_and_collisions_are_reported(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    xds = start_xds(run_service, xds_env)
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        apply_vs(custom, namespace, udp_virtual_service("first", "edge-l", 3001, "edge-c", target))
        envoy_pod(core, namespace, "edge", xds, {"app": "edge"}, delta=False)
        envoy_ip, container = await running_envoy(core, namespace, "edge")
        await eventually(
            lambda: answer(envoy_ip, 3001),
            "Envoy to forward on 3001",
            timeout=30,
            ignore=(TimeoutError, ConnectionError),
        )
        await condition(custom, namespace, "first", "Programmed", "Programmed")

        with port_taken(cluster, container, 3002):
            edit_vs(custom, namespace, "first", lambda spec: spec["listeners"][0]["udp"].update(port=3002))
            rejected = await condition(custom, namespace, "first", "Programmed", "Rejected")
            message = next(c for c in rejected["status"]["conditions"] if c["type"] == "Programmed")["message"]
            assert message.startswith(f"Envoy edge.{namespace} rejected generation 2: ")
            assert "edge-l" in message
            assert rejected["status"]["envoys"][0]["state"] == "Rejected"
            assert rejected["status"]["envoys"][0]["generation"] == 1
            assert await answer(envoy_ip, 3001) == "echo", "Envoy keeps serving the previous version"
            assert (await stats(envoy_ip))["listener_manager.lds.update_rejected"] == 1, (
                "the NACKed config is not resent"
            )
            await eventually(
                lambda: asyncio.to_thread(events, core, namespace, "first", "Rejected"), "an Event with Envoy's error"
            )
            nacks = [line for line in xds.metrics().splitlines() if line.startswith("tollgate_xds_nacks_total{")]
            assert [line.rsplit(" ", 1)[1] for line in nacks if 'type="listeners"' in line] == ["1.0"]

        edit_vs(custom, namespace, "first", lambda spec: spec["listeners"][0]["udp"]["cluster"].update(hash_key="k"))
        await condition(custom, namespace, "first", "Programmed", "Programmed")
        assert await answer(envoy_ip, 3002) == "echo", "the next change retried and Envoy took it"

        # The same listener and cluster names in another VirtualService are its own; the same port collides.
        apply_vs(custom, namespace, udp_virtual_service("second", "edge-l", 3002, "edge-c", target))
        second = await condition(custom, namespace, "second", "Conflicted", "NameConflict")
        loser = next(c for c in second["status"]["conditions"] if c["type"] == "Conflicted")["message"]
        assert loser == (
            f"spec.listeners[0] is not served on Envoy edge.{namespace}: UDP port 3002 is already "
            f"defined by VirtualService {namespace}/first"
        )
        first = await condition(custom, namespace, "first", "Conflicted", "NameConflict")
        winner = next(c for c in first["status"]["conditions"] if c["type"] == "Conflicted")["message"]
        assert f"also defined by VirtualService {namespace}/second" in winner
        assert await answer(envoy_ip, 3002) == "echo", "the older VirtualService keeps its listener"
        await eventually(lambda: asyncio.to_thread(events, core, namespace, "second", "Conflict"), "a Conflict Event")


async def test_the_same_names_in_two_namespaces_each_reach_their_own_envoy(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    other_namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    """Two tenants use the same VirtualService, listener, cluster and endpoint names and the same port: each
    Envoy gets its own tenant's listener, under a name the status gives and Envoy's config dump shows."""
    xds = start_xds(run_service, xds_env)
    tenants = (namespace, other_namespace)
    async with contextlib.AsyncExitStack() as stack:
        for tenant in tenants:
            target = cluster.remote_address()
            await stack.enter_async_context(UDPEcho(target, 1234, name=tenant))
            apply_vs(custom, tenant, udp_virtual_service("edge", "edge-l", 3001, "edge-c", target))
            envoy_pod(core, tenant, "edge", xds, {"app": "edge"}, delta=True)
        for tenant in tenants:
            envoy_ip, _ = await running_envoy(core, tenant, "edge")
            replier = await eventually(
                partial(answer, envoy_ip, 3001),
                f"the Envoy of {tenant} to forward on 3001",
                timeout=30,
                ignore=(TimeoutError, ConnectionError),
            )
            assert replier == tenant, "each Envoy forwards to its own tenant's endpoint"
            obj = await condition(custom, tenant, "edge", "Programmed", "Programmed")
            conflicted = next(c for c in obj["status"]["conditions"] if c["type"] == "Conflicted")
            assert conflicted["status"] == "False"
            names = {
                "listener": "edge-l",
                "envoy_listener": f"{tenant}/edge/edge-l",
                "cluster": "edge-c",
                "envoy_cluster": f"{tenant}/edge/edge-c",
            }
            assert obj["status"]["envoy_names"] == [names]
            assert xds.api(f"/debug/envoys/edge.{tenant}")[0]["envoy_names"] == {
                f"VirtualService {tenant}/edge": [names]
            }
            listeners = await admin(envoy_ip, "/config_dump?resource=dynamic_listeners")
            assert [c["name"] for c in listeners["configs"]] == [names["envoy_listener"]]
            clusters = await admin(envoy_ip, "/config_dump?resource=dynamic_active_clusters")
            assert [c["cluster"]["name"] for c in clusters["configs"]] == [names["envoy_cluster"]]
            assert (await stats(envoy_ip))[f"udp.{names['envoy_listener']}.downstream_sess_total"] >= 1


def remote_endpoint(name: str, load_balancer: str, address: str, port: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "RemoteEndpoint",
        "metadata": {"name": name},
        "spec": {"load-balancer": load_balancer, "address": address, "port": port},
    }


def accept_endpoint(custom: client.CustomObjectsApi, namespace: str, name: str, tunnel_id: int) -> None:
    """What the allocator does to an endpoint it accepts: its tunnel ID, and Ready."""
    ready = {"type": "Ready", "status": "True", "reason": "TunnelAssigned", "message": f"tunnel ID {tunnel_id}",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    custom.patch_namespaced_custom_object_status(
        "epic.acnodal.io", "v1", namespace, "remoteendpoints", name,
        {"status": {"tunnel-id": tunnel_id, "conditions": [ready]}},
    )  # fmt: skip


async def test_each_public_port_of_a_load_balancer_reaches_only_its_target_port(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    """8000 -> 8080, 8443 -> the endpoint port named https, 5300/UDP -> 5353: two TCP and one UDP port, and
    backends on all three of each other's ports, so that a mixed-up listener would be seen answering."""
    xds = start_xds(run_service, xds_env)
    a, b = cluster.remote_address(), cluster.remote_address()
    backends: list[TCPEcho | UDPEcho] = [TCPEcho(host, 8080, name=f"http@{host}") for host in (a, b)]
    backends += [TCPEcho(a, 8444, name="https"), UDPEcho(a, 5353, name="dns"), TCPEcho(b, 5353, name="tcp-5353")]
    async with contextlib.AsyncExitStack() as stack:
        for backend in backends:
            await stack.enter_async_context(backend)
        lb = {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "LoadBalancer",
            "metadata": {"name": "multi"},
            "spec": {
                "service-group": "web",
                "public-ports": [
                    {"name": "web", "port": 8000, "protocol": "TCP", "targetPort": 8080},
                    {"name": "tls", "port": 8443, "protocol": "TCP", "targetPort": "https"},
                    {"name": "dns", "port": 5300, "protocol": "UDP", "targetPort": 5353},
                ],
            },
        }
        custom.create_namespaced_custom_object("epic.acnodal.io", "v1", namespace, "loadbalancers", lb)
        endpoints = {
            "a-http": (a, {"port": 8080, "protocol": "TCP", "name": "http"}),
            "b-http": (b, {"port": 8080, "protocol": "TCP", "name": "http"}),
            "a-https": (a, {"port": 8444, "protocol": "TCP", "name": "https"}),
            "a-dns": (a, {"port": 5353, "protocol": "UDP"}),
            "b-tcp-5353": (b, {"port": 5353, "protocol": "TCP"}),
        }
        for tunnel_id, (name, (address, port)) in enumerate(endpoints.items(), start=1):
            body = remote_endpoint(name, "multi", address, port)
            custom.create_namespaced_custom_object("epic.acnodal.io", "v1", namespace, "remoteendpoints", body)
            accept_endpoint(custom, namespace, name, tunnel_id)
        labels = {"epic.acnodal.io/load-balancer": "multi", "epic.acnodal.io/account": "root"}
        envoy_pod(core, namespace, "multi-proxy", xds, labels, delta=True)
        proxy_ip, _ = await running_envoy(core, namespace, "multi-proxy")

        async def tcp_answers(port: int) -> set[str]:
            replies = [await tcp_request(proxy_ip, port, b"x") for _ in range(12)]
            return {reply.split(b":", 1)[0].decode() for reply in replies}

        async def both_http_backends() -> set[str] | None:
            seen = await tcp_answers(8000)
            return seen if len(seen) == 2 else None

        http = await eventually(
            both_http_backends, "port 8000 to reach both 8080 backends", timeout=30, ignore=(OSError, TimeoutError)
        )
        assert http == {f"http@{a}", f"http@{b}"}
        assert await tcp_answers(8443) == {"https"}
        assert await answers(proxy_ip, 5300) == {"dns"}
        clusters = await admin(proxy_ip, "/clusters?format=json")
        ports = {
            c["name"].rsplit("/", 1)[1]: sorted(
                h["address"]["socket_address"]["port_value"] for h in c.get("host_statuses", [])
            )
            for c in clusters["cluster_statuses"]
            if c["name"].startswith(f"{namespace}/multi/")
        }
        assert ports == {"tcp-8000": [8080, 8080], "tcp-8443": [8444], "udp-5300": [5353]}


async def test_load_balancer_public_ports_forward_to_registered_endpoints(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    xds_env: dict[str, str],
) -> None:
    xds = start_xds(run_service, xds_env)
    upstream = cluster.remote_address()
    async with TCPEcho(upstream, 8080, name="upstream"), UDPEcho(upstream, 5060, name="udp-upstream"):
        lb = copy.deepcopy(yaml.safe_load((SAMPLES / "seed-loadbalancer.yaml").read_text()))
        lb["metadata"] = {"name": "sample-acnodal"}
        lb["spec"]["public-ports"].append({"port": 5060, "protocol": "UDP"})
        public = lb["spec"]["public-address"] = cluster.public_addresses()[0]  # not the seed's 192.168.77.2
        del lb["status"]
        custom.create_namespaced_custom_object("epic.acnodal.io", "v1", namespace, "loadbalancers", lb)
        for protocol, port in (("TCP", 8080), ("UDP", 5060)):
            name = f"sample-acnodal-{protocol.lower()}"
            custom.create_namespaced_custom_object(
                "epic.acnodal.io",
                "v1",
                namespace,
                "remoteendpoints",
                {
                    "apiVersion": "epic.acnodal.io/v1",
                    "kind": "RemoteEndpoint",
                    "metadata": {"name": name},
                    "spec": {
                        "load-balancer": "sample-acnodal",
                        "address": upstream,
                        "port": {"port": port, "protocol": protocol},
                    },
                },
            )
        envoy_pod(
            core,
            namespace,
            "lb-proxy",
            xds,
            {"epic.acnodal.io/load-balancer": "sample-acnodal", "epic.acnodal.io/account": "root"},
            delta=True,
        )
        proxy_ip, _ = await running_envoy(core, namespace, "lb-proxy")
        await eventually(lambda: admin(proxy_ip, "/listeners?format=json"), "listeners on the proxy", ignore=(OSError,))

        async def no_endpoints() -> bool:
            clusters = await admin(proxy_ip, "/clusters?format=json")
            names = {c["name"]: c.get("host_statuses", []) for c in clusters["cluster_statuses"]}
            return f"{namespace}/sample-acnodal/tcp-8888" in names and not names[f"{namespace}/sample-acnodal/tcp-8888"]

        await eventually(no_endpoints, "the LB cluster, with no endpoint before it is Ready", ignore=(OSError,))
        for protocol in ("tcp", "udp"):
            accept_endpoint(custom, namespace, f"sample-acnodal-{protocol}", 7 if protocol == "tcp" else 8)
        reply = await eventually(
            lambda: tcp_request(public, 8888, b"hi"),
            "TCP through the load balancer's public address",
            timeout=30,
            ignore=(TimeoutError, ConnectionError),
        )
        assert reply == b"upstream:hi"
        reply = await eventually(
            lambda: udp_request(public, 5060, b"dgram", timeout=1),
            "UDP through the load balancer's public address",
            ignore=(TimeoutError,),
        )
        assert reply == b"udp-upstream:dgram"
