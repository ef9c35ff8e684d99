"""What the allocator reads per load balancer as its namespace fills: the bytes the API server sends in answer to
lists of LoadBalancers and RemoteEndpoints in a namespace (its `apiserver_response_sizes` histogram: verb LIST,
scope namespace; the allocator is the only client listing them) while it processes a probe of P load balancers
with 2 RemoteEndpoints each, added to one account's namespace that already holds N of them, for growing N.

A load balancer's reconciles and its endpoints' events read its own endpoints and the holders of one service ID
(field selectors: docs/allocator.md, "Reads at scale"), so the figure should stay flat as N grows; with
whole-namespace reads (the code before #18 part 4) it was 136 KB per load balancer with 5 in the namespace and
321 KB with 25 (2.4x). The target, under 1.5x the figure at the smallest N, is the bound the end-to-end test held
before this bench took the measurement over.

    .venv/bin/python -m bench.allocator_reads                 # N = 0, 20, 95 (5, 25, 100 after the probe), P = 5
    .venv/bin/python -m bench.allocator_reads --quick         # N = 0, 20: under two minutes
    .venv/bin/python -m bench.allocator_reads --sizes 0 45 --probe 5 --json .dev/bench/allocator_reads.json

The allocator runs as its own process (`python -m tollgate.allocator`) on a fresh embedded cluster of its own. The
namespace is filled to N first (not measured); a probe is measured from the moment the allocator stops listing (the
total unchanged over a second) to the moment, after every object of the probe is Ready for its generation, it
stops again. Each probe is the same size, so that only the namespace differs between them.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from bench import memory, report
from tollgate.runtime.kube import api_client
from tollgate.testing import objects
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for

LISTED_KINDS = ("loadbalancers", "remoteendpoints")
TARGET_RATIO = 1.5
DEFAULT_SIZES = [0, 20, 95]
QUICK_SIZES = [0, 20]
PROBE = 5


@dataclass(frozen=True)
class Batch:
    """One probe: `added` load balancers (2 endpoints each) taking the namespace to `in_namespace`."""

    in_namespace: int
    added: int
    listed: dict[str, float]  # bytes, by resource (LISTED_KINDS), listed while the allocator processed the probe
    seconds: float  # from the probe's creation to every object Ready
    load: float  # the machine's 1-minute load average when the probe was done

    @property
    def per_load_balancer(self) -> float:
        return sum(self.listed.values()) / self.added

    def per_load_balancer_of(self, resource: str) -> float:
        return self.listed.get(resource, 0.0) / self.added


def bytes_listed(kube: client.ApiClient) -> dict[str, float]:
    """The bytes the API server has sent so far in answer to lists of LoadBalancers and of RemoteEndpoints in a
    namespace, by resource (its apiserver_response_sizes histogram; cluster-wide lists, of other work, left out)."""
    response = kube.call_api(*kube.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
    response.read()
    listed = dict.fromkeys(LISTED_KINDS, 0.0)
    for family in text_string_to_metric_families(bytes(response.data or b"").decode()):
        if family.name != "apiserver_response_sizes":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_response_sizes_sum"
                and (labels.get("verb"), labels.get("scope")) == ("LIST", "namespace")
                and labels.get("resource") in listed
            ):
                listed[labels["resource"]] += float(sample.value)
    return listed


def settled(kube: client.ApiClient) -> dict[str, float]:
    """The bytes listed, once the allocator has stopped listing: two reads a second apart agree."""
    last = [bytes_listed(kube)]

    def unchanged() -> bool:
        time.sleep(1)
        now = bytes_listed(kube)
        same, last[0] = now == last[0], now
        return same

    wait_for(unchanged, "the allocator to stop listing", timeout=120, interval=0)
    return last[0]


def fill(custom: client.CustomObjectsApi, held: int, count: int, timeout: float) -> int:
    """`count` load balancers more (`lb-<held>` on, 2 endpoints each), waited for until every one of the namespace
    and its endpoints are Ready (read by lists: not measured); the load balancers the namespace holds then."""
    memory.create_all(custom, memory.allocator_bodies(count, held))
    total = held + count
    wait_for(lambda: memory.allocator_done(custom, total), f"{total} load balancers and endpoints Ready", timeout, 2.0)
    return total


def probe_done(custom: client.CustomObjectsApi, bodies: list[memory.Obj]) -> bool:
    """Whether every object of the probe is Ready for its generation, read one by one: a list of the namespace
    would be counted with the allocator's."""
    for body in bodies:
        info = objects.RESOURCES[body["kind"]]
        meta = body["metadata"]
        obj: memory.Obj = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            info.group, info.version, meta["namespace"], info.plural, meta["name"]
        )
        if not memory.current_and_true(obj, "Ready"):
            return False
    return True


