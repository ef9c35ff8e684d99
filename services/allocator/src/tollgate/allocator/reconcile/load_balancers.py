"""Load balancers: a place within their Account's loadBalancerLimit, a service ID from their account's counter, then
what every proxy object gets (public address, DNS endpoint, Envoy proxy), their conditions, and the tunnels of the
nodes their RemoteEndpoints are on."""

from __future__ import annotations

from dataclasses import dataclass, field

from tollgate.allocator import allocation, proxy
from tollgate.allocator.k8s import JSON, field_is
from tollgate.allocator.reconcile.part import Part
from tollgate.allocator.reconcile.proxies import ADDRESS_RETRY_REASONS, Proxies
from tollgate.allocator.reconcile.remote_endpoints import RemoteEndpoints
from tollgate.allocator.registry.records import tunnel_recorded
from tollgate.models.epic import Account, AccountStatus, LoadBalancer, LoadBalancerSpec, LoadBalancerStatus, account_of
from tollgate.runtime.locks import KeyedLocks
from tollgate.runtime.tracing import annotated_parent, parent_context


@dataclass
class LoadBalancers(Part):
    proxies: Proxies
    remote_endpoints: RemoteEndpoints
    _turns: KeyedLocks[tuple[str, str]] = field(default_factory=KeyedLocks, init=False)
    _service_id_turns: KeyedLocks[str] = field(default_factory=KeyedLocks, init=False)

    async def reconcile(self, lb: JSON) -> str | None:
        """Bring the load balancer and its proxies in line; a message when it must be tried again later.

        Its own handler and its account's or group's reconcile may both reach one load balancer at once: they take
        turns, and one without a service ID reads it again first, so a turn that came after the ID was written
        does not allocate a second one from a body read before."""
        meta = lb["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        async with self._turns.hold((namespace, name)):
            if lb["spec"].get("service-id") is None:
                fresh = await self.kube.get(LoadBalancer, namespace, name)
                if fresh is None:
                    return None
                lb = fresh
            return await self._reconcile(lb)

    async def _reconcile(self, lb: JSON) -> str | None:
        meta = lb["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        if meta.get("deletionTimestamp"):
            return None
        attributes = {"namespace": namespace, "name": name}
        # In the trace of the object's latest change (its tollgate.io/trace-parent), like the spec patches it writes.
        change = parent_context(annotated_parent(lb))
        with self.tracer.start_as_current_span("reconcile LoadBalancer", change, attributes=attributes):
            account = account_of(namespace)
            served, reason, message = await self.proxies.admission(lb)
            ok, new_id = served, None
            if served:
                ok, reason, message, new_id = await self._service_id(lb, account)
            if new_id is not None:
                lb = await self.kube.patch(LoadBalancer, namespace, name, {"spec": {"service-id": new_id}})
                await self.kube.event(lb, "ServiceIDAllocated", f"allocated service-id {new_id}")
            if ok:
                ok, reason, message, lb = await self.proxies.public_address(lb, reason, message)
            proxy_state = (
                (False, "NotAllocated", f"waiting for Allocated ({reason})")
                if not ok
                else await self.proxies.deploy(lb, account)
            )
            reps = await self.kube.remote_endpoints_of(namespace, name)
            matched, match_reason, match_message = proxy.endpoint_match(
                LoadBalancerSpec.model_validate(lb["spec"]).public_ports, reps
            )

            def write(status: LoadBalancerStatus) -> None:
                proxy.set_conditions(status, generation, (ok, reason, message), proxy_state)
                status.set_condition(
                    proxy.ENDPOINTS_MATCHED, "True" if matched else "False", match_reason, match_message, generation
                )

            before = LoadBalancerStatus.model_validate(lb.get("status") or {}).condition(proxy.ENDPOINTS_MATCHED)
            written = await self.update_status(LoadBalancer, namespace, name, write)
            if written is None:
                return None
            if not matched and (before is None or before.message != match_message):
                await self.kube.event(written, match_reason, match_message, warning=True)
            if served and proxy.name_not_a_label(written) is None:  # such a load balancer's pods cannot be listed
                await self._adopt_endpoints(written, reps)
            return message if reason in ADDRESS_RETRY_REASONS else None

    async def _service_id(self, lb: JSON, account: str) -> tuple[bool, str, str, int | None]:
        """Whether the load balancer has (or now gets) a valid service ID, the reason and message, and the ID just
        allocated from the account's counter with the seed's algorithm, if one was."""
        meta, namespace = lb["metadata"], lb["metadata"]["namespace"]
        spec = LoadBalancerSpec.model_validate(lb["spec"])
        if spec.service_id is not None:
            claim = allocation.service_id_claim(lb)
            earlier = [
                o["metadata"]["name"]
                for o in await self._service_id_holders(namespace, spec.service_id, meta["name"])
                if allocation.service_id_claim(o) < claim
            ]
            if earlier:
                message = f"spec.service-id: {spec.service_id} is already used by load balancer {earlier[0]!r}"
                await self.kube.event(lb, "DuplicateServiceID", message, warning=True)
                return False, "DuplicateServiceID", message, None
            return True, allocation.SERVICE_ID_ALLOCATED, f"service-id {spec.service_id}", None
        # The counter, bumped with the Account's resourceVersion, is what keeps two allocations from ever returning
        # one ID (each returns an ID above the counter it read, and only one write per counter value succeeds). The
        # IDs set by hand that it must skip are read live after the counter, one candidate at a time (a list of the
        # holders of that ID, filtered by the API server), so no cache can lag behind them, and no reconcile holds
        # the namespace's whole list of load balancers.
        used: set[int] = set()

        async def skip_used(obj: JSON) -> None:
            candidate = AccountStatus.model_validate(obj.get("status") or {}).current_service_id + 1
            while candidate <= allocation.MAX_SERVICE_ID and (
                candidate in used or await self._service_id_holders(namespace, candidate, meta["name"])
            ):
                used.add(candidate)
                candidate += 1

        def next_id(status: AccountStatus) -> None:
            status.current_service_id = allocation.next_service_id(status.current_service_id, used)

        # This process's allocations in one account take turns: each reads the counter and its candidates' holders
        # before it writes, and concurrent ones would only make each other's writes conflict (the conditional write
        # still guards against every other writer).
        async with self._service_id_turns.hold(namespace):
            written = await self.update_status(Account, namespace, account, next_id, skip_used)
        if written is None:
            return False, "AccountNotFound", f"Account {account!r} was deleted", None
        self.metrics.service_ids.add(1)
        new_id = int(written["status"]["current-service-id"])
        return True, allocation.SERVICE_ID_ALLOCATED, f"service-id {new_id}", new_id

    async def _service_id_holders(self, namespace: str, service_id: int, but: str) -> list[JSON]:
        """The load balancers of the namespace other than `but` whose spec.service-id is `service_id`."""
        holding = field_is("spec.service-id", service_id)
        holders = await self.kube.list_objects(LoadBalancer, namespace, field_selector=holding)
        return [o for o in holders if o["metadata"]["name"] != but]

    async def _adopt_endpoints(self, lb: JSON, reps: list[JSON]) -> None:
        """RemoteEndpoints not yet accepted (created before their load balancer, or while the allocator was down) or
        whose tunnel is not their node's get it now; entries of nodes without endpoints go."""
        for rep in reps:
            if not tunnel_recorded(rep, lb):
                await self.remote_endpoints.reconcile(rep, lb)
        for node in await self.registry.registrations.prune(lb):
            await self.kube.event(lb, "TunnelReleased", f"released the tunnel of node {node}: no endpoint is on it")
        await self.registry.node_tunnels.refresh_epic_address(lb)
