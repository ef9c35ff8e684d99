"""The chaos suite's running system and its table; the soak (bench/soak.py) runs the same system.

`chaos_cluster` is an embedded cluster with the real node; `running_system` runs the services on it, each behind a
FaultProxy, and yields the `System` they share. The helpers below are what a user looks at (a Goop completed, a
VirtualService served, a RoutedIP placed, a load balancer's tunnels).

The table: one row per fault and check a user would make, with the measured recovery time and what was lost.
Checks wait for their condition (never a fixed sleep) and record how long it took from a moment the test names
(the fault's end, or its start when the system is meant to converge while it lasts)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import yaml
from kubernetes import client

from tollgate.models.epic import GROUP as EPIC_GROUP
from tollgate.models.epic import VERSION as EPIC_VERSION
from tollgate.models.routedip import GROUP as ROUTEDIP_GROUP
from tollgate.models.routedip import VERSION as ROUTEDIP_VERSION
from tollgate.runtime.kube import api_client
from tollgate.testing.agents import Agent
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.fakedo import FakeDigitalOcean, FakeDigitalOceanThread
from tollgate.testing.faultproxy import FaultProxy, Mode, proxied_kubeconfig, server_of
from tollgate.testing.fixtures import embedded_cluster
from tollgate.testing.nodes import HOLD_POLICY_OBJECTS, Nodes
from tollgate.testing.rbac import NAMESPACE as SYSTEM_NAMESPACE
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.wait import ConditionTimeoutError, eventually
from tollgate.testing.xds import (
    Xds,
    admin,
    answer,
    apply_vs,
    envoy_pod,
    running_envoy,
    udp_virtual_service,
    xds_settings,
)

T = TypeVar("T")

NOTHING = "nothing"


@dataclass(frozen=True)
class Row:
    fault: str
    check: str
    seconds: float | None  # None: did not recover within the bound
    lost: str


@dataclass
class ChaosTable:
    rows: list[Row] = field(default_factory=list)

    def record(self, fault: str, check: str, seconds: float | None, lost: str = NOTHING) -> None:
        self.rows.append(Row(fault, check, seconds, lost))

    async def recover(
        self,
        fault: str,
        check: str,
        probe: Callable[[], Any],
        since: float,
        bound: float,
    ) -> Any:
        """Wait until `probe` (a function or a coroutine function) returns something truthy, at most `bound`
        seconds after `since` (time.monotonic()); record the row, with the seconds from `since`, or as not
        recovered, and raise."""

        async def awaited() -> Any:
            result = probe()
            return await result if inspect.isawaitable(result) else result

        try:
            found = await eventually(awaited, check, timeout=max(since + bound - time.monotonic(), 0.5), interval=0.2)
        except ConditionTimeoutError:
            self.record(fault, check, None, f"not recovered within {bound:.0f} s")
            raise
        self.record(fault, check, time.monotonic() - since)
        return found

    def lost(self, fault: str, check: str, since: float, lost: list[str]) -> None:
        """Record a check of what must not be lost (`lost` lists what was), and fail if anything was."""
        self.record(fault, check, time.monotonic() - since, "; ".join(lost) or NOTHING)
        assert not lost, f"{fault}: {check}: lost {lost}"

    def render(self) -> str:
        header = ("fault", "what was checked", "recovered in (s)", "lost")
        cells = [(r.fault, r.check, "-" if r.seconds is None else f"{r.seconds:.1f}", r.lost) for r in self.rows]
        widths = [max(len(row[i]) for row in [header, *cells]) for i in range(4)]

        def line(row: tuple[str, str, str, str]) -> str:
            return "| " + " | ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) + " |"

        rule = "|" + "|".join("-" * (width + 2) for width in widths) + "|"
        return "\n".join([line(header), rule, *(line(row) for row in cells)])


NAMESPACE = "chaos"
DO_TOKEN = "chaos-token"
DO_SECRET = "digitalocean-token"  # the one Secret the routedip chart lets it read (tokenSecrets)
DO_CLASS = "chaos-do"
DROPLETS = (400000, 400001, 400002)  # the providerIDs of the cluster's three nodes
WATCH_SECONDS = 10  # the services give a hung watch up after 15 s (KubeTimeouts.watch_client)
REQUEST_SECONDS = 5
LEASE_SECONDS = 6
SERVICES = ("xds", "jobs", "routedip", "allocator")
GOOP_GROUP, GOOP_VERSION, GOOPS = "goop.example.com", "v1alpha1", "goops"
ROUTEDIPS = "routedips"
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED}


@dataclass
class System:
    """The running system the chaos tests share: its cluster, services (by name), the FaultProxy in front of each
    service's API connection, the fake DigitalOcean API, the Envoy pod `edge` and the echo server behind it, and
    the EPIC account whose load balancer `lb` takes registrations."""

    cluster: EmbeddedCluster
    custom: client.CustomObjectsApi
    services: dict[str, ServiceProcess]
    proxies: dict[str, FaultProxy]
    fake: FakeDigitalOcean
    nodes: Nodes
    echo_target: str
    envoy_ip: str
    envoy_container: str
    allocator_port: int
    allocator_agent: Agent  # the account's token and the allocator's CA
    account: str

    def restart(self, name: str) -> ServiceProcess:
        """Start a service that was killed again, as a kubelet would: same settings, same log."""
        service = self.services[name]
        service.stop()  # reaps the killed process, closes its log
        return service.start().wait_ready(timeout=60)

    def exited(self) -> list[str]:
        """The services that exited by themselves since they were last started (a crash the table counts)."""
        return [
            f"{name} exited with {service.process.returncode}"
            for name, service in self.services.items()
            if service.process is not None and service.process.poll() is not None
        ]

    def service_logs(self) -> str:
        return "".join(
            f"\n----- logs of {name} ({s.log_path}) -----\n{s.logs()[-15000:]}" for name, s in self.services.items()
        )

    async def freeze_api_server(self, seconds: float) -> float:
        """SIGSTOP of the real kube-apiserver for `seconds`, then SIGCONT; the moment of the thaw (time.monotonic())."""
        pid = self.cluster.pids()["kube-apiserver"]
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)  # the fault itself, not a wait for a condition
        finally:
            os.kill(pid, signal.SIGCONT)
        return time.monotonic()

    def set_proxies(self, mode: Mode) -> None:
        """Every service's API connections in `mode` (FREEZE_OPEN: half-open; PASS: back to normal)."""
        for proxy in self.proxies.values():
            proxy.set_mode(mode)


