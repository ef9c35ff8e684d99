"""The nodes a PerNode Goop may run a worker on: what the controller keeps of a node, and whether a worker's pod
tolerates its taints and matches nodeSelector. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tollgate.models.base import parse_rfc3339
from tollgate.models.goop import GoopSpec
from tollgate.models.nodes import UNSCHEDULABLE_TAINT, Taint, node_taints

PER_NODE = "PerNode"


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    created: str | None = None


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return NodeInfo(
        name=str(metadata.get("name")),
        labels=dict(metadata.get("labels") or {}),
        taints=node_taints(body),
        unschedulable=bool(spec.get("unschedulable")),
        created=metadata.get("creationTimestamp"),
    )


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """core/v1 toleration matching: Exists with no key matches every taint; an empty effect matches any."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" and (not key or key == taint.key):
            return True
        if operator == "Equal" and key == taint.key and (toleration.get("value") or "") == taint.value:
            return True
    return False


def matches_selector(node: NodeInfo, spec: GoopSpec) -> bool:
    return all(node.labels.get(key) == value for key, value in spec.node_selector.items())


def schedulable(node: NodeInfo, spec: GoopSpec) -> bool:
    """Would the scheduler place a new worker there: every NoSchedule/NoExecute taint tolerated, not cordoned."""
    tolerations = spec.tolerations or []
    if node.unschedulable and not tolerates(tolerations, Taint(UNSCHEDULABLE_TAINT, "NoSchedule")):
        return False
    return all(tolerates(tolerations, t) for t in node.taints if t.effect in ("NoSchedule", "NoExecute"))


def joined_after(node: NodeInfo, moment: str | None) -> bool:
    """Whether the node was created after `moment` (no: when either is unknown)."""
    created, cutoff = parse_rfc3339(node.created), parse_rfc3339(moment)
    return created is not None and cutoff is not None and created > cutoff


def watches_nodes(goop: Mapping[str, Any]) -> bool:
    """Whether a Goop (its body) still cares about nodes coming, going or changing: a PerNode one not completed."""
    placement, phase = (goop.get("spec") or {}).get("placement"), (goop.get("status") or {}).get("phase")
    return placement == PER_NODE and phase != "Completed"
