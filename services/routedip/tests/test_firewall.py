"""Firewall planning as pure logic: NodePorts, hostPorts outside the node-port range, per node, machine IDs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from tollgate.routedip.firewall import PortRule, machine_id, node_ports, nodes_to_open, plan_firewall
from tollgate.routedip.state import NodeState, PodState, RoutedIPState, ServicePort, ServiceState

RANGE = (30000, 32767)
SERVICE = ServiceState(
    "web",
    "ingress",
    {"app": "ingress"},
    local_traffic=True,
    ports=(ServicePort("TCP", 80, 30080, "http"), ServicePort("UDP", 53, 30053, "dns"), ServicePort("TCP", 9000)),
)


def pod(
    name: str,
    node: str,
    *host_ports: tuple[str, int],
    labels: dict[str, str] | None = None,
    namespace: str = "web",
    active: bool = True,
) -> PodState:
    return PodState(namespace, name, labels if labels is not None else {"app": "ingress"}, node, active, host_ports)


def node(name: str, provider_id: str | None) -> NodeState:
    return NodeState(name, datetime(2026, 1, 1, tzinfo=UTC), True, "Ready", provider_id=provider_id)


def test_node_ports_of_the_service_are_allowed() -> None:
    assert node_ports(SERVICE, [], "n1", RANGE) == {PortRule("tcp", 30080), PortRule("udp", 30053)}


def test_host_ports_count_only_outside_the_range_and_on_the_node() -> None:
    pods = [
        pod("on-node", "n1", ("TCP", 443), ("TCP", 30500)),
        pod("elsewhere", "n2", ("TCP", 8443)),
        pod("not-selected", "n1", ("TCP", 8080), labels={"app": "other"}),
        pod("other-namespace", "n1", ("TCP", 8081), namespace="other"),
        pod("finished", "n1", ("TCP", 8082), active=False),
    ]
    ports = node_ports(SERVICE, pods, "n1", RANGE)
    assert ports == {PortRule("tcp", 30080), PortRule("udp", 30053), PortRule("tcp", 443)}
    assert PortRule("tcp", 8443) in node_ports(SERVICE, pods, "n2", RANGE)


def test_a_custom_node_port_range_changes_which_host_ports_count() -> None:
    pods = [pod("p", "n1", ("TCP", 30500), ("TCP", 443))]
    ports = node_ports(SERVICE, pods, "n1", (400, 500))
    assert PortRule("tcp", 30500) in ports
    assert PortRule("tcp", 443) not in ports


def test_a_cluster_ip_service_without_node_ports_or_host_ports_opens_nothing() -> None:
    plain = ServiceState("web", "plain", {"app": "x"}, local_traffic=False, ports=(ServicePort("TCP", 80),))
    assert node_ports(plain, [], "n1", RANGE) == frozenset()
    assert node_ports(None, [], "n1", RANGE) == frozenset()


def test_a_plan_merges_routed_ips_per_node_and_resolves_machine_ids() -> None:
    other = ServiceState("web", "dns", {"app": "dns"}, False, (ServicePort("UDP", 53, 31053),))
    nodes = {"n1": node("n1", "digitalocean://101"), "n2": node("n2", "digitalocean://102"), "n3": node("n3", None)}
    plan = plan_firewall([(SERVICE, ["n1"]), (other, ["n1", "n2"]), (other, ["n3"])], [], nodes, RANGE)
    assert plan.nodes["n1"].ports == {PortRule("tcp", 30080), PortRule("udp", 30053), PortRule("udp", 31053)}
    assert plan.nodes["n2"].machine_id == "102"
    assert plan.machine_ids() == ["101", "102"]
    assert plan.unresolved() == ["n3"]
    assert [str(p) for p in plan.all_ports()] == ["tcp/30080", "udp/30053", "udp/31053"]
    assert plan.to_json()["n2"] == {"machineID": "102", "ports": ["udp/31053"]}


def test_the_fingerprint_follows_the_content() -> None:
    nodes = {"n1": node("n1", "digitalocean://101"), "n2": node("n2", "digitalocean://102")}
    one = plan_firewall([(SERVICE, ["n1"])], [], nodes, RANGE)
    assert one.fingerprint() == plan_firewall([(SERVICE, ["n1"])], [], nodes, RANGE).fingerprint()
    assert one.fingerprint() != plan_firewall([(SERVICE, ["n2"])], [], nodes, RANGE).fingerprint()


@pytest.mark.parametrize(
    ("provider_id", "expected"),
    [
        ("digitalocean://400001", "400001"),
        ("aws:///us-east-1a/i-0abc123", "i-0abc123"),
        ("gce://project/zone/instance-1", "instance-1"),
        ("", None),
        (None, None),
    ],
)
def test_machine_ids_come_from_the_provider_id(provider_id: str | None, expected: str | None) -> None:
    assert machine_id(provider_id) == expected


def test_port_rules_read_and_print_alike() -> None:
    assert PortRule.parse("udp/53") == PortRule("udp", 53)
    assert str(PortRule("tcp", 443)) == "tcp/443"


def test_the_holder_opens_its_ports_and_a_move_target_before_or_after_the_assignment(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    held = routed_ip("held", ip="203.0.113.1", assigned="a")
    moving = routed_ip("moving", ip="203.0.113.2", assigned="b", target="c")
    assert nodes_to_open([held, moving], "c", post_allow=False) == [(("a", "web"), {"a"}), (("a", "web"), {"b", "c"})]
    assert nodes_to_open([held, moving], "c", post_allow=True) == [(("a", "web"), {"a"}), (("a", "web"), {"b"})]
    after_assign = nodes_to_open([moving], "c", post_allow=True, extra={moving.key: {"c"}})
    assert after_assign == [(("a", "web"), {"b", "c"})], "firewallPostAllow: the target once it holds the IP"


def test_nothing_is_opened_for_a_routed_ip_leaving_of_another_class_or_of_another_namespaces_service(
    routed_ip: Callable[..., RoutedIPState],
) -> None:
    own = routed_ip("own", ip="203.0.113.1", assigned="a")
    leaving = routed_ip("leaving", ip="203.0.113.2", assigned="a", deleting=True)
    released = routed_ip("released", ip="203.0.113.3", assigned="a")
    other_class = routed_ip("other", ip="203.0.113.4", class_name="other", assigned="a")
    theirs = routed_ip("theirs", ip="203.0.113.5", service=("victim", "db"), assigned="a")
    opened = nodes_to_open([own, leaving, released, other_class, theirs], "c", False, excluding=released.key)
    assert opened == [(("a", "web"), {"a"})]
