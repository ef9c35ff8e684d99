"""The rules of `epic.acnodal.io` (tollgate.models.epic): the EPIC singleton, Accounts, ServicePrefixes, service
groups, the proxies (LoadBalancer, GWProxy) and RemoteEndpoints. The Gateway API parts a GWProxy, GWRoute or
GWEndpointSlice embeds (tollgate.models.gateway) have their rules in the gateway module."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Mapping

from tollgate.models import (
    EPIC,
    Account,
    GWProxy,
    LBServiceGroup,
    LoadBalancer,
    RemoteEndpoint,
    ServicePrefix,
)
from tollgate.models.addresses import IPAddress
from tollgate.models.envoy import bootstrap_ports
from tollgate.models.epic import (
    GWPROXY_LABEL,
    LOAD_BALANCER_LABEL,
    SINGLETON_NAME,
    SYSTEM_NAMESPACE,
    AccountSpec,
    RemoteEndpointSpec,
    account_namespace,
    account_of,
)
from tollgate.models.gateway import GatewaySpec
from tollgate.webhook.validation.common import (
    ALL,
    RESERVED_PORTS,
    JSONObject,
    Review,
    View,
    Violation,
    endpoint_addresses,
    holder,
    identity,
    metadata_of,
    parsed,
    reference,
    reserved_port,
    spec_of,
    unicast,
)
from tollgate.webhook.validation.gateway import gateway_listener_violations

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL_VALUE = 63
# The label the allocator puts a proxy object's name in, on its Envoy Deployment, pods and ConfigMap.
NAME_LABELS = {"LoadBalancer": LOAD_BALANCER_LABEL, "GWProxy": GWPROXY_LABEL}
# The LoadBalancers, GWProxies or LBServiceGroups a refused deletion of the EPIC singleton names.
MAX_USERS_NAMED = 5


def endpoint_identity(obj: JSONObject) -> list[Hashable]:
    """(namespace, load balancer, address, port, protocol): what makes a RemoteEndpoint itself."""
    spec = spec_of(obj)
    port = spec.get("port")
    port = port if isinstance(port, Mapping) else {}
    fields = (spec.get("load-balancer"), spec.get("address"), port.get("port"), port.get("protocol", "TCP"))
    if not all(isinstance(value, str | int) for value in fields):
        return []
    return [(identity(obj)[0], *fields)]


def epic_violations(resource: EPIC, review: Review) -> Iterator[Violation]:
    where = f"{review.namespace}/{review.name}"
    if review.namespace != SYSTEM_NAMESPACE:
        yield Violation("metadata.namespace", f"only {SYSTEM_NAMESPACE}/{SINGLETON_NAME} may exist, not {where}")
    if review.name != SINGLETON_NAME:
        yield Violation("metadata.name", f"only {SYSTEM_NAMESPACE}/{SINGLETON_NAME} may exist, not {where}")


def service_prefix_violations(resource: ServicePrefix, review: Review) -> Iterator[Violation]:
    if review.namespace != SYSTEM_NAMESPACE:
        yield Violation(
            "metadata.namespace", f"ServicePrefixes live in namespace {SYSTEM_NAMESPACE}, not {review.namespace}"
        )


def account_violations(resource: Account, review: Review) -> Iterator[Violation]:
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


def _name_as_label(kind: str, name: str) -> Iterator[Violation]:
    if len(name) > MAX_LABEL_VALUE:
        yield Violation(
            "metadata.name",
            f"{len(name)} characters, above the {MAX_LABEL_VALUE} of a label value: the {kind}'s Envoy Deployment "
            f"and pods carry its name in the label {NAME_LABELS[kind]}",
        )


def _group_reserved_ports(review: Review, group: str) -> Mapping[tuple[str, int], str]:
    """The ports the Envoys of a proxy in service group `group` bind at start: the admin port, and those of the
    group's custom `envoy-bootstrap` template."""
    stored = review.view.get(LBServiceGroup.resource.kind, review.namespace, group)
    template = spec_of(stored).get("envoy-bootstrap") if stored is not None else None
    if not isinstance(template, str):
        return RESERVED_PORTS
    return {**bootstrap_ports(template), **RESERVED_PORTS}


