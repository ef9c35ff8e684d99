"""The Tiltfile, run by Tilt itself: `tilt ci` in local mode brings the whole system up and proves the data path;
in charts mode it installs the Helm charts on the embedded cluster and their pods run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tollgate.testing.cluster import dev_cluster
from tollgate.testing.rbac import release_namespaces
from tollgate.testing.tilt import tilt_binary, tilt_ci
from tollgate.testing.tools import ToolsMissingError, repo_root
from tollgate.testing.wait import wait_for

try:
    TILT = tilt_binary()
except ToolsMissingError as missing:
    pytest.skip(f"Tilt tests skipped: {missing}", allow_module_level=True)


@pytest.fixture
def dev_dir(tmp_path: Path) -> Iterator[Path]:
    """A state directory of its own; whatever cluster Tilt started there is deleted afterwards."""
    state = tmp_path / "dev"
    yield state
    dev_cluster(repo_root(), state).down()


def test_tilt_ci_local_mode_runs_every_resource_and_carries_traffic(dev_dir: Path) -> None:
    result = tilt_ci(dev_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "SUCCESS. All workloads are healthy." in output, output[-8000:]
    # data-path is the last resource: it runs after every service is Ready, so its echoes prove them all.
    assert "'udp-echo:datagram from make dev'" in output, output[-8000:]
    assert "'tcp-echo:stream from make dev'" in output, output[-8000:]


def test_tilt_ci_charts_mode_installs_the_charts_and_their_pods_run(dev_dir: Path) -> None:
    cluster = dev_cluster(repo_root(), dev_dir)
    cluster.up(3)
    result = tilt_ci(dev_dir, "--mode=charts", kubeconfig=cluster.kubeconfig)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "SUCCESS. All workloads are healthy." in output, output[-8000:]
    # tilt ci ends in SUCCESS only once every workload's pods were Ready: its kubelet has stopped them since.
    for chart in release_namespaces():
        if chart != "tollgate-crds":
            assert f"→ {chart}:deployment" in output, f"Tilt did not deploy {chart}:\n{output[-4000:]}"

    # The samples went through the chart-installed webhook, and the chart-installed allocator takes them up.
    def seed_load_balancer_ready() -> bool:
        lb = cluster.kubectl("get", "loadbalancer", "sample-acnodal", "-n", "epic-root", "-o", "json", check=False)
        conditions = json.loads(lb.stdout).get("status", {}).get("conditions", []) if lb.returncode == 0 else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(seed_load_balancer_ready, "the seed LoadBalancer to be Ready, by the chart-installed allocator", 60)
