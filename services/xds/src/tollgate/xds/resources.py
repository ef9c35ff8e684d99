"""The intermediate representation to Envoy resources (xds-protos messages). No I/O.

Each resource is built once per (unit, listener address, DNS settings) and kept serialised with its content hash,
the version an Envoy reports back in delta xDS. A listener is kept in two parts: the message without its address,
serialised once per unit and shared by every Envoy it is served to, and its address field, each Envoy's own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, config_source_pb2, extension_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2, udp_listener_config_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.config.route.v3 import route_pb2 as http_route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.filters.network.tcp_proxy.v3 import tcp_proxy_pb2
from envoy.extensions.filters.udp.udp_proxy.v3 import route_pb2, udp_proxy_pb2
from envoy.extensions.network.dns_resolver.cares.v3 import cares_dns_resolver_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import any_pb2, duration_pb2, json_format, wrappers_pb2
from google.protobuf.message import Message

from tollgate.xds import ir
from xds.core.v3 import extension_pb2 as xds_extension_pb2
from xds.type.matcher.v3 import matcher_pb2

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
# The order in which changes reach an Envoy (make before break); removals of clusters come last.
TYPE_ORDER = (CLUSTER, ENDPOINT, LISTENER)
SHORT_NAMES = {CLUSTER: "clusters", ENDPOINT: "endpoints", LISTENER: "listeners"}

UDP_PROXY_FILTER = "envoy.filters.udp_listener.udp_proxy"
TCP_PROXY_FILTER = "envoy.filters.network.tcp_proxy"
HTTP_CONNECTION_MANAGER_FILTER = "envoy.filters.network.http_connection_manager"
ROUTER_FILTER = "envoy.filters.http.router"
NO_BACKEND_STATUS = 500
CONNECT_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class DNS:
    """Resolvers for STRICT_DNS clusters (host, port); empty means the system resolver."""

    resolvers: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, text: str) -> DNS:
        """`"10.0.0.10"` or `"127.0.0.53:5353, 10.0.0.10:53"`."""
        resolvers = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            host, _, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "53")
            resolvers.append((host, int(port)))
        return cls(tuple(resolvers))


@dataclass(frozen=True, slots=True)
class Resource:
    """One Envoy resource ready to send: its name, content hash (version), serialised message and owner.

    The message is kept as its bytes, packed into an `Any` only when sent: an `Any` per resource costs about
    1 KB more than its bytes. Every Envoy has its own listeners (their address is the Envoy's), so a listener's
    bytes are `data`, the listener without its address (one object for every Envoy of the unit), followed by
    `own`, its address field: a serialised message followed by another parses as their merge (protobuf's rule),
    here the whole listener. `data` is None for a resource known only by its version (what an Envoy reported)."""

    name: str
    version: str
    data: bytes | None
    owner: ir.SourceRef | None = None
    type_url: str = ""
    own: bytes = b""

    @property
    def packed(self) -> bytes | None:
        """The serialised message."""
        return self.data + self.own if self.data is not None and self.own else self.data

    @property
    def body(self) -> any_pb2.Any | None:
        """The message packed, as a response carries it."""
        packed = self.packed
        return None if packed is None else any_pb2.Any(type_url=self.type_url, value=packed)


Resources = dict[str, dict[str, Resource]]


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def _socket(address: str, port: int, protocol: ir.Protocol = "TCP") -> address_pb2.Address:
    return address_pb2.Address(
        socket_address=address_pb2.SocketAddress(
            address=address,
            port_value=port,
            protocol=address_pb2.SocketAddress.UDP if protocol == "UDP" else address_pb2.SocketAddress.TCP,
        )
    )


def _route(model: ir.Route) -> route_components_pb2.Route:
    match = route_components_pb2.RouteMatch(
        headers=[
            route_components_pb2.HeaderMatcher(name=name, string_match=string_pb2.StringMatcher(exact=value))
            for name, value in model.headers
        ]
    )
    if model.path_type == "Exact":
        match.path = model.path
    elif model.path.rstrip("/"):
        # Gateway API prefixes match whole path segments: /shop matches /shop and /shop/cart, not /shopping.
        match.path_separated_prefix = model.path.rstrip("/")
    else:
        match.prefix = "/"
    route = route_components_pb2.Route(match=match)
    backends = [b for b in model.backends if b.weight > 0]
    if not backends:
        route.direct_response.status = NO_BACKEND_STATUS
    elif len(backends) == 1:
        route.route.cluster = backends[0].cluster.name
    else:
        route.route.weighted_clusters.clusters.extend(
            route_components_pb2.WeightedCluster.ClusterWeight(
                name=b.cluster.name, weight=wrappers_pb2.UInt32Value(value=b.weight)
            )
            for b in backends
        )
    return route


def _http_connection_manager(unit: ir.Listener, hosts: tuple[ir.VirtualHost, ...]) -> hcm_pb2.HttpConnectionManager:
    return hcm_pb2.HttpConnectionManager(
        stat_prefix=unit.name,
        # Virtual hosts match the Host header without its port, as Gateway API hostnames have none.
        strip_any_host_port=True,
        route_config=http_route_pb2.RouteConfiguration(
            name=unit.name,
            virtual_hosts=[
                route_components_pb2.VirtualHost(
                    name=host.name, domains=list(host.domains), routes=[_route(r) for r in host.routes]
                )
                for host in hosts
            ],
        ),
        http_filters=[hcm_pb2.HttpFilter(name=ROUTER_FILTER, typed_config=_pack(router_pb2.Router()))],
    )


def _tcp_proxy(unit: ir.Listener) -> tcp_proxy_pb2.TcpProxy:
    tcp = tcp_proxy_pb2.TcpProxy(stat_prefix=unit.name)
    backends = [b for b in unit.backends if b.weight > 0]
    if len(backends) == 1:
        tcp.cluster = backends[0].cluster.name
    else:
        tcp.weighted_clusters.clusters.extend(
            tcp_proxy_pb2.TcpProxy.WeightedCluster.ClusterWeight(name=b.cluster.name, weight=b.weight) for b in backends
        )
    return tcp


def listener(unit: ir.Listener, address: str) -> listener_pb2.Listener:
    """The unit's listener on `address`, or on the unit's own bind address: with `freebind`, so that Envoy listens
    on a public address before (or without) it being on the pod's interface."""
    message = _listener(unit)
    message.address.CopyFrom(_listener_address(unit, address))
    return message


def _listener_address(unit: ir.Listener, address: str) -> address_pb2.Address:
    return _socket(unit.bind or address, unit.port, unit.protocol)


def _listener(unit: ir.Listener) -> listener_pb2.Listener:
    """The unit's listener without its address."""
    message = _listener_by_protocol(unit)
    if unit.bind is not None:
        message.freebind.value = True
    return message


def _listener_by_protocol(unit: ir.Listener) -> listener_pb2.Listener:
    if unit.protocol == "UDP":
        route = route_pb2.Route(cluster=unit.cluster.name)
        proxy = udp_proxy_pb2.UdpProxyConfig(
            stat_prefix=unit.name,
            matcher=matcher_pb2.Matcher(
                on_no_match=matcher_pb2.Matcher.OnMatch(
                    action=xds_extension_pb2.TypedExtensionConfig(name="route", typed_config=_pack(route))
                )
            ),
        )
        if unit.cluster.hash_key is not None:
            proxy.hash_policies.add(key=unit.cluster.hash_key)
        if unit.cluster.udp is not None:
            proxy.idle_timeout.CopyFrom(_duration(unit.cluster.udp.idle_timeout_ms))
        return listener_pb2.Listener(
            name=unit.name,
            udp_listener_config=udp_listener_config_pb2.UdpListenerConfig(),
            listener_filters=[listener_components_pb2.ListenerFilter(name=UDP_PROXY_FILTER, typed_config=_pack(proxy))],
        )
    if unit.virtual_hosts is not None:
        name, config = HTTP_CONNECTION_MANAGER_FILTER, _pack(_http_connection_manager(unit, unit.virtual_hosts))
    else:
        name, config = TCP_PROXY_FILTER, _pack(_tcp_proxy(unit))
    return listener_pb2.Listener(
        name=unit.name,
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[listener_components_pb2.Filter(name=name, typed_config=config)]
            )
        ],
    )


def load_assignment(cluster: ir.Cluster) -> endpoint_pb2.ClusterLoadAssignment:
    lb_endpoints = []
    for endpoint in cluster.endpoints:
        config = endpoint_components_pb2.Endpoint(address=_socket(endpoint.address, endpoint.port))
        if endpoint.health_check_port is not None:
            config.health_check_config.port_value = endpoint.health_check_port
        lb_endpoints.append(endpoint_components_pb2.LbEndpoint(endpoint=config))
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=cluster.name,
        endpoints=[endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=lb_endpoints)] if lb_endpoints else [],
    )


def cluster(model: ir.Cluster, dns: DNS) -> cluster_pb2.Cluster:
    result = cluster_pb2.Cluster(
        name=model.name,
        connect_timeout=_duration(CONNECT_TIMEOUT_MS),
        lb_policy=cluster_pb2.Cluster.MAGLEV if model.hash_key is not None else cluster_pb2.Cluster.ROUND_ROBIN,
    )
    if model.discovery == "EDS":
        result.type = cluster_pb2.Cluster.EDS
        result.eds_cluster_config.eds_config.CopyFrom(
            config_source_pb2.ConfigSource(
                ads=config_source_pb2.AggregatedConfigSource(), resource_api_version=config_source_pb2.V3
            )
        )
    else:
        result.type = cluster_pb2.Cluster.STRICT_DNS
        result.dns_lookup_family = cluster_pb2.Cluster.V4_ONLY
        result.load_assignment.CopyFrom(load_assignment(model))
        if dns.resolvers:
            cares = cares_dns_resolver_pb2.CaresDnsResolverConfig(
                resolvers=[_socket(host, port, "UDP") for host, port in dns.resolvers]
            )
            cares.dns_resolver_options.no_default_search_domain = True
            result.typed_dns_resolver_config.CopyFrom(
                extension_pb2.TypedExtensionConfig(name="envoy.network.dns_resolver.cares", typed_config=_pack(cares))
            )
    if model.udp is not None:
        # The UDP proxy counts its sessions against the circuit breaker's max_connections (Envoy's default: 1024);
        # track_remaining adds the gauge circuit_breakers.default.remaining_cx, the headroom left.
        result.circuit_breakers.thresholds.add(
            max_connections=wrappers_pb2.UInt32Value(value=model.udp.max_sessions), track_remaining=True
        )
    check = model.health_check
    if check is not None:
        # Without a panic threshold of 0, Envoy sends to every endpoint once most of them are unhealthy.
        result.common_lb_config.healthy_panic_threshold.value = 0
        # Else Envoy keeps sending to a removed endpoint for as long as it passes health checks.
        result.ignore_health_on_host_removal = True
        result.health_checks.append(
            health_check_pb2.HealthCheck(
                timeout=_duration(check.timeout_ms),
                interval=_duration(check.interval_ms),
                # Envoy's default is 60 s between checks of a cluster that carries no traffic.
                no_traffic_interval=_duration(check.interval_ms),
                unhealthy_threshold=wrappers_pb2.UInt32Value(value=check.unhealthy_threshold),
                healthy_threshold=wrappers_pb2.UInt32Value(value=check.healthy_threshold),
                tcp_health_check=health_check_pb2.HealthCheck.TcpHealthCheck(),
            )
        )
    return result


