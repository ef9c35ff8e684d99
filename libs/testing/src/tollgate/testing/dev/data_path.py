"""The `data-path` step: one datagram and one TCP connection through an Envoy container to echo servers on a
simulated remote node, and one datagram to a load balancer's public address (from the ServicePrefix `dev`, pool
DEV_POOL, which the node routes to the load balancer's Envoy container), whose endpoint is registered over the
registration API as a client cluster's agent registers it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from tollgate.models.envoy import BOOTSTRAP_KEY, ENVOY_CONTAINER, ENVOY_PROXY_LABEL, ads_bootstrap
from tollgate.testing import node
from tollgate.testing.agents import CA_FILE
from tollgate.testing.dev.certificates import ROOT_TOKEN, mint_root_token
from tollgate.testing.echo import TCPEcho, UDPEcho, tcp_request, udp_request
from tollgate.testing.wait import wait_for

if TYPE_CHECKING:
    from tollgate.testing.dev.system import DevSystem

T = TypeVar("T")

PROOF_NAMESPACE = "tollgate-dev"
PROOF_UDP_PORT, PROOF_TCP_PORT, PROOF_LB_PORT = 7001, 7002, 7003
# Addresses of the real node's ranges (tollgate.testing.cluster): a simulated remote node serving the echo servers,
# another with a client cluster's endpoint; the dev pool is public addresses the node routes to Envoy pods.
ECHO_HOST = "192.0.2.70"
LB_UPSTREAM, LB_CLIENT_NODE = "192.0.2.72", "192.0.2.71"
DEV_PREFIX, DEV_POOL = "dev", "192.0.2.224/27"


def public_address_objects(upstream_port: int) -> list[dict[str, Any]]:
    """The dev ServicePrefix, a service group of the root account drawing from it, and a load balancer without an
    address (its endpoint is registered over the registration API, as a client cluster's agent registers it)."""
    epic = {"apiVersion": "epic.acnodal.io/v1"}
    return [
        epic | {"kind": "ServicePrefix", "metadata": {"name": DEV_PREFIX, "namespace": "epic"},
                "spec": {"public-pool": {"pool": DEV_POOL}}},
        epic | {"kind": "LBServiceGroup", "metadata": {"name": "dev-public", "namespace": "epic-root"},
                "spec": {"envoy-replica-count": 1, "service-prefix": DEV_PREFIX}},
        epic | {"kind": "LoadBalancer", "metadata": {"name": "dev-public", "namespace": "epic-root"},
                "spec": {"service-group": "dev-public",
                         "public-ports": [{"port": PROOF_LB_PORT, "protocol": "UDP", "targetPort": upstream_port}]}},
    ]  # fmt: skip


def proof_objects(udp_port: int, tcp_port: int, xds_host: str, xds_port: int) -> list[dict[str, Any]]:
    """An Envoy pod fed by the xds service, and a VirtualService routing to the dev echo servers."""
    labels = {ENVOY_PROXY_LABEL: "true", "app": "dev-proxy"}

    def listener(protocol: str, port: int, upstream: int) -> dict[str, Any]:
        cluster = {
            "name": f"dev-echo-{protocol}",
            "endpoints": [{"name": f"echo-{protocol}", "host": {"address": ECHO_HOST}, "port": upstream}],
        }
        return {"name": f"dev-{protocol}", protocol: {"port": port, "cluster": cluster}}

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROOF_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dev-proxy", "namespace": PROOF_NAMESPACE},
            "data": {BOOTSTRAP_KEY: yaml.safe_dump(ads_bootstrap(xds_host, xds_port))},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "dev-proxy", "namespace": PROOF_NAMESPACE, "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": ENVOY_CONTAINER,
                        "image": "envoyproxy/envoy:v1.40.0",
                        "args": [
                            "-c",
                            f"/etc/envoy/{BOOTSTRAP_KEY}",
                            "--service-node",
                            "dev-proxy.tollgate-dev",
                            "--service-cluster",
                            "dev",
                        ],
                        "volumeMounts": [{"name": "bootstrap", "mountPath": "/etc/envoy"}],
                    }
                ],
                "volumes": [{"name": "bootstrap", "configMap": {"name": "dev-proxy"}}],
                **node.REAL_NODE_PLACEMENT,
            },
        },
        {
            "apiVersion": "servicemesh.l7mp.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "dev-proof", "namespace": PROOF_NAMESPACE},
            "spec": {
                "selector": {"app": "dev-proxy"},
                "listeners": [listener("udp", PROOF_UDP_PORT, udp_port), listener("tcp", PROOF_TCP_PORT, tcp_port)],
            },
        },
    ]