TABLE = ChaosTable()  # filled by the chaos tests, printed by their conftest at the end of the run


# ----- what a user looks at -----
def create_goop(system: System, name: str, jobs: int = 1) -> None:
    body = {"apiVersion": f"{GOOP_GROUP}/{GOOP_VERSION}", "kind": "Goop", "metadata": {"name": name},
            "spec": {"cmd": "echo hello", "jobCount": jobs}}  # fmt: skip
    system.custom.create_namespaced_custom_object(GOOP_GROUP, GOOP_VERSION, NAMESPACE, GOOPS, body)


def goop_completed(system: System, name: str) -> bool:
    goop = cast(
        dict[str, Any], system.custom.get_namespaced_custom_object(GOOP_GROUP, GOOP_VERSION, NAMESPACE, GOOPS, name)
    )
    return (goop.get("status") or {}).get("phase") == "Completed"


def virtual_service(system: System, name: str, port: int) -> None:
    apply_vs(system.custom, NAMESPACE, udp_virtual_service(name, f"{name}-l", port, f"{name}-c", system.echo_target))


async def listeners(system: System) -> set[str]:
    """The active dynamic listeners of the Envoy (a removed one drains a while)."""
    dump = await admin(system.envoy_ip, "/config_dump?resource=dynamic_listeners")
    return {c["name"] for c in dump.get("configs", []) if "active_state" in c}


def listener(name: str) -> str:
    return f"{NAMESPACE}/{name}/{name}-l"


async def serves(system: System, port: int) -> bool:
    """One datagram to the Envoy's port comes back from the echo server behind it."""
    try:
        return await answer(system.envoy_ip, port) == "echo"
    except (TimeoutError, ConnectionError):
        return False


def droplet(node: str) -> int:
    return 400000 + int(node.rsplit("-", 1)[1])


def routed_ip(system: System, name: str, ip: str) -> None:
    """A RoutedIP of `ip` (a reserved IP DigitalOcean knows) for the Service web."""
    system.fake.reserved_ips.setdefault(ip, None)
    body = {
        "apiVersion": f"{ROUTEDIP_GROUP}/{ROUTEDIP_VERSION}",
        "kind": "RoutedIP",
        "metadata": {"name": name},
        "spec": {"className": DO_CLASS, "routedIP": ip, "serviceRef": {"serviceName": "web", "namespace": NAMESPACE}},
    }
    system.custom.create_namespaced_custom_object(ROUTEDIP_GROUP, ROUTEDIP_VERSION, NAMESPACE, ROUTEDIPS, body)


