"""The xDS protocol of one ADS stream, state-of-the-world or delta, as a state machine with no I/O.

The gRPC layer feeds it requests (`on_sotw_request` / `on_delta_request`) and sends what `next_push` returns.
What makes it more than a cache:

- One response in flight per stream: the next waits for the Envoy's ACK or NACK, which gives the
  make-before-break order Envoy asks for: clusters (keeping the ones the Envoy's listeners still use),
  then endpoints, then listeners, and only once the listeners are ACKed, the removal of unused clusters.
- A NACK is blamed on the sources whose resources it names (else on every source the response changed) and
  reverts to what the Envoy last ACKed. Each blamed source is held back on that Envoy for that type: its last
  ACKed resources (or none) are served instead of the rejected ones, until the source's own resources of that
  type change, while every other source keeps converging. The rejected content is never sent again as is.
  A NACK that blames no source (a removal) parks the type until the desired content changes.
- Delta streams start from the versions the Envoy reports having (`initial_resource_versions`), so an
  Envoy that reconnects after a restart of this server is sent only what differs.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tollgate.xds import ir
from tollgate.xds.resources import CLUSTER, ENDPOINT, LISTENER, TYPE_ORDER, Resource, Resources

OwnerState = Literal["Programmed", "Pending", "Rejected"]


@dataclass(frozen=True)
class Push:
    """One response: for SotW every resource of the type, for delta only what changed and what was removed."""

    type_url: str
    version: str
    nonce: str
    resources: tuple[Resource, ...]
    removed: tuple[str, ...]
    changed: tuple[Resource, ...]


@dataclass(frozen=True)
class Nack:
    type_url: str
    version: str
    nonce: str
    message: str
    owners: frozenset[ir.SourceRef]
    at: float = 0.0  # when the Envoy answered, seconds since the epoch


@dataclass(frozen=True)
class Rejection:
    """An Envoy rejected `owner`'s resources of `type_url` at `versions` ((name, version) pairs)."""

    owner: ir.SourceRef
    type_url: str
    message: str
    versions: frozenset[tuple[str, str]]


def _versions_of(resources: Mapping[str, Resource], owner: ir.SourceRef) -> frozenset[tuple[str, str]]:
    return frozenset((name, r.version) for name, r in resources.items() if r.owner == owner)


@dataclass
class TypeState:
    type_url: str
    seen: bool = False
    wildcard: bool = True
    names: set[str] = field(default_factory=set)
    names_revision: int = 0
    # What the Envoy holds once everything sent is ACKed, and what it has ACKed: the very dicts sent (often the
    # desired dicts, shared by every Envoy of one config), so replaced, never changed in place.
    sent: dict[str, Resource] = field(default_factory=dict)
    acked: dict[str, Resource] = field(default_factory=dict)
    acked_revision: int = 0  # counts the changes of `acked`
    pending: Push | None = None
    last_nonce: str = ""
    sent_version: str = ""
    acked_version: str = ""
    acked_nonce: str = ""
    pushes: int = 0
    respond: bool = False
    force: set[str] = field(default_factory=set)
    nack: Nack | None = None
    nacked_generation: int | None = None
    # When the latest response was sent and when the Envoy last ACKed one (seconds since the epoch; None: never).
    sent_at: float | None = None
    acked_at: float | None = None

    def subscribed(self, name: str) -> bool:
        return self.wildcard or name in self.names


_version = operator.attrgetter("version")


def _versions(resources: Mapping[str, Resource]) -> dict[str, str]:
    """Each resource's version by name, built at C level (no Python loop over 1000s of resources)."""
    return dict(zip(resources, map(_version, resources.values()), strict=True))


def _without(resources: Mapping[str, Resource], names: set[str]) -> dict[str, Resource]:
    """A copy of `resources` without `names` (what was sent or ACKed is shared, never changed in place)."""
    return {name: r for name, r in resources.items() if name not in names}


def _same(a: Mapping[str, Resource], b: Mapping[str, Resource]) -> bool:
    """Same names at the same versions; mostly the very same objects, which the C-level comparison sees first.

    Else (after a change, until it is ACKed) the versions are compared, at C level too and stopping at the first
    difference: in order when both have their names in the same order, as they usually do, else by name."""
    if a is b or a == b:
        return True
    if len(a) != len(b):
        return False
    if list(a) == list(b):
        return all(map(operator.eq, map(_version, a.values()), map(_version, b.values())))
    return _versions(a) == _versions(b)


