"""`epicctl proxy-status` and `proxy-config` against the running system: the xds service with its debug API behind
TLS and token auth, an Envoy container on the real node, and epicctl run as a user runs it: with --xds-url, and
without it, through the API server's pods proxy to the xds pod's debug port (the pod is on one of KWOK's nodes, and
its xds is a process of this test serving at the pod's IP).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.cli.epicctl import main
from tollgate.cli.exits import Exit
from tollgate.models.envoy import DEBUG_AUDIENCE, DEBUG_PERMISSION_URL, DEBUG_SERVICE_ACCOUNT, DEBUG_TOKEN_HEADER
from tollgate.testing.agents import certificates
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.xds import (
    GROUP,
    PLURAL,
    VERSION,
    Xds,
    apply_vs,
    forwarding_envoy,
    kwok_pod,
    port_taken,
    start_xds,
    udp_virtual_service,
    xds_settings,
)

pytestmark = pytest.mark.e2e

DEBUG_PORT = 8081  # the xds chart's debug port


@pytest.fixture
def debug_reader(kube: client.ApiClient, core: client.CoreV1Api, namespace: str) -> Iterator[str]:
    """The ServiceAccount tollgate-xds-debug in `namespace`, allowed to read the debug API (what the xds chart
    ships); its namespace."""
    rbac = client.RbacAuthorizationV1Api(kube)
    name = f"{namespace}-xds-debug"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": DEBUG_SERVICE_ACCOUNT}})  # type: ignore[arg-type]
    rule = {"nonResourceURLs": [DEBUG_PERMISSION_URL], "verbs": ["get"]}
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})  # type: ignore[arg-type]
    subject = {"kind": "ServiceAccount", "name": DEBUG_SERVICE_ACCOUNT, "namespace": namespace}
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "roleRef": role_ref, "subjects": [subject]})  # type: ignore[arg-type]
    try:
        yield namespace
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str


def epicctl(cluster: EmbeddedCluster, *args: str) -> Run:
    """epicctl's `main(argv)`, as a user runs it (in this process: a fresh interpreter per call is seconds here)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--kubeconfig", str(cluster.kubeconfig)])
    return Run(code, out.getvalue(), err.getvalue())


def guarded_xds(
    cluster: EmbeddedCluster,
    run_service: ServiceFactory,
    tmp_path: Path,
    api_host: str = "127.0.0.1",
    api_port: int = 0,
) -> tuple[Xds, str, Path]:
    """xds with its debug API as the chart publishes it (TLS, token auth), at api_host (and api_port, when given);
    the API's URL and the CA to trust."""
    ca_file = certificates(tmp_path / "tls")
    env = {
        **xds_settings(cluster.host_address),
        "TOLLGATE_XDS_API_AUTH": "true",
        "TOLLGATE_XDS_API_CERT_DIR": str(tmp_path / "tls"),
        "TOLLGATE_XDS_API_HOST": api_host,
    }
    if api_port:
        env["TOLLGATE_XDS_API_PORT"] = str(api_port)
    xds = start_xds(run_service, env)
    return xds, f"https://{api_host}:{xds.api_port}", ca_file


def get(url: str, ca_file: Path, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5, context=ssl.create_default_context(cafile=ca_file)) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


async def test_proxy_status_shows_an_envoy_synced_then_nacked_with_envoys_error_then_synced_again(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    debug_reader: str,
    run_service: ServiceFactory,
    tmp_path: Path,
) -> None:
    xds, url, ca_file = guarded_xds(cluster, run_service, tmp_path)
    where = ["--xds-url", url, "--ca-file", str(ca_file), "--xds-namespace", debug_reader]
    node = f"edge.{namespace}"

    def status() -> dict[str, Any]:
        result = epicctl(cluster, "proxy-status", node, *where, "-o", "json")
        assert result.returncode == Exit.OK, result.stderr
        found: list[dict[str, Any]] = json.loads(result.stdout)
        assert len(found) == 1, found
        return found[0]

    def states(found: dict[str, Any]) -> dict[str, str]:
        return {name: t["state"] for name, t in found["types"].items()}

    async def listeners_become(state: str) -> dict[str, Any]:
        def probe() -> dict[str, Any] | None:
            found = status()
            return found if states(found)["listeners"] == state else None

        return await eventually(lambda: asyncio.to_thread(probe), f"proxy-status to show the listeners {state}")

    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        _, container = await forwarding_envoy(core, custom, namespace, xds, target, delta=False)

        synced = await listeners_become("SYNCED")
        assert states(synced) == {"clusters": "SYNCED", "endpoints": "NOT SENT", "listeners": "SYNCED"}
        assert synced["serves"] == [f"VirtualService {namespace}/edge"]
        assert synced["secondsSinceAck"] is not None and synced["secondsSinceAck"] < 60
        table = epicctl(cluster, "proxy-status", *where)
        assert table.returncode == Exit.OK, table.stderr
        header, *rows = table.stdout.splitlines()
        assert header.split() == ["NAME", "SERVES", "CDS", "LDS", "EDS", "XDS", "LAST-ACK"]
        [row] = [r for r in rows if r.startswith(node)]
        assert row.split()[:3] == [node, "VirtualService", f"{namespace}/edge"]
        assert row.split()[3:6] == ["SYNCED", "SYNCED", "NOT"]

        with port_taken(cluster, container, 3002):
            apply_vs(custom, namespace, udp_virtual_service("bad", "bad-l", 3002, "bad-c", target))
            nacked = await listeners_become("NACKED")
            error = nacked["types"]["listeners"]["error"]
            assert f"{namespace}/bad/bad-l" in error and "Address already in use" in error, error
            assert states(nacked)["clusters"] == "SYNCED"
            wide = epicctl(cluster, "proxy-status", *where, "-o", "wide")
            assert "NACKED" in wide.stdout and "Address already in use" in wide.stdout, wide.stdout

            # The fix: the bad VirtualService moves to a free port; xds tries its new content, the Envoy ACKs it.
            patch = {"spec": udp_virtual_service("bad", "bad-l", 3004, "bad-c", target)["spec"]}
            custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "bad", patch)
            again = await listeners_become("SYNCED")
            assert again["types"]["listeners"]["error"] is None

        listeners = epicctl(cluster, "proxy-config", node, "listeners", *where)
        assert listeners.returncode == Exit.OK, listeners.stderr
        lines = {line.split()[0]: line.split() for line in listeners.stdout.splitlines()[1:]}
        assert lines[f"{namespace}/bad/bad-l"][1:4] == ["0.0.0.0", "3004", "UDP"]
        assert lines[f"{namespace}/edge/edge-l"][4] == f"{namespace}/edge/edge-c"
        as_json = json.loads(epicctl(cluster, "proxy-config", node, "listeners", *where, "-o", "json").stdout)
        bad = next(r for r in as_json if r["name"] == f"{namespace}/bad/bad-l")
        assert bad["@type"] == "type.googleapis.com/envoy.config.listener.v3.Listener"
        assert bad["address"]["socket_address"]["port_value"] == 3004

        missing = epicctl(cluster, "proxy-config", f"nobody.{namespace}", "listeners", *where)
        assert missing.returncode == Exit.NOT_FOUND, missing.stderr


