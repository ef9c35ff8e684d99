"""How the supervisor turns a pod into the bootstrap its Envoy runs with (pure parts)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tollgate.models.envoy import ADMIN_PORT, LISTENER_ADDRESS_KEY, POD_LABELS_KEY, ads_bootstrap
from tollgate.testing.pods import container_env, expand
from tollgate.testing.supervisor import BootstrapError, bootstrap_source, prepare_bootstrap

POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "ingress"}},
    "spec": {
        "nodeName": "n1",
        "containers": [
            {
                "name": "envoy",
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "NODE_ID", "value": "$(POD_NAME).edge"},
                ],
                "volumeMounts": [{"name": "boot", "mountPath": "/etc/envoy"}],
            }
        ],
        "volumes": [{"name": "boot", "configMap": {"name": "envoy-bootstrap"}}],
    },
    "status": {"podIP": "127.1.1.9"},
}


def test_env_follows_kubelet_expansion() -> None:
    env = container_env(POD, POD["spec"]["containers"][0])
    assert env == {"POD_NAME": "p", "NODE_ID": "p.edge"}
    assert expand("--service-node $(NODE_ID) $(UNSET)", env) == "--service-node p.edge $(UNSET)"


def test_bootstrap_comes_from_the_mounted_config_map() -> None:
    assert bootstrap_source(POD, ["-c", "/etc/envoy/envoy.yaml"]) == ("envoy-bootstrap", "envoy.yaml")
    assert bootstrap_source(POD, ["--config-yaml", "{}"]) == "{}"
    with pytest.raises(BootstrapError, match=r"no volumeMount of the envoy container holds /other/e\.yaml"):
        bootstrap_source(POD, ["-c", "/other/e.yaml"])
    with pytest.raises(BootstrapError, match="neither -c/--config-path nor --config-yaml"):
        bootstrap_source(POD, [])


def test_identity_admin_and_listeners_come_from_the_pod() -> None:
    bootstrap = prepare_bootstrap(
        POD,
        "static_resources: {listeners: [{address: {socket_address: {address: 0.0.0.0, port_value: 1}}}]}",
        ["--service-cluster", "edge"],
        {},
    )
    assert bootstrap["node"]["id"] == "p.ns"
    assert bootstrap["node"]["cluster"] == "edge"
    assert bootstrap["node"]["metadata"][LISTENER_ADDRESS_KEY] == "127.1.1.9"
    assert bootstrap["node"]["metadata"][POD_LABELS_KEY] == {"app": "ingress"}
    assert bootstrap["admin"]["address"]["socket_address"] == {"address": "127.1.1.9", "port_value": ADMIN_PORT}
    assert bootstrap["static_resources"]["listeners"][0]["address"]["socket_address"]["address"] == "127.1.1.9"


def test_the_xds_connection_comes_from_the_pod_ip() -> None:
    text = yaml.safe_dump(ads_bootstrap("127.2.0.10", 18000))
    bootstrap = prepare_bootstrap(POD, text, [], {})
    [xds] = bootstrap["static_resources"]["clusters"]
    assert xds["upstream_bind_config"] == {"source_address": {"address": "127.1.1.9", "port_value": 0}}


def test_a_bootstrap_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(BootstrapError, match="not a YAML mapping"):
        prepare_bootstrap(POD, "- a list", [], {})
