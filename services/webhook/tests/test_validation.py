"""Every validation rule, kind by kind: what it accepts and what it refuses, naming the field and the rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tollgate.models import Goop, LoadBalancer
from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER
from tollgate.models.epic import GWPROXY_LABEL, LOAD_BALANCER_LABEL
from tollgate.models.routedip import Trust
from tollgate.testing.cluster import dev_endpoint_policy
from tollgate.webhook.validation import Limits, validate

Obj = dict[str, Any]
Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


def named(obj: Obj, name: str, namespace: str | None = None) -> Obj:
    obj["metadata"]["name"] = name
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return obj


# ---- EPIC ----


def test_the_epic_singleton_is_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("EPIC")) == []


@pytest.mark.parametrize(
    ("namespace", "name", "field"),
    [("epic", "other", "metadata.name"), ("default", "epic", "metadata.namespace")],
)
def test_only_epic_epic_may_exist(check: Check, sample: Sample, namespace: str, name: str, field: str) -> None:
    assert check(named(sample("EPIC"), name, namespace)) == [
        f"{field}: only epic/epic may exist, not {namespace}/{name}"
    ]


# ---- Account ----


def test_an_account_name_of_58_characters_makes_a_63_character_namespace(check: Check, sample: Sample) -> None:
    assert check(named(sample("Account"), "a" * 58)) == []


def test_an_account_name_too_long_for_its_namespace_is_refused(check: Check, sample: Sample) -> None:
    assert check(named(sample("Account"), "a" * 59)) == [
        f"metadata.name: the account's user namespace 'epic-{'a' * 59}' would be 64 characters, above the 63 of a "
        "namespace name: an account name has at most 58"
    ]


def test_an_account_name_with_a_dot_is_refused(check: Check, sample: Sample) -> None:
    (violation,) = check(named(sample("Account"), "acme.widgets"))
    assert violation.startswith("metadata.name: the account's user namespace 'epic-acme.widgets' is not a valid")


# ---- LoadBalancer and GWProxy ----


@pytest.fixture
def group(sample: Sample) -> Obj:
    """The service group the sample load balancers name, in their namespace."""
    return sample("LBServiceGroup")


def test_the_seed_load_balancer_is_accepted_when_its_service_group_exists(
    check: Check, sample: Sample, group: Obj
) -> None:
    assert check(sample("LoadBalancer"), group) == []


def test_a_load_balancer_needs_its_service_group_in_its_namespace(check: Check, sample: Sample, group: Obj) -> None:
    elsewhere = named(group, "sample", "epic-other")
    assert check(sample("LoadBalancer"), elsewhere) == [
        "spec.service-group: LBServiceGroup 'sample' does not exist in the account's namespace epic-root"
    ]


def test_a_missing_service_group_is_pending_the_cache(sample: Sample, store_with: Callable[..., Any]) -> None:
    lb = sample("LoadBalancer")
    (violation,) = validate(
        LoadBalancer, lb, None, namespace="epic-root", name=lb["metadata"]["name"], view=store_with(), limits=Limits()
    )
    assert violation.pending


@pytest.mark.parametrize(
    "address", ["0.0.0.0", "0.1.2.3", "224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255"]
)
def test_a_public_address_must_be_unicast(check: Check, sample: Sample, group: Obj, address: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = address
    (violation,) = check(lb, group)
    assert violation.startswith(f"spec.public-address: {address} is not a unicast host address")


@pytest.mark.parametrize("address", ["192.168.77.2", "203.0.113.7", "127.0.0.10", "10.1.2.3"])
def test_unicast_public_addresses_are_accepted(check: Check, sample: Sample, group: Obj, address: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = address
    assert check(lb, group) == []


def test_a_public_address_must_be_an_ipv4_address(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = "192.168.77"
    assert check(lb, group) == ['spec.public-address: Input is not a valid IPv4 address (got "192.168.77")']


@pytest.mark.parametrize(("port", "rule"), [(0, "greater than or equal to 1"), (65536, "less than or equal to 65535")])
def test_ports_are_within_1_and_65535(check: Check, sample: Sample, group: Obj, port: int, rule: str) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"][0]["port"] = port
    assert check(lb, group) == [f"spec.public-ports[0].port: Input should be {rule} (got {port})"]


def test_duplicate_port_protocol_pairs_are_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [
        {"port": 80, "protocol": "TCP"},
        {"port": 80, "protocol": "UDP"},
        {"port": 443},
        {"port": 80, "protocol": "TCP"},
    ]
    assert check(lb, group) == [
        "spec.public-ports[3]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    ]


def test_a_defaulted_protocol_counts_as_tcp(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [{"port": 53, "protocol": "TCP"}, {"port": 53}]
    assert check(lb, group) == [
        "spec.public-ports[1]: duplicate port/protocol pair 53/TCP (spec.public-ports[0] has it too)"
    ]


def test_duplicate_port_names_and_node_ports_are_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [
        {"name": "web", "port": 80, "nodePort": 30080},
        {"name": "web", "port": 81, "nodePort": 30080},
    ]
    assert check(lb, group) == [
        "spec.public-ports[1].nodePort: duplicate nodePort 30080/TCP (spec.public-ports[0] has it too)",
        "spec.public-ports[1].name: duplicate port name 'web' (spec.public-ports[0] has it too)",
    ]


def test_a_target_port_is_an_integer_or_a_name(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"][0]["targetPort"] = 1.5
    assert check(lb, group) == ["spec.public-ports[0].targetPort: must be an integer or a string (got 1.5)"]


@pytest.mark.parametrize(("before", "after"), [(1, 2), (1, None)])
def test_the_service_id_is_immutable_once_set(
    check: Check, sample: Sample, group: Obj, before: int, after: int | None
) -> None:
    old = sample("LoadBalancer")
    old["spec"]["service-id"] = before
    new = sample("LoadBalancer")
    new["spec"].pop("service-id")
    if after is not None:
        new["spec"]["service-id"] = after
    assert check(new, group, old=old) == [
        f"spec.service-id: is immutable once set (was {before}, now {'unset' if after is None else after})"
    ]


def test_a_service_id_may_be_set_once_and_kept(check: Check, sample: Sample, group: Obj) -> None:
    unset = sample("LoadBalancer")
    unset["spec"].pop("service-id")
    assert check(sample("LoadBalancer"), group, old=unset) == []
    assert check(sample("LoadBalancer"), group, old=sample("LoadBalancer")) == []


def test_every_violation_is_reported_at_once(check: Check, sample: Sample) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-address"] = "0.0.0.0"
    lb["spec"]["public-ports"].append(dict(lb["spec"]["public-ports"][0]))
    assert [violation.split(":")[0] for violation in check(lb)] == [
        "spec.public-address",
        "spec.public-ports[1]",
        "spec.public-ports[1].nodePort",
        "spec.service-group",
    ]


def test_a_load_balancer_bounds_its_udp_sessions(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"].update({"udp-max-sessions": 2_000_000, "udp-idle-timeout": 0})
    assert check(lb, group) == [
        "spec.udp-max-sessions: Input should be less than or equal to 1048576 (got 2000000)",
        "spec.udp-idle-timeout: Input should be greater than or equal to 1000 (got 0)",
    ]
    lb["spec"].update({"udp-max-sessions": 100, "udp-idle-timeout": 86_400_000})
    assert check(lb, group) == []


def test_a_gateway_proxy_follows_the_load_balancer_rules(check: Check, sample: Sample, group: Obj) -> None:
    proxy = sample("GWProxy")
    assert check(proxy, group) == []
    proxy["spec"]["public-ports"].append({"name": "other", "port": 80})
    assert check(proxy, group) == [
        "spec.public-ports[1]: duplicate port/protocol pair 80/TCP (spec.public-ports[0] has it too)"
    ]


def test_a_gateway_proxy_has_one_listener_per_name_and_port(check: Check, sample: Sample, group: Obj) -> None:
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"] += [
        {"name": "http", "port": 8080, "protocol": "HTTP"},
        {"name": "db", "port": 80, "protocol": "TCP", "hostname": "Bad_Host"},
    ]
    assert check(proxy, group) == [
        "spec.gateway.listeners[1].name: duplicate listener name 'http' (spec.gateway.listeners[0].name has it too): "
        "listener names are unique",
        "spec.gateway.listeners[2].port: port 80 is taken by spec.gateway.listeners[0]: one listener per port (each "
        "is its own Envoy listener)",
        "spec.gateway.listeners[2].hostname: 'Bad_Host' is not a DNS name (lower-case DNS-1123 subdomain, optionally "
        "after a leading '*.'; no IP address, no port)",
    ]


def gwproxy(sample: Sample, name: str, namespace: str = "epic-root") -> Obj:
    """A GWProxy without a public address (the allocator's to give), so that many can coexist."""
    proxy = named(sample("GWProxy"), name, namespace)
    del proxy["spec"]["public-address"]
    return proxy


def proxies(sample: Sample, count: int, namespace: str = "epic-root") -> list[Obj]:
    return [gwproxy(sample, f"proxy-{index}", namespace) for index in range(count)]


def test_an_account_holds_at_most_its_proxy_limit_of_gateway_proxies(check: Check, sample: Sample, group: Obj) -> None:
    account = sample("Account")
    account["spec"]["proxyLimit"] = 2
    new = gwproxy(sample, "third")
    assert check(new, group, account, *proxies(sample, 1)) == []
    assert check(new, group, account, *proxies(sample, 2)) == [
        "metadata.namespace: Account proxy limit exceeded: epic-root holds 2 GWProxies and Account root's "
        "spec.proxyLimit is 2"
    ]
    assert check(new, group, account, *proxies(sample, 2, "epic-other")) == [], "another account's proxies"
    stored = proxies(sample, 2)
    assert check(stored[0], group, account, *stored, old=stored[0]) == [], "an update is not a new proxy"


def test_without_an_account_the_default_proxy_limit_applies(check: Check, sample: Sample, group: Obj) -> None:
    assert check(gwproxy(sample, "new"), group, *proxies(sample, 19)) == []
    assert check(gwproxy(sample, "new"), group, *proxies(sample, 20)) == [
        "metadata.namespace: Account proxy limit exceeded: epic-root holds 20 GWProxies and the default "
        "proxyLimit (no Account) is 20"
    ]


def test_an_account_holds_at_most_its_load_balancer_limit(check: Check, sample: Sample, group: Obj) -> None:
    def load_balancer(name: str, namespace: str = "epic-root") -> Obj:
        lb = named(sample("LoadBalancer"), name, namespace)
        del lb["spec"]["public-address"]
        return lb

    account = sample("Account")
    account["spec"]["loadBalancerLimit"] = 2
    held = [load_balancer("one"), load_balancer("two")]
    assert check(load_balancer("third"), group, account, held[0]) == []
    assert check(load_balancer("third"), group, account, *held) == [
        "metadata.namespace: Account load balancer limit exceeded: epic-root holds 2 LoadBalancers and Account "
        "root's spec.loadBalancerLimit is 2"
    ]
    assert check(load_balancer("third"), group, account, *proxies(sample, 2)) == [], "GWProxies count apart"
    assert check(held[0], group, account, *held, old=held[0]) == [], "an update is not a new load balancer"


# ---- GWRoute and GWEndpointSlice ----


def tcp_route(parent: Obj) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "GWRoute",
        "metadata": {"name": "db", "namespace": "epic-root"},
        "spec": {"tcp": {"parentRefs": [parent], "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]}},
    }


def test_the_route_and_slice_samples_are_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("GWRoute"), sample("GWProxy")) == []
    assert check(sample("GWEndpointSlice")) == []


def test_an_http_route_names_its_parents_hosts_paths_and_headers_well(check: Check, sample: Sample) -> None:
    route = sample("GWRoute")
    http = route["spec"]["http"]
    http["parentRefs"] = []
    http["hostnames"] = ["*.example.com", "192.0.2.1", "www.example.com:80"]
    http["rules"][0]["matches"] = [
        {"path": {"type": "Exact", "value": "shop"}, "headers": [{"name": "x y", "value": "1"}]}
    ]
    assert check(route) == [
        "spec.http.parentRefs: at least one parentRef is required: it names the GWProxy to attach to",
        "spec.http.hostnames[1]: '192.0.2.1' is not a DNS name (lower-case DNS-1123 subdomain, optionally after a "
        "leading '*.'; no IP address, no port)",
        "spec.http.hostnames[2]: 'www.example.com:80' is not a DNS name (lower-case DNS-1123 subdomain, optionally "
        "after a leading '*.'; no IP address, no port)",
        "spec.http.rules[0].matches[0].path.value: 'shop' must start with '/'",
        "spec.http.rules[0].matches[0].headers[0].name: 'x y' is not an HTTP header name (letters, digits and "
        "!#$%&'*+-.^_`|~)",
    ]


def test_a_route_is_http_or_tcp_and_weights_are_not_negative(check: Check, sample: Sample) -> None:
    route = sample("GWRoute")
    route["spec"]["tcp"] = tcp_route({"name": "p"})["spec"]["tcp"]
    assert check(route) == ["spec: exactly one of http, tcp must be set (got http, tcp)"]
    route = sample("GWRoute")
    route["spec"]["http"]["rules"][0]["backendRefs"][0]["weight"] = -1
    assert check(route) == [
        "spec.http.rules[0].backendRefs[0].weight: Input should be greater than or equal to 0 (got -1)"
    ]


def test_a_tcp_route_attaches_to_a_tcp_listener_of_its_proxy(check: Check, sample: Sample) -> None:
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"].append({"name": "db", "port": 5432, "protocol": "TCP"})
    assert check(tcp_route({"name": "sample-gateway", "sectionName": "db"}), proxy) == []
    assert check(tcp_route({"name": "sample-gateway"}), proxy) == []
    assert check(tcp_route({"name": "not-yet-created"}), proxy) == [], "a route may come before its proxy"
    assert check(tcp_route({"name": "sample-gateway", "sectionName": "http"}), proxy) == [
        "spec.tcp.parentRefs[0]: GWProxy 'sample-gateway' has no TCP listener 'http' to attach to ('http' is "
        "HTTP): a tcp route attaches to TCP listeners"
    ]
    assert check(tcp_route({"name": "sample-gateway", "port": 80, "namespace": "epic-other"}), proxy) == [
        "spec.tcp.parentRefs[0].namespace: routes attach to GWProxies of their own namespace (epic-root), not "
        "epic-other",
        "spec.tcp.parentRefs[0]: GWProxy 'sample-gateway' has no TCP listener on port 80 to attach to ('http' is "
        "HTTP): a tcp route attaches to TCP listeners",
    ]
    empty = tcp_route({"name": "sample-gateway"})
    empty["spec"]["tcp"]["rules"][0]["backendRefs"] = []
    assert check(empty, proxy) == ["spec.tcp.rules[0].backendRefs: at least one backendRef is required"]


def test_an_endpoint_slice_has_addresses_of_its_type_and_numbered_ports(check: Check, sample: Sample) -> None:
    slice_ = sample("GWEndpointSlice")
    slice_["spec"]["parentRef"] = {"name": "web"}
    slice_["spec"]["endpoints"][1]["addresses"] = ["10.244.2.300", "fd00::1"]
    slice_["spec"]["ports"].append({"name": "http"})
    slice_["spec"]["nodeAddresses"]["node-b"] = "node-b.local"
    assert check(slice_) == [
        "spec.parentRef.uid: is required: GWRoute backendRefs name the backend by it",
        "spec.endpoints[1].addresses[0]: '10.244.2.300' is not an IPv4 address (addressType IPv4)",
        "spec.endpoints[1].addresses[1]: 'fd00::1' is not an IPv4 address (addressType IPv4)",
        "spec.ports[1].port: is required: the Envoys connect to the endpoints on this port",
        "spec.ports[1].name: duplicate port name 'http' (spec.ports[0].name has it too): port names are unique",
        "spec.nodeAddresses[node-b]: 'node-b.local' is not an IP address",
    ]
    slice_ = sample("GWEndpointSlice")
    slice_["spec"]["addressType"] = "FQDN"
    assert check(slice_) == ["spec.addressType: FQDN is not supported: Envoy's EDS takes IPv4 or IPv6 addresses"]


# ---- VirtualService ----


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


# ---- ClusterRoutedIPClass and RoutedIP ----


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("32767-30000", "'32767-30000': need 1 <= LOW <= HIGH <= 65535"),
        ("30000-70000", "'30000-70000': need 1 <= LOW <= HIGH <= 65535"),
        ("thirty", "'thirty' is not a port range of the form LOW-HIGH"),
    ],
)
def test_a_node_port_range_is_low_high_within_1_and_65535(check: Check, sample: Sample, value: str, rule: str) -> None:
    routed_class = sample("ClusterRoutedIPClass")
    routed_class["spec"]["nodePortRange"] = value
    assert check(routed_class) == [f"spec.nodePortRange: {rule}"]


