"""kopf handlers: every watched object goes into the xDS server's world; nothing else happens here."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
from kubernetes import client

from tollgate.models import epic, servicemesh
from tollgate.runtime.operator import configure
from tollgate.xds.k8s import list_watched
from tollgate.xds.server import XdsServer
from tollgate.xds.world import World

WATCHED = {
    "virtualservices": (servicemesh.GROUP, servicemesh.VERSION, World.set_virtual_service),
    "loadbalancers": (epic.GROUP, epic.VERSION, World.set_load_balancer),
    "remoteendpoints": (epic.GROUP, epic.VERSION, World.set_remote_endpoint),
    "gwproxies": (epic.GROUP, epic.VERSION, World.set_gw_proxy),
    "gwroutes": (epic.GROUP, epic.VERSION, World.set_gw_route),
    "gwendpointslices": (epic.GROUP, epic.VERSION, World.set_gw_endpoint_slice),
    "pods": ("", "v1", World.set_pod),
}


def register(registry: kopf.OperatorRegistry, server: XdsServer) -> None:
    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, "xds")

    for plural, (group, version, setter) in WATCHED.items():

        async def handler(event: kopf.RawEvent, body: kopf.Body, setter: Any = setter, **_: Any) -> None:
            obj = copy.deepcopy(dict(body))
            if setter(server.world, obj, deleted=event.get("type") == "DELETED"):
                server.changed()

        kopf.on.event(group, version, plural, registry=registry, id=f"watch-{plural}")(handler)


async def load(server: XdsServer, api: client.ApiClient, namespace: str | None) -> None:
    """Fill the world with a first listing of everything, then translate it once."""
    listing = await asyncio.to_thread(
        list_watched, api, namespace, {plural: (group, version) for plural, (group, version, _) in WATCHED.items()}
    )
    for plural, items in listing.items():
        setter = WATCHED[plural][2]
        for obj in items:
            setter(server.world, obj)
    server.recompute()
