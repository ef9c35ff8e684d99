"""The embedded kubelet (tollgate.testing.kubelet) runs the charts' Deployments as real processes.

The jobs and webhook charts are rendered with helm and applied as they are (the webhook configurations only
narrowed to this test's objects); the kubelet, a subprocess, runs their pods. What each process sees is read
from inside its own mount namespace (nsenter --root), as the process itself sees it.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.rbac import NAMESPACE, RBAC_KINDS, render_chart
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for

CONFIG = "kubelet-e2e"
# Run inside a container (as its user, with its KUBERNETES_SERVICE_* variables): who the mounted token is,
# through the standard in-cluster config, and what the hosts file and the Service's ClusterIP lead to.
IN_CLUSTER = """
import json, socket, urllib.request
from kubernetes import client, config
config.load_incluster_config()
body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
review = json.loads(client.AuthenticationV1Api().create_self_subject_review(body, _preload_content=False).data)
service = "tollgate-jobs.tollgate-system.svc"
print(json.dumps({
    "user": review["status"]["userInfo"]["username"],
    "service_address": socket.gethostbyname(service),
    "readyz_by_name": urllib.request.urlopen(f"http://{service}:8080/readyz", timeout=5).status,
}))
"""


@pytest.fixture
def kubelet(request: pytest.FixtureRequest, cluster: EmbeddedCluster, tmp_path: Path) -> Iterator[ServiceProcess]:
    env = {
        "TOLLGATE_KUBELET_STATE_DIR": str(tmp_path / "state"),
        "TOLLGATE_KUBELET_LOG_DIR": str(tmp_path / "pods"),
        "TOLLGATE_KUBELET_RESTART_BACKOFF_BASE": "0.5",
        "TOLLGATE_KUBELET_SYNC_SECONDS": "0.5",
    }
    process = ServiceProcess("kubelet", cluster.kubeconfig, tmp_path / "logs", env, module="tollgate.testing.kubelet")
    process.start().wait_ready()
    yield process
    process.stop()
    if getattr(getattr(request.node, "report_call", None), "failed", True):
        print(f"\n----- kubelet ({process.log_path}) -----\n{process.logs()[-20000:]}")
        for log in sorted((tmp_path / "pods").glob("*.log")):
            print(f"\n----- {log.name} -----\n{log.read_text(errors='replace')[-8000:]}")


def apply(cluster: EmbeddedCluster, objects: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def delete(cluster: EmbeddedCluster, objects: list[dict[str, Any]]) -> None:
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(objects))


def workload(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a test deletes afterwards: everything but the RBAC objects, which other tests apply too."""
    return [o for o in objects if o["kind"] not in RBAC_KINDS]


def the_pod(core: client.CoreV1Api, app: str) -> client.V1Pod | None:
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={app}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    return live[0] if len(live) == 1 else None


def ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def running(pod: client.V1Pod) -> bool:
    return bool(pod.status.container_statuses) and pod.status.container_statuses[0].state.running is not None


