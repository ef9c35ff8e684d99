"""What the registry reads from the EPIC objects and how it names them: pure functions of their wire form, shared by
the registry's parts, the reconcile and the REST API."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from tollgate.allocator.k8s import JSON, Kind
from tollgate.models.addresses import AccountRanges
from tollgate.models.base import condition_status
from tollgate.models.epic import AccountSpec, GWProxy, LoadBalancer

TUNNELS = "gue-tunnel-endpoints"
CLUSTERS = "upstream-clusters"
PROXY_KINDS: dict[str, Kind] = {"LoadBalancer": LoadBalancer, "GWProxy": GWProxy}


def pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def node_of(rep: JSON) -> str | None:
    node = rep["spec"].get("node-address")
    return str(node) if node else None


def identity(spec: JSON) -> tuple[str, str, int, str]:
    """What makes an endpoint itself: load balancer, address, port and protocol."""
    port = spec.get("port") or {}
    return (
        spec.get("load-balancer", ""),
        str(spec.get("address")),
        int(port.get("port", 0)),
        port.get("protocol", "TCP"),
    )


def entries(obj: JSON) -> dict[str, Any]:
    """The tunnel entries of a LoadBalancer or GWProxy, by client node address."""
    return dict((obj.get("status") or {}).get(TUNNELS) or {})


def unwanted(obj: JSON, wanted: Collection[str]) -> dict[str, Any]:
    """The tunnel IDs of the LoadBalancer's or GWProxy's entries whose node is not `wanted`, by node."""
    return {node: entry.get("tunnel-id") for node, entry in entries(obj).items() if node not in wanted}


def described(kind: Kind, name: str) -> str:
    """How messages name a LoadBalancer or GWProxy."""
    return f"{'load balancer' if kind is LoadBalancer else kind.resource.kind} {name!r}"


def log_fields(kind: Kind, namespace: str, name: str) -> dict[str, str]:
    """The object a log line is about, as the JSON lines name kopf's (tollgate.runtime.logging)."""
    return {"kind": kind.resource.kind, "object": f"{namespace}/{name}"}


def tunnel_recorded(rep: JSON, lb: JSON) -> bool:
    """The endpoint is Ready, and its tunnel ID is the one its node has in the load balancer's status (an ad-hoc
    endpoint: none)."""
    if condition_status(rep, "Ready") != "True":
        return False
    node, tunnel_id = node_of(rep), (rep.get("status") or {}).get("tunnel-id")
    if node is None:
        return tunnel_id is None
    return tunnel_id is not None and (entries(lb).get(node) or {}).get("tunnel-id") == tunnel_id


def endpoint_addresses(rep: JSON) -> list[tuple[str, str]]:
    """A RemoteEndpoint's addresses as the endpoint policy judges them, by field."""
    spec = rep["spec"]
    node = spec.get("node-address")
    return [("spec.address", str(spec.get("address"))), *([("spec.node-address", str(node))] if node else [])]


def account_ranges(name: str, account: JSON | None) -> AccountRanges | None:
    """The ranges an Account narrows its endpoints to; none allowed when its spec does not parse (it got past a down
    webhook): closed rather than open."""
    try:
        return AccountSpec.model_validate((account or {}).get("spec") or {}).endpoint_ranges(name)
    except ValidationError:
        return AccountRanges(name, ())


def describe(spec: JSON) -> str:
    _, address, port, protocol = identity(spec)
    return f"endpoint {address}:{port}/{protocol}"


def different(existing: JSON, wanted: JSON) -> str:
    """The fields in which an existing registration differs from the one asked for."""
    have, want = _flat(existing), _flat(wanted)
    keys = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
    return ", ".join(f"{key} {have.get(key)!r} (not {want.get(key)!r})" for key in keys)


def _flat(spec: JSON, prefix: str = "") -> JSON:
    flat: JSON = {}
    for key, value in spec.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
