"""The rules of the Gateway API and discovery/v1 parts that EPIC embeds (tollgate.models.gateway): a GWProxy's
gateway listeners, GWRoutes (http and tcp routes and their parentRefs) and GWEndpointSlices."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from ipaddress import IPv4Address, IPv6Address

from tollgate.models import GWEndpointSlice, GWProxy, GWRoute
from tollgate.models.addresses import IPAddress
from tollgate.models.epic import GWProxySpec
from tollgate.models.gateway import GatewaySpec, HTTPRouteSpec, ParentReference, TCPRouteSpec, named_listeners
from tollgate.webhook.validation.common import (
    DNS1123_SUBDOMAIN,
    Review,
    Violation,
    endpoint_addresses,
    parsed,
    reserved_name,
    reserved_port,
    spec_of,
    unique_within,
)

# An HTTP field name (RFC 9110 token).
HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
ADDRESS_TYPES: dict[str, type[IPv4Address | IPv6Address]] = {"IPv4": IPv4Address, "IPv6": IPv6Address}


def gateway_listener_violations(gateway: GatewaySpec, reserved: Mapping[tuple[str, int], str]) -> Iterator[Violation]:
    """A GWProxy's listeners: unique names, one listener per port, none on a port its Envoys bind at start
    (`reserved`)."""
    names: dict[str, str] = {}
    ports: dict[int, str] = {}
    for index, listener in enumerate(gateway.listeners):
        field = f"spec.gateway.listeners[{index}]"
        yield from unique_within(names, listener.name, f"{field}.name", "listener")
        yield from reserved_name(listener.name, f"{field}.name")
        yield from reserved_port("TCP", listener.port, f"{field}.port", reserved)
        first = ports.setdefault(listener.port, field)
        if first != field:
            yield Violation(
                f"{field}.port",
                f"port {listener.port} is taken by {first}: one listener per port (each is its own Envoy listener)",
            )
        if listener.hostname is not None:
            yield from _hostname(listener.hostname, f"{field}.hostname")


def _hostname(hostname: str, field: str) -> Iterator[Violation]:
    name = hostname.removeprefix("*.")
    if len(hostname) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name) or _is_ip(name):
        yield Violation(
            field,
            f"{hostname!r} is not a DNS name (lower-case DNS-1123 subdomain, optionally after a leading '*.'; "
            "no IP address, no port)",
        )


def _is_ip(text: str) -> bool:
    try:
        IPv4Address(text)
    except ValueError:
        return False
    return True


def _route_parents(parents: list[ParentReference], protocol: str, base: str, review: Review) -> Iterator[Violation]:
    """Each parentRef names a GWProxy of the route's namespace; where that proxy is known, a listener of the
    route's protocol (narrowed by sectionName and port) must be there for the route to attach to."""
    if not parents:
        yield Violation(f"{base}.parentRefs", "at least one parentRef is required: it names the GWProxy to attach to")
    for index, parent in enumerate(parents):
        field = f"{base}.parentRefs[{index}]"
        if parent.namespace not in (None, review.namespace):
            yield Violation(
                f"{field}.namespace",
                f"routes attach to GWProxies of their own namespace ({review.namespace}), not {parent.namespace}",
            )
        stored = review.view.get(GWProxy.resource.kind, review.namespace, parent.name)
        proxy = parsed(GWProxySpec, spec_of(stored)) if stored is not None else None
        if proxy is None:
            continue  # a route may come before its proxy, as a Gateway API route before its Gateway
        named = named_listeners(parent, (proxy.gateway or GatewaySpec()).listeners)
        if not any(listener.protocol == protocol for listener in named):
            which = f"listener {parent.section_name!r}" if parent.section_name is not None else "listener"
            port = f" on port {parent.port}" if parent.port is not None else ""
            found = f" ({', '.join(f'{item.name!r} is {item.protocol}' for item in named)})" if named else ""
            yield Violation(
                field,
                f"GWProxy {parent.name!r} has no {protocol} {which}{port} to attach to{found}: a "
                f"{'tcp' if protocol == 'TCP' else 'http'} route attaches to {protocol} listeners",
            )


def _http_route(route: HTTPRouteSpec, review: Review) -> Iterator[Violation]:
    base = "spec.http"
    yield from _route_parents(route.parent_refs, "HTTP", base, review)
    for index, hostname in enumerate(route.hostnames):
        yield from _hostname(hostname, f"{base}.hostnames[{index}]")
    for number, rule in enumerate(route.rules):
        for index, match in enumerate(rule.matches):
            field = f"{base}.rules[{number}].matches[{index}]"
            if not match.path.value.startswith("/"):
                yield Violation(f"{field}.path.value", f"{match.path.value!r} must start with '/'")
            for header_index, header in enumerate(match.headers):
                if not HEADER_NAME.fullmatch(header.name):
                    yield Violation(
                        f"{field}.headers[{header_index}].name",
                        f"{header.name!r} is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)",
                    )


def _tcp_route(route: TCPRouteSpec, review: Review) -> Iterator[Violation]:
    base = "spec.tcp"
    yield from _route_parents(route.parent_refs, "TCP", base, review)
    for number, rule in enumerate(route.rules):
        if not rule.backend_refs:
            yield Violation(f"{base}.rules[{number}].backendRefs", "at least one backendRef is required")


def gw_route_violations(resource: GWRoute, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    if spec.http is not None:
        yield from _http_route(spec.http, review)
    if spec.tcp is not None:
        yield from _tcp_route(spec.tcp, review)


def gw_endpoint_slice_violations(resource: GWEndpointSlice, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    if not spec.parent_ref.uid:
        yield Violation("spec.parentRef.uid", "is required: GWRoute backendRefs name the backend by it")
    address = ADDRESS_TYPES.get(spec.address_type)
    if address is None:
        yield Violation(
            "spec.addressType", f"{spec.address_type} is not supported: Envoy's EDS takes IPv4 or IPv6 addresses"
        )
    judged: list[tuple[str, str | IPAddress]] = []
    for index, endpoint in enumerate(spec.endpoints):
        for number, text in enumerate(endpoint.addresses):
            where = f"spec.endpoints[{index}].addresses[{number}]"
            try:
                if address is not None:
                    judged.append((where, address(text)))
            except ValueError:
                yield Violation(
                    where, f"{text!r} is not an {spec.address_type} address (addressType {spec.address_type})"
                )
    names: dict[str, str] = {}
    for index, port in enumerate(spec.ports):
        field = f"spec.ports[{index}]"
        if port.port is None:
            yield Violation(f"{field}.port", "is required: the Envoys connect to the endpoints on this port")
        if port.name is not None:
            yield from unique_within(names, port.name, f"{field}.name", "port")
    for node, text in spec.node_addresses.items():
        try:
            judged.append((f"spec.nodeAddresses[{node}]", IPv4Address(text) if "." in text else IPv6Address(text)))
        except ValueError:
            yield Violation(f"spec.nodeAddresses[{node}]", f"{text!r} is not an IP address")
    yield from endpoint_addresses(review, judged)