@pytest.mark.parametrize("limit", [0, 257])
def test_the_per_node_limit_is_within_1_and_256(check: Check, sample: Sample, limit: int) -> None:
    routed_class = sample("ClusterRoutedIPClass")
    routed_class["spec"]["perNodeIPLimit"] = limit
    (violation,) = check(routed_class)
    assert violation.startswith("spec.perNodeIPLimit: Input should be") and violation.endswith(f"(got {limit})")


def test_a_class_name_is_served_by_one_class(check: Check, sample: Sample) -> None:
    first = sample("ClusterRoutedIPClass")
    second = named(sample("ClusterRoutedIPClass"), "another")
    assert check(second, first) == [
        f"spec.className: className 'local' is already served by ClusterRoutedIPClass {first['metadata']['name']}"
    ]
    assert check(first, first) == []


@pytest.fixture
def routed_class(sample: Sample) -> Obj:
    """A class serving the sample RoutedIP's className."""
    obj = sample("ClusterRoutedIPClass")
    obj["spec"]["className"] = sample("RoutedIP")["spec"]["className"]
    return obj


def test_a_routed_ip_of_an_existing_class_is_accepted(check: Check, sample: Sample, routed_class: Obj) -> None:
    assert check(sample("RoutedIP"), routed_class) == []


