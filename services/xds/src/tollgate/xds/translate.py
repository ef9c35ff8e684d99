"""CRs to the intermediate representation, and the IR of every source to what one Envoy is served. No I/O.

- A VirtualService's `selector` picks Envoy pods in its own namespace; `host.selector` picks the Ready pods of
  that namespace whose IPs become endpoints.
- A LoadBalancer's `public-ports` become listeners on its Envoy proxies (pods labelled with its name and
  account), bound to its `public-address` when it has one, each forwarding to the RemoteEndpoints its
  targetPort reaches (`epic.reaches`: same protocol, and the endpoint port's number or name is the target),
  once the allocator has made them Ready.
- Where sources that apply to one Envoy define the same listener name, cluster name or port, the oldest
  source keeps it and the other's unit is left out; both are told (see `Conflict`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tollgate.models import epic
from tollgate.models.epic import LoadBalancer, RemoteEndpoint
from tollgate.models.servicemesh import HealthCheck, UdpListener, VirtualService
from tollgate.xds import ir


@dataclass(frozen=True)
class Pod:
    """What the translation needs of a pod: where it is, its labels, its IP and whether it is Ready."""

    namespace: str
    name: str
    labels: ir.Labels
    ip: str | None
    ready: bool

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Pod:
        meta, status = obj.get("metadata", {}), obj.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        running = status.get("phase") == "Running" and meta.get("deletionTimestamp") is None
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            labels=ir.labels(meta.get("labels")),
            ip=status.get("podIP") or None,
            ready=ready and running,
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


def _ref(metadata: Mapping[str, Any], kind: ir.SourceKind) -> ir.SourceRef:
    return ir.SourceRef(
        created=str(metadata.get("creationTimestamp") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        kind=kind,
    )


def virtual_service(vs: VirtualService, pods: Iterable[Pod]) -> ir.Source:
    """A VirtualService's units; `pods` are those of its namespace (others are ignored)."""
    namespace = vs.namespace or ""
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
                name=listener.name,
                protocol=listener.protocol,
                port=spec.port,
                path=path,
                cluster=ir.Cluster(
                    name=cluster.name,
                    discovery=discovery,
                    endpoints=tuple(endpoints),
                    hash_key=cluster.hash_key,
                    health_check=_health_check(cluster.health_check),
                    udp=_udp_sessions(listener.udp),
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


def load_balancer_selector(lb: LoadBalancer) -> ir.ProxySelector:
    """The proxies of a load balancer carry its name and its account: user namespaces are `epic-<account>`."""
    namespace = lb.namespace or ""
    account = epic.account_of(namespace)
    if account not in (namespace, ""):  # a user namespace
        return ir.ProxySelector(
            namespace=None, match=ir.labels({epic.LOAD_BALANCER_LABEL: lb.name, epic.ACCOUNT_LABEL: account})
        )
    return ir.ProxySelector(namespace=namespace, match=ir.labels({epic.LOAD_BALANCER_LABEL: lb.name}))


def load_balancer_unit_name(lb: LoadBalancer, protocol: str, port: int) -> str:
    return f"{lb.namespace}/{lb.name}/{protocol.lower()}-{port}"


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
                bind=str(lb.spec.public_address) if lb.spec.public_address is not None else None,
                cluster=ir.Cluster(
                    name=name, discovery="EDS", endpoints=upstream, udp=udp if protocol == "UDP" else None
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
            held = clusters.get(unit.cluster.name)
            if held is not None and (held[0] != source.ref or held[2] != unit.cluster):
                conflict(f"cluster name {unit.cluster.name!r}", (held[0], held[1]), source.ref, unit)
                continue
            listener_names[unit.name] = (source.ref, unit.path)
            ports[(unit.protocol, unit.port)] = (source.ref, unit.path)
            clusters.setdefault(unit.cluster.name, (source.ref, unit.path, unit.cluster))
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
    if any(len(claim) != len(s.units) for s in sources for claim in s.claims):
        return False
    for index in range(3):
        claimed = [s.claims[index] for s in sources]
        if len(frozenset[object]().union(*claimed)) != sum(len(c) for c in claimed):
            return False
    return True
