"""Which worker Jobs a Goop should have, what to create or delete, and what its status says: pure, no I/O.

`plan(goop, jobs, nodes, now)` is the whole controller decision. The caller creates and deletes what the
plan says, then plans again with the Jobs it created (and any the API server refused) to get the status
to write; that second plan asks for nothing more, so a reconcile converges in one pass.

The Goop's status is the run's memory: a worker recorded as finished is never re-created, even after
`ttlSecondsAfterFinished` deleted its Job, and a restarted controller finds the same Jobs by name.

The worker Jobs themselves (names, manifests, what is read back from them) are in tollgate.jobs.workers, which
nodes a PerNode Goop may use in tollgate.jobs.nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from tollgate.jobs.nodes import NodeInfo, joined_after, matches_selector, schedulable
from tollgate.jobs.workers import COMPLETE, FAILED, FINISHED, ObservedJob, Worker, worker_name
from tollgate.models.goop import Goop, GoopStatus, JobDetail, Phase

SCALE_DOWN_BLOCKED = "ScaleDownBlocked"
JOB_REJECTED = "JobRejected"
NO_ELIGIBLE_NODES = "NoEligibleNodes"

MAX_EVENT_MESSAGE = 1024  # what the API server keeps of an Event's message


@dataclass(frozen=True)
class GoopEvent:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Deletion:
    job: ObservedJob
    why: str


@dataclass
class Plan:
    create: list[Worker]
    delete: list[Deletion]
    status: GoopStatus
    events: list[GoopEvent]


def desired_workers(
    goop: Goop,
    nodes: Sequence[NodeInfo],
    known: Mapping[str, str | None],
    start_time: str,
    completion_time: str | None,
) -> tuple[list[Worker], list[str]]:
    """The workers the Goop wants now, and (PerNode) eligible nodes left out because they joined too late.

    PerNode keeps a worker it already has while its node exists and still matches nodeSelector (a taint or
    a NotReady spell does not cancel work). A new worker needs a schedulable node that existed when the run
    started, or, with includeNewNodes, one that joined before the run finished. `known` maps the names of
    workers the Goop has (Jobs or records) to their node.
    """
    spec = goop.spec
    if spec.placement == "Jobs":
        return [Worker(worker_name(goop.name, str(i)), index=i) for i in range(spec.job_count)], []
    known_nodes = {node for node in known.values() if node is not None}
    workers: list[Worker] = []
    skipped: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if not matches_selector(node, spec):
            continue
        if node.name not in known_nodes:
            if not schedulable(node, spec):
                continue
            late = joined_after(node, start_time)
            if late and (not spec.include_new_nodes or joined_after(node, completion_time)):
                skipped.append(node.name)
                continue
        workers.append(Worker(worker_name(goop.name, node.name), node=node.name))
    return workers, skipped


def created_event(workers: Sequence[Worker]) -> GoopEvent:
    """One Event for the worker Jobs one reconcile created, naming as many as an Event's message holds."""
    if len(workers) == 1:
        return GoopEvent("Normal", "JobCreated", f"Created Job {workers[0].name} ({workers[0].describe()})")
    message = f"Created {len(workers)} Jobs: " + ", ".join(worker.name for worker in workers)
    if len(message) > MAX_EVENT_MESSAGE:
        tail = f", and {len(workers)} more"  # the longest the tail can be
        cut = message.rfind(", ", 0, MAX_EVENT_MESSAGE - len(tail) + 1)
        shown = message[:cut]
        message = f"{shown}, and {len(workers) - shown.count(', ') - 1} more"
    return GoopEvent("Normal", "JobCreated", message)


def _detail(job: ObservedJob) -> JobDetail:
    return JobDetail(
        name=job.name, index=job.index, node=job.node, phase=job.phase, reason=job.reason, message=job.message
    )


def _sort_key(detail: JobDetail) -> tuple[int, str, str]:
    return (detail.index if detail.index is not None else -1, detail.node or "", detail.name)


