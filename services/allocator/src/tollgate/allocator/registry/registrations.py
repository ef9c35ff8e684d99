"""Endpoints registered with a load balancer, through the APIs or as RemoteEndpoint objects, and the tunnels they
are reached through: a load balancer's client nodes are those of its RemoteEndpoints. The tunnel is shared by every
endpoint on the node, and its entry goes when the node's last endpoint does; an endpoint without a node address is
ad hoc: no tunnel."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tollgate.allocator import allocation
from tollgate.allocator.allocation import InvalidArgumentError
from tollgate.allocator.k8s import JSON, Kube, field_is, is_conflict, is_not_found
from tollgate.allocator.proxy import owner_reference
from tollgate.allocator.registry.clusters import ClientClusters
from tollgate.allocator.registry.errors import (
    AbortedError,
    AlreadyExistsError,
    FailedPreconditionError,
    NotFoundError,
    NotShareableError,
)
from tollgate.allocator.registry.limits import AccountLimits
from tollgate.allocator.registry.node_tunnels import NodeTunnels
from tollgate.allocator.registry.records import (
    account_ranges,
    describe,
    different,
    endpoint_addresses,
    entries,
    identity,
    node_of,
    unwanted,
)
from tollgate.allocator.tunnels import ATTEMPTS, Metrics
from tollgate.models.addresses import EndpointPolicy, Refusal
from tollgate.models.base import condition_status
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    DEFAULT_CLUSTER,
    LOAD_BALANCER_LABEL,
    Account,
    GUEEndpoint,
    GUETunnelEndpoint,
    LoadBalancer,
    RemoteEndpoint,
    RemoteEndpointSpec,
    RemoteEndpointStatus,
    ServicePort,
    account_namespace,
    account_of,
)

log = logging.getLogger("tollgate.allocator.registry.registrations")
AD_HOC = "AdHocEndpoint"


@dataclass(frozen=True)
class Endpoint:
    """An endpoint's port as a caller gives it, before validation."""

    port: int
    protocol: str = "TCP"
    name: str = ""
    app_protocol: str = ""

    def validated(self) -> ServicePort:
        number, protocol = allocation.validate_port("port", self.port, self.protocol)
        name = allocation.validate_name("port.name", self.name) if self.name else None
        if len(self.app_protocol) > 253:
            raise InvalidArgumentError("port.app_protocol: longer than 253 characters")
        return ServicePort.model_validate(
            {"port": number, "protocol": protocol, "name": name, "appProtocol": self.app_protocol or None}
        )


@dataclass(frozen=True)
class Tunnel:
    """One registered endpoint and the tunnel it is reached through (tunnel_id None: an ad-hoc endpoint)."""

    account: str
    load_balancer: str
    address: str
    port: ServicePort
    node_address: str | None
    tunnel_id: int | None
    epic: GUEEndpoint
    remote_endpoint: str


