"""Benchmark of the Goop controller: G Goops of J Jobs each, created to all Completed, against creating the
same G*J Jobs directly and waiting for all of them to complete, in the same run on the same cluster.

    .venv/bin/python bench/jobs.py                    # G = 1 and 100, J = 5, on a fresh embedded cluster
    .venv/bin/python bench/jobs.py --goops 1 10 --kubeconfig .dev/kubeconfig

Prints one table: both times, their ratio (the controller's overhead), and the controller's CPU time and
resident memory while it ran the Goops.

The fresh cluster runs without client QPS limits (kwokctl's disableQPSLimits): with kube-controller-manager's
default 20 requests/s its Job controller takes ~0.3 s per Job whoever creates it, which hides the Goop
controller's own cost and makes the 100-Goop run take minutes. `--throttled` keeps the defaults.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from bench.measure import cpu_seconds, rss_mib
from tollgate.jobs.planning import Worker, job_manifest
from tollgate.models.goop import GROUP, VERSION, Goop, GoopSpec
from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.services import ServiceProcess

CMD = "echo bench"


@dataclass
class Row:
    goops: int
    jobs: int
    direct_s: float
    goop_s: float
    cpu_s: float
    rss_mib: float


def fresh_namespace(core: client.CoreV1Api, prefix: str) -> str:
    name = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def run_until(
    list_call: Callable[..., Any],
    version: str,
    create: Callable[[], None],
    finished: Callable[[Any], str | None],
    count: int,
    timeout: float,
) -> float:
    """Seconds from the first create until `count` objects have finished (`finished` returns their name),
    following watches that start at `version`, read before creating, so that no event is missed."""
    started = time.monotonic()
    create()
    done: set[str] = set()
    while (left := started + timeout - time.monotonic()) > 0:
        stream = watch.Watch()
        for event in stream.stream(list_call, resource_version=version, timeout_seconds=max(1, int(left))):
            if event["type"] == "ERROR":  # e.g. 410 Gone: catch up from a fresh list
                listed = list_call()
                done.update(n for n in map(finished, listed["items"]) if n is not None)
                version = listed["metadata"]["resourceVersion"]
                break
            version = event["object"]["metadata"]["resourceVersion"]
            name = finished(event["object"]) if event["type"] in ("ADDED", "MODIFIED") else None
            if name is not None:
                done.add(name)
            if len(done) == count:
                stream.stop()
                return time.monotonic() - started
    raise TimeoutError(f"only {len(done)} of {count} finished within {timeout:.0f} s")


def complete_job(job: dict[str, Any]) -> str | None:
    """Watch events of a wrapped list call arrive as plain dicts."""
    conditions = (job.get("status") or {}).get("conditions") or []
    complete = any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)
    return str(job["metadata"]["name"]) if complete else None


def completed_goop(goop: dict[str, Any]) -> str | None:
    return str(goop["metadata"]["name"]) if (goop.get("status") or {}).get("phase") == "Completed" else None


def direct_jobs(kube: client.ApiClient, core: client.CoreV1Api, goops: int, jobs: int, timeout: float) -> float:
    """The baseline: the Jobs the controller would create for those Goops, created by the client itself."""
    namespace = fresh_namespace(core, "direct")
    batch = client.BatchV1Api(kube)
    manifests = []
    for g in range(goops):
        template = Goop.new(f"g{g}", GoopSpec(job_count=jobs, cmd=CMD), namespace=namespace, uid="none")
        for i in range(jobs):
            manifest = job_manifest(template, Worker(f"g{g}-{i}", index=i))
            del manifest["metadata"]["ownerReferences"]
            manifests.append(manifest)

    def create() -> None:
        for manifest in manifests:
            batch.create_namespaced_job(namespace, manifest)  # type: ignore[arg-type]

    def list_jobs(**kwargs: Any) -> Any:
        """Plain dicts, like the watch events of a wrapped list call."""
        result = batch.list_namespaced_job(namespace, **kwargs)
        return result if kwargs.get("watch") else kube.sanitize_for_serialization(result)

    try:
        version = str(list_jobs()["metadata"]["resourceVersion"])
        return run_until(list_jobs, version, create, complete_job, len(manifests), timeout)
    finally:
        core.delete_namespace(namespace)


def with_goops(
    kube: client.ApiClient, core: client.CoreV1Api, controller: ServiceProcess, goops: int, jobs: int, timeout: float
) -> tuple[float, float, float]:
    """Seconds to all Completed, the controller's CPU seconds meanwhile, and its resident memory after."""
    namespace = fresh_namespace(core, "goops")
    custom = client.CustomObjectsApi(kube)
    assert controller.process is not None
    pid = controller.process.pid

    def create() -> None:
        for g in range(goops):
            body = Goop.new(f"g{g}", GoopSpec(job_count=jobs, cmd=CMD)).to_wire()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "goops", body)

    def list_goops(**kwargs: Any) -> Any:
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "goops", **kwargs)

    cpu_before = cpu_seconds(pid)
    try:
        version = str(list_goops()["metadata"]["resourceVersion"])
        seconds = run_until(list_goops, version, create, completed_goop, goops, timeout)
        return seconds, cpu_seconds(pid) - cpu_before, rss_mib(pid)
    finally:
        core.delete_namespace(namespace)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--goops", type=int, nargs="+", default=[1, 100], help="Goop counts to run (default 1 100)")
    parser.add_argument("--jobs", type=int, default=5, help="Jobs per Goop (default 5)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--kubeconfig", type=Path, help="an existing cluster with the CRDs (default: a fresh one)")
    parser.add_argument("--throttled", action="store_true", help="fresh cluster with the components' default QPS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-jobs-") as tmp:
        workdir = Path(tmp)
        cluster: EmbeddedCluster | None = None
        kubeconfig: Path = args.kubeconfig
        if kubeconfig is None:
            cluster = EmbeddedCluster(
                f"tollgate-bench-jobs-{os.getpid()}",
                workdir / "kwok",
                workdir / "kubeconfig",
                disable_qps_limits=not args.throttled,
            )
            cluster.up(3)
            cluster.install_crds()
            kubeconfig = cluster.kubeconfig
        controller = ServiceProcess(
            "jobs", kubeconfig, workdir / "logs", env={"TOLLGATE_JOBS_LOG_LEVEL": "INFO"}
        ).start()
        try:
            controller.wait_ready()
            assert controller.process is not None
            idle_rss = rss_mib(controller.process.pid)
            kube = api_client(kubeconfig)
            core = client.CoreV1Api(kube)
            rows = []
            for goops in args.goops:
                direct = direct_jobs(kube, core, goops, args.jobs, args.timeout)
                seconds, cpu, rss = with_goops(kube, core, controller, goops, args.jobs, args.timeout)
                rows.append(Row(goops, goops * args.jobs, direct, seconds, cpu, rss))
            peak = rss_mib(controller.process.pid, "VmHWM")
        finally:
            controller.stop()
            if cluster is not None:
                cluster.down()
    print_table(rows, idle_rss, peak)
    return 0


def print_table(rows: list[Row], idle_rss: float, peak_rss: float) -> None:
    header = (
        "| Goops x Jobs | Jobs created directly: to all Complete | Goops: to all Completed | ratio (overhead) "
        "| controller CPU | CPU per Goop | controller RSS after |"
    )
    print(header)
    print("|" + "|".join("---" for _ in range(header.count("|") - 1)) + "|")
    for row in rows:
        print(
            f"| {row.goops} x {row.jobs // row.goops} | {row.direct_s:.2f} s | {row.goop_s:.2f} s "
            f"| {row.goop_s / row.direct_s:.2f}x | {row.cpu_s:.2f} s | {1000 * row.cpu_s / row.goops:.0f} ms "
            f"| {row.rss_mib:.0f} MiB |"
        )
    print(f"\ncontroller RSS: {idle_rss:.0f} MiB idle after start, {peak_rss:.0f} MiB peak")


if __name__ == "__main__":
    raise SystemExit(main())
