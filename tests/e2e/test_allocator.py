"""The allocator on the embedded cluster: the seed's LoadBalancer, accounts, Envoy proxies, the registration API."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import io
import json
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from kubernetes import client
from opentelemetry import trace

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.allocator.k8s import Kube, field_is
from tollgate.allocator.reconcile import Reconciler
from tollgate.allocator.registry import Registry
from tollgate.allocator.tunnels import EpicSingleton, Metrics, SeedTunnelIDs
from tollgate.cli.epicctl import main as epicctl_main
from tollgate.models import LoadBalancer, RemoteEndpoint
from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    GROUP,
    LOAD_BALANCER_LABEL,
    USER_NAMESPACE_LABEL,
    VERSION,
    EPICSpec,
    GUEEndpoint,
)
from tollgate.runtime.kube import api_client
from tollgate.testing import agents, objects, xds
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import TLSEndpoint, allocator_env, tls_endpoint
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.watchproxy import WatchProxy

SAMPLES = repo_root() / "deploy" / "samples"
GUE_ADDRESS = "192.168.1.40"
XDS_ADDRESS = "127.0.0.1:18000"
EPIC_PORT = {"appProtocol": "gue", "port": 6080, "protocol": "UDP"}


@pytest.fixture
def allocator_tls(tmp_path: Path) -> TLSEndpoint:
    """Where the allocator serves its gRPC API, and its serving certificate (written as make dev does)."""
    return tls_endpoint(tmp_path / "allocator-tls")


@pytest.fixture
def allocator_ca(allocator_tls: TLSEndpoint) -> Path:
    """The CA of the allocator's serving certificate."""
    return allocator_tls.ca_file


@pytest.fixture
def allocator(run_service: ServiceFactory, allocator_tls: TLSEndpoint) -> tuple[ServiceProcess, int]:
    env = allocator_env(
        allocator_tls, TOLLGATE_ALLOCATOR_XDS_ADDRESS=XDS_ADDRESS, TOLLGATE_ALLOCATOR_GUE_ADDRESS=GUE_ADDRESS
    )
    return run_service("allocator", rbac=True, env=env), allocator_tls.port


Connect = Callable[[str], AllocatorClient]


@pytest.fixture
async def connect(
    allocator: tuple[ServiceProcess, int], allocator_ca: Path, core: client.CoreV1Api
) -> AsyncIterator[Connect]:
    """`connect(account)`: a client of the registration API as the account's agent has one: over TLS, with a token
    minted for the account as `epicctl credentials create` mints it."""
    opened: list[AllocatorClient] = []

    def open_as(account: str) -> AllocatorClient:
        agent = agents.Agent.mint(core, account, allocator_ca)
        opened.append(AllocatorClient(f"127.0.0.1:{allocator[1]}", agent.token, agent.channel_credentials()))
        return opened[-1]

    yield open_as
    for api in opened:
        await api.close()


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def get(custom: client.CustomObjectsApi, plural: str, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, plural, name
    )
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def epicctl(cluster: EmbeddedCluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """epicctl in this process (the console script is run once, in the account test): its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = epicctl_main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    if check and code != 0:
        raise AssertionError(f"epicctl {' '.join(args)} failed: {err.getvalue()}")
    return subprocess.CompletedProcess(["epicctl", *args], code, out.getvalue(), err.getvalue())


def user_account(cluster: EmbeddedCluster, group_spec: dict[str, Any] | None = None) -> str:
    """A fresh account made with epicctl, with a service group `web`."""
    name = f"acme-{uuid.uuid4().hex[:6]}"
    epicctl(cluster, "create", "user-namespace", name)
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LBServiceGroup",
        "metadata": {"name": "web", "namespace": f"epic-{name}"},
        "spec": group_spec or {"envoy-image": "envoyproxy/envoy:v1.40.0", "envoy-replica-count": 1},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(group))
    return name


def load_balancer(name: str, account: str, group: str = "web") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": f"epic-{account}"},
        "spec": {"public-address": "192.168.77.9", "public-ports": [{"port": 80}], "service-group": group},
    }


@pytest.fixture
def accounts(cluster: EmbeddedCluster) -> Iterator[list[str]]:
    """Accounts a test made; deleted afterwards (the allocator has stopped by then: no waiting)."""
    made: list[str] = []
    yield made
    for name in made:
        cluster.kubectl("patch", "account", name, "-n", f"epic-{name}", "--type=merge", "-p",
                        '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        cluster.kubectl("delete", "namespace", f"epic-{name}", "--wait=false", check=False)


def envoy_node_address(core: client.CoreV1Api, namespace: str, load_balancer: str) -> str | None:
    """The InternalIP of the node running the load balancer's (first scheduled) Envoy pod."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LOAD_BALANCER_LABEL}={load_balancer}").items
    scheduled = sorted((p for p in pods if p.spec.node_name), key=lambda p: str(p.metadata.name))
    if not scheduled:
        return None
    node = core.read_node(str(scheduled[0].spec.node_name))
    return next(str(a.address) for a in node.status.addresses if a.type == "InternalIP")


async def test_seed_load_balancer_applies_unchanged_and_ends_with_the_seed_status_shape(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    apps: client.AppsV1Api,
    connect: Connect,
) -> None:
    """Endpoints on the seed's two client nodes: two on 192.168.1.16 (registered over gRPC), one on 192.168.1.25
    (a RemoteEndpoint object). The status gets the seed's two entries, keyed by node, one tunnel ID each."""
    cluster.kubectl("apply", "-f", str(SAMPLES / "epic-root-account.yaml"))
    api = connect("root")
    # The seed's manifest carries a resourceVersion: it applies as a creation, not over an existing object.
    cluster.kubectl("delete", "-f", str(SAMPLES / "seed-loadbalancer.yaml"), "--ignore-not-found", "--wait")
    cluster.kubectl("apply", "-f", str(SAMPLES / "seed-loadbalancer.yaml"))
    try:
        rep = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RemoteEndpoint",
            "metadata": {"name": "seed-25", "namespace": "epic-root"},
            "spec": {
                "load-balancer": "sample-acnodal",
                "address": "127.77.42.7",
                "port": {"port": 8080},
                "node-address": "192.168.1.25",
            },
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(rep))
        first = await api.register("root", "sample-acnodal", "127.77.41.5", 8080, node_address="192.168.1.16")
        second = await api.register("root", "sample-acnodal", "127.77.41.6", 8080, node_address="192.168.1.16")
        assert first.created and second.created
        assert first.tunnel.tunnel_id == second.tunnel.tunnel_id, "endpoints on one node share its tunnel"
        assert first.tunnel.node_address == "192.168.1.16"

        async def seed_shape() -> dict[str, Any] | None:
            lb = get(custom, "loadbalancers", "epic-root", "sample-acnodal")
            entries = (lb.get("status") or {}).get("gue-tunnel-endpoints") or {}
            epic_address = envoy_node_address(core, "epic-root", "sample-acnodal")
            at_node = all(e.get("epic-address") == epic_address for e in entries.values())
            return lb if set(entries) == {"192.168.1.16", "192.168.1.25"} and at_node else None

        lb = await eventually(seed_shape, "the seed's two node entries, ending at the Envoy pod's node", timeout=30)
        entries = lb["status"]["gue-tunnel-endpoints"]
        for node in ("192.168.1.16", "192.168.1.25"):
            assert set(entries[node]) == {"epic-address", "epic-port", "tunnel-id"}, entries[node]
            assert entries[node]["epic-port"] == EPIC_PORT
        assert entries["192.168.1.16"]["tunnel-id"] == first.tunnel.tunnel_id
        assert entries["192.168.1.16"]["tunnel-id"] != entries["192.168.1.25"]["tunnel-id"]
        seed_25 = get(custom, "remoteendpoints", "epic-root", "seed-25")
        assert seed_25["status"]["tunnel-id"] == entries["192.168.1.25"]["tunnel-id"]
        assert condition(seed_25, "Ready")["reason"] == "TunnelAssigned"
        assert lb["spec"]["service-id"] == 1, "the seed's service-id, set by hand, is kept"
        epic = get(custom, "epics", "epic", "epic")
        assert epic["status"]["current-tunnel-id"] >= max(e["tunnel-id"] for e in entries.values())

        async def ready() -> dict[str, Any] | None:
            lb = get(custom, "loadbalancers", "epic-root", "sample-acnodal")
            state = condition(lb, "Ready")
            current = (lb.get("status") or {}).get("observedGeneration") == lb["metadata"]["generation"]
            return lb if state and state["status"] == "True" and current else None

        lb = await eventually(ready, "the seed's load balancer to be Ready for its current generation", timeout=30)
        assert condition(lb, "Allocated")["reason"] == "ServiceIDAllocated"
        assert condition(lb, "ProxyReady")["message"] == "1/1 Envoy replicas ready"
        assert condition(lb, "EndpointsMatched")["status"] == "True", "8888 -> targetPort 8080 reaches all three"
        deployment = apps.read_namespaced_deployment("sample-acnodal-envoy", "epic-root")
        assert deployment.spec.replicas == 1
        assert deployment.metadata.owner_references[0].uid == lb["metadata"]["uid"]
        pod = deployment.spec.template
        assert pod.metadata.labels == {
            ENVOY_PROXY_LABEL: "true",
            LOAD_BALANCER_LABEL: "sample-acnodal",
            ACCOUNT_LABEL: "root",
        }
        envoy = pod.spec.containers[0]
        assert (envoy.name, envoy.image) == ("envoy", "envoyproxy/envoy:v1.40.0")
        assert envoy.args == [
            "-c", "/etc/envoy/envoy.yaml", "--service-node", "$(POD_NAME).$(POD_NAMESPACE)",
            "--service-cluster", "sample-acnodal",
        ]  # fmt: skip

        def tunnels() -> dict[str, Any]:
            status = get(custom, "loadbalancers", "epic-root", "sample-acnodal")["status"]
            return dict(status["gue-tunnel-endpoints"])

        assert (await api.unregister("root", "sample-acnodal", "127.77.41.5", 8080)).removed == 1
        assert tunnels()["192.168.1.16"]["tunnel-id"] == first.tunnel.tunnel_id, "the node still has an endpoint"
        assert (await api.unregister("root", "sample-acnodal", "127.77.41.6")).removed == 1
        wait_for(lambda: "192.168.1.16" not in tunnels(), "the node's tunnel to go with its last endpoint", timeout=30)
        cluster.kubectl("delete", "remoteendpoint", "seed-25", "-n", "epic-root")
        wait_for(lambda: "192.168.1.25" not in tunnels(), "a deleted RemoteEndpoint's node tunnel to go", timeout=30)
    finally:
        cluster.kubectl("delete", "-f", str(SAMPLES / "seed-loadbalancer.yaml"), "--ignore-not-found")
        cluster.kubectl("delete", "remoteendpoint", "seed-25", "-n", "epic-root", "--ignore-not-found")