def routed_status(system: System, name: str) -> dict[str, Any]:
    obj = system.custom.get_namespaced_custom_object(ROUTEDIP_GROUP, ROUTEDIP_VERSION, NAMESPACE, ROUTEDIPS, name)
    return dict(cast(dict[str, Any], obj).get("status") or {})


def ready_reason(status: dict[str, Any]) -> tuple[str | None, str | None]:
    ready: dict[str, str] = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    return ready.get("status"), ready.get("reason")


def placed(system: System, name: str, ip: str, avoid: str | None = None) -> str | None:
    """The node holding the RoutedIP once it is Ready there, not moving, and DigitalOcean agrees."""
    status = routed_status(system, name)
    node = status.get("assignedNode")
    if not node or node == avoid or status.get("targetNode") or ready_reason(status)[0] != "True":
        return None
    return str(node) if system.fake.reserved_ips.get(ip) == droplet(node) else None


def do_actions(system: System, ip: str) -> list[tuple[str, int | None]]:
    return [(a.type, a.droplet) for a in list(system.fake.actions.values()) if a.ip == ip]


async def unless_retryable(call: Awaitable[T]) -> T | None:
    """The answer of a gRPC call, or None when it failed in a way a client retries (RETRYABLE)."""
    try:
        return await call
    except grpc.aio.AioRpcError as error:
        if error.code() not in RETRYABLE:
            raise
        return None


def held_tunnels(system: System, load_balancer: str = "lb") -> dict[str, int]:
    """Node address -> tunnel ID, as the load balancer's status records them."""
    lb = system.custom.get_namespaced_custom_object(
        EPIC_GROUP, EPIC_VERSION, f"epic-{system.account}", "loadbalancers", load_balancer
    )
    entries = (cast(dict[str, Any], lb).get("status") or {}).get("gue-tunnel-endpoints") or {}
    return {node: int(entry["tunnel-id"]) for node, entry in entries.items()}


def tunnels_lost(system: System, returned: dict[str, int], load_balancer: str = "lb") -> list[str]:
    """What a registration lost: a node whose recorded tunnel is not the one it was given, an ID held twice."""
    held = held_tunnels(system, load_balancer)
    lost = [
        f"node {node} was given {tid} but holds {held.get(node)}"
        for node, tid in returned.items()
        if held.get(node) != tid
    ]
    lost += [f"tunnel ID {tid} held by {count} nodes" for tid, count in Counter(held.values()).items() if count > 1]
    return lost


# ----- building it -----
@contextlib.contextmanager
def chaos_cluster(workdir: Path, name: str) -> Iterator[EmbeddedCluster]:
    """An embedded cluster of its own with the real node (a chaos run freezes its API server), KWOK's nodes taking
    pods, and the policy that lets Nodes hold a node NotReady."""
    with embedded_cluster(workdir, name, real_node=True, fake_nodes_take_pods=True) as cluster:
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(HOLD_POLICY_OBJECTS))
        yield cluster


def _settings(name: str, kubeconfig: Path) -> dict[str, str]:
    prefix = f"TOLLGATE_{name.upper()}_"
    return {
        "KUBECONFIG": str(kubeconfig),
        f"{prefix}KUBECONFIG": str(kubeconfig),
        f"{prefix}WATCH_TIMEOUT_SECONDS": str(WATCH_SECONDS),
        f"{prefix}KUBE_REQUEST_TIMEOUT_SECONDS": str(REQUEST_SECONDS),
        f"{prefix}LOG_LEVEL": "INFO",
    }


def _account(cluster: EmbeddedCluster, name: str) -> None:
    """An EPIC account `name` with a service group and a load balancer `lb` (no Envoy replicas)."""
    namespace = f"epic-{name}"

    def epic(kind: str, object_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "epic.acnodal.io/v1", "kind": kind,
                "metadata": {"name": object_name, "namespace": namespace}, "spec": spec}  # fmt: skip

    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        epic("Account", name, {}),
        epic("LBServiceGroup", "web", {"envoy-replica-count": 0}),
        epic("LoadBalancer", "lb", {"public-ports": [{"port": 80}], "service-group": "web"}),
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))


