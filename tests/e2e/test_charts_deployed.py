"""The Helm charts installed as users install them (`make deploy`) on a cluster of their own, with every pod a
container of the image `make images` built from this checkout, on the real node (tollgate.testing.node), each
service as its chart's ServiceAccount with exactly its chart's RBAC.

One module-scoped deployment; the tests run in order: admission, the data path through chart-installed
services, an upgrade that rolls the pods, and an uninstall that leaves only the CRDs (and the objects of their
kinds users made).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tollgate.testing import node, requirements
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import TCPEcho, UDPEcho, tcp_request, udp_request
from tollgate.testing.rbac import default_replicas, release_namespaces
from tollgate.testing.tools import repo_root, tool, tools_bin
from tollgate.testing.wait import eventually, wait_for

SERVICES = ["webhook", "allocator", "xds", "routedip", "jobs"]
ROOT = repo_root()

UPSTREAM = "192.0.2.60"  # a simulated remote client node's endpoint, on the node's link
PUBLIC_ADDRESS = "192.0.2.201"  # the load balancer's: the node routes it to its Envoy pod
# The endpoint policy of this cluster: its own pod and Service ranges and the node's address refused.
DENIED_RANGES = f"{node.POD_CIDR},{node.SERVICE_CIDR},{node.NODE_IP}/32"


@dataclass
class Deployment:
    cluster: EmbeddedCluster

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, stdin=stdin, check=check)

    def make(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig), "TOLLGATE_TOOLS_BIN": str(tools_bin())}
        return subprocess.run(["make", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [str(tool("helm")), "--kubeconfig", str(self.cluster.kubeconfig), *args]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    def pods(self, service: str) -> list[dict[str, Any]]:
        namespace = release_namespaces()[f"tollgate-{service}"]
        selector = f"app.kubernetes.io/instance=tollgate-{service}"
        listing = self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
        return list(json.loads(listing.stdout)["items"])

    def ready_pods(self, service: str) -> list[dict[str, Any]]:
        return [p for p in self.pods(service) if _ready(p) and not p["metadata"].get("deletionTimestamp")]

    def logs(self) -> str:
        """What a failure should show: every pod, and the end of the kubelet's log."""
        pods = self.kubectl("get", "pods", "-A", "-o", "wide").stdout
        return f"{pods}\n----- kubelet -----\n{self.cluster.node().log_tail('kubelet', 40)}"

    def webhook_reachable(self) -> None:
        """Until the API server reaches the chart webhook through its Service: new webhook pods are Ready a moment
        before kube-proxy routes the Service to them (the API server is refused until then), as on any cluster."""
        sample = str(ROOT / "deploy" / "samples" / "clusterroutedipclass.yaml")  # cluster-scoped: needs nothing else
        wait_for(
            lambda: self.kubectl("apply", "--dry-run=server", "-f", sample, check=False).returncode == 0,
            "the API server to reach the chart webhook through its Service",
            timeout=30,
        )

    def admit(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """`kubectl apply` through the chart webhook, tried again while the API server cannot reach the webhook's
        Service (refused while kube-proxy catches up with a rollout, or a pod is briefly unready on a loaded
        machine): what the webhook answers is the result, not the way to it."""

        def answered() -> subprocess.CompletedProcess[str] | None:
            result = self.kubectl("apply", *args, stdin=stdin, check=False)
            return None if "failed calling webhook" in result.stderr else result

        return wait_for(answered, "the API server to reach the chart webhook through its Service", timeout=60)

    def pod_log_lines(self, service: str) -> list[str]:
        """The log lines of every pod of the service's chart (kubectl logs)."""
        lines = []
        for pod in self.pods(service):
            namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            lines += self.kubectl("logs", "-n", namespace, name, check=False).stdout.splitlines()
        return lines


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module", autouse=True)
def real_node_prerequisites() -> None:
    """Before the module's other fixtures: skipped without the real node, failed in CI (testing.requirements)."""
    requirements.require_real_node("tests/e2e/test_charts_deployed.py")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("charts")
    name = f"tollgate-charts-{os.getpid()}"
    cluster = EmbeddedCluster(name, workdir / "kwok", workdir / "kubeconfig", real_node=True)
    try:
        cluster.up(3)
        yield Deployment(cluster)
    finally:
        cluster.down()


def upgrade(deployment: Deployment, services: list[str], *values: str) -> None:
    """helm upgrade of the services' releases with their values and `--set` each of `values`; returns when new Ready
    pods have replaced the old ones."""
    before = {s: {p["metadata"]["uid"] for p in deployment.ready_pods(s)} for s in services}
    for service in services:
        chart = ROOT / "deploy" / "charts" / f"tollgate-{service}"
        namespace = release_namespaces()[f"tollgate-{service}"]
        sets = [part for value in values for part in ("--set", value)]
        result = deployment.helm("upgrade", f"tollgate-{service}", str(chart), "-n", namespace, "--reuse-values", *sets)
        assert result.returncode == 0, result.stderr

    def rolled() -> bool:
        return all(
            len(uids := {p["metadata"]["uid"] for p in deployment.ready_pods(s)}) == default_replicas(s)
            and not uids & before[s]
            for s in services
        )

    wait_for(rolled, f"the upgraded pods to replace the old ones and be Ready\n{deployment.logs()}", timeout=180)
    if "webhook" in services:
        deployment.webhook_reachable()


def wait_all_ready(deployment: Deployment, timeout: float = 240) -> None:
    for service in SERVICES:
        wait_for(
            lambda service=service: len(deployment.ready_pods(service)) == default_replicas(service),  # type: ignore[misc]
            f"the {default_replicas(service)} Ready pods of the {service} chart\n{deployment.logs()}",
            timeout=timeout,
            interval=1,
        )


def test_make_deploy_on_a_cluster_make_dev_used_stops_at_its_webhook_registration(deployment: Deployment) -> None:
    """`make dev` and `tilt up` leave their cluster running, with the CRDs applied and the webhook process's own
    registration. The CRDs are taken over by the chart (next test); the registration the chart cannot patch into
    its own, so `make deploy` names it and stops before installing anything."""
    deployment.kubectl("apply", "-f", str(ROOT / "crds"))
    registration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "tollgate-webhook"},
        "webhooks": [],
    }
    deployment.kubectl("apply", "-f", "-", stdin=json.dumps(registration))
    result = deployment.make("deploy")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "this cluster has the webhook registration of make dev or tilt up" in result.stderr
    removal = "kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration tollgate-webhook"
    assert removal in result.stderr
    assert deployment.helm("list", "--all-namespaces", "--short").stdout.strip() == ""
    deployment.kubectl("delete", "mutatingwebhookconfiguration", "tollgate-webhook")