def _resource(name: str, message: Message, owner: ir.SourceRef) -> Resource:
    packed = message.SerializeToString()  # what Any.Pack stores
    version = hashlib.blake2b(packed, digest_size=8).hexdigest()
    return Resource(name, version, packed, owner, sys.intern(f"type.googleapis.com/{message.DESCRIPTOR.full_name}"))


def listener_data(unit: ir.Listener) -> bytes:
    """The unit's listener without its address, serialised: the part every Envoy's copy shares."""
    data: bytes = _listener(unit).SerializeToString()
    return data


def _listener_resource(owner: ir.SourceRef, unit: ir.Listener, data: bytes, address: str) -> Resource:
    own = listener_pb2.Listener(address=_listener_address(unit, address)).SerializeToString()
    version = hashlib.blake2b(data, digest_size=8)
    version.update(own)
    return Resource(unit.name, version.hexdigest(), data, owner, LISTENER, own)


@functools.lru_cache(maxsize=4096)
def listener_resource(owner: ir.SourceRef, unit: ir.Listener, address: str) -> Resource:
    """The unit's listener on `address`, each with its own bytes: for the units served without the rest of their
    source (ResourceCache keeps those of whole sources, their bytes shared by every Envoy)."""
    return _listener_resource(owner, unit, listener_data(unit), address)


