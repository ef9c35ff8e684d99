"""`epic.acnodal.io/v1`: the EPIC data model (seeds/epic-operator.md). Wire names are kebab-case."""

from __future__ import annotations

import re
from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from tollgate.models import udp
from tollgate.models.addresses import AccountRanges, parse_range, parse_ranges
from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, exactly_one
from tollgate.models.gateway import Endpoint, EndpointPort, GatewaySpec, HTTPRouteSpec, ParentReference, TCPRouteSpec

GROUP = "epic.acnodal.io"
VERSION = "v1"
SYSTEM_NAMESPACE = "epic"
SINGLETON_NAME = "epic"
PRODUCT_NAME = "epic"
USER_NAMESPACE_LABEL = "epic.acnodal.io/user-namespace"
ACCOUNT_LABEL = "epic.acnodal.io/account"
# On a user namespace that tollgate created (epicctl create user-namespace), the account it was made for: only such
# a namespace goes with its Account; one a user made keeps everything tollgate did not create.
NAMESPACE_CREATED_FOR = "tollgate.io/created-for-account"
LOAD_BALANCER_LABEL = "epic.acnodal.io/load-balancer"
GWPROXY_LABEL = "epic.acnodal.io/gwproxy"
DEFAULT_PROXY_LIMIT = 20
DEFAULT_LOAD_BALANCER_LIMIT = 100
GUE_PORT = 6080
DEFAULT_CLUSTER = "default"
MAX_TUNNEL_ID = 2**32 - 1
# An account's credentials for the registration API: this Secret in its user namespace, the token under this key.
# The account is the Secret's namespace (epicctl credentials create|rotate mints it; the allocator watches it).
AGENT_CREDENTIALS_SECRET = "tollgate-agent-credentials"
AGENT_TOKEN_KEY = "token"
# The account's users of EPIC's REST API (HTTP Basic): an htpasswd file of bcrypt hashes under this key of this
# Secret in its user namespace, as EPIC keeps it (epicctl create|delete user writes it; tollgate.runtime.htpasswd
# reads it).
API_USERS_SECRET = "api-users"
API_USERS_KEY = "auth"


def account_namespace(account: str) -> str:
    """The user namespace of an account: the product name and a dash before the account's name."""
    return f"{PRODUCT_NAME}-{account}"


def account_of(namespace: str) -> str:
    """The account whose user namespace `namespace` is; a namespace that is not one stands for itself."""
    return namespace.removeprefix(account_namespace(""))


def _columns(*columns: tuple[str, str, str]) -> list[PrinterColumn]:
    return [PrinterColumn(name=n, type=t, json_path=p) for n, t, p in columns]


_AGE = ("Age", "date", ".metadata.creationTimestamp")
_READY = ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status')


class ServicePort(WireModel):
    """A port as in a core/v1 Service."""

    name: str | None = Field(default=None, max_length=63)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    app_protocol: str | None = Field(default=None, alias="appProtocol")
    port: int = Field(ge=1, le=65535, description="The port number.")
    target_port: int | str | None = Field(default=None, alias="targetPort")
    node_port: int | None = Field(default=None, alias="nodePort", ge=1, le=65535)


def target_of(public: ServicePort) -> int | str:
    """Where a public port sends its traffic: its targetPort (a number, or the name of an endpoint port), else
    its own number. A string of digits is a number."""
    target = public.target_port
    if target is None:
        return public.port
    if isinstance(target, str) and target.isdigit():
        return int(target)
    return target


def reaches(public: ServicePort, endpoint: ServicePort) -> bool:
    """Whether a public port's traffic goes to an endpoint port, as a Kubernetes Service picks endpoint ports:
    the same protocol, and the endpoint's number (or, for a named targetPort, its name) is the target."""
    if public.protocol != endpoint.protocol:
        return False
    target = target_of(public)
    return endpoint.name == target if isinstance(target, str) else endpoint.port == target


def gue_port() -> ServicePort:
    return ServicePort(port=GUE_PORT, protocol="UDP", app_protocol="gue")


class GUEEndpoint(WireModel):
    """Where an upstream tunnel terminates on the EPIC side."""

    epic_address: IPv4Address = Field(alias="epic-address")
    epic_port: ServicePort = Field(default_factory=gue_port, alias="epic-port")


