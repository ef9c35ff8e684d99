"""The rules of servicemesh.l7mp.io: VirtualService names, ports, selectors and endpoint addresses."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER
from tollgate.testing.cluster import dev_endpoint_policy
from tollgate.testing.objects import Obj
from tollgate.webhook.validation import Limits

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


def listener(
    name: str, port: int, protocol: str = "udp", cluster: str | None = None, endpoint: str | None = None
) -> Obj:
    return {
        "name": name,
        protocol: {
            "port": port,
            "cluster": {
                "name": cluster or f"{name}-c",
                "endpoints": [{"name": endpoint or f"{name}-e", "host": {"address": "10.0.0.1"}, "port": 7000}],
            },
        },
    }


def virtual_service(name: str, *listeners: Obj, selector: dict[str, str] | None = None, namespace: str = "ns") -> Obj:
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": "ingress"} if selector is None else selector, "listeners": list(listeners)},
    }


def test_the_seed_virtual_service_is_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("VirtualService")) == []


def test_names_are_unique_within_a_virtual_service_and_endpoint_names_within_their_cluster(check: Check) -> None:
    first = listener("a", 1000, cluster="c", endpoint="e")
    first["udp"]["cluster"]["endpoints"].append({"name": "e", "host": {"address": "10.0.0.2"}, "port": 7000})
    vs = virtual_service("vs", first, listener("a", 1001, cluster="c", endpoint="e"))
    assert check(vs) == [
        "spec.listeners[0].udp.cluster.endpoints[1].name: duplicate endpoint name 'e' "
        "(spec.listeners[0].udp.cluster.endpoints[0].name has it too): endpoint names are unique",
        "spec.listeners[1].name: duplicate listener name 'a' (spec.listeners[0].name has it too): listener names "
        "are unique",
        "spec.listeners[1].udp.cluster.name: duplicate cluster name 'c' (spec.listeners[0].udp.cluster.name has it "
        "too): cluster names are unique",
    ]


def test_the_same_names_in_other_virtual_services_are_accepted(check: Check) -> None:
    """Envoy names are `<namespace>/<object>/<name>`: names of two objects never meet, whatever their selectors."""
    same_namespace = virtual_service("first", listener("l", 1000, cluster="c", endpoint="e"))
    other_namespace = virtual_service("first", listener("l", 2000, cluster="c", endpoint="e"), namespace="other")
    vs = virtual_service("second", listener("l", 2000, cluster="c", endpoint="e"))
    assert check(vs, same_namespace, other_namespace) == []


def test_a_thousand_virtual_services_may_all_name_their_endpoint_e(check: Check) -> None:
    existing = [virtual_service(f"load-{n}", listener(f"load-{n}-l", 10000 + n, endpoint="e")) for n in range(1000)]
    assert check(virtual_service("load-1000", listener("load-1000-l", 11000, endpoint="e")), *existing) == []


def test_listeners_of_other_namespaces_never_take_a_port_nor_are_named(check: Check) -> None:
    """A VirtualService selects the Envoys of its own namespace only: another tenant's ports cannot meet it,
    and a refusal never tells of another namespace's objects."""
    elsewhere = virtual_service("squatter", listener("load-5-l", 2001), namespace="tenant-b")
    assert check(virtual_service("load-5", listener("load-5-l", 2001)), elsewhere) == []
    own = virtual_service("first", listener("a", 2001))
    violations = check(virtual_service("second", listener("b", 2001)), own, elsewhere)
    assert violations == [
        "spec.listeners[0].udp.port: UDP port 2001 is taken by listener 'a' of VirtualService ns/first, whose selector "
        "app=ingress overlaps this one's app=ingress: two listeners on one port for overlapping selectors"
    ]


def test_an_update_does_not_conflict_with_its_own_stored_version(check: Check) -> None:
    stored = virtual_service("vs", listener("l", 1000))
    assert check(virtual_service("vs", listener("l", 1000), listener("m", 1001)), stored, old=stored) == []


def test_an_object_being_deleted_frees_its_names_and_ports(check: Check) -> None:
    leaving = virtual_service("old", listener("l", 1000))
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert check(virtual_service("new", listener("l", 1000)), leaving) == []


def test_two_listeners_of_one_virtual_service_cannot_share_a_port(check: Check) -> None:
    vs = virtual_service("vs", listener("a", 1000), listener("b", 1000), listener("c", 1000, "tcp"))
    assert check(vs) == [
        "spec.listeners[1].udp.port: UDP port 1000 is taken by spec.listeners[0].udp.port: two listeners on one port"
    ]


@pytest.mark.parametrize(
    "selector",
    [{"app": "ingress"}, {}, {"app": "ingress", "zone": "a"}, {"zone": "a"}],
    ids=["same", "empty", "narrower", "other-key"],
)
def test_a_port_is_taken_for_overlapping_selectors(check: Check, selector: dict[str, str]) -> None:
    existing = virtual_service("first", listener("a", 2001))
    vs = virtual_service("second", listener("b", 2001), selector=selector)
    (violation,) = check(vs, existing)
    assert violation.startswith(
        "spec.listeners[0].udp.port: UDP port 2001 is taken by listener 'a' of VirtualService ns/first, whose selector "
        "app=ingress overlaps this one's"
    )


def test_a_port_is_free_for_disjoint_selectors_or_another_protocol(check: Check) -> None:
    existing = virtual_service("first", listener("a", 2001))
    assert check(virtual_service("second", listener("b", 2001), selector={"app": "other"}), existing) == []
    assert check(virtual_service("third", listener("c", 2001, "tcp")), existing) == []


def test_hash_key_needs_a_cluster_that_can_hash(check: Check) -> None:
    udp, tcp = listener("u", 1000), listener("t", 1001, "tcp")
    udp["udp"]["cluster"]["hash_key"] = "callid"
    tcp["tcp"]["cluster"]["hash_key"] = "callid"
    assert check(virtual_service("vs", udp, tcp)) == [
        "spec.listeners[1].tcp.cluster.hash_key: only a cluster behind a udp listener can hash on a key (Envoy's TCP "
        "proxy has no key hash policy)"
    ]


@pytest.mark.parametrize(
    ("host", "got"), [({"selector": {"app": "w"}, "address": "a"}, "selector, address"), ({}, "none")]
)
def test_a_host_is_exactly_one_of_selector_and_address(check: Check, host: Obj, got: str) -> None:
    one = listener("l", 1000)
    one["udp"]["cluster"]["endpoints"][0]["host"] = host
    assert check(virtual_service("vs", one)) == [
        f"spec.listeners[0].udp.cluster.endpoints[0].host: exactly one of selector, address must be set (got {got})"
    ]


@pytest.mark.parametrize(
    ("health_check", "violation"),
    [
        ({"interval": 499}, "interval: Input should be greater than or equal to 500 (got 499)"),
        ({"protocol": "HTTP"}, "protocol: Input should be 'TCP' (got \"HTTP\")"),
    ],
)
def test_health_checks_are_tcp_and_500_ms_apart_at_least(check: Check, health_check: Obj, violation: str) -> None:
    one = listener("l", 1000)
    one["udp"]["cluster"]["health_check"] = health_check
    assert check(virtual_service("vs", one)) == [f"spec.listeners[0].udp.cluster.health_check.{violation}"]


@pytest.mark.parametrize(
    ("udp", "violation"),
    [
        ({"max_sessions": 0}, "max_sessions: Input should be greater than or equal to 1 (got 0)"),
        ({"max_sessions": 1048577}, "max_sessions: Input should be less than or equal to 1048576 (got 1048577)"),
        ({"idle_timeout": 999}, "idle_timeout: Input should be greater than or equal to 1000 (got 999)"),
        (
            {"idle_timeout": "60s"},
            'idle_timeout: Input should be a valid integer, unable to parse string as an integer (got "60s")',
        ),
    ],
)
def test_udp_sessions_are_bounded_and_idle_for_a_second_at_least(check: Check, udp: Obj, violation: str) -> None:
    one = listener("l", 1000)
    one["udp"].update(udp)
    assert check(virtual_service("vs", one)) == [f"spec.listeners[0].udp.{violation}"]