def plan(
    goop: Goop,
    jobs: Sequence[ObservedJob],
    nodes: Sequence[NodeInfo],
    now: str,
    rejected: Mapping[str, str] | None = None,
) -> Plan:
    """Decide the Jobs to create and delete and the status to report; `rejected` maps worker names the API
    server refused to create to its message."""
    rejected = rejected or {}
    old = goop.status or GoopStatus()
    generation = goop.generation
    records = {d.name: d for d in old.jobs}
    if old.observed_generation != generation:
        # A spec edit may have fixed what the API server refused: try those workers again.
        records = {n: d for n, d in records.items() if d.reason != JOB_REJECTED}
    observed = {j.name: j for j in jobs if not j.deleting}
    leaving = {j.name for j in jobs if j.deleting}
    start_time = old.start_time or now

    known = {name: d.node for name, d in records.items()} | {j.name: j.node for j in jobs}
    desired, skipped = desired_workers(goop, nodes, known, start_time, old.completion_time)
    desired_names = {w.name for w in desired}

    details: dict[str, JobDetail] = {}
    missing: list[Worker] = []
    for worker in desired:
        record = records.get(worker.name)
        if worker.name in rejected:
            details[worker.name] = JobDetail(
                name=worker.name,
                index=worker.index,
                node=worker.node,
                phase="Failed",
                reason=JOB_REJECTED,
                message=rejected[worker.name],
            )
        elif worker.name in observed:
            details[worker.name] = _detail(observed[worker.name])
        elif record is not None and record.phase in FINISHED:
            details[worker.name] = record
        else:
            missing.append(worker)

    deletions: list[Deletion] = []
    kept_above_count: list[JobDetail] = []
    for name, job in observed.items():
        if name in desired_names:
            continue
        if job.phase in FINISHED:
            details[name] = _detail(job)
        else:
            deletions.append(Deletion(job, _why_unwanted(goop, job, nodes)))
    for name, record in records.items():
        if name not in desired_names and name not in observed and record.phase in FINISHED:
            details[name] = record
    if goop.spec.placement == "Jobs":
        kept_above_count = sorted(
            (d for d in details.values() if d.index is not None and d.index >= goop.spec.job_count), key=_sort_key
        )

    failures = sorted((d for d in details.values() if d.phase == "Failed"), key=_sort_key)
    creates: list[Worker] = []
    if not failures:
        running = sum(1 for name in desired_names if name in details and details[name].phase not in FINISHED)
        budget = (goop.spec.parallelism or len(desired)) - running
        for worker in missing:
            if budget <= 0:
                break
            if worker.name in leaving:
                continue  # re-created once the old Job is gone
            creates.append(worker)
            budget -= 1

    status = old.model_copy(deep=True)
    status.observed_generation = generation
    status.jobs = sorted(details.values(), key=_sort_key)
    status.desired = len(desired)
    status.active = sum(1 for d in details.values() if d.phase not in FINISHED)
    status.succeeded = sum(1 for d in details.values() if d.phase == "Succeeded")
    status.failed = len(failures)
    status.skipped_nodes = skipped
    status.start_time = start_time
    wanted_done = [details[w.name] for w in desired if w.name in details]
    phase: Phase
    if failures or (not desired and goop.spec.placement == "PerNode" and not goop.spec.include_new_nodes):
        phase = "Failed"
    elif desired and len(wanted_done) == len(desired) and all(d.phase == "Succeeded" for d in wanted_done):
        phase = "Completed"
    elif any(d.phase != "Pending" for d in wanted_done):
        phase = "Running"
    else:
        phase = "Pending"
    status.phase = phase
    if phase in ("Completed", "Failed"):
        status.completion_time = old.completion_time if old.phase == phase and old.completion_time else now
    else:
        status.completion_time = None

    events = _conditions(goop, status, old, failures, kept_above_count, desired)
    events += _transitions(old, status, records, skipped)
    return Plan(create=creates, delete=deletions, status=status, events=events)


def _why_unwanted(goop: Goop, job: ObservedJob, nodes: Sequence[NodeInfo]) -> str:
    if job.node is None:
        return f"jobCount is now {goop.spec.job_count}"
    node = next((n for n in nodes if n.name == job.node), None)
    if node is None:
        return f"node {job.node} is gone"
    return f"node {job.node} no longer matches spec.nodeSelector"


