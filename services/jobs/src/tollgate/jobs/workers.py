"""A Goop's worker Jobs, both ways: the names, labels and batch/v1 manifest of the Jobs the controller creates, and
what it reads back from one (its phase, its Goop, whether an event of it matters now). Pure, no I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tollgate.models.goop import Goop, JobPhase

GOOP_UID_LABEL = "goop.example.com/goop-uid"
GOOP_NAME_LABEL = "goop.example.com/goop"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "tollgate-jobs"
INDEX_ANNOTATION = "goop.example.com/worker-index"
NODE_ANNOTATION = "goop.example.com/node"
WORKER_CONTAINER = "worker"

# The conditions of a finished Job, which the Goop reports too.
COMPLETE = "Complete"
FAILED = "Failed"

FINISHED: frozenset[str] = frozenset({"Succeeded", "Failed"})
MAX_NAME = 63  # a Job's name becomes a label value on its pods


@dataclass(frozen=True)
class Worker:
    """One worker Job the Goop wants: by index (placement Jobs) or pinned to a node (PerNode)."""

    name: str
    index: int | None = None
    node: str | None = None

    def describe(self) -> str:
        return f"on node {self.node}" if self.node is not None else f"worker {self.index}"


@dataclass(frozen=True)
class ObservedJob:
    """What the controller knows of one existing worker Job."""

    name: str
    phase: JobPhase
    index: int | None = None
    node: str | None = None
    reason: str | None = None
    message: str | None = None
    uid: str | None = None
    deleting: bool = False


def worker_name(goop_name: str, suffix: str) -> str:
    """`<goop>-<suffix>`, shortened with a hash of the full name when longer than a Job name may be."""
    full = f"{goop_name}-{suffix}"
    if len(full) <= MAX_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: MAX_NAME - len(digest) - 1].rstrip('-.')}-{digest}"


def job_manifest(goop: Goop, worker: Worker) -> dict[str, Any]:
    """The batch/v1 Job of one worker: one pod running `sh -c cmd`, owned by the Goop."""
    spec = goop.spec
    labels = goop_labels(goop)
    annotations = {NODE_ANNOTATION: worker.node} if worker.node is not None else {INDEX_ANNOTATION: str(worker.index)}
    env: list[dict[str, Any]] = [
        {"name": "GOOP_NAME", "value": goop.name},
        {"name": "GOOP_WORKER", "value": worker.node if worker.node is not None else str(worker.index)},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": WORKER_CONTAINER, "image": spec.image, "command": ["sh", "-c", spec.cmd], "env": env}],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    if worker.node is not None:
        # Pinned the way the DaemonSet controller does it: the scheduler still checks taints and resources.
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [worker.node]}]}
                    ]
                }
            }
        }
    job_spec: dict[str, Any] = {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": spec.backoff_limit,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if spec.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": worker.name,
            "namespace": goop.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": goop.api_version,
                    "kind": goop.kind,
                    "name": goop.name,
                    "uid": goop.metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": job_spec,
    }


def goop_labels(goop: Goop) -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, GOOP_UID_LABEL: str(goop.metadata["uid"])}
    if len(goop.name) <= MAX_NAME:
        labels[GOOP_NAME_LABEL] = goop.name
    return labels


def observe_job(body: Mapping[str, Any]) -> ObservedJob:
    """A worker Job as the planner sees it: finished by its Complete/Failed condition, else Running or Pending."""
    metadata = body.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    status = body.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    phase: JobPhase
    reason = message = None
    if COMPLETE in conditions:
        phase = "Succeeded"
    elif FAILED in conditions:
        phase = "Failed"
        reason = conditions[FAILED].get("reason") or FAILED
        message = conditions[FAILED].get("message") or None
    elif (status.get("ready") or 0) > 0 or (status.get("succeeded") or 0) > 0:
        phase = "Running"
    else:
        phase = "Pending"
    index = annotations.get(INDEX_ANNOTATION)
    return ObservedJob(
        name=str(metadata.get("name")),
        phase=phase,
        index=int(index) if index is not None and str(index).isdigit() else None,
        node=annotations.get(NODE_ANNOTATION),
        reason=reason,
        message=message,
        uid=metadata.get("uid"),
        deleting=metadata.get("deletionTimestamp") is not None,
    )


def job_event_urgent(job: ObservedJob, siblings: Iterable[ObservedJob]) -> bool:
    """Whether a Job event should be acted on at once rather than batched with the Goop's next ones: when the Job
    failed (the Goop fails and starts no more workers) or when it finished the last of the Goop's Jobs
    (`siblings`, the Job among them), where the Goop may complete. Other events (a Job created, started, one of
    several finished) only refresh the status and can wait."""
    if job.phase == "Failed":
        return True
    return job.phase in FINISHED and all(sibling.phase in FINISHED for sibling in siblings)


def records_job(goop: Mapping[str, Any], job: ObservedJob) -> bool:
    """Whether the Goop's status (current for its spec) records the Job as it is now: then an event of that Job
    changes nothing a plan decides. A Job being deleted is never recorded (the plan treats it as leaving)."""
    status = goop.get("status") or {}
    if job.deleting or status.get("observedGeneration") != (goop.get("metadata") or {}).get("generation"):
        return False
    return any(
        record.get("name") == job.name
        and record.get("phase") == job.phase
        and record.get("reason") == job.reason
        and record.get("message") == job.message
        for record in status.get("jobs") or []
    )


def goop_owner(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference of the Goop that controls a Job."""
    owners = (body.get("metadata") or {}).get("ownerReferences") or []
    return next((owner for owner in owners if owner.get("kind") == "Goop" and owner.get("controller")), None)


def owner_uid(body: Mapping[str, Any]) -> str | None:
    """The uid of the Goop that controls a Job, from its owner references."""
    owner = goop_owner(body)
    return str(owner.get("uid")) if owner is not None else None
