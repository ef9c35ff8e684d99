"""The informer cache: the last seen version of every watched object, with the indexes the rules look up.

Pure bookkeeping, no I/O: the informers (k8s.py) feed it list results and watch events on the event loop,
and validation reads it through `get` and `lookup` (the `View` of tollgate.webhook.validation).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from tollgate.webhook.validation import IndexFunc, JSONObject, identity

Key = tuple[str, str]
_NONE: frozenset[Key] = frozenset()


class KindCache:
    """The objects of one kind by (namespace, name), and an inverted index per index function."""

    def __init__(self, indexes: Mapping[str, IndexFunc]) -> None:
        self._index_funcs = dict(indexes)
        self.objects: dict[Key, JSONObject] = {}
        self._indexes: dict[str, defaultdict[Hashable, set[Key]]] = {name: defaultdict(set) for name in indexes}
        self.synced = False

    def _keys(self, obj: JSONObject) -> dict[str, set[Hashable]]:
        return {name: set(func(obj)) for name, func in self._index_funcs.items()}

    def _unindex(self, key: Key) -> None:
        previous = self.objects.pop(key, None)
        if previous is None:
            return
        for name, values in self._keys(previous).items():
            index = self._indexes[name]
            for value in values:
                index[value].discard(key)
                if not index[value]:
                    del index[value]

    def upsert(self, obj: JSONObject) -> None:
        key = identity(obj)
        self._unindex(key)
        self.objects[key] = obj
        for name, values in self._keys(obj).items():
            for value in values:
                self._indexes[name][value].add(key)

    def delete(self, obj: JSONObject) -> None:
        self._unindex(identity(obj))

    def replace(self, objects: Iterable[JSONObject]) -> dict[str, int]:
        """Make `objects` the whole content; how many were added, changed (another resourceVersion) and removed,
        for each that is not zero."""
        before = {key: _version(obj) for key, obj in self.objects.items()}
        self.objects.clear()
        for index in self._indexes.values():
            index.clear()
        for obj in objects:
            self.upsert(obj)
        self.synced = True
        differences = {
            "added": sum(1 for key in self.objects if key not in before),
            "changed": sum(1 for key, obj in self.objects.items() if key in before and before[key] != _version(obj)),
            "removed": sum(1 for key in before if key not in self.objects),
        }
        return {what: count for what, count in differences.items() if count}

    def keys(self, index: str, value: Hashable) -> AbstractSet[Key]:
        """The (namespace, name) of the objects holding `value` in `index`; read only."""
        return self._indexes[index].get(value, _NONE)

    def lookup(self, index: str, value: Hashable) -> list[JSONObject]:
        return [self.objects[key] for key in sorted(self.keys(index, value))]


class Store:
    """Every watched kind's cache; listeners hear about each change (to retry a pending review)."""

    def __init__(self, indexes: Mapping[str, Mapping[str, IndexFunc]]) -> None:
        self.kinds = {kind: KindCache(funcs) for kind, funcs in indexes.items()}
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def apply(self, kind: str, event: str, obj: JSONObject) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""
        if event == "DELETED":
            self.kinds[kind].delete(obj)
        else:
            self.kinds[kind].upsert(obj)
        self._changed()

    def replace(self, kind: str, objects: Iterable[JSONObject]) -> dict[str, int]:
        """A fresh list: the whole truth about `kind`; marks it synced. What differed from the cache (see
        KindCache.replace)."""
        differences = self.kinds[kind].replace(objects)
        self._changed()
        return differences

    def unsynced(self) -> list[str]:
        return sorted(kind for kind, cache in self.kinds.items() if not cache.synced)

    def get(self, kind: str, namespace: str, name: str) -> JSONObject | None:
        cache = self.kinds.get(kind)
        return cache.objects.get((namespace, name)) if cache is not None else None

    def lookup(self, kind: str, index: str, key: Hashable) -> list[JSONObject]:
        cache = self.kinds.get(kind)
        return cache.lookup(index, key) if cache is not None else []

    def keys(self, kind: str, index: str, key: Hashable) -> AbstractSet[Key]:
        cache = self.kinds.get(kind)
        return cache.keys(index, key) if cache is not None else _NONE


def _version(obj: JSONObject) -> object:
    return (obj.get("metadata") or {}).get("resourceVersion")


def store_for(indexes: Mapping[Any, Mapping[str, IndexFunc]]) -> Store:
    """A store keyed by kind name for a mapping of models to their indexes."""
    return Store({model.resource.kind: funcs for model, funcs in indexes.items()})
