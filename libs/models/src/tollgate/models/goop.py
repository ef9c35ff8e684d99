"""`goop.example.com/v1alpha1` Goop (seeds/goop-job-operator.md). Wire names are camelCase."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, opaque

GROUP = "goop.example.com"
VERSION = "v1alpha1"

Phase = Literal["Pending", "Running", "Completed", "Failed"]


class GoopSpec(WireModel):
    job_count: int = Field(
        default=1, alias="jobCount", ge=1, le=1000, description="Worker Jobs to run (placement Jobs)."
    )
    cmd: str = Field(min_length=1, description="Shell command each worker runs.")
    image: str = Field(default="busybox", min_length=1)
    placement: Literal["Jobs", "PerNode"] = Field(
        default="Jobs",
        description="Jobs: jobCount workers anywhere. PerNode: one worker on every eligible node.",
    )
    include_new_nodes: bool = Field(
        default=False, alias="includeNewNodes", description="PerNode: also run on nodes that join mid-run."
    )
    parallelism: int | None = Field(default=None, ge=1, description="Most workers running at once.")
    backoff_limit: int = Field(default=6, alias="backoffLimit", ge=0, description="Retries before a Job fails.")
    active_deadline_seconds: int | None = Field(default=None, alias="activeDeadlineSeconds", ge=1)
    ttl_seconds_after_finished: int | None = Field(default=None, alias="ttlSecondsAfterFinished", ge=0)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] | None = opaque("Pod tolerations (core/v1 Toleration).")


class JobDetail(WireModel):
    name: str
    node: str | None = None
    phase: Literal["Pending", "Running", "Succeeded", "Failed"]
    reason: str | None = None


class GoopStatus(Status):
    phase: Phase = "Pending"
    active: int = Field(default=0, ge=0)
    succeeded: int = Field(default=0, ge=0)
    failed: int = Field(default=0, ge=0)
    jobs: list[JobDetail] = Field(default_factory=list)
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
            PrinterColumn(name="Jobs", type="integer", json_path=".spec.jobCount"),
            PrinterColumn(name="Succeeded", type="integer", json_path=".status.succeeded"),
            PrinterColumn(name="Phase", type="string", json_path=".status.phase"),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )
