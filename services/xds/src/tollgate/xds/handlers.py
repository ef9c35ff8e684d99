"""kopf handlers: every watched object goes into the xDS server's world; and the resync that catches what the
watches missed."""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client

from tollgate.models import epic, servicemesh
from tollgate.runtime import resync
from tollgate.runtime.backoff import Backoff
from tollgate.runtime.operator import configure
from tollgate.runtime.resync import Mirror
from tollgate.xds import ir
from tollgate.xds.k8s import list_watched
from tollgate.xds.server import XdsServer
from tollgate.xds.world import World

log = logging.getLogger("tollgate.xds.handlers")

WATCHED = {
    "virtualservices": (servicemesh.GROUP, servicemesh.VERSION, World.set_virtual_service),
    "loadbalancers": (epic.GROUP, epic.VERSION, World.set_load_balancer),
    "remoteendpoints": (epic.GROUP, epic.VERSION, World.set_remote_endpoint),
    "gwproxies": (epic.GROUP, epic.VERSION, World.set_gw_proxy),
    "gwroutes": (epic.GROUP, epic.VERSION, World.set_gw_route),
    "gwendpointslices": (epic.GROUP, epic.VERSION, World.set_gw_endpoint_slice),
    "pods": ("", "v1", World.set_pod),
}
# The watched kinds that are sources of Envoy config: their changes' traces go on to the pushes (server.traced).
SOURCE_KINDS: dict[str, ir.SourceKind] = {
    "virtualservices": "VirtualService",
    "loadbalancers": "LoadBalancer",
    "gwproxies": "GWProxy",
}
# A watch reconnects after 0.5 to 1 s (drawn once per process: kopf takes a plain number), so replicas do not
# reconnect together.
RECONNECT_BACKOFF = Backoff(base=1.0, cap=1.0, jitter=0.5)


def register(registry: kopf.OperatorRegistry, server: XdsServer, mirror: Mirror, watch_timeout: float) -> None:
    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, "xds")
        # A watch that receives nothing (not even a bookmark) for this long is taken as half-open and reopened.
        settings.watching.inactivity_timeout = watch_timeout
        settings.watching.connect_timeout = min(watch_timeout, 10)
        settings.watching.reconnect_backoff = RECONNECT_BACKOFF.pause(0)

    for plural, (group, version, setter) in WATCHED.items():

        async def handler(
            event: kopf.RawEvent, body: kopf.Body, setter: Any = setter, plural: str = plural, **_: Any
        ) -> None:
            obj = copy.deepcopy(dict(body))
            deleted = event.get("type") == "DELETED"
            mirror.record(plural, obj, deleted)
            if plural in SOURCE_KINDS:
                server.traced(SOURCE_KINDS[plural], obj, deleted)
            if setter(server.world, obj, deleted=deleted):
                server.changed()
            if plural == "virtualservices":
                server.status_dirty.set()  # another replica's report may have changed the status

        kopf.on.event(group, version, plural, registry=registry, id=f"watch-{plural}")(handler)


def _listing(api: client.ApiClient, namespace: str | None) -> dict[str, list[Any]]:
    watched = {plural: (group, version) for plural, (group, version, _) in WATCHED.items()}
    return list_watched(api, namespace, watched)


async def load(server: XdsServer, api: client.ApiClient, namespace: str | None, mirror: Mirror) -> None:
    """Fill the world with a first listing of everything, then translate it once."""
    listing = await asyncio.to_thread(_listing, api, namespace)
    for plural, items in listing.items():
        setter = WATCHED[plural][2]
        for obj in items:
            mirror.record(plural, obj)
            setter(server.world, obj)
    server.recompute()


def correct(server: XdsServer, plural: str, obj: Mapping[str, Any], deleted: bool) -> None:
    """A resync's correction: what the watches missed goes into the world like a watch event."""
    if plural in SOURCE_KINDS:
        server.traced(SOURCE_KINDS[plural], obj, deleted)
    WATCHED[plural][2](server.world, obj, deleted=deleted)


async def resync_every(
    period: float, server: XdsServer, api: client.ApiClient, namespace: str | None, mirror: Mirror, stop: asyncio.Event
) -> None:
    """The shared resync (tollgate.runtime.resync) of every watched kind; a correction recomputes the Envoys'
    config."""

    async def list_all() -> dict[str, list[Any]]:
        return await asyncio.to_thread(_listing, api, namespace)

    apply = functools.partial(correct, server)
    await resync.resync_every(period, mirror, list_all, apply, stop, on_corrected=lambda _: server.changed())
