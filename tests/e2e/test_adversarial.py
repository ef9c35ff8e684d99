"""Issue #15's adversarial table: what a tenant, an agent or an Envoy may try through each door, and what stops it.

One set of real services for the whole module, each under its chart's ServiceAccount: the webhook (registered for
the module's tenant namespaces, and for cluster-scoped objects), the allocator (its registration API over TLS, a
token per account), xds and the RoutedIP controller. Two accounts are made with epicctl, each with its agent's
token minted as `epicctl credentials create` mints it: the attacker's and the victim's.

Each object case is played twice. Through the API server with the webhook in force it must be refused with a
message naming the field and the rule, and nothing of it stored. Then the same object is created as if the webhook
had been down (it carries a label the webhook's objectSelector skips): the service that owns it must park it with a
condition and a reason, and do nothing half-way (no Deployment, no finalizer, no Job, no firewall port). No case may
get a 5xx from the webhook (the API server then says "failed calling webhook"), and no service may crash.

The registration API cases are calls an agent could make with the attacker's token (or none), through the real
gRPC port: each gets its status code and a message naming the field, and writes nothing. The xDS cases are ADS
streams that claim to be an Envoy pod they are not, and a real Envoy of the attacker's that must never be served a
VirtualService aimed at its own admin API.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import ssl
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.client import HTTPSConnection
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from kubernetes import client

from tollgate.allocator.grpc.client import AllocatorClient
from tollgate.cli.epicctl import main as epicctl_main
from tollgate.models.envoy import ADMIN_PORT, ENVOY_PROXY_LABEL, XDS_CLUSTER
from tollgate.models.epic import GROUP as EPIC_GROUP
from tollgate.models.epic import SINGLETON_NAME
from tollgate.models.epic import SYSTEM_NAMESPACE as EPIC_NAMESPACE
from tollgate.models.epic import VERSION as EPIC_VERSION
from tollgate.models.routedip import GROUP as ROUTEDIP_GROUP
from tollgate.models.routedip import VERSION as ROUTEDIP_VERSION
from tollgate.routedip.providers.job import CLASS_LABEL
from tollgate.testing import agents, objects
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.envoy import EnvoyProcess
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.objects import (
    Obj,
    gwproxy,
    listener,
    load_balancer,
    remote_endpoint,
    routed_ip,
    routed_ip_class,
    virtual_service,
    with_value,
)
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint, webhook_env
from tollgate.testing.wait import eventually, wait_for
from tollgate.testing.xds import Xds, kwok_pod, pod_bootstrap, start_xds, xds_settings
from tollgate.testing.xds import condition as vs_condition
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration
from tollgate.xds.resources import LISTENER

TENANT_LABEL = "adversarial.tollgate.io/tenant"
ADMITTED_WHILE_DOWN = "adversarial.tollgate.io/admitted-while-webhook-down"
SYSTEM_NAMESPACE = "tollgate-system"
TOKEN_SECRET = "digitalocean-token"
# An Envoy pod of the victim's (KWOK runs nothing for it: it only needs to exist, labelled, with an IP).
VICTIM_ENVOY: Obj = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "victim-envoy", "labels": {ENVOY_PROXY_LABEL: "true", "app": "edge"}},
    "spec": {"containers": [{"name": "envoy", "image": "envoyproxy/envoy:v1.36.0"}]},
}


@dataclass
class System:
    """The running services, the accounts' namespaces and an API client."""

    cluster: EmbeddedCluster
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    attacker: str
    victim: str
    webhook_port: int
    webhook_certs: Path
    grpc_address: str
    allocator_ca: Path
    xds: Xds
    tokens: dict[str, str] = field(default_factory=dict)  # account -> its agent's token
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    tenant_label: str = ""

    def agent(self, namespace: str, token: str | None = None, tls: bool = True) -> AllocatorClient:
        """A registration API client with the token of `namespace`'s account (or `token`), over TLS."""
        credentials = agents.channel_credentials(self.allocator_ca) if tls else None
        token = self.tokens[account_of(namespace)] if token is None else token
        return AllocatorClient(self.grpc_address, token, credentials, timeout=15)

    def remote_endpoints(self) -> set[tuple[str, str]]:
        """(namespace, address) of every RemoteEndpoint in both accounts."""
        found = set()
        for namespace in (self.attacker, self.victim):
            listing = self.custom.list_namespaced_custom_object(EPIC_GROUP, EPIC_VERSION, namespace, "remoteendpoints")
            found |= {(namespace, str(item["spec"]["address"])) for item in listing["items"]}
        return found

    def create(self, obj: Obj, bypass_webhook: bool = False) -> Obj:
        obj = json.loads(json.dumps(obj))
        if bypass_webhook:
            obj["metadata"].setdefault("labels", {})[ADMITTED_WHILE_DOWN] = "true"
        return objects.create(self.custom, obj)

    def get(self, obj: Obj) -> Obj | None:
        return objects.read(self.custom, obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))

    def refusal(self, obj: Obj) -> str:
        try:
            self.create(obj)
        except client.ApiException as error:
            return str(json.loads(error.body or "{}").get("message", error.body))
        raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} was accepted")

    def webhook_post(self, path: str, body: bytes) -> int:
        context = ssl.create_default_context(cafile=str(self.webhook_certs / "ca.crt"))
        connection = HTTPSConnection("127.0.0.1", self.webhook_port, context=context, timeout=30)
        try:
            connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            return connection.getresponse().status
        except (ConnectionError, OSError):
            return 0  # the server closed the connection before answering: fine for an oversized body
        finally:
            connection.close()


