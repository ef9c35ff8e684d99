"""The embedded control plane recovers by itself: an API server frozen for 45 s (SIGSTOP, then SIGCONT) leaves a
cluster where a new Job still gets a pod, scheduled onto a node, with no manual step; a component that dies is
started again by the cluster's watchdog.

These tests freeze and kill control-plane processes, so they start an embedded cluster of their own instead of
the session's.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import embedded_cluster
from tollgate.testing.wait import ConditionTimeoutError, wait_for

FREEZE_SECONDS = 45  # the stall: longer than a leader's renew deadline (10 s) and lease (15 s)
ELECTED = ("kube-controller-manager", "kube-scheduler")  # the components that ran a leader election before


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with embedded_cluster(tmp_path_factory.mktemp("kwok-faults"), f"tollgate-faults-{os.getpid()}", nodes=1) as cluster:
        yield cluster


def assert_a_new_job_gets_a_pod(cluster: EmbeddedCluster, name: str) -> None:
    """A Job created now gets a pod from the controller-manager, which the scheduler binds to the node."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "hello", "image": "busybox", "command": ["echo", "hi"]}],
                }
            }
        },
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(job))

    def bound_to() -> str | None:
        found = cluster.kubectl("get", "pods", "-n", "default", "-l", f"job-name={name}", "-o", "json")
        nodes = [pod["spec"].get("nodeName") for pod in json.loads(found.stdout)["items"]]
        return next((node for node in nodes if node), None)

    try:
        node = wait_for(bound_to, f"the pod of Job {name} to be bound to a node", timeout=90)
    except ConditionTimeoutError as error:
        raise AssertionError(f"{error}; control-plane processes running: {sorted(cluster.pids())}") from error
    assert node == "tollgate-worker-0"


def test_a_job_gets_a_pod_after_the_api_server_was_frozen(own_cluster: EmbeddedCluster) -> None:
    before = own_cluster.pids()
    os.kill(before["kube-apiserver"], signal.SIGSTOP)
    try:
        time.sleep(FREEZE_SECONDS)  # the fault itself, not a wait for a condition
    finally:
        os.kill(before["kube-apiserver"], signal.SIGCONT)
    own_cluster.wait_ready(60)
    assert_a_new_job_gets_a_pod(own_cluster, "after-the-freeze")
    after = own_cluster.pids()
    assert {name: after.get(name) for name in ELECTED} == {name: before[name] for name in ELECTED}, (
        "with one instance and no election, the stall is no reason to exit"
    )
    assert sorted(after) == ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"]
    assert set(own_cluster.restarts().values()) == {0}


def test_a_component_that_dies_is_started_again(own_cluster: EmbeddedCluster) -> None:
    before = own_cluster.pids()
    for name in ELECTED:
        os.kill(before[name], signal.SIGKILL)

    logs = own_cluster.logs_dir()

    def restarted() -> dict[str, int] | None:
        """The new pids, once the watchdog logged both restarts."""
        now = own_cluster.pids()
        watchdog_log = (logs / "watchdog.log").read_text()
        lines = [f"{name} restarted (pid {now.get(name)}, restart 1)" for name in ELECTED]
        return now if all(line in watchdog_log for line in lines) else None

    after = wait_for(restarted, "the watchdog to start the killed components again", timeout=60)
    assert all(after[name] != before[name] for name in ELECTED)
    assert {name: count for name, count in own_cluster.restarts().items() if count} == dict.fromkeys(ELECTED, 1)
    assert_a_new_job_gets_a_pod(own_cluster, "after-the-kill")
    for name in ELECTED:
        # klog writes the pid on every line: the killed run's log is kept beside the new run's.
        assert f" {before[name]} " in (logs / f"{name}.log.1").read_text()
        assert f" {after[name]} " in (logs / f"{name}.log").read_text()
