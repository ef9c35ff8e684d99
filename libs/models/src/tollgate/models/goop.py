"""`goop.example.com/v1alpha1` Goop (seeds/goop-job-operator.md). Wire names are camelCase."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, opaque

GROUP = "goop.example.com"
VERSION = "v1alpha1"

Phase = Literal["Pending", "Running", "Completed", "Failed"]
JobPhase = Literal["Pending", "Running", "Succeeded", "Failed"]


class GoopSpec(WireModel):
    job_count: int = Field(
        default=1,
        alias="jobCount",
        ge=1,
        le=1000,
        description="Worker Jobs to run (placement Jobs; PerNode runs one per eligible node instead).",
    )
    cmd: str = Field(min_length=1, description="Shell command each worker runs (`sh -c`).")
    image: str = Field(default="busybox", min_length=1, description="Image of the worker container.")
    placement: Literal["Jobs", "PerNode"] = Field(
        default="Jobs",
        description="Jobs: jobCount workers anywhere. PerNode: one worker on every eligible node.",
    )
    include_new_nodes: bool = Field(
        default=False, alias="includeNewNodes", description="PerNode: also run on nodes that join mid-run."
    )
    parallelism: int | None = Field(default=None, ge=1, description="Most workers running at once.")
    backoff_limit: int = Field(
        default=6, alias="backoffLimit", ge=0, description="Retries of a worker's pod before its Job fails."
    )
    active_deadline_seconds: int | None = Field(
        default=None, alias="activeDeadlineSeconds", ge=1, description="Seconds a worker Job may run."
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        alias="ttlSecondsAfterFinished",
        ge=0,
        description="Delete each worker Job this long after it finished (the Goop keeps its record).",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, alias="nodeSelector", description="Labels a node needs to run a worker."
    )
    tolerations: list[dict[str, Any]] | None = opaque("Pod tolerations (core/v1 Toleration).")


class JobDetail(WireModel):
    name: str = Field(description="The worker Job.")
    index: int | None = Field(default=None, ge=0, description="Placement Jobs: the worker's index.")
    node: str | None = Field(default=None, description="Placement PerNode: the node the worker is pinned to.")
    phase: JobPhase
    reason: str | None = Field(default=None, description="Why the Job failed (its Failed condition's reason).")
    message: str | None = None


class GoopStatus(Status):
    phase: Phase = "Pending"
    desired: int = Field(default=0, ge=0, description="Workers this run wants: jobCount, or the eligible nodes.")
    active: int = Field(default=0, ge=0, description="Worker Jobs not finished yet.")
    succeeded: int = Field(default=0, ge=0, description="Worker Jobs that succeeded.")
    failed: int = Field(default=0, ge=0, description="Worker Jobs that failed.")
    jobs: list[JobDetail] = Field(default_factory=list, description="Every worker Job of this run.")
    skipped_nodes: list[str] = Field(
        default_factory=list,
        alias="skippedNodes",
        description="PerNode: eligible nodes that joined after the run started, left out (includeNewNodes false).",
    )
    start_time: str | None = Field(default=None, alias="startTime")
    completion_time: str | None = Field(default=None, alias="completionTime")


class Goop(CustomResource[GoopSpec, GoopStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="Goop",
        plural="goops",
        short_names=["gp"],
        categories=["tollgate", "goop"],
        description="Fans out worker Jobs and reports their completion.",
        printer_columns=[
            PrinterColumn(name="Placement", type="string", json_path=".spec.placement"),
            PrinterColumn(name="Desired", type="integer", json_path=".status.desired"),
            PrinterColumn(name="Active", type="integer", json_path=".status.active"),
            PrinterColumn(name="Succeeded", type="integer", json_path=".status.succeeded"),
            PrinterColumn(name="Failed", type="integer", json_path=".status.failed"),
            PrinterColumn(name="Phase", type="string", json_path=".status.phase"),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )
