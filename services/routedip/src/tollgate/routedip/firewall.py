"""Firewall planning, as pure functions: which ports each node must allow for the routed IPs it carries.

A node that holds (or, before the assignment, is about to hold) a routed IP for a Service must allow
the Service's NodePorts, plus the hostPorts of the Service's pods running on that node when they fall
outside the cluster's node-port range. Nodes resolve to cloud machine IDs through `spec.providerID`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tollgate.models.routedip import service_ref_rule
from tollgate.routedip.state import NodeState, PodState, RoutedIPState, ServiceState


@dataclass(frozen=True, order=True)
class PortRule:
    protocol: str
    port: int

    def __str__(self) -> str:
        return f"{self.protocol}/{self.port}"

    @classmethod
    def parse(cls, text: str) -> PortRule:
        protocol, _, port = text.partition("/")
        return cls(protocol, int(port))


@dataclass(frozen=True)
class NodeFirewall:
    node: str
    machine_id: str | None
    ports: frozenset[PortRule]


@dataclass(frozen=True)
class FirewallPlan:
    """What the firewall of one class must allow: per node, its machine ID and ports."""

    nodes: Mapping[str, NodeFirewall] = field(default_factory=dict)

    def machine_ids(self) -> list[str]:
        return sorted(n.machine_id for n in self.nodes.values() if n.machine_id and n.ports)

    def all_ports(self) -> list[PortRule]:
        return sorted({port for n in self.nodes.values() for port in n.ports})

    def unresolved(self) -> list[str]:
        """Nodes with ports to open but no machine ID to open them on."""
        return sorted(n.node for n in self.nodes.values() if n.ports and not n.machine_id)

    def to_json(self) -> dict[str, dict[str, object]]:
        return {
            name: {"machineID": n.machine_id, "ports": [str(p) for p in sorted(n.ports)]}
            for name, n in sorted(self.nodes.items())
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]


def machine_id(provider_id: str | None) -> str | None:
    """`digitalocean://123` -> `123`; `aws:///us-east-1a/i-0abc` -> `i-0abc`; None when there is none."""
    if not provider_id:
        return None
    _, sep, rest = provider_id.partition("://")
    parts = [p for p in (rest if sep else provider_id).split("/") if p]
    return parts[-1] if parts else None


def node_ports(
    service: ServiceState | None, pods: Iterable[PodState], node: str, node_port_range: tuple[int, int]
) -> frozenset[PortRule]:
    """The ports `node` must allow for `service`: its NodePorts, and its pods' hostPorts on the node
    outside `node_port_range`."""
    if service is None:
        return frozenset()
    rules = {PortRule(p.protocol.lower(), p.node_port) for p in service.ports if p.node_port}
    low, high = node_port_range
    for pod in pods:
        if pod.namespace != service.namespace or pod.node != node or not pod.active or not service.selects(pod.labels):
            continue
        rules.update(PortRule(protocol.lower(), port) for protocol, port in pod.host_ports if not low <= port <= high)
    return frozenset(rules)


def nodes_to_open(
    routed_ips: Iterable[RoutedIPState],
    class_name: str,
    post_allow: bool,
    extra: Mapping[tuple[str, str], set[str]] | None = None,
    excluding: tuple[str, str] | None = None,
) -> list[tuple[tuple[str, str], set[str]]]:
    """Per RoutedIP of the class, its Service (namespace, name) and the nodes that must allow the Service's ports:
    the holder, the target of a move in progress unless `post_allow` (firewallPostAllow), and what `extra` adds.
    A RoutedIP being deleted, `excluding`, or one of a Service of another namespace (it never opens another
    namespace's NodePorts) opens nothing."""
    opened = []
    for rip in routed_ips:
        if rip.class_name != class_name or rip.deleting or rip.key == excluding:
            continue
        if service_ref_rule(rip.namespace, rip.service[0]):
            continue
        on = {rip.placement.assigned} if rip.placement.assigned else set()
        if rip.placement.target and not post_allow:
            on.add(rip.placement.target)
        on |= (extra or {}).get(rip.key, set())
        opened.append((rip.service, on))
    return opened


def plan_firewall(
    carried: Iterable[tuple[ServiceState | None, Iterable[str]]],
    pods: Iterable[PodState],
    nodes: Mapping[str, NodeState],
    node_port_range: tuple[int, int],
) -> FirewallPlan:
    """`carried` lists, per routed IP of the class, its Service and the nodes that must allow its ports."""
    pod_list = list(pods)
    ports: dict[str, set[PortRule]] = {}
    for service, on_nodes in carried:
        for node in on_nodes:
            ports.setdefault(node, set()).update(node_ports(service, pod_list, node, node_port_range))
    return FirewallPlan(
        {
            name: NodeFirewall(
                name, machine_id(nodes[name].provider_id) if name in nodes else None, frozenset(node_ports_)
            )
            for name, node_ports_ in ports.items()
        }
    )
