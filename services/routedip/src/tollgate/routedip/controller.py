"""The controller: a work queue of routed IPs (and classes, and nodes to untaint), fed by the watch events and the
resync's corrections (`triggers` names what each change re-examines), drained by workers that run one reconcile a key
(`reconcile.py`; the move itself: `mover.py`) and retry what failed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tollgate.routedip import metrics as routedip_metrics
from tollgate.routedip import triggers
from tollgate.routedip.audit import Auditor
from tollgate.routedip.cache import Cache, Key, Requeue
from tollgate.routedip.config import ControllerConfig
from tollgate.routedip.drift import Drifts
from tollgate.routedip.k8s import Kube
from tollgate.routedip.mover import Mover
from tollgate.routedip.providers import ProviderError
from tollgate.routedip.providers.factory import Providers
from tollgate.routedip.reconcile import Reconciler
from tollgate.routedip.records import Records, involved
from tollgate.routedip.steps import failure_reason, provider_retry_after
from tollgate.runtime import resync
from tollgate.runtime.backoff import until_done
from tollgate.runtime.resync import Mirror
from tollgate.runtime.telemetry import Telemetry
from tollgate.runtime.workqueue import QueueClosed, WorkQueue

log = logging.getLogger("tollgate.routedip")


@dataclass
class Controller:
    kube: Kube
    config: ControllerConfig
    telemetry: Telemetry
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        self.queue: WorkQueue[Key] = WorkQueue()
        self.cache = Cache()
        self.mirror = Mirror()
        self.providers = Providers(
            self.kube, self.config.system_namespace, self.config.job_wait_timeout, self.config.trust
        )
        self.records = Records(self.kube, self.cache)
        meter = self.telemetry.meter("tollgate.routedip")
        self.mover = Mover(
            self.kube, self.cache, self.records, self.queue, self.config.failpoints, meter, self.now, Drifts()
        )
        self.reconciler = Reconciler(
            self.kube, self.cache, self.records, self.mover, self.providers, self.queue, self.config
        )
        self.auditor = Auditor(self.cache, self.providers, self.reconciler, self.mover, self.queue)
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.tracer = self.telemetry.tracer("tollgate.routedip")
        self.errors = routedip_metrics.RECONCILE_ERRORS.create(meter)

    # ----- lifecycle -----
    async def start(self) -> None:
        """Fill the cache with a first listing of every watched kind, then start the workers, the resync and the
        drift check. Called from kopf's startup handler: kopf starts its watches only after it, so no watch event
        can be older than this listing."""
        listing = await until_done(self._list, "listing the watched kinds", self._stopping)
        for plural, items in listing.items():
            for obj in items:
                self.mirror.record(plural, obj)
                self.observe(plural, obj, False)
        log.info("cache filled: %s", ", ".join(f"{len(items)} {plural}" for plural, items in listing.items()))
        self._tasks = [
            asyncio.create_task(self._work(), name=f"routedip-worker-{i}") for i in range(self.config.workers)
        ]
        self._tasks.append(
            asyncio.create_task(
                resync.resync_every(self.config.resync_period, self.mirror, self._list, self.observe, self._stopping),
                name="routedip-resync",
            )
        )
        self._tasks.append(
            asyncio.create_task(self.auditor.run(self.config.drift_period, self._stopping), name="routedip-drift")
        )

    async def stop(self) -> None:
        self._stopping.set()
        self.queue.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.records.close()
        await self.providers.close()

    async def _list(self) -> dict[str, list[dict[str, Any]]]:
        return await self.kube.list_watched(self.config.namespace)

    # ----- what changes trigger -----
    def watched(self, plural: str, body: Mapping[str, Any], deleted: bool) -> None:
        """A watch event (from kopf's event handlers)."""
        self.mirror.record(plural, body, deleted)
        self.observe(plural, body, deleted)

    def observe(self, plural: str, body: Mapping[str, Any], deleted: bool) -> None:
        """A watch event or the resync's correction: into the cache, then queue what the change re-examines (the
        echo of the controller's own status write re-examines nothing)."""
        previous, current = self.cache.observe(plural, body, deleted)
        if plural == "routedips" and current is not None and self.cache.is_own_write(current):
            return
        cache = self.cache
        for key in triggers.re_examined(plural, previous, current, cache.routed_ips, cache.service, cache.all_classes):
            self.queue.add(key)

    # ----- workers -----
    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueClosed:
                return
            try:
                with self.tracer.start_as_current_span(f"reconcile {key[0]}", attributes={"key": "/".join(key)}):
                    await self._reconcile(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Requeue:
                self.queue.add_after(key, 0.05)
            except Exception as error:
                self.errors.add(1, {"kind": key[0]})
                delay = provider_retry_after(error)
                if delay is not None:
                    self.queue.add_after(key, delay)
                else:
                    delay = self.queue.retry(key)
                log.warning(
                    "reconcile %s failed (retry in %.1f s): %s",
                    "/".join(key),
                    delay,
                    error,
                    exc_info=not isinstance(error, ProviderError),
                )
                await self._report_failure(key, error, delay)
            finally:
                self.queue.done(key)

    async def _reconcile(self, key: Key) -> None:
        if key[0] == "rip":
            await self.reconciler.reconcile_routed_ip((key[1], key[2]))
        elif key[0] == "class":
            await self.reconciler.reconcile_class(key[1])
        elif key[0] == "node":
            await self.mover.untaint_if_unused(key[1])

    async def _report_failure(self, key: Key, error: Exception, delay: float) -> None:
        if key[0] != "rip":
            return
        rip = self.cache.routed_ip((key[1], key[2]))
        if rip is None or rip.deleting:
            return
        reason = failure_reason(error)
        self.records.event(involved(rip), "Warning", reason, f"{error} (retrying in {delay:.1f} s)")
        try:
            await self.records.write_status(rip, ready=("False", reason, str(error)))
        except Exception as status_error:
            log.warning("could not record the failure of %s: %s", "/".join(key), status_error)
