"""The real HTTPS admission server: status codes, unknown paths, concurrency and live certificate reloads."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import shutil
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tollgate.testing.wait import wait_for
from tollgate.webhook.certs import generate
from tollgate.webhook.kinds import KINDS

Obj = dict[str, Any]
Sample = Callable[[str], Obj]
MakeReview = Callable[..., Obj]
GOOPS = "/validate/goop.example.com/v1alpha1/goops"
LOAD_BALANCERS = "/validate/epic.acnodal.io/v1/loadbalancers"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "the body is not JSON"),
        (b'"a string"', "the body is a JSON str, not an AdmissionReview object"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}', "request.uid"),
    ],
)
def test_a_malformed_review_gets_a_400_with_the_reason(server: Any, body: bytes, reason: str) -> None:
    status, answer = server.post(GOOPS, body)
    assert status == 400
    assert answer["code"] == 400 and answer["reason"] == "BadRequest"
    assert reason in answer["message"]


def test_an_unknown_kind_path_gets_a_404_listing_the_known_ones(server: Any) -> None:
    status, answer = server.post("/validate/example.com/v1/widgets", b"{}")
    assert status == 404
    assert answer["message"].startswith("no admission endpoint at /validate/example.com/v1/widgets")
    assert all(kind.path("validate") in answer["message"] for kind in KINDS)


def test_a_get_is_refused_with_the_method_to_use(server: Any) -> None:
    connection = server.connection()
    connection.request("GET", GOOPS)
    response = connection.getresponse()
    assert response.status == 405
    assert json.loads(response.read())["message"] == "GET is not allowed: send an AdmissionReview with POST"


def test_every_kind_has_a_mutating_and_a_validating_path(server: Any, sample: Sample, make_review: MakeReview) -> None:
    connection = server.connection()
    for kind in KINDS:
        for operation in ("mutate", "validate"):
            status, answer = server.post(
                kind.path(operation), json.dumps(make_review(sample(kind.name))).encode(), connection
            )
            assert status == 200, (kind.name, operation, answer)
            assert answer["response"]["uid"] == "0b1c"
            assert "allowed" in answer["response"]


def test_defaults_come_back_as_a_patch(server: Any, make_review: MakeReview) -> None:
    goop = {"apiVersion": "goop.example.com/v1alpha1", "kind": "Goop", "metadata": {"name": "g"}, "spec": {"cmd": "x"}}
    status, answer = server.post("/mutate/goop.example.com/v1alpha1/goops", json.dumps(make_review(goop)).encode())
    assert status == 200 and answer["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert {"op": "add", "path": "/spec/image", "value": "busybox"} in patch


async def test_the_server_keeps_answering_under_concurrent_load(
    server: Any, sample: Sample, make_review: MakeReview
) -> None:
    """400 reviews from 50 concurrent connections: every one answered, each with its own uid and decision."""
    good, bad = sample("LoadBalancer"), sample("LoadBalancer")
    bad["spec"]["public-address"] = "0.0.0.0"
    context = server.client_context()

    async def one(session: aiohttp.ClientSession, index: int) -> tuple[int, bool]:
        review = make_review(good if index % 2 else bad, uid=f"uid-{index}")
        async with session.post(f"{server.url}{LOAD_BALANCERS}", json=review, ssl=context) as response:
            answer = await response.json()
            assert answer["response"]["uid"] == f"uid-{index}"
            return response.status, answer["response"]["allowed"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=50)) as session:
        results = await asyncio.gather(*(one(session, index) for index in range(400)))
    assert all(status == 200 for status, _ in results)
    assert [allowed for _, allowed in results] == [bool(index % 2) for index in range(400)]


def _served_ca(server: Any, ca_file: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with (
            socket.create_connection(("127.0.0.1", server.server.port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return True
    except ssl.SSLCertVerificationError:
        return False


def test_a_new_certificate_is_served_without_a_restart(
    start_server: Callable[..., Any], bundle_dir: Path, tmp_path: Path
) -> None:
    cert_dir = tmp_path / "tls"
    shutil.copytree(bundle_dir, cert_dir)
    running = start_server(cert_dir, reload_seconds=0.1)
    assert _served_ca(running, bundle_dir / "ca.crt")
    rotated = tmp_path / "rotated"
    generate(["127.0.0.1"]).write(rotated)
    assert not _served_ca(running, rotated / "ca.crt")
    (cert_dir / "tls.key").write_bytes((rotated / "tls.key").read_bytes())  # a torn update: key first...
    assert _served_ca(running, bundle_dir / "ca.crt")  # ...keeps the old pair serving
    (cert_dir / "tls.crt").write_bytes((rotated / "tls.crt").read_bytes())
    wait_for(lambda: _served_ca(running, rotated / "ca.crt"), "the rotated certificate to be served", timeout=10)
    assert running.server.started


def test_a_denial_is_logged_with_its_reason(
    server: Any, sample: Sample, make_review: MakeReview, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tollgate.webhook.api")
    goop = sample("Goop")
    goop["spec"]["cmd"] = " "
    status, answer = server.post(GOOPS, json.dumps(make_review(goop)).encode())
    assert (status, answer["response"]["allowed"]) == (200, False)
    wait_for(lambda: [r for r in caplog.records if r.getMessage() == "denied"], "the denial in the log", timeout=5)
    (record,) = [r for r in caplog.records if r.getMessage() == "denied"]
    assert record.__dict__["reason"] == "spec.cmd: must not be blank"
    assert (record.__dict__["kind"], record.__dict__["operation"]) == ("Goop", "validate")


def test_each_review_is_one_span_in_the_callers_trace_naming_the_decision(
    bundle_dir: Path, start_server: Callable[..., Any], sample: Sample, make_review: MakeReview
) -> None:
    """The API server sends a W3C traceparent when its tracing is on: the review's span joins that trace, and the
    defaulting patch puts that span on the object (tollgate.io/trace-parent) for the operators to continue."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    running = start_server(bundle_dir, tracer_provider=provider)
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    goop = sample("Goop")
    goop["spec"]["cmd"] = " "
    answers = []
    for path in ("/mutate/goop.example.com/v1alpha1/goops", GOOPS):
        status, answer = running.post(
            path, json.dumps(make_review(goop)).encode(), headers={"traceparent": f"00-{trace_id}-{parent_id}-01"}
        )
        assert status == 200
        answers.append(answer)

    # A span ends once the response is sent, which can be just after the client has read it.
    def finished() -> tuple[ReadableSpan, ...] | None:
        found = exporter.get_finished_spans()
        return tuple(found) if len(found) == 2 else None

    spans = wait_for(finished, "both review spans to end", timeout=5)
    assert [(span.name, dict(span.attributes or {})) for span in spans] == [
        (
            "POST /mutate/{group}/{version}/{plural}",
            {
                **_attributes(spans[0]),
                "tollgate.webhook.kind": "Goop",
                "tollgate.webhook.operation": "mutate",
                "tollgate.webhook.outcome": "allowed",
            },
        ),
        (
            "POST /validate/{group}/{version}/{plural}",
            {
                **_attributes(spans[1]),
                "tollgate.webhook.kind": "Goop",
                "tollgate.webhook.operation": "validate",
                "tollgate.webhook.outcome": "denied",
            },
        ),
    ]
    for span in spans:
        assert span.parent is not None and (f"{span.parent.trace_id:032x}", f"{span.parent.span_id:016x}") == (
            trace_id,
            parent_id,
        )
    patch = json.loads(base64.b64decode(answers[0]["response"]["patch"]))
    mutate_span = f"00-{trace_id}-{spans[0].context.span_id:016x}-01"
    assert {"op": "add", "path": "/metadata/annotations", "value": {"tollgate.io/trace-parent": mutate_span}} in patch


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    """The span's HTTP attributes (FastAPI's own semantic conventions), without tollgate's."""
    return {key: value for key, value in (span.attributes or {}).items() if not key.startswith("tollgate.")}


def test_a_review_span_carries_the_http_request_and_status(
    bundle_dir: Path, start_server: Callable[..., Any], sample: Sample, make_review: MakeReview
) -> None:
    """Without a traceparent the review's span starts a trace of its own, a server span with the HTTP method, route
    and status of the request (the semantic conventions' names, as for every other request)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    running = start_server(bundle_dir, tracer_provider=provider)
    status, _ = running.post(GOOPS, json.dumps(make_review(sample("Goop"))).encode())
    assert status == 200
    (span,) = wait_for(lambda: exporter.get_finished_spans() or None, "the review span to end", timeout=5)
    attributes = dict(span.attributes or {})
    assert (span.name, span.kind, span.parent) == ("POST /validate/{group}/{version}/{plural}", SpanKind.SERVER, None)
    assert {key: attributes.get(key) for key in ("http.method", "http.route", "http.target", "http.status_code")} == {
        "http.method": "POST",
        "http.route": "/validate/{group}/{version}/{plural}",
        "http.target": GOOPS,
        "http.status_code": 200,
    }
    assert attributes["tollgate.webhook.outcome"] == "allowed"
