"""The Aggregated Discovery Service over grpcio asyncio: state-of-the-world and delta streams.

Each stream reads requests in a task of its own and writes what the stream's state machine says is next,
waking whenever a request arrives or the Envoy's desired resources change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.protobuf.message import Message

from tollgate.runtime.resync import Key
from tollgate.xds.identity import Gate, Refusal
from tollgate.xds.server import Connection, XdsServer
from tollgate.xds.streams import Push

log = logging.getLogger("tollgate.xds.ads")
CONTROL_PLANE = "tollgate-xds"


@dataclass(frozen=True)
class Limits:
    """How long a connection or a stream may live, idle or unanswered, and how many there may be."""

    keepalive_time: float = 30  # seconds between the server's HTTP/2 PINGs on a connection
    keepalive_timeout: float = 10  # a PING unanswered this long closes the connection (a half-open peer)
    max_connection_age: float = 3600  # then GOAWAY: Envoys reconnect, and spread again over the replicas
    max_connection_age_grace: float = 60  # streams still open this long after the GOAWAY are closed
    max_concurrent_streams: int = 16  # per connection (an Envoy uses one)
    max_streams: int = 10000  # over all connections; more are refused with RESOURCE_EXHAUSTED
    ack_timeout: float = 60  # a stream whose response is not ACKed or NACKed this long is closed


def server_options(limits: Limits) -> list[tuple[str, int]]:
    """grpcio server options for `limits`; client PINGs as often as every 10 s are allowed (Envoy's: 30 s)."""
    return [
        ("grpc.keepalive_time_ms", int(limits.keepalive_time * 1000)),
        ("grpc.keepalive_timeout_ms", int(limits.keepalive_timeout * 1000)),
        # grpcio 1.85 times keepalive PINGs out with the PING timeout (60 s by default), not the one above.
        ("grpc.http2.ping_timeout_ms", int(limits.keepalive_timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10000),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.max_connection_age_ms", int(limits.max_connection_age * 1000)),
        ("grpc.max_connection_age_grace_ms", int(limits.max_connection_age_grace * 1000)),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
    ]


def sotw_response(push: Push) -> discovery_pb2.DiscoveryResponse:
    return discovery_pb2.DiscoveryResponse(
        version_info=push.version,
        resources=[r.body for r in push.resources if r.data is not None],
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
            if r.data is not None
        ],
        removed_resources=list(push.removed),
        type_url=push.type_url,
        nonce=push.nonce,
        control_plane={"identifier": CONTROL_PLANE},
    )


class AggregatedDiscoveryService(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    """ADS for the Envoys `gate` admits (by default: those whose pods `server.world` knows, see
    tollgate.xds.identity); any other stream is closed with PERMISSION_DENIED before anything is sent, and an
    admitted one as soon as its pod no longer admits it."""

    def __init__(self, server: XdsServer, ack_timeout: float = Limits.ack_timeout, gate: Gate | None = None) -> None:
        self.server = server
        self.ack_timeout = ack_timeout
        self.gate = gate or Gate(server.world.pod)
        self._by_pod: defaultdict[Key, dict[int, Connection]] = defaultdict(dict)
        server.on_changed.append(self.gate.pods_changed)
        server.on_pods_changed.append(self._recheck)

    def _recheck(self, pods: set[Key]) -> None:
        """Judge again the streams of the pods that changed; wake those that must end."""
        for key in pods:
            for conn in self._by_pod.get(key, {}).values():
                if conn.revoked is None and (refusal := self.gate.recheck(conn.identity)) is not None:
                    conn.revoked = refusal
                    conn.wake.set()

    async def StreamAggregatedResources(
        self, requests: AsyncIterator[discovery_pb2.DiscoveryRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[discovery_pb2.DiscoveryResponse]:
        async for response in self._serve(requests, context, delta=False):
            assert isinstance(response, discovery_pb2.DiscoveryResponse)
            yield response

    async def DeltaAggregatedResources(
        self, requests: AsyncIterator[discovery_pb2.DeltaDiscoveryRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[discovery_pb2.DeltaDiscoveryResponse]:
        async for response in self._serve(requests, context, delta=True):
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

    async def _serve(
        self, requests: AsyncIterator[Message], context: grpc.aio.ServicerContext, delta: bool
    ) -> AsyncIterator[Message]:
        iterator = aiter(requests)
        try:
            first = await anext(iterator)
        except StopAsyncIteration:
            return
        identity = await self.gate.admit(first.node, context.peer())
        if isinstance(identity, Refusal):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, identity.message)
            return
        conn = self.server.connect(identity, delta)
        pod = (identity.namespace, identity.pod)
        self._by_pod[pod][conn.id] = conn
        self._handle(conn, first)
        reader = asyncio.create_task(self._read(conn, iterator), name=f"xds read {conn.identity.node_id}")
        sent_at = 0.0
        try:
            while not conn.closed:
                if conn.revoked is not None:
                    await self.gate.ended(conn.revoked)
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, conn.revoked.message)
                push = conn.stream.next_push()
                if push is None:
                    if not await self._wait(conn, sent_at):
                        log.warning(
                            "Envoy answered no response (ACK or NACK) within %s s: closing its stream",
                            self.ack_timeout,
                            extra={"node": conn.identity.node_id, "connection": conn.id},
                        )
                        await context.abort(
                            grpc.StatusCode.DEADLINE_EXCEEDED, f"no ACK or NACK within {self.ack_timeout} s"
                        )
                    continue
                self.server.pushed(conn, push)
                sent_at = time.monotonic()
                yield delta_response(push) if delta else sotw_response(push)
        finally:
            # First: after an abort grpcio may never let the reader finish, and the state must go regardless.
            self.server.disconnect(conn)
            self._by_pod[pod].pop(conn.id, None)
            if not self._by_pod[pod]:
                del self._by_pod[pod]
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader

    async def _wait(self, conn: Connection, sent_at: float) -> bool:
        """Wait for a request or a change; False once a response has waited `ack_timeout` for its answer."""
        waiting = any(state.pending is not None for state in conn.stream.types.values())
        timeout = self.ack_timeout - (time.monotonic() - sent_at) if waiting else None
        try:
            await asyncio.wait_for(conn.wake.wait(), timeout)
        except TimeoutError:
            return False
        conn.wake.clear()
        return True
