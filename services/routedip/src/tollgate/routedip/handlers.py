"""kopf handlers: thin. Every watch event goes to the controller, which keeps slim states of what election needs
in its cache and queues what the change re-examines; the controller's workers do the rest."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from tollgate.routedip.controller import Controller
from tollgate.routedip.k8s import WATCHED
from tollgate.runtime.operator import configure


def build_registry(controller: Controller) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, "routedip")
        # Every watch event runs a handler: kopf's per-handler success lines would drown the decisions.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        # A failover waits for the watch event: keep kopf's per-object batching short.
        settings.batching.batch_window = 0.01
        # CRDs are installed before the controller; it needs no permission to watch them.
        settings.scanning.disabled = True
        await controller.start()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.stop()

    for plural, (group, version, _) in WATCHED.items():
        # A coroutine: kopf runs it on the event loop, where the cache and the work queue live (a plain function it
        # would run on a thread).
        async def watched(body: kopf.Body, type: str, plural: str = plural, **_: Any) -> None:
            controller.watched(plural, body, deleted=type == "DELETED")

        kopf.on.event(group, version, plural, registry=registry, id=f"watch-{plural}")(watched)

    return registry
