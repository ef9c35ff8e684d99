"""The controller's memory of Jobs and nodes (the cache kopf's indexes were), and how watch events and the resync's
corrections reach it and the work queue."""

from __future__ import annotations

from typing import Any, cast

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider

from tollgate.jobs.cache import ClusterCache, OwnedJob
from tollgate.jobs.controller import Reconciler, Tuning
from tollgate.jobs.handlers import Watched
from tollgate.jobs.k8s import GoopApi, trimmed
from tollgate.jobs.nodes import NodeInfo, watches_nodes
from tollgate.jobs.workers import INDEX_ANNOTATION, ObservedJob
from tollgate.runtime.resync import Mirror
from tollgate.runtime.telemetry import Telemetry


def owned(name: str, goop: str = "g", uid: str = "uid-1", phase: str = "Pending") -> OwnedJob:
    return OwnedJob(("ns", goop), uid, ObservedJob(name=name, phase=phase))  # type: ignore[arg-type]


def job_body(name: str, goop: str = "g", uid: str = "uid-1", succeeded: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Complete", "status": "True"}] if succeeded else []
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"job-{name}",
            "resourceVersion": "7",
            "annotations": {INDEX_ANNOTATION: name.rsplit("-", 1)[1]},
            "ownerReferences": [{"kind": "Goop", "name": goop, "uid": uid, "controller": True}],
        },
        "status": {"conditions": conditions},
    }


def gone(name: str) -> dict[str, Any]:
    """A deleted object as the resync hands it over: its namespace and name only."""
    return {"metadata": {"namespace": "ns", "name": name}}


def test_the_cache_keeps_each_goops_jobs_as_last_told() -> None:
    cache = ClusterCache()
    cache.set_job(owned("g-0"))
    cache.set_job(owned("g-1"))
    cache.set_job(owned("g-0", phase="Succeeded"))
    cache.set_job(owned("h-0", goop="h", uid="uid-2"))
    assert sorted((j.name, j.phase) for j in cache.jobs("uid-1")) == [("g-0", "Succeeded"), ("g-1", "Pending")]
    assert [j.name for j in cache.jobs("uid-2")] == ["h-0"]
    assert cache.jobs("uid-3") == []


def test_a_job_removed_from_the_cache_is_gone_from_its_goop_and_what_was_known_is_returned() -> None:
    cache = ClusterCache()
    cache.set_job(owned("g-0", phase="Succeeded"))
    assert cache.remove_job(("ns", "g-0")) == owned("g-0", phase="Succeeded")
    assert cache.jobs("uid-1") == []
    assert cache.remove_job(("ns", "g-0")) is None


def test_a_job_name_taken_over_by_a_new_goop_of_the_same_name_leaves_the_old_one() -> None:
    """The old Goop's Job was deleted without a watch event, then the Goop created again makes a Job of that name."""
    cache = ClusterCache()
    cache.set_job(owned("g-0", uid="old"))
    cache.set_job(owned("g-0", uid="new"))
    assert cache.jobs("old") == []
    assert [j.name for j in cache.jobs("new")] == ["g-0"]


def test_the_cache_keeps_nodes_by_name() -> None:
    cache = ClusterCache()
    cache.set_node(NodeInfo("a"))
    cache.set_node(NodeInfo("b"))
    cache.set_node(NodeInfo("a", unschedulable=True))
    cache.remove_node("b")
    cache.remove_node("never-seen")
    assert cache.nodes() == [NodeInfo("a", unschedulable=True)]


def test_only_per_node_goops_not_completed_watch_nodes() -> None:
    assert watches_nodes({"spec": {"placement": "PerNode"}, "status": {"phase": "Running"}})
    assert watches_nodes({"spec": {"placement": "PerNode"}})
    assert not watches_nodes({"spec": {"placement": "PerNode"}, "status": {"phase": "Completed"}})
    assert not watches_nodes({"spec": {"placement": "Jobs"}, "status": {"phase": "Running"}})


def test_a_listing_keeps_only_what_the_controller_reads() -> None:
    metadata = {"name": "n", "resourceVersion": "3", "managedFields": [{"manager": "kubelet"}]}
    node = {"metadata": metadata, "spec": {"unschedulable": True}, "status": {"images": ["big"]}}
    job = {"metadata": metadata, "spec": {"template": {}}, "status": {"succeeded": 1}}
    goop = {"apiVersion": "goop.example.com/v1alpha1", "kind": "Goop", "metadata": metadata, "spec": {}, "status": {}}
    kept = {"name": "n", "resourceVersion": "3"}
    assert trimmed("nodes", node) == {"metadata": kept, "spec": {"unschedulable": True}}
    assert trimmed("jobs", job) == {"metadata": kept, "status": {"succeeded": 1}}
    assert trimmed("goops", goop) == {**goop, "metadata": kept}


def watched() -> Watched:
    cache = ClusterCache()
    telemetry = Telemetry(TracerProvider(), MeterProvider(), exporting=False)
    reconciler = Reconciler(cast(GoopApi, None), cache, telemetry, Tuning(job_batch=0))
    return Watched(reconciler, cache, Mirror())


async def test_a_job_deletion_the_resync_found_leaves_the_cache_and_its_goop_is_reconciled() -> None:
    memory = watched()
    memory.load({"jobs": [job_body("g-0", succeeded=True), job_body("g-1")], "nodes": []})
    memory.correct("jobs", gone("g-1"), deleted=True)
    assert [j.name for j in memory.cache.jobs("uid-1")] == ["g-0"]
    assert await memory.reconciler.queue.get() == ("ns", "g")
    await memory.reconciler.close()


async def test_a_job_change_the_resync_found_updates_the_cache_and_its_goop_is_reconciled() -> None:
    memory = watched()
    memory.load({"jobs": [job_body("g-0")], "nodes": []})
    memory.correct("jobs", job_body("g-0", succeeded=True), deleted=False)
    assert [(j.name, j.phase) for j in memory.cache.jobs("uid-1")] == [("g-0", "Succeeded")]
    assert await memory.reconciler.queue.get() == ("ns", "g")
    await memory.reconciler.close()


async def test_a_node_deletion_the_resync_found_reconciles_the_per_node_goops_that_are_not_done() -> None:
    memory = watched()
    memory.load({"jobs": [], "nodes": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]})
    for name, phase in (("running", "Running"), ("done", "Completed")):
        goop = {"metadata": {"namespace": "ns", "name": name, "uid": name, "resourceVersion": "1"}}
        memory.reconciler.goop_changed({**goop, "spec": {"placement": "PerNode"}, "status": {"phase": phase}})
        assert await memory.reconciler.queue.get() == ("ns", name)
        memory.reconciler.queue.done(("ns", name))
    memory.correct("nodes", {"metadata": {"name": "b"}}, deleted=True)
    assert [node.name for node in memory.cache.nodes()] == ["a"]
    assert len(memory.reconciler.queue) == 1
    assert await memory.reconciler.queue.get() == ("ns", "running")
    await memory.reconciler.close()