@pytest.fixture(scope="session")
def apps(kube: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(kube)


async def test_service_group_settings_reach_the_proxies_and_a_group_in_use_stays(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    apps: client.AppsV1Api,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    resources = {"requests": {"cpu": "200m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    group = {"envoy-image": "envoyproxy/envoy:v1.40.0", "envoy-replica-count": 2, "envoy-resources": resources}
    account = user_account(cluster, group)
    accounts.append(account)
    namespace = f"epic-{account}"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("settings", account)))

    def deployment() -> client.V1Deployment | None:
        try:
            return apps.read_namespaced_deployment("settings-envoy", namespace)
        except client.ApiException:
            return None

    created = wait_for(deployment, "the load balancer's Envoy Deployment", timeout=30)
    assert created.spec.replicas == 2
    envoy = created.spec.template.spec.containers[0]
    assert (envoy.resources.requests, envoy.resources.limits) == (resources["requests"], resources["limits"])
    assert get(custom, "loadbalancers", namespace, "settings")["spec"]["envoy-replica-count"] == 2, "copied"

    # The image is re-read on every change; the replica count was copied into the load balancer, as in EPIC.
    patch = {"spec": {"envoy-image": "envoyproxy/envoy:v1.41.0", "envoy-replica-count": 4}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "lbservicegroups", "web", patch)

    def rolled() -> client.V1Deployment | None:
        found = deployment()
        image = found.spec.template.spec.containers[0].image if found else None
        return found if image == "envoyproxy/envoy:v1.41.0" else None

    assert wait_for(rolled, "the Deployment to take the group's new image", timeout=30).spec.replicas == 2

    cluster.kubectl("delete", "lbservicegroup", "web", "-n", namespace, "--wait=false")

    def held() -> dict[str, Any] | None:
        state = condition(get(custom, "lbservicegroups", namespace, "web"), "Ready")
        return state if state and state["reason"] == "InUse" else None

    state = wait_for(held, "the group in use to say why it stays", timeout=30)
    assert (
        state["message"] == "in use by LoadBalancer settings: delete them first; the group goes when the last one has"
    )
    cluster.kubectl("delete", "loadbalancer", "settings", "-n", namespace)

    def gone() -> bool:
        found = cluster.kubectl("get", "lbservicegroup", "web", "-n", namespace, check=False)
        return found.returncode != 0

    wait_for(gone, "the group to go with its last load balancer", timeout=30)


async def test_a_group_in_use_stays_though_deleted_before_the_allocator_first_handled_it(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    apps: client.AppsV1Api,
    run_service: ServiceFactory,
    allocator_tls: TLSEndpoint,
    accounts: list[str],
    tmp_path: Path,
) -> None:
    """kopf puts its finalizer on a group when it first handles it. A group deleted before that (the test above,
    once its allocator's watch of groups had only just started) went at once, in use or not. Here the allocator's
    watch never delivers the group's first events: its load balancer's reconcile, which reads the group, holds it."""
    with WatchProxy(service_account_kubeconfig(cluster, "allocator", tmp_path), tmp_path) as proxy:
        proxy.drop(lambda event: event["object"].get("kind") == "LBServiceGroup")
        kubeconfig = str(proxy.kubeconfig)
        env = allocator_env(
            allocator_tls, KUBECONFIG=kubeconfig, TOLLGATE_ALLOCATOR_KUBECONFIG=kubeconfig,
            TOLLGATE_ALLOCATOR_XDS_ADDRESS=XDS_ADDRESS, TOLLGATE_ALLOCATOR_GUE_ADDRESS=GUE_ADDRESS,
        )  # fmt: skip
        run_service("allocator", env=env)
        account = f"acme-{uuid.uuid4().hex[:6]}"
        epicctl(cluster, "create", "user-namespace", account)
        accounts.append(account)
        namespace = f"epic-{account}"

        def told(group: str) -> str | None:
            """How the allocator learnt of `group`: its watch's event left out, or kopf's listing (a finalizer)."""
            if any(e["object"]["metadata"]["name"] == group for e in proxy.dropped):
                return "watch"
            finalizers = get(custom, "lbservicegroups", namespace, group)["metadata"].get("finalizers")
            return "listing" if finalizers else None

        def make_group(group: str) -> None:
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LBServiceGroup", "spec": {"envoy-replica-count": 0},
                    "metadata": {"name": group, "namespace": namespace}}  # fmt: skip
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))

        # Until the watch of groups streams, a new group reaches kopf in its first listing instead.
        for probe in ("probe-0", "probe-1"):
            make_group(probe)
            if wait_for(functools.partial(told, probe), f"the allocator to learn of {probe}", timeout=30) == "watch":
                break
        make_group("web")
        assert wait_for(functools.partial(told, "web"), "the allocator to learn of web", timeout=30) == "watch"
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("held", account)))
        wait_for(
            lambda: apps.list_namespaced_deployment(namespace).items, "the load balancer's Envoy Deployment", timeout=30
        )
        proxy.drop(None)

        cluster.kubectl("delete", "lbservicegroup", "web", "-n", namespace, "--wait=false")

        def held() -> dict[str, Any] | None:
            state = condition(get(custom, "lbservicegroups", namespace, "web"), "Ready")
            return state if state and state["reason"] == "InUse" else None

        wait_for(held, "the group in use to stay and say why", timeout=30)
        cluster.kubectl("delete", "loadbalancer", "held", "-n", namespace)
        wait_for(
            lambda: cluster.kubectl("get", "lbservicegroup", "web", "-n", namespace, check=False).returncode != 0,
            "the group to go with its last load balancer",
            timeout=30,
        )


