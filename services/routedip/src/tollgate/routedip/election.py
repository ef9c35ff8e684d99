"""Which node holds a routed IP: prospective nodes, eligibility and the election, as pure functions.

- Prospective nodes back the Service: with externalTrafficPolicy Local, the nodes running a ready
  endpoint (a Ready pod the Service selects); otherwise every node (kube-proxy forwards from any node).
- Eligible nodes are prospective, Ready, schedulable, not being drained, and under the class's
  perNodeIPLimit (counting the other IPs of the class that hold or are moving to the node).
- The current holder keeps the IP while it stays eligible: no flapping when a younger node appears.
- Otherwise the youngest eligible node wins (electionPolicy Oldest: the oldest); ties go to the
  name that sorts last (Youngest) or first (Oldest), so every replica decides alike.
- A holder that can still serve the IP (Ready, backing the Service, not being deleted) but is no
  longer eligible (cordoned, tainted, over the limit) moves it only after the class's cool-down since
  the last move; a holder that cannot serve loses it at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from tollgate.models.nodes import UNSCHEDULABLE_TAINT
from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.state import NodeState, PodState, RoutedIPState, ServiceState, SliceState

# Taints that announce a node is going away, whatever their effect.
DRAIN_TAINTS = frozenset(
    {
        "ToBeDeletedByClusterAutoscaler",
        "DeletionCandidateOfClusterAutoscaler",
        "node.kubernetes.io/out-of-service",
        "node.cloudprovider.kubernetes.io/shutdown",
        "karpenter.sh/disrupted",
    }
)

Policy = Literal["Youngest", "Oldest"]
Action = Literal["keep", "move", "wait", "none"]


def backing_nodes(
    service: ServiceState | None,
    slices: Iterable[SliceState],
    pods: Iterable[PodState],
    nodes: Iterable[str],
) -> frozenset[str]:
    """The prospective nodes of a Service.

    Under externalTrafficPolicy Local, a Service with a selector is backed by the nodes of its Ready,
    running pods (what its EndpointSlices will say, known without waiting for the endpoint controller);
    a Service without a selector by the nodes of the ready endpoints in its EndpointSlices.
    """
    if service is None:
        return frozenset()
    if not service.local_traffic:
        return frozenset(nodes)
    if service.selector:
        return frozenset(
            pod.node
            for pod in pods
            if pod.node
            and pod.active
            and pod.ready
            and pod.namespace == service.namespace
            and service.selects(pod.labels)
        )
    return frozenset(
        endpoint.node
        for endpoint_slice in slices
        for endpoint in endpoint_slice.endpoints
        if endpoint.ready and endpoint.node
    )


def draining(node: NodeState) -> str | None:
    if node.deleting:
        return "being deleted"
    for taint in node.taints:
        if taint.key in DRAIN_TAINTS or (taint.effect == "NoExecute" and taint.key != MOVE_TAINT_KEY):
            return f"draining (taint {taint.key}:{taint.effect})"
    return None


def ineligibility(node: NodeState | None, *, backing: bool, usage: int, limit: int) -> str | None:
    """Why `node` cannot take the IP, or None when it is eligible."""
    if node is None:
        return "gone"
    if not node.ready:
        return node.ready_detail
    drain = draining(node)
    if drain:
        return drain
    if node.unschedulable:
        return "cordoned"
    for taint in node.taints:
        if taint.effect == "NoSchedule" and taint.key not in (MOVE_TAINT_KEY, UNSCHEDULABLE_TAINT):
            return f"tainted {taint.key}:{taint.effect}"
    if not backing:
        return "not backing the Service (no ready endpoint)"
    if usage >= limit:
        return f"at the per-node limit ({usage}/{limit} routed IPs)"
    return None


def can_serve(node: NodeState | None, *, backing: bool) -> bool:
    """A holder that still carries traffic for the Service, even if it should no longer be elected."""
    return node is not None and node.ready and not node.deleting and backing


@dataclass(frozen=True)
class ElectionInput:
    nodes: Mapping[str, NodeState]
    backing: frozenset[str]
    usage: Mapping[str, int]
    limit: int
    policy: Policy
    holder: str | None
    target: str | None
    last_move: datetime | None
    cooldown: timedelta
    now: datetime


@dataclass(frozen=True)
class Decision:
    """`keep` the holder, `move` to a node, `wait` out the cool-down, or `none` eligible.

    `node` is where the IP should be (the holder for keep and wait); `urgent` says the holder cannot
    serve; `ineligible` explains every node that was passed over.
    """

    action: Action
    node: str | None
    reason: str
    urgent: bool = False
    retry_after: float | None = None
    eligible: tuple[str, ...] = ()
    ineligible: Mapping[str, str] = field(default_factory=dict)


def rank(nodes: Iterable[NodeState], policy: Policy) -> list[NodeState]:
    """Best first: youngest (or oldest) creation time, ties broken by name."""
    ordered = sorted(nodes, key=lambda n: (n.created, n.name))
    return ordered[::-1] if policy == "Youngest" else ordered


def describe_ineligible(ineligible: Mapping[str, str]) -> str:
    return "; ".join(f"{name}: {why}" for name, why in sorted(ineligible.items())) or "no nodes"


def decide(given: ElectionInput) -> Decision:
    reasons = {
        name: ineligibility(node, backing=name in given.backing, usage=given.usage.get(name, 0), limit=given.limit)
        for name, node in given.nodes.items()
    }
    ineligible = {name: why for name, why in reasons.items() if why is not None}
    ranked = rank((given.nodes[name] for name, why in reasons.items() if why is None), given.policy)
    eligible = tuple(n.name for n in ranked)
    best = eligible[0] if eligible else None

    def decision(
        action: Action, node: str | None, reason: str, *, urgent: bool = False, retry_after: float | None = None
    ) -> Decision:
        return Decision(action, node, reason, urgent, retry_after, eligible, ineligible)

    if given.target is not None and given.target in eligible:
        return decision("move", given.target, f"resuming the move to {given.target}")
    holder = given.holder
    if holder is not None and holder in eligible:
        return decision("keep", holder, f"{holder} is still eligible")
    policy_word = "youngest" if given.policy == "Youngest" else "oldest"
    if holder is None:
        if best is None:
            return decision("none", None, f"no eligible node ({describe_ineligible(ineligible)})")
        return decision("move", best, f"{best} is the {policy_word} of {len(eligible)} eligible node(s)")
    why = reasons.get(holder) or "gone"
    serving = can_serve(given.nodes.get(holder), backing=holder in given.backing)
    if best is None:
        return decision(
            "none",
            None,
            f"{holder} is {why} and no other node is eligible ({describe_ineligible(ineligible)})",
            urgent=not serving,
        )
    if serving and given.last_move is not None:
        remaining = (given.last_move + given.cooldown - given.now).total_seconds()
        if remaining > 0:
            return decision(
                "wait",
                holder,
                f"{holder} is {why}; cooling down {remaining:.0f} s before moving",
                retry_after=remaining,
            )
    return decision(
        "move",
        best,
        f"{holder} is {why}; {best} is the {policy_word} of {len(eligible)} eligible node(s)",
        urgent=not serving,
    )


def usage_by_node(placements: Iterable[set[str]]) -> dict[str, int]:
    """How many routed IPs hold or are moving to each node."""
    usage: dict[str, int] = {}
    for nodes in placements:
        for node in nodes:
            usage[node] = usage.get(node, 0) + 1
    return usage


def class_usage(
    rip: RoutedIPState, routed_ips: Iterable[RoutedIPState], reserving: Mapping[tuple[str, str], tuple[str, str]]
) -> dict[str, int]:
    """How many of the other routed IPs of `rip`'s class hold, are moving to, or are being reserved on each node
    (`reserving`: RoutedIP key -> (className, node) of the reservations still being written)."""

    def reserved(key: tuple[str, str]) -> set[str]:
        reservation = reserving.get(key)
        return {reservation[1]} if reservation is not None and reservation[0] == rip.class_name else set()

    return usage_by_node(
        other.placement.nodes() | reserved(other.key)
        for other in routed_ips
        if other.class_name == rip.class_name and other.key != rip.key
    )
