"""One declaration point for metric names: `tollgate_<service>_<name>`, with the unit and `_total` suffixes.

Each service declares its metrics once, in its own `metrics.py`, on a `Declarations` of its name:

    METRICS = Declarations("xds")
    NACKS = METRICS.counter("nacks", "xDS responses an Envoy rejected", labels=("type", "api"))

and creates the instruments from its meter (`NACKS.create(meter)`). The OpenTelemetry Prometheus exporter adds
the unit (`seconds`, `bytes`) and, for counters, `_total`, the Prometheus and OpenTelemetry naming conventions;
`exported` is that name, the one to query. docs/operations.md's reference table is generated from the
declarations (`hack/generated_files.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from opentelemetry import metrics

PREFIX = "tollgate"
# The UCUM units the exporter spells out as a suffix (the ones in use here).
UNITS = {"s": "seconds", "By": "bytes", "": ""}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED_SUFFIXES = ("_total", "_seconds", "_bytes", "_count", "_sum", "_bucket")


@dataclass(frozen=True)
class Metric:
    """A declared metric; `exported` is its name on /metrics."""

    kind: ClassVar[str]
    service: str
    name: str
    help: str
    unit: str = ""
    labels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"metric name {self.name!r}: must be lower snake_case ([a-z][a-z0-9_]*)")
        if self.name.endswith(_RESERVED_SUFFIXES):
            raise ValueError(f"metric name {self.name!r}: leave the suffix out, the unit and kind add it")
        if self.unit not in UNITS:
            raise ValueError(f"metric {self.name!r}: unit {self.unit!r} is not one of {sorted(UNITS)}")

    @property
    def instrument(self) -> str:
        """The OpenTelemetry instrument name (no suffixes: the exporter adds them)."""
        return f"{PREFIX}_{self.service}_{self.name}"

    @property
    def exported(self) -> str:
        unit = UNITS[self.unit]
        return self.instrument + (f"_{unit}" if unit else "") + ("_total" if self.kind == "counter" else "")

    @property
    def series(self) -> tuple[str, ...]:
        """The names of the series a scrape shows for this metric."""
        return (self.exported,)


@dataclass(frozen=True)
class Counter(Metric):
    kind: ClassVar[str] = "counter"

    def create(self, meter: metrics.Meter) -> metrics.Counter:
        return meter.create_counter(self.instrument, unit=self.unit, description=self.help)


@dataclass(frozen=True)
class Gauge(Metric):
    """A value that goes up and down (an OpenTelemetry up-down counter)."""

    kind: ClassVar[str] = "gauge"

    def create(self, meter: metrics.Meter) -> metrics.UpDownCounter:
        return meter.create_up_down_counter(self.instrument, unit=self.unit, description=self.help)


@dataclass(frozen=True)
class Histogram(Metric):
    kind: ClassVar[str] = "histogram"
    buckets: tuple[float, ...] | None = None

    @property
    def series(self) -> tuple[str, ...]:
        return tuple(f"{self.exported}_{part}" for part in ("bucket", "count", "sum"))

    def create(self, meter: metrics.Meter) -> metrics.Histogram:
        return meter.create_histogram(
            self.instrument,
            unit=self.unit,
            description=self.help,
            explicit_bucket_boundaries_advisory=None if self.buckets is None else list(self.buckets),
        )


_M = TypeVar("_M", bound=Metric)


@dataclass
class Declarations:
    """The metrics of one service, in the order declared."""

    service: str
    declared: list[Metric] = field(default_factory=list)

    def _add(self, metric: _M) -> _M:
        if any(known.instrument == metric.instrument for known in self.declared):
            raise ValueError(f"metric {metric.instrument} is declared twice")
        self.declared.append(metric)
        return metric

    def counter(self, name: str, help: str, *, unit: str = "", labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(self.service, name, help, unit, tuple(labels)))

    def gauge(self, name: str, help: str, *, unit: str = "", labels: Sequence[str] = ()) -> Gauge:
        return self._add(Gauge(self.service, name, help, unit, tuple(labels)))

    def histogram(
        self,
        name: str,
        help: str,
        *,
        unit: str = "s",
        labels: Sequence[str] = (),
        buckets: Sequence[float] | None = None,
    ) -> Histogram:
        return self._add(
            Histogram(self.service, name, help, unit, tuple(labels), None if buckets is None else tuple(buckets))
        )

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.declared)


# The process collector's metrics, renamed under the prefix (prometheus_client's ProcessCollector, namespace
# "tollgate"); every service serves them.
PROCESS = Declarations("process")
PROCESS.gauge("resident_memory", "Resident memory size.", unit="By")
PROCESS.gauge("virtual_memory", "Virtual memory size.", unit="By")
PROCESS.gauge("start_time", "Start time of the process since the Unix epoch.", unit="s")
PROCESS.counter("cpu", "User and system CPU time spent.", unit="s")
PROCESS.gauge("open_fds", "Open file descriptors.")
PROCESS.gauge("max_fds", "The limit on open file descriptors.")