async def test_a_load_balancer_serves_one_client_cluster_unless_its_group_can_be_shared(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    connect: Connect,
    accounts: list[str],
) -> None:
    account = user_account(cluster, {"envoy-replica-count": 0})
    accounts.append(account)
    api = connect(account)
    namespace = f"epic-{account}"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("shared", account)))

    def clusters() -> list[str]:
        return list(get(custom, "loadbalancers", namespace, "shared").get("status", {}).get("upstream-clusters", []))

    await api.register(account, "shared", "127.77.2.1", 80, node_address="127.77.2.100", cluster="east")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.register(account, "shared", "127.77.2.2", 80, node_address="127.77.2.200", cluster="west")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert raised.value.details() == (
        "cluster: load balancer 'shared' serves cluster 'east', and its service group 'web' cannot be shared "
        "(can-be-shared: false)"
    )
    names = [r["metadata"]["name"] for r in custom.list_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                               "remoteendpoints")["items"]]  # fmt: skip
    assert names == ["shared-127-77-2-1-80-tcp"], "the refused registration left nothing behind"
    assert clusters() == ["east"]

    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "lbservicegroups", "web",
                                          {"spec": {"can-be-shared": True}})  # fmt: skip
    await api.register(account, "shared", "127.77.2.2", 80, node_address="127.77.2.200", cluster="west")
    assert clusters() == ["east", "west"]
    assert (await api.unregister(account, "shared", "127.77.2.1")).deleted
    wait_for(lambda: clusters() == ["west"], "east to leave with its last endpoint", timeout=30)


async def test_a_gwproxy_gets_envoys_like_a_load_balancer(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    apps: client.AppsV1Api,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    account = user_account(cluster, {"envoy-replica-count": 1})
    accounts.append(account)
    namespace = f"epic-{account}"
    gwproxy = yaml.safe_load((SAMPLES / "gwproxy.yaml").read_text())
    gwproxy["metadata"] = {"name": "gateway", "namespace": namespace}
    gwproxy["spec"]["service-group"] = "web"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(gwproxy))
    # A load balancer of the same name: the two proxies' Deployments do not collide.
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("gateway", account)))

    async def ready() -> dict[str, Any] | None:
        obj = get(custom, "gwproxies", namespace, "gateway")
        state = condition(obj, "Ready")
        return obj if state and state["status"] == "True" else None

    obj = await eventually(ready, "the GWProxy to be Ready", timeout=60)
    assert condition(obj, "ProxyReady")["message"] == "1/1 Envoy replicas ready"
    assert obj["spec"]["envoy-replica-count"] == 1, "copied from the group"
    deployment = apps.read_namespaced_deployment("gateway-gwproxy-envoy", namespace)
    assert deployment.spec.template.metadata.labels == {
        ENVOY_PROXY_LABEL: "true",
        "epic.acnodal.io/gwproxy": "gateway",
        ACCOUNT_LABEL: account,
    }
    assert deployment.metadata.owner_references[0].kind == "GWProxy"
    lb_proxy = wait_for(
        lambda: apps.list_namespaced_deployment(namespace, label_selector=f"{LOAD_BALANCER_LABEL}=gateway").items,
        "the load balancer's own Deployment",
        timeout=30,
    )
    assert [d.metadata.name for d in lb_proxy] == ["gateway-envoy"]