class Stream:
    def __init__(self, delta: bool, clock: Callable[[], float] = time.time) -> None:
        self.delta = delta
        self.clock = clock
        self.types: dict[str, TypeState] = {
            type_url: TypeState(type_url, wildcard=type_url != ENDPOINT) for type_url in TYPE_ORDER
        }
        self.desired: Resources = {type_url: {} for type_url in TYPE_ORDER}
        self.generation: dict[str, int] = dict.fromkeys(TYPE_ORDER, 0)
        self._nonces = 0
        self._owned: dict[ir.SourceRef, list[tuple[str, Resource]]] | None = None
        self._endpoints_key: tuple[int, int, bool, int] | None = None
        self._endpoints_target: dict[str, Resource] = {}
        # Sources held back on this Envoy, by (source, type URL); `_rejections` counts changes to it.
        self.rejected: dict[tuple[ir.SourceRef, str], Rejection] = {}
        self._rejections = 0
        self._acked_memo: dict[str, tuple[tuple[int, int, int], bool]] = {}

    # --- what the Envoy should have -------------------------------------------------------------------------

    def set_desired(self, resources: Resources) -> bool:
        """Replace the desired resources; True when any type's content changed."""
        changed = False
        for type_url in TYPE_ORDER:
            new, old = resources.get(type_url, {}), self.desired[type_url]
            if new is old:
                continue
            self.desired[type_url] = new
            self._owned = None
            if not _same(new, old):
                self.generation[type_url] += 1
                changed = True
                self._release(type_url)
        return changed

    def _release(self, type_url: str) -> None:
        """Forget the rejections of sources whose resources of `type_url` changed: their new content is tried."""
        desired = self.desired[type_url]
        for key, rejection in list(self.rejected.items()):
            if key[1] == type_url and _versions_of(desired, rejection.owner) != rejection.versions:
                del self.rejected[key]
                self._rejections += 1

    def rejection(self, owner: ir.SourceRef) -> Rejection | None:
        """Why `owner` is held back on this Envoy, if it is."""
        return next((r for (ref, _), r in self.rejected.items() if ref == owner), None)

    def target(self, type_url: str) -> dict[str, Resource]:
        """What the Envoy should have of `type_url`: the desired resources, except that each held-back source
        keeps what the Envoy last ACKed of it (or nothing)."""
        desired = self.desired[type_url]
        held = {owner for owner, t in self.rejected if t == type_url}
        if not held:
            return desired
        acked = self.types[type_url].acked
        result: dict[str, Resource] = {}
        for name, resource in desired.items():
            if resource.owner not in held:
                result[name] = resource
            elif (previous := acked.get(name)) is not None:
                result[name] = previous
        for name, resource in acked.items():
            if resource.owner in held and name not in result:
                result[name] = resource
        return result

    def owner_state(self, owner: ir.SourceRef) -> OwnerState:
        """`Programmed`: the Envoy ACKed every resource of `owner`; `Rejected`: it is held back; else `Pending`."""
        if self.rejection(owner) is not None:
            return "Rejected"
        if self._owned is None:
            self._owned = {}
            for type_url, resources in self.desired.items():
                for resource in resources.values():
                    if resource.owner is not None:
                        self._owned.setdefault(resource.owner, []).append((type_url, resource))
        for type_url, resource in self._owned.get(owner, []):
            state = self.types[type_url]
            if type_url == ENDPOINT and not state.subscribed(resource.name):
                continue
            acked = state.acked.get(resource.name)
            if acked is None or acked.version != resource.version:
                return "Pending"
        return "Programmed"

    def in_sync(self) -> bool:
        """Every type the Envoy asked for is ACKed at the desired content.

        Called after every ACK of every Envoy: a response in flight answers first, and the usual case (the Envoy
        ACKed the very resource objects desired) is decided by C-level dict comparisons.
        """
        if any(state.pending is not None for state in self.types.values()):
            return False
        for type_url, state in self.types.items():
            if not state.seen:
                continue
            if type_url == ENDPOINT:
                wanted = self._endpoints_subscribed()
                if wanted.items() <= state.acked.items():
                    continue
                if any(state.acked.get(n) is None or state.acked[n].version != r.version for n, r in wanted.items()):
                    return False
            elif not self._acked_target(type_url):
                return False
        return True

    def _acked_target(self, type_url: str) -> bool:
        """The Envoy ACKed the target of `type_url`; compared again only once the target or the ACKed changed
        (after a change, an Envoy's every ACK of another type asks this again)."""
        key = (self.generation[type_url], self._rejections, self.types[type_url].acked_revision)
        memo = self._acked_memo.get(type_url)
        if memo is None or memo[0] != key:
            memo = self._acked_memo[type_url] = (key, _same(self.target(type_url), self.types[type_url].acked))
        return memo[1]

    def settled(self) -> bool:
        """In sync, or parked on a NACK of the current content: nothing more will happen until a change."""
        if self.in_sync():
            return True
        return any(
            s.nack is not None and s.nacked_generation == self.generation[t] and s.pending is None
            for t, s in self.types.items()
        ) and not any(s.pending is not None for s in self.types.values())

    # --- requests -------------------------------------------------------------------------------------------

    def on_sotw_request(self, type_url: str, nonce: str, names: Iterable[str], error: str | None) -> Nack | bool | None:
        """A DiscoveryRequest: the NACK it carries, True for an ACK, None otherwise."""
        state = self.types.get(type_url)
        if state is None:
            return None
        if nonce and nonce != state.last_nonce:
            return None  # answers an older response: the protocol says to ignore it
        first, state.seen = not state.seen, True
        result: Nack | bool | None = None
        if state.pending is not None and nonce == state.pending.nonce:
            result = self._nack(state, error) if error else self._ack(state)
        if type_url == ENDPOINT:
            wanted = set(names)
            if wanted != state.names:
                state.names = wanted
                state.names_revision += 1
                state.respond = True
        if first:
            state.respond = True
        return result

    def on_delta_request(
        self,
        type_url: str,
        nonce: str,
        subscribe: Iterable[str],
        unsubscribe: Iterable[str],
        initial_versions: Mapping[str, str],
        error: str | None,
    ) -> Nack | bool | None:
        state = self.types.get(type_url)
        if state is None:
            return None
        subscribe, unsubscribe = list(subscribe), list(unsubscribe)
        if not state.seen:
            state.seen = True
            state.wildcard = (type_url != ENDPOINT and not subscribe) or "*" in subscribe
            state.sent = {name: Resource(name, version, None) for name, version in initial_versions.items()}
            state.acked = state.sent
            state.acked_revision += 1
            state.respond = True
        elif subscribe:
            state.force.update(name for name in subscribe if name != "*")
        if "*" in subscribe:
            state.wildcard = True
        if "*" in unsubscribe:
            state.wildcard = False
        if subscribe or unsubscribe:
            state.names_revision += 1
        state.names.update(name for name in subscribe if name != "*")
        state.names.difference_update(unsubscribe)
        gone = {name for name in unsubscribe if not state.subscribed(name)}
        if gone:
            state.sent = _without(state.sent, gone)
            if not gone.isdisjoint(state.acked):
                state.acked = _without(state.acked, gone)
                state.acked_revision += 1
        if subscribe and not state.respond:
            state.respond = any(name not in state.sent for name in subscribe if name != "*")
        if state.pending is not None and nonce and nonce == state.pending.nonce:
            return self._nack(state, error) if error else self._ack(state)
        return None

    def _ack(self, state: TypeState) -> bool:
        assert state.pending is not None
        state.acked = state.sent
        state.acked_revision += 1
        state.acked_version, state.acked_nonce = state.pending.version, state.pending.nonce
        state.acked_at = self.clock()
        state.nack = None
        state.nacked_generation = None
        state.pending = None
        return True

    def _nack(self, state: TypeState, error: str) -> Nack:
        push = state.pending
        assert push is not None
        blamed = [r for r in push.changed if r.name in error] or list(push.changed)
        owners = frozenset(r.owner for r in blamed if r.owner is not None)
        nack = Nack(
            type_url=state.type_url,
            version=push.version,
            nonce=push.nonce,
            message=error,
            owners=owners,
            at=self.clock(),
        )
        state.nack = nack
        desired = self.desired[state.type_url]
        for owner in owners:
            versions = _versions_of(state.sent, owner)
            # Held back only while the rejected content is still what is desired; else the new content is tried.
            if _versions_of(desired, owner) == versions:
                self.rejected[(owner, state.type_url)] = Rejection(owner, state.type_url, error, versions)
                self._rejections += 1
        state.nacked_generation = None if owners else self.generation[state.type_url]
        state.sent = state.acked
        state.pending = None
        return nack

    # --- responses ------------------------------------------------------------------------------------------

    def _may_send(self, state: TypeState) -> bool:
        parked = state.nacked_generation == self.generation[state.type_url] and not state.respond
        return state.seen and not parked

    def next_push(self) -> Push | None:
        """The next response to send, or None while one is in flight or the Envoy has everything."""
        if any(state.pending is not None for state in self.types.values()):
            return None
        clusters, endpoints, listeners = (self.types[t] for t in (CLUSTER, ENDPOINT, LISTENER))
        if self._may_send(clusters):
            desired = self.target(CLUSTER)
            keep = {name: clusters.sent[name] for name in clusters.sent.keys() - desired.keys()}
            target = {**keep, **desired} if keep else desired
            if (push := self._push(clusters, target, partial=bool(keep))) is not None:
                return push
        if self._may_send(endpoints) and (push := self._push(endpoints, self._endpoints_wanted())) is not None:
            return push
        if self._may_send(listeners) and (push := self._push(listeners, self.target(LISTENER))) is not None:
            return push
        listeners_done = not listeners.seen or self._acked_target(LISTENER)
        if clusters.seen and listeners_done and clusters.nacked_generation != self.generation[CLUSTER]:
            return self._push(clusters, self.target(CLUSTER))
        return None

    def _endpoints_subscribed(self) -> dict[str, Resource]:
        """The desired load assignments the Envoy subscribes to, computed again only when either changes."""
        state = self.types[ENDPOINT]
        key = (self.generation[ENDPOINT], state.names_revision, state.wildcard, self._rejections)
        if key != self._endpoints_key:
            desired = self.target(ENDPOINT)
            if state.wildcard or desired.keys() <= state.names:
                self._endpoints_target = desired  # the usual case: the shared dict itself, not a copy per Envoy
            else:
                self._endpoints_target = {name: desired[name] for name in state.names if name in desired}
            self._endpoints_key = key
        return self._endpoints_target

    def _endpoints_wanted(self) -> dict[str, Resource]:
        """The load assignments the Envoy asks for: desired ones, else the last sent (its cluster is going away)."""
        state, desired = self.types[ENDPOINT], self.target(ENDPOINT)
        subscribed = self._endpoints_subscribed()
        missing = state.names - desired.keys()
        if not missing:
            return subscribed
        kept = {name: state.sent[name] for name in missing if name in state.sent}
        return {**subscribed, **kept}

    def _push(self, state: TypeState, target: dict[str, Resource], partial: bool = False) -> Push | None:
        if not state.respond and not state.force and (state.sent is target or state.sent == target):
            return None  # the usual case, decided at C speed: the very same resource objects
        changed = tuple(
            r
            for name, r in target.items()
            if (old := state.sent.get(name)) is None or old.version != r.version or name in state.force
        )
        removed = tuple(name for name in state.sent if name not in target)
        if not changed and not removed and not state.respond:
            return None
        self._nonces += 1
        generation = self.generation[state.type_url]
        push = Push(
            type_url=state.type_url,
            version=f"{generation}-partial" if partial else str(generation),
            nonce=str(self._nonces),
            resources=changed if self.delta else tuple(target.values()),
            removed=removed if self.delta else (),
            changed=changed,
        )
        if state.type_url == CLUSTER:
            # An Envoy re-creates a cluster it is sent: its endpoints must follow, even if unchanged.
            eds = self.desired[ENDPOINT]
            self.types[ENDPOINT].force.update(r.name for r in changed if r.name in eds)
        state.sent = target
        state.pending = push
        state.last_nonce = push.nonce
        state.sent_version = push.version
        state.sent_at = self.clock()
        state.pushes += 1
        state.respond = False
        state.force.difference_update(target)
        return push
