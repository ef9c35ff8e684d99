"""The work queue: one entry per key, never two workers on one key, delays and backoff."""

from __future__ import annotations

import asyncio

from tollgate.routedip.workqueue import WorkQueue


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
    assert len(queue) == 0, "not handed to a second worker while the first holds it"
    queue.done(key)
    assert len(queue) == 1
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_add_after_waits_and_an_earlier_add_wins() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", 0.05)
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "late"
    queue.add_after("soon", 30)
    queue.add("soon")
    assert await asyncio.wait_for(queue.get(), 1) == "soon"
    queue.close()


async def test_backoff_doubles_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.04)
    assert [queue.backoff("k") for _ in range(4)] == [0.01, 0.02, 0.04, 0.04]
    queue.forget("k")
    assert queue.backoff("k") == 0.01
    queue.close()
