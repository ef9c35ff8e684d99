"""EPIC's REST API without I/O: its paths and `link` objects, the names it gives objects, and how a client's object
becomes a spec tollgate stores."""

from __future__ import annotations

import re
import secrets
from typing import Any

from pydantic import BaseModel, ValidationError

from tollgate.allocator.allocation import InvalidArgumentError

JSON = dict[str, Any]
BASE = "/api/epic"
# A Kubernetes object name (DNS-1123 subdomain): what a clientRef.uid must be to name a GWProxy, GWRoute or slice.
SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Fields of Gateway API v1 objects that agents send and tollgate's Envoys have no use for: dropped, not refused.
# (Fields that would change what a route does, a filter or a regex match, are refused as unknown.)
TOLERATED = {
    "proxy": (("gateway", "addresses"), ("gateway", "infrastructure"), ("gateway", "listeners", "*", "allowedRoutes")),
    "service": (),
    "endpoint": (),
    "route": (),
    "slice": (("endpoints", "*", "targetRef"), ("endpoints", "*", "hints"), ("endpoints", "*", "deprecatedTopology")),
}


def account_path(account: str) -> str:
    return f"{BASE}/accounts/{account}"


def group_path(account: str, group: str) -> str:
    return f"{account_path(account)}/groups/{group}"


def proxy_path(account: str, name: str) -> str:
    return f"{account_path(account)}/proxies/{name}"


def service_path(account: str, name: str) -> str:
    return f"{account_path(account)}/services/{name}"


def named_path(account: str, key: str, name: str) -> str:
    """The URL of a route or slice (`key`): `/accounts/{a}/routes/{name}`, `/accounts/{a}/slices/{name}`."""
    return f"{account_path(account)}/{key}s/{name}"


def endpoint_path(account: str, service: str, name: str) -> str:
    return f"{service_path(account, service)}/endpoints/{name}"


def cluster_path(account: str, service: str, name: str) -> str:
    return f"{service_path(account, service)}/clusters/{name}"


def account_links(account: str) -> dict[str, str]:
    base = account_path(account)
    return {"self": base, "create-route": f"{base}/routes", "create-slice": f"{base}/slices"}


def group_links(account: str, group: str) -> dict[str, str]:
    base = group_path(account, group)
    return {
        "self": base,
        "account": account_path(account),
        "create-service": f"{base}/services",
        "create-proxy": f"{base}/proxies",
    }


def proxy_links(account: str, proxy: JSON) -> dict[str, str]:
    name, group = proxy["metadata"]["name"], proxy["spec"]["service-group"]
    return {"self": proxy_path(account, name), "group": group_path(account, group)}


def service_links(account: str, service: JSON) -> dict[str, str]:
    name, group = service["metadata"]["name"], service["spec"]["service-group"]
    base = service_path(account, name)
    return {
        "self": base,
        "group": group_path(account, group),
        "create-endpoint": f"{base}/endpoints",
        "create-cluster": f"{base}/clusters",
    }


def load_balancer_name(group: str, name: str, shareable: bool) -> str:
    """EPIC's name of a client's service: `<group>-<name>`, and unless the group can be shared a random 16 hex
    digits after it, so that two clusters' services of one name never meet in one load balancer."""
    base = f"{group}-{name}"
    return base if shareable else f"{base}-{secrets.token_hex(8)}"


def object_name(field: str, value: object) -> str:
    """A client-given name (a clientRef.uid, a service name) as an object name, refused naming the field."""
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{field}: required")
    if len(value) > 253 or not SUBDOMAIN.match(value):
        raise InvalidArgumentError(
            f"{field}: {value!r} is not a valid object name (lowercase a-z, 0-9, '-' and '.', 253 at most)"
        )
    return value


def unwrapped(body: object, key: str) -> JSON:
    """The object under `key` of a request body (`{"proxy": {...}}`)."""
    if not isinstance(body, dict) or not isinstance(body.get(key), dict):
        raise InvalidArgumentError(f"{key}: required: the body is {{{key!r}: {{...}}}}")
    return dict(body[key])


def client_spec(kind: str, obj: JSON) -> JSON:
    """The `spec` of a client's object as tollgate stores it: empty strings and nulls (Go's zero values for
    fields the client left unset) dropped, and the Gateway API fields of `TOLERATED` too."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidArgumentError(f"{kind}.spec: required (an object)")
    cleaned: JSON = _without_empty(spec)
    for path in TOLERATED[kind]:
        _drop(cleaned, path)
    return cleaned


def validated(model: type[BaseModel], spec: JSON, field: str) -> JSON:
    """`spec` checked against the kind's model: the first error names the field and the rule."""
    try:
        model.model_validate(spec)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in (field, *first["loc"]))
        message = (
            "unknown field: tollgate does not implement it" if first["type"] == "extra_forbidden" else first["msg"]
        )
        raise InvalidArgumentError(f"{where}: {message}") from None
    return spec


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v is not None and v != ""}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def _drop(value: Any, path: tuple[str, ...]) -> None:
    head, *rest = path
    if head == "*":
        for item in value if isinstance(value, list) else []:
            _drop(item, tuple(rest))
    elif isinstance(value, dict) and head in value:
        if rest:
            _drop(value[head], tuple(rest))
        else:
            del value[head]
