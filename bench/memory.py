"""Memory at scale: each service's resident memory on an empty cluster and after it has processed N objects of
the kinds it watches (N = 1000: LoadBalancers with 2 endpoints each, VirtualServices, RoutedIPs, Goops; the
webhook after admitting N of each of those four kinds), against the target of 120 MB each.

Each service runs as its own process (`python -m tollgate.<name>`, logging at INFO as deployed) against a fresh
embedded cluster of its own (components without client QPS limits, so the control plane is not what waits):

1. start it on the empty cluster, wait for /readyz and for its CPU to go quiet: the idle RSS (import time plus
   what an empty cluster costs);
2. create the N objects (8 clients at once) and wait until the service has processed them all, as its status
   says (allocator: every LoadBalancer Ready for its generation, with its 2 RemoteEndpoints Ready; xds: every
   VirtualService Accepted; routedip: every RoutedIP on a node; jobs: every Goop Completed; webhook: every create
   admitted through the API server, which calls it);
3. wait for its CPU to go quiet again: the peak RSS over the run (VmHWM) and the settled RSS (VmRSS).

    .venv/bin/python -m bench.memory                        # N = 1000, every service
    .venv/bin/python -m bench.memory --quick                # N = 20: a smoke run of every service (CI)
    .venv/bin/python -m bench.memory --services xds jobs --count 300

`measure_all` returns the numbers (one `Measurement` per service); `render` prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from bench import report
from bench.measure import MB_PER_MIB, cpu_seconds, rss_mib
from tollgate.models.epic import ACCOUNT_LABEL, USER_NAMESPACE_LABEL
from tollgate.runtime.kube import api_client
from tollgate.testing import agents, objects
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.net import free_port
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import ConditionTimeoutError, wait_for
from tollgate.testing.xds import xds_settings
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register
from tollgate.webhook.registration import Registration

TARGET_MB = 120.0
NAMESPACE = "bench"
ACCOUNT = "bench"
USER_NAMESPACE = f"epic-{ACCOUNT}"
SYSTEM_NAMESPACE = "tollgate-system"
WEBHOOK_LABEL = "webhook.tollgate.io/bench-memory"
CLIENTS = 8
PER_NODE_IP_LIMIT = 256  # the most a ClusterRoutedIPClass allows
Obj = dict[str, Any]


@dataclass(frozen=True)
class Measurement:
    """One service's resident memory in MB (10^6 bytes), idle and after processing `count` objects."""

    service: str
    objects: str
    count: int
    idle_mb: float
    peak_mb: float
    settled_mb: float
    seconds: float
    finished: bool = True  # False: the service had not processed them all within the bench's timeout

    @property
    def met(self) -> bool:
        """The target holds for the peak, which is what a memory limit would meet (and a service that did not
        finish within the timeout has not shown its peak)."""
        return self.finished and self.peak_mb < TARGET_MB

    @property
    def processed(self) -> str:
        return f"{self.seconds:.0f} s" if self.finished else f"not all within {self.seconds:.0f} s"


@dataclass
class Scenario:
    """How to run one service and load it: what the cluster needs first, the objects, and when they are done."""

    service: str
    describe: Callable[[int], str]
    env: Callable[[Path], dict[str, str]]
    prepare: Callable[[client.ApiClient, int], None]
    bodies: Callable[[int], list[Obj]]
    done: Callable[[client.CustomObjectsApi, int], bool]
    nodes: Callable[[int], int] = lambda count: 1


def condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def current_and_true(obj: Obj, kind: str) -> bool:
    state = condition(obj, kind)
    return bool(
        state and state["status"] == "True" and state.get("observedGeneration", 0) >= obj["metadata"]["generation"]
    )


def listing(custom: client.CustomObjectsApi, kind: str, namespace: str) -> list[Obj]:
    info = objects.RESOURCES[kind]
    items: list[Obj] = custom.list_namespaced_custom_object(info.group, info.version, namespace, info.plural)["items"]
    return items


