"""The resync's difference between a listing and what the watches told."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tollgate.runtime.resync import Mirror, resync

PLURAL = "virtualservices"


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": version}}


def test_a_deletion_the_watch_missed_is_found_and_an_unchanged_object_is_not_touched() -> None:
    mirror = Mirror()
    mirror.record(PLURAL, obj("kept", "1"))
    mirror.record(PLURAL, obj("deleted", "2"))
    diff = mirror.diff(PLURAL, [obj("kept", "1")], mirror.sequence)
    assert diff.changed == []
    assert diff.gone == [{"metadata": {"namespace": "ns", "name": "deleted"}}]


def test_a_change_the_watch_missed_is_applied() -> None:
    mirror = Mirror()
    mirror.record(PLURAL, obj("a", "1"))
    diff = mirror.diff(PLURAL, [obj("a", "5"), obj("new", "6")], mirror.sequence)
    assert [o["metadata"]["name"] for o in diff.changed] == ["a", "new"]
    assert not diff.gone


def test_a_watch_event_during_the_listing_wins_over_the_listing() -> None:
    mirror = Mirror()
    mirror.record(PLURAL, obj("a", "1"))
    since = mirror.sequence
    mirror.record(PLURAL, obj("a", "1"), deleted=True)  # deleted while the listing was on its way
    mirror.record(PLURAL, obj("b", "3"))  # created meanwhile, after the listing was taken
    diff = mirror.diff(PLURAL, [obj("a", "1")], since)
    assert not diff, "neither the deleted object comes back nor the new one is removed"


async def test_a_correction_that_does_io_is_awaited_before_the_next() -> None:
    mirror = Mirror()
    mirror.record(PLURAL, obj("gone", "1"))
    applied: list[tuple[str, bool]] = []

    async def apply(plural: str, body: Mapping[str, Any], deleted: bool) -> None:
        await asyncio.sleep(0)
        applied.append((body["metadata"]["name"], deleted))

    async def list_all() -> dict[str, list[dict[str, Any]]]:
        return {PLURAL: [obj("new", "2")]}

    assert await resync(mirror, list_all, apply) == 2
    assert applied == [("new", False), ("gone", True)]
