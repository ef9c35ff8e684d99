"""The Goop controller on the embedded cluster, running under exactly its chart's RBAC.

KWOK completes every pod a Job owns, at once, with exit code 0. To keep a worker running, or to make it fail,
a test gives the Goop a nodeSelector no node has: its pods stay Pending (unscheduled), KWOK never touches
them, and the test reports their end the way a kubelet would (phase and a terminated container) through the
pods' status subresource. PerNode workers are pinned to a node, so they are held by a node with room for
no pods (allocatable pods 0) instead.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tollgate.jobs.workers import GOOP_UID_LABEL
from tollgate.models.base import parse_rfc3339
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.nodes import node_ready
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for
from tollgate.testing.watchproxy import WatchProxy

GROUP, VERSION, PLURAL = "goop.example.com", "v1alpha1", "goops"
HOLD = {"tollgate.io/goop-e2e-hold": "true"}  # no node has this label: pods stay Pending
TEST_NODE_LABEL = "tollgate.io/goop-e2e"
TIMEOUT = 60
RESYNC_SECONDS = 3
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"  # the Job controller's label on its pods


@pytest.fixture
def controller(run_service: ServiceFactory) -> ServiceProcess:
    return run_service("jobs", rbac=True)


# --- helpers ----------------------------------------------------------------------------------------------------


def create_goop(custom: client.CustomObjectsApi, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("cmd", "echo hello")
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Goop", "metadata": {"name": name}, "spec": spec}
    return cast(dict[str, Any], custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body))


def read_goop(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def goop_status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return read_goop(custom, namespace, name).get("status") or {}


def wait_status(
    custom: client.CustomObjectsApi, namespace: str, name: str, holds: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status = goop_status(custom, namespace, name)
        return status if holds(status) else None

    return wait_for(probe, f"Goop {namespace}/{name}: {what}", timeout=TIMEOUT)


def wait_phase(custom: client.CustomObjectsApi, namespace: str, name: str, phase: str) -> dict[str, Any]:
    return wait_status(custom, namespace, name, lambda s: s.get("phase") == phase, phase)


def condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status.get("conditions", []) if c["type"] == type_)


def jobs_of(kube: client.ApiClient, namespace: str, goop: dict[str, Any]) -> list[client.V1Job]:
    selector = f"{GOOP_UID_LABEL}={goop['metadata']['uid']}"
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector=selector).items
    return sorted(jobs, key=lambda j: str(j.metadata.name))


def wait_jobs(kube: client.ApiClient, namespace: str, goop: dict[str, Any], names: list[str]) -> list[client.V1Job]:
    def probe() -> list[client.V1Job] | None:
        jobs = jobs_of(kube, namespace, goop)
        return jobs if [j.metadata.name for j in jobs] == names else None

    return wait_for(probe, f"exactly the Jobs {names}", timeout=TIMEOUT)


def events(core: client.CoreV1Api, namespace: str, name: str) -> list[tuple[str, str]]:
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(str(e.reason), str(e.message)) for e in found]


def wait_event(core: client.CoreV1Api, namespace: str, name: str, reason: str, count: int = 1) -> list[str]:
    def probe() -> list[str] | None:
        messages = [m for r, m in events(core, namespace, name) if r == reason]
        return messages if len(messages) >= count else None

    return wait_for(probe, f"{count} {reason} event(s) on {name}", timeout=TIMEOUT)


def pending_pod(core: client.CoreV1Api, namespace: str, job: str) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items
        return next((p for p in pods if p.status.phase == "Pending"), None)

    return wait_for(probe, f"a Pending pod of Job {job}", timeout=TIMEOUT)


def finish_pod(core: client.CoreV1Api, namespace: str, job: str, exit_code: int) -> str:
    """Report the Job's pending pod ended, as a kubelet would: phase and a terminated container."""
    pod = pending_pod(core, namespace, job)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": now,
        "finishedAt": now,
    }
    status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": [
            {
                "name": "worker",
                "image": pod.spec.containers[0].image,
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }
    core.patch_namespaced_pod_status(str(pod.metadata.name), namespace, {"status": status})
    return str(pod.metadata.name)


