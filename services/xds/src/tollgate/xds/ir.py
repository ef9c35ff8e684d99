"""The intermediate representation between the CRs and Envoy: what one source asks of the Envoys it selects.

Every value is frozen and hashable, so that the Envoy resources built from a unit can be cached by the unit
itself. A *source* is one VirtualService, LoadBalancer or GWProxy; a *unit* is one listener with its clusters: one
for a VirtualService or LoadBalancer listener, those of its routes for a GWProxy's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

Protocol = Literal["UDP", "TCP"]
Discovery = Literal["STRICT_DNS", "EDS"]
SourceKind = Literal["VirtualService", "LoadBalancer", "GWProxy"]
PathType = Literal["Exact", "PathPrefix"]
Labels = tuple[tuple[str, str], ...]


def labels(mapping: dict[str, str] | None) -> Labels:
    return tuple(sorted((mapping or {}).items()))


@dataclass(frozen=True, order=True)
class SourceRef:
    """Which object asked for a unit; orders oldest first (creation time, then namespace and name)."""

    created: str
    namespace: str
    name: str
    kind: SourceKind = "VirtualService"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


@dataclass(frozen=True)
class HealthCheck:
    interval_ms: int
    timeout_ms: int
    unhealthy_threshold: int
    healthy_threshold: int


@dataclass(frozen=True)
class Endpoint:
    address: str
    port: int
    health_check_port: int | None = None


@dataclass(frozen=True)
class UdpSessions:
    """The UDP proxy's sessions: at most `max_sessions` at once (the cluster's circuit breaker), each closed after
    `idle_timeout_ms` without a datagram (the listener's UDP proxy)."""

    max_sessions: int
    idle_timeout_ms: int


@dataclass(frozen=True)
class Cluster:
    name: str
    discovery: Discovery
    endpoints: tuple[Endpoint, ...]
    hash_key: str | None = None
    health_check: HealthCheck | None = None
    # Set for the cluster behind a UDP listener; like hash_key, it shapes that listener's UDP proxy too.
    udp: UdpSessions | None = None
    # The name its source gives it, where that differs from the Envoy `name` (a VirtualService's), for status.
    spec_name: str = field(default="", compare=False)


@dataclass(frozen=True)
class Backend:
    """A share of traffic: `weight` parts of the sum of the weights of its siblings."""

    cluster: Cluster
    weight: int = 1


@dataclass(frozen=True)
class Route:
    """Requests whose path (exact, or by path segments under a prefix) and headers match go to `backends`; with no
    backend they are answered 500 (the Gateway API's answer for a rule without a valid backend)."""

    path_type: PathType
    path: str
    headers: tuple[tuple[str, str], ...]
    backends: tuple[Backend, ...]


@dataclass(frozen=True)
class VirtualHost:
    name: str
    domains: tuple[str, ...]
    routes: tuple[Route, ...]


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: Protocol
    port: int
    # Where connections or sessions go; one backend for a VirtualService or LoadBalancer listener.
    backends: tuple[Backend, ...]
    # Set for an HTTP listener: requests are routed by host, path and headers to the routes' backends instead.
    virtual_hosts: tuple[VirtualHost, ...] | None = None
    # Where the unit comes from in its source, for messages: "spec.listeners[0]" or "spec.public-ports[1]".
    path: str = field(default="", compare=False)
    # The address to listen on instead of the Envoy's own (a load balancer's public address).
    bind: str | None = None
    # The name its source gives it, where that differs from the Envoy `name` (a VirtualService's), for status.
    spec_name: str = field(default="", compare=False)

    @property
    def cluster(self) -> Cluster:
        """The cluster of a listener with one backend (every VirtualService and LoadBalancer listener)."""
        return self.backends[0].cluster

    @functools.cached_property
    def clusters(self) -> tuple[Cluster, ...]:
        """Every cluster the listener sends to, once each, in order of first use."""
        found = {backend.cluster.name: backend.cluster for backend in self.backends}
        for host in self.virtual_hosts or ():
            for route in host.routes:
                for backend in route.backends:
                    found.setdefault(backend.cluster.name, backend.cluster)
        return tuple(found.values())


@dataclass(frozen=True)
class ProxySelector:
    """The Envoy pods a source applies to: in `namespace` (any when None), carrying every label of `match`."""

    namespace: str | None
    match: Labels


# What a source that must be served nowhere selects: no Envoy, as every pod has a namespace.
NO_PROXIES = ProxySelector("", ())


@dataclass(frozen=True)
class Source:
    ref: SourceRef
    generation: int
    selector: ProxySelector
    units: tuple[Listener, ...]
    # Spec errors found while translating, each naming the field and the rule; the unit is left out.
    errors: tuple[str, ...] = ()
    # Endpoint addresses the endpoint address policy refuses, each naming the field and the rule: the whole source is
    # left out (it selects NO_PROXIES).
    refusals: tuple[str, ...] = ()

    @functools.cached_property
    def claims(self) -> tuple[frozenset[str], frozenset[tuple[str, int]], frozenset[str]]:
        """Listener names, (protocol, port)s and cluster names this source holds, when its units do not collide."""
        return (
            frozenset(u.name for u in self.units),
            frozenset((u.protocol, u.port) for u in self.units),
            frozenset(c.name for u in self.units for c in u.clusters),
        )

    @functools.cached_property
    def self_disjoint(self) -> bool:
        """No two units of this source share a listener name, a port or a cluster."""
        names, ports, clusters = self.claims
        return len(names) == len(ports) == len(self.units) and len(clusters) == sum(len(u.clusters) for u in self.units)


@dataclass(frozen=True)
class Proxy:
    """An Envoy as the xDS server knows it: its pod and the labels it carries."""

    node_id: str
    namespace: str
    pod: str
    labels: Labels
    listener_address: str = "0.0.0.0"


@dataclass(frozen=True)
class Conflict:
    """`loser`'s unit at `path` is not served to `proxy` because `winner` already holds `what`."""

    proxy: str
    what: str
    winner: SourceRef
    loser: SourceRef
    path: str

    def message_for(self, ref: SourceRef) -> str:
        if ref == self.loser:
            return f"{self.path} is not served on Envoy {self.proxy}: {self.what} is already defined by {self.winner}"
        return f"{self.what} is also defined by {self.loser} ({self.path}), which is not served on Envoy {self.proxy}"


@dataclass(frozen=True)
class ProxyConfig:
    """Everything one Envoy is served, and the conflicts met while merging sources.

    `served` are the sources whose every unit is served; `partial` the units served of the other sources.
    """

    served: tuple[Source, ...] = ()
    partial: tuple[tuple[SourceRef, Listener], ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    sources: tuple[SourceRef, ...] = ()

    @property
    def units(self) -> list[tuple[SourceRef, Listener]]:
        return [(s.ref, u) for s in self.served for u in s.units] + list(self.partial)
