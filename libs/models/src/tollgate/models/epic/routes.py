"""The Gateway API objects a client cluster sends EPIC: GWRoute (HTTP or TCP routes of GWProxies), GWEndpointSlice
(the endpoints of a route's backend), and the ClientRef that names the client object each stands for."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tollgate.models.base import CustomResource, ResourceInfo, Status, WireModel, exactly_one
from tollgate.models.epic.system import AGE_COLUMN, GROUP, VERSION, printer_columns
from tollgate.models.gateway import Endpoint, EndpointPort, HTTPRouteSpec, ParentReference, TCPRouteSpec


class ClientRef(WireModel):
    """The object in a client cluster that an EPIC object stands for."""

    cluster_id: str | None = Field(default=None, alias="clusterID")
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None


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
        printer_columns=printer_columns(
            ("HTTP-Parent", "string", ".spec.http.parentRefs[0].name"),
            ("TCP-Parent", "string", ".spec.tcp.parentRefs[0].name"),
            ("Hostnames", "string", ".spec.http.hostnames"),
            AGE_COLUMN,
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
        printer_columns=printer_columns(
            ("Backend", "string", ".spec.parentRef.uid"),
            ("Address-Type", "string", ".spec.addressType"),
            ("Port", "integer", ".spec.ports[0].port"),
            AGE_COLUMN,
        ),
    )
