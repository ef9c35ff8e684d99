"""Service groups (LBServiceGroup): the proxies of their load balancers and GWProxies follow them, and a group in
use is not deleted."""

from __future__ import annotations

from dataclasses import dataclass

import kopf

from tollgate.allocator.k8s import JSON, Kind, field_is
from tollgate.allocator.reconcile.gwproxies import GWProxies
from tollgate.allocator.reconcile.load_balancers import LoadBalancers
from tollgate.allocator.reconcile.part import Part, set_ready
from tollgate.models.epic import GWProxy, LBServiceGroup, LoadBalancer

GROUP_RETRY_SECONDS = 5.0


@dataclass
class ServiceGroups(Part):
    load_balancers: LoadBalancers
    gwproxies: GWProxies

    async def changed(self, group: JSON) -> None:
        """A service group changed: the proxies of its load balancers and GWProxies follow (image, resources,
        bootstrap)."""
        for obj in await self._users(group):
            if obj["kind"] == "LoadBalancer":
                await self.load_balancers.reconcile(obj)
            else:
                await self.gwproxies.reconcile(obj)

    async def _users(self, group: JSON, kinds: tuple[Kind, ...] = (LoadBalancer, GWProxy)) -> list[JSON]:
        namespace, name = group["metadata"]["namespace"], group["metadata"]["name"]
        using = field_is("spec.service-group", name)
        return [obj for kind in kinds for obj in await self.kube.list_objects(kind, namespace, field_selector=using)]

    async def deleted(self, group: JSON) -> None:
        """A service group goes only once no LoadBalancer or GWProxy uses it: until then its finalizer holds it,
        and its Ready condition names them."""
        users = await self._users(group)
        if not users:
            return
        names = ", ".join(f"{obj['kind']} {obj['metadata']['name']}" for obj in users)
        message = f"in use by {names}: delete them first; the group goes when the last one has"
        meta = group["metadata"]
        await self.update_status(
            LBServiceGroup,
            meta["namespace"],
            meta["name"],
            lambda s: set_ready(s, False, "InUse", message, meta.get("generation")),
        )
        await self.kube.event(group, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=GROUP_RETRY_SECONDS)
