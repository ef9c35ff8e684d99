"""The tollgate.allocator.v1 Allocator service: per-account bearer tokens, one span per RPC, gRPC status codes
that name the field and the rule, TLS from files reloaded when they change, and limits on message size and
concurrent calls."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
import urllib3
from kubernetes import client
from opentelemetry import trace

from tollgate.allocator.allocation import ExhaustedError, InvalidArgumentError
from tollgate.allocator.grpc._generated import allocator_pb2 as pb
from tollgate.allocator.grpc._generated import allocator_pb2_grpc as pb_grpc
from tollgate.allocator.registry import Registry
from tollgate.allocator.registry.errors import AbortedError, AlreadyExistsError, FailedPreconditionError, NotFoundError
from tollgate.allocator.registry.registrations import Endpoint, Tunnel
from tollgate.models.epic import LoadBalancerSpec, LoadBalancerStatus, ServicePort
from tollgate.runtime.grpc_server import add_standard_services
from tollgate.runtime.optimistic import OptimisticUpdateError
from tollgate.runtime.tracing import server_interceptors

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


class Accounts(Protocol):
    async def account_of(self, token: str) -> str | None:
        """The account a bearer token stands for; None when it stands for none."""


class Denied(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def bearer_token(metadata: tuple[tuple[str, str | bytes], ...] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer ") :].strip()
    return None


def authorize(token_account: str | None, requested: str) -> None:
    """Raise Denied unless the caller's token (its account `token_account`) may act on account `requested`."""
    if token_account is None:
        raise Denied(
            grpc.StatusCode.UNAUTHENTICATED,
            "authorization: a valid bearer token is required (the token of the Secret tollgate-agent-credentials "
            "in the account's user namespace)",
        )
    if not requested:
        raise Denied(grpc.StatusCode.INVALID_ARGUMENT, "account: required (the account this call acts on)")
    if requested != token_account:
        raise Denied(
            grpc.StatusCode.PERMISSION_DENIED,
            f"account: {requested!r} is not the token's account ({token_account!r}); a token acts on its own "
            "account only",
        )


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
    def __init__(self, registry: Registry, accounts: Accounts) -> None:
        self.registry = registry
        self.accounts = accounts

    async def _serve(
        self,
        name: str,
        context: grpc.aio.ServicerContext[Any, Any],
        attributes: dict[str, str],
        work: Callable[[], Awaitable[Response]],
    ) -> Response:
        # The call's server span is opentelemetry-instrumentation-grpc's (in the caller's trace); it gets the
        # call's account and load balancer (the instrumentation records the status code).
        trace.get_current_span().set_attributes(attributes)
        token = bearer_token(context.invocation_metadata())
        try:
            authorize(await self.accounts.account_of(token) if token else None, attributes["account"])
        except Denied as denied:
            await context.abort(denied.code, denied.message)
        try:
            return await work()
        except Exception as error:
            code, message = status_of(error)
            if code is grpc.StatusCode.INTERNAL:
                log.exception("%s failed", name)
            elif code is grpc.StatusCode.UNAVAILABLE:
                log.warning("%s: %s", name, message)
            await context.abort(code, message)
            raise  # unreachable: abort raises

    async def RegisterEndpoint(
        self, request: pb.RegisterEndpointRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RegisterEndpointResponse:
        async def work() -> pb.RegisterEndpointResponse:
            tunnel, created = await self.registry.registrations.register(
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
            removed = await self.registry.registrations.unregister(
                request.account, request.load_balancer, request.address, port
            )
            return pb.UnregisterEndpointResponse(deleted=removed > 0, removed=removed)

        attributes = {"account": request.account, "load_balancer": request.load_balancer, "address": request.address}
        return await self._serve("UnregisterEndpoint", context, attributes, work)

    async def GetLoadBalancer(
        self, request: pb.GetLoadBalancerRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.LoadBalancer:
        async def work() -> pb.LoadBalancer:
            lb, tunnels = await self.registry.registrations.load_balancer(request.account, request.name)
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
            tunnels = await self.registry.registrations.tunnels(request.account, request.load_balancer)
            return pb.ListTunnelsResponse(tunnels=[tunnel_message(t) for t in tunnels])

        attributes = {"account": request.account, "load_balancer": request.load_balancer}
        return await self._serve("ListTunnels", context, attributes, work)


@dataclass(frozen=True)
class Limits:
    """A call whose request is over `max_message_bytes` is refused (RESOURCE_EXHAUSTED), and so is a call beyond
    `max_concurrent_rpcs` in progress."""

    max_message_bytes: int = 64 * 1024
    max_concurrent_rpcs: int = 256


async def start(
    registry: Registry,
    accounts: Accounts,
    address: str,
    credentials: grpc.ServerCredentials | None = None,
    limits: Limits = Limits(),
    ready: Callable[[], bool] = lambda: True,
) -> tuple[grpc.aio.Server, int]:
    """Serve the API on `address` (HOST:PORT; port 0 picks one), over TLS when given credentials; each call's
    token must be one of `accounts`' and the call must name that account. gRPC health (SERVING while `ready()`)
    and reflection need no token."""
    server = grpc.aio.server(
        interceptors=server_interceptors(),
        options=[("grpc.max_receive_message_length", limits.max_message_bytes)],
        maximum_concurrent_rpcs=limits.max_concurrent_rpcs,
    )
    pb_grpc.add_AllocatorServicer_to_server(  # type: ignore[no-untyped-call]
        AllocatorService(registry, accounts), server
    )
    add_standard_services(server, [SERVICE_NAME], ready)
    port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    return server, port
