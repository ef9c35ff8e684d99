"""The kopf handlers: thin, each reads the event and calls the Reconciler's part for its kind (RemoteEndpoint and
load balancer events through `Watched`, which the resync started here corrects)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf

from tollgate.allocator.watched import Watched
from tollgate.models.epic import (
    GWPROXY_LABEL,
    LOAD_BALANCER_LABEL,
    Account,
    GWEndpointSlice,
    GWProxy,
    GWRoute,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    ServicePrefix,
)
from tollgate.runtime import resync
from tollgate.runtime.operator import configure

PREFIX_SWEEP_SECONDS = 60.0
ADDRESS_RETRY_SECONDS = 10.0


def _resource(kind: Any) -> tuple[str, str, str]:
    info = kind.resource
    return info.group, info.version, info.plural


def _raw(body: kopf.Body) -> dict[str, Any]:
    return copy.deepcopy(dict(body))


def build_registry(watched: Watched, resync_period: float) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    reconciler = watched.reconciler
    stop_resync = asyncio.Event()
    resyncing: list[asyncio.Task[None]] = []
    account, lb, gwp, group, rep, prefix = (
        _resource(k) for k in (Account, LoadBalancer, GWProxy, LBServiceGroup, RemoteEndpoint, ServicePrefix)
    )
    route, slice_ = _resource(GWRoute), _resource(GWEndpointSlice)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, "allocator")
        resyncing.append(
            asyncio.create_task(
                resync.resync_every(resync_period, watched.mirror, watched.list_all, watched.correct, stop_resync),
                name="resync",
            )
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        stop_resync.set()
        await asyncio.gather(*resyncing)

    @kopf.on.resume(*account, registry=registry)
    @kopf.on.create(*account, registry=registry)
    @kopf.on.update(*account, registry=registry)
    async def account_changed(body: kopf.Body, **_: Any) -> None:
        await reconciler.accounts.reconcile(_raw(body))

    @kopf.on.delete(*account, registry=registry)
    async def account_deleted(body: kopf.Body, **_: Any) -> None:
        await reconciler.accounts.clean_up(_raw(body))

    @kopf.on.resume(*lb, registry=registry)
    @kopf.on.create(*lb, registry=registry)
    @kopf.on.update(*lb, registry=registry)
    async def load_balancer_changed(body: kopf.Body, **_: Any) -> None:
        if retry := await reconciler.load_balancers.reconcile(_raw(body)):
            raise kopf.TemporaryError(retry, delay=ADDRESS_RETRY_SECONDS)

    @kopf.on.resume(*gwp, registry=registry)
    @kopf.on.create(*gwp, registry=registry)
    @kopf.on.update(*gwp, registry=registry)
    async def gwproxy_changed(body: kopf.Body, **_: Any) -> None:
        if retry := await reconciler.gwproxies.reconcile(_raw(body)):
            raise kopf.TemporaryError(retry, delay=ADDRESS_RETRY_SECONDS)

    # RemoteEndpoints are handled per event, without kopf's progress annotations: most are created by the gRPC
    # path with their tunnel already assigned, and this only repairs or completes what it finds. Load balancers'
    # deletions free what they held.
    @kopf.on.event(*rep, registry=registry)
    @kopf.on.event(*lb, registry=registry)
    @kopf.on.event(*gwp, registry=registry)
    async def watched_event(event: kopf.RawEvent, resource: kopf.Resource, **_: Any) -> None:
        await watched.event(resource.plural, copy.deepcopy(dict(event["object"])), event["type"] == "DELETED")

    # Addresses of holders deleted while no allocator watched are freed at start and then now and then.
    @kopf.on.resume(*prefix, registry=registry)
    @kopf.timer(*prefix, interval=PREFIX_SWEEP_SECONDS, registry=registry)
    async def prefix_sweep(body: kopf.Body, **_: Any) -> None:
        await reconciler.proxies.prefix_changed(_raw(body))

    @kopf.on.create(*group, registry=registry)
    @kopf.on.update(*group, registry=registry)
    async def group_changed(body: kopf.Body, **_: Any) -> None:
        await reconciler.groups.changed(_raw(body))

    @kopf.on.delete(*group, registry=registry)
    async def group_deleted(body: kopf.Body, **_: Any) -> None:
        await reconciler.groups.deleted(_raw(body))

    @kopf.on.event("apps", "v1", "deployments", id="lb", labels={LOAD_BALANCER_LABEL: kopf.PRESENT}, registry=registry)
    @kopf.on.event("apps", "v1", "deployments", id="gwp", labels={GWPROXY_LABEL: kopf.PRESENT}, registry=registry)
    async def proxy_changed(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] != "DELETED":
            await reconciler.proxies.deployment_changed(copy.deepcopy(dict(event["object"])))

    # GWRoutes and GWEndpointSlices are the client's objects, handled per event (no progress annotations written on
    # them): any change, deletion too, converges the tunnels of the GWProxies of their namespace.
    @kopf.on.event(*route, registry=registry)
    @kopf.on.event(*slice_, registry=registry)
    async def gateway_part_event(event: kopf.RawEvent, **_: Any) -> None:
        await reconciler.gwproxies.converge_tunnels(event["object"]["metadata"]["namespace"])

    return registry
