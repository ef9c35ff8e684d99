"""Where tunnel IDs come from: the EPIC singleton's counter, one ID per write (the seed) or one block per write.

Both write the singleton's status with `replace()` carrying the resourceVersion they read, and re-read and
retry on 409 Conflict (tollgate.runtime.optimistic). The pure rules are in allocation.py.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import metrics

from tollgate.allocator import allocation
from tollgate.allocator import metrics as allocator_metrics
from tollgate.allocator.allocation import BlockPool
from tollgate.allocator.k8s import JSON, Kube, is_conflict
from tollgate.models.base import now_rfc3339
from tollgate.models.epic import (
    EPIC,
    SINGLETON_NAME,
    SYSTEM_NAMESPACE,
    EPICSpec,
    EPICStatus,
    GWProxy,
    LoadBalancer,
    RemoteEndpoint,
    TunnelIDBlock,
)
from tollgate.runtime.backoff import Backoff
from tollgate.runtime.optimistic import UpdateResult, update_optimistically

log = logging.getLogger("tollgate.allocator.tunnels")
ATTEMPTS = 200
BACKOFF = Backoff(base=0.002, cap=0.2)


@dataclass
class Stats:
    """Plain counts, for benchmarks and tests (the same events go to the OpenTelemetry counters)."""

    allocated: int = 0
    writes: int = 0
    conflicts: int = 0
    retries: int = 0
    blocks: int = 0
    reclaimed: int = 0


class Metrics:
    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("tollgate.allocator")
        self.allocated = allocator_metrics.TUNNEL_IDS_ALLOCATED.create(meter)
        self.conflicts = allocator_metrics.CONFLICTS.create(meter)
        self.retries = allocator_metrics.RETRIES.create(meter)
        self.blocks = allocator_metrics.TUNNEL_ID_BLOCKS_RESERVED.create(meter)
        self.reclaimed = allocator_metrics.TUNNEL_ID_BLOCKS_RECLAIMED.create(meter)
        self.service_ids = allocator_metrics.SERVICE_IDS_ALLOCATED.create(meter)
        self.stats = Stats()

    def conflict(self, what: str) -> None:
        self.stats.conflicts += 1
        self.conflicts.add(1, {"object": what})

    def retried(self, what: str, count: int) -> None:
        if count:
            self.stats.retries += count
            self.retries.add(count, {"object": what})


class EpicSingleton:
    """Reads and writes epic/epic; creates it when absent. Before this process takes IDs from a singleton (the
    first it sees, and any that replaced it: deleted and recreated, or restored from a backup), it raises the
    counter above every tunnel ID still held, whatever the singleton's conditions say: a restored singleton
    keeps its `Initialized` condition along with an old counter."""

    def __init__(self, kube: Kube, default_spec: EPICSpec) -> None:
        self.kube = kube
        self.default_spec = default_spec
        self._ensure_lock = asyncio.Lock()
        self._floored_uid: str | None = None

    async def read(self) -> JSON:
        obj = await self.kube.get(EPIC, SYSTEM_NAMESPACE, SINGLETON_NAME)
        if obj is None or obj["metadata"].get("uid") != self._floored_uid:
            obj = await self.ensure()
        return obj

    async def replace(self, obj: JSON) -> JSON:
        return await self.kube.replace_status(EPIC, obj)

    async def ensure(self) -> JSON:
        """The singleton, created with defaults if absent (the `epic` namespace too), its counter floored."""
        async with self._ensure_lock:
            obj = await self.kube.get(EPIC, SYSTEM_NAMESPACE, SINGLETON_NAME)
            if obj is None:
                await self.kube.ensure_namespace(SYSTEM_NAMESPACE)
                body = EPIC.new(SINGLETON_NAME, self.default_spec, namespace=SYSTEM_NAMESPACE).to_wire()
                try:
                    obj = await self.kube.create(EPIC, SYSTEM_NAMESPACE, body)
                    log.info("created the EPIC singleton %s/%s", SYSTEM_NAMESPACE, SINGLETON_NAME)
                except Exception as error:
                    if not is_conflict(error):
                        raise
            if obj is None or obj["metadata"].get("uid") != self._floored_uid:
                obj = await self._initialize()
                self._floored_uid = obj["metadata"].get("uid")
            return obj

    async def _initialize(self) -> JSON:
        highest = await self.highest_in_use()

        def mutate(obj: JSON) -> bool:
            status = status_of(obj)
            changed = allocation.raise_floor(status, highest)
            obj["status"] = status.to_wire()
            return changed

        async def read() -> JSON:
            obj = await self.kube.get(EPIC, SYSTEM_NAMESPACE, SINGLETON_NAME)
            if obj is None:
                raise LookupError(f"the EPIC singleton {SYSTEM_NAMESPACE}/{SINGLETON_NAME} vanished")
            return obj

        result = await update_optimistically(read, mutate, self.replace, is_conflict, what="EPIC initialization")
        uid = result.written["metadata"].get("uid")
        counter = status_of(result.written).current_tunnel_id
        log.info("EPIC singleton %s: tunnel-ID counter at %s, above every ID in use (%s)", uid, counter, highest)
        return result.written

    async def highest_in_use(self) -> int:
        """The highest tunnel ID any RemoteEndpoint, LoadBalancer or GWProxy status holds."""
        highest = 0
        async for reps in self.kube.pages(RemoteEndpoint):
            for rep in reps:
                highest = max(highest, int((rep.get("status") or {}).get("tunnel-id") or 0))
        for kind in (LoadBalancer, GWProxy):
            async for page in self.kube.pages(kind):
                for obj in page:
                    for entry in ((obj.get("status") or {}).get("gue-tunnel-endpoints") or {}).values():
                        highest = max(highest, int(entry.get("tunnel-id") or 0))
        return highest


def status_of(obj: JSON) -> EPICStatus:
    return EPICStatus.model_validate(obj.get("status") or {})


class TunnelIDs(Protocol):
    metrics: Metrics

    async def allocate(self) -> int: ...

    def give_back(self, tunnel_id: int) -> None: ...


async def _update(epic: EpicSingleton, metrics_: Metrics, mutate: Any, what: str) -> UpdateResult[JSON, Any]:
    result: UpdateResult[JSON, Any] = await update_optimistically(
        epic.read,
        mutate,
        epic.replace,
        is_conflict,
        what=what,
        attempts=ATTEMPTS,
        backoff=BACKOFF,
        on_conflict=lambda _: metrics_.conflict("EPIC"),
    )
    metrics_.stats.writes += 1
    metrics_.retried("EPIC", result.conflicts)
    return result


class SeedTunnelIDs:
    """The seed's algorithm: increment `current-tunnel-id` and replace the singleton, for every ID."""

    def __init__(self, epic: EpicSingleton, metrics_: Metrics) -> None:
        self.epic = epic
        self.metrics = metrics_

    async def allocate(self) -> int:
        def mutate(obj: JSON) -> int:
            status = status_of(obj)
            tunnel_id = allocation.seed_step(status)
            obj["status"] = status.to_wire()
            return tunnel_id

        result = await _update(self.epic, self.metrics, mutate, "tunnel ID")
        self.metrics.stats.allocated += 1
        self.metrics.allocated.add(1, {"scheme": "seed"})
        return int(result.value)

    def give_back(self, tunnel_id: int) -> None:
        """The seed's counter cannot take an ID back: it is skipped forever."""