def test_udp_session_limits_within_bounds_are_accepted(check: Check) -> None:
    one = listener("l", 1000)
    one["udp"].update(max_sessions=1048576, idle_timeout=1000)
    assert check(virtual_service("vs", one)) == []


def test_a_tcp_listener_has_no_udp_sessions(check: Check) -> None:
    one = listener("l", 1000, "tcp")
    one["tcp"].update(max_sessions=100, idle_timeout=5000)
    assert check(virtual_service("vs", one)) == [
        f"spec.listeners[0].tcp.{name}: applies to udp listeners only (UDP proxy sessions; a tcp listener has "
        "connections)"
        for name in ("max_sessions", "idle_timeout")
    ]


def test_a_listener_is_udp_or_tcp(check: Check) -> None:
    both = listener("l", 1000)
    both["tcp"] = both["udp"]
    assert check(virtual_service("vs", both)) == [
        "spec.listeners[0]: exactly one of udp, tcp must be set (got udp, tcp)"
    ]


@pytest.mark.parametrize(
    ("selector", "overlaps"),
    [
        ({"app": "a", "zone": "2"}, False),
        ({"app": "a"}, True),
        ({"zone": "1", "tier": "edge"}, True),
        ({"app": "b"}, False),
    ],
)
def test_selectors_overlap_unless_a_shared_key_differs(check: Check, selector: dict[str, str], overlaps: bool) -> None:
    existing = virtual_service("first", listener("a", 2001), selector={"app": "a", "zone": "1"})
    assert bool(check(virtual_service("second", listener("b", 2001), selector=selector), existing)) == overlaps


def test_thousands_of_listeners_on_one_port_for_disjoint_selectors(check: Check) -> None:
    existing = [virtual_service(f"vs{i}", listener(f"l{i}", 2001), selector={"app": f"a{i}"}) for i in range(3000)]
    assert check(virtual_service("new", listener("new", 2001), selector={"app": "new"}), *existing) == []
    (violation,) = check(virtual_service("new", listener("new", 2001), selector={"app": "a7"}), *existing)
    assert "is taken by listener 'l7' of VirtualService ns/vs7" in violation


def test_a_port_conflict_names_three_objects_and_counts_the_rest(check: Check) -> None:
    existing = [virtual_service(f"vs{i}", listener(f"l{i}", 2001), selector={"app": f"a{i}"}) for i in range(5)]
    violations = check(virtual_service("new", listener("new", 2001), selector={}), *existing)
    assert len(violations) == 4
    assert violations[-1] == "spec.listeners[0].udp.port: UDP port 2001 is taken by 2 more VirtualServices"


# ---- what would break every Envoy: its admin port, its xDS cluster's name ----


def test_a_tcp_listener_on_the_envoy_admin_port_is_refused(check: Check) -> None:
    vs = virtual_service("vs", listener("admin", ADMIN_PORT, "tcp"), listener("udp-admin", ADMIN_PORT))
    assert check(vs) == [
        f"spec.listeners[0].tcp.port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at start: "
        f"a listener there cannot bind (reserved: {ADMIN_PORT}/TCP)"
    ]


@pytest.mark.parametrize("field", ["name", "cluster"])
def test_a_listener_or_cluster_named_like_the_xds_cluster_is_refused(check: Check, field: str) -> None:
    vs = virtual_service(
        "vs", listener(XDS_CLUSTER, 1000) if field == "name" else listener("l", 1000, cluster=XDS_CLUSTER)
    )
    path = "spec.listeners[0].name" if field == "name" else "spec.listeners[0].udp.cluster.name"
    assert check(vs) == [
        f"{path}: {XDS_CLUSTER!r} is reserved: it names the xDS cluster of every Envoy's bootstrap, through which the "
        "Envoy gets its configuration"
    ]


