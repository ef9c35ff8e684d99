"""Fixtures for the webhook's unit tests: valid objects of every kind (the samples), a filled cache,
admission reviews, and a running HTTPS admission server."""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider

from tollgate.models import kind_for
from tollgate.runtime.certificates import ServingCertificate
from tollgate.runtime.http_server import HTTPServer
from tollgate.testing.wait import wait_for
from tollgate.webhook.api.app import Admitter, create_app
from tollgate.webhook.cache import Store, store_for
from tollgate.webhook.certs import generate
from tollgate.webhook.defaulting import JSONPatch, default_patch
from tollgate.webhook.kinds import Model
from tollgate.webhook.validation import INDEXES, Limits, parse, validate

SAMPLES = Path(__file__).resolve().parents[3] / "deploy" / "samples"

Obj = dict[str, Any]


def _samples() -> dict[str, Obj]:
    """A sample of each kind (from `<kind>.yaml` where there is one), server-set metadata removed."""
    found: dict[str, Obj] = {}
    for path in sorted(SAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document["apiVersion"] == "v1":
                continue
            if document["kind"] not in found or path.stem == document["kind"].lower():
                document["metadata"] = {k: v for k, v in document["metadata"].items() if k in ("name", "namespace")}
                document.pop("status", None)
                found[document["kind"]] = document
    return found


SAMPLE_OBJECTS = _samples()


@pytest.fixture(scope="session")
def sample() -> Callable[[str], Obj]:
    """`sample("LoadBalancer")`: a fresh copy of a valid object of that kind."""
    return lambda kind: copy.deepcopy(SAMPLE_OBJECTS[kind])


def fill(*objects: Obj) -> Store:
    store = store_for(INDEXES)
    for kind in store.kinds:
        store.replace(kind, [obj for obj in objects if obj["kind"] == kind])
    return store


def defaults_for(model: Model, obj: dict[str, Any]) -> JSONPatch:
    """The webhook's defaulting patch for `obj` as its model parses it; none when the model refuses it."""
    resource, _ = parse(model, obj)
    return default_patch(obj, resource) if resource is not None else []


@pytest.fixture(scope="session")
def defaults() -> Callable[[Model, dict[str, Any]], JSONPatch]:
    """`defaults(model, obj)`: the defaulting patch (see defaults_for)."""
    return defaults_for


@pytest.fixture
def group(sample: Callable[[str], Obj]) -> Obj:
    """The service group the sample load balancers name, in their namespace."""
    return sample("LBServiceGroup")


@pytest.fixture(scope="session")
def store_with() -> Callable[..., Store]:
    """`store_with(obj, ...)`: a synced cache holding exactly these objects."""
    return fill


@pytest.fixture(scope="session")
def check() -> Callable[..., list[str]]:
    """`check(obj, *cached, old=None, limits=Limits())`: the violations of `obj`, as the API server prints them."""

    def run(obj: Obj, *cached: Obj, old: Obj | None = None, limits: Limits | None = None) -> list[str]:
        metadata = obj.get("metadata", {})
        violations = validate(
            kind_for(obj["apiVersion"], obj["kind"]),
            obj,
            old,
            namespace=metadata.get("namespace", ""),
            name=metadata.get("name", ""),
            view=fill(*cached),
            limits=limits or Limits(),
        )
        return [str(violation) for violation in violations]

    return run


def admission_review(
    obj: Obj | None, operation: str = "CREATE", old: Obj | None = None, uid: str = "0b1c"
) -> dict[str, Any]:
    source = obj or old or {}
    group, _, version = source.get("apiVersion", "epic.acnodal.io/v1").rpartition("/")
    metadata = source.get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": source.get("kind", "EPIC")},
            "resource": {"group": group, "version": version, "resource": "x"},
            "operation": operation,
            "name": metadata.get("name", ""),
            "namespace": metadata.get("namespace", ""),
            "object": obj,
            "oldObject": old,
            "userInfo": {"username": "tester"},
            "dryRun": False,
        },
    }


@pytest.fixture(scope="session")
def make_review() -> Callable[..., dict[str, Any]]:
    """`make_review(obj, operation="CREATE", old=None)`: an AdmissionReview v1 request as the API server sends it."""
    return admission_review


class RunningServer:
    """The real admission server (uvicorn over TLS) in a thread of its own, with a synchronous client."""

    def __init__(
        self,
        cert_dir: Path,
        store: Store,
        limits: Limits,
        reload_seconds: float = 1.0,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.cert_dir = cert_dir
        tls = ServingCertificate(cert_dir)
        app = create_app(Admitter(store, limits), tracer_provider)
        self.server = HTTPServer(app, "127.0.0.1", 0, tls, reload_seconds=reload_seconds)
        self.url = f"https://127.0.0.1:{self.server.port}"
        self.thread = threading.Thread(target=asyncio.run, args=(self.server.serve(),), daemon=True)

    def start(self) -> RunningServer:
        self.thread.start()
        wait_for(lambda: self.server.started, "the admission server to listen", timeout=10)
        return self

    def stop(self) -> None:
        self.server.stop()
        self.thread.join(10)

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.server.port, context=self.client_context(), timeout=10)

    def post(
        self,
        path: str,
        body: bytes,
        connection: http.client.HTTPSConnection | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        conn = connection or self.connection()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        data = response.read()
        if connection is None:
            conn.close()
        return response.status, json.loads(data)


@pytest.fixture(scope="session")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    generate(["127.0.0.1", "localhost"]).write(directory)
    return directory


@pytest.fixture(scope="session")
def server(bundle_dir: Path) -> Iterator[RunningServer]:
    """A running admission server whose cache holds the service group `sample` in epic-root."""
    group = copy.deepcopy(SAMPLE_OBJECTS["LBServiceGroup"])
    running = RunningServer(bundle_dir, fill(group), Limits()).start()
    yield running
    running.stop()


@pytest.fixture
def start_server() -> Iterator[Callable[..., RunningServer]]:
    """`start_server(cert_dir, reload_seconds=..., tracer_provider=..., store=...)`: a server of the test's own
    (by default over an empty, listed cache), stopped afterwards."""
    started: list[RunningServer] = []

    def start(
        cert_dir: Path,
        reload_seconds: float = 1.0,
        tracer_provider: TracerProvider | None = None,
        store: Store | None = None,
    ) -> RunningServer:
        running = RunningServer(
            cert_dir, store if store is not None else fill(), Limits(), reload_seconds, tracer_provider
        ).start()
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
