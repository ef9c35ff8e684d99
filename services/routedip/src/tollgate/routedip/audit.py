"""The drift check: on a period, read back from each class's provider what it holds, and have what differs from the
controller's records put back. An IP found elsewhere is handed to its RoutedIP's reconcile (queued, with the finding
in `Drifts`), which assigns it again and posts the Event; the firewall is made the plan last applied again under the
class's firewall lock (`Mover.audit_firewall`). The decisions are `drift.py`'s."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass

from tollgate.routedip import drift
from tollgate.routedip.cache import Cache, Key
from tollgate.routedip.mover import Mover
from tollgate.routedip.providers import ReadBack
from tollgate.routedip.providers.factory import Providers
from tollgate.routedip.reconcile import Reconciler
from tollgate.routedip.state import ClassState
from tollgate.runtime.workqueue import WorkQueue

log = logging.getLogger("tollgate.routedip")


@dataclass
class Auditor:
    cache: Cache
    providers: Providers
    reconciler: Reconciler
    mover: Mover
    queue: WorkQueue[Key]

    async def run(self, period: float, stop: asyncio.Event) -> None:
        """A drift check every `period` seconds (give or take a tenth, so that replicas spread them); 0: never."""
        while period > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period * random.uniform(0.9, 1.1))
            if not stop.is_set():
                await self.check()

    async def check(self) -> None:
        """One drift check of every class; a class whose provider fails is tried again next period."""
        for cls in self.cache.all_classes():
            try:
                await self.check_class(cls)
            except Exception as error:
                log.warning(
                    "drift check of ClusterRoutedIPClass %s failed, trying again next period: %s", cls.name, error
                )

    async def check_class(self, cls: ClassState) -> None:
        same_name = [c.name for c in self.cache.classes(cls.class_name)]
        if cls.spec is None or self.reconciler.class_problems(cls, same_name):
            return
        provider = await self.providers.for_class(cls)
        if not isinstance(provider, ReadBack):
            return
        busy = provider.busy()
        if busy is not None:
            log.info("drift check of ClusterRoutedIPClass %s put off to the next period: %s", cls.name, busy)
            return
        held = drift.held(self.cache.routed_ips(), cls.class_name)  # before reading back: a move since is seen
        if held:
            holders = await provider.holders()
            for found in drift.assignment_drifts(held, holders, self.cache.nodes(), provider.machine):
                log.warning("%s/%s: %s; assigning it to %s again", *found.key, found.found(), found.node)
                self.mover.drifts.note(found)
                self.queue.add(("rip", *found.key))
        await self.mover.audit_firewall(cls, provider, provider, held)
