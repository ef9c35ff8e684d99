"""CRs to the intermediate representation, and the IR of every source to what one Envoy is served. No I/O.

- A VirtualService's `selector` picks Envoy pods in its own namespace; `host.selector` picks the Ready pods of
  that namespace whose IPs become endpoints. Its `host.address`es follow the endpoint address policy
  (tollgate.models.addresses), as at admission: one it refuses leaves the whole VirtualService out.
- A LoadBalancer's `public-ports` become listeners on its Envoy proxies (pods labelled with its name and
  account), bound to its `public-address` when it has one, each forwarding to the RemoteEndpoints its
  targetPort reaches (`epic.reaches`: same protocol, and the endpoint port's number or name is the target),
  once the allocator has made them Ready.
- A GWProxy's Gateway listeners become listeners on its Envoy proxies (pods labelled with its name and account),
  bound to its `public-address` when it has one:
  an HTTP listener routes by host, path and headers to the backends of the GWRoutes attached to it, a TCP
  listener forwards to its TCP route's backends. A backendRef named N reaches the Ready endpoints of the
  GWEndpointSlices whose `spec.parentRef.uid` is N (EPIC's glue), at the slice port numbered like the backendRef's
  port, else the slice's first TCP port.
- Envoy names are qualified by the source: `<namespace>/<object>/<name>` (`envoy_name`), so a VirtualService's
  listener and cluster names only need to be unique within it; listeners of two sources can still meet on a port.
- Where sources that apply to one Envoy define the same listener name, cluster name or port, the oldest
  source keeps it and the other's unit is left out; both are told (see `Conflict`).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tollgate.models import epic
from tollgate.models.addresses import DEFAULT_POLICY, EndpointPolicy
from tollgate.models.epic import GWEndpointSlice, GWProxy, GWRoute, LoadBalancer, RemoteEndpoint
from tollgate.models.gateway import (
    BackendRef,
    EndpointPort,
    GatewayListener,
    GatewaySpec,
    HTTPRouteMatch,
    HTTPRouteSpec,
    named_listeners,
)
from tollgate.models.servicemesh import MAX_ENVOY_NAME, HealthCheck, UdpListener, VirtualService
from tollgate.xds import ir

NAME_HASH_LENGTH = 12


@dataclass(frozen=True)
class Pod:
    """What the translation (and the identity check) needs of a pod: where it is, its labels, its IPs and whether it
    is Ready."""

    namespace: str
    name: str
    labels: ir.Labels
    ip: str | None
    ready: bool
    ips: tuple[str, ...] = ()
    uid: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Pod:
        meta, status = obj.get("metadata", {}), obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        running = status.get("phase") == "Running" and meta.get("deletionTimestamp") is None
        ips = (status.get("podIP"), *(entry.get("ip") for entry in status.get("podIPs") or ()))
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            labels=ir.labels(meta.get("labels")),
            ip=status.get("podIP") or None,
            ready=ready and running,
            ips=tuple(dict.fromkeys(str(ip) for ip in ips if ip)),
            uid=str(meta.get("uid") or ""),
        )


def matches(selector: ir.Labels, pod_labels: ir.Labels) -> bool:
    have = dict(pod_labels)
    return all(have.get(key) == value for key, value in selector)


def is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True


def _health_check(model: HealthCheck | None) -> ir.HealthCheck | None:
    if model is None:
        return None
    return ir.HealthCheck(
        interval_ms=model.interval,
        timeout_ms=model.timeout,
        unhealthy_threshold=model.unhealthy_threshold,
        healthy_threshold=model.healthy_threshold,
    )


def _udp_sessions(model: UdpListener | None) -> ir.UdpSessions | None:
    return None if model is None else ir.UdpSessions(model.max_sessions, model.idle_timeout)


def envoy_name(namespace: str, owner: str, name: str) -> str:
    """The Envoy name of an object's listener or cluster `name`: `<namespace>/<object>/<name>`, which no other
    object of its kind can have (namespaces and object names hold no `/`). Past MAX_ENVOY_NAME characters (stats
    names carry it), its start and a hash of the whole: deterministic, so it is the same after a restart."""
    full = f"{namespace}/{owner}/{name}"
    if len(full) <= MAX_ENVOY_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:NAME_HASH_LENGTH]
    return f"{full[: MAX_ENVOY_NAME - NAME_HASH_LENGTH - 1]}~{digest}"


def _ref(metadata: Mapping[str, Any], kind: ir.SourceKind) -> ir.SourceRef:
    return ir.SourceRef(
        created=str(metadata.get("creationTimestamp") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        kind=kind,
    )


def virtual_service(vs: VirtualService, pods: Iterable[Pod], policy: EndpointPolicy = DEFAULT_POLICY) -> ir.Source:
    """A VirtualService's units; `pods` are those of its namespace (others are ignored). One whose endpoint
    addresses `policy` refuses (one that got past a down webhook) is served to no Envoy."""
    namespace = vs.namespace or ""
    refusals = policy.refusals(vs.spec.endpoint_hosts(), hosts=True)
    if refusals:
        return ir.Source(
            ref=_ref(vs.metadata, "VirtualService"),
            generation=vs.generation or 0,
            selector=ir.NO_PROXIES,
            units=(),
            refusals=tuple(map(str, refusals)),
        )
    ready = sorted(
        (p for p in pods if p.namespace == namespace and p.ready and p.ip), key=lambda p: (p.ip or "", p.name)
    )
    units: list[ir.Listener] = []
    errors: list[str] = []
    for index, listener in enumerate(vs.spec.listeners):
        path = f"spec.listeners[{index}]"
        spec = listener.port_listener
        cluster = spec.cluster
        discovery: ir.Discovery = "EDS" if cluster.service_discovery == "eds" else "STRICT_DNS"
        endpoints: list[ir.Endpoint] = []
        unit_errors: list[str] = []
        for number, endpoint in enumerate(cluster.endpoints):
            where = f"{path}.{listener.protocol.lower()}.cluster.endpoints[{number}]"
            if endpoint.host.selector is not None:
                selector = ir.labels(endpoint.host.selector)
                addresses = [p.ip for p in ready if p.ip and matches(selector, p.labels)]
            else:
                address = endpoint.host.address or ""
                if discovery == "EDS" and not is_ip(address):
                    unit_errors.append(
                        f"{where}.host.address: {address!r} is a DNS name, but service_discovery eds takes "
                        "IP addresses and pod selectors (use strictdns to resolve names)"
                    )
                    continue
                addresses = [address]
            for address in addresses:
                candidate = ir.Endpoint(address, endpoint.port, endpoint.health_check_port)
                if candidate not in endpoints:
                    endpoints.append(candidate)
        if unit_errors:
            errors.extend(unit_errors)
            continue
        units.append(
            ir.Listener(
                name=envoy_name(namespace, vs.name, listener.name),
                spec_name=listener.name,
                protocol=listener.protocol,
                port=spec.port,
                path=path,
                backends=(
                    ir.Backend(
                        ir.Cluster(
                            name=envoy_name(namespace, vs.name, cluster.name),
                            spec_name=cluster.name,
                            discovery=discovery,
                            endpoints=tuple(endpoints),
                            hash_key=cluster.hash_key,
                            health_check=_health_check(cluster.health_check),
                            udp=_udp_sessions(listener.udp),
                        )
                    ),
                ),
            )
        )
    return ir.Source(
        ref=_ref(vs.metadata, "VirtualService"),
        generation=vs.generation or 0,
        selector=ir.ProxySelector(namespace=namespace, match=ir.labels(vs.spec.selector)),
        units=tuple(units),
        errors=tuple(errors),
    )


def _proxies_of(label: str, name: str, namespace: str) -> ir.ProxySelector:
    """The Envoy pods of an EPIC proxy carry its name and its account: user namespaces are `epic-<account>`."""
    account = epic.account_of(namespace)
    if account not in (namespace, ""):  # a user namespace
        return ir.ProxySelector(namespace=None, match=ir.labels({label: name, epic.ACCOUNT_LABEL: account}))
    return ir.ProxySelector(namespace=namespace, match=ir.labels({label: name}))


def load_balancer_selector(lb: LoadBalancer) -> ir.ProxySelector:
    return _proxies_of(epic.LOAD_BALANCER_LABEL, lb.name, lb.namespace or "")


def gw_proxy_selector(proxy: GWProxy) -> ir.ProxySelector:
    return _proxies_of(epic.GWPROXY_LABEL, proxy.name, proxy.namespace or "")


def load_balancer_unit_name(lb: LoadBalancer, protocol: str, port: int) -> str:
    return envoy_name(lb.namespace or "", lb.name, f"{protocol.lower()}-{port}")


def _accepted(endpoint: RemoteEndpoint) -> bool:
    """The allocator has accepted the endpoint (its tunnel is recorded, or it is an ad-hoc one): Ready is True."""
    ready = endpoint.status.condition("Ready") if endpoint.status is not None else None
    return ready is not None and ready.status == "True"


def load_balancer(lb: LoadBalancer, endpoints: Iterable[RemoteEndpoint]) -> ir.Source:
    """A listener per public port, to the accepted endpoints (Ready) that its targetPort reaches."""
    registered = sorted(
        (e for e in endpoints if e.namespace == lb.namespace and e.spec.load_balancer == lb.name and _accepted(e)),
        key=lambda e: (int(e.spec.address), e.spec.port.port),
    )
    units: list[ir.Listener] = []
    errors: list[str] = []
    udp = ir.UdpSessions(lb.spec.udp_max_sessions, lb.spec.udp_idle_timeout)
    for index, port in enumerate(lb.spec.public_ports):
        path = f"spec.public-ports[{index}]"
        if port.protocol not in ("TCP", "UDP"):
            errors.append(f"{path}.protocol: {port.protocol} is not supported by the Envoy proxies (TCP or UDP)")
            continue
        protocol: ir.Protocol = "UDP" if port.protocol == "UDP" else "TCP"
        name = load_balancer_unit_name(lb, protocol, port.port)
        upstream = tuple(
            dict.fromkeys(
                ir.Endpoint(str(e.spec.address), e.spec.port.port)
                for e in registered
                if epic.reaches(port, e.spec.port)
            )
        )
        units.append(
            ir.Listener(
                name=name,
                protocol=protocol,
                port=port.port,
                path=path,
                bind=public_address(lb),
                backends=(
                    ir.Backend(
                        ir.Cluster(
                            name=name, discovery="EDS", endpoints=upstream, udp=udp if protocol == "UDP" else None
                        )
                    ),
                ),
            )
        )
    return ir.Source(
        ref=_ref(lb.metadata, "LoadBalancer"),
        generation=lb.generation or 0,
        selector=load_balancer_selector(lb),
        units=tuple(units),
        errors=tuple(errors),
    )


def _slice_port(ports: Iterable[EndpointPort], wanted: int | None) -> int | None:
    """The port of a slice a backendRef reaches: the TCP port numbered like the backendRef's port, else the first."""
    numbers = [p.port for p in ports if p.protocol == "TCP" and p.port is not None]
    return wanted if wanted in numbers else next(iter(numbers), None)


