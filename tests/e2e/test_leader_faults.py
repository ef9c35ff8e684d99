"""Leader election when the leader's connection to the API server freezes: two replicas never act at once.

A frozen connection answers nothing, not even an error, so a renewal that waits for an answer waits forever: the
leader must give up on its own by its renew deadline and stop its work before the standby, which sees the Lease
unrenewed for the lease duration, takes it over. Each replica's log says when it started leading and when it
stopped (or when its watchdog ended it); the intervals must not overlap.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for

DURATION = 6.0  # renew deadline 4 s, stop margin 1 s
LEASE_NAMESPACE = "tollgate-system"
GROUP, VERSION, PLURAL = "goop.example.com", "v1alpha1", "goops"
# What a replica logs when it stops acting: kopf has stopped, or the watchdog ends the process.
STOPPED = ("stopped leading", "not stopped by the renew deadline plus the stop margin: exiting now")


@dataclass(frozen=True)
class Leading:
    started: datetime
    stopped: datetime | None


def log_records(process: ServiceProcess) -> list[dict[str, Any]]:
    records = []
    for line in process.logs().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


def leading(process: ServiceProcess) -> Leading | None:
    """When `process` led, from its JSON log: None before it leads."""
    started = stopped = None
    for record in log_records(process):
        at = datetime.fromisoformat(record["time"])
        if record["message"] == "leading":
            started = at
        elif started is not None and stopped is None and record["message"].startswith(STOPPED):
            stopped = at
    return Leading(started, stopped) if started is not None else None


def holder(leases: client.CoordinationV1Api, name: str) -> str:
    try:
        spec = leases.read_namespaced_lease(name, LEASE_NAMESPACE).spec
    except client.ApiException as error:
        if error.status == 404:
            return ""
        raise
    return str(spec.holder_identity or "") if spec is not None else ""


def test_a_leader_whose_api_connection_freezes_stops_acting_before_the_standby_takes_over(
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    lease_name = f"tollgate-jobs-{uuid.uuid4().hex[:6]}"
    settings = {
        "TOLLGATE_JOBS_SERVICE_NAME": lease_name,
        "TOLLGATE_JOBS_LEADER_ELECTION": "true",
        "TOLLGATE_JOBS_LEASE_DURATION_SECONDS": str(DURATION),
        "POD_NAMESPACE": LEASE_NAMESPACE,
    }
    leases = client.CoordinationV1Api(kube)
    account = service_account_kubeconfig(cluster, "jobs", tmp_path)
    with api_server_proxy(account, tmp_path) as (proxy, via_proxy):
        path = str(via_proxy)
        first = run_service(
            "jobs", env={**settings, "POD_NAME": "first", "KUBECONFIG": path, "TOLLGATE_JOBS_KUBECONFIG": path}
        )
        wait_for(lambda: holder(leases, lease_name).startswith("first_"), "the first replica to lead", timeout=60)
        second = run_service("jobs", rbac=True, env={**settings, "POD_NAME": "second"})  # ready, standing by

        proxy.set_mode(Mode.FREEZE)
        frozen_at = time.monotonic()
        wait_for(
            lambda: holder(leases, lease_name).startswith("second_"),
            "the standby to take the unrenewed Lease over",
            timeout=6 * DURATION,
        )
        print(f"\nfailover: the standby held the Lease {time.monotonic() - frozen_at:.2f} s after the freeze")
        new = wait_for(lambda: leading(second), "the new leader to log that it leads", timeout=DURATION)

        def stopped_acting() -> Leading | None:
            led = leading(first)
            return led if led is not None and led.stopped is not None else None

        old = wait_for(stopped_acting, "the frozen leader to log that it stopped acting", timeout=2 * DURATION)
        assert old.stopped is not None and old.stopped < new.started, (
            f"two leaders: the old one acted until {old.stopped}, the new one from {new.started}"
        )
        print(f"\nthe old leader stopped {(new.started - old.stopped).total_seconds():.2f} s before the new one led")
        # The new leader acts: a Goop created now gets its Jobs and completes.
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Goop",
            "metadata": {"name": "after"},
            "spec": {"cmd": "echo hello", "jobCount": 1},
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

        def phase() -> str:
            goop = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "after"))
            return str((goop.get("status") or {}).get("phase"))

        wait_for(lambda: phase() == "Completed", "the new leader to complete a Goop", timeout=60)
        assert "lost the Lease" in first.logs()
        proxy.set_mode(Mode.PASS)