def measure(sizes: list[int], probe: int, workdir: Path, timeout: float) -> list[Batch]:
    if not sizes or sizes[0] < 0 or any(later - earlier < probe for earlier, later in itertools.pairwise(sizes)):
        raise ValueError(f"--sizes: {sizes} must start at 0 or more and grow by at least the probe ({probe}) each")
    total = sizes[-1] + probe
    name = f"bench-allocator-reads-{os.getpid()}"
    cluster = EmbeddedCluster(name, workdir / "kwok", workdir / "kubeconfig", disable_qps_limits=True)
    process: ServiceProcess | None = None
    try:
        cluster.up(memory.pod_nodes(total))
        cluster.install_crds()
        kube = api_client(cluster.kubeconfig, pool_size=memory.CLIENTS)
        custom = client.CustomObjectsApi(kube)
        memory.allocator_prepare(kube, total)
        env = {"TOLLGATE_ALLOCATOR_LOG_LEVEL": "INFO", **memory.allocator_env(workdir)}
        process = ServiceProcess("allocator", cluster.kubeconfig, workdir / "logs", env=env).start()
        process.wait_ready(timeout=120)
        results: list[Batch] = []
        held = 0
        for size in sizes:
            if size > held:
                held = fill(custom, held, size - held, timeout)
            bodies = memory.allocator_bodies(probe, held)
            before = settled(kube)
            started = time.monotonic()
            memory.create_all(custom, bodies)
            held += probe
            wait_for(functools.partial(probe_done, custom, bodies), f"the probe's {probe} Ready", timeout, 1.0)
            seconds = time.monotonic() - started
            after = settled(kube)
            listed = {resource: after[resource] - before[resource] for resource in LISTED_KINDS}
            batch = Batch(held, probe, listed, seconds, os.getloadavg()[0])
            print(
                f"{batch.in_namespace} in the namespace: {batch.per_load_balancer / 1000:,.1f} KB listed per load "
                f"balancer of the last {batch.added} ({batch.seconds:.0f} s to Ready, load {batch.load:.1f})",
                flush=True,
            )
            results.append(batch)
        return results
    finally:
        if process is not None:
            process.stop()
        cluster.down()


def render(batches: list[Batch]) -> str:
    base = batches[0].per_load_balancer if batches else 0.0
    lines = [
        "| in the namespace | probe | KB listed per load balancer of the probe | of LoadBalancers "
        "| of RemoteEndpoints | vs the first | probe to Ready |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for batch in batches:
        ratio = report.ratio(batch.per_load_balancer, base)
        lines.append(
            f"| {batch.in_namespace} | {batch.added} | {batch.per_load_balancer / 1000:,.1f} "
            f"| {batch.per_load_balancer_of('loadbalancers') / 1000:,.1f} "
            f"| {batch.per_load_balancer_of('remoteendpoints') / 1000:,.1f} "
            f"| {'-' if ratio is None else f'{ratio:.2f}x'} | {batch.seconds:.0f} s |"
        )
    return "\n".join(lines)


def rows(results: list[dict[str, Any]]) -> list[report.Row]:
    """The combined table's rows (bench/report.py): each later probe's bytes listed per load balancer against the
    first probe's (the same run, the same allocator, a smaller namespace), judged against TARGET_RATIO."""
    batches = [Batch(**fields) for fields in results]
    if not batches:
        return []
    first, out = batches[0], []
    for batch in batches[1:]:
        ratio = report.ratio(batch.per_load_balancer, first.per_load_balancer)
        out.append(
            report.Row(
                what=f"allocator: bytes listed per load balancer of {batch.added} added, {batch.in_namespace} in the "
                "namespace",
                tollgate=f"{batch.per_load_balancer / 1000:,.1f} KB",
                peer=f"{first.per_load_balancer / 1000:,.1f} KB (itself, {first.in_namespace} in the namespace)",
                ratio=ratio,
                target=f"under {TARGET_RATIO}x",
                met=ratio is not None and ratio < TARGET_RATIO,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=DEFAULT_SIZES, help="load balancers in the namespace before each probe"
    )
    parser.add_argument("--probe", type=int, default=PROBE, help="load balancers added and measured at each size")
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}: under two minutes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for the namespace to be Ready")
    parser.add_argument("--json", type=Path, help="write the probes here as JSON (bench/report.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-allocator-reads-") as tmp:
        batches = measure(QUICK_SIZES if args.quick else args.sizes, args.probe, Path(tmp), args.timeout)
    print(render(batches))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([dataclasses.asdict(batch) for batch in batches]) + "\n")
    if any(not row.met for row in rows([dataclasses.asdict(batch) for batch in batches])):
        print(f"the reads per load balancer grew by {TARGET_RATIO}x or more with the namespace", file=sys.stderr)


if __name__ == "__main__":
    main()
