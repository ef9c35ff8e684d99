"""Optimistic concurrency as the EPIC seed describes it.

Read the object, mutate it, `replace` it carrying the resourceVersion that was read; the API server
refuses the write with 409 Conflict when someone else wrote first. Then re-read and try again, after a
jittered, growing pause, a bounded number of times.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tollgate.runtime.backoff import Backoff

T = TypeVar("T")
R = TypeVar("R")
CONFLICT_BACKOFF = Backoff()


class OptimisticUpdateError(RuntimeError):
    """The update kept conflicting with other writers until the attempts ran out."""


@dataclass
class UpdateResult(Generic[T, R]):
    written: T
    value: R
    attempts: int

    @property
    def conflicts(self) -> int:
        return self.attempts - 1


async def update_optimistically(
    read: Callable[[], Awaitable[T]],
    mutate: Callable[[T], R],
    replace: Callable[[T], Awaitable[T]],
    is_conflict: Callable[[BaseException], bool],
    *,
    what: str,
    attempts: int = 20,
    backoff: Backoff = CONFLICT_BACKOFF,
    rng: random.Random | None = None,
    on_conflict: Callable[[int], None] | None = None,
) -> UpdateResult[T, R]:
    """Read, `mutate` in place (returning a value for the caller), `replace`; re-read on conflict.

    `mutate` must derive everything from the object it is given: it runs again on every retry.
    Raises OptimisticUpdateError naming `what` when every attempt conflicted.
    """
    rng = rng or random.Random()
    for attempt in range(1, attempts + 1):
        current = await read()
        value = mutate(current)
        try:
            written = await replace(current)
        except Exception as error:
            if not is_conflict(error):
                raise
            if on_conflict is not None:
                on_conflict(attempt)
            if attempt < attempts:
                await asyncio.sleep(backoff.pause(attempt, rng))
            continue
        return UpdateResult(written=written, value=value, attempts=attempt)
    raise OptimisticUpdateError(f"{what}: still conflicting after {attempts} attempts; giving up")
