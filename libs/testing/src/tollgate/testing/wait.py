"""Waiting for a condition instead of sleeping: poll until it holds, or fail saying what was last seen."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ConditionTimeoutError(AssertionError):
    pass


def _describe(what: str, timeout: float, last: object, error: BaseException | None) -> str:
    detail = f"; last error: {type(error).__name__}: {error}" if error is not None else f"; last value: {last!r}"
    return f"timed out after {timeout:.1f} s waiting for {what}{detail}"


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `probe` until it returns something truthy and return that; `ignore`d errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last = probe()
            error = None
        except ignore as caught:
            error = caught
        if last and error is None:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise ConditionTimeoutError(_describe(what, timeout, last, error))
        time.sleep(interval)


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    timeout: float = 30.0,
    interval: float = 0.1,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """The asyncio form of wait_for: await `probe()` until its result is truthy."""
    deadline = time.monotonic() + timeout
    last: object = None
    error: BaseException | None = None
    while True:
        try:
            last = await probe()
            error = None
        except ignore as caught:
            error = caught
        if last and error is None:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise ConditionTimeoutError(_describe(what, timeout, last, error))
        await asyncio.sleep(interval)
