"""One running system for the chaos suite (tollgate.testing.chaos.running_system, on a cluster of its own with the
real node), and its table printed at the end of the run."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tollgate.testing.chaos import TABLE, System, chaos_cluster, running_system
from tollgate.testing.cluster import EmbeddedCluster


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TABLE.rows:
        terminalreporter.write_sep("=", "chaos suite: faults and recovery")
        terminalreporter.write_line(TABLE.render())


@pytest.fixture(scope="module")
def cluster_of_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with chaos_cluster(tmp_path_factory.mktemp("kwok-chaos"), f"tollgate-chaos-{os.getpid()}") as cluster:
        yield cluster


@pytest.fixture(scope="module")
async def system(
    cluster_of_the_suite: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[System]:
    async with running_system(cluster_of_the_suite, tmp_path_factory.mktemp("chaos")) as built:
        yield built


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest, system: System) -> Iterator[None]:
    """The services' logs (the tail of each) when a row failed."""
    yield
    if any(getattr(getattr(request.node, f"report_{when}", None), "failed", False) for when in ("setup", "call")):
        print(system.service_logs())
