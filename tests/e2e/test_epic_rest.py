"""EPIC's REST API as EPIC's agents call it, against the allocator (under its chart's ServiceAccount, serving TLS)
and the webhook (registered for this module's accounts), with a client written from the notes
(tollgate.testing.epicrest): the order an agent calls in, 302 and 409 followed to their Location, the links, the
auth table, and hostile bodies that must leave nothing behind.

The data path through a real Envoy is tests/e2e/node/test_epic_rest_traffic.py.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.models.epic import GROUP, VERSION
from tollgate.testing import agents
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.epicrest import EpicREST, Reply, base_path, basic, bearer
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.tls import HOST, allocator_env, tls_endpoint, webhook_env
from tollgate.testing.wait import wait_for
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

pytestmark = pytest.mark.e2e

TENANT_LABEL = "tollgate.io/test-tenant"
PASSWORD = "s3cret-enough"
NODE_ADDRESS = "192.0.2.71"
OTHER_NODE = "192.0.2.72"
SLOW_BODY_SECONDS = 2


@dataclass
class System:
    cluster: EmbeddedCluster
    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    rest_address: str
    grpc_address: str
    ca_file: Path
    accounts: dict[str, str]  # account -> its agent's bearer token
    prefix: str  # the ServicePrefix of the accounts' group gw

    def rest(self, authorization: str | None) -> EpicREST:
        return EpicREST(self.rest_address, self.ca_file, authorization)

    def as_user(self, account: str) -> EpicREST:
        return self.rest(basic(f"agent-{account}", PASSWORD))

    def objects(self, account: str) -> set[tuple[str, str]]:
        """(kind, name) of every EPIC object an agent can make in the account."""
        return {
            (plural, obj["metadata"]["name"])
            for plural in ("gwproxies", "gwroutes", "gwendpointslices", "loadbalancers", "remoteendpoints")
            for obj in self.custom.list_namespaced_custom_object(GROUP, VERSION, f"epic-{account}", plural)["items"]
        }


def epicctl(cluster: EmbeddedCluster, *args: str, stdin: str | None = None) -> None:
    command = [sys.executable, "-m", "tollgate.cli.epicctl", *args, "--kubeconfig", str(cluster.kubeconfig)]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"epicctl {' '.join(args)}: {done.stderr}"


def apply(cluster: EmbeddedCluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))


def make_account(cluster: EmbeddedCluster, label: str, prefix: str) -> str:
    """An account made with epicctl, with an API user made with `epicctl create user`, and two service groups:
    `gw` (addresses from the module's ServicePrefix) and `shared` (can-be-shared)."""
    account = f"rest-{uuid.uuid4().hex[:6]}"
    epicctl(cluster, "create", "user-namespace", account)
    namespace = f"epic-{account}"
    cluster.kubectl("label", "namespace", namespace, f"{TENANT_LABEL}={label}")
    for name, spec in (("gw", {}), ("shared", {"can-be-shared": True})):
        group = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LBServiceGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"service-prefix": prefix, "envoy-replica-count": 0, **spec},
        }
        apply(cluster, group)
    epicctl(cluster, "create", "user", f"agent-{account}", account, "--password-file", "-", stdin=f"{PASSWORD}\n")
    return account


@pytest.fixture(scope="module")
def system(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    run_module_service: ServiceFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[System]:
    label = uuid.uuid4().hex[:10]
    webhook_tls = tls_endpoint(tmp_path_factory.mktemp("webhook-tls"))
    allocator_tls = tls_endpoint(tmp_path_factory.mktemp("allocator-tls"))
    rest_address = f"{HOST}:{free_port(HOST)}"
    run_module_service("webhook", rbac=True, env=webhook_env(webhook_tls))
    run_module_service(
        "allocator",
        rbac=True,
        env=allocator_env(
            allocator_tls,
            TOLLGATE_ALLOCATOR_REST_ADDRESS=rest_address,
            TOLLGATE_ALLOCATOR_XDS_ADDRESS="127.0.0.1:18000",
            TOLLGATE_ALLOCATOR_GUE_ADDRESS="192.0.2.9",
            TOLLGATE_ALLOCATOR_REST_BODY_TIMEOUT_SECONDS=str(SLOW_BODY_SECONDS),
        ),
    )
    registration = Registration(
        ca_bundle=webhook_tls.ca,
        url=webhook_tls.url,
        name=f"tollgate-webhook-rest-{label}",
        namespace_selector={"matchLabels": {TENANT_LABEL: label}},
    )
    register(kube, registration)
    prefix = f"rest-{label}"
    cluster.kubectl("create", "namespace", "epic", check=False)
    apply(
        cluster,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ServicePrefix",
            "metadata": {"name": prefix, "namespace": "epic"},
            "spec": {"public-pool": {"pool": "192.0.2.232-192.0.2.239", "subnet": "192.0.2.0/24"}},
        },
    )
    accounts = [make_account(cluster, label, prefix) for _ in range(2)]
    try:
        yield System(
            cluster,
            core,
            custom,
            rest_address,
            f"{HOST}:{allocator_tls.port}",
            allocator_tls.ca_file,
            {account: agents.mint(core, account) for account in accounts},
            prefix,
        )
    finally:
        unregister(kube, registration.name)
        for account in accounts:
            cluster.kubectl("delete", "account", account, "-n", f"epic-{account}", "--wait=false", check=False)
        cluster.kubectl("delete", "serviceprefix", prefix, "-n", "epic", "--wait=false", check=False)


