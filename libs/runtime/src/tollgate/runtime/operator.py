"""Running kopf handlers inside a tollgate service: readiness follows kopf's, SIGTERM stops it."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import Any

import kopf

from tollgate.runtime.backoff import Backoff
from tollgate.runtime.kube import api_client, timeouts
from tollgate.runtime.leader import LeaderElector, LeaseConfig
from tollgate.runtime.service import ServiceContext
from tollgate.runtime.settings import ServiceSettings

log = logging.getLogger("tollgate.runtime.operator")

FINALIZER = "tollgate.io/finalizer"


def configure(settings: kopf.OperatorSettings, service: str) -> None:
    """The kopf settings every tollgate operator shares."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=f"{service}.tollgate.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=f"{service}.tollgate.io", key="last-handled-configuration"
    )
    limits = timeouts()
    settings.networking.request_timeout = limits.request
    settings.networking.connect_timeout = limits.connect
    settings.networking.error_backoffs = JitteredBackoffs(KOPF_ERROR_BACKOFF, KOPF_ERROR_RETRIES)
    # kopf's watch requests: a half-open connection sends nothing and reports nothing, so a watch must be given
    # up on by the client. The server ends a healthy one at server_timeout; the client gives up a little later
    # (client_timeout bounds the whole request), or after inactivity_timeout without any event (the API server
    # sends a bookmark every minute, so kopf's 70 s default tells a silent stream from a quiet one). Reconnecting
    # resumes from the last resourceVersion seen: the API server replays what was missed meanwhile, or answers
    # 410 Gone and kopf lists everything again.
    settings.watching.server_timeout = limits.watch
    settings.watching.client_timeout = limits.watch_client()
    settings.watching.connect_timeout = limits.connect
    settings.watching.inactivity_timeout = min(settings.watching.inactivity_timeout, limits.watch_client())
    settings.watching.reconnect_backoff = WATCH_RECONNECT_SECONDS
    settings.batching.idle_timeout = WORKER_IDLE_SECONDS


# kopf keeps each object's worker (a task, its queue, the object's last event) alive this long after the object's
# last event, in case another follows; the next event of an object whose worker has left starts a new one. kopf's
# default of 5 s keeps a worker for every object a burst touched in the last 5 s: with 1000 Goops and their Jobs
# created at once, the jobs controller peaked at 128 MB, and at 111 MB with half a second (bench/memory.py).
WORKER_IDLE_SECONDS = 0.5

# kopf's own defaults, each pause with jitter: the retries of many operators that lost the API server at once
# (a restart) must not come back in lockstep.
# kopf retries a failed API request this many times, pausing as KOPF_ERROR_BACKOFF says before each retry.
KOPF_ERROR_RETRIES = 8
KOPF_ERROR_BACKOFF = Backoff(base=1.0, cap=21.0, jitter=0.5)
# kopf sleeps this plain number between two watch streams that ended in an error: it takes no jitter.
WATCH_RECONNECT_SECONDS = 1.0


class JitteredBackoffs:
    """Retry pauses for kopf's `networking.error_backoffs`: each time kopf iterates it (once per request), the
    pauses are drawn anew from `backoff`."""

    def __init__(self, backoff: Backoff, retries: int) -> None:
        self.backoff, self.retries = backoff, retries

    def __len__(self) -> int:  # kopf numbers its attempts "#n/total" for a sized sequence
        return self.retries

    def __iter__(self) -> Iterator[float]:
        return (self.backoff.pause(attempt) for attempt in range(self.retries))


async def run_operator(
    settings: ServiceSettings,
    context: ServiceContext,
    registry: kopf.OperatorRegistry | None = None,
    lease: LeaseConfig | None = None,
) -> None:
    """Run kopf until the service is asked to stop. Watches `settings.namespace`, or the whole cluster.

    kopf installs its own SIGTERM/SIGINT handlers over the service's; its cleanup phase sets the service's
    stop flag, so the rest of the service (servers, background tasks) stops with it.

    With a `lease`, kopf starts only once this replica holds it (until then the replica stands by, ready);
    a clean stop hands the Lease over. Losing it (another replica holds it, or renewing failed until the renew
    deadline) stops kopf and raises LeaseLost, so the process exits and comes back as a standby; the watchdog
    ends the process should it not have stopped kopf, or exited, within the Lease's stop margin.
    """
    if settings.kubeconfig is not None:
        os.environ["KUBECONFIG"] = str(settings.kubeconfig)
    registry = registry or kopf.get_default_registry()
    if lease is None:
        await _run_kopf(settings, context, registry)
        return
    elector = LeaderElector(api_client(settings.kubeconfig), lease)
    if not await elector.acquire(context.stop):
        return
    kopf_stopped = asyncio.Event()  # renewals go on while kopf stops: it acts until then
    keeping = asyncio.create_task(elector.keep(kopf_stopped))
    keeping.add_done_callback(lambda task: _stop_on_loss(task, context))
    with elector.watchdog():
        try:
            await _run_kopf(settings, context, registry)
        finally:
            kopf_stopped.set()
        log.info("stopped leading", extra={"lease": f"{lease.namespace}/{lease.name}"})
        await asyncio.wait({keeping})
        if (lost := keeping.exception()) is not None:
            raise lost
    await elector.release()


def _stop_on_loss(keeping: asyncio.Task[None], context: ServiceContext) -> None:
    if not keeping.cancelled() and (lost := keeping.exception()) is not None:
        log.error("lost the Lease: stopping, to restart as a standby", extra={"why": str(lost)})
    context.stop.set()


async def _run_kopf(settings: ServiceSettings, context: ServiceContext, registry: kopf.OperatorRegistry) -> None:
    """kopf until it stops; the service's stop flag is set afterwards, however kopf ended."""

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)  # the kubernetes client's credentials: KUBECONFIG, else in-cluster

    @kopf.on.cleanup(registry=registry)
    async def _stop_the_service(**_: object) -> None:
        context.health.stopping.set()
        context.stop.set()

    ready = asyncio.Event()
    context.health.add_readiness_check("operator", lambda: ready.is_set() or "kopf is not watching yet")
    namespaces = [settings.namespace] if settings.namespace else []
    try:
        await kopf.operator(
            registry=registry,
            clusterwide=not namespaces,
            namespaces=namespaces,
            standalone=True,
            ready_flag=ready,
            stop_flag=context.stop,
        )
    finally:
        context.stop.set()
