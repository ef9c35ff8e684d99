"""The controller: a work queue of routed IPs (and classes, and nodes to untaint), fed by the kopf
handlers, drained by workers that elect a node and carry out the move.

A move follows the seed, each step idempotent and recorded so that a restarted controller resumes it:

1. reserve: `status.targetNode` is written (under the class's lock, so two IPs never take the last
   place on a node);
2. taint the target node (`routedip.tollgate.io/move-in-progress:PreferNoSchedule`);
3. open the firewall for the target, unless the class says `firewallPostAllow`;
4. assign the IP to the target (the provider);
5. remove the taint (when no other move heads to the node);
6. with `firewallPostAllow`, open the firewall now;
7. unassign the IP from the previous holder;
8. record `status.assignedNode`, clear `targetNode`; the firewall is re-planned (closing the old node).

The IP is on the previous holder, the target or both until step 8, and the status names both: a
restart repeats the steps from 2. A move whose target stops being eligible is abandoned (untaint,
unassign from the target) before the next one is reserved.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from tollgate.models.base import merge_patch, now_rfc3339
from tollgate.models.routedip import (
    GROUP,
    MOVE_TAINT_KEY,
    VERSION,
    ClusterRoutedIPClassStatus,
    RoutedIPStatus,
    Trust,
    parse_port_range,
    service_ref_rule,
)
from tollgate.routedip import metrics as routedip_metrics
from tollgate.routedip.arbitration import CONFLICT, conflict_message, holder_instead, rivals
from tollgate.routedip.election import Decision, ElectionInput, backing_nodes, decide, usage_by_node
from tollgate.routedip.firewall import FirewallPlan, plan_firewall
from tollgate.routedip.k8s import Kube
from tollgate.routedip.providers import FirewallContext, NodeTarget, Provider, ProviderError, RoutedIPRef
from tollgate.routedip.providers.factory import Providers
from tollgate.routedip.state import (
    ClassState,
    NodeState,
    PodState,
    RoutedIPState,
    ServiceState,
    SliceState,
    routed_ip_state,
)
from tollgate.routedip.validation import class_problems, trust_problems
from tollgate.runtime.kube import is_conflict, is_not_found
from tollgate.runtime.locks import KeyedLocks
from tollgate.runtime.telemetry import Telemetry
from tollgate.runtime.workqueue import QueueClosed, WorkQueue

log = logging.getLogger("tollgate.routedip")
FINALIZER = f"{GROUP}/release"
MOVE_TAINT_EFFECT = "PreferNoSchedule"
SERVICE_REF_NOT_ALLOWED = "ServiceRefNotAllowed"
FAILPOINTS = ("after-reserve", "after-taint", "after-firewall", "after-assign", "after-unassign")
Key = tuple[str, ...]
_UNSET: Any = object()
T = TypeVar("T")


class Requeue(Exception):
    """Reconcile this key again soon: something it read was stale."""


@dataclass
class Indexes:
    """The kopf indexes the controller reads (each maps a key to a store of slim states)."""

    nodes: Mapping[str, Iterable[NodeState]]
    services: Mapping[tuple[str, str], Iterable[ServiceState]]
    slices: Mapping[tuple[str, str], Iterable[SliceState]]
    pods: Mapping[str, Iterable[PodState]]
    routed_ips: Mapping[tuple[str, str], Iterable[RoutedIPState]]
    classes: Mapping[str, Iterable[ClassState]]


@dataclass
class ControllerConfig:
    system_namespace: str = "tollgate-system"
    workers: int = 32
    failpoints: frozenset[str] = frozenset()
    job_wait_timeout: float = 120.0
    trust: Trust = field(default_factory=Trust)
    # The Secrets the controller may read (the chart's tokenSecrets); None: any of its namespace.
    token_secrets: frozenset[str] | None = None


def _first(store: Iterable[Any] | None) -> Any:
    return next(iter(store), None) if store is not None else None


def _newer(a: str, b: str) -> bool:
    try:
        return int(a) > int(b)
    except ValueError:
        return False


def involved(rip: RoutedIPState) -> dict[str, str]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RoutedIP",
        "namespace": rip.namespace,
        "name": rip.name,
        "uid": rip.uid,
    }


def involved_class(cls: ClassState) -> dict[str, str]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ClusterRoutedIPClass", "name": cls.name, "uid": cls.uid}


@dataclass
class Controller:
    kube: Kube
    config: ControllerConfig
    telemetry: Telemetry
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    def __post_init__(self) -> None:
        self.queue: WorkQueue[Key] = WorkQueue()
        self.indexes: Indexes | None = None
        self.synced = asyncio.Event()
        self.providers = Providers(
            self.kube, self.config.system_namespace, self.config.job_wait_timeout, self.config.trust
        )
        self._overlay: dict[tuple[str, str], RoutedIPState] = {}
        self._written: dict[tuple[str, str], str] = {}
        self._reserving: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (className, node) being written
        self._posting: set[asyncio.Task[None]] = set()
        # Bumped on every change the controller hears of: what is derived from the cache is kept until then.
        self._version = 0
        self._derived: dict[object, tuple[int, Any]] = {}
        self._finalized: set[tuple[str, str]] = set()
        self._released: dict[tuple[str, str], str] = {}  # key -> uid whose finalizer this controller removed
        self._class_locks: KeyedLocks[str] = KeyedLocks()
        self._node_locks: KeyedLocks[str] = KeyedLocks()
        self._firewall_locks: KeyedLocks[str] = KeyedLocks()
        self._firewall_applied: dict[str, str] = {}
        self._nodes_seen: dict[str, NodeState] = {}
        self._workers: list[asyncio.Task[None]] = []
        self.tracer = self.telemetry.tracer("tollgate.routedip")
        meter = self.telemetry.meter("tollgate.routedip")
        self.moves = routedip_metrics.MOVES.create(meter)
        self.move_seconds = routedip_metrics.MOVE_DURATION.create(meter)
        self.errors = routedip_metrics.RECONCILE_ERRORS.create(meter)

    # ----- lifecycle -----
    def start(self, indexes: Indexes) -> None:
        self.indexes = indexes
        self._workers = [
            asyncio.create_task(self._work(), name=f"routedip-worker-{i}") for i in range(self.config.workers)
        ]

    async def stop(self) -> None:
        self.queue.close()
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        if self._posting:
            await asyncio.wait(self._posting, timeout=5)
        await self.providers.close()

    def mark_synced(self) -> None:
        """Called from every kopf event handler: kopf runs them only once every index is populated."""
        self.synced.set()

    # ----- what the cache holds -----
    def _idx(self) -> Indexes:
        assert self.indexes is not None, "controller used before start()"
        return self.indexes

    def nodes(self) -> dict[str, NodeState]:
        return {name: node for name, store in self._idx().nodes.items() if (node := _first(store)) is not None}

    def service(self, key: tuple[str, str]) -> ServiceState | None:
        service: ServiceState | None = _first(self._idx().services.get(key))
        return service

    def slices(self, key: tuple[str, str]) -> list[SliceState]:
        return list(self._idx().slices.get(key) or ())

    def pods(self, namespace: str) -> list[PodState]:
        return list(self._idx().pods.get(namespace) or ())

    def classes(self, class_name: str) -> list[ClassState]:
        return list(self._idx().classes.get(class_name) or ())

    def all_classes(self) -> list[ClassState]:
        return [cls for store in self._idx().classes.values() for cls in store]

    def routed_ip(self, key: tuple[str, str]) -> RoutedIPState | None:
        indexed: RoutedIPState | None = _first(self._idx().routed_ips.get(key))
        written = self._overlay.get(key)
        if indexed is None or written is None:
            return indexed
        if indexed.resource_version == written.resource_version or _newer(
            indexed.resource_version, written.resource_version
        ):
            self._overlay.pop(key, None)
            return indexed
        return written

    def routed_ips(self) -> list[RoutedIPState]:
        return self._memo(
            "routed_ips",
            lambda: [rip for key in list(self._idx().routed_ips.keys()) if (rip := self.routed_ip(key)) is not None],
        )

    def _memo(self, key: object, compute: Callable[[], T]) -> T:
        cached = self._derived.get(key)
        if cached is not None and cached[0] == self._version:
            return cast(T, cached[1])
        value = compute()
        self._derived[key] = (self._version, value)
        return value

    def _changed(self) -> None:
        self._version += 1
        if len(self._derived) > 1000:
            self._derived.clear()

    # ----- what changes trigger -----
    def node_changed(self, name: str, node: NodeState | None) -> None:
        self._changed()
        previous = self._nodes_seen.get(name)
        if node is None:
            self._nodes_seen.pop(name, None)
        else:
            self._nodes_seen[name] = node
        if node is not None and node.move_tainted:
            self.queue.add(("node", name))
        if previous is not None and node is not None and _same_for_election(previous, node):
            return
        for rip in self.routed_ips():
            self.queue.add(("rip", rip.namespace, rip.name))

    def service_changed(self, namespace: str, name: str) -> None:
        self._changed()
        for rip in self.routed_ips():
            if rip.service == (namespace, name):
                self.queue.add(("rip", rip.namespace, rip.name))

    def pod_changed(self, pod: PodState) -> None:
        self._changed()
        for rip in self.routed_ips():
            if rip.service[0] != pod.namespace:
                continue
            service = self.service(rip.service)
            if service is not None and service.selects(pod.labels):
                self.queue.add(("rip", rip.namespace, rip.name))

    def class_changed(self, name: str) -> None:
        self._changed()
        self.queue.add(("class", name))
        class_names = {cls.class_name for cls in self.all_classes() if cls.name == name}
        for rip in self.routed_ips():
            if rip.class_name in class_names or not self.classes(rip.class_name):
                self.queue.add(("rip", rip.namespace, rip.name))

    def routed_ip_changed(self, rip: RoutedIPState, deleted: bool) -> None:
        self._changed()
        if not deleted and self._written.get(rip.key) == rip.resource_version:
            return  # the echo of this controller's own write
        # A deletion, or an edit of spec.routedIP, can free the address a RoutedIP in Conflict waits for.
        for other in self.routed_ips():
            if other.key != rip.key and (other.ip == rip.ip or other.ready.get("reason") == CONFLICT):
                self.queue.add(("rip", *other.key))
        self.queue.add(("rip", *rip.key))

    # ----- workers -----
    async def _work(self) -> None:
        await self.synced.wait()
        while True:
            try:
                key = await self.queue.get()
            except QueueClosed:
                return
            try:
                with self.tracer.start_as_current_span(f"reconcile {key[0]}", attributes={"key": "/".join(key)}):
                    await self._reconcile(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Requeue:
                self.queue.add_after(key, 0.05)
            except Exception as error:
                self.errors.add(1, {"kind": key[0]})
                if isinstance(error, ProviderError) and error.retry_after:
                    delay = error.retry_after
                    self.queue.add_after(key, delay)
                else:
                    delay = self.queue.retry(key)
                log.warning(
                    "reconcile %s failed (retry in %.1f s): %s",
                    "/".join(key),
                    delay,
                    error,
                    exc_info=not isinstance(error, ProviderError),
                )
                await self._report_failure(key, error, delay)
            finally:
                self.queue.done(key)

    async def _reconcile(self, key: Key) -> None:
        if key[0] == "rip":
            await self.reconcile_routed_ip((key[1], key[2]))
        elif key[0] == "class":
            await self.reconcile_class(key[1])
        elif key[0] == "node":
            await self.untaint_if_unused(key[1])

    async def _report_failure(self, key: Key, error: Exception, delay: float) -> None:
        if key[0] != "rip":
            return
        rip = self.routed_ip((key[1], key[2]))
        if rip is None or rip.deleting:
            return
        reason = error.reason if isinstance(error, ProviderError) else "ReconcileError"
        message = f"{error} (retrying in {delay:.1f} s)"
        self.event(involved(rip), "Warning", reason, message)
        try:
            await self.write_status(rip, ready=("False", reason, str(error)))
        except Exception as status_error:
            log.warning("could not record the failure of %s: %s", "/".join(key), status_error)

    def event(self, about: Mapping[str, str], type_: str, reason: str, message: str) -> None:
        """Post an Event in the background: a move does not wait for its Events."""
        log.info("%s %s: %s", reason, about.get("name"), message)
        task = asyncio.create_task(self._post_event(dict(about), type_, reason, message))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    async def _post_event(self, about: Mapping[str, str], type_: str, reason: str, message: str) -> None:
        try:
            await self.kube.post_event(about, type_, reason, message)
        except Exception as error:
            log.warning("could not post the Event %s: %s", reason, error)

    def failpoint(self, name: str) -> None:
        """Crash here, as a power cut would, when the failpoint is armed (TOLLGATE_ROUTEDIP_FAILPOINTS)."""
        if name in self.config.failpoints:
            log.critical("failpoint %s reached: exiting without cleanup", name)
            logging.shutdown()
            os._exit(86)

    # ----- classes -----
    async def reconcile_class(self, name: str) -> None:
        cls = next((c for c in self.all_classes() if c.name == name), None)
        if cls is None:
            self._firewall_applied = {k: v for k, v in self._firewall_applied.items() if k != name}
            return
        same_name = [c.name for c in self.classes(cls.class_name)]
        problems = self.class_problems(cls, same_name)
        status = ClusterRoutedIPClassStatus.model_validate(cls.status)
        before = status.to_wire()
        status.observed_generation = cls.generation
        if problems:
            reason, message = problems[0][0], "; ".join(m for _, m in problems)
            changed = status.set_condition("Accepted", "False", reason, message, cls.generation)
        else:
            changed = status.set_condition(
                "Accepted", "True", "Valid", f"provider {cls.spec.provider if cls.spec else '?'}", cls.generation
            )
        if (after := status.to_wire()) != before:
            await self.kube.patch_class_status(name, after)
        if changed:
            if problems:
                self.event(involved_class(cls), "Warning", problems[0][0], "; ".join(m for _, m in problems))
            else:
                self.event(involved_class(cls), "Normal", "Accepted", "the class can be served")

    def class_problems(self, cls: ClassState, same_name: list[str]) -> list[tuple[str, str]]:
        config = self.config
        return class_problems(cls, config.system_namespace, same_name, config.trust, config.token_secrets)

    def class_for(self, rip: RoutedIPState) -> tuple[ClassState | None, tuple[str, str] | None]:
        candidates = self.classes(rip.class_name)
        if not candidates:
            return None, ("ClassNotFound", f"spec.className: no ClusterRoutedIPClass has className {rip.class_name!r}")
        cls = candidates[0]
        same_name = [c.name for c in candidates]
        problems = self.class_problems(cls, same_name)
        if problems:
            return None, ("ClassNotAccepted", f"ClusterRoutedIPClass {cls.name}: " + "; ".join(m for _, m in problems))
        return cls, None

    # ----- routed IPs -----
    async def reconcile_routed_ip(self, key: tuple[str, str]) -> None:
        rip = self.routed_ip(key)
        if rip is None:
            self._changed()
            self._overlay.pop(key, None)
            self._written.pop(key, None)
            self._finalized.discard(key)
            self._released.pop(key, None)
            return
        if rip.deleting:
            if FINALIZER in rip.finalizers and self._released.get(key) != rip.uid:
                await self.release(rip)
            return
        winner = holder_instead(rip, self.routed_ips())
        if winner is not None:
            await self.give_way(rip, winner)
            return
        letting_go = [other for other in rivals(rip, self.routed_ips()) if other.placement.nodes()]
        if letting_go:
            # Acting now could assign the address where a newer claim is about to unassign it.
            for other in letting_go:
                self.queue.add(("rip", *other.key))
            log.info(
                "%s/%s waits for %s to let go of %s",
                rip.namespace,
                rip.name,
                ", ".join(f"{o.namespace}/{o.name}" for o in letting_go),
                rip.ip,
            )
            return
        refused = service_ref_rule(rip.namespace, rip.service[0])
        if refused:
            await self.refuse_service_ref(rip, refused)
            return
        rip = await self.ensure_finalizer(rip)
        cls, problem = self.class_for(rip)
        if cls is None or cls.spec is None:
            assert problem is not None
            await self.write_status(rip, ready=("False", *problem))
            return
        if self.service(rip.service) is None:
            await self.write_status(
                rip,
                ready=(
                    "False",
                    "ServiceNotFound",
                    f"spec.serviceRef: Service {rip.service[0]}/{rip.service[1]} not found",
                ),
            )
            return
        provider = await self.providers.for_class(cls)
        decision = self.decide(rip, cls)
        placement = rip.placement
        if placement.target is not None and decision.node is not None and decision.node != placement.target:
            await self.abandon(rip, cls, provider, decision)
            raise Requeue
        if decision.action == "move" and placement.target is None:
            rip = await self.reserve(rip, cls)
        if rip.placement.target is not None:
            if decision.action == "none":
                await self.write_status(rip, ready=("False", "NoEligibleNode", decision.reason))
                return
            await self.complete_move(rip, cls, provider)
            return
        await self.settle(rip, cls, provider, decision)

    async def refuse_service_ref(self, rip: RoutedIPState, rule: str) -> None:
        """A Service of another namespace (admitted while the webhook was down): nothing is done for it."""
        previous = rip.ready
        message = f"spec.serviceRef.namespace: {rule}"
        await self.write_status(rip, ready=("False", SERVICE_REF_NOT_ALLOWED, message))
        if (previous.get("status"), previous.get("reason")) != ("False", SERVICE_REF_NOT_ALLOWED):
            log.warning("%s/%s refused: %s", rip.namespace, rip.name, message)
            self.event(involved(rip), "Warning", SERVICE_REF_NOT_ALLOWED, message)

    async def give_way(self, rip: RoutedIPState, winner: RoutedIPState) -> None:
        """An older claim holds this RoutedIP's address: let go of the nodes this one records (never one the
        winner records: the address is the winner's there), then say why it waits."""
        message = conflict_message(rip, winner)
        previous = rip.ready
        await self.let_go(rip)
        if rip.placement.nodes():
            rip = await self.write_status(rip, assigned=None, target=None, ready=("False", CONFLICT, message))
            self.queue.add(("rip", *winner.key))
        else:
            rip = await self.write_status(rip, ready=("False", CONFLICT, message))
        if (previous.get("status"), previous.get("reason")) != ("False", CONFLICT):
            log.warning(
                "%s/%s gives way to %s/%s, the older claim of %s",
                rip.namespace,
                rip.name,
                winner.namespace,
                winner.name,
                rip.ip,
            )
            self.event(involved(rip), "Warning", CONFLICT, message)

    async def let_go(self, rip: RoutedIPState) -> tuple[list[str], ClassState | None, Provider | None]:
        """Unassign the address from the nodes `rip` records, but those another RoutedIP of the address records
        (the address is that one's there). Returns the nodes, and the class and provider when it could."""
        held = sorted(rip.placement.nodes() - self._held_by_rivals(rip))
        candidates = self.classes(rip.class_name)
        cls = candidates[0] if candidates else None
        if not held or cls is None or cls.spec is None or trust_problems(cls.spec, self.config.trust):
            return held, None, None
        nodes = self.nodes()
        provider = await self.providers.for_class(cls)
        ref = RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip)
        for node in held:
            await self.untaint_if_unused(node, excluding=rip.key)
            await provider.unassign(ref, NodeTarget.of(node, nodes))
        return held, cls, provider

    def _held_by_rivals(self, rip: RoutedIPState) -> set[str]:
        """The nodes other RoutedIPs of the same address record: unassigning the address there is theirs to do."""
        return {node for other in rivals(rip, self.routed_ips()) for node in other.placement.nodes()}

    def decide(self, rip: RoutedIPState, cls: ClassState) -> Decision:
        assert cls.spec is not None
        nodes = self.nodes()
        service = self.service(rip.service)
        backing = backing_nodes(service, self.slices(rip.service), self.pods(rip.service[0]), nodes)
        usage = usage_by_node(
            other.placement.nodes() | self._reserved_node(other.key, rip.class_name)
            for other in self.routed_ips()
            if other.class_name == rip.class_name and other.key != rip.key
        )
        return decide(
            ElectionInput(
                nodes=nodes,
                backing=backing,
                usage=usage,
                limit=cls.spec.per_node_ip_limit,
                policy=cls.spec.election_policy,
                holder=rip.placement.assigned,
                target=rip.placement.target,
                last_move=rip.placement.last_move,
                cooldown=timedelta(seconds=cls.spec.move_cooldown_seconds),
                now=self.now(),
            )
        )

    def _reserved_node(self, key: tuple[str, str], class_name: str) -> set[str]:
        reserving = self._reserving.get(key)
        return {reserving[1]} if reserving is not None and reserving[0] == class_name else set()

    async def ensure_finalizer(self, rip: RoutedIPState) -> RoutedIPState:
        if rip.key in self._finalized or FINALIZER in rip.finalizers:
            self._finalized.add(rip.key)
            return rip
        try:
            body = await self.kube.set_routed_ip_finalizers(
                rip.namespace, rip.name, [*rip.finalizers, FINALIZER], rip.resource_version
            )
        except Exception as error:
            if is_conflict(error):
                raise Requeue from None
            raise
        self._finalized.add(rip.key)
        return self._remember(body)

    async def reserve(self, rip: RoutedIPState, cls: ClassState) -> RoutedIPState:
        """Write the elected node as the move's target. The election is made again under the class's lock
        and counts the reservations still being written, so concurrent moves never overfill a node."""
        async with self._class_locks.hold(cls.name):
            current = self.routed_ip(rip.key) or rip
            decision = self.decide(current, cls)
            if decision.action != "move" or current.placement.target is not None or decision.node is None:
                raise Requeue
            self._reserving[rip.key] = (cls.class_name, decision.node)
        holder = current.placement.assigned
        moving = (
            f"moving {current.ip} from {holder} to {decision.node}"
            if holder
            else f"assigning {current.ip} to {decision.node}"
        )
        try:
            reserved = await self.write_status(
                current, target=decision.node, ready=("False", "Moving", f"{moving}: {decision.reason}")
            )
        finally:
            self._reserving.pop(rip.key, None)
        self.event(
            involved(current), "Warning" if decision.urgent else "Normal", "Elected", f"{moving}: {decision.reason}"
        )
        self.failpoint("after-reserve")
        return reserved

    async def complete_move(self, rip: RoutedIPState, cls: ClassState, provider: Provider) -> None:
        assert cls.spec is not None and rip.placement.target is not None
        started = self.now()
        target, holder = rip.placement.target, rip.placement.assigned
        nodes = self.nodes()
        ref = RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip)
        await self.taint(target)
        self.failpoint("after-taint")
        if not cls.spec.firewall_post_allow:
            await self.apply_firewall(cls, provider)
            self.failpoint("after-firewall")
        await provider.assign(ref, NodeTarget.of(target, nodes), NodeTarget.of(holder, nodes) if holder else None)
        self.failpoint("after-assign")
        await self.untaint_if_unused(target, excluding=rip.key)
        if cls.spec.firewall_post_allow:
            await self.apply_firewall(cls, provider, extra={rip.key: {target}})
            self.failpoint("after-firewall")
        if holder is not None and holder != target:
            await provider.unassign(ref, NodeTarget.of(holder, nodes))
            self.failpoint("after-unassign")
        moved = holder != target
        await self.write_status(
            rip,
            assigned=target,
            target=None,
            last_move=now_rfc3339() if moved else _UNSET,
            ready=("True", "Assigned", f"{rip.ip} is assigned to {target}"),
        )
        message = f"{rip.ip} assigned to {target}" + (f" (was on {holder})" if holder and moved else "")
        self.event(involved(rip), "Normal", "Assigned", message)
        self.moves.add(1, {"class": cls.name})
        self.move_seconds.record((self.now() - started).total_seconds(), {"class": cls.name})
        await self.apply_firewall(cls, provider)

    async def abandon(self, rip: RoutedIPState, cls: ClassState, provider: Provider, decision: Decision) -> None:
        """Give up the move to a target that is no longer eligible, and reserve the node now decided on."""
        target = rip.placement.target
        assert target is not None and decision.node is not None
        why = decision.ineligible.get(target, "no longer the choice")
        await self.untaint_if_unused(target, excluding=rip.key)
        if target != rip.placement.assigned:
            await provider.unassign(
                RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip), NodeTarget.of(target, self.nodes())
            )
        async with self._class_locks.hold(cls.name):
            current = self.routed_ip(rip.key) or rip
            await self.write_status(
                current,
                target=decision.node,
                ready=("False", "Moving", f"moving {rip.ip} to {decision.node}: {decision.reason}"),
            )
        self.event(
            involved(rip),
            "Warning",
            "MoveAbandoned",
            f"abandoned the move to {target} ({why}); moving to {decision.node}",
        )

    async def settle(self, rip: RoutedIPState, cls: ClassState, provider: Provider, decision: Decision) -> None:
        """No move in progress: record why the IP stays where it is."""
        holder = rip.placement.assigned
        if decision.action == "keep":
            await self.apply_firewall(cls, provider)
            await self.write_status(rip, ready=("True", "Assigned", f"{rip.ip} is assigned to {holder}"))
        elif decision.action == "wait":
            assert decision.retry_after is not None
            self.queue.add_after(("rip", *rip.key), decision.retry_after)
            await self.apply_firewall(cls, provider)
            if await self._transition(rip, "True", "CoolingDown", decision.reason):
                self.event(involved(rip), "Normal", "CoolingDown", decision.reason)
        else:
            nodes = self.nodes()
            if holder is not None and holder not in nodes:
                await provider.unassign(RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip), NodeTarget(holder))
                rip = await self.write_status(rip, assigned=None)
                self.event(
                    involved(rip), "Warning", "Unassigned", f"{rip.ip} unassigned from {holder}: the node is gone"
                )
                await self.apply_firewall(cls, provider)
            if await self._transition(rip, "False", "NoEligibleNode", decision.reason):
                self.event(involved(rip), "Warning", "NoEligibleNode", decision.reason)

    async def _transition(self, rip: RoutedIPState, status: str, reason: str, message: str) -> bool:
        """Write the Ready condition; True when its status or reason changed (worth an Event)."""
        previous = rip.ready
        await self.write_status(rip, ready=(status, reason, message))
        return (previous.get("status"), previous.get("reason")) != (status, reason)

    async def release(self, rip: RoutedIPState) -> None:
        """The RoutedIP is being deleted: unassign the IP everywhere (but where another RoutedIP of the address
        holds it), close its ports, drop the finalizer."""
        held, cls, provider = await self.let_go(rip)
        if cls is not None and provider is not None:
            await self.apply_firewall(cls, provider, excluding=rip.key)
            self.event(involved(rip), "Normal", "Released", f"{rip.ip} unassigned from {', '.join(held)}")
        elif held:
            self.event(
                involved(rip),
                "Warning",
                "ReleasedWithoutClass",
                f"no ClusterRoutedIPClass with className {rip.class_name!r} can be served: {rip.ip} was not "
                f"unassigned from {', '.join(held)}",
            )
        finalizers = [f for f in rip.finalizers if f != FINALIZER]
        try:
            await self.kube.set_routed_ip_finalizers(rip.namespace, rip.name, finalizers, rip.resource_version)
        except Exception as error:
            if is_not_found(error):
                return
            if is_conflict(error):
                raise Requeue from None
            raise
        self._finalized.discard(rip.key)
        self._released[rip.key] = rip.uid

    # ----- status -----
    async def write_status(
        self,
        rip: RoutedIPState,
        *,
        assigned: str | None = _UNSET,
        target: str | None = _UNSET,
        last_move: str | None = _UNSET,
        ready: tuple[str, str, str] | None = None,
    ) -> RoutedIPState:
        status = RoutedIPStatus.model_validate(rip.status)
        before = status.to_wire()
        status.observed_generation = rip.generation
        if assigned is not _UNSET:
            status.assigned_node = assigned
        if target is not _UNSET:
            status.target_node = target
        if last_move is not _UNSET:
            status.last_move_time = last_move
        if ready is not None:
            status.set_condition("Ready", ready[0], ready[1], ready[2], rip.generation)  # type: ignore[arg-type]
        after = status.to_wire()
        if after == before:
            return rip
        try:
            body = await self.kube.patch_routed_ip_status(rip.namespace, rip.name, merge_patch(before, after))
        except Exception as error:
            if is_not_found(error):
                raise Requeue from None
            raise
        return self._remember(body)

    def _remember(self, body: Mapping[str, Any]) -> RoutedIPState:
        """Keep what this controller wrote: newer than the index until the watch brings it back."""
        state = routed_ip_state(body)
        self._overlay[state.key] = state
        self._written[state.key] = state.resource_version
        self._changed()
        return state

    # ----- nodes -----
    async def taint(self, node: str) -> None:
        cached = self.nodes().get(node)
        if cached is not None and cached.move_tainted:
            return  # already there (a stale cache only skips an advisory taint)
        taint = {"key": MOVE_TAINT_KEY, "effect": MOVE_TAINT_EFFECT, "value": "true"}
        await self._change_taints(node, lambda taints: [*taints, taint] if not _has_move_taint(taints) else None)

    async def untaint_if_unused(self, node: str, excluding: tuple[str, str] | None = None) -> None:
        """Remove the move taint unless another move is heading to `node` (checked under the node's lock).

        A taint the cache does not show yet is left to the node's next event, which queues it here again."""

        def without(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            if self._heading_to(node, excluding):
                return None
            return [t for t in taints if t.get("key") != MOVE_TAINT_KEY] if _has_move_taint(taints) else None

        cached = self.nodes().get(node)
        if cached is None or not cached.move_tainted or self._heading_to(node, excluding):
            return
        await self._change_taints(node, without)

    def _heading_to(self, node: str, excluding: tuple[str, str] | None) -> bool:
        return any(r.placement.target == node for r in self.routed_ips() if r.key != excluding and not r.deleting)

    async def _change_taints(
        self, node: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None], attempts: int = 10
    ) -> None:
        async with self._node_locks.hold(node):
            for _ in range(attempts):
                try:
                    body = await self.kube.read_node(node)
                except Exception as error:
                    if is_not_found(error):
                        return
                    raise
                taints = list((body.get("spec") or {}).get("taints") or [])
                changed = change(taints)
                if changed is None:
                    return
                patch = {
                    "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
                    "spec": {"taints": changed},
                }
                try:
                    await self.kube.patch_node(node, patch)
                    return
                except Exception as error:
                    if not is_conflict(error):
                        raise
            raise Requeue

    # ----- firewall -----
    def firewall_plan(
        self,
        cls: ClassState,
        extra: Mapping[tuple[str, str], set[str]] | None = None,
        excluding: tuple[str, str] | None = None,
    ) -> FirewallPlan:
        assert cls.spec is not None
        nodes = self.nodes()
        carried = []
        namespaces = set()
        for rip in self.routed_ips():
            if rip.class_name != cls.class_name or rip.deleting or rip.key == excluding:
                continue
            if service_ref_rule(rip.namespace, rip.service[0]):
                continue  # never opens another namespace's NodePorts
            on = {rip.placement.assigned} if rip.placement.assigned else set()
            if rip.placement.target and not cls.spec.firewall_post_allow:
                on.add(rip.placement.target)
            on |= (extra or {}).get(rip.key, set())
            carried.append((self.service(rip.service), on))
            namespaces.add(rip.service[0])
        pods = [pod for namespace in sorted(namespaces) for pod in self.pods(namespace)]
        return plan_firewall(carried, pods, nodes, parse_port_range(cls.spec.node_port_range))

    async def apply_firewall(
        self,
        cls: ClassState,
        provider: Provider,
        extra: Mapping[tuple[str, str], set[str]] | None = None,
        excluding: tuple[str, str] | None = None,
    ) -> None:
        async with self._firewall_locks.hold(cls.name):
            if extra is None and excluding is None:
                plan = self._memo(("firewall", cls.name, cls.generation), lambda: self.firewall_plan(cls))
            else:
                plan = self.firewall_plan(cls, extra, excluding)
            fingerprint = f"{cls.generation}:{plan.fingerprint()}"
            if self._firewall_applied.get(cls.name) == fingerprint:
                return
            await provider.apply_firewall(plan, FirewallContext(cls))
            self._firewall_applied[cls.name] = fingerprint
        opened = {name: n for name, n in plan.nodes.items() if n.ports}
        summary = "; ".join(
            f"{name} ({n.machine_id or 'no machine ID'}): {', '.join(str(p) for p in sorted(n.ports))}"
            for name, n in sorted(opened.items())
        )
        self.event(involved_class(cls), "Normal", "FirewallUpdated", f"allowing {summary or 'nothing'}")


def _has_move_taint(taints: Iterable[Mapping[str, Any]]) -> bool:
    return any(t.get("key") == MOVE_TAINT_KEY for t in taints)


def _same_for_election(a: NodeState, b: NodeState) -> bool:
    """Whether two states of a node elect alike (the move taint, this controller's own, does not count)."""

    def relevant(node: NodeState) -> tuple[object, ...]:
        taints = tuple(t for t in node.taints if t.key != MOVE_TAINT_KEY)
        return (node.ready, node.unschedulable, taints, node.deleting, node.provider_id, node.created)

    return relevant(a) == relevant(b)
