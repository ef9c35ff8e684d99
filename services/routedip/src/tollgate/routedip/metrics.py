"""The routedip service's metrics (names: tollgate.runtime.metrics; reference: docs/operations.md)."""

from __future__ import annotations

from tollgate.runtime.metrics import Declarations

METRICS = Declarations("routedip")
MOVES = METRICS.counter("moves", "Routed IPs assigned to a node (a failover is a move).", labels=("class",))
MOVE_DURATION = METRICS.histogram(
    "move_duration", "From the first step of a move to its record in the status.", labels=("class",)
)
RECONCILE_ERRORS = METRICS.counter("reconcile_errors", "Reconciles that failed.", labels=("kind",))
