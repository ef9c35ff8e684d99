"""Model behaviour a service relies on: wire names, defaults, errors that name the field, conditions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tollgate.models import Goop, LoadBalancer, RoutedIP, VirtualService, epic, parse
from tollgate.models.base import Status
from tollgate.models.epic import EPIC, account_namespace
from tollgate.models.goop import GoopSpec
from tollgate.models.routedip import ClusterRoutedIPClass, parse_port_range


def test_wire_names_are_the_seeds() -> None:
    lb = LoadBalancer.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "LoadBalancer",
            "metadata": {"name": "a"},
            "spec": {"service-group": "g", "public-ports": [{"port": 80}]},
        }
    )
    wire = lb.to_wire()
    assert wire["spec"]["service-group"] == "g"
    assert wire["spec"]["public-ports"] == [{"port": 80, "protocol": "TCP"}]


def test_an_unknown_field_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        parse(
            {
                "apiVersion": "goop.example.com/v1alpha1",
                "kind": "Goop",
                "metadata": {"name": "g"},
                "spec": {"cmd": "true", "jobcount": 3},
            }
        )
    assert "spec.jobcount" in str(caught.value).replace("\n", ".")
    assert "Extra inputs are not permitted" in str(caught.value)


def test_a_bad_address_is_named() -> None:
    with pytest.raises(ValidationError) as caught:
        RoutedIP.model_validate(
            {
                "apiVersion": "routedip.tollgate.io/v1alpha1",
                "kind": "RoutedIP",
                "metadata": {"name": "r"},
                "spec": {
                    "className": "c",
                    "routedIP": "300.1.1.1",
                    "serviceRef": {"serviceName": "s", "namespace": "d"},
                },
            }
        )
    assert "routedIP" in str(caught.value)


def test_kind_mismatch_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"expected goop\.example\.com/v1alpha1 Goop"):
        Goop.model_validate({"apiVersion": "goop.example.com/v1alpha1", "kind": "Gloop", "spec": {"cmd": "x"}})


def test_defaults_follow_the_seeds() -> None:
    crip = ClusterRoutedIPClass.model_validate(
        {
            "apiVersion": "routedip.tollgate.io/v1alpha1",
            "kind": "ClusterRoutedIPClass",
            "spec": {"className": "c"},
        }
    )
    assert (crip.spec.firewall_post_allow, crip.spec.node_port_range, crip.spec.per_node_ip_limit) == (
        False,
        "30000-32767",
        1,
    )
    goop = Goop.new("g", GoopSpec(cmd="echo"))
    assert (goop.spec.image, goop.spec.placement, goop.spec.job_count) == ("busybox", "Jobs", 1)


def test_listener_is_exactly_one_of_udp_and_tcp() -> None:
    cluster = {"name": "c", "endpoints": [{"name": "e", "host": {"address": "a"}, "port": 1}]}
    with pytest.raises(ValidationError, match="exactly one of udp, tcp"):
        VirtualService.model_validate(
            {
                "apiVersion": "servicemesh.l7mp.io/v1",
                "kind": "VirtualService",
                "spec": {
                    "listeners": [
                        {
                            "name": "l",
                            "udp": {"port": 1, "cluster": cluster},
                            "tcp": {"port": 1, "cluster": cluster},
                        }
                    ]
                },
            }
        )


def test_port_range() -> None:
    assert parse_port_range("30000-32767") == (30000, 32767)
    with pytest.raises(ValueError, match="LOW <= HIGH"):
        parse_port_range("32767-30000")


def test_account_namespace() -> None:
    assert account_namespace("acme-widgets") == "epic-acme-widgets"


def test_set_condition_keeps_transition_time_when_status_holds() -> None:
    status = Status()
    assert status.set_condition("Ready", "False", "Waiting", "for proxies")
    first = status.condition("Ready")
    assert first is not None and first.last_transition_time
    assert not status.set_condition("Ready", "False", "Waiting", "for proxies")
    assert status.set_condition("Ready", "False", "Still", "for proxies")
    again = status.condition("Ready")
    assert again is not None and again.last_transition_time == first.last_transition_time
    assert status.set_condition("Ready", "True", "Ready")


def test_seed_epic_status_shape() -> None:
    epic = EPIC.model_validate(
        {
            "apiVersion": "epic.acnodal.io/v1",
            "kind": "EPIC",
            "metadata": {"name": "epic"},
            "spec": {},
            "status": {"current-tunnel-id": 4},
        }
    )
    assert epic.status is not None and epic.status.current_tunnel_id == 4
    assert epic.to_wire()["status"]["current-tunnel-id"] == 4


@pytest.mark.parametrize(
    ("public", "endpoint", "reached"),
    [
        ({"port": 80}, {"port": 80}, True),
        ({"port": 80}, {"port": 8080}, False),
        ({"port": 80, "targetPort": 8080}, {"port": 8080}, True),
        ({"port": 80, "targetPort": 8080}, {"port": 80}, False),
        ({"port": 80, "targetPort": "8080"}, {"port": 8080}, True),
        ({"port": 80, "targetPort": 8080}, {"port": 8080, "protocol": "UDP"}, False),
        ({"port": 53, "protocol": "UDP", "targetPort": 5353}, {"port": 5353, "protocol": "UDP"}, True),
        ({"port": 80, "targetPort": "http"}, {"port": 8081, "name": "http"}, True),
        ({"port": 80, "targetPort": "http"}, {"port": 80}, False),
        ({"port": 80, "targetPort": "http"}, {"port": 8081, "name": "https"}, False),
    ],
)
def test_a_public_port_reaches_the_endpoint_ports_of_its_target(
    public: dict[str, object], endpoint: dict[str, object], reached: bool
) -> None:
    assert epic.reaches(epic.ServicePort.model_validate(public), epic.ServicePort.model_validate(endpoint)) is reached


def test_udp_sessions_default_to_a_gateway_size_on_listeners_and_load_balancers() -> None:
    vs = VirtualService.model_validate(
        {
            "apiVersion": "servicemesh.l7mp.io/v1",
            "kind": "VirtualService",
            "spec": {
                "listeners": [
                    {
                        "name": "l",
                        "udp": {
                            "port": 53,
                            "cluster": {
                                "name": "c",
                                "endpoints": [{"name": "e", "host": {"address": "a"}, "port": 53}],
                            },
                        },
                    }
                ]
            },
        }
    )
    udp = vs.spec.listeners[0].udp
    assert udp is not None and (udp.max_sessions, udp.idle_timeout) == (65536, 60000)
    lb = LoadBalancer.model_validate(
        {"apiVersion": "epic.acnodal.io/v1", "kind": "LoadBalancer", "spec": {"service-group": "g"}}
    )
    assert (lb.spec.udp_max_sessions, lb.spec.udp_idle_timeout) == (65536, 60000)
    assert {"udp-max-sessions": 65536, "udp-idle-timeout": 60000}.items() <= lb.to_wire()["spec"].items()


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("udp-max-sessions", 0, "greater than or equal to 1"),
        ("udp-max-sessions", 2**20 + 1, "less than or equal to 1048576"),
        ("udp-idle-timeout", 999, "greater than or equal to 1000"),
        ("udp-idle-timeout", 86_400_001, "less than or equal to 86400000"),
    ],
)
def test_udp_session_bounds_name_the_field(field: str, value: int, rule: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LoadBalancer.model_validate(
            {"apiVersion": "epic.acnodal.io/v1", "kind": "LoadBalancer", "spec": {"service-group": "g", field: value}}
        )
    (error,) = caught.value.errors()
    assert (error["loc"], rule in error["msg"]) == (("spec", field), True)


def _route(spec: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "epic.acnodal.io/v1", "kind": "GWRoute", "metadata": {"name": "r"}, "spec": spec}


def test_a_gwroute_is_exactly_one_of_http_and_tcp() -> None:
    with pytest.raises(ValidationError, match=r"exactly one of http, tcp must be set \(got none\)"):
        parse(_route({}))
    tcp = {"parentRefs": [{"name": "p"}], "rules": [{"backendRefs": [{"name": "b", "port": 5432}]}]}
    with pytest.raises(ValidationError, match=r"exactly one of http, tcp must be set \(got http, tcp\)"):
        parse(_route({"http": {}, "tcp": tcp}))
    assert [ref.name for ref in epic.GWRoute.model_validate(_route({"tcp": tcp})).spec.parent_refs] == ["p"]


def test_an_http_route_has_the_gateway_api_defaults() -> None:
    route = epic.GWRoute.model_validate(_route({"http": {"parentRefs": [{"name": "p"}]}}))
    assert route.to_wire()["spec"]["http"]["rules"] == [
        {"matches": [{"path": {"type": "PathPrefix", "value": "/"}, "headers": []}], "backendRefs": []}
    ]
    weighted = {"parentRefs": [{"name": "p"}], "rules": [{"backendRefs": [{"name": "b", "weight": -1}]}]}
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        parse(_route({"http": weighted}))


def test_an_endpoint_without_a_ready_condition_is_ready() -> None:
    spec = epic.GWEndpointSliceSpec.model_validate(
        {
            "parentRef": {"uid": "web"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"], "conditions": {"ready": False}}],
        }
    )
    assert [e.ready for e in spec.endpoints] == [True, False]


def test_an_account_allows_twenty_proxies_and_a_hundred_load_balancers_by_default() -> None:
    assert (epic.AccountSpec().proxy_limit, epic.AccountSpec().load_balancer_limit) == (20, 100)
    assert epic.AccountSpec.model_validate({"proxyLimit": 3}).to_wire() == {"proxyLimit": 3, "loadBalancerLimit": 100}
