"""The propagation helpers of one change's trace (tollgate.runtime.tracing) and the resource attributes."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from tollgate.runtime.telemetry import TelemetryConfigError, otlp_protocol, resource_attributes
from tollgate.runtime.tracing import (
    TRACE_PARENT_ANNOTATION,
    annotated_parent,
    carrying_trace,
    link_to,
    parent_context,
    trace_parent,
)

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_span_started_from_the_annotation_continues_its_trace() -> None:
    tracer = TracerProvider().get_tracer("test")
    obj = {"metadata": {"name": "lb", "annotations": {TRACE_PARENT_ANNOTATION: PARENT}}}
    with tracer.start_as_current_span("reconcile", parent_context(annotated_parent(obj))) as span:
        context = span.get_span_context()
        assert trace.format_trace_id(context.trace_id) == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert isinstance(span, ReadableSpan) and span.parent is not None
        assert trace.format_span_id(span.parent.span_id) == "00f067aa0ba902b7"
        assert trace_parent() == f"00-4bf92f3577b34da6a3ce929d0e0e4736-{trace.format_span_id(context.span_id)}-01"


@pytest.mark.parametrize("value", [None, "", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", 7])
def test_a_missing_or_invalid_annotation_names_no_parent(value: object) -> None:
    obj = {"metadata": {"annotations": {TRACE_PARENT_ANNOTATION: value}}}
    assert annotated_parent(obj) is None
    assert annotated_parent({"metadata": {}}) is None and annotated_parent(None) is None
    assert link_to(None) == [] and parent_context("garbage") is None


def test_a_spec_patch_carries_the_current_span_and_keeps_other_annotations() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("reconcile"):
        patch = carrying_trace({"spec": {"service-id": 3}, "metadata": {"annotations": {"a": "b"}}})
        assert patch == {
            "spec": {"service-id": 3},
            "metadata": {"annotations": {"a": "b", TRACE_PARENT_ANNOTATION: trace_parent()}},
        }


def test_nothing_is_written_without_a_sampled_span() -> None:
    assert trace_parent() is None and carrying_trace({"spec": {}}) == {"spec": {}}
    with TracerProvider(sampler=ALWAYS_OFF).get_tracer("off").start_as_current_span("unsampled"):
        assert trace_parent() is None and carrying_trace({"spec": {}}) == {"spec": {}}


def test_a_link_names_the_span_of_the_trace_parent() -> None:
    (link,) = link_to(PARENT)
    assert (trace.format_trace_id(link.context.trace_id), trace.format_span_id(link.context.span_id)) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )


def test_resource_attributes_follow_the_semantic_conventions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    attributes = resource_attributes("tollgate-xds")
    assert attributes["service.name"] == "tollgate-xds"
    assert attributes["service.version"] and attributes["service.instance.id"]
    assert resource_attributes("tollgate-xds")["service.instance.id"] != attributes["service.instance.id"]


def test_the_charts_resource_attributes_win(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the charts set from the Downward API (OTEL_RESOURCE_ATTRIBUTES) overrides tollgate's defaults."""
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES",
        "k8s.pod.name=xds-7d9f,k8s.namespace.name=tollgate,service.instance.id=uid-1,service.version=1.2.3",
    )
    monkeypatch.setenv("OTEL_SERVICE_NAME", "edge-xds")
    assert resource_attributes("tollgate-xds") == {
        "service.name": "edge-xds",
        "service.version": "1.2.3",
        "service.instance.id": "uid-1",
        "k8s.pod.name": "xds-7d9f",
        "k8s.namespace.name": "tollgate",
    }


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"])
def test_an_otlp_protocol_that_cannot_be_exported_names_the_variable(variable: str) -> None:
    assert otlp_protocol({}) == "http/json" == otlp_protocol({variable: "http/json"})
    with pytest.raises(TelemetryConfigError, match=f"{variable}=grpc: tollgate exports OTLP as http/json only"):
        otlp_protocol({variable: "grpc"})
    assert otlp_protocol({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
