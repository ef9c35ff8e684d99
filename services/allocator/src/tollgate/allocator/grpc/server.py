"""The tollgate.allocator.v1 Allocator service: bearer-token authentication, one span per RPC, and gRPC status
codes that name the field and the rule."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import urllib3
from kubernetes import client
from opentelemetry import trace

from tollgate.allocator.allocation import ExhaustedError, InvalidArgumentError
from tollgate.allocator.grpc._generated import allocator_pb2 as pb
from tollgate.allocator.grpc._generated import allocator_pb2_grpc as pb_grpc
from tollgate.allocator.registry import (
    AbortedError,
    AlreadyExistsError,
    Endpoint,
    FailedPreconditionError,
    NotFoundError,
    Registry,
    Tunnel,
)
from tollgate.models.epic import LoadBalancerSpec, LoadBalancerStatus, ServicePort
from tollgate.runtime.grpc_server import add_standard_services
from tollgate.runtime.optimistic import OptimisticUpdateError

log = logging.getLogger("tollgate.allocator.grpc")
Request = TypeVar("Request")
Response = TypeVar("Response")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Allocator"].full_name

ERRORS: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (AbortedError, grpc.StatusCode.ABORTED),
    (OptimisticUpdateError, grpc.StatusCode.ABORTED),
    (ExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
)


# The API server's 4xx answers to the allocator's writes, as the caller should read them (403 and others are the
# allocator's own misconfiguration: INTERNAL).
API_ANSWERS = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    422: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ABORTED,
}


def status_of(error: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC status a caller gets for `error`. UNAVAILABLE, which agents retry, only for what passes: the API
    server unreachable, overloaded or failing (429, 5xx); its other answers are final for this request."""
    code = next((c for kind, c in ERRORS if isinstance(error, kind)), None)
    if code is not None:
        return code, str(error)
    if isinstance(error, client.ApiException):
        status = int(error.status or 0)
        answered = f"the Kubernetes API answered {status} {error.reason}"
        if status == 429 or status >= 500:
            return grpc.StatusCode.UNAVAILABLE, answered
        return API_ANSWERS.get(status, grpc.StatusCode.INTERNAL), answered
    if isinstance(error, (urllib3.exceptions.HTTPError, OSError)):
        return grpc.StatusCode.UNAVAILABLE, f"the Kubernetes API could not be reached: {error}"
    return grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}"


class Token:
    """The bearer token callers must present; replaced in place when the Secret changes."""

    def __init__(self, value: str) -> None:
        self.value = value

    def accepts(self, metadata: tuple[tuple[str, str | bytes], ...] | None) -> bool:
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                return hmac.compare_digest(value[len("Bearer ") :].encode(), self.value.encode())
        return False


def port_message(port: ServicePort) -> pb.Port:
    return pb.Port(port=port.port, protocol=port.protocol, app_protocol=port.app_protocol or "", name=port.name or "")


def tunnel_message(tunnel: Tunnel) -> pb.Tunnel:
    return pb.Tunnel(
        account=tunnel.account,
        load_balancer=tunnel.load_balancer,
        endpoint_address=tunnel.address,
        endpoint_port=port_message(tunnel.port),
        node_address=tunnel.node_address or "",
        tunnel_id=tunnel.tunnel_id or 0,
        epic_address=str(tunnel.epic.epic_address),
        epic_port=port_message(tunnel.epic.epic_port),
        remote_endpoint=tunnel.remote_endpoint,
    )


