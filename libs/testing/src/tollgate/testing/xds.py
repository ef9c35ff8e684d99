"""End-to-end helpers for tollgate-xds: the service as a process, Envoy pods configured over ADS, and what
a test reads back (VirtualService conditions, Envoy's admin API)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import yaml
from kubernetes import client

from tollgate.models.base import raw_condition
from tollgate.models.envoy import ADMIN_PORT, ENVOY_PROXY_LABEL, LISTENER_ADDRESS_KEY, ads_bootstrap
from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import KWOK_MANAGED, EmbeddedCluster
from tollgate.testing.echo import udp_request
from tollgate.testing.envoy import bind_to_pod
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_ports
from tollgate.testing.node import REAL_NODE_PLACEMENT
from tollgate.testing.nodes import is_ready
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import eventually

GROUP, VERSION, PLURAL = "servicemesh.l7mp.io", "v1", "virtualservices"
ENVOY_IMAGE = "envoyproxy/envoy:v1.40.0"
# Envoy's admin API on every address of its pod, where a test reads it (the allocator's default bootstrap has none).
POD_ADMIN = {"address": {"socket_address": {"address": "0.0.0.0", "port_value": ADMIN_PORT}}}


@dataclass
class Xds:
    process: ServiceProcess
    grpc_host: str
    grpc_port: int
    api_port: int

    def api(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=5) as response:
            return json.load(response)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.process.health_url}/metrics", timeout=5) as response:
            return str(response.read().decode())


def xds_settings(grpc_host: str = "127.0.0.1") -> dict[str, str]:
    """The service's settings for a test: ports of its own, status written every 200 ms; Envoys connect to
    `grpc_host` (the cluster's host_address), the test reads the debug API on loopback."""
    grpc_port, api_port = free_ports(2)
    return {
        "TOLLGATE_XDS_GRPC_HOST": grpc_host,
        "TOLLGATE_XDS_GRPC_PORT": str(grpc_port),
        "TOLLGATE_XDS_API_HOST": "127.0.0.1",
        "TOLLGATE_XDS_API_PORT": str(api_port),
        "TOLLGATE_XDS_STATUS_INTERVAL_MS": "200",
    }


def start_xds(run_service: ServiceFactory, env: dict[str, str]) -> Xds:
    process = run_service("xds", rbac=True, env=env)
    return Xds(
        process, env["TOLLGATE_XDS_GRPC_HOST"], int(env["TOLLGATE_XDS_GRPC_PORT"]), int(env["TOLLGATE_XDS_API_PORT"])
    )


def pod_bootstrap(xds: Xds, namespace: str, pod: str, ip: str) -> dict[str, Any]:
    """A bootstrap for an Envoy process (tollgate.testing.envoy.EnvoyProcess) that plays pod namespace/pod at `ip`, an
    address of this machine: its xDS connection comes from `ip` and its listeners bind there. It is LIVE after 1 s
    without a first config (instead of 15 s)."""
    bootstrap = bind_to_pod(ads_bootstrap(xds.grpc_host, xds.grpc_port, delta=True), ip)
    bootstrap["node"] = {"id": f"{pod}.{namespace}", "cluster": namespace, "metadata": {LISTENER_ADDRESS_KEY: ip}}
    for kind in ("cds_config", "lds_config"):
        bootstrap["dynamic_resources"][kind]["initial_fetch_timeout"] = "1s"
    return bootstrap


def envoy_pod(core: client.CoreV1Api, namespace: str, name: str, xds: Xds, labels: dict[str, str], delta: bool) -> None:
    """An Envoy pod on the real node whose bootstrap points at `xds` over ADS, with its admin API on the pod's
    address (port ADMIN_PORT) for the test to read."""
    bootstrap = yaml.safe_dump({**ads_bootstrap(xds.grpc_host, xds.grpc_port, delta=delta), "admin": POD_ADMIN})
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"{name}-bootstrap"), data={"envoy.yaml": bootstrap}),
    )
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {ENVOY_PROXY_LABEL: "true", **labels}},
        "spec": {
            "containers": [
                {
                    "name": "envoy",
                    "image": ENVOY_IMAGE,
                    "args": [
                        "-c",
                        "/etc/envoy/envoy.yaml",
                        "--service-node",
                        "$(POD_NAME).$(POD_NAMESPACE)",
                        "--service-cluster",
                        "$(POD_NAMESPACE)",
                    ],
                    "env": env,
                    "volumeMounts": [{"name": "bootstrap", "mountPath": "/etc/envoy"}],
                }
            ],
            "volumes": [{"name": "bootstrap", "configMap": {"name": f"{name}-bootstrap"}}],
            **REAL_NODE_PLACEMENT,
        },
    }
    core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]


