"""ServicePrefix: a pool of public addresses for load balancers, and which object holds each address in use."""

from __future__ import annotations

from collections.abc import Iterator
from ipaddress import IPv4Address, IPv4Network
from typing import Literal

from pydantic import Field, model_validator

from tollgate.models.base import CustomResource, ResourceInfo, Status, WireModel
from tollgate.models.epic.system import AGE_COLUMN, GROUP, VERSION, printer_columns


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
        printer_columns=printer_columns(
            ("Pool", "string", ".spec.public-pool.pool"),
            ("Subnet", "string", ".spec.public-pool.subnet"),
            AGE_COLUMN,
        ),
    )