# --- tests ------------------------------------------------------------------------------------------------------


def test_the_seed_samples_apply_unchanged_and_complete(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    controller: ServiceProcess,
) -> None:
    samples = [repo_root() / "deploy" / "samples" / f for f in ("goop.yaml", "goop-pernode.yaml")]
    cluster.kubectl("apply", *(arg for sample in samples for arg in ("-f", str(sample))))
    try:
        status = wait_phase(custom, "default", "goop-sample", "Completed")
        assert (status["desired"], status["succeeded"], status["active"], status["failed"]) == (3, 3, 0, 0)
        assert condition(status, "Complete")["status"] == "True"
        assert condition(status, "Failed")["status"] == "False"
        goop = read_goop(custom, "default", "goop-sample")
        jobs = jobs_of(kube, "default", goop)
        assert [j.metadata.name for j in jobs] == ["goop-sample-0", "goop-sample-1", "goop-sample-2"]
        assert all(j.status.succeeded == 1 for j in jobs)
        assert all(j.metadata.owner_references[0].uid == goop["metadata"]["uid"] for j in jobs)
        created = wait_event(core, "default", "goop-sample", "JobCreated")
        assert created == ["Created 3 Jobs: goop-sample-0, goop-sample-1, goop-sample-2"], "one Event names them all"

        status = wait_phase(custom, "default", "goop-per-node", "Completed")
        nodes = {
            n.metadata.name
            for n in core.list_node().items
            if not n.spec.unschedulable
            and not any(t.effect in ("NoSchedule", "NoExecute") for t in n.spec.taints or [])
        }
        assert {"tollgate-worker-0", "tollgate-worker-1", "tollgate-worker-2"} <= nodes
        assert {d["node"] for d in status["jobs"]} == nodes
        assert status["succeeded"] == len(nodes) == len(status["jobs"])
        goop = read_goop(custom, "default", "goop-per-node")
        pods = core.list_namespaced_pod("default", label_selector=f"{GOOP_UID_LABEL}={goop['metadata']['uid']}").items
        assert sorted(str(p.spec.node_name) for p in pods) == sorted(nodes), "exactly one worker on each node"
        assert all(p.status.phase == "Succeeded" for p in pods)
    finally:
        for name in ("goop-sample", "goop-per-node"):
            custom.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)