def _backend(proxy: GWProxy, ref: BackendRef, slices: Iterable[GWEndpointSlice]) -> ir.Backend:
    """A backendRef as a weighted EDS cluster of the Ready endpoints of the slices whose parentRef.uid it names."""
    name = envoy_name(proxy.namespace or "", proxy.name, ref.name + (f":{ref.port}" if ref.port is not None else ""))
    endpoints: list[ir.Endpoint] = []
    for slice_ in slices:
        port = _slice_port(slice_.spec.ports, ref.port)
        if slice_.spec.parent_ref.uid != ref.name or port is None:
            continue
        for endpoint in slice_.spec.endpoints:
            if endpoint.ready:
                endpoints.extend(ir.Endpoint(a, port) for a in endpoint.addresses if is_ip(a))
    cluster = ir.Cluster(name=name, discovery="EDS", endpoints=tuple(dict.fromkeys(endpoints)))
    return ir.Backend(cluster, ref.weight)


def _attaches(route: GWRoute, proxy: GWProxy, listener: GatewayListener) -> bool:
    return any(
        parent.name == proxy.name
        and parent.namespace in (None, proxy.namespace)
        and listener in named_listeners(parent, [listener])
        for parent in route.spec.parent_refs
    )


def _wildcard_covers(pattern: str, hostname: str) -> bool:
    return pattern.startswith("*.") and hostname.endswith(pattern[1:]) and hostname != pattern