class GUETunnelEndpoint(GUEEndpoint):
    tunnel_id: int = Field(alias="tunnel-id", ge=1, le=MAX_TUNNEL_ID)


# The variables of an LBServiceGroup's `endpoint-template` dnsName, as EPIC's Go templates name them, and
# tollgate's `{{.Account}}`.
DNS_TEMPLATE_VARIABLES = ("LBName", "LBSGName", "PureLBServiceName", "Account")
DNS_TEMPLATE_VARIABLE = re.compile(r"\{\{\s*\.([A-Za-z]+)\s*\}\}")
DEFAULT_DNS_NAME = "{{.LBName}}.{{.LBSGName}}.{{.Account}}.epic.internal"


def render_dns_name(template: str, variables: dict[str, str]) -> str:
    """A dnsName template with its `{{.Variable}}`s filled in (EPIC's `AddDNSEndpoint`)."""
    return DNS_TEMPLATE_VARIABLE.sub(lambda match: variables[match.group(1)], template)


def _known_variables(template: str) -> str:
    unknown = sorted({v for v in DNS_TEMPLATE_VARIABLE.findall(template) if v not in DNS_TEMPLATE_VARIABLES})
    if unknown:
        raise ValueError(
            f"names unknown variables {', '.join(unknown)}: a dnsName template may use "
            + ", ".join(f"{{{{.{v}}}}}" for v in DNS_TEMPLATE_VARIABLES)
        )
    if "{{" in DNS_TEMPLATE_VARIABLE.sub("", template):
        raise ValueError("has a {{ that is not a {{.Variable}}")
    return template


class ProviderSpecificProperty(WireModel):
    name: str = Field(max_length=253)
    value: str = Field(max_length=4096)