def test_a_routed_ip_needs_its_class(check: Check, sample: Sample, routed_class: Obj) -> None:
    routed_class["spec"]["className"] = "another"
    assert check(sample("RoutedIP"), routed_class) == ["spec.className: no ClusterRoutedIPClass has className 'local'"]


@pytest.mark.parametrize(
    ("address", "violation"),
    [
        ("0.0.0.0", "spec.routedIP: 0.0.0.0 is not a unicast host address"),
        ("230.1.2.3", "spec.routedIP: 230.1.2.3 is not a unicast host address"),
        ("203.0.113.300", 'spec.routedIP: Input is not a valid IPv4 address (got "203.0.113.300")'),
        ("2001:db8::1", 'spec.routedIP: Input is not a valid IPv4 address (got "2001:db8::1")'),
    ],
)
def test_a_routed_ip_is_a_unicast_ipv4_address(
    check: Check, sample: Sample, routed_class: Obj, address: str, violation: str
) -> None:
    routed = sample("RoutedIP")
    routed["spec"]["routedIP"] = address
    (found,) = check(routed, routed_class)
    assert found.startswith(violation)


def test_one_routed_ip_per_address(check: Check, sample: Sample, routed_class: Obj) -> None:
    first = named(sample("RoutedIP"), "first", "elsewhere")
    first["spec"]["serviceRef"]["namespace"] = "elsewhere"
    assert check(sample("RoutedIP"), routed_class, first) == [
        "spec.routedIP: 203.0.113.10 is already routed by a RoutedIP of another namespace: one RoutedIP per address"
    ]
    neighbour = named(sample("RoutedIP"), "first")
    (same_namespace,) = check(sample("RoutedIP"), routed_class, neighbour)
    assert f"already routed by RoutedIP {neighbour['metadata']['namespace']}/first:" in same_namespace
    assert check(first, routed_class, first) == []


