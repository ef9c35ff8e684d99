"""Validation beyond the CRD schemas: cross-field and cross-object rules, each naming the field and the rule.

Pure: the objects other than the one under review come from a `View` (the informer cache), and every rule
returns all of its violations, so the whole object is rejected at once with everything wrong with it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from tollgate.models import (
    EPIC,
    Account,
    ClusterRoutedIPClass,
    CustomResource,
    Goop,
    GWEndpointSlice,
    GWProxy,
    GWRoute,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    RoutedIP,
    ServicePrefix,
    VirtualService,
)
from tollgate.models.addresses import AccountRanges, EndpointPolicy, IPAddress
from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER, bootstrap_ports
from tollgate.models.epic import (
    GWPROXY_LABEL,
    LOAD_BALANCER_LABEL,
    SINGLETON_NAME,
    SYSTEM_NAMESPACE,
    AccountSpec,
    GWProxySpec,
    RemoteEndpointSpec,
    account_namespace,
    account_of,
)
from tollgate.models.gateway import GatewaySpec, HTTPRouteSpec, ParentReference, TCPRouteSpec, named_listeners
from tollgate.models.routedip import Trust, class_trust_rules, parse_port_range, service_ref_rule
from tollgate.models.servicemesh import PortListener, UdpListener
from tollgate.webhook.kinds import Model

JSONObject = Mapping[str, Any]
SpecModel = TypeVar("SpecModel", bound=BaseModel)

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# An HTTP field name (RFC 9110 token).
HEADER_NAME = re.compile(r"[-!#$%&'*+.^_`|~0-9A-Za-z]+")
THIS_NETWORK = IPv4Network("0.0.0.0/8")
MAX_LABEL_VALUE = 63
# The (protocol, port) pairs every Envoy's bootstrap takes before xDS adds a listener (its admin server): a listener
# there fails to bind, and Envoy rejects the whole listener update it came in. A group's custom `envoy-bootstrap`
# adds its own (tollgate.models.envoy.bootstrap_ports) for its LoadBalancers and GWProxies.
RESERVED_PORTS: Mapping[tuple[str, int], str] = {("TCP", ADMIN_PORT): "the Envoy admin port"}
# The LoadBalancers, GWProxies or LBServiceGroups a refused deletion of the EPIC singleton names.
MAX_USERS_NAMED = 5
# The label the allocator puts a proxy object's name in, on its Envoy Deployment, pods and ConfigMap.
NAME_LABELS = {"LoadBalancer": LOAD_BALANCER_LABEL, "GWProxy": GWPROXY_LABEL}


@dataclass(frozen=True)
class Violation:
    """A broken rule: the field path as the API server writes it, and the rule in words.

    `pending` marks a violation that names an object the cache may not have seen yet (created a moment
    ago): the caller may wait for the cache to catch up before rejecting.
    """

    field: str
    rule: str
    pending: bool = False

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}" if self.field else self.rule


@dataclass(frozen=True)
class Limits:
    """The rules' settings."""

    max_goop_jobs: int = 100
    routed_ip_trust: Trust = field(default_factory=Trust)
    endpoint_policy: EndpointPolicy = field(default_factory=EndpointPolicy)


class View(Protocol):
    """The other objects of the cluster, as the informer cache last saw them."""

    def get(self, kind: str, namespace: str, name: str) -> JSONObject | None: ...

    def lookup(self, kind: str, index: str, key: Hashable) -> list[JSONObject]: ...

    def keys(self, kind: str, index: str, key: Hashable) -> AbstractSet[tuple[str, str]]: ...


# ---- indexes the cross-object rules read (the cache maintains them) ----


def _spec(obj: JSONObject) -> JSONObject:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _port_listeners(obj: JSONObject) -> Iterator[tuple[JSONObject, str, JSONObject]]:
    """(listener, protocol, udp-or-tcp block) of every well-formed listener of a raw VirtualService."""
    listeners = _spec(obj).get("listeners")
    for listener in listeners if isinstance(listeners, list) else []:
        if not isinstance(listener, Mapping):
            continue
        for protocol in ("udp", "tcp"):
            block = listener.get(protocol)
            if isinstance(block, Mapping):
                yield listener, protocol.upper(), block


def _listener_ports(obj: JSONObject) -> list[tuple[str, str, int]]:
    """(namespace, protocol, port) of every listener: listeners only meet on Envoys of their own namespace."""
    namespace = identity(obj)[0]
    return [
        (namespace, protocol, block["port"])
        for _, protocol, block in _port_listeners(obj)
        if isinstance(block.get("port"), int)
    ]