def test_a_failing_worker_fails_the_goop_after_its_backoff_limit(
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: ServiceProcess,
) -> None:
    goop = create_goop(custom, namespace, "flaky", cmd="exit 1", backoffLimit=1, nodeSelector=HOLD)
    wait_jobs(kube, namespace, goop, ["flaky-0"])
    first = finish_pod(core, namespace, "flaky-0", exit_code=1)
    second = pending_pod(core, namespace, "flaky-0")  # the Job retries: backoffLimit 1 allows one more pod
    assert second.metadata.name != first
    assert goop_status(custom, namespace, "flaky")["phase"] == "Pending"
    finish_pod(core, namespace, "flaky-0", exit_code=1)

    status = wait_phase(custom, namespace, "flaky", "Failed")
    failed = condition(status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "BackoffLimitExceeded")
    assert "backoff limit" in failed["message"]
    assert status["jobs"] == [
        {
            "name": "flaky-0",
            "index": 0,
            "phase": "Failed",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    ]
    assert (status["failed"], status["succeeded"], status["active"]) == (1, 0, 0)
    assert "completionTime" in status
    assert "BackoffLimitExceeded" in wait_event(core, namespace, "flaky", "JobFailed")[0]
    wait_event(core, namespace, "flaky", "Failed")


def test_a_job_the_api_server_refuses_fails_the_goop_naming_the_field(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, controller: ServiceProcess
) -> None:
    create_goop(custom, namespace, "bad", tolerations=[{"key": "k", "operator": "Sometimes"}])
    status = wait_phase(custom, namespace, "bad", "Failed")
    failed = condition(status, "Failed")
    assert failed["reason"] == "JobRejected"
    assert "spec.template.spec.tolerations[0].operator" in failed["message"]
    wait_event(core, namespace, "bad", "Failed")
    assert [r for r, _ in events(core, namespace, "bad")].count("JobFailed") == 1


def test_deleting_a_running_goop_deletes_its_jobs(
    kube: client.ApiClient, custom: client.CustomObjectsApi, namespace: str, controller: ServiceProcess
) -> None:
    goop = create_goop(custom, namespace, "doomed", jobCount=2, nodeSelector=HOLD)
    wait_jobs(kube, namespace, goop, ["doomed-0", "doomed-1"])
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
    wait_for(lambda: not jobs_of(kube, namespace, goop), "the Goop's Jobs deleted", timeout=TIMEOUT)


def test_restarting_the_controller_mid_run_changes_nothing(
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
) -> None:
    first = run_service("jobs", rbac=True)
    goop = create_goop(custom, namespace, "steady", jobCount=3, nodeSelector=HOLD)
    names = ["steady-0", "steady-1", "steady-2"]
    before = {j.metadata.name: j.metadata.uid for j in wait_jobs(kube, namespace, goop, names)}
    wait_status(custom, namespace, "steady", lambda s: len(s.get("jobs", [])) == 3, "3 Jobs in the status")
    wait_event(core, namespace, "steady", "JobCreated")

    first.kill()  # a crash: no chance to clean up
    finish_pod(core, namespace, "steady-0", exit_code=0)  # work goes on while the controller is down
    wait_for(
        lambda: client.BatchV1Api(kube).read_namespaced_job("steady-0", namespace).status.succeeded == 1,
        "Job steady-0 succeeded",
    )
    run_service("jobs", rbac=True)
    wait_status(custom, namespace, "steady", lambda s: s["succeeded"] == 1, "the restart's reconcile")
    assert {j.metadata.name: j.metadata.uid for j in jobs_of(kube, namespace, goop)} == before
    assert [r for r, _ in events(core, namespace, "steady")].count("JobCreated") == 1

    for name in names[1:]:
        finish_pod(core, namespace, name, exit_code=0)
    status = wait_phase(custom, namespace, "steady", "Completed")
    assert status["succeeded"] == 3
    assert {j.metadata.name: j.metadata.uid for j in jobs_of(kube, namespace, goop)} == before


def test_editing_job_count_scales_up_and_reports_finished_work_it_cannot_undo(
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: ServiceProcess,
) -> None:
    goop = create_goop(custom, namespace, "elastic", jobCount=2, nodeSelector=HOLD)
    wait_jobs(kube, namespace, goop, ["elastic-0", "elastic-1"])
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "elastic", {"spec": {"jobCount": 4}})
    wait_jobs(kube, namespace, goop, ["elastic-0", "elastic-1", "elastic-2", "elastic-3"])
    finish_pod(core, namespace, "elastic-3", exit_code=0)
    wait_status(custom, namespace, "elastic", lambda s: s.get("succeeded") == 1, "elastic-3 succeeded")

    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "elastic", {"spec": {"jobCount": 1}})
    wait_jobs(kube, namespace, goop, ["elastic-0", "elastic-3"])  # unfinished elastic-1 and -2 deleted
    status = wait_status(
        custom, namespace, "elastic", lambda s: s["observedGeneration"] == 3 and s["desired"] == 1, "scaled down"
    )
    blocked = condition(status, "ScaleDownBlocked")
    assert (blocked["status"], blocked["reason"]) == ("True", "FinishedJobsKept")
    assert "elastic-3 (Succeeded)" in blocked["message"]
    assert "elastic-3" in wait_event(core, namespace, "elastic", "CannotScaleDown")[0]
    assert len(wait_event(core, namespace, "elastic", "JobDeleted", 2)) == 2

    finish_pod(core, namespace, "elastic-0", exit_code=0)
    status = wait_phase(custom, namespace, "elastic", "Completed")
    assert (status["desired"], status["succeeded"]) == (1, 2)
    assert [d["name"] for d in status["jobs"]] == ["elastic-0", "elastic-3"]


