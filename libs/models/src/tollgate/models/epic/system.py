"""The EPIC system: its names (group, namespaces, labels, Secrets), the EPIC singleton with its tunnel IDs, the GUE
endpoints where upstream tunnels terminate, and the ports of a Service."""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import Field, model_validator

from tollgate.models.base import CustomResource, PrinterColumn, ResourceInfo, Status, WireModel

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


def printer_columns(*columns: tuple[str, str, str]) -> list[PrinterColumn]:
    """A kind's kubectl columns, each (name, type, JSONPath)."""
    return [PrinterColumn(name=n, type=t, json_path=p) for n, t, p in columns]


# Columns several kinds share: the age, and the Ready condition of those that have one.
AGE_COLUMN = ("Age", "date", ".metadata.creationTimestamp")
READY_COLUMN = ("Ready", "string", '.status.conditions[?(@.type=="Ready")].status')


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
        printer_columns=printer_columns(("Tunnel-ID", "integer", ".status.current-tunnel-id"), AGE_COLUMN),
    )
