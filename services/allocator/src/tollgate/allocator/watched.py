"""What the watches of RemoteEndpoints, LoadBalancers and GWProxies tell, handed to the reconciler, and the resync
that hands it what they missed (docs/allocator.md, "Resync"): a deletion no watch reported goes down the deletion
path (a RemoteEndpoint's tunnel ID released, a load balancer's address freed and its place within its Account's
limit given to the next waiting), a change none reported down the reconcile.

A deleted object's listing says nothing of it, and its deletion path needs what it held (a RemoteEndpoint's node
and tunnel ID, a load balancer's uid): the last state a watch told of each object is kept for it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from tollgate.allocator.k8s import JSON, Kube
from tollgate.allocator.reconcile import Reconciler
from tollgate.models.epic import GWProxy, LoadBalancer, RemoteEndpoint
from tollgate.runtime.resync import Key, Mirror, key_of

log = logging.getLogger("tollgate.allocator.watched")

KINDS = {kind.resource.plural: kind for kind in (RemoteEndpoint, LoadBalancer, GWProxy)}
REMOTE_ENDPOINTS = RemoteEndpoint.resource.plural
LOAD_BALANCERS = LoadBalancer.resource.plural


def _kept(obj: Mapping[str, Any]) -> JSON:
    """The part of an object its deletion path reads (not its annotations or managed fields)."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {key: meta[key] for key in ("namespace", "name", "uid", "resourceVersion") if key in meta},
        "spec": copy.deepcopy(obj.get("spec") or {}),
        "status": copy.deepcopy(obj.get("status") or {}),
    }


class Watched:
    """The watched objects' mirror and last states; each event or correction goes to the reconciler's part."""

    def __init__(self, reconciler: Reconciler, kube: Kube) -> None:
        self.reconciler = reconciler
        self.kube = kube
        self.mirror = Mirror()
        self._last: dict[tuple[str, Key], JSON] = {}

    async def event(self, plural: str, obj: JSON, deleted: bool) -> None:
        """A watch event, from a kopf handler."""
        self.mirror.record(plural, obj, deleted)
        self._remember(plural, obj, deleted)
        if plural == REMOTE_ENDPOINTS:
            await self._remote_endpoint(obj, deleted)
        elif deleted:
            await self._proxy_deleted(obj)

    async def correct(self, plural: str, obj: Mapping[str, Any], deleted: bool) -> None:
        """A resync's correction (a deleted object named only): what the missed event would have done."""
        key = key_of(obj)
        if deleted:
            last = self._last.pop((plural, key), None)
            if last is None:  # never seen with a body: nothing is known that it held
                return
            if plural == REMOTE_ENDPOINTS:
                if (released := await self._remote_endpoint(last, deleted=True)) is not None:
                    log.info("resync: released tunnel ID %s of the deleted RemoteEndpoint %s/%s", released, *key)
            else:
                log.info("resync: freeing what the deleted %s %s/%s held", last["kind"], *key)
                await self._proxy_deleted(last)
            return
        body = dict(obj)
        self._remember(plural, body, deleted=False)
        if plural == REMOTE_ENDPOINTS:
            await self._remote_endpoint(body, deleted=False)
            return
        reconcile = self.reconciler.load_balancers if plural == LOAD_BALANCERS else self.reconciler.gwproxies
        if retry := await reconcile.reconcile(body):
            log.info("resync: %s %s/%s waits until its next change: %s", plural, *key, retry)

    async def list_all(self) -> dict[str, list[JSON]]:
        """Every watched kind's objects, for the resync."""
        return {plural: await self.kube.list_objects(kind) for plural, kind in KINDS.items()}

    def _remember(self, plural: str, obj: Mapping[str, Any], deleted: bool) -> None:
        if deleted:
            self._last.pop((plural, key_of(obj)), None)
        else:
            self._last[(plural, key_of(obj))] = _kept(obj)

    async def _remote_endpoint(self, rep: JSON, deleted: bool) -> int | None:
        """The RemoteEndpoint's event; the tunnel ID its deletion released."""
        released = None
        if deleted:
            released = await self.reconciler.remote_endpoints.deleted(rep)
        else:
            await self.reconciler.remote_endpoints.seen(rep)
        await self.reconciler.remote_endpoints.update_endpoints_matched(rep, deleted)
        return released

    async def _proxy_deleted(self, obj: JSON) -> None:
        await self.reconciler.proxies.deleted(obj)
        await self.reconciler.accounts.proxy_deleted(obj)