async def test_account_lifecycle_user_namespaces_service_ids_and_cleanup(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    first, second = user_account(cluster), user_account(cluster)
    accounts += [first, second]
    namespace = f"epic-{first}"
    labels = core.read_namespace(namespace).metadata.labels
    assert labels[USER_NAMESPACE_LABEL] == "true"
    assert labels[ACCOUNT_LABEL] == first

    async def account_ready() -> dict[str, Any] | None:
        account = get(custom, "accounts", namespace, first)
        state = condition(account, "Ready")
        return account if state and state["status"] == "True" else None

    account = await eventually(account_ready, "the account to be Ready", timeout=30)
    assert account["status"]["namespace"] == namespace
    assert "tollgate.io/finalizer" in account["metadata"]["finalizers"]

    for name, where in (("one", first), ("two", first), ("other", second)):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer(name, where)))

    def service_ids() -> dict[str, int] | None:
        found = {}
        for name, where in (("one", first), ("two", first), ("other", second)):
            spec = get(custom, "loadbalancers", f"epic-{where}", name)["spec"]
            if "service-id" not in spec:
                return None
            found[name] = spec["service-id"]
        return found

    ids = wait_for(service_ids, "service IDs for every load balancer", timeout=30)
    assert sorted([ids["one"], ids["two"]]) == [1, 2], "unique within the account"
    assert ids["other"] == 1, "accounts are independent of each other"
    assert get(custom, "accounts", namespace, first)["status"]["current-service-id"] == 2

    listed = json.loads(epicctl(cluster, "get", "loadbalancers", "-a", first, "-o", "json").stdout)
    assert sorted(lb["metadata"]["name"] for lb in listed["items"]) == ["one", "two"]
    script = Path(sys.executable).with_name("epicctl")
    command = [str(script), "get", "accounts", "--kubeconfig", str(cluster.kubeconfig)]
    listing = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=True)
    table = listing.stdout.splitlines()
    assert table[0].split() == ["NAME", "NAMESPACE", "READY", "AGE"]
    assert any(line.split()[:3] == [first, namespace, "True"] for line in table[1:])
    described = epicctl(cluster, "describe", "lb", "one", "-a", first).stdout
    assert f"Account:         {first}" in described
    assert "ServiceIDAllocated" in described
    missing = epicctl(cluster, "describe", "lb", "nope", "-a", first, check=False)
    assert missing.returncode == 3
    assert missing.stderr.strip() == f"epicctl: load balancer 'nope' not found in account {first}"

    # Something else holds one load balancer: the account waits for it and says so.
    cluster.kubectl("patch", "lb", "one", "-n", namespace, "--type=merge", "-p",
                    '{"metadata":{"finalizers":["example.com/hold"]}}')  # fmt: skip
    cluster.kubectl("delete", "account", first, "-n", namespace, "--wait=false")

    async def blocked() -> dict[str, Any] | None:
        state = condition(get(custom, "accounts", namespace, first), "Ready")
        return state if state and state["reason"] == "CleanupPending" else None

    state = await eventually(blocked, "the account to report what blocks its deletion", timeout=30)
    assert state["status"] == "False"
    assert "LoadBalancer one (example.com/hold)" in state["message"]
    assert "LBServiceGroup web (tollgate.io/finalizer)" in state["message"], "the group waits for its load balancer"

    cluster.kubectl("patch", "lb", "one", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')

    def namespace_going() -> bool:
        try:
            return bool(core.read_namespace(namespace).status.phase == "Terminating")
        except client.ApiException as error:
            return bool(error.status == 404)

    wait_for(namespace_going, "the user namespace to be deleted with its account", timeout=30)
    other = get(custom, "loadbalancers", f"epic-{second}", "other")
    assert other["spec"]["service-id"] == 1, "the other account is untouched"


async def test_a_load_balancer_reconciled_twice_at_once_gets_one_service_id(
    cluster: EmbeddedCluster, custom: client.CustomObjectsApi, accounts: list[str]
) -> None:
    """Its own handler and its account's (or group's) reconcile can reach a new load balancer at the same moment,
    each with a body that has no service ID yet: the account's counter moves once, and the ID it gave stays."""
    account = user_account(cluster)
    accounts.append(account)
    namespace = f"epic-{account}"
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("twice", account)))
    body = get(custom, "loadbalancers", namespace, "twice")
    assert "service-id" not in body["spec"]

    kube = Kube(api_client(cluster.kubeconfig))
    gue = GUEEndpoint(epic_address=GUE_ADDRESS)
    epic = EpicSingleton(kube, EPICSpec(gue_endpoint=gue))
    await epic.ensure()
    metrics = Metrics()
    reconciler = Reconciler(
        kube, Registry(kube, SeedTunnelIDs(epic, metrics), epic, gue), metrics, trace.get_tracer(__name__), XDS_ADDRESS
    )
    await asyncio.gather(*(reconciler.load_balancers.reconcile(copy.deepcopy(body)) for _ in range(2)))

    assert get(custom, "loadbalancers", namespace, "twice")["spec"]["service-id"] == 1
    assert get(custom, "accounts", namespace, account)["status"]["current-service-id"] == 1, "one ID taken, not two"


async def test_allocated_service_ids_skip_ids_set_by_hand_and_a_duplicate_set_by_hand_is_named(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    """The seed's algorithm: the account's counter plus one, skipping IDs that users set by hand; a load balancer
    given by hand an ID an older one holds is not Allocated, and says which one holds it."""
    account = user_account(cluster)
    accounts.append(account)
    namespace = f"epic-{account}"
    manual = load_balancer("manual", account)
    manual["spec"]["service-id"] = 2
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(manual))

    def allocated(name: str) -> dict[str, Any] | None:
        lb = get(custom, "loadbalancers", namespace, name)
        return lb if (condition(lb, "Allocated") or {}).get("status") == "True" else None

    wait_for(lambda: allocated("manual"), "the load balancer with an ID set by hand to be Allocated", timeout=30)
    for name in ("auto-a", "auto-b"):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer(name, account)))
    ids = [
        wait_for(functools.partial(allocated, name), f"{name} to be Allocated", timeout=30)["spec"]["service-id"]
        for name in ("auto-a", "auto-b")
    ]
    assert sorted(ids) == [1, 3], "2 is set by hand: the counter passes over it"
    assert get(custom, "accounts", namespace, account)["status"]["current-service-id"] == 3

    late = load_balancer("late", account)
    late["spec"]["service-id"] = 2
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(late))

    def refused() -> dict[str, Any] | None:
        state = condition(get(custom, "loadbalancers", namespace, "late"), "Allocated") or {}
        return state if state.get("reason") == "DuplicateServiceID" else None

    state = wait_for(refused, "the second load balancer with ID 2 to be refused", timeout=30)
    assert state["status"] == "False"
    assert "'manual'" in state["message"], state["message"]
    assert condition(get(custom, "loadbalancers", namespace, "manual"), "Allocated")["status"] == "True"


