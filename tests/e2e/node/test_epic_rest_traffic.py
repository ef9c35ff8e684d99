"""An agent that speaks EPIC's REST API gets traffic: it announces a gateway, an HTTP route and an endpoint slice
(as pure-gateway does, with tollgate.testing.epicrest), and an HTTP request to the gateway's public address with the
route's hostname reaches the slice's endpoint through the Envoy container the allocator deployed for the GWProxy.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tollgate.models.epic import GROUP, SYSTEM_NAMESPACE, VERSION
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import HTTPEcho
from tollgate.testing.epicrest import EpicREST, base_path, basic
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.tls import HOST, allocator_env, tls_endpoint
from tollgate.testing.wait import eventually
from tollgate.testing.xds import start_xds, xds_settings

pytestmark = pytest.mark.e2e

PASSWORD = "agent-password"
LISTENER_PORT = 8080
BACKEND_PORT = 8080


@pytest.fixture
def account(cluster: EmbeddedCluster) -> Iterator[str]:
    """An account with a group `gw` (one Envoy, addresses from a ServicePrefix beside the real node) and an API user
    `agent` made by `epicctl create user`."""
    name = f"rest-{uuid.uuid4().hex[:6]}"
    namespace, prefix = f"epic-{name}", f"pool-{name}"
    [address] = cluster.public_addresses(1)
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    cluster.kubectl("create", "namespace", namespace)
    objects = [
        {"kind": "Account", "metadata": {"name": name, "namespace": namespace}, "spec": {}},
        {"kind": "ServicePrefix", "metadata": {"name": prefix, "namespace": SYSTEM_NAMESPACE},
         "spec": {"public-pool": {"pool": f"{address}-{address}"}}},
        {"kind": "LBServiceGroup", "metadata": {"name": "gw", "namespace": namespace},
         "spec": {"envoy-replica-count": 1, "service-prefix": prefix}},
    ]  # fmt: skip
    for obj in objects:
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": f"{GROUP}/{VERSION}", **obj}))
    command = [sys.executable, "-m", "tollgate.cli.epicctl", "create", "user", "agent", name, "--password-file", "-",
               "--kubeconfig", str(cluster.kubeconfig)]  # fmt: skip
    subprocess.run(command, input=f"{PASSWORD}\n", capture_output=True, text=True, timeout=60, check=True)
    yield name
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "serviceprefix", prefix, "-n", SYSTEM_NAMESPACE, check=False)


def announced(uid: str, kind: str, **spec: Any) -> dict[str, Any]:
    client_ref = {"clusterID": "puregw", "namespace": "default", "name": "shop", "uid": uid}
    return {kind: {"spec": {"clientRef": client_ref, **spec}}}


async def test_an_agent_announces_a_gateway_route_and_slice_and_gets_traffic(
    cluster: EmbeddedCluster, run_service: ServiceFactory, account: str, tmp_path: Any
) -> None:
    xds_env = xds_settings(cluster.host_address)
    start_xds(run_service, xds_env)
    served = tls_endpoint(tmp_path / "allocator-tls")
    rest_address = f"{HOST}:{free_port(HOST)}"
    xds_address = f"{cluster.host_address}:{xds_env['TOLLGATE_XDS_GRPC_PORT']}"
    run_service(
        "allocator",
        rbac=True,
        env=allocator_env(
            served, TOLLGATE_ALLOCATOR_XDS_ADDRESS=xds_address, TOLLGATE_ALLOCATOR_REST_ADDRESS=rest_address
        ),
    )
    api = EpicREST(rest_address, served.ca_file, basic("agent", PASSWORD))
    base = base_path(account)
    gateway_uid, service_uid, slice_uid, route_uid = (str(uuid.uuid4()) for _ in range(4))
    backend, node = cluster.remote_address(), cluster.remote_address()

    async with HTTPEcho(backend, BACKEND_PORT, name="shop-backend"):
        listener = {"name": "web", "port": LISTENER_PORT, "protocol": "HTTP",
                    "allowedRoutes": {"namespaces": {"from": "Same"}}}  # fmt: skip
        gateway = announced(
            gateway_uid,
            "proxy",
            **{"display-name": "shop", "gateway": {"gatewayClassName": "epic", "listeners": [listener]}},
        )
        posted, fetched = api.post_and_follow(f"{base}/groups/gw/proxies", gateway)
        assert posted.status == 302, posted.body
        assert "public-address" in fetched.body["proxy"]["spec"], fetched.body
        address = fetched.body["proxy"]["spec"]["public-address"]
        assert fetched.body["proxy"]["spec"]["endpoints"][0]["dnsName"]

        endpoint_slice = announced(
            slice_uid,
            "slice",
            parentRef={"uid": service_uid, "name": "shop", "namespace": "default"},
            addressType="IPv4",
            endpoints=[{"addresses": [backend], "conditions": {"ready": True}, "nodeName": "client-node"}],
            ports=[{"name": "http", "port": BACKEND_PORT, "protocol": "TCP"}],
            nodeAddresses={"client-node": node},
        )
        assert api.post_and_follow(f"{base}/slices", endpoint_slice)[0].status == 302
        backend_ref = {"kind": "Service", "name": service_uid, "port": BACKEND_PORT, "weight": 1}
        rule = {"matches": [{"path": {"type": "PathPrefix", "value": "/"}}], "backendRefs": [backend_ref]}
        http = {
            "parentRefs": [{"kind": "Gateway", "name": gateway_uid}],
            "hostnames": ["shop.example.com"],
            "rules": [rule],
        }
        assert api.post_and_follow(f"{base}/routes", announced(route_uid, "route", http=http))[0].status == 302

        async with aiohttp.ClientSession(base_url=f"http://{address}:{LISTENER_PORT}") as session:

            async def shop() -> str | None:
                async with session.get("/cart", headers={"Host": "shop.example.com"}) as response:
                    return await response.text() if response.status == 200 else None

            reply = await eventually(
                shop,
                f"a request to {address}:{LISTENER_PORT} for shop.example.com through the GWProxy's Envoy",
                timeout=90,
                ignore=(aiohttp.ClientError, OSError),
            )
            assert reply == "shop-backend:/cart"
            async with session.get("/", headers={"Host": "other.example.com"}) as response:
                assert response.status == 404, "no route for another hostname"

    proxy = api.get(f"{base}/proxies/{gateway_uid}").body["proxy"]
    assert node in proxy["status"]["gue-tunnel-endpoints"], "the agent's node has its tunnel"
