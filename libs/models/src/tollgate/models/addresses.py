"""Which addresses an endpoint may have: the one rule the webhook (at admission) and the allocator (at registration,
and for RemoteEndpoints that got past admission) both apply. Pure.

An endpoint must be a reachable remote address. Refused always: unspecified, loopback, link-local (169.254.0.0/16
holds the cloud metadata service), multicast, broadcast and reserved addresses; refused by the settings: the denied
ranges (default the usual cluster ranges, 10.96.0.0/12 for Services and 10.244.0.0/16 for pods). The allowed
ranges carve exceptions out of both: the most specific (longest) matching prefix decides, so 127.77.0.0/16 allowed
opens that range of loopback (the dev system's simulated remote nodes) while the rest of 127.0.0.0/8 stays refused.
An Account's `spec.allowedEndpointRanges`, when set, narrows further: the address must also be inside one of them.

A VirtualService endpoint's host may be a DNS name (the seed's own example forwards to `tcp-echo.default.svc`), which
the Envoy resolves at run time: `host_refusal` judges a name as the address it always means (a loopback name such as
`localhost`, a numeric form such as `127.1` that resolvers read as an IPv4 address) and lets any other name pass, since
only the resolver can answer it; an Account's ranges admit no such name, as it cannot be shown to be inside them.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

DEFAULT_DENIED_RANGES = ("10.96.0.0/12", "10.244.0.0/16")
REACHABLE = "endpoints must be reachable remote addresses"

# (range, what an address there is): refused whatever the settings deny, unless an allowed range is more specific.
BUILT_IN: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ip_network(cidr), kind)
    for cidr, kind in (
        ("0.0.0.0/8", "an unspecified (this-network, 0.0.0.0/8) address"),
        ("0.0.0.0/32", "the unspecified address"),
        ("::/128", "the unspecified address"),
        ("127.0.0.0/8", "a loopback address"),
        ("::1/128", "a loopback address"),
        ("169.254.0.0/16", "a link-local address (169.254.0.0/16, where cloud metadata services answer)"),
        ("fe80::/10", "a link-local address (fe80::/10)"),
        ("224.0.0.0/4", "a multicast address"),
        ("ff00::/8", "a multicast address"),
        ("240.0.0.0/4", "a reserved address (240.0.0.0/4)"),
        ("255.255.255.255/32", "the broadcast address"),
    )
)


# Names a resolver answers from the Envoy's own /etc/hosts (a pod's has them) before it asks a DNS server, or, for
# `*.localhost`, answers with loopback by definition (RFC 6761, 6.3).
LOOPBACK_NAMES = {
    "localhost": "127.0.0.1",
    "localhost.localdomain": "127.0.0.1",
    "ip6-localhost": "::1",
    "ip6-loopback": "::1",
}
# What inet_aton may read as an IPv4 address: one to four parts, each decimal, octal (0...) or hexadecimal (0x...).
NUMERIC_HOST = re.compile(r"[0-9a-fA-FxX.]+")


def parse_range(text: str) -> IPNetwork:
    """One CIDR range (no host bits set); ValueError saying what is wrong."""
    try:
        return ip_network(text.strip(), strict=True)
    except ValueError as error:
        raise ValueError(f"{text!r} is not a CIDR range such as 192.168.0.0/16 ({error})") from None


def parse_ranges(text: str | Iterable[str], field: str) -> tuple[IPNetwork, ...]:
    """CIDRs from a comma-separated string or a list (empty entries skipped); ValueError naming `field`."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        return tuple(parse_range(item) for item in items if item.strip())
    except ValueError as error:
        raise ValueError(f"{field}: {error}") from None


