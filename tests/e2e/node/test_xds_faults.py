"""tollgate-xds under faults, end to end: real Envoys that reject config, a frozen API server connection, several
xds replicas, Envoys that never answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.models.base import raw_condition
from tollgate.models.envoy import XDS_CLUSTER
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.faultproxy import Mode, api_server_proxy
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.xds import (
    GROUP,
    PLURAL,
    VERSION,
    Xds,
    admin,
    answer,
    apply_vs,
    condition,
    envoy_pod,
    events,
    kwok_pod,
    port_taken,
    read_vs,
    running_envoy,
    start_xds,
    stats,
    udp_virtual_service,
    xds_settings,
)

pytestmark = pytest.mark.e2e


async def test_a_rejected_virtual_service_is_held_back_and_the_others_on_its_envoy_converge(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
) -> None:
    """Envoy cannot bind a port another process holds (no admission check can know that): it NACKs the listener.
    The rejected VirtualService says so with Envoy's message, and a good one applied afterwards still reaches the
    same Envoy, which is never sent the rejected listener again."""
    xds = start_xds(run_service, xds_settings(cluster.host_address))
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        envoy_pod(core, namespace, "edge", xds, {"app": "edge"}, delta=False)
        envoy_ip, container = await running_envoy(core, namespace, "edge")
        await _xds_cluster_keeps_alive(envoy_ip)
        with port_taken(cluster, container, 3002):
            apply_vs(custom, namespace, udp_virtual_service("bad", "bad-l", 3002, "bad-c", target))
            rejected = raw_condition(await condition(custom, namespace, "bad", "Programmed", "Rejected"), "Programmed")
            assert rejected["status"] == "False"
            assert rejected["message"].startswith(f"Envoy edge.{namespace} rejected generation 1: ")
            assert f"{namespace}/bad/bad-l" in rejected["message"], "Envoy's own error_detail, naming the listener"
            assert "Address already in use" in rejected["message"]

            apply_vs(custom, namespace, udp_virtual_service("good", "good-l", 3003, "good-c", target))
            await condition(custom, namespace, "good", "Programmed", "Programmed")
            assert await answer(envoy_ip, 3003) == "echo", "the good VirtualService serves traffic"
            assert (await stats(envoy_ip))["listener_manager.lds.update_rejected"] == 1, "the rejected one not resent"
            bad_condition = raw_condition(read_vs(custom, namespace, "bad"), "Programmed")
            assert bad_condition["reason"] == "Rejected", "the bad one stays rejected"
            dump = await asyncio.to_thread(xds.api, f"/debug/envoys/edge.{namespace}")
            held = dump[0]["types"]["listeners"]["held_back"]
            assert list(held) == [f"VirtualService {namespace}/bad"]
            await eventually(
                lambda: asyncio.to_thread(events, core, namespace, "bad", "Rejected"), "a Rejected Event on the bad one"
            )


async def listeners(ip: str) -> set[str]:
    """The names of the dynamic listeners the Envoy at `ip` runs (active ones: a removed listener drains a while)."""
    dump = await admin(ip, "/config_dump?resource=dynamic_listeners")
    return {c["name"] for c in dump.get("configs", []) if "active_state" in c}


async def test_a_virtual_service_deleted_before_the_watches_start_leaves_the_envoy(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> None:
    """xds lists everything, serves it, then starts its watches. The API server connection freezes right after that
    first listing; a VirtualService deleted meanwhile is not in the watches' own listing, so no watch ever tells of
    its deletion: the resync finds it, and the real Envoy loses its listener."""
    env = {**xds_settings(cluster.host_address), "TOLLGATE_XDS_RESYNC_PERIOD_S": "2"}
    target = cluster.remote_address()
    for name, port in (("doomed", 3006), ("kept", 3007)):
        apply_vs(custom, namespace, udp_virtual_service(name, f"{name}-l", port, f"{name}-c", target))
    kubeconfig = service_account_kubeconfig(cluster, "xds", tmp_path)
    with api_server_proxy(kubeconfig, tmp_path) as (proxy, proxied):
        process = ServiceProcess("xds", proxied, tmp_path / "logs", env=env)
        xds = Xds(process, cluster.host_address, int(env["TOLLGATE_XDS_GRPC_PORT"]), int(env["TOLLGATE_XDS_API_PORT"]))
        # The Envoy's pod is in the first listing: xds admits an Envoy only as a pod it knows, and learns of no
        # other while its watches are frozen.
        envoy_pod(core, namespace, "edge", xds, {"app": "edge"}, delta=True)
        await eventually(
            lambda: asyncio.to_thread(lambda: core.read_namespaced_pod("edge", namespace).status.pod_ip),
            "the Envoy pod to get its IP",
        )
        process.start()
        try:
            wait_for(lambda: "ADS serving" in process.logs(), "xds to serve its first listing", interval=0.005)
            proxy.set_mode(Mode.FREEZE)
            envoy_ip, _ = await running_envoy(core, namespace, "edge")
            doomed, kept = f"{namespace}/doomed/doomed-l", f"{namespace}/kept/kept-l"
            await eventually(
                lambda: _has(envoy_ip, {doomed, kept}), "the Envoy to run both listeners", ignore=(OSError,)
            )
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "doomed")
            proxy.set_mode(Mode.PASS)
            process.wait_ready()
            async with UDPEcho(target, 1234, name="echo"):
                assert (
                    await eventually(
                        lambda: answer(envoy_ip, 3007), "kept to forward", ignore=(TimeoutError, ConnectionError)
                    )
                    == "echo"
                )
            await eventually(lambda: _has(envoy_ip, {kept}, exactly=True), "the deleted one to leave the Envoy")
            assert "resync: virtualservices" in process.logs() and "was deleted without a watch event" in process.logs()
        finally:
            process.stop()


async def _has(ip: str, names: set[str], exactly: bool = False) -> bool:
    running = await listeners(ip)
    return running == names if exactly else names <= running


async def test_two_replicas_merge_their_envoys_into_one_status_that_does_not_flap(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
) -> None:
    """Two xds replicas, one Envoy bootstrapped to each, one VirtualService for both Envoys: its status counts both,
    holds each replica's report, and once converged is not written again; a replica whose pod is gone is dropped."""
    replicas: dict[str, Xds] = {}
    for name in ("xds-a", "xds-b"):
        await kwok_pod(cluster, namespace, name, {})  # stands for the replica's pod: alive while it exists
        replicas[name] = start_xds(
            run_service, {**xds_settings(cluster.host_address), "TOLLGATE_XDS_REPLICA": f"{namespace}/{name}"}
        )
    target = cluster.remote_address()
    apply_vs(custom, namespace, udp_virtual_service("shared", "shared-l", 3010, "shared-c", target))
    for name, xds in replicas.items():
        envoy_pod(core, namespace, f"edge-{name}", xds, {"app": "edge"}, delta=True)

    async def both_programmed() -> dict[str, Any] | None:
        obj = await condition(custom, namespace, "shared", "Programmed", "Programmed")
        return obj if obj["status"]["programmed_proxies"] == 2 else None

    obj = await eventually(both_programmed, "both Envoys to run the VirtualService", timeout=60)
    status = obj["status"]
    assert (status["proxies"], status["programmed_proxies"]) == (2, 2)
    assert [e["node"] for e in status["envoys"]] == [f"edge-xds-a.{namespace}", f"edge-xds-b.{namespace}"]
    assert sorted(status["replicas"]) == [f"{namespace}/xds-a", f"{namespace}/xds-b"]
    assert all(r["proxies"] == 1 for r in status["replicas"].values()), "each replica reports its own Envoy"
    assert "2/2 Envoys run generation 1" in raw_condition(obj, "Programmed")["message"]

    version = obj["metadata"]["resourceVersion"]
    samples = []
    for _ in range(15):
        await asyncio.sleep(0.2)  # sampling over time is the point: a flapping status changes between samples
        samples.append(read_vs(custom, namespace, "shared"))
    assert all(s["metadata"]["resourceVersion"] == version for s in samples), "converged: no more status writes"

    replicas["xds-b"].process.stop()
    core.delete_namespaced_pod("xds-b", namespace, grace_period_seconds=0)

    async def only_a() -> dict[str, Any] | None:
        found = read_vs(custom, namespace, "shared")
        return found if list(found["status"]["replicas"]) == [f"{namespace}/xds-a"] else None

    obj = await eventually(only_a, "the report of the replica that is gone to be dropped")
    assert (obj["status"]["proxies"], obj["status"]["programmed_proxies"]) == (1, 1)


async def _xds_cluster_keeps_alive(ip: str) -> None:
    """The bootstrap every Envoy gets (tollgate.models.envoy.ads_bootstrap) makes a half-open connection to the xDS
    server fail within about a minute: TCP keepalive and HTTP/2 PINGs on its xDS cluster, as the real Envoy runs it."""
    dump = await admin(ip, "/config_dump?resource=static_clusters")
    cluster = next(c["cluster"] for c in dump["configs"] if c["cluster"]["name"] == XDS_CLUSTER)
    assert cluster["upstream_connection_options"]["tcp_keepalive"] == {
        "keepalive_probes": 3,
        "keepalive_time": 30,
        "keepalive_interval": 10,
    }
    assert cluster["connect_timeout"] == "1s"
    options = cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    keepalive = options["explicit_http_config"]["http2_protocol_options"]["connection_keepalive"]
    assert (keepalive["interval"], keepalive["timeout"]) == ("30s", "10s")