@dataclass
class Registrations:
    kube: Kube
    policy: EndpointPolicy
    metrics: Metrics
    node_tunnels: NodeTunnels
    clusters: ClientClusters
    limits: AccountLimits
    # (namespace, name) of the registrations under way in this process: the reconcile leaves their events to them.
    in_flight: set[tuple[str, str]] = field(default_factory=set, init=False)

    async def address_refusal(self, namespace: str, fields: list[tuple[str, str]]) -> Refusal | None:
        """Why an endpoint's (field, address) pairs break the endpoint policy, narrowed by the Account of
        `namespace`; None when they do not."""
        account = account_of(namespace)
        stored = await self.kube.get(Account, namespace, account)
        refusals = self.policy.refusals(fields, account_ranges(account, stored))
        return refusals[0] if refusals else None

    async def ensure_tunnel(self, rep: JSON, lb: JSON | None = None) -> tuple[JSON, int | None]:
        """Make the RemoteEndpoint Ready with its node's tunnel (none for an ad-hoc endpoint); its tunnel ID."""
        meta = rep["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        node = node_of(rep)
        lb_name = rep["spec"]["load-balancer"]
        for _ in range(ATTEMPTS):
            status = RemoteEndpointStatus.model_validate(rep.get("status") or {})
            tunnel_id = (
                None
                if node is None
                else await self.node_tunnels.ensure(LoadBalancer, namespace, lb_name, node, status.tunnel_id, lb)
            )
            lb = None
            rep = await self._accept(rep, tunnel_id)
            if node is None:
                return rep, None
            current = await self.kube.get(LoadBalancer, namespace, lb_name)
            if current is None:
                raise NotFoundError(f"load balancer {lb_name!r} was deleted")
            if (entries(current).get(node) or {}).get("tunnel-id") == tunnel_id:
                return rep, tunnel_id
            lb = current  # the node's entry went (its last other endpoint left meanwhile): record it again
        raise AbortedError(f"RemoteEndpoint {namespace}/{name}: its tunnel kept changing for {ATTEMPTS} attempts")

    async def _accept(self, rep: JSON, tunnel_id: int | None) -> JSON:
        """Write the endpoint's tunnel ID and Ready, unless it says so already."""
        meta = rep["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        for _ in range(ATTEMPTS):
            status = RemoteEndpointStatus.model_validate(rep.get("status") or {})
            ready = status.condition("Ready")
            if tunnel_id is None:
                reason, message = AD_HOC, "no node-address: an ad-hoc endpoint, reached without a tunnel"
            else:
                reason, message = "TunnelAssigned", f"tunnel ID {tunnel_id} of node {node_of(rep)}"
            if status.tunnel_id == tunnel_id and ready is not None and (ready.status, ready.reason) == ("True", reason):
                return rep
            status.tunnel_id = tunnel_id
            status.observed_generation = meta.get("generation")
            status.set_condition("Ready", "True", reason, message, meta.get("generation"))
            rep["status"] = status.to_wire()
            try:
                return await self.kube.replace_status(RemoteEndpoint, rep)
            except client.ApiException as error:
                if is_not_found(error):
                    raise NotFoundError(f"RemoteEndpoint {namespace}/{name} was deleted") from None
                if not is_conflict(error):
                    raise
                self.metrics.conflict("RemoteEndpoint")
                fresh = await self.kube.get(RemoteEndpoint, namespace, name)
                if fresh is None:
                    raise NotFoundError(f"RemoteEndpoint {namespace}/{name} was deleted") from None
                rep = fresh
                self.metrics.retried("RemoteEndpoint", 1)
        raise AbortedError(f"RemoteEndpoint {namespace}/{name}: still conflicting after {ATTEMPTS} attempts")

    async def _load_balancer(self, account: str, name: str) -> JSON:
        namespace = account_namespace(account)
        lb = await self.kube.get(LoadBalancer, namespace, name)
        if lb is not None:
            return lb
        if await self.kube.get(Account, namespace, account) is None:
            raise NotFoundError(f"account: no account {account!r}")
        raise NotFoundError(f"load_balancer: no load balancer {name!r} in account {account!r}")

    async def register(
        self,
        account: str,
        load_balancer: str,
        address: str,
        endpoint_port: Endpoint,
        node_address: str = "",
        cluster: str = "",
    ) -> tuple[Tunnel, bool]:
        """Register an endpoint; its tunnel, and whether this call created the registration. Registering the same
        (address, port, protocol) with the same spec again returns the same registration; with another spec, it
        is refused."""
        allocation.validate_name("account", account)
        allocation.validate_name("load_balancer", load_balancer)
        endpoint = allocation.validate_address("address", address)
        node = allocation.validate_address("node_address", node_address, required=False)
        port = endpoint_port.validated()
        client_cluster = allocation.validate_name("cluster", cluster) if cluster else DEFAULT_CLUSTER
        assert endpoint is not None
        fields = [("address", endpoint), *([("node_address", node)] if node else [])]
        if refusals := self.policy.refusals(fields):
            raise InvalidArgumentError(str(refusals[0]))
        lb = await self._load_balancer(account, load_balancer)
        if refusal := await self.address_refusal(lb["metadata"]["namespace"], fields):
            raise InvalidArgumentError(str(refusal))
        if lb["metadata"].get("deletionTimestamp"):
            raise FailedPreconditionError(f"load_balancer: {load_balancer!r} is being deleted")
        await self.limits.require(lb)
        namespace = lb["metadata"]["namespace"]
        name = allocation.remote_endpoint_name(load_balancer, endpoint, port.port, port.protocol)
        spec = RemoteEndpointSpec(
            load_balancer=load_balancer, address=endpoint, port=port, node_address=node, cluster=client_cluster
        )
        body = RemoteEndpoint.new(
            name,
            spec,
            namespace=namespace,
            labels={LOAD_BALANCER_LABEL: load_balancer, ACCOUNT_LABEL: account},
            ownerReferences=[owner_reference(lb)],
        ).to_wire()
        work = asyncio.ensure_future(self._register(namespace, name, body, lb))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(_log_abandoned)
            raise

    async def _register(self, namespace: str, name: str, body: JSON, lb: JSON) -> tuple[Tunnel, bool]:
        """Shielded from the caller: a registration the client gives up on (deadline, disconnect) still finishes,
        so it never stops between its object, its node's tunnel and its status; the client's retry finds it."""
        self.in_flight.add((namespace, name))
        try:
            return await self._create_and_accept(namespace, name, body, lb)
        finally:
            self.in_flight.discard((namespace, name))

    async def _create_and_accept(self, namespace: str, name: str, body: JSON, lb: JSON) -> tuple[Tunnel, bool]:
        created = True
        try:
            rep = await self.kube.create(RemoteEndpoint, namespace, body)
        except client.ApiException as error:
            if not is_conflict(error):
                raise
            created = False
            existing = await self.kube.get(RemoteEndpoint, namespace, name)
            if existing is None or existing["metadata"].get("deletionTimestamp"):
                raise AbortedError(f"the registration {name} is being removed; try again") from None
            if existing["spec"] != body["spec"]:
                raise AlreadyExistsError(
                    f"{describe(body['spec'])} is registered already as RemoteEndpoint {name} with "
                    f"{different(existing['spec'], body['spec'])}; unregister it first to change it"
                ) from None
            rep = existing
        try:
            lb = await self.clusters.admit(lb, rep["spec"].get("cluster", DEFAULT_CLUSTER))
        except NotShareableError:
            if created:  # nothing half-done: the registration goes with the refusal
                await self.kube.delete(RemoteEndpoint, namespace, name)
            raise
        rep, _ = await self.ensure_tunnel(rep, lb)
        return self._tunnel(rep, await self._epic_of(rep)), created

    async def unregister(self, account: str, load_balancer: str, address: str, port: Endpoint | None) -> int:
        """Remove the registration of `address:port/protocol`, or of every port of `address` when `port` is None;
        how many were removed."""
        allocation.validate_name("account", account)
        allocation.validate_name("load_balancer", load_balancer)
        endpoint = allocation.validate_address("address", address)
        wanted = None if port is None else allocation.validate_port("port", port.port, port.protocol)
        namespace = account_namespace(account)
        found = [
            rep
            for rep in await self.kube.list_objects(
                RemoteEndpoint, namespace, field_selector=field_is("spec.load-balancer", load_balancer)
            )
            if identity(rep["spec"])[:2] == (load_balancer, endpoint) and wanted in (None, identity(rep["spec"])[2:])
        ]
        if not found:
            await self._load_balancer(account, load_balancer)
        removed = 0
        for rep in found:
            removed += await self.kube.delete(RemoteEndpoint, namespace, rep["metadata"]["name"])
            await self.forget(rep)
        return removed

    async def forget(self, rep: JSON) -> int | None:
        """A RemoteEndpoint went: its client cluster leaves the load balancer with its last endpoint, and its node's
        tunnel too; the tunnel ID released."""
        await self.clusters.release(rep)
        return await self._release_tunnel(rep)

    async def _release_tunnel(self, rep: JSON) -> int | None:
        """Release the node's tunnel if no other endpoint of the node is left; the ID released."""
        node = node_of(rep)
        tunnel_id = (rep.get("status") or {}).get("tunnel-id")
        if node is None or tunnel_id is None:
            return None
        namespace, lb_name = rep["metadata"]["namespace"], rep["spec"]["load-balancer"]
        if await self._endpoints_on(namespace, lb_name, node):
            return None
        removed = await self._release_entry(namespace, lb_name, node, tunnel_id)
        return int(tunnel_id) if removed else None

    async def prune(self, lb: JSON) -> list[str]:
        """Remove the load balancer's tunnel entries of nodes that no endpoint is on any more; those nodes. The
        endpoints are listed after `lb` was read, so an entry written since is never judged."""
        namespace, name = lb["metadata"]["namespace"], lb["metadata"]["name"]
        wanted = {node for rep in await self.kube.remote_endpoints_of(namespace, name) if (node := node_of(rep))}
        return [
            node
            for node, tunnel_id in unwanted(lb, wanted).items()
            if await self._release_entry(namespace, name, node, tunnel_id)
        ]

    async def _release_entry(self, namespace: str, lb_name: str, node: str, tunnel_id: Any) -> bool:
        """Remove the node's tunnel entry if it still holds `tunnel_id`; whether it did. Endpoints on the node since
        the caller found none get the node's new tunnel, recorded in their status too."""
        if not await self.node_tunnels.remove(LoadBalancer, namespace, lb_name, node, tunnel_id):
            return False
        for late in await self._endpoints_on(namespace, lb_name, node):
            if await self.address_refusal(namespace, endpoint_addresses(late)) is None:
                await self.ensure_tunnel(late)
        return True

    async def _endpoints_on(self, namespace: str, lb_name: str, node: str) -> list[JSON]:
        return [r for r in await self.kube.remote_endpoints_of(namespace, lb_name) if node_of(r) == node]

    async def load_balancer(self, account: str, name: str) -> tuple[JSON, list[Tunnel]]:
        allocation.validate_name("account", account)
        allocation.validate_name("name", name)
        lb = await self._load_balancer(account, name)
        return lb, await self.tunnels(account, name)

    async def tunnels(self, account: str = "", load_balancer: str = "") -> list[Tunnel]:
        """Every accepted endpoint with its tunnel, of an account (or one of its load balancers) or of all."""
        if load_balancer and not account:
            raise InvalidArgumentError("account: required when load_balancer is given")
        namespace = account_namespace(allocation.validate_name("account", account)) if account else None
        by_endpoint = field_is("spec.load-balancer", load_balancer) if load_balancer else None
        by_name = field_is("metadata.name", load_balancer) if load_balancer else None
        # Read a page at a time, keeping of each load balancer only its tunnel entries: an account's whole list of
        # load balancers and endpoints is never decoded at once.
        tunnel_entries: dict[tuple[str, str], dict[str, Any]] = {}
        async for lbs in self.kube.pages(LoadBalancer, namespace, by_name):
            tunnel_entries |= {(lb["metadata"]["namespace"], lb["metadata"]["name"]): entries(lb) for lb in lbs}
        gue = await self.node_tunnels.gue_endpoint()
        tunnels = []
        async for reps in self.kube.pages(RemoteEndpoint, namespace, by_endpoint):
            for rep in reps:
                if condition_status(rep, "Ready") != "True":
                    continue
                entry = tunnel_entries.get((rep["metadata"]["namespace"], rep["spec"]["load-balancer"]), {})
                found = entry.get(node_of(rep) or "")
                tunnels.append(self._tunnel(rep, GUETunnelEndpoint.model_validate(found) if found else gue))
        return sorted(tunnels, key=lambda t: (t.account, t.load_balancer, t.tunnel_id or 0, t.address, t.port.port))

    async def _epic_of(self, rep: JSON) -> GUEEndpoint:
        lb = await self.kube.get(LoadBalancer, rep["metadata"]["namespace"], rep["spec"]["load-balancer"])
        entry = entries(lb or {}).get(node_of(rep) or "")
        return GUETunnelEndpoint.model_validate(entry) if entry else await self.node_tunnels.gue_endpoint()

    @staticmethod
    def _tunnel(rep: JSON, epic: GUEEndpoint) -> Tunnel:
        meta: dict[str, Any] = rep["metadata"]
        spec = RemoteEndpointSpec.model_validate(rep["spec"])
        return Tunnel(
            account=account_of(meta["namespace"]),
            load_balancer=spec.load_balancer,
            address=str(spec.address),
            port=spec.port,
            node_address=node_of(rep),
            tunnel_id=(rep.get("status") or {}).get("tunnel-id"),
            epic=epic,
            remote_endpoint=meta["name"],
        )


def _log_abandoned(work: asyncio.Future[Any]) -> None:
    """A registration whose caller went away finished: its failure is logged, nobody else will see it."""
    if not work.cancelled() and work.exception() is not None:
        log.warning("a registration whose caller went away failed: %s", work.exception())