def _selector(obj: JSONObject) -> JSONObject:
    selector = _spec(obj).get("selector")
    return selector if isinstance(selector, Mapping) else {}


def _port_labels(obj: JSONObject) -> list[Hashable]:
    """(namespace, protocol, port, label key) for every listener port and every key of the object's selector."""
    keys = [key for key, value in _selector(obj).items() if isinstance(value, str)]
    return [(*port, key) for port in _listener_ports(obj) for key in keys]


def _port_label_values(obj: JSONObject) -> list[Hashable]:
    """(namespace, protocol, port, label key, value) for every listener port and every label of its selector."""
    labels = [(key, value) for key, value in _selector(obj).items() if isinstance(value, str)]
    return [(*port, *label) for port in _listener_ports(obj) for label in labels]


def _scalar(field: str) -> Callable[[JSONObject], list[Hashable]]:
    def index(obj: JSONObject) -> list[Hashable]:
        value = _spec(obj).get(field)
        return [value] if isinstance(value, str) else []

    return index


def _routed_ip_key(obj: JSONObject) -> list[Hashable]:
    value = _spec(obj).get("routedIP")
    try:
        return [str(IPv4Address(value))] if isinstance(value, str) else []
    except ValueError:
        return [value]


def _endpoint_identity(obj: JSONObject) -> list[Hashable]:
    """(namespace, load balancer, address, port, protocol): what makes a RemoteEndpoint itself."""
    spec = _spec(obj)
    port = spec.get("port")
    port = port if isinstance(port, Mapping) else {}
    fields = (spec.get("load-balancer"), spec.get("address"), port.get("port"), port.get("protocol", "TCP"))
    if not all(isinstance(value, str | int) for value in fields):
        return []
    return [(identity(obj)[0], *fields)]


def _all(obj: JSONObject) -> list[Hashable]:
    """One key for every object: `lookup(kind, "all", ALL)` lists them all."""
    return [ALL]


ALL = "all"
IndexFunc = Callable[[JSONObject], Iterable[Hashable]]

INDEXES: dict[Model, dict[str, IndexFunc]] = {
    VirtualService: {
        "port": _listener_ports,
        "port-label": _port_labels,
        "port-label-value": _port_label_values,
    },
    Account: {},
    LBServiceGroup: {"all": _all},
    LoadBalancer: {
        "public-address": _scalar("public-address"),
        "namespace": lambda obj: [identity(obj)[0]],
        "all": _all,
    },
    GWProxy: {"public-address": _scalar("public-address"), "namespace": lambda obj: [identity(obj)[0]], "all": _all},
    RemoteEndpoint: {"identity": _endpoint_identity},
    ClusterRoutedIPClass: {"className": _scalar("className")},
    RoutedIP: {"routedIP": _routed_ip_key},
}


# ---- the review of one object ----


@dataclass(frozen=True)
class Review:
    namespace: str
    name: str
    old_spec: JSONObject | None
    view: View
    limits: Limits

    @property
    def identity(self) -> tuple[str, str]:
        return self.namespace, self.name

    def existing(self, model: Model, index: str, key: Hashable) -> list[JSONObject]:
        """Objects holding `key` in `index`, leaving out those being deleted."""
        found = self.view.lookup(model.resource.kind, index, key)
        return [obj for obj in found if not _metadata(obj).get("deletionTimestamp")]

    def others(self, model: Model, index: str, key: Hashable) -> list[JSONObject]:
        """Objects of this object's kind, other than this one, holding `key` in `index`."""
        return [obj for obj in self.existing(model, index, key) if identity(obj) != self.identity]


def _metadata(obj: JSONObject) -> JSONObject:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def identity(obj: JSONObject) -> tuple[str, str]:
    metadata = _metadata(obj)
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def reference(obj: JSONObject) -> str:
    namespace, name = identity(obj)
    return f"{namespace}/{name}" if namespace else name


def _holder(review: Review, kind: str, other: JSONObject) -> str:
    """Another object holding what the reviewed one asks for, named only when it is of the same namespace (the
    same tenant's): a refusal never tells of other tenants' objects."""
    return f"{kind} {reference(other)}" if identity(other)[0] == review.namespace else f"a {kind} of another namespace"


def _unicast(address: IPv4Address, field: str) -> Iterator[Violation]:
    if address in THIS_NETWORK or address.is_multicast or address.is_reserved:
        yield Violation(
            field,
            f"{address} is not a unicast host address (0.0.0.0/8, multicast 224.0.0.0/4 and reserved "
            "240.0.0.0/4 cannot be routed to a host)",
        )


def _label_violations(labels: Mapping[str, str], field: str) -> Iterator[Violation]:
    for key, value in labels.items():
        prefix, slash, name = key.rpartition("/")
        if not (LABEL_NAME.fullmatch(name) and len(name) <= 63) or (
            slash and not (DNS1123_SUBDOMAIN.fullmatch(prefix) and len(prefix) <= 253)
        ):
            yield Violation(f"{field}[{key}]", f"{key!r} is not a valid label key ([prefix/]name, name at most 63)")
        if value and not (LABEL_NAME.fullmatch(value) and len(value) <= 63):
            yield Violation(
                f"{field}[{key}]",
                f"{value!r} is not a valid label value (at most 63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit)",
            )


def _reserved_port(
    protocol: str, port: int, field: str, reserved: Mapping[tuple[str, int], str] = RESERVED_PORTS
) -> Iterator[Violation]:
    if (what := reserved.get((protocol, port))) is not None:
        taken = ", ".join(f"{number}/{name}" for name, number in sorted(reserved, key=lambda key: (key[1], key[0])))
        yield Violation(
            field,
            f"{protocol} port {port} is {what}, which the Envoy binds at start: a listener there cannot bind "
            f"(reserved: {taken})",
        )


def _group_reserved_ports(review: Review, group: str) -> Mapping[tuple[str, int], str]:
    """The ports the Envoys of a proxy in service group `group` bind at start: the admin port, and those of the
    group's custom `envoy-bootstrap` template."""
    stored = review.view.get(LBServiceGroup.resource.kind, review.namespace, group)
    template = _spec(stored).get("envoy-bootstrap") if stored is not None else None
    if not isinstance(template, str):
        return RESERVED_PORTS
    return {**bootstrap_ports(template), **RESERVED_PORTS}


def _reserved_name(name: str, field: str) -> Iterator[Violation]:
    if name == XDS_CLUSTER:
        yield Violation(
            field,
            f"{name!r} is reserved: it names the xDS cluster of every Envoy's bootstrap, through which the Envoy "
            "gets its configuration",
        )


def _name_as_label(kind: str, name: str) -> Iterator[Violation]:
    if len(name) > MAX_LABEL_VALUE:
        yield Violation(
            "metadata.name",
            f"{len(name)} characters, above the {MAX_LABEL_VALUE} of a label value: the {kind}'s Envoy Deployment "
            f"and pods carry its name in the label {NAME_LABELS[kind]}",
        )


# ---- the rules, kind by kind ----


def _epic(resource: EPIC, review: Review) -> Iterator[Violation]:
    where = f"{review.namespace}/{review.name}"
    if review.namespace != SYSTEM_NAMESPACE:
        yield Violation("metadata.namespace", f"only {SYSTEM_NAMESPACE}/{SINGLETON_NAME} may exist, not {where}")
    if review.name != SINGLETON_NAME:
        yield Violation("metadata.name", f"only {SYSTEM_NAMESPACE}/{SINGLETON_NAME} may exist, not {where}")


def _service_prefix(resource: ServicePrefix, review: Review) -> Iterator[Violation]:
    if review.namespace != SYSTEM_NAMESPACE:
        yield Violation(
            "metadata.namespace", f"ServicePrefixes live in namespace {SYSTEM_NAMESPACE}, not {review.namespace}"
        )


def _account(resource: Account, review: Review) -> Iterator[Violation]:
    namespace = account_namespace(review.name)
    if len(namespace) > 63:
        yield Violation(
            "metadata.name",
            f"the account's user namespace {namespace!r} would be {len(namespace)} characters, above the 63 of a "
            f"namespace name: an account name has at most {63 - len(account_namespace(''))}",
        )
    elif not DNS1123_LABEL.fullmatch(namespace):
        yield Violation(
            "metadata.name",
            f"the account's user namespace {namespace!r} is not a valid namespace name (a DNS-1123 label: "
            "lower-case letters, digits and '-', no '.')",
        )