async def running_envoy(core: client.CoreV1Api, namespace: str, name: str) -> tuple[str, str]:
    """The pod IP and container ID of the Envoy container of pod namespace/name once it runs, its pod is Ready and
    its admin API (port ADMIN_PORT, which the bootstrap must open) answers (a new container ID after a restart)."""

    async def probe() -> tuple[str, str] | None:
        pod = core.read_namespaced_pod(name, namespace)
        status = pod.status
        if status is None or not status.pod_ip or not is_ready(pod):
            return None
        envoy = next((c for c in status.container_statuses or [] if c.name == "envoy"), None)
        if envoy is None or envoy.state is None or envoy.state.running is None:
            return None
        admin_ready = f"http://{status.pod_ip}:{ADMIN_PORT}/ready"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session, session.get(admin_ready):
            return str(status.pod_ip), str(envoy.container_id)

    return await eventually(
        probe, f"the Envoy container of pod {namespace}/{name} to run", timeout=60, ignore=(aiohttp.ClientError,)
    )


async def forwarding_envoy(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, xds: Xds, target: str, delta: bool
) -> tuple[str, str]:
    """The VirtualService `edge` (UDP 3001 to `target`:1234, where the test's echo answers) and an Envoy pod `edge`
    it selects; the Envoy's pod IP and container ID once it forwards."""
    apply_vs(custom, namespace, udp_virtual_service("edge", "edge-l", 3001, "edge-c", target))
    envoy_pod(core, namespace, "edge", xds, {"app": "edge"}, delta=delta)
    envoy_ip, container = await running_envoy(core, namespace, "edge")
    await eventually(lambda: answer(envoy_ip, 3001), "the Envoy to forward on 3001", ignore=(TimeoutError, OSError))
    return envoy_ip, container


async def kwok_pod(
    cluster: EmbeddedCluster, namespace: str, name: str, labels: dict[str, str], ports: dict[str, int] | None = None
) -> str:
    """A pod with `labels` (and its container's named `ports`) on one of KWOK's nodes: a process elsewhere, which
    the test plays; its IP once it is Ready, put on this machine when the cluster has the real node (so that the test
    can serve it there)."""
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    container_ports = [
        client.V1ContainerPort(name=port_name, container_port=port) for port_name, port in (ports or {}).items()
    ]
    spec = client.V1PodSpec(
        containers=[client.V1Container(name="process", image="process:latest", ports=container_ports)],
        node_selector={"type": "kwok"},
        tolerations=[client.V1Toleration(key=KWOK_MANAGED, operator="Exists", effect="NoSchedule")],
    )
    core.create_namespaced_pod(
        namespace, client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels), spec=spec)
    )

    async def ready() -> str | None:
        pod = core.read_namespaced_pod(name, namespace)
        return str(pod.status.pod_ip) if pod.status is not None and pod.status.pod_ip and is_ready(pod) else None

    ip = await eventually(ready, f"pod {name} to be Ready", timeout=30)
    if cluster.real_node:
        cluster.node().add_address(ip)
    return ip


