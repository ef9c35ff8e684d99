"""An Envoy pod on the real node: a container of the Envoy image that carries traffic, restarted by the kubelet
when it crashes, stopped when its pod goes."""

from __future__ import annotations

import ipaddress
import os
import signal
from typing import Any

import yaml
from kubernetes import client

from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.testing import node
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import TCPEcho, UDPEcho, tcp_request, udp_request
from tollgate.testing.envoy import static_cluster, tcp_proxy_listener, udp_proxy_listener
from tollgate.testing.wait import eventually
from tollgate.testing.xds import POD_ADMIN, running_envoy

UDP_PORT, TCP_PORT = 5300, 5301


def envoy_pod(name: str, config_map: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {ENVOY_PROXY_LABEL: "true", "app": "ingress"}},
        "spec": {
            "containers": [
                {
                    "name": "envoy",
                    "image": "envoyproxy/envoy:v1.40.0",
                    "args": ["-c", "/etc/envoy/envoy.yaml", "--service-node", "$(POD_NAME)"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [{"name": "bootstrap", "mountPath": "/etc/envoy"}],
                }
            ],
            "volumes": [{"name": "bootstrap", "configMap": {"name": config_map}}],
        },
    }


async def test_envoy_pod_proxies_udp_and_tcp_and_restarts_after_a_crash(
    cluster: EmbeddedCluster, core: client.CoreV1Api, namespace: str
) -> None:
    upstream = cluster.remote_address()
    async with UDPEcho(upstream, name="udp-echo") as udp_echo, TCPEcho(upstream, name="tcp-echo") as tcp_echo:
        bootstrap = {
            "admin": POD_ADMIN,
            "static_resources": {
                "listeners": [
                    udp_proxy_listener("udp", "0.0.0.0", UDP_PORT, "udp-echo"),
                    tcp_proxy_listener("tcp", "0.0.0.0", TCP_PORT, "tcp-echo"),
                ],
                "clusters": [
                    static_cluster("udp-echo", [(upstream, udp_echo.port)]),
                    static_cluster("tcp-echo", [(upstream, tcp_echo.port)]),
                ],
            },
        }
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="envoy"), data={"envoy.yaml": yaml.safe_dump(bootstrap)}
            ),
        )
        core.create_namespaced_pod(namespace, envoy_pod("proxy", "envoy"))  # type: ignore[arg-type]

        pod_ip, container = await running_envoy(core, namespace, "proxy")
        assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(node.NODE_POD_CIDR)

        assert (
            await eventually(
                lambda: udp_request(pod_ip, UDP_PORT, b"datagram"),
                "a UDP reply through the Envoy container",
                timeout=30,
                ignore=(TimeoutError, ConnectionError),
            )
            == b"udp-echo:datagram"
        )
        assert await tcp_request(pod_ip, TCP_PORT, b"stream") == b"tcp-echo:stream"

        os.kill(cluster.node().container_pid(container), signal.SIGKILL)

        async def restart_counted() -> bool:
            statuses = core.read_namespaced_pod("proxy", namespace).status.container_statuses or []
            return any(status.restart_count >= 1 for status in statuses)

        await eventually(restart_counted, "the crashed Envoy's restart to be counted", timeout=60)
        same_ip, restarted = await running_envoy(core, namespace, "proxy")
        assert (same_ip, restarted != container) == (pod_ip, True), "the same pod, a new container"
        assert (
            await eventually(
                lambda: udp_request(pod_ip, UDP_PORT, b"again"),
                "a UDP reply through the restarted Envoy",
                timeout=30,
                ignore=(TimeoutError, ConnectionError),
            )
            == b"udp-echo:again"
        )

        core.delete_namespaced_pod("proxy", namespace, grace_period_seconds=0)

        async def listener_closed() -> bool:
            try:
                await tcp_request(pod_ip, TCP_PORT, b"gone?", timeout=1)
            except (ConnectionError, OSError, TimeoutError):
                return True
            return False

        await eventually(listener_closed, "the Envoy of the deleted pod to stop", timeout=30)
