"""What the rules of every API group share: the violation, the review of one object and the cache's view of the
others, and the rules that more than one kind applies (labels, reserved ports and names, unique names, unicast and
endpoint addresses), plus the model's own errors as violations."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from tollgate.models import Account
from tollgate.models.addresses import AccountRanges, EndpointPolicy, IPAddress
from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER
from tollgate.models.epic import AccountSpec, account_of
from tollgate.models.routedip import Trust
from tollgate.webhook.kinds import Model

JSONObject = Mapping[str, Any]
SpecModel = TypeVar("SpecModel", bound=BaseModel)

DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
THIS_NETWORK = IPv4Network("0.0.0.0/8")
# The (protocol, port) pairs every Envoy's bootstrap takes before xDS adds a listener (its admin server): a listener
# there fails to bind, and Envoy rejects the whole listener update it came in. A group's custom `envoy-bootstrap`
# adds its own (tollgate.models.envoy.bootstrap_ports) for its LoadBalancers and GWProxies.
RESERVED_PORTS: Mapping[tuple[str, int], str] = {("TCP", ADMIN_PORT): "the Envoy admin port"}


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


def spec_of(obj: JSONObject) -> JSONObject:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def spec_scalar(field: str) -> Callable[[JSONObject], list[Hashable]]:
    """An index by a string field of the spec."""

    def index(obj: JSONObject) -> list[Hashable]:
        value = spec_of(obj).get(field)
        return [value] if isinstance(value, str) else []

    return index


def every_object(obj: JSONObject) -> list[Hashable]:
    """One key for every object: `lookup(kind, "all", ALL)` lists them all."""
    return [ALL]


ALL = "all"
IndexFunc = Callable[[JSONObject], Iterable[Hashable]]


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
        return [obj for obj in found if not metadata_of(obj).get("deletionTimestamp")]

    def others(self, model: Model, index: str, key: Hashable) -> list[JSONObject]:
        """Objects of this object's kind, other than this one, holding `key` in `index`."""
        return [obj for obj in self.existing(model, index, key) if identity(obj) != self.identity]


def metadata_of(obj: JSONObject) -> JSONObject:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def identity(obj: JSONObject) -> tuple[str, str]:
    metadata = metadata_of(obj)
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def reference(obj: JSONObject) -> str:
    namespace, name = identity(obj)
    return f"{namespace}/{name}" if namespace else name


def holder(review: Review, kind: str, other: JSONObject) -> str:
    """Another object holding what the reviewed one asks for, named only when it is of the same namespace (the
    same tenant's): a refusal never tells of other tenants' objects."""
    return f"{kind} {reference(other)}" if identity(other)[0] == review.namespace else f"a {kind} of another namespace"


def parsed(model: type[SpecModel], spec: JSONObject | None) -> SpecModel | None:
    """A stored spec as its model reads it; None when there is none or it no longer parses."""
    if spec is None:
        return None
    try:
        return model.model_validate(spec)
    except ValidationError:
        return None


# ---- rules more than one kind applies ----


def unicast(address: IPv4Address, field: str) -> Iterator[Violation]:
    if address in THIS_NETWORK or address.is_multicast or address.is_reserved:
        yield Violation(
            field,
            f"{address} is not a unicast host address (0.0.0.0/8, multicast 224.0.0.0/4 and reserved "
            "240.0.0.0/4 cannot be routed to a host)",
        )


def label_violations(labels: Mapping[str, str], field: str) -> Iterator[Violation]:
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


def reserved_port(
    protocol: str, port: int, field: str, reserved: Mapping[tuple[str, int], str] = RESERVED_PORTS
) -> Iterator[Violation]:
    if (what := reserved.get((protocol, port))) is not None:
        taken = ", ".join(f"{number}/{name}" for name, number in sorted(reserved, key=lambda key: (key[1], key[0])))
        yield Violation(
            field,
            f"{protocol} port {port} is {what}, which the Envoy binds at start: a listener there cannot bind "
            f"(reserved: {taken})",
        )


def reserved_name(name: str, field: str) -> Iterator[Violation]:
    if name == XDS_CLUSTER:
        yield Violation(
            field,
            f"{name!r} is reserved: it names the xDS cluster of every Envoy's bootstrap, through which the Envoy "
            "gets its configuration",
        )


def unique_within(seen: dict[str, str], name: str, field: str, what: str) -> Iterator[Violation]:
    first = seen.setdefault(name, field)
    if first != field:
        yield Violation(field, f"duplicate {what} name {name!r} ({first} has it too): {what} names are unique")


def _account_ranges(review: Review) -> AccountRanges | None:
    """The endpoint ranges the Account of the reviewed object's namespace narrows the policy to, as cached."""
    account = account_of(review.namespace)
    spec = parsed(AccountSpec, spec_of(review.view.get(Account.resource.kind, review.namespace, account) or {}))
    return spec.endpoint_ranges(account) if spec is not None else None


def endpoint_addresses(
    review: Review, addresses: Sequence[tuple[str, str | IPAddress]], hosts: bool = False
) -> Iterator[Violation]:
    """The endpoint address policy, narrowed by the namespace's Account; with `hosts`, an address may be a DNS name
    (tollgate.models.addresses.EndpointPolicy.host_refusal)."""
    for refusal in review.limits.endpoint_policy.refusals(addresses, _account_ranges(review), hosts):
        yield Violation(refusal.field, refusal.rule)


# ---- the model's own rules, as violations named by field ----


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