class AllocatorService(pb_grpc.AllocatorServicer):
    def __init__(self, registry: Registry, token: Token, tracer: trace.Tracer) -> None:
        self.registry = registry
        self.token = token
        self.tracer = tracer

    async def _serve(
        self,
        name: str,
        context: grpc.aio.ServicerContext[Any, Any],
        attributes: dict[str, str],
        work: Callable[[], Awaitable[Response]],
    ) -> Response:
        with self.tracer.start_as_current_span(
            f"tollgate.allocator.v1.Allocator/{name}", attributes=attributes
        ) as span:
            if not self.token.accepts(context.invocation_metadata()):
                span.set_attribute("rpc.grpc.status_code", grpc.StatusCode.UNAUTHENTICATED.value[0])
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "authorization: a valid bearer token is required")
            try:
                return await work()
            except Exception as error:
                code, message = status_of(error)
                if code is grpc.StatusCode.INTERNAL:
                    log.exception("%s failed", name)
                elif code is grpc.StatusCode.UNAVAILABLE:
                    log.warning("%s: %s", name, message)
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                await context.abort(code, message)
                raise  # unreachable: abort raises

    async def RegisterEndpoint(
        self, request: pb.RegisterEndpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegisterEndpointResponse:
        async def work() -> pb.RegisterEndpointResponse:
            tunnel, created = await self.registry.register(
                request.account,
                request.load_balancer,
                request.address,
                Endpoint(request.port.port, request.port.protocol, request.port.name, request.port.app_protocol),
                request.node_address,
                request.cluster,
            )
            return pb.RegisterEndpointResponse(tunnel=tunnel_message(tunnel), created=created)

        attributes = {"account": request.account, "load_balancer": request.load_balancer, "address": request.address}
        return await self._serve("RegisterEndpoint", context, attributes, work)

    async def UnregisterEndpoint(
        self, request: pb.UnregisterEndpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.UnregisterEndpointResponse:
        async def work() -> pb.UnregisterEndpointResponse:
            port = Endpoint(request.port.port, request.port.protocol) if request.HasField("port") else None
            removed = await self.registry.unregister(request.account, request.load_balancer, request.address, port)
            return pb.UnregisterEndpointResponse(deleted=removed > 0, removed=removed)

        attributes = {"account": request.account, "load_balancer": request.load_balancer, "address": request.address}
        return await self._serve("UnregisterEndpoint", context, attributes, work)

    async def GetLoadBalancer(
        self, request: pb.GetLoadBalancerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LoadBalancer:
        async def work() -> pb.LoadBalancer:
            lb, tunnels = await self.registry.load_balancer(request.account, request.name)
            spec = LoadBalancerSpec.model_validate(lb["spec"])
            status = LoadBalancerStatus.model_validate(lb.get("status") or {})
            return pb.LoadBalancer(
                account=request.account,
                name=request.name,
                service_id=spec.service_id or 0,
                public_address=str(spec.public_address or ""),
                public_ports=[port_message(p) for p in spec.public_ports],
                service_group=spec.service_group,
                tunnels=[tunnel_message(t) for t in tunnels],
                conditions=[
                    pb.Condition(type=c.type, status=c.status, reason=c.reason, message=c.message)
                    for c in status.conditions
                ],
            )

        return await self._serve("GetLoadBalancer", context, {"account": request.account, "name": request.name}, work)

    async def ListTunnels(
        self, request: pb.ListTunnelsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListTunnelsResponse:
        async def work() -> pb.ListTunnelsResponse:
            tunnels = await self.registry.tunnels(request.account, request.load_balancer)
            return pb.ListTunnelsResponse(tunnels=[tunnel_message(t) for t in tunnels])

        attributes = {"account": request.account, "load_balancer": request.load_balancer}
        return await self._serve("ListTunnels", context, attributes, work)


async def start(
    registry: Registry,
    token: Token,
    tracer: trace.Tracer,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
    ready: Callable[[], bool] = lambda: True,
) -> tuple[grpc.aio.Server, int]:
    """Serve the API on `address` (HOST:PORT; port 0 picks one), over TLS when given credentials, with gRPC health
    (SERVING while `ready()`) and reflection."""
    server = grpc.aio.server()
    pb_grpc.add_AllocatorServicer_to_server(  # type: ignore[no-untyped-call]
        AllocatorService(registry, token, tracer), server
    )
    add_standard_services(server, [SERVICE_NAME], ready)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server, port
