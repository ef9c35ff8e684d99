"""Registered endpoints and their tunnels.

RemoteEndpoint objects are the record, one per (load balancer, address, port, protocol). Tunnels are EPIC's:
one tunnel ID per (proxy object, client node address), recorded in the status `gue-tunnel-endpoints` of the
LoadBalancer or GWProxy under the node address. A load balancer's client nodes are those of its RemoteEndpoints
(the tunnel is shared by every endpoint on the node; the entry goes when the node's last endpoint does; an
endpoint without a node address is ad hoc: no tunnel). A GWProxy's are the `nodeAddresses` of the
GWEndpointSlices its GWRoutes reach (tollgate.allocator.gwtunnels); the entry goes when no such slice names the
node any more.

The node entry is written with the object's resourceVersion (409 Conflict when someone wrote first), so whoever
records one node at once, on any allocator replica, ends up with one tunnel ID. Whoever removes an entry, and
whoever relies on one, checks again afterwards: the two converge (see `ensure_tunnel`, `forget` and
`converge_gateways`). A released ID is never handed out again. The registration APIs and the handlers share
this one path, for both kinds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from pydantic import ValidationError

from tollgate.allocator import allocation, gwtunnels
from tollgate.allocator.allocation import InvalidArgumentError
from tollgate.allocator.k8s import JSON, Kind, Kube, field_is, is_conflict, is_not_found
from tollgate.allocator.proxy import OWNER_LABELS, name_not_a_label, owner_reference
from tollgate.allocator.tunnels import ATTEMPTS, EpicSingleton, TunnelIDs
from tollgate.models.addresses import AccountRanges, EndpointPolicy, Refusal
from tollgate.models.base import condition_status
from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    DEFAULT_CLUSTER,
    LOAD_BALANCER_LABEL,
    Account,
    AccountSpec,
    GUEEndpoint,
    GUETunnelEndpoint,
    GWEndpointSlice,
    GWProxy,
    GWRoute,
    LBServiceGroup,
    LBServiceGroupSpec,
    LoadBalancer,
    RemoteEndpoint,
    RemoteEndpointSpec,
    RemoteEndpointStatus,
    ServicePort,
    account_namespace,
    account_of,
)

log = logging.getLogger("tollgate.allocator.registry")
GUE_CACHE_SECONDS = 5.0
TUNNELS = "gue-tunnel-endpoints"
CLUSTERS = "upstream-clusters"
AD_HOC = "AdHocEndpoint"
DUPLICATE = "DuplicateEndpoint"
ADDRESS_NOT_ALLOWED = "AddressNotAllowed"
PROXY_KINDS: dict[str, Kind] = {"LoadBalancer": LoadBalancer, "GWProxy": GWProxy}


class NotFoundError(LookupError):
    pass


class FailedPreconditionError(RuntimeError):
    pass


class AlreadyExistsError(RuntimeError):
    """The endpoint is registered already, with a different spec."""


class AbortedError(RuntimeError):
    pass


class NotShareableError(FailedPreconditionError):
    """The load balancer serves another client cluster, and its service group cannot be shared."""


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


def pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def node_of(rep: JSON) -> str | None:
    node = rep["spec"].get("node-address")
    return str(node) if node else None


def identity(spec: JSON) -> tuple[str, str, int, str]:
    """What makes an endpoint itself: load balancer, address, port and protocol."""
    port = spec.get("port") or {}
    return (
        spec.get("load-balancer", ""),
        str(spec.get("address")),
        int(port.get("port", 0)),
        port.get("protocol", "TCP"),
    )


def entries(obj: JSON) -> dict[str, Any]:
    """The tunnel entries of a LoadBalancer or GWProxy, by client node address."""
    return dict((obj.get("status") or {}).get(TUNNELS) or {})


def described(kind: Kind, name: str) -> str:
    """How messages name a LoadBalancer or GWProxy."""
    return f"{'load balancer' if kind is LoadBalancer else kind.resource.kind} {name!r}"


def log_fields(kind: Kind, namespace: str, name: str) -> dict[str, str]:
    """The object a log line is about, as the JSON lines name kopf's (tollgate.runtime.logging)."""
    return {"kind": kind.resource.kind, "object": f"{namespace}/{name}"}


@dataclass(frozen=True)
class GatewayTunnels:
    """What converging one GWProxy's tunnels did: the nodes given a tunnel and those whose tunnel went, with their
    IDs, and the node addresses of its slices that get none."""

    proxy: JSON
    assigned: dict[str, int]
    released: dict[str, int]
    refused: tuple[gwtunnels.RefusedAddress, ...]


