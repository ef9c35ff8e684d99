"""The endpoint address policy through the real API server (#15): an endpoint at 127.0.0.1, at the metadata address or
in the cluster's pod range is refused at admission naming the field, refused by the registration API with nothing
left behind, and, when it got past admission (webhook down), parked by the allocator and never served by Envoy. An
Account narrowing its allowedEndpointRanges refuses an address that was allowed, there and then.

The services run with the policy of the cluster with the real node (tollgate.testing.cluster): its pod
(198.18.0.0/16) and Service (198.19.0.0/16) ranges and the node's address denied; simulated remote nodes are in
192.0.2.64-192.0.2.191. The load balancer's Envoy is a container on the real node.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from kubernetes import client

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.models.epic import GROUP, VERSION
from tollgate.testing import agents
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.objects import Obj, remote_endpoint, with_value
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import TLSEndpoint, allocator_env, tls_endpoint
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.xds import admin, group_bootstrap_template, start_xds, xds_settings
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

pytestmark = pytest.mark.e2e

LABEL = "endpoint-addresses.tollgate.io/test"
REACHABLE = "endpoints must be reachable remote addresses"
# (field, value, what the refusal says): the loopback address, the metadata address, the cluster's pod range.
REFUSED = [
    ("address", "127.0.0.1", f"127.0.0.1 is a loopback address; {REACHABLE}"),
    ("node-address", "169.254.169.254", "169.254.169.254 is a link-local address (169.254.0.0/16, where cloud"),
    ("address", "198.18.0.5", "198.18.0.5 is in 198.18.0.0/16, a denied range (the cluster's own pod and Service"),
]


@pytest.fixture
def tenant(cluster: EmbeddedCluster) -> Iterator[str]:
    """A fresh account (its user namespace) with a service group `web` of one Envoy."""
    name = f"addr-{uuid.uuid4().hex[:6]}"
    namespace = f"epic-{name}"
    cluster.kubectl("create", "namespace", namespace)
    objects = [
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Account", "metadata": {"name": name, "namespace": namespace},
         "spec": {}},
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LBServiceGroup",
         "metadata": {"name": "web", "namespace": namespace},
         "spec": {"envoy-image": "envoyproxy/envoy:v1.40.0", "envoy-replica-count": 1,
                  "envoy-bootstrap": group_bootstrap_template()}},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    yield name
    cluster.kubectl("patch", "account", name, "-n", namespace, "--type=merge", "-p",
                    '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def narrow(cluster: EmbeddedCluster, account: str, ranges: list[str], labels: dict[str, str] | None = None) -> None:
    patch = json.dumps({"metadata": {"labels": labels or {}}, "spec": {"allowedEndpointRanges": ranges}})
    cluster.kubectl("patch", "account", account, "-n", f"epic-{account}", "--type=merge", "-p", patch)


def labelled(obj: Obj, label: str) -> Obj:
    return with_value(obj, "metadata.labels", {LABEL: label})


def endpoint(namespace: str, name: str, address: str, **spec: Any) -> Obj:
    body = remote_endpoint(namespace, address, load_balancer="edge", name=name)
    body["spec"] |= spec
    return body


def create(custom: client.CustomObjectsApi, obj: Obj, dry_run: bool = False) -> Obj:
    namespace, plural = obj["metadata"]["namespace"], f"{obj['kind'].lower()}s"
    return cast(
        Obj,
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, obj, dry_run="All" if dry_run else None
        ),
    )


def refusal(custom: client.CustomObjectsApi, obj: Obj) -> str:
    try:
        create(custom, obj, dry_run=True)
    except client.ApiException as error:
        return str(json.loads(error.body or "{}").get("message"))
    return "accepted"


@pytest.fixture
def webhook(run_service: ServiceFactory, kube: client.ApiClient, tmp_path: Path) -> Iterator[str]:
    """The webhook, registered for objects carrying LABEL=<the label it yields> only."""
    label = uuid.uuid4().hex[:12]
    bundle = generate(["127.0.0.1"])
    bundle.write(tmp_path / "tls")
    port = free_port()
    env = {
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "CERT_DIR": str(tmp_path / "tls"),
        "LABEL_SELECTOR": f"{LABEL}={label}",
    }
    run_service("webhook", rbac=True, env={f"TOLLGATE_WEBHOOK_{key}": value for key, value in env.items()})
    name = f"tollgate-webhook-addresses-{label}"
    register(
        kube,
        Registration(
            ca_bundle=bundle.ca,
            url=f"https://127.0.0.1:{port}",
            name=name,
            object_selector={"matchLabels": {LABEL: label}},
        ),
    )
    try:
        yield label
    finally:
        unregister(kube, name)


def test_refused_at_admission_naming_the_field_and_narrowed_by_the_account(
    cluster: EmbeddedCluster, custom: client.CustomObjectsApi, webhook: str, tenant: str
) -> None:
    namespace = f"epic-{tenant}"
    remote = cluster.remote_address()
    probe = labelled(endpoint(namespace, "probe", "127.0.0.1"), webhook)
    wait_for(lambda: "loopback" in refusal(custom, probe), "the webhook configuration to be in force", timeout=30)
    for field, value, rule in REFUSED:
        body = labelled(with_value(endpoint(namespace, "rep", remote), f"spec.{field}", value), webhook)
        assert f"spec.{field}: {rule}" in refusal(custom, body)
    assert refusal(custom, labelled(endpoint(namespace, "rep", remote, **{"node-address": remote}), webhook)) == (
        "accepted"
    )
    gw_slice = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GWEndpointSlice",
        "metadata": {"name": "web-1", "namespace": namespace, "labels": {LABEL: webhook}},
        "spec": {"parentRef": {"name": "web", "uid": "web"}, "addressType": "IPv4", "ports": [{"port": 8080}],
                 "endpoints": [{"addresses": ["169.254.169.254"]}], "nodeAddresses": {"n": "198.19.0.1"}},
    }  # fmt: skip
    message = refusal(custom, gw_slice)
    assert "spec.endpoints[0].addresses[0]: 169.254.169.254 is a link-local address" in message
    assert "spec.nodeAddresses[n]: 198.19.0.1 is in 198.19.0.0/16, a denied range" in message

    narrow(cluster, tenant, ["192.0.2.64/27"], {LABEL: webhook})  # labelled: the webhook caches only its objects
    outside = "192.0.2.100"
    wait_for(
        lambda: (
            f"outside Account {tenant}'s spec.allowedEndpointRanges (192.0.2.64/27)"
            in refusal(custom, labelled(endpoint(namespace, "rep", outside), webhook))
        ),
        "the webhook to refuse an address outside the Account's ranges",
        timeout=30,
    )
    assert refusal(custom, labelled(endpoint(namespace, "rep", "192.0.2.70"), webhook)) == "accepted"
    assert custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "remoteendpoints")["items"] == []


def allocator(run_service: ServiceFactory, served: TLSEndpoint, **env: str) -> ServiceProcess:
    """The allocator over TLS at `served`, under its chart's RBAC."""
    settings = allocator_env(served, TOLLGATE_ALLOCATOR_GUE_ADDRESS="192.168.1.40", **env)
    return run_service("allocator", rbac=True, env=settings)


