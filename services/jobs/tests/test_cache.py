"""The controller's memory of Jobs and nodes (the cache kopf's indexes were)."""

from __future__ import annotations

from tollgate.jobs.cache import ClusterCache, OwnedJob
from tollgate.jobs.k8s import trimmed
from tollgate.jobs.nodes import NodeInfo, watches_nodes
from tollgate.jobs.workers import ObservedJob


def owned(name: str, goop: str = "g", uid: str = "uid-1", phase: str = "Pending") -> OwnedJob:
    return OwnedJob(("ns", goop), uid, ObservedJob(name=name, phase=phase))  # type: ignore[arg-type]


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
