"""Drift: what a provider holds otherwise than the controller recorded, as pure functions.

A routed IP the controller holds Ready on a node (`status.assignedNode`, no move in progress) should be on that
node's machine; when the provider says otherwise (someone moved or unassigned it in the cloud's console), the
RoutedIP's own reconcile puts it back (`Drifts` carries the finding there, so that it never races a move of the same
RoutedIP). The firewall's drift is judged against the plan last applied (`firewall.FirewallDrift`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tollgate.routedip.firewall import machine_id
from tollgate.routedip.state import NodeState, RoutedIPState


@dataclass(frozen=True)
class AssignmentDrift:
    """A held routed IP found elsewhere: on the machine `found_on` (None: on none), `absent` when the provider does
    not know the IP at all."""

    key: tuple[str, str]
    ip: str
    node: str  # where the controller holds it
    machine: str  # the provider's word for a machine
    found_on: str | None
    found_node: str | None  # the node of `found_on`, when the cluster has one
    absent: bool = False

    def found(self) -> str:
        """What was found, e.g. `203.0.113.7 was assigned to droplet 1234 (node-b) behind routedip's back`."""
        if self.absent:
            return f"{self.ip} is not among the provider's IPs"
        if self.found_on is None:
            return f"{self.ip} was unassigned behind routedip's back"
        where = f" ({self.found_node})" if self.found_node else ""
        return f"{self.ip} was assigned to {self.machine} {self.found_on}{where} behind routedip's back"

    def message(self) -> str:
        """The Event of the correction: what was found, and that the IP is on its node again."""
        return f"{self.found()}: assigned to {self.node} again"


def node_names(nodes: Mapping[str, NodeState]) -> dict[str, str]:
    """The node of each machine ID the cluster's nodes name (in `spec.providerID`)."""
    return {found: name for name, node in nodes.items() if (found := machine_id(node.provider_id))}


def held(routed_ips: Iterable[RoutedIPState], class_name: str) -> list[RoutedIPState]:
    """The RoutedIPs of a class that the controller holds Ready on a node, no move in progress."""
    return [
        rip
        for rip in routed_ips
        if rip.class_name == class_name
        and not rip.deleting
        and rip.placement.assigned is not None
        and rip.placement.target is None
        and rip.ready.get("status") == "True"
    ]


def assignment_drifts(
    held_ips: Iterable[RoutedIPState],
    holders: Mapping[str, str | None],
    nodes: Mapping[str, NodeState],
    machine: str,
) -> list[AssignmentDrift]:
    """The held RoutedIPs whose IP the provider (`holders`: each IP it knows, with the machine ID holding it) shows
    elsewhere than on their node's machine. A node without a machine ID cannot be judged and is left alone."""
    names = node_names(nodes)
    drifts = []
    for rip in held_ips:
        node = rip.placement.assigned
        holder = nodes.get(node) if node is not None else None
        expected = machine_id(holder.provider_id) if holder is not None else None
        if node is None or expected is None:
            continue
        found = holders.get(rip.ip)
        if rip.ip in holders and found == expected:
            continue
        drifts.append(
            AssignmentDrift(
                key=rip.key,
                ip=rip.ip,
                node=node,
                machine=machine,
                found_on=found,
                found_node=names.get(found) if found else None,
                absent=rip.ip not in holders,
            )
        )
    return drifts


class Drifts:
    """Assignment drifts found and not yet put back, by RoutedIP: the RoutedIP's reconcile takes its own."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str], AssignmentDrift] = {}

    def note(self, drift: AssignmentDrift) -> None:
        self._found[drift.key] = drift

    def take(self, rip: RoutedIPState) -> AssignmentDrift | None:
        """The drift found for `rip`, while it still holds the IP where it did then (a move since voids it)."""
        drift = self._found.pop(rip.key, None)
        if drift is None or rip.placement.assigned != drift.node or rip.placement.target is not None:
            return None
        return drift

    def forget(self, key: tuple[str, str]) -> None:
        self._found.pop(key, None)