def all_of(kind: str, namespace: str, test: Callable[[Obj], bool]) -> Callable[[client.CustomObjectsApi, int], bool]:
    def done(custom: client.CustomObjectsApi, count: int) -> bool:
        items = listing(custom, kind, namespace)
        return len(items) == count and all(test(item) for item in items)

    return done


def namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))


# --- allocator: LoadBalancers with 2 endpoints each -------------------------------------------------------------


def endpoint_address(index: int) -> str:
    """The index-th address of 127.77.0.0/16, the range the dev endpoint policy allows."""
    return f"127.77.{index // 250}.{index % 250 + 1}"


def allocator_prepare(kube: client.ApiClient, count: int, labels: dict[str, str] | None = None) -> None:
    """The account (allowed `count` LoadBalancers) and its service group `web` of one Envoy per LoadBalancer."""
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    namespace(core, USER_NAMESPACE, {USER_NAMESPACE_LABEL: "true", ACCOUNT_LABEL: ACCOUNT})
    account = objects.account(USER_NAMESPACE, ACCOUNT) | {"spec": {"loadBalancerLimit": count}}
    account["metadata"]["labels"] = labels or {}
    objects.create(custom, account)
    group = {
        "apiVersion": objects.EPIC_API_VERSION,
        "kind": "LBServiceGroup",
        "metadata": {"name": "web", "namespace": USER_NAMESPACE, "labels": labels or {}},
        "spec": {"envoy-image": "envoyproxy/envoy:v1.40.0", "envoy-replica-count": 1},
    }
    objects.create(custom, group)


def allocator_bodies(count: int, first: int = 0) -> list[Obj]:
    """Each LoadBalancer (`lb-<first>` on) and its two RemoteEndpoints, each endpoint on a client node of its own (one
    tunnel each)."""
    bodies: list[Obj] = []
    for i in range(first, first + count):
        name = f"lb-{i}"
        spec = {"public-address": f"192.168.{100 + i // 250}.{i % 250 + 1}", "service-group": "web"}
        bodies.append(objects.load_balancer(USER_NAMESPACE, name, spec | {"public-ports": [{"port": 8080}]}))
        for e in range(2):
            address = endpoint_address(2 * i + e)
            rep = objects.remote_endpoint(USER_NAMESPACE, address, name, f"{name}-e{e}")
            rep["spec"]["node-address"] = address
            bodies.append(rep)
    return bodies


def allocator_done(custom: client.CustomObjectsApi, count: int) -> bool:
    reps = listing(custom, "RemoteEndpoint", USER_NAMESPACE)
    if len(reps) < 2 * count or not all(current_and_true(rep, "Ready") for rep in reps):
        return False
    return all_of("LoadBalancer", USER_NAMESPACE, lambda lb: current_and_true(lb, "Ready"))(custom, count)


def allocator_env(workdir: Path) -> dict[str, str]:
    ca = agents.certificates(workdir / "allocator-tls")
    return {
        "TOLLGATE_ALLOCATOR_GRPC_ADDRESS": f"127.0.0.1:{free_port()}",
        "TOLLGATE_ALLOCATOR_GRPC_CERT_DIR": str(ca.parent),
        "TOLLGATE_ALLOCATOR_XDS_ADDRESS": "127.0.0.1:18000",
        "TOLLGATE_ALLOCATOR_GUE_ADDRESS": "192.168.1.40",
    }


# --- xds: VirtualServices ----------------------------------------------------------------------------------------


def xds_bodies(count: int) -> list[Obj]:
    return [
        objects.virtual_service(
            NAMESPACE, objects.listener(f"l{i}", 2000 + i % 60000), name=f"vs-{i}", selector={"app": f"vs-{i}"}
        )
        for i in range(count)
    ]


# --- routedip: RoutedIPs ------------------------------------------------------------------------------------------


