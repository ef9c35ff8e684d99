"""Registered endpoints: RemoteEndpoint objects are the record; each gets a tunnel ID once, and the load
balancer's status `gue-tunnel-endpoints` mirrors them, keyed by endpoint address.

The gRPC API and the RemoteEndpoint handlers share this one path, so an endpoint gets the same tunnel
however it was registered and whichever allocator replica got there first.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from tollgate.allocator import allocation
from tollgate.allocator.allocation import InvalidArgumentError
from tollgate.allocator.k8s import JSON, Kube, is_conflict, is_not_found
from tollgate.allocator.proxy import owner_reference
from tollgate.allocator.tunnels import ATTEMPTS, EpicSingleton, TunnelIDs
from tollgate.models.epic import (
    ACCOUNT_LABEL,
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

log = logging.getLogger("tollgate.allocator.registry")
GUE_CACHE_SECONDS = 5.0
TUNNELS = "gue-tunnel-endpoints"


class NotFoundError(LookupError):
    pass


class FailedPreconditionError(RuntimeError):
    pass


class AbortedError(RuntimeError):
    pass


@dataclass(frozen=True)
class Tunnel:
    account: str
    load_balancer: str
    address: str
    tunnel_id: int
    epic: GUEEndpoint
    remote_endpoint: str


def pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


class Registry:
    def __init__(self, kube: Kube, ids: TunnelIDs, epic: EpicSingleton, default_gue: GUEEndpoint) -> None:
        self.kube = kube
        self.ids = ids
        self.epic = epic
        self.default_gue = default_gue
        self._gue: tuple[float, GUEEndpoint] | None = None
        self.in_flight: set[tuple[str, str]] = set()

    async def gue_endpoint(self) -> GUEEndpoint:
        """Where tunnels terminate: the EPIC spec's `gue-endpoint`, else the allocator's default."""
        if self._gue is not None and time.monotonic() - self._gue[0] < GUE_CACHE_SECONDS:
            return self._gue[1]
        obj = await self.epic.read()
        configured = (obj.get("spec") or {}).get("gue-endpoint")
        endpoint = GUEEndpoint.model_validate(configured) if configured else self.default_gue
        self._gue = (time.monotonic(), endpoint)
        return endpoint

    async def ensure_tunnel(self, rep: JSON, lb: JSON | None = None) -> tuple[JSON, int]:
        """Give the RemoteEndpoint a tunnel ID unless it has one, and record it in its load balancer's status."""
        meta = rep["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        spec = RemoteEndpointSpec.model_validate(rep["spec"])
        held: int | None = None
        tunnel_id: int | None = None
        try:
            for _ in range(ATTEMPTS):
                status = RemoteEndpointStatus.model_validate(rep.get("status") or {})
                if status.tunnel_id is not None:
                    tunnel_id = status.tunnel_id
                    break
                if held is None:
                    held = await self.ids.allocate()
                status.tunnel_id = held
                status.observed_generation = meta.get("generation")
                status.set_condition("Ready", "True", "TunnelAssigned", f"tunnel ID {held}", meta.get("generation"))
                rep["status"] = status.to_wire()
                try:
                    rep = await self.kube.replace_status(RemoteEndpoint, rep)
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
                    continue
                tunnel_id, held = held, None
                break
        finally:
            if held is not None:
                self.ids.give_back(held)
        if tunnel_id is None:
            raise AbortedError(f"RemoteEndpoint {namespace}/{name}: still conflicting after {ATTEMPTS} attempts")
        await self._record(namespace, spec, tunnel_id, lb)
        return rep, tunnel_id

    async def _record(self, namespace: str, spec: RemoteEndpointSpec, tunnel_id: int, lb: JSON | None) -> None:
        gue = await self.gue_endpoint()
        entry = GUETunnelEndpoint(epic_address=gue.epic_address, epic_port=gue.epic_port, tunnel_id=tunnel_id).to_wire()
        address = str(spec.address)
        if lb is not None and ((lb.get("status") or {}).get(TUNNELS) or {}).get(address) == entry:
            return
        try:
            await self.kube.merge_status(LoadBalancer, namespace, spec.load_balancer, {TUNNELS: {address: entry}})
        except client.ApiException as error:
            if is_not_found(error):
                raise NotFoundError(f"load balancer {spec.load_balancer!r} was deleted") from None
            raise

    async def forget(self, rep: JSON) -> bool:
        """Remove a gone RemoteEndpoint's entry from its load balancer's status, if the entry is still its own."""
        tunnel_id = (rep.get("status") or {}).get("tunnel-id")
        if tunnel_id is None:
            return False
        address = str(rep["spec"]["address"])
        path = pointer("status", TUNNELS, address)
        operations = [{"op": "test", "path": f"{path}/tunnel-id", "value": tunnel_id}, {"op": "remove", "path": path}]
        namespace = rep["metadata"]["namespace"]
        released = await self.kube.json_patch_status(LoadBalancer, namespace, rep["spec"]["load-balancer"], operations)
        if released:
            log.info("released tunnel ID %s of %s", tunnel_id, address, extra={"namespace": namespace})
        return released

    async def prune(self, lb: JSON, reps: list[JSON]) -> list[str]:
        """Remove status entries of the load balancer that no RemoteEndpoint holds any more; their addresses."""
        held = {
            (str(r["spec"]["address"]), (r.get("status") or {}).get("tunnel-id"))
            for r in reps
            if r["spec"].get("load-balancer") == lb["metadata"]["name"]
        }
        pruned = []
        for address, entry in ((lb.get("status") or {}).get(TUNNELS) or {}).items():
            if (address, entry.get("tunnel-id")) in held:
                continue
            path = pointer("status", TUNNELS, address)
            operations = [
                {"op": "test", "path": f"{path}/tunnel-id", "value": entry.get("tunnel-id")},
                {"op": "remove", "path": path},
            ]
            if await self.kube.json_patch_status(
                LoadBalancer, lb["metadata"]["namespace"], lb["metadata"]["name"], operations
            ):
                pruned.append(address)
        return pruned

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
        port: int,
        protocol: str = "TCP",
        app_protocol: str = "",
        node_address: str = "",
    ) -> tuple[Tunnel, bool]:
        """Register an endpoint (idempotent); its tunnel, and whether this call created the registration."""
        allocation.validate_name("account", account)
        allocation.validate_name("load_balancer", load_balancer)
        endpoint = allocation.validate_address("address", address)
        node = allocation.validate_address("node_address", node_address, required=False)
        port, protocol = allocation.validate_port("port", port, protocol)
        assert endpoint is not None
        lb = await self._load_balancer(account, load_balancer)
        if lb["metadata"].get("deletionTimestamp"):
            raise FailedPreconditionError(f"load_balancer: {load_balancer!r} is being deleted")
        namespace = lb["metadata"]["namespace"]
        name = allocation.remote_endpoint_name(load_balancer, endpoint)
        spec = RemoteEndpointSpec(
            load_balancer=load_balancer,
            address=endpoint,
            port=ServicePort(port=port, protocol=protocol, app_protocol=app_protocol or None),
            node_address=node,
        )
        body = RemoteEndpoint.new(
            name,
            spec,
            namespace=namespace,
            labels={LOAD_BALANCER_LABEL: load_balancer, ACCOUNT_LABEL: account},
            ownerReferences=[owner_reference(lb)],
        ).to_wire()
        self.in_flight.add((namespace, name))
        try:
            return await self._register(namespace, name, body, lb)
        finally:
            self.in_flight.discard((namespace, name))

    async def _register(self, namespace: str, name: str, body: JSON, lb: JSON) -> tuple[Tunnel, bool]:
        endpoint = body["spec"]["address"]
        created = True
        try:
            rep = await self.kube.create(RemoteEndpoint, namespace, body)
        except client.ApiException as error:
            if not is_conflict(error):
                raise
            created = False
            existing = await self.kube.get(RemoteEndpoint, namespace, name)
            if existing is None or existing["metadata"].get("deletionTimestamp"):
                raise AbortedError(f"the registration of {endpoint} is being removed; try again") from None
            rep = existing
            if rep["spec"] != body["spec"]:
                rep = await self.kube.patch(RemoteEndpoint, namespace, name, {"spec": body["spec"]})
        rep, tunnel_id = await self.ensure_tunnel(rep, lb)
        return self._tunnel(rep, tunnel_id, await self.gue_endpoint()), created

    async def unregister(self, account: str, load_balancer: str, address: str) -> bool:
        allocation.validate_name("account", account)
        allocation.validate_name("load_balancer", load_balancer)
        endpoint = allocation.validate_address("address", address)
        assert endpoint is not None
        namespace = account_namespace(account)
        name = allocation.remote_endpoint_name(load_balancer, endpoint)
        rep = await self.kube.get(RemoteEndpoint, namespace, name)
        if rep is None:
            await self._load_balancer(account, load_balancer)
            return False
        deleted = await self.kube.delete(RemoteEndpoint, namespace, name)
        await self.forget(rep)
        return deleted

    async def load_balancer(self, account: str, name: str) -> tuple[JSON, list[Tunnel]]:
        allocation.validate_name("account", account)
        allocation.validate_name("name", name)
        lb = await self._load_balancer(account, name)
        return lb, await self.tunnels(account, name)

    async def tunnels(self, account: str = "", load_balancer: str = "") -> list[Tunnel]:
        """Every tunnel the RemoteEndpoints hold, of an account (or one of its load balancers) or of all."""
        if load_balancer and not account:
            raise InvalidArgumentError("account: required when load_balancer is given")
        namespace = account_namespace(allocation.validate_name("account", account)) if account else None
        reps = await self.kube.list_objects(RemoteEndpoint, namespace)
        gue = await self.gue_endpoint()
        tunnels = []
        for rep in reps:
            tunnel_id = (rep.get("status") or {}).get("tunnel-id")
            if tunnel_id is not None and (not load_balancer or rep["spec"]["load-balancer"] == load_balancer):
                tunnels.append(self._tunnel(rep, int(tunnel_id), gue))
        return sorted(tunnels, key=lambda t: (t.account, t.load_balancer, t.tunnel_id))

    @staticmethod
    def _tunnel(rep: JSON, tunnel_id: int, gue: GUEEndpoint) -> Tunnel:
        meta: dict[str, Any] = rep["metadata"]
        return Tunnel(
            account=account_of(meta["namespace"]),
            load_balancer=rep["spec"]["load-balancer"],
            address=str(rep["spec"]["address"]),
            tunnel_id=tunnel_id,
            epic=gue,
            remote_endpoint=meta["name"],
        )
