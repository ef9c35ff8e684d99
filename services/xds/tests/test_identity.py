"""xDS identity over a real gRPC server and client on loopback: a stream is served only when the pod its node id
names exists, is an Envoy proxy pod, and has the connection's IP; any other is closed with PERMISSION_DENIED and
nothing is sent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf import struct_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tollgate.models.envoy import ENVOY_PROXY_LABEL, LISTENER_ADDRESS_KEY, POD_LABELS_KEY
from tollgate.testing.envoy import envoy_pod_object
from tollgate.testing.wait import eventually
from tollgate.xds import metrics as xds_metrics
from tollgate.xds.grpc.ads import AggregatedDiscoveryService
from tollgate.xds.identity import Gate, Refusal, peer_ip, pod_key
from tollgate.xds.resources import CLUSTER
from tollgate.xds.server import XdsServer
from tollgate.xds.translate import Pod

CLIENT_IP = "127.0.0.1"  # where the test's gRPC client connects from


def virtual_service() -> dict[str, Any]:
    cluster = {"name": "c", "endpoints": [{"name": "e", "host": {"address": "192.0.2.10"}, "port": 1234}]}
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "vs", "namespace": "ns", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"selector": {"app": "edge"}, "listeners": [{"name": "l", "udp": {"port": 3000, "cluster": cluster}}]},
    }


def node(node_id: str, **metadata: Any) -> base_pb2.Node:
    struct = struct_pb2.Struct()
    struct.update(metadata)
    return base_pb2.Node(id=node_id, metadata=struct)


class Harness:
    def __init__(self, wait: float) -> None:
        self.server = XdsServer(debounce=0)
        self.server.world.set_virtual_service(virtual_service())
        self.refusals: list[Refusal] = []
        self.reader = InMemoryMetricReader()
        meter = MeterProvider(metric_readers=[self.reader]).get_meter("test")
        self.lookups = 0
        self.gate = Gate(self._lookup, wait, meter, self._refused)

    def _lookup(self, namespace: str, name: str) -> Pod | None:
        self.lookups += 1
        return self.server.world.pod(namespace, name)

    async def looked(self) -> bool:
        return self.lookups > 0

    async def _refused(self, refusal: Refusal) -> None:
        self.refusals.append(refusal)

    def pod(self, name: str, ip: str, labels: dict[str, str] | None = None, proxy: bool = True, uid: str = "") -> None:
        obj = envoy_pod_object(name, "ns", ip, {"app": "edge", **(labels or {})}, uid=uid or f"uid-{name}")
        if not proxy:
            del obj["metadata"]["labels"][ENVOY_PROXY_LABEL]
        self.server.world.set_pod(obj)
        self.server.changed()
        self.server.recompute()

    def delete_pod(self, name: str) -> None:
        self.server.world.set_pod({"metadata": {"namespace": "ns", "name": name}}, deleted=True)
        self.server.changed()
        self.server.recompute()

    def refused_count(self) -> dict[str, int]:
        return self.counts(xds_metrics.REFUSED_STREAMS.instrument)

    def counts(self, instrument: str) -> dict[str, int]:
        data = self.reader.get_metrics_data()
        counts: dict[str, int] = {}
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == instrument:
                        for point in metric.data.data_points:
                            counts[str(point.attributes["reason"])] = int(point.value)
        return counts


@contextlib.asynccontextmanager
async def serving(harness: Harness) -> AsyncIterator[ads_pb2_grpc.AggregatedDiscoveryServiceStub]:
    grpc_server = grpc.aio.server()
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
        AggregatedDiscoveryService(harness.server, gate=harness.gate), grpc_server
    )
    port = grpc_server.add_insecure_port(f"{CLIENT_IP}:0")
    await grpc_server.start()
    try:
        async with grpc.aio.insecure_channel(f"{CLIENT_IP}:{port}") as channel:
            yield ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    finally:
        await grpc_server.stop(grace=0)


async def refused(stub: ads_pb2_grpc.AggregatedDiscoveryServiceStub, claimed: base_pb2.Node) -> grpc.aio.AioRpcError:
    """The error that ends a stream opened as `claimed`; fails if the server sends anything first."""
    call = stub.StreamAggregatedResources()
    await call.write(discovery_pb2.DiscoveryRequest(node=claimed, type_url=CLUSTER))
    try:
        response = await call.read()
    except grpc.aio.AioRpcError as error:
        return error
    pytest.fail(f"the server sent {response!r} to a client it should have refused")


async def test_the_envoy_of_the_pod_with_the_connections_ip_is_served() -> None:
    harness = Harness(wait=0)
    harness.pod("edge", CLIENT_IP)
    async with serving(harness) as stub:
        call = stub.StreamAggregatedResources()
        await call.write(discovery_pb2.DiscoveryRequest(node=node("edge.ns"), type_url=CLUSTER))
        response = await call.read()
        assert isinstance(response, discovery_pb2.DiscoveryResponse) and len(response.resources) == 1
        assert [c.identity.pod for c in harness.server.connections.values()] == ["edge"]
        call.cancel()
    assert harness.refusals == []


async def test_a_client_claiming_a_pod_from_another_address_gets_nothing() -> None:
    harness = Harness(wait=0)
    harness.pod("edge", "127.1.0.5")
    async with serving(harness) as stub:
        error = await refused(stub, node("edge.ns"))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error.details() == (
        "node id 'edge.ns': pod ns/edge has IPs 127.1.0.5, and the connection comes from 127.0.0.1"
    )
    assert harness.server.connections == {}
    [refusal] = harness.refusals
    assert refusal.reason == "PeerMismatch" and refusal.pod is not None and refusal.pod.uid == "uid-edge"
    assert harness.refused_count() == {"PeerMismatch": 1}


async def test_labels_claimed_in_the_node_metadata_count_for_nothing() -> None:
    """The pod's labels decide what an Envoy gets: a genuine Envoy of an app=other pod claiming app=edge gets no
    listener of app=edge."""
    harness = Harness(wait=0)
    harness.pod("other", CLIENT_IP, {"app": "other"})
    async with serving(harness) as stub:
        call = stub.StreamAggregatedResources()
        claimed = node("other.ns", **{POD_LABELS_KEY: {"app": "edge"}})
        await call.write(discovery_pb2.DiscoveryRequest(node=claimed, type_url=CLUSTER))
        response = await call.read()
        assert isinstance(response, discovery_pb2.DiscoveryResponse) and len(response.resources) == 0
        call.cancel()


@pytest.mark.parametrize(
    ("node_id", "proxy", "reason", "details"),
    [
        ("ghost.ns", True, "PodNotFound", "node id 'ghost.ns': no pod ns/ghost"),
        ("edge", True, "InvalidNodeId", "node id 'edge' is not <pod>.<namespace>"),
        ("edge.ns", False, "NotAnEnvoyPod", f"node id 'edge.ns': pod ns/edge is not labelled {ENVOY_PROXY_LABEL}=true"),
    ],
)
async def test_unknown_pods_and_pods_that_are_not_envoy_proxies_get_nothing(
    node_id: str, proxy: bool, reason: str, details: str
) -> None:
    harness = Harness(wait=0)
    harness.pod("edge", CLIENT_IP, proxy=proxy)
    async with serving(harness) as stub:
        error = await refused(stub, node(node_id))
    assert (error.code(), error.details()) == (grpc.StatusCode.PERMISSION_DENIED, details)
    assert harness.server.connections == {}
    assert [r.reason for r in harness.refusals] == [reason]
    assert (harness.refusals[0].pod is None) == (reason in ("PodNotFound", "InvalidNodeId"))


async def test_a_listener_address_that_is_not_the_pods_is_refused() -> None:
    harness = Harness(wait=0)
    harness.pod("edge", CLIENT_IP)
    async with serving(harness) as stub:
        error = await refused(stub, node("edge.ns", **{LISTENER_ADDRESS_KEY: "127.1.0.9"}))
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "listener address 127.1.0.9" in str(error.details())


async def test_an_envoy_that_connects_just_before_its_pod_is_seen_is_served() -> None:
    harness = Harness(wait=10)
    async with serving(harness) as stub:
        call = stub.StreamAggregatedResources()
        await call.write(discovery_pb2.DiscoveryRequest(node=node("edge.ns"), type_url=CLUSTER))
        reading = asyncio.ensure_future(call.read())
        await eventually(harness.looked, "the server to look for the pod", timeout=5)
        assert not reading.done()
        harness.pod("edge", CLIENT_IP)
        response = await asyncio.wait_for(reading, 5)
        assert isinstance(response, discovery_pb2.DiscoveryResponse) and len(response.resources) == 1
        call.cancel()
    assert harness.refusals == []


async def acked_stream(stub: ads_pb2_grpc.AggregatedDiscoveryServiceStub, node_id: str) -> Any:
    """A stream opened as `node_id` whose first response (clusters) is read and ACKed."""
    call = stub.StreamAggregatedResources()
    await call.write(discovery_pb2.DiscoveryRequest(node=node(node_id), type_url=CLUSTER))
    first = await call.read()
    assert isinstance(first, discovery_pb2.DiscoveryResponse)
    await call.write(discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce=first.nonce))
    return call


def delete(harness: Harness) -> None:
    harness.delete_pod("edge")


def move(harness: Harness) -> None:
    harness.pod("edge", "127.1.0.7")


def unlabel(harness: Harness) -> None:
    harness.pod("edge", CLIENT_IP, proxy=False)


def replace(harness: Harness) -> None:
    harness.pod("edge", CLIENT_IP, uid="uid-edge-2")


@pytest.mark.parametrize(
    ("change", "reason", "details"),
    [
        (delete, "PodDeleted", "node id 'edge.ns': pod ns/edge was deleted"),
        (
            move,
            "PeerMismatch",
            "node id 'edge.ns': pod ns/edge has IPs 127.1.0.7, and the connection comes from 127.0.0.1",
        ),
        (unlabel, "NotAnEnvoyPod", f"node id 'edge.ns': pod ns/edge is not labelled {ENVOY_PROXY_LABEL}=true"),
        (replace, "PodReplaced", "node id 'edge.ns': pod ns/edge was replaced (uid uid-edge is now uid-edge-2)"),
    ],
)
async def test_a_served_stream_ends_once_its_pod_no_longer_admits_it(
    change: Callable[[Harness], None], reason: str, details: str
) -> None:
    harness = Harness(wait=0)
    harness.pod("edge", CLIENT_IP)
    harness.pod("neighbour", "127.1.0.8")
    async with serving(harness) as stub:
        call = await acked_stream(stub, "edge.ns")

        harness.delete_pod("neighbour")  # another pod's change leaves this stream alone
        change(harness)
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(call.read(), 5)

    assert (ended.value.code(), ended.value.details()) == (grpc.StatusCode.PERMISSION_DENIED, details)
    assert harness.server.connections == {}
    assert [(r.reason, r.revoked) for r in harness.refusals] == [(reason, True)]
    assert harness.counts(xds_metrics.REVOKED_STREAMS.instrument) == {reason: 1}
    assert harness.refused_count() == {}


async def test_a_stream_whose_pod_changes_only_what_admission_does_not_judge_is_served_on() -> None:
    harness = Harness(wait=0)
    harness.pod("edge", CLIENT_IP)
    async with serving(harness) as stub:
        call = await acked_stream(stub, "edge.ns")

        harness.pod("edge", CLIENT_IP, {"app": "other"})  # relabelled: served what app=other selects (nothing)
        second = await asyncio.wait_for(call.read(), 5)
        assert isinstance(second, discovery_pb2.DiscoveryResponse) and len(second.resources) == 0
        call.cancel()
    assert harness.refusals == []


@pytest.mark.parametrize(
    ("peer", "ip"),
    [
        ("ipv4:127.1.0.5:43210", "127.1.0.5"),
        ("ipv6:[::1]:5000", "::1"),
        ("ipv6:%5B::ffff:10.0.0.7%5D:5000", "10.0.0.7"),
        ("unix:/tmp/socket", None),
        ("ipv4:garbage:1", None),
    ],
)
def test_peer_ip(peer: str, ip: str | None) -> None:
    assert peer_ip(peer) == ip


def test_pod_key_splits_at_the_last_dot() -> None:
    assert pod_key("my.pod.tenant") == ("tenant", "my.pod")
    assert pod_key("pod") is None
    assert pod_key(".ns") is None
