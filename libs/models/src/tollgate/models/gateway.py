"""The parts of the Kubernetes Gateway API (gateway.networking.k8s.io) and discovery/v1 that EPIC's GWProxy,
GWRoute and GWEndpointSlice embed, under their upstream camelCase names, so that a Gateway API user recognises
them. Only what tollgate's Envoys implement is modelled: an unsupported field (a route filter, a regex match) is
refused as unknown instead of silently doing nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from tollgate.models.base import WireModel

MAX_WEIGHT = 1_000_000
ROOT_PATH = "/"


class GatewayListener(WireModel):
    """A Gateway listener: where the proxy accepts connections, and which routes may attach."""

    name: str = Field(min_length=1, max_length=253, description="Unique within the gateway (a route's sectionName).")
    hostname: str | None = Field(
        default=None, max_length=253, description="HTTP: only routes for this host (or `*.suffix`) attach."
    )
    port: int = Field(ge=1, le=65535)
    protocol: Literal["HTTP", "TCP"] = Field(description="HTTP (routed by GWRoutes' http) or TCP (their tcp).")


class GatewaySpec(WireModel):
    gateway_class_name: str | None = Field(default=None, alias="gatewayClassName")
    listeners: list[GatewayListener] = Field(default_factory=list, max_length=64)


class ParentReference(WireModel):
    """The GWProxy a route attaches to, in the route's namespace; sectionName and port narrow it to listeners."""

    group: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str = Field(min_length=1, max_length=253, description="The GWProxy.")
    section_name: str | None = Field(default=None, alias="sectionName", description="Only the listener of this name.")
    port: int | None = Field(default=None, ge=1, le=65535, description="Only the listeners on this port.")


def named_listeners(parent: ParentReference, listeners: Iterable[GatewayListener]) -> list[GatewayListener]:
    """The listeners of a proxy that a parentRef names: all of them, narrowed by its sectionName and port."""
    return [
        listener
        for listener in listeners
        if parent.section_name in (None, listener.name) and parent.port in (None, listener.port)
    ]


class BackendRef(WireModel):
    """A backend: the GWEndpointSlices whose `spec.parentRef.uid` is `name` (EPIC's glue)."""

    group: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str = Field(min_length=1, max_length=253)
    port: int | None = Field(default=None, ge=1, le=65535, description="Prefer the slices' port of this number.")
    weight: int = Field(default=1, ge=0, le=MAX_WEIGHT, description="Share of the rule's traffic (0: none).")


class HTTPPathMatch(WireModel):
    type: Literal["Exact", "PathPrefix"] = "PathPrefix"
    value: str = Field(default=ROOT_PATH, max_length=1024)


class HTTPHeaderMatch(WireModel):
    type: Literal["Exact"] = "Exact"
    name: str = Field(min_length=1, max_length=256)
    value: str = Field(max_length=4096)


class HTTPRouteMatch(WireModel):
    path: HTTPPathMatch = Field(default_factory=HTTPPathMatch)
    headers: list[HTTPHeaderMatch] = Field(default_factory=list, max_length=16)


class HTTPRouteRule(WireModel):
    matches: list[HTTPRouteMatch] = Field(default_factory=lambda: [HTTPRouteMatch()], max_length=64)
    backend_refs: list[BackendRef] = Field(default_factory=list, alias="backendRefs", max_length=16)


class HTTPRouteSpec(WireModel):
    parent_refs: list[ParentReference] = Field(default_factory=list, alias="parentRefs", max_length=32)
    hostnames: list[str] = Field(default_factory=list, max_length=16)
    rules: list[HTTPRouteRule] = Field(default_factory=lambda: [HTTPRouteRule()], max_length=16)


class TCPRouteRule(WireModel):
    backend_refs: list[BackendRef] = Field(default_factory=list, alias="backendRefs", max_length=16)


class TCPRouteSpec(WireModel):
    parent_refs: list[ParentReference] = Field(default_factory=list, alias="parentRefs", max_length=32)
    rules: list[TCPRouteRule] = Field(min_length=1, max_length=16)


class EndpointConditions(WireModel):
    """discovery/v1: an unset `ready` means ready."""

    ready: bool | None = None
    serving: bool | None = None
    terminating: bool | None = None


class Endpoint(WireModel):
    addresses: list[str] = Field(min_length=1, max_length=100)
    conditions: EndpointConditions = Field(default_factory=EndpointConditions)
    hostname: str | None = None
    node_name: str | None = Field(default=None, alias="nodeName")
    zone: str | None = None

    @property
    def ready(self) -> bool:
        return self.conditions.ready is not False


class EndpointPort(WireModel):
    name: str | None = Field(default=None, max_length=63)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    port: int | None = Field(default=None, ge=1, le=65535)
    app_protocol: str | None = Field(default=None, alias="appProtocol")
