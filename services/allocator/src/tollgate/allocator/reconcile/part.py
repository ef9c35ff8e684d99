"""What every kind's part of the reconcile works with, and the one way each writes a status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from tollgate.allocator.k8s import JSON, Kind, Kube
from tollgate.allocator.registry import Registry
from tollgate.allocator.registry.errors import NotFoundError
from tollgate.allocator.tunnels import Metrics
from tollgate.models.base import Status
from tollgate.models.epic import (
    Account,
    AccountStatus,
    GWProxy,
    GWProxyStatus,
    LBServiceGroup,
    LBServiceGroupStatus,
    LoadBalancer,
    LoadBalancerStatus,
    RemoteEndpoint,
    RemoteEndpointStatus,
)

STATUS_MODELS: dict[Kind, type[Status]] = {
    Account: AccountStatus,
    GWProxy: GWProxyStatus,
    LBServiceGroup: LBServiceGroupStatus,
    LoadBalancer: LoadBalancerStatus,
    RemoteEndpoint: RemoteEndpointStatus,
}


@dataclass
class Part:
    kube: Kube
    registry: Registry
    metrics: Metrics
    tracer: trace.Tracer

    async def update_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        mutate: Callable[[Any], None],
        prepare: Callable[[JSON], Awaitable[None]] | None = None,
    ) -> JSON | None:
        """Read, change the status model, replace with the read resourceVersion; retry on conflict. None when gone.
        `prepare` runs after each read, before `mutate` (Kube.update_status)."""
        status_model = STATUS_MODELS[kind]

        def change(obj: JSON) -> None:
            status: Status = status_model.model_validate(obj.get("status") or {})
            mutate(status)
            obj["status"] = status.to_wire()

        try:
            result = await self.kube.update_status(
                kind,
                namespace,
                name,
                change,
                lambda: NotFoundError(f"{kind.resource.kind} {namespace}/{name}"),
                on_conflict=lambda _: self.metrics.conflict(kind.resource.kind),
                prepare=prepare,
            )
        except NotFoundError:
            return None
        self.metrics.retried(kind.resource.kind, result.conflicts)
        return result.written


def set_ready(status: Status, ok: bool, reason: str, message: str, generation: int | None) -> None:
    status.observed_generation = generation
    status.set_condition("Ready", "True" if ok else "False", reason, message, generation)