def accounts(system: System) -> tuple[str, str]:
    mine, other = system.accounts
    return mine, other


def proxy(uid: str, port: int = 8080, public_address: str = "") -> dict[str, Any]:
    """A GWProxy as pure-gateway sends it: Gateway API v1 fields included (allowedRoutes, an empty address)."""
    return {
        "proxy": {
            "metadata": {"name": "edge"},
            "spec": {
                "clientRef": {"clusterID": "puregw-1", "namespace": "default", "name": "edge", "uid": uid},
                "display-name": "edge",
                "public-address": public_address,
                "public-ports": [{"port": port, "protocol": "TCP"}],
                "gateway": {
                    "gatewayClassName": "epic",
                    "listeners": [
                        {
                            "name": "web",
                            "port": port,
                            "protocol": "HTTP",
                            "allowedRoutes": {"namespaces": {"from": "Same"}},
                        }
                    ],
                },
            },
        }
    }


def route(uid: str, proxy_uid: str, backend: str, hostname: str) -> dict[str, Any]:
    return {
        "route": {
            "spec": {
                "clientRef": {"clusterID": "puregw-1", "namespace": "default", "name": "web", "uid": uid},
                "http": {
                    "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": proxy_uid}],
                    "hostnames": [hostname],
                    "rules": [
                        {
                            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                            "backendRefs": [{"group": "", "kind": "Service", "name": backend, "port": 80, "weight": 1}],
                        }
                    ],
                },
            }
        }
    }


def endpoint_slice(uid: str, backend: str, address: str, nodes: dict[str, str]) -> dict[str, Any]:
    return {
        "slice": {
            "spec": {
                "clientRef": {"clusterID": "puregw-1", "namespace": "default", "name": "web-abc12", "uid": uid},
                "parentRef": {"clusterID": "puregw-1", "namespace": "default", "name": "web", "uid": backend},
                "addressType": "IPv4",
                "endpoints": [
                    {
                        "addresses": [address],
                        "conditions": {"ready": True},
                        "nodeName": next(iter(nodes)),
                        "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "default"},
                    }
                ],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "nodeAddresses": nodes,
            }
        }
    }


def expect(reply: Reply, status: int) -> Reply:
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers.get("content-type") == "application/json", reply.headers
    return reply


