"""The client nodes of a GWProxy, from its GWRoutes and GWEndpointSlices."""

from __future__ import annotations

from ipaddress import ip_network
from typing import Any

from tollgate.allocator import gwtunnels
from tollgate.models.addresses import AccountRanges, EndpointPolicy

NAMESPACE = "epic-acme"
POLICY = EndpointPolicy()


def route(parents: list[Any], *backends: str, kind: str = "http", deleting: bool = False) -> dict[str, Any]:
    rules = [{"backendRefs": [{"name": backend} for backend in backends]}]
    meta: dict[str, Any] = {"name": "r", "namespace": NAMESPACE}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    refs = [p if isinstance(p, dict) else {"name": p} for p in parents]
    return {"metadata": meta, "spec": {kind: {"parentRefs": refs, "rules": rules}}}


def endpoint_slice(name: str, backend: str | None, **nodes: str) -> dict[str, Any]:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "GWEndpointSlice",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"parentRef": {"uid": backend} if backend else {}, "addressType": "IPv4", "nodeAddresses": nodes},
    }


def nodes_of(
    proxy: str, routes: list[dict[str, Any]], slices: list[dict[str, Any]], ranges: AccountRanges | None = None
) -> gwtunnels.ClientNodes:
    parsed_routes = [r for obj in routes if (r := gwtunnels.route_of(obj)) is not None]
    parsed_slices = [s for obj in slices if (s := gwtunnels.slice_of(obj)) is not None]
    return gwtunnels.client_nodes(proxy, parsed_routes, parsed_slices, POLICY, ranges)


def test_a_route_links_its_parents_to_the_slices_of_its_backends() -> None:
    slices = [
        endpoint_slice("web-a", "svc-web", n1="192.0.2.71", n2="192.0.2.72"),
        endpoint_slice("web-b", "svc-web", n1="192.0.2.71"),
        endpoint_slice("db", "svc-db", n3="192.0.2.73"),
    ]
    routes = [route(["edge"], "svc-web"), route(["other"], "svc-db", kind="tcp")]
    assert nodes_of("edge", routes, slices).wanted == {"192.0.2.71", "192.0.2.72"}
    assert nodes_of("other", routes, slices).wanted == {"192.0.2.73"}
    assert nodes_of("nobody", routes, slices).wanted == frozenset()


def test_what_is_being_deleted_or_elsewhere_reaches_nothing() -> None:
    slices = [endpoint_slice("web", "svc-web", n1="192.0.2.71"), endpoint_slice("orphan", None, n2="192.0.2.72")]
    assert gwtunnels.slice_of(slices[1]) is None, "a slice without parentRef.uid is no backend's"
    assert nodes_of("edge", [route(["edge"], "svc-web", deleting=True)], slices).wanted == frozenset()
    elsewhere = route([{"name": "edge", "namespace": "epic-other"}], "svc-web")
    assert nodes_of("edge", [elsewhere], slices).wanted == frozenset(), "a parent in another namespace"
    here = route([{"name": "edge", "namespace": NAMESPACE}], "svc-web")
    assert nodes_of("edge", [here], slices).wanted == {"192.0.2.71"}


def test_refused_node_addresses_get_no_tunnel_and_name_the_slice_and_field() -> None:
    slices = [endpoint_slice("web", "svc-web", n1="192.0.2.71", n2="127.0.0.9", n3="2001:db8::1", n4="node-4.local")]
    nodes = nodes_of("edge", [route(["edge"], "svc-web")], slices)
    assert nodes.wanted == {"192.0.2.71"}
    refused = {(r.slice.name, r.refusal.field): r.refusal.rule for r in nodes.refused}
    assert set(refused) == {("web", "spec.nodeAddresses[n2]"), ("web", "spec.nodeAddresses[n3]"),
                            ("web", "spec.nodeAddresses[n4]")}  # fmt: skip
    assert "loopback" in refused[("web", "spec.nodeAddresses[n2]")]
    assert "not an IPv4 address" in refused[("web", "spec.nodeAddresses[n3]")]
    assert nodes.refused[0].slice.reference == {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "GWEndpointSlice",
        "metadata": {"name": "web", "namespace": NAMESPACE, "uid": "uid-web"},
    }


def test_the_accounts_ranges_narrow_the_policy() -> None:
    slices = [endpoint_slice("web", "svc-web", n1="192.0.2.71", n2="198.18.0.7")]
    ranges = AccountRanges("acme", (ip_network("198.18.0.0/16"),))
    nodes = nodes_of("edge", [route(["edge"], "svc-web")], slices, ranges)
    assert nodes.wanted == {"198.18.0.7"}
    assert [r.refusal.field for r in nodes.refused] == ["spec.nodeAddresses[n1]"]
    assert "allowedEndpointRanges" in nodes.refused[0].refusal.rule
