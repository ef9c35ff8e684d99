"""Coalesced: concurrent asks share one call, and no caller gets an answer from a call that started before it asked."""

from __future__ import annotations

import asyncio

import pytest

from tollgate.runtime.coalesce import Coalesced


class Source:
    """Answers with the number of the call; each call waits until the test lets it end."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()
        self.fail_next = False
        self.called = asyncio.Event()

    async def fetch(self, key: str) -> str:
        self.calls.append(key)
        self.called.set()
        number = len(self.calls)
        await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError(f"call {number} failed")
        return f"{key}#{number}"


async def test_callers_that_ask_during_a_call_share_the_next_one_not_the_running_one() -> None:
    source = Source()
    coalesced = Coalesced(source.fetch)
    first = asyncio.create_task(coalesced("ns"))
    await source.called.wait()
    later = [asyncio.create_task(coalesced("ns")) for _ in range(10)]
    await asyncio.sleep(0)
    source.release.set()
    assert await first == "ns#1"
    assert {await task for task in later} == {"ns#2"}, "asked after call 1 started: call 1 may be stale for them"
    assert source.calls == ["ns", "ns"]


async def test_keys_do_not_share_and_a_later_ask_calls_again() -> None:
    source = Source()
    source.release.set()
    coalesced = Coalesced(source.fetch)
    assert list(await asyncio.gather(coalesced("a"), coalesced("b"))) == ["a#1", "b#2"]
    assert await coalesced("a") == "a#3", "nothing is kept once no caller waits"


async def test_a_failed_call_fails_its_caller_only_and_the_others_call_again() -> None:
    source = Source()
    coalesced = Coalesced(source.fetch)
    first = asyncio.create_task(coalesced("ns"))
    await source.called.wait()
    source.fail_next = True
    others = [asyncio.create_task(coalesced("ns")) for _ in range(3)]
    await asyncio.sleep(0)
    source.release.set()
    with pytest.raises(RuntimeError, match="call 1 failed"):
        await first
    assert {await task for task in others} == {"ns#2"}
