"""GWProxy tunnels: a GWProxy's client nodes are the `nodeAddresses` of the GWEndpointSlices its GWRoutes reach
(tollgate.allocator.gwtunnels); a node's entry goes when no such slice names it any more."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tollgate.allocator import gwtunnels, limits
from tollgate.allocator.k8s import JSON, Kube
from tollgate.allocator.registry.errors import FailedPreconditionError, NotFoundError
from tollgate.allocator.registry.limits import AccountLimits
from tollgate.allocator.registry.node_tunnels import NodeTunnels
from tollgate.allocator.registry.records import account_ranges, entries, log_fields, unwanted
from tollgate.models.addresses import AccountRanges, EndpointPolicy
from tollgate.models.epic import Account, GWEndpointSlice, GWProxy, GWRoute, account_of

log = logging.getLogger("tollgate.allocator.registry.gateways")


@dataclass(frozen=True)
class GatewayTunnels:
    """What converging one GWProxy's tunnels did: the nodes given a tunnel and those whose tunnel went, with their
    IDs, and the node addresses of its slices that get none."""

    proxy: JSON
    assigned: dict[str, int]
    released: dict[str, int]
    refused: tuple[gwtunnels.RefusedAddress, ...]


@dataclass
class Gateways:
    kube: Kube
    policy: EndpointPolicy
    node_tunnels: NodeTunnels
    limits: AccountLimits

    async def converge(self, namespace: str) -> list[GatewayTunnels]:
        """Give each GWProxy of the namespace exactly one tunnel per client node its routes reach
        (tollgate.allocator.gwtunnels): a new node gets an ID, a node keeps its ID while a slice names it, and the
        entry of a node none names any more goes (its ID is never handed out again). What changed, by proxy.

        The proxies are read before their routes and slices, so an entry written since is never judged, and
        whoever removes an entry checks again afterwards (`_release_entry`): convergences running at once, on any
        replica, end with one ID per node. A proxy beyond its Account's proxyLimit (tollgate.allocator.limits) is
        left alone: it gets its tunnels once it is served."""
        proxies = [
            gwp
            async for page in self.kube.pages(GWProxy, namespace)
            for gwp in page
            if not gwp["metadata"].get("deletionTimestamp")
        ]
        routes, slices, ranges, served = await self._glue(namespace)
        converged = []
        for gwp in proxies:
            name = gwp["metadata"]["name"]
            if served.get(name) != gwp["metadata"]["uid"] and not await self._admitted(gwp):
                continue
            nodes = gwtunnels.client_nodes(name, routes, slices, self.policy, ranges)
            try:
                assigned = {
                    node: await self.node_tunnels.ensure(GWProxy, namespace, name, node, None, None)
                    for node in sorted(nodes.wanted - entries(gwp).keys())
                }
                released = {
                    node: int(tunnel_id)
                    for node, tunnel_id in unwanted(gwp, nodes.wanted).items()
                    if await self._release_entry(namespace, name, node, tunnel_id)
                }
            except (NotFoundError, FailedPreconditionError) as error:  # it went meanwhile: its tunnels with it
                log.info("not converging its tunnels: %s", error, extra=log_fields(GWProxy, namespace, name))
                continue
            converged.append(GatewayTunnels(gwp, assigned, released, nodes.refused))
        return converged

    async def _admitted(self, gwp: JSON) -> bool:
        """Whether a proxy the Account's record does not name (yet) is within the limit: judged now, as its reconcile
        would (the first to act for it records it)."""
        try:
            return (await self.limits.admit(gwp)).served
        except NotFoundError:
            return False

    async def _glue(
        self, namespace: str
    ) -> tuple[list[gwtunnels.Route], list[gwtunnels.Slice], AccountRanges | None, dict[str, str]]:
        """The namespace's routes and slices as far as tunnels go (read a page at a time, keeping only that), its
        Account's narrowing of the endpoint policy, and the GWProxies its Account serves (name: uid)."""
        routes = [
            route
            async for page in self.kube.pages(GWRoute, namespace)
            for obj in page
            if (route := gwtunnels.route_of(obj)) is not None
        ]
        slices = [
            slice_
            async for page in self.kube.pages(GWEndpointSlice, namespace)
            for obj in page
            if (slice_ := gwtunnels.slice_of(obj)) is not None
        ]
        account = account_of(namespace)
        obj = await self.kube.get(Account, namespace, account)
        return routes, slices, account_ranges(account, obj), limits.served(GWProxy.resource.kind, obj)

    async def _release_entry(self, namespace: str, name: str, node: str, tunnel_id: Any) -> bool:
        """Remove the node's tunnel entry if it still holds `tunnel_id`; whether it did. A node that a slice named
        since the caller looked gets a tunnel again."""
        if not await self.node_tunnels.remove(GWProxy, namespace, name, node, tunnel_id):
            return False
        routes, slices, ranges, _ = await self._glue(namespace)
        if node in gwtunnels.client_nodes(name, routes, slices, self.policy, ranges).wanted:
            log.info(
                "node %s wants a tunnel again: a slice named it meanwhile",
                node,
                extra=log_fields(GWProxy, namespace, name),
            )
            await self.node_tunnels.ensure(GWProxy, namespace, name, node, None, None)
        return True
