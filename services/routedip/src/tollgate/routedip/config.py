"""How the controller is run: what `__main__` reads from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from tollgate.models.routedip import Trust

FAILPOINTS = ("after-reserve", "after-taint", "after-firewall", "after-assign", "after-unassign")


@dataclass
class ControllerConfig:
    system_namespace: str = "tollgate-system"
    workers: int = 32
    failpoints: frozenset[str] = frozenset()
    job_wait_timeout: float = 120.0
    trust: Trust = field(default_factory=Trust)
    # The Secrets the controller may read (the chart's tokenSecrets); None: any of its namespace.
    token_secrets: frozenset[str] | None = None
