"""W3C trace context across the hops of one change: gRPC (instrumented) and the API server (an annotation).

A change to an object reaches the operators through the API server, which carries no trace context of its own
to a watch: the webhook writes the W3C `traceparent` of its admission span into the object's
`tollgate.io/trace-parent` annotation (on a create and on a spec change only), and every operator that reacts to
the object continues that trace. A writer that carries a trace of its own sets the annotation in the same
request (`carrying_trace`: the allocator's spec patches name its reconcile span) and the webhook leaves it; the
next operator (xds, for a load balancer) then continues from that writer's span. Nothing writes the annotation
alone: an annotation write is a change too (a watch event for every watcher, a new diff for kopf), so a reconcile
that stamped its own span on the object would start the next reconcile, and so on.

gRPC calls carry the context in their metadata, through opentelemetry-instrumentation-grpc's interceptors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor, filters
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_PARENT_ANNOTATION = "tollgate.io/trace-parent"

_propagator = TraceContextTextMapPropagator()


def trace_parent(context: otel_context.Context | None = None) -> str | None:
    """The W3C `traceparent` of the current span (or of `context`'s), None unless it is a sampled one: with tracing
    off (no exporter) nothing is written anywhere."""
    if not trace.get_current_span(context).get_span_context().trace_flags.sampled:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    return carrier.get("traceparent")


def carrying_trace(patch: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that also sets the trace-parent annotation to the current span's (unchanged without one): a
    spec change an operator writes continues the trace of the reconcile that wrote it."""
    parent = trace_parent()
    if parent is None:
        return patch
    metadata = dict(patch.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), TRACE_PARENT_ANNOTATION: parent}
    return {**patch, "metadata": metadata}


def parent_context(traceparent: str | None) -> otel_context.Context | None:
    """The context a `traceparent` value names, None when it is missing or not a valid W3C traceparent."""
    if not traceparent:
        return None
    context = _propagator.extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def annotated_parent(obj: Mapping[str, Any] | None) -> str | None:
    """The object's `tollgate.io/trace-parent` annotation, when it has a valid one."""
    if obj is None:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(TRACE_PARENT_ANNOTATION)
    return value if isinstance(value, str) and parent_context(value) is not None else None


def link_to(traceparent: str | None) -> list[trace.Link]:
    """A span link to the span a `traceparent` names (none when it names none)."""
    context = parent_context(traceparent)
    if context is None:
        return []
    return [trace.Link(trace.get_current_span(context).get_span_context())]


def server_interceptors(untraced: Sequence[str] = ()) -> list[grpc.aio.ServerInterceptor]:
    """The interceptors that make each call a server span in its caller's trace. Health checks (a probe every few
    seconds) and the services named in `untraced` (long-lived streams such as ADS, whose own spans are per push)
    get none."""
    filter_ = filters.negate(filters.health_check())
    for name in untraced:
        filter_ = filters.all_of(filter_, filters.negate(filters.service_name(name)))
    return [aio_server_interceptor(filter_=filter_)]  # type: ignore[no-untyped-call]


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """The interceptors that make each call a client span and send the trace context in its metadata."""
    return list(aio_client_interceptors())  # type: ignore[no-untyped-call]