def test_a_routed_ip_routes_to_a_service_of_its_own_namespace_only(
    check: Check, sample: Sample, routed_class: Obj
) -> None:
    routed = sample("RoutedIP")
    routed["spec"]["serviceRef"]["namespace"] = "another-tenant"
    assert check(routed, routed_class) == [
        "spec.serviceRef.namespace: must be the RoutedIP's own namespace 'default' (got 'another-tenant'): a RoutedIP "
        "may only route to a Service of its own namespace"
    ]


def digitalocean_class(sample: Sample, api_url: str) -> Obj:
    obj = sample("ClusterRoutedIPClass")
    obj["spec"].update(
        provider="digitalocean",
        fromSecretsRef=[{"name": "digitalocean-token", "namespace": "tollgate-system"}],
        digitalocean={"apiURL": api_url},
    )
    return obj


def test_a_digitalocean_class_sends_its_token_to_an_allowed_https_api_only(check: Check, sample: Sample) -> None:
    assert check(digitalocean_class(sample, "https://api.digitalocean.com")) == []
    assert check(digitalocean_class(sample, "https://collector.example.com/v2")) == [
        "spec.digitalocean.apiURL: 'https://collector.example.com/v2' is not on the allow-list of API URLs "
        "(https://api.digitalocean.com)"
    ]
    assert check(digitalocean_class(sample, "http://api.digitalocean.com")) == [
        "spec.digitalocean.apiURL: 'http://api.digitalocean.com': must be https (the API token travels with every "
        "request)"
    ]
    fake = Limits(routed_ip_trust=Trust(("http://127.0.0.1:8089",), frozenset({"127.0.0.1:8089"})))
    assert check(digitalocean_class(sample, "http://127.0.0.1:8089"), limits=fake) == []
    local = sample("ClusterRoutedIPClass")
    local["spec"]["digitalocean"] = {"apiURL": "http://ignored.example.com"}
    assert check(local) == []


