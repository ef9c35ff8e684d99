"""The HTTP edge: `POST /mutate/<group>/<version>/<plural>` and `POST /validate/...`, one pair per kind.

Routes stay thin: read the body, let admission.py decide, send the AdmissionReview back. A body over the size
limit gets a 413 before it is read further or parsed; one that is not an AdmissionReview a 400 with the reason;
an unknown path a 404 listing the known ones (FastAPI, which answers every request but the reviews).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.instrumentation.asgi import collect_request_attributes, set_status_code
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE
from opentelemetry.trace import TracerProvider
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from tollgate.runtime.http_server import capped_body
from tollgate.runtime.tracing import trace_parent
from tollgate.webhook import metrics as webhook_metrics
from tollgate.webhook.admission import (
    AdmissionRequest,
    BadReview,
    Decision,
    mutate,
    parse_review,
    review,
    without_cache,
)
from tollgate.webhook.cache import Store
from tollgate.webhook.kinds import KINDS, OPERATIONS, Kind, Operation
from tollgate.webhook.validation import Limits

log = logging.getLogger("tollgate.webhook.api")

# The API server stores an object of at most 1.5 MiB (etcd's default request limit) and a review of an update
# carries two (object and oldObject), re-encoded as JSON: 4 MiB admits the largest real review with room to spare.
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# Every admission path, `Kind.path(operation)`, has this shape; the review span is named after it.
ROUTE = "/{operation}/{{group}}/{{version}}/{{plural}}"


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(content=orjson.dumps(body), status_code=status, media_type="application/json")


class Admitter:
    """Decides admission requests against the cache; retries a denial that only names objects it has not seen."""

    def __init__(
        self,
        store: Store,
        limits: Limits,
        pending_wait_seconds: float = 1.0,
        meter: metrics.Meter | None = None,
    ) -> None:
        self.store = store
        self.limits = limits
        self.pending_wait_seconds = pending_wait_seconds
        meter = meter or metrics.get_meter("tollgate.webhook")
        self.latency = webhook_metrics.ADMISSION.create(meter)
        self._changed = asyncio.Event()
        store.on_change(self._notify)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _until_changed(self, deadline: float) -> bool:
        """Wait for the cache to change, until `deadline`; False when it did not."""
        try:
            await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
        except TimeoutError:
            return False
        return True

    async def _validate(self, kind: Kind, request: AdmissionRequest) -> Decision:
        if (decision := without_cache(kind, request)) is not None:  # a finalizer removal never waits on the cache
            return decision
        deadline = time.monotonic() + self.pending_wait_seconds
        while self.store.unsynced():  # a cross-object check on a half-listed cache would let duplicates through
            if not await self._until_changed(deadline):
                unlisted = ", ".join(self.store.unsynced())
                return Decision(
                    allowed=False,
                    message=f"the webhook has not listed {unlisted} yet: retry in a moment",
                    code=503,
                    reason="ServiceUnavailable",
                )
        decision = review(kind, request, self.store, self.limits)
        while decision.pending and await self._until_changed(deadline):
            decision = review(kind, request, self.store, self.limits)
        return decision

    async def _review(self, kind: Kind, body: bytes, operation: Operation) -> tuple[int, dict[str, Any]]:
        try:
            request = parse_review(body)
        except BadReview as error:
            return 400, {
                "kind": "Status",
                "status": "Failure",
                "code": 400,
                "reason": "BadRequest",
                "message": str(error),
            }
        try:
            if operation == "mutate":
                decision = mutate(kind, request, trace_parent())
            else:
                decision = await self._validate(kind, request)
        except Exception as error:  # a bug must still answer: deny, saying so, rather than fail the request
            log.exception("admission review failed", extra={"kind": kind.name, "operation": operation})
            decision = Decision(
                allowed=False,
                message=f"internal error in the webhook: {type(error).__name__}: {error}",
                code=500,
                reason="InternalError",
            )
        return 200, decision.response(request.uid)

    async def handle(self, kind: Kind, operation: Operation, body: bytes) -> tuple[int, dict[str, Any]]:
        started = time.perf_counter()
        status, answer = await self._review(kind, body, operation)
        allowed = answer.get("response", {}).get("allowed")
        outcome = "bad-request" if status != 200 else "allowed" if allowed else "denied"
        attributes = {"kind": kind.name, "operation": operation, "outcome": outcome}
        # The review's HTTP server span (a child of the API server's trace when it sends one) carries the decision.
        trace.get_current_span().set_attributes({f"tollgate.webhook.{key}": value for key, value in attributes.items()})
        self.latency.record(time.perf_counter() - started, attributes)
        if outcome == "denied":
            log.info("denied", extra={**attributes, "reason": answer["response"]["status"]["message"]})
        return status, answer


class AdmissionRoutes:
    """The ASGI application served: a POST to an admission path (`Kind.path`) is answered here, outside FastAPI's
    middleware stack (read the body, decide, write the AdmissionReview), in a server span made by hand as FastAPI's
    instrumentation would (its name, in the API server's trace when it sends a traceparent, FastAPI's HTTP
    attributes when recorded); anything else goes to the FastAPI `app` (404 listing the known paths, 405).

    FastAPI's middleware stack and request span cost more CPU than the decision itself (docs/webhook.md, "Where the
    time goes").
    """

    def __init__(self, admitter: Admitter, app: ASGIApp, tracer: trace.Tracer, max_request_bytes: int) -> None:
        self.admitter = admitter
        self.app = app
        self.tracer = tracer
        self.max_request_bytes = max_request_bytes
        self.routes = {kind.path(operation): (kind, operation) for kind in KINDS for operation in OPERATIONS}
        self.span_names = {operation: f"POST {ROUTE.format(operation=operation)}" for operation in OPERATIONS}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        kind, operation = route
        headers = dict(scope["headers"])
        with self.tracer.start_as_current_span(
            self.span_names[operation], context=_caller(headers), kind=trace.SpanKind.SERVER
        ) as span:
            try:
                body = await capped_body(headers, receive, self.max_request_bytes)
            except ClientDisconnect:  # the caller gave up (its timeout): no one to answer
                return
            if body is None:
                status, answer = 413, self._too_large(scope, headers)
            else:
                status, answer = await self.admitter.handle(kind, operation, body)
            content = orjson.dumps(answer)
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-length", b"%d" % len(content)), (b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": content})
            if span.is_recording():
                span.set_attributes(collect_request_attributes(scope))  # type: ignore[no-untyped-call]
                span.set_attribute(HTTP_ROUTE, ROUTE.format(operation=operation))
                set_status_code(span, status)  # type: ignore[no-untyped-call]

    def _too_large(self, scope: Scope, headers: dict[bytes, bytes]) -> dict[str, Any]:
        message = (
            f"the body is over {self.max_request_bytes} bytes, the most this webhook reads "
            "(setting TOLLGATE_WEBHOOK_MAX_REQUEST_BYTES)"
        )
        declared = headers.get(b"content-length")
        log.warning(
            "request body too large",
            extra={"path": scope["path"], "content_length": None if declared is None else declared.decode("latin-1")},
        )
        return {
            "kind": "Status",
            "status": "Failure",
            "code": 413,
            "reason": "RequestEntityTooLarge",
            "message": message,
        }


def _caller(headers: dict[bytes, bytes]) -> otel_context.Context | None:
    """The API server's trace context (W3C traceparent and tracestate), None when it sends none."""
    if b"traceparent" not in headers:
        return None
    carrier = {
        name.decode(): headers[name].decode("latin-1") for name in (b"traceparent", b"tracestate") if name in headers
    }
    return propagate.extract(carrier)


