"""What assigns a routed IP to a node and opens the firewall: one small interface, three providers.

- `local` records assignments and firewall ports in a ConfigMap (development, tests, benchmarks).
- `digitalocean` drives the DigitalOcean API: reserved IP actions and a Cloud Firewall.
- `job` runs the class's `updateRoutedIP` / `updateFirewall` Job templates, as the seed describes.

Every operation is idempotent: the controller repeats it after a crash or a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from tollgate.routedip.firewall import FirewallPlan, machine_id
from tollgate.routedip.state import ClassState, NodeState


@dataclass(frozen=True)
class NodeTarget:
    name: str
    provider_id: str | None = None

    @property
    def machine_id(self) -> str | None:
        return machine_id(self.provider_id)

    @classmethod
    def of(cls, name: str, nodes: Mapping[str, NodeState]) -> NodeTarget:
        node = nodes.get(name)
        return cls(name, node.provider_id if node is not None else None)


@dataclass(frozen=True)
class RoutedIPRef:
    namespace: str
    name: str
    uid: str
    ip: str


@dataclass(frozen=True)
class FirewallContext:
    routed_ip_class: ClassState


class ProviderError(Exception):
    """An operation failed; `reason` is a CamelCase word for conditions and Events. The controller retries,
    after `retry_after` seconds when the provider knows better than its backoff."""

    def __init__(self, message: str, *, reason: str = "ProviderError", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class Provider(Protocol):
    async def assign(self, routed_ip: RoutedIPRef, node: NodeTarget, previous: NodeTarget | None) -> None:
        """Make `node` hold the IP (`previous` is the node that held it, for providers that need it)."""

    async def unassign(self, routed_ip: RoutedIPRef, node: NodeTarget) -> None:
        """Make sure `node` no longer holds the IP; a no-op when it does not."""

    async def apply_firewall(self, plan: FirewallPlan, context: FirewallContext) -> None:
        """Make the class's firewall allow exactly what `plan` lists."""
