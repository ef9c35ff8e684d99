"""The Tiltfile, run by Tilt itself: `tilt ci` in local mode brings the whole system up and proves the data path;
in charts mode it installs the Helm charts on the embedded cluster and their pods run on its real node."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tollgate.testing import requirements
from tollgate.testing.cluster import EmbeddedCluster, dev_cluster
from tollgate.testing.rbac import release_namespaces
from tollgate.testing.tilt import TiltUp, copy_checkout, tilt_binary, tilt_ci
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for


@pytest.fixture(scope="module", autouse=True)
def tilt() -> Path:
    """Tilt (make tools builds it from the offline source archive): skipped without it, failed in CI
    (tollgate.testing.requirements)."""
    return requirements.require_tool(tilt_binary, "Tilt tests")


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


def real_node_cluster(dev_dir: Path) -> EmbeddedCluster:
    """The cluster of `make cluster` in `dev_dir`: with the real node."""
    cluster = dev_cluster(repo_root(), dev_dir)
    cluster.real_node = True
    cluster.up(3)
    return cluster


def tilt_ci_succeeds(dev_dir: Path, cluster: EmbeddedCluster, mode: str, timeout: float) -> str:
    """`tilt ci` in `mode`, given less time than the test so that Tilt itself reports what it still waits for."""
    result = tilt_ci(dev_dir, f"--mode={mode}", kubeconfig=cluster.kubeconfig, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "SUCCESS. All workloads are healthy." in output, output[-8000:]
    return output


def test_tilt_ci_charts_mode_installs_the_charts_and_their_pods_run(dev_dir: Path) -> None:
    cluster = real_node_cluster(dev_dir)
    output = tilt_ci_succeeds(dev_dir, cluster, "charts", timeout=200)
    # tilt ci ends in SUCCESS only once every workload's pods were Ready, as containers on the real node.
    for chart in release_namespaces():
        if chart != "tollgate-crds":
            assert f"→ {chart}:deployment" in output, f"Tilt did not deploy {chart}:\n{output[-4000:]}"

    # The samples went through the chart-installed webhook, and the chart-installed allocator takes them up.
    def seed_load_balancer_ready() -> bool:
        lb = cluster.kubectl("get", "loadbalancer", "sample-acnodal", "-n", "epic-root", "-o", "json", check=False)
        conditions = json.loads(lb.stdout).get("status", {}).get("conditions", []) if lb.returncode == 0 else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(seed_load_balancer_ready, "the seed LoadBalancer to be Ready, by the chart-installed allocator", 60)


@pytest.mark.timeout(1200)
def test_tilt_ci_images_mode_builds_the_five_images_and_their_pods_run(dev_dir: Path) -> None:
    cluster = real_node_cluster(dev_dir)
    tilt_ci_succeeds(dev_dir, cluster, "images", timeout=1000)
    for chart in release_namespaces():
        if chart == "tollgate-crds":
            continue
        namespace = release_namespaces()[chart]
        listing = cluster.kubectl(
            "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={chart}", "-o", "json"
        )
        images = {c["image"] for p in json.loads(listing.stdout)["items"] for c in p["spec"]["containers"]}
        assert len(images) == 1 and ":tilt-" in images.pop(), f"{chart}: not the image Tilt built"


@pytest.mark.timeout(900)
def test_tilt_images_mode_builds_the_images_and_live_update_runs_the_edited_code(tmp_path: Path, dev_dir: Path) -> None:
    """Tilt builds the jobs service's dev image, imports it into the real node and deploys the chart; an edit of the
    checkout (the /healthz answer, in libs/runtime) is synced into the running container, whose service restarts and
    answers with the new code (the same pod: a live update, not a rebuild)."""
    checkout = copy_checkout(tmp_path / "checkout")
    cluster = real_node_cluster(dev_dir)
    tilt = TiltUp(dev_dir, checkout, "--mode=images", "--services=jobs", kubeconfig=cluster.kubeconfig)
    try:
        tilt.wait("tollgate-jobs", timeout=600)
        (pod,) = jobs_pods(cluster)
        assert ":tilt-" in pod["spec"]["containers"][0]["image"], "the image Tilt built"
        healthz = f"http://{pod['status']['podIP']}:8080/healthz"
        assert wait_for(lambda: http_text(healthz), "the jobs pod's /healthz", 60, ignore=(OSError,)) == "ok\n"
        source = checkout / "libs" / "runtime" / "src" / "tollgate" / "runtime" / "health.py"
        original = source.read_text()
        edited = original.replace('web.Response(text="ok\\n")', 'web.Response(text="ok, live\\n")', 1)
        assert edited != original
        source.write_text(edited)
        wait_for(
            lambda: http_text(healthz) == "ok, live\n",
            f"the edited /healthz from the same pod\n{tilt.logs()[-4000:]}",
            timeout=120,
            interval=1,
            ignore=(OSError,),
        )
        (same,) = jobs_pods(cluster)
        assert same["metadata"]["uid"] == pod["metadata"]["uid"]
        # watchfiles restarted the service inside the container; the container itself never restarted.
        assert same["status"]["containerStatuses"][0]["restartCount"] == 0
        assert http_text(f"http://{pod['status']['podIP']}:8080/readyz") == "ok\n"
    finally:
        tilt.stop()


def jobs_pods(cluster: EmbeddedCluster) -> list[dict[str, Any]]:
    selector = "app.kubernetes.io/instance=tollgate-jobs"
    listing = cluster.kubectl("get", "pods", "-n", "tollgate-system", "-l", selector, "-o", "json").stdout
    return [p for p in json.loads(listing)["items"] if not p["metadata"].get("deletionTimestamp")]


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())