async def test_deleting_an_account_keeps_a_namespace_tollgate_did_not_create(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    """The user made the namespace (kubectl, not epicctl) and keeps their own things in it: deleting the Account
    removes tollgate's objects and leaves the namespace and the rest."""
    name = f"own-{uuid.uuid4().hex[:6]}"
    namespace = f"epic-{name}"
    accounts.append(name)
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "configmap", "theirs", "-n", namespace, "--from-literal=keep=me")
    account = {"kind": "Account", "metadata": {"name": name, "namespace": namespace}, "spec": {}}
    group = {"kind": "LBServiceGroup", "metadata": {"name": "web", "namespace": namespace},
             "spec": {"envoy-replica-count": 0}}  # fmt: skip
    for document in ({"apiVersion": f"{GROUP}/{VERSION}", **account}, {"apiVersion": f"{GROUP}/{VERSION}", **group},
                     load_balancer("one", name)):  # fmt: skip
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(document))
    wait_for(lambda: get(custom, "loadbalancers", namespace, "one")["spec"].get("service-id"), "a service ID")

    cluster.kubectl("delete", "account", name, "-n", namespace, "--wait=false")

    def kept() -> str | None:
        listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        return next((e.message for e in listed if e.reason == "UserNamespaceKept"), None)

    message = wait_for(kept, "the account to say it kept the namespace", timeout=30)
    assert message == f"kept the user namespace {namespace}: tollgate did not create it; its objects are gone"
    assert core.read_namespace(namespace).status.phase == "Active"
    assert core.read_namespaced_config_map("theirs", namespace).data == {"keep": "me"}
    remaining = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "loadbalancers")["items"]
    assert remaining == [], "the account's load balancer went with it"


async def test_a_load_balancer_whose_name_cannot_be_a_label_says_so_instead_of_retrying(
    cluster: EmbeddedCluster,
    apps: client.AppsV1Api,
    custom: client.CustomObjectsApi,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    """The webhook refuses such a name; one created while it was down (here: no webhook) gets a condition."""
    account = user_account(cluster, {"envoy-replica-count": 1})
    accounts.append(account)
    name = "l" * 70
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer(name, account)))

    async def parked() -> dict[str, Any] | None:
        state = condition(get(custom, "loadbalancers", f"epic-{account}", name), "Ready")
        return state if state and state["reason"] == "NameTooLong" else None

    state = await eventually(parked, "the load balancer to say its name is too long", timeout=30)
    assert state["status"] == "False"
    assert state["message"].startswith("metadata.name: 70 characters; a load balancer's name labels its Envoy pods")
    assert apps.list_namespaced_deployment(f"epic-{account}").items == []


async def test_registration_api_is_authenticated_idempotent_and_names_bad_input(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    connect: Connect,
    accounts: list[str],
) -> None:
    account = user_account(cluster, {"envoy-replica-count": 0})
    accounts.append(account)
    api = connect(account)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("api", account)))

    first = await api.register(account, "api", "127.77.1.7", 8080, node_address="127.77.1.1")
    again = await api.register(account, "api", "127.77.1.7", 8080, node_address="127.77.1.1")
    assert first.created and not again.created
    assert again.tunnel == first.tunnel
    assert first.tunnel.remote_endpoint == "api-127-77-1-7-8080-tcp"
    rep = get(custom, "remoteendpoints", f"epic-{account}", "api-127-77-1-7-8080-tcp")
    assert rep["status"]["tunnel-id"] == first.tunnel.tunnel_id
    assert rep["spec"]["node-address"] == "127.77.1.1"

    # The same address on another port or protocol is another endpoint, on the same node's tunnel.
    udp = await api.register(account, "api", "127.77.1.7", 8080, "UDP", node_address="127.77.1.1")
    https = await api.register(account, "api", "127.77.1.7", 8443, node_address="127.77.1.1", port_name="https")
    assert udp.created and https.created
    assert {udp.tunnel.remote_endpoint, https.tunnel.remote_endpoint} == {
        "api-127-77-1-7-8080-udp",
        "api-127-77-1-7-8443-tcp",
    }
    assert udp.tunnel.tunnel_id == https.tunnel.tunnel_id == first.tunnel.tunnel_id
    assert https.tunnel.endpoint_port.name == "https"
    # The same endpoint with other fields is refused, naming what differs; nothing changes.
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await api.register(account, "api", "127.77.1.7", 8080, node_address="127.77.1.2")
    assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "endpoint 127.77.1.7:8080/TCP is registered already as RemoteEndpoint api-127-77-1-7-8080-tcp with " in str(
        raised.value.details()
    )
    assert "node-address '127.77.1.1' (not '127.77.1.2')" in str(raised.value.details())
    assert get(custom, "remoteendpoints", f"epic-{account}", "api-127-77-1-7-8080-tcp")["spec"]["node-address"] == (
        "127.77.1.1"
    )
    # Without a node address, an endpoint is ad hoc: Ready, without a tunnel.
    ad_hoc = await api.register(account, "api", "127.77.1.9", 8080)
    assert (ad_hoc.tunnel.tunnel_id, ad_hoc.tunnel.node_address) == (0, "")
    assert condition(get(custom, "remoteendpoints", f"epic-{account}", "api-127-77-1-9-8080-tcp"), "Ready")[
        "reason"
    ] == ("AdHocEndpoint")

    lb = await api.load_balancer(account, "api")
    assert sorted((t.endpoint_address, t.endpoint_port.port, t.endpoint_port.protocol) for t in lb.tunnels) == [
        ("127.77.1.7", 8080, "TCP"), ("127.77.1.7", 8080, "UDP"), ("127.77.1.7", 8443, "TCP"),
        ("127.77.1.9", 8080, "TCP"),
    ]  # fmt: skip
    assert lb.service_id == 1
    tunnels = await api.tunnels(account)
    assert {(t.load_balancer, t.node_address, t.tunnel_id) for t in tunnels} == {
        ("api", "127.77.1.1", first.tunnel.tunnel_id), ("api", "", 0)
    }  # fmt: skip

    listed = epicctl(cluster, "get", "tunnels", "-a", account).stdout.splitlines()
    assert listed[0].split() == ["ACCOUNT", "LOAD-BALANCER", "NODE", "TUNNEL-ID", "EPIC-ADDRESS", "EPIC-PORT"]
    # No Envoy pod (replica count 0): tunnels end at the EPIC singleton's gue-endpoint, whichever allocator made it.
    gue = get(custom, "epics", "epic", "epic")["spec"]["gue-endpoint"]["epic-address"]
    assert listed[1].split() == [account, "api", "127.77.1.1", str(first.tunnel.tunnel_id), gue, "6080/UDP"]
    assert len(listed) == 2, "one tunnel for the node's three endpoints"
    endpoints = epicctl(cluster, "get", "endpoints", "-a", account).stdout.splitlines()
    assert len(endpoints) == 5
    assert [account, "api", "api-127-77-1-7-8443-tcp", "127.77.1.7:8443/TCP", "https", "127.77.1.1"] == (
        endpoints[3].split()[:6]
    )

    # The load balancer's one public port (80, no targetPort) reaches none of them: they are named.
    async def unmatched() -> dict[str, Any] | None:
        state = condition(get(custom, "loadbalancers", f"epic-{account}", "api"), "EndpointsMatched")
        return state if state and state["status"] == "False" and "127.77.1.9" in state["message"] else None

    state = await eventually(unmatched, "EndpointsMatched to name the endpoints no port reaches", timeout=30)
    assert state["reason"] == "EndpointMatchesNoPort"
    assert "api-127-77-1-7-8443-tcp (127.77.1.7:8443/TCP (https))" in state["message"]
    assert "(public ports and their targets: 80/TCP -> 80)" in state["message"]
    ports = [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": "https"}, {"port": 8080, "protocol": "UDP"}]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, f"epic-{account}", "loadbalancers", "api", {"spec": {"public-ports": ports}}
    )

    async def matched() -> bool:
        state = condition(get(custom, "loadbalancers", f"epic-{account}", "api"), "EndpointsMatched")
        return bool(state and state["status"] == "True")

    await eventually(matched, "EndpointsMatched once every endpoint's port is a target", timeout=30)

    bad: list[tuple[tuple[Any, ...], grpc.StatusCode, str]] = [
        (
            (account, "api", "127.77.1.300", 80),
            grpc.StatusCode.INVALID_ARGUMENT,
            "address: '127.77.1.300' is not an IPv4",
        ),
        ((account, "api", "127.77.1.8", 0), grpc.StatusCode.INVALID_ARGUMENT, "port.port: 0 is outside 1-65535"),
        ((account, "api", "127.77.1.8", 70000), grpc.StatusCode.INVALID_ARGUMENT, "port.port: 70000 is outside"),
        (("no-such-account", "api", "127.77.1.8", 80), grpc.StatusCode.PERMISSION_DENIED, "is not the token's account"),
        ((account, "nope", "127.77.1.8", 80), grpc.StatusCode.NOT_FOUND, "load_balancer: no load balancer 'nope'"),
        (("", "api", "127.77.1.8", 80), grpc.StatusCode.INVALID_ARGUMENT, "account: required"),
    ]
    for args, code, message in bad:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.register(*args)
        assert raised.value.code() == code, args
        assert message in (raised.value.details() or ""), raised.value.details()

    assert (await api.unregister(account, "api", "127.77.1.7", 8080, "UDP")).removed == 1
    assert (await api.unregister(account, "api", "127.77.1.7")).removed == 2, "every port of the address"
    assert not (await api.unregister(account, "api", "127.77.1.7")).deleted
    assert (await api.unregister(account, "api", "127.77.1.9")).deleted
    assert await api.tunnels(account) == []