def _hostnames(listener: str | None, route: list[str]) -> list[str]:
    """The hosts a route serves on a listener (the Gateway API's intersection, the more specific name of each
    matching pair); "*" for every host; empty when the route does not attach to the listener."""
    if not route:
        return [listener or "*"]
    if listener is None:
        return list(route)
    matched = []
    for hostname in route:
        if hostname == listener or _wildcard_covers(listener, hostname):
            matched.append(hostname)
        elif _wildcard_covers(hostname, listener):
            matched.append(listener)
    return list(dict.fromkeys(matched))


def _precedence(match: HTTPRouteMatch) -> tuple[int, int, int]:
    """The Gateway API's order among matches: exact paths, then the longest prefix, then the most headers."""
    path = match.path
    return (0 if path.type == "Exact" else 1, -len(path.value), -len(match.headers))


def _virtual_hosts(
    proxy: GWProxy,
    listener: GatewayListener,
    routes: list[HTTPRouteSpec],
    slices: list[GWEndpointSlice],
) -> tuple[ir.VirtualHost, ...]:
    """One virtual host per hostname; a route without hostnames serves every host, so its rules join every virtual
    host of the listener. Within a host, routes are in the Gateway API's precedence (the catch-all `/` last), ties
    kept in route age and rule order."""
    by_host: dict[str, list[tuple[tuple[int, int, int], ir.Route]]] = defaultdict(list)
    for http in routes:
        entries = [
            (
                _precedence(match),
                ir.Route(
                    path_type=match.path.type,
                    path=match.path.value,
                    headers=tuple((h.name, h.value) for h in match.headers),
                    backends=tuple(_backend(proxy, ref, slices) for ref in rule.backend_refs),
                ),
            )
            for rule in http.rules
            for match in rule.matches
        ]
        for hostname in _hostnames(listener.hostname, http.hostnames):
            by_host[hostname].extend(entries)
    every = by_host.get("*", [])
    hosts = [
        ir.VirtualHost(
            name=hostname,
            domains=(hostname,),
            routes=tuple(r for _, r in sorted(entries + (every if hostname != "*" else []), key=lambda e: e[0])),
        )
        for hostname, entries in sorted(by_host.items(), key=lambda item: (item[0] == "*", item[0]))
    ]
    return tuple(hosts)


