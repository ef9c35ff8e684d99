"""What the watches last told of each watched object, and a fresh listing's difference from it. No I/O.

A watch can miss an event: an object deleted between the first listing and the start of the watches, or while a
watch was down and resumed from a relisting (after `410 Gone`). A resync lists everything again and applies the
difference; an object that a watch event touched after the listing began is left alone, since that event is at
least as new as the listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tollgate.xds.world import Key, key_of


@dataclass(frozen=True)
class Seen:
    resource_version: str | None  # None: deleted
    sequence: int


@dataclass(frozen=True)
class Diff:
    """What a listing says that the watches did not: objects to set, and objects gone (as minimal bodies)."""

    changed: list[Mapping[str, Any]]
    gone: list[Mapping[str, Any]]

    def __bool__(self) -> bool:
        return bool(self.changed or self.gone)


def _version(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion") or "")


class Mirror:
    def __init__(self) -> None:
        self.sequence = 0
        self._seen: dict[tuple[str, Key], Seen] = {}

    def record(self, plural: str, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A watch event (or a listing) told this about the object."""
        self.sequence += 1
        self._seen[(plural, key_of(obj))] = Seen(None if deleted else _version(obj), self.sequence)

    def diff(self, plural: str, listed: Iterable[Mapping[str, Any]], since: int) -> Diff:
        """The difference of a listing of `plural` begun when the sequence was `since` from what is recorded."""
        changed: list[Mapping[str, Any]] = []
        present: set[Key] = set()
        for obj in listed:
            key = key_of(obj)
            present.add(key)
            seen = self._seen.get((plural, key))
            if seen is not None and seen.sequence > since:
                continue
            if seen is None or seen.resource_version != _version(obj):
                changed.append(obj)
        gone: list[Mapping[str, Any]] = [
            {"metadata": {"namespace": key[0] or None, "name": key[1]}}
            for (kind, key), seen in self._seen.items()
            if kind == plural and seen.resource_version is not None and seen.sequence <= since and key not in present
        ]
        return Diff(changed, gone)

    def forget_deleted(self, before: int) -> None:
        """Drop the deletions recorded before `before`: a complete listing since has confirmed them."""
        for key in [k for k, seen in self._seen.items() if seen.resource_version is None and seen.sequence < before]:
            del self._seen[key]
