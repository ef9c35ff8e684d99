"""tollgate-routedip's trust boundaries, end to end, under exactly the permissions of its chart.

What slips past the webhook (created while it was down; this module runs without it, as nothing registers it on
the test cluster) is refused again by the controller, which then does nothing for it:
- a RoutedIP naming a Service of another namespace is `Ready=False`, reason ServiceRefNotAllowed, and the other
  tenant's NodePort is never opened in the class's firewall;
- a DigitalOcean class whose apiURL is plain http or off the allow-list is not Accepted, and a real HTTP server
  standing at that URL receives no request at all (so never the token);
- a job class whose template asks for another ServiceAccount, the host's namespaces, privileges or capabilities
  is not Accepted, and no Job is created from it.
The chart lets the controller read the token Secrets it lists, by name, and no other Secret, and provides the
ServiceAccount job templates may name, granted nothing.
"""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from tollgate.models.routedip import DIGITALOCEAN_API_URL, GROUP, JOB_SERVICE_ACCOUNT, VERSION
from tollgate.routedip.providers import local
from tollgate.routedip.providers.job import CLASS_LABEL
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.objects import config_map_data
from tollgate.testing.rbac import render_chart
from tollgate.testing.wait import wait_for

SYSTEM_NAMESPACE = "tollgate-system"


class Recorder(BaseHTTPRequestHandler):
    """Answers every request 200 with an empty JSON object, and records it."""

    hits: list[tuple[str, str, str]]

    def _record(self) -> None:
        self.hits.append((self.command, self.path, self.headers.get("Authorization", "")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_DELETE = _record

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """A real HTTP server on loopback recording every request: where a class author would like the token sent."""
    hits: list[tuple[str, str, str]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (Recorder,), {"hits": hits}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", hits
    server.shutdown()
    thread.join(10)


@pytest.fixture
def token_secret(cluster: EmbeddedCluster, core: client.CoreV1Api) -> Iterator[list[dict[str, str]]]:
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    name = "digitalocean-token"  # one the chart lets the controller read: the controller itself must refuse
    token = base64.b64encode(b"secret-token").decode()
    core.create_namespaced_secret(
        SYSTEM_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=name), data={"token": token})
    )
    yield [{"name": name, "namespace": SYSTEM_NAMESPACE}]
    core.delete_namespaced_secret(name, SYSTEM_NAMESPACE)


@pytest.fixture
def classes(custom: client.CustomObjectsApi) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        custom.delete_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", name)


def make_class(custom: client.CustomObjectsApi, classes: list[str], provider: str, **spec: Any) -> str:
    name = f"trust-{provider}-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterRoutedIPClass",
        "metadata": {"name": name},
        "spec": {"className": name, "provider": provider, "moveCooldownSeconds": 0, **spec},
    }
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", body)
    classes.append(name)
    return name


def make_service(core: client.CoreV1Api, namespace: str) -> int:
    spec = {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}
    service = core.create_namespaced_service(namespace, {"metadata": {"name": "web"}, "spec": spec})  # type: ignore[arg-type]
    return int(str(service.spec.ports[0].node_port))


def make_routed_ip(
    custom: client.CustomObjectsApi, namespace: str, name: str, class_name: str, ip: str, service_namespace: str
) -> None:
    spec = {
        "className": class_name,
        "routedIP": ip,
        "serviceRef": {"serviceName": "web", "namespace": service_namespace},
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RoutedIP", "metadata": {"name": name}, "spec": spec}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", body)


