"""The planner: which worker Jobs should exist, what to create or delete, and what the Goop's status says."""

from __future__ import annotations

from typing import Any

import pytest

from tollgate.jobs.nodes import NodeInfo, node_info, schedulable, tolerates
from tollgate.jobs.planning import Plan, created_event, plan
from tollgate.jobs.workers import (
    GOOP_UID_LABEL,
    INDEX_ANNOTATION,
    NODE_ANNOTATION,
    ObservedJob,
    Worker,
    job_event_urgent,
    job_manifest,
    observe_job,
    owner_uid,
    records_job,
    worker_name,
)
from tollgate.models.goop import Goop, GoopSpec, GoopStatus
from tollgate.models.nodes import Taint

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"
T2 = "2026-01-01T00:02:00Z"
BEFORE = "2025-12-31T00:00:00Z"


def goop(status: GoopStatus | None = None, generation: int = 1, name: str = "g", **spec: Any) -> Goop:
    spec.setdefault("cmd", "echo hi")
    obj = Goop.new(name, GoopSpec.model_validate(spec), namespace="ns", uid="uid-1", generation=generation)
    obj.status = status
    return obj


def job(name: str, phase: str = "Pending", **fields: Any) -> ObservedJob:
    return ObservedJob(name=name, phase=phase, **fields)  # type: ignore[arg-type]


def worker_jobs(count: int, phase: str = "Pending", name: str = "g") -> list[ObservedJob]:
    return [job(f"{name}-{i}", phase, index=i) for i in range(count)]


def node(name: str, created: str = BEFORE, **fields: Any) -> NodeInfo:
    return NodeInfo(name=name, created=created, **fields)


def reasons(result: Plan) -> list[str]:
    return [event.reason for event in result.events]


def condition(status: GoopStatus, type_: str) -> tuple[str, str]:
    found = status.condition(type_)
    assert found is not None, f"no {type_} condition"
    return found.status, found.reason


def settle(g: Goop, result: Plan) -> Goop:
    """The Goop as the next reconcile reads it: with the status just written."""
    return goop(result.status, generation=g.generation or 1, name=g.name, **g.spec.to_wire())


# --- names and manifests -------------------------------------------------------------------------------------------


def test_worker_names_are_readable_and_short_names_stay_unique() -> None:
    assert worker_name("goop-sample", "0") == "goop-sample-0"
    long_a, long_b = worker_name("g" * 70, "node-a"), worker_name("g" * 70, "node-b")
    assert len(long_a) <= 63 and len(long_b) <= 63
    assert long_a != long_b
    assert long_a == worker_name("g" * 70, "node-a")


