"""`routedip.tollgate.io/v1alpha1`: routed IPs (seeds/routedip-operator.md). Wire names are camelCase."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Any, Literal

from pydantic import Field, model_validator

from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, opaque

GROUP = "routedip.tollgate.io"
VERSION = "v1alpha1"
DEFAULT_NODE_PORT_RANGE = "30000-32767"
MOVE_TAINT_KEY = "routedip.tollgate.io/move-in-progress"


def parse_port_range(text: str) -> tuple[int, int]:
    """`30000-32767` -> (30000, 32767); raises ValueError naming the rule."""
    low_text, sep, high_text = text.partition("-")
    if not sep or not low_text.isdigit() or not high_text.isdigit():
        raise ValueError(f"{text!r} is not a port range of the form LOW-HIGH")
    low, high = int(low_text), int(high_text)
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"{text!r}: need 1 <= LOW <= HIGH <= 65535")
    return low, high


class SecretReference(WireModel):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = Field(min_length=1, max_length=63)


class DigitalOceanSettings(WireModel):
    firewall_id: str | None = Field(
        default=None,
        alias="firewallID",
        description="Cloud Firewall dedicated to this class: its droplets and inbound rules are managed entirely.",
    )
    api_url: str = Field(default="https://api.digitalocean.com", alias="apiURL")
    token_key: str = Field(default="token", alias="tokenKey", description="Key of the API token in the Secret.")


class ClusterRoutedIPClassSpec(WireModel):
    class_name: str = Field(alias="className", min_length=1, max_length=253)
    provider: Literal["job", "digitalocean", "local"] = Field(
        default="job", description="What assigns the IP and opens the firewall."
    )
    firewall_post_allow: bool = Field(
        default=False,
        alias="firewallPostAllow",
        description="Open the firewall only after the IP is assigned.",
    )
    node_port_range: str = Field(
        default=DEFAULT_NODE_PORT_RANGE,
        alias="nodePortRange",
        pattern=r"^[0-9]{1,5}-[0-9]{1,5}$",
        description="The cluster's Service node-port range (not discoverable through the API).",
    )
    per_node_ip_limit: int = Field(default=1, alias="perNodeIPLimit", ge=1, le=256)
    election_policy: Literal["Youngest", "Oldest"] = Field(
        default="Youngest", alias="electionPolicy", description="Which eligible node wins an election."
    )
    move_cooldown_seconds: int = Field(
        default=10,
        alias="moveCooldownSeconds",
        ge=0,
        description=(
            "Least time between two moves of one IP while its holder can still serve it (cordoned, tainted, over "
            "the limit); a holder that is NotReady, deleted or without a ready endpoint loses the IP at once."
        ),
    )
    from_secrets_ref: list[SecretReference] = Field(default_factory=list, alias="fromSecretsRef")
    update_routed_ip: dict[str, Any] | None = opaque("Job spec that assigns the IP (provider job).", "updateRoutedIP")
    update_firewall: dict[str, Any] | None = opaque(
        "Job spec that opens the firewall (provider job).", "updateFirewall"
    )
    digitalocean: DigitalOceanSettings | None = None

    @model_validator(mode="after")
    def _valid_range(self) -> ClusterRoutedIPClassSpec:
        parse_port_range(self.node_port_range)
        return self


class ClusterRoutedIPClassStatus(Status):
    pass


class ClusterRoutedIPClass(CustomResource[ClusterRoutedIPClassSpec, ClusterRoutedIPClassStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="ClusterRoutedIPClass",
        plural="clusterroutedipclasses",
        short_names=["ripclass"],
        scope="Cluster",
        categories=["tollgate", "routedip"],
        description="How routed IPs of a class are assigned and firewalled.",
        printer_columns=[
            PrinterColumn(name="Class", type="string", json_path=".spec.className"),
            PrinterColumn(name="Provider", type="string", json_path=".spec.provider"),
            PrinterColumn(name="Per-Node", type="integer", json_path=".spec.perNodeIPLimit"),
            PrinterColumn(name="Accepted", type="string", json_path='.status.conditions[?(@.type=="Accepted")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )


class ServiceReference(WireModel):
    service_name: str = Field(alias="serviceName", min_length=1, max_length=63)
    namespace: str = Field(min_length=1, max_length=63)


class RoutedIPSpec(WireModel):
    class_name: str = Field(alias="className", min_length=1, description="className of a ClusterRoutedIPClass.")
    routed_ip: IPv4Address = Field(alias="routedIP", description="The assignable IPv4 address.")
    service_ref: ServiceReference = Field(alias="serviceRef")


class RoutedIPStatus(Status):
    assigned_node: str | None = Field(default=None, alias="assignedNode", description="Node holding the IP.")
    last_move_time: str | None = Field(default=None, alias="lastMoveTime")
    target_node: str | None = Field(
        default=None, alias="targetNode", description="Node the IP is moving to, while a move is in progress."
    )


class RoutedIP(CustomResource[RoutedIPSpec, RoutedIPStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="RoutedIP",
        plural="routedips",
        short_names=["rip"],
        categories=["tollgate", "routedip"],
        description="A routed IP kept on a node backing a Service.",
        printer_columns=[
            PrinterColumn(name="IP", type="string", json_path=".spec.routedIP"),
            PrinterColumn(name="Class", type="string", json_path=".spec.className"),
            PrinterColumn(name="Service", type="string", json_path=".spec.serviceRef.serviceName"),
            PrinterColumn(name="Node", type="string", json_path=".status.assignedNode"),
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Ready")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
            PrinterColumn(name="Target", type="string", json_path=".status.targetNode", priority=1),
        ],
    )
