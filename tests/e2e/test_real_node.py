"""The embedded cluster's real node: a kubelet with containerd, runc, the CNI bridge, kube-proxy and CoreDNS on the
reserved test ranges, beside KWOK's fake nodes, running pods of the images built from this checkout; and a host
left as it was found once the cluster is down, also after a run that was killed. The charts on this node:
test_charts_deployed.py.

One cluster for the module (one real node per machine); the last tests take it down and compare the host.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tollgate.testing import node, requirements
from tollgate.testing.cluster import KWOK_MANAGED, EmbeddedCluster
from tollgate.testing.images import envoy_image_ref
from tollgate.testing.tools import tool
from tollgate.testing.wait import wait_for

pytestmark = pytest.mark.e2e

NODE_PODS = ipaddress.ip_network(node.NODE_POD_CIDR)


class RealCluster:
    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.cluster = cluster

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, stdin=stdin, check=check)

    def get(self, *args: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", *args, "-o", "json").stdout))

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects))

    def ready_pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            pod = self.get("pod", name, "-n", namespace)
            conditions = pod.get("status", {}).get("conditions", [])
            return pod if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None

        return wait_for(ready, f"pod {namespace}/{name} Ready\n{self.cluster.node().log_tail('kubelet')}", 60)

    def exec(self, pod: str, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("exec", pod, "--", *command, check=check)


def create_cluster(workdir: Path, name: str) -> EmbeddedCluster:
    cluster = EmbeddedCluster(name, workdir / "kwok", workdir / "kubeconfig", real_node=True)
    seconds = cluster.up(3)
    print(f"\ncluster {name} with the real node ready in {seconds:.1f} s")
    return cluster


@pytest.fixture(scope="module", autouse=True)
def real_node_prerequisites() -> None:
    """Before the module's other fixtures: skipped without the real node, failed in CI (testing.requirements)."""
    requirements.require_real_node("tests/e2e/test_real_node.py")


@pytest.fixture(scope="module")
def host_before() -> dict[str, Any]:
    return node.host_fingerprint()


@pytest.fixture(scope="module")
def real(host_before: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    cluster = create_cluster(tmp_path_factory.mktemp("real-node"), f"tollgate-node-{os.getpid()}")
    try:
        yield RealCluster(cluster)
    finally:
        cluster.down()


def envoy_pod(name: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """An Envoy pod of the Envoy image started as the allocator's Deployments start it: flags only (the entrypoint
    puts `envoy` in front), a bootstrap from a ConfigMap; its admin API on every address of the pod."""
    bootstrap = {"admin": {"address": {"socket_address": {"address": "0.0.0.0", "port_value": 9901}}}}
    container = {
        "name": "envoy",
        "image": envoy_image_ref(),
        "imagePullPolicy": "Never",
        "args": ["-c", "/etc/envoy/envoy.yaml", "--service-node", name, "--service-cluster", name],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "volumeMounts": [{"name": "bootstrap", "mountPath": "/etc/envoy"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 9901}, "periodSeconds": 1},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"envoy.yaml": json.dumps(bootstrap)},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": {"containers": [container], "volumes": [{"name": "bootstrap", "configMap": {"name": name}}]},
        },
    ]


def uid_of_pid_1(real: RealCluster, pod: str) -> int:
    status = real.exec(pod, "cat", "/proc/1/status").stdout
    match = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
    assert match, status
    return int(match.group(1))


