"""Failover time of tollgate-routedip: from a node becoming NotReady, as the API server records it (its
NotReady update arriving on a watch), to its routed IPs being assigned to another node (the local
provider's record on the new node arriving on the same watch), over repeated moves, for 1 and 50 RoutedIPs.

The baseline, measured on the same writes, is one API write seen through a watch: from sending the
node's status write to its update arriving on the watch. The ratios say how many such round trips a
failover costs.

    .venv/bin/python -m bench.routedip [--repeats 20] [--repeats-many 5] [--many 50] [--json PATH]
    .venv/bin/python -m bench.routedip --quick           # CI smoke, under two minutes
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from bench import report
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
    parser.add_argument("--json", type=Path, help="write the samples (seconds) here as JSON")
    parser.add_argument("--quick", action="store_true", help="5 failovers of 1 RoutedIP, 2 of 10: CI smoke")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.many, args.repeats_many = 5, 10, 2

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

    results = {"many": args.many, "one": one, "many_samples": many, "load": os.getloadavg()[0]}
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results) + "\n")
    print("| measurement | samples | p50 | p99 | p50 / baseline | p99 / baseline |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    baseline, measured = measurements(results)
    for label, samples in measured:
        p50, p99 = percentile(samples, 0.5), percentile(samples, 0.99)
        print(
            f"| {label} | {len(samples)} | {p50 * 1000:.0f} ms | {p99 * 1000:.0f} ms "
            f"| {p50 / baseline:.1f}x | {p99 / baseline:.1f}x |"
        )
    print(
        f"\nTarget: p99 under {TARGET * 1000:.0f} ms with the local provider. Baseline p50: {baseline * 1000:.1f} ms."
    )


TARGET = 2.0  # seconds, p99 of a failover with the local provider


def measurements(results: dict[str, Any]) -> tuple[float, list[tuple[str, list[float]]]]:
    """The baseline's median and the labelled samples of a run's results (as --json writes them)."""
    one, many, count = results["one"], results["many_samples"], results["many"]
    return statistics.median(one["watch"] + many["watch"]), [
        ("baseline: node status write -> seen on a watch", one["watch"] + many["watch"]),
        ("1 RoutedIP: NotReady -> assigned elsewhere", one["each"]),
        (f"{count} RoutedIPs: NotReady -> each assigned elsewhere", many["each"]),
        (f"{count} RoutedIPs: NotReady -> all {count} assigned elsewhere", many["all"]),
    ]


def rows(results: dict[str, Any]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): each failover's p99 against one watched write's p99."""
    _, measured = measurements(results)
    peer = percentile(measured[0][1], 0.99)
    out = []
    for label, samples in measured[1:]:
        p99 = percentile(samples, 0.99)
        out.append(
            report.Row(
                what=f"routedip: failover p99, {label}",
                tollgate=f"{p99 * 1000:.0f} ms",
                peer=f"{peer * 1000:.0f} ms (one write seen on a watch)",
                ratio=report.ratio(p99, peer),
                target=f"p99 < {TARGET * 1000:.0f} ms",
                met=p99 < TARGET,
            )
        )
    return out


if __name__ == "__main__":
    main()
