"""Slim, immutable views of the objects the controller watches, parsed from raw API bodies (no I/O).

The kopf indexes hold these instead of whole objects: they keep only what election, firewall planning
and the move need, and compare equal when nothing that matters changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tollgate.models.base import parse_rfc3339
from tollgate.models.nodes import Taint, node_taints
from tollgate.models.routedip import MOVE_TAINT_KEY, ClusterRoutedIPClassSpec

SERVICE_NAME_LABEL = "kubernetes.io/service-name"


@dataclass(frozen=True)
class NodeState:
    name: str
    created: datetime
    ready: bool
    ready_detail: str
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()
    deleting: bool = False
    provider_id: str | None = None

    @property
    def move_tainted(self) -> bool:
        return any(t.key == MOVE_TAINT_KEY for t in self.taints)


def node_state(body: Mapping[str, Any]) -> NodeState:
    meta, spec, status = body.get("metadata", {}), body.get("spec") or {}, body.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None:
        detail = "NotReady (no Ready condition)"
    elif ready.get("status") == "True":
        detail = "Ready"
    else:
        reason = ready.get("reason") or ready.get("status")
        detail = f"NotReady (Ready={ready.get('status')}, {reason})"
    return NodeState(
        name=meta["name"],
        created=parse_rfc3339(meta.get("creationTimestamp")) or datetime.now(UTC),
        ready=ready is not None and ready.get("status") == "True",
        ready_detail=detail,
        unschedulable=bool(spec.get("unschedulable")),
        taints=node_taints(body),
        deleting=meta.get("deletionTimestamp") is not None,
        provider_id=spec.get("providerID"),
    )


@dataclass(frozen=True)
class ServicePort:
    protocol: str
    port: int
    node_port: int | None = None
    name: str = ""


@dataclass(frozen=True)
class ServiceState:
    namespace: str
    name: str
    selector: Mapping[str, str] | None
    local_traffic: bool
    ports: tuple[ServicePort, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def selects(self, labels: Mapping[str, str]) -> bool:
        return bool(self.selector) and all(labels.get(k) == v for k, v in (self.selector or {}).items())


def service_state(body: Mapping[str, Any]) -> ServiceState:
    meta, spec = body.get("metadata", {}), body.get("spec") or {}
    return ServiceState(
        namespace=meta["namespace"],
        name=meta["name"],
        selector=dict(spec["selector"]) if spec.get("selector") else None,
        local_traffic=spec.get("externalTrafficPolicy") == "Local",
        ports=tuple(
            ServicePort(
                protocol=p.get("protocol", "TCP"),
                port=int(p["port"]),
                node_port=p.get("nodePort"),
                name=p.get("name", ""),
            )
            for p in spec.get("ports") or []
        ),
    )


@dataclass(frozen=True)
class Endpoint:
    node: str | None
    ready: bool
    pod: str | None = None


@dataclass(frozen=True)
class SliceState:
    namespace: str
    service: str
    name: str
    endpoints: tuple[Endpoint, ...] = ()


def slice_state(body: Mapping[str, Any]) -> SliceState | None:
    meta = body.get("metadata", {})
    service = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
    if not service:
        return None
    endpoints = []
    for endpoint in body.get("endpoints") or []:
        ref = endpoint.get("targetRef") or {}
        conditions = endpoint.get("conditions") or {}
        endpoints.append(
            Endpoint(
                node=endpoint.get("nodeName"),
                # "ready" unset means ready, per the EndpointSlice API.
                ready=conditions.get("ready") is not False and conditions.get("terminating") is not True,
                pod=ref.get("name") if ref.get("kind") == "Pod" else None,
            )
        )
    return SliceState(namespace=meta["namespace"], service=service, name=meta["name"], endpoints=tuple(endpoints))


@dataclass(frozen=True)
class PodState:
    namespace: str
    name: str
    labels: Mapping[str, str]
    node: str | None
    active: bool
    host_ports: tuple[tuple[str, int], ...] = ()
    ready: bool = False


def pod_state(body: Mapping[str, Any]) -> PodState:
    meta, spec, status = body.get("metadata", {}), body.get("spec") or {}, body.get("status") or {}
    host_ports = tuple(
        (port.get("protocol", "TCP"), int(port["hostPort"]))
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for port in container.get("ports") or []
        if port.get("hostPort")
    )
    return PodState(
        namespace=meta["namespace"],
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        node=spec.get("nodeName"),
        active=meta.get("deletionTimestamp") is None and status.get("phase") not in ("Succeeded", "Failed"),
        host_ports=host_ports,
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
    )


@dataclass(frozen=True)
class Placement:
    """Where a routed IP is, as its status records: the holder, and the node a move is heading to."""

    assigned: str | None = None
    target: str | None = None
    last_move: datetime | None = None

    def nodes(self) -> set[str]:
        return {n for n in (self.assigned, self.target) if n}


@dataclass(frozen=True)
class RoutedIPState:
    namespace: str
    name: str
    uid: str
    generation: int
    class_name: str
    ip: str
    service: tuple[str, str]
    placement: Placement
    status: Mapping[str, Any]
    created: datetime
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    resource_version: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def ready(self) -> Mapping[str, Any]:
        """The Ready condition as the status records it (empty when there is none)."""
        ready: Mapping[str, Any] = next(
            (c for c in self.status.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        return ready


def placement_of(status: Mapping[str, Any]) -> Placement:
    return Placement(
        assigned=status.get("assignedNode") or None,
        target=status.get("targetNode") or None,
        last_move=parse_rfc3339(status.get("lastMoveTime")),
    )


def routed_ip_state(body: Mapping[str, Any]) -> RoutedIPState:
    meta, spec, status = body.get("metadata", {}), body.get("spec") or {}, dict(body.get("status") or {})
    ref = spec.get("serviceRef") or {}
    return RoutedIPState(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation") or 0),
        class_name=spec.get("className", ""),
        ip=str(spec.get("routedIP", "")),
        service=(ref.get("namespace") or meta["namespace"], ref.get("serviceName", "")),
        placement=placement_of(status),
        status=status,
        # Without a creationTimestamp (never from the API server) an object counts as the newest claim.
        created=parse_rfc3339(meta.get("creationTimestamp")) or datetime.max.replace(tzinfo=UTC),
        deleting=meta.get("deletionTimestamp") is not None,
        finalizers=tuple(meta.get("finalizers") or ()),
        resource_version=meta.get("resourceVersion", ""),
    )


@dataclass(frozen=True)
class ClassState:
    name: str
    uid: str
    generation: int
    class_name: str
    spec: ClusterRoutedIPClassSpec | None
    spec_error: str | None
    status: Mapping[str, Any]


def class_state(body: Mapping[str, Any]) -> ClassState:
    meta = body.get("metadata", {})
    spec: ClusterRoutedIPClassSpec | None = None
    error: str | None = None
    try:
        spec = ClusterRoutedIPClassSpec.model_validate(body.get("spec") or {})
    except ValidationError as caught:
        error = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else f"spec: {e['msg']}"
            for e in caught.errors()
        )
    return ClassState(
        name=meta["name"],
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation") or 0),
        class_name=str((body.get("spec") or {}).get("className", "")),
        spec=spec,
        spec_error=error,
        status=dict(body.get("status") or {}),
    )