def left_out(proxy: WatchProxy, type_: str, name: str, version: str | None = None) -> bool:
    """Whether the proxy left out a watch event of that type of the object `name` (at `version`, if given)."""
    return any(
        event["type"] == type_
        and event["object"]["metadata"]["name"] == name
        and version in (None, event["object"]["metadata"]["resourceVersion"])
        for event in proxy.dropped
    )


def test_job_events_lost_on_the_wire_are_repaired_by_the_resync(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    tmp_path: Path,
) -> None:
    """The controller never hears that one worker finished and another was deleted: the watch never sends those
    events again, so the Goop would wait for good. The resync lists the Jobs, finds both, and the controller records
    the first and creates the second again."""
    account = service_account_kubeconfig(cluster, "jobs", tmp_path)
    with WatchProxy(account, tmp_path) as proxy:
        env = {"KUBECONFIG": str(proxy.kubeconfig), "TOLLGATE_JOBS_KUBECONFIG": str(proxy.kubeconfig)}
        controller = run_service("jobs", env={**env, "TOLLGATE_JOBS_RESYNC_PERIOD_SECONDS": str(RESYNC_SECONDS)})
        goop = create_goop(custom, namespace, "lossy", jobCount=3, nodeSelector=HOLD)
        names = ["lossy-0", "lossy-1", "lossy-2"]
        uids = {j.metadata.name: j.metadata.uid for j in wait_jobs(kube, namespace, goop, names)}
        wait_status(custom, namespace, "lossy", lambda s: len(s.get("jobs", [])) == 3, "3 Jobs in the status")

        lost = {uids["lossy-0"], uids["lossy-1"]}
        proxy.drop(lambda event: event["object"]["metadata"].get("uid") in lost)
        batch = client.BatchV1Api(kube)
        finish_pod(core, namespace, "lossy-0", exit_code=0)
        batch.delete_namespaced_job("lossy-1", namespace, propagation_policy="Background")

        def complete() -> str | None:
            job = batch.read_namespaced_job("lossy-0", namespace)
            done = any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])
            return str(job.metadata.resource_version) if done else None

        # The Job controller writes a finished Job's status in steps: its last one must be left out too.
        version = wait_for(complete, "lossy-0 Complete", timeout=TIMEOUT)
        wait_for(
            lambda: left_out(proxy, "MODIFIED", "lossy-0", version) and left_out(proxy, "DELETED", "lossy-1"),
            "the proxy to leave out lossy-0's completion and lossy-1's deletion",
            timeout=TIMEOUT,
        )
        proxy.drop(None)

        status = wait_status(
            custom, namespace, "lossy", lambda s: s.get("succeeded") == 1, "lossy-0's success, found by the resync"
        )
        assert [d["name"] for d in status["jobs"] if d["phase"] == "Succeeded"] == ["lossy-0"]
        recreated = wait_for(
            lambda: next((j for j in jobs_of(kube, namespace, goop) if j.metadata.name == "lossy-1"), None),
            "lossy-1 created again once the resync found it deleted",
            timeout=TIMEOUT,
        )
        assert recreated.metadata.uid != uids["lossy-1"]
        wait_for(
            lambda: not core.list_namespaced_pod(namespace, label_selector=f"{JOB_UID_LABEL}={uids['lossy-1']}").items,
            "the deleted lossy-1's pod gone",
            timeout=TIMEOUT,
        )
        logs = controller.logs()
        assert f"resync: jobs {namespace}/lossy-0 changed without a watch event" in logs
        assert f"resync: jobs {namespace}/lossy-1 was deleted without a watch event" in logs

        for name in names[1:]:
            finish_pod(core, namespace, name, exit_code=0)
        assert wait_phase(custom, namespace, "lossy", "Completed")["succeeded"] == 3


