"""Process-backed Envoy pods: a pod with the Envoy proxy label runs a real Envoy that carries traffic."""

from __future__ import annotations

import os
import signal
from typing import Any

import yaml
from kubernetes import client

from tollgate.models.envoy import ADMIN_PORT, ENVOY_PROXY_LABEL
from tollgate.testing.echo import TCPEcho, UDPEcho, tcp_request, udp_request
from tollgate.testing.envoy import static_cluster, tcp_proxy_listener, udp_proxy_listener
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import eventually

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


async def pod_state(core: client.CoreV1Api, namespace: str, name: str) -> tuple[str, str, int] | None:
    pod = core.read_namespaced_pod(name, namespace)
    ready = next((c for c in pod.status.conditions or [] if c.type == "Ready"), None)
    restarts = pod.status.container_statuses[0].restart_count if pod.status.container_statuses else 0
    return (str(pod.status.pod_ip), ready.reason or "", restarts) if ready is not None else None


async def test_envoy_pod_proxies_udp_and_tcp_and_restarts_after_a_crash(
    core: client.CoreV1Api, namespace: str, supervisor: ServiceProcess
) -> None:
    async with UDPEcho("127.0.0.1", name="udp-echo") as udp_echo, TCPEcho("127.0.0.1", name="tcp-echo") as tcp_echo:
        bootstrap = {
            "static_resources": {
                "listeners": [
                    udp_proxy_listener("udp", "0.0.0.0", UDP_PORT, "udp-echo"),
                    tcp_proxy_listener("tcp", "0.0.0.0", TCP_PORT, "tcp-echo"),
                ],
                "clusters": [
                    static_cluster("udp-echo", [("127.0.0.1", udp_echo.port)]),
                    static_cluster("tcp-echo", [("127.0.0.1", tcp_echo.port)]),
                ],
            }
        }
        core.create_namespaced_config_map(
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="envoy"), data={"envoy.yaml": yaml.safe_dump(bootstrap)}
            ),
        )
        core.create_namespaced_pod(namespace, envoy_pod("proxy", "envoy"))  # type: ignore[arg-type]

        async def live() -> tuple[str, str, int] | None:
            state = await pod_state(core, namespace, "proxy")
            return state if state and state[1] == "EnvoyLive" else None

        pod_ip, _, _ = await eventually(live, "the Envoy of pod proxy to be live", timeout=60)
        assert pod_ip.startswith("127.1.")

        assert await udp_request(pod_ip, UDP_PORT, b"datagram") == b"udp-echo:datagram"
        assert await tcp_request(pod_ip, TCP_PORT, b"stream") == b"tcp-echo:stream"

        pod = core.read_namespaced_pod("proxy", namespace)
        pid = int(next(c for c in pod.status.conditions if c.type == "Ready").message.split()[-1])
        os.kill(pid, signal.SIGKILL)

        async def restarted() -> tuple[str, str, int] | None:
            state = await pod_state(core, namespace, "proxy")
            return state if state and state[1] == "EnvoyLive" and state[2] >= 1 else None

        await eventually(restarted, "the crashed Envoy to be restarted and the restart counted", timeout=60)
        assert await udp_request(pod_ip, UDP_PORT, b"again") == b"udp-echo:again"

        core.delete_namespaced_pod("proxy", namespace, grace_period_seconds=0)

        async def admin_closed() -> bool:
            try:
                await tcp_request(pod_ip, ADMIN_PORT, b"GET /ready HTTP/1.0\r\n\r\n", timeout=1)
            except (ConnectionError, OSError, TimeoutError):
                return True
            return False

        await eventually(admin_closed, "the Envoy of the deleted pod to stop", timeout=30)
