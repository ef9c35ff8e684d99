"""The embedded cluster itself: a real API server with simulated nodes, the CRDs, the samples, Jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tollgate.models import ALL_KINDS
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.compare import assert_contains
from tollgate.testing.requirements import nonempty
from tollgate.testing.tools import repo_root, versions
from tollgate.testing.wait import wait_for

SAMPLES = repo_root() / "deploy" / "samples"
# The namespaces and prerequisites first, the way a user applies them.
ORDERED = nonempty(
    sorted(SAMPLES.glob("*.yaml"), key=lambda p: (not p.name.startswith("epic-"), p.name)), "deploy/samples/*.yaml"
)


def test_nodes_are_simulated_with_loopback_pod_cidrs(core: client.CoreV1Api) -> None:
    nodes = core.list_node(label_selector="type=kwok").items
    assert len(nodes) == 3
    for node in nodes:
        assert node.spec.provider_id.startswith("digitalocean://")
        assert node.spec.pod_cidr.startswith("127.")
        assert node.metadata.labels["topology.kubernetes.io/zone"].startswith("nyc3-")
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True"
        assert any(a.type == "InternalIP" and a.address.startswith("127.") for a in node.status.addresses)


def test_server_reports_the_pinned_version(cluster: EmbeddedCluster) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == versions()["K8S_VERSION"]


def test_every_kind_is_served_with_short_names_of_its_own(cluster: EmbeddedCluster) -> None:
    table = cluster.kubectl("api-resources", "--no-headers", "-o", "wide").stdout.splitlines()
    short_names: dict[str, list[str]] = {}
    for line in table:
        fields = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS ...: short names sit between name and version.
        version_at = next(i for i, f in enumerate(fields) if "/" in f or f == "v1")
        for short in fields[1:version_at][0].split(",") if version_at > 1 else []:
            short_names.setdefault(short, []).append(fields[0])
    for model in ALL_KINDS:
        for short in model.resource.short_names:
            assert short_names.get(short) == [model.resource.plural], f"short name {short}: {short_names.get(short)}"


def test_every_sample_applies_through_the_api_server(cluster: EmbeddedCluster) -> None:
    # The seed's EPIC document is a `kubectl get -o yaml` dump pinning resourceVersion 22829: it can create the
    # singleton, not update one an allocator (an earlier test) created. Start from no singleton, as a user would.
    cluster.kubectl("delete", "epics.epic.acnodal.io/epic", "-n", "epic", "--ignore-not-found", "--timeout=60s")
    prerequisites = [p for p in ORDERED if p.name.startswith("epic-")]
    for path in prerequisites:  # namespaces must exist before a server-side dry run inside them
        cluster.kubectl("apply", "-f", str(path))
    applied: list[Path] = []
    try:
        for path in ORDERED:
            cluster.kubectl("apply", "--dry-run=server", "-f", str(path))
            cluster.kubectl("apply", "-f", str(path))
            applied.append(path)
        for path in ORDERED:
            written = [d for d in yaml.safe_load_all(path.read_text()) if d]
            stored = json.loads(cluster.kubectl("get", "-f", str(path), "-o", "json").stdout)
            items = stored["items"] if stored.get("kind") == "List" else [stored]
            for document, item in zip(written, items, strict=True):
                assert item["metadata"]["name"] == document["metadata"]["name"]
                assert_contains(document.get("spec", {}), item.get("spec", {}), f"{path.name}: spec")
    finally:
        for path in reversed(applied):
            if path not in prerequisites:
                cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(path))


def test_schema_rejects_bad_input_naming_the_field(cluster: EmbeddedCluster, namespace: str) -> None:
    bad = {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "bad", "namespace": namespace},
        "spec": {
            "listeners": [
                {
                    "name": "l",
                    "udp": {
                        "port": 70000,
                        "cluster": {
                            "name": "c",
                            "health_check": {"interval": 100},
                            "endpoints": [{"name": "e", "host": {"address": "a"}, "port": 1}],
                        },
                    },
                }
            ]
        },
    }
    result = cluster.kubectl("apply", "-f", "-", stdin=json.dumps(bad), check=False)
    assert result.returncode != 0
    assert "spec.listeners[0].udp.port: Invalid value: 70000" in result.stderr
    assert "spec.listeners[0].udp.cluster.health_check.interval: Invalid value: 100" in result.stderr
    assert cluster.kubectl("get", "vsvc", "bad", "-n", namespace, check=False).returncode != 0


@pytest.mark.parametrize("completions", [1, 3])
def test_a_jobs_pods_complete(kube: client.ApiClient, namespace: str, completions: int) -> None:
    batch = client.BatchV1Api(kube)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="hello"),
        spec=client.V1JobSpec(
            completions=completions,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[client.V1Container(name="hello", image="busybox", command=["echo", "hi"])],
                )
            ),
        ),
    )
    batch.create_namespaced_job(namespace, job)

    def succeeded() -> int | None:
        status = batch.read_namespaced_job_status("hello", namespace).status
        complete = any(c.type == "Complete" and c.status == "True" for c in status.conditions or [])
        return status.succeeded if complete else None

    assert wait_for(succeeded, "job hello to complete", timeout=60) == completions
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector="job-name=hello").items
    assert len(pods) == completions
    assert all(pod.status.phase == "Succeeded" and pod.status.pod_ip.startswith("127.1.") for pod in pods)