def create_app(
    admitter: Admitter, tracer_provider: TracerProvider | None = None, max_request_bytes: int = MAX_REQUEST_BYTES
) -> AdmissionRoutes:
    """One path per kind and operation: `/{operation}/{group}/{version}/{plural}`, answered by AdmissionRoutes; other
    requests by a FastAPI app (instrumented: their spans too go to `tracer_provider`, by default the global one).

    A body over `max_request_bytes` gets a 413.
    """
    app = FastAPI(title="tollgate-webhook", docs_url=None, redoc_url=None, openapi_url=None)
    # opentelemetry-instrumentation-fastapi: one server span per request, in the API server's trace when it sends a
    # traceparent. Its per-message receive/send spans cost more CPU than the review they would describe, and its
    # HTTP metrics would repeat tollgate_webhook_admission_seconds.
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=tracer_provider, meter_provider=NoOpMeterProvider(), exclude_spans=["receive", "send"]
    )
    known = ", ".join(kind.path(operation) for kind in KINDS for operation in OPERATIONS)

    def unknown(path: str) -> Response:
        message = f"no admission endpoint at {path}: this webhook admits POSTs to {known}"
        return _json(
            404, {"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound", "message": message}
        )

    async def unknown_kind(request: Request) -> Response:
        """A POST of the admission paths' shape that AdmissionRoutes did not take: no such kind here."""
        return unknown(request.url.path)

    for operation in OPERATIONS:
        # Routed here so that another method than POST on an admission path gets a 405 (below), not a 404.
        app.add_route(ROUTE.format(operation=operation), unknown_kind, methods=["POST"], name=operation)

    @app.exception_handler(HTTPException)
    async def refused(request: Request, error: HTTPException) -> Response:
        if error.status_code == 404:
            return unknown(request.url.path)
        if error.status_code == 405:
            message = f"{request.method} is not allowed: send an AdmissionReview with POST"
        else:
            message = str(error.detail)
        body = {"kind": "Status", "status": "Failure", "code": error.status_code, "message": message}
        return _json(error.status_code, body)

    return AdmissionRoutes(
        admitter, app, trace.get_tracer(__name__, tracer_provider=tracer_provider), max_request_bytes
    )