class DNSEndpoint(WireModel):
    """A DNS record of a load balancer or GWProxy: external-dns's Endpoint, as EPIC embeds it."""

    dns_name: str = Field(default="", alias="dnsName", max_length=253)
    targets: list[str] = Field(default_factory=list, max_length=16)
    record_type: str = Field(default="A", alias="recordType", max_length=16)
    set_identifier: str | None = Field(default=None, alias="setIdentifier", max_length=253)
    record_ttl: int | None = Field(default=None, alias="recordTTL", ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    provider_specific: list[ProviderSpecificProperty] = Field(
        default_factory=list, alias="providerSpecific", max_length=16
    )


class DNSEndpointTemplate(DNSEndpoint):
    dns_name: Annotated[str, AfterValidator(_known_variables)] = Field(
        default=DEFAULT_DNS_NAME,
        alias="dnsName",
        max_length=253,
        description="A template: {{.LBName}} (the object's name), {{.LBSGName}} (the group's), "
        "{{.PureLBServiceName}} (its display-name) and {{.Account}} are filled in.",
    )


class TunnelIDBlock(WireModel):
    """A contiguous range of tunnel IDs reserved by one allocator replica."""

    owner: str = Field(min_length=1, description="Identity of the allocator that reserved the block.")
    first: int = Field(ge=1, le=MAX_TUNNEL_ID)
    last: int = Field(ge=1, le=MAX_TUNNEL_ID)
    reserved_at: str | None = Field(default=None, alias="reserved-at")

    @model_validator(mode="after")
    def _ordered(self) -> TunnelIDBlock:
        if self.last < self.first:
            raise ValueError(f"last ({self.last}) must not be below first ({self.first})")
        return self


class EPICSpec(WireModel):
    gue_endpoint: GUEEndpoint | None = Field(
        default=None, alias="gue-endpoint", description="Where upstream GUE tunnels terminate."
    )
    tunnel_id_block_size: int = Field(
        default=64,
        alias="tunnel-id-block-size",
        ge=1,
        le=65536,
        description="How many tunnel IDs an allocator reserves per write to this object.",
    )


class EPICStatus(Status):
    current_tunnel_id: int = Field(
        default=0,
        alias="current-tunnel-id",
        ge=0,
        le=MAX_TUNNEL_ID,
        description="The most recent tunnel ID handed out (or reserved in a block).",
    )
    tunnel_id_blocks: list[TunnelIDBlock] = Field(default_factory=list, alias="tunnel-id-blocks")


class EPIC(CustomResource[EPICSpec, EPICStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="EPIC",
        plural="epics",
        short_names=["ec"],
        categories=["tollgate", "epic"],
        description="The EPIC configuration singleton, epic/epic.",
        printer_columns=_columns(("Tunnel-ID", "integer", ".status.current-tunnel-id"), _AGE),
    )


EndpointRange = Annotated[str, AfterValidator(lambda value: str(parse_range(value)))]


class AccountSpec(WireModel):
    display_name: str | None = Field(default=None, alias="display-name", max_length=253)
    proxy_limit: int = Field(
        default=DEFAULT_PROXY_LIMIT,
        alias="proxyLimit",
        ge=0,
        description="Most GWProxies the account may have (checked when one is created).",
    )
    load_balancer_limit: int = Field(
        default=DEFAULT_LOAD_BALANCER_LIMIT,
        alias="loadBalancerLimit",
        ge=0,
        description="Most LoadBalancers the account may have (checked when one is created).",
    )
    allowed_endpoint_ranges: list[EndpointRange] | None = Field(
        default=None,
        alias="allowedEndpointRanges",
        max_length=100,
        description="CIDRs the account's endpoints must be in (RemoteEndpoint addresses and node addresses, "
        "GWEndpointSlice addresses), on top of the cluster's endpoint policy; unset: any address the policy allows.",
    )

    def endpoint_ranges(self, account: str) -> AccountRanges | None:
        """The account's narrowing of the endpoint policy; None when it sets none."""
        if self.allowed_endpoint_ranges is None:
            return None
        return AccountRanges(account, parse_ranges(self.allowed_endpoint_ranges, "spec.allowedEndpointRanges"))


class AccountStatus(Status):
    namespace: str | None = Field(default=None, description="The user namespace this account owns.")
    current_service_id: int = Field(
        default=0,
        alias="current-service-id",
        ge=0,
        description="The most recent service ID handed out to a load balancer of this account.",
    )


class Account(CustomResource[AccountSpec, AccountStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="Account",
        plural="accounts",
        short_names=["acct"],
        categories=["tollgate", "epic"],
        description="An EPIC account; it lives in its user namespace.",
        printer_columns=_columns(
            ("Namespace", "string", ".status.namespace"), ("Proxy-Limit", "integer", ".spec.proxyLimit"), _READY, _AGE
        ),
    )


class AddressPool(WireModel):
    """Addresses handed to load balancers: a CIDR (`192.0.2.0/24`) or an inclusive range (`192.0.2.10-192.0.2.20`)."""

    pool: str = Field(min_length=1, description="A CIDR or an inclusive range FIRST-LAST of IPv4 addresses.")
    subnet: str | None = Field(default=None, description="The CIDR of the subnet the pool's addresses live in.")
    aggregation: str = Field(
        default="default", description="How routes to the addresses are announced: `default` or a mask like `/32`."
    )
    multus_bridge: str | None = Field(default=None, alias="multus-bridge")

    @model_validator(mode="after")
    def _parses(self) -> AddressPool:
        first, last = self.bounds()
        try:
            subnet = IPv4Network(self.subnet, strict=False) if self.subnet is not None else None
        except ValueError as error:
            raise ValueError(f"subnet {self.subnet!r}: {error}") from None
        if subnet is not None and (first not in subnet or last not in subnet):
            raise ValueError(f"pool {self.pool} is not inside subnet {self.subnet}")
        if self.aggregation != "default" and not (
            self.aggregation.startswith("/") and self.aggregation[1:].isdigit() and 0 <= int(self.aggregation[1:]) <= 32
        ):
            raise ValueError(f"aggregation {self.aggregation!r} is neither 'default' nor a mask /0 to /32")
        return self

    def bounds(self) -> tuple[IPv4Address, IPv4Address]:
        """The pool's first and last address; a CIDR of more than two addresses leaves out its network and
        broadcast addresses."""
        first_text, dash, last_text = self.pool.partition("-")
        if "/" not in self.pool and not dash:
            raise ValueError(f"pool {self.pool!r} is neither a CIDR nor a range FIRST-LAST")
        try:
            if "/" in self.pool:
                network = IPv4Network(self.pool, strict=True)
                if network.num_addresses > 2:
                    return network.network_address + 1, network.broadcast_address - 1
                return network.network_address, network.broadcast_address
            first, last = IPv4Address(first_text.strip()), IPv4Address(last_text.strip())
        except ValueError as error:
            raise ValueError(f"pool {self.pool!r}: {error}") from None
        if last < first:
            raise ValueError(f"pool {self.pool}: the range ends before it starts")
        return first, last

    def addresses(self) -> Iterator[IPv4Address]:
        first, last = self.bounds()
        for value in range(int(first), int(last) + 1):
            yield IPv4Address(value)

    def __contains__(self, address: object) -> bool:
        first, last = self.bounds()
        return isinstance(address, IPv4Address) and first <= address <= last


class AddressHolder(WireModel):
    """The object an address of a ServicePrefix is allocated to."""

    kind: Literal["LoadBalancer", "GWProxy"]
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class ServicePrefixSpec(WireModel):
    public_pool: AddressPool = Field(alias="public-pool", description="Public addresses of load balancers.")
    alt_pool: AddressPool | None = Field(default=None, alias="alt-pool", description="A second pool (EPIC's).")


class ServicePrefixStatus(Status):
    allocations: dict[str, AddressHolder] = Field(
        default_factory=dict, description="Addresses of the public pool in use, and by which object."
    )


class ServicePrefix(CustomResource[ServicePrefixSpec, ServicePrefixStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="ServicePrefix",
        plural="serviceprefixes",
        short_names=["sp"],
        categories=["tollgate", "epic"],
        description="A pool of public addresses for load balancers; lives in namespace epic.",
        printer_columns=_columns(
            ("Pool", "string", ".spec.public-pool.pool"),
            ("Subnet", "string", ".spec.public-pool.subnet"),
            _AGE,
        ),
    )


RESOURCE_NAMES = ("cpu", "memory", "ephemeral-storage")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


def _quantities(values: dict[str, str]) -> dict[str, str]:
    for name, quantity in values.items():
        if name not in RESOURCE_NAMES:
            raise ValueError(f"{name!r} is not one of {', '.join(RESOURCE_NAMES)}")
        if not QUANTITY.match(quantity):
            raise ValueError(f"{name}: {quantity!r} is not a Kubernetes quantity (such as 100m, 128Mi, 1Gi)")
    return values


Quantities = Annotated[dict[str, str], AfterValidator(_quantities)]


class EnvoyResources(WireModel):
    """Requests and limits of the Envoy container, as in a core/v1 ResourceRequirements. The defaults fit a gateway
    Envoy at rest (a tenth of a core, 128Mi) and cap its memory at 1Gi: each UDP session holds about 5 KB, so a full
    listener of 65536 sessions needs about 320Mi. No CPU limit: throttling a proxy adds latency to every packet."""

    requests: Quantities = Field(default_factory=lambda: {"cpu": "100m", "memory": "128Mi"})
    limits: Quantities = Field(default_factory=lambda: {"memory": "1Gi"})


class LBServiceGroupSpec(WireModel):
    envoy_image: str = Field(
        default="envoyproxy/envoy:v1.40.0",
        alias="envoy-image",
        min_length=1,
        description="Image of the Envoy proxies of this group's load balancers.",
    )
    envoy_replica_count: int = Field(
        default=1,
        alias="envoy-replica-count",
        ge=0,
        le=100,
        description="Envoy replicas of a new load balancer: copied into it when it is created, as EPIC does.",
    )
    envoy_resources: EnvoyResources = Field(
        default_factory=EnvoyResources, alias="envoy-resources", description="Requests and limits of the Envoys."
    )
    can_be_shared: bool = Field(
        default=False,
        alias="can-be-shared",
        description="Whether endpoints of several client clusters may register with one load balancer of this group.",
    )
    service_prefix: str | None = Field(
        default=None,
        alias="service-prefix",
        min_length=1,
        description="The ServicePrefix (namespace epic) that public addresses come from; none: set them by hand.",
    )
    endpoint_template: DNSEndpointTemplate = Field(
        default_factory=DNSEndpointTemplate,
        alias="endpoint-template",
        description="The DNS record of each new load balancer or GWProxy of the group (its spec.endpoints), whose "
        "targets are its public address.",
    )
    envoy_bootstrap: str | None = Field(
        default=None,
        alias="envoy-bootstrap",
        description="Envoy bootstrap template (YAML); {node_id}, {cluster} and {xds_address} are filled in.",
    )


class LBServiceGroupStatus(Status):
    pass


class LBServiceGroup(CustomResource[LBServiceGroupSpec, LBServiceGroupStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="LBServiceGroup",
        plural="lbservicegroups",
        short_names=["lbsg"],
        categories=["tollgate", "epic"],
        description="Template for the load balancers of an account.",
        printer_columns=_columns(
            ("Image", "string", ".spec.envoy-image"),
            ("Replicas", "integer", ".spec.envoy-replica-count"),
            _AGE,
        ),
    )


class ClientRef(WireModel):
    """The object in a client cluster that an EPIC object stands for."""

    cluster_id: str | None = Field(default=None, alias="clusterID")
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None


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


_PROXY_COLUMNS = _columns(
    ("Service-ID", "integer", ".spec.service-id"),
    ("Address", "string", ".spec.public-address"),
    ("Group", "string", ".spec.service-group"),
    _READY,
    _AGE,
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
        printer_columns=_columns(
            ("LoadBalancer", "string", ".spec.load-balancer"),
            ("Address", "string", ".spec.address"),
            ("Port", "integer", ".spec.port.port"),
            ("Protocol", "string", ".spec.port.protocol"),
            ("Node", "string", ".spec.node-address"),
            ("Tunnel-ID", "integer", ".status.tunnel-id"),
            _READY,
            _AGE,
        ),
    )


class GWRouteSpec(WireModel):
    client_ref: ClientRef | None = Field(default=None, alias="clientRef")
    http: HTTPRouteSpec | None = Field(default=None, description="A Gateway API HTTPRouteSpec.")
    tcp: TCPRouteSpec | None = Field(default=None, description="A Gateway API TCPRouteSpec.")

    @model_validator(mode="after")
    def _one_of(self) -> GWRouteSpec:
        exactly_one(self, "http", "tcp")
        return self

    @property
    def parent_refs(self) -> list[ParentReference]:
        route = self.http if self.http is not None else self.tcp
        return route.parent_refs if route is not None else []


class GWRouteStatus(Status):
    pass


class GWRoute(CustomResource[GWRouteSpec, GWRouteStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="GWRoute",
        plural="gwroutes",
        short_names=["gwr"],
        categories=["tollgate", "epic"],
        description="Gateway API routes (http or tcp) attached to GWProxies through parentRefs.",
        printer_columns=_columns(
            ("HTTP-Parent", "string", ".spec.http.parentRefs[0].name"),
            ("TCP-Parent", "string", ".spec.tcp.parentRefs[0].name"),
            ("Hostnames", "string", ".spec.http.hostnames"),
            _AGE,
        ),
    )


class GWEndpointSliceSpec(WireModel):
    """A discovery/v1 EndpointSlice (addressType, endpoints, ports) inlined, with the backend it serves."""

    client_ref: ClientRef | None = Field(default=None, alias="clientRef")
    parent_ref: ClientRef = Field(
        alias="parentRef", description="The backend: `uid` is the name GWRoute backendRefs use for it."
    )
    address_type: Literal["IPv4", "IPv6", "FQDN"] = Field(alias="addressType")
    endpoints: list[Endpoint] = Field(default_factory=list, max_length=1000)
    ports: list[EndpointPort] = Field(default_factory=list, max_length=100)
    node_addresses: dict[str, str] = Field(
        default_factory=dict, alias="nodeAddresses", description="Node name -> IP address of the endpoints' nodes."
    )


class GWEndpointSliceStatus(Status):
    pass


class GWEndpointSlice(CustomResource[GWEndpointSliceSpec, GWEndpointSliceStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="GWEndpointSlice",
        plural="gwendpointslices",
        short_names=["gwes"],
        categories=["tollgate", "epic"],
        description="Endpoints of a GWRoute backend (an EndpointSlice of a client cluster).",
        printer_columns=_columns(
            ("Backend", "string", ".spec.parentRef.uid"),
            ("Address-Type", "string", ".spec.addressType"),
            ("Port", "integer", ".spec.ports[0].port"),
            _AGE,
        ),
    )
