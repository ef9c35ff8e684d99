"""The standard gRPC services on a real server: health follows readiness, reflection lists the services."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tollgate.runtime.grpc_server import add_standard_services

SERVICE = "grpc.testing.Nothing"


async def test_health_follows_readiness_and_reflection_lists_the_services() -> None:
    ready = {"value": False}
    server = grpc.aio.server()
    add_standard_services(server, [SERVICE], lambda: ready["value"])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            for name in ("", SERVICE):
                answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
                assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            ready["value"] = True
            answer = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            watch.cancel()
            with pytest.raises(grpc.aio.AioRpcError) as unknown:
                await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=5)
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

            reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
            stream = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
            answer = await stream.read()
            listed = {service.name for service in answer.list_services_response.service}
            assert listed == {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
    finally:
        await server.stop(None)