@pytest.fixture
def test_nodes(core: client.CoreV1Api) -> Iterator[list[str]]:
    """Nodes this test adds (labelled TEST_NODE_LABEL=<run>); deleted afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        core.delete_node(name)


def add_node(core: client.CoreV1Api, nodes: list[str], name: str, run: str, pods: int = 110) -> None:
    """A KWOK node carrying the test's label; `pods=0` leaves no room, so a worker pinned there waits."""
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(
                name=name,
                annotations={"kwok.x-k8s.io/node": "fake"},
                labels={TEST_NODE_LABEL: run, "kubernetes.io/hostname": name, "type": "kwok"},
            )
        )
    )
    nodes.append(name)
    # KWOK's node-initialize stage writes allocatable from the node it last saw: set the room only after it has
    # run (the node is Ready), or its late write can put back the default and let a held worker start.
    wait_for(lambda: node_ready(core, name), f"KWOK to initialize node {name}", timeout=TIMEOUT)
    set_pod_room(core, name, pods)


def set_pod_room(core: client.CoreV1Api, name: str, pods: int) -> None:
    """Write the node's room until it reads back: a KWOK status write (its stages) that read the node before ours
    can land after it and put back what it read (seen once in a cold CI run: 30 s without the room)."""
    room = {"pods": str(pods), "cpu": "1k", "memory": "1Ti"}

    def written() -> bool:
        if core.read_node(name).status.allocatable.get("pods") == str(pods):
            return True
        core.patch_node_status(name, {"status": {"allocatable": room, "capacity": room}})
        return False

    wait_for(written, f"node {name} with room for {pods}", interval=0.5)


def test_per_node_includes_nodes_joining_mid_run_only_when_asked(
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    test_nodes: list[str],
    controller: ServiceProcess,
) -> None:
    run = uuid.uuid4().hex[:6]
    busy, late = f"goop-e2e-busy-{run}", f"goop-e2e-late-{run}"
    add_node(core, test_nodes, busy, run, pods=0)
    selector = {TEST_NODE_LABEL: run}
    growing = create_goop(
        custom, namespace, "growing", placement="PerNode", includeNewNodes=True, nodeSelector=selector
    )
    fixed = create_goop(custom, namespace, "fixed", placement="PerNode", nodeSelector=selector)
    wait_jobs(kube, namespace, growing, [f"growing-{busy}"])
    wait_jobs(kube, namespace, fixed, [f"fixed-{busy}"])
    # Creation times have one-second resolution, and a node created in the run's first second counts as
    # present at its start: let that second pass (on this machine's clock, the API server's too).
    started = max(
        cast(
            datetime,
            parse_rfc3339(wait_status(custom, namespace, g, lambda s: "startTime" in s, "started")["startTime"]),
        )
        for g in ("growing", "fixed")
    )
    wait_for(lambda: datetime.now(UTC) >= started + timedelta(seconds=1), "the runs' first second to pass")

    add_node(core, test_nodes, late, run)
    wait_jobs(kube, namespace, growing, [f"growing-{busy}", f"growing-{late}"])
    message = wait_event(core, namespace, "fixed", "NodeNotIncluded")[0]
    assert late in message and "includeNewNodes" in message
    assert goop_status(custom, namespace, "fixed")["skippedNodes"] == [late]
    wait_status(custom, namespace, "growing", lambda s: s["succeeded"] == 1, "the late node's worker succeeded")

    set_pod_room(core, busy, 110)
    growing_status = wait_phase(custom, namespace, "growing", "Completed")
    fixed_status = wait_phase(custom, namespace, "fixed", "Completed")
    assert sorted(d["node"] for d in growing_status["jobs"]) == sorted([busy, late])
    assert [d["node"] for d in fixed_status["jobs"]] == [busy]
    assert [j.metadata.name for j in jobs_of(kube, namespace, fixed)] == [f"fixed-{busy}"]
    pods = core.list_namespaced_pod(namespace, label_selector=f"{GOOP_UID_LABEL}={growing['metadata']['uid']}").items
    assert sorted(str(p.spec.node_name) for p in pods) == sorted([busy, late])