def test_job_manifest_runs_cmd_once_owned_by_the_goop() -> None:
    g = goop(jobCount=2, image="alpine:3", backoffLimit=2, activeDeadlineSeconds=30, ttlSecondsAfterFinished=60)
    manifest = job_manifest(g, plan(g, [], [], T0).create[1])
    assert manifest["metadata"]["name"] == "g-1"
    assert manifest["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "goop.example.com/v1alpha1",
            "kind": "Goop",
            "name": "g",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert manifest["metadata"]["labels"][GOOP_UID_LABEL] == "uid-1"
    assert manifest["metadata"]["annotations"] == {INDEX_ANNOTATION: "1"}
    spec = manifest["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (2, 30, 60)
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["image"] == "alpine:3"
    assert pod["containers"][0]["command"] == ["sh", "-c", "echo hi"]
    assert "affinity" not in pod


def test_per_node_manifest_pins_the_worker_to_its_node() -> None:
    g = goop(placement="PerNode", nodeSelector={"disk": "ssd"}, tolerations=[{"operator": "Exists"}])
    worker = plan(g, [], [node("n1", labels={"disk": "ssd"})], T0).create[0]
    manifest = job_manifest(g, worker)
    pod = manifest["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert manifest["metadata"]["annotations"] == {NODE_ANNOTATION: "n1"}
    assert {"name": "GOOP_WORKER", "value": "n1"} in pod["containers"][0]["env"]


# --- reading Jobs and nodes ------------------------------------------------------------------------------------------


def job_body(status: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    meta = {"name": "g-0", "uid": "j1", "annotations": {INDEX_ANNOTATION: "0"}, **metadata}
    return {"metadata": meta, "status": status}


@pytest.mark.parametrize(
    ("status", "phase", "reason"),
    [
        ({}, "Pending", None),
        ({"active": 1, "ready": 0}, "Pending", None),
        ({"active": 1, "ready": 1}, "Running", None),
        ({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}, "Succeeded", None),
        (
            {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
            "Failed",
            "DeadlineExceeded",
        ),
        ({"conditions": [{"type": "Failed", "status": "False"}]}, "Pending", None),
    ],
)
def test_a_job_phase_comes_from_its_conditions_and_pods(status: dict[str, Any], phase: str, reason: str | None) -> None:
    observed = observe_job(job_body(status))
    assert (observed.phase, observed.reason, observed.index) == (phase, reason, 0)


def test_a_deleted_job_and_its_owner_are_recognised() -> None:
    body = job_body(
        {},
        deletionTimestamp=T0,
        ownerReferences=[{"kind": "Goop", "controller": True, "uid": "uid-1", "name": "g"}],
    )
    assert observe_job(body).deleting
    assert owner_uid(body) == "uid-1"
    assert owner_uid(job_body({})) is None


def test_node_info_reads_labels_taints_and_cordon() -> None:
    info = node_info(
        {
            "metadata": {"name": "n1", "labels": {"a": "b"}, "creationTimestamp": T0},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        }
    )
    assert info == NodeInfo("n1", {"a": "b"}, (Taint("k", "NoSchedule"),), True, T0)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, Taint("any", "NoExecute"), True),
        ({"key": "k", "operator": "Exists"}, Taint("k", "NoSchedule", "v"), True),
        ({"key": "k", "value": "v"}, Taint("k", "NoSchedule", "v"), True),
        ({"key": "k", "value": "w"}, Taint("k", "NoSchedule", "v"), False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, Taint("k", "NoSchedule"), False),
        ({"key": "other", "operator": "Exists"}, Taint("k", "NoSchedule"), False),
    ],
)
def test_tolerations_match_taints_as_the_scheduler_does(
    toleration: dict[str, str], taint: Taint, expected: bool
) -> None:
    assert tolerates([toleration], taint) is expected


def test_a_node_is_schedulable_unless_cordoned_or_tainted_against_the_workers() -> None:
    plain = goop(placement="PerNode").spec
    tolerant = goop(placement="PerNode", tolerations=[{"operator": "Exists"}]).spec
    tainted = node("n", taints=(Taint("dedicated", "NoSchedule"),))
    soft = node("n", taints=(Taint("dedicated", "PreferNoSchedule"),))
    cordoned = node("n", unschedulable=True)
    assert not schedulable(tainted, plain) and schedulable(tainted, tolerant)
    assert schedulable(soft, plain)
    assert not schedulable(cordoned, plain) and schedulable(cordoned, tolerant)


# --- placement Jobs ------------------------------------------------------------------------------------------------


def test_a_new_goop_creates_job_count_workers_and_starts_pending() -> None:
    result = plan(goop(jobCount=3), [], [], T0)
    assert [(w.name, w.index) for w in result.create] == [("g-0", 0), ("g-1", 1), ("g-2", 2)]
    assert result.delete == []
    assert (result.status.phase, result.status.start_time, result.status.desired) == ("Pending", T0, 3)
    assert condition(result.status, "Complete") == ("False", "JobsPending")
    assert condition(result.status, "Failed") == ("False", "NoJobFailed")


def test_planning_again_with_the_created_jobs_asks_for_nothing_more() -> None:
    g = goop(jobCount=3)
    created = [job(w.name, index=w.index) for w in plan(g, [], [], T0).create]
    again = plan(g, created, [], T0)
    assert again.create == [] and again.delete == []
    assert [d.name for d in again.status.jobs] == ["g-0", "g-1", "g-2"]
    assert again.status.active == 3


def test_all_workers_succeeded_completes_the_goop_once() -> None:
    g = settle(goop(jobCount=3), plan(goop(jobCount=3), worker_jobs(3), [], T0))
    done = plan(g, worker_jobs(3, "Succeeded"), [], T1)
    assert (done.status.phase, done.status.succeeded, done.status.active) == ("Completed", 3, 0)
    assert done.status.completion_time == T1
    assert condition(done.status, "Complete") == ("True", "AllJobsSucceeded")
    assert reasons(done) == ["Completed"], "one Event reports the run, not one per worker that succeeded"
    assert done.events[0].message == "all 3 worker Jobs succeeded"
    later = plan(settle(g, done), worker_jobs(3, "Succeeded"), [], T2)
    assert later.events == [] and later.create == []
    assert later.status.completion_time == T1
    assert later.status == done.status


def test_the_jobs_one_reconcile_created_are_named_in_one_event() -> None:
    assert created_event([Worker("g-0", index=0)]).message == "Created Job g-0 (worker 0)"
    five = created_event([Worker(f"g-{i}", index=i) for i in range(5)])
    assert (five.reason, five.message) == ("JobCreated", "Created 5 Jobs: g-0, g-1, g-2, g-3, g-4")
    many = created_event([Worker(f"{'x' * 40}-{i}", index=i) for i in range(1000)]).message
    assert len(many) <= 1024, "the API server's limit"
    shown = many.removeprefix("Created 1000 Jobs: ").split(", and ")[0].split(", ")
    assert shown == [f"{'x' * 40}-{i}" for i in range(len(shown))]
    assert many.endswith(f", and {1000 - len(shown)} more")


def wire(g: Goop) -> dict[str, Any]:
    return g.model_dump(by_alias=True, exclude_none=True) | {"status": g.status.to_wire() if g.status else {}}


def test_a_job_event_changes_nothing_when_the_current_status_records_the_job_as_it_is() -> None:
    g = goop(jobCount=2)
    written = settle(g, plan(g, [job("g-0", "Running", index=0), job("g-1", index=1)], [], T0))
    assert records_job(wire(written), job("g-0", "Running", index=0, uid="u0"))
    assert records_job(wire(written), job("g-1", index=1))
    assert not records_job(wire(written), job("g-1", "Running", index=1)), "a new phase"
    assert not records_job(wire(written), job("g-0", "Running", index=0, deleting=True)), "leaving"
    assert not records_job(wire(written), job("g-2", index=2)), "not a worker it has"
    edited = goop(written.status, generation=2, jobCount=2)
    assert not records_job(wire(edited), job("g-0", "Running", index=0)), "the status is of an older spec"
    assert not records_job(wire(goop(jobCount=2)), job("g-0", index=0)), "no status yet"
    failed = settle(g, plan(g, [job("g-0", "Failed", index=0, reason="BackoffLimitExceeded", message="m")], [], T0))
    assert records_job(wire(failed), job("g-0", "Failed", index=0, reason="BackoffLimitExceeded", message="m"))
    assert not records_job(wire(failed), job("g-0", "Failed", index=0, reason="DeadlineExceeded", message="m"))


def test_a_restarted_controller_finds_its_jobs_and_changes_nothing() -> None:
    g = goop(jobCount=3)
    first = plan(g, worker_jobs(3, "Running"), [], T0)
    restarted = plan(settle(g, first), worker_jobs(3, "Running"), [], T1)
    assert restarted.create == [] and restarted.delete == [] and restarted.events == []
    assert restarted.status == first.status


def test_finished_jobs_deleted_by_their_ttl_are_not_run_again() -> None:
    g = goop(jobCount=2, ttlSecondsAfterFinished=0)
    done = plan(g, worker_jobs(2, "Succeeded"), [], T0)
    gone = plan(settle(g, done), [], [], T1)
    assert gone.create == []
    assert (gone.status.phase, gone.status.succeeded) == ("Completed", 2)


def test_an_unfinished_job_that_disappeared_is_created_again() -> None:
    g = goop(jobCount=2)
    running = plan(g, worker_jobs(2), [], T0)
    result = plan(settle(g, running), worker_jobs(1), [], T1)
    assert [w.name for w in result.create] == ["g-1"]


def test_a_job_still_being_deleted_is_recreated_only_once_gone() -> None:
    g = goop(jobCount=1)
    result = plan(g, [job("g-0", deleting=True, index=0)], [], T0)
    assert result.create == []


def test_parallelism_bounds_the_unfinished_workers() -> None:
    g = goop(jobCount=5, parallelism=2)
    assert [w.name for w in plan(g, [], [], T0).create] == ["g-0", "g-1"]
    assert plan(g, worker_jobs(2, "Running"), [], T0).create == []
    two_done = [job("g-0", "Succeeded", index=0), job("g-1", "Succeeded", index=1), job("g-2", "Running", index=2)]
    assert [w.name for w in plan(g, two_done, [], T0).create] == ["g-3"]


def test_a_failed_worker_fails_the_goop_with_its_reason_and_stops_new_work() -> None:
    g = goop(jobCount=3, parallelism=1)
    first = plan(g, [job("g-0", "Running", index=0)], [], T0)
    failed = job("g-0", "Failed", index=0, reason="BackoffLimitExceeded", message="Job has reached the backoff limit")
    result = plan(settle(g, first), [failed], [], T1)
    assert result.create == []
    assert (result.status.phase, result.status.failed) == ("Failed", 1)
    assert condition(result.status, "Failed") == ("True", "BackoffLimitExceeded")
    assert condition(result.status, "Complete") == ("False", "JobFailed")
    assert result.status.jobs[0].reason == "BackoffLimitExceeded"
    assert reasons(result) == ["JobFailed", "Failed"]
    assert result.status.completion_time == T1


def test_scaling_up_while_running_adds_the_missing_workers() -> None:
    g = goop(jobCount=2)
    running = plan(g, worker_jobs(2, "Running"), [], T0)
    bigger = goop(running.status, generation=2, jobCount=4)
    result = plan(bigger, worker_jobs(2, "Running"), [], T1)
    assert [w.name for w in result.create] == ["g-2", "g-3"]
    assert (result.status.desired, result.status.observed_generation) == (4, 2)


def test_scaling_up_a_completed_goop_runs_again_and_clears_its_completion_time() -> None:
    g = goop(jobCount=1)
    done = plan(g, worker_jobs(1, "Succeeded"), [], T0)
    result = plan(goop(done.status, generation=2, jobCount=2), worker_jobs(1, "Succeeded"), [], T1)
    assert [w.name for w in result.create] == ["g-1"]
    assert (result.status.phase, result.status.completion_time) == ("Running", None)


def test_scaling_down_deletes_unfinished_workers_and_reports_finished_ones_it_cannot_undo() -> None:
    g = goop(jobCount=3)
    jobs = [job("g-0", "Running", index=0), job("g-1", "Running", index=1, uid="u1"), job("g-2", "Succeeded", index=2)]
    running = plan(g, jobs, [], T0)
    smaller = goop(running.status, generation=2, jobCount=1)
    result = plan(smaller, jobs, [], T1)
    assert [(d.job.name, d.job.uid, d.why) for d in result.delete] == [("g-1", "u1", "jobCount is now 1")]
    assert condition(result.status, "ScaleDownBlocked") == ("True", "FinishedJobsKept")
    blocked = result.status.condition("ScaleDownBlocked")
    assert blocked is not None and "g-2 (Succeeded)" in blocked.message
    assert reasons(result) == ["CannotScaleDown"]
    after = plan(settle(smaller, result), [jobs[0], jobs[2]], [], T2)
    assert after.events == [] and after.delete == []
    assert [d.name for d in after.status.jobs] == ["g-0", "g-2"]


def test_a_job_the_api_server_refused_fails_the_goop_until_the_spec_changes() -> None:
    g = goop(jobCount=1, tolerations=[{"operator": "Bogus"}])
    message = "spec.template.spec.tolerations[0].operator: Unsupported value: Bogus"
    refused = plan(g, [], [], T0, rejected={"g-0": message})
    assert condition(refused.status, "Failed") == ("True", "JobRejected")
    assert refused.status.jobs[0].message == message
    assert plan(settle(g, refused), [], [], T1).create == []
    fixed = goop(refused.status, generation=2, jobCount=1)
    assert [w.name for w in plan(fixed, [], [], T1).create] == ["g-0"]


# --- placement PerNode ---------------------------------------------------------------------------------------------


NODES = [node("n1"), node("n2"), node("n3", taints=(Taint("dedicated", "NoSchedule"),))]


def test_per_node_runs_one_worker_on_each_eligible_node() -> None:
    result = plan(goop(placement="PerNode"), [], NODES, T0)
    assert [(w.name, w.node) for w in result.create] == [("g-n1", "n1"), ("g-n2", "n2")]
    assert result.status.desired == 2
    tolerant = plan(goop(placement="PerNode", tolerations=[{"key": "dedicated", "operator": "Exists"}]), [], NODES, T0)
    assert [w.node for w in tolerant.create] == ["n1", "n2", "n3"]
    selected = plan(goop(placement="PerNode", nodeSelector={"pool": "a"}), [], [node("n1", labels={"pool": "a"})], T0)
    assert [w.node for w in selected.create] == ["n1"]


def test_per_node_completes_when_every_node_finished() -> None:
    g = goop(placement="PerNode")
    jobs = [job("g-n1", "Succeeded", node="n1"), job("g-n2", "Succeeded", node="n2")]
    result = plan(g, jobs, NODES, T0)
    assert (result.status.phase, result.status.succeeded) == ("Completed", 2)
    assert [d.node for d in result.status.jobs] == ["n1", "n2"]


def test_nodes_joining_mid_run_are_included_only_with_include_new_nodes() -> None:
    late = node("n4", created=T1)
    fixed = goop(placement="PerNode")
    started = plan(fixed, [], NODES, T0)
    jobs = [job("g-n1", "Running", node="n1"), job("g-n2", "Running", node="n2")]
    result = plan(settle(fixed, started), jobs, [*NODES, late], T1)
    assert result.create == []
    assert result.status.skipped_nodes == ["n4"]
    assert reasons(result) == ["NodeNotIncluded"]
    assert plan(settle(fixed, result), jobs, [*NODES, late], T2).events == []

    growing = goop(placement="PerNode", includeNewNodes=True)
    started = plan(growing, [], NODES, T0)
    result = plan(settle(growing, started), jobs, [*NODES, late], T1)
    assert [w.node for w in result.create] == ["n4"]
    assert result.status.skipped_nodes == []


def test_a_node_joining_after_the_run_finished_is_not_included() -> None:
    g = goop(placement="PerNode", includeNewNodes=True)
    jobs = [job("g-n1", "Succeeded", node="n1")]
    done = plan(g, jobs, [node("n1")], T0)
    assert done.status.phase == "Completed"
    later = plan(settle(g, done), jobs, [node("n1"), node("n2", created=T1)], T1)
    assert later.create == [] and later.status.phase == "Completed"


def test_a_worker_keeps_its_node_through_taints_but_not_when_the_node_goes() -> None:
    g = goop(placement="PerNode")
    jobs = [job("g-n1", "Running", node="n1", uid="a"), job("g-n2", "Succeeded", node="n2")]
    tainted = [node("n1", taints=(Taint("node.kubernetes.io/not-ready", "NoSchedule"),)), node("n2")]
    assert plan(g, jobs, tainted, T0).delete == []
    result = plan(g, jobs, [], T0)
    assert [(d.job.name, d.why) for d in result.delete] == [("g-n1", "node n1 is gone")]
    assert [d.name for d in result.status.jobs] == ["g-n2"]
    relabelled = plan(goop(placement="PerNode", nodeSelector={"pool": "b"}), jobs, [node("n1"), node("n2")], T0)
    assert [d.why for d in relabelled.delete] == ["node n1 no longer matches spec.nodeSelector"]


def test_per_node_without_eligible_nodes_fails_or_waits() -> None:
    fails = plan(goop(placement="PerNode", nodeSelector={"pool": "none"}), [], NODES, T0)
    assert fails.status.phase == "Failed"
    assert condition(fails.status, "Failed") == ("True", "NoEligibleNodes")
    waits = plan(goop(placement="PerNode", includeNewNodes=True, nodeSelector={"pool": "none"}), [], NODES, T0)
    assert waits.status.phase == "Pending"
    assert condition(waits.status, "Complete") == ("False", "NoEligibleNodes")
    assert reasons(waits) == ["NoEligibleNodes"]


@pytest.mark.parametrize(
    ("changed", "others", "urgent"),
    [
        (job("g-0", "Pending"), [], False),  # created: the status only gains a Pending entry
        (job("g-0", "Running"), [job("g-1", "Running")], False),
        (job("g-0", "Succeeded"), [job("g-1", "Running")], False),  # one of several finished
        (job("g-0", "Succeeded"), [job("g-1", "Succeeded")], True),  # the last one: the Goop may complete
        (job("g-0", "Succeeded"), [], True),
        (job("g-0", "Failed"), [job("g-1", "Running")], True),  # the Goop fails and starts no more workers
    ],
)
def test_job_events_that_only_refresh_the_status_can_wait(
    changed: ObservedJob, others: list[ObservedJob], urgent: bool
) -> None:
    assert job_event_urgent(changed, [changed, *others]) is urgent