def test_an_agent_announces_a_gateway_a_route_and_a_slice_in_epics_order(system: System) -> None:
    account, _ = accounts(system)
    api = system.as_user(account)
    base = base_path(account)

    group = expect(api.get(f"{base}/groups/gw"), 200).body
    assert group["link"] == {
        "self": f"{base}/groups/gw",
        "account": base,
        "create-service": f"{base}/groups/gw/services",
        "create-proxy": f"{base}/groups/gw/proxies",
    }
    assert group["group"]["metadata"]["name"] == "gw"
    account_body = expect(api.get(group["link"]["account"]), 200).body
    assert account_body["link"] == {"self": base, "create-route": f"{base}/routes", "create-slice": f"{base}/slices"}

    gateway_uid, service_uid = str(uuid.uuid4()), str(uuid.uuid4())
    posted, fetched = api.post_and_follow(group["link"]["create-proxy"], proxy(gateway_uid))
    expect(posted, 302)
    assert posted.location == f"{base}/proxies/{gateway_uid}"
    body = expect(fetched, 200).body
    assert body["link"] == {"self": posted.location, "group": f"{base}/groups/gw"}
    spec = body["proxy"]["spec"]
    assert spec["public-address"].startswith("192.0.2.23"), spec
    assert spec["endpoints"][0]["dnsName"] == f"{gateway_uid}.gw.{account}.epic.internal"
    assert spec["endpoints"][0]["targets"] == [spec["public-address"]]
    assert "allowedRoutes" not in spec["gateway"]["listeners"][0], "a Gateway API field tollgate has no use for"

    again, same = api.post_and_follow(group["link"]["create-proxy"], proxy(gateway_uid))
    expect(again, 409)
    assert again.location == posted.location and again.body["link"] == {"self": posted.location}
    assert expect(same, 200).body["proxy"]["metadata"]["uid"] == body["proxy"]["metadata"]["uid"]

    slice_uid = str(uuid.uuid4())
    nodes = {"node-a": NODE_ADDRESS, "node-b": OTHER_NODE}
    posted, fetched = api.post_and_follow(
        account_body["link"]["create-slice"], endpoint_slice(slice_uid, service_uid, "192.0.2.81", nodes)
    )
    expect(posted, 302)
    assert expect(fetched, 200).body["slice"]["spec"]["nodeAddresses"] == nodes
    assert fetched.body["link"] == {"self": f"{base}/slices/{slice_uid}"}

    route_uid = str(uuid.uuid4())
    posted, fetched = api.post_and_follow(
        account_body["link"]["create-route"], route(route_uid, gateway_uid, service_uid, "shop.example.com")
    )
    expect(posted, 302)
    assert expect(fetched, 200).body["route"]["spec"]["http"]["hostnames"] == ["shop.example.com"]

    # The agent polls its proxy until its node's tunnel appears (from the slice's nodeAddresses).
    def tunnels() -> dict[str, Any] | None:
        status = api.get(f"{base}/proxies/{gateway_uid}").body["proxy"]
        found = (status.get("status") or {}).get("gue-tunnel-endpoints") or {}
        return found if {NODE_ADDRESS, OTHER_NODE} <= set(found) else None

    tunnel_entries = wait_for(tunnels, "the proxy's tunnels for the slice's nodes", timeout=30)
    assert tunnel_entries[NODE_ADDRESS]["tunnel-id"] != tunnel_entries[OTHER_NODE]["tunnel-id"]

    put, fetched = api.put_and_follow(
        f"{base}/routes/{route_uid}", route(route_uid, gateway_uid, service_uid, "store.example.com")
    )
    expect(put, 302)
    assert expect(fetched, 200).body["route"]["spec"]["http"]["hostnames"] == ["store.example.com"]
    put, fetched = api.put_and_follow(
        f"{base}/slices/{slice_uid}", endpoint_slice(slice_uid, service_uid, "192.0.2.81", {"node-a": NODE_ADDRESS})
    )
    expect(put, 302)
    assert expect(fetched, 200).body["slice"]["spec"]["nodeAddresses"] == {"node-a": NODE_ADDRESS}

    for path in (f"{base}/routes/{route_uid}", f"{base}/slices/{slice_uid}", f"{base}/proxies/{gateway_uid}"):
        assert "deleted" in expect(api.delete(path), 200).body["message"]
        assert expect(api.delete(path), 200).body["message"], "a DELETE of what is gone succeeds too"
        expect(api.get(path), 404)


def test_a_service_beyond_the_limit_that_got_past_the_webhook_is_refused_and_not_kept(system: System) -> None:
    """The webhook refuses a service beyond its account's loadBalancerLimit from its cache, which services created at
    the same instant all get past (here the account's namespace is not one the webhook is registered for). The
    allocator's verdict is the answer then: 422 naming the limit, and nothing of the refused service stays."""
    account = make_account(system.cluster, "not-for-the-webhook", system.prefix)
    namespace = f"epic-{account}"
    try:
        limit = {"spec": {"loadBalancerLimit": 1}}
        system.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "accounts", account, limit)
        api = system.as_user(account)
        service = {"service": {"metadata": {"name": "web"}, "spec": {"public-ports": [{"port": 80}]}}}
        posted, fetched = api.post_and_follow(f"{base_path(account)}/groups/gw/services", service)
        expect(posted, 302)
        served = expect(fetched, 200).body["service"]["metadata"]["name"]

        refused, _ = api.post_and_follow(f"{base_path(account)}/groups/gw/services", service)
        expect(refused, 422)
        assert refused.error.endswith(
            f"is beyond its Account's limit and was not kept: Account {account}'s spec.loadBalancerLimit is 1, and "
            f"namespace {namespace} holds 2 LoadBalancers, 1 of them served"
        ), refused.error
        assert refused.headers["x-epic-error-message"] == refused.error
        wait_for(lambda: system.objects(account) == {("loadbalancers", served)}, "the refused service to be gone")
    finally:
        system.cluster.kubectl("delete", "account", account, "-n", namespace, "--wait=false", check=False)


