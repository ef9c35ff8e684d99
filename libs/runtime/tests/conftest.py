"""Fixtures for the runtime's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tollgate.runtime.kube import KubeTimeouts, timeouts, use_timeouts


@pytest.fixture
def process_timeouts() -> Iterator[Callable[[KubeTimeouts], KubeTimeouts]]:
    """Set this process's API client timeouts for the test (they are process-wide); restored afterwards."""
    before = timeouts()

    def set_to(limits: KubeTimeouts) -> KubeTimeouts:
        use_timeouts(limits)
        return limits

    yield set_to
    use_timeouts(before)
