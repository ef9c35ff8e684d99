"""A VirtualService whose endpoint address the endpoint address policy refuses (one that got past a down webhook) is
served to no Envoy, and its status and an Event say which field and which rule."""

from __future__ import annotations

import copy
from typing import Any, cast

from tollgate.models.addresses import EndpointPolicy
from tollgate.models.envoy import ADMIN_PORT
from tollgate.models.servicemesh import VirtualService
from tollgate.testing.cluster import dev_endpoint_policy
from tollgate.testing.envoy import envoy_pod_object
from tollgate.xds import ir, translate
from tollgate.xds.identity import Identity
from tollgate.xds.k8s import Kube
from tollgate.xds.reporter import StatusReporter
from tollgate.xds.resources import CLUSTER, LISTENER
from tollgate.xds.server import XdsServer
from tollgate.xds.translate import Pod

REACHABLE = "endpoints must be reachable remote addresses"
ADMIN_API = f"spec.listeners[0].tcp.cluster.endpoints[1].host.address: 127.0.0.1 is a loopback address; {REACHABLE}"


def virtual_service(*hosts: dict[str, Any], port: int = ADMIN_PORT) -> dict[str, Any]:
    """VirtualService ns/vs for the Envoys labelled app=edge: a tcp listener on 4000 to an endpoint at each host."""
    endpoints = [{"name": f"e{n}", "host": host, "port": port} for n, host in enumerate(hosts)]
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "vs", "namespace": "ns", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "selector": {"app": "edge"},
            "listeners": [{"name": "l", "tcp": {"port": 4000, "cluster": {"name": "c", "endpoints": endpoints}}}],
        },
    }


def translated(obj: dict[str, Any], policy: EndpointPolicy, pods: list[Pod] | None = None) -> ir.Source:
    return translate.virtual_service(VirtualService.model_validate(obj), pods or [], policy)


def test_an_endpoint_at_the_envoys_admin_api_leaves_the_virtual_service_out_naming_the_field_and_the_rule() -> None:
    source = translated(virtual_service({"address": "192.0.2.10"}, {"address": "127.0.0.1"}), EndpointPolicy())
    assert source.refusals == (ADMIN_API,)
    assert (source.units, source.selector) == ((), ir.NO_PROXIES)
    assert not translate.selects(source.selector, ir.Proxy("edge.ns", "ns", "edge", ir.labels({"app": "edge"})))


def test_every_refused_endpoint_is_named_and_a_name_is_judged_as_the_address_it_means() -> None:
    source = translated(virtual_service({"address": "169.254.169.254"}, {"address": "localhost"}), EndpointPolicy())
    assert source.refusals == (
        "spec.listeners[0].tcp.cluster.endpoints[0].host.address: 169.254.169.254 is a link-local address "
        f"(169.254.0.0/16, where cloud metadata services answer); {REACHABLE}",
        "spec.listeners[0].tcp.cluster.endpoints[1].host.address: 'localhost' is a loopback name (it resolves to "
        f"127.0.0.1): 127.0.0.1 is a loopback address; {REACHABLE}",
    )


def test_the_carve_out_serves_its_ranges_and_selectors_and_dns_names_are_not_judged() -> None:
    """The dev policy allows 127.77.0.0/16 and denies the pod range 127.1.0.0/16, where a selector's pods are."""
    worker = Pod("ns", "worker", ir.labels({"app": "worker"}), "127.1.0.9", ready=True)
    obj = virtual_service({"address": "127.77.0.9"}, {"selector": {"app": "worker"}}, {"address": "echo.svc"})
    source = translated(obj, dev_endpoint_policy(), [worker])
    assert source.refusals == ()
    assert [e.address for e in source.units[0].cluster.endpoints] == ["127.77.0.9", "127.1.0.9", "echo.svc"]
    assert translated(virtual_service({"address": "127.0.0.1"}), dev_endpoint_policy()).refusals != ()


class Recorder:
    """The two writes of the status reporter, recorded."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    async def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    async def patch_virtual_service_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.statuses.append(status)


async def test_an_edit_that_aims_at_the_admin_api_takes_the_listener_off_the_envoy_and_the_status_says_why() -> None:
    server = XdsServer(debounce=0)
    server.world.set_pod(envoy_pod_object("edge", "ns", "127.0.0.2", {"app": "edge"}))
    served = virtual_service({"address": "192.0.2.10"}, port=8080)
    server.world.set_virtual_service(served)
    server.recompute()
    conn = server.connect(Identity("edge.ns", "ns", "edge", (("app", "edge"),), "127.0.0.2"), delta=True)
    assert list(conn.stream.desired[LISTENER]) == ["ns/vs/l"]

    refused = copy.deepcopy(served)
    refused["metadata"]["generation"] = 2
    refused["spec"]["listeners"][0]["tcp"]["cluster"]["endpoints"].append(
        {"name": "admin", "host": {"address": "127.0.0.1"}, "port": ADMIN_PORT}
    )
    server.world.set_virtual_service(refused)
    server.changed()
    server.recompute()
    assert conn.stream.desired[LISTENER] == {} and conn.stream.desired[CLUSTER] == {}

    kube = Recorder()
    await StatusReporter(server, cast(Kube, kube), replica="ns/xds-0").report()
    (status,) = kube.statuses
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Accepted"]["status"], conditions["Accepted"]["reason"]) == ("False", "EndpointRefused")
    assert conditions["Accepted"]["message"] == ADMIN_API
    assert (conditions["Programmed"]["status"], conditions["Programmed"]["reason"]) == ("False", "EndpointRefused")
    assert conditions["Programmed"]["message"] == f"served to no Envoy: {ADMIN_API}"
    assert (status["proxies"], status["envoy_names"]) == (0, [])
    assert kube.events == [("Warning", "EndpointRefused", ADMIN_API)]
