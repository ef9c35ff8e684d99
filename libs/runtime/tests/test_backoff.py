"""The one backoff helper: the retry pause (growth, cap, jitter bounds, refusal of settings that make no sense)
and until_done (transient failures are retried, answers are not, and a stop ends the waiting)."""

from __future__ import annotations

import asyncio
import random

import pytest
import urllib3
from kubernetes import client

from tollgate.runtime.backoff import Backoff, Stopped, is_api_failure, is_transient, until_done


def test_the_ceiling_doubles_from_base_up_to_cap() -> None:
    backoff = Backoff(base=0.5, cap=4.0, jitter=0.0)
    assert [backoff.pause(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_huge_attempt_number_stays_at_the_cap() -> None:
    assert Backoff(base=0.5, cap=4.0).ceiling(10_000) == 4.0


@pytest.mark.parametrize("jitter", [0.25, 0.5, 1.0])
def test_jitter_takes_at_most_its_share_off_the_ceiling(jitter: float) -> None:
    backoff = Backoff(base=1.0, cap=8.0, jitter=jitter)
    rng = random.Random(7)
    for attempt in range(6):
        ceiling = backoff.ceiling(attempt)
        pauses = [backoff.pause(attempt, rng) for _ in range(200)]
        assert all(ceiling * (1 - jitter) <= p <= ceiling for p in pauses), (attempt, min(pauses), max(pauses))
        assert len(set(pauses)) > 100, "the pauses are spread, not one value"
        spread = max(pauses) - min(pauses)
        assert spread > ceiling * jitter * 0.8, "the whole share is used"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"base": 0.0}, "Backoff.base: must be greater than 0"),
        ({"base": 1.0, "cap": 0.5}, "Backoff.cap: must be at least base"),
        ({"jitter": 1.5}, "Backoff.jitter: must be between 0 and 1"),
        ({"jitter": -0.1}, "Backoff.jitter: must be between 0 and 1"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_field(settings: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Backoff(**settings)


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