def test_a_load_balancer_with_a_cluster_and_endpoints(system: System) -> None:
    account, _ = accounts(system)
    api = system.as_user(account)
    base = base_path(account)
    service = {"service": {"metadata": {"name": "web"}, "spec": {"display-name": "web", "public-ports": [
        {"port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 31080}]}}}  # fmt: skip

    posted, fetched = api.post_and_follow(f"{base}/groups/gw/services", service)
    expect(posted, 302)
    name = expect(fetched, 200).body["service"]["metadata"]["name"]
    assert name.startswith("gw-web-") and len(name) == len("gw-web-") + 16, "not shareable: a random suffix"
    assert fetched.body["service"]["spec"]["public-address"].startswith("192.0.2.23")
    assert fetched.body["link"]["create-cluster"] == f"{base}/services/{name}/clusters"
    second, _ = api.post_and_follow(f"{base}/groups/gw/services", service)
    assert expect(second, 302).location != posted.location, "another cluster's service of the same name"
    api.delete(second.location)

    shared, fetched = api.post_and_follow(f"{base}/groups/shared/services", service)
    expect(shared, 302)
    assert shared.location == f"{base}/services/shared-web"
    again, _ = api.post_and_follow(f"{base}/groups/shared/services", service)
    assert (expect(again, 409).location, again.body["link"]) == (shared.location, {"self": shared.location})

    links = fetched.body["link"]
    posted, fetched = api.post_and_follow(links["create-cluster"], {"cluster-id": "purelb-1"})
    expect(posted, 302)
    assert expect(fetched, 200).body["cluster"] == {"cluster-id": "purelb-1"}
    expect(api.post_and_follow(links["create-cluster"], {"cluster-id": "purelb-1"})[0], 409)

    endpoint = {"endpoint": {"spec": {"cluster": "purelb-1", "address": "192.0.2.91", "node-address": NODE_ADDRESS,
                                      "port": {"port": 8080, "protocol": "TCP"}}}}  # fmt: skip
    posted, fetched = api.post_and_follow(links["create-endpoint"], endpoint)
    expect(posted, 302)
    rep = expect(fetched, 200).body
    assert rep["link"] == {"self": posted.location, "service": shared.location}
    tunnel_id = rep["endpoint"]["status"]["tunnel-id"]
    lb = expect(api.get(shared.location), 200).body["service"]
    assert lb["status"]["gue-tunnel-endpoints"][NODE_ADDRESS]["tunnel-id"] == tunnel_id
    duplicate, _ = api.post_and_follow(links["create-endpoint"], endpoint)
    assert expect(duplicate, 409).body["message"] == "duplicate endpoint"
    assert duplicate.body["endpoint"]["metadata"]["name"] == rep["endpoint"]["metadata"]["name"]

    assert "deleted" in expect(api.delete(posted.location), 200).body["message"]
    expect(api.delete(posted.location), 200)

    def node_tunnel_gone() -> bool:
        status = api.get(shared.location).body["service"].get("status") or {}
        return NODE_ADDRESS not in (status.get("gue-tunnel-endpoints") or {})

    eventually_sync(node_tunnel_gone, "the node's tunnel to go with its last endpoint")
    expect(api.delete(f"{links['create-cluster']}/purelb-1"), 200)
    for path in (shared.location, posted.location.split("/endpoints/")[0]):
        expect(api.delete(path), 200)
    expect(api.get(shared.location), 404)


async def test_the_rest_and_grpc_doors_register_one_endpoint_with_one_tunnel(system: System) -> None:
    account, _ = accounts(system)
    api = system.as_user(account)
    base = base_path(account)
    posted, _ = api.post_and_follow(f"{base}/groups/shared/services", {"service": {"metadata": {"name": "both"},
                                    "spec": {"public-ports": [{"port": 81, "protocol": "TCP"}]}}})  # fmt: skip
    expect(posted, 302)
    name = posted.location.rsplit("/", 1)[1]
    token = system.accounts[account]
    grpc_api = AllocatorClient(system.grpc_address, token, agents.channel_credentials(system.ca_file))
    try:
        registered = await grpc_api.register(account, name, "192.0.2.92", 8080, node_address=NODE_ADDRESS)
    finally:
        await grpc_api.close()
    endpoint = {"endpoint": {"spec": {"address": "192.0.2.92", "node-address": NODE_ADDRESS,
                                      "port": {"port": 8080, "protocol": "TCP"}}}}  # fmt: skip
    duplicate, fetched = api.post_and_follow(f"{posted.location}/endpoints", endpoint)
    assert expect(duplicate, 409).body["message"] == "duplicate endpoint"
    rep = expect(fetched, 200).body["endpoint"]
    assert rep["metadata"]["name"] == registered.tunnel.remote_endpoint
    assert rep["status"]["tunnel-id"] == registered.tunnel.tunnel_id
    assert [n for kind, n in system.objects(account) if kind == "remoteendpoints" and n.startswith(name)] == [
        rep["metadata"]["name"]
    ]
    api.delete(posted.location)


def eventually_sync(condition: Callable[[], bool], what: str) -> None:
    wait_for(lambda: condition() or None, what, timeout=30)


def rotated(system: System, account: str) -> tuple[str, str]:
    old = system.accounts[account]
    new = agents.mint(system.core, account)
    system.accounts[account] = new
    return old, new


AUTH_CASES = {
    "basic, the account's user": (lambda s, a, o: basic(f"agent-{a}", PASSWORD), 200),
    "basic, a wrong password": (lambda s, a, o: basic(f"agent-{a}", "wrong-password"), 401),
    "basic, the other account's user": (lambda s, a, o: basic(f"agent-{o}", PASSWORD), 401),
    "basic, no such user": (lambda s, a, o: basic("nobody", PASSWORD), 401),
    "bearer, the account's token": (lambda s, a, o: bearer(s.accounts[a]), 200),
    "bearer, a made-up token": (lambda s, a, o: bearer("not-a-token"), 401),
    "bearer, the other account's token": (lambda s, a, o: bearer(s.accounts[o]), 403),
    "none": (lambda s, a, o: None, 401),
    "basic, not base64": (lambda s, a, o: "Basic %%%", 401),
}


@pytest.mark.parametrize("case", list(AUTH_CASES))
def test_auth(system: System, case: str) -> None:
    account, other = accounts(system)
    authorization, status = AUTH_CASES[case]
    reply = system.rest(authorization(system, account, other)).get(f"{base_path(account)}/groups/gw")
    expect(reply, status)
    if status == 401:
        assert reply.headers["www-authenticate"].startswith("Basic realm=")
    if status != 200:
        assert reply.error and reply.headers["x-epic-error-message"], reply
        assert "group" not in reply.body, "nothing of the account leaks"
        # An account that does not exist answers the same: nothing says which accounts there are.
        elsewhere = system.rest(authorization(system, account, other)).get(f"{base_path('no-such')}/groups/gw")
        assert elsewhere.status in (401, 403)


def test_a_rotated_token_stops_working_and_the_new_one_works(system: System) -> None:
    account, _ = accounts(system)
    old, new = rotated(system, account)
    path = f"{base_path(account)}/groups/gw"
    eventually_sync(lambda: system.rest(bearer(old)).get(path).status == 401, "the rotated token to be refused")
    expect(system.rest(bearer(new)).get(path), 200)


@dataclass(frozen=True)
class Hostile:
    path: str  # under the account's base path
    body: bytes | dict[str, Any]
    status: int
    names: str  # what the error must say


def _with_filter(body: dict[str, Any]) -> dict[str, Any]:
    body["route"]["spec"]["http"]["rules"][0]["filters"] = [{"type": "RequestHeaderModifier"}]
    return body


OTHER_PROXY = str(uuid.uuid4())  # the other account's
METADATA_ENDPOINT = {"endpoint": {"spec": {"address": "169.254.169.254", "port": {"port": 80, "protocol": "TCP"}}}}
HOSTILE = {
    "a body over 1 MiB": Hostile("/slices", b"{" + b" " * (1024 * 1024) + b"}", 413, "body: larger than"),
    "malformed JSON": Hostile("/groups/gw/proxies", b'{"proxy": ', 400, "body: not JSON"),
    "no proxy key": Hostile("/groups/gw/proxies", {"gwproxy": {}}, 422, "proxy: required"),
    "a uid that is no object name": Hostile(
        "/groups/gw/proxies", proxy("Not_A/Name"), 422, "proxy.spec.clientRef.uid: 'Not_A/Name' is not a valid"
    ),
    "a route filter tollgate does not implement": Hostile(
        "/routes",
        _with_filter(route("r-filter", OTHER_PROXY, "b", "x.example.com")),
        422,
        "route.spec.http.rules.0.filters: unknown field",
    ),
    "a route naming another account's proxy": Hostile(
        "/routes", route("r-other", OTHER_PROXY, "b", "x.example.com"), 422, "route.spec.http.parentRefs[0].name"
    ),
    "a slice node address the policy refuses": Hostile(
        "/slices", endpoint_slice("s-lo", "b", "192.0.2.81", {"n": "127.0.0.1"}), 422, "spec.nodeAddresses[n]"
    ),
    "an endpoint at the metadata address": Hostile(
        "/services/shared-probe/endpoints", METADATA_ENDPOINT, 422, "address: 169.254.169.254"
    ),
    "a public address outside the group's pool": Hostile(
        "/groups/gw/proxies",
        proxy(str(uuid.uuid4()), public_address="192.0.2.10"),
        422,
        "proxy.spec.public-address: 192.0.2.10 is not in the pool 192.0.2.232-192.0.2.239 of group 'gw'",
    ),
    "a service of an unknown group": Hostile(
        "/groups/nope/services", {"service": {"metadata": {"name": "x"}, "spec": {}}}, 404, "group: no LBServiceGroup"
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_input_gets_a_4xx_naming_the_field_and_leaves_nothing(system: System, case: str) -> None:
    account, other = accounts(system)
    api, other_api = system.as_user(account), system.as_user(other)
    probe = {"service": {"metadata": {"name": "probe"}, "spec": {"public-ports": [{"port": 82, "protocol": "TCP"}]}}}
    assert api.post_and_follow(f"{base_path(account)}/groups/shared/services", probe)[0].status in (302, 409)
    assert other_api.post_and_follow(f"{base_path(other)}/groups/gw/proxies", proxy(OTHER_PROXY))[0].status in (
        302,
        409,
    )
    before = system.objects(account)
    hostile = HOSTILE[case]
    raw = hostile.body if isinstance(hostile.body, bytes) else json.dumps(hostile.body).encode()
    reply = api.call("POST", base_path(account) + hostile.path, raw=raw)
    expect(reply, hostile.status)
    assert hostile.names in reply.error, reply.error
    assert reply.headers["x-epic-error-message"]
    assert system.objects(account) == before, "nothing half-created"


def test_health_and_unknown_routes(system: System) -> None:
    api = system.rest(None)
    assert expect(api.get("/api/epic/healthz"), 200).body == {"message": "ok"}
    reply = expect(api.get("/api/epic/nothing-here"), 404)
    assert reply.error == "no route GET /api/epic/nothing-here"


def test_a_body_dripped_slower_than_the_limit_gets_408_and_the_connection_is_closed(system: System) -> None:
    account, _ = accounts(system)
    host, _, port = system.rest_address.rpartition(":")
    context = ssl.create_default_context(cafile=str(system.ca_file))
    context.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=30) as raw, context.wrap_socket(raw) as tls:
        head = (
            f"POST {base_path(account)}/slices HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: {basic(f'agent-{account}', PASSWORD)}\r\nContent-Length: 100\r\n\r\n{{"
        )
        tls.sendall(head.encode())
        answer = tls.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 408 "), answer
    assert f"body: not all of it arrived within {SLOW_BODY_SECONDS} s" in answer


def test_an_agent_may_ask_for_an_address_of_its_groups_pool(system: System) -> None:
    account, _ = accounts(system)
    api = system.as_user(account)
    uid = str(uuid.uuid4())
    posted, fetched = api.post_and_follow(
        f"{base_path(account)}/groups/gw/proxies", proxy(uid, public_address="192.0.2.239")
    )
    expect(posted, 302)
    assert expect(fetched, 200).body["proxy"]["spec"]["public-address"] == "192.0.2.239"
    expect(api.delete(posted.location), 200)