async def test_each_account_token_acts_on_its_account_only_and_rotates_without_restart(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    allocator: tuple[ServiceProcess, int],
    allocator_ca: Path,
    accounts: list[str],
    tmp_path: Path,
) -> None:
    """Tokens minted with epicctl, as a user mints them; the allocator runs under its chart's RBAC, over TLS."""
    mine, theirs = user_account(cluster), user_account(cluster)
    accounts += [mine, theirs]
    token_file = tmp_path / "mine.token"
    epicctl(cluster, "credentials", "create", mine, "--token-file", str(token_file))
    assert token_file.stat().st_mode & 0o777 == 0o600
    printed = epicctl(cluster, "credentials", "create", theirs)
    assert "credentials created for account" in printed.stderr
    again = epicctl(cluster, "credentials", "create", mine, check=False)
    assert again.returncode == 4 and f"epicctl credentials rotate {mine}" in again.stderr
    missing = epicctl(cluster, "credentials", "rotate", "no-such-account", check=False)
    assert missing.returncode == 3

    address = f"127.0.0.1:{allocator[1]}"
    tls = agents.channel_credentials(allocator_ca)
    first = agents.read_token(token_file)

    async def code(token: str, account: str, **kwargs: Any) -> grpc.StatusCode:
        async with AllocatorClient(address, token, kwargs.pop("credentials", tls), timeout=5) as api:
            try:
                await (api.register(account, "web", "10.3.0.1", 80, **kwargs) if kwargs else api.tunnels(account))
            except grpc.aio.AioRpcError as error:
                status: grpc.StatusCode = error.code()
                return status
        return grpc.StatusCode.OK

    assert await code(first, mine) == grpc.StatusCode.OK
    assert await code(printed.stdout.strip(), theirs) == grpc.StatusCode.OK
    assert await code(first, theirs) == grpc.StatusCode.PERMISSION_DENIED
    async with AllocatorClient(address, first, tls) as api:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.register(theirs, "web", "10.3.0.1", 80)
    assert raised.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert raised.value.details() == (
        f"account: {theirs!r} is not the token's account ({mine!r}); a token acts on its own account only"
    )
    assert await code("", mine) == grpc.StatusCode.UNAUTHENTICATED
    assert await code("not-a-token", mine) == grpc.StatusCode.UNAUTHENTICATED
    assert await code(first, mine, credentials=None) == grpc.StatusCode.UNAVAILABLE, "TLS only: plaintext fails"
    assert await code(first, mine, port_name="x" * 70_000) == grpc.StatusCode.RESOURCE_EXHAUSTED, "64 KiB at most"

    pid = allocator[0].process.pid if allocator[0].process else None
    epicctl(cluster, "credentials", "rotate", mine, "--token-file", str(token_file))
    rotated = agents.read_token(token_file)
    assert rotated != first

    async def switched() -> bool:
        old, new = await code(first, mine), await code(rotated, mine)
        return bool(old == grpc.StatusCode.UNAUTHENTICATED and new == grpc.StatusCode.OK)

    await eventually(switched, "the old token refused and the new one accepted", timeout=10)
    assert allocator[0].process is not None and allocator[0].process.pid == pid, "no restart"
    core.delete_namespaced_secret("tollgate-agent-credentials", f"epic-{theirs}")

    async def revoked() -> bool:
        return bool(await code(printed.stdout.strip(), theirs) == grpc.StatusCode.UNAUTHENTICATED)

    await eventually(revoked, "a deleted Secret's token to be refused", timeout=10)


