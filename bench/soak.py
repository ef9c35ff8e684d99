"""`make soak`: the chaos suite's system (tollgate.testing.chaos) under steady churn of every kind, a fault of the
chaos suite's set injected every few minutes, then a quiet period; at the end ONE table, printed and written to
.dev/soak/soak.md: objects churned, faults injected, each service's RSS, open file descriptors and threads at the
end of the warm-up and at the end, what leaked and what was lost, with a verdict per target (RSS growth under 10%
after the warm-up, nothing leaked, nothing lost). Exit 1 when a target is missed. Not part of make test or make
bench. It starts a cluster with the real node: run it under the machine's real-node lock where there is one.

    .venv/bin/python -m bench.soak                  # 30 minutes
    .venv/bin/python -m bench.soak --minutes 3      # a short run

The clock starts once the system is up (building it, the cluster included, takes under a minute more here). The
churn runs for the run less the quiet period (a tenth of the run, 30 s to 3 min); its first 5 minutes (a third of it
when shorter) are the warm-up. Each kind has a worker that starts a cycle at most every `--pace` seconds and waits
for each step of it:

- LoadBalancer (service group `soak`: no Envoy replicas, public addresses from the ServicePrefix `soak`): created,
  given its address and its Envoy Deployment; two endpoints on two client nodes registered over the allocator's gRPC
  API, each node's tunnel recorded in its status; one unregistered, its tunnel released; the load balancer deleted.
- VirtualService: created, served by the Envoy container (a datagram comes back from the echo server), deleted,
  its listener gone from the Envoy.
- RoutedIP: created, placed on a node (DigitalOcean agrees), deleted, the reserved IP unassigned.
- Goop (2 Jobs): created, Completed, deleted.

Steady objects stay throughout: the VirtualService `steady`, the RoutedIP `web`, four registrations on the load
balancer `lb`. Faults, one every `--fault-every` seconds (default: a quarter of the churn, at most 3 min), in turn:
SIGKILL of each service (started again, as a kubelet would), the kube-apiserver SIGSTOPped for 30 s, every
service's API connections half-open for 30 s, the allocator's API answers dropped for 30 s. A SIGKILL comes only
while a warm-up's length of churn remains (its turn goes to the next fault otherwise), so that the new process is
measured after a warm-up of its own: a restarted service's first figure is taken a warm-up after its restart. A
service that exits by itself is started again too, and counted. Each service's pid, RSS, open fds and threads are
read from /proc every 5 s.

When the churn stops, cycles in flight finish; whatever a cycle that did not converge left is deleted, the quiet
period passes, and the end state is waited for (at most 2 min): leaked is what is still there then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import aiohttp
import grpc
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.measure import MB_PER_MIB, open_fds, rss_mib, status_field
from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.jobs.workers import GOOP_UID_LABEL
from tollgate.models.epic import GROUP as EPIC_GROUP
from tollgate.models.epic import LOAD_BALANCER_LABEL
from tollgate.models.epic import VERSION as EPIC_VERSION
from tollgate.runtime.kube import api_client, is_conflict, is_not_found
from tollgate.testing.chaos import (
    NAMESPACE,
    SERVICES,
    System,
    chaos_cluster,
    create_goop,
    goop_completed,
    held_tunnels,
    listener,
    listeners,
    placed,
    routed_ip,
    running_system,
    serves,
    tunnels_lost,
    unless_retryable,
    virtual_service,
)
from tollgate.testing.faultproxy import Mode, break_the_network
from tollgate.testing.objects import RESOURCES, read
from tollgate.testing.wait import ConditionTimeoutError, eventually

T = TypeVar("T")

OUTPUT = Path(".dev/soak")
GROWTH_TARGET = 0.10
SAMPLE_SECONDS = 5.0
STEP_BOUND = 120.0  # seconds one step of a cycle may take, a fault's recovery included
END_BOUND = 120.0  # seconds the end state may take to converge once the quiet period is over
FAULT_SECONDS = 30.0  # how long a freeze, half-open connections or dropped answers last
MOVE_TAINT = "routedip.tollgate.io/move-in-progress"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # on every pod of a Job
SOAK_GROUP = "soak"  # the churned load balancers' service group and ServicePrefix
SOAK_POOL = {"pool": "198.51.100.0/26", "subnet": "198.51.100.0/24", "aggregation": "default"}
PORT = 8080
LB_ENDPOINTS = (("127.77.210.1", "127.77.211.1"), ("127.77.210.2", "127.77.211.2"))  # (address, node) per cycle
STEADY_ENDPOINTS = tuple((f"127.77.200.{i}", f"127.77.201.{i}") for i in range(1, 5))
STEADY_VS_PORT = 3100
VS_PORTS = range(3200, 3220)  # in turn: a port comes back long after its previous listener drained
STEADY_IP = "203.0.113.50"
CHURN_IPS = tuple(f"203.0.113.{host}" for host in range(100, 150))
GOOP_JOBS = 2
TUNNELS = "tunnel IDs held for deleted endpoints"
RESERVED_IPS = "reserved IPs assigned on DigitalOcean for deleted RoutedIPs"
ENVOY_LISTENERS = "Envoy listeners of deleted VirtualServices"
TRANSIENT = (
    ApiException,
    urllib3.exceptions.HTTPError,
    OSError,
    TimeoutError,
    grpc.aio.AioRpcError,
    aiohttp.ClientError,
)
LOAD_BALANCERS, REGISTRATIONS, VIRTUAL_SERVICES, ROUTED_IPS, GOOP_KIND = (
    "LoadBalancers (with their public address and Envoy Deployment)",
    "endpoint registrations over gRPC (one of each load balancer's two unregistered before it goes)",
    "VirtualServices (served by the Envoy, then deleted)",
    "RoutedIPs (placed on a node and on DigitalOcean, then deleted)",
    f"Goops ({GOOP_JOBS} Jobs each, run to completion, then deleted)",
)


@dataclass(frozen=True)
class Plan:
    """The run's timings, in seconds from the moment the system is up."""

    minutes: float
    pace: float
    fault_every: float | None

    @property
    def quiet(self) -> float:
        return min(max(self.minutes * 6, 30.0), 180.0)

    @property
    def churn(self) -> float:
        return self.minutes * 60 - self.quiet

    @property
    def warm_up(self) -> float:
        return min(300.0, self.churn / 3)

    @property
    def fault_interval(self) -> float:
        return self.fault_every or min(180.0, self.churn / 4)


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the churn started
    pid: int
    rss_mb: float
    fds: int
    threads: int


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[], Awaitable[None]]
    kills: str | None = None  # the service it SIGKILLs


