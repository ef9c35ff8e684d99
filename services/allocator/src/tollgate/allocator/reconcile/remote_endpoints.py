"""RemoteEndpoint events: an endpoint created as an object gets its node's tunnel once its addresses are allowed,
its load balancer is there and served (within its Account's limit) and no older twin holds its place; a deleted one
releases its tunnel and client cluster; and its load balancer's EndpointsMatched follows them all."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tollgate.allocator import limits, proxy
from tollgate.allocator.k8s import JSON
from tollgate.allocator.reconcile.part import Part
from tollgate.allocator.registry.errors import NotFoundError, NotShareableError
from tollgate.allocator.registry.records import describe, endpoint_addresses, identity, tunnel_recorded
from tollgate.models.epic import (
    DEFAULT_CLUSTER,
    LoadBalancer,
    LoadBalancerSpec,
    LoadBalancerStatus,
    RemoteEndpoint,
    RemoteEndpointSpec,
    RemoteEndpointStatus,
    reaches,
)

log = logging.getLogger("tollgate.allocator.reconcile.remote_endpoints")
ADDRESS_NOT_ALLOWED = "AddressNotAllowed"
DUPLICATE = "DuplicateEndpoint"


@dataclass
class RemoteEndpoints(Part):
    async def seen(self, rep: JSON) -> None:
        """A RemoteEndpoint appeared or changed: done when it is Ready with its node's tunnel."""
        meta = rep["metadata"]
        if meta.get("deletionTimestamp") or (meta["namespace"], meta["name"]) in self.registry.registrations.in_flight:
            return
        lb = await self.kube.get(LoadBalancer, meta["namespace"], rep["spec"]["load-balancer"])
        if lb is not None and tunnel_recorded(rep, lb):
            return
        await self.reconcile(rep, lb)

    async def reconcile(self, rep: JSON, lb: JSON | None = None) -> None:
        meta = rep["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp"):
            return
        with self.tracer.start_as_current_span(
            "reconcile RemoteEndpoint", attributes={"namespace": namespace, "name": name}
        ):
            if refusal := await self.registry.registrations.address_refusal(namespace, endpoint_addresses(rep)):
                await self.refuse(rep, ADDRESS_NOT_ALLOWED, str(refusal))
                return
            lb_name = rep["spec"]["load-balancer"]
            lb = lb or await self.kube.get(LoadBalancer, namespace, lb_name)
            if lb is None:
                message = f"spec.load-balancer: no LoadBalancer {lb_name!r} in namespace {namespace}"
                await self.refuse(rep, "LoadBalancerNotFound", message)
                return
            twin = await self._older_twin(rep)
            if twin is not None:
                message = f"spec: {describe(rep['spec'])} is registered already as RemoteEndpoint {twin}"
                await self.refuse(rep, DUPLICATE, message)
                return
            try:
                decision = await self.registry.limits.admit(lb)
            except NotFoundError as error:
                await self.refuse(rep, "AccountNotFound", f"metadata.namespace: {error}")
                return
            if not decision.served:
                message = f"spec.load-balancer: load balancer {lb_name!r} is not served: {decision.message}"
                await self.refuse(rep, limits.LIMIT_EXCEEDED, message)
                return
            if not any(ref.get("uid") == lb["metadata"]["uid"] for ref in meta.get("ownerReferences") or []):
                rep = await self.kube.patch(
                    RemoteEndpoint, namespace, name, {"metadata": {"ownerReferences": [proxy.owner_reference(lb)]}}
                )
            try:
                lb = await self.registry.clusters.admit(lb, rep["spec"].get("cluster", DEFAULT_CLUSTER))
            except NotShareableError as error:
                await self.refuse(rep, "NotShareable", str(error))
                return
            had = (rep.get("status") or {}).get("tunnel-id")
            try:
                _, tunnel_id = await self.registry.registrations.ensure_tunnel(rep, lb)
            except NotFoundError as error:
                log.info("not assigning a tunnel: %s", error)
                return
            if tunnel_id is not None and had != tunnel_id:
                node = rep["spec"]["node-address"]
                await self.kube.event(rep, "TunnelAssigned", f"tunnel ID {tunnel_id} of node {node}")

    async def refuse(self, rep: JSON, reason: str, message: str) -> None:
        meta = rep["metadata"]
        ready = RemoteEndpointStatus.model_validate(rep.get("status") or {}).condition("Ready")
        if ready is not None and (ready.status, ready.reason, ready.message) == ("False", reason, message):
            return

        def refused(status: RemoteEndpointStatus) -> None:
            status.set_condition("Ready", "False", reason, message, meta.get("generation"))

        await self.update_status(RemoteEndpoint, meta["namespace"], meta["name"], refused)
        await self.kube.event(rep, reason, message, warning=True)

    async def _older_twin(self, rep: JSON) -> str | None:
        """The name of an older RemoteEndpoint of the same (load balancer, address, port, protocol), if any."""
        meta = rep["metadata"]
        key = (meta.get("creationTimestamp") or "", meta["name"])
        twins = [
            (other["metadata"].get("creationTimestamp") or "", other["metadata"]["name"])
            for other in await self.kube.remote_endpoints_of(meta["namespace"], rep["spec"]["load-balancer"])
            if identity(other["spec"]) == identity(rep["spec"])
        ]
        older = sorted(t for t in twins if t < key)
        return older[0][1] if older else None

    async def update_endpoints_matched(self, rep: JSON, deleted: bool) -> None:
        """Keep the load balancer's EndpointsMatched current as its RemoteEndpoints come, change and go."""
        namespace, name = rep["metadata"]["namespace"], rep["spec"].get("load-balancer", "")
        lb = await self.kube.get(LoadBalancer, namespace, name)
        if lb is None or lb["metadata"].get("deletionTimestamp"):
            return
        public_ports = LoadBalancerSpec.model_validate(lb["spec"]).public_ports
        current = LoadBalancerStatus.model_validate(lb.get("status") or {}).condition(proxy.ENDPOINTS_MATCHED)
        port = RemoteEndpointSpec.model_validate(rep["spec"]).port
        if (
            current is not None
            and current.status == "True"
            and (deleted or any(reaches(p, port) for p in public_ports))
        ):
            return
        reps = await self.kube.remote_endpoints_of(namespace, name)
        matched, reason, message = proxy.endpoint_match(public_ports, reps)
        if current is not None and (current.status == "True") == matched and current.message == message:
            return

        def write(status: LoadBalancerStatus) -> None:
            generation = status.observed_generation
            status.set_condition(proxy.ENDPOINTS_MATCHED, "True" if matched else "False", reason, message, generation)

        written = await self.update_status(LoadBalancer, namespace, name, write)
        if written is not None and not matched:
            await self.kube.event(written, reason, message, warning=True)

    async def deleted(self, rep: JSON) -> int | None:
        """The RemoteEndpoint went: the tunnel ID released with it, if its node's last endpoint went."""
        released = await self.registry.registrations.forget(rep)
        if released is not None:
            lb = await self.kube.get(LoadBalancer, rep["metadata"]["namespace"], rep["spec"]["load-balancer"])
            if lb is not None:
                node = rep["spec"]["node-address"]
                message = f"released tunnel ID {released} of node {node}: its last endpoint went"
                await self.kube.event(lb, "TunnelReleased", message)
        return released