async def test_a_load_balancers_reads_return_its_own_objects_whatever_its_namespace_holds(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    allocator: tuple[ServiceProcess, int],
    accounts: list[str],
) -> None:
    """A load balancer's reconciles and its endpoints' events read its own RemoteEndpoints and the holders of one
    service ID, lists the API server filters by the CRDs' selectable fields (docs/allocator.md, "Reads at scale"),
    not every LoadBalancer and RemoteEndpoint of the namespace. With several load balancers applied at once in one
    namespace, each and its endpoints are processed, and the allocator's own reads return exactly one load
    balancer's objects. What those reads cost as the namespace grows (bytes listed per load balancer) is a
    measurement: bench/allocator_reads.py."""
    account = user_account(cluster)
    accounts.append(account)
    namespace = f"epic-{account}"
    names = [f"lb-{index}" for index in range(6)]
    documents: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        lb = load_balancer(name, account)
        lb["spec"]["public-address"] = f"192.168.77.{index + 1}"
        documents.append(lb)
        documents += [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RemoteEndpoint",
                "metadata": {"name": f"{name}-e{e}", "namespace": namespace},
                "spec": {
                    "load-balancer": name,
                    "address": f"127.77.{60 + index}.{e + 1}",
                    "port": {"port": 80},
                    "node-address": f"192.168.{60 + index}.{e + 1}",
                },
            }
            for e in range(2)
        ]
    cluster.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(d) for d in documents))

    def processed() -> bool:
        for name in names:
            lb = get(custom, "loadbalancers", namespace, name)
            ready = condition(lb, "Ready") or {}
            if ready.get("status") != "True" or ready.get("observedGeneration") != lb["metadata"]["generation"]:
                return False
            for e in range(2):
                if (condition(get(custom, "remoteendpoints", namespace, f"{name}-e{e}"), "Ready") or {}).get(
                    "status"
                ) != "True":
                    return False
        return True

    await eventually(lambda: asyncio.to_thread(processed), f"{len(names)} load balancers and their endpoints", 120)
    reads = Kube(api_client(cluster.kubeconfig))
    service_ids = set()
    for name in names:
        endpoints = await reads.list_objects(
            RemoteEndpoint, namespace, field_selector=field_is("spec.load-balancer", name)
        )
        assert sorted(e["metadata"]["name"] for e in endpoints) == [f"{name}-e0", f"{name}-e1"]
        service_id = get(custom, "loadbalancers", namespace, name)["spec"]["service-id"]
        holders = await reads.list_objects(
            LoadBalancer, namespace, field_selector=field_is("spec.service-id", service_id)
        )
        assert [h["metadata"]["name"] for h in holders] == [name], f"the holders of service ID {service_id}"
        service_ids.add(service_id)
    assert len(service_ids) == len(names)


def ready_or_refused(custom: client.CustomObjectsApi, namespace: str, names: list[str]) -> dict[str, Any] | None:
    """The load balancers once each is Ready or refused LimitExceeded, for its latest generation; else None."""
    found = {name: get(custom, "loadbalancers", namespace, name) for name in names}
    for lb in found.values():
        ready = condition(lb, "Ready") or {}
        if ready.get("observedGeneration") != lb["metadata"]["generation"]:
            return None
        if ready.get("status") != "True" and ready.get("reason") != "LimitExceeded":
            return None
    return found


def judged_then(account: str, namespace: str, held: str) -> str:
    """A pattern of the LimitExceeded message of a load balancer judged while its namespace held `held` (a pattern)
    of them and served none or one (the free place going to an older one)."""
    return (
        rf"Account {re.escape(account)}'s spec\.loadBalancerLimit is 1, and namespace {re.escape(namespace)} holds "
        rf"{held} LoadBalancers, (1 of them served|0 of them served; the free places \(1\) go to older LoadBalancers "
        r"first): no Envoy, public address or tunnel for this one until one of them is deleted or the limit is raised"
    )


def oldest(found: dict[str, Any], names: list[str]) -> str:
    """Which of `names` the allocator serves first: the oldest, then by name, then by uid."""
    return min(names, key=lambda n: (found[n]["metadata"]["creationTimestamp"], n, found[n]["metadata"]["uid"]))