def routedip_prepare(kube: client.ApiClient, count: int, labels: dict[str, str] | None = None) -> None:
    """The Service the RoutedIPs back and their class (as many on one node as its schema allows)."""
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    namespace(core, NAMESPACE)
    namespace(core, SYSTEM_NAMESPACE)
    core.create_namespaced_service(NAMESPACE, {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})  # type: ignore[arg-type]
    ip_class = objects.routed_ip_class("bench", perNodeIPLimit=PER_NODE_IP_LIMIT, moveCooldownSeconds=0)
    ip_class["metadata"]["labels"] = labels or {}
    objects.create(custom, ip_class)


def routedip_bodies(count: int) -> list[Obj]:
    return [
        objects.routed_ip(NAMESPACE, f"198.51.{100 + i // 250}.{i % 250 + 1}", "bench", NAMESPACE, f"ip-{i}")
        for i in range(count)
    ]


def routedip_done(custom: client.CustomObjectsApi, count: int) -> bool:
    def placed(rip: Obj) -> bool:
        status = rip.get("status") or {}
        return bool(status.get("assignedNode")) and not status.get("targetNode")

    return all_of("RoutedIP", NAMESPACE, placed)(custom, count)


# --- jobs: Goops --------------------------------------------------------------------------------------------------


def goop(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "goop.example.com/v1alpha1",
        "kind": "Goop",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {"cmd": "echo bench", "jobCount": 1},
    }


def goops_done(custom: client.CustomObjectsApi, count: int) -> bool:
    return all_of("Goop", NAMESPACE, lambda g: (g.get("status") or {}).get("phase") == "Completed")(custom, count)


# --- webhook: admission of each kind -----------------------------------------------------------------------------


def webhook_env(workdir: Path) -> dict[str, str]:
    bundle = generate(["127.0.0.1"])
    bundle.write(workdir / "webhook-tls")
    port = free_port()
    (workdir / "webhook-ca.pem").write_bytes(bundle.ca)
    return {
        "TOLLGATE_WEBHOOK_HOST": "127.0.0.1",
        "TOLLGATE_WEBHOOK_PORT": str(port),
        "TOLLGATE_WEBHOOK_CERT_DIR": str(workdir / "webhook-tls"),
        "TOLLGATE_WEBHOOK_LABEL_SELECTOR": f"{WEBHOOK_LABEL}=yes",
    }


def webhook_prepare(kube: client.ApiClient, count: int) -> None:
    """What the kinds' cross-object rules look up (the routed-IP class, the account and its service group),
    labelled: the webhook watches only what its label selector matches."""
    routedip_prepare(kube, count, {WEBHOOK_LABEL: "yes"})
    allocator_prepare(kube, count, {WEBHOOK_LABEL: "yes"})


def webhook_bodies(count: int) -> list[Obj]:
    """N of each kind the other services watch, labelled for the bench's webhook registration."""
    kinds = [xds_bodies(count), routedip_bodies(count), [goop(f"g-{i}") for i in range(count)]]
    kinds.append([b for b in allocator_bodies(count) if b["kind"] == "LoadBalancer"])
    labelled = []
    for body in (b for kind in kinds for b in kind):
        body["metadata"].setdefault("labels", {})[WEBHOOK_LABEL] = "yes"
        labelled.append(body)
    return labelled


def webhook_done(custom: client.CustomObjectsApi, count: int) -> bool:
    """The creates returned: each went through the webhook. Count them as stored."""
    stored = [
        listing(custom, kind, ns)
        for kind, ns in (("VirtualService", NAMESPACE), ("RoutedIP", NAMESPACE), ("Goop", NAMESPACE))
    ] + [listing(custom, "LoadBalancer", USER_NAMESPACE)]
    return all(len(items) == count for items in stored)


def nothing(kube: client.ApiClient, count: int) -> None:
    namespace(client.CoreV1Api(kube), NAMESPACE)