def account_of(namespace: str) -> str:
    return namespace.removeprefix("epic-")


def epicctl(kubeconfig: Path, *args: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = epicctl_main([*args, "--kubeconfig", str(kubeconfig)])
    assert code == 0, f"epicctl {' '.join(args)}: {err.getvalue()}"


def make_account(cluster: EmbeddedCluster, core: client.CoreV1Api, label: str) -> str:
    """An account made with epicctl, a service group `web`, and a NodePort Service `web`; its user namespace."""
    name = f"adv-{uuid.uuid4().hex[:6]}"
    epicctl(cluster.kubeconfig, "create", "user-namespace", name)
    namespace = f"epic-{name}"
    cluster.kubectl("label", "namespace", namespace, f"{TENANT_LABEL}={label}")
    group = {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LBServiceGroup",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"envoy-replica-count": 1},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(group))
    spec = {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}
    core.create_namespaced_service(namespace, {"metadata": {"name": "web"}, "spec": spec})  # type: ignore[arg-type]
    return namespace


@pytest.fixture(scope="module")
def system(
    cluster: EmbeddedCluster,
    kube: client.ApiClient,
    core: client.CoreV1Api,
    run_module_service: ServiceFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[System]:
    label = uuid.uuid4().hex[:10]
    webhook_tls = tls_endpoint(tmp_path_factory.mktemp("webhook-tls"))
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    token = {"metadata": {"name": TOKEN_SECRET}, "stringData": {"token": "adversarial"}}
    core.create_namespaced_secret(SYSTEM_NAMESPACE, token)  # type: ignore[arg-type]
    registration = Registration(
        ca_bundle=webhook_tls.ca,
        url=webhook_tls.url,
        name=f"tollgate-webhook-adversarial-{label}",
        namespace_selector={"matchLabels": {TENANT_LABEL: label}},
        object_selector={"matchExpressions": [{"key": ADMITTED_WHILE_DOWN, "operator": "DoesNotExist"}]},
    )
    allocator_tls = tls_endpoint(tmp_path_factory.mktemp("allocator-tls"))
    xds = start_xds(run_module_service, xds_settings())
    services = {
        "webhook": run_module_service(
            "webhook",
            rbac=True,
            env=webhook_env(webhook_tls, TOLLGATE_WEBHOOK_MAX_REQUEST_BYTES=str(64 * 1024)),
        ),
        "allocator": run_module_service(
            "allocator",
            rbac=True,
            env=allocator_env(
                allocator_tls,
                TOLLGATE_ALLOCATOR_XDS_ADDRESS="127.0.0.1:18000",
                TOLLGATE_ALLOCATOR_GUE_ADDRESS="192.168.1.40",
            ),
        ),
        "xds": xds.process,
        "routedip": run_module_service(
            "routedip", rbac=True, env={"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE}
        ),
    }
    attacker = make_account(cluster, core, label)
    victim = make_account(cluster, core, label)
    register(kube, registration)
    system = System(
        cluster,
        client.CustomObjectsApi(kube),
        core,
        attacker,
        victim,
        webhook_tls.port,
        webhook_tls.cert_dir,
        allocator_tls.address,
        allocator_tls.ca_file,
        xds,
        {account_of(ns): agents.mint(core, account_of(ns)) for ns in (attacker, victim)},
        services,
        {name: service.process.pid for name, service in services.items() if service.process is not None},
        tenant_label=label,
    )
    try:
        probe = load_balancer(attacker, "probe", {"public-ports": [{"port": ADMIN_PORT}]})
        wait_for(
            lambda: "denied the request" in system.refusal(probe),
            "the webhook configurations to be in force",
            timeout=30,
            ignore=(AssertionError,),
        )
        system.create(load_balancer(attacker, "web", {"service-group": "web", "public-address": "192.168.77.60"}))
        core.create_namespaced_pod(victim, VICTIM_ENVOY)  # type: ignore[arg-type]
        wait_for(
            lambda: core.read_namespaced_pod(VICTIM_ENVOY["metadata"]["name"], victim).status.pod_ip,
            "the victim's Envoy pod to get an IP",
            timeout=60,
        )
        yield system
    finally:
        unregister(kube, registration.name)
        for namespace in (attacker, victim):
            system.custom.delete_collection_namespaced_custom_object(
                ROUTEDIP_GROUP, ROUTEDIP_VERSION, namespace, "routedips"
            )
        for obj in system.custom.list_cluster_custom_object(ROUTEDIP_GROUP, ROUTEDIP_VERSION, "clusterroutedipclasses")[
            "items"
        ]:
            if obj["metadata"]["name"].startswith(f"adv-{label}"):
                system.custom.delete_cluster_custom_object(
                    ROUTEDIP_GROUP, ROUTEDIP_VERSION, "clusterroutedipclasses", obj["metadata"]["name"]
                )
        for namespace in (attacker, victim):
            account = namespace.removeprefix("epic-")
            cluster.kubectl("delete", "account", account, "-n", namespace, "--wait=false", check=False)
        core.delete_namespaced_secret(TOKEN_SECRET, SYSTEM_NAMESPACE)


# ---- the table ----


def condition(obj: Obj | None, type_: str) -> Obj:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


@dataclass(frozen=True)
class Parked:
    """What the owning service does with the object when it got past a down webhook."""

    condition: str
    reason: str
    status: str = "False"
    nothing_done: Callable[[System, Obj], list[str]] = lambda system, obj: []


@dataclass(frozen=True)
class ObjectCase:
    id: str
    finding: str
    build: Callable[[System, str], Obj]  # (system, unique suffix) -> the object
    field: str  # the refusal names it
    rule: str  # and says this
    parked: Parked | None = None


def no_deployment(system: System, obj: Obj) -> list[str]:
    """No Envoy Deployment for this load balancer (`<name>-envoy`; the account's other load balancers have theirs)."""
    deployments = client.AppsV1Api(system.core.api_client).list_namespaced_deployment(obj["metadata"]["namespace"])
    mine = [d for d in deployments.items if d.metadata.name.startswith(obj["metadata"]["name"])]
    return [f"Deployment {d.metadata.name} was created" for d in mine]


def no_finalizer(system: System, obj: Obj) -> list[str]:
    stored = system.get(obj) or {}
    return [f"finalizers {f}" for f in stored.get("metadata", {}).get("finalizers") or []]


def no_job(system: System, obj: Obj) -> list[str]:
    uid = (system.get(obj) or {}).get("metadata", {}).get("uid", "")
    jobs = client.BatchV1Api(system.core.api_client).list_namespaced_job(
        SYSTEM_NAMESPACE, label_selector=f"{CLASS_LABEL}={uid}"
    )
    return [f"Job {j.metadata.name} was created" for j in jobs.items]


def aimed_at(namespace: str, name: str, port: int, address: str, target: int, app: str = "ingress") -> Obj:
    """A VirtualService for the Envoys labelled app=`app`: a tcp listener on `port` forwarding to `address`:`target`."""
    tcp = with_value(listener("l", port, "tcp", address=address), "tcp.cluster.endpoints.0.port", target)
    return virtual_service(namespace, tcp, name=name, selector={"app": app})


def class_name(suffix: str) -> str:
    return f"adv-{suffix}"


def digitalocean_class(url: str) -> Callable[[System, str], Obj]:
    def build(system: System, suffix: str) -> Obj:
        token = [{"name": TOKEN_SECRET, "namespace": SYSTEM_NAMESPACE}]
        return routed_ip_class(
            class_name(suffix),
            "digitalocean",
            fromSecretsRef=token,
            digitalocean={"apiURL": url, "firewallID": "fw"},
        )

    return build


def job_class(**pod: Any) -> Callable[[System, str], Obj]:
    def build(system: System, suffix: str) -> Obj:
        spec = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]} | pod
        return routed_ip_class(class_name(suffix), "job", updateRoutedIP={"template": {"spec": spec}})

    return build


def other_tenants_service(system: System, suffix: str) -> Obj:
    rip_class = routed_ip_class(class_name(suffix))
    if system.get(rip_class) is None:
        system.create(rip_class)
    return routed_ip(system.attacker, "203.0.113.51", class_name(suffix), system.victim, name=f"rip-{suffix}")


TEMPLATE = "spec.updateRoutedIP.template.spec"
OBJECT_CASES = [
    ObjectCase(
        "lb-name-too-long",
        "a name too long for a label makes the allocator retry forever",
        lambda s, x: load_balancer(s.attacker, f"l{x}" + "l" * 60, {"service-group": "web"}),
        "metadata.name",
        "above the 63 of a label value",
        Parked("Ready", "NameTooLong", nothing_done=no_deployment),
    ),
    ObjectCase(
        "lb-admin-port",
        "a public port on Envoy's admin port breaks every Envoy of the load balancer",
        lambda s, x: load_balancer(s.attacker, f"lb-{x}", {"public-ports": [{"port": ADMIN_PORT}]}),
        "spec.public-ports[0].port",
        "is the Envoy admin port",
    ),
    ObjectCase(
        "gwproxy-admin-listener",
        "a gateway listener on Envoy's admin port",
        lambda s, x: gwproxy(
            s.attacker, {"gateway": {"listeners": [{"name": "a", "port": ADMIN_PORT, "protocol": "HTTP"}]}}, f"g-{x}"
        ),
        "spec.gateway.listeners[0].port",
        "is the Envoy admin port",
    ),
    ObjectCase(
        "vs-admin-port",
        "a VirtualService tcp listener on Envoy's admin port",
        lambda s, x: virtual_service(s.attacker, listener("admin", ADMIN_PORT, "tcp"), name=f"vs-{x}"),
        "spec.listeners[0].tcp.port",
        "is the Envoy admin port",
    ),
    ObjectCase(
        "vs-xds-cluster-name",
        "a cluster named like the bootstrap's xDS cluster replaces the Envoy's own control-plane connection",
        lambda s, x: virtual_service(
            s.attacker, with_value(listener("x", 4010), "udp.cluster.name", XDS_CLUSTER), name=f"vs-{x}"
        ),
        "spec.listeners[0].udp.cluster.name",
        "is reserved",
    ),
    ObjectCase(
        "vs-envoy-admin-api",
        "a tenant's tcp listener forwards to its Envoy's own admin API (config dump, quitquitquit) on loopback",
        lambda s, x: aimed_at(s.attacker, f"vs-{x}", 4020, "127.0.0.1", ADMIN_PORT),
        "spec.listeners[0].tcp.cluster.endpoints[0].host.address",
        "127.0.0.1 is a loopback address",
        Parked("Programmed", "EndpointRefused"),
    ),
    ObjectCase(
        "vs-metadata-address",
        "a tenant's tcp listener forwards to the cloud metadata service",
        lambda s, x: aimed_at(s.attacker, f"vs-{x}", 4021, "169.254.169.254", 80),
        "spec.listeners[0].tcp.cluster.endpoints[0].host.address",
        "169.254.169.254 is a link-local address",
        Parked("Programmed", "EndpointRefused"),
    ),
    ObjectCase(
        "rep-metadata-address",
        "an endpoint at the cloud metadata address makes the load balancer's Envoys fetch its secrets for anyone",
        lambda s, x: remote_endpoint(s.attacker, "169.254.169.254", name=f"rep-{x}"),
        "spec.address",
        "169.254.169.254 is a link-local address",
        Parked("Ready", "AddressNotAllowed"),
    ),
    ObjectCase(
        "rep-loopback-node",
        "an endpoint on the loopback node address tunnels to the Envoy's own host",
        lambda s, x: with_value(
            remote_endpoint(s.attacker, "127.77.9.9", name=f"rep-{x}"), "spec.node-address", "127.0.0.1"
        ),
        "spec.node-address",
        "127.0.0.1 is a loopback address",
        Parked("Ready", "AddressNotAllowed"),
    ),
    ObjectCase(
        "rep-pod-range",
        "an endpoint at a pod of the cluster reaches inside it, past its network policies",
        lambda s, x: remote_endpoint(s.attacker, "127.1.1.9", name=f"rep-{x}"),
        "spec.address",
        "is in 127.1.0.0/16, a denied range",
        Parked("Ready", "AddressNotAllowed"),
    ),
    ObjectCase(
        "rip-other-tenants-service",
        "a RoutedIP naming another tenant's Service opens its NodePorts in the cloud firewall",
        other_tenants_service,
        "spec.serviceRef.namespace",
        "must be the RoutedIP's own namespace",
        Parked("Ready", "ServiceRefNotAllowed", nothing_done=no_finalizer),
    ),
    ObjectCase(
        "class-plain-http-api",
        "a class sends the DigitalOcean token over plain http",
        digitalocean_class("http://127.0.0.1:9"),
        "spec.digitalocean.apiURL",
        "must be https",
        Parked("Accepted", "APIURLNotAllowed"),
    ),
    ObjectCase(
        "class-api-off-the-allow-list",
        "a class sends the DigitalOcean token to a server of its author's choice",
        digitalocean_class("https://collector.example.com"),
        "spec.digitalocean.apiURL",
        "is not on the allow-list",
        Parked("Accepted", "APIURLNotAllowed"),
    ),
    ObjectCase(
        "class-job-service-account",
        "a job template runs with the controller's ServiceAccount",
        job_class(serviceAccountName="tollgate-routedip"),
        f"{TEMPLATE}.serviceAccountName",
        "the chart's ServiceAccount for Jobs",
        Parked("Accepted", "PrivilegedJobTemplate", nothing_done=no_job),
    ),
    ObjectCase(
        "class-job-host-network",
        "a job template joins the node's network namespace",
        job_class(hostNetwork=True),
        f"{TEMPLATE}.hostNetwork",
        "provider Jobs do not share the node's namespaces",
        Parked("Accepted", "PrivilegedJobTemplate", nothing_done=no_job),
    ),
    ObjectCase(
        "class-job-privileged",
        "a job template runs a privileged container",
        job_class(containers=[{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]),
        f"{TEMPLATE}.containers[0].securityContext.privileged",
        "provider Jobs run unprivileged",
        Parked("Accepted", "PrivilegedJobTemplate", nothing_done=no_job),
    ),
]


def unique() -> str:
    return uuid.uuid4().hex[:5]


@pytest.mark.parametrize("case", OBJECT_CASES, ids=lambda case: case.id)
def test_refused_at_admission_naming_the_field_and_nothing_is_stored(system: System, case: ObjectCase) -> None:
    obj = case.build(system, unique())
    message = system.refusal(obj)
    assert "failed calling webhook" not in message, f"the webhook failed instead of answering: {message}"
    assert "denied the request" in message, message
    assert f"{case.field}: " in message and case.rule in message, message
    assert system.get(obj) is None, "refused, yet stored"


@pytest.mark.parametrize("case", [c for c in OBJECT_CASES if c.parked], ids=lambda case: case.id)
def test_admitted_while_the_webhook_was_down_the_service_parks_it_and_does_nothing(
    system: System, case: ObjectCase
) -> None:
    parked = case.parked
    assert parked is not None
    obj = case.build(system, unique())
    system.create(obj, bypass_webhook=True)

    def state() -> Obj | None:
        found = condition(system.get(obj), parked.condition)
        return found if found.get("reason") == parked.reason else None

    found = wait_for(state, f"{obj['kind']} {obj['metadata']['name']} {parked.condition} {parked.reason}", timeout=60)
    assert found["status"] == parked.status
    assert case.field in found["message"], found["message"]
    assert parked.nothing_done(system, obj) == []


@pytest.mark.parametrize(
    ("case", "body", "status"),
    [
        ("malformed-json", b"{", 400),
        ("json-nested-10000-deep", b"[" * 10_000 + b"]" * 10_000, 400),
        ("body-above-the-limit", b" " * (128 * 1024), 413),
    ],
)
def test_hostile_bodies_at_the_webhooks_own_port_get_a_4xx(system: System, case: str, body: bytes, status: int) -> None:
    assert system.webhook_post("/validate/epic.acnodal.io/v1/loadbalancers", body) == status


# ---- the registration API: calls an agent could make ----


@dataclass(frozen=True)
class CallCase:
    id: str
    finding: str
    call: Callable[[System], Awaitable[Any]]
    code: grpc.StatusCode
    says: str  # the status details contain this (the field and the rule)


def as_attacker(
    method: str, *args: Any, token: str | None = None, tls: bool = True, **kwargs: Any
) -> Callable[[System], Awaitable[Any]]:
    """The call `method(*args)` with the attacker's token (or `token`); an argument "VICTIM" or "ATTACKER" is that
    account's name."""

    async def call(system: System) -> Any:
        names = {"VICTIM": account_of(system.victim), "ATTACKER": account_of(system.attacker)}
        async with system.agent(system.attacker, token, tls) as api:
            return await getattr(api, method)(*(names.get(a, a) if isinstance(a, str) else a for a in args), **kwargs)

    return call


REGISTER = ("register", "ATTACKER", "web")
CALL_CASES = [
    CallCase(
        "no-token",
        "the registration API is open to whoever reaches it",
        as_attacker("tunnels", "ATTACKER", token=""),
        grpc.StatusCode.UNAUTHENTICATED,
        "authorization: a valid bearer token is required",
    ),
    CallCase(
        "forged-token",
        "a guessed token",
        as_attacker("tunnels", "ATTACKER", token="x" * 43),
        grpc.StatusCode.UNAUTHENTICATED,
        "authorization: a valid bearer token is required",
    ),
    CallCase(
        "register-in-another-account",
        "one shared token lets any agent register endpoints in every account",
        as_attacker("register", "VICTIM", "web", "127.77.40.1", 80),
        grpc.StatusCode.PERMISSION_DENIED,
        "is not the token's account",
    ),
    CallCase(
        "unregister-in-another-account",
        "any agent can remove another account's endpoints",
        as_attacker("unregister", "VICTIM", "web", "127.77.40.1"),
        grpc.StatusCode.PERMISSION_DENIED,
        "is not the token's account",
    ),
    CallCase(
        "list-another-accounts-tunnels",
        "any agent can read another account's endpoints and tunnels",
        as_attacker("tunnels", "VICTIM"),
        grpc.StatusCode.PERMISSION_DENIED,
        "is not the token's account",
    ),
    CallCase(
        "list-every-account",
        "ListTunnels with an empty account lists every account",
        as_attacker("tunnels", ""),
        grpc.StatusCode.INVALID_ARGUMENT,
        "account: required",
    ),
    CallCase(
        "register-the-metadata-address",
        "an endpoint at the cloud metadata address becomes an upstream behind a public listener",
        as_attacker(*REGISTER, "169.254.169.254", 80),
        grpc.StatusCode.INVALID_ARGUMENT,
        "address: 169.254.169.254 is a link-local address",
    ),
    CallCase(
        "register-loopback",
        "an endpoint at 127.0.0.1 reaches the Envoy host's own services",
        as_attacker(*REGISTER, "127.0.0.1", 80),
        grpc.StatusCode.INVALID_ARGUMENT,
        "address: 127.0.0.1 is a loopback address",
    ),
    CallCase(
        "register-a-pod-address",
        "an endpoint at a pod of the cluster reaches inside it",
        as_attacker(*REGISTER, "127.1.3.4", 80),
        grpc.StatusCode.INVALID_ARGUMENT,
        "address: 127.1.3.4 is in 127.1.0.0/16, a denied range",
    ),
    CallCase(
        "register-a-loopback-node",
        "a node address on loopback tunnels to the Envoy's own host",
        as_attacker(*REGISTER, "127.77.40.2", 80, node_address="127.0.0.1"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "node_address: 127.0.0.1 is a loopback address",
    ),
    CallCase(
        "oversized-request",
        "no limit on message size",
        as_attacker(*REGISTER, "127.77.40.3", 80, port_name="x" * 70_000),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "",
    ),
    CallCase(
        "plaintext",
        "the registration API speaks cleartext: tokens readable on the wire",
        as_attacker("tunnels", "ATTACKER", tls=False),
        grpc.StatusCode.UNAVAILABLE,
        "",
    ),
]


@pytest.mark.parametrize("case", CALL_CASES, ids=lambda case: case.id)
async def test_registration_calls_beyond_the_callers_own_account_are_refused_and_write_nothing(
    system: System, case: CallCase
) -> None:
    before = system.remote_endpoints()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await case.call(system)
    assert raised.value.code() == case.code, raised.value.details()
    assert case.says in (raised.value.details() or ""), raised.value.details()
    assert system.remote_endpoints() == before, "a refused call wrote a RemoteEndpoint"


async def test_the_attackers_own_registration_still_works(system: System) -> None:
    """The control case: the refusals above are about whose and what, not a broken API."""
    async with system.agent(system.attacker) as api:
        response = await api.register(account_of(system.attacker), "web", "127.77.40.9", 80)
        assert response.tunnel.remote_endpoint == "web-127-77-40-9-80-tcp"
        assert (await api.unregister(account_of(system.attacker), "web", "127.77.40.9")).removed == 1


# ---- xDS: a client claiming to be an Envoy pod it is not ----


async def ads_stream(port: int, node_id: str) -> tuple[grpc.StatusCode, str, int]:
    """Open ADS from this process (127.0.0.1) as `node_id`, ask for listeners: (status, details, responses)."""
    request = discovery_pb2.DiscoveryRequest(node=base_pb2.Node(id=node_id, cluster="edge"), type_url=LISTENER)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        responses = 0
        requests: asyncio.Queue[discovery_pb2.DiscoveryRequest | None] = asyncio.Queue()
        await requests.put(request)

        async def send() -> Any:
            while (item := await requests.get()) is not None:
                yield item

        try:
            async for _ in stub.StreamAggregatedResources(send(), timeout=20):
                responses += 1
                await requests.put(None)
        except grpc.aio.AioRpcError as error:
            return error.code(), error.details() or "", responses
    return grpc.StatusCode.OK, "", responses


@pytest.mark.parametrize(
    ("case", "pod", "says"),
    [
        ("claims-another-tenants-envoy-pod", VICTIM_ENVOY["metadata"]["name"], "the connection comes from"),
        ("claims-a-pod-that-does-not-exist", "ghost", ": no pod "),
    ],
)
async def test_an_ads_client_claiming_a_pod_it_is_not_gets_nothing(
    system: System, case: str, pod: str, says: str
) -> None:
    code, details, responses = await ads_stream(system.xds.grpc_port, f"{pod}.{system.victim}")
    assert (code, responses) == (grpc.StatusCode.PERMISSION_DENIED, 0), (code, details, responses)
    assert says in details, details


async def test_a_virtual_service_aimed_at_the_envoys_admin_api_never_reaches_a_real_envoy(system: System) -> None:
    """A real Envoy playing an Envoy pod of the attacker's (a KWOK pod; its address is this machine's) is served the
    attacker's VirtualService to a client node; one aimed at 127.0.0.1:9901 that got past a down webhook is in
    neither what xds serves that Envoy nor the Envoy's own config, and its status says why."""
    suffix = unique()
    app, pod, namespace = f"edge-{suffix}", f"envoy-{suffix}", system.attacker
    ip = await kwok_pod(system.cluster, namespace, pod, {ENVOY_PROXY_LABEL: "true", "app": app})
    good = aimed_at(namespace, f"good-{suffix}", 4030, system.cluster.remote_address(), 8080, app)
    bad = aimed_at(namespace, f"bad-{suffix}", 4031, "127.0.0.1", ADMIN_PORT, app)
    served, refused = f"{namespace}/good-{suffix}/l", f"{namespace}/bad-{suffix}"
    async with EnvoyProcess(pod_bootstrap(system.xds, namespace, pod, ip), admin_host=ip) as envoy:
        system.create(bad, bypass_webhook=True)
        system.create(good)

        async def listeners() -> list[str] | None:
            names = sorted(listener["name"] for listener in await envoy.listeners())
            return names if served in names else None

        await eventually(listeners, f"the Envoy at {ip} to run listener {served}")
        stored = await vs_condition(system.custom, namespace, bad["metadata"]["name"], "Programmed", "EndpointRefused")
        programmed = condition(stored, "Programmed")
        assert programmed["status"] == "False"
        assert programmed["message"] == (
            "served to no Envoy: spec.listeners[0].tcp.cluster.endpoints[0].host.address: 127.0.0.1 is a loopback "
            "address; endpoints must be reachable remote addresses"
        )
        assert await listeners() == [served]
        assert refused not in await envoy.clusters()
        config = system.xds.api(f"/debug/envoys/{pod}.{namespace}/config_dump")
        assert [listener["name"] for listener in config["listeners"]] == [served]
        assert not [cluster for cluster in config["clusters"] if cluster["name"].startswith(refused)]


# ---- the EPIC singleton ----


def test_the_epic_singleton_cannot_be_deleted_while_load_balancers_use_it(system: System) -> None:
    """Deleting the EPIC (the tunnel IDs' record) while load balancers exist would hand their IDs out again. The
    delete is a dry run: were it allowed, nothing is lost. The module's webhook judges the epic namespace for it."""
    system.cluster.kubectl("label", "namespace", EPIC_NAMESPACE, f"{TENANT_LABEL}={system.tenant_label}", "--overwrite")
    try:
        with pytest.raises(client.ApiException) as raised:
            system.custom.delete_namespaced_custom_object(
                EPIC_GROUP, EPIC_VERSION, EPIC_NAMESPACE, "epics", SINGLETON_NAME, dry_run="All"
            )
    finally:
        system.cluster.kubectl("label", "namespace", EPIC_NAMESPACE, f"{TENANT_LABEL}-")
    message = str(json.loads(raised.value.body or "{}").get("message"))
    assert "failed calling webhook" not in message, message
    assert f"the EPIC singleton {EPIC_NAMESPACE}/{SINGLETON_NAME} is in use by" in message, message


def test_no_service_crashed_or_logged_a_traceback(system: System) -> None:
    """Runs last in the module: every case above went through the same processes."""
    for name, service in system.services.items():
        assert service.process is not None and service.process.poll() is None, f"{name} exited"
        assert service.process.pid == system.pids[name]
        assert "Traceback" not in service.logs(), f"{name} logged a traceback:\n{service.logs()[-4000:]}"