def test_a_job_template_asks_for_no_privileges(check: Check, sample: Sample) -> None:
    job_class = sample("ClusterRoutedIPClass")
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": "tollgate-routedip",
        "hostNetwork": True,
        "containers": [
            {"name": "c", "image": "busybox", "securityContext": {"privileged": True, "capabilities": {"add": ["ALL"]}}}
        ],
    }
    job_class["spec"].update(provider="job", updateRoutedIP={"template": {"spec": pod}})
    assert check(job_class) == [
        "spec.updateRoutedIP.template.spec.serviceAccountName: must be 'tollgate-routedip-job', the chart's "
        "ServiceAccount for Jobs (got 'tollgate-routedip')",
        "spec.updateRoutedIP.template.spec.hostNetwork: must not be true: provider Jobs do not share the node's "
        "namespaces",
        "spec.updateRoutedIP.template.spec.containers[0].securityContext.privileged: must not be true: provider Jobs "
        "run unprivileged",
        "spec.updateRoutedIP.template.spec.containers[0].securityContext.capabilities.add: must be empty: provider "
        "Jobs get no added capabilities",
    ]
    assert check(sample("ClusterRoutedIPClass")) == []


# ---- Goop ----


def test_the_goop_samples_are_accepted(check: Check, sample: Sample) -> None:
    assert check(sample("Goop")) == []


@pytest.mark.parametrize(
    ("spec", "violation"),
    [
        ({"jobCount": 101}, "spec.jobCount: 101 is above the configured maximum of 100"),
        ({"jobCount": 0}, "spec.jobCount: Input should be greater than or equal to 1 (got 0)"),
        ({"cmd": "  \t"}, "spec.cmd: must not be blank"),
        ({"cmd": ""}, 'spec.cmd: String should have at least 1 character (got "")'),
        (
            {"placement": "PerNode", "jobCount": 3},
            "spec.jobCount: placement PerNode runs one worker per eligible node: jobCount applies to placement Jobs",
        ),
        ({"includeNewNodes": True}, "spec.includeNewNodes: applies to placement PerNode only"),
        ({"placement": "Everywhere"}, "spec.placement: Input should be 'Jobs' or 'PerNode' (got \"Everywhere\")"),
        (
            {"nodeSelector": {"bad key!": "x"}},
            "spec.nodeSelector[bad key!]: 'bad key!' is not a valid label key ([prefix/]name, name at most 63)",
        ),
    ],
)
def test_goop_rules(check: Check, sample: Sample, spec: Obj, violation: str) -> None:
    goop = sample("Goop")
    goop["spec"].update(spec)
    assert check(goop) == [violation]


