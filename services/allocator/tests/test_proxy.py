"""A load balancer's Envoy proxies as planned: bootstrap, ConfigMap, Deployment, conditions."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tollgate.allocator import proxy
from tollgate.models.envoy import ENVOY_PROXY_LABEL, XDS_CLUSTER
from tollgate.models.epic import ACCOUNT_LABEL, LOAD_BALANCER_LABEL, LBServiceGroupSpec, LoadBalancerStatus, ServicePort

LB: dict[str, Any] = {
    "apiVersion": "epic.acnodal.io/v1",
    "kind": "LoadBalancer",
    "metadata": {"name": "web", "namespace": "epic-acme", "uid": "u-1", "generation": 3},
    "spec": {"service-group": "sample"},
}


def test_default_bootstrap_points_ads_at_the_xds_server() -> None:
    bootstrap = yaml.safe_load(proxy.bootstrap(LBServiceGroupSpec(), "web", "xds.epic.svc:18000"))
    cluster = bootstrap["static_resources"]["clusters"][0]
    assert cluster["name"] == XDS_CLUSTER
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
    assert address == {"address": "xds.epic.svc", "port_value": 18000}


def test_a_groups_template_gets_node_cluster_and_xds_address_filled_in() -> None:
    template = "node: {id: '{node_id}', cluster: '{cluster}'}\nxds: '{xds_address}' # {xds_host} {xds_port}\nads: {}\n"
    text = proxy.bootstrap(LBServiceGroupSpec(envoy_bootstrap=template), "web", "10.0.0.1:18000")
    assert text.splitlines() == [
        "node: {id: '$(POD_NAME).$(POD_NAMESPACE)', cluster: 'web'}",
        "xds: '10.0.0.1:18000' # 10.0.0.1 18000",
        "ads: {}",
    ]


def test_deployment_carries_the_group_image_replicas_labels_and_owner() -> None:
    group = LBServiceGroupSpec(envoy_image="envoyproxy/envoy:v1.40.0", envoy_replica_count=3)
    deployment = proxy.deployment(LB, "acme", group, "bootstrap text")
    assert deployment["metadata"]["name"] == "web-envoy"
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert deployment["spec"]["replicas"] == 3
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"] == {
        ENVOY_PROXY_LABEL: "true",
        LOAD_BALANCER_LABEL: "web",
        ACCOUNT_LABEL: "acme",
    }
    assert set(deployment["spec"]["selector"]["matchLabels"].items()) <= set(template["metadata"]["labels"].items())
    container = template["spec"]["containers"][0]
    assert container["name"] == "envoy"
    assert container["image"] == "envoyproxy/envoy:v1.40.0"
    assert container["args"][:2] == ["-c", "/etc/envoy/envoy.yaml"]
    assert template["spec"]["volumes"][0]["configMap"]["name"] == "web-envoy"
    other = proxy.deployment(LB, "acme", group, "another bootstrap")
    assert other["spec"]["template"]["metadata"]["annotations"] != template["metadata"]["annotations"], (
        "a changed bootstrap rolls the pods"
    )


def test_the_load_balancers_replica_count_wins_and_the_groups_resources_apply() -> None:
    group = LBServiceGroupSpec.model_validate(
        {"envoy-replica-count": 3, "envoy-resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "2Gi"}}}
    )
    own = LB | {"spec": LB["spec"] | {"envoy-replica-count": 1}}
    assert proxy.deployment(own, "acme", group, "text")["spec"]["replicas"] == 1
    container = proxy.deployment(LB, "acme", group, "text")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "250m"}, "limits": {"memory": "2Gi"}}
    default = proxy.deployment(LB, "acme", LBServiceGroupSpec(), "text")["spec"]["template"]["spec"]["containers"][0]
    assert default["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "1Gi"}}


@pytest.mark.parametrize(
    ("resources", "rule"),
    [
        ({"requests": {"cpu": "a lot"}}, "cpu: 'a lot' is not a Kubernetes quantity"),
        ({"limits": {"gpu": "1"}}, "'gpu' is not one of cpu, memory, ephemeral-storage"),
    ],
)
def test_envoy_resources_are_kubernetes_quantities(resources: dict[str, Any], rule: str) -> None:
    with pytest.raises(ValidationError, match=rule):
        LBServiceGroupSpec.model_validate({"envoy-resources": resources})


def deployment_with(replicas: int, ready: int, observed: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"generation": 1},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": observed, "readyReplicas": ready, "updatedReplicas": ready},
    }


def test_proxy_readiness_follows_the_deployment() -> None:
    assert proxy.proxy_readiness(None)[:2] == (False, "ProxyMissing")
    assert proxy.proxy_readiness(deployment_with(2, 1)) == (False, "ProxyProgressing", "1/2 Envoy replicas ready")
    assert proxy.proxy_readiness(deployment_with(2, 2)) == (True, "ProxyAvailable", "2/2 Envoy replicas ready")
    assert proxy.proxy_readiness(deployment_with(2, 2, observed=0))[0] is False
    assert proxy.proxy_readiness(deployment_with(0, 0))[:2] == (False, "NoReplicas")


def test_ready_is_allocated_and_proxy_ready() -> None:
    status = LoadBalancerStatus()
    proxy.settle_ready(status, 1)
    assert (status.condition("Ready").status, status.condition("Ready").reason) == ("Unknown", "Pending")
    status.set_condition(proxy.ALLOCATED, "True", "ServiceIDAllocated", "service-id 1")
    status.set_condition(proxy.PROXY_READY, "False", "ServiceGroupNotFound", "spec.service-group: no group")
    proxy.settle_ready(status, 1)
    ready = status.condition("Ready")
    assert ready is not None
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "ServiceGroupNotFound",
        "spec.service-group: no group",
    )
    status.set_condition(proxy.PROXY_READY, "True", "ProxyAvailable", "1/1")
    proxy.settle_ready(status, 1)
    assert status.condition("Ready").status == "True"


def test_endpoints_no_public_port_reaches_are_named_in_endpoints_matched() -> None:
    def rep(name: str, port: int, protocol: str = "TCP", port_name: str | None = None) -> dict[str, Any]:
        spec_port = {"port": port, "protocol": protocol} | ({"name": port_name} if port_name else {})
        return {
            "metadata": {"name": name},
            "spec": {"load-balancer": "web", "address": "127.77.0.1", "port": spec_port},
        }

    ports = [
        ServicePort(port=80, target_port=8080),
        ServicePort(port=443, target_port="https"),
        ServicePort(port=53, protocol="UDP"),
    ]
    reached = [rep("a", 8080), rep("b", 8443, port_name="https"), rep("c", 53, "UDP")]
    assert proxy.endpoint_match(ports, reached) == (
        True,
        "AllEndpointsMatched",
        "every RemoteEndpoint is reached by a public port",
    )
    matched, reason, message = proxy.endpoint_match(ports, [*reached, rep("d", 53), rep("e", 8443)])
    assert (matched, reason) == (False, "EndpointMatchesNoPort")
    assert message.startswith("no public port reaches RemoteEndpoint d (127.77.0.1:53/TCP), e (127.77.0.1:8443/TCP):")
    assert "80/TCP -> 8080, 443/TCP -> https, 53/UDP -> 53" in message


def test_a_name_longer_than_a_label_value_is_named_with_the_rule() -> None:
    assert proxy.name_not_a_label({"kind": "LoadBalancer", "metadata": {"name": "a" * 63}}) is None
    message = proxy.name_not_a_label({"kind": "GWProxy", "metadata": {"name": "a" * 64}})
    assert message == (
        "metadata.name: 64 characters; a GWProxy's name labels its Envoy pods and must have at most 63: "
        "no Envoy proxy is made for it"
    )
