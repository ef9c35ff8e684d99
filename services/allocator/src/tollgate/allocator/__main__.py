"""`python -m tollgate.allocator`: the EPIC data model, tunnel IDs and endpoint registration over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path
from typing import Literal

import grpc
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.allocator.grpc import server as grpc_server
from tollgate.allocator.handlers import build_registry
from tollgate.allocator.k8s import Kube, new_identity
from tollgate.allocator.reconcile import Reconciler
from tollgate.allocator.registry import Registry
from tollgate.allocator.tunnels import BlockTunnelIDs, EpicSingleton, Metrics, SeedTunnelIDs, TunnelIDs
from tollgate.models.epic import SYSTEM_NAMESPACE, EPICSpec, GUEEndpoint
from tollgate.runtime.kube import api_client
from tollgate.runtime.operator import run_operator
from tollgate.runtime.retry import Stopped, is_transient, until_done
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import EndpointPolicySettings, ServiceSettings

log = logging.getLogger("tollgate.allocator")
WORKERS = 64


class Settings(ServiceSettings, EndpointPolicySettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_ALLOCATOR_", extra="ignore")

    service_name: str = "tollgate-allocator"
    grpc_address: str = Field(default="0.0.0.0:9090", description="HOST:PORT of the registration API.")
    grpc_token_secret: str = Field(
        default="tollgate-allocator-grpc-token",
        description="Secret in the epic namespace whose `token` callers present as a bearer token (created if absent).",
    )
    grpc_tls_cert: Path | None = Field(default=None, description="PEM certificate: serve the API over TLS.")
    grpc_tls_key: Path | None = Field(default=None, description="PEM private key of grpc_tls_cert.")
    xds_address: str = Field(
        default="tollgate-xds.epic.svc:18000", description="HOST:PORT of the xDS server the Envoy proxies connect to."
    )
    gue_address: IPv4Address = Field(
        default=IPv4Address("127.0.0.1"),
        description="epic-address of tunnels when the EPIC singleton's spec has no gue-endpoint.",
    )
    reconcile: bool = Field(
        default=True, description="Run the kopf handlers; false serves only the gRPC API (extra replicas)."
    )
    tunnel_id_scheme: Literal["block", "seed"] = Field(
        default="block", description="block: many IDs per write to the EPIC singleton; seed: one ID per write."
    )
    identity: str | None = Field(default=None, description="Owner name of this replica's ID blocks (default: unique).")
    lease_seconds: int = Field(default=30, ge=3, description="How long a replica's block stays its own unrenewed.")


async def keep_lease(ids: BlockTunnelIDs, lease: str, seconds: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await ids.maintain(lease, seconds)
        except Exception:  # housekeeping must outlive a failing API call; the next round retries
            log.exception("tunnel ID housekeeping failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds / 3)


def credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.grpc_tls_cert is None or settings.grpc_tls_key is None:
        return None
    return grpc.ssl_server_credentials([(settings.grpc_tls_key.read_bytes(), settings.grpc_tls_cert.read_bytes())])


async def main(settings: Settings, context: ServiceContext) -> None:
    with contextlib.suppress(Stopped):  # asked to stop while the API server was still unreachable
        await serve(settings, context)


async def serve(settings: Settings, context: ServiceContext) -> None:
    serving = asyncio.Event()
    context.health.add_readiness_check("grpc", lambda: serving.is_set() or "the registration API is not serving yet")
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(WORKERS, thread_name_prefix="kube"))
    kube = Kube(api_client(settings.kubeconfig, pool_size=WORKERS))
    telemetry_meter = context.telemetry.meter("tollgate.allocator")
    tracer = context.telemetry.tracer("tollgate.allocator")
    metrics = Metrics(telemetry_meter)
    epic = EpicSingleton(kube, EPICSpec(gue_endpoint=GUEEndpoint(epic_address=settings.gue_address)))
    await until_done(epic.ensure, "creating or reading the EPIC singleton", context.stop)
    identity = settings.identity or new_identity(socket.gethostname())
    ids: TunnelIDs
    if settings.tunnel_id_scheme == "block":
        ids = BlockTunnelIDs(kube, epic, metrics, identity)
    else:
        ids = SeedTunnelIDs(epic, metrics)
    registry = Registry(kube, ids, epic, GUEEndpoint(epic_address=settings.gue_address), settings.endpoint_policy())
    secret = await until_done(
        lambda: kube.bearer_token(SYSTEM_NAMESPACE, settings.grpc_token_secret), "reading the API token", context.stop
    )
    token = grpc_server.Token(secret)
    server, port = await grpc_server.start(registry, token, tracer, settings.grpc_address, credentials(settings))
    serving.set()
    log.info("registration API listening", extra={"port": port, "identity": identity})
    lease = f"tollgate-allocator-{identity}"[:63].rstrip("-")
    housekeeping = (
        asyncio.create_task(keep_lease(ids, lease, settings.lease_seconds, context.stop))
        if isinstance(ids, BlockTunnelIDs)
        else None
    )
    try:
        if settings.reconcile:
            reconciler = Reconciler(kube, registry, metrics, tracer, settings.xds_address)
            await run_operator(settings, context, build_registry(reconciler))
        else:
            await context.stop.wait()
    finally:
        context.stop.set()  # whatever ended the service, the lease housekeeping stops with it
        await server.stop(grace=2)
        if housekeeping is not None:
            await housekeeping
            try:
                await kube.delete_lease(SYSTEM_NAMESPACE, lease)
            except Exception as error:  # its blocks are reclaimed when the Lease expires instead
                if not is_transient(error):
                    raise
                log.warning("cannot delete the Lease %s: %s; it expires in %s s", lease, error, settings.lease_seconds)


if __name__ == "__main__":
    sys.exit(run("python -m tollgate.allocator", __doc__ or "", Settings, main))
