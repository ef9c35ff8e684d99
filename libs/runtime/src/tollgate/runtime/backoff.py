"""The one backoff helper: how a retry's pause is computed (exponential, capped, jittered), which failures are
worth a retry, and the retry loop itself.

Retries that failed together (a conflict between writers, an API server that went away for every
worker at once) must not come back together, so each pause takes a random share off its ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import urllib3
from kubernetes import client

log = logging.getLogger("tollgate.runtime.backoff")
T = TypeVar("T")

# 2**64 times any sensible base is past any cap; bounding the exponent keeps the float finite.
_MAX_EXPONENT = 64
_rng = random.Random()


@dataclass(frozen=True)
class Backoff:
    """Pause `base * 2**attempt` seconds, at most `cap`, less a random share of up to `jitter` of it.

    `jitter=1.0` is "full jitter" (anywhere from 0 to the ceiling), `0.0` none (the ceiling itself).
    """

    base: float = 0.005
    cap: float = 0.5
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"Backoff.base: must be greater than 0, got {self.base}")
        if not self.cap >= self.base:
            raise ValueError(f"Backoff.cap: must be at least base ({self.base}), got {self.cap}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"Backoff.jitter: must be between 0 and 1, got {self.jitter}")

    def ceiling(self, attempt: int) -> float:
        """The longest pause before retry number `attempt` (counting from 0)."""
        return min(self.cap, self.base * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))

    def pause(self, attempt: int, rng: random.Random | None = None) -> float:
        """The pause before retry number `attempt`: within [ceiling * (1 - jitter), ceiling]."""
        ceiling = self.ceiling(attempt)
        return ceiling - (rng or _rng).uniform(0.0, ceiling * self.jitter)


STARTUP_BACKOFF = Backoff(base=0.2, cap=10)


class Stopped(RuntimeError):
    """The service was asked to stop before the call succeeded."""


def is_transient(error: BaseException) -> bool:
    """A cut or refused connection, a timeout, a 429 or a 5xx: the same call may succeed later."""
    if isinstance(error, client.ApiException):
        return error.status == 429 or int(error.status or 0) >= 500 or error.status == 0
    return isinstance(error, (urllib3.exceptions.HTTPError, OSError))


def is_api_failure(error: BaseException) -> bool:
    """The API server's answer or the network's trouble: what a call to the API server may raise at any time."""
    return isinstance(error, client.ApiException) or is_transient(error)


async def until_done(
    call: Callable[[], Awaitable[T]], what: str, stop: asyncio.Event, backoff: Backoff = STARTUP_BACKOFF
) -> T:
    """`call()` again after each transient failure (jittered, growing pauses) until it succeeds; other errors
    are raised at once. Raises Stopped when `stop` is set first."""
    rng = random.Random()
    attempt = 0
    while not stop.is_set():
        try:
            return await call()
        except Exception as error:
            if not is_transient(error):
                raise
            attempt += 1
            pause = backoff.pause(attempt, rng)
            log.warning("%s failed (%s); trying again in %.1f s", what, error, pause)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=pause)
    raise Stopped(f"{what}: stopped before it succeeded")