@dataclass(frozen=True)
class Row:
    what: str
    measured: str
    target: str = "-"
    met: bool | None = None


def threaded(function: Callable[..., T], *args: Any) -> Callable[[], Awaitable[T]]:
    """A probe for `eventually` that runs a blocking call in a thread: a frozen API server stalls that thread
    (up to the client's timeout), not the event loop that ends the freeze."""

    async def probe() -> T:
        return await asyncio.to_thread(function, *args)

    return probe


def applied(harmless: Callable[[BaseException], bool], call: Callable[..., object], *args: Any) -> bool:
    """Make the call; an error `harmless` says is the call's own outcome (409 to a create: the object exists; 404
    to a delete: it is gone), as after a call that timed out yet was applied, counts as done."""
    try:
        call(*args)
    except ApiException as error:
        if not harmless(error):
            raise
    return True


def clock(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def stuck(objects: list[dict[str, Any]]) -> list[str]:
    """The objects being deleted that are still there: held by a finalizer."""
    return [
        f"{o['kind']} {o['metadata']['name']} ({', '.join(o['metadata'].get('finalizers') or [])})"
        for o in objects
        if o["metadata"].get("deletionTimestamp")
    ]


def orphans(objects: list[Any], label: str, owners: set[str]) -> list[str]:
    """The objects (client models, listed by `label`) whose `label` names none of `owners`: the label outlives
    the owner reference, which an orphaning delete takes off."""
    return [o.metadata.name for o in objects if o.metadata.labels[label] not in owners]


def memory_row(name: str, samples: list[Sample], restarted: float, warm_up: float) -> Row:
    """The service's figures at the end (its last sample) against those of the same process a warm-up into the
    churn, or a warm-up after its restart (`restarted` seconds into the churn; 0 when it was never restarted)."""
    end = samples[-1]
    since = max(warm_up, restarted + warm_up)
    first = next((s for s in samples if s.pid == end.pid and s.at >= since and s is not end), None)
    what, target = f"{name}: RSS (MB), open fds, threads", f"RSS growth < {GROWTH_TARGET:.0%}"
    if first is None:
        return Row(what, f"not measured: restarted at {clock(restarted)}, too late for a warm-up", target, False)
    growth = end.rss_mb / first.rss_mb - 1
    note = f" (process since {clock(restarted)}: restarted)" if restarted > 0 else ""
    measured = (
        f"RSS {first.rss_mb:.1f} at {clock(first.at)} -> {end.rss_mb:.1f} at {clock(end.at)} ({growth:+.1%}); "
        f"fds {first.fds} -> {end.fds}; threads {first.threads} -> {end.threads}{note}"
    )
    return Row(what, measured, target, growth < GROWTH_TARGET)


def next_fault(rotation: list[Fault], turn: int, remaining: float, warm_up: float) -> tuple[Fault, int]:
    """The fault whose turn it is, and the next turn: a SIGKILL only while at least a warm-up of churn remains
    (`remaining` seconds), so that the new process can be measured after a warm-up of its own."""
    while remaining < warm_up and rotation[turn % len(rotation)].kills is not None:
        turn += 1
    return rotation[turn % len(rotation)], turn + 1


class Soak:
    def __init__(self, system: System, plan: Plan) -> None:
        self.system = system
        self.plan = plan
        kube = api_client(system.cluster.kubeconfig, pool_size=16)
        self.custom = client.CustomObjectsApi(kube)
        self.core = client.CoreV1Api(kube)
        self.apps = client.AppsV1Api(kube)
        self.batch = client.BatchV1Api(kube)
        self.user_namespace = f"epic-{system.account}"
        self.started = time.monotonic()  # the churn's start; reset by run()
        self.process_started = dict.fromkeys(SERVICES, self.started)
        self.restarting: set[str] = set()
        self.samples: dict[str, list[Sample]] = {name: [] for name in SERVICES}
        self.churned: Counter[str] = Counter()
        self.faults: list[tuple[float, str]] = []
        self.crashes: list[str] = []
        self.stalled: list[str] = []
        self.lost_registrations: list[str] = []
        self.leaked_in_churn: defaultdict[str, list[str]] = defaultdict(list)
        self.left_by_stalled: list[str] = []
        self.steady: dict[str, int] = {}

    def now(self) -> float:
        return time.monotonic() - self.started

    async def step(self, what: str, probe: Callable[[], Awaitable[T | None]]) -> T:
        return await eventually(probe, what, timeout=STEP_BOUND, interval=0.5, ignore=TRANSIENT)

    async def remaining(self, what: str, probe: Callable[[], Awaitable[list[str]]], bound: float) -> list[str]:
        """Wait until `probe` lists nothing, at most `bound` seconds; what it still lists then."""
        last = [f"{what}: could not be read within {bound:.0f} s"]

        async def empty() -> bool:
            nonlocal last
            last = await probe()
            return not last

        with contextlib.suppress(ConditionTimeoutError):
            await eventually(empty, what, timeout=bound, interval=1, ignore=TRANSIENT)
        return last

    async def create(self, what: str, create: Callable[..., object], *args: Any) -> None:
        await self.step(f"{what} created", threaded(applied, is_conflict, create, *args))

    async def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete the object of one of tollgate's kinds and wait until it is gone (its finalizers done)."""
        info, custom = RESOURCES[kind], self.custom
        delete = custom.delete_namespaced_custom_object
        await self.step(f"{name} deleted", threaded(applied, is_not_found, delete, info.group, info.version,
                                                     namespace, info.plural, name))  # fmt: skip

        def gone() -> bool:
            return read(custom, kind, name, namespace) is None

        await self.step(f"{name} gone", threaded(gone))

    # ----- the allocator's registration API, as an agent calls it -----
    def allocator(self) -> AllocatorClient:
        agent = self.system.allocator_agent
        return AllocatorClient(f"127.0.0.1:{self.system.allocator_port}", agent.token, agent.channel_credentials())

    async def register(self, load_balancer: str, address: str, node: str) -> int | None:
        async with self.allocator() as api:
            answer = await unless_retryable(
                api.register(self.system.account, load_balancer, address, PORT, node_address=node, timeout=5)
            )
        return None if answer is None else int(answer.tunnel.tunnel_id)

    async def unregister(self, load_balancer: str, address: str) -> bool:
        async with self.allocator() as api:
            answer = await unless_retryable(api.unregister(self.system.account, load_balancer, address, timeout=5))
        return answer is not None

    # ----- reads -----
    def public_address(self, load_balancer: str) -> str | None:
        lb = read(self.custom, "LoadBalancer", load_balancer, self.user_namespace) or {"spec": {}}
        return cast(str | None, lb["spec"].get("public-address"))

    def envoy_deployment(self, load_balancer: str) -> bool:
        name = f"{load_balancer}-envoy"
        return bool(
            self.apps.list_namespaced_deployment(self.user_namespace, field_selector=f"metadata.name={name}").items
        )

    def listed(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """The objects of one of tollgate's kinds in `namespace`."""
        info = RESOURCES[kind]
        listing = self.custom.list_namespaced_custom_object(info.group, info.version, namespace, info.plural)
        return list(cast(dict[str, Any], listing)["items"])

    # ----- before the churn -----
    async def prepare(self) -> None:
        """The churned load balancers' ServicePrefix and service group, and the steady objects, converged."""
        system, create = self.system, self.custom.create_namespaced_custom_object
        api_version = f"{EPIC_GROUP}/{EPIC_VERSION}"
        prefix = {"apiVersion": api_version, "kind": "ServicePrefix",
                  "metadata": {"name": SOAK_GROUP, "namespace": "epic"},
                  "spec": {"public-pool": SOAK_POOL}}  # fmt: skip
        group = {"apiVersion": api_version, "kind": "LBServiceGroup",
                 "metadata": {"name": SOAK_GROUP, "namespace": self.user_namespace},
                 "spec": {"envoy-replica-count": 0, "service-prefix": SOAK_GROUP}}  # fmt: skip
        await self.create("the ServicePrefix soak", create, EPIC_GROUP, EPIC_VERSION, "epic", "serviceprefixes", prefix)
        await self.create("the LBServiceGroup soak", create, EPIC_GROUP, EPIC_VERSION, self.user_namespace,
                          "lbservicegroups", group)  # fmt: skip
        await self.create("the steady VirtualService", virtual_service, system, "steady", STEADY_VS_PORT)
        await self.create("the steady RoutedIP", routed_ip, system, "web", STEADY_IP)
        for address, node in STEADY_ENDPOINTS:
            self.steady[node] = await self.step(f"a tunnel for {node}", partial(self.register, "lb", address, node))
        await self.step("the steady VirtualService served", partial(serves, system, STEADY_VS_PORT))
        await self.step("the steady RoutedIP placed", threaded(placed, system, "web", STEADY_IP))
        await self.step("the steady registrations recorded", threaded(lambda: not tunnels_lost(system, self.steady)))

    # ----- the churn: one cycle of each kind -----
    async def load_balancer_cycle(self, n: int) -> None:
        name, namespace = f"soak-{n}", self.user_namespace
        body = {"apiVersion": f"{EPIC_GROUP}/{EPIC_VERSION}", "kind": "LoadBalancer",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"public-ports": [{"port": 80}], "service-group": SOAK_GROUP}}  # fmt: skip
        await self.create(name, self.custom.create_namespaced_custom_object, EPIC_GROUP, EPIC_VERSION, namespace,
                          "loadbalancers", body)  # fmt: skip
        await self.step(f"{name}'s public address", threaded(self.public_address, name))
        await self.step(f"{name}'s Envoy Deployment", threaded(self.envoy_deployment, name))
        given = {}
        for address, node in LB_ENDPOINTS:
            given[node] = await self.step(f"a tunnel for {node} on {name}", partial(self.register, name, address, node))
            self.churned[REGISTRATIONS] += 1
        self.lost_registrations += await self.remaining(
            f"{name}'s status records its tunnels", threaded(tunnels_lost, self.system, given, name), STEP_BOUND
        )
        address, node = LB_ENDPOINTS[0]
        await self.step(f"{address} unregistered from {name}", partial(self.unregister, name, address))

        def still_held() -> list[str]:
            tunnel = held_tunnels(self.system, name).get(node)
            return [] if tunnel is None else [f"{name}: node {node} holds tunnel {tunnel}, its endpoint unregistered"]

        self.leaked_in_churn[TUNNELS] += await self.remaining(
            f"{name} releases {node}'s tunnel", threaded(still_held), STEP_BOUND
        )
        await self.delete("LoadBalancer", namespace, name)
        self.churned[LOAD_BALANCERS] += 1

    async def virtual_service_cycle(self, n: int) -> None:
        name, port = f"soak-vs-{n}", VS_PORTS[n % len(VS_PORTS)]
        await self.create(name, virtual_service, self.system, name, port)
        await self.step(f"{name} served on {port}", partial(serves, self.system, port))
        await self.delete("VirtualService", NAMESPACE, name)

        async def listener_gone() -> bool:
            return listener(name) not in await listeners(self.system)

        await self.step(f"{name}'s listener leaves the Envoy", listener_gone)
        self.churned[VIRTUAL_SERVICES] += 1

    async def routed_ip_cycle(self, n: int) -> None:
        name, ip = f"soak-rip-{n}", CHURN_IPS[n % len(CHURN_IPS)]
        await self.create(name, routed_ip, self.system, name, ip)
        await self.step(f"{name} placed", threaded(placed, self.system, name, ip))
        await self.delete("RoutedIP", NAMESPACE, name)

        async def still_assigned() -> list[str]:
            droplet = self.system.fake.reserved_ips.get(ip)
            return [] if droplet is None else [f"{ip} on droplet {droplet} after {name} was deleted"]

        self.leaked_in_churn[RESERVED_IPS] += await self.remaining(f"{ip} unassigned", still_assigned, STEP_BOUND)
        self.churned[ROUTED_IPS] += 1

    async def goop_cycle(self, n: int) -> None:
        name = f"soak-goop-{n}"
        await self.create(name, create_goop, self.system, name, GOOP_JOBS)
        await self.step(f"{name} completed", threaded(goop_completed, self.system, name))
        await self.delete("Goop", NAMESPACE, name)
        self.churned[GOOP_KIND] += 1

    async def churn(self, kind: str, cycle: Callable[[int], Awaitable[None]], stop: asyncio.Event) -> None:
        for n in itertools.count():
            if stop.is_set():
                return
            began = time.monotonic()
            try:
                await cycle(n)
            except ConditionTimeoutError as error:
                self.stalled.append(f"{kind.split(' ')[0]} cycle {n} at {clock(began - self.started)}: {error}"[:300])
            with contextlib.suppress(TimeoutError):
                # The pace: the next cycle starts `pace` seconds after this one did (or at once when it took
                # longer), unless the churn stops meanwhile.
                await asyncio.wait_for(stop.wait(), max(0.0, began + self.plan.pace - time.monotonic()))

    # ----- faults -----
    async def restart(self, name: str, kill: bool) -> None:
        """Start the service again (after a SIGKILL when `kill`), as a kubelet would; the sampler leaves it alone
        meanwhile."""
        self.restarting.add(name)
        try:
            if kill:
                self.system.services[name].kill()
            self.process_started[name] = time.monotonic()
            await asyncio.to_thread(self.system.restart, name)
        finally:
            self.restarting.discard(name)

    async def freeze(self) -> None:
        await self.system.freeze_api_server(FAULT_SECONDS)

    async def half_open(self) -> None:
        await asyncio.to_thread(self.system.set_proxies, Mode.FREEZE_OPEN)
        try:
            await asyncio.sleep(FAULT_SECONDS)  # the fault itself, not a wait for a condition
        finally:
            await asyncio.to_thread(self.system.set_proxies, Mode.PASS)

    async def drop_answers(self) -> None:
        done = asyncio.Event()
        breaking = asyncio.create_task(break_the_network(self.system.proxies["allocator"], done, seed=len(self.faults)))
        try:
            await asyncio.sleep(FAULT_SECONDS)  # the fault itself
        finally:
            done.set()
            await breaking
            await asyncio.to_thread(self.system.proxies["allocator"].set_mode, Mode.PASS)

    def rotation(self) -> list[Fault]:
        kills = [
            Fault(f"SIGKILL of {name}, started again", partial(self.restart, name, kill=True), name)
            for name in SERVICES
        ]
        seconds = f"{FAULT_SECONDS:.0f} s"
        return [
            *kills,
            Fault(f"kube-apiserver SIGSTOP {seconds}, SIGCONT", self.freeze),
            Fault(f"every service's API connections half-open {seconds}", self.half_open),
            Fault(f"allocator: API answers dropped {seconds}", self.drop_answers),
        ]

    async def inject_faults(self, stop: asyncio.Event) -> None:
        rotation, turn, at = self.rotation(), 0, self.plan.fault_interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, at - self.now()))
                return
            if self.plan.churn - self.now() < FAULT_SECONDS:  # it would last into the quiet period
                await stop.wait()
                return
            fault, turn = next_fault(rotation, turn, self.plan.churn - self.now(), self.plan.warm_up)
            self.faults.append((self.now(), fault.name))
            print(f"soak: {clock(self.now())} {fault.name}", flush=True)
            await fault.inject()
            at = max(at + self.plan.fault_interval, self.now())

    # ----- measuring -----
    def sample(self) -> None:
        at = self.now()
        for name, service in self.system.services.items():
            if service.process is None or name in self.restarting:
                continue
            pid = service.process.pid
            with contextlib.suppress(FileNotFoundError, KeyError):  # gone, or a zombie not reaped yet
                rss = rss_mib(pid) * MB_PER_MIB
                self.samples[name].append(Sample(at, pid, rss, open_fds(pid), status_field(pid, "Threads")))

    async def restart_exited(self) -> None:
        """A service that exited by itself is started again, as a kubelet would, and counted."""
        for name, service in self.system.services.items():
            if name in self.restarting or service.process is None or service.process.poll() is None:
                continue
            self.crashes.append(f"{name} exited with {service.process.returncode} at {clock(self.now())}")
            await self.restart(name, kill=False)

    async def measure(self, stop: asyncio.Event) -> None:
        while True:
            self.sample()
            await self.restart_exited()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SAMPLE_SECONDS)
                return

    # ----- after the churn -----
    async def delete_what_stalled_cycles_left(self) -> None:
        places = (("LoadBalancer", self.user_namespace), ("VirtualService", NAMESPACE), ("RoutedIP", NAMESPACE),
                  ("Goop", NAMESPACE))  # fmt: skip
        for kind, namespace in places:
            for obj in await asyncio.to_thread(self.listed, kind, namespace):
                name = obj["metadata"]["name"]
                if name.startswith("soak-"):
                    self.left_by_stalled.append(f"{kind} {name}")
                    await self.delete(kind, namespace, name)

    def leaks(self) -> dict[str, list[str]]:
        """What is left of the churn that should not be, by kind of leak (each list empty once converged)."""
        system, namespace = self.system, self.user_namespace
        load_balancers = self.listed("LoadBalancer", namespace)
        endpoints = self.listed("RemoteEndpoint", namespace)
        goops = self.listed("Goop", NAMESPACE)
        prefix = read(self.custom, "ServicePrefix", SOAK_GROUP, "epic") or {}
        lb_names = {o["metadata"]["name"] for o in load_balancers}
        goop_uids = {o["metadata"]["uid"] for o in goops}
        jobs = self.batch.list_namespaced_job(NAMESPACE).items
        goop_jobs = [j for j in jobs if GOOP_UID_LABEL in (j.metadata.labels or {})]
        pods = self.core.list_namespaced_pod(NAMESPACE, label_selector=JOB_NAME_LABEL).items
        deployments = self.apps.list_namespaced_deployment(namespace, label_selector=LOAD_BALANCER_LABEL).items
        config_maps = self.core.list_namespaced_config_map(namespace, label_selector=LOAD_BALANCER_LABEL).items
        tunnels = [f"lb: node {n} holds tunnel {t}" for n, t in held_tunnels(system).items() if n not in self.steady]
        tunnels += [
            f"RemoteEndpoint {e['metadata']['name']}"
            for e in endpoints
            if e["spec"]["load-balancer"] != "lb" or e["spec"].get("node-address") not in self.steady
        ]
        return {
            TUNNELS: tunnels,
            "public addresses still allocated": [
                f"{address} to {holder['kind']} {holder['name']}"
                for address, holder in ((prefix.get("status") or {}).get("allocations") or {}).items()
            ],
            "Envoy Deployments and ConfigMaps without their LoadBalancer": [
                *(f"Deployment {name}" for name in orphans(deployments, LOAD_BALANCER_LABEL, lb_names)),
                *(f"ConfigMap {name}" for name in orphans(config_maps, LOAD_BALANCER_LABEL, lb_names)),
            ],
            "Jobs without their Goop, pods without their Job": [
                *(f"Job {name}" for name in orphans(goop_jobs, GOOP_UID_LABEL, goop_uids)),
                *(f"pod {name}" for name in orphans(pods, JOB_NAME_LABEL, {str(j.metadata.name) for j in jobs})),
            ],
            "objects stuck with finalizers": [
                *stuck(load_balancers),
                *stuck(endpoints),
                *stuck(self.listed("VirtualService", NAMESPACE)),
                *stuck(self.listed("RoutedIP", NAMESPACE)),
                *stuck(goops),
            ],
            RESERVED_IPS: [
                f"{ip} on droplet {system.fake.reserved_ips[ip]}"
                for ip in CHURN_IPS
                if system.fake.reserved_ips.get(ip) is not None
            ],
            "nodes left with the move taint": [
                f"node {n.metadata.name}"
                for n in self.core.list_node().items
                if any(t.key == MOVE_TAINT for t in (n.spec.taints or []))
            ],
        }

    async def end_state(self) -> dict[str, list[str]]:
        """The leaks once the system converged (at most END_BOUND seconds), with those seen during the churn."""
        last = {"the end state": [f"not read within {END_BOUND:.0f} s"]}

        async def converged() -> bool:
            nonlocal last
            found = await asyncio.to_thread(self.leaks)
            found[ENVOY_LISTENERS] = sorted((await listeners(self.system)) - {listener("steady")})
            last = found
            return not any(found.values())

        with contextlib.suppress(ConditionTimeoutError):
            await eventually(converged, "the end state", timeout=END_BOUND, interval=1, ignore=TRANSIENT)
        return {what: [*self.leaked_in_churn[what], *found] for what, found in last.items()}

    async def steady_objects_lost(self) -> list[str]:
        lost = [] if await serves(self.system, STEADY_VS_PORT) else ["the steady VirtualService is not served"]
        if not await asyncio.to_thread(placed, self.system, "web", STEADY_IP):
            lost.append(f"the steady RoutedIP {STEADY_IP} is not placed")
        return lost

    # ----- the run -----
    async def run(self) -> list[Row]:
        await self.prepare()
        self.started = time.monotonic()
        self.process_started = dict.fromkeys(SERVICES, self.started)
        churning, measuring = asyncio.Event(), asyncio.Event()
        cycles = {
            LOAD_BALANCERS: self.load_balancer_cycle,
            VIRTUAL_SERVICES: self.virtual_service_cycle,
            ROUTED_IPS: self.routed_ip_cycle,
            GOOP_KIND: self.goop_cycle,
        }
        measure = asyncio.create_task(self.measure(measuring))
        work = [asyncio.create_task(self.churn(kind, cycle, churning)) for kind, cycle in cycles.items()]
        work.append(asyncio.create_task(self.inject_faults(churning)))
        await asyncio.sleep(self.plan.churn)  # the churn's length, not a wait for a condition
        churning.set()
        print(f"soak: {clock(self.now())} churn over; the cycles in flight finish", flush=True)
        await asyncio.gather(*work)
        await self.delete_what_stalled_cycles_left()
        await asyncio.sleep(max(0.0, self.plan.churn + self.plan.quiet - self.now()))  # the quiet period itself
        print(f"soak: {clock(self.now())} quiet period over; the end state", flush=True)
        leaks = await self.end_state()
        lost_steady = await self.remaining(
            "the steady registrations", threaded(tunnels_lost, self.system, self.steady), END_BOUND
        )
        lost_objects = await self.remaining("the steady objects", self.steady_objects_lost, END_BOUND)
        measuring.set()
        await measure
        self.sample()
        return self.rows(leaks, lost_steady, lost_objects)

    # ----- the table -----
    def rows(self, leaks: dict[str, list[str]], lost_steady: list[str], lost_objects: list[str]) -> list[Row]:
        plan = self.plan
        run = (
            f"{plan.minutes:g} min: churn {clock(plan.churn)} (warm-up {clock(plan.warm_up)}), quiet "
            f"{clock(plan.quiet)}; a cycle of each kind every {plan.pace:g} s at most; end state read at "
            f"{clock(self.now())}"
        )
        kinds = (LOAD_BALANCERS, REGISTRATIONS, VIRTUAL_SERVICES, ROUTED_IPS, GOOP_KIND)
        faults = "; ".join(f"{clock(at)} {name}" for at, name in self.faults) or "none"
        rows = [
            Row("run (from the system up)", run),
            *(Row(f"churned: {kind}", str(self.churned[kind])) for kind in kinds),
            Row(f"faults injected: {len(self.faults)}", faults),
        ]
        memory = [
            memory_row(name, self.samples[name], self.process_started[name] - self.started, plan.warm_up)
            for name in SERVICES
        ]
        leaked = [
            Row(f"leaked: {what}", "; ".join(found) or "none", "none", not found) for what, found in leaks.items()
        ]
        lost = {
            "lost registrations (a tunnel given, not recorded; a steady one's tunnel changed or gone)": [
                *self.lost_registrations,
                *lost_steady,
            ],
            "lost: the steady VirtualService served, the steady RoutedIP placed": lost_objects,
            "lost: churn cycles that did not converge within their bound": self.stalled,
            "services that exited by themselves (started again)": self.crashes,
        }
        lost_rows = [Row(what, "; ".join(found) or "none", "none", not found) for what, found in lost.items()]
        if self.left_by_stalled:
            lost_rows.append(Row("what those cycles left, deleted after the churn", "; ".join(self.left_by_stalled)))
        verdicts = [
            Row(f"TARGET: RSS growth < {GROWTH_TARGET:.0%} after the warm-up", "every service above", "met",
                all(r.met for r in memory)),
            Row("TARGET: nothing leaked", "every leak above", "met", all(r.met for r in leaked)),
            Row("TARGET: nothing lost", "every loss above", "met", all(r.met is not False for r in lost_rows)),
        ]  # fmt: skip
        return rows + memory + leaked + lost_rows + verdicts


