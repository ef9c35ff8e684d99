"""The rules of `servicemesh.l7mp.io` (tollgate.models.servicemesh): VirtualServices, whose names must be unique
where they meet and whose listeners may not share a port on the Envoys of the namespace."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from tollgate.models import VirtualService
from tollgate.models.servicemesh import PortListener, UdpListener
from tollgate.webhook.validation.common import (
    JSONObject,
    Review,
    Violation,
    endpoint_addresses,
    identity,
    metadata_of,
    reference,
    reserved_name,
    reserved_port,
    spec_of,
    unique_within,
)

# The VirtualServices a refusal for a taken port names one by one; the rest are counted.
MAX_CONFLICTS = 3
UDP_ONLY_FIELDS = tuple(name for name in UdpListener.model_fields if name not in PortListener.model_fields)


# ---- the port indexes the cache keeps of VirtualServices ----


def _port_listeners(obj: JSONObject) -> Iterator[tuple[JSONObject, str, JSONObject]]:
    """(listener, protocol, udp-or-tcp block) of every well-formed listener of a raw VirtualService."""
    listeners = spec_of(obj).get("listeners")
    for listener in listeners if isinstance(listeners, list) else []:
        if not isinstance(listener, Mapping):
            continue
        for protocol in ("udp", "tcp"):
            block = listener.get(protocol)
            if isinstance(block, Mapping):
                yield listener, protocol.upper(), block


def listener_ports(obj: JSONObject) -> list[tuple[str, str, int]]:
    """(namespace, protocol, port) of every listener: listeners only meet on Envoys of their own namespace."""
    namespace = identity(obj)[0]
    return [
        (namespace, protocol, block["port"])
        for _, protocol, block in _port_listeners(obj)
        if isinstance(block.get("port"), int)
    ]


def _selector(obj: JSONObject) -> JSONObject:
    selector = spec_of(obj).get("selector")
    return selector if isinstance(selector, Mapping) else {}


def port_labels(obj: JSONObject) -> list[Hashable]:
    """(namespace, protocol, port, label key) for every listener port and every key of the object's selector."""
    keys = [key for key, value in _selector(obj).items() if isinstance(value, str)]
    return [(*port, key) for port in listener_ports(obj) for key in keys]


def port_label_values(obj: JSONObject) -> list[Hashable]:
    """(namespace, protocol, port, label key, value) for every listener port and every label of its selector."""
    labels = [(key, value) for key, value in _selector(obj).items() if isinstance(value, str)]
    return [(*port, *label) for port in listener_ports(obj) for label in labels]


# ---- the rules ----


def _selector_text(selector: Mapping[str, Any]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(selector.items())) or "{} (every Envoy)"


def virtual_service_violations(resource: VirtualService, review: Review) -> Iterator[Violation]:
    """Names must be unique where they meet: listener and cluster names within the object (Envoy's names are
    `<namespace>/<object>/<name>`, see tollgate.xds.translate), endpoint names within their cluster. Ports meet
    on the Envoys of the namespace: no two listeners on one port/protocol for overlapping selectors. Endpoint
    addresses follow the endpoint address policy, as RemoteEndpoints' do."""
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
        yield from unique_within(listeners, listener.name, f"{base}.name", "listener")
        yield from unique_within(clusters, cluster.name, f"{block}.cluster.name", "cluster")
        yield from reserved_name(listener.name, f"{base}.name")
        yield from reserved_name(cluster.name, f"{block}.cluster.name")
        yield from reserved_port(protocol, port, f"{block}.port")
        endpoints: dict[str, str] = {}
        for number, endpoint in enumerate(cluster.endpoints):
            yield from unique_within(endpoints, endpoint.name, f"{block}.cluster.endpoints[{number}].name", "endpoint")
        first = ports.setdefault((protocol, port), f"{block}.port")
        if first != f"{block}.port":
            yield Violation(f"{block}.port", f"{protocol} port {port} is taken by {first}: two listeners on one port")
        if cluster.hash_key is not None and protocol == "TCP":
            yield Violation(
                f"{block}.cluster.hash_key",
                "only a cluster behind a udp listener can hash on a key (Envoy's TCP proxy has no key hash policy)",
            )
        yield from _taken_port(review, protocol, port, spec.selector, f"{block}.port")
    yield from endpoint_addresses(review, spec.endpoint_hosts(), hosts=True)


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
    return [obj for obj in objects if obj is not None and not metadata_of(obj).get("deletionTimestamp")]


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


def raw_udp_only_fields(obj: JSONObject) -> Iterator[Violation]:
    """A udp-only field of a tcp listener, with the reason: the model refuses it only as an unknown field."""
    listeners = spec_of(obj).get("listeners")
    for index, listener in enumerate(listeners if isinstance(listeners, list) else []):
        block = listener.get("tcp") if isinstance(listener, Mapping) else None
        if not isinstance(block, Mapping):
            continue
        for name in (name for name in UDP_ONLY_FIELDS if name in block):
            yield Violation(
                f"spec.listeners[{index}].tcp.{name}",
                "applies to udp listeners only (UDP proxy sessions; a tcp listener has connections)",
            )
