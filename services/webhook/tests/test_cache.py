"""The informer cache: objects by name and by index, kept right through updates, deletes and relists."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tollgate.webhook.cache import store_for
from tollgate.webhook.validation import INDEXES


def vs(name: str, *listeners: tuple[str, int], namespace: str = "ns") -> dict[str, Any]:
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "listeners": [
                {"name": listener, "udp": {"port": port, "cluster": {"name": f"{listener}-c", "endpoints": []}}}
                for listener, port in listeners
            ]
        },
    }


def names(objects: Iterable[Any]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]


def test_lookups_follow_updates_and_deletes() -> None:
    store = store_for(INDEXES)
    store.apply("VirtualService", "ADDED", vs("a", ("l1", 1000)))
    store.apply("VirtualService", "ADDED", vs("b", ("l2", 1000)))
    store.apply("VirtualService", "ADDED", vs("c", ("l2", 1000), namespace="other"))
    assert names(store.lookup("VirtualService", "port", ("ns", "UDP", 1000))) == ["a", "b"]
    store.apply("VirtualService", "MODIFIED", vs("a", ("l3", 2000)))
    assert names(store.lookup("VirtualService", "port", ("ns", "UDP", 1000))) == ["b"]
    assert names(store.lookup("VirtualService", "port", ("ns", "UDP", 2000))) == ["a"]
    assert names(store.lookup("VirtualService", "port", ("other", "UDP", 1000))) == ["c"]
    store.apply("VirtualService", "DELETED", vs("b", ("l2", 1000)))
    assert store.lookup("VirtualService", "port", ("ns", "UDP", 1000)) == []
    assert sorted(names(store.kinds["VirtualService"].objects.values())) == ["a", "c"]


def test_a_relist_replaces_everything_and_marks_the_kind_synced() -> None:
    store = store_for(INDEXES)
    assert "VirtualService" in store.unsynced()
    store.apply("VirtualService", "ADDED", vs("gone", ("l", 1)))
    store.replace("VirtualService", [vs("kept", ("m", 2))])
    assert "VirtualService" not in store.unsynced()
    assert store.lookup("VirtualService", "port", ("ns", "UDP", 1)) == []
    assert store.get("VirtualService", "ns", "kept") is not None
    assert store.get("VirtualService", "ns", "gone") is None


def test_a_relist_says_what_the_watch_had_missed() -> None:
    store = store_for(INDEXES)
    assert store.replace("VirtualService", []) == {}
    stale, gone = vs("stale", ("l", 1)), vs("gone", ("l", 2))
    stale["metadata"]["resourceVersion"], gone["metadata"]["resourceVersion"] = "1", "2"
    for obj in (stale, gone):
        store.apply("VirtualService", "ADDED", obj)
    fresh, new = vs("stale", ("l", 3)), vs("new", ("l", 4))
    fresh["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"] = "5", "6"
    assert store.replace("VirtualService", [fresh, new]) == {"added": 1, "changed": 1, "removed": 1}
    assert store.replace("VirtualService", [fresh, new]) == {}, "a list that agrees with the cache differs in nothing"


def test_malformed_stored_objects_are_kept_and_indexed_where_readable() -> None:
    store = store_for(INDEXES)
    odd = {"kind": "VirtualService", "metadata": {"name": "odd", "namespace": "ns"}, "spec": {"listeners": "x"}}
    unhashable = vs("unhashable", ("l", 1))
    unhashable["spec"]["selector"] = {"app": {"not": "a label"}}
    store.replace("VirtualService", [odd, unhashable])
    assert store.get("VirtualService", "ns", "odd") is odd
    assert names(store.lookup("VirtualService", "port", ("ns", "UDP", 1))) == ["unhashable"]
    assert store.lookup("VirtualService", "port-label", ("ns", "UDP", 1, "app")) == []


def test_listeners_hear_every_change() -> None:
    store = store_for(INDEXES)
    heard: list[int] = []
    store.on_change(lambda: heard.append(1))
    store.replace("RoutedIP", [])
    store.apply("RoutedIP", "ADDED", {"metadata": {"name": "r", "namespace": "n"}, "spec": {"routedIP": "1.2.3.4"}})
    assert len(heard) == 2
    assert names(store.lookup("RoutedIP", "routedIP", "1.2.3.4")) == ["r"]
