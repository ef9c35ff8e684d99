"""The webhook process under hostile input and a cut-off API server: its request-size setting answers 413, deep
JSON 400 (never a 5xx), and a finalizer is removed through the API server while its cache cannot list."""

from __future__ import annotations

import http.client
import json
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.net import free_port
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import wait_for
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

LABEL = "webhook.tollgate.io/hostile"
GOOPS = "/validate/goop.example.com/v1alpha1/goops"
LIMIT = 64 * 1024


@dataclass
class Process:
    port: int
    cert_dir: Path
    service: ServiceProcess

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        context = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)
        try:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def answers(self) -> bool:
        try:
            return self.post(GOOPS, b"{")[0] == 400
        except OSError:
            return False


def start_webhook(kubeconfig: Path, tmp_path: Path, env: dict[str, str]) -> Process:
    """A webhook process; it answers HTTPS at once, whether or not its cache has listed (so no /readyz wait)."""
    cert_dir = tmp_path / f"tls-{uuid.uuid4().hex[:8]}"
    generate(["127.0.0.1"]).write(cert_dir)
    port = free_port()
    settings = {"HOST": "127.0.0.1", "PORT": str(port), "CERT_DIR": str(cert_dir), **env}
    service = ServiceProcess(
        "webhook", kubeconfig, tmp_path / "logs", env={f"TOLLGATE_WEBHOOK_{k}": v for k, v in settings.items()}
    )
    process = Process(port, cert_dir, service.start())
    wait_for(process.answers, "the webhook to answer HTTPS", timeout=60)
    return process


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.service.stop()


def test_the_request_size_setting_is_read_and_deep_json_is_a_400(
    cluster: EmbeddedCluster, tmp_path: Path, processes: list[Process]
) -> None:
    processes.append(start_webhook(cluster.kubeconfig, tmp_path, {"MAX_REQUEST_BYTES": str(LIMIT)}))
    (webhook,) = processes
    status, answer = webhook.post(GOOPS, b" " * (LIMIT + 1))
    assert (status, answer["reason"]) == (413, "RequestEntityTooLarge")
    assert f"over {LIMIT} bytes" in answer["message"]
    for body in (b"[" * 30_000 + b"]" * 30_000, b'{"a":' * 10_000 + b"1" + b"}" * 10_000):  # under the limit
        status, answer = webhook.post(GOOPS, body)
        assert (status, answer["message"]) == (400, "the body nests deeper than 100 levels")


def test_a_finalizer_is_removed_while_the_webhooks_cache_cannot_list(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
    processes: list[Process],
) -> None:
    """The API server is cut off from the webhook (a FaultProxy refusing its connections) while the webhook is
    registered: creates are refused (the cache is not listed), yet an operator's finalizer removal goes through."""
    label = uuid.uuid4().hex[:12]
    group, version, plural = "goop.example.com", "v1alpha1", "goops"
    goop = {
        "apiVersion": f"{group}/{version}",
        "kind": "Goop",
        "metadata": {"name": "held", "labels": {LABEL: label}, "finalizers": ["example.com/operator"]},
        "spec": {"cmd": "echo hi"},
    }
    custom.create_namespaced_custom_object(group, version, namespace, plural, goop)
    with api_server_proxy(cluster.kubeconfig, tmp_path) as (proxy, via_proxy):
        proxy.set_mode(Mode.REFUSE)
        processes.append(start_webhook(via_proxy, tmp_path, {"LABEL_SELECTOR": f"{LABEL}={label}"}))
        (webhook,) = processes
        registration = Registration(
            ca_bundle=(webhook.cert_dir / "ca.crt").read_bytes(),
            url=f"https://127.0.0.1:{webhook.port}",
            name=f"tollgate-webhook-hostile-{label}",
            object_selector={"matchLabels": {LABEL: label}},
        )
        register(kube, registration)
        try:
            fresh = {**goop, "metadata": {"name": "fresh", "labels": {LABEL: label}}}

            def refused_unlisted() -> str:
                try:
                    custom.create_namespaced_custom_object(group, version, namespace, plural, fresh, dry_run="All")
                except client.ApiException as error:
                    return str(json.loads(error.body or "{}").get("message", ""))
                raise AssertionError("accepted: the webhook configurations are not in force yet")

            message = wait_for(refused_unlisted, "the configurations in force", timeout=30, ignore=(AssertionError,))
            assert "the webhook has not listed" in message and "retry in a moment" in message
            patch = {"metadata": {"finalizers": None}}
            patched = custom.patch_namespaced_custom_object(group, version, namespace, plural, "held", patch)
            assert not patched["metadata"].get("finalizers")
        finally:
            unregister(kube, registration.name)
