"""The allocator's Envoy Deployments on the real node: a load balancer's Envoy runs as a container of the Envoy
image from the bootstrap the allocator rendered from its service group's template, is served by a real xds as
the pod it is, and the load balancer reports its proxy ready."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.cli.epicctl import main as epicctl_main
from tollgate.models.envoy import ADMIN_PORT, BOOTSTRAP_KEY, XDS_CLUSTER
from tollgate.models.epic import GROUP, LOAD_BALANCER_LABEL, VERSION
from tollgate.testing import node
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.wait import eventually
from tollgate.testing.xds import group_bootstrap_template, start_xds, xds_settings

pytestmark = pytest.mark.e2e


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def apply(cluster: EmbeddedCluster, kind: str, namespace: str, name: str, spec: dict[str, Any]) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": namespace}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({**body, "spec": spec}))


@pytest.fixture
def account_namespace(cluster: EmbeddedCluster) -> Iterator[str]:
    """A fresh account made with epicctl, as a user makes one; its namespace, deleted afterwards."""
    name = f"acme-{uuid.uuid4().hex[:6]}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert epicctl_main(["create", "user-namespace", name, "--kubeconfig", str(cluster.kubeconfig)]) == 0
    yield f"epic-{name}"
    cluster.kubectl("patch", "account", name, "-n", f"epic-{name}", "--type=merge", "-p",
                    '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    cluster.kubectl("delete", "namespace", f"epic-{name}", "--wait=false", check=False)


async def test_a_load_balancers_envoy_runs_the_groups_bootstrap_and_is_served_as_its_pod(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    account_namespace: str,
    run_service: ServiceFactory,
    tmp_path: Path,
) -> None:
    namespace = account_namespace
    xds_env = xds_settings(cluster.host_address)
    xds = start_xds(run_service, xds_env)
    xds_address = f"{cluster.host_address}:{xds_env['TOLLGATE_XDS_GRPC_PORT']}"
    run_service(
        "allocator",
        rbac=True,
        env=allocator_env(tls_endpoint(tmp_path / "tls"), TOLLGATE_ALLOCATOR_XDS_ADDRESS=xds_address),
    )

    text = group_bootstrap_template()
    apply(cluster, "LBServiceGroup", namespace, "web", {"envoy-replica-count": 1, "envoy-bootstrap": text})
    public_address = cluster.public_addresses()[0]
    apply(
        cluster,
        "LoadBalancer",
        namespace,
        "edge",
        {"public-address": public_address, "public-ports": [{"port": 80}], "service-group": "web"},
    )

    async def envoy_answers() -> tuple[client.V1Pod, Any] | None:
        for pod in core.list_namespaced_pod(namespace, label_selector=f"{LOAD_BALANCER_LABEL}=edge").items:
            if pod.status.pod_ip:
                with contextlib.suppress(OSError):
                    return pod, fetch_json(f"http://{pod.status.pod_ip}:{ADMIN_PORT}/server_info")
        return None

    pod, info = await eventually(envoy_answers, "the load balancer's Envoy container to answer on its admin port", 90)
    assert pod.spec.node_name == node.NODE_NAME, "a container on the real node"
    node_id = f"{pod.metadata.name}.{namespace}"
    # The identity Envoy uses: the Deployment's --service-node (the pod's name and namespace, expanded by the
    # kubelet) over the template's `node`; the load balancer's name as its cluster.
    assert (info["node"]["id"], info["node"]["cluster"]) == (node_id, "edge")
    dump = await asyncio.to_thread(fetch_json, f"http://{pod.status.pod_ip}:{ADMIN_PORT}/config_dump")
    bootstrap = next(c for c in dump["configs"] if c["@type"].endswith("BootstrapConfigDump"))["bootstrap"]
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
    xds_cluster = next(c for c in bootstrap["static_resources"]["clusters"] if c["name"] == XDS_CLUSTER)
    socket = xds_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert f"{socket['address']}:{socket['port_value']}" == xds_address
    config_map = core.read_namespaced_config_map("edge-envoy", namespace)
    assert yaml.safe_load(config_map.data[BOOTSTRAP_KEY])["static_resources"]["clusters"][0]["name"] == XDS_CLUSTER

    async def served() -> bool:
        return any(s["in_sync"] for s in await asyncio.to_thread(xds.api, f"/debug/envoys/{node_id}"))

    await eventually(served, "xds to serve the Envoy as its pod, in sync", timeout=30, ignore=(OSError,))

    async def proxy_ready() -> bool:
        lb: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "loadbalancers", "edge")  # type: ignore[assignment]
        return any(
            c["type"] == "ProxyReady" and c["status"] == "True" for c in lb.get("status", {}).get("conditions", [])
        )

    await eventually(proxy_ready, "the load balancer's ProxyReady condition", timeout=30)
