"""The rules of `goop.example.com` (tollgate.models.goop): Goops."""

from __future__ import annotations

from collections.abc import Iterator

from tollgate.models import Goop
from tollgate.webhook.validation.common import Review, Violation, label_violations


def goop_violations(resource: Goop, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    if spec.job_count > review.limits.max_goop_jobs:
        yield Violation(
            "spec.jobCount", f"{spec.job_count} is above the configured maximum of {review.limits.max_goop_jobs}"
        )
    if spec.placement == "PerNode" and spec.job_count != 1:
        yield Violation(
            "spec.jobCount", "placement PerNode runs one worker per eligible node: jobCount applies to placement Jobs"
        )
    if spec.include_new_nodes and spec.placement != "PerNode":
        yield Violation("spec.includeNewNodes", "applies to placement PerNode only")
    if not spec.cmd.strip():
        yield Violation("spec.cmd", "must not be blank")
    yield from label_violations(spec.node_selector, "spec.nodeSelector")