def is_refusal(error: client.ApiException) -> bool:
    """The API server answered and did not apply the request: a 4xx. A 5xx may come after the write landed."""
    return 400 <= int(error.status or 0) < 500


def tunnel_recorded(rep: JSON, lb: JSON) -> bool:
    """The endpoint is Ready, and its tunnel ID is the one its node has in the load balancer's status (an ad-hoc
    endpoint: none)."""
    if condition_status(rep, "Ready") != "True":
        return False
    node, tunnel_id = node_of(rep), (rep.get("status") or {}).get("tunnel-id")
    if node is None:
        return tunnel_id is None
    return tunnel_id is not None and (entries(lb).get(node) or {}).get("tunnel-id") == tunnel_id


class Registry:
    def __init__(
        self,
        kube: Kube,
        ids: TunnelIDs,
        epic: EpicSingleton,
        default_gue: GUEEndpoint,
        policy: EndpointPolicy | None = None,
    ) -> None:
        self.kube = kube
        self.ids = ids
        self.epic = epic
        self.default_gue = default_gue
        self.policy = policy or EndpointPolicy()
        self._gue: tuple[float, GUEEndpoint] | None = None
        self.in_flight: set[tuple[str, str]] = set()

    async def address_refusal(self, namespace: str, fields: list[tuple[str, str]]) -> Refusal | None:
        """Why an endpoint's (field, address) pairs break the endpoint policy, narrowed by the Account of
        `namespace`; None when they do not."""
        account = account_of(namespace)
        stored = await self.kube.get(Account, namespace, account)
        refusals = self.policy.refusals(fields, account_ranges(account, stored))
        return refusals[0] if refusals else None

    async def gue_endpoint(self) -> GUEEndpoint:
        """Where tunnels terminate when no Envoy pod is scheduled: the EPIC spec's `gue-endpoint`, else the
        allocator's default."""
        if self._gue is not None and time.monotonic() - self._gue[0] < GUE_CACHE_SECONDS:
            return self._gue[1]
        obj = await self.epic.read()
        configured = (obj.get("spec") or {}).get("gue-endpoint")
        endpoint = GUEEndpoint.model_validate(configured) if configured else self.default_gue
        self._gue = (time.monotonic(), endpoint)
        return endpoint

    async def epic_endpoint(self, obj: JSON) -> GUEEndpoint:
        """Where the tunnels of a LoadBalancer or GWProxy terminate: the node running its (first scheduled) Envoy
        pod; while none runs (or none can: its name is too long a label), the EPIC-wide endpoint."""
        gue = await self.gue_endpoint()
        if name_not_a_label(obj) is not None:
            return gue
        selector = f"{OWNER_LABELS[obj['kind']]}={obj['metadata']['name']},{ENVOY_PROXY_LABEL}=true"
        node = await self.kube.pod_node_address(obj["metadata"]["namespace"], selector)
        return gue if node is None else GUEEndpoint(epic_address=node, epic_port=gue.epic_port)

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
                else await self._node_tunnel(LoadBalancer, namespace, lb_name, node, status.tunnel_id, lb)
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
                self.ids.metrics.conflict("RemoteEndpoint")
                fresh = await self.kube.get(RemoteEndpoint, namespace, name)
                if fresh is None:
                    raise NotFoundError(f"RemoteEndpoint {namespace}/{name} was deleted") from None
                rep = fresh
                self.ids.metrics.retried("RemoteEndpoint", 1)
        raise AbortedError(f"RemoteEndpoint {namespace}/{name}: still conflicting after {ATTEMPTS} attempts")

    async def _node_tunnel(
        self, kind: Kind, namespace: str, name: str, node: str, held: int | None, obj: JSON | None
    ) -> int:
        """The tunnel ID of (LoadBalancer or GWProxy, client node): the one its status records, else a new one
        recorded there. `obj` is the object as just read, if the caller has it. `held` is an ID this node had before
        (IDs are never handed to anyone else, so it may return).

        A new ID goes back to the pool only when its write was definitely refused. After an uncertain outcome
        (a timeout, a cut connection, a 5xx, a cancelled call: the write may have landed) the status is read
        again: the ID is kept if the write landed, and never handed out again otherwise."""
        taken: int | None = None
        uncertain = False
        try:
            for _ in range(ATTEMPTS):
                obj = obj or await self.kube.get(kind, namespace, name)
                if obj is None:
                    raise NotFoundError(f"{described(kind, name)} was deleted")
                if obj["metadata"].get("deletionTimestamp"):
                    raise FailedPreconditionError(f"{described(kind, name)} is being deleted")
                existing = (entries(obj).get(node) or {}).get("tunnel-id")
                if existing is not None:
                    if existing == taken:
                        taken = None
                        log.info("tunnel ID %s for node %s: a write whose answer was lost landed", existing, node)
                    return int(existing)
                if held is None and taken is None:
                    taken = await self.ids.allocate()
                tunnel_id = held if held is not None else taken
                assert tunnel_id is not None
                gue = await self.epic_endpoint(obj)
                entry = GUETunnelEndpoint(epic_address=gue.epic_address, epic_port=gue.epic_port, tunnel_id=tunnel_id)
                obj.setdefault("status", {})[TUNNELS] = entries(obj) | {node: entry.to_wire()}
                try:
                    await self.kube.replace_status(kind, obj)
                except client.ApiException as error:
                    if is_not_found(error):
                        raise NotFoundError(f"{described(kind, name)} was deleted") from None
                    if is_conflict(error):
                        self.ids.metrics.conflict(kind.resource.kind)
                        self.ids.metrics.retried(kind.resource.kind, 1)
                        obj = None
                        continue
                    uncertain = uncertain or not is_refusal(error)
                    raise
                except BaseException:
                    uncertain = True
                    raise
                if tunnel_id == taken:
                    taken = None
                log.info("tunnel ID %s for node %s", tunnel_id, node, extra=log_fields(kind, namespace, name))
                return tunnel_id
        except Exception:
            if taken is not None and uncertain and await self._recorded(kind, namespace, name, node) == taken:
                landed, taken = taken, None
                log.info("tunnel ID %s for node %s: the uncertain write landed", landed, node)
                return landed
            raise
        finally:
            if taken is not None and not uncertain:
                self.ids.give_back(taken)
            elif taken is not None:
                log.warning(
                    "tunnel ID %s is not handed out again: its write for node %s may have landed",
                    taken,
                    node,
                    extra=log_fields(kind, namespace, name),
                )
        raise AbortedError(f"{described(kind, name)} in {namespace}: still conflicting after {ATTEMPTS} attempts")

    async def _recorded(self, kind: Kind, namespace: str, name: str, node: str) -> int | None:
        """The tunnel ID the object's status records for `node`, None when it cannot be read now."""
        try:
            obj = await self.kube.get(kind, namespace, name)
        except Exception:  # the API server is what just failed: the caller raises its own error
            return None
        recorded = (entries(obj or {}).get(node) or {}).get("tunnel-id")
        return None if recorded is None else int(recorded)

    async def admit_cluster(self, lb: JSON, cluster: str) -> JSON:
        """Record the client cluster among the load balancer's `upstream-clusters`; refused when the load balancer
        serves another cluster already and its service group cannot be shared. The load balancer as it is now."""
        namespace, name = lb["metadata"]["namespace"], lb["metadata"]["name"]
        group_name = lb["spec"].get("service-group", "")
        group = await self.kube.get(LBServiceGroup, namespace, group_name)
        shareable = LBServiceGroupSpec.model_validate((group or {}).get("spec") or {}).can_be_shared
        current: JSON | None = lb
        for _ in range(ATTEMPTS):
            current = current or await self.kube.get(LoadBalancer, namespace, name)
            if current is None:
                raise NotFoundError(f"load balancer {name!r} was deleted")
            clusters = list((current.get("status") or {}).get(CLUSTERS) or [])
            if cluster in clusters:
                return current
            if clusters and not shareable:
                raise NotShareableError(
                    f"cluster: load balancer {name!r} serves cluster {clusters[0]!r}, and its service group "
                    f"{group_name!r} cannot be shared (can-be-shared: false)"
                )
            current.setdefault("status", {})[CLUSTERS] = [*clusters, cluster]
            try:
                return await self.kube.replace_status(LoadBalancer, current)
            except client.ApiException as error:
                if not is_conflict(error):
                    raise
                self.ids.metrics.conflict("LoadBalancer")
                current = None
        raise AbortedError(f"load balancer {namespace}/{name}: still conflicting after {ATTEMPTS} attempts")

    async def forget(self, rep: JSON) -> int | None:
        """A RemoteEndpoint went: its client cluster leaves the load balancer with its last endpoint, and its node's
        tunnel too; the tunnel ID released."""
        await self._release_cluster(rep)
        return await self._release_tunnel(rep)

    async def _release_cluster(self, rep: JSON) -> None:
        namespace, lb_name = rep["metadata"]["namespace"], rep["spec"]["load-balancer"]
        cluster = rep["spec"].get("cluster", DEFAULT_CLUSTER)
        others = await self.kube.remote_endpoints_of(namespace, lb_name)
        if any(r["spec"].get("cluster", DEFAULT_CLUSTER) == cluster for r in others):
            return
        lb = await self.kube.get(LoadBalancer, namespace, lb_name)
        clusters = list(((lb or {}).get("status") or {}).get(CLUSTERS) or [])
        if cluster in clusters:
            index = clusters.index(cluster)
            path = pointer("status", CLUSTERS, str(index))
            await self.kube.json_patch_status(
                LoadBalancer,
                namespace,
                lb_name,
                [{"op": "test", "path": path, "value": cluster}, {"op": "remove", "path": path}],
            )

    async def _release_tunnel(self, rep: JSON) -> int | None:
        """Release the node's tunnel if no other endpoint of the node is left; the ID released."""
        node = node_of(rep)
        tunnel_id = (rep.get("status") or {}).get("tunnel-id")
        if node is None or tunnel_id is None:
            return None
        namespace, lb_name = rep["metadata"]["namespace"], rep["spec"]["load-balancer"]
        if await self._endpoints_on(namespace, lb_name, node):
            return None
        removed = await self._remove_entry(LoadBalancer, namespace, lb_name, node, tunnel_id)
        return int(tunnel_id) if removed else None

    async def _remove_entry(self, kind: Kind, namespace: str, name: str, node: str, tunnel_id: Any) -> bool:
        """Remove a node's tunnel entry if it still holds `tunnel_id` (the ID is never handed out again). What
        wants the node's tunnel since the caller found nothing did gets it again."""
        path = pointer("status", TUNNELS, node)
        operations = [{"op": "test", "path": f"{path}/tunnel-id", "value": tunnel_id}, {"op": "remove", "path": path}]
        if not await self.kube.json_patch_status(kind, namespace, name, operations):
            return False
        where = log_fields(kind, namespace, name)
        log.info("released tunnel ID %s of node %s", tunnel_id, node, extra=where)
        if kind is LoadBalancer:  # its endpoints on the node record the new ID in their status too
            for late in await self._endpoints_on(namespace, name, node):
                if await self.address_refusal(namespace, endpoint_addresses(late)) is None:
                    await self.ensure_tunnel(late)
        elif node in await self.wanted_nodes(kind, namespace, name):
            log.info("node %s wants a tunnel again: a slice named it meanwhile", node, extra=where)
            await self._node_tunnel(kind, namespace, name, node, None, None)
        return True

    async def _endpoints_on(self, namespace: str, lb_name: str, node: str) -> list[JSON]:
        return [r for r in await self.kube.remote_endpoints_of(namespace, lb_name) if node_of(r) == node]

    async def wanted_nodes(self, kind: Kind, namespace: str, name: str) -> set[str]:
        """The client nodes that want a tunnel of the LoadBalancer or GWProxy, as listed now: the nodes of a load
        balancer's RemoteEndpoints; the allowed node addresses of the slices a GWProxy's routes reach."""
        if kind is LoadBalancer:
            return {node for rep in await self.kube.remote_endpoints_of(namespace, name) if (node := node_of(rep))}
        routes, slices, ranges = await self._gateway_glue(namespace)
        return set(gwtunnels.client_nodes(name, routes, slices, self.policy, ranges).wanted)

    async def prune(self, obj: JSON, wanted: Collection[str] | None = None) -> list[str]:
        """Remove the tunnel entries of the LoadBalancer's or GWProxy's nodes that want none any more; those nodes.
        `wanted` (by default `wanted_nodes`) is listed after `obj` was read, so an entry written since is never
        judged."""
        kind, namespace, name = PROXY_KINDS[obj["kind"]], obj["metadata"]["namespace"], obj["metadata"]["name"]
        nodes = await self.wanted_nodes(kind, namespace, name) if wanted is None else wanted
        return [
            node
            for node, entry in entries(obj).items()
            if node not in nodes and await self._remove_entry(kind, namespace, name, node, entry.get("tunnel-id"))
        ]

    async def refresh_epic_address(self, obj: JSON) -> None:
        """Move the tunnel entries of the LoadBalancer or GWProxy to the node that runs its Envoy pod now."""
        gue = await self.epic_endpoint(obj)
        wanted = {"epic-address": str(gue.epic_address), "epic-port": gue.epic_port.to_wire()}
        operations = [
            {"op": "replace", "path": pointer("status", TUNNELS, node, key), "value": value}
            for node, entry in entries(obj).items()
            for key, value in wanted.items()
            if entry.get(key) != value
        ]
        if operations:
            await self.kube.json_patch_status(
                PROXY_KINDS[obj["kind"]], obj["metadata"]["namespace"], obj["metadata"]["name"], operations
            )

    # GWProxies: their client nodes come from the GWEndpointSlices their GWRoutes reach

    async def converge_gateways(self, namespace: str) -> list[GatewayTunnels]:
        """Give each GWProxy of the namespace exactly one tunnel per client node its routes reach
        (tollgate.allocator.gwtunnels): a new node gets an ID, a node keeps its ID while a slice names it, and the
        entry of a node none names any more goes (its ID is never handed out again). What changed, by proxy.

        The proxies are read before their routes and slices, so an entry written since is never judged, and
        whoever removes an entry checks again afterwards (`_remove_entry`): convergences running at once, on any
        replica, end with one ID per node."""
        proxies = [
            gwp
            async for page in self.kube.pages(GWProxy, namespace)
            for gwp in page
            if not gwp["metadata"].get("deletionTimestamp")
        ]
        routes, slices, ranges = await self._gateway_glue(namespace)
        converged = []
        for gwp in proxies:
            name = gwp["metadata"]["name"]
            nodes = gwtunnels.client_nodes(name, routes, slices, self.policy, ranges)
            recorded = entries(gwp)
            try:
                assigned = {
                    node: await self._node_tunnel(GWProxy, namespace, name, node, None, None)
                    for node in sorted(nodes.wanted - recorded.keys())
                }
                released = {node: int(recorded[node]["tunnel-id"]) for node in await self.prune(gwp, nodes.wanted)}
            except (NotFoundError, FailedPreconditionError) as error:  # it went meanwhile: its tunnels with it
                log.info("not converging its tunnels: %s", error, extra=log_fields(GWProxy, namespace, name))
                continue
            converged.append(GatewayTunnels(gwp, assigned, released, nodes.refused))
        return converged

    async def _gateway_glue(
        self, namespace: str
    ) -> tuple[list[gwtunnels.Route], list[gwtunnels.Slice], AccountRanges | None]:
        """The namespace's routes and slices as far as tunnels go (read a page at a time, keeping only that), and
        its Account's narrowing of the endpoint policy."""
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
        return routes, slices, account_ranges(account, await self.kube.get(Account, namespace, account))

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
            lb = await self.admit_cluster(lb, rep["spec"].get("cluster", DEFAULT_CLUSTER))
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
        gue = await self.gue_endpoint()
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
        return GUETunnelEndpoint.model_validate(entry) if entry else await self.gue_endpoint()

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


