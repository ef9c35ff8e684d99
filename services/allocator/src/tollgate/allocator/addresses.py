"""Public addresses from ServicePrefix pools: the allocations are the prefix's `status.allocations`, written with the
resourceVersion read (409 Conflict when someone wrote first), so concurrent claims on any allocator replica never
hand one address to two objects, and a restarted allocator finds every allocation where it left it.

The pure rules are `allocation.claim_address` and `allocation.release_addresses`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from ipaddress import IPv4Address
from typing import Any

from tollgate.allocator import allocation
from tollgate.allocator.k8s import JSON, Kind, Kube
from tollgate.allocator.tunnels import Metrics
from tollgate.models.epic import (
    SYSTEM_NAMESPACE,
    AddressHolder,
    GWProxy,
    LoadBalancer,
    ServicePrefix,
    ServicePrefixSpec,
    ServicePrefixStatus,
)

log = logging.getLogger("tollgate.allocator.addresses")
HOLDER_KINDS: dict[str, Kind] = {"LoadBalancer": LoadBalancer, "GWProxy": GWProxy}


class PrefixNotFoundError(LookupError):
    pass


def holder_of(obj: JSON) -> AddressHolder:
    meta = obj["metadata"]
    return AddressHolder(kind=obj["kind"], namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])


class PublicAddresses:
    def __init__(self, kube: Kube, metrics: Metrics) -> None:
        self.kube = kube
        self.metrics = metrics

    async def _update(self, prefix: str, change: Callable[[ServicePrefixSpec, ServicePrefixStatus], Any]) -> Any:
        def mutate(obj: JSON) -> Any:
            status = ServicePrefixStatus.model_validate(obj.get("status") or {})
            value = change(ServicePrefixSpec.model_validate(obj["spec"]), status)
            obj["status"] = status.to_wire()
            return value

        result = await self.kube.update_status(
            ServicePrefix,
            SYSTEM_NAMESPACE,
            prefix,
            mutate,
            lambda: PrefixNotFoundError(f"no ServicePrefix {prefix!r} in namespace {SYSTEM_NAMESPACE}"),
            on_conflict=lambda _: self.metrics.conflict("ServicePrefix"),
        )
        self.metrics.retried("ServicePrefix", result.conflicts)
        return result.value

    async def claim(self, prefix: str, obj: JSON, wanted: IPv4Address | None) -> IPv4Address:
        """The object's public address from the prefix's public pool: `wanted`, or the first free one."""
        holder = holder_of(obj)
        address: IPv4Address = await self._update(
            prefix, lambda spec, status: allocation.claim_address(status, spec.public_pool, holder, wanted)
        )
        return address

    async def release(self, obj: JSON) -> list[str]:
        """Free every address a deleted object held, in every prefix."""
        uid = obj["metadata"]["uid"]

        def release(_: ServicePrefixSpec, status: ServicePrefixStatus) -> list[str]:
            return allocation.release_addresses(status, lambda owner: owner.uid != uid)

        released: list[str] = []
        for prefix in await self.kube.list_objects(ServicePrefix, SYSTEM_NAMESPACE):
            allocations = (prefix.get("status") or {}).get("allocations") or {}
            if any(owner.get("uid") == uid for owner in allocations.values()):
                released += await self._update(prefix["metadata"]["name"], release)
        return released

    async def sweep(self, prefix: JSON) -> list[str]:
        """Free the addresses whose holder is gone (deleted while no allocator watched). `prefix` must have been read
        before this call: only the allocations it shows can be judged (holders listed after them), so a claim made
        meanwhile is never taken for a stale one."""
        allocations = (prefix.get("status") or {}).get("allocations") or {}
        live: set[str] = set()
        for kind in {owner.get("kind") for owner in allocations.values()}:
            model = HOLDER_KINDS.get(str(kind))
            if model is not None:
                live |= await self.kube.uids(model)
        stale = {owner.get("uid") for owner in allocations.values()} - live
        if not stale:
            return []
        gone: list[str] = await self._update(
            prefix["metadata"]["name"],
            lambda _, status: allocation.release_addresses(status, lambda owner: owner.uid not in stale),
        )
        for address in gone:
            log.info("freed %s: its holder is gone", address, extra={"prefix": prefix["metadata"]["name"]})
        return gone