def test_make_deploy_installs_every_chart_and_every_pod_becomes_ready(deployment: Deployment) -> None:
    result = deployment.make("deploy")
    assert result.returncode == 0, result.stdout + result.stderr
    wait_all_ready(deployment)
    for service in SERVICES:
        for pod in deployment.ready_pods(service):
            assert pod["spec"]["serviceAccountName"] == f"tollgate-{service}"
            statuses = pod["status"]["containerStatuses"]
            assert [s["ready"] for s in statuses] == [True], statuses
            assert pod["spec"]["nodeName"] == node.NODE_NAME  # KWOK's nodes are tainted: only the real node runs pods
            assert statuses[0]["image"] == f"ghcr.io/tollgate/{service}:dev"
            assert statuses[0]["containerID"].startswith("containerd://")
    crds = json.loads(deployment.kubectl("get", "crd", "-o", "json").stdout)["items"]
    assert len(crds) == len(list((ROOT / "crds").glob("*.yaml")))


def test_chart_installed_webhook_refuses_a_bad_object_through_the_api_server(deployment: Deployment) -> None:
    deployment.webhook_reachable()
    assert deployment.admit("-f", str(ROOT / "deploy" / "samples" / "epic-root-account.yaml")).returncode == 0
    bad = {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LoadBalancer",
        "metadata": {"name": "bad", "namespace": "epic-root"},
        # Duplicate ports: a rule of the webhook's own (the CRD schema cannot say it), so only the webhook refuses.
        "spec": {"public-ports": [{"port": 80}, {"port": 80}], "service-group": "sample"},
    }
    result = deployment.admit("-f", "-", stdin=json.dumps(bad))
    assert result.returncode != 0
    message = "spec.public-ports[1]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    assert message in result.stderr

    def webhook_denial() -> dict[str, Any] | None:
        # Either replica may answer.
        lines = [json.loads(line) for line in deployment.pod_log_lines("webhook") if line.startswith("{")]
        return next((line for line in lines if line.get("outcome") == "denied" and line.get("reason") == message), None)

    denial = wait_for(webhook_denial, "the chart-installed webhook's pod to log the denial")
    assert denial["kind"] == "LoadBalancer"
    assert deployment.kubectl("get", "loadbalancer", "bad", "-n", "epic-root", check=False).returncode != 0


