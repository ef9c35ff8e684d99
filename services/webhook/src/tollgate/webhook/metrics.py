"""The webhook's metrics (names: tollgate.runtime.metrics; reference: docs/operations.md)."""

from __future__ import annotations

from tollgate.runtime.metrics import Declarations

METRICS = Declarations("webhook")
ADMISSION = METRICS.histogram(
    "admission",
    "Time to answer an admission review, by kind, operation and outcome (its count: the reviews).",
    labels=("kind", "operation", "outcome"),
)
