"""Which RoutedIPs a change re-examines, as pure functions: the controller queues what these name."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.arbitration import CONFLICT
from tollgate.routedip.cache import Key
from tollgate.routedip.state import ClassState, NodeState, PodState, RoutedIPState, ServiceState

S = TypeVar("S")


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


def involved(previous: S | None, current: S | None) -> list[S]:
    """The states a change concerns: the one before and the one now (once when they are alike). A deletion's is the
    last state known, so a pod deleted without a watch event still names the RoutedIPs whose Service selected it."""
    states = [state for state in (previous, current) if state is not None]
    return states[:1] if len(states) == 2 and states[0] == states[1] else states


def re_examined(
    plural: str,
    previous: Any,
    current: Any,
    routed_ips: Callable[[], list[RoutedIPState]],
    service: Callable[[tuple[str, str]], ServiceState | None],
    classes: Callable[[], list[ClassState]],
) -> list[Key]:
    """The work-queue keys a change of an object of the watched kind `plural` queues (`previous`, `current`: its
    states before and now, None when absent; the callables look the cache up only when the change needs it)."""
    states = involved(previous, current)
    chosen: list[RoutedIPState] = []
    keys: list[Key] = []
    if plural == "nodes":
        if current is not None and current.move_tainted:
            keys.append(("node", current.name))
        if states and node_change_re_elects(previous, current):
            chosen = routed_ips()
    elif plural == "services":
        chosen = [rip for state in states for rip in of_service(routed_ips(), *state.key)]
    elif plural == "endpointslices":
        chosen = [rip for state in states for rip in of_service(routed_ips(), state.namespace, state.service)]
    elif plural == "pods":
        chosen = [rip for state in states for rip in selecting(routed_ips(), state, service)]
    elif plural == "clusterroutedipclasses" and states:
        keys.append(("class", states[-1].name))
        chosen = of_class(routed_ips(), states[-1].name, classes())
    elif plural == "routedips":
        for state in states:
            chosen += freed_by(state, routed_ips())
            keys.append(("rip", *state.key))
    return keys + [("rip", *rip.key) for rip in chosen]