class EchoThread:
    """UDP and TCP echo servers on ECHO_HOST, in an event loop of their own for the life of the dev system."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.udp = UDPEcho(ECHO_HOST, name="udp-echo")
        self.tcp = TCPEcho(ECHO_HOST, name="tcp-echo")
        self.lb_upstream = UDPEcho(LB_UPSTREAM, name="lb-echo")

    def start(self) -> tuple[int, int]:
        self.thread.start()
        self.call(self.udp.start())
        self.call(self.tcp.start())
        return self.udp.port, self.tcp.port

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.call(self.udp.stop())
        self.call(self.tcp.stop())
        self.call(self.lb_upstream.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


def prove_data_path(system: DevSystem) -> None:
    """One datagram and one TCP connection through an Envoy container, configured by a VirtualService."""
    cluster, progress = system.cluster, system.progress
    for address in (ECHO_HOST, LB_UPSTREAM, LB_CLIENT_NODE):
        cluster.node().add_address(address)
    echo = system.echo = EchoThread()
    udp_port, tcp_port = echo.start()
    host, _, port = system.resource("xds").endpoints["ads"].rpartition(":")
    objects = proof_objects(udp_port, tcp_port, host, int(port))
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    pod_ip = progress.wait_for(
        lambda: (
            cluster.kubectl(
                "get", "pod", "dev-proxy", "-n", PROOF_NAMESPACE, "-o", "jsonpath={.status.podIP}", check=False
            ).stdout
        ),
        "the dev-proxy Envoy pod to get an IP",
        timeout=120,
    )
    udp_reply = progress.wait_for(
        lambda: echo.call(udp_request(pod_ip, PROOF_UDP_PORT, b"datagram from make dev", timeout=1)),
        f"a UDP reply through Envoy at {pod_ip}:{PROOF_UDP_PORT}",
        timeout=120,
        ignore=(OSError, TimeoutError),
    )
    tcp_reply = progress.wait_for(
        lambda: echo.call(tcp_request(pod_ip, PROOF_TCP_PORT, b"stream from make dev", timeout=1)),
        f"a TCP reply through Envoy at {pod_ip}:{PROOF_TCP_PORT}",
        timeout=60,
        ignore=(OSError, TimeoutError),
    )
    system.proof = [
        f"  UDP  {pod_ip}:{PROOF_UDP_PORT} -> Envoy -> {udp_reply.decode()!r}",
        f"  TCP  {pod_ip}:{PROOF_TCP_PORT} -> Envoy -> {tcp_reply.decode()!r}",
        _prove_public_address(system, echo),
    ]
    system.say("  data path  proved:\n" + "\n".join(system.proof))


def _register(system: DevSystem, *args: str) -> str | None:
    """One call of the registration API as an agent makes it: over TLS with the allocator's CA, with root's
    token; its answer (a JSON line), None when refused."""
    command = [sys.executable, "-m", "tollgate.allocator.grpc.client",
               "--address", system.resource("allocator").endpoints["grpc"],
               "--ca-file", str(system.allocator_dir / CA_FILE),
               "--token-file", str(system.allocator_dir / ROOT_TOKEN), *args]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def _prove_public_address(system: DevSystem, echo: EchoThread) -> str:
    """One datagram to a load balancer's public address, allocated from the dev ServicePrefix (which the real
    node routes to the Envoy container), through the load balancer's Envoy to a simulated remote endpoint."""
    cluster = system.cluster
    echo.call(echo.lb_upstream.start())
    objects = public_address_objects(echo.lb_upstream.port)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    mint_root_token(system)
    endpoint = ("register", "root", "dev-public", LB_UPSTREAM, str(echo.lb_upstream.port), "--protocol", "UDP",
                "--node-address", LB_CLIENT_NODE)  # fmt: skip
    registered = json.loads(wait_for(lambda: _register(system, *endpoint), "the upstream's registration", timeout=60))
    system.say(f"  registered {LB_UPSTREAM} over TLS as account root: tunnel {registered['tunnel']['tunnelId']}")

    def address() -> str:
        jsonpath = "jsonpath={.spec.public-address}"
        found = cluster.kubectl("get", "lb", "dev-public", "-n", "epic-root", "-o", jsonpath, check=False)
        return found.stdout.strip()

    public = system.progress.wait_for(address, "the dev-public load balancer to get its public address", timeout=60)
    reply = system.progress.wait_for(
        lambda: echo.call(udp_request(public, PROOF_LB_PORT, b"datagram to a public address", timeout=1)),
        f"a UDP reply through the load balancer at {public}:{PROOF_LB_PORT}",
        timeout=120,
        ignore=(OSError, TimeoutError),
    )
    return f"  LB   {public}:{PROOF_LB_PORT} (ServicePrefix {DEV_PREFIX}) -> Envoy -> {reply.decode()!r}"
