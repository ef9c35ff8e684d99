"""Accounts: each owns its user namespace, created with it and deleted after what it holds; a change to it (its
limits among it) reaches its waiting load balancers and GWProxies, its RemoteEndpoints' addresses and its GWProxies'
tunnels, and a deleted load balancer's or GWProxy's place within its limit goes to the oldest waiting."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import kopf

from tollgate.allocator import proxy
from tollgate.allocator.k8s import JSON, Kind
from tollgate.allocator.reconcile.gwproxies import GWProxies
from tollgate.allocator.reconcile.load_balancers import LoadBalancers
from tollgate.allocator.reconcile.part import Part, set_ready
from tollgate.allocator.reconcile.remote_endpoints import ADDRESS_NOT_ALLOWED, RemoteEndpoints
from tollgate.allocator.registry.records import PROXY_KINDS, account_ranges, endpoint_addresses
from tollgate.models.base import condition_status
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    USER_NAMESPACE_LABEL,
    Account,
    AccountStatus,
    GWProxy,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    RemoteEndpointStatus,
    account_namespace,
)

log = logging.getLogger("tollgate.allocator.reconcile.accounts")
CLEANUP_RETRY_SECONDS = 2.0


@dataclass
class Accounts(Part):
    load_balancers: LoadBalancers
    remote_endpoints: RemoteEndpoints
    gwproxies: GWProxies

    async def reconcile(self, account: JSON) -> None:
        meta = account["metadata"]
        namespace, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        with self.tracer.start_as_current_span("reconcile Account", attributes={"namespace": namespace, "name": name}):
            expected = account_namespace(name)
            if namespace != expected:
                message = f"metadata.namespace: Account {name!r} must live in its user namespace {expected!r}"
                await self.update_status(
                    Account, namespace, name, lambda s: set_ready(s, False, "WrongNamespace", message, generation)
                )
                await self.kube.event(account, "WrongNamespace", message, warning=True)
                return
            await self.kube.ensure_namespace(namespace, {USER_NAMESPACE_LABEL: "true", ACCOUNT_LABEL: name})

            def ready(status: AccountStatus) -> None:
                status.namespace = namespace
                set_ready(status, True, "UserNamespaceReady", f"user namespace {namespace}", generation)

            before = (account.get("status") or {}).get("namespace")
            await self.update_status(Account, namespace, name, ready)
            if before != namespace:
                await self.kube.event(account, "UserNamespaceReady", f"owns the user namespace {namespace}")
            await self.serve_waiting(namespace, (LoadBalancer, GWProxy), account)
            await self._judge_endpoints(account)
            # The account's allowedEndpointRanges judge the slices' node addresses too.
            await self.gwproxies.converge_tunnels(namespace)

    async def serve_waiting(self, namespace: str, kinds: tuple[Kind, ...], account: JSON | None = None) -> None:
        """Reconcile the namespace's load balancers and GWProxies (of `kinds`) that are not Allocated: those beyond
        the Account's limit get the places that are free now, the oldest first. With `account` (read before this
        listing), the Account's record of served objects first drops the entries of objects that are gone."""
        present: dict[str, set[tuple[str, str]]] = {}
        waiting: list[tuple[Kind, str]] = []
        for kind in kinds:
            # Read a page at a time, keeping the names only; each is read again when its turn comes.
            async for page in self.kube.pages(kind, namespace):
                for obj in page:
                    meta = obj["metadata"]
                    present.setdefault(kind.resource.kind, set()).add((meta["name"], meta["uid"]))
                    if condition_status(obj, proxy.ALLOCATED) != "True":
                        waiting.append((kind, meta["name"]))
        if account is not None:
            await self.registry.limits.sweep(account, present)
        # Each gets its turn even when another's fails (a deleted object's event is not retried); the first failure
        # is raised at the end.
        failures: list[Exception] = []
        for kind, name in waiting:
            try:
                if (found := await self.kube.get(kind, namespace, name)) is None:
                    continue
                if kind is LoadBalancer:
                    await self.load_balancers.reconcile(found)
                else:
                    await self.gwproxies.reconcile(found)
            except Exception as error:
                log.warning("reconciling %s %s/%s failed: %s", kind.resource.kind, namespace, name, error)
                failures.append(error)
        if failures:
            raise failures[0]

    async def proxy_deleted(self, obj: JSON) -> None:
        """A LoadBalancer or GWProxy was deleted: its place within its Account's limit goes to the oldest of its kind
        waiting for one, if any is."""
        if await self.registry.limits.release(obj):
            meta = obj["metadata"]
            log.info(
                "%s %s/%s was deleted: judging again those of its kind waiting for a place within the limit",
                obj["kind"], meta["namespace"], meta["name"],
            )  # fmt: skip
            await self.serve_waiting(meta["namespace"], (PROXY_KINDS[obj["kind"]],))

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
            await self.remote_endpoints.refuse(rep, ADDRESS_NOT_ALLOWED, refusal)
        for rep in allowed_again:
            await self.remote_endpoints.reconcile(rep)

    async def clean_up(self, account: JSON) -> None:
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
                    lambda s: set_ready(s, False, "CleanupPending", message, meta.get("generation")),
                )
                raise kopf.TemporaryError(message, delay=CLEANUP_RETRY_SECONDS)
            if await self.kube.namespace_created_for(namespace) == name:
                await self.kube.delete_namespace(namespace)
                await self.kube.event(account, "UserNamespaceDeleted", f"deleted the user namespace {namespace}")
            else:
                message = f"kept the user namespace {namespace}: tollgate did not create it; its objects are gone"
                log.info(message)
                await self.kube.event(account, "UserNamespaceKept", message)
