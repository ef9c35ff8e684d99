"""The proxies: LoadBalancer and GWProxy (public address and ports served by Envoys, upstream tunnels), the spec
and status they share, and the RemoteEndpoints registered for a load balancer."""

from __future__ import annotations

from ipaddress import IPv4Address

from pydantic import Field

from tollgate.models import udp
from tollgate.models.base import CustomResource, ResourceInfo, Status, WireModel
from tollgate.models.epic.accounts import DNSEndpoint
from tollgate.models.epic.routes import ClientRef
from tollgate.models.epic.system import (
    AGE_COLUMN,
    DEFAULT_CLUSTER,
    GROUP,
    MAX_TUNNEL_ID,
    READY_COLUMN,
    VERSION,
    GUETunnelEndpoint,
    ServicePort,
    printer_columns,
)
from tollgate.models.gateway import GatewaySpec


class ProxySpec(WireModel):
    display_name: str | None = Field(default=None, alias="display-name", max_length=253)
    service_id: int | None = Field(
        default=None, alias="service-id", ge=1, le=65535, description="Unique within the account; set once."
    )
    public_address: IPv4Address | None = Field(default=None, alias="public-address")
    public_ports: list[ServicePort] = Field(default_factory=list, alias="public-ports")
    service_group: str = Field(alias="service-group", min_length=1, description="The LBServiceGroup to use.")
    endpoints: list[DNSEndpoint] | None = Field(
        default=None,
        max_length=16,
        description="DNS records: set from the group's endpoint-template once the public address is known.",
    )
    envoy_replica_count: int | None = Field(
        default=None,
        alias="envoy-replica-count",
        ge=0,
        le=100,
        description="Envoy replicas; copied from the service group when the object is created, then its own.",
    )


class ProxyStatus(Status):
    gue_tunnel_endpoints: dict[str, GUETunnelEndpoint] = Field(
        default_factory=dict,
        alias="gue-tunnel-endpoints",
        description="Upstream tunnels, by client node address: one per node, shared by its endpoints.",
    )
    proxy_ifindex: int | None = Field(default=None, alias="proxy-ifindex", ge=0)
    proxy_ifname: str | None = Field(default=None, alias="proxy-ifname")
    upstream_clusters: list[str] = Field(
        default_factory=list,
        alias="upstream-clusters",
        description="The client clusters whose endpoints are registered (one unless the group can be shared).",
    )


_PROXY_COLUMNS = printer_columns(
    ("Service-ID", "integer", ".spec.service-id"),
    ("Address", "string", ".spec.public-address"),
    ("Group", "string", ".spec.service-group"),
    READY_COLUMN,
    AGE_COLUMN,
)


class LoadBalancerSpec(ProxySpec):
    udp_max_sessions: int = udp.max_sessions("each UDP public port", "udp-max-sessions")
    udp_idle_timeout: int = udp.idle_timeout("udp-idle-timeout")


class LoadBalancerStatus(ProxyStatus):
    pass


class LoadBalancer(CustomResource[LoadBalancerSpec, LoadBalancerStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="LoadBalancer",
        plural="loadbalancers",
        short_names=["lb"],
        categories=["tollgate", "epic"],
        description="A load balancer: public ports served by Envoy proxies.",
        printer_columns=_PROXY_COLUMNS,
        selectable_fields=[".spec.service-id", ".spec.service-group"],
    )


class GWProxySpec(ProxySpec):
    client_ref: ClientRef | None = Field(default=None, alias="clientRef")
    gateway: GatewaySpec | None = Field(
        default=None, description="The Gateway API GatewaySpec whose listeners this proxy's Envoys serve."
    )


class GWProxyStatus(ProxyStatus):
    pass


class GWProxy(CustomResource[GWProxySpec, GWProxyStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="GWProxy",
        plural="gwproxies",
        short_names=["gwp"],
        categories=["tollgate", "epic"],
        description="A Gateway API proxy: a load balancer driven by a Gateway.",
        printer_columns=_PROXY_COLUMNS,
        selectable_fields=[".spec.service-group"],
    )


class RemoteEndpointSpec(WireModel):
    load_balancer: str = Field(alias="load-balancer", min_length=1, description="LoadBalancer in this namespace.")
    address: IPv4Address = Field(description="The upstream endpoint's address.")
    port: ServicePort
    node_address: IPv4Address | None = Field(
        default=None, alias="node-address", description="Address of the node the endpoint runs on."
    )
    cluster: str = Field(
        default=DEFAULT_CLUSTER,
        min_length=1,
        max_length=253,
        description="The client cluster that registered the endpoint.",
    )


class RemoteEndpointStatus(Status):
    tunnel_id: int | None = Field(
        default=None,
        alias="tunnel-id",
        ge=1,
        le=MAX_TUNNEL_ID,
        description="The tunnel of the endpoint's node (unset for an endpoint without node-address).",
    )


class RemoteEndpoint(CustomResource[RemoteEndpointSpec, RemoteEndpointStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="RemoteEndpoint",
        plural="remoteendpoints",
        short_names=["rep"],
        categories=["tollgate", "epic"],
        description="An upstream endpoint (address, port, protocol) registered for a load balancer.",
        selectable_fields=[".spec.load-balancer"],
        printer_columns=printer_columns(
            ("LoadBalancer", "string", ".spec.load-balancer"),
            ("Address", "string", ".spec.address"),
            ("Port", "integer", ".spec.port.port"),
            ("Protocol", "string", ".spec.port.protocol"),
            ("Node", "string", ".spec.node-address"),
            ("Tunnel-ID", "integer", ".status.tunnel-id"),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )
