"""Drift: which held routed IPs a provider shows elsewhere, what the Events say, when a finding is void, and what a
firewall's drift concerns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tollgate.routedip.drift import Drifts, assignment_drifts, held
from tollgate.routedip.firewall import FirewallDrift, NodeFirewall, PortRule
from tollgate.routedip.firewall import FirewallPlan as Plan
from tollgate.routedip.state import NodeState, Placement, RoutedIPState

CREATED = datetime(2026, 1, 1, tzinfo=UTC)
NODES = {
    "node-a": NodeState("node-a", CREATED, True, "Ready", provider_id="digitalocean://1111"),
    "node-b": NodeState("node-b", CREATED, True, "Ready", provider_id="digitalocean://1234"),
    "kind-node": NodeState("kind-node", CREATED, True, "Ready"),
}


def ready(rip: RoutedIPState, status: str = "True") -> RoutedIPState:
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": status, "reason": "Assigned"}]
    return replace(rip, status={**rip.status, "conditions": conditions})


def test_held_routed_ips_are_those_ready_on_a_node_with_no_move_in_progress(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    settled = ready(routed_ip("settled", assigned="node-a"))
    candidates = [
        settled,
        ready(routed_ip("moving", assigned="node-a", target="node-b")),
        ready(routed_ip("failing", assigned="node-a"), "False"),
        ready(routed_ip("leaving", assigned="node-a", deleting=True)),
        ready(routed_ip("other-class", assigned="node-a", class_name="other")),
        ready(routed_ip("nowhere")),
    ]
    assert held(candidates, "c") == [settled]


def test_an_ip_found_elsewhere_is_a_drift_and_the_event_says_where(routed_ip: Callable[..., RoutedIPState]) -> None:
    rip = ready(routed_ip("web", ip="203.0.113.7", assigned="node-a"))
    assert assignment_drifts([rip], {"203.0.113.7": "1111"}, NODES, "droplet") == [], "where it belongs"

    [moved] = assignment_drifts([rip], {"203.0.113.7": "1234"}, NODES, "droplet")
    assert moved.message() == (
        "203.0.113.7 was assigned to droplet 1234 (node-b) behind routedip's back: assigned to node-a again"
    )
    [outside] = assignment_drifts([rip], {"203.0.113.7": "9999"}, NODES, "droplet")
    assert outside.found() == "203.0.113.7 was assigned to droplet 9999 behind routedip's back"
    [unassigned] = assignment_drifts([rip], {"203.0.113.7": None}, NODES, "droplet")
    assert unassigned.message() == "203.0.113.7 was unassigned behind routedip's back: assigned to node-a again"
    [absent] = assignment_drifts([rip], {}, NODES, "droplet")
    assert absent.absent and absent.found() == "203.0.113.7 is not among the provider's IPs"


def test_a_node_without_a_machine_id_is_not_judged(routed_ip: Callable[..., RoutedIPState]) -> None:
    rip = ready(routed_ip("web", ip="203.0.113.7", assigned="kind-node"))
    gone = ready(routed_ip("gone", ip="203.0.113.8", assigned="deleted-node"))
    assert assignment_drifts([rip, gone], {"203.0.113.7": "1234", "203.0.113.8": None}, NODES, "droplet") == []


def test_a_finding_is_void_once_the_routed_ip_moved(routed_ip: Callable[..., RoutedIPState]) -> None:
    rip = ready(routed_ip("web", ip="203.0.113.7", assigned="node-a"))
    [found] = assignment_drifts([rip], {"203.0.113.7": "1234"}, NODES, "droplet")
    drifts = Drifts()

    drifts.note(found)
    assert drifts.take(replace(rip, placement=Placement("node-a", "node-b"))) is None, "a move began since"
    assert drifts.take(rip) is None, "taken once"

    drifts.note(found)
    assert drifts.take(replace(rip, placement=Placement("node-b"))) is None, "moved since"
    drifts.note(found)
    assert drifts.take(rip) == found


def test_a_firewall_drift_says_what_changed_and_whom_it_concerns() -> None:
    plan = Plan(
        {
            "node-a": NodeFirewall("node-a", "1111", frozenset({PortRule("tcp", 30080)})),
            "node-b": NodeFirewall("node-b", "1234", frozenset({PortRule("udp", 30053)})),
        }
    )
    drift = FirewallDrift(missing_ports=(PortRule("tcp", 30080),), extra_machines=("4242", "77"))
    assert drift.describe("droplet", {"4242": "node-c"}) == (
        "rule tcp/30080 removed, droplet 4242 (node-c) added, droplet 77 added"
    )
    assert drift.concerns(plan, "node-a") and not drift.concerns(plan, "node-b")
    taken_out = FirewallDrift(missing_machines=("1234",), extra_rules=("tcp/22",))
    assert taken_out.concerns(plan, "node-b") and not taken_out.concerns(plan, "node-a")
    assert not FirewallDrift()
