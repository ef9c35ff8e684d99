"""until_done: transient failures are retried, answers are not, and a stop ends the waiting."""

from __future__ import annotations

import asyncio

import pytest
import urllib3
from kubernetes import client

from tollgate.runtime.backoff import Backoff
from tollgate.runtime.retry import Stopped, is_api_failure, is_transient, until_done

QUICK = Backoff(base=0.001, cap=0.002)


def test_transient_failures_are_the_network_and_server_trouble_not_answers() -> None:
    assert is_transient(urllib3.exceptions.ProtocolError("Connection aborted."))
    assert is_transient(ConnectionRefusedError())
    assert is_transient(client.ApiException(status=503))
    assert is_transient(client.ApiException(status=429))
    assert not is_transient(client.ApiException(status=403))
    assert not is_transient(client.ApiException(status=409))
    assert not is_transient(ValueError("bad input"))
    assert is_api_failure(client.ApiException(status=403)) and is_api_failure(ConnectionResetError())
    assert not is_api_failure(KeyError("status"))


async def test_a_call_is_repeated_until_it_succeeds() -> None:
    failures = [ConnectionResetError(), client.ApiException(status=500)]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    assert await until_done(call, "the call", asyncio.Event(), QUICK) == "done"
    assert failures == []


async def test_an_answer_is_raised_at_once() -> None:
    calls = 0

    async def call() -> None:
        nonlocal calls
        calls += 1
        raise client.ApiException(status=403, reason="Forbidden")

    with pytest.raises(client.ApiException):
        await until_done(call, "the call", asyncio.Event(), QUICK)
    assert calls == 1


async def test_a_stop_ends_the_retrying() -> None:
    stop = asyncio.Event()

    async def call() -> None:
        stop.set()
        raise ConnectionRefusedError()

    with pytest.raises(Stopped, match="the call: stopped"):
        await until_done(call, "the call", stop, QUICK)
