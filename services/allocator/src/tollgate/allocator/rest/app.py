"""EPIC's REST API (web-service) as its agents call it: every route under /api/epic, `link` objects, 302 after a
POST or PUT, 409 with Location for what exists already, DELETE that succeeds when the object is gone, errors as
`{"error": ...}` with the header x-epic-error-message. The handlers authenticate and hand over to EpicObjects."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import urllib3
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from kubernetes import client
from opentelemetry import trace
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import TracerProvider
from starlette.requests import ClientDisconnect

from tollgate.allocator.allocation import ExhaustedError, InvalidArgumentError
from tollgate.allocator.registry.errors import (
    AbortedError,
    AlreadyExistsError,
    FailedPreconditionError,
    LimitExceededError,
    NotFoundError,
)
from tollgate.allocator.rest.auth import REALM, Authenticator, Forbidden, Unauthenticated
from tollgate.allocator.rest.links import BASE
from tollgate.allocator.rest.objects import NAMED, DuplicateError, EpicObjects, Found
from tollgate.models.epic import GWProxy, LoadBalancer
from tollgate.runtime.http_server import capped_body
from tollgate.runtime.optimistic import OptimisticUpdateError

log = logging.getLogger("tollgate.allocator.rest")
MAX_BODY_BYTES = 1024 * 1024
BODY_SECONDS = 30.0
ERROR_HEADER = "x-epic-error-message"
# Final answers to the caller's request, by the error that ended it (the API server's own are mapped below).
ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (InvalidArgumentError, 422),
    (NotFoundError, 404),
    (AlreadyExistsError, 409),
    (LimitExceededError, 422),
    (FailedPreconditionError, 409),
    (AbortedError, 409),
    (OptimisticUpdateError, 409),
    (ExhaustedError, 503),
)


class BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    # The header carries the message for clients that read no body; it is latin-1 on the wire.
    header = message.encode("latin-1", "replace").decode("latin-1").replace("\n", " ")
    return JSONResponse({"error": message}, status_code=status, headers={ERROR_HEADER: header, **(headers or {})})


def status_of(error: Exception) -> tuple[int, str]:
    """The HTTP status and message a caller gets for `error`: 503 (which clients retry) only for what passes."""
    status = next((code for kind, code in ERRORS if isinstance(error, kind)), None)
    if status is not None:
        return status, str(error)
    if isinstance(error, client.ApiException):
        answered = int(error.status or 0)
        message = _api_message(error)
        if answered == 429 or answered >= 500:
            return 503, f"the Kubernetes API answered {answered}: {message}"
        if answered in (400, 403, 422):  # the webhook's or the schema's refusal: it names the field
            return 422, message
        if answered in (404, 409):
            return answered, message
        return 500, f"the Kubernetes API answered {answered}: {message}"
    if isinstance(error, (urllib3.exceptions.HTTPError, OSError)):
        return 503, f"the Kubernetes API could not be reached: {error}"
    return 500, f"{type(error).__name__}: {error}"


def _api_message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def found(answer: Found) -> JSONResponse:
    return JSONResponse(answer.body())


def moved(location: str) -> JSONResponse:
    """302 to the object's URL: the client follows it with a GET (a 307 would repeat the POST)."""
    return JSONResponse({"link": {"self": location}}, status_code=302, headers={"Location": location})


def deleted(name: str, existed: bool) -> JSONResponse:
    return JSONResponse({"message": f"{name} deleted" if existed else f"{name} was not there"})


