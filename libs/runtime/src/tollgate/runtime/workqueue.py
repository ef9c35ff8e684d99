"""A work queue in the manner of client-go's, for controllers that reconcile keys with a pool of workers.

- A key is queued once however often it is added, and never handed to two workers at once: an add while
  a worker holds it queues it again when that worker calls `done`.
- `add_after` queues a key later (the earliest requested time wins); `retry` queues it after its own
  exponential, capped, jittered backoff (tollgate.runtime.backoff), which `forget` resets on success.
- `close` drops pending timers and keys, and `get` raises QueueClosed from then on, in waiting workers too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable
from typing import Generic, TypeVar

from tollgate.runtime.backoff import Backoff

K = TypeVar("K", bound=Hashable)

RETRY = Backoff(base=0.2, cap=60.0, jitter=0.5)


class QueueClosed(Exception):
    """The queue was closed: the worker asking for a key should stop."""


class _Closed:
    """Put once into the queue on close; every `get` that meets it passes it on to the next waiter."""


_CLOSED = _Closed()


class WorkQueue(Generic[K]):
    def __init__(self, backoff: Backoff = RETRY, rng: random.Random | None = None) -> None:
        self.backoff = backoff
        self._rng = rng
        self._queue: asyncio.Queue[K | _Closed] = asyncio.Queue()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._failures: dict[K, int] = {}
        self._closed = False

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K) -> None:
        if self._closed:
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._processing:
            self._dirty.add(key)
            return
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` in `delay` seconds, unless it is queued sooner (the earlier time wins)."""
        if self._closed:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        when = loop.time() + delay
        if existing is not None and existing.when() <= when:
            return
        if existing is not None:
            existing.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: K) -> float:
        """Queue `key` again after its next backoff pause (growing with each failure); returns the pause."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = self.backoff.pause(failures, self._rng)
        self.add_after(key, delay)
        return delay

    def failures(self, key: K) -> int:
        """How many times `key` was retried since it last succeeded."""
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Reset `key`'s backoff after a success."""
        self._failures.pop(key, None)

    async def get(self) -> K:
        """The next key to work on; the caller must call `done` with it. Raises QueueClosed once closed."""
        if self._closed:
            raise QueueClosed
        item = await self._queue.get()
        if isinstance(item, _Closed):
            self._queue.put_nowait(item)
            raise QueueClosed
        self._queued.discard(item)
        self._processing.add(item)
        return item

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._queue.put_nowait(_CLOSED)
