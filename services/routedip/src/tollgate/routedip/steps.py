"""What a reconcile does next, as pure functions: the move's next step, when to give up or retry, the move taint's
edits, and what conditions and Events say. `reconcile.py` and `mover.py` carry them out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tollgate.models.base import ConditionStatus
from tollgate.models.routedip import MOVE_TAINT_KEY
from tollgate.routedip.election import Decision
from tollgate.routedip.providers import ProviderError
from tollgate.routedip.state import ClassState, Placement, RoutedIPState

MOVE_TAINT_EFFECT = "PreferNoSchedule"
MoveStep = Literal["abandon", "reserve", "complete", "stall", "settle"]


def move_step(placement: Placement, decision: Decision) -> MoveStep:
    """The step the election calls for, given where the status says the IP is:

    - `abandon` the move in progress: its target is no longer the node decided on (another one is);
    - `reserve` the node decided on, then `complete` the move: the election moves an IP no move is heading for;
    - `complete` the move in progress (every step again, each idempotent);
    - `stall`: a move is in progress but no node is eligible, its target included: say so and wait;
    - `settle`: no move: the holder keeps the IP, cools down, or no node is eligible.
    """
    target = placement.target
    if target is not None and decision.node is not None and decision.node != target:
        return "abandon"
    if target is None:
        return "reserve" if decision.action == "move" else "settle"
    return "stall" if decision.action == "none" else "complete"


def needs_release(rip: RoutedIPState, finalizer: str, released_uid: str | None) -> bool:
    """Whether a RoutedIP being deleted is still to be released: it carries `finalizer`, and this controller has
    not removed it from this very object (`released_uid`: the uid it removed it from; the watch may lag)."""
    return finalizer in rip.finalizers and released_uid != rip.uid


def is_news(previous: Mapping[str, Any], status: str, reason: str) -> bool:
    """Whether a Ready condition changes the `previous` one's status or reason: worth an Event (a new message alone
    is not)."""
    return (previous.get("status"), previous.get("reason")) != (status, reason)


def moving_message(ip: str, holder: str | None, node: str) -> str:
    return f"moving {ip} from {holder} to {node}" if holder else f"assigning {ip} to {node}"


def assigned_message(ip: str, node: str, previous: str | None) -> str:
    """The Event of a completed move: where the IP is, and where it was when it moved."""
    return f"{ip} assigned to {node}" + (f" (was on {previous})" if previous and previous != node else "")


def failure_reason(error: Exception) -> str:
    """The Ready reason and Event reason of a failed reconcile: the provider's word for it, or ReconcileError."""
    return error.reason if isinstance(error, ProviderError) else "ReconcileError"


def provider_retry_after(error: Exception) -> float | None:
    """The seconds a provider asks to wait before the next try (a 429's Retry-After); None: the key's backoff."""
    return error.retry_after if isinstance(error, ProviderError) and error.retry_after else None


@dataclass(frozen=True)
class Acceptance:
    """A class's Accepted condition, and the Event that announces a change of it: (status, reason, message) and
    (type, reason, message)."""

    condition: tuple[ConditionStatus, str, str]
    event: tuple[str, str, str]


def acceptance(cls: ClassState, problems: list[tuple[str, str]]) -> Acceptance:
    """Accepted, or not for the first problem's reason, with every problem's message."""
    if problems:
        reason, message = problems[0][0], "; ".join(m for _, m in problems)
        return Acceptance(("False", reason, message), ("Warning", reason, message))
    provider = cls.spec.provider if cls.spec else "?"
    return Acceptance(("True", "Valid", f"provider {provider}"), ("Normal", "Accepted", "the class can be served"))


def has_move_taint(taints: Iterable[Mapping[str, Any]]) -> bool:
    return any(t.get("key") == MOVE_TAINT_KEY for t in taints)


def with_move_taint(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The node's taints with the move taint added; None when it is there already (nothing to write)."""
    if has_move_taint(taints):
        return None
    return [*taints, {"key": MOVE_TAINT_KEY, "effect": MOVE_TAINT_EFFECT, "value": "true"}]


def without_move_taint(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The node's taints without the move taint; None when it is not there (nothing to write)."""
    return [t for t in taints if t.get("key") != MOVE_TAINT_KEY] if has_move_taint(taints) else None


def heading_to(node: str, routed_ips: Iterable[RoutedIPState], excluding: tuple[str, str] | None = None) -> bool:
    """Whether a move (but `excluding`'s, and those of RoutedIPs being deleted) is heading to `node`: its move taint
    stays until none is."""
    return any(r.placement.target == node for r in routed_ips if r.key != excluding and not r.deleting)
