"""What the handlers do, one part per kind: accounts and their user namespaces, load balancers (service IDs and
conditions), what load balancers and GWProxies share (public addresses, DNS endpoints, Envoy proxies), GWProxies and
their tunnels, service groups, and RemoteEndpoint events."""

from __future__ import annotations

from opentelemetry import trace

from tollgate.allocator.addresses import PublicAddresses
from tollgate.allocator.k8s import Kube
from tollgate.allocator.reconcile.accounts import Accounts
from tollgate.allocator.reconcile.groups import ServiceGroups
from tollgate.allocator.reconcile.gwproxies import GWProxies
from tollgate.allocator.reconcile.load_balancers import LoadBalancers
from tollgate.allocator.reconcile.proxies import Proxies
from tollgate.allocator.reconcile.remote_endpoints import RemoteEndpoints
from tollgate.allocator.registry import Registry
from tollgate.allocator.tunnels import Metrics


class Reconciler:
    """The parts, built and wired once; each handler calls the part of its kind."""

    def __init__(
        self, kube: Kube, registry: Registry, metrics: Metrics, tracer: trace.Tracer, xds_address: str
    ) -> None:
        shared = (kube, registry, metrics, tracer)
        self.remote_endpoints = RemoteEndpoints(*shared)
        self.proxies = Proxies(*shared, PublicAddresses(kube, metrics), xds_address)
        self.load_balancers = LoadBalancers(*shared, self.proxies, self.remote_endpoints)
        self.gwproxies = GWProxies(*shared, self.proxies)
        self.groups = ServiceGroups(*shared, self.load_balancers, self.gwproxies)
        self.accounts = Accounts(*shared, self.load_balancers, self.remote_endpoints, self.gwproxies)
