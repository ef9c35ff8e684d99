"""The reconcile loop around the planner: one reconcile at a time per Goop, requests coalesced, failures retried.

Every trigger (the Goop changed, one of its Jobs changed, a node changed) only queues the Goop's key in the
runtime's work queue, which holds a key once and never gives it to two workers, so a burst of Job events
costs one or two reconciles; a failed reconcile is retried after the key's own growing backoff. Job events
that only refresh the status (a Job created, started, one of several finished) are queued after a short
window (`Tuning.job_batch`), so that the Goop's other Jobs' events in that window cost no reconcile of their
own; the event of a Job that failed or finished the last of the Goop's Jobs queues it at once.
A reconcile takes the Goop as the watch last delivered it, or as its own last status write returned it,
whichever is newer (the status is the run's memory, so it must never plan on a status older than its own
write), its Jobs and the nodes from the controller's cache (tollgate.jobs.cache), plans, acts, plans again and
writes the status only when it changed, guarded by the resourceVersion it planned on: when the Goop changed
meanwhile, the API server refuses the write and the reconcile runs again on a fresh read. A Goop event of a
version already known (the echo of its own write) and a Job event that the status already records change nothing
and cost no reconcile.

The cache lags behind the controller's own writes, so, like Kubernetes' own controllers, it remembers what it
created or deleted until the cache shows it ("expectations"), and what was deleted while finished
(`ttlSecondsAfterFinished: 0`) until the status has recorded it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import kopf
from pydantic import ValidationError

from tollgate.jobs import metrics as jobs_metrics
from tollgate.jobs.k8s import GoopApi
from tollgate.jobs.nodes import NodeInfo, watches_nodes
from tollgate.jobs.planning import GoopEvent, created_event, plan
from tollgate.jobs.workers import FAILED, FINISHED, ObservedJob, Worker, job_event_urgent, job_manifest, records_job
from tollgate.models.base import merge_patch, now_rfc3339
from tollgate.models.goop import Goop, GoopStatus
from tollgate.runtime.backoff import Backoff
from tollgate.runtime.telemetry import Telemetry
from tollgate.runtime.workqueue import QueueClosed, WorkQueue

log = logging.getLogger("tollgate.jobs")

Key = tuple[str, str]  # namespace, name
Body = dict[str, Any]

KEPT_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp")


def kept(body: Mapping[str, Any]) -> Body:
    """What a reconcile needs of a Goop: without managedFields, annotations and labels, which are most of it."""
    metadata = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {key: metadata[key] for key in KEPT_METADATA if key in metadata},
        "spec": body.get("spec") or {},
        "status": body.get("status") or {},
    }


def newer(version: str | None, than: str | None) -> bool:
    """Whether resourceVersion `version` is newer than `than`. The API server's versions are integers that grow
    (comparable since Kubernetes 1.35, KEP-5504); one that is not counts as newer when it differs."""
    if than is None:
        return True
    try:
        return int(version or "") > int(than)
    except ValueError:
        return version != than


class ClusterView(Protocol):
    """What the controller reads from memory instead of the API server (tollgate.jobs.cache)."""

    def jobs(self, goop_uid: str) -> list[ObservedJob]: ...

    def nodes(self) -> list[NodeInfo]: ...


@dataclass
class Tuning:
    max_backoff: float = 60.0
    first_backoff: float = 0.5
    workers: int = 32
    taken_retry: float = 30.0
    expectation_ttl: float = 60.0
    job_batch: float = 0.5


class Reconciler:
    def __init__(
        self,
        api: GoopApi,
        view: ClusterView,
        telemetry: Telemetry,
        tuning: Tuning | None = None,
        clock: Callable[[], str] = now_rfc3339,
    ) -> None:
        self.api = api
        self.tuning = tuning or Tuning()
        self.clock = clock
        self.view = view
        self._tracer = telemetry.tracer("tollgate.jobs")
        meter = telemetry.meter("tollgate.jobs")
        self._reconciles = jobs_metrics.RECONCILES.create(meter)
        self._duration = jobs_metrics.RECONCILE_DURATION.create(meter)
        self._jobs_created = jobs_metrics.JOBS_CREATED.create(meter)
        self._jobs_deleted = jobs_metrics.JOBS_DELETED.create(meter)
        retry = Backoff(
            base=min(self.tuning.first_backoff, self.tuning.max_backoff), cap=self.tuning.max_backoff, jitter=0.5
        )
        self.queue: WorkQueue[Key] = WorkQueue(retry)
        self._workers: list[asyncio.Task[None]] = []
        self._created: dict[str, dict[str, tuple[ObservedJob, float]]] = {}
        self._deleted: dict[str, dict[str, float]] = {}
        self._tombstones: dict[str, dict[str, ObservedJob]] = {}
        self._warned_taken: dict[str, set[str]] = {}
        self._goops: dict[Key, Body] = {}

    # --- triggers ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers, from a kopf handler: they post Events with kopf.event(), which needs the context kopf
        sets up for its handlers (a request from elsewhere, such as the resync, only queues)."""
        if not self._workers:
            self._workers = [
                asyncio.create_task(self._work(), name=f"goop-worker-{i}") for i in range(self.tuning.workers)
            ]

    def request(self, key: Key, delay: float = 0.0) -> None:
        """Reconcile the Goop `key` in `delay` seconds (or sooner, when asked to); requests made while one is queued
        are merged into it."""
        self.queue.add_after(key, delay)

    def goop_changed(self, body: Mapping[str, Any]) -> None:
        """The watch delivered a Goop: remember it and reconcile, unless this version is known already (the echo
        of the controller's own status write, or an older one)."""
        metadata = body.get("metadata") or {}
        if self._remember(kept(body)):
            self.request((str(metadata.get("namespace")), str(metadata.get("name"))))

    def job_changed(self, key: Key, goop_uid: str, job: ObservedJob) -> None:
        """One of the Goop's Jobs changed: nothing to do if the Goop's status records it as it is."""
        goop = self._goops.get(key)
        if goop is not None and goop["metadata"].get("uid") == goop_uid and records_job(goop, job):
            return
        self._job_request(key, goop_uid, job)

    def job_gone(self, key: Key, goop_uid: str, job: ObservedJob) -> None:
        """A worker Job was deleted: if it had finished, keep its outcome until the status records it; reconcile
        (an unfinished one is created again)."""
        if job.phase in FINISHED:
            self._tombstones.setdefault(goop_uid, {})[job.name] = replace(job, deleting=False)
        self._job_request(key, goop_uid, job)

    def _job_request(self, key: Key, goop_uid: str, job: ObservedJob) -> None:
        """Reconcile at once if the Goop may fail or complete, else batch it with the Goop's next Job events."""
        urgent = job_event_urgent(job, self.view.jobs(goop_uid))
        self.request(key, 0.0 if urgent else self.tuning.job_batch)

    def nodes_changed(self) -> list[Key]:
        """A node came, went or changed: reconcile the Goops that care (returned)."""
        keys = [key for key, goop in self._goops.items() if watches_nodes(goop)]
        for key in keys:
            self.request(key)
        return keys

    def forget(self, key: Key, goop_uid: str | None) -> None:
        """The Goop was deleted (`goop_uid` None: the one of that name the controller knows)."""
        goop = self._goops.get(key)
        if goop is not None and goop_uid in (None, goop["metadata"].get("uid")):
            goop_uid = str(goop["metadata"].get("uid"))
            del self._goops[key]
        if goop_uid is not None:
            for memory in (self._created, self._deleted, self._tombstones, self._warned_taken):
                memory.pop(goop_uid, None)

    def _remember(self, body: Body) -> bool:
        """Keep the newest Goop body known, from the watch or from a status write; False if `body` is not newer."""
        metadata = body["metadata"]
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        known = self._goops.get(key)
        if (
            known is not None
            and known["metadata"].get("uid") == metadata.get("uid")
            and not newer(metadata.get("resourceVersion"), known["metadata"].get("resourceVersion"))
        ):
            return False
        self._goops[key] = body
        return True

    async def close(self) -> None:
        self.queue.close()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueClosed:
                return
            started = time.monotonic()
            try:
                requeue = await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                delay = self.queue.retry(key)
                log.warning(
                    "reconcile failed; retrying",
                    exc_info=error,
                    extra={
                        "goop": f"{key[0]}/{key[1]}",
                        "retry_in": round(delay, 3),
                        "failures": self.queue.failures(key),
                    },
                )
                self._reconciles.add(1, {"result": "error"})
            else:
                self.queue.forget(key)
                self._reconciles.add(1, {"result": "ok"})
                if requeue is not None:
                    self.queue.add_after(key, requeue)
            finally:
                self._duration.record(time.monotonic() - started)
                self.queue.done(key)

    # --- one reconcile --------------------------------------------------------------------------------------

    async def reconcile(self, key: Key) -> float | None:
        """Bring the Goop's Jobs and status in line with its spec; returns seconds until a retry, if one is due."""
        namespace, name = key
        with self._tracer.start_as_current_span("reconcile goop") as span:
            span.set_attribute("goop.namespace", namespace)
            span.set_attribute("goop.name", name)
            body = self._goops.get(key)
            if body is None:
                read = await self.api.get_goop(namespace, name)
                if read is None:
                    return None
                fresh = kept(read)
                self._remember(fresh)
                body = self._goops.get(key, fresh)  # the watch may have delivered a newer one meanwhile
            uid = str(body["metadata"]["uid"])
            try:
                goop = Goop.model_validate(body)
            except ValidationError as error:
                return await self._invalid(key, body, error)
            jobs = self._observed(uid)
            nodes = self.view.nodes() if goop.spec.placement == "PerNode" else []
            now = self.clock()
            first = plan(goop, jobs, nodes, now)
            events: list[GoopEvent] = []
            rejected: dict[str, str] = {}
            created: list[Worker] = []
            requeue: float | None = None
            results = await asyncio.gather(
                *(self.api.create_job(namespace, job_manifest(goop, worker), uid) for worker in first.create)
            )
            for worker, result in zip(first.create, results, strict=True):
                if result.outcome == "rejected":
                    rejected[worker.name] = result.message
                elif result.outcome == "taken":
                    requeue = self.tuning.taken_retry
                    warned = self._warned_taken.setdefault(uid, set())
                    if worker.name not in warned:
                        warned.add(worker.name)
                        events.append(GoopEvent("Warning", "JobNameTaken", result.message))
                else:
                    job = ObservedJob(name=worker.name, phase="Pending", index=worker.index, node=worker.node)
                    deadline = time.monotonic() + self.tuning.expectation_ttl
                    self._created.setdefault(uid, {})[worker.name] = (job, deadline)
                    jobs.append(job)
                    if result.outcome == "created":
                        self._jobs_created.add(1)
                        created.append(worker)
                        log.info("created Job", extra={"goop": f"{namespace}/{name}", "job": worker.name})
            if created:
                events.append(created_event(created))
            for deletion in first.delete:
                await self.api.delete_job(namespace, deletion.job.name, deletion.job.uid)
                self._deleted.setdefault(uid, {})[deletion.job.name] = time.monotonic() + self.tuning.expectation_ttl
                jobs = [replace(j, deleting=True) if j.name == deletion.job.name else j for j in jobs]
                self._jobs_deleted.add(1)
                log.info("deleted Job", extra={"goop": f"{namespace}/{name}", "job": deletion.job.name})
                events.append(GoopEvent("Normal", "JobDeleted", f"Deleted Job {deletion.job.name}: {deletion.why}"))
            self._post(body, events)
            final = plan(goop, jobs, nodes, now, rejected)
            status = final.status.to_wire()
            before = goop.status.to_wire() if goop.status is not None else {}
            if status != before:
                version = str(body["metadata"].get("resourceVersion"))
                written = await self.api.patch_status(namespace, name, uid, version, merge_patch(before, status))
                if written.outcome == "gone":
                    return None  # deleted meanwhile; its Jobs go with it
                if written.outcome == "conflict":
                    # Changed since the version planned on: plan again on a fresh read (the Jobs created are
                    # remembered, and the transitions not reported yet are still transitions then).
                    self._forget_body(key, body)
                    log.info("Goop changed meanwhile; planning again", extra={"goop": f"{namespace}/{name}"})
                    return 0.0
                self._remember_written(key, written.body)
                if goop.status is None or goop.status.phase != final.status.phase:
                    log.info("Goop phase", extra={"goop": f"{namespace}/{name}", "phase": final.status.phase})
            self._post(body, final.events)
            self._settle_tombstones(uid, final.status)
            span.set_attribute("goop.phase", final.status.phase)
            span.set_attribute("goop.jobs_created", len(first.create))
            span.set_attribute("goop.jobs_deleted", len(first.delete))
            return requeue

    def _remember_written(self, key: Key, written: Body | None) -> None:
        """Keep the Goop as the status write returned it, unless it was forgotten meanwhile (deleted)."""
        known = self._goops.get(key)
        if written is not None and known is not None and known["metadata"].get("uid") == written["metadata"].get("uid"):
            self._remember(kept(written))

    def _forget_body(self, key: Key, body: Body) -> None:
        if self._goops.get(key) is body:
            del self._goops[key]

    @staticmethod
    def _post(body: dict[str, Any], events: list[GoopEvent]) -> None:
        for event in events:
            kopf.event(kopf.Body(cast(kopf.RawBody, body)), type=event.type, reason=event.reason, message=event.message)

    def _observed(self, uid: str) -> list[ObservedJob]:
        """The Goop's Jobs from the cache, corrected by what the cache has not caught up with yet."""
        now = time.monotonic()
        jobs = {job.name: job for job in self.view.jobs(uid)}
        created = self._created.get(uid, {})
        for name, (job, deadline) in list(created.items()):
            if name in jobs or deadline < now:
                del created[name]
            else:
                jobs[name] = job
        deleted = self._deleted.get(uid, {})
        for name, deadline in list(deleted.items()):
            if name not in jobs or jobs[name].deleting or deadline < now:
                del deleted[name]
            else:
                jobs[name] = replace(jobs[name], deleting=True)
        for name, job in self._tombstones.get(uid, {}).items():
            jobs.setdefault(name, job)
        if uid in self._created and not created:
            del self._created[uid]
        if uid in self._deleted and not deleted:
            del self._deleted[uid]
        return list(jobs.values())

    def _settle_tombstones(self, uid: str, status: GoopStatus) -> None:
        tombstones = self._tombstones.get(uid)
        if not tombstones:
            return
        recorded = {d.name for d in status.jobs if d.phase in FINISHED}
        for name in [n for n in tombstones if n in recorded]:
            del tombstones[name]
        if not tombstones:
            del self._tombstones[uid]

    async def _invalid(self, key: Key, body: Body, error: ValidationError) -> float | None:
        """A Goop the model refuses (the CRD schema lets little through): say which field, create nothing."""
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        metadata = body["metadata"]
        status = GoopStatus(phase="Failed", observed_generation=metadata.get("generation"))
        current = body.get("status") or {}
        failed = next((c for c in current.get("conditions") or [] if c.get("type") == FAILED), None)
        if failed is not None and failed.get("reason") == "InvalidSpec" and failed.get("message") == problems:
            return None
        status.set_condition(FAILED, "True", "InvalidSpec", problems, metadata.get("generation"))
        written = await self.api.patch_status(
            key[0], key[1], str(metadata["uid"]), str(metadata.get("resourceVersion")), status.to_wire()
        )
        if written.outcome == "conflict":
            self._forget_body(key, body)
            return 0.0
        self._remember_written(key, written.body)
        if written.outcome == "written":
            self._post(body, [GoopEvent("Warning", "InvalidSpec", problems)])
        return None
