"""Tunnel IDs under faults: an answer lost after the write landed, a deleted or restored EPIC singleton. In every
case, no tunnel ID is ever held by two client nodes."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.allocator.k8s import JSON, Kind, Kube
from tollgate.allocator.registry import Registry
from tollgate.allocator.registry.records import TUNNELS
from tollgate.allocator.registry.registrations import Endpoint
from tollgate.allocator.tunnels import BlockTunnelIDs, EpicSingleton, Metrics
from tollgate.models.epic import GROUP, SINGLETON_NAME, SYSTEM_NAMESPACE, VERSION, EPICSpec, GUEEndpoint, LoadBalancer
from tollgate.runtime.kube import api_client
from tollgate.testing import agents
from tollgate.testing.cluster import EmbeddedCluster, dev_endpoint_policy
from tollgate.testing.faultproxy import FaultProxy, Mode, api_server_proxy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.wait import wait_for

GUE = GUEEndpoint(epic_address="192.168.1.40")


def api_object(kind: str, name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": spec}  # fmt: skip


@pytest.fixture
def account(cluster: EmbeddedCluster) -> Iterator[str]:
    """A user namespace with an account, a service group and a load balancer `lb` (no Envoy replicas)."""
    name = f"faults-{uuid.uuid4().hex[:5]}"
    namespace = f"epic-{name}"
    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        api_object("Account", name, namespace, {}),
        api_object("LBServiceGroup", "web", namespace, {"envoy-replica-count": 0}),
        api_object("LoadBalancer", "lb", namespace, {"public-ports": [{"port": 80}], "service-group": "web"}),
    ]
    cluster.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(d) for d in documents))
    yield name
    cluster.kubectl("patch", "account", name, "-n", namespace, "--type=merge", "-p",
                    '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


class LoseTheAnswerOnce(Kube):
    """The allocator's own API client, through a FaultProxy. When the load balancer's status is first written
    with `node`'s tunnel (a write that will land: it carries the current resourceVersion), the proxy forwards
    the write and drops the answer, then cuts the connection: the write lands, and the allocator cannot know it
    (urllib3 sends the PUT again on a new connection, which conflicts)."""

    def __init__(self, api: client.ApiClient, proxy: FaultProxy, node: str) -> None:
        super().__init__(api)
        self.proxy, self.node, self.armed = proxy, node, True

    async def replace_status(self, kind: Kind, obj: JSON) -> JSON:
        if not (self.armed and kind is LoadBalancer and self.node in (obj.get("status") or {}).get(TUNNELS, {})):
            return await super().replace_status(kind, obj)
        meta = obj["metadata"]
        current = await self.get(LoadBalancer, meta["namespace"], meta["name"])
        if current is None or current["metadata"]["resourceVersion"] != meta["resourceVersion"]:
            return await super().replace_status(kind, obj)
        self.armed = False
        self.proxy.set_mode(Mode.DROP_RESPONSES)
        asyncio.get_running_loop().call_later(1.0, self._cut)
        return await super().replace_status(kind, obj)

    def _cut(self) -> None:
        self.proxy.set_mode(Mode.REFUSE)
        self.proxy.set_mode(Mode.PASS)


@pytest.fixture
async def lossy_registry(cluster: EmbeddedCluster, tmp_path: Path) -> AsyncIterator[tuple[Registry, LoseTheAnswerOnce]]:
    with api_server_proxy(cluster.kubeconfig, tmp_path) as (proxy, kubeconfig):
        kube = LoseTheAnswerOnce(api_client(kubeconfig), proxy, "127.77.9.1")
        epic = EpicSingleton(kube, EPICSpec(gue_endpoint=GUE))
        ids = BlockTunnelIDs(kube, epic, Metrics(), f"test-{uuid.uuid4().hex[:5]}", track_owners=False)
        yield Registry(kube, ids, epic, GUE, dev_endpoint_policy()), kube
        await asyncio.to_thread(kube.api.close)


async def test_an_answer_lost_after_the_write_landed_does_not_hand_the_tunnel_id_out_again(
    custom: client.CustomObjectsApi, account: str, lossy_registry: tuple[Registry, LoseTheAnswerOnce]
) -> None:
    registry, kube = lossy_registry
    (first, _), (second, _) = [
        await registry.registrations.register(account, "lb", address, Endpoint(8080), node_address=node)
        for address, node in (("127.77.9.11", "127.77.9.1"), ("127.77.9.21", "127.77.9.2"))
    ]
    assert not kube.armed, "the first node's tunnel write lost its answer"
    lb = cast(
        dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, f"epic-{account}", "loadbalancers", "lb")
    )
    recorded = {node: entry["tunnel-id"] for node, entry in lb["status"][TUNNELS].items()}
    assert recorded == {"127.77.9.1": first.tunnel_id, "127.77.9.2": second.tunnel_id}
    assert first.tunnel_id != second.tunnel_id, "the landed write's ID was handed to the next node"


def epic_singleton(custom: client.CustomObjectsApi) -> dict[str, Any]:
    return cast(
        dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, SYSTEM_NAMESPACE, "epics", SINGLETON_NAME)
    )


def restore(cluster: EmbeddedCluster, custom: client.CustomObjectsApi, backup: dict[str, Any]) -> None:
    """Delete the singleton and restore it from `backup` the way Velero restores a custom resource with a status
    subresource: create the object, then write the backed-up status."""
    cluster.kubectl("delete", f"epics.{GROUP}", SINGLETON_NAME, "-n", SYSTEM_NAMESPACE, "--wait")
    body = {key: backup[key] for key in ("apiVersion", "kind", "spec")}
    body["metadata"] = {"name": SINGLETON_NAME, "namespace": SYSTEM_NAMESPACE}
    created = cast(
        dict[str, Any], custom.create_namespaced_custom_object(GROUP, VERSION, SYSTEM_NAMESPACE, "epics", body)
    )
    created["status"] = backup["status"]
    custom.replace_namespaced_custom_object_status(GROUP, VERSION, SYSTEM_NAMESPACE, "epics", SINGLETON_NAME, created)


def held_ids(custom: client.CustomObjectsApi, account: str) -> list[int]:
    lb = cast(
        dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, f"epic-{account}", "loadbalancers", "lb")
    )
    return [entry["tunnel-id"] for entry in ((lb.get("status") or {}).get(TUNNELS) or {}).values()]


async def test_a_deleted_or_restored_singleton_never_hands_out_an_id_in_use(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    core: client.CoreV1Api,
    run_service: ServiceFactory,
    account: str,
    tmp_path: Path,
) -> None:
    """Backed up before any ID was handed out, the singleton is restored twice: while the allocator runs, and
    while it is stopped. The restored counter is below the IDs in use and its `Initialized` condition says True;
    the allocator raises the counter above them either way."""
    served = tls_endpoint(tmp_path / "allocator-tls")
    env = allocator_env(served, TOLLGATE_ALLOCATOR_LEASE_SECONDS="3", TOLLGATE_ALLOCATOR_RECONCILE="false")

    def start() -> ServiceProcess:
        return run_service("allocator", rbac=True, env=env)

    allocator = start()
    backup = epic_singleton(custom)
    assert any(c["type"] == "Initialized" and c["status"] == "True" for c in backup["status"]["conditions"])
    agent = agents.Agent.mint(core, account, served.ca_file)

    async def register(nodes: range) -> None:
        async with AllocatorClient(served.address, agent.token, agent.channel_credentials()) as api:
            for index in nodes:
                await api.register(
                    account, "lb", f"127.77.{80 + index}.1", 8080, node_address=f"127.77.{80 + index}.100"
                )

    await register(range(0, 5))
    restore(cluster, custom, backup)
    wait_for(lambda: "replaced; dropping the tunnel IDs" in allocator.logs(), "the allocator to see the new singleton")
    await register(range(5, 10))

    allocator.stop()
    restore(cluster, custom, backup)
    start()
    await register(range(10, 15))

    held = held_ids(custom, account)
    assert len(held) == 15
    assert [tunnel_id for tunnel_id, count in Counter(held).items() if count > 1] == [], "an ID is held twice"
    assert epic_singleton(custom)["status"]["current-tunnel-id"] >= max(held)