# ---- where endpoints may be: the endpoint address policy, as for RemoteEndpoints ----

REACHABLE = "endpoints must be reachable remote addresses"


def aimed_at(*hosts: Obj, protocol: str = "tcp", namespace: str = "ns") -> Obj:
    """A VirtualService whose one listener forwards to an endpoint at each host."""
    one = listener("l", 4000, protocol)
    one[protocol]["cluster"]["endpoints"] = [{"name": f"e{n}", "host": h, "port": 9901} for n, h in enumerate(hosts)]
    return virtual_service("vs", one, namespace=namespace)


LOOPBACK = f"127.0.0.1 is a loopback address; {REACHABLE}"


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", LOOPBACK),
        ("169.254.169.254", "169.254.169.254 is a link-local address (169.254.0.0/16, where cloud metadata services "
         f"answer); {REACHABLE}"),
        ("10.96.0.1", "10.96.0.1 is in 10.96.0.0/12, a denied range (the cluster's own pod and Service ranges are "
         f"denied); {REACHABLE}"),
        ("localhost", f"'localhost' is a loopback name (it resolves to 127.0.0.1): {LOOPBACK}"),
        ("127.1", f"'127.1' reads as the IPv4 address 127.0.0.1 (a numeric form resolvers accept): {LOOPBACK}"),
        ("::ffff:127.0.0.1", LOOPBACK),
    ],
)  # fmt: skip
def test_an_endpoint_address_the_policy_refuses_is_named_with_the_rule(check: Check, address: str, rule: str) -> None:
    vs = aimed_at({"address": "192.0.2.10"}, {"address": address})
    assert check(vs) == [f"spec.listeners[0].tcp.cluster.endpoints[1].host.address: {rule}"]


def test_endpoints_by_selector_and_dns_name_are_left_to_the_cluster(check: Check) -> None:
    """A selector picks the Ready pods of the object's own namespace; a name is resolved by the Envoy at run time
    (the seed's own example forwards to tcp-echo.default.svc)."""
    assert check(aimed_at({"selector": {"app": "worker"}}, {"address": "tcp-echo.default.svc"}, protocol="udp")) == []


def test_the_endpoint_policy_of_the_limits_carves_out_the_dev_ranges_only(check: Check) -> None:
    dev = Limits(endpoint_policy=dev_endpoint_policy())
    assert check(aimed_at({"address": "127.77.0.9"}), limits=dev) == []
    assert check(aimed_at({"address": "127.77.0.9"}, {"address": "127.0.0.1"}), limits=dev) == [
        f"spec.listeners[0].tcp.cluster.endpoints[1].host.address: {LOOPBACK}"
    ]


def test_an_account_narrows_its_virtual_services_endpoints(check: Check, sample: Sample) -> None:
    account = sample("Account")
    account["spec"]["allowedEndpointRanges"] = ["192.0.2.0/24"]
    namespace = account["metadata"]["namespace"]
    vs = aimed_at({"address": "192.0.2.10"}, {"address": "198.51.100.1"}, {"address": "echo.example.com"},
                  namespace=namespace)  # fmt: skip
    assert check(vs, account) == [
        "spec.listeners[0].tcp.cluster.endpoints[1].host.address: 198.51.100.1 is outside Account root's "
        "spec.allowedEndpointRanges (192.0.2.0/24)",
        "spec.listeners[0].tcp.cluster.endpoints[2].host.address: 'echo.example.com' is a DNS name, which cannot be "
        "shown to be inside Account root's spec.allowedEndpointRanges (192.0.2.0/24): endpoints of this account are "
        "IP addresses",
    ]
