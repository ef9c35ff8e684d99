"""The jobs service's metrics (names: tollgate.runtime.metrics; reference: docs/operations.md)."""

from __future__ import annotations

from tollgate.runtime.metrics import Declarations

METRICS = Declarations("jobs")
RECONCILES = METRICS.counter("reconciles", "Goop reconciles, by result (ok, error).", labels=("result",))
RECONCILE_DURATION = METRICS.histogram(
    "reconcile_duration",
    "Time a Goop reconcile took.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOBS_CREATED = METRICS.counter("worker_jobs_created", "Worker Jobs created.")
JOBS_DELETED = METRICS.counter("worker_jobs_deleted", "Worker Jobs deleted.")