def parse_address(text: str | IPAddress) -> IPAddress:
    """An address; an IPv4-mapped IPv6 address (::ffff:127.0.0.1) is judged as the IPv4 address it maps."""
    address = ip_address(text) if isinstance(text, str) else text
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def read_host(host: str | IPAddress) -> tuple[IPAddress | None, str]:
    """The address an endpoint host always means, and how it reads as that address when it is not written as one;
    (None, "") for a DNS name, which only a resolver can answer."""
    try:
        return parse_address(host), ""
    except ValueError:
        pass
    text = str(host)
    name = text.lower().removesuffix(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        address = LOOPBACK_NAMES.get(name, "127.0.0.1")
        return parse_address(address), f"{text!r} is a loopback name (it resolves to {address})"
    if NUMERIC_HOST.fullmatch(text):
        try:
            numeric = IPv4Address(socket.inet_aton(text))
        except OSError:
            return None, ""
        return numeric, f"{text!r} reads as the IPv4 address {numeric} (a numeric form resolvers accept)"
    return None, ""


@dataclass(frozen=True)
class AccountRanges:
    """An Account's `spec.allowedEndpointRanges`: the only ranges its endpoints may be in."""

    account: str
    ranges: tuple[IPNetwork, ...]

    def __str__(self) -> str:
        return f"Account {self.account}'s spec.allowedEndpointRanges ({', '.join(map(str, self.ranges)) or 'none'})"


@dataclass(frozen=True)
class Refusal:
    """Why an address may not be an endpoint: the field and the rule."""

    field: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}"


@dataclass(frozen=True)
class EndpointPolicy:
    denied: tuple[IPNetwork, ...] = tuple(ip_network(cidr) for cidr in DEFAULT_DENIED_RANGES)
    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, denied: str | Iterable[str], allowed: str | Iterable[str], field: str = "") -> EndpointPolicy:
        """From CIDR lists; `field` names them in errors (e.g. the settings' prefix)."""
        return cls(
            denied=parse_ranges(denied, f"{field}ENDPOINT_DENIED_RANGES" if field else "denied ranges"),
            allowed=parse_ranges(allowed, f"{field}ENDPOINT_ALLOWED_RANGES" if field else "allowed ranges"),
        )

    def refusal(self, field: str, text: str | IPAddress, account: AccountRanges | None = None) -> Refusal | None:
        """Why the address in `field` may not be an endpoint; None when it may."""
        try:
            address = parse_address(text)
        except ValueError:
            return Refusal(field, f"{str(text)!r} is not an IP address")
        matches: list[tuple[int, int, str]] = [  # (prefix length, allowed?, why refused)
            (network.prefixlen, 0, f"{address} is {kind}; {REACHABLE}")
            for network, kind in BUILT_IN
            if _contains(network, address)
        ]
        matches += [
            (network.prefixlen, 0, f"{address} is in {network}, a denied range (the cluster's own pod and Service "
             f"ranges are denied); {REACHABLE}")
            for network in self.denied
            if _contains(network, address)
        ]  # fmt: skip
        matches += [(network.prefixlen, 1, "") for network in self.allowed if _contains(network, address)]
        if matches:
            _, allowed, why = max(matches, key=lambda match: (match[0], -match[1]))  # a tie: refused
            if not allowed:
                return Refusal(field, why)
        if account is not None and not any(_contains(network, address) for network in account.ranges):
            return Refusal(field, f"{address} is outside {account}")
        return None

    def host_refusal(self, field: str, host: str | IPAddress, account: AccountRanges | None = None) -> Refusal | None:
        """Why the endpoint host in `field`, an IP address or a DNS name, may not be an endpoint; None when it may. A
        name is judged as the address it always means (see `read_host`); any other passes, unless an Account narrows
        the policy."""
        address, reading = read_host(host)
        if address is None:
            if account is None:
                return None
            return Refusal(
                field,
                f"{str(host)!r} is a DNS name, which cannot be shown to be inside {account}: endpoints of this "
                "account are IP addresses",
            )
        refusal = self.refusal(field, address, account)
        return Refusal(field, f"{reading}: {refusal.rule}") if refusal is not None and reading else refusal

    def refusals(
        self,
        fields: Sequence[tuple[str, str | IPAddress]],
        account: AccountRanges | None = None,
        hosts: bool = False,
    ) -> list[Refusal]:
        """The refusal of each (field, address) that has one; with `hosts`, each may be a DNS name (`host_refusal`)."""
        judge = self.host_refusal if hosts else self.refusal
        found = (judge(field, address, account) for field, address in fields)
        return [refusal for refusal in found if refusal is not None]


DEFAULT_POLICY = EndpointPolicy()


def _contains(network: IPNetwork, address: IPAddress) -> bool:
    return network.version == address.version and address in network