async def test_load_balancers_created_at_once_beyond_the_limit_get_nothing_until_a_place_opens(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    apps: client.AppsV1Api,
    allocator: tuple[ServiceProcess, int],
    connect: Connect,
    accounts: list[str],
) -> None:
    """Six LoadBalancers sent to the API server at the same instant with room for one (no webhook here: as if its
    cache had let all six through, which it can): exactly one gets its Envoy and becomes Ready; five are Ready=False
    LimitExceeded with a Warning Event, and have no Envoy, service ID, public address or tunnel. The same one stays
    served across an allocator restart; deleting it serves the oldest of the five, and only it."""
    prefix = f"limits-{uuid.uuid4().hex[:6]}"
    pool = {"pool": "198.51.100.80-198.51.100.87", "subnet": "198.51.100.0/24"}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServicePrefix",
                    "metadata": {"name": prefix, "namespace": "epic"}, "spec": {"public-pool": pool}}))  # fmt: skip
    account = user_account(cluster, {"envoy-replica-count": 1, "service-prefix": prefix})
    accounts.append(account)
    namespace = f"epic-{account}"
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "accounts", account, {"spec": {"loadBalancerLimit": 1}}
    )
    names = [f"race-{index}" for index in range(6)]
    bodies = [load_balancer(name, account) for name in names]
    for body in bodies:
        del body["spec"]["public-address"]  # each asks for one from the pool
    await asyncio.to_thread(objects.create_at_once, cluster.kubeconfig, bodies)

    found = await eventually(
        lambda: asyncio.to_thread(ready_or_refused, custom, namespace, names), "each served or refused", timeout=90
    )
    served = [name for name in names if condition(found[name], "Ready")["status"] == "True"]
    assert len(served) == 1, f"served beyond the limit of 1: {served}"
    (first,) = served
    waiting = [name for name in names if name != first]
    refusal = (
        f"Account {account}'s spec.loadBalancerLimit is 1, and namespace {namespace} holds 6 LoadBalancers, 1 of them "
        "served: no Envoy, public address or tunnel for this one until one of them is deleted or the limit is raised"
    )
    # Each was judged as the six arrived: it names how many the namespace held and served then.
    told = judged_then(account, namespace, "[2-6]")
    for name in waiting:
        lb = found[name]
        allocated, ready = condition(lb, "Allocated"), condition(lb, "Ready")
        assert (allocated["status"], allocated["reason"]) == ("False", "LimitExceeded")
        assert (ready["status"], ready["reason"], ready["message"]) == ("False", "LimitExceeded", allocated["message"])
        assert re.fullmatch(told, ready["message"]), ready["message"]
        assert not {"service-id", "public-address", "endpoints"} & set(lb["spec"]), f"{name} was allocated to"
        assert ready["message"] in xds.events(core, namespace, name, "LimitExceeded", "Warning")
    assert found[first]["spec"]["public-address"].startswith("198.51.100.8")
    assert [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items] == [f"{first}-envoy"]
    record = get(custom, "accounts", namespace, account)["status"]["served-load-balancers"]
    assert record == {first: found[first]["metadata"]["uid"]}

    # No tunnel for a load balancer beyond the limit: refused over the API before anything is written, and a
    # RemoteEndpoint object of one waits, refused.
    heir = oldest(found, waiting)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await connect(account).register(account, heir, "127.77.90.1", 8080, node_address="192.168.90.1")
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert raised.value.details() == f"load balancer {heir!r} is not served: {refusal.split(': no Envoy')[0]}"
    rep = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RemoteEndpoint",
        "metadata": {"name": f"{heir}-e", "namespace": namespace},
        "spec": {"load-balancer": heir, "address": "127.77.90.2", "port": {"port": 80}, "node-address": "192.168.90.2"},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(rep))

    def endpoint(reason: str) -> dict[str, Any] | None:
        ready = condition(get(custom, "remoteendpoints", namespace, f"{heir}-e"), "Ready")
        return ready if ready and ready["reason"] == reason else None

    await eventually(lambda: asyncio.to_thread(endpoint, "LimitExceeded"), "the endpoint refused")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "remoteendpoints")["items"]
    assert [r["metadata"]["name"] for r in listed] == [f"{heir}-e"], "the refused registration left none"

    # A restarted allocator finds who is served where it left it: each load balancer judged again keeps its verdict.
    process, _ = allocator
    process.stop()
    process.start().wait_ready()
    for name in names:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "loadbalancers", name, {"spec": {"display-name": f"{name} again"}}
        )
    again = await eventually(
        lambda: asyncio.to_thread(ready_or_refused, custom, namespace, names), "each judged again", timeout=90
    )
    assert [name for name in names if condition(again[name], "Ready")["status"] == "True"] == [first]
    assert {condition(again[name], "Ready")["message"] for name in waiting} == {refusal}

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "loadbalancers", first)
    rest = [name for name in names if name != first]

    def heir_served() -> dict[str, Any] | None:
        """The five once the heir is Ready and the others judged again (each told what the namespace holds now)."""
        current = ready_or_refused(custom, namespace, rest)
        if current is None or condition(current[heir], "Ready")["status"] != "True":
            return None
        told = [condition(current[n], "Ready")["message"] for n in rest if n != heir]
        return current if all("holds 5 LoadBalancers" in message for message in told) else None

    after = await eventually(lambda: asyncio.to_thread(heir_served), f"{heir}, the oldest waiting, served", 90)
    assert [name for name in rest if condition(after[name], "Ready")["status"] == "True"] == [heir]
    for name in rest:
        if name != heir:
            assert re.fullmatch(judged_then(account, namespace, "5"), condition(after[name], "Ready")["message"])
    assert xds.events(core, namespace, heir, "WithinLimit", "Normal")
    # The deleted load balancer's Deployment goes with it when the garbage collector gets to it.
    envoys = {d.metadata.name for d in apps.list_namespaced_deployment(namespace).items}
    assert f"{heir}-envoy" in envoys
    assert not envoys & {f"{name}-envoy" for name in rest if name != heir}
    tunnelled = await eventually(lambda: asyncio.to_thread(endpoint, "TunnelAssigned"), "the endpoint's tunnel")
    assert tunnelled["status"] == "True"
    record = get(custom, "accounts", namespace, account)["status"]["served-load-balancers"]
    assert record == {heir: after[heir]["metadata"]["uid"]}
    cluster.kubectl("delete", "serviceprefix", prefix, "-n", "epic", "--wait=false")


def test_a_remote_endpoint_deletion_lost_on_the_wire_is_repaired_by_the_resync(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    run_service: ServiceFactory,
    allocator_tls: TLSEndpoint,
    accounts: list[str],
    tmp_path: Path,
) -> None:
    """The allocator never hears that a RemoteEndpoint was deleted: the watch never sends that event again, so its
    node's tunnel would stay held for good. The resync lists the RemoteEndpoints, finds it gone, and releases the
    tunnel as the deletion's event would have."""
    account = user_account(cluster, {"envoy-replica-count": 0})
    accounts.append(account)
    namespace = f"epic-{account}"
    node = "192.168.61.1"
    with WatchProxy(service_account_kubeconfig(cluster, "allocator", tmp_path), tmp_path) as wire:
        kubeconfig = str(wire.kubeconfig)
        env = allocator_env(
            allocator_tls,
            KUBECONFIG=kubeconfig,
            TOLLGATE_ALLOCATOR_KUBECONFIG=kubeconfig,
            TOLLGATE_ALLOCATOR_XDS_ADDRESS=XDS_ADDRESS,
            TOLLGATE_ALLOCATOR_GUE_ADDRESS=GUE_ADDRESS,
            TOLLGATE_ALLOCATOR_RESYNC_PERIOD_SECONDS="3",
        )
        process = run_service("allocator", env=env)
        try:
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("lossy", account)))

            def handled() -> bool:
                """Whether kopf is done with the load balancer's current spec (it records the spec last handled)."""
                lb = get(custom, "loadbalancers", namespace, "lossy")
                last = (lb["metadata"].get("annotations") or {}).get("allocator.tollgate.io/last-handled-configuration")
                return last is not None and json.loads(last)["spec"] == lb["spec"]

            # Settled first: the load balancer's reconcile prunes the entries of nodes it finds no endpoint on, so
            # one still running would repair the lost deletion in the resync's stead.
            wait_for(handled, "the load balancer's reconciles to end", timeout=30)
            rep = objects.with_value(
                objects.remote_endpoint(namespace, "127.77.61.7", "lossy", "lossy-e"), "spec.node-address", node
            )
            objects.create(custom, rep)

            def assigned() -> bool:
                state = condition(get(custom, "remoteendpoints", namespace, "lossy-e"), "Ready")
                return bool(state and state["reason"] == "TunnelAssigned")

            wait_for(assigned, "the endpoint's tunnel", timeout=30)

            def tunnels() -> dict[str, Any]:
                status = get(custom, "loadbalancers", namespace, "lossy").get("status") or {}
                return dict(status.get("gue-tunnel-endpoints") or {})

            tunnel_id = tunnels()[node]["tunnel-id"]

            wire.drop(lambda event: event["type"] == "DELETED" and event["object"]["metadata"]["name"] == "lossy-e")
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "remoteendpoints", "lossy-e")
            wait_for(lambda: wire.dropped, "the proxy to leave out the RemoteEndpoint's deletion", timeout=30)
            wire.drop(None)

            wait_for(lambda: node not in tunnels(), "the resync to release the deleted endpoint's tunnel", timeout=30)
            released = f"resync: released tunnel ID {tunnel_id} of the deleted RemoteEndpoint {namespace}/lossy-e"
            wait_for(lambda: released in process.logs(), "the resync to log the release", timeout=10)
            assert f"resync: remoteendpoints {namespace}/lossy-e was deleted without a watch event" in process.logs()
        finally:
            process.stop()  # before the proxy goes
