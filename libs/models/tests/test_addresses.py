"""The endpoint address policy: what is refused, what the settings carve out, and what an Account narrows."""

from __future__ import annotations

import pytest

from tollgate.models.addresses import AccountRanges, EndpointPolicy, parse_ranges
from tollgate.models.epic import AccountSpec
from tollgate.models.servicemesh import VirtualServiceSpec

DEFAULT = EndpointPolicy()
# The dev system's: pods and Services in loopback ranges, simulated remote nodes in 127.77.0.0/16.
DEV = EndpointPolicy.parse("127.1.0.0/16,127.2.0.0/16", "127.77.0.0/16")


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("0.0.0.0", "0.0.0.0 is the unspecified address; endpoints must be reachable remote addresses"),
        ("0.1.2.3", "0.1.2.3 is an unspecified (this-network, 0.0.0.0/8) address"),
        ("127.0.0.1", "127.0.0.1 is a loopback address; endpoints must be reachable remote addresses"),
        ("127.77.0.5", "127.77.0.5 is a loopback address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address (169.254.0.0/16, where cloud metadata"),
        ("224.0.0.1", "224.0.0.1 is a multicast address"),
        ("255.255.255.255", "255.255.255.255 is the broadcast address"),
        ("240.0.0.1", "240.0.0.1 is a reserved address"),
        ("10.244.3.4", "10.244.3.4 is in 10.244.0.0/16, a denied range"),
        ("10.100.0.1", "10.100.0.1 is in 10.96.0.0/12, a denied range"),
        ("::", ":: is the unspecified address"),
        ("::1", "::1 is a loopback address"),
        ("fe80::1", "fe80::1 is a link-local address (fe80::/10)"),
        ("ff02::1", "ff02::1 is a multicast address"),
        ("::ffff:127.0.0.1", "127.0.0.1 is a loopback address"),
        ("::ffff:169.254.169.254", "169.254.169.254 is a link-local address"),
        ("not-an-ip", "'not-an-ip' is not an IP address"),
    ],
)
def test_refused_by_default(address: str, rule: str) -> None:
    refusal = DEFAULT.refusal("spec.address", address)
    assert refusal is not None and refusal.field == "spec.address"
    assert str(refusal).startswith(f"spec.address: {rule}"), str(refusal)


@pytest.mark.parametrize("address", ["192.168.1.30", "10.0.0.1", "10.95.255.255", "203.0.113.9", "2001:db8::1"])
def test_allowed_by_default(address: str) -> None:
    assert DEFAULT.refusal("spec.address", address) is None


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.77.0.5", None),
        ("127.77.255.254", None),
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("127.1.2.3", "127.1.2.3 is in 127.1.0.0/16, a denied range"),
        ("127.2.0.10", "127.2.0.10 is in 127.2.0.0/16, a denied range"),
        ("127.0.10.1", "127.0.10.1 is a loopback address"),
        ("169.254.169.254", "link-local"),
        # the dev policy names its own denied ranges: the default ones are not denied there
        ("10.244.1.5", None),
    ],
)
def test_allowed_ranges_carve_out_by_longest_prefix(address: str, refused: str | None) -> None:
    refusal = DEV.refusal("spec.node-address", address)
    if refused is None:
        assert refusal is None
    else:
        assert refusal is not None and refused in refusal.rule and refusal.field == "spec.node-address"


def test_a_denied_range_inside_an_allowed_one_wins_and_a_tie_refuses() -> None:
    policy = EndpointPolicy.parse("10.0.5.0/24,10.9.0.0/16", "10.0.0.0/16,10.9.0.0/16")
    assert policy.refusal("f", "10.0.4.1") is None
    assert "10.0.5.0/24, a denied range" in str(policy.refusal("f", "10.0.5.1"))
    assert "10.9.0.0/16, a denied range" in str(policy.refusal("f", "10.9.0.1"))


def test_an_account_narrows_what_the_policy_allows() -> None:
    spec = AccountSpec.model_validate({"allowedEndpointRanges": ["192.168.10.0/24", "2001:db8::/32"]})
    narrow = spec.endpoint_ranges("acme")
    assert narrow is not None
    assert DEFAULT.refusal("spec.address", "192.168.10.7", narrow) is None
    assert DEFAULT.refusal("spec.address", "2001:db8::7", narrow) is None
    refusal = DEFAULT.refusal("spec.address", "192.168.11.7", narrow)
    assert str(refusal) == (
        "spec.address: 192.168.11.7 is outside Account acme's spec.allowedEndpointRanges "
        "(192.168.10.0/24, 2001:db8::/32)"
    )
    # It narrows only: a range the policy refuses stays refused.
    inside = AccountRanges("acme", parse_ranges("127.0.0.0/8", "f"))
    assert "loopback" in str(DEFAULT.refusal("spec.address", "127.0.0.1", inside))
    # An empty list allows nothing; unset allows what the policy allows.
    assert "(none)" in str(DEFAULT.refusal("spec.address", "192.168.1.1", AccountRanges("acme", ())))
    assert AccountSpec().endpoint_ranges("acme") is None