def public_address(obj: LoadBalancer | GWProxy) -> str | None:
    """Where the object's listeners listen: its public address, when it has one (else the Envoy's own)."""
    return str(obj.spec.public_address) if obj.spec.public_address is not None else None


def gw_proxy(proxy: GWProxy, routes: Iterable[GWRoute], slices: Iterable[GWEndpointSlice]) -> ir.Source:
    """A listener per Gateway listener: HTTP ones route by host, path and headers, TCP ones forward to the oldest
    TCP route attached; a TCP listener no route reaches is left out. `routes` and `slices` are of its namespace."""
    ordered = sorted(routes, key=lambda r: (str(r.metadata.get("creationTimestamp") or ""), r.name))
    slices = sorted(slices, key=lambda s: s.name)
    units: list[ir.Listener] = []
    errors: list[str] = []
    attached: set[str] = set()
    bind = public_address(proxy)
    for index, listener in enumerate((proxy.spec.gateway or GatewaySpec()).listeners):
        path = f"spec.gateway.listeners[{index}]"
        name = envoy_name(proxy.namespace or "", proxy.name, listener.name)
        if listener.protocol == "HTTP":
            http: list[HTTPRouteSpec] = []
            for route in ordered:
                spec = route.spec.http
                if (
                    spec is not None
                    and _attaches(route, proxy, listener)
                    and _hostnames(listener.hostname, spec.hostnames)
                ):
                    attached.add(route.name)
                    http.append(spec)
            hosts = _virtual_hosts(proxy, listener, http, slices)
            units.append(
                ir.Listener(name, "TCP", listener.port, backends=(), virtual_hosts=hosts, path=path, bind=bind)
            )
            continue
        tcp = [r for r in ordered if r.spec.tcp is not None and _attaches(r, proxy, listener)]
        attached.update(r.name for r in tcp)
        for later in tcp[1:]:
            errors.append(
                f"{path}: GWRoute {later.name} is not served: TCP listener {listener.name!r} forwards to the oldest "
                f"TCP route attached to it, GWRoute {tcp[0].name}"
            )
        if tcp and tcp[0].spec.tcp is not None:
            refs = [ref for rule in tcp[0].spec.tcp.rules for ref in rule.backend_refs]
            backends = tuple(_backend(proxy, ref, slices) for ref in refs)
            if any(b.weight > 0 for b in backends):
                units.append(ir.Listener(name, "TCP", listener.port, backends=backends, path=path, bind=bind))
    for route in ordered:
        if route.name not in attached and any(p.name == proxy.name for p in route.spec.parent_refs):
            errors.append(
                f"GWRoute {route.name} names this GWProxy but attaches to none of its listeners (parentRefs' "
                "sectionName and port, the listener's protocol and hostname)"
            )
    return ir.Source(
        ref=_ref(proxy.metadata, "GWProxy"),
        generation=proxy.generation or 0,
        selector=gw_proxy_selector(proxy),
        units=tuple(units),
        errors=tuple(errors),
    )


