"""GUE tunnels of a GWProxy's client nodes: the `nodeAddresses` of the GWEndpointSlices its GWRoutes reach, in the
proxy's status.gue-tunnel-endpoints as a load balancer shows them (keyed by client node address; epic-address,
epic-port, tunnel-id). EPIC's agent polls the proxy until its node's entry appears. The allocator runs on the
embedded cluster under its chart's RBAC; the last test converges from two allocators' registries at once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tollgate.allocator.k8s import Kube
from tollgate.allocator.registry import Registry
from tollgate.allocator.registry.records import TUNNELS
from tollgate.allocator.tunnels import BlockTunnelIDs, EpicSingleton, Metrics
from tollgate.models.base import raw_condition
from tollgate.models.epic import GROUP, VERSION, EPICSpec, GUEEndpoint, account_of
from tollgate.runtime.kube import api_client
from tollgate.testing import objects, xds
from tollgate.testing.cluster import EmbeddedCluster, dev_endpoint_policy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.wait import wait_for

GUE_ADDRESS = "192.0.2.40"
EPIC_PORT = {"appProtocol": "gue", "port": 6080, "protocol": "UDP"}
N1, N2, N3 = "192.0.2.71", "192.0.2.72", "192.0.2.73"
LOOPBACK = "127.0.0.9"  # the endpoint policy refuses loopback (the dev policy opens 127.77.0.0/16 only)
JSON = dict[str, Any]


def epic_object(kind: str, name: str, namespace: str, spec: JSON) -> JSON:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": spec}  # fmt: skip


def gwproxy(name: str, namespace: str) -> JSON:
    gateway = {"listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
    return epic_object("GWProxy", name, namespace, {"service-group": "web", "gateway": gateway})


def gwroute(name: str, namespace: str, proxy: str, backend: str) -> JSON:
    http = {"parentRefs": [{"name": proxy}], "rules": [{"backendRefs": [{"name": backend, "port": 8080}]}]}
    return epic_object("GWRoute", name, namespace, {"http": http})


def endpoint_slice(name: str, namespace: str, backend: str, nodes: dict[str, str]) -> JSON:
    """A client Service's EndpointSlice as EPIC's agent sends it: one endpoint per node, and the nodes' addresses."""
    endpoints = [{"addresses": [f"198.18.0.{n}"], "nodeName": node} for n, node in enumerate(sorted(nodes), 5)]
    return epic_object("GWEndpointSlice", name, namespace, {
        "parentRef": {"namespace": "default", "name": "web", "uid": backend},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "nodeAddresses": nodes,
    })  # fmt: skip


def apply(cluster: EmbeddedCluster, *objects: JSON) -> None:
    cluster.kubectl("apply", "-f", "-", stdin="\n".join(json.dumps(o) for o in objects))