def markdown(rows: list[Row]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| what | measured | target | met |", "| --- | --- | --- | --- |"]
    verdict = {None: "-", True: "met", False: "NOT met"}
    lines += [f"| {cell(r.what)} | {cell(r.measured)} | {r.target} | {verdict[r.met]} |" for r in rows]
    return "\n".join(lines) + "\n"


async def soak(plan: Plan, output: Path) -> list[Row]:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(16, thread_name_prefix="soak"))
    run = output / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    with (
        tempfile.TemporaryDirectory(prefix="tollgate-soak-", ignore_cleanup_errors=True) as workdir,
        chaos_cluster(Path(workdir), f"tollgate-soak-{os.getpid()}") as cluster,
    ):
        async with running_system(cluster, run) as system:
            print(f"soak: the system is up; {plan.minutes:g} minutes from now (logs: {run / 'logs'})", flush=True)
            return await Soak(system, plan).run()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="the run's length once the system is up")
    parser.add_argument("--pace", type=float, default=10.0, help="seconds between the starts of two cycles of a kind")
    parser.add_argument(
        "--fault-every", type=float, help="seconds between faults (default: a quarter of the churn, at most 180)"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    plan = Plan(args.minutes, args.pace, args.fault_every)
    if plan.churn <= 0:
        parser.error(f"--minutes {args.minutes:g}: too short for the quiet period ({plan.quiet:.0f} s) and a churn")
    rows = asyncio.run(soak(plan, args.output))
    table = markdown(rows)
    (args.output / "soak.md").write_text(table)
    print()
    print(table)
    print(f"written: {args.output / 'soak.md'}")
    return 0 if all(row.met is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