def http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_the_real_node_is_ready_beside_kwoks_nodes_and_kwok_leaves_it_alone(real: RealCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in real.get("nodes")["items"]}
    mine = nodes.pop(node.NODE_NAME)
    assert {a["type"]: a["address"] for a in mine["status"]["addresses"]}["InternalIP"] == node.NODE_IP
    assert KWOK_MANAGED not in mine["metadata"].get("annotations", {})
    assert mine["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert mine["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.1"
    assert len(nodes) == 3
    for fake in nodes.values():
        assert fake["metadata"]["annotations"][KWOK_MANAGED] == "fake"
        assert {"key": KWOK_MANAGED, "value": "fake", "effect": "NoSchedule"} in fake["spec"]["taints"]


def test_the_envoy_image_keeps_the_official_entrypoint_contract(real: RealCluster) -> None:
    """Flags only run Envoy, as user envoy (101) like the official image; ENVOY_UID=0 keeps root."""
    real.apply(*envoy_pod("envoy-contract"), *envoy_pod("envoy-root", {"ENVOY_UID": "0"}))
    pod = real.ready_pod("envoy-contract")
    assert ipaddress.ip_address(pod["status"]["podIP"]) in NODE_PODS
    assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    assert uid_of_pid_1(real, "envoy-contract") == 101
    assert real.exec("envoy-contract", "cat", "/proc/1/cmdline").stdout.split("\0")[:3] == [
        "envoy",
        "-c",
        "/etc/envoy/envoy.yaml",
    ]
    real.ready_pod("envoy-root")
    assert uid_of_pid_1(real, "envoy-root") == 0
    # From the host, at the pod's address on the bridge.
    assert http_get(f"http://{pod['status']['podIP']}:9901/ready").strip() == "LIVE"


def test_kubectl_logs_exec_and_port_forward_reach_a_container(real: RealCluster) -> None:
    real.apply(*envoy_pod("envoy-tools"))
    real.ready_pod("envoy-tools")
    assert "starting main dispatch loop" in real.kubectl("logs", "envoy-tools").stdout
    assert real.exec("envoy-tools", "sh", "-c", "echo from inside").stdout == "from inside\n"
    forward = subprocess.Popen(
        [
            str(tool("kubectl")),
            "--kubeconfig",
            str(real.cluster.kubeconfig),
            "port-forward",
            "pod/envoy-tools",
            ":9901",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        first = forward.stdout.readline()  # "Forwarding from 127.0.0.1:<port> -> 9901"
        port = re.search(r"127\.0\.0\.1:(\d+)", first)
        assert port, first
        assert http_get(f"http://127.0.0.1:{port.group(1)}/ready").strip() == "LIVE"
    finally:
        forward.terminate()
        forward.wait(10)


def test_services_resolve_by_name_and_answer_at_their_cluster_ip_from_host_and_pod(real: RealCluster) -> None:
    real.apply(
        *envoy_pod("envoy-service"),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "envoy-admin", "namespace": "default"},
            "spec": {"selector": {"app": "envoy-service"}, "ports": [{"port": 80, "targetPort": 9901}]},
        },
    )
    real.ready_pod("envoy-service")
    cluster_ip = real.get("service", "envoy-admin")["spec"]["clusterIP"]
    assert ipaddress.ip_address(cluster_ip) in ipaddress.ip_network(node.SERVICE_CIDR)
    resolve = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))"
    name = "envoy-admin.default.svc.cluster.local"
    assert real.exec("envoy-service", "python3", "-c", resolve, name).stdout.strip() == cluster_ip
    assert real.exec("envoy-service", "python3", "-c", resolve, "kubernetes.default").stdout.strip() == "198.19.0.1"
    # kube-proxy: from the host, and from the pod behind the Service to itself (hairpin).
    reply = wait_for(
        lambda: http_get(f"http://{cluster_ip}/ready"), "the ClusterIP from the host", 30, ignore=(OSError,)
    )
    assert reply.strip() == "LIVE"
    fetch = "import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    hairpin = real.exec("envoy-service", "python3", "-c", fetch, f"http://{name}/ready")
    assert hairpin.stdout.strip() == "LIVE"


def test_nothing_leaves_the_machine_from_a_pod(real: RealCluster) -> None:
    """No default route in a pod, no upstream DNS: an address outside the cluster's ranges is unreachable at once,
    and a name outside the cluster does not resolve."""
    real.apply(*envoy_pod("envoy-outside"))
    real.ready_pod("envoy-outside")
    connect = "import socket; socket.create_connection(('203.0.113.1', 80), timeout=3)"
    refused = real.exec("envoy-outside", "python3", "-c", connect, check=False)
    assert refused.returncode != 0 and "Network is unreachable" in refused.stderr, refused.stderr
    resolve = "import socket; socket.gethostbyname('example.com')"
    unresolved = real.exec("envoy-outside", "python3", "-c", resolve, check=False)
    assert unresolved.returncode != 0 and "gaierror" in unresolved.stderr, unresolved.stderr


