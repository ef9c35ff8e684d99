"""GWProxies: their public addresses, Envoys and tunnels (xds turns their Gateway listeners and GWRoutes into
config)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tollgate.allocator import proxy
from tollgate.allocator.gwtunnels import RefusedAddress
from tollgate.allocator.k8s import JSON
from tollgate.allocator.reconcile.part import Part
from tollgate.allocator.reconcile.proxies import ADDRESS_RETRY_REASONS, Proxies
from tollgate.allocator.reconcile.remote_endpoints import ADDRESS_NOT_ALLOWED
from tollgate.allocator.registry.records import log_fields
from tollgate.models.epic import GWEndpointSlice, GWProxy, GWProxyStatus, account_of
from tollgate.runtime.coalesce import Coalesced
from tollgate.runtime.tracing import annotated_parent, parent_context

log = logging.getLogger("tollgate.allocator.reconcile.gwproxies")


@dataclass
class GWProxies(Part):
    proxies: Proxies
    # One convergence of a namespace's GWProxy tunnels at a time; those asked for meanwhile share the next.
    _runs: Coalesced[str, None] = field(init=False)
    # By namespace: the (slice uid, refusal) pairs its last convergence found, each told in an Event once.
    _refused_addresses: dict[str, frozenset[tuple[str, str]]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._runs = Coalesced(self._converge)

    async def reconcile(self, gwp: JSON) -> str | None:
        """A GWProxy's place within its Account's proxyLimit, public address, Envoy Deployment and tunnels, as a load
        balancer's; a message when to try again."""
        meta = gwp["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        if meta.get("deletionTimestamp"):
            return None
        change = parent_context(annotated_parent(gwp))
        attributes = {"namespace": namespace, "name": name}
        with self.tracer.start_as_current_span("reconcile GWProxy", change, attributes=attributes):
            account = account_of(namespace)
            ok, reason, message = await self.proxies.admission(gwp)
            if ok:
                ok, reason, message, gwp = await self.proxies.public_address(gwp, "Allocated", "allocated")
            proxy_state = (
                (False, "NotAllocated", f"waiting for Allocated ({reason})")
                if not ok
                else await self.proxies.deploy(gwp, account)
            )

            def write(status: GWProxyStatus) -> None:
                proxy.set_conditions(status, generation, (ok, reason, message), proxy_state)

            written = await self.update_status(GWProxy, namespace, name, write)
            if written is None:
                return None
            await self.registry.node_tunnels.refresh_epic_address(written)
            await self.converge_tunnels(namespace)
            return message if reason in ADDRESS_RETRY_REASONS else None

    async def converge_tunnels(self, namespace: str) -> None:
        """Converge the tunnels of the namespace's GWProxies to the client nodes their routes reach
        (Gateways.converge), after a change to any of its GWProxies, GWRoutes, GWEndpointSlices or its Account.
        Asked while a run is under way, the next run (which starts after the ask) serves all who asked."""
        await self._runs(namespace)

    async def _converge(self, namespace: str) -> None:
        with self.tracer.start_as_current_span("converge GWProxy tunnels", attributes={"namespace": namespace}):
            converged = await self.registry.gateways.converge(namespace)
            refused: dict[tuple[str, str], RefusedAddress] = {}
            for change in converged:
                for node, tunnel_id in change.assigned.items():
                    await self.kube.event(
                        change.proxy, "TunnelAssigned", f"tunnel ID {tunnel_id} of client node {node}"
                    )
                for node, tunnel_id in change.released.items():
                    message = (
                        f"released tunnel ID {tunnel_id} of client node {node}: no GWEndpointSlice its routes reach "
                        "names it any more"
                    )
                    await self.kube.event(change.proxy, "TunnelReleased", message)
                refused |= {(r.slice.reference["metadata"]["uid"], str(r.refusal)): r for r in change.refused}
            told = self._refused_addresses.pop(namespace, frozenset())
            if refused:
                self._refused_addresses[namespace] = frozenset(refused)
            for key in sorted(refused.keys() - told):
                await self._refuse_node_address(refused[key])

    async def _refuse_node_address(self, refused: RefusedAddress) -> None:
        """A node address of a slice some GWProxy reaches gets no tunnel: say so on the slice, naming the field."""
        reference = refused.slice.reference
        message = f"{refused.refusal}: no GUE tunnel for this node"
        where = log_fields(GWEndpointSlice, reference["metadata"]["namespace"], refused.slice.name)
        log.warning("GWEndpointSlice %s: %s", refused.slice.name, message, extra=where)
        await self.kube.event(reference, ADDRESS_NOT_ALLOWED, message, warning=True)
