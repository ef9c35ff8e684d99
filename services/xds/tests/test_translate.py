"""CRs -> IR -> per-Envoy config: endpoints, scoping, EPIC load balancers and name collisions."""

from __future__ import annotations

import re
from typing import Any

from tollgate.models.epic import LoadBalancer, RemoteEndpoint
from tollgate.models.servicemesh import MAX_ENVOY_NAME, VirtualService
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


def test_names_are_qualified_by_namespace_and_virtual_service() -> None:
    source = translate.virtual_service(vs("media", [udp("rtp-l", 2001, "rtp-c")]), [])
    assert (source.units[0].name, source.units[0].cluster.name) == ("ns/media/rtp-l", "ns/media/rtp-c")
    assert (source.units[0].spec_name, source.units[0].cluster.spec_name) == ("rtp-l", "rtp-c")


def test_long_envoy_names_are_bounded_deterministic_and_distinct() -> None:
    long = "x" * 253
    first = translate.envoy_name("ns", long, "l-1")
    assert len(first) == MAX_ENVOY_NAME
    assert first.startswith(f"ns/{long[:100]}")
    assert first == translate.envoy_name("ns", long, "l-1")
    assert first != translate.envoy_name("ns", long, "l-2")
    assert translate.envoy_name("ns", "vs", "x" * 194) == f"ns/vs/{'x' * 194}"
    cut = translate.envoy_name("ns", "vs", "x" * 195)
    assert len(cut) == MAX_ENVOY_NAME
    assert re.fullmatch(r"ns/vs/x+~[0-9a-f]{12}", cut)


def test_the_same_names_in_two_virtual_services_do_not_collide_but_their_ports_do() -> None:
    old = translate.virtual_service(vs("old", [udp("l", 2001, "c")], created="2026-01-01T00:00:00Z"), [])
    new = translate.virtual_service(
        vs("new", [udp("l", 2002, "c"), udp("l2", 2001, "c3"), udp("ok", 2004, "c4")], created="2026-01-02T00:00:00Z"),
        [],
    )
    config = translate.proxy_config(ENVOY, [new, old])
    assert [(ref.name, unit.name) for ref, unit in config.units] == [
        ("old", "ns/old/l"),
        ("new", "ns/new/l"),
        ("new", "ns/new/ok"),
    ]
    assert [(c.what, c.loser.name, c.path) for c in config.conflicts] == [("UDP port 2001", "new", "spec.listeners[1]")]
    conflict = config.conflicts[0]
    assert conflict.message_for(new.ref) == (
        "spec.listeners[1] is not served on Envoy envoy.ns: UDP port 2001 is already defined by VirtualService ns/old"
    )
    assert conflict.message_for(old.ref) == (
        "UDP port 2001 is also defined by VirtualService ns/new (spec.listeners[1]), which is not served on Envoy "
        "envoy.ns"
    )


def test_names_reused_within_one_virtual_service_keep_the_first() -> None:
    source = translate.virtual_service(
        vs("a", [udp("l", 2001, "c"), udp("l", 2002, "c2"), udp("m", 2003, "c", "eds")]), []
    )
    config = translate.proxy_config(ENVOY, [source])
    assert [unit.name for _, unit in config.units] == ["ns/a/l"]
    assert [(c.what, c.path) for c in config.conflicts] == [
        ("listener name 'ns/a/l' (in spec.listeners[0])", "spec.listeners[1]"),
        ("cluster name 'ns/a/c' (in spec.listeners[0])", "spec.listeners[2]"),
    ]


def test_the_same_names_in_two_namespaces_reach_each_its_own_envoy() -> None:
    def in_namespace(namespace: str) -> VirtualService:
        obj = vs("edge", [udp("l", 2001, "c")])
        obj.metadata["namespace"] = namespace
        return obj

    sources = [translate.virtual_service(in_namespace(ns), []) for ns in ("tenant-a", "tenant-b")]
    for namespace in ("tenant-a", "tenant-b"):
        envoy = ir.Proxy(f"envoy.{namespace}", namespace, "envoy", ENVOY.labels)
        config = translate.proxy_config(envoy, sources)
        assert [unit.name for _, unit in config.units] == [f"{namespace}/edge/l"]
        assert [unit.cluster.name for _, unit in config.units] == [f"{namespace}/edge/c"]
        assert not config.conflicts


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
