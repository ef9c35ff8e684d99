"""The kopf settings every tollgate operator shares: watches and requests bounded by the process's timeouts."""

from __future__ import annotations

from collections.abc import Callable

import kopf
import pytest

from tollgate.runtime.kube import KubeTimeouts
from tollgate.runtime.operator import (
    KOPF_ERROR_BACKOFF,
    KOPF_ERROR_RETRIES,
    WORKER_IDLE_SECONDS,
    JitteredBackoffs,
    configure,
)


@pytest.fixture
def limits(process_timeouts: Callable[[KubeTimeouts], KubeTimeouts]) -> KubeTimeouts:
    return process_timeouts(KubeTimeouts(request=7, connect=3, watch=20))


def test_a_watch_is_given_up_by_the_client_a_little_after_the_server_ends_a_healthy_one(
    limits: KubeTimeouts,
) -> None:
    settings = kopf.OperatorSettings()
    configure(settings, "probe")
    watching = settings.watching
    assert (watching.server_timeout, watching.client_timeout, watching.connect_timeout) == (20, 25, 3)
    assert watching.inactivity_timeout == 25, "never longer than the client timeout"
    assert (settings.networking.request_timeout, settings.networking.connect_timeout) == (7, 3)


def test_an_objects_worker_leaves_half_a_second_after_its_last_event_not_kopfs_five() -> None:
    settings = kopf.OperatorSettings()
    assert settings.batching.idle_timeout == 5.0, "kopf's default, which a burst of objects pays for in memory"
    configure(settings, "probe")
    assert settings.batching.idle_timeout == WORKER_IDLE_SECONDS == 0.5
    assert settings.batching.batch_window < WORKER_IDLE_SECONDS, "a worker still waits out its batch window"


def test_retry_pauses_are_drawn_anew_each_time_within_half_and_all_of_their_ceiling() -> None:
    backoffs = JitteredBackoffs(KOPF_ERROR_BACKOFF, KOPF_ERROR_RETRIES)
    ceilings = [KOPF_ERROR_BACKOFF.ceiling(attempt) for attempt in range(KOPF_ERROR_RETRIES)]
    draws = [list(backoffs) for _ in range(20)]
    assert len(backoffs) == KOPF_ERROR_RETRIES
    for draw in draws:
        assert all(ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(draw, ceilings, strict=True))
    assert len({tuple(draw) for draw in draws}) == len(draws), "jittered, not the same pauses every time"
