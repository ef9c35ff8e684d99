"""Concurrent reads of the same thing share one call, without any caller getting an answer older than its ask.

An operator that lists, say, every RemoteEndpoint of a namespace for each of a thousand objects it reconciles at
once holds a thousand copies of that list in memory and sends a thousand identical requests. `Coalesced` runs at
most one call per key at a time: callers that ask while one runs wait for it to end and then share the next call,
which starts after all of them asked, so each gets what its own call would have returned (or something newer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


@dataclass
class _Key(Generic[T]):
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: int = 0  # calls started so far
    last: tuple[int, T] | None = None  # the latest call that succeeded: its number and its answer
    waiting: int = 0  # callers inside __call__


class Coalesced(Generic[K, T]):
    """`await coalesced(key)`: `fetch(key)`, shared with the callers that asked while the previous call ran.

    The answer is shared, not copied: callers must not change it. A failed call fails only the caller that made it;
    the others waiting make the next call. Nothing is kept once no caller waits.
    """

    def __init__(self, fetch: Callable[[K], Awaitable[T]]) -> None:
        self._fetch = fetch
        self._keys: dict[K, _Key[T]] = {}

    async def __call__(self, key: K) -> T:
        state = self._keys.setdefault(key, _Key())
        asked = state.started
        state.waiting += 1
        try:
            async with state.lock:
                if state.last is not None and state.last[0] > asked:
                    return state.last[1]  # started after this caller asked, and done
                state.started += 1
                number = state.started
                answer = await self._fetch(key)
                state.last = (number, answer)
                return answer
        finally:
            state.waiting -= 1
            if not state.waiting:
                del self._keys[key]
