"""The rules of routedip.tollgate.io: ClusterRoutedIPClasses and RoutedIPs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tollgate.models.routedip import Trust
from tollgate.testing.objects import Obj, named
from tollgate.webhook.validation import Limits

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("32767-30000", "'32767-30000': need 1 <= LOW <= HIGH <= 65535"),
        ("30000-70000", "'30000-70000': need 1 <= LOW <= HIGH <= 65535"),
        ("thirty", "'thirty' is not a port range of the form LOW-HIGH"),
    ],
)
def test_a_node_port_range_is_low_high_within_1_and_65535(check: Check, sample: Sample, value: str, rule: str) -> None:
    routed_class = sample("ClusterRoutedIPClass")
    routed_class["spec"]["nodePortRange"] = value
    assert check(routed_class) == [f"spec.nodePortRange: {rule}"]


@pytest.mark.parametrize("limit", [0, 257])
def test_the_per_node_limit_is_within_1_and_256(check: Check, sample: Sample, limit: int) -> None:
    routed_class = sample("ClusterRoutedIPClass")
    routed_class["spec"]["perNodeIPLimit"] = limit
    (violation,) = check(routed_class)
    assert violation.startswith("spec.perNodeIPLimit: Input should be") and violation.endswith(f"(got {limit})")


def test_a_class_name_is_served_by_one_class(check: Check, sample: Sample) -> None:
    first = sample("ClusterRoutedIPClass")
    second = named(sample("ClusterRoutedIPClass"), "another")
    assert check(second, first) == [
        f"spec.className: className 'local' is already served by ClusterRoutedIPClass {first['metadata']['name']}"
    ]
    assert check(first, first) == []


@pytest.fixture
def routed_class(sample: Sample) -> Obj:
    """A class serving the sample RoutedIP's className."""
    obj = sample("ClusterRoutedIPClass")
    obj["spec"]["className"] = sample("RoutedIP")["spec"]["className"]
    return obj


def test_a_routed_ip_of_an_existing_class_is_accepted(check: Check, sample: Sample, routed_class: Obj) -> None:
    assert check(sample("RoutedIP"), routed_class) == []


def test_a_routed_ip_needs_its_class(check: Check, sample: Sample, routed_class: Obj) -> None:
    routed_class["spec"]["className"] = "another"
    assert check(sample("RoutedIP"), routed_class) == ["spec.className: no ClusterRoutedIPClass has className 'local'"]


@pytest.mark.parametrize(
    ("address", "violation"),
    [
        ("0.0.0.0", "spec.routedIP: 0.0.0.0 is not a unicast host address"),
        ("230.1.2.3", "spec.routedIP: 230.1.2.3 is not a unicast host address"),
        ("203.0.113.300", 'spec.routedIP: Input is not a valid IPv4 address (got "203.0.113.300")'),
        ("2001:db8::1", 'spec.routedIP: Input is not a valid IPv4 address (got "2001:db8::1")'),
    ],
)
def test_a_routed_ip_is_a_unicast_ipv4_address(
    check: Check, sample: Sample, routed_class: Obj, address: str, violation: str
) -> None:
    routed = sample("RoutedIP")
    routed["spec"]["routedIP"] = address
    (found,) = check(routed, routed_class)
    assert found.startswith(violation)


def test_one_routed_ip_per_address(check: Check, sample: Sample, routed_class: Obj) -> None:
    first = named(sample("RoutedIP"), "first", "elsewhere")
    first["spec"]["serviceRef"]["namespace"] = "elsewhere"
    assert check(sample("RoutedIP"), routed_class, first) == [
        "spec.routedIP: 203.0.113.10 is already routed by a RoutedIP of another namespace: one RoutedIP per address"
    ]
    neighbour = named(sample("RoutedIP"), "first")
    (same_namespace,) = check(sample("RoutedIP"), routed_class, neighbour)
    assert f"already routed by RoutedIP {neighbour['metadata']['namespace']}/first:" in same_namespace
    assert check(first, routed_class, first) == []


def test_a_routed_ip_routes_to_a_service_of_its_own_namespace_only(
    check: Check, sample: Sample, routed_class: Obj
) -> None:
    routed = sample("RoutedIP")
    routed["spec"]["serviceRef"]["namespace"] = "another-tenant"
    assert check(routed, routed_class) == [
        "spec.serviceRef.namespace: must be the RoutedIP's own namespace 'default' (got 'another-tenant'): a RoutedIP "
        "may only route to a Service of its own namespace"
    ]


def digitalocean_class(sample: Sample, api_url: str) -> Obj:
    obj = sample("ClusterRoutedIPClass")
    obj["spec"].update(
        provider="digitalocean",
        fromSecretsRef=[{"name": "digitalocean-token", "namespace": "tollgate-system"}],
        digitalocean={"apiURL": api_url},
    )
    return obj


def test_a_digitalocean_class_sends_its_token_to_an_allowed_https_api_only(check: Check, sample: Sample) -> None:
    assert check(digitalocean_class(sample, "https://api.digitalocean.com")) == []
    assert check(digitalocean_class(sample, "https://collector.example.com/v2")) == [
        "spec.digitalocean.apiURL: 'https://collector.example.com/v2' is not on the allow-list of API URLs "
        "(https://api.digitalocean.com)"
    ]
    assert check(digitalocean_class(sample, "http://api.digitalocean.com")) == [
        "spec.digitalocean.apiURL: 'http://api.digitalocean.com': must be https (the API token travels with every "
        "request)"
    ]
    fake = Limits(routed_ip_trust=Trust(("http://127.0.0.1:8089",), frozenset({"127.0.0.1:8089"})))
    assert check(digitalocean_class(sample, "http://127.0.0.1:8089"), limits=fake) == []
    local = sample("ClusterRoutedIPClass")
    local["spec"]["digitalocean"] = {"apiURL": "http://ignored.example.com"}
    assert check(local) == []


def test_a_job_template_asks_for_no_privileges(check: Check, sample: Sample) -> None:
    job_class = sample("ClusterRoutedIPClass")
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": "tollgate-routedip",
        "hostNetwork": True,
        "containers": [
            {"name": "c", "image": "busybox", "securityContext": {"privileged": True, "capabilities": {"add": ["ALL"]}}}
        ],
    }
    job_class["spec"].update(provider="job", updateRoutedIP={"template": {"spec": pod}})
    assert check(job_class) == [
        "spec.updateRoutedIP.template.spec.serviceAccountName: must be 'tollgate-routedip-job', the chart's "
        "ServiceAccount for Jobs (got 'tollgate-routedip')",
        "spec.updateRoutedIP.template.spec.hostNetwork: must not be true: provider Jobs do not share the node's "
        "namespaces",
        "spec.updateRoutedIP.template.spec.containers[0].securityContext.privileged: must not be true: provider Jobs "
        "run unprivileged",
        "spec.updateRoutedIP.template.spec.containers[0].securityContext.capabilities.add: must be empty: provider "
        "Jobs get no added capabilities",
    ]
    assert check(sample("ClusterRoutedIPClass")) == []
