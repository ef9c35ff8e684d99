"""Watches that hang silently: a half-open connection to the API server sends nothing and reports nothing.

The FaultProxy's FREEZE_OPEN mode does what a NAT or load balancer that lost its state does: the connections
open at that moment hang for good, new ones get through. A service converges again only if it gives up on its
hung watch (and on its other hung connections) by itself and reconnects: within about the watch's client
timeout, which the tests shorten through the shared settings (server timeout 10 s: the client gives up after 15).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.wait import wait_for
from tollgate.webhook.certs import generate
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

WATCH_SECONDS = 10
REQUEST_SECONDS = 5
CLIENT_TIMEOUT = WATCH_SECONDS + 5  # KubeTimeouts.watch_client: 10% more, at least 5 s
# Past the client timeout: a reconnect, a request or two that time out on other frozen connections, the work.
CONVERGED_WITHIN = CLIENT_TIMEOUT + 4 * REQUEST_SECONDS
GROUP, VERSION, PLURAL = "goop.example.com", "v1alpha1", "goops"
VS_GROUP, VS_VERSION, VS_PLURAL = "servicemesh.l7mp.io", "v1", "virtualservices"
LABEL = "webhook.tollgate.io/test"


def settings(prefix: str, kubeconfig: Path) -> dict[str, str]:
    return {
        "KUBECONFIG": str(kubeconfig),
        f"{prefix}KUBECONFIG": str(kubeconfig),
        f"{prefix}WATCH_TIMEOUT_SECONDS": str(WATCH_SECONDS),
        f"{prefix}KUBE_REQUEST_TIMEOUT_SECONDS": str(REQUEST_SECONDS),
    }


def goop_phase(custom: client.CustomObjectsApi, namespace: str, name: str) -> str:
    goop = cast(dict[str, Any], custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))
    return str((goop.get("status") or {}).get("phase"))


def create_goop(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Goop",
        "metadata": {"name": name},
        "spec": {"cmd": "echo hello", "jobCount": 1},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def test_a_goop_created_while_the_controllers_watch_hangs_gets_its_jobs_once_the_watch_is_given_up(
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    account = service_account_kubeconfig(cluster, "jobs", tmp_path)
    with api_server_proxy(account, tmp_path) as (proxy, via_proxy):
        run_service("jobs", env=settings("TOLLGATE_JOBS_", via_proxy))
        create_goop(custom, namespace, "before")
        wait_for(lambda: goop_phase(custom, namespace, "before") == "Completed", "the controller to work", timeout=60)

        proxy.set_mode(Mode.FREEZE_OPEN)
        frozen_at = time.monotonic()
        create_goop(custom, namespace, "during")
        wait_for(
            lambda: goop_phase(custom, namespace, "during") == "Completed",
            "the Goop created while the watch hung to complete",
            timeout=CONVERGED_WITHIN,
        )
        print(f"\nconverged {time.monotonic() - frozen_at:.1f} s after the freeze (client timeout {CLIENT_TIMEOUT} s)")
        proxy.set_mode(Mode.PASS)


def virtual_service(name: str, port: int, label: str) -> dict[str, Any]:
    cluster = {"name": f"{name}-c", "endpoints": [{"name": f"{name}-e", "host": {"address": "10.0.0.1"}, "port": 7000}]}
    return {
        "apiVersion": f"{VS_GROUP}/{VS_VERSION}",
        "kind": "VirtualService",
        "metadata": {"name": name, "labels": {LABEL: label}},
        "spec": {
            "selector": {"app": "ingress"},
            "listeners": [{"name": f"{name}-l", "udp": {"port": port, "cluster": cluster}}],
        },
    }


def refusal(custom: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> str:
    """What the API server answers a dry-run create of `body` with: "" when it would be accepted."""
    try:
        custom.create_namespaced_custom_object(VS_GROUP, VS_VERSION, namespace, VS_PLURAL, body, dry_run="All")
    except client.ApiException as error:
        return str(json.loads(error.body or "{}").get("message", error.body))
    return ""


def test_the_webhooks_cache_sees_an_object_created_while_its_watch_hangs_once_the_watch_is_given_up(
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """A VirtualService port is unique in its namespace: the webhook refuses the second one only once its cache
    holds the first, which it can learn of only through a new connection."""
    label = uuid.uuid4().hex[:12]
    bundle = generate(["127.0.0.1"])
    bundle.write(tmp_path / "tls")
    port = free_port()
    account = service_account_kubeconfig(cluster, "webhook", tmp_path)
    registration = Registration(
        ca_bundle=bundle.ca,
        url=f"https://127.0.0.1:{port}",
        name=f"tollgate-webhook-watch-{label}",
        object_selector={"matchLabels": {LABEL: label}},
    )
    with api_server_proxy(account, tmp_path) as (proxy, via_proxy):
        run_service(
            "webhook",
            env={
                **settings("TOLLGATE_WEBHOOK_", via_proxy),
                "TOLLGATE_WEBHOOK_HOST": "127.0.0.1",
                "TOLLGATE_WEBHOOK_PORT": str(port),
                "TOLLGATE_WEBHOOK_CERT_DIR": str(tmp_path / "tls"),
                "TOLLGATE_WEBHOOK_LABEL_SELECTOR": f"{LABEL}={label}",
            },
        )
        register(kube, registration)
        try:
            blank = {**virtual_service("probe", 3000, label), "spec": {"listeners": "none"}}
            wait_for(lambda: refusal(custom, namespace, blank), "the webhook configurations to be in force", timeout=30)
            assert refusal(custom, namespace, virtual_service("second", 3000, label)) == ""

            proxy.set_mode(Mode.FREEZE_OPEN)
            frozen_at = time.monotonic()
            first = virtual_service("first", 3000, label)
            custom.create_namespaced_custom_object(VS_GROUP, VS_VERSION, namespace, VS_PLURAL, first)
            wait_for(
                lambda: (
                    "UDP port 3000 is taken by listener 'first-l'"
                    in refusal(custom, namespace, virtual_service("second", 3000, label))
                ),
                "the webhook to refuse a second VirtualService on the port of the one created during the freeze",
                timeout=CONVERGED_WITHIN,
            )
            print(f"\nthe webhook saw it {time.monotonic() - frozen_at:.1f} s after the freeze")
            proxy.set_mode(Mode.PASS)
        finally:
            unregister(kube, registration.name)
