"""`python -m tollgate.xds`: Turns VirtualServices and load balancers into Envoy configuration served over gRPC ADS."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

import grpc
import kopf
from envoy.service.discovery.v3 import ads_pb2, ads_pb2_grpc
from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from tollgate.runtime.certificates import ServingCertificate
from tollgate.runtime.grpc_server import add_standard_services
from tollgate.runtime.http_server import HTTPServer
from tollgate.runtime.kube import api_client
from tollgate.runtime.operator import run_operator
from tollgate.runtime.resync import Mirror
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import EndpointPolicySettings, ServiceSettings
from tollgate.runtime.shutdown import stop_grpc_server
from tollgate.runtime.tracing import server_interceptors
from tollgate.xds import handlers
from tollgate.xds.api.auth import Gatekeeper
from tollgate.xds.api.debug import create_app
from tollgate.xds.grpc.ads import AggregatedDiscoveryService, Limits, server_options
from tollgate.xds.identity import DEFAULT_WAIT, Gate
from tollgate.xds.k8s import Kube, RefusalEvents, Reviews
from tollgate.xds.reporter import StatusReporter
from tollgate.xds.resources import DNS
from tollgate.xds.server import XdsServer

log = logging.getLogger("tollgate.xds")
ADS_SERVICE = ads_pb2.DESCRIPTOR.services_by_name["AggregatedDiscoveryService"].full_name


class Settings(ServiceSettings, EndpointPolicySettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_XDS_", extra="ignore")

    service_name: str = "tollgate-xds"
    grpc_host: str = Field(default="0.0.0.0", description="Address of the ADS gRPC server.")
    grpc_port: int = Field(default=18000, ge=1, le=65535, description="Port of the ADS gRPC server.")
    api_host: str = Field(
        default="127.0.0.1",
        description="Address of the debug HTTP API: loopback only by default (it shows every Envoy's config); "
        "the chart's debugApi.service sets 0.0.0.0.",
    )
    api_port: int = Field(default=8081, ge=1, le=65535, description="Port of the debug HTTP API.")
    api_auth: bool = Field(
        default=False,
        description="Require a token in X-Tollgate-Debug-Token (TokenReview for the audience tollgate-xds-debug, "
        "then SubjectAccessReview: get on /tollgate/xds/debug); needed when api_host is not a loopback address.",
    )
    api_cert_dir: Path | None = Field(
        default=None,
        description="Directory of the debug API's serving pair (tls.crt, tls.key): it serves HTTPS; unset, HTTP.",
    )
    dns_resolvers: str = Field(
        default="",
        description="DNS servers for strictdns clusters, host[:port] separated by commas; empty: the system's.",
    )
    debounce_ms: int = Field(default=50, ge=0, description="Wait this long after a change for more before pushing.")
    status_interval_ms: int = Field(default=500, ge=10, description="At most one status pass per interval.")
    resync_period_s: float = Field(
        default=180,
        gt=0,
        description="List everything again this often and apply what the watches missed (a deletion, say).",
    )
    grpc_keepalive_time_s: float = Field(
        default=Limits.keepalive_time, gt=0, description="Seconds between HTTP/2 PINGs to each Envoy."
    )
    grpc_keepalive_timeout_s: float = Field(
        default=Limits.keepalive_timeout,
        gt=0,
        description="A PING unanswered this long closes the connection (a half-open peer).",
    )
    grpc_max_connection_age_s: float = Field(
        default=Limits.max_connection_age,
        gt=0,
        description="Then GOAWAY: Envoys reconnect, and spread again over the replicas.",
    )
    grpc_max_connection_age_grace_s: float = Field(
        default=Limits.max_connection_age_grace,
        ge=0,
        description="Streams still open this long after the GOAWAY are closed.",
    )
    grpc_max_concurrent_streams: int = Field(
        default=Limits.max_concurrent_streams, ge=1, description="Streams per connection."
    )
    grpc_max_streams: int = Field(
        default=Limits.max_streams,
        ge=1,
        description="Streams over all connections; more are refused (RESOURCE_EXHAUSTED).",
    )
    ack_timeout_s: float = Field(
        default=Limits.ack_timeout, gt=0, description="A stream whose response gets no ACK or NACK this long is closed."
    )
    replica: str = Field(
        default="",
        description="This replica's pod, <namespace>/<name>, under which it reports in VirtualService status; "
        "empty: $POD_NAMESPACE/$POD_NAME, else the host name.",
    )
    identity_wait_s: float = Field(
        default=DEFAULT_WAIT,
        ge=0,
        description="An Envoy whose pod is not (yet) known as it must be (labelled, with the connection's IP) waits "
        "this long for the pod cache before its stream is refused.",
    )
    watch_timeout_s: float = Field(
        default=70,
        gt=0,
        description="A watch that receives nothing, not even a bookmark, for this long is reopened.",
    )

    @model_validator(mode="after")
    def _debug_api_guarded(self) -> Settings:
        if not _loopback(self.api_host) and not self.api_auth:
            raise ValueError(
                f"api_host: {self.api_host} is not a loopback address, so api_auth must be true: the debug API shows "
                "every Envoy's config"
            )
        return self


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def replica_identity(settings: Settings) -> str:
    if settings.replica:
        return settings.replica
    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    return f"{namespace}/{pod}" if pod and namespace else socket.gethostname()


async def main(settings: Settings, context: ServiceContext) -> None:
    telemetry = context.telemetry
    server = XdsServer(
        DNS.parse(settings.dns_resolvers),
        debounce=settings.debounce_ms / 1000,
        meter=telemetry.meter("tollgate.xds"),
        tracer=telemetry.tracer("tollgate.xds"),
        endpoint_policy=settings.endpoint_policy(),
    )
    api = api_client(settings.kubeconfig)
    kube = Kube(api)
    mirror = Mirror()
    # Everything is listed before the first Envoy is served: one served before would lose its listeners.
    await handlers.load(server, api, settings.namespace, mirror)

    limits = Limits(
        keepalive_time=settings.grpc_keepalive_time_s,
        keepalive_timeout=settings.grpc_keepalive_timeout_s,
        max_connection_age=settings.grpc_max_connection_age_s,
        max_connection_age_grace=settings.grpc_max_connection_age_grace_s,
        max_concurrent_streams=settings.grpc_max_concurrent_streams,
        max_streams=settings.grpc_max_streams,
        ack_timeout=settings.ack_timeout_s,
    )
    grpc_server = grpc.aio.server(
        interceptors=server_interceptors(untraced=[ADS_SERVICE]),  # a push is a span, not the whole stream
        options=server_options(limits),
        maximum_concurrent_rpcs=limits.max_streams,
    )
    gate = Gate(server.world.pod, settings.identity_wait_s, telemetry.meter("tollgate.xds"), RefusalEvents(kube))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(
        AggregatedDiscoveryService(server, limits.ack_timeout, gate), grpc_server
    )
    add_standard_services(grpc_server, [ADS_SERVICE], lambda: not context.health.readiness())
    grpc_server.add_insecure_port(f"{settings.grpc_host}:{settings.grpc_port}")
    await grpc_server.start()
    log.info("ADS serving", extra={"grpc": f"{settings.grpc_host}:{settings.grpc_port}"})

    gatekeeper = Gatekeeper(Reviews(api)) if settings.api_auth else None
    api_server = HTTPServer(
        create_app(server, gatekeeper, replica_identity(settings)),
        settings.api_host,
        settings.api_port,
        None if settings.api_cert_dir is None else ServingCertificate(settings.api_cert_dir),
    )
    context.health.add_readiness_check("api", lambda: api_server.started or "debug API not started")

    registry = kopf.OperatorRegistry()
    handlers.register(registry, server, mirror, settings.watch_timeout_s)
    tasks = [
        asyncio.create_task(server.run(context.stop), name="recompute"),
        asyncio.create_task(
            StatusReporter(
                server, kube, settings.status_interval_ms / 1000, replica_identity(settings), settings.namespace
            ).run(context.stop)
        ),
        asyncio.create_task(api_server.serve(), name="debug api"),
        asyncio.create_task(run_operator(settings, context, registry), name="operator"),
        asyncio.create_task(
            handlers.resync_every(settings.resync_period_s, server, api, settings.namespace, mirror, context.stop),
            name="resync",
        ),
    ]
    try:
        done, _ = await asyncio.wait(
            [*tasks, asyncio.create_task(context.stop.wait())], return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            if task in tasks and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        context.stop.set()
        api_server.stop()
        await stop_grpc_server(grpc_server, grace=1)  # Envoys keep their config and reconnect to the next instance
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.xds", __doc__ or "", Settings, main))
