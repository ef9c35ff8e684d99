"""Registered endpoints and their tunnels.

RemoteEndpoint objects are the record, one per (load balancer, address, port, protocol). Tunnels are EPIC's:
one tunnel ID per (proxy object, client node address), recorded in the status `gue-tunnel-endpoints` of the
LoadBalancer or GWProxy under the node address (`node_tunnels`). A load balancer's client nodes are those of its
RemoteEndpoints (`registrations`); a GWProxy's are the `nodeAddresses` of the GWEndpointSlices its GWRoutes reach
(`gateways`). A load balancer also records the client clusters it serves (`clusters`). Only the objects within their
Account's limit get tunnels (`limits`).

The node entry is written with the object's resourceVersion (409 Conflict when someone wrote first), so whoever
records one node at once, on any allocator replica, ends up with one tunnel ID. Whoever removes an entry, and
whoever relies on one, checks again afterwards: the two converge (see `Registrations.ensure_tunnel`,
`Registrations.forget` and `Gateways.converge`). A released ID is never handed out again. The registration APIs
and the handlers share this one path, for both kinds.
"""

from __future__ import annotations

from tollgate.allocator.k8s import Kube
from tollgate.allocator.registry.clusters import ClientClusters
from tollgate.allocator.registry.gateways import Gateways
from tollgate.allocator.registry.limits import AccountLimits
from tollgate.allocator.registry.node_tunnels import NodeTunnels
from tollgate.allocator.registry.registrations import Registrations
from tollgate.allocator.tunnels import EpicSingleton, TunnelIDs
from tollgate.models.addresses import EndpointPolicy
from tollgate.models.epic import GUEEndpoint


class Registry:
    """The registry's parts, built and wired once; callers use the part they need."""

    def __init__(
        self,
        kube: Kube,
        ids: TunnelIDs,
        epic: EpicSingleton,
        default_gue: GUEEndpoint,
        policy: EndpointPolicy | None = None,
    ) -> None:
        self.kube = kube
        self.ids = ids
        self.epic = epic
        self.policy = policy or EndpointPolicy()
        self.node_tunnels = NodeTunnels(kube, ids, epic, default_gue)
        self.clusters = ClientClusters(kube, ids.metrics)
        self.limits = AccountLimits(kube, ids.metrics)
        self.registrations = Registrations(
            kube, self.policy, ids.metrics, self.node_tunnels, self.clusters, self.limits
        )
        self.gateways = Gateways(kube, self.policy, self.node_tunnels, self.limits)