def pid_of(pod_name: str) -> int:
    """The process of the pod's container: the one whose HOSTNAME is the pod's name."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"HOSTNAME={pod_name}".encode() in environ.read_bytes().split(b"\0"):
                return int(environ.parent.name)
        except OSError:
            continue
    raise LookupError(f"no process of pod {pod_name}")


def process_env(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in entries if b"=" in entry)


def inside(pid: int, *argv: str, as_process_user: bool = False, env: dict[str, str] | None = None) -> str:
    """Run argv in the mount and UTS namespaces and root directory of process `pid` (as its user, if asked)."""
    enter = ["nsenter", "-t", str(pid), "-m", "-u", "-r", "-w"]
    if as_process_user:
        status = Path(f"/proc/{pid}/status").read_text()
        uid, gid = (
            next(line.split()[1] for line in status.splitlines() if line.startswith(k)) for k in ("Uid:", "Gid:")
        )
        enter += ["-S", uid, "-G", gid]
    result = subprocess.run([*enter, *argv], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return None


def test_the_jobs_chart_runs_as_a_process_under_its_service_account(
    cluster: EmbeddedCluster, core: client.CoreV1Api, kubelet: ServiceProcess
) -> None:
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG, "namespace": NAMESPACE}}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CONFIG, "namespace": NAMESPACE}}
    apply(cluster, [{**config_map, "data": {"greeting": "hello"}}, {**secret, "stringData": {"password": "s3cret"}}])
    values = {
        "extraEnv": [
            {"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": CONFIG, "key": "greeting"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": CONFIG, "key": "password"}}},
        ],
        "extraVolumes": [
            {"name": "config", "configMap": {"name": CONFIG}},
            {"name": "secret", "secret": {"secretName": CONFIG, "defaultMode": 0o440}},
        ],
        "extraVolumeMounts": [
            {"name": "config", "mountPath": "/etc/kubelet-e2e/config"},
            {"name": "secret", "mountPath": "/etc/kubelet-e2e/secret", "readOnly": True},
        ],
    }
    objects = render_chart("jobs", values=values)
    apply(cluster, objects)
    try:
        # Ready only after the process's /readyz answered: not Ready while the process already runs.
        seen_running_unready = False
        deadline = time.monotonic() + 90
        while (pod := the_pod(core, "tollgate-jobs")) is None or not ready(pod):
            seen_running_unready |= pod is not None and running(pod)
            assert time.monotonic() < deadline, f"the jobs pod never became Ready: {pod and pod.status}"
            time.sleep(0.1)
        assert seen_running_unready, "the pod was never seen running and not Ready"
        name, pod_ip = str(pod.metadata.name), str(pod.status.pod_ip)
        assert http_status(f"http://{pod_ip}:8080/readyz") == 200
        # Its listeners bound the pod IP, not 0.0.0.0 (another loopback address of the node reaches nothing).
        assert http_status(f"http://{pod_ip.rsplit('.', 1)[0]}.250:8080/readyz") is None

        pid = pid_of(name)
        env = process_env(pid)
        assert (env["GREETING"], env["PASSWORD"], env["POD_NAMESPACE"]) == ("hello", "s3cret", NAMESPACE)
        assert "Uid:\t10001\t" in Path(f"/proc/{pid}/status").read_text()  # the chart's runAsUser
        assert inside(pid, "cat", "/etc/kubelet-e2e/config/greeting", as_process_user=True) == "hello"
        assert inside(pid, "cat", "/etc/kubelet-e2e/secret/password", as_process_user=True) == "s3cret"

        service_env = {key: value for key, value in env.items() if key.startswith("KUBERNETES_SERVICE_")}
        seen = json.loads(inside(pid, sys.executable, "-c", IN_CLUSTER, as_process_user=True, env=service_env))
        cluster_ip = core.read_namespaced_service("tollgate-jobs", NAMESPACE).spec.cluster_ip
        assert seen == {
            "user": f"system:serviceaccount:{NAMESPACE}:tollgate-jobs",
            "service_address": cluster_ip,
            "readyz_by_name": 200,
        }

        # A ConfigMap volume follows the ConfigMap (one atomic swap of ..data), as the kubelet's does.
        apply(cluster, [{**config_map, "data": {"greeting": "hello again"}}])
        wait_for(
            lambda: inside(pid, "cat", "/etc/kubelet-e2e/config/greeting") == "hello again",
            "the ConfigMap volume to be updated",
            timeout=30,
        )

        # Deleting the pod stops the process, and the kubelet then deletes the pod for good, well within its
        # 30 s grace period.
        started = time.monotonic()
        core.delete_namespaced_pod(name, NAMESPACE)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), "the process of the deleted pod to exit", timeout=30)

        def gone() -> bool:
            try:
                core.read_namespaced_pod(name, NAMESPACE)
            except client.ApiException as error:
                return bool(error.status == 404)
            return False

        wait_for(gone, "the deleted pod to be removed", timeout=30)
        assert time.monotonic() - started < 25
    finally:
        delete(cluster, [*workload(objects), config_map, secret])


def test_the_api_server_calls_the_webhook_pod_through_its_service(
    cluster: EmbeddedCluster, core: client.CoreV1Api, custom: client.CustomObjectsApi, kubelet: ServiceProcess
) -> None:
    if not ipaddress.ip_address(str(core.read_namespaced_service("kubernetes", "default").spec.cluster_ip)).is_loopback:
        pytest.skip("this cluster's ClusterIPs are not loopback addresses: it predates cluster.SERVICE_CIDR")
    label = uuid.uuid4().hex[:8]
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    objects = render_chart("webhook", values={"replicaCount": 1})  # one pod, the one the kubelet runs
    for configuration in (o for o in objects if o["kind"].endswith("WebhookConfiguration")):
        for hook in configuration["webhooks"]:
            hook["objectSelector"] = {"matchLabels": {"kubelet.tollgate.io/test": label}}
    apply(cluster, objects)
    try:
        wait_for(lambda: (pod := the_pod(core, "tollgate-webhook")) and ready(pod), "the webhook pod", timeout=90)
        goop = {
            "apiVersion": "goop.example.com/v1alpha1",
            "kind": "Goop",
            "metadata": {"name": "blank", "namespace": "default", "labels": {"kubelet.tollgate.io/test": label}},
            "spec": {"jobCount": 1, "cmd": " "},
        }

        def refusal() -> str:
            try:
                custom.create_namespaced_custom_object(
                    "goop.example.com", "v1alpha1", "default", "goops", goop, dry_run="All"
                )
            except client.ApiException as error:
                return str(error.body)
            return ""

        # The API server calls the webhook at its Service's ClusterIP, which the kubelet forwards to the pod.
        wait_for(lambda: "must not be blank" in refusal(), "the webhook to refuse a blank cmd", timeout=60)
        pod = the_pod(core, "tollgate-webhook")
        log = Path(kubelet.env["TOLLGATE_KUBELET_LOG_DIR"]) / f"{NAMESPACE}_{pod.metadata.name}_tollgate-webhook.log"
        assert '"denied"' in log.read_text()
    finally:
        delete(cluster, [o for o in objects if o["kind"].endswith("WebhookConfiguration")])
        delete(cluster, workload(objects))


def kubelet_pod(name: str, image: str = "ghcr.io/tollgate/jobs:dev", **container: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tollgate"}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{"name": "c", "image": image, **container}]},
    }


def test_crashes_back_off_failed_liveness_restarts_and_unknown_images_are_refused(
    core: client.CoreV1Api, namespace: str, kubelet: ServiceProcess
) -> None:
    pods = [
        kubelet_pod("crash", command=["python", "-c", "raise SystemExit(3)"]),
        kubelet_pod(
            "unhealthy",
            command=["python", "-c", "import time; time.sleep(600)"],
            livenessProbe={"tcpSocket": {"port": 9999}, "periodSeconds": 1, "failureThreshold": 2},
        ),
        kubelet_pod("foreign", image="docker.io/library/nginx:1.27"),
    ]
    for pod in pods:
        core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]

    def status(name: str) -> client.V1ContainerStatus | None:
        statuses = core.read_namespaced_pod(name, namespace).status.container_statuses
        return statuses[0] if statuses else None

    def crash_looping() -> client.V1ContainerStatus | None:
        found = status("crash")
        waiting = found and found.state.waiting
        return found if waiting and waiting.reason == "CrashLoopBackOff" and found.restart_count >= 2 else None

    crashed = wait_for(crash_looping, "the crashing container to be restarted with back-off", timeout=60)
    assert crashed.last_state.terminated.exit_code == 3
    assert "back-off" in crashed.state.waiting.message

    def restarted_by_liveness() -> client.V1ContainerStatus | None:
        found = status("unhealthy")
        return found if found and found.restart_count >= 1 else None

    killed = wait_for(restarted_by_liveness, "the container failing its liveness probe to be restarted", timeout=60)
    assert killed.last_state.terminated.exit_code == 143  # SIGTERM
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=unhealthy").items
    assert {"Unhealthy", "Killing"} <= {event.reason for event in events}

    foreign = core.read_namespaced_pod("foreign", namespace)
    waiting = foreign.status.container_statuses[0].state.waiting
    assert (foreign.status.phase, waiting.reason) == ("Pending", "ErrImagePull")
    assert "only this checkout's services run here" in waiting.message
    assert not ready(foreign)