@contextlib.asynccontextmanager
async def running_system(cluster: EmbeddedCluster, directory: Path) -> AsyncIterator[System]:
    """The system on `cluster` (a `chaos_cluster`): an Envoy container runs on the real node, while KWOK's nodes
    (droplets of the fake DigitalOcean) take the Goops' pods and back the routed IPs. Allocator, xds, routedip
    (DigitalOcean provider against the fake DigitalOcean API) and jobs run as processes (logs under
    `directory`/logs), each under its chart's RBAC and through a FaultProxy of its own in front of the API server.
    They keep the dev endpoint policy: the endpoints registered here only take tunnel IDs. The webhook is not run
    (it needs certificates and a registration; its watch on a half-open connection is
    tests/e2e/test_watch_faults.py's subject): the second RoutedIP of one address goes straight in, as one its
    lagging cache lets through would. Stopped, with every node put back, on exit."""
    kube = api_client(cluster.kubeconfig)
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
        cluster.kubectl("create", "namespace", namespace, check=False)
    token = base64.b64encode(DO_TOKEN.encode()).decode()
    core.create_namespaced_secret(
        SYSTEM_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=DO_SECRET), data={"token": token})
    )
    allocator_tls = tls_endpoint(directory / "allocator-tls")
    settings = {
        "xds": {**xds_settings(cluster.host_address), "TOLLGATE_XDS_RESYNC_PERIOD_S": "5"},
        "jobs": {},
        "routedip": {"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "TOLLGATE_ROUTEDIP_LOG_FORMAT": "text"},
        "allocator": allocator_env(allocator_tls, TOLLGATE_ALLOCATOR_LEASE_SECONDS=str(LEASE_SECONDS)),
    }
    services: dict[str, ServiceProcess] = {}
    async with contextlib.AsyncExitStack() as stack:
        fake = stack.enter_context(FakeDigitalOceanThread(DO_TOKEN))
        fake.add_droplets(*DROPLETS)
        proxies: dict[str, FaultProxy] = {}
        for name in SERVICES:
            as_account = service_account_kubeconfig(cluster, name, directory)
            proxies[name] = stack.enter_context(FaultProxy(*server_of(as_account)))
            via = proxied_kubeconfig(as_account, proxies[name], directory / f"{name}-via-proxy.kubeconfig")
            trust = fake.trust_settings() if name == "routedip" else {}
            services[name] = ServiceProcess(
                name, via, directory / "logs", env={**_settings(name, via), **settings[name], **trust}
            )

        def stop_services() -> None:
            for service in services.values():
                service.stop()

        stack.callback(stop_services)
        for service in services.values():
            service.start()
        for service in services.values():
            service.wait_ready(timeout=120)
        xds_env = settings["xds"]
        xds = Xds(
            services["xds"],
            cluster.host_address,
            int(xds_env["TOLLGATE_XDS_GRPC_PORT"]),
            int(xds_env["TOLLGATE_XDS_API_PORT"]),
        )
        echo_target = cluster.remote_address()
        await stack.enter_async_context(UDPEcho(echo_target, 1234, name="echo"))
        envoy_pod(core, NAMESPACE, "edge", xds, {"app": "edge"}, delta=True)
        envoy_ip, envoy_container = await running_envoy(core, NAMESPACE, "edge")
        account = f"chaos-{uuid.uuid4().hex[:5]}"
        _account(cluster, account)
        agent = Agent.mint(core, account, allocator_tls.ca_file)
        body = {
            "apiVersion": f"{ROUTEDIP_GROUP}/{ROUTEDIP_VERSION}",
            "kind": "ClusterRoutedIPClass",
            "metadata": {"name": DO_CLASS},
            "spec": {
                "className": DO_CLASS,
                "provider": "digitalocean",
                "moveCooldownSeconds": 0,
                "fromSecretsRef": [{"name": DO_SECRET, "namespace": SYSTEM_NAMESPACE}],
                "digitalocean": {"apiURL": fake.url},
            },
        }
        custom.create_cluster_custom_object(ROUTEDIP_GROUP, ROUTEDIP_VERSION, "clusterroutedipclasses", body)
        web = {
            "metadata": {"name": "web"},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        }  # fmt: skip
        core.create_namespaced_service(NAMESPACE, web)  # type: ignore[arg-type]
        built = System(
            cluster,
            custom,
            services,
            proxies,
            fake,
            Nodes(cluster, core),
            echo_target,
            envoy_ip,
            envoy_container,
            allocator_tls.port,
            agent,
            account,
        )
        yield built
        built.nodes.restore()