@pytest.fixture
def account(cluster: EmbeddedCluster) -> Iterator[str]:
    """A user namespace with its Account and a service group `web` of no Envoy replicas; its name."""
    name = f"gwt-{uuid.uuid4().hex[:5]}"
    namespace = f"epic-{name}"
    apply(
        cluster,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        epic_object("Account", name, namespace, {}),
        epic_object("LBServiceGroup", "web", namespace, {"envoy-replica-count": 0}),
    )
    yield namespace
    cluster.kubectl("patch", "account", name, "-n", namespace, "--type=merge", "-p",
                    '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def allocator(run_service: ServiceFactory, tmp_path: Path) -> ServiceProcess:
    env = allocator_env(tls_endpoint(tmp_path / "allocator-tls"), TOLLGATE_ALLOCATOR_GUE_ADDRESS=GUE_ADDRESS)
    return run_service("allocator", rbac=True, env=env)


def tunnels(custom: client.CustomObjectsApi, namespace: str, proxy: str) -> dict[str, JSON]:
    obj = cast(JSON, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gwproxies", proxy))
    return dict((obj.get("status") or {}).get(TUNNELS) or {})


def wait_for_nodes(custom: client.CustomObjectsApi, namespace: str, proxy: str, nodes: set[str]) -> dict[str, int]:
    """Wait until the proxy's tunnel entries are exactly those of `nodes`; their tunnel IDs."""

    def converged() -> tuple[dict[str, JSON]] | None:  # a tuple: no entries at all is an answer too
        found = tunnels(custom, namespace, proxy)
        return (found,) if set(found) == nodes else None

    (found,) = wait_for(converged, f"GWProxy {proxy}'s tunnels to be those of {sorted(nodes)}", timeout=30)
    # No Envoy pod runs: tunnels end at the EPIC singleton's gue-endpoint, whichever allocator of the session made it.
    epic = cast(JSON, custom.get_namespaced_custom_object(GROUP, VERSION, "epic", "epics", "epic"))
    for entry in found.values():
        assert entry["epic-address"] == epic["spec"]["gue-endpoint"]["epic-address"], "the EPIC-wide endpoint"
        assert entry["epic-port"] == EPIC_PORT
    return {node: int(entry["tunnel-id"]) for node, entry in found.items()}


def events(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> list[str]:
    listed = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name},reason={reason}")
    return [str(e.message) for e in listed.items]


async def test_a_gwproxy_has_one_tunnel_per_client_node_of_the_slices_its_routes_reach(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    account: str,
    allocator: ServiceProcess,
) -> None:
    """A slice's nodes get a tunnel each; a node the slice drops loses its entry while the others keep their IDs; a
    second slice on a node shares its tunnel; the route's deletion takes every entry; an ID released is never
    handed out again."""
    namespace = account
    apply(cluster, gwproxy("edge", namespace), gwroute("web", namespace, "edge", "svc-uid"),
          endpoint_slice("web-1", namespace, "svc-uid", {"n1": N1, "n2": N2}))  # fmt: skip
    first = wait_for_nodes(custom, namespace, "edge", {N1, N2})
    assert first[N1] != first[N2], "one tunnel per client node"

    apply(cluster, endpoint_slice("web-1", namespace, "svc-uid", {"n1": N1}))
    assert wait_for_nodes(custom, namespace, "edge", {N1}) == {N1: first[N1]}, "n1 keeps its tunnel"
    released = wait_for(lambda: events(core, namespace, "edge", "TunnelReleased"), "an Event on the release")
    assert any(f"tunnel ID {first[N2]} of client node {N2}" in message for message in released), released

    apply(cluster, endpoint_slice("web-2", namespace, "svc-uid", {"n1": N1, "n3": N3}))
    second = wait_for_nodes(custom, namespace, "edge", {N1, N3})
    assert second[N1] == first[N1], "the second slice on n1 shares its tunnel"

    cluster.kubectl("delete", "gwroute", "web", "-n", namespace)
    wait_for_nodes(custom, namespace, "edge", set())

    apply(cluster, gwroute("web", namespace, "edge", "svc-uid"))
    again = wait_for_nodes(custom, namespace, "edge", {N1, N3})
    assert not set(again.values()) & {*first.values(), *second.values()}, "released tunnel IDs are never reused"


async def test_a_refused_node_address_gets_no_tunnel_and_an_event_naming_the_field(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    account: str,
    allocator: ServiceProcess,
) -> None:
    """The route and slice come before their GWProxy (its creation converges too); the slice's loopback node address
    gets no tunnel but a warning Event on the slice. Moving the route to another proxy moves the tunnel."""
    namespace = account
    apply(cluster, gwroute("web", namespace, "late", "svc-uid"),
          endpoint_slice("web-1", namespace, "svc-uid", {"n1": N1, "bad": LOOPBACK}))  # fmt: skip
    apply(cluster, gwproxy("late", namespace), gwproxy("edge", namespace))
    wait_for_nodes(custom, namespace, "late", {N1})
    refused = wait_for(lambda: events(core, namespace, "web-1", "AddressNotAllowed"), "an Event on the slice")
    assert refused == [
        f"spec.nodeAddresses[bad]: {LOOPBACK} is a loopback address; endpoints must be reachable remote addresses: "
        "no GUE tunnel for this node"
    ]
    assert wait_for_nodes(custom, namespace, "edge", set()) == {}

    apply(cluster, gwroute("web", namespace, "edge", "svc-uid"))
    wait_for_nodes(custom, namespace, "edge", {N1})
    wait_for_nodes(custom, namespace, "late", set())
    assert len(events(core, namespace, "web-1", "AddressNotAllowed")) == 1, "each refusal is told once"


@pytest.fixture
async def registries(cluster: EmbeddedCluster) -> AsyncIterator[list[Registry]]:
    """Two allocators' registries, each with its own block of tunnel IDs, as two replicas have."""
    made = []
    for _ in range(2):
        kube = Kube(api_client(cluster.kubeconfig))
        gue = GUEEndpoint(epic_address=GUE_ADDRESS)
        epic = EpicSingleton(kube, EPICSpec(gue_endpoint=gue))
        ids = BlockTunnelIDs(kube, epic, Metrics(), f"test-{uuid.uuid4().hex[:5]}", track_owners=False)
        made.append(Registry(kube, ids, epic, gue, dev_endpoint_policy()))
    yield made
    for registry in made:
        await asyncio.to_thread(registry.kube.api.close)


async def test_convergences_at_once_on_two_replicas_end_with_one_id_per_node(
    cluster: EmbeddedCluster, custom: client.CustomObjectsApi, account: str, registries: list[Registry]
) -> None:
    """Ten convergences at once, from two replicas' registries, first for 20 new nodes, then after half of them
    moved: exactly one entry per node named, each its own ID; the staying nodes keep theirs; none is reused, even by
    an EPIC singleton made anew (its counter starts above every ID held)."""
    namespace = account
    before = {f"n{i}": f"192.0.2.{100 + i}" for i in range(20)}
    apply(cluster, gwproxy("edge", namespace), gwroute("web", namespace, "edge", "svc-uid"),
          endpoint_slice("web-1", namespace, "svc-uid", before))  # fmt: skip

    async def converge_at_once() -> dict[str, int]:
        await asyncio.gather(*(registry.gateways.converge(namespace) for registry in registries * 5))
        recorded = {node: int(entry["tunnel-id"]) for node, entry in tunnels(custom, namespace, "edge").items()}
        assert len(set(recorded.values())) == len(recorded), f"an ID held by two nodes: {recorded}"
        return recorded

    first = await converge_at_once()
    assert set(first) == set(before.values())
    assert sum(registry.ids.metrics.stats.conflicts for registry in registries), "the writers raced"

    after = {node: address for node, address in before.items() if int(node[1:]) < 10}
    after |= {f"m{i}": f"192.0.2.{150 + i}" for i in range(10)}
    apply(cluster, endpoint_slice("web-1", namespace, "svc-uid", after))
    second = await converge_at_once()
    assert set(second) == set(after.values())
    assert all(second[address] == first[address] for address in set(first) & set(second)), "staying nodes keep IDs"
    assert not {second[address] for address in set(second) - set(first)} & set(first.values()), "an ID reused"
    highest = await registries[0].epic.highest_in_use()
    assert highest >= max(second.values()), "a recreated EPIC singleton's counter starts above GWProxies' IDs too"


async def test_gwproxies_beyond_the_proxy_limit_get_no_envoy_nor_tunnel_until_the_limit_is_raised(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    account: str,
    allocator: ServiceProcess,
) -> None:
    """Two GWProxies sent to the API server at the same instant with room for one (no webhook here), each reached by
    a route to a slice on n1: one gets its Envoy Deployment and n1's tunnel; the other is refused LimitExceeded,
    with a Warning Event, no Deployment and no tunnel. Raising proxyLimit serves it."""
    namespace = account
    name = account_of(namespace)
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "accounts", name, {"spec": {"proxyLimit": 1}})
    apply(cluster, gwroute("to-a", namespace, "gw-a", "svc-uid"), gwroute("to-b", namespace, "gw-b", "svc-uid"),
          endpoint_slice("web-1", namespace, "svc-uid", {"n1": N1}))  # fmt: skip
    proxies = ("gw-a", "gw-b")
    await asyncio.to_thread(objects.create_at_once, cluster.kubeconfig, [gwproxy(p, namespace) for p in proxies])

    def allocated() -> dict[str, Mapping[str, Any]] | None:
        found = {p: cast(JSON, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "gwproxies", p))
                 for p in proxies}  # fmt: skip
        states = {p: raw_condition(obj, "Allocated") for p, obj in found.items()}
        judged = all(s.get("status") == "True" or s.get("reason") == "LimitExceeded" for s in states.values())
        return states if judged else None

    states = wait_for(allocated, "each GWProxy served or refused", timeout=60)
    served = [p for p, state in states.items() if state["status"] == "True"]
    assert len(served) == 1, f"served beyond the limit of 1: {served}"
    (refused,) = set(proxies) - set(served)
    # Judged after the other got its place, or before, while the other, older, was to get it.
    refusal = states[refused]["message"]
    assert refusal in {
        f"Account {name}'s spec.proxyLimit is 1, and namespace {namespace} holds 2 GWProxies, {served_then}: no Envoy, "
        "public address or tunnel for this one until one of them is deleted or the limit is raised"
        for served_then in ("1 of them served", "0 of them served; the free places (1) go to older GWProxies first")
    }, refusal
    wait_for_nodes(custom, namespace, served[0], {N1})
    assert tunnels(custom, namespace, refused) == {}
    assert refusal in xds.events(core, namespace, refused, "LimitExceeded", "Warning")
    apps = client.AppsV1Api(kube)
    envoys = [d.metadata.name for d in apps.list_namespaced_deployment(namespace).items]
    assert envoys == [f"{served[0]}-gwproxy-envoy"]

    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "accounts", name, {"spec": {"proxyLimit": 2}})
    wait_for_nodes(custom, namespace, refused, {N1})
    wait_for(lambda: xds.events(core, namespace, refused, "WithinLimit", "Normal"), "an Event on its place")
    wait_for(
        lambda: len(apps.list_namespaced_deployment(namespace).items) == 2, "the second GWProxy's Envoy Deployment"
    )
