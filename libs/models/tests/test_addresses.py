"""The endpoint address policy: what is refused, what the settings carve out, and what an Account narrows."""

from __future__ import annotations

import pytest

from tollgate.models.addresses import AccountRanges, EndpointPolicy, parse_ranges
from tollgate.models.epic import AccountSpec

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


@pytest.mark.parametrize("text", ["10.0.0.1/8", "nonsense", "10.0.0.0/33"])
def test_bad_ranges_name_the_setting(text: str) -> None:
    with pytest.raises(ValueError, match=rf"TOLLGATE_X_ENDPOINT_DENIED_RANGES: '{text}' is not a CIDR range"):
        EndpointPolicy.parse(text, "", "TOLLGATE_X_")
