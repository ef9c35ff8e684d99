"""GWProxy -> IR -> Envoy: which routes attach to which listener, hostnames, backends, and which Envoys get it."""

from __future__ import annotations

from typing import Any

from tollgate.models.epic import GWEndpointSlice, GWProxy, GWRoute, LoadBalancer
from tollgate.xds import ir, resources, translate

NS = "epic-acme"


def proxy(*listeners: dict[str, Any]) -> GWProxy:
    return GWProxy.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "GWProxy",
            "metadata": {"name": "gw", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"service-group": "g", "gateway": {"listeners": list(listeners)}},
        }
    )


def route(name: str, created: str = "2026-01-01T00:00:00Z", **spec: Any) -> GWRoute:
    return GWRoute.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "GWRoute",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
            "spec": spec,
        }
    )


def http(*hostnames: str, parent: dict[str, Any] | None = None, **backend: Any) -> dict[str, Any]:
    return {
        "parentRefs": [parent or {"name": "gw"}],
        "hostnames": list(hostnames),
        "rules": [{"backendRefs": [{"name": "web", **backend}]}],
    }


def tcp(backend: str, parent: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"parentRefs": [parent or {"name": "gw"}], "rules": [{"backendRefs": [{"name": backend}]}]}


def endpoints(uid: str, *addresses: str) -> GWEndpointSlice:
    return GWEndpointSlice.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "GWEndpointSlice",
            "metadata": {"name": f"{uid}-1", "namespace": NS},
            "spec": {
                "parentRef": {"uid": uid},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [a]} for a in addresses],
                "ports": [{"port": 8080}],
            },
        }
    )


HTTP = {"name": "http", "port": 80, "protocol": "HTTP"}
DB = {"name": "db", "port": 5432, "protocol": "TCP"}


def domains(source: ir.Source) -> list[tuple[str, ...]]:
    hosts = source.units[0].virtual_hosts
    assert hosts is not None
    return [host.domains for host in hosts]


def test_route_hostnames_narrow_to_the_listener_hostname() -> None:
    routes = [route("a", http=http("a.example.com", "other.org")), route("b", http=http("*.example.com"))]
    wildcard = translate.gw_proxy(proxy({**HTTP, "hostname": "*.example.com"}), routes, [])
    assert domains(wildcard) == [("*.example.com",), ("a.example.com",)]
    exact = translate.gw_proxy(proxy({**HTTP, "hostname": "b.example.com"}), routes, [])
    assert domains(exact) == [("b.example.com",)], "a wildcard route serves the listener's more specific host"
    assert exact.errors == (
        "GWRoute a names this GWProxy but attaches to none of its listeners (parentRefs' sectionName and port, the "
        "listener's protocol and hostname)",
    )


def test_a_tcp_listener_forwards_to_its_oldest_route_and_the_others_are_reported() -> None:
    routes = [
        route("late", "2026-01-02T00:00:00Z", tcp=tcp("replica")),
        route("first", tcp=tcp("primary")),
        route("wrong-section", tcp=tcp("primary", {"name": "gw", "sectionName": "http"})),
    ]
    source = translate.gw_proxy(proxy(HTTP, DB), routes, [endpoints("primary", "127.77.0.1")])
    (db,) = [u for u in source.units if u.port == 5432]
    assert [(c.name, [e.address for e in c.endpoints]) for c in db.clusters] == [(f"{NS}/gw/primary", ["127.77.0.1"])]
    assert source.errors == (
        "spec.gateway.listeners[1]: GWRoute late is not served: TCP listener 'db' forwards to the oldest TCP route "
        "attached to it, GWRoute first",
        "GWRoute wrong-section names this GWProxy but attaches to none of its listeners (parentRefs' sectionName and "
        "port, the listener's protocol and hostname)",
    )
    assert [u.port for u in translate.gw_proxy(proxy(DB), [], []).units] == [], "no route, no TCP listener"


def test_a_rule_without_a_backend_of_weight_is_answered_500() -> None:
    source = translate.gw_proxy(proxy(HTTP), [route("r", http=http(weight=0))], [])
    dumped = resources.to_dict(resources.listener_resource(source.ref, source.units[0], "0.0.0.0"))
    manager = dumped["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["route_config"]["virtual_hosts"][0]["routes"] == [
        {"match": {"prefix": "/"}, "direct_response": {"status": 500}}
    ]


def test_a_backend_of_two_listeners_is_one_cluster_without_conflict() -> None:
    routes = [route("r", http=http()), route("t", tcp=tcp("web"))]
    source = translate.gw_proxy(proxy(HTTP, DB), routes, [endpoints("web", "127.77.0.1")])
    envoy = ir.Proxy(
        "e.epic-acme", NS, "e", ir.labels({"epic.acnodal.io/gwproxy": "gw", "epic.acnodal.io/account": "acme"})
    )
    config = translate.proxy_config(envoy, [source])
    assert not config.conflicts and config.served == (source,)
    served = resources.proxy_resources(config, "0.0.0.0", resources.DNS())
    assert sorted(served[resources.CLUSTER]) == [f"{NS}/gw/web"]


def test_a_gateway_proxy_and_a_load_balancer_each_reach_only_their_own_envoys() -> None:
    lb = LoadBalancer.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "LoadBalancer",
            "metadata": {"name": "gw", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"service-group": "g", "public-ports": [{"port": 8080}]},
        }
    )
    sources = [translate.gw_proxy(proxy(HTTP), [route("r", http=http())], []), translate.load_balancer(lb, [])]
    account = {"epic.acnodal.io/account": "acme"}
    gateway = ir.Proxy("g.x", "x", "g", ir.labels({"epic.acnodal.io/gwproxy": "gw", **account}))
    balancer = ir.Proxy("l.x", "x", "l", ir.labels({"epic.acnodal.io/load-balancer": "gw", **account}))
    assert [s.ref.kind for s in translate.proxy_config(gateway, sources).served] == ["GWProxy"]
    assert [s.ref.kind for s in translate.proxy_config(balancer, sources).served] == ["LoadBalancer"]
