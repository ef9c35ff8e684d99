"""The ADS server's bounds, over a real gRPC server and client on loopback: an Envoy that never answers is cut and
leaves no state behind, and a connection whose peer froze is closed by the server's keepalive."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from tollgate.testing.envoy import envoy_pod_object
from tollgate.testing.faultproxy import FaultProxy, Mode
from tollgate.testing.wait import eventually
from tollgate.xds.grpc.ads import AggregatedDiscoveryService, Limits, server_options
from tollgate.xds.resources import CLUSTER
from tollgate.xds.server import XdsServer


def virtual_service(port: int) -> dict[str, Any]:
    """A VirtualService for the Envoys labelled app=edge in namespace ns; each port makes another version."""
    cluster = {"name": "c", "endpoints": [{"name": "e", "host": {"address": "192.0.2.10"}, "port": 1234}]}
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "vs", "namespace": "ns", "generation": port, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"selector": {"app": "edge"}, "listeners": [{"name": "l", "udp": {"port": port, "cluster": cluster}}]},
    }


def node() -> base_pb2.Node:
    return base_pb2.Node(id="edge.ns")


def with_envoy_pod(server: XdsServer) -> XdsServer:
    """`server` knowing the Envoy pod edge.ns (app=edge) at 127.0.0.1, where the test's client connects from."""
    server.world.set_pod(envoy_pod_object("edge", "ns", "127.0.0.1", {"app": "edge"}))
    return server


@contextlib.asynccontextmanager
async def serving(server: XdsServer, limits: Limits) -> AsyncIterator[int]:
    grpc_server = grpc.aio.server(options=server_options(limits), maximum_concurrent_rpcs=limits.max_streams)
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
        AggregatedDiscoveryService(server, limits.ack_timeout), grpc_server
    )
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    try:
        yield port
    finally:
        await grpc_server.stop(grace=0)


async def test_an_envoy_that_never_answers_keeps_no_more_than_the_cap_and_is_cut() -> None:
    server = with_envoy_pod(XdsServer(debounce=0, max_outstanding=5))
    server.world.set_virtual_service(virtual_service(3000))
    server.recompute()
    async with (
        serving(server, Limits(ack_timeout=2)) as port,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(discovery_pb2.DiscoveryRequest(node=node(), type_url=CLUSTER))
        response = await call.read()
        assert isinstance(response, discovery_pb2.DiscoveryResponse) and response.resources
        for port_number in range(3001, 3021):  # 20 changes the client never answers
            server.world.set_virtual_service(virtual_service(port_number))
            server.changed()
            server.recompute()
        assert server.outstanding == 5, "what is waited for stops at the cap"
        with pytest.raises(grpc.aio.AioRpcError) as cut:
            await call.read()
        assert cut.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert cut.value.details() == "no ACK or NACK within 2 s"
        await eventually(lambda: _disconnected(server), "the server to forget the stream", timeout=5)
        assert server.outstanding == 0


async def test_a_connection_whose_peer_froze_is_closed_by_keepalive() -> None:
    server = with_envoy_pod(XdsServer(debounce=0))
    server.world.set_virtual_service(virtual_service(3000))
    server.recompute()
    async with serving(server, Limits(keepalive_time=1, keepalive_timeout=1)) as port:
        with FaultProxy("127.0.0.1", port) as proxy:
            async with grpc.aio.insecure_channel(proxy.address) as channel:
                call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
                await call.write(discovery_pb2.DiscoveryRequest(node=node(), type_url=CLUSTER))
                response = await call.read()
                assert isinstance(response, discovery_pb2.DiscoveryResponse)
                await call.write(
                    discovery_pb2.DiscoveryRequest(
                        type_url=CLUSTER, version_info=response.version_info, response_nonce=response.nonce
                    )
                )
                await eventually(lambda: _in_sync(server), "the client to have ACKed")
                proxy.set_mode(Mode.FREEZE)  # the client answers nothing, PINGs included: a half-open connection
                await eventually(lambda: _disconnected(server), "keepalive to close the frozen connection", timeout=10)
                proxy.set_mode(Mode.REFUSE)


async def _in_sync(server: XdsServer) -> bool | None:
    return any(conn.stream.in_sync() for conn in server.connections.values()) or None


async def _disconnected(server: XdsServer) -> bool | None:
    return not server.connections or None


async def _open(channel: grpc.aio.Channel) -> Any:
    """A stream that has sent its first request and got its first response."""
    call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
    await call.write(discovery_pb2.DiscoveryRequest(node=node(), type_url=CLUSTER))
    await call.read()
    return call


async def test_a_connection_past_its_max_age_and_grace_is_closed() -> None:
    server = with_envoy_pod(XdsServer(debounce=0))
    async with (
        serving(server, Limits(max_connection_age=1, max_connection_age_grace=1)) as port,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        call = await _open(channel)
        with pytest.raises(grpc.aio.AioRpcError) as closed:
            await asyncio.wait_for(call.read(), timeout=10)
        assert closed.value.code() == grpc.StatusCode.UNAVAILABLE
        await eventually(lambda: _disconnected(server), "the server to forget the stream", timeout=5)


async def test_streams_past_the_limit_are_refused() -> None:
    server = with_envoy_pod(XdsServer(debounce=0))
    async with (
        serving(server, Limits(max_streams=1)) as port,
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        await _open(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _open(channel)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert len(server.connections) == 1