def _conditions(
    goop: Goop,
    status: GoopStatus,
    old: GoopStatus,
    failures: list[JobDetail],
    kept_above_count: list[JobDetail],
    desired: list[Worker],
) -> list[GoopEvent]:
    """Set Complete, Failed and (when it applies) ScaleDownBlocked; events for transitions not covered elsewhere."""
    generation = goop.generation
    events: list[GoopEvent] = []
    what = "nodes" if goop.spec.placement == "PerNode" else "Jobs"
    progress = f"{status.succeeded} of {len(desired)} {what} succeeded, {status.active} active"
    no_nodes = "no node matches spec.nodeSelector and tolerates its taints"
    if status.phase == "Completed":
        status.set_condition(COMPLETE, "True", "AllJobsSucceeded", progress, generation)
    elif not desired:
        waiting = f"{no_nodes}; waiting for one to join" if status.phase == "Pending" else no_nodes
        if (
            status.set_condition(COMPLETE, "False", NO_ELIGIBLE_NODES, waiting, generation)
            and status.phase == "Pending"
        ):
            events.append(GoopEvent("Warning", NO_ELIGIBLE_NODES, waiting))
    else:
        reason = {"Pending": "JobsPending", "Running": "JobsRunning", "Failed": "JobFailed"}[status.phase]
        status.set_condition(COMPLETE, "False", reason, progress, generation)
    if failures:
        first = failures[0]
        message = f"Job {first.name} failed: {first.message or first.reason}"
        if len(failures) > 1:
            message += f" (and {len(failures) - 1} more)"
        status.set_condition(FAILED, "True", first.reason or FAILED, message, generation)
    elif status.phase == "Failed":
        status.set_condition(FAILED, "True", NO_ELIGIBLE_NODES, f"{no_nodes}, and includeNewNodes is false", generation)
    else:
        status.set_condition(FAILED, "False", "NoJobFailed", "", generation)
    if kept_above_count:
        names = ", ".join(f"{d.name} ({d.phase})" for d in kept_above_count)
        message = (
            f"spec.jobCount is {goop.spec.job_count} but {len(kept_above_count)} Job(s) above it already "
            f"finished and cannot be undone: {names}"
        )
        before = old.condition(SCALE_DOWN_BLOCKED)
        status.set_condition(SCALE_DOWN_BLOCKED, "True", "FinishedJobsKept", message, generation)
        if before is None or before.status != "True":
            events.append(GoopEvent("Warning", "CannotScaleDown", message))
    elif status.condition(SCALE_DOWN_BLOCKED) is not None:
        status.set_condition(SCALE_DOWN_BLOCKED, "False", "WithinJobCount", "", generation)
    return events


def _transitions(
    old: GoopStatus, status: GoopStatus, records: Mapping[str, JobDetail], skipped: list[str]
) -> list[GoopEvent]:
    """Events for what changed since the status last written: so a restarted controller repeats none. A worker
    that failed gets an Event of its own; one that succeeded does not (its record in the status says so, and
    `Completed` reports them all)."""
    events: list[GoopEvent] = []
    for detail in status.jobs:
        before = records.get(detail.name)
        if before is not None and before.phase == detail.phase:
            continue
        where = f" on node {detail.node}" if detail.node else ""
        if detail.phase == "Failed":
            reason = f"{detail.reason}: {detail.message}" if detail.message else str(detail.reason)
            events.append(GoopEvent("Warning", "JobFailed", f"Job {detail.name} failed{where}: {reason}"))
    if status.phase != old.phase:
        if status.phase == "Completed":
            events.append(GoopEvent("Normal", "Completed", f"all {status.succeeded} worker Jobs succeeded"))
        elif status.phase == "Failed":
            failed = status.condition(FAILED)
            events.append(GoopEvent("Warning", "Failed", failed.message if failed else "a worker Job failed"))
    for node in skipped:
        if node not in old.skipped_nodes:
            message = f"node {node} joined after the run started; includeNewNodes is false, so it runs no worker"
            events.append(GoopEvent("Normal", "NodeNotIncluded", message))
    return events