def test_the_job_count_maximum_is_configured(check: Check, sample: Sample) -> None:
    goop = sample("Goop")
    goop["spec"]["jobCount"] = 300
    assert check(goop, limits=Limits(max_goop_jobs=500)) == []


# ---- the rest ----


REACHABLE = "endpoints must be reachable remote addresses"


@pytest.mark.parametrize(
    ("field", "address", "violation"),
    [
        ("address", "0.0.0.0", f"spec.address: 0.0.0.0 is the unspecified address; {REACHABLE}"),
        ("address", "127.0.0.1", f"spec.address: 127.0.0.1 is a loopback address; {REACHABLE}"),
        ("node-address", "169.254.169.254", "spec.node-address: 169.254.169.254 is a link-local address"),
        ("address", "224.0.0.5", "spec.address: 224.0.0.5 is a multicast address"),
        ("address", "255.255.255.255", "spec.address: 255.255.255.255 is the broadcast address"),
        ("address", "10.244.0.9", "spec.address: 10.244.0.9 is in 10.244.0.0/16, a denied range"),
        ("node-address", "10.96.0.1", "spec.node-address: 10.96.0.1 is in 10.96.0.0/12, a denied range"),
    ],
)
def test_a_remote_endpoint_is_a_reachable_remote_address(
    check: Check, sample: Sample, field: str, address: str, violation: str
) -> None:
    endpoint = sample("RemoteEndpoint")
    assert check(endpoint) == []
    endpoint["spec"][field] = address
    (found,) = check(endpoint)
    assert found.startswith(violation), found


def test_the_endpoint_policy_comes_from_the_limits(check: Check, sample: Sample) -> None:
    dev = Limits(endpoint_policy=dev_endpoint_policy())
    endpoint = sample("RemoteEndpoint")
    endpoint["spec"]["address"], endpoint["spec"]["node-address"] = "127.77.3.4", "127.77.0.1"
    assert check(endpoint, limits=dev) == []
    assert check(endpoint)[0].startswith("spec.address: 127.77.3.4 is a loopback address")
    endpoint["spec"]["address"] = "127.1.1.9"
    assert check(endpoint, limits=dev) == [
        f"spec.address: 127.1.1.9 is in 127.1.0.0/16, a denied range (the cluster's own pod and Service ranges are "
        f"denied); {REACHABLE}"
    ]


def test_an_account_narrows_its_endpoints_ranges(check: Check, sample: Sample) -> None:
    endpoint, slice_, account = sample("RemoteEndpoint"), sample("GWEndpointSlice"), sample("Account")
    account["spec"]["allowedEndpointRanges"] = ["192.168.1.0/24"]
    assert account["metadata"]["namespace"] == endpoint["metadata"]["namespace"] == slice_["metadata"]["namespace"]
    assert check(endpoint, account) == []
    assert check(slice_, account) == [
        "spec.endpoints[0].addresses[0]: 192.168.101.5 is outside Account root's spec.allowedEndpointRanges "
        "(192.168.1.0/24)",
        "spec.endpoints[1].addresses[0]: 192.168.102.7 is outside Account root's spec.allowedEndpointRanges "
        "(192.168.1.0/24)",
    ]
    account["spec"]["allowedEndpointRanges"] = ["192.168.2.0/24"]
    assert check(endpoint, account) == [
        "spec.address: 192.168.1.30 is outside Account root's spec.allowedEndpointRanges (192.168.2.0/24)",
        "spec.node-address: 192.168.1.30 is outside Account root's spec.allowedEndpointRanges (192.168.2.0/24)",
    ]
    elsewhere = named(sample("RemoteEndpoint"), "rep", "epic-other")
    assert check(elsewhere, account) == [], "another namespace's Account does not narrow it"


def test_gw_endpoint_slice_addresses_follow_the_endpoint_policy(check: Check, sample: Sample) -> None:
    slice_ = sample("GWEndpointSlice")
    slice_["spec"]["endpoints"][0]["addresses"] = ["127.0.0.1"]
    slice_["spec"]["nodeAddresses"]["node-b"] = "169.254.169.254"
    assert check(slice_) == [
        f"spec.endpoints[0].addresses[0]: 127.0.0.1 is a loopback address; {REACHABLE}",
        "spec.nodeAddresses[node-b]: 169.254.169.254 is a link-local address (169.254.0.0/16, where cloud metadata "
        f"services answer); {REACHABLE}",
    ]