def condition(obj: Any, type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def ready_reason(custom: client.CustomObjectsApi, namespace: str, name: str, reason: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = condition(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "routedips", name), "Ready")
        return found if found.get("reason") == reason else None

    return wait_for(probe, f"RoutedIP {namespace}/{name} Ready reason {reason}", timeout=30)


def not_accepted(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = condition(custom.get_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", name), "Accepted")
        return found if found.get("status") == "False" else None

    return wait_for(probe, f"ClusterRoutedIPClass {name} not Accepted", timeout=30)


def opened_ports(core: client.CoreV1Api, class_name: str) -> set[str]:
    """The ports the local provider recorded as open in the class's firewall, on any node."""
    data = config_map_data(core, local.firewall_config_map(class_name), SYSTEM_NAMESPACE)
    return {port for ports in data.values() for port in ports.split(",") if port}


def start_controller(run_service: ServiceFactory, **env: str) -> None:
    env = {"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "TOLLGATE_ROUTEDIP_LOG_FORMAT": "text", **env}
    run_service("routedip", rbac=True, env=env)


def release(custom: client.CustomObjectsApi, namespace: str) -> None:
    """Delete the test's RoutedIPs while the controller runs, or their finalizers keep the namespace alive."""
    custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, "routedips")
    wait_for(
        lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "routedips")["items"],
        "the test's RoutedIPs to be released",
        timeout=60,
    )


def test_a_routed_ip_of_a_service_in_another_namespace_is_refused_and_opens_nothing(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    other_namespace: str,
    run_service: ServiceFactory,
    classes: list[str],
) -> None:
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    class_name = make_class(custom, classes, "local")
    own_port = make_service(core, namespace)
    victim_port = make_service(core, other_namespace)
    start_controller(run_service)
    try:
        make_routed_ip(custom, namespace, "theirs", class_name, "203.0.113.41", other_namespace)
        make_routed_ip(custom, namespace, "ours", class_name, "203.0.113.42", namespace)

        refused = ready_reason(custom, namespace, "theirs", "ServiceRefNotAllowed")
        assert refused["status"] == "False"
        assert refused["message"] == (
            f"spec.serviceRef.namespace: must be the RoutedIP's own namespace {namespace!r} (got "
            f"{other_namespace!r}): a RoutedIP may only route to a Service of its own namespace"
        )
        ready_reason(custom, namespace, "ours", "Assigned")
        wait_for(
            lambda: [
                e
                for e in core.list_namespaced_event(namespace).items
                if e.reason == "ServiceRefNotAllowed" and e.involved_object.name == "theirs"
            ],
            "a ServiceRefNotAllowed Event on the RoutedIP",
            timeout=10,
        )
        opened = wait_for(
            lambda: opened_ports(core, class_name), "the firewall to open the RoutedIP's own NodePort", timeout=30
        )
        assert opened == {f"tcp/{own_port}"}, f"the other namespace's NodePort {victim_port} stays closed"
        recorded = config_map_data(core, local.ip_config_map("203.0.113.41"), SYSTEM_NAMESPACE)
        assert recorded == {}, "its IP is assigned nowhere"
    finally:
        release(custom, namespace)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_class_with_an_api_url_off_the_allow_list_is_not_accepted_and_sends_it_nothing(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    classes: list[str],
    collector: tuple[str, list[tuple[str, str, str]]],
    token_secret: list[dict[str, str]],
    scheme: str,
) -> None:
    """http: the collector's host is allow-listed over https, and the class asks for plain http there;
    https: the collector is not allow-listed at all."""
    host, hits = collector
    allowed = f"https://api.digitalocean.com,https://{host}" if scheme == "http" else "https://api.digitalocean.com"
    start_controller(run_service, TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS=allowed)
    url = f"{scheme}://{host}"
    class_name = make_class(
        custom, classes, "digitalocean", fromSecretsRef=token_secret, digitalocean={"apiURL": url, "firewallID": "fw"}
    )
    make_service(core, namespace)
    try:
        make_routed_ip(custom, namespace, "web", class_name, "203.0.113.43", namespace)

        accepted = not_accepted(custom, class_name)
        assert accepted["reason"] == "APIURLNotAllowed"
        rule = "must be https" if scheme == "http" else "is not on the allow-list of API URLs"
        assert accepted["message"].startswith(f"spec.digitalocean.apiURL: {url!r}") and rule in accepted["message"]
        assert "spec.digitalocean.apiURL" in ready_reason(custom, namespace, "web", "ClassNotAccepted")["message"]
    finally:
        release(custom, namespace)
    assert hits == [], "no request (and so no token) reached the refused URL"


def test_a_job_class_asking_for_privileges_is_not_accepted_and_runs_no_job(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    classes: list[str],
) -> None:
    cluster.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": "tollgate-routedip",
        "hostNetwork": True,
        "containers": [{"name": "c", "image": "busybox", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
    }
    class_name = make_class(custom, classes, "job", updateRoutedIP={"template": {"spec": pod}})
    uid = custom.get_cluster_custom_object(GROUP, VERSION, "clusterroutedipclasses", class_name)["metadata"]["uid"]
    make_service(core, namespace)
    start_controller(run_service)
    try:
        make_routed_ip(custom, namespace, "web", class_name, "203.0.113.44", namespace)

        accepted = not_accepted(custom, class_name)
        assert accepted["reason"] == "PrivilegedJobTemplate"
        for field in ("serviceAccountName", "hostNetwork", "containers[0].securityContext.capabilities.add"):
            assert f"spec.updateRoutedIP.template.spec.{field}: " in accepted["message"]
        ready_reason(custom, namespace, "web", "ClassNotAccepted")
        jobs = client.BatchV1Api(core.api_client).list_namespaced_job(
            SYSTEM_NAMESPACE, label_selector=f"{CLASS_LABEL}={uid}"
        )
        assert jobs.items == []
    finally:
        release(custom, namespace)


def chart_env(service: str, values: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment the service's chart gives its container (plain values only)."""
    objects = render_chart(service, values=values)
    container = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_a_class_naming_a_secret_outside_token_secrets_is_not_accepted(
    cluster: EmbeddedCluster,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    run_service: ServiceFactory,
    classes: list[str],
    token_secret: list[dict[str, str]],
) -> None:
    """The chart lets the controller read only tokenSecrets: a class naming another Secret is told so in its
    Accepted condition, naming the field, rather than failing on the API server's 403 at every retry."""
    other = {"name": "database-password", "namespace": SYSTEM_NAMESPACE}
    class_name = make_class(custom, classes, "digitalocean", fromSecretsRef=[*token_secret, other])
    make_service(core, namespace)
    start_controller(
        run_service, TOLLGATE_ROUTEDIP_TOKEN_SECRETS=chart_env("routedip")["TOLLGATE_ROUTEDIP_TOKEN_SECRETS"]
    )
    try:
        make_routed_ip(custom, namespace, "web", class_name, "203.0.113.45", namespace)

        accepted = not_accepted(custom, class_name)
        assert accepted["reason"] == "SecretNotAllowed"
        assert accepted["message"] == (
            "spec.fromSecretsRef[1].name: tollgate-routedip may read only the Secrets its chart's tokenSecrets lists "
            "(digitalocean-token), not 'database-password'"
        )
        assert "spec.fromSecretsRef[1].name" in ready_reason(custom, namespace, "web", "ClassNotAccepted")["message"]
    finally:
        release(custom, namespace)


def test_both_charts_take_the_routed_ip_trust_from_one_value() -> None:
    """The webhook judges classes by the trust the controller acts by: one `routedipTrust` value feeds both."""
    trust = {
        "apiURLs": ["https://api.digitalocean.com", "https://do-proxy.example.com"],
        "httpHosts": [],
        "jobServiceAccount": "routedip-jobs",
    }
    expected = {
        "TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS": "https://api.digitalocean.com,https://do-proxy.example.com",
        "TOLLGATE_ROUTEDIP_DIGITALOCEAN_HTTP_HOSTS": "",
        "TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT": "routedip-jobs",
    }
    for service in ("routedip", "webhook"):
        env = chart_env(service, {"routedipTrust": trust})
        assert {name: env.get(name) for name in expected} == expected, service
        defaults = chart_env(service)
        assert defaults["TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT"] == JOB_SERVICE_ACCOUNT, service
        assert defaults["TOLLGATE_ROUTEDIP_DIGITALOCEAN_API_URLS"] == DIGITALOCEAN_API_URL, service
    objects = render_chart("routedip", values={"routedipTrust": trust})
    accounts = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert "routedip-jobs" in accounts, "the routedip chart makes the ServiceAccount the value names"


def test_the_chart_grants_secrets_by_name_and_a_job_service_account_without_rights() -> None:
    objects = render_chart("routedip", values={"tokenSecrets": ["digitalocean-token", "do-staging"]})
    rules = [rule for o in objects if o["kind"] in ("Role", "ClusterRole") for rule in o["rules"]]
    secret_rules = [rule for rule in rules if "secrets" in rule["resources"]]
    assert secret_rules == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["digitalocean-token", "do-staging"],
        }
    ]
    accounts = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ServiceAccount"}
    container = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TOLLGATE_ROUTEDIP_JOB_SERVICE_ACCOUNT"] == JOB_SERVICE_ACCOUNT
    assert env["TOLLGATE_ROUTEDIP_TOKEN_SECRETS"] == "digitalocean-token,do-staging"
    assert accounts[JOB_SERVICE_ACCOUNT]["automountServiceAccountToken"] is False
    bound = {s["name"] for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding") for s in o["subjects"]}
    assert JOB_SERVICE_ACCOUNT not in bound, "the Jobs' ServiceAccount is granted nothing"
    assert not [
        o
        for o in render_chart("routedip", values={"tokenSecrets": []})
        if o["kind"] == "Role" and any("secrets" in rule["resources"] for rule in o["rules"])
    ]
