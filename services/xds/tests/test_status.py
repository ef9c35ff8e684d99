"""VirtualService status from where each Envoy stands."""

from __future__ import annotations

from collections.abc import Iterable

from tollgate.models.servicemesh import VirtualService, VirtualServiceStatus
from tollgate.xds import ir, translate
from tollgate.xds.status import EnvoyView, replica_report, virtual_service_status

REF = ir.SourceRef("2026-01-01T00:00:00Z", "ns", "vs")
ENDPOINT = {"name": "e", "host": {"address": "192.0.2.10"}, "port": 1234}
SOURCE = ir.Source(REF, 4, ir.ProxySelector("ns", ir.labels({"app": "ingress"})), ())


def one_replica(
    source: ir.Source,
    views: Iterable[EnvoyView],
    conflicts: Iterable[ir.Conflict],
    previous: VirtualServiceStatus | None = None,
) -> VirtualServiceStatus:
    return virtual_service_status(source, {"ns/xds-0": replica_report(source, views, conflicts)}, previous)


def test_programmed_counts_envoys_running_the_latest_generation() -> None:
    status = one_replica(SOURCE, [EnvoyView("b.ns", "Pending", 3), EnvoyView("a.ns", "Programmed", 4)], [])
    programmed = status.condition("Programmed")
    assert programmed is not None
    assert (programmed.status, programmed.reason, programmed.message) == (
        "False",
        "Pending",
        "1/2 Envoys run generation 4",
    )
    assert (status.proxies, status.programmed_proxies, status.observed_generation) == (2, 1, 4)
    assert [(e.node, e.state, e.generation) for e in status.envoys] == [
        ("a.ns", "Programmed", 4),
        ("b.ns", "Pending", 3),
    ]


def test_a_rejection_carries_envoys_error_and_keeps_the_transition_time_while_unchanged() -> None:
    views = [EnvoyView("a.ns", "Rejected", 3, "cannot bind '127.1.0.5:2002': Address already in use")]
    first = one_replica(SOURCE, views, [])
    again = one_replica(SOURCE, views, [], previous=first)
    condition = again.condition("Programmed")
    assert condition is not None
    assert condition.reason == "Rejected"
    assert condition.message == (
        "Envoy a.ns rejected generation 4: cannot bind '127.1.0.5:2002': Address already in use"
    )
    assert condition.last_transition_time == first.conditions[-1].last_transition_time


def test_no_envoy_and_conflicts_are_explained() -> None:
    other = ir.SourceRef("2025-01-01T00:00:00Z", "ns", "older")
    conflict = ir.Conflict("a.ns", "UDP port 2001", other, REF, "spec.listeners[0]")
    status = one_replica(SOURCE, [], [conflict])
    conflicted, programmed = status.condition("Conflicted"), status.condition("Programmed")
    assert conflicted is not None and programmed is not None
    assert (conflicted.status, conflicted.message) == (
        "True",
        "spec.listeners[0] is not served on Envoy a.ns: UDP port 2001 is already defined by VirtualService ns/older",
    )
    assert (programmed.reason, programmed.message) == (
        "NoEnvoys",
        "no connected Envoy matches selector app=ingress in namespace ns",
    )


def test_status_gives_the_envoy_names_of_each_listener_and_cluster() -> None:
    vs = VirtualService.model_validate(
        {
            "apiVersion": "servicemesh.l7mp.io/v1",
            "kind": "VirtualService",
            "metadata": {"name": "media", "namespace": "tenant-a", "generation": 1},
            "spec": {
                "selector": {"app": "edge"},
                "listeners": [
                    {"name": n, "udp": {"port": p, "cluster": {"name": f"{n}-c", "endpoints": [ENDPOINT]}}}
                    for n, p in (("rtp", 4000), ("rtcp", 4001))
                ],
            },
        }
    )
    status = one_replica(translate.virtual_service(vs, []), [], [])
    assert [n.to_wire() for n in status.envoy_names] == [
        {
            "listener": "rtp",
            "envoy_listener": "tenant-a/media/rtp",
            "cluster": "rtp-c",
            "envoy_cluster": "tenant-a/media/rtp-c",
        },
        {
            "listener": "rtcp",
            "envoy_listener": "tenant-a/media/rtcp",
            "cluster": "rtcp-c",
            "envoy_cluster": "tenant-a/media/rtcp-c",
        },
    ]


def test_the_reports_of_two_replicas_merge_into_the_same_status_whichever_replica_computes_it() -> None:
    a = replica_report(SOURCE, [EnvoyView("a.ns", "Programmed", 4)], [])
    b = replica_report(SOURCE, [EnvoyView("b.ns", "Pending", 3)], [])
    on_a = virtual_service_status(SOURCE, {"ns/xds-0": a, "ns/xds-1": b})
    on_b = virtual_service_status(SOURCE, {"ns/xds-1": b, "ns/xds-0": a}, previous=on_a)
    assert on_a.to_wire() == on_b.to_wire(), "no flapping: the same reports give the same status"
    assert (on_a.proxies, on_a.programmed_proxies) == (2, 1)
    assert [e.node for e in on_a.envoys] == ["a.ns", "b.ns"]
    programmed = on_a.condition("Programmed")
    assert programmed is not None and programmed.message == "1/2 Envoys run generation 4"
