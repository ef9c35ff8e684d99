"""A change's trace reaches the Envoy: the push that carries it continues the trace of the source's
tollgate.io/trace-parent, and the Envoy's ACK of that version is a span under the push."""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tollgate.runtime.tracing import TRACE_PARENT_ANNOTATION
from tollgate.testing.envoy import envoy_pod_object
from tollgate.xds.identity import Identity
from tollgate.xds.resources import CLUSTER
from tollgate.xds.server import Connection, XdsServer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def virtual_service(port: int, span_id: str) -> dict[str, Any]:
    cluster = {"name": "c", "endpoints": [{"name": "e", "host": {"address": "192.0.2.10"}, "port": port + 1000}]}
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {
            "name": "vs",
            "namespace": "ns",
            "generation": port,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {TRACE_PARENT_ANNOTATION: f"00-{TRACE_ID}-{span_id}-01"},
        },
        "spec": {"selector": {"app": "edge"}, "listeners": [{"name": "l", "udp": {"port": port, "cluster": cluster}}]},
    }


def traced_server() -> tuple[XdsServer, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return XdsServer(debounce=0, tracer=provider.get_tracer("test")), exporter


def change(server: XdsServer, obj: dict[str, Any]) -> None:
    """What the watch handler does with a VirtualService event."""
    server.traced("VirtualService", obj)
    server.world.set_virtual_service(obj)
    server.changed()
    server.recompute()


def push_and_ack_clusters(server: XdsServer, conn: Connection) -> str:
    """Send the Envoy its pending CDS push and answer it with an ACK; the version pushed."""
    push = conn.stream.next_push()
    while push is not None and push.type_url != CLUSTER:
        push = conn.stream.next_push()
    assert push is not None
    server.pushed(conn, push)
    server.on_sotw_request(conn, CLUSTER, push.nonce, [], None)
    return push.version


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [
        span for span in spans if span.name == name and span.attributes and span.attributes["xds.type"] == "clusters"
    ]


def test_the_push_of_a_change_and_its_ack_are_in_the_changes_trace() -> None:
    server, exporter = traced_server()
    change(server, virtual_service(5000, "00f067aa0ba902b7"))
    server.world.set_pod(envoy_pod_object("edge-0", "ns", "127.0.0.2", {"app": "edge"}))
    server.recompute()
    conn = server.connect(Identity("edge-0.ns", "ns", "edge-0", (("app", "edge"),), "127.0.0.2"), delta=False)
    server.on_sotw_request(conn, CLUSTER, "", [], None)
    version = push_and_ack_clusters(server, conn)

    spans = tuple(exporter.get_finished_spans())
    (push,) = named(spans, "xds.push")
    (ack,) = named(spans, "xds.ack")
    assert push.parent is not None and trace.format_trace_id(push.context.trace_id) == TRACE_ID
    assert trace.format_span_id(push.parent.span_id) == "00f067aa0ba902b7"
    assert ack.parent is not None and ack.parent.span_id == push.context.span_id
    assert dict(ack.attributes or {}) == {"xds.node": "edge-0.ns", "xds.type": "clusters", "xds.version": version}

    # The next change of the source is a trace of its own, its push under the new parent.
    exporter.clear()
    change(server, virtual_service(5001, "1111111111111111"))
    push_and_ack_clusters(server, conn)
    (push,) = named(tuple(exporter.get_finished_spans()), "xds.push")
    assert push.parent is not None and trace.format_span_id(push.parent.span_id) == "1111111111111111"


def test_a_push_without_a_traced_change_is_a_root_span() -> None:
    server, exporter = traced_server()
    obj = virtual_service(5000, "00f067aa0ba902b7")
    del obj["metadata"]["annotations"]
    change(server, obj)
    server.world.set_pod(envoy_pod_object("edge-0", "ns", "127.0.0.2", {"app": "edge"}))
    server.recompute()
    conn = server.connect(Identity("edge-0.ns", "ns", "edge-0", (("app", "edge"),), "127.0.0.2"), delta=False)
    server.on_sotw_request(conn, CLUSTER, "", [], None)
    push_and_ack_clusters(server, conn)
    (push,) = named(tuple(exporter.get_finished_spans()), "xds.push")
    assert push.parent is None
