"""Which client nodes a GWProxy keeps GUE tunnels for, from its GWRoutes and GWEndpointSlices (EPIC's glue). Pure.

A GWRoute attaches to the GWProxies its `parentRefs[].name` name (in the route's namespace, the account's) and
reaches the GWEndpointSlices whose `spec.parentRef.uid` one of its `backendRefs[].name` is; `http` and `tcp` routes
alike. Each address in the `nodeAddresses` of a slice a proxy reaches is a client node of that proxy: the proxy's
status `gue-tunnel-endpoints` holds one tunnel per such node, keyed by the address, as a load balancer's holds one
per node of its RemoteEndpoints. An address that is not IPv4, or that the endpoint policy (narrowed by the
account's ranges) refuses, gets no tunnel. Routes and slices being deleted reach nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any

from tollgate.models.addresses import AccountRanges, EndpointPolicy, Refusal

JSON = dict[str, Any]


@dataclass(frozen=True)
class Route:
    """What of a GWRoute links proxies to slices: the proxies it attaches to and the backends it names."""

    parents: frozenset[str]
    backends: frozenset[str]


@dataclass(frozen=True)
class Slice:
    """What of a GWEndpointSlice makes tunnels: its backend (`spec.parentRef.uid`) and its nodes' addresses."""

    reference: JSON  # apiVersion, kind and metadata (name, namespace, uid): what an Event about it needs
    backend: str
    node_addresses: tuple[tuple[str, str], ...]  # (node name, address as written), by node name

    @property
    def name(self) -> str:
        return str(self.reference["metadata"]["name"])


@dataclass(frozen=True)
class RefusedAddress:
    """A node address of a slice that gets no tunnel, and why (the refusal names the field)."""

    slice: Slice
    refusal: Refusal


@dataclass(frozen=True)
class ClientNodes:
    """The client nodes of one GWProxy (addresses in canonical form), and the addresses its slices hold in vain."""

    wanted: frozenset[str]
    refused: tuple[RefusedAddress, ...]


def _deleting(obj: JSON) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def route_of(obj: JSON) -> Route | None:
    """The links of a GWRoute object; None when it is being deleted. Read leniently: a route that got past a down
    webhook links what it names and nothing else."""
    if _deleting(obj):
        return None
    namespace = obj["metadata"].get("namespace")
    spec = obj.get("spec") or {}
    parents: set[str] = set()
    backends: set[str] = set()
    for route in (spec.get("http"), spec.get("tcp")):
        if not isinstance(route, dict):
            continue
        parents |= {
            str(ref["name"])
            for ref in route.get("parentRefs") or []
            if ref.get("name") and ref.get("namespace") in (None, namespace)
        }
        backends |= {
            str(ref["name"])
            for rule in route.get("rules") or []
            for ref in rule.get("backendRefs") or []
            if ref.get("name")
        }
    return Route(frozenset(parents), frozenset(backends))


def slice_of(obj: JSON) -> Slice | None:
    """The tunnel-making part of a GWEndpointSlice object; None when it is being deleted or names no backend."""
    spec = obj.get("spec") or {}
    backend = (spec.get("parentRef") or {}).get("uid")
    if _deleting(obj) or not backend:
        return None
    meta = obj["metadata"]
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {key: meta.get(key) for key in ("name", "namespace", "uid")},
    }
    addresses = tuple(sorted((str(node), str(address)) for node, address in (spec.get("nodeAddresses") or {}).items()))
    return Slice(reference, str(backend), addresses)


def node_field(node: str) -> str:
    return f"spec.nodeAddresses[{node}]"


def judge(node: str, address: str, policy: EndpointPolicy, ranges: AccountRanges | None) -> str | Refusal:
    """The node's address in canonical form, or why it gets no tunnel (the refusal names the field)."""
    field = node_field(node)
    try:
        parsed = IPv4Address(address)
    except ValueError:
        return Refusal(field, f"{address!r} is not an IPv4 address: GUE tunnels run between IPv4 node addresses")
    return policy.refusal(field, parsed, ranges) or str(parsed)


def client_nodes(
    proxy: str,
    routes: Iterable[Route],
    slices: Iterable[Slice],
    policy: EndpointPolicy,
    ranges: AccountRanges | None,
) -> ClientNodes:
    """The client nodes of the GWProxy named `proxy`, from the routes and slices of its namespace."""
    backends = frozenset().union(*(route.backends for route in routes if proxy in route.parents))
    wanted: set[str] = set()
    refused: list[RefusedAddress] = []
    for slice_ in slices:
        if slice_.backend not in backends:
            continue
        for node, address in slice_.node_addresses:
            judged = judge(node, address, policy, ranges)
            if isinstance(judged, Refusal):
                refused.append(RefusedAddress(slice_, judged))
            else:
                wanted.add(judged)
    return ClientNodes(frozenset(wanted), tuple(refused))
