"""Account limits as the allocator enforces them, decided without I/O: which of an account's LoadBalancers
(`spec.loadBalancerLimit`) and GWProxies (`spec.proxyLimit`) it serves.

The webhook refuses an object created beyond its limit, but from its cache: objects created at the same instant all
get past it. The allocator's record is the guarantee: the Account's status names the served objects of each kind
(`served-load-balancers`, `served-proxies`: name -> uid) and is written with the Account's resourceVersion, so two
decisions (two replicas, or a registration and a reconcile) never both take the last place, and a restarted
allocator finds who is served where it left it. A served object keeps its place until it is deleted: a lowered
limit serves no new one and stops none. The places that are free go to the waiting objects oldest first (by
creationTimestamp, then name, then uid), whichever of them happens to be judged first: an object gets a place only
when no older one waiting is left without one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tollgate.models.epic import DEFAULT_LOAD_BALANCER_LIMIT, DEFAULT_PROXY_LIMIT, AccountStatus

LIMIT_EXCEEDED = "LimitExceeded"
WITHIN_LIMIT = "WithinLimit"


@dataclass(frozen=True)
class Rule:
    """One kind's limit: the Account's spec field, its default, and the status field recording who is served."""

    kind: str
    field: str
    default: int
    record: str
    plural: str

    def limit(self, account_spec: Mapping[str, Any]) -> int:
        """The account's limit; the default when unset (the CRD's schema keeps it a whole number of at least 0)."""
        return int(account_spec.get(self.field, self.default))

    def served(self, status: AccountStatus) -> dict[str, str]:
        return dict(getattr(status, self.record))

    def record_in(self, status: AccountStatus, served: Mapping[str, str]) -> None:
        setattr(status, self.record, dict(served))


RULES = {
    "LoadBalancer": Rule("LoadBalancer", "loadBalancerLimit", DEFAULT_LOAD_BALANCER_LIMIT, "served_load_balancers",
                         "LoadBalancers"),
    "GWProxy": Rule("GWProxy", "proxyLimit", DEFAULT_PROXY_LIMIT, "served_proxies", "GWProxies"),
}  # fmt: skip


def served(kind: str, account: Mapping[str, Any] | None) -> dict[str, str]:
    """The objects of the kind an Account as read serves (name: uid); none without an Account."""
    return RULES[kind].served(AccountStatus.model_validate((account or {}).get("status") or {}))


@dataclass(frozen=True, order=True)
class Holder:
    """An object that wants a place, ordered oldest first: creation time (whole seconds), then name, then uid."""

    created: str
    name: str
    uid: str
    deleting: bool = field(default=False, compare=False)


def holder_of(obj: Mapping[str, Any]) -> Holder:
    meta = obj["metadata"]
    created, deleting = str(meta.get("creationTimestamp") or ""), bool(meta.get("deletionTimestamp"))
    return Holder(created, str(meta["name"]), str(meta["uid"]), deleting)


@dataclass(frozen=True)
class Decision:
    """Whether the object is served, the record as it must be written (the one read when nothing changes), and what
    was judged (the limit, and when the object is not served, how many the namespace holds and serves)."""

    served: bool
    record: dict[str, str]
    message: str


@dataclass(frozen=True)
class AccountLimit:
    """The account whose limit is judged: its name, user namespace, limit and the record of its served objects."""

    name: str
    namespace: str
    limit: int
    served: Mapping[str, str]


def decide(rule: Rule, account: AccountLimit, candidate: Holder, present: Sequence[Holder] | None) -> Decision:
    """Whether `candidate` is served, with the record to write (the candidate added when it gets a place now).
    `present` is every object of the kind in the namespace (the candidate among them), or None when they were counted
    and are no more than the limit: then all of them fit, whatever their order.

    A place in the record is kept by the object it names (the same uid) while it exists; an entry whose object is not
    present holds no place (the deletion's handler, or the Account's sweep, removes it). The free places go to the
    waiting objects oldest first. Only the candidate is recorded: each of the others gets its place when it is judged
    itself, so that whoever holds a place in the record is an object that was told so."""
    where = f"Account {account.name}'s spec.{rule.field} is {account.limit}"
    within = Decision(True, {**account.served, candidate.name: candidate.uid}, f"within the limit: {where}")
    if account.served.get(candidate.name) == candidate.uid or present is None:
        return within
    kept = [h for h in present if account.served.get(h.name) == h.uid]
    waiting = sorted(h for h in present if account.served.get(h.name) != h.uid and not h.deleting)
    room = max(0, account.limit - len(kept))
    if candidate in waiting[:room]:
        return within
    held = f"namespace {account.namespace} holds {len(present)} {rule.plural}, {len(kept)} of them served"
    first = f"; the free places ({room}) go to older {rule.plural} first" if room else ""
    return Decision(False, dict(account.served), f"{where}, and {held}{first}")
