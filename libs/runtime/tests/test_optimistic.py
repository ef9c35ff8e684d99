"""The seed's optimistic-locking loop, against an in-memory store that behaves like the API server:
a replace carrying a stale resourceVersion is refused with a conflict."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from tollgate.runtime.backoff import Backoff
from tollgate.runtime.optimistic import OptimisticUpdateError, update_optimistically


class Conflict(Exception):
    pass


@dataclass
class Store:
    version: int = 1
    counter: int = 0
    writes: int = 0
    refused: int = 0
    history: list[int] = field(default_factory=list)

    async def read(self) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"resourceVersion": self.version, "counter": self.counter}

    async def replace(self, obj: dict[str, int]) -> dict[str, int]:
        await asyncio.sleep(random.random() / 1000)
        if obj["resourceVersion"] != self.version:
            self.refused += 1
            raise Conflict()
        self.version += 1
        self.counter = obj["counter"]
        self.writes += 1
        self.history.append(self.counter)
        return {"resourceVersion": self.version, "counter": self.counter}


def increment(obj: dict[str, int]) -> int:
    obj["counter"] += 1
    return obj["counter"]


async def test_concurrent_increments_never_hand_out_a_value_twice() -> None:
    store = Store()

    async def allocate() -> int:
        result = await update_optimistically(
            store.read,
            increment,
            store.replace,
            lambda e: isinstance(e, Conflict),
            what="counter",
            attempts=200,
            backoff=Backoff(base=0.0005, cap=0.01),
        )
        return result.value

    values = await asyncio.gather(*(allocate() for _ in range(40)))
    assert sorted(values) == list(range(1, 41))
    assert store.history == list(range(1, 41))
    assert store.refused > 0, "the test must actually exercise conflicts"


async def test_gives_up_with_a_clear_error() -> None:
    store = Store()

    async def always_stale(obj: dict[str, int]) -> dict[str, int]:
        raise Conflict()

    conflicts: list[int] = []
    with pytest.raises(OptimisticUpdateError, match=r"epic/epic: still conflicting after 3 attempts"):
        await update_optimistically(
            store.read,
            increment,
            always_stale,
            lambda e: isinstance(e, Conflict),
            what="epic/epic",
            attempts=3,
            backoff=Backoff(base=0.0001),
            on_conflict=conflicts.append,
        )
    assert conflicts == [1, 2, 3]


async def test_other_errors_are_not_retried() -> None:
    store = Store()

    async def broken(obj: dict[str, int]) -> dict[str, int]:
        raise PermissionError("forbidden")

    with pytest.raises(PermissionError):
        await update_optimistically(store.read, increment, broken, lambda e: isinstance(e, Conflict), what="x")


def test_backoff_is_jittered_and_capped() -> None:
    rng = random.Random(7)
    pauses = [Backoff(base=0.01, cap=0.05).pause(attempt, rng) for attempt in range(1, 30)]
    assert all(0 <= p <= 0.05 for p in pauses)
    assert len(set(pauses)) == len(pauses)