def remote_endpoint(port: int, protocol: str) -> dict[str, Any]:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "RemoteEndpoint",
        "metadata": {"name": f"charts-lb-{protocol.lower()}", "namespace": "epic-root"},
        "spec": {
            "load-balancer": "charts-lb",
            "address": UPSTREAM,
            "node-address": UPSTREAM,
            "port": {"port": port, "protocol": protocol},
        },
    }


async def test_load_balancer_gets_envoy_containers_from_the_chart_allocator_that_carry_udp_and_tcp(
    deployment: Deployment,
) -> None:
    """The chart allocator's Envoy Deployment runs unchanged on the Envoy image (the service group's default); the
    Envoy container finds the chart xds by its Service name (CoreDNS), passes the identity check from its pod
    address, binds the public address (on the pod and routed to it by the node, as EPIC's Multus attachment does:
    docs/real-node.md) and forwards datagrams and connections sent there from the host to the endpoints."""
    lb = yaml.safe_load((ROOT / "deploy" / "samples" / "seed-loadbalancer.yaml").read_text())
    lb = copy.deepcopy(lb)
    lb["metadata"] = {"name": "charts-lb", "namespace": "epic-root"}
    lb["spec"] = {
        "public-address": PUBLIC_ADDRESS,
        "public-ports": [{"port": 5060, "protocol": "UDP"}, {"port": 7070, "protocol": "TCP"}],
        "service-group": "sample",
    }
    assert deployment.admit("-f", str(ROOT / "deploy" / "samples" / "epic-root-account.yaml")).returncode == 0
    # The charts' default endpoint policy names the usual cluster ranges: this cluster's are set through the values.
    upgrade(deployment, ["webhook", "allocator"], f"endpointPolicy.deniedRanges={{{DENIED_RANGES}}}")
    in_pod_range = {**remote_endpoint(5060, "UDP"), "metadata": {"name": "in-pods", "namespace": "epic-root"}}
    in_pod_range["spec"] = {**in_pod_range["spec"], "address": "198.18.0.200", "node-address": "198.18.0.200"}
    refused = deployment.admit("-f", "-", stdin=json.dumps(in_pod_range))
    assert refused.returncode != 0 and "spec.address" in refused.stderr, refused.stderr
    deployment.cluster.node().add_address(UPSTREAM)
    async with UDPEcho(UPSTREAM, 5060, name="udp-upstream"), TCPEcho(UPSTREAM, 7070, name="tcp-upstream"):
        objects = [lb, remote_endpoint(5060, "UDP"), remote_endpoint(7070, "TCP")]
        applied = deployment.admit("-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objects))
        assert applied.returncode == 0, applied.stderr

        async def ready_envoy() -> dict[str, Any] | None:
            selector = "epic.acnodal.io/load-balancer=charts-lb"
            listing = deployment.kubectl("get", "pods", "-n", "epic-root", "-l", selector, "-o", "json")
            ready = [p for p in json.loads(listing.stdout)["items"] if _ready(p)]
            return ready[0] if ready else None

        pod = await eventually(ready_envoy, f"the chart allocator's Envoy container Ready\n{deployment.logs()}", 120)
        envoy_ip = pod["status"]["podIP"]
        assert pod["spec"]["containers"][0]["image"] == "envoyproxy/envoy:v1.40.0"
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
        for protocol, port in (("udp", 5060), ("tcp", 7070)):
            request = udp_request if protocol == "udp" else tcp_request
            payload = f"over {protocol}".encode()
            reply = await eventually(
                lambda request=request, port=port, payload=payload: request(PUBLIC_ADDRESS, port, payload, timeout=1),  # type: ignore[misc]
                f"{protocol} to {PUBLIC_ADDRESS}:{port} through the Envoy container at {envoy_ip}",
                timeout=120,
                ignore=(TimeoutError, OSError),
            )
            assert reply == f"{protocol}-upstream:over {protocol}".encode()


def test_epicctl_proxy_status_reaches_every_xds_replica_through_the_api_servers_pods_proxy(
    deployment: Deployment,
) -> None:
    """Without --xds-url: epicctl finds the xds pods, mints a debug token, and asks each replica's debug API through
    `pods/<pod>/proxy` (the chart's debug API on the pod's address); the load balancer's Envoy shows SYNCED."""
    upgrade(deployment, ["xds"], "debugApi.service=true")
    env = {**os.environ, "KUBECONFIG": str(deployment.cluster.kubeconfig)}

    def synced() -> list[dict[str, Any]] | None:
        command = [sys.executable, "-m", "tollgate.cli.epicctl", "proxy-status", "-o", "json"]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return None
        envoys = [e for e in json.loads(result.stdout) if e["namespace"] == "epic-root"]
        states = {t["state"] for e in envoys for t in e["types"].values()}
        return envoys if envoys and states == {"SYNCED"} else None

    (envoy,) = wait_for(synced, "epicctl proxy-status to show the Envoy container SYNCED", timeout=90, interval=1)
    assert envoy["pod"].startswith("charts-lb-envoy-")
    assert envoy["serves"], envoy
    deployment.kubectl("delete", "loadbalancer", "charts-lb", "-n", "epic-root", "--wait=true", "--timeout=60s")


def test_helm_upgrade_with_a_changed_value_rolls_the_pods_and_they_come_back_ready(deployment: Deployment) -> None:
    upgrade(deployment, ["jobs", "xds"], "logLevel=DEBUG")
    (pod,) = deployment.ready_pods("jobs")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["TOLLGATE_JOBS_LOG_LEVEL"] == "DEBUG"


def test_helm_uninstall_of_every_release_leaves_only_the_crds(deployment: Deployment) -> None:
    result = deployment.make("undeploy")
    assert result.returncode == 0, result.stdout + result.stderr
    namespaces = set(release_namespaces().values())

    def leftovers() -> list[str]:
        found = []
        for namespace in namespaces:
            for kind in ("deployments", "pods", "services", "serviceaccounts", "secrets", "configmaps", "leases",
                         "roles", "rolebindings"):  # fmt: skip
                listing = deployment.kubectl("get", kind, "-n", namespace, "-o", "json")
                for item in json.loads(listing.stdout)["items"]:
                    name = item["metadata"]["name"]
                    if (
                        name.startswith("tollgate")
                        or item["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "tollgate"
                    ):
                        found.append(f"{kind} {namespace}/{name}")
        for kind in ("clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations",
                     "validatingwebhookconfigurations"):  # fmt: skip
            listing = deployment.kubectl("get", kind, "-o", "json")
            found += [f"{kind} {i['metadata']['name']}" for i in json.loads(listing.stdout)["items"]
                      if i["metadata"]["name"].startswith("tollgate")]  # fmt: skip
        return found

    remaining = leftovers()
    deadline = time.monotonic() + 120
    while remaining and time.monotonic() < deadline:
        time.sleep(1)  # pods and Leases go when their processes have stopped
        remaining = leftovers()
    assert remaining == [], "left behind by helm uninstall"
    crds = json.loads(deployment.kubectl("get", "crd", "-o", "json").stdout)["items"]
    assert len(crds) == len(list((ROOT / "crds").glob("*.yaml"))), "the CRDs chart keeps its CRDs"
