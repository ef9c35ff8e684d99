"""Tunnel and service IDs: the pure part of allocation (no I/O).

The invariant both tunnel-ID schemes keep: the EPIC singleton's `current-tunnel-id` only grows, and an
ID at or below it was handed out by exactly one allocator. The seed's scheme hands out
`current-tunnel-id + 1` with one conditional write per ID. The block scheme moves the counter by a
whole block in one conditional write and records the block's owner in `tunnel-id-blocks`; the owner
then hands the block's IDs out from memory. An ID is never reissued (the 32-bit space is not
recycled): a block whose owner died, or an ID whose write lost a race, is simply never used, so no
crash or partition can make two holders of one ID. Reclaiming a dead owner's block only removes its
record.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from typing import Any

from tollgate.models.base import raw_condition
from tollgate.models.epic import (
    MAX_TUNNEL_ID,
    AddressHolder,
    AddressPool,
    EPICStatus,
    ServicePrefixStatus,
    TunnelIDBlock,
)

MAX_SERVICE_ID = 65535
INITIALIZED = "Initialized"


class ExhaustedError(RuntimeError):
    """No ID (or address) is left in the range."""


class AddressTakenError(RuntimeError):
    """The public address asked for is allocated to another object."""


def seed_step(status: EPICStatus) -> int:
    """The seed's algorithm: the next tunnel ID is the counter plus one."""
    if status.current_tunnel_id >= MAX_TUNNEL_ID:
        raise ExhaustedError(f"status.current-tunnel-id: all {MAX_TUNNEL_ID} tunnel IDs have been handed out")
    status.current_tunnel_id += 1
    return status.current_tunnel_id


def reserve_block(status: EPICStatus, owner: str, size: int, live_owners: set[str] | None, now: str) -> TunnelIDBlock:
    """Move the counter past a new block of `size` IDs for `owner` and record it.

    The owner's earlier block is replaced (an owner holds one block at a time) and blocks of owners not in
    `live_owners` are dropped; `live_owners=None` keeps every other owner's block.
    """
    first = status.current_tunnel_id + 1
    if first > MAX_TUNNEL_ID:
        raise ExhaustedError(f"status.current-tunnel-id: all {MAX_TUNNEL_ID} tunnel IDs have been handed out")
    block = TunnelIDBlock(owner=owner, first=first, last=min(MAX_TUNNEL_ID, first + size - 1), reserved_at=now)
    kept = [b for b in status.tunnel_id_blocks if b.owner != owner and (live_owners is None or b.owner in live_owners)]
    status.tunnel_id_blocks = [*kept, block]
    status.current_tunnel_id = block.last
    return block


def prune_blocks(status: EPICStatus, live_owners: set[str]) -> list[TunnelIDBlock]:
    """Drop the records of blocks whose owner is gone; the blocks removed."""
    gone = [b for b in status.tunnel_id_blocks if b.owner not in live_owners]
    if gone:
        status.tunnel_id_blocks = [b for b in status.tunnel_id_blocks if b.owner in live_owners]
    return gone


def raise_floor(status: EPICStatus, highest_in_use: int) -> bool:
    """After the singleton was (re)created: move the counter past every ID still held. True when changed."""
    changed = False
    if status.current_tunnel_id < highest_in_use:
        status.current_tunnel_id = highest_in_use
        changed = True
    condition = status.condition(INITIALIZED)
    if condition is None or condition.status != "True":
        status.set_condition(
            INITIALIZED, "True", "CounterAboveIDsInUse", f"current-tunnel-id starts above {highest_in_use}"
        )
        changed = True
    return changed


@dataclass
class BlockPool:
    """The IDs this allocator may hand out: the rest of its current block, plus IDs that were never written."""

    block: TunnelIDBlock | None = None
    epic_uid: str | None = None
    next_id: int = 0
    returned: list[int] = field(default_factory=list)

    def take(self) -> int | None:
        if self.returned:
            return self.returned.pop()
        if self.block is None or self.next_id > self.block.last:
            return None
        taken = self.next_id
        self.next_id += 1
        return taken

    def give_back(self, tunnel_id: int) -> None:
        """An ID taken but never written anywhere (its write was refused) may be handed out again."""
        self.returned.append(tunnel_id)

    def refill(self, block: TunnelIDBlock, epic_uid: str | None) -> None:
        if epic_uid != self.epic_uid:
            self.returned.clear()
        self.block, self.epic_uid, self.next_id = block, epic_uid, block.first

    def drop(self) -> None:
        """Forget every ID: the singleton they came from is gone."""
        self.block, self.epic_uid, self.next_id = None, None, 0
        self.returned.clear()

    @property
    def remaining(self) -> int:
        left = 0 if self.block is None else max(0, self.block.last - self.next_id + 1)
        return left + len(self.returned)


