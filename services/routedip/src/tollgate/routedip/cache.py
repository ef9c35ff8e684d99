"""What the controller knows: kopf's indexes, overlaid with the controller's own writes until the watch brings
them back, and what is derived from them, kept until the next change the controller hears of (no I/O)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from tollgate.routedip.state import (
    ClassState,
    NodeState,
    PodState,
    RoutedIPState,
    ServiceState,
    SliceState,
    routed_ip_state,
)

T = TypeVar("T")
Key = tuple[str, ...]  # a work-queue key: ("rip", namespace, name), ("class", name) or ("node", name)


class Requeue(Exception):
    """Reconcile this key again soon: something it read was stale."""


@dataclass
class Indexes:
    """The kopf indexes the controller reads (each maps a key to a store of slim states)."""

    nodes: Mapping[str, Iterable[NodeState]]
    services: Mapping[tuple[str, str], Iterable[ServiceState]]
    slices: Mapping[tuple[str, str], Iterable[SliceState]]
    pods: Mapping[str, Iterable[PodState]]
    routed_ips: Mapping[tuple[str, str], Iterable[RoutedIPState]]
    classes: Mapping[str, Iterable[ClassState]]


def _first(store: Iterable[Any] | None) -> Any:
    return next(iter(store), None) if store is not None else None


def _newer(a: str, b: str) -> bool:
    try:
        return int(a) > int(b)
    except ValueError:
        return False


class Cache:
    def __init__(self) -> None:
        self.indexes: Indexes | None = None
        self._overlay: dict[tuple[str, str], RoutedIPState] = {}
        self._written: dict[tuple[str, str], str] = {}
        # Bumped on every change the controller hears of: what is derived from the cache is kept until then.
        self._version = 0
        self._derived: dict[object, tuple[int, Any]] = {}

    def _idx(self) -> Indexes:
        assert self.indexes is not None, "controller used before start()"
        return self.indexes

    def nodes(self) -> dict[str, NodeState]:
        return {name: node for name, store in self._idx().nodes.items() if (node := _first(store)) is not None}

    def service(self, key: tuple[str, str]) -> ServiceState | None:
        service: ServiceState | None = _first(self._idx().services.get(key))
        return service

    def slices(self, key: tuple[str, str]) -> list[SliceState]:
        return list(self._idx().slices.get(key) or ())

    def pods(self, namespace: str) -> list[PodState]:
        return list(self._idx().pods.get(namespace) or ())

    def classes(self, class_name: str) -> list[ClassState]:
        return list(self._idx().classes.get(class_name) or ())

    def all_classes(self) -> list[ClassState]:
        return [cls for store in self._idx().classes.values() for cls in store]

    def routed_ip(self, key: tuple[str, str]) -> RoutedIPState | None:
        indexed: RoutedIPState | None = _first(self._idx().routed_ips.get(key))
        written = self._overlay.get(key)
        if indexed is None or written is None:
            return indexed
        if indexed.resource_version == written.resource_version or _newer(
            indexed.resource_version, written.resource_version
        ):
            self._overlay.pop(key, None)
            return indexed
        return written

    def routed_ips(self) -> list[RoutedIPState]:
        return self.memo(
            "routed_ips",
            lambda: [rip for key in list(self._idx().routed_ips.keys()) if (rip := self.routed_ip(key)) is not None],
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
        """Keep what this controller wrote: newer than the index until the watch brings it back."""
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