@functools.lru_cache(maxsize=65536)
def cluster_resources(owner: ir.SourceRef, model: ir.Cluster, dns: DNS) -> tuple[Resource, Resource | None]:
    """A cluster and, for EDS, its load assignment: the same on every Envoy, whatever its listener address."""
    eds = _resource(model.name, load_assignment(model), owner) if model.discovery == "EDS" else None
    return _resource(model.name, cluster(model, dns), owner), eds


# What a config's clusters depend on: its served sources (by identity) and its partial units.
_SharedKey = tuple[tuple[int, ...], tuple[tuple[ir.SourceRef, ir.Listener], ...]]


@dataclass(slots=True)
class _Built:
    """One source's resources: its clusters and load assignments, the same on every Envoy, each unit's listener
    serialised without its address (`data`, in the order of the units) and its listeners by listener address;
    `previous` are the listeners of the source's former version, reused where their unit is unchanged."""

    source: ir.Source
    clusters: dict[str, Resource]
    endpoints: dict[str, Resource]
    data: tuple[bytes, ...]
    listeners: dict[str, dict[str, Resource]] = field(default_factory=dict)
    previous: dict[str, dict[str, Resource]] = field(default_factory=dict)


class ResourceCache:
    """The resources of each source for each listener address, built again only when the source changes.

    Clusters and load assignments do not depend on the listener address: every Envoy served the same sources
    gets the very same cluster and endpoint dicts (built once per config), and only its listeners of its own.
    """

    def __init__(self, dns: DNS) -> None:
        self.dns = dns
        self._built: dict[ir.SourceRef, _Built] = {}
        # By what they depend on (the served sources, by identity, and the partial units); the value keeps the
        # sources alive, so that their ids stay theirs. Entries not used between two prunes are dropped.
        self._shared: dict[_SharedKey, tuple[tuple[ir.Source, ...], Resources]] = {}
        self._unused: dict[_SharedKey, tuple[tuple[ir.Source, ...], Resources]] = {}

    def _entry(self, source: ir.Source) -> _Built:
        built = self._built.get(source.ref)
        if built is not None and built.source is source:
            return built
        clusters: dict[str, Resource] = {}
        endpoints: dict[str, Resource] = {}
        for unit in source.units:
            for cluster_resource, eds in cluster_resources_of(source.ref, unit, self.dns):
                clusters.setdefault(cluster_resource.name, cluster_resource)
                if eds is not None:
                    endpoints.setdefault(eds.name, eds)
        former = {} if built is None else {u.name: (u, d) for u, d in zip(built.source.units, built.data, strict=True)}
        data = []
        for unit in source.units:
            old = former.get(unit.name)
            data.append(old[1] if old is not None and old[0] == unit else listener_data(unit))
        previous = {} if built is None else {**built.previous, **built.listeners}
        built = self._built[source.ref] = _Built(source, clusters, endpoints, tuple(data), previous=previous)
        return built

    def listeners(self, source: ir.Source, address: str) -> dict[str, Resource]:
        """The source's listeners on an Envoy whose listener address is `address`."""
        built = self._entry(source)
        listeners = built.listeners.get(address)
        if listeners is None:
            previous = built.previous.get(address, {})
            listeners = built.listeners[address] = {}
            for unit, data in zip(source.units, built.data, strict=True):
                old = previous.get(unit.name)
                if old is None or old.data is not data:
                    old = _listener_resource(source.ref, unit, data, address)
                listeners[unit.name] = old
        return listeners

    def proxy(self, config: ir.ProxyConfig, address: str) -> Resources:
        """Every resource one Envoy is served, by type URL and name."""
        listeners: dict[str, Resource] = {}
        for source in config.served:
            listeners.update(self.listeners(source, address))
        for owner, unit in config.partial:
            listeners[unit.name] = listener_resource(owner, unit, address)
        shared = self._clusters(config)
        return {CLUSTER: shared[CLUSTER], ENDPOINT: shared[ENDPOINT], LISTENER: listeners}

    def _clusters(self, config: ir.ProxyConfig) -> Resources:
        """The clusters and load assignments of `config`, the same objects for every Envoy it is served to."""
        key = (tuple(map(id, config.served)), config.partial)
        entry = self._shared.get(key)
        if entry is None:
            entry = self._unused.pop(key, None)
            if entry is None:
                built: Resources = {CLUSTER: {}, ENDPOINT: {}}
                for source in config.served:
                    source_built = self._entry(source)
                    built[CLUSTER].update(source_built.clusters)
                    built[ENDPOINT].update(source_built.endpoints)
                for owner, unit in config.partial:
                    for cluster_resource, endpoints in cluster_resources_of(owner, unit, self.dns):
                        built[CLUSTER].setdefault(cluster_resource.name, cluster_resource)
                        if endpoints is not None:
                            built[ENDPOINT].setdefault(endpoints.name, endpoints)
                entry = (config.served, built)
            self._shared[key] = entry
        return entry[1]

    def prune(self, live: Iterable[ir.SourceRef]) -> None:
        """Forget the sources that are gone, the listeners replaced since the last prune, and the shared clusters
        no Envoy was given since then."""
        keep = set(live)
        for ref in [ref for ref in self._built if ref not in keep]:
            del self._built[ref]
        for built in self._built.values():
            built.previous = {}
        self._unused, self._shared = self._shared, {}


def cluster_resources_of(owner: ir.SourceRef, unit: ir.Listener, dns: DNS) -> list[tuple[Resource, Resource | None]]:
    """Each cluster of one unit with (for EDS clusters) its load assignment."""
    return [cluster_resources(owner, c, dns) for c in unit.clusters]


def proxy_resources(config: ir.ProxyConfig, address: str, dns: DNS) -> Resources:
    """Every resource one Envoy is served, by type URL and name."""
    return ResourceCache(dns).proxy(config, address)


def to_dict(resource: Resource) -> dict[str, Any]:
    """A resource as Envoy's config dump shows it (proto field names, `@type` on packed messages)."""
    assert resource.body is not None
    result: dict[str, Any] = json.loads(json_format.MessageToJson(resource.body, preserving_proto_field_name=True))
    return result


def dump(resources: Mapping[str, Mapping[str, Resource]]) -> dict[str, list[dict[str, Any]]]:
    """Resources by short type name, each list sorted by resource name: the shape of the golden files."""
    return {
        SHORT_NAMES[type_url]: [to_dict(resources[type_url][name]) for name in sorted(resources[type_url])]
        for type_url in TYPE_ORDER
        if type_url in resources
    }