def _proxy(resource: LoadBalancer | GWProxy, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    yield from _name_as_label(resource.resource.kind, review.name)
    if spec.public_address is not None:
        yield from _unicast(spec.public_address, "spec.public-address")
        for model in (LoadBalancer, GWProxy):
            for other in review.others(model, "public-address", str(spec.public_address)):
                yield Violation(
                    "spec.public-address",
                    f"{spec.public_address} is the public address of {_holder(review, model.resource.kind, other)} "
                    "already: one object per public address",
                )
    pairs: dict[tuple[int, str], int] = {}
    node_ports: dict[tuple[int, str], int] = {}
    names: dict[str, int] = {}
    reserved = _group_reserved_ports(review, spec.service_group)
    for index, port in enumerate(spec.public_ports):
        field = f"spec.public-ports[{index}]"
        yield from _reserved_port(port.protocol, port.port, f"{field}.port", reserved)
        first = pairs.setdefault((port.port, port.protocol), index)
        if first != index:
            yield Violation(
                field,
                f"duplicate port/protocol pair {port.port}/{port.protocol} (spec.public-ports[{first}] has it too)",
            )
        if port.node_port is not None:
            first = node_ports.setdefault((port.node_port, port.protocol), index)
            if first != index:
                yield Violation(
                    f"{field}.nodePort",
                    f"duplicate nodePort {port.node_port}/{port.protocol} (spec.public-ports[{first}] has it too)",
                )
        if port.name is not None:
            first = names.setdefault(port.name, index)
            if first != index:
                yield Violation(
                    f"{field}.name", f"duplicate port name {port.name!r} (spec.public-ports[{first}] has it too)"
                )
    if review.view.get(LBServiceGroup.resource.kind, review.namespace, spec.service_group) is None:
        yield Violation(
            "spec.service-group",
            f"LBServiceGroup {spec.service_group!r} does not exist in the account's namespace {review.namespace}",
            pending=True,
        )
    if review.old_spec is not None:
        before = review.old_spec.get("service-id")
        if before is not None and spec.service_id != before:
            now = "unset" if spec.service_id is None else spec.service_id
            yield Violation("spec.service-id", f"is immutable once set (was {before}, now {now})")


def _proxy_ports(obj: JSONObject) -> Iterator[tuple[str, str, int]]:
    """(field, protocol, port) of every port a stored LoadBalancer's or GWProxy's Envoy listens on."""
    spec = _spec(obj)
    for index, port in enumerate(spec.get("public-ports") or []):
        if isinstance(port, Mapping) and isinstance(port.get("port"), int):
            yield f"spec.public-ports[{index}].port", str(port.get("protocol") or "TCP"), port["port"]
    gateway = spec.get("gateway")
    listeners = gateway.get("listeners") if isinstance(gateway, Mapping) else None
    for index, listener in enumerate(listeners if isinstance(listeners, list) else []):
        if isinstance(listener, Mapping) and isinstance(listener.get("port"), int):
            yield f"spec.gateway.listeners[{index}].port", "TCP", listener["port"]


def _lb_service_group(resource: LBServiceGroup, review: Review) -> Iterator[Violation]:
    """A group's custom `envoy-bootstrap` may not bind a port its LoadBalancers or GWProxies already listen on."""
    if resource.spec.envoy_bootstrap is None:
        return
    bound = bootstrap_ports(resource.spec.envoy_bootstrap)
    for model in (LoadBalancer, GWProxy):
        for proxy in review.existing(model, "namespace", review.namespace):
            if _spec(proxy).get("service-group") != review.name:
                continue
            for where, protocol, port in _proxy_ports(proxy):
                if (what := bound.get((protocol, port))) is not None:
                    yield Violation(
                        "spec.envoy-bootstrap",
                        f"{what} binds {protocol} port {port}, which {model.resource.kind} {reference(proxy)} of "
                        f"this group listens on ({where}): its Envoy could not bind that listener",
                    )


def _load_balancer(resource: LoadBalancer, review: Review) -> Iterator[Violation]:
    yield from _proxy(resource, review)
    if review.old_spec is None:
        yield from _account_limit(review, LoadBalancer)


def _gw_proxy(resource: GWProxy, review: Review) -> Iterator[Violation]:
    yield from _proxy(resource, review)
    gateway = resource.spec.gateway or GatewaySpec()
    names: dict[str, str] = {}
    ports: dict[int, str] = {}
    reserved = _group_reserved_ports(review, resource.spec.service_group)
    for index, listener in enumerate(gateway.listeners):
        field = f"spec.gateway.listeners[{index}]"
        yield from _unique_within(names, listener.name, f"{field}.name", "listener")
        yield from _reserved_name(listener.name, f"{field}.name")
        yield from _reserved_port("TCP", listener.port, f"{field}.port", reserved)
        first = ports.setdefault(listener.port, field)
        if first != field:
            yield Violation(
                f"{field}.port",
                f"port {listener.port} is taken by {first}: one listener per port (each is its own Envoy listener)",
            )
        if listener.hostname is not None:
            yield from _hostname(listener.hostname, f"{field}.hostname")
    if review.old_spec is None:
        yield from _account_limit(review, GWProxy)


def _account_limit(review: Review, model: type[LoadBalancer | GWProxy]) -> Iterator[Violation]:
    """An account (its user namespace) holds at most its Account's `proxyLimit` GWProxies (EPIC's) and
    `loadBalancerLimit` LoadBalancers; the defaults apply where the namespace has no Account."""
    account = account_of(review.namespace)
    stored = review.view.get(Account.resource.kind, review.namespace, account)
    spec = _parsed(AccountSpec, _spec(stored)) if stored is not None else None
    field, limit = (
        ("proxyLimit", (spec or AccountSpec()).proxy_limit)
        if model is GWProxy
        else ("loadBalancerLimit", (spec or AccountSpec()).load_balancer_limit)
    )
    held = [obj for obj in review.existing(model, "namespace", review.namespace) if identity(obj) != review.identity]
    if len(held) >= limit:
        whose = f"Account {account}'s spec.{field}" if spec is not None else f"the default {field} (no Account)"
        what, plural = ("proxy", "GWProxies") if model is GWProxy else ("load balancer", "LoadBalancers")
        yield Violation(
            "metadata.namespace",
            f"Account {what} limit exceeded: {review.namespace} holds {len(held)} {plural} and {whose} is {limit}",
        )


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
        proxy = _parsed(GWProxySpec, _spec(stored)) if stored is not None else None
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


def _gw_route(resource: GWRoute, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    if spec.http is not None:
        yield from _http_route(spec.http, review)
    if spec.tcp is not None:
        yield from _tcp_route(spec.tcp, review)


ADDRESS_TYPES: dict[str, type[IPv4Address | IPv6Address]] = {"IPv4": IPv4Address, "IPv6": IPv6Address}


def _gw_endpoint_slice(resource: GWEndpointSlice, review: Review) -> Iterator[Violation]:
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
            yield from _unique_within(names, port.name, f"{field}.name", "port")
    for node, text in spec.node_addresses.items():
        try:
            judged.append((f"spec.nodeAddresses[{node}]", IPv4Address(text) if "." in text else IPv6Address(text)))
        except ValueError:
            yield Violation(f"spec.nodeAddresses[{node}]", f"{text!r} is not an IP address")
    yield from _endpoint_addresses(review, judged)


def _selector_text(selector: Mapping[str, Any]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or "{} (every Envoy)"


def _unique_within(seen: dict[str, str], name: str, field: str, what: str) -> Iterator[Violation]:
    first = seen.setdefault(name, field)
    if first != field:
        yield Violation(field, f"duplicate {what} name {name!r} ({first} has it too): {what} names are unique")


def _virtual_service(resource: VirtualService, review: Review) -> Iterator[Violation]:
    """Names must be unique where they meet: listener and cluster names within the object (Envoy's names are
    `<namespace>/<object>/<name>`, see tollgate.xds.translate), endpoint names within their cluster. Ports meet
    on the Envoys of the namespace: no two listeners on one port/protocol for overlapping selectors."""
    spec = resource.spec
    listeners: dict[str, str] = {}
    clusters: dict[str, str] = {}
    ports: dict[tuple[str, int], str] = {}
    for index, listener in enumerate(spec.listeners):
        base = f"spec.listeners[{index}]"
        protocol = listener.protocol
        block = f"{base}.{protocol.lower()}"
        port = listener.port_listener.port
        cluster = listener.port_listener.cluster
        yield from _unique_within(listeners, listener.name, f"{base}.name", "listener")
        yield from _unique_within(clusters, cluster.name, f"{block}.cluster.name", "cluster")
        yield from _reserved_name(listener.name, f"{base}.name")
        yield from _reserved_name(cluster.name, f"{block}.cluster.name")
        yield from _reserved_port(protocol, port, f"{block}.port")
        endpoints: dict[str, str] = {}
        for number, endpoint in enumerate(cluster.endpoints):
            yield from _unique_within(endpoints, endpoint.name, f"{block}.cluster.endpoints[{number}].name", "endpoint")
        first = ports.setdefault((protocol, port), f"{block}.port")
        if first != f"{block}.port":
            yield Violation(f"{block}.port", f"{protocol} port {port} is taken by {first}: two listeners on one port")
        if cluster.hash_key is not None and protocol == "TCP":
            yield Violation(
                f"{block}.cluster.hash_key",
                "only a cluster behind a udp listener can hash on a key (Envoy's TCP proxy has no key hash policy)",
            )
        yield from _taken_port(review, protocol, port, spec.selector, f"{block}.port")


def _overlapping_on_port(review: Review, protocol: str, port: int, selector: Mapping[str, str]) -> list[JSONObject]:
    """The other VirtualServices of the namespace with a listener on protocol/port whose selector overlaps
    `selector` (a VirtualService selects Envoys of its own namespace only, so no other namespace's can meet it).

    Found with set operations on the indexes, not by comparing selectors one by one: for each of this selector's
    keys, the objects on the port with the same value or without the key. Many VirtualServices on one port with
    selectors of one key (`app: <name>`) is the common case, so the cost follows the few that match, not every
    object on the port: those without the key are the port's objects less those with it, which is nobody when the
    two counts agree (every object on the port has its entries in both indexes).
    """
    kind, where = VirtualService.resource.kind, (review.namespace, protocol, port)
    on_port = review.view.keys(kind, "port", where)
    found: AbstractSet[tuple[str, str]] = on_port
    for key, value in selector.items():
        with_key = review.view.keys(kind, "port-label", (*where, key))
        same_value = review.view.keys(kind, "port-label-value", (*where, key, value))
        without_key = on_port - with_key if len(with_key) < len(on_port) else set()
        found = found & (same_value | without_key)
        if not found:
            break
    objects = (review.view.get(kind, *key) for key in sorted(found) if key != review.identity)
    return [obj for obj in objects if obj is not None and not _metadata(obj).get("deletionTimestamp")]


MAX_CONFLICTS = 3


def _taken_port(
    review: Review, protocol: str, port: int, selector: Mapping[str, str], field: str
) -> Iterator[Violation]:
    others = _overlapping_on_port(review, protocol, port, selector)
    for other in others[:MAX_CONFLICTS]:
        name = next(
            (
                listener.get("name")
                for listener, p, block in _port_listeners(other)
                if (p, block.get("port")) == (protocol, port)
            ),
            None,
        )
        yield Violation(
            field,
            f"{protocol} port {port} is taken by listener {name!r} of VirtualService {reference(other)}, whose "
            f"selector {_selector_text(_selector(other))} overlaps this one's {_selector_text(selector)}: two "
            "listeners on one port for overlapping selectors",
        )
    if len(others) > MAX_CONFLICTS:
        yield Violation(field, f"{protocol} port {port} is taken by {len(others) - MAX_CONFLICTS} more VirtualServices")


def _routed_ip_class(resource: ClusterRoutedIPClass, review: Review) -> Iterator[Violation]:
    class_name = resource.spec.class_name
    for other in review.others(ClusterRoutedIPClass, "className", class_name):
        yield Violation(
            "spec.className", f"className {class_name!r} is already served by ClusterRoutedIPClass {reference(other)}"
        )
    for _, path, rule in class_trust_rules(resource.spec, review.limits.routed_ip_trust):
        yield Violation(path, rule)


def _routed_ip(resource: RoutedIP, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    yield from _unicast(spec.routed_ip, "spec.routedIP")
    refused = service_ref_rule(review.namespace, spec.service_ref.namespace)
    if refused:
        yield Violation("spec.serviceRef.namespace", refused)
    if not review.existing(ClusterRoutedIPClass, "className", spec.class_name):
        yield Violation("spec.className", f"no ClusterRoutedIPClass has className {spec.class_name!r}", pending=True)
    for other in review.others(RoutedIP, "routedIP", str(spec.routed_ip)):
        yield Violation(
            "spec.routedIP",
            f"{spec.routed_ip} is already routed by {_holder(review, 'RoutedIP', other)}: one RoutedIP per address",
        )


def _goop(resource: Goop, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    if spec.job_count > review.limits.max_goop_jobs:
        yield Violation(
            "spec.jobCount", f"{spec.job_count} is above the configured maximum of {review.limits.max_goop_jobs}"
        )
    if spec.placement == "PerNode" and spec.job_count != 1:
        yield Violation(
            "spec.jobCount", "placement PerNode runs one worker per eligible node: jobCount applies to placement Jobs"
        )
    if spec.include_new_nodes and spec.placement != "PerNode":
        yield Violation("spec.includeNewNodes", "applies to placement PerNode only")
    if not spec.cmd.strip():
        yield Violation("spec.cmd", "must not be blank")
    yield from _label_violations(spec.node_selector, "spec.nodeSelector")


def _parsed(model: type[SpecModel], spec: JSONObject | None) -> SpecModel | None:
    """A stored spec as its model reads it; None when there is none or it no longer parses."""
    if spec is None:
        return None
    try:
        return model.model_validate(spec)
    except ValidationError:
        return None


def _endpoint_identity_fields(spec: RemoteEndpointSpec) -> dict[str, object]:
    return {
        "spec.load-balancer": spec.load_balancer,
        "spec.address": str(spec.address),
        "spec.port.port": spec.port.port,
        "spec.port.protocol": spec.port.protocol,
    }


def _account_ranges(review: Review) -> AccountRanges | None:
    """The endpoint ranges the Account of the reviewed object's namespace narrows the policy to, as cached."""
    account = account_of(review.namespace)
    spec = _parsed(AccountSpec, _spec(review.view.get(Account.resource.kind, review.namespace, account) or {}))
    return spec.endpoint_ranges(account) if spec is not None else None


def _endpoint_addresses(review: Review, addresses: list[tuple[str, str | IPAddress]]) -> Iterator[Violation]:
    """The endpoint address policy, narrowed by the namespace's Account."""
    for refusal in review.limits.endpoint_policy.refusals(addresses, _account_ranges(review)):
        yield Violation(refusal.field, refusal.rule)


def _remote_endpoint(resource: RemoteEndpoint, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    addresses: list[tuple[str, str | IPAddress]] = [("spec.address", spec.address)]
    if spec.node_address is not None:
        addresses.append(("spec.node-address", spec.node_address))
    yield from _endpoint_addresses(review, addresses)
    old = _parsed(RemoteEndpointSpec, review.old_spec)
    if old is not None:
        before = _endpoint_identity_fields(old)
        for field, now in _endpoint_identity_fields(spec).items():
            if before[field] != now:
                yield Violation(
                    field, f"is immutable: it is part of the endpoint's identity (was {before[field]}, now {now}); "
                    "register a new endpoint instead"
                )  # fmt: skip
    key = (review.namespace, spec.load_balancer, str(spec.address), spec.port.port, spec.port.protocol)
    for other in review.others(RemoteEndpoint, "identity", key):
        yield Violation(
            "spec",
            f"endpoint {spec.address}:{spec.port.port}/{spec.port.protocol} of load balancer {spec.load_balancer!r} "
            f"is registered already as RemoteEndpoint {_metadata(other).get('name')}: one RemoteEndpoint per "
            "address, port and protocol",
        )


def _none(resource: Any, review: Review) -> Iterator[Violation]:
    return iter(())


Rule = Callable[[Any, Review], Iterator[Violation]]

RULES: dict[Model, Rule] = {
    EPIC: _epic,
    Account: _account,
    LBServiceGroup: _lb_service_group,
    LoadBalancer: _load_balancer,
    GWProxy: _gw_proxy,
    GWRoute: _gw_route,
    GWEndpointSlice: _gw_endpoint_slice,
    ServicePrefix: _service_prefix,
    RemoteEndpoint: _remote_endpoint,
    VirtualService: _virtual_service,
    ClusterRoutedIPClass: _routed_ip_class,
    RoutedIP: _routed_ip,
    Goop: _goop,
}


# ---- deletions: only those a rule guards reach the webhook (registration.py asks for DELETE for them) ----


def _epic_deletion(namespace: str, name: str, view: View) -> Iterator[Violation]:
    """The EPIC singleton goes only once no LoadBalancer, GWProxy or LBServiceGroup is left: it holds the tunnel
    IDs and the GUE endpoint they use, and the allocator does not make it again while it runs."""
    if (namespace, name) != (SYSTEM_NAMESPACE, SINGLETON_NAME):
        return
    users = [
        f"{model.resource.kind} {reference(obj)}"
        for model in (LoadBalancer, GWProxy, LBServiceGroup)
        for obj in view.lookup(model.resource.kind, "all", ALL)
    ]
    if users:
        named = ", ".join(users[:MAX_USERS_NAMED])
        more = f" and {len(users) - MAX_USERS_NAMED} more" if len(users) > MAX_USERS_NAMED else ""
        yield Violation(
            "",
            f"the EPIC singleton {namespace}/{name} is in use by {named}{more}: it holds their tunnel IDs; delete "
            "every LoadBalancer, GWProxy and LBServiceGroup first",
        )


DeletionRule = Callable[[str, str, View], Iterator[Violation]]

DELETION_RULES: dict[Model, DeletionRule] = {EPIC: _epic_deletion}


def validate_deletion(model: Model, namespace: str, name: str, view: View) -> list[Violation]:
    """Why the object may not be deleted now; empty when it may."""
    rule = DELETION_RULES.get(model)
    return list(rule(namespace, name, view)) if rule is not None else []


# ---- checks on the raw object, where a model validator would name the object instead of the field ----


def _raw_node_port_range(obj: JSONObject) -> Iterator[Violation]:
    value = _spec(obj).get("nodePortRange")
    if isinstance(value, str):
        try:
            parse_port_range(value)
        except ValueError as error:
            yield Violation("spec.nodePortRange", str(error))


UDP_ONLY_FIELDS = tuple(name for name in UdpListener.model_fields if name not in PortListener.model_fields)


def _raw_udp_only_fields(obj: JSONObject) -> Iterator[Violation]:
    listeners = _spec(obj).get("listeners")
    for index, listener in enumerate(listeners if isinstance(listeners, list) else []):
        block = listener.get("tcp") if isinstance(listener, Mapping) else None
        if not isinstance(block, Mapping):
            continue
        for name in (name for name in UDP_ONLY_FIELDS if name in block):
            yield Violation(
                f"spec.listeners[{index}].tcp.{name}",
                "applies to udp listeners only (UDP proxy sessions; a tcp listener has connections)",
            )


def _no_raw_checks(obj: JSONObject) -> Iterator[Violation]:
    return iter(())


RAW_CHECKS: dict[Model, Callable[[JSONObject], Iterator[Violation]]] = {
    ClusterRoutedIPClass: _raw_node_port_range,
    VirtualService: _raw_udp_only_fields,
}


def field_path(location: Iterable[int | str]) -> str:
    """A pydantic error location as the API server writes field paths: `spec.public-ports[0].port`."""
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        elif IDENTIFIER.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += f"[{part}]"
    return path


def _got(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        return f" (got {json.dumps(value)})"
    return ""


def from_pydantic(error: ValidationError) -> list[Violation]:
    """One violation per failing field; `int | str` fields failing both ways become one violation."""
    violations: list[Violation] = []
    unions: dict[tuple[int | str, ...], Any] = {}
    for detail in error.errors(include_url=False, include_context=False):
        location = tuple(detail["loc"])
        if location and location[-1] in ("int", "str") and detail["type"] not in ("missing", "extra_forbidden"):
            unions.setdefault(location[:-1], detail["input"])
            continue
        message = str(detail["msg"]).removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden":
            message = "unknown field"
        elif detail["type"] not in ("value_error", "missing"):
            message += _got(detail["input"])
        violations.append(Violation(field_path(location), message))
    for location, value in unions.items():
        violations.append(Violation(field_path(location), f"must be an integer or a string{_got(value)}"))
    return violations


def parse(model: Model, obj: JSONObject) -> tuple[CustomResource[Any, Any] | None, list[Violation]]:
    """The object as its model (None when refused) and what breaks the model's own rules, named by field."""
    body = {key: value for key, value in obj.items() if key != "status"}
    raw = list(RAW_CHECKS.get(model, _no_raw_checks)(body))
    try:
        return model.model_validate(body), raw
    except ValidationError as error:
        reported = {violation.field for violation in raw}
        # A model validator reports at its model's path; drop it where a raw check already named the field.
        duplicates = reported | {field.rpartition(".")[0] for field in reported}
        return None, raw + [violation for violation in from_pydantic(error) if violation.field not in duplicates]


def validate(
    model: Model,
    obj: JSONObject,
    old: JSONObject | None,
    *,
    namespace: str,
    name: str,
    view: View,
    limits: Limits,
) -> list[Violation]:
    """Every rule `obj` breaks; empty when it may be stored. `old` is the stored object on an update."""
    resource, violations = parse(model, obj)
    if resource is None:
        return violations
    old_spec = _spec(old) if old is not None else None
    review = Review(namespace=namespace, name=name, old_spec=old_spec, view=view, limits=limits)
    return violations + list(RULES[model](resource, review))
