"""The Aggregated Discovery Service over grpcio asyncio: state-of-the-world and delta streams.

Each stream reads requests in a task of its own and writes what the stream's state machine says is next,
waking whenever a request arrives or the Envoy's desired resources change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf.message import Message

from tollgate.xds.server import Connection, XdsServer
from tollgate.xds.streams import Push

log = logging.getLogger("tollgate.xds.ads")
CONTROL_PLANE = "tollgate-xds"


def sotw_response(push: Push) -> discovery_pb2.DiscoveryResponse:
    return discovery_pb2.DiscoveryResponse(
        version_info=push.version,
        resources=[r.body for r in push.resources if r.body is not None],
        type_url=push.type_url,
        nonce=push.nonce,
        control_plane={"identifier": CONTROL_PLANE},
    )


def delta_response(push: Push) -> discovery_pb2.DeltaDiscoveryResponse:
    return discovery_pb2.DeltaDiscoveryResponse(
        system_version_info=push.version,
        resources=[
            discovery_pb2.Resource(name=r.name, version=r.version, resource=r.body)
            for r in push.resources
            if r.body is not None
        ],
        removed_resources=list(push.removed),
        type_url=push.type_url,
        nonce=push.nonce,
        control_plane={"identifier": CONTROL_PLANE},
    )


class AggregatedDiscoveryService(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, server: XdsServer) -> None:
        self.server = server

    async def StreamAggregatedResources(
        self, requests: AsyncIterator[discovery_pb2.DiscoveryRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        async for response in self._serve(requests, delta=False):
            assert isinstance(response, discovery_pb2.DiscoveryResponse)
            yield response

    async def DeltaAggregatedResources(
        self, requests: AsyncIterator[discovery_pb2.DeltaDiscoveryRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[discovery_pb2.DeltaDiscoveryResponse]:
        async for response in self._serve(requests, delta=True):
            assert isinstance(response, discovery_pb2.DeltaDiscoveryResponse)
            yield response

    def _handle(self, conn: Connection, request: Message) -> None:
        error = request.error_detail.message if request.HasField("error_detail") else None
        if isinstance(request, discovery_pb2.DeltaDiscoveryRequest):
            self.server.on_delta_request(
                conn,
                request.type_url,
                request.response_nonce,
                list(request.resource_names_subscribe),
                list(request.resource_names_unsubscribe),
                dict(request.initial_resource_versions),
                error,
            )
        else:
            assert isinstance(request, discovery_pb2.DiscoveryRequest)
            self.server.on_sotw_request(
                conn, request.type_url, request.response_nonce, list(request.resource_names), error
            )

    async def _read(self, conn: Connection, requests: AsyncIterator[Message]) -> None:
        try:
            async for request in requests:
                self._handle(conn, request)
        finally:
            conn.closed = True
            conn.wake.set()

    async def _serve(self, requests: AsyncIterator[Message], delta: bool) -> AsyncIterator[Message]:
        iterator = aiter(requests)
        try:
            first = await anext(iterator)
        except StopAsyncIteration:
            return
        conn = self.server.connect(first.node, delta)
        self._handle(conn, first)
        reader = asyncio.create_task(self._read(conn, iterator), name=f"xds read {conn.identity.node_id}")
        try:
            while not conn.closed:
                push = conn.stream.next_push()
                if push is None:
                    await conn.wake.wait()
                    conn.wake.clear()
                    continue
                self.server.pushed(conn, push)
                yield delta_response(push) if delta else sotw_response(push)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            self.server.disconnect(conn)
