"""Which RoutedIPs a change re-examines, as pure functions: the controller queues what these name."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.arbitration import CONFLICT
from tollgate.routedip.state import ClassState, NodeState, PodState, RoutedIPState, ServiceState


def same_for_election(a: NodeState, b: NodeState) -> bool:
    """Whether two states of a node elect alike (the move taint, this controller's own, does not count)."""

    def relevant(node: NodeState) -> tuple[object, ...]:
        taints = tuple(t for t in node.taints if t.key != MOVE_TAINT_KEY)
        return (node.ready, node.unschedulable, taints, node.deleting, node.provider_id, node.created)

    return relevant(a) == relevant(b)


def node_change_re_elects(previous: NodeState | None, node: NodeState | None) -> bool:
    """Whether a node's change (`node` None: deleted; `previous` None: not seen before) can change any election:
    then every RoutedIP is examined again."""
    return previous is None or node is None or not same_for_election(previous, node)


def of_service(routed_ips: Iterable[RoutedIPState], namespace: str, name: str) -> list[RoutedIPState]:
    """The RoutedIPs of a Service (its EndpointSlices' changes included)."""
    return [rip for rip in routed_ips if rip.service == (namespace, name)]


def selecting(
    routed_ips: Iterable[RoutedIPState], pod: PodState, service: Callable[[tuple[str, str]], ServiceState | None]
) -> list[RoutedIPState]:
    """The RoutedIPs whose Service selects `pod` (`service` looks a Service up by namespace and name)."""
    chosen = []
    for rip in routed_ips:
        if rip.service[0] != pod.namespace:
            continue
        found = service(rip.service)
        if found is not None and found.selects(pod.labels):
            chosen.append(rip)
    return chosen


def of_class(routed_ips: Iterable[RoutedIPState], name: str, classes: Iterable[ClassState]) -> list[RoutedIPState]:
    """The RoutedIPs a change of the ClusterRoutedIPClass `name` concerns: those of its className, and those whose
    className no class has (the change may be the one that gives them a class)."""
    known = list(classes)
    class_names = {cls.class_name for cls in known if cls.name == name}
    served = {cls.class_name for cls in known}
    return [rip for rip in routed_ips if rip.class_name in class_names or rip.class_name not in served]


def freed_by(changed: RoutedIPState, routed_ips: Iterable[RoutedIPState]) -> list[RoutedIPState]:
    """The other RoutedIPs a RoutedIP's change (a deletion, an edit of spec.routedIP) can free the address for:
    those of its address, and those waiting in Conflict."""
    return [
        other
        for other in routed_ips
        if other.key != changed.key and (other.ip == changed.ip or other.ready.get("reason") == CONFLICT)
    ]
