"""Which RoutedIPs a change re-examines, as pure logic: a node's change that can change an election, a Service's, a
selected pod's, a class's, and a RoutedIP's that can free an address."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from tollgate.models.nodes import Taint
from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.state import NodeState, PodState, RoutedIPState, ServiceState, class_state
from tollgate.routedip.triggers import freed_by, node_change_re_elects, of_class, of_service, selecting

NODE = NodeState("a", datetime(2026, 1, 1, tzinfo=UTC), True, "Ready", provider_id="digitalocean://1")


def names(routed_ips: list[RoutedIPState]) -> list[str]:
    return [rip.name for rip in routed_ips]


def test_a_node_change_re_examines_every_routed_ip_only_when_it_can_change_an_election() -> None:
    moving_in = replace(NODE, taints=(Taint(MOVE_TAINT_KEY, "PreferNoSchedule", "true"),))
    assert not node_change_re_elects(NODE, moving_in), "the controller's own move taint"
    assert not node_change_re_elects(NODE, NODE), "a heartbeat"
    assert node_change_re_elects(NODE, replace(NODE, ready=False, ready_detail="NotReady"))
    assert node_change_re_elects(NODE, replace(NODE, unschedulable=True)), "cordoned"
    assert node_change_re_elects(NODE, replace(NODE, taints=(Taint("dedicated", "NoSchedule", "edge"),)))
    assert node_change_re_elects(None, NODE), "a new node"
    assert node_change_re_elects(NODE, None), "a deleted node"


def test_a_service_change_re_examines_its_routed_ips(routed_ip: Callable[..., RoutedIPState]) -> None:
    web = routed_ip("web", namespace="a", service=("a", "web"))
    api = routed_ip("api", namespace="a", service=("a", "api"))
    elsewhere = routed_ip("web-b", namespace="b", service=("b", "web"))
    assert names(of_service([web, api, elsewhere], "a", "web")) == ["web"]


def test_a_pod_change_re_examines_the_routed_ips_whose_service_selects_it(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    services = {
        ("a", "web"): ServiceState("a", "web", {"app": "web"}, local_traffic=True),
        ("a", "api"): ServiceState("a", "api", {"app": "api"}, local_traffic=True),
    }
    web = routed_ip("web", service=("a", "web"))
    api = routed_ip("api", service=("a", "api"))
    missing = routed_ip("missing", service=("a", "missing"))
    elsewhere = routed_ip("web-b", namespace="b", service=("b", "web"))
    pod = PodState("a", "web-1", {"app": "web"}, "n1", active=True)
    assert names(selecting([web, api, missing, elsewhere], pod, services.get)) == ["web"]


def test_a_class_change_re_examines_its_routed_ips_and_those_without_a_class(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    classes = [
        class_state({"metadata": {"name": "gold-class"}, "spec": {"className": "gold", "provider": "local"}}),
        class_state({"metadata": {"name": "silver-class"}, "spec": {"className": "silver", "provider": "local"}}),
    ]
    gold, silver = routed_ip("gold", class_name="gold"), routed_ip("silver", class_name="silver")
    orphan = routed_ip("orphan", class_name="bronze")
    assert names(of_class([gold, silver, orphan], "gold-class", classes)) == ["gold", "orphan"]
    assert names(of_class([gold, silver, orphan], "deleted-class", classes)) == ["orphan"]


def test_a_routed_ips_change_re_examines_those_it_can_free_the_address_for(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    leaving = routed_ip("leaving", ip="203.0.113.5", deleting=True)
    same_address = routed_ip("next", ip="203.0.113.5", ready_reason="Conflict")
    waiting = routed_ip("edited", ip="203.0.113.9", ready_reason="Conflict")
    unrelated = routed_ip("other", ip="203.0.113.7", ready_reason="Assigned")
    assert names(freed_by(leaving, [leaving, same_address, waiting, unrelated])) == ["next", "edited"]
