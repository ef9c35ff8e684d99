"""The move, carried out against the API server and the provider. Each step is idempotent and recorded, so that a
restarted controller resumes it:

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
unassign from the target) before the next one is reserved. Which step comes next is `steps.move_step`'s
decision, which node the election's (`election.decide`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from opentelemetry import metrics

from tollgate.models.base import now_rfc3339
from tollgate.models.routedip import parse_port_range
from tollgate.routedip import metrics as routedip_metrics
from tollgate.routedip.cache import Cache, Key, Requeue
from tollgate.routedip.election import Decision, ElectionInput, backing_nodes, class_usage, decide
from tollgate.routedip.firewall import FirewallPlan, nodes_to_open, plan_firewall
from tollgate.routedip.k8s import Kube
from tollgate.routedip.providers import FirewallContext, NodeTarget, Provider, RoutedIPRef
from tollgate.routedip.records import UNCHANGED, Records, involved, involved_class
from tollgate.routedip.state import ClassState, RoutedIPState
from tollgate.routedip.steps import (
    assigned_message,
    heading_to,
    moving_message,
    with_move_taint,
    without_move_taint,
)
from tollgate.runtime.kube import is_conflict, is_not_found
from tollgate.runtime.locks import KeyedLocks
from tollgate.runtime.workqueue import WorkQueue

log = logging.getLogger("tollgate.routedip")


@dataclass
class Mover:
    kube: Kube
    cache: Cache
    records: Records
    queue: WorkQueue[Key]
    failpoints: frozenset[str]
    meter: metrics.Meter
    now: Callable[[], datetime]

    def __post_init__(self) -> None:
        self._class_locks: KeyedLocks[str] = KeyedLocks()
        self._node_locks: KeyedLocks[str] = KeyedLocks()
        self._firewall_locks: KeyedLocks[str] = KeyedLocks()
        self._firewall_applied: dict[str, str] = {}
        self._reserving: dict[tuple[str, str], tuple[str, str]] = {}  # key -> (className, node) being written
        self.moves = routedip_metrics.MOVES.create(self.meter)
        self.move_seconds = routedip_metrics.MOVE_DURATION.create(self.meter)

    def failpoint(self, name: str) -> None:
        """Crash here, as a power cut would, when the failpoint is armed (TOLLGATE_ROUTEDIP_FAILPOINTS)."""
        if name in self.failpoints:
            log.critical("failpoint %s reached: exiting without cleanup", name)
            logging.shutdown()
            os._exit(86)

    # ----- the election, on what the cache holds -----
    def decide(self, rip: RoutedIPState, cls: ClassState) -> Decision:
        assert cls.spec is not None
        nodes = self.cache.nodes()
        service = self.cache.service(rip.service)
        backing = backing_nodes(service, self.cache.slices(rip.service), self.cache.pods(rip.service[0]), nodes)
        return decide(
            ElectionInput(
                nodes=nodes,
                backing=backing,
                usage=class_usage(rip, self.cache.routed_ips(), self._reserving),
                limit=cls.spec.per_node_ip_limit,
                policy=cls.spec.election_policy,
                holder=rip.placement.assigned,
                target=rip.placement.target,
                last_move=rip.placement.last_move,
                cooldown=timedelta(seconds=cls.spec.move_cooldown_seconds),
                now=self.now(),
            )
        )

    # ----- the steps -----
    async def reserve(self, rip: RoutedIPState, cls: ClassState) -> RoutedIPState:
        """Write the elected node as the move's target. The election is made again under the class's lock
        and counts the reservations still being written, so concurrent moves never overfill a node."""
        async with self._class_locks.hold(cls.name):
            current = self.cache.routed_ip(rip.key) or rip
            decision = self.decide(current, cls)
            if decision.action != "move" or current.placement.target is not None or decision.node is None:
                raise Requeue
            self._reserving[rip.key] = (cls.class_name, decision.node)
        moving = moving_message(current.ip, current.placement.assigned, decision.node)
        try:
            reserved = await self.records.write_status(
                current, target=decision.node, ready=("False", "Moving", f"{moving}: {decision.reason}")
            )
        finally:
            self._reserving.pop(rip.key, None)
        self.records.event(
            involved(current), "Warning" if decision.urgent else "Normal", "Elected", f"{moving}: {decision.reason}"
        )
        self.failpoint("after-reserve")
        return reserved

    async def complete(self, rip: RoutedIPState, cls: ClassState, provider: Provider) -> None:
        assert cls.spec is not None and rip.placement.target is not None
        started = self.now()
        target, holder = rip.placement.target, rip.placement.assigned
        nodes = self.cache.nodes()
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
        await self.records.write_status(
            rip,
            assigned=target,
            target=None,
            last_move=now_rfc3339() if holder != target else UNCHANGED,
            ready=("True", "Assigned", f"{rip.ip} is assigned to {target}"),
        )
        self.records.event(involved(rip), "Normal", "Assigned", assigned_message(rip.ip, target, holder))
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
                RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip), NodeTarget.of(target, self.cache.nodes())
            )
        async with self._class_locks.hold(cls.name):
            current = self.cache.routed_ip(rip.key) or rip
            await self.records.write_status(
                current,
                target=decision.node,
                ready=("False", "Moving", f"moving {rip.ip} to {decision.node}: {decision.reason}"),
            )
        self.records.event(
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
            await self.records.write_status(rip, ready=("True", "Assigned", f"{rip.ip} is assigned to {holder}"))
        elif decision.action == "wait":
            assert decision.retry_after is not None
            self.queue.add_after(("rip", *rip.key), decision.retry_after)
            await self.apply_firewall(cls, provider)
            if await self.records.transition(rip, "True", "CoolingDown", decision.reason):
                self.records.event(involved(rip), "Normal", "CoolingDown", decision.reason)
        else:
            if holder is not None and holder not in self.cache.nodes():
                await provider.unassign(RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip), NodeTarget(holder))
                rip = await self.records.write_status(rip, assigned=None)
                self.records.event(
                    involved(rip), "Warning", "Unassigned", f"{rip.ip} unassigned from {holder}: the node is gone"
                )
                await self.apply_firewall(cls, provider)
            if await self.records.transition(rip, "False", "NoEligibleNode", decision.reason):
                self.records.event(involved(rip), "Warning", "NoEligibleNode", decision.reason)

    # ----- the move taint -----
    async def taint(self, node: str) -> None:
        cached = self.cache.nodes().get(node)
        if cached is not None and cached.move_tainted:
            return  # already there (a stale cache only skips an advisory taint)
        await self._change_taints(node, with_move_taint)

    async def untaint_if_unused(self, node: str, excluding: tuple[str, str] | None = None) -> None:
        """Remove the move taint unless another move is heading to `node` (checked under the node's lock).

        A taint the cache does not show yet is left to the node's next event, which queues it here again."""

        def without(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            if heading_to(node, self.cache.routed_ips(), excluding):
                return None
            return without_move_taint(taints)

        cached = self.cache.nodes().get(node)
        if cached is None or not cached.move_tainted or heading_to(node, self.cache.routed_ips(), excluding):
            return
        await self._change_taints(node, without)

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

    # ----- the firewall -----
    def firewall_plan(
        self,
        cls: ClassState,
        extra: Mapping[tuple[str, str], set[str]] | None = None,
        excluding: tuple[str, str] | None = None,
    ) -> FirewallPlan:
        assert cls.spec is not None
        nodes = self.cache.nodes()
        opened = nodes_to_open(self.cache.routed_ips(), cls.class_name, cls.spec.firewall_post_allow, extra, excluding)
        carried = [(self.cache.service(service), on) for service, on in opened]
        namespaces = sorted({service[0] for service, _ in opened})
        pods = [pod for namespace in namespaces for pod in self.cache.pods(namespace)]
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
                plan = self.cache.memo(("firewall", cls.name, cls.generation), lambda: self.firewall_plan(cls))
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
        self.records.event(involved_class(cls), "Normal", "FirewallUpdated", f"allowing {summary or 'nothing'}")

    def forget_class(self, name: str) -> None:
        """The class is gone: its firewall is applied afresh if it comes back."""
        self._firewall_applied.pop(name, None)