def test_the_debug_api_refuses_requests_without_a_token_or_without_the_permission(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    namespace: str,
    debug_reader: str,
    run_service: ServiceFactory,
    tmp_path: Path,
) -> None:
    _, base, ca_file = guarded_xds(cluster, run_service, tmp_path)
    url = f"{base}/debug/envoys"
    status, body = wait_for(lambda: get(url, ca_file, {}), "the debug API over TLS", timeout=30, ignore=(OSError,))
    assert status == 401
    assert body["detail"].startswith(f"the debug API needs a token in the {DEBUG_TOKEN_HEADER} header")

    def token(account: str, audience: str) -> str:
        spec = {"spec": {"audiences": [audience], "expirationSeconds": 600}}
        return str(core.create_namespaced_service_account_token(account, namespace, spec).status.token)  # type: ignore[arg-type]

    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nosy"}})  # type: ignore[arg-type]
    status, body = get(url, ca_file, {DEBUG_TOKEN_HEADER: token("nosy", DEBUG_AUDIENCE)})
    assert status == 403, body
    user = f"system:serviceaccount:{namespace}:nosy"
    assert body["detail"].startswith(f"user {user!r} may not get the non-resource URL {DEBUG_PERMISSION_URL}")
    status, body = get(url, ca_file, {DEBUG_TOKEN_HEADER: token(DEBUG_SERVICE_ACCOUNT, "some-other-audience")})
    assert status == 401 and f"not valid for the audience {DEBUG_AUDIENCE!r}" in body["detail"], body
    assert get(url, ca_file, {DEBUG_TOKEN_HEADER: token(DEBUG_SERVICE_ACCOUNT, DEBUG_AUDIENCE)}) == (200, [])

    refused = epicctl(cluster, "proxy-status", "--xds-url", base, "--ca-file",
                      str(ca_file), "--xds-namespace", "no-such-namespace")  # fmt: skip
    assert refused.returncode == Exit.DENIED, refused.stderr
    assert "the debug API refused (401)" in refused.stderr


async def test_without_xds_url_each_xds_pod_is_asked_through_the_api_servers_pods_proxy(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    debug_reader: str,
    run_service: ServiceFactory,
    tmp_path: Path,
) -> None:
    """epicctl finds the xds pods, mints the debug token and asks the API server to proxy to each pod's debug port,
    whose TLS and token check answer as through --xds-url."""
    none = epicctl(cluster, "proxy-status", "--xds-namespace", namespace)
    assert none.returncode == Exit.NOT_FOUND, none.stderr
    assert f"no running tollgate-xds pod in namespace {namespace}" in none.stderr

    labels = {"app.kubernetes.io/name": "tollgate-xds"}
    pod_ip = await kwok_pod(cluster, namespace, "xds-0", labels, ports={"debug": DEBUG_PORT})
    xds, _, _ = guarded_xds(cluster, run_service, tmp_path, api_host=pod_ip, api_port=DEBUG_PORT)
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        await forwarding_envoy(core, custom, namespace, xds, target, delta=True)

    def synced() -> Run | None:
        result = epicctl(cluster, "proxy-status", "--xds-namespace", namespace)
        assert result.returncode == Exit.OK, result.stderr
        return result if f"edge.{namespace}" in result.stdout and "SYNCED" in result.stdout else None

    table = await eventually(lambda: asyncio.to_thread(synced), "proxy-status through the pods proxy to show SYNCED")
    [row] = [r for r in table.stdout.splitlines() if r.startswith(f"edge.{namespace}")]
    assert row.split()[1:6] == ["VirtualService", f"{namespace}/edge", "SYNCED", "SYNCED", "NOT"]
