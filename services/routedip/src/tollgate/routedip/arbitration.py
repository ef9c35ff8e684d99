"""Which of several RoutedIPs asking for the same address holds it, as pure functions.

The webhook refuses a second RoutedIP for an address, but it judges from a cache that can lag behind a
create that just happened, so two can exist. The controller then arbitrates: the oldest claim
(creationTimestamp, then namespace/name, which no two objects share) holds the address, the others wait
with `Ready=False`, reason Conflict, and the next oldest takes over when the holder is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable

from tollgate.routedip.state import RoutedIPState

CONFLICT = "Conflict"


def claim_order(rip: RoutedIPState) -> tuple[object, ...]:
    return (rip.created, rip.namespace, rip.name)


def rivals(rip: RoutedIPState, others: Iterable[RoutedIPState]) -> list[RoutedIPState]:
    """The other RoutedIPs asking for `rip`'s address, oldest claim first."""
    return sorted((o for o in others if o.ip == rip.ip and o.key != rip.key), key=claim_order)


def holder_instead(rip: RoutedIPState, others: Iterable[RoutedIPState]) -> RoutedIPState | None:
    """The RoutedIP that holds `rip`'s address in its place (an older claim), or None when `rip` holds it.

    A claim being deleted still counts until it is gone: it is giving the address up, and the next claim
    must not take it before it has."""
    older = [o for o in rivals(rip, others) if claim_order(o) < claim_order(rip)]
    return older[0] if older else None


def conflict_message(loser: RoutedIPState, winner: RoutedIPState) -> str:
    """For the loser's condition and Event, which its namespace's users read: the winner is named only when
    it is of the same namespace (a tenant never learns of other tenants' objects)."""
    who = f"RoutedIP {winner.name}" if winner.namespace == loser.namespace else "a RoutedIP of another namespace"
    return (
        f"spec.routedIP: {loser.ip} is already routed by {who}, an older claim; one RoutedIP per address, "
        "this one takes over if that one is deleted"
    )


def letting_go(rip: RoutedIPState, others: Iterable[RoutedIPState]) -> list[RoutedIPState]:
    """The rivals still placed on a node (they are unassigning the address there): `rip` waits for them, or it
    could assign the address where a newer claim is about to unassign it."""
    return [other for other in rivals(rip, others) if other.placement.nodes()]


def nodes_to_let_go(rip: RoutedIPState, others: Iterable[RoutedIPState]) -> list[str]:
    """The nodes `rip` records, but those a rival records (the address is that one's there, unassigning it is
    that one's to do): where the address is unassigned when `rip` gives way or is deleted."""
    held_by_rivals = {node for other in rivals(rip, others) for node in other.placement.nodes()}
    return sorted(rip.placement.nodes() - held_by_rivals)
