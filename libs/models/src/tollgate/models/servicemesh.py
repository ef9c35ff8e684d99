"""`servicemesh.l7mp.io/v1` VirtualService (seeds/xds-operator.md). Wire names are snake_case."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tollgate.models import udp
from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel, exactly_one

GROUP = "servicemesh.l7mp.io"
VERSION = "v1"
MIN_HEALTH_CHECK_INTERVAL_MS = 500

ServiceDiscovery = Literal["strictdns", "eds"]


class HealthCheck(WireModel):
    interval: int = Field(
        default=1000,
        ge=MIN_HEALTH_CHECK_INTERVAL_MS,
        description="Milliseconds between checks (500 at least).",
    )
    protocol: Literal["TCP"] = Field(default="TCP", description="TCP only: a connect-only check.")
    timeout: int = Field(default=1000, ge=1, description="Milliseconds to wait for a check to connect.")
    unhealthy_threshold: int = Field(default=3, ge=1, description="Failed checks before an endpoint is ejected.")
    healthy_threshold: int = Field(default=1, ge=1, description="Passed checks before an endpoint returns.")


class Host(WireModel):
    model_config = {"json_schema_extra": {"oneOf": [{"required": ["selector"]}, {"required": ["address"]}]}}

    selector: dict[str, str] | None = Field(default=None, description="Labels of the pods that serve traffic.")
    address: str | None = Field(default=None, min_length=1, max_length=253, description="A DNS name or an IP address.")

    @model_validator(mode="after")
    def _one_of(self) -> Host:
        exactly_one(self, "selector", "address")
        return self


class Endpoint(WireModel):
    name: str = Field(min_length=1, max_length=253)
    host: Host
    port: int = Field(ge=1, le=65535, description="Where the proxy forwards the data.")
    health_check_port: int | None = Field(
        default=None, ge=1, le=65535, description="Where health checks connect; defaults to port."
    )


class Cluster(WireModel):
    name: str = Field(min_length=1, max_length=253)
    service_discovery: ServiceDiscovery = Field(
        default="strictdns", description="strictdns resolves host.address; eds follows pods by selector."
    )
    health_check: HealthCheck | None = None
    hash_key: str | None = Field(
        default=None, min_length=1, description="Sessions with the same key stick to one endpoint."
    )
    endpoints: list[Endpoint] = Field(min_length=1)


class PortListener(WireModel):
    port: int = Field(ge=1, le=65535, description="Listens on 0.0.0.0 at this port.")
    cluster: Cluster


class UdpListener(PortListener):
    max_sessions: int = udp.max_sessions("this listener")
    idle_timeout: int = udp.idle_timeout()


class Listener(WireModel):
    model_config = {"json_schema_extra": {"oneOf": [{"required": ["udp"]}, {"required": ["tcp"]}]}}

    name: str = Field(min_length=1, max_length=253)
    udp: UdpListener | None = None
    tcp: PortListener | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Listener:
        exactly_one(self, "udp", "tcp")
        return self

    @property
    def protocol(self) -> Literal["UDP", "TCP"]:
        return "UDP" if self.udp is not None else "TCP"

    @property
    def port_listener(self) -> PortListener:
        listener = self.udp or self.tcp
        assert listener is not None
        return listener


class VirtualServiceSpec(WireModel):
    selector: dict[str, str] = Field(
        default_factory=dict, description="Labels of the Envoy pods that receive this configuration."
    )
    listeners: list[Listener] = Field(default_factory=list)

    def endpoint_hosts(self) -> list[tuple[str, str]]:
        """(field path, host) of every endpoint given by address, for the endpoint address policy
        (tollgate.models.addresses); those given by a selector are the Ready pods of the object's own namespace."""
        return [
            (f"spec.listeners[{index}].{listener.protocol.lower()}.cluster.endpoints[{number}].host.address", address)
            for index, listener in enumerate(self.listeners)
            for number, endpoint in enumerate(listener.port_listener.cluster.endpoints)
            if (address := endpoint.host.address) is not None
        ]