def test_status_printer_columns_and_events_follow_kubernetes_conventions(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    controller: ServiceProcess,
) -> None:
    create_goop(custom, namespace, "plain", jobCount=2)
    status = wait_phase(custom, namespace, "plain", "Completed")
    goop = read_goop(custom, namespace, "plain")
    assert (goop["spec"]["image"], goop["spec"]["placement"]) == ("busybox", "Jobs"), "CRD defaults"
    assert status["observedGeneration"] == goop["metadata"]["generation"]
    complete = condition(status, "Complete")
    assert (complete["status"], complete["reason"], complete["observedGeneration"]) == ("True", "AllJobsSucceeded", 1)
    assert status["startTime"] <= status["completionTime"]
    # What `kubectl describe goop` lists: the Jobs created and how the run ended (each worker's outcome is in the
    # status), no Event per worker that succeeded.
    assert wait_event(core, namespace, "plain", "Completed") == ["all 2 worker Jobs succeeded"]
    assert sorted(events(core, namespace, "plain")) == [
        ("Completed", "all 2 worker Jobs succeeded"),
        ("JobCreated", "Created 2 Jobs: plain-0, plain-1"),
    ]
    with urllib.request.urlopen(f"{controller.health_url}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    assert re.search(r"^tollgate_jobs_worker_jobs_created_total [1-9]", metrics, re.MULTILINE), (
        "Jobs created are counted"
    )
    assert re.search(r'^tollgate_jobs_reconciles_total\{.*result="ok".*\} [1-9]', metrics, re.MULTILINE)
    table = cluster.kubectl("get", "goop", "plain", "-n", namespace).stdout.split()
    assert table[:8] == ["NAME", "PLACEMENT", "DESIRED", "ACTIVE", "SUCCEEDED", "FAILED", "PHASE", "AGE"]
    assert table[8:15] == ["plain", "Jobs", "2", "0", "2", "0", "Completed"]


def test_of_two_replicas_one_acts_and_the_standby_takes_over_when_it_crashes(
    run_service: ServiceFactory, kube: client.ApiClient, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """Leader election as the chart turns it on: the Lease in the release namespace, named after the service."""
    lease_name = f"tollgate-jobs-{uuid.uuid4().hex[:6]}"
    settings = {
        "TOLLGATE_JOBS_SERVICE_NAME": lease_name,
        "TOLLGATE_JOBS_LEADER_ELECTION": "true",
        "POD_NAMESPACE": "tollgate-system",
        "TOLLGATE_JOBS_LEASE_DURATION_SECONDS": "6",  # renewals survive a loaded machine
    }
    first = run_service("jobs", rbac=True, env={**settings, "POD_NAME": "first"})
    leases = client.CoordinationV1Api(kube)

    def holder() -> str:
        """The Lease's holder; none until the first replica has created it (it is ready before that)."""
        try:
            spec = leases.read_namespaced_lease(lease_name, "tollgate-system").spec
        except client.ApiException as error:
            if error.status == 404:
                return ""
            raise
        return str(spec.holder_identity or "") if spec is not None else ""

    wait_for(lambda: holder().startswith("first_"), "the first replica to lead", timeout=TIMEOUT)
    second = run_service("jobs", rbac=True, env={**settings, "POD_NAME": "second"})  # ready while standing by
    create_goop(custom, namespace, "before", jobCount=2)
    assert wait_phase(custom, namespace, "before", "Completed")["succeeded"] == 2
    assert holder().startswith("first_")
    assert "created Job" in first.logs()
    assert "standing by" in second.logs() and "created Job" not in second.logs()

    first.kill()
    killed_at = time.monotonic()
    wait_for(lambda: holder().startswith("second_"), "the standby to take the Lease over", timeout=TIMEOUT)
    print(f"\nfailover: the standby held the Lease {time.monotonic() - killed_at:.2f} s after the leader died")
    create_goop(custom, namespace, "after", jobCount=2)
    assert wait_phase(custom, namespace, "after", "Completed")["succeeded"] == 2
    assert "created Job" in second.logs()
    before = read_goop(custom, namespace, "before")
    assert len(jobs_of(kube, namespace, before)) == 2, "the new leader re-reads the finished Goop, creating nothing"
