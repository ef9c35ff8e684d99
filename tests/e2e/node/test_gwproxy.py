"""A GWProxy end to end: the xds service, an Envoy container in a pod with the GWProxy's labels, GWRoutes and
GWEndpointSlices as a Gateway API user writes them, and real HTTP servers as backends.

The HTTP requests go through the Envoy: by hostname, by path, and split by weight between two backends.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tollgate.models.epic import ACCOUNT_LABEL, GWPROXY_LABEL, LOAD_BALANCER_LABEL
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import HTTPEcho
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.wait import eventually
from tollgate.testing.xds import admin, envoy_pod, running_envoy, start_xds, xds_settings

pytestmark = pytest.mark.e2e

GROUP, VERSION = "epic.acnodal.io", "v1"
LISTENER_PORT = 8080
BACKEND_PORT = 8080
SPLIT_REQUESTS = 200


def create(custom: client.CustomObjectsApi, namespace: str, plural: str, kind: str, name: str, spec: Any) -> None:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}, "spec": spec}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)


def http_route(hostname: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"http": {"parentRefs": [{"name": "edge"}], "hostnames": [hostname], "rules": list(rules)}}


def backend(name: str, weight: int = 1) -> dict[str, Any]:
    return {"name": name, "port": 80, "weight": weight}


async def invalid_events(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.kind=GWProxy,involvedObject.name={name},reason=Invalid"
    return [str(e.message) for e in core.list_namespaced_event(namespace, field_selector=selector).items]


async def listener_names(ip: str) -> list[str]:
    listeners = await admin(ip, "/listeners?format=json")
    return sorted(item["name"] for item in listeners.get("listener_statuses", []))  # none yet: no key


async def test_a_gateway_proxy_routes_http_by_host_path_and_weight(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    cluster: EmbeddedCluster,
) -> None:
    xds = start_xds(run_service, xds_settings(cluster.host_address))
    backends = {
        name: HTTPEcho(cluster.remote_address(), BACKEND_PORT, name=name) for name in ("alpha", "beta", "gamma")
    }
    async with contextlib.AsyncExitStack() as stack:
        for server in backends.values():
            await stack.enter_async_context(server)
        gateway = {"listeners": [{"name": "http", "port": LISTENER_PORT, "protocol": "HTTP"}]}
        create(custom, namespace, "gwproxies", "GWProxy", "edge", {"service-group": "web", "gateway": gateway})
        for name, server in backends.items():
            create(
                custom,
                namespace,
                "gwendpointslices",
                "GWEndpointSlice",
                f"{name}-1",
                {
                    "parentRef": {"uid": name},
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [server.host], "conditions": {"ready": True}}],
                    "ports": [{"name": "http", "port": BACKEND_PORT, "protocol": "TCP"}],
                },
            )
        api = {"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}], "backendRefs": [backend("gamma")]}
        routes = {
            "alpha": http_route("alpha.example.com", api, {"backendRefs": [backend("alpha")]}),
            "beta": http_route("beta.example.com", {"backendRefs": [backend("beta")]}),
            "split": http_route("split.example.com", {"backendRefs": [backend("alpha", 3), backend("beta", 1)]}),
        }
        for name, spec in routes.items():
            create(custom, namespace, "gwroutes", "GWRoute", name, spec)
        # A LoadBalancer of the same name in the same namespace: its Envoy and the GWProxy's must not mix.
        lb = {"service-group": "web", "public-ports": [{"port": 9090, "protocol": "TCP"}]}
        create(custom, namespace, "loadbalancers", "LoadBalancer", "edge", lb)
        envoy_pod(core, namespace, "edge-gw", xds, {GWPROXY_LABEL: "edge", ACCOUNT_LABEL: "root"}, delta=True)
        envoy_pod(core, namespace, "edge-lb", xds, {LOAD_BALANCER_LABEL: "edge", ACCOUNT_LABEL: "root"}, delta=True)
        gw_ip, _ = await running_envoy(core, namespace, "edge-gw")
        lb_ip, _ = await running_envoy(core, namespace, "edge-lb")

        async with aiohttp.ClientSession(base_url=f"http://{gw_ip}:{LISTENER_PORT}") as session:

            async def get(host: str, path: str = "/") -> str:
                async with session.get(path, headers={"Host": host}) as response:
                    return await response.text() if response.status == 200 else f"HTTP {response.status}"

            # The xds service meets the routes one watch event at a time: wait until the Envoy has every one.
            async def every_route() -> bool:
                answers = [await get(f"{host}.example.com") for host in ("alpha", "beta", "split")]
                return answers[:2] == ["alpha:/", "beta:/"] and not answers[2].startswith("HTTP ")

            await eventually(
                every_route, "the GWProxy's Envoy to route every host", timeout=30, ignore=(aiohttp.ClientError,)
            )
            assert await get("alpha.example.com", "/shop") == "alpha:/shop"
            assert await get("beta.example.com", "/shop") == "beta:/shop", "by hostname"
            assert await get("alpha.example.com", "/api/users") == "gamma:/api/users", "by path"
            assert await get("alpha.example.com", "/apis") == "alpha:/apis", "a prefix matches whole segments"
            assert await get("unknown.example.com") == "HTTP 404", "no route for the host"

            counts = Counter([(await get("split.example.com")).split(":")[0] for _ in range(SPLIT_REQUESTS)])
        # 3:1 over 200 requests: alpha expects 150 (standard deviation 6.1). An even split (100, sd 7.1) or no
        # split (200) lands outside 150 +- 25.
        assert set(counts) == {"alpha", "beta"}, counts
        assert abs(counts["alpha"] - SPLIT_REQUESTS * 3 / 4) <= 25, counts

        assert await listener_names(gw_ip) == [f"{namespace}/edge/http"], "no LoadBalancer config on the GWProxy"
        lost = {"parentRefs": [{"name": "edge", "sectionName": "https"}], "rules": [{"backendRefs": [backend("beta")]}]}
        create(custom, namespace, "gwroutes", "GWRoute", "lost", {"http": lost})
        (message,) = await eventually(
            lambda: invalid_events(core, namespace, "edge"), "an Invalid Event on the GWProxy", timeout=30
        )
        assert message.startswith("GWRoute lost names this GWProxy but attaches to none of its listeners")
        await eventually(
            lambda: listener_names(lb_ip), "the LoadBalancer's Envoy to get its listener", ignore=(OSError,)
        )
        assert await listener_names(lb_ip) == [f"{namespace}/edge/tcp-9090"], "no GWProxy config on the LB"
