"""The work queue: one entry per key, never two workers on one key, delays, per-key backoff, close.

Timing tests use delays of a few milliseconds and assert the order keys come out in, not wall-clock times.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tollgate.runtime.backoff import Backoff
from tollgate.runtime.workqueue import QueueClosed, WorkQueue

EXACT = Backoff(base=0.01, cap=0.04, jitter=0.0)


async def test_a_key_added_twice_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_a_key_added_while_processing_is_queued_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0, "not handed to a second worker while the first holds it"
    queue.done(key)
    assert len(queue) == 1, "queued once more, however often it was added meanwhile"
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_add_after_comes_out_in_order_of_delay() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 0.04)
    queue.add_after("soon", 0.01)
    assert len(queue) == 0
    assert [await asyncio.wait_for(queue.get(), 1) for _ in range(2)] == ["soon", "late"]
    queue.close()


async def test_the_earlier_of_two_times_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("k", 30)
    queue.add_after("k", 0.01)
    queue.add_after("k", 60)
    queue.add_after("marker", 0.03)
    assert [await asyncio.wait_for(queue.get(), 1) for _ in range(2)] == ["k", "marker"]
    queue.add_after("now", 30)
    queue.add("now")
    assert await asyncio.wait_for(queue.get(), 1) == "now"
    queue.close()


async def test_retry_backs_off_per_key_doubling_to_the_cap_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(EXACT)
    assert [queue.retry("k") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    assert queue.failures("k") == 4
    assert queue.retry("other") == 0.01, "each key has its own count"
    queue.forget("k")
    assert queue.failures("k") == 0
    assert queue.retry("k") == 0.01
    queue.close()


async def test_a_key_that_failed_more_comes_back_later() -> None:
    queue: WorkQueue[str] = WorkQueue(Backoff(base=0.005, cap=1.0, jitter=0.0))
    for _ in range(2):
        queue.retry("flaky")
        queue.done(await asyncio.wait_for(queue.get(), 1))
    queue.retry("flaky")  # the third pause: 0.02 s
    queue.retry("fresh")  # the first: 0.005 s
    assert [await asyncio.wait_for(queue.get(), 1) for _ in range(2)] == ["fresh", "flaky"]
    queue.close()


async def test_retry_pauses_are_jittered_within_bounds() -> None:
    backoff = Backoff(base=1.0, cap=60.0, jitter=0.5)
    queue: WorkQueue[int] = WorkQueue(backoff, rng=random.Random(3))
    pauses = [queue.retry(key) for key in range(50)]
    assert all(0.5 <= p <= 1.0 for p in pauses)
    assert len(set(pauses)) == 50, "keys that failed together do not come back together"
    queue.close()


async def test_close_wakes_waiting_workers_and_drops_timers_and_adds() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiting = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.add_after("timer", 0.01)
    queue.close()
    for task in waiting:
        with pytest.raises(QueueClosed):
            await asyncio.wait_for(task, 1)
    queue.add("late")
    queue.add_after("later", 0)
    assert len(queue) == 0
    with pytest.raises(QueueClosed):
        await queue.get()