def endpoint_addresses(rep: JSON) -> list[tuple[str, str]]:
    """A RemoteEndpoint's addresses as the endpoint policy judges them, by field."""
    spec = rep["spec"]
    node = spec.get("node-address")
    return [("spec.address", str(spec.get("address"))), *([("spec.node-address", str(node))] if node else [])]


def account_ranges(name: str, account: JSON | None) -> AccountRanges | None:
    """The ranges an Account narrows its endpoints to; none allowed when its spec does not parse (it got past a down
    webhook): closed rather than open."""
    try:
        return AccountSpec.model_validate((account or {}).get("spec") or {}).endpoint_ranges(name)
    except ValidationError:
        return AccountRanges(name, ())


def _log_abandoned(work: asyncio.Future[Any]) -> None:
    """A registration whose caller went away finished: its failure is logged, nobody else will see it."""
    if not work.cancelled() and work.exception() is not None:
        log.warning("a registration whose caller went away failed: %s", work.exception())


def _is_ready(rep: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (rep.get("status") or {}).get("conditions") or []
    )


def describe(spec: JSON) -> str:
    _, address, port, protocol = identity(spec)
    return f"endpoint {address}:{port}/{protocol}"


def different(existing: JSON, wanted: JSON) -> str:
    """The fields in which an existing registration differs from the one asked for."""
    have, want = _flat(existing), _flat(wanted)
    keys = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
    return ", ".join(f"{key} {have.get(key)!r} (not {want.get(key)!r})" for key in keys)


def _flat(spec: JSON, prefix: str = "") -> JSON:
    flat: JSON = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