def group_bootstrap_template() -> str:
    """An LBServiceGroup `envoy-bootstrap`: ADS as the allocator's default, plus an admin API on the pod's address
    (port ADMIN_PORT) for a test to read what the Envoy runs."""
    template = ads_bootstrap("{xds_host}", 1)
    template["node"] = {"id": "{node_id}", "cluster": "{cluster}"}
    template["admin"] = POD_ADMIN
    return yaml.safe_dump(template).replace("port_value: 1\n", "port_value: {xds_port}\n")


@contextlib.contextmanager
def port_taken(cluster: EmbeddedCluster, container_id: str, port: int) -> Iterator[None]:
    """UDP `port` bound, without SO_REUSEPORT, in the network namespace of the pod of a running container: a port
    another process of the pod holds, which Envoy cannot bind its listener to."""
    pid = cluster.node().container_pid(container_id)
    code = (
        "import socket, sys\n"
        f"s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', {port}))\n"
        "print('bound', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen(
        ["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "bound\n", f"port {port} not taken"
        yield
    finally:
        holder.communicate(timeout=10)


async def admin(ip: str, path: str) -> Any:
    """GET `path` of the admin API of the Envoy pod at `ip`, as JSON."""
    async with aiohttp.ClientSession() as session, session.get(f"http://{ip}:{ADMIN_PORT}{path}") as response:
        return await response.json(content_type=None)


async def stats(ip: str) -> dict[str, int]:
    """Counters and gauges of the Envoy pod at `ip`, by name."""
    data = await admin(ip, "/stats?format=json")
    return {s["name"]: s["value"] for s in data["stats"] if "name" in s and isinstance(s.get("value"), int)}


def apply_vs(custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def events(core: client.CoreV1Api, namespace: str, name: str, reason: str, type_: str = "") -> list[str]:
    """The messages of the Events with `reason` (and `type_`, Normal or Warning, when given) about the object
    `name`."""
    selector = f"involvedObject.name={name},reason={reason}" + (f",type={type_}" if type_ else "")
    listing = core.list_namespaced_event(namespace, field_selector=selector)
    return [str(e.message) for e in listing.items]


async def answer(host: str, port: int, payload: bytes = b"x") -> str:
    """Who answers one datagram sent from a fresh source port (a new UDP proxy session)."""
    reply = await udp_request(host, port, payload, timeout=1)
    return reply.split(b":", 1)[0].decode()


async def answers(host: str, port: int, count: int = 8) -> set[str]:
    return {await answer(host, port) for _ in range(count)}


def read_vs(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[assignment]
    return obj


async def condition(
    custom: client.CustomObjectsApi, namespace: str, name: str, type_: str, reason: str
) -> dict[str, Any]:
    """The VirtualService once its condition `type_` has `reason` for its latest generation."""

    async def probe() -> dict[str, Any] | None:
        obj = read_vs(custom, namespace, name)
        found = raw_condition(obj, type_)
        observed = (obj.get("status") or {}).get("observedGeneration")
        if found and found["reason"] == reason and observed == obj["metadata"]["generation"]:
            return obj
        return None

    return await eventually(probe, f"{name} to have {type_} with reason {reason}", timeout=30)


def udp_virtual_service(name: str, listener: str, port: int, cluster: str, target: str, **udp: int) -> dict[str, Any]:
    """A VirtualService for the Envoys labelled app=edge: one udp listener (with `udp` settings such as
    max_sessions) forwarding to the UDP echo at target:1234."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VirtualService",
        "metadata": {"name": name},
        "spec": {
            "selector": {"app": "edge"},
            "listeners": [
                {
                    "name": listener,
                    "udp": {
                        "port": port,
                        "cluster": {
                            "name": cluster,
                            "endpoints": [{"name": "echo", "host": {"address": target}, "port": 1234}],
                        },
                        **udp,
                    },
                }
            ],
        },
    }
