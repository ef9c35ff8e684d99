"""Fixtures for the routedip's unit tests: RoutedIPs as the watch delivers them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tollgate.routedip.state import RoutedIPState, routed_ip_state


@pytest.fixture
def routed_ip() -> Callable[..., RoutedIPState]:
    """`routed_ip(name, assigned=..., target=..., ...)`: a RoutedIP's state, its status naming where it is."""

    def build(
        name: str,
        *,
        namespace: str = "a",
        ip: str = "203.0.113.5",
        class_name: str = "c",
        service: tuple[str, str] | None = None,
        assigned: str | None = None,
        target: str | None = None,
        ready_reason: str | None = None,
        created: str = "2026-01-01T00:00:00Z",
        deleting: bool = False,
        finalizers: tuple[str, ...] = (),
    ) -> RoutedIPState:
        service_namespace, service_name = service or (namespace, "web")
        metadata: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": created,
            "finalizers": list(finalizers),
        }
        if deleting:
            metadata["deletionTimestamp"] = "2026-01-02T00:00:00Z"
        status: dict[str, Any] = {"assignedNode": assigned, "targetNode": target}
        if ready_reason is not None:
            status["conditions"] = [{"type": "Ready", "status": "False", "reason": ready_reason}]
        spec = {
            "className": class_name,
            "routedIP": ip,
            "serviceRef": {"serviceName": service_name, "namespace": service_namespace},
        }
        return routed_ip_state({"metadata": metadata, "spec": spec, "status": status})

    return build
