"""Failover time of tollgate-routedip: from a node becoming NotReady, as the API server records it (its
NotReady update arriving on a watch), to its routed IPs being assigned to another node (the local
provider's record on the new node arriving on the same watch), over repeated moves, for 1 and 50 RoutedIPs.

The baseline, measured on the same writes, is one API write seen through a watch: from sending the
node's status write to its update arriving on the watch. The ratios say how many such round trips a
failover costs.

    .venv/bin/python bench/routedip.py [--repeats 20] [--repeats-many 5] [--many 50]
"""

from __future__ import annotations

import argparse
import json
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from bench.measure import percentile
from tollgate.routedip.providers import local
from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.nodes import HOLD_LABEL, HOLD_POLICY_OBJECTS
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for

GROUP, VERSION = "routedip.tollgate.io", "v1alpha1"
NAMESPACE = "bench"
SYSTEM_NAMESPACE = "tollgate-system"


class Watches:
    """Every update of the nodes and of the local provider's ConfigMap, with the time it arrived, from
    watches running in threads."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.events: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
        self._watches = [watch.Watch(), watch.Watch()]
        self._threads = [
            threading.Thread(target=self._run, args=(self._watches[0], core.list_node, {}), daemon=True),
            threading.Thread(
                target=self._run,
                args=(
                    self._watches[1],
                    core.list_namespaced_config_map,
                    {"namespace": SYSTEM_NAMESPACE, "label_selector": f"{local.LABEL}=ip"},
                ),
                daemon=True,
            ),
        ]
        self._stopped = False

    def _run(self, stream: watch.Watch, list_call: Any, arguments: dict[str, str]) -> None:
        try:
            for event in stream.stream(list_call, _preload_content=False, timeout_seconds=3600, **arguments):
                self.events.put((time.monotonic(), event["raw_object"]))
        except Exception:
            if not self._stopped:
                raise

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def drain(self) -> None:
        while not self.events.empty():
            self.events.get_nowait()

    def stop(self) -> None:
        self._stopped = True
        for stream in self._watches:
            stream.stop()


def ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions") or [])


def healthy(node: client.V1Node, tainted_ok: bool = False) -> bool:
    is_ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    return is_ready and (tainted_ok or not any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or []))


def failover(core: client.CoreV1Api, watches: Watches, holder: str, ips: list[str]) -> tuple[float, list[float], str]:
    """Make `holder` NotReady; (write-to-watch latency, per-IP failover times from the NotReady update on the
    watch, the new holder). Restores the node."""
    watches.drain()
    core.patch_node(holder, {"metadata": {"labels": {HOLD_LABEL: "true"}}})
    condition = {"type": "Ready", "status": "False", "reason": "KubeletDown", "message": "benchmark"}
    sent = time.monotonic()
    core.patch_node_status(holder, {"status": {"conditions": [condition]}})

    seen: float | None = None
    moved: dict[str, float] = {}
    new_holder = ""
    deadline = sent + 30
    while len(moved) < len(ips):
        arrived, obj = watches.events.get(timeout=max(0.1, deadline - time.monotonic()))
        if obj["kind"] == "Node":
            if obj["metadata"]["name"] == holder and seen is None and not ready(obj):
                seen = arrived
            continue
        for ip in ips:
            if obj["metadata"]["name"] != local.ip_config_map(ip) or ip in moved:
                continue
            elsewhere = [node for node in obj.get("data") or {} if node != holder]
            if elsewhere:
                moved[ip], new_holder = arrived, elsewhere[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(moved)} of {len(ips)} IPs moved off {holder} within 30 s")
    core.patch_node(holder, {"metadata": {"labels": {HOLD_LABEL: None}}})
    wait_for(lambda: healthy(core.read_node(holder), tainted_ok=True), f"{holder} Ready again")
    assert seen is not None
    return seen - sent, [moved[ip] - seen for ip in ips], new_holder


def settle(custom: client.CustomObjectsApi, names: list[str]) -> dict[str, str]:
    """Wait until every RoutedIP is assigned with no move in progress; their holders."""

    def settled() -> dict[str, str] | None:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "routedips")["items"]
        status = {i["metadata"]["name"]: i.get("status") or {} for i in items}
        if all(status.get(n, {}).get("assignedNode") and not status[n].get("targetNode") for n in names):
            return {n: status[n]["assignedNode"] for n in names}
        return None

    return wait_for(settled, "every RoutedIP settled", timeout=60)


def run(
    count: int, repeats: int, core: client.CoreV1Api, custom: client.CustomObjectsApi, watches: Watches
) -> dict[str, list[float]]:
    wait_for(lambda: all(healthy(n) for n in core.list_node().items), "every node Ready and untainted", timeout=120)
    names = [f"ip-{count}-{i}" for i in range(count)]
    ips = [f"198.51.{100 + count // 250}.{i + 1}" for i in range(count)]
    for name, ip in zip(names, ips, strict=True):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "routedips",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RoutedIP",
                "metadata": {"name": name},
                "spec": {
                    "className": "bench",
                    "routedIP": ip,
                    "serviceRef": {"serviceName": "web", "namespace": NAMESPACE},
                },
            },
        )
    results: dict[str, list[float]] = {"watch": [], "each": [], "all": []}
    by_name = dict(zip(names, ips, strict=True))
    for _ in range(repeats):
        holders = settle(custom, names)
        # Fail the node holding the most IPs (a node recovering from the last round may have missed some).
        busiest = max(set(holders.values()), key=list(holders.values()).count)
        on_it = [by_name[name] for name, node in holders.items() if node == busiest]
        seen, moved, _ = failover(core, watches, busiest, on_it)
        results["watch"].append(seen)
        results["each"].extend(moved)
        results["all"].append(max(moved))
    for name in names:
        custom.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "routedips", name)
    wait_for(
        lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "routedips")["items"], "released"
    )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20, help="failovers with one RoutedIP")
    parser.add_argument("--many", type=int, default=50, help="RoutedIPs in the second run")
    parser.add_argument("--repeats-many", type=int, default=5, help="failovers with --many RoutedIPs")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="routedip-bench-"))
    cluster = EmbeddedCluster(f"routedip-bench-{int(time.time())}", workdir / "kwok", workdir / "kubeconfig")
    controller: ServiceProcess | None = None
    watches: Watches | None = None
    try:
        cluster.up(3)
        cluster.install_crds()
        kube = api_client(cluster.kubeconfig)
        core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
        cluster.kubectl(
            "apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": HOLD_POLICY_OBJECTS})
        )
        core.create_namespace({"metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]
        core.create_namespace({"metadata": {"name": SYSTEM_NAMESPACE}})  # type: ignore[arg-type]
        core.create_namespaced_service(NAMESPACE, {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})  # type: ignore[arg-type]
        custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "clusterroutedipclasses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterRoutedIPClass",
                "metadata": {"name": "bench"},
                "spec": {
                    "className": "bench",
                    "provider": "local",
                    "perNodeIPLimit": max(1, args.many),
                    "moveCooldownSeconds": 0,
                },
            },
        )
        controller = ServiceProcess(
            "routedip",
            cluster.kubeconfig,
            workdir / "logs",
            env={"TOLLGATE_ROUTEDIP_LOG_LEVEL": "WARNING", "TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE},
        ).start()
        controller.wait_ready()
        watches = Watches(core)
        watches.start()
        wait_for(lambda: watches.events.qsize() >= 3, "the watch's initial listing of the 3 nodes")
        one = run(1, args.repeats, core, custom, watches)
        many = run(args.many, args.repeats_many, core, custom, watches)
    finally:
        if watches is not None:
            watches.stop()
        if controller is not None:
            controller.stop()
        cluster.down()

    baseline = statistics.median(one["watch"] + many["watch"])
    rows = [
        ("baseline: node status write -> seen on a watch", one["watch"] + many["watch"]),
        ("1 RoutedIP: NotReady -> assigned elsewhere", one["each"]),
        (f"{args.many} RoutedIPs: NotReady -> each assigned elsewhere", many["each"]),
        (f"{args.many} RoutedIPs: NotReady -> all {args.many} assigned elsewhere", many["all"]),
    ]
    print("| measurement | samples | p50 | p99 | p50 / baseline | p99 / baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, samples in rows:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(
            f"| {label} | {len(samples)} | {p50 * 1000:.0f} ms | {p99 * 1000:.0f} ms "
            f"| {p50 / baseline:.1f}x | {p99 / baseline:.1f}x |"
        )
    print(f"\nTarget: p99 under 2000 ms with the local provider. Baseline p50: {baseline * 1000:.1f} ms.")


if __name__ == "__main__":
    main()