def _proxy(resource: LoadBalancer | GWProxy, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    yield from _name_as_label(resource.resource.kind, review.name)
    if spec.public_address is not None:
        yield from unicast(spec.public_address, "spec.public-address")
        for model in (LoadBalancer, GWProxy):
            for other in review.others(model, "public-address", str(spec.public_address)):
                yield Violation(
                    "spec.public-address",
                    f"{spec.public_address} is the public address of {holder(review, model.resource.kind, other)} "
                    "already: one object per public address",
                )
    pairs: dict[tuple[int, str], int] = {}
    node_ports: dict[tuple[int, str], int] = {}
    names: dict[str, int] = {}
    reserved = _group_reserved_ports(review, spec.service_group)
    for index, port in enumerate(spec.public_ports):
        field = f"spec.public-ports[{index}]"
        yield from reserved_port(port.protocol, port.port, f"{field}.port", reserved)
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
    spec = spec_of(obj)
    for index, port in enumerate(spec.get("public-ports") or []):
        if isinstance(port, Mapping) and isinstance(port.get("port"), int):
            yield f"spec.public-ports[{index}].port", str(port.get("protocol") or "TCP"), port["port"]
    gateway = spec.get("gateway")
    listeners = gateway.get("listeners") if isinstance(gateway, Mapping) else None
    for index, listener in enumerate(listeners if isinstance(listeners, list) else []):
        if isinstance(listener, Mapping) and isinstance(listener.get("port"), int):
            yield f"spec.gateway.listeners[{index}].port", "TCP", listener["port"]


def lb_service_group_violations(resource: LBServiceGroup, review: Review) -> Iterator[Violation]:
    """A group's custom `envoy-bootstrap` may not bind a port its LoadBalancers or GWProxies already listen on."""
    if resource.spec.envoy_bootstrap is None:
        return
    bound = bootstrap_ports(resource.spec.envoy_bootstrap)
    for model in (LoadBalancer, GWProxy):
        for proxy in review.existing(model, "namespace", review.namespace):
            if spec_of(proxy).get("service-group") != review.name:
                continue
            for where, protocol, port in _proxy_ports(proxy):
                if (what := bound.get((protocol, port))) is not None:
                    yield Violation(
                        "spec.envoy-bootstrap",
                        f"{what} binds {protocol} port {port}, which {model.resource.kind} {reference(proxy)} of "
                        f"this group listens on ({where}): its Envoy could not bind that listener",
                    )


def load_balancer_violations(resource: LoadBalancer, review: Review) -> Iterator[Violation]:
    yield from _proxy(resource, review)
    if review.old_spec is None:
        yield from _account_limit(review, LoadBalancer)


def gw_proxy_violations(resource: GWProxy, review: Review) -> Iterator[Violation]:
    yield from _proxy(resource, review)
    reserved = _group_reserved_ports(review, resource.spec.service_group)
    yield from gateway_listener_violations(resource.spec.gateway or GatewaySpec(), reserved)
    if review.old_spec is None:
        yield from _account_limit(review, GWProxy)


def _account_limit(review: Review, model: type[LoadBalancer | GWProxy]) -> Iterator[Violation]:
    """An account (its user namespace) holds at most its Account's `proxyLimit` GWProxies (EPIC's) and
    `loadBalancerLimit` LoadBalancers; the defaults apply where the namespace has no Account."""
    account = account_of(review.namespace)
    stored = review.view.get(Account.resource.kind, review.namespace, account)
    spec = parsed(AccountSpec, spec_of(stored)) if stored is not None else None
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


def _endpoint_identity_fields(spec: RemoteEndpointSpec) -> dict[str, object]:
    return {
        "spec.load-balancer": spec.load_balancer,
        "spec.address": str(spec.address),
        "spec.port.port": spec.port.port,
        "spec.port.protocol": spec.port.protocol,
    }


def remote_endpoint_violations(resource: RemoteEndpoint, review: Review) -> Iterator[Violation]:
    spec = resource.spec
    addresses: list[tuple[str, str | IPAddress]] = [("spec.address", spec.address)]
    if spec.node_address is not None:
        addresses.append(("spec.node-address", spec.node_address))
    yield from endpoint_addresses(review, addresses)
    old = parsed(RemoteEndpointSpec, review.old_spec)
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
            f"is registered already as RemoteEndpoint {metadata_of(other).get('name')}: one RemoteEndpoint per "
            "address, port and protocol",
        )


def epic_deletion_violations(namespace: str, name: str, view: View) -> Iterator[Violation]:
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