MAX_ENVOYS_IN_STATUS = 100
# Envoy names longer than this are cut and end in a hash of the whole name (see tollgate.xds.translate).
MAX_ENVOY_NAME = 200


class EnvoySync(WireModel):
    """Where one Envoy stands with this VirtualService."""

    node: str = Field(description="The Envoy's node id, <pod>.<namespace>.")
    state: Literal["Programmed", "Pending", "Rejected"] = Field(
        description="Programmed: it ACKed the latest version; Rejected: it NACKed it and keeps its previous one."
    )
    generation: int | None = Field(
        default=None, ge=0, description="The latest generation of this VirtualService the Envoy was seen to run."
    )


class EnvoyNames(WireModel):
    """What one listener and its cluster are called in Envoy: the names to look for in a config dump and in stats."""

    listener: str = Field(description="The listener's name in this VirtualService.")
    envoy_listener: str = Field(
        description="Its Envoy listener: <namespace>/<virtual service>/<listener> (past "
        f"{MAX_ENVOY_NAME} characters, shortened and ending in a hash of the whole)."
    )
    cluster: str = Field(description="Its cluster's name in this VirtualService.")
    envoy_cluster: str = Field(description="Its Envoy cluster: <namespace>/<virtual service>/<cluster> (likewise).")


class ReplicaReport(WireModel):
    """What one tollgate-xds replica sees of this VirtualService on the Envoys connected to it."""

    generation: int = Field(ge=0, description="The generation of this VirtualService the replica serves.")
    proxies: int = Field(ge=0, description="Envoys connected to this replica that this configuration applies to.")
    programmed_proxies: int = Field(ge=0, description="Those of them that have accepted its latest version.")
    envoys: list[EnvoySync] = Field(
        default_factory=list,
        max_length=MAX_ENVOYS_IN_STATUS,
        description=f"Sync state of each of them (the first {MAX_ENVOYS_IN_STATUS} by node id).",
    )
    rejected: list[str] = Field(default_factory=list, description="Envoy's error, for each Envoy that rejected it.")
    conflicts: list[str] = Field(default_factory=list, description="Its conflicts with other sources on them.")


class VirtualServiceStatus(Status):
    proxies: int | None = Field(default=None, ge=0, description="Envoys that this configuration applies to.")
    programmed_proxies: int | None = Field(
        default=None,
        alias="programmed_proxies",
        ge=0,
        description="Envoys that have accepted its latest version.",
    )
    envoys: list[EnvoySync] = Field(
        default_factory=list,
        max_length=MAX_ENVOYS_IN_STATUS,
        description=f"Sync state of each Envoy it applies to (the first {MAX_ENVOYS_IN_STATUS} by node id).",
    )
    envoy_names: list[EnvoyNames] = Field(
        default_factory=list, description="The Envoy names of each translated listener and its cluster."
    )
    replicas: dict[str, ReplicaReport] = Field(
        default_factory=dict,
        description="Each tollgate-xds replica's own report, by replica (its pod, <namespace>/<name>); the fields "
        "above merge the reports of the replicas that are alive.",
    )


class VirtualService(CustomResource[VirtualServiceSpec, VirtualServiceStatus]):
    resource = ResourceInfo(
        group=GROUP,
        version=VERSION,
        kind="VirtualService",
        plural="virtualservices",
        short_names=["vsvc"],
        categories=["tollgate", "servicemesh"],
        description="Listeners, clusters and endpoints for the Envoy pods its selector picks.",
        printer_columns=[
            PrinterColumn(name="Proxies", type="integer", json_path=".status.proxies"),
            PrinterColumn(name="Programmed", type="integer", json_path=".status.programmed_proxies"),
            PrinterColumn(name="Ready", type="string", json_path='.status.conditions[?(@.type=="Programmed")].status'),
            PrinterColumn(name="Age", type="date", json_path=".metadata.creationTimestamp"),
        ],
    )