def test_an_account_s_ranges_must_be_cidrs(check: Check, sample: Sample) -> None:
    account = sample("Account")
    account["spec"]["allowedEndpointRanges"] = ["192.168.0.0/16", "192.168.1.1/24", "nonsense"]
    found = check(account)
    assert [v.split(":")[0] for v in found] == ["spec.allowedEndpointRanges[1]", "spec.allowedEndpointRanges[2]"]
    assert "'192.168.1.1/24' is not a CIDR range such as 192.168.0.0/16 (192.168.1.1/24 has host bits set)" in found[0]


def test_one_remote_endpoint_per_address_port_and_protocol(check: Check, sample: Sample) -> None:
    first = named(sample("RemoteEndpoint"), "first")
    assert check(sample("RemoteEndpoint"), first) == [
        "spec: endpoint 192.168.1.30:8080/TCP of load balancer 'sample-acnodal' is registered already as "
        "RemoteEndpoint first: one RemoteEndpoint per address, port and protocol"
    ]
    assert check(first, first) == [], "its own stored version is no duplicate"
    other_port, other_protocol, elsewhere = sample("RemoteEndpoint"), sample("RemoteEndpoint"), sample("RemoteEndpoint")
    other_port["spec"]["port"]["port"] = 8443
    other_protocol["spec"]["port"]["protocol"] = "UDP"
    elsewhere["metadata"]["namespace"] = "epic-other"
    assert [check(e, first) for e in (other_port, other_protocol, elsewhere)] == [[], [], []]


IDENTITY = "is immutable: it is part of the endpoint's identity"


