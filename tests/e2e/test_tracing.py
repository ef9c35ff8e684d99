"""One trace per change, end to end: `make dev`'s system sends its spans to Jaeger, and a LoadBalancer's creation is
one trace there from the webhook's admission through the allocator's reconcile to the xds push and the Envoy's ACK.

Jaeger is built by `hack/tools.sh jaeger`, which make test starts in the background: the first test here waits for
that build (tollgate.testing.jaeger.jaeger_binary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tollgate.testing.dev import DevSystem
from tollgate.testing.jaeger import Jaeger
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for

pytestmark = pytest.mark.e2e

LB = "traced"

EXPORT = textwrap.dedent(
    """
    from tollgate.runtime.telemetry import setup_telemetry

    telemetry = setup_telemetry("tollgate-probe")
    with telemetry.tracer("probe").start_as_current_span("reconcile probe", attributes={"name": "p"}):
        pass
    telemetry.shutdown()
    """
)


def test_spans_exported_over_otlp_json_are_found_in_the_query_api(tmp_path: Path) -> None:
    jaeger = Jaeger(tmp_path).start()
    try:
        environ = {**os.environ, **jaeger.env(), "OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.name=probe-0"}
        subprocess.run([sys.executable, "-c", EXPORT], env=environ, check=True, timeout=120)
        traces = wait_for(lambda: jaeger.traces("tollgate-probe"), "the probe's trace in Jaeger", timeout=30)
    finally:
        jaeger.stop()
    [trace] = traces
    [span] = trace["spans"]
    assert span["operationName"] == "reconcile probe"
    process = trace["processes"][span["processID"]]
    tags = {tag["key"]: tag["value"] for tag in process["tags"]}
    assert process["serviceName"] == "tollgate-probe" and tags["k8s.pod.name"] == "probe-0"
    assert tags["service.version"] and tags["service.instance.id"]


@pytest.fixture
def system(tmp_path: Path) -> DevSystem:
    return DevSystem(repo_root(), state=tmp_path / "dev")


def load_balancer() -> dict[str, Any]:
    """A load balancer of the dev system's `dev-public` group: an address from its pool and one Envoy."""
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LoadBalancer",
        "metadata": {"name": LB, "namespace": "epic-root"},
        "spec": {"service-group": "dev-public", "public-ports": [{"port": 7010, "protocol": "UDP", "targetPort": 9}]},
    }


def tags(item: dict[str, Any]) -> dict[str, Any]:
    return {tag["key"]: tag["value"] for tag in item.get("tags", [])}


def spans_by_service(trace: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(service, operation, tags) of every span of a trace of Jaeger's query API."""
    services = {key: process["serviceName"] for key, process in trace["processes"].items()}
    return [(services[span["processID"]], span["operationName"], tags(span)) for span in trace["spans"]]


def complete(trace: dict[str, Any]) -> bool:
    """Every span's parent is in the trace (none is still on its way to Jaeger)."""
    ids = {span["spanID"] for span in trace["spans"]}
    references = (ref for span in trace["spans"] for ref in span.get("references", []) if ref["refType"] == "CHILD_OF")
    return all(ref["spanID"] in ids for ref in references)


def creation_trace(system: DevSystem) -> dict[str, Any] | None:
    """The trace with the webhook's admission, the allocator's reconcile of LB and an xds push to LB's Envoy that the
    Envoy ACKed, once complete: each service exports its spans on its own batch timer (5 s), so Jaeger may hold a
    push before the reconcile that caused it."""
    for trace in system.jaeger.traces("tollgate-allocator"):
        if not complete(trace):
            continue
        spans = spans_by_service(trace)
        admitted = any(service == "tollgate-webhook" for service, _, _ in spans)
        reconciled = any(
            (service, operation) == ("tollgate-allocator", "reconcile LoadBalancer") and span_tags.get("name") == LB
            for service, operation, span_tags in spans
        )
        to_envoy = {
            operation
            for service, operation, span_tags in spans
            if service == "tollgate-xds" and str(span_tags.get("xds.node", "")).startswith(f"{LB}-envoy-")
        }
        if admitted and reconciled and {"xds.push", "xds.ack"} <= to_envoy:
            return trace
    return None


def test_a_load_balancers_creation_is_one_trace_from_admission_to_envoy_ack(system: DevSystem) -> None:
    try:
        system.start()
        summary = system.summary()
        system.cluster.kubectl("create", "-f", "-", stdin=json.dumps(load_balancer()))
        trace = wait_for(
            lambda: creation_trace(system), f"one trace in Jaeger from {LB}'s creation to its Envoy's ACK", timeout=120
        )
        stored = json.loads(system.cluster.kubectl("get", "loadbalancer", LB, "-n", "epic-root", "-o", "json").stdout)
    finally:
        system.stop()
        system.cluster.down()

    assert f"  {system.jaeger.ui_url}/search?service=tollgate-allocator" in summary, summary
    spans = spans_by_service(trace)
    # The webhook's admission of the create starts the trace: the API server carries it on the object.
    assert any(service == "tollgate-webhook" and op.startswith("POST /mutate/") for service, op, _ in spans), spans
    annotated = stored["metadata"]["annotations"]["tollgate.io/trace-parent"]
    assert annotated.split("-")[1] == trace["traceID"], "the object names the trace of its latest change"
    # Every span carries the resource attributes of the semantic conventions.
    for process in trace["processes"].values():
        attributes = tags(process)
        assert attributes.get("service.version") and attributes.get("service.instance.id"), process
    # Each ACK is a child of the push it answers, and that push one of the allocator's reconcile's descendants.
    by_id = {span["spanID"]: span for span in trace["spans"]}

    def parent(span: dict[str, Any]) -> dict[str, Any] | None:
        refs = [r["spanID"] for r in span.get("references", []) if r["refType"] == "CHILD_OF"]
        return by_id.get(refs[0]) if refs else None

    acks = [span for span in trace["spans"] if span["operationName"] == "xds.ack"]
    assert acks
    for ack in acks:
        push = parent(ack)
        assert push is not None and push["operationName"] == "xds.push", ack
        ancestor = parent(push)
        while ancestor is not None and ancestor["operationName"] != "reconcile LoadBalancer":
            ancestor = parent(ancestor)
        assert ancestor is not None, f"the push {push} descends from no reconcile of the allocator"
