"""The xds service's metrics (names: tollgate.runtime.metrics; reference: docs/operations.md)."""

from __future__ import annotations

from tollgate.runtime.metrics import Declarations

CONVERGENCE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

METRICS = Declarations("xds")
CONNECTED_ENVOYS = METRICS.gauge("connected_envoys", "Envoys connected over ADS.", labels=("api",))
REFUSED_STREAMS = METRICS.counter(
    "refused_streams", "ADS streams refused: the client is not the Envoy pod it names.", labels=("reason",)
)
REVOKED_STREAMS = METRICS.counter(
    "revoked_streams",
    "Admitted ADS streams ended: their pod was deleted or replaced, lost its Envoy label or changed address.",
    labels=("reason",),
)
PUSHES = METRICS.counter("pushes", "xDS responses sent.", labels=("type", "api"))
PUSHED_RESOURCES = METRICS.counter("pushed_resources", "Resources sent in xDS responses.", labels=("type", "api"))
NACKS = METRICS.counter("nacks", "xDS responses an Envoy rejected.", labels=("type", "api"))
CONVERGENCE = METRICS.histogram(
    "convergence",
    "From a change observed to every affected Envoy having ACKed (or rejected) it.",
    buckets=CONVERGENCE_BUCKETS,
)
CONVERGENCE_ABANDONED = METRICS.counter(
    "convergence_abandoned",
    "Changes no longer waited for: more were outstanding than the cap (an Envoy never answers).",
)
