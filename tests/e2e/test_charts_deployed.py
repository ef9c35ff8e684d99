"""The Helm charts installed as users install them (`make deploy`) on a cluster of their own, with every pod
run for real by the embedded kubelet, each service as its chart's ServiceAccount with exactly its chart's RBAC.

One module-scoped deployment; the tests run in order: admission, the data path through chart-installed
services, an upgrade that rolls the pods, and an uninstall that leaves only the CRDs (and the objects of their
kinds users made).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tollgate.testing.cluster import DEV_ENDPOINT_ALLOWED_RANGES, DEV_ENDPOINT_DENIED_RANGES, EmbeddedCluster
from tollgate.testing.echo import UDPEcho, udp_request
from tollgate.testing.rbac import default_replicas, release_namespaces
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tools import repo_root, tool, tools_bin
from tollgate.testing.wait import eventually, wait_for

SERVICES = ["webhook", "allocator", "xds", "routedip", "jobs"]
ROOT = repo_root()
UPSTREAM = "127.77.0.10"  # a simulated remote client node's endpoint
PUBLIC_ADDRESS = "127.80.250.20"  # the load balancer's: its Envoy binds it, and it is on this machine


@dataclass
class Deployment:
    cluster: EmbeddedCluster
    kubelet: ServiceProcess
    supervisor: ServiceProcess
    pods_dir: Path

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
        parts = [f"----- kubelet -----\n{self.kubelet.logs()[-6000:]}"]
        parts += [f"----- {log.name} -----\n{log.read_text(errors='replace')[-4000:]}" for log in self.pod_logs()]
        return "\n".join(parts)

    def pod_logs(self) -> list[Path]:
        return sorted(self.pods_dir.glob("*.log"))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("charts")
    cluster = EmbeddedCluster(f"tollgate-charts-{os.getpid()}", workdir / "kwok", workdir / "kubeconfig")
    processes: list[ServiceProcess] = []
    try:
        cluster.up(3)
        state = workdir / "kubelet"
        kubelet = ServiceProcess(
            "kubelet",
            cluster.kubeconfig,
            workdir / "logs",
            {
                "TOLLGATE_KUBELET_STATE_DIR": str(state),
                "TOLLGATE_KUBELET_LOG_DIR": str(workdir / "pods"),
                "TOLLGATE_KUBELET_RESTART_BACKOFF_BASE": "1",
            },
            module="tollgate.testing.kubelet",
        )
        processes.append(kubelet.start().wait_ready())
        supervisor = ServiceProcess(
            "supervisor",
            cluster.kubeconfig,
            workdir / "logs",
            {
                "TOLLGATE_SUPERVISOR_LOG_DIR": str(workdir / "envoy"),
                "TOLLGATE_SUPERVISOR_HOSTS_FILE": str(state / "hosts"),
            },
            module="tollgate.testing.supervisor",
        )
        processes.append(supervisor.start().wait_ready())
        yield Deployment(cluster, kubelet, supervisor, workdir / "pods")
    finally:
        for process in reversed(processes):
            process.stop()
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
    # The webhook's two replicas prefer different nodes: with three nodes free, they get them.
    assert len({pod["spec"]["nodeName"] for pod in deployment.ready_pods("webhook")}) == 2
    crds = json.loads(deployment.kubectl("get", "crd", "-o", "json").stdout)["items"]
    assert len(crds) == len(list((ROOT / "crds").glob("*.yaml")))


def test_chart_installed_webhook_refuses_a_bad_object_through_the_api_server(deployment: Deployment) -> None:
    deployment.kubectl("apply", "-f", str(ROOT / "deploy" / "samples" / "epic-root-account.yaml"))
    bad = {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LoadBalancer",
        "metadata": {"name": "bad", "namespace": "epic-root"},
        # Duplicate ports: a rule of the webhook's own (the CRD schema cannot say it), so only the webhook refuses.
        "spec": {"public-ports": [{"port": 80}, {"port": 80}], "service-group": "sample"},
    }
    result = deployment.kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert result.returncode != 0
    message = "spec.public-ports[1]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    assert message in result.stderr

    def webhook_denial() -> dict[str, Any] | None:
        logs = [p for p in deployment.pod_logs() if "_tollgate-webhook-" in p.name]  # either replica may answer
        lines = [json.loads(line) for log in logs for line in log.read_text().splitlines() if line.startswith("{")]
        return next((line for line in lines if line.get("outcome") == "denied" and line.get("reason") == message), None)

    denial = wait_for(webhook_denial, "the chart-installed webhook's pod to log the denial")
    assert denial["kind"] == "LoadBalancer"
    assert deployment.kubectl("get", "loadbalancer", "bad", "-n", "epic-root", check=False).returncode != 0


async def test_load_balancer_gets_envoys_from_the_chart_allocator_and_config_from_the_chart_xds(
    deployment: Deployment,
) -> None:
    lb = yaml.safe_load((ROOT / "deploy" / "samples" / "seed-loadbalancer.yaml").read_text())
    lb = copy.deepcopy(lb)
    lb["metadata"] = {"name": "charts-lb", "namespace": "epic-root"}
    lb["spec"] = {
        "public-address": PUBLIC_ADDRESS,
        "public-ports": [{"port": 5060, "protocol": "UDP"}],
        "service-group": "sample",
    }
    deployment.kubectl("apply", "-f", str(ROOT / "deploy" / "samples" / "epic-root-account.yaml"))
    # The charts' endpoint policy is a real cluster's, which refuses loopback endpoints: this machine's simulated
    # remote endpoint needs the dev policy, set through the chart values.
    upgrade(
        deployment,
        ["webhook", "allocator"],
        f"endpointPolicy.deniedRanges={{{DEV_ENDPOINT_DENIED_RANGES}}}",
        f"endpointPolicy.allowedRanges={{{DEV_ENDPOINT_ALLOWED_RANGES}}}",
    )
    async with UDPEcho(UPSTREAM, 5060, name="charts-upstream"):
        deployment.kubectl("apply", "-f", "-", stdin=json.dumps(lb))
        endpoint = {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "RemoteEndpoint",
            "metadata": {"name": "charts-lb-upstream", "namespace": "epic-root"},
            "spec": {
                "load-balancer": "charts-lb",
                "address": UPSTREAM,
                "node-address": UPSTREAM,
                "port": {"port": 5060, "protocol": "UDP"},
            },
        }
        deployment.kubectl("apply", "-f", "-", stdin=json.dumps(endpoint))

        async def live_envoy_ip() -> str | None:
            selector = "epic.acnodal.io/load-balancer=charts-lb"
            listing = deployment.kubectl("get", "pods", "-n", "epic-root", "-l", selector, "-o", "json")
            for pod in json.loads(listing.stdout)["items"]:
                ready = [c for c in pod["status"].get("conditions", []) if c["type"] == "Ready"]
                if ready and ready[0].get("reason") == "EnvoyLive":
                    return str(pod["status"]["podIP"])
            return None

        envoy_ip = await eventually(live_envoy_ip, "the chart allocator's Envoy pod to run a live Envoy", timeout=120)
        reply = await eventually(
            lambda: udp_request(PUBLIC_ADDRESS, 5060, b"through the charts", timeout=1),
            f"a datagram to {PUBLIC_ADDRESS}:5060 through the Envoy at {envoy_ip}, configured by the charts' xds",
            timeout=120,
            ignore=(TimeoutError, OSError),
        )
        assert reply == b"charts-upstream:through the charts"
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
