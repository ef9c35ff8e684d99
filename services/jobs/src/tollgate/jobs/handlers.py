"""kopf handlers: every watched Goop, Job and node goes into the controller's memory (the Goop bodies, the cache of
Jobs and nodes, the resync's mirror) and becomes a reconcile request for the Goops it concerns; and the resync that
corrects that memory where a watch missed an event.

The cache is filled by a listing of the Jobs and nodes at startup, before kopf's watches start, so a reconcile
never mistakes a Job or a node it has not read yet for a missing one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import kopf

from tollgate.jobs.cache import ClusterCache, OwnedJob
from tollgate.jobs.controller import Reconciler
from tollgate.jobs.k8s import JOB_PLURAL, NODE_PLURAL, PLURAL, GoopApi
from tollgate.jobs.nodes import node_info
from tollgate.jobs.workers import GOOP_UID_LABEL, goop_owner, observe_job
from tollgate.models.goop import GROUP, VERSION
from tollgate.runtime import resync
from tollgate.runtime.operator import configure
from tollgate.runtime.resync import Key, Mirror, key_of

log = logging.getLogger("tollgate.jobs.handlers")

EVENT_POSTERS = 16
EVENT_POSTER_IDLE_SECONDS = 0.1
# A startup listing that failed (the API server unreachable) is tried again after this long.
LOAD_RETRY_SECONDS = 5.0


class Watched:
    """What the watches tell, and what the resync corrects, into the controller's memory and its work queue."""

    def __init__(self, reconciler: Reconciler, cache: ClusterCache, mirror: Mirror) -> None:
        self.reconciler = reconciler
        self.cache = cache
        self.mirror = mirror

    def load(self, listing: Mapping[str, Iterable[Mapping[str, Any]]]) -> None:
        """Fill the cache with a listing of Jobs and nodes (queueing nothing: the watches' own listing does)."""
        for plural, items in listing.items():
            for obj in items:
                self.mirror.record(plural, obj)
                if plural == JOB_PLURAL:
                    self._set_job(obj)
                else:
                    self.cache.set_node(node_info(obj))

    def event(self, plural: str, obj: Mapping[str, Any], deleted: bool) -> None:
        """A watch event, from a kopf handler."""
        self.mirror.record(plural, obj, deleted)
        self.reconciler.start()
        self.apply(plural, obj, deleted)

    def correct(self, plural: str, obj: Mapping[str, Any], deleted: bool) -> None:
        """A resync's correction (of a deleted object, only its namespace and name are known): like a watch event."""
        goops = self.apply(plural, obj, deleted)
        if goops:
            named = [f"{namespace}/{name}" for namespace, name in goops]
            log.info("resync: corrected what the controller knows of these Goops", extra={"goops": named})

    def apply(self, plural: str, obj: Mapping[str, Any], deleted: bool) -> list[Key]:
        """Update the memory and request reconciles; the Goops concerned."""
        if plural == PLURAL:
            return self._goop(obj, deleted)
        if plural == JOB_PLURAL:
            return self._job(obj, deleted)
        if deleted:
            self.cache.remove_node(key_of(obj)[1])
        else:
            self.cache.set_node(node_info(obj))
        return self.reconciler.nodes_changed()

    def _goop(self, obj: Mapping[str, Any], deleted: bool) -> list[Key]:
        key = key_of(obj)
        if not key[0]:
            return []
        if deleted:
            uid = (obj.get("metadata") or {}).get("uid")
            self.reconciler.forget(key, str(uid) if uid else None)
        else:
            self.reconciler.goop_changed(obj)
        return [key]

    def _job(self, obj: Mapping[str, Any], deleted: bool) -> list[Key]:
        if not deleted:
            owned = self._set_job(obj)
            if owned is None:
                return []
            self.reconciler.job_changed(owned.goop, owned.goop_uid, owned.job)
            return [owned.goop]
        known = self.cache.remove_job(key_of(obj))
        # A watch's DELETED event carries the Job's last state; a resync's correction only its name.
        gone = _owned(obj) or known
        if gone is None:
            return []
        self.reconciler.job_gone(gone.goop, gone.goop_uid, gone.job)
        return [gone.goop]

    def _set_job(self, obj: Mapping[str, Any]) -> OwnedJob | None:
        owned = _owned(obj)
        if owned is None:  # no longer controlled by a Goop
            self.cache.remove_job(key_of(obj))
        else:
            self.cache.set_job(owned)
        return owned


def _owned(obj: Mapping[str, Any]) -> OwnedJob | None:
    owner = goop_owner(obj)
    namespace = key_of(obj)[0]
    if owner is None or not namespace:
        return None
    return OwnedJob((namespace, str(owner.get("name"))), str(owner.get("uid")), observe_job(obj))


class NoEssence(kopf.AnnotationsDiffBaseStorage):
    """kopf builds every object's "essence" (a deep copy) on every event to diff it for change handlers. This
    controller has only event handlers, so the diff is never used, and building it for every Job event was the
    controller's largest CPU cost."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def build_registry(
    watched: Watched, api: GoopApi, namespace: str | None, resync_period: float
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    stop_resync = asyncio.Event()
    resyncing: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, "jobs")
        settings.persistence.diffbase_storage = NoEssence(prefix="jobs.tollgate.io", key="last-handled-configuration")
        settings.posting.reporting_component = "tollgate-jobs"
        # kopf posts each object's Events from a worker of its own, each request on a connection of its own when
        # none is free (its connection pool has no limit): a burst of new Goops can open hundreds of TLS connections
        # at once, CPU and memory for a courtesy. A few workers, each leaving as soon as its Goop has nothing more
        # to post, keep up with the Events of hundreds of Goops a second.
        settings.posting.worker_limit = EVENT_POSTERS
        settings.posting.idle_timeout = EVENT_POSTER_IDLE_SECONDS
        # Watch only the Jobs of Goops (server-side): other Jobs cost no events, no per-object memory in kopf.
        settings.watching.label_selectors["batch", "jobs"] = GOOP_UID_LABEL
        # Every handler here is an event handler, so kopf would log each watch event at INFO: keep that for DEBUG.
        if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
            logging.getLogger("kopf.objects").setLevel(logging.WARNING)

    @kopf.on.startup(registry=registry, backoff=LOAD_RETRY_SECONDS)
    async def load(**_: Any) -> None:
        """Fill the cache before kopf's watches start (startup handlers run first, and only once this replica
        leads), then start the resync."""
        watched.load(await api.list_watched((JOB_PLURAL, NODE_PLURAL), namespace))

        async def list_all() -> dict[str, list[dict[str, Any]]]:
            return await api.list_watched((PLURAL, JOB_PLURAL, NODE_PLURAL), namespace)

        resyncing.append(
            asyncio.create_task(
                resync.resync_every(resync_period, watched.mirror, list_all, watched.correct, stop_resync),
                name="resync",
            )
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        stop_resync.set()
        await asyncio.gather(*resyncing)
        await watched.reconciler.close()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def goop_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        watched.event(PLURAL, body, type == "DELETED")

    @kopf.on.event("batch", "v1", JOB_PLURAL, labels={GOOP_UID_LABEL: kopf.PRESENT}, registry=registry)
    async def job_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        watched.event(JOB_PLURAL, body, type == "DELETED")

    @kopf.on.event("v1", NODE_PLURAL, registry=registry)
    async def node_event(type: str | None, body: kopf.Body, **_: Any) -> None:
        watched.event(NODE_PLURAL, body, type == "DELETED")

    return registry
