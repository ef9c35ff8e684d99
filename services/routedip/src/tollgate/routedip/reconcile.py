"""One reconcile of a RoutedIP or a ClusterRoutedIPClass: the pure decisions (arbitration, validation, election,
`steps`) say what to do, the mover and the records do it."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tollgate.models.routedip import ClusterRoutedIPClassStatus, service_ref_rule
from tollgate.routedip.arbitration import CONFLICT, conflict_message, holder_instead, letting_go, nodes_to_let_go
from tollgate.routedip.cache import Cache, Key, Requeue
from tollgate.routedip.config import ControllerConfig
from tollgate.routedip.k8s import Kube
from tollgate.routedip.mover import Mover
from tollgate.routedip.providers import NodeTarget, Provider, RoutedIPRef
from tollgate.routedip.providers.factory import Providers
from tollgate.routedip.records import FINALIZER, Records, involved, involved_class
from tollgate.routedip.state import ClassState, RoutedIPState
from tollgate.routedip.steps import acceptance, is_news, move_step, needs_release
from tollgate.routedip.validation import class_problems, trust_problems
from tollgate.runtime.workqueue import WorkQueue

log = logging.getLogger("tollgate.routedip")
SERVICE_REF_NOT_ALLOWED = "ServiceRefNotAllowed"


@dataclass
class Reconciler:
    kube: Kube
    cache: Cache
    records: Records
    mover: Mover
    providers: Providers
    queue: WorkQueue[Key]
    config: ControllerConfig

    # ----- classes -----
    async def reconcile_class(self, name: str) -> None:
        cls = next((c for c in self.cache.all_classes() if c.name == name), None)
        if cls is None:
            self.mover.forget_class(name)
            return
        same_name = [c.name for c in self.cache.classes(cls.class_name)]
        verdict = acceptance(cls, self.class_problems(cls, same_name))
        status = ClusterRoutedIPClassStatus.model_validate(cls.status)
        before = status.to_wire()
        status.observed_generation = cls.generation
        changed = status.set_condition("Accepted", *verdict.condition, cls.generation)
        if (after := status.to_wire()) != before:
            await self.kube.patch_class_status(name, after)
        if changed:
            self.records.event(involved_class(cls), *verdict.event)

    def class_problems(self, cls: ClassState, same_name: list[str]) -> list[tuple[str, str]]:
        config = self.config
        return class_problems(cls, config.system_namespace, same_name, config.trust, config.token_secrets)

    def class_for(self, rip: RoutedIPState) -> tuple[ClassState | None, tuple[str, str] | None]:
        candidates = self.cache.classes(rip.class_name)
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
        rip = self.cache.routed_ip(key)
        if rip is None:
            self.cache.forget(key)
            self.records.forget(key)
            return
        if rip.deleting:
            if needs_release(rip, FINALIZER, self.records.released.get(key)):
                await self.release(rip)
            return
        if await self.gives_way_or_waits(rip):
            return
        refused = service_ref_rule(rip.namespace, rip.service[0])
        if refused:
            await self.refuse_service_ref(rip, refused)
            return
        rip = await self.records.ensure_finalizer(rip)
        cls, problem = self.class_for(rip)
        if cls is None or cls.spec is None:
            assert problem is not None
            await self.records.write_status(rip, ready=("False", *problem))
            return
        if self.cache.service(rip.service) is None:
            await self.records.write_status(
                rip,
                ready=(
                    "False",
                    "ServiceNotFound",
                    f"spec.serviceRef: Service {rip.service[0]}/{rip.service[1]} not found",
                ),
            )
            return
        await self.place(rip, cls)

    async def gives_way_or_waits(self, rip: RoutedIPState) -> bool:
        """Whether another RoutedIP of the address stops this one: an older claim holds it (this one gives way),
        or a newer claim placed before this one is letting go of it (this one waits)."""
        winner = holder_instead(rip, self.cache.routed_ips())
        if winner is not None:
            await self.give_way(rip, winner)
            return True
        waiting_for = letting_go(rip, self.cache.routed_ips())
        if not waiting_for:
            return False
        for other in waiting_for:
            self.queue.add(("rip", *other.key))
        log.info(
            "%s/%s waits for %s to let go of %s",
            rip.namespace,
            rip.name,
            ", ".join(f"{o.namespace}/{o.name}" for o in waiting_for),
            rip.ip,
        )
        return True

    async def place(self, rip: RoutedIPState, cls: ClassState) -> None:
        """Elect a node and take the step the election and the status call for."""
        provider = await self.providers.for_class(cls)
        decision = self.mover.decide(rip, cls)
        step = move_step(rip.placement, decision)
        if step == "abandon":
            await self.mover.abandon(rip, cls, provider, decision)
            raise Requeue
        if step == "reserve":
            rip = await self.mover.reserve(rip, cls)
            step = "complete"
        if step == "stall":
            await self.records.write_status(rip, ready=("False", "NoEligibleNode", decision.reason))
        elif step == "complete":
            await self.mover.complete(rip, cls, provider)
        else:
            await self.mover.settle(rip, cls, provider, decision)

    async def refuse_service_ref(self, rip: RoutedIPState, rule: str) -> None:
        """A Service of another namespace (admitted while the webhook was down): nothing is done for it."""
        previous = rip.ready
        message = f"spec.serviceRef.namespace: {rule}"
        await self.records.write_status(rip, ready=("False", SERVICE_REF_NOT_ALLOWED, message))
        if is_news(previous, "False", SERVICE_REF_NOT_ALLOWED):
            log.warning("%s/%s refused: %s", rip.namespace, rip.name, message)
            self.records.event(involved(rip), "Warning", SERVICE_REF_NOT_ALLOWED, message)

    async def give_way(self, rip: RoutedIPState, winner: RoutedIPState) -> None:
        """An older claim holds this RoutedIP's address: let go of the nodes this one records (never one the
        winner records: the address is the winner's there), then say why it waits."""
        message = conflict_message(rip, winner)
        previous = rip.ready
        await self.let_go(rip)
        if rip.placement.nodes():
            rip = await self.records.write_status(rip, assigned=None, target=None, ready=("False", CONFLICT, message))
            self.queue.add(("rip", *winner.key))
        else:
            rip = await self.records.write_status(rip, ready=("False", CONFLICT, message))
        if is_news(previous, "False", CONFLICT):
            log.warning(
                "%s/%s gives way to %s/%s, the older claim of %s",
                rip.namespace,
                rip.name,
                winner.namespace,
                winner.name,
                rip.ip,
            )
            self.records.event(involved(rip), "Warning", CONFLICT, message)

    async def let_go(self, rip: RoutedIPState) -> tuple[list[str], ClassState | None, Provider | None]:
        """Unassign the address from the nodes `rip` records, but those another RoutedIP of the address records
        (the address is that one's there). Returns the nodes, and the class and provider when it could."""
        held = nodes_to_let_go(rip, self.cache.routed_ips())
        candidates = self.cache.classes(rip.class_name)
        cls = candidates[0] if candidates else None
        if not held or cls is None or cls.spec is None or trust_problems(cls.spec, self.config.trust):
            return held, None, None
        nodes = self.cache.nodes()
        provider = await self.providers.for_class(cls)
        ref = RoutedIPRef(rip.namespace, rip.name, rip.uid, rip.ip)
        for node in held:
            await self.mover.untaint_if_unused(node, excluding=rip.key)
            await provider.unassign(ref, NodeTarget.of(node, nodes))
        return held, cls, provider

    async def release(self, rip: RoutedIPState) -> None:
        """The RoutedIP is being deleted: unassign the IP everywhere (but where another RoutedIP of the address
        holds it), close its ports, drop the finalizer."""
        held, cls, provider = await self.let_go(rip)
        if cls is not None and provider is not None:
            await self.mover.apply_firewall(cls, provider, excluding=rip.key)
            self.records.event(involved(rip), "Normal", "Released", f"{rip.ip} unassigned from {', '.join(held)}")
        elif held:
            self.records.event(
                involved(rip),
                "Warning",
                "ReleasedWithoutClass",
                f"no ClusterRoutedIPClass with className {rip.class_name!r} can be served: {rip.ip} was not "
                f"unassigned from {', '.join(held)}",
            )
        await self.records.drop_finalizer(rip)