def next_service_id(current: int, used: Iterable[int]) -> int:
    """The seed's algorithm for service IDs: the counter plus one, skipping IDs that users set by hand."""
    taken = set(used)
    candidate = current + 1
    while candidate in taken:
        candidate += 1
    if candidate > MAX_SERVICE_ID:
        raise ExhaustedError(f"status.current-service-id: all {MAX_SERVICE_ID} service IDs of the account are used")
    return candidate


# The reason of a load balancer's Allocated condition once it holds its service ID.
SERVICE_ID_ALLOCATED = "ServiceIDAllocated"


def service_id_claim(lb: Mapping[str, Any]) -> tuple[bool, str, str]:
    """How strong a load balancer's claim is on the service ID it names, the strongest smallest: one already
    Allocated with it first (a load balancer in use keeps its ID, and a newcomer naming the same one is the
    duplicate), then the oldest, then by name. Creation times have whole seconds: ordered by them and the name
    alone, a load balancer created in the same second as the holder, with a name earlier in the alphabet, took
    the holder's ID."""
    allocated = raw_condition(lb, "Allocated")
    holds = allocated.get("status") == "True" and allocated.get("reason") == SERVICE_ID_ALLOCATED
    meta = lb["metadata"]
    return not holds, str(meta["creationTimestamp"]), str(meta["name"])


def duplicates(ids: Iterable[int]) -> dict[int, int]:
    """IDs that occur more than once, with their counts."""
    return {value: count for value, count in Counter(ids).items() if count > 1}


def remote_endpoint_name(load_balancer: str, address: str, port: int, protocol: str) -> str:
    """The deterministic name of the RemoteEndpoint of `address:port/protocol` for `load_balancer` (a DNS
    subdomain): one object per (address, port, protocol), as EPIC names them."""
    name = f"{load_balancer}-{address.replace('.', '-')}-{port}-{protocol.lower()}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[:242]}-{digest}"


class InvalidArgumentError(ValueError):
    """Bad input to the registration API, naming the field and the rule."""


def validate_name(field_name: str, value: str) -> str:
    if not value:
        raise InvalidArgumentError(f"{field_name}: required")
    if len(value) > 63 or not value.replace("-", "a").isalnum() or not value[0].isalnum() or value != value.lower():
        raise InvalidArgumentError(f"{field_name}: {value!r} is not a lowercase DNS label (a-z, 0-9, '-', 63 at most)")
    return value


def validate_address(field_name: str, value: str, *, required: bool = True) -> str | None:
    if not value:
        if required:
            raise InvalidArgumentError(f"{field_name}: required")
        return None
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise InvalidArgumentError(f"{field_name}: {value!r} is not an IPv4 address") from None


def validate_port(field_name: str, port: int, protocol: str) -> tuple[int, str]:
    """The port and protocol of an endpoint (TCP when empty)."""
    if not 1 <= port <= 65535:
        raise InvalidArgumentError(f"{field_name}.port: {port} is outside 1-65535")
    protocol = protocol or "TCP"
    if protocol not in ("TCP", "UDP", "SCTP"):
        raise InvalidArgumentError(f"{field_name}.protocol: {protocol!r} is not one of TCP, UDP, SCTP")
    return port, protocol


def claim_address(
    status: ServicePrefixStatus, pool: AddressPool, holder: AddressHolder, wanted: IPv4Address | None
) -> IPv4Address:
    """The public address of `holder`, recorded in the prefix's `allocations`.

    No address wanted: the one it holds already, else the pool's first free one. An address wanted that is in the
    pool is claimed unless another object holds it; one outside the pool is the user's own and not recorded. Any
    other address the holder held is released.
    """
    held = [address for address, owner in status.allocations.items() if owner.uid == holder.uid]
    if wanted is None:
        if held:
            return IPv4Address(held[0])
        wanted = next((a for a in pool.addresses() if str(a) not in status.allocations), None)
        if wanted is None:
            raise ExhaustedError(f"every address of pool {pool.pool} is allocated")
    owner = status.allocations.get(str(wanted))
    if wanted in pool and owner is not None and owner.uid != holder.uid:
        raise AddressTakenError(f"{wanted} is allocated to {owner}")
    for address in held:
        if address != str(wanted):
            del status.allocations[address]
    if wanted in pool:
        status.allocations[str(wanted)] = holder
    return wanted


def release_addresses(status: ServicePrefixStatus, keep: Callable[[AddressHolder], bool]) -> list[str]:
    """Drop the allocations whose holder `keep` refuses; those addresses."""
    gone = [address for address, owner in status.allocations.items() if not keep(owner)]
    for address in gone:
        del status.allocations[address]
    return gone