@pytest.mark.parametrize(
    ("path", "value", "violation"),
    [
        (("address",), "192.168.1.31", "spec.address: is immutable: it is part of the endpoint's identity "
         "(was 192.168.1.30, now 192.168.1.31); register a new endpoint instead"),
        (("port", "port"), 8443, f"spec.port.port: {IDENTITY} (was 8080, now 8443)"),
        (("port", "protocol"), "UDP", f"spec.port.protocol: {IDENTITY} (was TCP, now UDP)"),
        (("load-balancer",), "other", f"spec.load-balancer: {IDENTITY} (was sample-acnodal, now other)"),
    ],
)  # fmt: skip
def test_a_remote_endpoints_identity_is_immutable(
    check: Check, sample: Sample, path: tuple[str, ...], value: object, violation: str
) -> None:
    old, new = sample("RemoteEndpoint"), sample("RemoteEndpoint")
    target = new["spec"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    (found,) = check(new, old=old)
    assert found.startswith(violation)
    changed = sample("RemoteEndpoint")
    changed["spec"]["port"]["name"] = "http"
    assert check(changed, old=old) == [], "the port's name is not part of the identity"


def test_a_service_prefix_lives_in_epic_and_its_pool_parses(check: Check, sample: Sample) -> None:
    assert check(sample("ServicePrefix")) == []
    assert check(named(sample("ServicePrefix"), "default", "epic-acme")) == [
        "metadata.namespace: ServicePrefixes live in namespace epic, not epic-acme"
    ]
    for pool, rule in (
        ("192.0.2.20-192.0.2.10", "the range ends before it starts"),
        ("192.0.2.0/33", "192.0.2.0/33"),
        ("somewhere", "is neither a CIDR nor a range"),
        ("198.51.100.0/28", "is not inside subnet 192.0.2.0/24"),
    ):
        prefix = sample("ServicePrefix")
        prefix["spec"]["public-pool"]["pool"] = pool
        (found,) = check(prefix)
        assert found.startswith("spec.public-pool: ") and rule in found, found


def test_one_object_per_public_address(check: Check, sample: Sample, group: Obj) -> None:
    other = named(sample("LoadBalancer"), "other", "epic-elsewhere")
    assert check(sample("LoadBalancer"), group, other) == [
        "spec.public-address: 192.168.77.2 is the public address of a LoadBalancer of another namespace already: one "
        "object per public address"
    ]
    moved = named(sample("LoadBalancer"), "other", "epic-elsewhere")
    moved["spec"]["public-address"] = "192.168.77.3"
    assert check(sample("LoadBalancer"), group, moved) == []


def test_a_wrong_api_version_is_named(sample: Sample, store_with: Callable[..., Any]) -> None:
    goop = sample("Goop")
    goop["apiVersion"] = "goop.example.com/v1"
    violations = validate(Goop, goop, None, namespace="default", name="g", view=store_with(), limits=Limits())
    assert [str(v) for v in violations] == [
        "apiVersion/kind: expected goop.example.com/v1alpha1 Goop, got goop.example.com/v1 Goop"
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


@pytest.mark.parametrize("kind", ["LoadBalancer", "GWProxy"])
def test_a_public_port_on_the_envoy_admin_port_is_refused(check: Check, sample: Sample, group: Obj, kind: str) -> None:
    proxy = sample(kind)
    proxy["spec"]["public-ports"] = [{"port": ADMIN_PORT, "protocol": "TCP"}, {"port": ADMIN_PORT, "protocol": "UDP"}]
    assert check(proxy, group) == [
        f"spec.public-ports[0].port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at start: "
        f"a listener there cannot bind (reserved: {ADMIN_PORT}/TCP)"
    ]


CUSTOM_BOOTSTRAP = """
admin:
  address: {socket_address: {address: 0.0.0.0, port_value: 9000}}
static_resources:
  listeners:
  - name: health
    address: {socket_address: {address: 0.0.0.0, port_value: 8081}}
  - name: dns
    address: {socket_address: {address: 0.0.0.0, port_value: 53, protocol: UDP}}
  clusters:
  - name: tollgate-xds
    load_assignment:
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: "{xds_host}", port_value: {xds_port}}}}
node: {id: "{node_id}", cluster: "{cluster}"}
"""


@pytest.mark.parametrize("kind", ["LoadBalancer", "GWProxy"])
def test_a_public_port_the_groups_bootstrap_binds_is_refused(
    check: Check, sample: Sample, group: Obj, kind: str
) -> None:
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample(kind)
    proxy["spec"]["public-ports"] = [
        {"port": 9000, "protocol": "TCP"},
        {"port": 8081, "protocol": "TCP"},
        {"port": 53, "protocol": "UDP"},
        {"port": 53, "protocol": "TCP"},
        {"port": ADMIN_PORT, "protocol": "TCP"},
    ]
    reserved = f"(reserved: 53/UDP, 8081/TCP, 9000/TCP, {ADMIN_PORT}/TCP)"
    assert check(proxy, group) == [
        "spec.public-ports[0].port: TCP port 9000 is the admin port of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        "spec.public-ports[1].port: TCP port 8081 is listener 'health' of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        "spec.public-ports[2].port: UDP port 53 is listener 'dns' of the group's envoy-bootstrap, which the Envoy "
        f"binds at start: a listener there cannot bind {reserved}",
        f"spec.public-ports[4].port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at start: "
        f"a listener there cannot bind {reserved}",
    ]


def test_a_gateway_listener_on_a_port_the_groups_bootstrap_binds_is_refused(
    check: Check, sample: Sample, group: Obj
) -> None:
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"] = [{"name": "web", "port": 8081, "protocol": "HTTP"}]
    assert [violation.partition(":")[0] for violation in check(proxy, group)] == ["spec.gateway.listeners[0].port"]


def test_ports_of_another_groups_bootstrap_are_free(check: Check, sample: Sample, group: Obj) -> None:
    other = named(sample("LBServiceGroup"), "other")
    other["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    proxy = sample("LoadBalancer")
    proxy["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]
    assert check(proxy, group, other) == []


def test_a_group_bootstrap_binding_a_port_its_proxies_use_is_refused(check: Check, sample: Sample, group: Obj) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [{"port": 80, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]
    elsewhere = named(sample("LoadBalancer"), "other-group")
    elsewhere["spec"]["service-group"] = "other"
    elsewhere["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}]
    group["spec"]["envoy-bootstrap"] = CUSTOM_BOOTSTRAP
    namespace, name = lb["metadata"]["namespace"], lb["metadata"]["name"]
    assert check(group, lb, elsewhere) == [
        "spec.envoy-bootstrap: listener 'health' of the group's envoy-bootstrap binds TCP port 8081, which "
        f"LoadBalancer {namespace}/{name} of this group listens on (spec.public-ports[1].port): its Envoy could not "
        "bind that listener"
    ]


@pytest.mark.parametrize("template", ["{node_id", "just text", "admin: 3", "- a list"])
def test_a_bootstrap_that_is_not_a_mapping_reserves_only_the_admin_port(
    check: Check, sample: Sample, group: Obj, template: str
) -> None:
    group["spec"]["envoy-bootstrap"] = template
    proxy = sample("LoadBalancer")
    proxy["spec"]["public-ports"] = [{"port": 9000, "protocol": "TCP"}]
    assert check(proxy, group) == []


def test_a_gateway_listener_on_the_admin_port_or_named_like_the_xds_cluster_is_refused(
    check: Check, sample: Sample, group: Obj
) -> None:
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"] = [{"name": XDS_CLUSTER, "port": ADMIN_PORT, "protocol": "HTTP"}]
    assert [violation.partition(":")[0] for violation in check(proxy, group)] == [
        "spec.gateway.listeners[0].name",
        "spec.gateway.listeners[0].port",
    ]


# ---- names the allocator puts in label values ----


@pytest.mark.parametrize(("kind", "label"), [("LoadBalancer", LOAD_BALANCER_LABEL), ("GWProxy", GWPROXY_LABEL)])
def test_a_proxy_name_longer_than_a_label_value_is_refused(
    check: Check, sample: Sample, group: Obj, kind: str, label: str
) -> None:
    assert check(named(sample(kind), "a" * 63), group) == []
    assert check(named(sample(kind), "a" * 64), group) == [
        f"metadata.name: 64 characters, above the 63 of a label value: the {kind}'s Envoy Deployment and pods carry "
        f"its name in the label {label}"
    ]