def test_a_latest_image_is_pulled_from_the_nodes_registry_and_never_from_docker_hub(real: RealCluster) -> None:
    """A Goop's default image, `busybox` (so `latest`, always pulled), comes from the node's registry; an image that
    registry lacks is not found there, and no other registry is tried."""
    real.kubectl("run", "latest-busybox", "--image=busybox", "--restart=Never", "--", "sh", "-c", "echo pulled here")

    def finished() -> dict[str, Any] | None:
        pod = real.get("pod", "latest-busybox")
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    assert wait_for(finished, "the busybox pod to finish", 60)["status"]["phase"] == "Succeeded"
    assert real.kubectl("logs", "latest-busybox").stdout == "pulled here\n"
    real.kubectl("run", "latest-nginx", "--image=nginx", "--restart=Never")

    def refused() -> list[str]:
        events = real.get("events", "--field-selector", "involvedObject.name=latest-nginx,reason=Failed")["items"]
        return [str(e["message"]) for e in events if "docker.io/library/nginx:latest" in e["message"]]

    (message, *_) = wait_for(refused, "the nginx pull to fail", 60)
    assert message.endswith("docker.io/library/nginx:latest: not found"), message


def test_the_watchdog_starts_a_killed_kubelet_kube_proxy_and_containerd_again_and_pods_keep_running(
    real: RealCluster,
) -> None:
    real.apply(*envoy_pod("envoy-survivor"))
    pod_ip = real.ready_pod("envoy-survivor")["status"]["podIP"]
    cluster = real.cluster
    killed = {name: cluster.node().pid(name) for name in ("containerd", "kubelet", "kube-proxy")}
    for pid in killed.values():
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    assert http_get(f"http://{pod_ip}:9901/ready").strip() == "LIVE", "the container outlives the node's processes"

    def restarted() -> bool:
        running = cluster.pids()
        return all(running.get(name) not in (None, pid) for name, pid in killed.items())

    wait_for(restarted, "the watchdog to start the node's processes again", timeout=60)
    assert cluster.restarts().keys() >= killed.keys() and all(cluster.restarts()[name] >= 1 for name in killed)
    real.apply(*envoy_pod("envoy-after"))
    real.ready_pod("envoy-after")
    assert http_get(f"http://{pod_ip}:9901/ready").strip() == "LIVE"


def test_cluster_down_leaves_the_host_as_it_found_it(real: RealCluster, host_before: dict[str, Any]) -> None:
    changed = node.host_fingerprint()
    assert changed != host_before, "the running node changes the host: this test would prove nothing"
    real.cluster.down()
    assert node.host_fingerprint() == host_before


def test_a_node_killed_midway_is_cleaned_up_by_the_next_start(
    host_before: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Kill -9 a running node's kubelet, kube-proxy, containerd and shims (the pods' containers keep running); the
    next cluster's start finds the record, cleans up, and runs; its teardown leaves the host as found."""
    killed = create_cluster(tmp_path_factory.mktemp("killed"), f"tollgate-killed-{os.getpid()}")
    started: EmbeddedCluster | None = None
    try:
        real = RealCluster(killed)
        real.apply(*envoy_pod("envoy-orphan"))
        orphan_ip = real.ready_pod("envoy-orphan")["status"]["podIP"]
        watchdog = killed.watchdog_pid()  # killed with the run, or it would start the node's processes again
        assert watchdog is not None
        os.kill(watchdog, signal.SIGKILL)
        for name in ("kubelet", "kube-proxy", "containerd"):
            pid = killed.node().pid(name)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
        assert http_get(f"http://{orphan_ip}:9901/ready").strip() == "LIVE", "the orphaned container still runs"
        started = create_cluster(tmp_path_factory.mktemp("after"), f"tollgate-after-{os.getpid()}")
        assert RealCluster(started).get("pods", "-n", "default")["items"] == []
    finally:
        for cluster in (started, killed):
            if cluster is not None:
                cluster.down()
    assert node.host_fingerprint() == host_before
