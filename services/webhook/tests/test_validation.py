"""The rules every kind shares, and the model's own: the endpoint address policy (RemoteEndpoint,
GWEndpointSlice, narrowed by the Account) and the object's apiVersion and kind. The rules of each API group
are tested in test_validation_<group>.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tollgate.models import Goop
from tollgate.testing.cluster import dev_endpoint_policy
from tollgate.testing.objects import Obj, named
from tollgate.webhook.validation import Limits, validate

Check = Callable[..., list[str]]
Sample = Callable[[str], Obj]


REACHABLE = "endpoints must be reachable remote addresses"


@pytest.mark.parametrize(
    ("field", "address", "violation"),
    [
        ("address", "0.0.0.0", f"spec.address: 0.0.0.0 is the unspecified address; {REACHABLE}"),
        ("address", "127.0.0.1", f"spec.address: 127.0.0.1 is a loopback address; {REACHABLE}"),
        ("node-address", "169.254.169.254", "spec.node-address: 169.254.169.254 is a link-local address"),
        ("address", "224.0.0.5", "spec.address: 224.0.0.5 is a multicast address"),
        ("address", "255.255.255.255", "spec.address: 255.255.255.255 is the broadcast address"),
        ("address", "10.244.0.9", "spec.address: 10.244.0.9 is in 10.244.0.0/16, a denied range"),
        ("node-address", "10.96.0.1", "spec.node-address: 10.96.0.1 is in 10.96.0.0/12, a denied range"),
    ],
)
def test_a_remote_endpoint_is_a_reachable_remote_address(
    check: Check, sample: Sample, field: str, address: str, violation: str
) -> None:
    endpoint = sample("RemoteEndpoint")
    assert check(endpoint) == []
    endpoint["spec"][field] = address
    (found,) = check(endpoint)
    assert found.startswith(violation), found


def test_the_endpoint_policy_comes_from_the_limits(check: Check, sample: Sample) -> None:
    dev = Limits(endpoint_policy=dev_endpoint_policy())
    endpoint = sample("RemoteEndpoint")
    endpoint["spec"]["address"], endpoint["spec"]["node-address"] = "127.77.3.4", "127.77.0.1"
    assert check(endpoint, limits=dev) == []
    assert check(endpoint)[0].startswith("spec.address: 127.77.3.4 is a loopback address")
    endpoint["spec"]["address"] = "127.1.1.9"
    assert check(endpoint, limits=dev) == [
        f"spec.address: 127.1.1.9 is in 127.1.0.0/16, a denied range (the cluster's own pod and Service ranges are "
        f"denied); {REACHABLE}"
    ]


def test_an_account_narrows_its_endpoints_ranges(check: Check, sample: Sample) -> None:
    endpoint, slice_, account = sample("RemoteEndpoint"), sample("GWEndpointSlice"), sample("Account")
    account["spec"]["allowedEndpointRanges"] = ["192.168.1.0/24"]
    assert account["metadata"]["namespace"] == endpoint["metadata"]["namespace"] == slice_["metadata"]["namespace"]
    assert check(endpoint, account) == []
    assert check(slice_, account) == [
        "spec.endpoints[0].addresses[0]: 192.168.101.5 is outside Account root's spec.allowedEndpointRanges "
        "(192.168.1.0/24)",
        "spec.endpoints[1].addresses[0]: 192.168.102.7 is outside Account root's spec.allowedEndpointRanges "
        "(192.168.1.0/24)",
    ]
    account["spec"]["allowedEndpointRanges"] = ["192.168.2.0/24"]
    assert check(endpoint, account) == [
        "spec.address: 192.168.1.30 is outside Account root's spec.allowedEndpointRanges (192.168.2.0/24)",
        "spec.node-address: 192.168.1.30 is outside Account root's spec.allowedEndpointRanges (192.168.2.0/24)",
    ]
    elsewhere = named(sample("RemoteEndpoint"), "rep", "epic-other")
    assert check(elsewhere, account) == [], "another namespace's Account does not narrow it"


def test_gw_endpoint_slice_addresses_follow_the_endpoint_policy(check: Check, sample: Sample) -> None:
    slice_ = sample("GWEndpointSlice")
    slice_["spec"]["endpoints"][0]["addresses"] = ["127.0.0.1"]
    slice_["spec"]["nodeAddresses"]["node-b"] = "169.254.169.254"
    assert check(slice_) == [
        f"spec.endpoints[0].addresses[0]: 127.0.0.1 is a loopback address; {REACHABLE}",
        "spec.nodeAddresses[node-b]: 169.254.169.254 is a link-local address (169.254.0.0/16, where cloud metadata "
        f"services answer); {REACHABLE}",
    ]


def test_an_account_s_ranges_must_be_cidrs(check: Check, sample: Sample) -> None:
    account = sample("Account")
    account["spec"]["allowedEndpointRanges"] = ["192.168.0.0/16", "192.168.1.1/24", "nonsense"]
    found = check(account)
    assert [v.split(":")[0] for v in found] == ["spec.allowedEndpointRanges[1]", "spec.allowedEndpointRanges[2]"]
    assert "'192.168.1.1/24' is not a CIDR range such as 192.168.0.0/16 (192.168.1.1/24 has host bits set)" in found[0]


def test_a_wrong_api_version_is_named(sample: Sample, store_with: Callable[..., Any]) -> None:
    goop = sample("Goop")
    goop["apiVersion"] = "goop.example.com/v1"
    violations = validate(Goop, goop, None, namespace="default", name="g", view=store_with(), limits=Limits())
    assert [str(v) for v in violations] == [
        "apiVersion/kind: expected goop.example.com/v1alpha1 Goop, got goop.example.com/v1 Goop"
    ]
