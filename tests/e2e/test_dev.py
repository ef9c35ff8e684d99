"""`make dev`: the whole system comes up on its own cluster and proves the data path; stopping leaves nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tollgate.testing.dev import DevSystem
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for


@pytest.fixture
def system(tmp_path: Path) -> DevSystem:
    return DevSystem(repo_root(), state=tmp_path / "dev")


def programmed_summary(system: DevSystem) -> Callable[[], str | None]:
    def probe() -> str | None:
        text = system.summary()
        proof = next((line for line in text.splitlines() if "tollgate-dev/dev-proof" in line), "")
        return text if "Programmed=True" in proof else None

    return probe


def test_dev_system_runs_everything_and_carries_traffic(system: DevSystem) -> None:
    try:
        system.start()
        summary = wait_for(programmed_summary(system), "the dev-proof VirtualService to be Programmed", timeout=30)
    finally:
        processes = list(system.processes.values())
        system.stop()
        system.cluster.down()
    for service in ("supervisor", "webhook", "allocator", "xds", "routedip", "jobs"):
        assert f"  {service:<10} ready" in summary, summary
    assert "'udp-echo:datagram from make dev'" in summary
    assert "'tcp-echo:stream from make dev'" in summary
    assert "(ServicePrefix dev) -> Envoy -> 'lb-echo:datagram to a public address'" in summary
    assert "  LB   127.80.0.1:7003" in summary, "the first address of the dev pool"
    assert "tunnel 1" in summary
    assert len(processes) == 6
    assert [p.process.returncode for p in processes if p.process is not None] == [0] * 6, (
        "a service did not stop cleanly"
    )
    assert not system.cluster.exists()
