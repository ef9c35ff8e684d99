"""The container env as the kubelet builds it (shared by the Envoy supervisor and the embedded kubelet)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from tollgate.testing.pods import EnvError, container_env, decoded, expand, field_value

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "web"}, "annotations": {"a": "b"}},
    "spec": {"nodeName": "n1", "serviceAccountName": "sa"},
    "status": {"podIP": "127.1.1.9", "hostIP": "127.0.10.1", "podIPs": [{"ip": "127.1.1.9"}]},
}
OBJECTS: dict[tuple[str, str], Mapping[str, str]] = {
    ("ConfigMap", "settings"): {"level": "debug", "mode": "fast"},
    ("Secret", "credentials"): {"password": "s3cret"},
}


def lookup(kind: str, name: str) -> Mapping[str, str] | None:
    return OBJECTS.get((kind, name))


def test_expansion_follows_kubernetes_rules() -> None:
    env = {"A": "1", "B": "two"}
    assert expand("$(A)-$(B)-$(C)", env) == "1-two-$(C)"
    assert expand("$$(A) costs $$5 $(A", env) == "$(A) costs $5 $(A"


def test_field_paths_of_the_downward_api() -> None:
    assert [field_value(POD, path) for path in ("spec.serviceAccountName", "status.hostIP", "status.podIPs")] == [
        "sa",
        "127.0.10.1",
        "127.1.1.9",
    ]
    assert field_value(POD, "metadata.labels['app']") == "web"
    assert field_value(POD, "metadata.annotations['missing']") == ""
    assert field_value(POD, "spec.unknown") is None


def test_env_from_then_env_in_order_each_value_expanded_against_what_came_before() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
            {"secretRef": {"name": "gone", "optional": True}},
        ],
        "env": [
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "level"}}},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "password"}}},
            {
                "name": "OPTIONAL",
                "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "nope", "optional": True}},
            },
            {"name": "URL", "value": "https://$(KUBERNETES_SERVICE_HOST)/$(CFG_mode)/$(LATER)"},
            {"name": "LATER", "value": "x"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
    }
    env = container_env(POD, container, lookup, {"KUBERNETES_SERVICE_HOST": "127.0.0.1"})
    assert env == {
        "CFG_level": "debug",
        "CFG_mode": "fast",
        "LEVEL": "debug",
        "PASSWORD": "s3cret",
        "URL": "https://127.0.0.1/fast/$(LATER)",
        "LATER": "x",
        "NODE": "n1",
    }


@pytest.mark.parametrize(
    ("var", "message"),
    [
        ({"secretKeyRef": {"name": "absent", "key": "k"}}, 'secret "absent" not found'),
        ({"configMapKeyRef": {"name": "settings", "key": "absent"}}, "couldn't find key absent in ConfigMap settings"),
    ],
)
def test_a_missing_required_reference_is_an_error(var: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError, match=message):
        container_env(POD, {"env": [{"name": "X", "valueFrom": var}]}, lookup)


def test_without_a_lookup_object_references_are_left_out() -> None:
    container = {"env": [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "password"}}}]}
    assert container_env(POD, container) == {}


def test_secret_data_is_decoded() -> None:
    assert decoded({"data": {"k": base64.b64encode(b"v").decode()}}) == {"k": "v"}
