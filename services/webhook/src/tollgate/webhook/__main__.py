"""`python -m tollgate.webhook`: Admission webhook (FastAPI) that defaults and validates every tollgate kind.

Serves HTTPS with tls.crt/tls.key from TOLLGATE_WEBHOOK_CERT_DIR (reloaded when they change). Register it
with the configurations that `python -m tollgate.webhook.cli configurations` prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import uvloop
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from tollgate.runtime.certificates import ServingCertificate
from tollgate.runtime.http_server import HTTPServer
from tollgate.runtime.kube import api_client
from tollgate.runtime.service import ServiceContext, run
from tollgate.runtime.settings import EndpointPolicySettings, RoutedIPTrustSettings, ServiceSettings
from tollgate.webhook.api.app import MAX_REQUEST_BYTES, Admitter, create_app
from tollgate.webhook.cache import store_for
from tollgate.webhook.k8s import start_informers
from tollgate.webhook.kinds import kind_of
from tollgate.webhook.registration import TIMEOUT_SECONDS
from tollgate.webhook.validation import INDEXES, Limits

# Longer than the API server's idle-connection timeout (90 s), so it never reuses a connection we just closed.
KEEP_ALIVE_SECONDS = 120


class Settings(ServiceSettings, RoutedIPTrustSettings, EndpointPolicySettings):
    model_config = SettingsConfigDict(env_prefix="TOLLGATE_WEBHOOK_", extra="ignore")

    service_name: str = "tollgate-webhook"
    host: str = Field(default="0.0.0.0", description="Address of the HTTPS admission server.")
    port: int = Field(default=9443, ge=1, le=65535, description="Port of the HTTPS admission server.")
    cert_dir: Path = Field(
        default=Path("/etc/tollgate/webhook/tls"),
        description="Directory holding tls.crt and tls.key (a kubernetes.io/tls Secret); reloaded on change.",
    )
    cert_reload_seconds: float = Field(default=2.0, gt=0, description="How often to look for a new certificate.")
    max_goop_jobs: int = Field(default=100, ge=1, le=1000, description="Largest Goop jobCount admitted.")
    pending_wait_seconds: float = Field(
        default=1.0,
        ge=0,
        lt=TIMEOUT_SECONDS,
        description="How long a review waits for the cache to see an object it references before refusing.",
    )
    max_request_bytes: int = Field(
        default=MAX_REQUEST_BYTES,
        ge=64 * 1024,
        description="Largest request body read; a larger one gets a 413 before it is parsed (4 MiB holds the "
        "review of an update of the largest object etcd stores, 1.5 MiB, twice).",
    )
    label_selector: str | None = Field(
        default=None,
        description="Cache only objects with these labels (match the configurations' objectSelector).",
    )


async def main(settings: Settings, context: ServiceContext) -> None:
    store = store_for(INDEXES)
    context.health.add_readiness_check(
        "cache", lambda: not store.unsynced() or f"not listed yet: {', '.join(store.unsynced())}"
    )
    tls = ServingCertificate(settings.cert_dir)
    admitter = Admitter(
        store,
        Limits(
            max_goop_jobs=settings.max_goop_jobs,
            routed_ip_trust=settings.routed_ip_trust(),
            endpoint_policy=settings.endpoint_policy(),
        ),
        pending_wait_seconds=settings.pending_wait_seconds,
        meter=context.telemetry.meter("tollgate.webhook"),
    )
    server = HTTPServer(
        create_app(admitter, max_request_bytes=settings.max_request_bytes),
        settings.host,
        settings.port,
        tls,
        reload_seconds=settings.cert_reload_seconds,
        keep_alive_seconds=KEEP_ALIVE_SECONDS,
    )
    context.health.add_readiness_check("https", lambda: server.started or "not serving yet")
    stop_informers = start_informers(
        api_client(settings.kubeconfig),
        [kind_of(model) for model in INDEXES],
        store,
        namespace=settings.namespace,
        label_selector=settings.label_selector,
    )
    serving = asyncio.create_task(server.serve())
    stopping = asyncio.create_task(context.stop.wait())
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        server.stop()
        await serving
        if not context.stop.is_set():
            raise RuntimeError("the HTTPS admission server stopped on its own")
    finally:
        stop_informers.set()
        stopping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopping


if __name__ == "__main__":
    # uvloop: a cheaper event loop and TLS transport than asyncio's (docs/webhook.md, "What was tried").
    sys.exit(run("python -m tollgate.webhook", __doc__ or "", Settings, main, loop_factory=uvloop.new_event_loop))
