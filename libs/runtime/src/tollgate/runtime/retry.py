"""Retrying a call whose failure is the network's or the API server's passing trouble, not an answer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import urllib3
from kubernetes import client

from tollgate.runtime.backoff import Backoff

log = logging.getLogger("tollgate.runtime.retry")
T = TypeVar("T")
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
