"""Accounts and their service groups: Account (limits, endpoint ranges), LBServiceGroup (the Envoys of its load
balancers, its ServicePrefix) and the DNS record template the group gives each of them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from tollgate.models.addresses import AccountRanges, parse_range, parse_ranges
from tollgate.models.base import CustomResource, ResourceInfo, Status, WireModel
from tollgate.models.epic.system import (
    AGE_COLUMN,
    DEFAULT_LOAD_BALANCER_LIMIT,
    DEFAULT_PROXY_LIMIT,
    GROUP,
    READY_COLUMN,
    VERSION,
    printer_columns,
)

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


EndpointRange = Annotated[str, AfterValidator(lambda value: str(parse_range(value)))]


class AccountSpec(WireModel):
    display_name: str | None = Field(default=None, alias="display-name", max_length=253)
    proxy_limit: int = Field(
        default=DEFAULT_PROXY_LIMIT,
        alias="proxyLimit",
        ge=0,
        description="Most GWProxies the account may have: the webhook refuses one created beyond it, and the allocator "
        "serves no more than this many (the oldest first; a lowered limit stops none that is served).",
    )
    load_balancer_limit: int = Field(
        default=DEFAULT_LOAD_BALANCER_LIMIT,
        alias="loadBalancerLimit",
        ge=0,
        description="Most LoadBalancers the account may have: the webhook refuses one created beyond it, and the "
        "allocator serves no more than this many (the oldest first; a lowered limit stops none that is served).",
    )
    allowed_endpoint_ranges: list[EndpointRange] | None = Field(
        default=None,
        alias="allowedEndpointRanges",
        max_length=100,
        description="CIDRs the account's endpoints must be in (RemoteEndpoint addresses and node addresses, "
        "GWEndpointSlice addresses, VirtualService endpoint addresses, which may then not be DNS names), on top of "
        "the cluster's endpoint policy; unset: any address the policy allows.",
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
    served_load_balancers: dict[str, str] = Field(
        default_factory=dict,
        alias="served-load-balancers",
        description="The LoadBalancers within spec.loadBalancerLimit, by name (their uid): the allocator serves these "
        "only, and each keeps its place until it is deleted.",
    )
    served_proxies: dict[str, str] = Field(
        default_factory=dict,
        alias="served-proxies",
        description="The GWProxies within spec.proxyLimit, by name (their uid): the allocator serves these only, and "
        "each keeps its place until it is deleted.",
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
        printer_columns=printer_columns(
            ("Namespace", "string", ".status.namespace"),
            ("Proxy-Limit", "integer", ".spec.proxyLimit"),
            ("LB-Limit", "integer", ".spec.loadBalancerLimit"),
            READY_COLUMN,
            AGE_COLUMN,
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
        printer_columns=printer_columns(
            ("Image", "string", ".spec.envoy-image"),
            ("Replicas", "integer", ".spec.envoy-replica-count"),
            AGE_COLUMN,
        ),
    )