def test_refusals_reports_each_field() -> None:
    found = DEFAULT.refusals([("spec.address", "127.0.0.1"), ("spec.node-address", "192.168.1.1")])
    assert [r.field for r in found] == ["spec.address"]


@pytest.mark.parametrize(
    ("host", "rule"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address; endpoints must be reachable remote addresses"),
        ("169.254.169.254", "169.254.169.254 is a link-local address (169.254.0.0/16, where cloud metadata"),
        ("localhost", "'localhost' is a loopback name (it resolves to 127.0.0.1): 127.0.0.1 is a loopback address"),
        ("LocalHost.", "'LocalHost.' is a loopback name (it resolves to 127.0.0.1): 127.0.0.1 is a loopback"),
        ("admin.localhost", "'admin.localhost' is a loopback name (it resolves to 127.0.0.1)"),
        ("ip6-localhost", "'ip6-localhost' is a loopback name (it resolves to ::1): ::1 is a loopback address"),
        ("127.1", "'127.1' reads as the IPv4 address 127.0.0.1 (a numeric form resolvers accept): 127.0.0.1 is a"),
        ("0x7f000001", "'0x7f000001' reads as the IPv4 address 127.0.0.1"),
        ("2852039166", "'2852039166' reads as the IPv4 address 169.254.169.254"),
        ("0", "'0' reads as the IPv4 address 0.0.0.0 (a numeric form resolvers accept): 0.0.0.0 is the unspecified"),
    ],
)
def test_a_host_is_judged_as_the_address_it_always_means(host: str, rule: str) -> None:
    refusal = DEFAULT.host_refusal("spec.host", host)
    assert refusal is not None and str(refusal).startswith(f"spec.host: {rule}"), str(refusal)


@pytest.mark.parametrize("host", ["tcp-echo.default.svc", "echo.example.com", "cafe", "face.b00c", "10.0.0.7"])
def test_other_dns_names_are_left_to_the_resolver(host: str) -> None:
    assert DEFAULT.host_refusal("spec.host", host) is None


def test_an_allowed_range_carves_out_a_loopback_name_too() -> None:
    assert EndpointPolicy.parse("", "127.0.0.1/32").host_refusal("spec.host", "localhost") is None


def test_an_account_that_narrows_its_endpoints_admits_no_dns_name() -> None:
    narrow = AccountRanges("acme", parse_ranges("192.168.10.0/24", "f"))
    assert DEFAULT.host_refusal("spec.host", "192.168.10.7", narrow) is None
    assert str(DEFAULT.host_refusal("spec.host", "echo.example.com", narrow)) == (
        "spec.host: 'echo.example.com' is a DNS name, which cannot be shown to be inside Account acme's "
        "spec.allowedEndpointRanges (192.168.10.0/24): endpoints of this account are IP addresses"
    )


def test_a_virtual_service_names_the_field_of_each_endpoint_address_and_not_its_selectors() -> None:
    def listener(protocol: str, *hosts: dict[str, object]) -> dict[str, object]:
        endpoints = [{"name": f"e{n}", "host": host, "port": 1} for n, host in enumerate(hosts)]
        return {"name": protocol, protocol: {"port": 1, "cluster": {"name": "c", "endpoints": endpoints}}}

    spec = VirtualServiceSpec.model_validate(
        {
            "listeners": [
                listener("udp", {"address": "192.0.2.1"}),
                listener("tcp", {"selector": {"app": "w"}}, {"address": "127.0.0.1"}),
            ]
        }
    )
    assert spec.endpoint_hosts() == [
        ("spec.listeners[0].udp.cluster.endpoints[0].host.address", "192.0.2.1"),
        ("spec.listeners[1].tcp.cluster.endpoints[1].host.address", "127.0.0.1"),
    ]
    assert [str(r) for r in DEFAULT.refusals(spec.endpoint_hosts(), hosts=True)] == [
        "spec.listeners[1].tcp.cluster.endpoints[1].host.address: 127.0.0.1 is a loopback address; endpoints must be "
        "reachable remote addresses"
    ]


@pytest.mark.parametrize("text", ["10.0.0.1/8", "nonsense", "10.0.0.0/33"])
def test_bad_ranges_name_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match=rf"TOLLGATE_X_ENDPOINT_DENIED_RANGES: '{text}' is not a CIDR range"):
        EndpointPolicy.parse(text, "", "TOLLGATE_X_")
