"""The controller: a work queue of routed IPs (and classes, and nodes to untaint), fed by the kopf handlers
(`triggers` names what each change re-examines), drained by workers that run one reconcile a key
(`reconcile.py`; the move itself: `mover.py`) and retry what failed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tollgate.routedip import metrics as routedip_metrics
from tollgate.routedip import triggers
from tollgate.routedip.cache import Cache, Indexes, Key, Requeue
from tollgate.routedip.config import ControllerConfig
from tollgate.routedip.k8s import Kube
from tollgate.routedip.mover import Mover
from tollgate.routedip.providers import ProviderError
from tollgate.routedip.providers.factory import Providers
from tollgate.routedip.reconcile import Reconciler
from tollgate.routedip.records import Records, involved
from tollgate.routedip.state import NodeState, PodState, RoutedIPState
from tollgate.routedip.steps import failure_reason, provider_retry_after
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
        self.synced = asyncio.Event()
        self.providers = Providers(
            self.kube, self.config.system_namespace, self.config.job_wait_timeout, self.config.trust
        )
        self.records = Records(self.kube, self.cache)
        meter = self.telemetry.meter("tollgate.routedip")
        self.mover = Mover(self.kube, self.cache, self.records, self.queue, self.config.failpoints, meter, self.now)
        self.reconciler = Reconciler(
            self.kube, self.cache, self.records, self.mover, self.providers, self.queue, self.config
        )
        self._nodes_seen: dict[str, NodeState] = {}
        self._workers: list[asyncio.Task[None]] = []
        self.tracer = self.telemetry.tracer("tollgate.routedip")
        self.errors = routedip_metrics.RECONCILE_ERRORS.create(meter)

    # ----- lifecycle -----
    def start(self, indexes: Indexes) -> None:
        self.cache.indexes = indexes
        self._workers = [
            asyncio.create_task(self._work(), name=f"routedip-worker-{i}") for i in range(self.config.workers)
        ]

    async def stop(self) -> None:
        self.queue.close()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        await self.records.close()
        await self.providers.close()

    def mark_synced(self) -> None:
        """Called from every kopf event handler: kopf runs them only once every index is populated."""
        self.synced.set()

    # ----- what changes trigger -----
    def _queue_routed_ips(self, routed_ips: list[RoutedIPState]) -> None:
        for rip in routed_ips:
            self.queue.add(("rip", *rip.key))

    def node_changed(self, name: str, node: NodeState | None) -> None:
        self.cache.changed()
        previous = self._nodes_seen.get(name)
        if node is None:
            self._nodes_seen.pop(name, None)
        else:
            self._nodes_seen[name] = node
        if node is not None and node.move_tainted:
            self.queue.add(("node", name))
        if triggers.node_change_re_elects(previous, node):
            self._queue_routed_ips(self.cache.routed_ips())

    def service_changed(self, namespace: str, name: str) -> None:
        self.cache.changed()
        self._queue_routed_ips(triggers.of_service(self.cache.routed_ips(), namespace, name))

    def pod_changed(self, pod: PodState) -> None:
        self.cache.changed()
        self._queue_routed_ips(triggers.selecting(self.cache.routed_ips(), pod, self.cache.service))

    def class_changed(self, name: str) -> None:
        self.cache.changed()
        self.queue.add(("class", name))
        self._queue_routed_ips(triggers.of_class(self.cache.routed_ips(), name, self.cache.all_classes()))

    def routed_ip_changed(self, rip: RoutedIPState, deleted: bool) -> None:
        self.cache.changed()
        if not deleted and self.cache.is_own_write(rip):
            return
        self._queue_routed_ips(triggers.freed_by(rip, self.cache.routed_ips()))
        self.queue.add(("rip", *rip.key))

    # ----- workers -----
    async def _work(self) -> None:
        await self.synced.wait()
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
