"""Watches that hang silently: a half-open connection to the API server sends nothing and reports nothing.

The FaultProxy's FREEZE_OPEN mode does what a NAT or load balancer that lost its state does: the connections
open at that moment hang for good, new ones get through. A service converges again only if it gives up on its
hung watch (and on its other hung connections) by itself and reconnects: within about the watch's client
timeout, which the tests shorten through the shared settings (server timeout 10 s: the client gives up after 15).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.wait import wait_for

WATCH_SECONDS = 10
REQUEST_SECONDS = 5
CLIENT_TIMEOUT = WATCH_SECONDS + 5  # KubeTimeouts.watch_client: 10% more, at least 5 s
# Past the client timeout: a reconnect, a request or two that time out on other frozen connections, the work.
CONVERGED_WITHIN = CLIENT_TIMEOUT + 4 * REQUEST_SECONDS
GROUP, VERSION, PLURAL = "goop.example.com", "v1alpha1", "goops"


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
