"""kopf handlers: keep the in-memory indexes, and turn every event into a reconcile request for its Goop.

kopf starts calling handlers only once every index is filled from the initial listing, so a reconcile
never mistakes a Job or a node it has not read yet for a missing one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

from tollgate.jobs.controller import Reconciler
from tollgate.jobs.nodes import NodeInfo, node_info
from tollgate.jobs.workers import GOOP_UID_LABEL, ObservedJob, goop_owner, observe_job, owner_uid
from tollgate.models.goop import GROUP, VERSION
from tollgate.runtime.operator import configure

PER_NODE = "PerNode"
EVENT_POSTERS = 16
EVENT_POSTER_IDLE_SECONDS = 0.1


class IndexView:
    """The controller's ClusterView over kopf's indexes."""

    def __init__(self, goop_jobs: kopf.Index[str, ObservedJob], cluster_nodes: kopf.Index[str, NodeInfo]) -> None:
        self._jobs = goop_jobs
        self._nodes = cluster_nodes

    def jobs(self, goop_uid: str) -> list[ObservedJob]:
        return list(self._jobs.get(goop_uid, []))

    def nodes(self) -> list[NodeInfo]:
        return [node for store in self._nodes.values() for node in store]


class NoEssence(kopf.AnnotationsDiffBaseStorage):
    """kopf builds every object's "essence" (a deep copy) on every event to diff it for change handlers. This
    controller has only event handlers and indexes, so the diff is never used, and building it for every Job
    event was the controller's largest CPU cost."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def _view(kwargs: dict[str, Any]) -> IndexView:
    """The indexes kopf passes to every handler as keyword arguments named by the indexes' ids."""
    return IndexView(kwargs["goop_jobs"], kwargs["cluster_nodes"])


def build_registry(reconciler: Reconciler) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

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

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await reconciler.close()

    @kopf.index("batch", "v1", "jobs", labels={GOOP_UID_LABEL: kopf.PRESENT}, id="goop_jobs", registry=registry)
    async def goop_jobs(body: kopf.Body, **_: Any) -> dict[str, ObservedJob]:
        uid = owner_uid(body)
        return {uid: observe_job(body)} if uid else {}

    @kopf.index("v1", "nodes", id="cluster_nodes", registry=registry)
    async def cluster_nodes(body: kopf.Body, name: str, **_: Any) -> dict[str, NodeInfo]:
        return {name: node_info(body)}

    @kopf.index(GROUP, VERSION, "goops", id="node_watchers", registry=registry)
    async def node_watchers(
        namespace: str | None, name: str, spec: kopf.Spec, status: kopf.Status, **_: Any
    ) -> dict[str, tuple[str | None, str]]:
        """PerNode Goops that still care about nodes coming, going or changing."""
        if spec.get("placement") == PER_NODE and status.get("phase") != "Completed":
            return {PER_NODE: (namespace, name)}
        return {}

    @kopf.on.event(GROUP, VERSION, "goops", registry=registry)
    async def goop_changed(
        type: str, body: kopf.Body, namespace: str | None, name: str, uid: str, **kwargs: Any
    ) -> None:
        if namespace is None:
            return
        if type == "DELETED":
            reconciler.forget((namespace, name), uid)
        else:
            reconciler.goop_changed(body, _view(kwargs))

    @kopf.on.event("batch", "v1", "jobs", labels={GOOP_UID_LABEL: kopf.PRESENT}, registry=registry)
    async def job_changed(type: str, body: kopf.Body, namespace: str | None, **kwargs: Any) -> None:
        owner = goop_owner(body)
        if owner is None or namespace is None:
            return
        goop, uid = str(owner.get("name")), str(owner.get("uid"))
        job = observe_job(body)
        if type == "DELETED":
            reconciler.job_gone((namespace, goop), uid, job, _view(kwargs))
        else:
            reconciler.job_changed((namespace, goop), uid, job, _view(kwargs))

    @kopf.on.event("v1", "nodes", registry=registry)
    async def node_changed(**kwargs: Any) -> None:
        view = _view(kwargs)
        watchers: kopf.Index[str, tuple[str, str]] = kwargs["node_watchers"]
        for key in watchers.get(PER_NODE, []):
            reconciler.request(key, view)

    return registry
