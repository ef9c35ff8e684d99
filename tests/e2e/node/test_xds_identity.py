"""xDS identity end to end: the real service, the embedded cluster, real Envoys.

An Envoy pod's Envoy (a container on the real node, connecting from its pod IP) is served; a real Envoy elsewhere that
claims the same node id gets nothing, and the pod gets a Warning Event saying why. The debug API, which shows every
Envoy's config, answers on loopback only unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import urllib.error
import urllib.request

import pytest
from kubernetes import client

from tollgate.models.envoy import ENVOY_PROXY_LABEL
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.envoy import EnvoyProcess
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.xds import (
    answer,
    apply_vs,
    events,
    forwarding_envoy,
    pod_bootstrap,
    start_xds,
    udp_virtual_service,
    xds_settings,
)

pytestmark = pytest.mark.e2e


async def test_an_envoy_claiming_another_pods_node_id_gets_nothing_and_the_genuine_one_is_served(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
) -> None:
    xds = start_xds(run_service, xds_settings(cluster.host_address))
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        envoy_ip, _ = await forwarding_envoy(core, custom, namespace, xds, target, delta=True)

        # Another Envoy, from another address, names itself edge.<namespace> and asks for the same listeners there.
        impostor_ip = cluster.remote_address()
        async with EnvoyProcess(pod_bootstrap(xds, namespace, "edge", impostor_ip), admin_host=impostor_ip) as impostor:
            message = f"pod {namespace}/edge has IPs {envoy_ip}, and the connection comes from {impostor_ip}"
            expected = f"xDS stream refused: node id 'edge.{namespace}': {message}"

            async def refused() -> bool:
                return expected in await asyncio.to_thread(events, core, namespace, "edge", "XdsRefused")

            await eventually(refused, f"the Event {expected!r} on pod edge")

            # Envoy counts a stream as connected from the moment it opens, so each retry of the impostor reads 1
            # until the server ends it: what is checked is that no stream of its stays open.
            async def not_connected() -> bool:
                return (await impostor.stats())["control_plane.connected_state"] == 0

            await eventually(not_connected, "the impostor's xDS stream ended by the server", timeout=10)
            stats = await impostor.stats()
            assert stats.get("cluster_manager.cds.update_success", 0) == 0
            assert stats.get("listener_manager.lds.update_success", 0) == 0
            assert await impostor.listeners() == [], "the impostor got no listener"
            refusals = [
                line for line in xds.metrics().splitlines() if line.startswith("tollgate_xds_refused_streams_total{")
            ]
            assert refusals and all('reason="PeerMismatch"' in line for line in refusals)
            assert [e["node"] for e in xds.api("/debug/envoys")] == [f"edge.{namespace}"]
            assert await answer(envoy_ip, 3001) == "echo", "the genuine Envoy is still served"


async def test_a_served_envoy_whose_pod_loses_its_envoy_label_is_cut_off_until_the_label_is_back(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
) -> None:
    xds = start_xds(run_service, xds_settings(cluster.host_address))
    target = cluster.remote_address()
    async with UDPEcho(target, 1234, name="echo"):
        envoy_ip, _ = await forwarding_envoy(core, custom, namespace, xds, target, delta=True)

        core.patch_namespaced_pod("edge", namespace, {"metadata": {"labels": {ENVOY_PROXY_LABEL: None}}})
        expected = f"xDS stream ended: node id 'edge.{namespace}': pod {namespace}/edge is not labelled "
        expected += f"{ENVOY_PROXY_LABEL}=true"

        async def ended() -> bool:
            return expected in await asyncio.to_thread(events, core, namespace, "edge", "XdsStreamEnded")

        await eventually(ended, f"the Event {expected!r} on pod edge", timeout=15)

        async def serves_none() -> bool:
            return not await asyncio.to_thread(xds.api, "/debug/envoys")

        await eventually(serves_none, "xds to serve no Envoy", timeout=10)

        def counted(metric: str) -> bool:
            return any(
                line.startswith(f"{metric}{{") and 'reason="NotAnEnvoyPod"' in line
                for line in xds.metrics().splitlines()
            )

        async def reconnect_refused() -> bool:
            return await asyncio.to_thread(counted, "tollgate_xds_refused_streams_total")

        # The running Envoy reconnects, and is judged afresh: refused while the label is gone.
        await eventually(reconnect_refused, "the Envoy's reconnect refused", timeout=30)
        assert counted("tollgate_xds_revoked_streams_total")

        core.patch_namespaced_pod("edge", namespace, {"metadata": {"labels": {ENVOY_PROXY_LABEL: "true"}}})
        apply_vs(custom, namespace, udp_virtual_service("edge-2", "edge-l2", 3002, "edge-c2", target))
        await eventually(
            lambda: answer(envoy_ip, 3002),
            "the relabelled Envoy served again, with the listener added meanwhile",
            ignore=(TimeoutError, OSError),
            timeout=60,
        )
        assert [e["node"] for e in xds.api("/debug/envoys")] == [f"edge.{namespace}"]


def addresses_other_than(host: str) -> list[str]:
    """Addresses of this machine other than `host` to try: another loopback one, and a non-loopback one if any."""
    found = ["127.0.0.2"]
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        found.append(str(probe.getsockname()[0]))
    return [a for a in found if a != host and not a.startswith("0.")]


def test_the_debug_api_answers_on_loopback_only_by_default(run_service: ServiceFactory) -> None:
    env = {key: value for key, value in xds_settings().items() if key != "TOLLGATE_XDS_API_HOST"}
    port = free_port("0.0.0.0")
    xds = start_xds(run_service, {**env, "TOLLGATE_XDS_API_PORT": str(port)})
    listed = wait_for(lambda: [xds.api("/debug/envoys")], "the debug API on 127.0.0.1", timeout=30, ignore=(OSError,))
    assert listed == [[]]
    for address in addresses_other_than("127.0.0.1"):
        with pytest.raises(urllib.error.URLError) as refused:
            urllib.request.urlopen(f"http://{address}:{port}/debug/envoys", timeout=5)
        assert isinstance(refused.value.reason, ConnectionRefusedError), (address, refused.value)
