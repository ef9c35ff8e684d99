"""What the handlers do: accounts and their user namespaces, load balancers (service IDs, Envoy proxies,
conditions) and RemoteEndpoints created as objects."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from ipaddress import IPv4Address
from typing import Any

import kopf
from opentelemetry import trace

from tollgate.allocator import allocation, proxy
from tollgate.allocator.addresses import PrefixNotFoundError, PublicAddresses
from tollgate.allocator.gwtunnels import RefusedAddress
from tollgate.allocator.k8s import JSON, Kind, Kube, field_is
from tollgate.allocator.registry import (
    ADDRESS_NOT_ALLOWED,
    DUPLICATE,
    PROXY_KINDS,
    NotFoundError,
    NotShareableError,
    Registry,
    account_ranges,
    describe,
    endpoint_addresses,
    identity,
    log_fields,
    tunnel_recorded,
)
from tollgate.allocator.tunnels import Metrics
from tollgate.models.base import Status, condition_status
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    DEFAULT_CLUSTER,
    USER_NAMESPACE_LABEL,
    Account,
    AccountStatus,
    GWEndpointSlice,
    GWProxy,
    GWProxySpec,
    GWProxyStatus,
    LBServiceGroup,
    LBServiceGroupSpec,
    LBServiceGroupStatus,
    LoadBalancer,
    LoadBalancerSpec,
    LoadBalancerStatus,
    ProxySpec,
    ProxyStatus,
    RemoteEndpoint,
    RemoteEndpointSpec,
    RemoteEndpointStatus,
    account_namespace,
    account_of,
    reaches,
)
from tollgate.runtime.coalesce import Coalesced
from tollgate.runtime.locks import KeyedLocks
from tollgate.runtime.tracing import annotated_parent, parent_context

log = logging.getLogger("tollgate.allocator.reconcile")
CLEANUP_RETRY_SECONDS = 2.0
GROUP_RETRY_SECONDS = 5.0
PROXY_SPECS: dict[str, type[ProxySpec]] = {"LoadBalancer": LoadBalancerSpec, "GWProxy": GWProxySpec}
# A freed address or a new ServicePrefix is no event of the waiting load balancer: it tries again by itself.
ADDRESS_RETRY_REASONS = ("PublicAddressesExhausted", "ServicePrefixNotFound")
STATUS_MODELS: dict[Kind, type[Status]] = {
    Account: AccountStatus,
    GWProxy: GWProxyStatus,
    LBServiceGroup: LBServiceGroupStatus,
    LoadBalancer: LoadBalancerStatus,
    RemoteEndpoint: RemoteEndpointStatus,
}


class Reconciler:
    def __init__(
        self, kube: Kube, registry: Registry, metrics: Metrics, tracer: trace.Tracer, xds_address: str
    ) -> None:
        self.addresses = PublicAddresses(kube, metrics)
        self.kube = kube
        self.registry = registry
        self.metrics = metrics
        self.tracer = tracer
        self.xds_address = xds_address
        self._load_balancer_turns: KeyedLocks[tuple[str, str]] = KeyedLocks()
        self._service_id_turns: KeyedLocks[str] = KeyedLocks()
        # One convergence of a namespace's GWProxy tunnels at a time; those asked for meanwhile share the next.
        self._gateway_runs: Coalesced[str, None] = Coalesced(self._converge_gateways)
        # By namespace: the (slice uid, refusal) pairs its last convergence found, each told in an Event once.
        self._refused_addresses: dict[str, frozenset[tuple[str, str]]] = {}

    async def update_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        mutate: Callable[[Any], None],
        prepare: Callable[[JSON], Awaitable[None]] | None = None,
    ) -> JSON | None:
        """Read, change the status model, replace with the read resourceVersion; retry on conflict. None when gone.
        `prepare` runs after each read, before `mutate` (Kube.update_status)."""
        status_model = STATUS_MODELS[kind]

        def change(obj: JSON) -> None:
            status: Status = status_model.model_validate(obj.get("status") or {})
            mutate(status)
            obj["status"] = status.to_wire()

        try:
            result = await self.kube.update_status(
                kind,
                namespace,
                name,
                change,
                lambda: NotFoundError(f"{kind.resource.kind} {namespace}/{name}"),
                on_conflict=lambda _: self.metrics.conflict(kind.resource.kind),
                prepare=prepare,
            )
        except NotFoundError:
            return None
        self.metrics.retried(kind.resource.kind, result.conflicts)
        return result.written

    # accounts

    async def reconcile_account(self, account: JSON) -> None:
        meta = account["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        with self.tracer.start_as_current_span("reconcile Account", attributes={"namespace": namespace, "name": name}):
            expected = account_namespace(name)
            if namespace != expected:
                message = f"metadata.namespace: Account {name!r} must live in its user namespace {expected!r}"
                await self.update_status(
                    Account, namespace, name, lambda s: _ready(s, False, "WrongNamespace", message, generation)
                )
                await self.kube.event(account, "WrongNamespace", message, warning=True)
                return
            await self.kube.ensure_namespace(namespace, {USER_NAMESPACE_LABEL: "true", ACCOUNT_LABEL: name})

            def ready(status: AccountStatus) -> None:
                status.namespace = namespace
                _ready(status, True, "UserNamespaceReady", f"user namespace {namespace}", generation)

            before = (account.get("status") or {}).get("namespace")
            await self.update_status(Account, namespace, name, ready)
            if before != namespace:
                await self.kube.event(account, "UserNamespaceReady", f"owns the user namespace {namespace}")
            # Read a page at a time, keeping the names only; each is read again when its turn comes.
            waiting = [
                lb["metadata"]["name"]
                async for lbs in self.kube.pages(LoadBalancer, namespace)
                for lb in lbs
                if condition_status(lb, proxy.ALLOCATED) != "True"
            ]
            for lb_name in waiting:
                if (lb := await self.kube.get(LoadBalancer, namespace, lb_name)) is not None:
                    await self.reconcile_load_balancer(lb)
            await self._judge_endpoints(account)
            await self.gateway_tunnels(namespace)  # its allowedEndpointRanges judge the slices' node addresses too

    async def _judge_endpoints(self, account: JSON) -> None:
        """The account (its allowedEndpointRanges) may have changed: judge its RemoteEndpoints' addresses again.
        One refused now is no longer served; one refused before and allowed now gets its tunnel."""
        namespace, name = account["metadata"]["namespace"], account["metadata"]["name"]
        ranges = account_ranges(name, account)
        refused: list[tuple[JSON, str]] = []
        allowed_again: list[JSON] = []
        async for reps in self.kube.pages(RemoteEndpoint, namespace):  # keeping only those to act on
            for rep in reps:
                refusals = self.registry.policy.refusals(endpoint_addresses(rep), ranges)
                ready = RemoteEndpointStatus.model_validate(rep.get("status") or {}).condition("Ready")
                if refusals:
                    refused.append((rep, str(refusals[0])))
                elif ready is not None and (ready.status, ready.reason) == ("False", ADDRESS_NOT_ALLOWED):
                    allowed_again.append(rep)
        for rep, refusal in refused:
            await self._refuse_endpoint(rep, ADDRESS_NOT_ALLOWED, refusal)
        for rep in allowed_again:
            await self.reconcile_remote_endpoint(rep)

    async def cleanup_account(self, account: JSON) -> None:
        """Delete what the account holds, then its user namespace; until it can, say why in a condition."""
        meta = account["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        with self.tracer.start_as_current_span("delete Account", attributes={"namespace": namespace, "name": name}):
            if namespace != account_namespace(name):
                return
            remaining: list[str] = []
            for kind in (LoadBalancer, GWProxy, RemoteEndpoint, LBServiceGroup):
                for obj in await self.kube.list_objects(kind, namespace):
                    obj_meta = obj["metadata"]
                    if not obj_meta.get("deletionTimestamp"):
                        await self.kube.delete(kind, namespace, obj_meta["name"])
                    still = await self.kube.get(kind, namespace, obj_meta["name"])
                    if still is not None:
                        holders = ", ".join(still["metadata"].get("finalizers") or []) or "deletion in progress"
                        remaining.append(f"{kind.resource.kind} {obj_meta['name']} ({holders})")
            if remaining:
                message = f"waiting for {len(remaining)} objects to go away: {'; '.join(remaining)}"
                await self.update_status(
                    Account,
                    namespace,
                    name,
                    lambda s: _ready(s, False, "CleanupPending", message, meta.get("generation")),
                )
                raise kopf.TemporaryError(message, delay=CLEANUP_RETRY_SECONDS)
            if await self.kube.namespace_created_for(namespace) == name:
                await self.kube.delete_namespace(namespace)
                await self.kube.event(account, "UserNamespaceDeleted", f"deleted the user namespace {namespace}")
            else:
                message = f"kept the user namespace {namespace}: tollgate did not create it; its objects are gone"
                log.info(message)
                await self.kube.event(account, "UserNamespaceKept", message)

    # load balancers

    async def reconcile_load_balancer(self, lb: JSON) -> str | None:
        """Bring the load balancer and its proxies in line; a message when it must be tried again later.

        Its own handler and its account's or group's reconcile may both reach one load balancer at once: they take
        turns, and one without a service ID reads it again first, so a turn that came after the ID was written
        does not allocate a second one from a body read before."""
        meta = lb["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        async with self._load_balancer_turns.hold((namespace, name)):
            if lb["spec"].get("service-id") is None:
                fresh = await self.kube.get(LoadBalancer, namespace, name)
                if fresh is None:
                    return None
                lb = fresh
            return await self._reconcile_load_balancer(lb)

    async def _reconcile_load_balancer(self, lb: JSON) -> str | None:
        meta = lb["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        if meta.get("deletionTimestamp"):
            return None
        attributes = {"namespace": namespace, "name": name}
        # In the trace of the object's latest change (its tollgate.io/trace-parent), like the spec patches it writes.
        change = parent_context(annotated_parent(lb))
        with self.tracer.start_as_current_span("reconcile LoadBalancer", change, attributes=attributes):
            account = account_of(namespace)
            ok, reason, message, new_id = await self._service_id(lb, account)
            if new_id is not None:
                lb = await self.kube.patch(LoadBalancer, namespace, name, {"spec": {"service-id": new_id}})
                await self.kube.event(lb, "ServiceIDAllocated", f"allocated service-id {new_id}")
            if ok:
                ok, reason, message, lb = await self._public_address(lb, reason, message)
            proxy_state = (
                (False, "NotAllocated", f"waiting for Allocated ({reason})")
                if not ok
                else await self._proxy(lb, account)
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
            if proxy.name_not_a_label(written) is None:  # such a load balancer's pods cannot even be listed
                await self._adopt_endpoints(written, reps)
            return message if reason in ADDRESS_RETRY_REASONS else None

    async def _service_id(self, lb: JSON, account: str) -> tuple[bool, str, str, int | None]:
        """Whether the load balancer has (or now gets) a valid service ID, the reason and message, and the ID just
        allocated from the account's counter with the seed's algorithm, if one was."""
        meta, namespace = lb["metadata"], lb["metadata"]["namespace"]
        if await self.kube.get(Account, namespace, account) is None:
            message = (
                f"no Account {account!r} in namespace {namespace}: load balancers live in their account's namespace"
            )
            return False, "AccountNotFound", message, None
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

    async def _public_address(self, obj: JSON, reason: str, allocated: str) -> tuple[bool, str, str, JSON]:
        """The object's public address from its group's ServicePrefix: kept when it holds one, claimed when given,
        else the pool's first free one. Without a prefix the address is the user's (or none)."""
        meta, spec = obj["metadata"], proxy_spec(obj)
        group_obj = await self.kube.get(LBServiceGroup, meta["namespace"], spec.service_group)
        if group_obj is None:
            return True, reason, allocated, obj
        group = LBServiceGroupSpec.model_validate(group_obj["spec"] or {})
        prefix = group.service_prefix
        if prefix is None:
            if not spec.endpoints:
                obj = await self._write_address(obj, group, spec.public_address, with_address=False)
            return True, reason, allocated, obj
        try:
            address = await self.addresses.claim(prefix, obj, spec.public_address)
        except PrefixNotFoundError as error:
            message = (
                f"spec.service-group: LBServiceGroup {spec.service_group!r} names a prefix that is missing: {error}"
            )
            return await self._address_refused(obj, "ServicePrefixNotFound", message)
        except allocation.AddressTakenError as error:
            return await self._address_refused(obj, "PublicAddressTaken", f"spec.public-address: {error}")
        except allocation.ExhaustedError as error:
            return await self._address_refused(obj, "PublicAddressesExhausted", f"ServicePrefix {prefix}: {error}")
        if spec.public_address != address or not spec.endpoints:
            obj = await self._write_address(obj, group, address, with_address=spec.public_address != address)
        if spec.public_address != address:
            await self.kube.event(
                obj, "PublicAddressAllocated", f"public address {address} from ServicePrefix {prefix}"
            )
        return True, reason, f"{allocated}, public address {address} (ServicePrefix {prefix})", obj

    async def _write_address(
        self, obj: JSON, group: LBServiceGroupSpec, address: IPv4Address | None, *, with_address: bool
    ) -> JSON:
        """Write the public address (when `with_address`) and, unless the object has them, its DNS records from the
        group's endpoint-template, as EPIC does once (EPIC's clients read `spec.endpoints[0].dnsName` without
        checking that it is there). One spec write: each write of a reconcile carries the reconcile's span as its
        trace parent, and the webhook takes a second write carrying the same parent for one that carries none."""
        meta, changes = obj["metadata"], dict[str, Any]()
        if with_address:
            changes["public-address"] = str(address)
        if not obj["spec"].get("endpoints"):
            endpoint = proxy.dns_endpoint(obj, group, address)
            changes["endpoints"] = [endpoint.to_wire()]
            log.info("DNS name %s for %s %s/%s", endpoint.dns_name, obj["kind"], meta["namespace"], meta["name"])
        return await self.kube.patch(PROXY_KINDS[obj["kind"]], meta["namespace"], meta["name"], {"spec": changes})

    async def _address_refused(self, lb: JSON, reason: str, message: str) -> tuple[bool, str, str, JSON]:
        await self.kube.event(lb, reason, message, warning=True)
        return False, reason, message, lb

    async def proxy_deleted(self, obj: JSON) -> None:
        """Free the public address of a deleted LoadBalancer or GWProxy."""
        for address in await self.addresses.release(obj):
            log.info("freed public address %s of deleted %s %s", address, obj["kind"], obj["metadata"]["name"])

    async def prefix_changed(self, prefix: JSON) -> None:
        """Free the addresses of a ServicePrefix whose holders are gone."""
        await self.addresses.sweep(prefix)

    async def _proxy(self, lb: JSON, account: str) -> tuple[bool, str, str]:
        meta, spec = lb["metadata"], proxy_spec(lb)
        too_long = proxy.name_not_a_label(lb)
        if too_long is not None:  # the webhook refuses such a name; one created while it was down stops here
            await self.kube.event(lb, "NameTooLong", too_long, warning=True)
            return False, "NameTooLong", too_long
        group_obj = await self.kube.get(LBServiceGroup, meta["namespace"], spec.service_group)
        if group_obj is None:
            message = f"spec.service-group: no LBServiceGroup {spec.service_group!r} in namespace {meta['namespace']}"
            await self.kube.event(lb, "ServiceGroupNotFound", message, warning=True)
            return False, "ServiceGroupNotFound", message
        group = LBServiceGroupSpec.model_validate(group_obj.get("spec") or {})
        if spec.envoy_replica_count is None:  # EPIC copies the group's count into a new load balancer
            replicas = {"envoy-replica-count": group.envoy_replica_count}
            lb = await self.kube.patch(PROXY_KINDS[lb["kind"]], meta["namespace"], meta["name"], {"spec": replicas})
        text = proxy.bootstrap(group, meta["name"], self.xds_address)
        await self.kube.apply(proxy.config_map(lb, account, text))
        deployment = await self.kube.apply(proxy.deployment(lb, account, group, text))
        return proxy.proxy_readiness(deployment)

    async def _adopt_endpoints(self, lb: JSON, reps: list[JSON]) -> None:
        """RemoteEndpoints not yet accepted (created before their load balancer, or while the allocator was down) or
        whose tunnel is not their node's get it now; entries of nodes without endpoints go."""
        for rep in reps:
            if not tunnel_recorded(rep, lb):
                await self.reconcile_remote_endpoint(rep, lb)
        for node in await self.registry.prune(lb):
            await self.kube.event(lb, "TunnelReleased", f"released the tunnel of node {node}: no endpoint is on it")
        await self.registry.refresh_epic_address(lb)

    async def proxy_changed(self, deployment: JSON) -> None:
        """The Envoy Deployment moved: reflect it in its object's ProxyReady and Ready."""
        labels = deployment["metadata"].get("labels") or {}
        namespace = deployment["metadata"]["namespace"]
        for kind_name, label in proxy.OWNER_LABELS.items():
            if name := labels.get(label):
                attributes = {"namespace": namespace, "name": name, "kind": kind_name}
                with self.tracer.start_as_current_span("reconcile proxy", attributes=attributes):
                    await self._proxy_changed(PROXY_KINDS[kind_name], namespace, name, deployment)

    async def _proxy_changed(self, kind: Kind, namespace: str, name: str, deployment: JSON) -> None:
        obj = await self.kube.get(kind, namespace, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        await self.registry.refresh_epic_address(obj)
        ready, reason, message = proxy.proxy_readiness(deployment)
        current = ProxyStatus.model_validate(obj.get("status") or {}).condition(proxy.PROXY_READY)
        wanted = ("True" if ready else "False", reason, message)
        if current is not None and (current.status, current.reason, current.message) == wanted:
            return

        def write(status: ProxyStatus) -> None:
            generation = status.observed_generation
            status.set_condition(proxy.PROXY_READY, "True" if ready else "False", reason, message, generation)
            proxy.settle_ready(status, generation)

        await self.update_status(kind, namespace, name, write)
        if ready:
            await self.kube.event(obj, "ProxyReady", message)

    async def group_changed(self, group: JSON) -> None:
        """A service group changed: the proxies of its load balancers and GWProxies follow (image, resources,
        bootstrap)."""
        for obj in await self._group_users(group):
            if obj["kind"] == "LoadBalancer":
                await self.reconcile_load_balancer(obj)
            else:
                await self.reconcile_gwproxy(obj)

    # GWProxies: their Envoys and public addresses (xds turns their Gateway listeners and GWRoutes into config)

    async def reconcile_gwproxy(self, gwp: JSON) -> str | None:
        """A GWProxy's public address, Envoy Deployment and tunnels, as a load balancer's; a message when to try
        again."""
        meta = gwp["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        if meta.get("deletionTimestamp"):
            return None
        change = parent_context(annotated_parent(gwp))
        attributes = {"namespace": namespace, "name": name}
        with self.tracer.start_as_current_span("reconcile GWProxy", change, attributes=attributes):
            account = account_of(namespace)
            ok, reason, message = True, "Allocated", "no public address asked for"
            if await self.kube.get(Account, namespace, account) is None:
                ok, reason = False, "AccountNotFound"
                message = (
                    f"no Account {account!r} in namespace {namespace}: GWProxies live in their account's namespace"
                )
            if ok:
                ok, reason, message, gwp = await self._public_address(gwp, reason, "allocated")
            proxy_state = (
                (False, "NotAllocated", f"waiting for Allocated ({reason})")
                if not ok
                else await self._proxy(gwp, account)
            )

            def write(status: GWProxyStatus) -> None:
                proxy.set_conditions(status, generation, (ok, reason, message), proxy_state)

            written = await self.update_status(GWProxy, namespace, name, write)
            if written is None:
                return None
            await self.registry.refresh_epic_address(written)
            await self.gateway_tunnels(namespace)
            return message if reason in ADDRESS_RETRY_REASONS else None

    async def gateway_tunnels(self, namespace: str) -> None:
        """Converge the tunnels of the namespace's GWProxies to the client nodes their routes reach
        (Registry.converge_gateways), after a change to any of its GWProxies, GWRoutes, GWEndpointSlices or its
        Account. Asked while a run is under way, the next run (which starts after the ask) serves all who asked."""
        await self._gateway_runs(namespace)

    async def _converge_gateways(self, namespace: str) -> None:
        with self.tracer.start_as_current_span("converge GWProxy tunnels", attributes={"namespace": namespace}):
            converged = await self.registry.converge_gateways(namespace)
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

    async def _group_users(self, group: JSON, kinds: tuple[Kind, ...] = (LoadBalancer, GWProxy)) -> list[JSON]:
        namespace, name = group["metadata"]["namespace"], group["metadata"]["name"]
        using = field_is("spec.service-group", name)
        return [obj for kind in kinds for obj in await self.kube.list_objects(kind, namespace, field_selector=using)]

    async def group_deleted(self, group: JSON) -> None:
        """A service group goes only once no LoadBalancer or GWProxy uses it: until then its finalizer holds it,
        and its Ready condition names them."""
        users = await self._group_users(group)
        if not users:
            return
        names = ", ".join(f"{obj['kind']} {obj['metadata']['name']}" for obj in users)
        message = f"in use by {names}: delete them first; the group goes when the last one has"
        meta = group["metadata"]
        await self.update_status(
            LBServiceGroup,
            meta["namespace"],
            meta["name"],
            lambda s: _ready(s, False, "InUse", message, meta.get("generation")),
        )
        await self.kube.event(group, "DeletionBlocked", message, warning=True)
        raise kopf.TemporaryError(message, delay=GROUP_RETRY_SECONDS)

    # remote endpoints created as objects

    async def remote_endpoint_seen(self, rep: JSON) -> None:
        """A RemoteEndpoint appeared or changed: done when it is Ready with its node's tunnel."""
        meta = rep["metadata"]
        if meta.get("deletionTimestamp") or (meta["namespace"], meta["name"]) in self.registry.in_flight:
            return
        lb = await self.kube.get(LoadBalancer, meta["namespace"], rep["spec"]["load-balancer"])
        if lb is not None and tunnel_recorded(rep, lb):
            return
        await self.reconcile_remote_endpoint(rep, lb)

    async def reconcile_remote_endpoint(self, rep: JSON, lb: JSON | None = None) -> None:
        meta = rep["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        if meta.get("deletionTimestamp"):
            return
        with self.tracer.start_as_current_span(
            "reconcile RemoteEndpoint", attributes={"namespace": namespace, "name": name}
        ):
            if refusal := await self.registry.address_refusal(namespace, endpoint_addresses(rep)):
                await self._refuse_endpoint(rep, ADDRESS_NOT_ALLOWED, str(refusal))
                return
            lb_name = rep["spec"]["load-balancer"]
            lb = lb or await self.kube.get(LoadBalancer, namespace, lb_name)
            if lb is None:
                message = f"spec.load-balancer: no LoadBalancer {lb_name!r} in namespace {namespace}"
                await self._refuse_endpoint(rep, "LoadBalancerNotFound", message)
                return
            twin = await self._older_twin(rep)
            if twin is not None:
                message = f"spec: {describe(rep['spec'])} is registered already as RemoteEndpoint {twin}"
                await self._refuse_endpoint(rep, DUPLICATE, message)
                return
            if not any(ref.get("uid") == lb["metadata"]["uid"] for ref in meta.get("ownerReferences") or []):
                rep = await self.kube.patch(
                    RemoteEndpoint, namespace, name, {"metadata": {"ownerReferences": [proxy.owner_reference(lb)]}}
                )
            try:
                lb = await self.registry.admit_cluster(lb, rep["spec"].get("cluster", DEFAULT_CLUSTER))
            except NotShareableError as error:
                await self._refuse_endpoint(rep, "NotShareable", str(error))
                return
            had = (rep.get("status") or {}).get("tunnel-id")
            try:
                _, tunnel_id = await self.registry.ensure_tunnel(rep, lb)
            except NotFoundError as error:
                log.info("not assigning a tunnel: %s", error)
                return
            if tunnel_id is not None and had != tunnel_id:
                node = rep["spec"]["node-address"]
                await self.kube.event(rep, "TunnelAssigned", f"tunnel ID {tunnel_id} of node {node}")

    async def _refuse_endpoint(self, rep: JSON, reason: str, message: str) -> None:
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

    async def endpoints_changed(self, rep: JSON, deleted: bool) -> None:
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

    async def remote_endpoint_deleted(self, rep: JSON) -> None:
        released = await self.registry.forget(rep)
        if released is not None:
            lb = await self.kube.get(LoadBalancer, rep["metadata"]["namespace"], rep["spec"]["load-balancer"])
            if lb is not None:
                node = rep["spec"]["node-address"]
                message = f"released tunnel ID {released} of node {node}: its last endpoint went"
                await self.kube.event(lb, "TunnelReleased", message)


def proxy_spec(obj: JSON) -> ProxySpec:
    return PROXY_SPECS[obj["kind"]].model_validate(obj["spec"])


def _ready(status: Status, ok: bool, reason: str, message: str, generation: int | None) -> None:
    status.observed_generation = generation
    status.set_condition("Ready", "True" if ok else "False", reason, message, generation)
