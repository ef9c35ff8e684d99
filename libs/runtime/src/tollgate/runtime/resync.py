"""Resync: list every watched kind again on a period and apply what the watches missed. The difference is pure
(`Mirror`); `resync` and `resync_every` do the listing through the service's own lister and hand each correction to
the service.

A watch can miss an event: an object deleted between the first listing and the start of the watches, or while a
watch was down and resumed from a relisting (after `410 Gone`: kopf lists again then, and never reports what was
deleted meanwhile). A resync lists everything again and applies the difference; an object that a watch event
touched after the listing began is left alone, since that event is at least as new as the listing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("tollgate.runtime.resync")

Key = tuple[str, str]
# Every watched kind's objects, by plural.
Lister = Callable[[], Awaitable[Mapping[str, Iterable[Mapping[str, Any]]]]]
# A correction: (plural, the object as listed or a minimal body of a deleted one, deleted); a service whose
# corrections do I/O returns an awaitable, awaited before the next correction.
Apply = Callable[[str, Mapping[str, Any], bool], Awaitable[None] | None]
# The first resync comes this soon (the watches have listed by then): an object deleted between the first listing and
# the watches' own is seen gone within seconds, not a whole period.
FIRST_RESYNC = 15


def key_of(obj: Mapping[str, Any]) -> Key:
    """(namespace, name) of an object; "" for the namespace of a cluster-scoped one."""
    meta = obj.get("metadata", {})
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


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
    """What the watches last told of each watched object. No I/O."""

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


async def _applied(applying: Awaitable[None] | None) -> None:
    if applying is not None:
        await applying


async def resync(mirror: Mirror, list_all: Lister, apply: Apply) -> int:
    """List everything again and apply what the watches missed; the number of objects corrected. Each correction
    is logged (`resync: pods ns/name was deleted without a watch event`)."""
    since = mirror.sequence
    listing = await list_all()
    corrected = 0
    for plural, items in listing.items():
        diff = mirror.diff(plural, items, since)
        for obj in diff.changed:
            log.info("resync: %s %s/%s changed without a watch event", plural, *key_of(obj))
            mirror.record(plural, obj)
            await _applied(apply(plural, obj, False))
        for obj in diff.gone:
            log.info("resync: %s %s/%s was deleted without a watch event", plural, *key_of(obj))
            mirror.record(plural, obj, deleted=True)
            await _applied(apply(plural, obj, True))
        corrected += len(diff.changed) + len(diff.gone)
    mirror.forget_deleted(since)
    return corrected


async def resync_every(
    period: float,
    mirror: Mirror,
    list_all: Lister,
    apply: Apply,
    stop: asyncio.Event,
    on_corrected: Callable[[int], None] | None = None,
) -> None:
    """`resync` every `period` seconds (give or take a tenth, so replicas spread their listings), the first time
    after FIRST_RESYNC seconds at most; `on_corrected` gets the count when anything was corrected. A failed
    listing is logged and tried again next period."""
    wait = min(period, FIRST_RESYNC)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), wait * random.uniform(0.9, 1.1))
            return
        except TimeoutError:
            pass
        wait = period
        try:
            corrected = await resync(mirror, list_all, apply)
        except Exception as error:  # the API server's errors, a timeout, a dropped connection: all wait a period
            log.warning("resync failed, trying again next period: %s", error)
            continue
        log.debug("resync done", extra={"corrected": corrected})
        if corrected and on_corrected is not None:
            on_corrected(corrected)
