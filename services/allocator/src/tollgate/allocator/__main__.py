"""`python -m tollgate.allocator`: the EPIC data model, tunnel IDs and endpoint registration over gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from ipaddress import IPv4Address
from pathlib import Path
from typing import Literal

import grpc
from opentelemetry.trace import TracerProvider
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.allocator.credentials import ApiUsers, Credentials, Lister, Watcher
from tollgate.allocator.grpc import server as grpc_server
from tollgate.allocator.handlers import build_registry
from tollgate.allocator.k8s import Kube, new_identity, require_supported
from tollgate.allocator.proxy import split_address
from tollgate.allocator.reconcile import Reconciler
from tollgate.allocator.registry import Registry
from tollgate.allocator.rest.app import create_app
from tollgate.allocator.rest.auth import Authenticator
from tollgate.allocator.rest.objects import EpicObjects
from tollgate.allocator.tunnels import BlockTunnelIDs, EpicSingleton, Metrics, SeedTunnelIDs, TunnelIDs
from tollgate.allocator.watched import Watched
from tollgate.models.epic import (
    AGENT_CREDENTIALS_SECRET,
    API_USERS_SECRET,
    SYSTEM_NAMESPACE,
    EPICSpec,
    GUEEndpoint,
)
from tollgate.runtime.backoff import Stopped, is_transient, until_done
from tollgate.runtime.certificates import ServingCertificate
from tollgate.runtime.http_server import HTTPServer
from tollgate.runtime.kube import api_client
from tollgate.runtime.operator import run_operator
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import EndpointPolicySettings, ServiceSettings
from tollgate.runtime.shutdown import stop_grpc_server

log = logging.getLogger("tollgate.allocator")


class Settings(ServiceSettings, EndpointPolicySettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_ALLOCATOR_", extra="ignore")

    service_name: str = "tollgate-allocator"
    grpc_address: str = Field(default="0.0.0.0:9090", description="HOST:PORT of the registration API.")
    grpc_cert_dir: Path | None = Field(
        default=None,
        description="Directory of the API's serving pair (tls.crt, tls.key), reloaded when the files change; "
        "unset: plaintext (a warning at start).",
    )
    grpc_max_message_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest request the API accepts (RESOURCE_EXHAUSTED above it)."
    )
    grpc_max_concurrent_rpcs: int = Field(
        default=256, ge=1, description="Calls in progress at once; more are refused with RESOURCE_EXHAUSTED."
    )
    rest_address: str = Field(
        default="0.0.0.0:8443",
        description="HOST:PORT of EPIC's REST API (/api/epic), served with the registration API's certificate.",
    )
    rest_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="Largest request body the REST API accepts (413 above it)."
    )
    rest_body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Time a REST request's body may take to arrive (408 after it)."
    )
    rest_max_concurrent_requests: int = Field(
        default=256, ge=1, description="Connections and requests of the REST API at once; more get 503."
    )
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
    resync_period_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How often the RemoteEndpoints, LoadBalancers and GWProxies are listed again to act on what the "
        "watches missed (give or take a tenth; the first time within 15 s).",
    )
    identity: str | None = Field(default=None, description="Owner name of this replica's ID blocks (default: unique).")
    lease_seconds: int = Field(default=30, ge=3, description="How long a replica's block stays its own unrenewed.")
    workers: int = Field(
        default=64,
        ge=1,
        le=256,
        description="Threads that run the kubernetes client's calls (and connections in its pool): API calls in "
        "flight at once.",
    )


async def keep_lease(ids: BlockTunnelIDs, lease: str, seconds: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await ids.maintain(lease, seconds)
        except Exception:  # housekeeping must outlive a failing API call; the next round retries
            log.exception("tunnel ID housekeeping failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds / 3)


def credentials(settings: Settings) -> grpc.ServerCredentials | None:
    if settings.grpc_cert_dir is None:
        log.warning(
            "the registration API serves plaintext: bearer tokens cross the network readable "
            "(set TOLLGATE_ALLOCATOR_GRPC_CERT_DIR to serve TLS)"
        )
        return None
    return ServingCertificate(settings.grpc_cert_dir).grpc_credentials()


def secrets_named(kube: Kube, name: str) -> tuple[Lister, Watcher]:
    """How a WatchedSecrets lists and watches the Secrets `name` of every namespace."""
    return functools.partial(kube.list_secrets_named, name), functools.partial(kube.watch_secrets_named, name)


def rest_server(
    settings: Settings,
    kube: Kube,
    registry: Registry,
    accounts: Credentials,
    api_users: ApiUsers,
    tracer_provider: TracerProvider,
) -> HTTPServer:
    app = create_app(
        EpicObjects(kube, registry),
        Authenticator(api_users.users_of, accounts.account_of),
        settings.rest_max_body_bytes,
        tracer_provider,
        settings.rest_body_timeout_seconds,
    )
    host, port = split_address(settings.rest_address)
    tls = None if settings.grpc_cert_dir is None else ServingCertificate(settings.grpc_cert_dir)
    return HTTPServer(app, host, port, tls, max_concurrency=settings.rest_max_concurrent_requests)


def limits(settings: Settings) -> grpc_server.Limits:
    return grpc_server.Limits(settings.grpc_max_message_bytes, settings.grpc_max_concurrent_rpcs)


async def main(settings: Settings, context: ServiceContext) -> None:
    with contextlib.suppress(Stopped):  # asked to stop while the API server was still unreachable
        await serve(settings, context)


async def serve(settings: Settings, context: ServiceContext) -> None:
    serving = asyncio.Event()
    context.health.add_readiness_check("grpc", lambda: serving.is_set() or "the registration API is not serving yet")
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(settings.workers, thread_name_prefix="kube"))
    kube = Kube(api_client(settings.kubeconfig, pool_size=settings.workers))
    require_supported(*await until_done(kube.server_version, "reading the API server's version", context.stop))
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
    accounts = Credentials(*secrets_named(kube, AGENT_CREDENTIALS_SECRET))
    accounts.start()
    api_users = ApiUsers(*secrets_named(kube, API_USERS_SECRET))
    api_users.start()
    server, port = await grpc_server.start(
        registry,
        accounts,
        settings.grpc_address,
        credentials(settings),
        limits(settings),
        lambda: not context.health.readiness(),
    )
    rest = rest_server(settings, kube, registry, accounts, api_users, context.telemetry.tracer_provider)
    rest_serving = asyncio.create_task(rest.serve())
    rest_serving.add_done_callback(lambda _: context.stop.set())  # it ended on its own: the service stops, and says why
    context.health.add_readiness_check("rest", lambda: rest.started or "EPIC's REST API is not serving yet")
    serving.set()
    log.info("registration API listening", extra={"port": port, "identity": identity})
    log.info("EPIC's REST API listening", extra={"port": rest.port, "tls": rest.tls is not None})
    lease = f"tollgate-allocator-{identity}"[:63].rstrip("-")
    housekeeping = (
        asyncio.create_task(keep_lease(ids, lease, settings.lease_seconds, context.stop))
        if isinstance(ids, BlockTunnelIDs)
        else None
    )
    try:
        if settings.reconcile:
            reconciler = Reconciler(kube, registry, metrics, tracer, settings.xds_address)
            watched = Watched(reconciler, kube)
            await run_operator(settings, context, build_registry(watched, settings.resync_period_seconds))
        else:
            await context.stop.wait()
    finally:
        context.stop.set()  # whatever ended the service, the lease housekeeping stops with it
        accounts.close()
        api_users.close()
        rest.stop()
        await stop_grpc_server(server, grace=2)
        await rest_serving
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
