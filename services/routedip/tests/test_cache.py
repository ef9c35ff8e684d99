"""The controller's cache: fed by watch events, corrected by the resync's difference (a deletion no watch reported
leaves it), overlaid with the controller's own writes."""

from __future__ import annotations

from typing import Any

from tollgate.routedip.cache import Cache
from tollgate.routedip.triggers import re_examined
from tollgate.runtime.resync import Mirror


def node(name: str, version: str = "1") -> dict[str, Any]:
    ready = [{"type": "Ready", "status": "True"}]
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"conditions": ready}}


def pod(name: str, node_name: str, version: str = "1", app: str = "web") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "a", "name": name, "labels": {"app": app}, "resourceVersion": version},
        "spec": {"nodeName": node_name, "containers": [{"name": "web"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def endpoint_slice(name: str, service: str) -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service}
    return {"metadata": {"namespace": "a", "name": name, "labels": labels}, "endpoints": [{"nodeName": "n1"}]}


def routed_ip(name: str, version: str = "1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "a", "name": name, "resourceVersion": version},
        "spec": {"className": "c", "routedIP": "203.0.113.5", "serviceRef": {"serviceName": "web"}},
        "status": status,
    }


def service(name: str = "web") -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": name}, "spec": {"selector": {"app": "web"}}}


def test_a_deletion_the_watch_never_reported_leaves_the_cache_through_the_resync() -> None:
    """What kopf's relisting after 410 Gone does: a deleted node is simply not in the new listing. Its indexes kept
    such a node for good; the resync's difference takes it out of what the election sees."""
    cache, mirror = Cache(), Mirror()
    for body in (node("n1"), node("n2")):
        mirror.record("nodes", body)
        cache.observe("nodes", body, False)
    assert sorted(cache.nodes()) == ["n1", "n2"]

    diff = mirror.diff("nodes", [node("n1")], mirror.sequence)
    assert [gone["metadata"]["name"] for gone in diff.gone] == ["n2"]
    previous, current = cache.observe("nodes", diff.gone[0], True)
    assert previous is not None and previous.name == "n2" and current is None
    assert sorted(cache.nodes()) == ["n1"]


def test_a_deletion_is_judged_by_the_last_state_known() -> None:
    """A resync's deletion carries only a name; what it re-examines comes from the state the cache had: the RoutedIPs
    whose Service selected the deleted pod."""
    cache = Cache()
    cache.observe("services", service(), False)
    cache.observe("routedips", routed_ip("web"), False)
    cache.observe("pods", pod("web-1", "n1"), False)
    previous, current = cache.observe("pods", {"metadata": {"namespace": "a", "name": "web-1"}}, True)
    assert cache.pods("a") == []
    keys = re_examined("pods", previous, current, cache.routed_ips, cache.service, cache.all_classes)
    assert keys == [("rip", "a", "web")]


def test_grouped_lookups_follow_changes_of_the_group() -> None:
    cache = Cache()
    cache.observe("endpointslices", endpoint_slice("web-x", "web"), False)
    assert [s.name for s in cache.slices(("a", "web"))] == ["web-x"]
    previous, current = cache.observe("endpointslices", endpoint_slice("web-x", "api"), False)
    assert cache.slices(("a", "web")) == [] and [s.name for s in cache.slices(("a", "api"))] == ["web-x"]
    assert {(s.namespace, s.service) for s in (previous, current)} == {("a", "web"), ("a", "api")}
    cache.observe("endpointslices", {"metadata": {"namespace": "a", "name": "web-x"}}, True)
    assert cache.slices(("a", "api")) == []


def test_the_controllers_own_write_stands_until_the_watch_brings_it_back() -> None:
    cache = Cache()
    cache.observe("routedips", routed_ip("web", "5"), False)
    cache.remember(routed_ip("web", "7", assignedNode="n1"))
    rip = cache.routed_ip(("a", "web"))
    assert rip is not None and rip.placement.assigned == "n1"
    assert cache.is_own_write(rip)

    cache.observe("routedips", routed_ip("web", "6"), False)  # an older event, still on its way
    rip = cache.routed_ip(("a", "web"))
    assert rip is not None and rip.resource_version == "7"

    cache.observe("routedips", {"metadata": {"namespace": "a", "name": "web"}}, True)
    assert cache.routed_ip(("a", "web")) is None, "a deletion wins over the remembered write"