def no_env(workdir: Path) -> dict[str, str]:
    return {}


def pod_nodes(count: int) -> int:
    """Nodes for `count` pods: KWOK gives each node a /24 of pod addresses."""
    return 3 + count // 200


SCENARIOS = {
    "allocator": Scenario(
        "allocator",
        lambda n: f"{n} LoadBalancers, 2 endpoints each",
        allocator_env,
        allocator_prepare,
        allocator_bodies,
        allocator_done,
        pod_nodes,
    ),
    "xds": Scenario(
        "xds",
        lambda n: f"{n} VirtualServices",
        lambda workdir: xds_settings(),
        nothing,
        xds_bodies,
        all_of("VirtualService", NAMESPACE, lambda vs: current_and_true(vs, "Accepted")),
    ),
    "routedip": Scenario(
        "routedip",
        lambda n: f"{n} RoutedIPs",
        lambda workdir: {"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE},
        routedip_prepare,
        routedip_bodies,
        routedip_done,
        lambda n: 3 + n // PER_NODE_IP_LIMIT,
    ),
    "jobs": Scenario(
        "jobs",
        lambda n: f"{n} Goops (1 Job each)",
        no_env,
        nothing,
        lambda n: [goop(f"g-{i}") for i in range(n)],
        goops_done,
        pod_nodes,
    ),
    "webhook": Scenario(
        "webhook",
        lambda n: f"{n} each of LoadBalancer, VirtualService, RoutedIP, Goop admitted",
        webhook_env,
        webhook_prepare,
        webhook_bodies,
        webhook_done,
    ),
}


def wait_quiet(pid: int, what: str, timeout: float = 300) -> bool:
    """Until the process used under 2% of a core over a second (done with what it was doing): whether it did
    within `timeout`. A process that keeps some background work going is measured anyway, and said so."""
    last = [time.monotonic(), cpu_seconds(pid)]

    def quiet() -> bool:
        now, cpu = time.monotonic(), cpu_seconds(pid)
        if now - last[0] < 1:
            return False
        busy = (cpu - last[1]) / (now - last[0])
        last[:] = [now, cpu]
        return busy < 0.02

    try:
        wait_for(quiet, f"{what} to go quiet", timeout=timeout, interval=0.25)
    except ConditionTimeoutError:
        print(f"{what}: still busy after {timeout:.0f} s, measured anyway", file=sys.stderr)
        return False
    return True


def create_all(custom: client.CustomObjectsApi, bodies: list[Obj]) -> None:
    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(lambda body: objects.create(custom, body), bodies))


def register_webhook(kube: client.ApiClient, env: dict[str, str], workdir: Path) -> None:
    registration = Registration(
        ca_bundle=(workdir / "webhook-ca.pem").read_bytes(),
        url=f"https://127.0.0.1:{env['TOLLGATE_WEBHOOK_PORT']}",
        name="tollgate-webhook-bench-memory",
        object_selector={"matchLabels": {WEBHOOK_LABEL: "yes"}},
    )
    register(kube, registration)
    custom = client.CustomObjectsApi(kube)
    probe = goop("probe", {WEBHOOK_LABEL: "yes"}) | {"spec": {"cmd": " "}}

    def refused() -> bool:
        try:
            objects.create(custom, probe, dry_run=True)
        except client.ApiException as error:
            return "must not be blank" in str(error.body)
        return False

    wait_for(refused, "the webhook configurations to be in force", timeout=60)


