"""Writes what the xDS server knows back to the VirtualServices: status, and Events for decisions; a GWProxy's
spec errors (routes that attach to none of its listeners) as Events on it.

Runs a pass when the server's state changed (at most once per `interval`): Envoys connecting, ACKing or
NACKing, and changes to the objects (another replica's report among them). This replica writes its own report
under `status.replicas[<replica>]` and the status merged from the reports of the live replicas (see status.py),
only when that differs from the status the object has; the reports of replicas whose pod is gone are dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

from tollgate.models.servicemesh import VirtualServiceStatus
from tollgate.runtime.backoff import Backoff, is_api_failure
from tollgate.xds import ir
from tollgate.xds.k8s import Kube
from tollgate.xds.server import XdsServer
from tollgate.xds.status import ENDPOINT_REFUSED, EnvoyView, replica_report, virtual_service_status

log = logging.getLogger("tollgate.xds.reporter")
RETRY_BACKOFF = Backoff(base=0.5, cap=30.0, jitter=0.5)
Key = tuple[str, str]


class StatusReporter:
    def __init__(
        self,
        server: XdsServer,
        kube: Kube,
        interval: float = 0.5,
        replica: str = "xds",
        watched_namespace: str | None = None,
    ) -> None:
        self.server = server
        self.kube = kube
        self.interval = interval
        self.replica = replica
        self.watched_namespace = watched_namespace
        self._told: dict[tuple[Key, str], str] = {}

    def alive(self, replica: str) -> bool:
        """A replica `<namespace>/<pod>` is alive while its pod exists; one whose pods are not watched, always."""
        namespace, _, pod = replica.partition("/")
        if replica == self.replica or not pod:
            return True
        if self.watched_namespace is not None and namespace != self.watched_namespace:
            return True
        return (namespace, pod) in self.server.world.pods

    async def run(self, stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        failures = 0
        try:
            while not stop.is_set():
                dirty = asyncio.ensure_future(self.server.status_dirty.wait())
                await asyncio.wait({dirty, stopping}, return_when=asyncio.FIRST_COMPLETED)
                dirty.cancel()
                if stop.is_set():
                    return
                pause = self.interval if not failures else RETRY_BACKOFF.pause(failures)
                await asyncio.wait({stopping}, timeout=pause)
                self.server.status_dirty.clear()
                try:
                    await self.report()
                    failures = 0
                except Exception as error:
                    if not is_api_failure(error):
                        raise
                    failures += 1
                    log.warning("status pass failed, retrying: %s", error)
                    self.server.status_dirty.set()
        finally:
            stopping.cancel()

    def _views(self) -> tuple[dict[ir.SourceRef, dict[str, EnvoyView]], dict[ir.SourceRef, list[ir.Conflict]]]:
        views: dict[ir.SourceRef, dict[str, EnvoyView]] = defaultdict(dict)
        conflicts: dict[ir.SourceRef, list[ir.Conflict]] = defaultdict(list)
        for conn in sorted(self.server.connections.values(), key=lambda c: c.id):
            for ref in conn.config.sources:
                state = conn.stream.owner_state(ref)
                if state == "Programmed":
                    conn.programmed[ref] = self.server.generations.get(ref, 0)
                rejection = conn.stream.rejection(ref)
                error = rejection.message if rejection is not None else ""
                node = conn.identity.node_id
                views[ref][node] = EnvoyView(node, state, conn.programmed.get(ref), error)
            for conflict in conn.config.conflicts:
                conflicts[conflict.winner].append(conflict)
                if conflict.loser != conflict.winner:
                    conflicts[conflict.loser].append(conflict)
        return views, conflicts

    async def _tell(self, obj: dict[str, Any], key: Key, topic: str, type_: str, reason: str, message: str) -> None:
        """Post an Event the first time `message` is the news about `topic` on this object."""
        if not message:
            self._told.pop((key, topic), None)
            return
        if self._told.get((key, topic)) != message:
            self._told[(key, topic)] = message
            await self.kube.event(obj, type_, reason, message)

    async def report(self) -> None:
        views, conflicts = self._views()
        nacks, self.server.nacks = self.server.nacks, []
        rejections: dict[tuple[ir.SourceRef, str], list[str]] = defaultdict(list)
        for conn, nack in nacks:
            for owner in nack.owners:
                rejections[(owner, nack.message)].append(conn.identity.node_id)
        world = self.server.world
        by_kind = {
            "VirtualService": world.virtual_services,
            "LoadBalancer": world.load_balancers,
            "GWProxy": world.gw_proxies,
        }
        objects = world.virtual_services
        for (owner, message), nodes in rejections.items():
            # A GWProxy's or LoadBalancer's status is the allocator's: their rejections are told in Events.
            obj = by_kind[owner.kind].get((owner.namespace, owner.name))
            if obj is not None:
                generation = self.server.generations.get(owner, 0)
                who = ", ".join(sorted(set(nodes)))
                await self.kube.event(
                    dict(obj), "Warning", "Rejected", f"Envoy {who} rejected generation {generation}: {message}"
                )
        for source in self.server.sources:
            ref = source.ref
            key = (ref.namespace, ref.name)
            proxy = self.server.world.gw_proxies.get(key) if ref.kind == "GWProxy" else None
            if proxy is not None:
                # A GWProxy's status is the allocator's: what does not translate is told in Events.
                await self._tell(dict(proxy), key, "gwproxy-errors", "Warning", "Invalid", "; ".join(source.errors))
            obj = objects.get(key)
            if ref.kind != "VirtualService" or obj is None:
                continue
            current = VirtualServiceStatus.model_validate(obj["status"]) if obj.get("status") else None
            others = current.replicas if current is not None else {}
            reports = {r: report for r, report in others.items() if r != self.replica and self.alive(r)}
            reports[self.replica] = replica_report(source, views.get(ref, {}).values(), conflicts.get(ref, []))
            status = virtual_service_status(source, reports, current)
            await self._tell(dict(obj), key, "errors", "Warning", "Invalid", "; ".join(source.errors))
            await self._tell(dict(obj), key, "refusals", "Warning", ENDPOINT_REFUSED, "; ".join(source.refusals))
            conflicted = status.condition("Conflicted")
            await self._tell(
                dict(obj),
                key,
                "conflicts",
                "Warning",
                "Conflict",
                conflicted.message if conflicted is not None and conflicted.status == "True" else "",
            )
            programmed = status.condition("Programmed")
            if programmed is not None and programmed.status == "True":
                await self._tell(dict(obj), key, "programmed", "Normal", "Programmed", programmed.message)
            wire = status.to_wire()
            if current is not None and current.to_wire() == wire:
                continue
            gone = [r for r in others if r not in reports]
            if gone:
                log.info("dropping the reports of replicas that are gone", extra={"replicas": gone, "object": key})
                wire["replicas"].update(dict.fromkeys(gone))  # null removes the key in a merge patch
            await self.kube.patch_virtual_service_status(ref.namespace, ref.name, wire)
        live = {(s.ref.namespace, s.ref.name) for s in self.server.sources}
        for told in [told for told in self._told if told[0] not in live]:
            del self._told[told]