class BlockTunnelIDs:
    """One conditional write reserves a block of IDs for this allocator (recorded with its owner in the singleton's
    `tunnel-id-blocks`); the IDs are then handed out from memory."""

    def __init__(
        self,
        kube: Kube,
        epic: EpicSingleton,
        metrics_: Metrics,
        owner: str,
        size: int | None = None,
        track_owners: bool = True,
    ) -> None:
        self.kube = kube
        self.epic = epic
        self.metrics = metrics_
        self.owner = owner
        self.size = size
        self.track_owners = track_owners
        self.pool = BlockPool()
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            taken = self.pool.take()
            if taken is None:
                await self._refill()
                taken = self.pool.take()
            if taken is None:
                raise allocation.ExhaustedError("a freshly reserved block of tunnel IDs was empty")
        self.metrics.stats.allocated += 1
        self.metrics.allocated.add(1, {"scheme": "block"})
        return taken

    def give_back(self, tunnel_id: int) -> None:
        self.pool.give_back(tunnel_id)

    async def _refill(self) -> None:
        live = (await self.kube.live_holders(SYSTEM_NAMESPACE))[0] | {self.owner} if self.track_owners else None

        def mutate(obj: JSON) -> tuple[TunnelIDBlock, int]:
            status = status_of(obj)
            size = self.size or EPICSpec.model_validate(obj.get("spec") or {}).tunnel_id_block_size
            dropped = len([b for b in status.tunnel_id_blocks if live is not None and b.owner not in live])
            block = allocation.reserve_block(status, self.owner, size, live, now_rfc3339())
            obj["status"] = status.to_wire()
            return block, dropped

        result = await _update(self.epic, self.metrics, mutate, "tunnel ID block")
        block, dropped = result.value
        self.pool.refill(block, result.written["metadata"].get("uid"))
        self.metrics.stats.blocks += 1
        self.metrics.blocks.add(1)
        if dropped:
            self.metrics.stats.reclaimed += dropped
            self.metrics.reclaimed.add(dropped)
        log.info("reserved tunnel IDs %s-%s", block.first, block.last, extra={"owner": self.owner})

    async def maintain(self, lease_name: str, lease_seconds: int) -> None:
        """One round of housekeeping: renew this allocator's Lease, forget a block of a replaced singleton, and
        remove the records of blocks whose owner's Lease expired."""
        await self.kube.renew_lease(SYSTEM_NAMESPACE, lease_name, self.owner, lease_seconds)
        obj = await self.kube.get(EPIC, SYSTEM_NAMESPACE, SINGLETON_NAME)
        uid = obj["metadata"].get("uid") if obj else None
        if self.pool.epic_uid is not None and uid != self.pool.epic_uid:
            async with self._lock:
                log.warning("the EPIC singleton was replaced; dropping the tunnel IDs reserved from the old one")
                self.pool.drop()
        if obj is None:
            return
        live, expired = await self.kube.live_holders(SYSTEM_NAMESPACE)
        live.add(self.owner)
        if any(b.owner not in live for b in status_of(obj).tunnel_id_blocks):
            await self._reclaim(live)
        for name in expired:  # their blocks are reclaimed: the Lease has nothing left to tell
            await self.kube.delete_lease(SYSTEM_NAMESPACE, name)

    async def _reclaim(self, live: set[str]) -> None:

        def mutate(current: JSON) -> list[TunnelIDBlock]:
            status = status_of(current)
            gone = allocation.prune_blocks(status, live)
            current["status"] = status.to_wire()
            return gone

        result = await _update(self.epic, self.metrics, mutate, "tunnel ID block reclamation")
        for block in result.value:
            log.info("reclaimed the block %s-%s of %s, whose Lease expired", block.first, block.last, block.owner)
        self.metrics.stats.reclaimed += len(result.value)
        self.metrics.reclaimed.add(len(result.value))