def selects(selector: ir.ProxySelector, proxy: ir.Proxy) -> bool:
    if selector.namespace is not None and selector.namespace != proxy.namespace:
        return False
    return matches(selector.match, proxy.labels)


def proxy_config(proxy: ir.Proxy, sources: Iterable[ir.Source]) -> ir.ProxyConfig:
    """The units one Envoy is served, oldest source first; a later unit that reuses a name or port is left out."""
    chosen = sorted(
        (s for s in sources if selects(s.selector, proxy)),
        key=lambda s: (s.ref.created, s.ref.namespace, s.ref.name, s.ref.kind),
    )
    refs = tuple(s.ref for s in chosen)
    if _disjoint(chosen):
        return ir.ProxyConfig(served=tuple(chosen), sources=refs)
    listener_names: dict[str, tuple[ir.SourceRef, str]] = {}
    ports: dict[tuple[str, int], tuple[ir.SourceRef, str]] = {}
    clusters: dict[str, tuple[ir.SourceRef, str, ir.Cluster]] = {}
    kept: dict[ir.SourceRef, list[ir.Listener]] = {}
    conflicts: list[ir.Conflict] = []

    def conflict(what: str, holder: tuple[ir.SourceRef, str], ref: ir.SourceRef, unit: ir.Listener) -> None:
        winner, winner_path = holder
        if winner == ref:
            what = f"{what} (in {winner_path})"
        conflicts.append(ir.Conflict(proxy.node_id, what, winner, ref, unit.path))

    for source in chosen:
        for unit in source.units:
            if (holder := listener_names.get(unit.name)) is not None:
                conflict(f"listener name {unit.name!r}", holder, source.ref, unit)
                continue
            if (holder := ports.get((unit.protocol, unit.port))) is not None:
                conflict(f"{unit.protocol} port {unit.port}", holder, source.ref, unit)
                continue
            taken = next(
                (
                    (cluster, held)
                    for cluster in unit.clusters
                    if (held := clusters.get(cluster.name)) is not None
                    and (held[0] != source.ref or held[2] != cluster)
                ),
                None,
            )
            if taken is not None:
                cluster, held = taken
                conflict(f"cluster name {cluster.name!r}", (held[0], held[1]), source.ref, unit)
                continue
            listener_names[unit.name] = (source.ref, unit.path)
            ports[(unit.protocol, unit.port)] = (source.ref, unit.path)
            for cluster in unit.clusters:
                clusters.setdefault(cluster.name, (source.ref, unit.path, cluster))
            kept.setdefault(source.ref, []).append(unit)
    whole = tuple(s for s in chosen if len(kept.get(s.ref, ())) == len(s.units))
    partial = tuple(
        (s.ref, unit) for s in chosen if len(kept.get(s.ref, ())) != len(s.units) for unit in kept.get(s.ref, ())
    )
    return ir.ProxyConfig(served=whole, partial=partial, conflicts=tuple(conflicts), sources=refs)


def _disjoint(sources: list[ir.Source]) -> bool:
    """No two units of these sources share a listener name, a port or a cluster name (the usual case, checked fast).

    A source that reuses a name or a port itself, even for one identical cluster, takes the unit-by-unit path.
    """
    if not all(s.self_disjoint for s in sources):
        return False
    for index in range(3):
        claimed = [s.claims[index] for s in sources]
        if len(frozenset[object]().union(*claimed)) != sum(len(c) for c in claimed):
            return False
    return True
