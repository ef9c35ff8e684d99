"""kopf handlers: thin. Indexes keep slim states of what election needs; event handlers tell the
controller what changed; the controller's workers do the rest.

kopf runs no event handler before every index holds its initial listing, so the first event handler
call marks the controller's cache as complete.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from tollgate.models.routedip import GROUP, VERSION
from tollgate.routedip.cache import Indexes
from tollgate.routedip.controller import Controller
from tollgate.routedip.state import (
    class_state,
    node_state,
    pod_state,
    routed_ip_state,
    service_state,
    slice_state,
)
from tollgate.runtime.operator import configure

ROUTEDIPS = (GROUP, VERSION, "routedips")
CLASSES = (GROUP, VERSION, "clusterroutedipclasses")
ENDPOINTSLICES = ("discovery.k8s.io", "v1", "endpointslices")


def build_registry(controller: Controller) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        configure(settings, "routedip")
        # Every watch event runs a handler: kopf's per-handler success lines would drown the decisions.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        # A failover waits for the watch event: keep kopf's per-object batching short.
        settings.batching.batch_window = 0.01
        # CRDs are installed before the controller; it needs no permission to watch them.
        settings.scanning.disabled = True
        controller.start(
            Indexes(
                nodes=kwargs["routedip_nodes"],
                services=kwargs["routedip_services"],
                slices=kwargs["routedip_slices"],
                pods=kwargs["routedip_pods"],
                routed_ips=kwargs["routedip_routedips"],
                classes=kwargs["routedip_classes"],
            )
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.stop()

    @kopf.index("", "v1", "nodes", id="routedip_nodes", registry=registry)
    def index_node(body: kopf.Body, name: str, **_: Any) -> dict[str, Any]:
        return {name: node_state(body)}

    @kopf.index("", "v1", "services", id="routedip_services", registry=registry)
    def index_service(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
        state = service_state(body)
        return {state.key: state}

    @kopf.index(*ENDPOINTSLICES, id="routedip_slices", registry=registry)
    def index_slice(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
        state = slice_state(body)
        return {(state.namespace, state.service): state} if state is not None else {}

    @kopf.index("", "v1", "pods", id="routedip_pods", registry=registry)
    def index_pod(body: kopf.Body, **_: Any) -> dict[str, Any]:
        state = pod_state(body)
        return {state.namespace: state}

    @kopf.index(*ROUTEDIPS, id="routedip_routedips", registry=registry)
    def index_routed_ip(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Any]:
        state = routed_ip_state(body)
        return {state.key: state}

    @kopf.index(*CLASSES, id="routedip_classes", registry=registry)
    def index_class(body: kopf.Body, **_: Any) -> dict[str, Any]:
        state = class_state(body)
        return {state.class_name: state}

    @kopf.on.event("", "v1", "nodes", registry=registry)
    def node_event(body: kopf.Body, name: str, type: str, **_: Any) -> None:
        controller.mark_synced()
        controller.node_changed(name, None if type == "DELETED" else node_state(body))

    @kopf.on.event("", "v1", "services", registry=registry)
    def service_event(body: kopf.Body, **_: Any) -> None:
        controller.mark_synced()
        controller.service_changed(*service_state(body).key)

    @kopf.on.event(*ENDPOINTSLICES, registry=registry)
    def slice_event(body: kopf.Body, **_: Any) -> None:
        controller.mark_synced()
        state = slice_state(body)
        if state is not None:
            controller.service_changed(state.namespace, state.service)

    @kopf.on.event("", "v1", "pods", registry=registry)
    def pod_event(body: kopf.Body, **_: Any) -> None:
        controller.mark_synced()
        controller.pod_changed(pod_state(body))

    @kopf.on.event(*ROUTEDIPS, registry=registry)
    def routed_ip_event(body: kopf.Body, type: str, **_: Any) -> None:
        controller.mark_synced()
        controller.routed_ip_changed(routed_ip_state(body), deleted=type == "DELETED")

    @kopf.on.event(*CLASSES, registry=registry)
    def class_event(name: str, **_: Any) -> None:
        controller.mark_synced()
        controller.class_changed(name)

    return registry
