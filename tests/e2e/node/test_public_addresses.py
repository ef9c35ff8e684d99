"""Public addresses from a ServicePrefix: allocated to load balancers created without one (concurrently, across an
allocator restart, never twice), refused when taken, freed on deletion, and bound by the load balancer's Envoy, so
that a datagram sent to public-address:port reaches the endpoint."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tollgate.models.epic import GROUP, SYSTEM_NAMESPACE, VERSION
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho, udp_request
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import eventually
from tollgate.testing.xds import start_xds, xds_settings

pytestmark = pytest.mark.e2e


def get(custom: client.CustomObjectsApi, plural: str, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
        GROUP, VERSION, namespace, plural, name
    )
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def load_balancer(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"public-ports": [{"port": 5300, "protocol": "UDP"}], "service-group": "public", **spec},
    }


@pytest.fixture
def account(cluster: EmbeddedCluster, custom: client.CustomObjectsApi) -> Iterator[tuple[str, str, list[str]]]:
    """A fresh account with a group `public` whose ServicePrefix has a pool of three public addresses; the account's
    namespace, the prefix and the pool's addresses."""
    name = f"pub-{uuid.uuid4().hex[:6]}"
    namespace = f"epic-{name}"
    prefix = f"pool-{name}"
    addresses = cluster.public_addresses(3)
    pool = f"{addresses[0]}-{addresses[-1]}"
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    cluster.kubectl("create", "namespace", namespace)
    objects = [
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Account", "metadata": {"name": name, "namespace": namespace},
         "spec": {}},
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ServicePrefix",
         "metadata": {"name": prefix, "namespace": SYSTEM_NAMESPACE}, "spec": {"public-pool": {"pool": pool}}},
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LBServiceGroup",
         "metadata": {"name": "public", "namespace": namespace},
         "spec": {"envoy-replica-count": 0, "service-prefix": prefix}},
    ]  # fmt: skip
    for obj in objects:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    yield namespace, prefix, addresses
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "serviceprefix", prefix, "-n", SYSTEM_NAMESPACE, check=False)


def allocator(run_service: ServiceFactory, **env: str) -> ServiceProcess:
    return run_service(
        "allocator", rbac=True, env={"TOLLGATE_ALLOCATOR_GRPC_ADDRESS": f"127.0.0.1:{free_port()}", **env}
    )


async def allocated(custom: client.CustomObjectsApi, namespace: str, name: str, timeout: float = 30) -> str:
    async def probe() -> str | None:
        lb = get(custom, "loadbalancers", namespace, name)
        return str(lb["spec"].get("public-address") or "") or None

    return await eventually(probe, f"load balancer {name} to get a public address", timeout=timeout)


async def test_addresses_are_allocated_once_refused_when_taken_and_freed_on_deletion(
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    run_service: ServiceFactory,
    account: tuple[str, str, list[str]],
) -> None:
    namespace, prefix, pool = account
    first = allocator(run_service)
    for name in ("a", "b"):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer(name, namespace)))
    a, b = await allocated(custom, namespace, "a"), await allocated(custom, namespace, "b")

    # A new allocator process finds every allocation where the first left it.
    first.kill()
    allocator(run_service)
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("c", namespace)))
    c = await allocated(custom, namespace, "c")
    assert sorted([a, b, c]) == sorted(pool), "three load balancers, three addresses"
    allocations = get(custom, "serviceprefixes", SYSTEM_NAMESPACE, prefix)["status"]["allocations"]
    assert {address: owner["name"] for address, owner in allocations.items()} == {a: "a", b: "b", c: "c"}
    lb_a = get(custom, "loadbalancers", namespace, "a")
    assert f"public address {a} (ServicePrefix {prefix})" in condition(lb_a, "Allocated")["message"]

    # The pool is spent: the next waits, saying why; an address given by hand that another holds is refused.
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("d", namespace)))
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(load_balancer("e", namespace, **{"public-address": a})))

    async def refused(name: str, reason: str) -> dict[str, Any] | None:
        state = condition(get(custom, "loadbalancers", namespace, name), "Allocated")
        return state if state.get("reason") == reason else None

    exhausted = await eventually(lambda: refused("d", "PublicAddressesExhausted"), "d to wait for an address")
    assert exhausted["message"] == f"ServicePrefix {prefix}: every address of pool {pool[0]}-{pool[-1]} is allocated"
    taken = await eventually(lambda: refused("e", "PublicAddressTaken"), "e's address to be refused")
    assert taken["message"] == f"spec.public-address: {a} is allocated to LoadBalancer {namespace}/a"
    assert condition(get(custom, "loadbalancers", namespace, "e"), "Ready")["status"] == "False"

    # Deleting a frees its address; d, which waits for one, gets it. e goes first: it names that address itself, and a
    # reconcile of e still running (its own spec writes re-trigger it) may claim the address the moment it is free.
    cluster.kubectl("delete", "loadbalancer", "e", "-n", namespace, "--wait=true")
    cluster.kubectl("delete", "loadbalancer", "a", "-n", namespace)
    d = await allocated(custom, namespace, "d", timeout=90)  # d retries every 10 s while its pool is spent
    assert d == a
    allocations = get(custom, "serviceprefixes", SYSTEM_NAMESPACE, prefix)["status"]["allocations"]
    assert sorted(owner["name"] for owner in allocations.values()) == ["b", "c", "d"]


async def test_a_datagram_to_the_public_address_reaches_the_endpoint(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    run_service: ServiceFactory,
    account: tuple[str, str, list[str]],
) -> None:
    namespace, _, _ = account
    xds_env = xds_settings(cluster.host_address)
    start_xds(run_service, xds_env)
    xds_address = f"{cluster.host_address}:{xds_env['TOLLGATE_XDS_GRPC_PORT']}"
    allocator(run_service, TOLLGATE_ALLOCATOR_XDS_ADDRESS=xds_address)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "lbservicegroups", "public", {"spec": {"envoy-replica-count": 1}}
    )
    upstream, node = cluster.remote_address(), cluster.remote_address()
    async with UDPEcho(upstream, 5353, name="public-upstream"):
        body = load_balancer(
            "edge", namespace, **{"public-ports": [{"port": 5300, "protocol": "UDP", "targetPort": 5353}]}
        )
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(body))
        address = await allocated(custom, namespace, "edge")
        endpoint = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RemoteEndpoint",
            "metadata": {"name": "edge-upstream", "namespace": namespace},
            "spec": {"load-balancer": "edge", "address": upstream, "node-address": node,
                     "port": {"port": 5353, "protocol": "UDP"}},
        }  # fmt: skip
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(endpoint))
        reply = await eventually(
            lambda: udp_request(address, 5300, b"to the public address", timeout=1),
            f"a datagram to {address}:5300 through the load balancer's Envoy",
            timeout=90,
            ignore=(TimeoutError, OSError),
        )
        assert reply == b"public-upstream:to the public address"
        pods = core.list_namespaced_pod(namespace, label_selector="epic.acnodal.io/load-balancer=edge").items
        assert [p.status.pod_ip for p in pods] != [address], "the public address is not the pod's own"
