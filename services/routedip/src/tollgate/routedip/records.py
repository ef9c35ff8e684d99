"""What the controller records about the objects it serves: a RoutedIP's status and finalizer (each write kept in
the cache until the watch brings it back), and Events, posted in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from tollgate.models.base import merge_patch
from tollgate.models.routedip import GROUP, VERSION, RoutedIPStatus
from tollgate.routedip.cache import Cache, Requeue
from tollgate.routedip.k8s import Kube
from tollgate.routedip.state import ClassState, RoutedIPState
from tollgate.routedip.steps import is_news
from tollgate.runtime.kube import is_conflict, is_not_found

log = logging.getLogger("tollgate.routedip")
FINALIZER = f"{GROUP}/release"
UNCHANGED: Any = object()  # a status field write_status leaves as it is


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


class Records:
    def __init__(self, kube: Kube, cache: Cache) -> None:
        self.kube = kube
        self.cache = cache
        self._posting: set[asyncio.Task[None]] = set()
        self._finalized: set[tuple[str, str]] = set()
        self.released: dict[tuple[str, str], str] = {}  # key -> uid whose finalizer this controller removed

    async def close(self) -> None:
        """Wait a little for the Events still being posted."""
        if self._posting:
            await asyncio.wait(self._posting, timeout=5)

    def forget(self, key: tuple[str, str]) -> None:
        """The RoutedIP is gone: drop what was remembered of it."""
        self._finalized.discard(key)
        self.released.pop(key, None)

    # ----- status -----
    async def write_status(
        self,
        rip: RoutedIPState,
        *,
        assigned: str | None = UNCHANGED,
        target: str | None = UNCHANGED,
        last_move: str | None = UNCHANGED,
        ready: tuple[str, str, str] | None = None,
    ) -> RoutedIPState:
        status = RoutedIPStatus.model_validate(rip.status)
        before = status.to_wire()
        status.observed_generation = rip.generation
        if assigned is not UNCHANGED:
            status.assigned_node = assigned
        if target is not UNCHANGED:
            status.target_node = target
        if last_move is not UNCHANGED:
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
        return self.cache.remember(body)

    async def transition(self, rip: RoutedIPState, status: str, reason: str, message: str) -> bool:
        """Write the Ready condition; True when its status or reason changed (worth an Event)."""
        previous = rip.ready
        await self.write_status(rip, ready=(status, reason, message))
        return is_news(previous, status, reason)

    # ----- the finalizer -----
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
        return self.cache.remember(body)

    async def drop_finalizer(self, rip: RoutedIPState) -> None:
        """Let the deletion of a released RoutedIP complete."""
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
        self.released[rip.key] = rip.uid

    # ----- Events -----
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
