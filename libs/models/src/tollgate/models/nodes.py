"""What the services read of core/v1 Nodes' scheduling constraints: their taints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The taint the scheduler treats a cordoned node (spec.unschedulable) as having.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str = ""


def node_taints(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    """spec.taints of a Node object; an entry without a key (the API server refuses those) is skipped."""
    spec = node.get("spec") or {}
    return tuple(
        Taint(str(taint["key"]), str(taint.get("effect") or ""), str(taint.get("value") or ""))
        for taint in spec.get("taints") or []
        if taint.get("key")
    )
