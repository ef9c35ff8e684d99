"""Defaulting: the patch adds the models' defaults, never replaces what the user wrote, and is idempotent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from tollgate.models import ALL_KINDS, EPIC, ClusterRoutedIPClass, Goop, LoadBalancer, VirtualService
from tollgate.webhook.defaulting import JSONPatch, pointer_token
from tollgate.webhook.kinds import Model
from tollgate.webhook.validation import parse

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
Defaults = Callable[[Model, Obj], JSONPatch]
KINDS = [model.resource.kind for model in ALL_KINDS]


@pytest.mark.parametrize("kind", KINDS)
def test_the_patched_sample_is_complete_and_explicit(sample: Sample, kind: str, defaults: Defaults) -> None:
    obj = sample(kind)
    model = next(model for model in ALL_KINDS if model.resource.kind == kind)
    patched = jsonpatch.apply_patch(obj, defaults(model, obj))
    assert patched["spec"] == model.model_validate(obj).to_wire()["spec"]
    assert defaults(model, patched) == []


def test_a_goop_gets_its_image_and_placement(sample: Sample, defaults: Defaults) -> None:
    goop = {"apiVersion": "goop.example.com/v1alpha1", "kind": "Goop", "metadata": {"name": "g"}, "spec": {"cmd": "x"}}
    assert defaults(Goop, goop) == [
        {"op": "add", "path": "/spec/jobCount", "value": 1},
        {"op": "add", "path": "/spec/image", "value": "busybox"},
        {"op": "add", "path": "/spec/placement", "value": "Jobs"},
        {"op": "add", "path": "/spec/includeNewNodes", "value": False},
        {"op": "add", "path": "/spec/backoffLimit", "value": 6},
        {"op": "add", "path": "/spec/nodeSelector", "value": {}},
    ]


def test_values_the_user_wrote_are_kept(sample: Sample, defaults: Defaults) -> None:
    goop = sample("Goop")
    goop["spec"].update({"image": "alpine:3", "jobCount": 7, "backoffLimit": 0})
    patched = jsonpatch.apply_patch(goop, defaults(Goop, goop))
    assert (patched["spec"]["image"], patched["spec"]["jobCount"], patched["spec"]["backoffLimit"]) == (
        "alpine:3",
        7,
        0,
    )


def test_a_port_protocol_defaults_to_tcp_and_udp_sessions_to_a_gateway_size(sample: Sample, defaults: Defaults) -> None:
    lb = sample("LoadBalancer")
    lb["spec"]["public-ports"] = [{"port": 80, "protocol": "UDP"}, {"port": 443}]
    assert defaults(LoadBalancer, lb) == [
        {"op": "add", "path": "/spec/public-ports/1/protocol", "value": "TCP"},
        {"op": "add", "path": "/spec/udp-max-sessions", "value": 65536},
        {"op": "add", "path": "/spec/udp-idle-timeout", "value": 60000},
    ]


def test_a_udp_listener_gets_a_session_limit_and_keeps_its_idle_timeout(sample: Sample, defaults: Defaults) -> None:
    vs = sample("VirtualService")
    vs["spec"]["listeners"][0]["udp"]["idle_timeout"] = 5000
    patched = jsonpatch.apply_patch(vs, defaults(VirtualService, vs))
    udp = patched["spec"]["listeners"][0]["udp"]
    assert (udp["max_sessions"], udp["idle_timeout"]) == (65536, 5000)


def test_a_health_check_gets_every_value(sample: Sample, defaults: Defaults) -> None:
    vs = sample("VirtualService")
    cluster = vs["spec"]["listeners"][0]["udp"]["cluster"]
    cluster["health_check"] = {}
    del cluster["service_discovery"]
    patched = jsonpatch.apply_patch(vs, defaults(VirtualService, vs))
    cluster = patched["spec"]["listeners"][0]["udp"]["cluster"]
    assert cluster["service_discovery"] == "strictdns"
    assert cluster["health_check"] == {
        "interval": 1000,
        "protocol": "TCP",
        "timeout": 1000,
        "unhealthy_threshold": 3,
        "healthy_threshold": 1,
    }


def test_a_routed_ip_class_gets_its_range_limit_and_firewall_order() -> None:
    obj = {
        "apiVersion": "routedip.tollgate.io/v1alpha1",
        "kind": "ClusterRoutedIPClass",
        "metadata": {"name": "c"},
        "spec": {"className": "c"},
    }
    resource, _ = parse(ClusterRoutedIPClass, obj)
    assert resource is not None
    spec = resource.to_wire()["spec"]
    assert (spec["nodePortRange"], spec["perNodeIPLimit"], spec["firewallPostAllow"]) == ("30000-32767", 1, False)


def test_defaults_that_the_crd_schema_cannot_carry_are_added(sample: Sample, defaults: Defaults) -> None:
    """A default built by a factory (the GUE port of an endpoint) has no `default:` in the CRD: only we add it."""
    epic = sample("EPIC")
    epic["spec"] = {"gue-endpoint": {"epic-address": "192.168.1.40"}}
    assert defaults(EPIC, epic) == [
        {
            "op": "add",
            "path": "/spec/gue-endpoint/epic-port",
            "value": {"protocol": "UDP", "appProtocol": "gue", "port": 6080},
        },
        {"op": "add", "path": "/spec/tunnel-id-block-size", "value": 64},
    ]


def test_an_object_the_model_refuses_gets_no_patch(sample: Sample, defaults: Defaults) -> None:
    goop = sample("Goop")
    goop["spec"]["jobCount"] = "many"
    assert defaults(Goop, goop) == []


def test_status_is_left_alone(sample: Sample, defaults: Defaults) -> None:
    goop = sample("Goop")
    goop["status"] = {"phase": "Running"}
    assert all(not operation["path"].startswith("/status") for operation in defaults(Goop, goop))


def test_pointer_tokens_are_escaped() -> None:
    assert pointer_token("a/b~c") == "a~1b~0c"
