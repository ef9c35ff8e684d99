"""CRs -> IR -> per-Envoy config: endpoints, scoping, EPIC load balancers and name collisions."""

from __future__ import annotations

from typing import Any

from tollgate.models.epic import LoadBalancer, RemoteEndpoint
from tollgate.models.servicemesh import VirtualService
from tollgate.xds import ir, translate
from tollgate.xds.translate import Pod


def vs(
    name: str, listeners: list[dict[str, Any]], created: str = "2026-01-01T00:00:00Z", **spec: Any
) -> VirtualService:
    return VirtualService.model_validate(
        {
            "apiVersion": "servicemesh.l7mp.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created, "generation": 1},
            "spec": {"selector": {"app": "ingress"}, "listeners": listeners, **spec},
        }
    )


def udp(name: str, port: int, cluster: str, discovery: str = "strictdns", **endpoint: Any) -> dict[str, Any]:
    host = endpoint.pop("host", {"selector": {"app": "worker"}})
    return {
        "name": name,
        "udp": {
            "port": port,
            "cluster": {
                "name": cluster,
                "service_discovery": discovery,
                "endpoints": [{"name": "e", "host": host, "port": 1234, **endpoint}],
            },
        },
    }


def pod(name: str, ip: str, ready: bool = True, namespace: str = "ns", **labels: str) -> Pod:
    return Pod(namespace, name, ir.labels(labels), ip, ready)


ENVOY = ir.Proxy("envoy.ns", "ns", "envoy", ir.labels({"app": "ingress"}))


def test_selector_endpoints_are_the_ready_pods_of_the_same_namespace() -> None:
    pods = [
        pod("w1", "127.1.0.2", app="worker"),
        pod("w0", "127.1.0.1", app="worker"),
        pod("starting", "127.1.0.3", ready=False, app="worker"),
        pod("elsewhere", "127.1.0.4", namespace="other", app="worker"),
        pod("db", "127.1.0.5", app="db"),
    ]
    source = translate.virtual_service(vs("a", [udp("l", 2001, "c", "eds")]), pods)
    assert [e.address for e in source.units[0].cluster.endpoints] == ["127.1.0.1", "127.1.0.2"]
    assert source.units[0].cluster.discovery == "EDS"


def test_a_dns_name_under_eds_is_refused_naming_the_field() -> None:
    source = translate.virtual_service(vs("a", [udp("l", 2001, "c", "eds", host={"address": "echo.svc"})]), [])
    assert source.units == ()
    assert source.errors == (
        "spec.listeners[0].udp.cluster.endpoints[0].host.address: 'echo.svc' is a DNS name, but service_discovery "
        "eds takes IP addresses and pod selectors (use strictdns to resolve names)",
    )


def test_selector_picks_envoys_by_label_in_the_namespace_only() -> None:
    source = translate.virtual_service(vs("a", [udp("l", 2001, "c")]), [])
    assert translate.selects(source.selector, ENVOY)
    assert not translate.selects(source.selector, ir.Proxy("e.other", "other", "e", ENVOY.labels))
    assert not translate.selects(source.selector, ir.Proxy("e.ns", "ns", "e", ir.labels({"app": "egress"})))


def test_colliding_names_and_ports_keep_the_oldest_and_report_both() -> None:
    old = translate.virtual_service(vs("old", [udp("l", 2001, "c")], created="2026-01-01T00:00:00Z"), [])
    new = translate.virtual_service(
        vs(
            "new",
            [udp("l", 2002, "c2"), udp("l2", 2001, "c3"), udp("l3", 2003, "c"), udp("ok", 2004, "c4")],
            created="2026-01-02T00:00:00Z",
        ),
        [],
    )
    config = translate.proxy_config(ENVOY, [new, old])
    assert [(ref.name, unit.name) for ref, unit in config.units] == [("old", "l"), ("new", "ok")]
    assert [(c.what, c.loser.name, c.path) for c in config.conflicts] == [
        ("listener name 'l'", "new", "spec.listeners[0]"),
        ("UDP port 2001", "new", "spec.listeners[1]"),
        ("cluster name 'c'", "new", "spec.listeners[2]"),
    ]
    conflict = config.conflicts[0]
    assert conflict.message_for(new.ref) == (
        "spec.listeners[0] is not served on Envoy envoy.ns: "
        "listener name 'l' is already defined by VirtualService ns/old"
    )
    assert conflict.message_for(old.ref) == (
        "listener name 'l' is also defined by VirtualService ns/new (spec.listeners[0]), "
        "which is not served on Envoy envoy.ns"
    )


def test_sources_on_different_envoys_do_not_collide() -> None:
    a = translate.virtual_service(vs("a", [udp("l", 2001, "c")]), [])
    b = translate.virtual_service(vs("b", [udp("l", 2001, "c")], selector={"app": "other"}), [])
    assert not translate.proxy_config(ENVOY, [a, b]).conflicts


READY = {"type": "Ready", "status": "True", "reason": "TunnelAssigned", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def test_load_balancer_ports_forward_to_registered_endpoints_their_target_port_reaches() -> None:
    lb = LoadBalancer.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "LoadBalancer",
            "metadata": {"name": "web", "namespace": "epic-acme", "generation": 2},
            "spec": {
                "service-group": "g",
                "public-ports": [
                    {"port": 53, "protocol": "UDP", "targetPort": 5353},
                    {"port": 80, "targetPort": 5353},
                    {"port": 9, "protocol": "SCTP"},
                    {"port": 5353, "protocol": "UDP", "targetPort": 53},
                ],
            },
        }
    )

    def endpoint(name: str, address: str, protocol: str, tunnel: int | None, lb: str = "web") -> RemoteEndpoint:
        return RemoteEndpoint.model_validate(
            {
                "apiVersion": "epic.acnodal.io/v1",
                "kind": "RemoteEndpoint",
                "metadata": {"name": name, "namespace": "epic-acme"},
                "spec": {"load-balancer": lb, "address": address, "port": {"port": 5353, "protocol": protocol}},
                "status": {"tunnel-id": tunnel, "conditions": [READY]} if tunnel else {},
            }
        )

    source = translate.load_balancer(
        lb,
        [
            endpoint("a", "10.0.0.2", "UDP", 7),
            endpoint("b", "10.0.0.1", "UDP", 8),
            endpoint("c", "10.0.0.3", "UDP", None),
            endpoint("d", "10.0.0.4", "TCP", 9),
            endpoint("e", "10.0.0.5", "UDP", 10, lb="other"),
        ],
    )
    assert [(u.name, u.protocol, u.port, [e.address for e in u.cluster.endpoints]) for u in source.units] == [
        ("epic-acme/web/udp-53", "UDP", 53, ["10.0.0.1", "10.0.0.2"]),
        ("epic-acme/web/tcp-80", "TCP", 80, ["10.0.0.4"]),
        ("epic-acme/web/udp-5353", "UDP", 5353, []),
    ]
    assert source.errors == ("spec.public-ports[2].protocol: SCTP is not supported by the Envoy proxies (TCP or UDP)",)
    proxy = ir.Proxy(
        "web-0.epic",
        "epic",
        "web-0",
        ir.labels({"epic.acnodal.io/load-balancer": "web", "epic.acnodal.io/account": "acme"}),
    )
    assert translate.selects(source.selector, proxy)
    other_account = ir.Proxy("x.epic", "epic", "x", ir.labels({"epic.acnodal.io/load-balancer": "web"}))
    assert not translate.selects(source.selector, other_account)
