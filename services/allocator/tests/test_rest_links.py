"""EPIC's REST API without I/O: names, links, and how a client's object becomes a stored spec."""

from __future__ import annotations

import re

import pytest

from tollgate.allocator.allocation import InvalidArgumentError
from tollgate.allocator.rest import links
from tollgate.models.epic import GWEndpointSliceSpec, GWProxySpec


def test_a_shareable_groups_load_balancer_is_named_after_the_service_and_others_get_a_random_suffix() -> None:
    assert links.load_balancer_name("shared", "web", shareable=True) == "shared-web"
    first, second = (links.load_balancer_name("gw", "web", shareable=False) for _ in range(2))
    assert re.fullmatch(r"gw-web-[0-9a-f]{16}", first) and first != second


@pytest.mark.parametrize("uid", ["", "Upper", "a/b", "a_b", "-a", "a" * 254, 42])
def test_a_name_that_is_no_object_name_is_refused_naming_the_field(uid: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^proxy\.spec\.clientRef\.uid: "):
        links.object_name("proxy.spec.clientRef.uid", uid)


def test_a_uid_is_an_object_name() -> None:
    uid = "a044f348-f80c-4ac0-b911-6ed45e37994a"
    assert links.object_name("uid", uid) == uid


def test_go_zero_values_and_gateway_fields_without_use_are_dropped_and_the_rest_kept() -> None:
    sent = {
        "spec": {
            "display-name": "edge",
            "public-address": "",
            "alt-address": None,
            "gateway": {
                "addresses": [{"value": "10.0.0.1"}],
                "listeners": [{"name": "web", "port": 80, "protocol": "HTTP", "allowedRoutes": {"namespaces": {}}}],
            },
        }
    }
    spec = links.client_spec("proxy", sent)
    assert spec == {
        "display-name": "edge",
        "gateway": {"listeners": [{"name": "web", "port": 80, "protocol": "HTTP"}]},
    }
    links.validated(GWProxySpec, spec | {"service-group": "gw"}, "proxy.spec")


def test_a_weight_of_zero_is_kept() -> None:
    route = {"spec": {"http": {"rules": [{"backendRefs": [{"name": "b", "weight": 0}]}]}}}
    assert links.client_spec("route", route)["http"]["rules"][0]["backendRefs"][0]["weight"] == 0


def test_an_endpoints_target_ref_and_hints_are_dropped_from_a_slice() -> None:
    endpoint = {"addresses": ["192.0.2.1"], "targetRef": {"kind": "Pod"}, "hints": {"forZones": []}}
    spec = links.client_spec(
        "slice", {"spec": {"parentRef": {"uid": "b"}, "addressType": "IPv4", "endpoints": [endpoint]}}
    )
    assert spec["endpoints"] == [{"addresses": ["192.0.2.1"]}]
    links.validated(GWEndpointSliceSpec, spec, "slice.spec")


def test_an_unknown_field_is_refused_naming_where_it_is() -> None:
    spec = {"service-group": "gw", "gateway": {"listeners": [{"name": "w", "port": 80, "protocol": "HTTP", "tls": {}}]}}
    with pytest.raises(InvalidArgumentError) as refused:
        links.validated(GWProxySpec, spec, "proxy.spec")
    assert str(refused.value) == "proxy.spec.gateway.listeners.0.tls: unknown field: tollgate does not implement it"


@pytest.mark.parametrize("body", [None, [], {"proxy": []}, {"gwproxy": {}}])
def test_a_body_without_its_object_is_refused(body: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^proxy: required"):
        links.unwrapped(body, "proxy")


def test_links_are_epics_relative_paths() -> None:
    proxy = {"metadata": {"name": "u-1"}, "spec": {"service-group": "gw"}}
    assert links.proxy_links("acme", proxy) == {
        "self": "/api/epic/accounts/acme/proxies/u-1",
        "group": "/api/epic/accounts/acme/groups/gw",
    }
    service = {"metadata": {"name": "gw-web"}, "spec": {"service-group": "gw"}}
    assert (
        links.service_links("acme", service)["create-endpoint"] == "/api/epic/accounts/acme/services/gw-web/endpoints"
    )
