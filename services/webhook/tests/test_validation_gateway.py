"""The rules of the Gateway API parts: a GWProxy's listeners, GWRoutes and GWEndpointSlices."""

from __future__ import annotations

from collections.abc import Callable

from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER
from tollgate.testing.objects import Obj

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


# ---- GWProxy listeners ----


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


def test_a_gateway_listener_on_the_admin_port_or_named_like_the_xds_cluster_is_refused(
    check: Check, sample: Sample, group: Obj
) -> None:
    proxy = sample("GWProxy")
    proxy["spec"]["gateway"]["listeners"] = [{"name": XDS_CLUSTER, "port": ADMIN_PORT, "protocol": "HTTP"}]
    assert [violation.partition(":")[0] for violation in check(proxy, group)] == [
        "spec.gateway.listeners[0].name",
        "spec.gateway.listeners[0].port",
    ]


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
