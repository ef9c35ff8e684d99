"""What the controller knows: slim states of every watched object, kept from the watch events and corrected by the
resync (a deletion no watch reported leaves the cache too), overlaid with the controller's own writes until the
watch brings them back; and what is derived from them, kept until the next change the controller hears of (no I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

from tollgate.routedip.state import (
    ClassState,
    NodeState,
    PodState,
    RoutedIPState,
    ServiceState,
    SliceState,
    class_state,
    node_state,
    pod_state,
    routed_ip_state,
    service_state,
    slice_state,
)
from tollgate.runtime.resync import key_of

T = TypeVar("T")
S = TypeVar("S")
Key = tuple[str, ...]  # a work-queue key: ("rip", namespace, name), ("class", name) or ("node", name)


class Requeue(Exception):
    """Reconcile this key again soon: something it read was stale."""


def _newer(a: str, b: str) -> bool:
    try:
        return int(a) > int(b)
    except ValueError:
        return False


class Store(Generic[S]):
    """The slim states of one watched kind by (namespace, name) ("" for a cluster-scoped object's namespace), also
    grouped the way the controller looks them up (`group`: a state's group, e.g. its namespace)."""

    def __init__(
        self, parse: Callable[[Mapping[str, Any]], S | None], group: Callable[[S], Hashable] | None = None
    ) -> None:
        self.parse = parse
        self.group_of = group
        self._items: dict[tuple[str, str], S] = {}
        self._groups: dict[Hashable, dict[tuple[str, str], S]] = {}

    def put(self, body: Mapping[str, Any], deleted: bool) -> tuple[S | None, S | None]:
        """Apply a watch event (or a correction) about `body`: (the state before, the state now; None: absent)."""
        key = key_of(body)
        previous = self._items.pop(key, None)
        if previous is not None and self.group_of is not None:
            members = self._groups.get(self.group_of(previous), {})
            members.pop(key, None)
            if not members:
                self._groups.pop(self.group_of(previous), None)
        current = None if deleted else self.parse(body)
        if current is not None:
            self._items[key] = current
            if self.group_of is not None:
                self._groups.setdefault(self.group_of(current), {})[key] = current
        return previous, current

    def get(self, key: tuple[str, str]) -> S | None:
        return self._items.get(key)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(list(self._items))

    def values(self) -> list[S]:
        return list(self._items.values())

    def group(self, group: Hashable) -> list[S]:
        return list(self._groups.get(group, {}).values())


class Cache:
    def __init__(self) -> None:
        self._nodes: Store[NodeState] = Store(node_state)
        self._services: Store[ServiceState] = Store(service_state)
        self._slices: Store[SliceState] = Store(slice_state, lambda s: (s.namespace, s.service))
        self._pods: Store[PodState] = Store(pod_state, lambda p: p.namespace)
        self._routed_ips: Store[RoutedIPState] = Store(routed_ip_state)
        self._classes: Store[ClassState] = Store(class_state, lambda c: c.class_name)
        self._stores: dict[str, Store[Any]] = {
            "nodes": self._nodes,
            "services": self._services,
            "endpointslices": self._slices,
            "pods": self._pods,
            "routedips": self._routed_ips,
            "clusterroutedipclasses": self._classes,
        }
        self._overlay: dict[tuple[str, str], RoutedIPState] = {}
        self._written: dict[tuple[str, str], str] = {}
        # Bumped on every change the controller hears of: what is derived from the cache is kept until then.
        self._version = 0
        self._derived: dict[object, tuple[int, Any]] = {}

    def observe(self, plural: str, body: Mapping[str, Any], deleted: bool) -> tuple[Any, Any]:
        """A watch event, or the resync's correction, about an object of the watched kind `plural`: the object's
        slim state before and now (None: absent)."""
        previous, current = self._stores[plural].put(body, deleted)
        if previous != current:
            self.changed()
        return previous, current

    def nodes(self) -> dict[str, NodeState]:
        """Every node by name (one dict until the next change: a caller may hold on to it as a snapshot)."""
        return self.memo("nodes", lambda: {node.name: node for node in self._nodes.values()})

    def service(self, key: tuple[str, str]) -> ServiceState | None:
        return self._services.get(key)

    def slices(self, key: tuple[str, str]) -> list[SliceState]:
        return self._slices.group(key)

    def pods(self, namespace: str) -> list[PodState]:
        return self._pods.group(namespace)

    def classes(self, class_name: str) -> list[ClassState]:
        return self._classes.group(class_name)

    def all_classes(self) -> list[ClassState]:
        return self._classes.values()

    def routed_ip(self, key: tuple[str, str]) -> RoutedIPState | None:
        watched = self._routed_ips.get(key)
        written = self._overlay.get(key)
        if watched is None or written is None:
            return watched
        if watched.resource_version == written.resource_version or _newer(
            watched.resource_version, written.resource_version
        ):
            self._overlay.pop(key, None)
            return watched
        return written

    def routed_ips(self) -> list[RoutedIPState]:
        return self.memo(
            "routed_ips",
            lambda: [rip for key in self._routed_ips if (rip := self.routed_ip(key)) is not None],
        )

    def memo(self, key: object, compute: Callable[[], T]) -> T:
        """`compute()`, or what it returned since the last change."""
        cached = self._derived.get(key)
        if cached is not None and cached[0] == self._version:
            return cast(T, cached[1])
        value = compute()
        self._derived[key] = (self._version, value)
        return value

    def changed(self) -> None:
        self._version += 1
        if len(self._derived) > 1000:
            self._derived.clear()

    def remember(self, body: Mapping[str, Any]) -> RoutedIPState:
        """Keep what this controller wrote: newer than the watched state until the watch brings it back."""
        state = routed_ip_state(body)
        self._overlay[state.key] = state
        self._written[state.key] = state.resource_version
        self.changed()
        return state

    def is_own_write(self, rip: RoutedIPState) -> bool:
        """Whether `rip` is the echo of this controller's own write."""
        return self._written.get(rip.key) == rip.resource_version

    def forget(self, key: tuple[str, str]) -> None:
        """The RoutedIP is gone: drop what was remembered of it."""
        self.changed()
        self._overlay.pop(key, None)
        self._written.pop(key, None)