def measure(scenario: Scenario, count: int, workdir: Path, timeout: float) -> Measurement:
    cluster = EmbeddedCluster(
        f"bench-memory-{scenario.service}-{os.getpid()}", workdir / "kwok", workdir / "kubeconfig", True
    )
    process: ServiceProcess | None = None
    try:
        cluster.up(scenario.nodes(count))
        cluster.install_crds()
        kube = api_client(cluster.kubeconfig, pool_size=CLIENTS)
        custom = client.CustomObjectsApi(kube)
        scenario.prepare(kube, count)
        env = {f"TOLLGATE_{scenario.service.upper()}_LOG_LEVEL": "INFO", **scenario.env(workdir)}
        process = ServiceProcess(scenario.service, cluster.kubeconfig, workdir / "logs", env=env).start()
        process.wait_ready(timeout=120)
        assert process.process is not None
        pid = process.process.pid
        if scenario.service == "webhook":
            register_webhook(kube, env, workdir)
        wait_quiet(pid, f"{scenario.service} after start")
        idle = rss_mib(pid) * MB_PER_MIB
        started = time.monotonic()
        create_all(custom, scenario.bodies(count))
        try:
            wait_for(lambda: scenario.done(custom, count), f"{scenario.service} to process {count}", timeout, 2.0)
            finished = True
        except ConditionTimeoutError as timed_out:
            print(f"{timed_out}; measured as it stands", file=sys.stderr)
            finished = False
        seconds = time.monotonic() - started
        if finished:
            wait_quiet(pid, f"{scenario.service} after the load")
        return Measurement(
            service=scenario.service,
            objects=scenario.describe(count),
            count=count,
            idle_mb=idle,
            peak_mb=rss_mib(pid, "VmHWM") * MB_PER_MIB,
            settled_mb=rss_mib(pid) * MB_PER_MIB,
            seconds=seconds,
            finished=finished,
        )
    finally:
        if process is not None:
            process.stop()
        cluster.down()


def measure_all(count: int, services: list[str], timeout: float = 900) -> list[Measurement]:
    """The summary: one Measurement per service, each on a fresh cluster of its own."""
    results = []
    for name in services:
        with tempfile.TemporaryDirectory(prefix=f"bench-memory-{name}-") as tmp:
            results.append(measure(SCENARIOS[name], count, Path(tmp), timeout))
        print(render(results[-1:]), file=sys.stderr, flush=True)
    return results


def render(results: list[Measurement]) -> str:
    lines = [
        "| service | objects | idle RSS | peak RSS | settled RSS | to processed | target | met |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.service} | {r.objects} | {r.idle_mb:.0f} MB | {r.peak_mb:.0f} MB | {r.settled_mb:.0f} MB "
            f"| {r.processed} | {TARGET_MB:.0f} MB | {'yes' if r.met else '**no**'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000, help="objects of each kind (default 1000)")
    parser.add_argument("--quick", action="store_true", help="20 objects of each kind (a smoke run)")
    parser.add_argument("--json", type=Path, help="write the measurements here as JSON (bench/report.py)")
    parser.add_argument("--services", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one service to process its objects")
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = measure_all(20 if args.quick else args.count, args.services, args.timeout)
    load_after = os.getloadavg()
    print(render(results))
    print(
        f"\nMB = 10^6 bytes; 'met' judges the peak. Load average (1, 5, 15 min) before: "
        f"{', '.join(f'{x:.1f}' for x in load_before)}; after: {', '.join(f'{x:.1f}' for x in load_after)}."
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([dataclasses.asdict(found) for found in results]) + "\n")


def rows(results: list[dict[str, Any]]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): each service's peak RSS against its idle RSS (what the
    service costs before it holds any object); the target is the peak's, at 1000 objects."""
    out = []
    for fields in results:
        found = Measurement(**fields)
        out.append(
            report.Row(
                what=f"memory: {found.service} with {found.objects}"
                + ("" if found.finished else f" (processed {found.processed})"),
                tollgate=f"{found.peak_mb:.0f} MB peak",
                peer=f"{found.idle_mb:.0f} MB (itself, idle)",
                ratio=report.ratio(found.peak_mb, found.idle_mb),
                target=f"under {TARGET_MB:.0f} MB",
                met=found.met,
            )
        )
    return out


if __name__ == "__main__":
    main()
