"""OpenTelemetry from the standard OTEL_* variables: OTLP export when an endpoint is set, Prometheus always.

Spans go to an OTLP/HTTP (JSON) exporter only when `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_TRACES_EXPORTER` is not `none`); otherwise they
are not recorded at all (a span that goes nowhere would still cost CPU on every request). Metrics are
read by a Prometheus reader that `/metrics` serves, every name under `tollgate_` (see tollgate.runtime.metrics):
no `target_info` and no `otel_scope_*` labels, and the process collector renamed `tollgate_process_*`
(Python's GC and platform collectors are left out).

The exporter speaks OTLP/HTTP with JSON bodies: the protobuf exporter needs `opentelemetry-proto`,
whose modules xds-protos ships too, in an older version that breaks it (grpc/grpc#42830). So
`OTEL_EXPORTER_OTLP_PROTOCOL` (or `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`) is `http/json` when unset, and any other
value stops the service at start with a message naming the variable, rather than exporting nothing unnoticed.
The sampler is the SDK's, from `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (parent-based always-on unset).

Resource attributes follow the semantic conventions: `service.name` (the service's, or `OTEL_SERVICE_NAME`),
`service.version` (the installed tollgate-runtime's unless given), `service.instance.id` (a UUID per process
unless given), and whatever `OTEL_RESOURCE_ATTRIBUTES` names, which wins: the charts put `k8s.pod.name`,
`k8s.namespace.name`, the pod's UID as `service.instance.id` and the chart's appVersion as `service.version`
there, from the Downward API.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import prometheus_client
from opentelemetry import metrics, trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import (
    SERVICE_INSTANCE_ID,
    SERVICE_NAME,
    SERVICE_VERSION,
    OTELResourceDetector,
    Resource,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from tollgate.runtime.metrics import PREFIX


@dataclass(frozen=True)
class Telemetry:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    exporting: bool

    def tracer(self, name: str) -> trace.Tracer:
        return self.tracer_provider.get_tracer(name)

    def meter(self, name: str) -> metrics.Meter:
        return self.meter_provider.get_meter(name)

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def otlp_configured(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class TelemetryConfigError(ValueError):
    """An OTEL_* variable asks for what this build cannot do; the message names the variable."""


SUPPORTED_PROTOCOL = "http/json"


def otlp_protocol(environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol asked for (the traces-specific variable first): `http/json` unless another is named, which
    raises TelemetryConfigError naming the variable and the value."""
    env = os.environ if environ is None else environ
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(variable, "").strip()
        if not value:
            continue
        if value != SUPPORTED_PROTOCOL:
            raise TelemetryConfigError(
                f"{variable}={value}: tollgate exports OTLP as {SUPPORTED_PROTOCOL} only (the protobuf exporters "
                f"need an opentelemetry-proto that clashes with xds-protos'); set {variable}={SUPPORTED_PROTOCOL} "
                "and point OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318 by convention)"
            )
        return value
    return SUPPORTED_PROTOCOL


def resource_attributes(service_name: str, instance_id: str | None = None) -> dict[str, Any]:
    """This process's resource attributes before the SDK's own (telemetry.sdk.*): tollgate's defaults, overridden
    by what the SDK's OTELResourceDetector reads (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`)."""
    try:
        runtime_version = version("tollgate-runtime")
    except PackageNotFoundError:
        runtime_version = "unknown"
    attributes: dict[str, Any] = {
        SERVICE_NAME: service_name,
        SERVICE_VERSION: runtime_version,
        SERVICE_INSTANCE_ID: instance_id or str(uuid.uuid4()),
    }
    attributes.update(OTELResourceDetector().detect().attributes)
    return attributes


def _otlp_exporter() -> SpanExporter:
    otlp_protocol()
    from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers and timeout come from the OTEL_* variables


_installed: Telemetry | None = None


def _prefix_default_collectors() -> None:
    registry = prometheus_client.REGISTRY
    for collector in (
        prometheus_client.PROCESS_COLLECTOR,
        prometheus_client.PLATFORM_COLLECTOR,
        prometheus_client.GC_COLLECTOR,
    ):
        registry.unregister(collector)
    prometheus_client.ProcessCollector(namespace=PREFIX, registry=registry)


def setup_telemetry(service_name: str) -> Telemetry:
    """Install tracer and meter providers once per process (OTEL_SERVICE_NAME overrides the name); raises
    TelemetryConfigError when an OTEL_* variable asks for what cannot be done."""
    global _installed
    if _installed is not None:
        return _installed
    resource = Resource.create(resource_attributes(service_name))
    exporting = otlp_configured()
    tracer_provider = TracerProvider(resource=resource, sampler=None if exporting else ALWAYS_OFF)
    if exporting:
        tracer_provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    _prefix_default_collectors()
    meter_provider = MeterProvider(
        resource=resource, metric_readers=[PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False)]
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    _installed = Telemetry(tracer_provider, meter_provider, exporting)
    return _installed
