"""Every API call made through tollgate.runtime.kube times out, on a real API server behind a frozen connection."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

from tollgate.runtime.kube import RETRIES, KubeTimeouts, Watch, api_client
from tollgate.runtime.settings import ServiceSettings
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import FaultProxy, Mode, api_server_proxy
from tollgate.testing.wait import wait_for


@pytest.fixture
def frozen(cluster: EmbeddedCluster, tmp_path: Path) -> Iterator[tuple[FaultProxy, Path]]:
    with api_server_proxy(cluster.kubeconfig, tmp_path) as (proxy, kubeconfig):
        yield proxy, kubeconfig
        proxy.set_mode(Mode.PASS)  # let the threads blocked on it go


@pytest.fixture
def short_timeouts(process_timeouts: Callable[[KubeTimeouts], KubeTimeouts]) -> KubeTimeouts:
    return process_timeouts(KubeTimeouts(request=1.0, connect=1.0, watch=1))


def timed(call: Callable[[], object]) -> tuple[float, BaseException | None]:
    """Run `call` in a thread (it may hang: the test fails then, instead of hanging); its duration and error."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
            outcome.append(None)
        except Exception as error:
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, "the call is still waiting on the frozen connection after 20 s"
    return time.monotonic() - started, outcome[0]


def test_a_call_without_a_timeout_of_its_own_gives_up_on_a_frozen_api_server(
    frozen: tuple[FaultProxy, Path], short_timeouts: KubeTimeouts
) -> None:
    proxy, kubeconfig = frozen
    core = client.CoreV1Api(api_client(kubeconfig))
    core.list_namespace(limit=1)
    proxy.set_mode(Mode.FREEZE)
    seconds, error = timed(lambda: core.list_namespace(limit=1))
    assert isinstance(error, urllib3.exceptions.HTTPError), error
    assert seconds < (1 + RETRIES) * short_timeouts.request + 2, "tried once more, on a new connection"


def test_a_watch_frozen_once_open_waits_for_its_server_timeout_and_a_margin_then_gives_up(
    frozen: tuple[FaultProxy, Path], short_timeouts: KubeTimeouts
) -> None:
    proxy, kubeconfig = frozen
    core = client.CoreV1Api(api_client(kubeconfig))
    first_event = threading.Event()
    frozen_at: list[float] = []

    def follow() -> None:
        for _ in Watch().events(core.list_namespace, timeout_seconds=2):
            if not first_event.is_set():
                first_event.set()
                assert wait_for(lambda: frozen_at, "the freeze")

    def freeze() -> None:
        assert first_event.wait(20)
        proxy.set_mode(Mode.FREEZE)
        frozen_at.append(time.monotonic())

    freezer = threading.Thread(target=freeze, daemon=True)
    freezer.start()
    _, error = timed(follow)
    seconds = time.monotonic() - frozen_at[0]
    assert isinstance(error, urllib3.exceptions.HTTPError), error
    assert short_timeouts.watch_client(2) - 1 <= seconds < short_timeouts.watch_client(2) + 2, seconds


def test_a_watch_that_ends_server_side_is_not_cut_by_the_client(
    cluster: EmbeddedCluster, short_timeouts: KubeTimeouts
) -> None:
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    seconds, error = timed(lambda: list(Watch().events(core.list_namespace, timeout_seconds=3)))
    assert error is None and seconds >= 3, "longer than the request timeout: a watch gets its own"


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"KubeTimeouts\.request: must be greater than 0"):
        KubeTimeouts(request=0)


def test_the_settings_name_the_timeouts() -> None:
    settings = ServiceSettings(kube_request_timeout_seconds=7, kube_connect_timeout_seconds=3, watch_timeout_seconds=60)
    assert settings.kube_timeouts() == KubeTimeouts(request=7, connect=3, watch=60)
