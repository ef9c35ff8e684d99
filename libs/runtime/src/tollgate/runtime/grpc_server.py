"""The standard services every tollgate gRPC server carries: grpc.health.v1 Health and server reflection.

`add_standard_services(server, names, ready)` adds both to a `grpc.aio.Server` before it starts. Health answers
SERVING for the server (`""`) and for each of `names` while `ready()` is true, NOT_SERVING otherwise (the service's
/readyz: starting, or shutting down); a Watch is answered at once and again whenever a Check or a later Watch sees
the status change. Reflection lists `names`, Health and itself, so grpcurl and grpc_health_probe work without
.proto files. Neither asks for credentials: a service's authentication guards its own methods only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ReadinessHealth(HealthServicer):  # type: ignore[misc]  # grpc_health is untyped
    """grpc.health.v1 Health whose status is the service's readiness, read at every call."""

    def __init__(self, names: Sequence[str], ready: Callable[[], bool]) -> None:
        super().__init__()
        self.names = ("", *names)
        self.ready = ready

    async def refresh(self) -> None:
        status = SERVING if self.ready() else NOT_SERVING
        for name in self.names:
            await self.set(name, status)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        await self.refresh()
        return await super().Check(request, context)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await self.refresh()
        await super().Watch(request, context)


def add_standard_services(
    server: grpc.aio.Server, names: Sequence[str], ready: Callable[[], bool] = lambda: True
) -> ReadinessHealth:
    """Add Health and reflection to `server` (before it starts); `names` are the services it serves."""
    servicer = ReadinessHealth(names, ready)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return servicer