def create_app(
    objects: EpicObjects,
    authenticator: Authenticator,
    max_body_bytes: int = MAX_BODY_BYTES,
    tracer_provider: TracerProvider | None = None,
    body_seconds: float = BODY_SECONDS,
) -> FastAPI:
    """The routes; a body over `max_body_bytes` gets 413, one not all there within `body_seconds` 408 (a body dripped
    slowly holds a connection for nothing)."""
    app = FastAPI(title="EPIC REST API (tollgate)", docs_url=None, redoc_url=None, openapi_url=None)
    # One server span per request (in the caller's trace when it sends a traceparent), with the account and user.
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=tracer_provider, meter_provider=NoOpMeterProvider(), exclude_spans=["receive", "send"]
    )

    async def body_of(request: Request) -> object:
        try:
            async with asyncio.timeout(body_seconds):
                raw = await capped_body({k.lower(): v for k, v in request.headers.raw}, request.receive, max_body_bytes)
        except ClientDisconnect:
            raise BadBody(400, "body: the client went away before sending all of it") from None
        except TimeoutError:
            raise BadBody(408, f"body: not all of it arrived within {body_seconds:g} s") from None
        if raw is None:
            raise BadBody(413, f"body: larger than {max_body_bytes} bytes")
        try:
            return json.loads(raw)
        except ValueError as error:
            raise BadBody(400, f"body: not JSON: {error}") from None

    async def answer(request: Request, account: str, work: Callable[[], Awaitable[JSONResponse]]) -> Response:
        try:
            caller = await authenticator.caller(request.headers.get("authorization"), account)
        except Unauthenticated as error:
            return error_response(401, str(error), {"WWW-Authenticate": REALM})
        except Forbidden as error:
            return error_response(403, str(error))
        trace.get_current_span().set_attributes({"epic.account": caller.account, "epic.user": caller.user})
        try:
            return await work()
        except BadBody as error:
            return error_response(error.status, str(error))
        except DuplicateError as error:
            body = {"message": str(error), "link": {"self": error.location}, **error.extra}
            return JSONResponse(body, status_code=409, headers={"Location": error.location})
        except Exception as error:
            status, message = status_of(error)
            if status == 500:
                log.exception("%s %s failed", request.method, request.url.path)
            else:
                log.info(
                    "%s %s: %s %s", request.method, request.url.path, status, message,
                    extra={"account": account, "user": caller.user},
                )  # fmt: skip
            return error_response(status, message, {"Retry-After": "1"} if status == 503 else None)

    async def write(request: Request, change: Callable[[object], Awaitable[str]]) -> JSONResponse:
        return moved(await change(await body_of(request)))

    @app.get(f"{BASE}/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"message": "ok"})

    @app.get(BASE + "/accounts/{account}")
    async def get_account(request: Request, account: str) -> Response:
        return await answer(request, account, lambda: _found(objects.account(account)))

    @app.get(BASE + "/accounts/{account}/groups/{group}")
    async def get_group(request: Request, account: str, group: str) -> Response:
        return await answer(request, account, lambda: _found(objects.group(account, group)))

    @app.post(BASE + "/accounts/{account}/groups/{group}/proxies")
    async def create_proxy(request: Request, account: str, group: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.create_proxy(account, group, body))
        )

    @app.get(BASE + "/accounts/{account}/proxies/{name}")
    async def get_proxy(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _found(objects.proxy(account, name)))

    @app.delete(BASE + "/accounts/{account}/proxies/{name}")
    async def delete_proxy(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _deleted(name, objects.delete(GWProxy, account, name)))

    @app.post(BASE + "/accounts/{account}/groups/{group}/services")
    async def create_service(request: Request, account: str, group: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.create_service(account, group, body))
        )

    @app.get(BASE + "/accounts/{account}/services/{name}")
    async def get_service(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _found(objects.service(account, name)))

    @app.delete(BASE + "/accounts/{account}/services/{name}")
    async def delete_service(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _deleted(name, objects.delete(LoadBalancer, account, name)))

    for key in NAMED:
        _named_routes(app, objects, key, answer, write)

    @app.post(BASE + "/accounts/{account}/services/{service}/endpoints")
    async def create_endpoint(request: Request, account: str, service: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.create_endpoint(account, service, body))
        )

    @app.get(BASE + "/accounts/{account}/services/{service}/endpoints/{name}")
    async def get_endpoint(request: Request, account: str, service: str, name: str) -> Response:
        return await answer(request, account, lambda: _found(objects.endpoint(account, service, name)))

    @app.delete(BASE + "/accounts/{account}/services/{service}/endpoints/{name}")
    async def delete_endpoint(request: Request, account: str, service: str, name: str) -> Response:
        return await answer(request, account, lambda: _deleted(name, objects.delete_endpoint(account, service, name)))

    @app.post(BASE + "/accounts/{account}/services/{service}/clusters")
    async def create_cluster(request: Request, account: str, service: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.create_cluster(account, service, body))
        )

    @app.get(BASE + "/accounts/{account}/services/{service}/clusters/{cluster}")
    async def get_cluster(request: Request, account: str, service: str, cluster: str) -> Response:
        return await answer(request, account, lambda: _found(objects.cluster(account, service, cluster)))

    @app.delete(BASE + "/accounts/{account}/services/{service}/clusters/{cluster}")
    async def delete_cluster(request: Request, account: str, service: str, cluster: str) -> Response:
        return await answer(
            request, account, lambda: _deleted(cluster, objects.delete_cluster(account, service, cluster))
        )

    @app.exception_handler(404)
    async def unknown(request: Request, _: Exception) -> Response:
        return error_response(404, f"no route {request.method} {request.url.path}")

    @app.exception_handler(405)
    async def not_allowed(request: Request, _: Exception) -> Response:
        return error_response(405, f"{request.method} is not allowed on {request.url.path}")

    return app


Answer = Callable[[Request, str, Callable[[], Awaitable[JSONResponse]]], Awaitable[Response]]
Write = Callable[[Request, Callable[[object], Awaitable[str]]], Awaitable[JSONResponse]]


def _named_routes(app: FastAPI, objects: EpicObjects, key: str, answer: Answer, write: Write) -> None:
    """POST /accounts/{a}/<key>s and GET, PUT, DELETE /accounts/{a}/<key>s/{name}, for routes and slices."""
    kind, _ = NAMED[key]
    collection = BASE + "/accounts/{account}/" + key + "s"

    async def create(request: Request, account: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.create_named(key, account, body))
        )

    async def get(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _found(objects.named(key, account, name)))

    async def update(request: Request, account: str, name: str) -> Response:
        return await answer(
            request, account, lambda: write(request, lambda body: objects.update_named(key, account, name, body))
        )

    async def delete(request: Request, account: str, name: str) -> Response:
        return await answer(request, account, lambda: _deleted(name, objects.delete(kind, account, name)))

    app.add_api_route(collection, create, methods=["POST"], name=f"create_{key}")
    app.add_api_route(collection + "/{name}", get, methods=["GET"], name=f"get_{key}")
    app.add_api_route(collection + "/{name}", update, methods=["PUT"], name=f"update_{key}")
    app.add_api_route(collection + "/{name}", delete, methods=["DELETE"], name=f"delete_{key}")


async def _found(work: Awaitable[Found]) -> JSONResponse:
    return found(await work)


async def _deleted(name: str, work: Awaitable[bool]) -> JSONResponse:
    return deleted(name, await work)