def load_balancer(cluster: EmbeddedCluster, namespace: str) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LoadBalancer",
        "metadata": {"name": "edge", "namespace": namespace},
        "spec": {"public-address": cluster.public_addresses()[0], "service-group": "web",
                 "public-ports": [{"port": 5300, "protocol": "UDP", "targetPort": 5353}]},
    }  # fmt: skip


async def test_the_registration_api_refuses_with_invalid_argument_and_leaves_nothing_behind(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    run_service: ServiceFactory,
    tenant: str,
    tmp_path: Path,
) -> None:
    namespace = f"epic-{tenant}"
    served = tls_endpoint(tmp_path / "allocator-tls")
    allocator(run_service, served)
    create(custom, load_balancer(cluster, namespace))
    remote = cluster.remote_address()
    agent = agents.Agent.mint(core, tenant, served.ca_file)
    async with AllocatorClient(served.address, agent.token, agent.channel_credentials()) as api:
        for field, value, rule in REFUSED:
            address, node = (value, remote) if field == "address" else (remote, value)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await api.register(tenant, "edge", address, 5353, "UDP", node_address=node)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert raised.value.details().startswith(f"{field.replace('-', '_')}: {rule}"), raised.value.details()
        narrow(cluster, tenant, ["192.0.2.64/27"])
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await api.register(tenant, "edge", "192.0.2.100", 5353, "UDP", node_address="192.0.2.71")
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert raised.value.details() == (
            f"address: 192.0.2.100 is outside Account {tenant}'s spec.allowedEndpointRanges (192.0.2.64/27)"
        )
        assert custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "remoteendpoints")["items"] == []
        lb = cast(Obj, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "loadbalancers", "edge"))
        assert not (lb.get("status") or {}).get("gue-tunnel-endpoints"), "no tunnel for a refused endpoint"
        accepted = await api.register(tenant, "edge", "192.0.2.70", 5353, "UDP", node_address="192.0.2.71")
        assert accepted.created and accepted.tunnel.tunnel_id > 0


def get_endpoint(custom: client.CustomObjectsApi, namespace: str, name: str) -> Obj:
    return cast(Obj, custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "remoteendpoints", name))


def ready(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    obj = get_endpoint(custom, namespace, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), {})


async def envoy_hosts(core: client.CoreV1Api, namespace: str) -> set[str] | None:
    """The endpoint addresses the load balancer's Envoy has in its clusters; None before its pod runs."""
    for pod in core.list_namespaced_pod(namespace, label_selector="epic.acnodal.io/load-balancer=edge").items:
        if pod.status.phase == "Running" and pod.status.pod_ip:
            clusters = await admin(str(pod.status.pod_ip), "/clusters?format=json")
            return {
                host["address"]["socket_address"]["address"]
                for found in clusters.get("cluster_statuses", [])
                if found["name"].startswith(f"{namespace}/edge/")
                for host in found.get("host_statuses", [])
            }
    return None


async def test_an_endpoint_admitted_while_the_webhook_was_down_is_parked_and_not_served(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    run_service: ServiceFactory,
    tenant: str,
    tmp_path: Path,
) -> None:
    namespace = f"epic-{tenant}"
    xds_env = xds_settings(cluster.host_address)
    start_xds(run_service, xds_env)
    allocator(
        run_service,
        tls_endpoint(tmp_path / "allocator-tls"),
        TOLLGATE_ALLOCATOR_XDS_ADDRESS=f"{cluster.host_address}:{xds_env['TOLLGATE_XDS_GRPC_PORT']}",
    )
    good, node = cluster.remote_address(), cluster.remote_address()
    async with UDPEcho(good, 5353, name="good"):
        create(custom, load_balancer(cluster, namespace))
        udp = {"port": 5353, "protocol": "UDP"}
        create(custom, endpoint(namespace, "good", good, port=udp, **{"node-address": node}))
        create(custom, endpoint(namespace, "loopback", "127.0.0.1", port=udp, **{"node-address": node}))
        create(custom, endpoint(namespace, "metadata", "169.254.169.254", port=udp))

        async def parked() -> list[dict[str, Any]] | None:
            found = [ready(custom, namespace, name) for name in ("loopback", "metadata")]
            return found if all(c.get("reason") == "AddressNotAllowed" for c in found) else None

        loopback, metadata = await eventually(parked, "the refused endpoints to be parked", timeout=30)
        assert (loopback["status"], loopback["message"]) == ("False", f"spec.address: {REFUSED[0][2]}")
        assert metadata["message"].startswith("spec.address: 169.254.169.254 is a link-local address")

        async def warned() -> list[tuple[str | None, str | None]]:
            found = core.list_namespaced_event(namespace, field_selector="involvedObject.name=loopback").items
            return [(e.type, e.reason) for e in found]

        assert await eventually(warned, "a Warning Event on the parked endpoint") == [("Warning", "AddressNotAllowed")]
        assert "tunnel-id" not in (get_endpoint(custom, namespace, "loopback").get("status") or {})

        hosts = await eventually(
            lambda: envoy_hosts(core, namespace), "the Envoy to have the good endpoint", timeout=90,
            ignore=(OSError, TimeoutError),
        )  # fmt: skip
        assert hosts == {good}, "only the allowed endpoint is served"

        # The Account narrows its ranges: the endpoint that was allowed is refused and leaves Envoy.
        narrow(cluster, tenant, ["192.168.0.0/16"])

        async def good_refused() -> dict[str, Any] | None:
            found = ready(custom, namespace, "good")
            return found if found.get("reason") == "AddressNotAllowed" else None

        refused = await eventually(
            good_refused, "the good endpoint to be refused after the Account narrowed its ranges", timeout=30
        )
        assert refused["message"] == (
            f"spec.address: {good} is outside Account {tenant}'s spec.allowedEndpointRanges (192.168.0.0/16)"
        )

        async def no_hosts() -> bool:
            return await envoy_hosts(core, namespace) == set()

        await eventually(no_hosts, "the Envoy to drop the refused endpoint", timeout=30, ignore=(OSError, TimeoutError))
