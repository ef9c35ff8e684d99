"""Every chart lints, renders with default and non-default values, and the API server accepts what it renders."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from tollgate.models import ALL_KINDS
from tollgate.models.envoy import DEBUG_PERMISSION_URL, DEBUG_SERVICE_ACCOUNT
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.rbac import NAMESPACE, chart_dir, default_replicas, release_namespaces, render_chart
from tollgate.testing.tools import repo_root, tool

SERVICES = ["allocator", "xds", "routedip", "jobs", "webhook"]
NON_DEFAULT: dict[str, Any] = {
    "replicaCount": 2,
    "image": {"repository": "registry.example.com/tollgate/svc", "tag": "1.2.3", "pullPolicy": "Always"},
    "logLevel": "DEBUG",
    "otel": {"endpoint": "http://otel-collector.observability:4318"},
    "env": {"TOLLGATE_EXTRA": "1"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}],
    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
}


def helm(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool("helm")), *args], input=stdin, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module", autouse=True)
def release_namespace(cluster: EmbeddedCluster) -> None:
    for namespace in set(release_namespaces().values()):
        cluster.kubectl("create", "namespace", namespace, check=False)


@pytest.mark.parametrize("chart", ["tollgate-crds", *[f"tollgate-{s}" for s in SERVICES]])
def test_helm_lint(chart: str) -> None:
    path = repo_root() / "deploy" / "charts" / chart
    if chart != "tollgate-crds":
        render_chart(chart.removeprefix("tollgate-"))  # vendors the library chart when needed
    result = helm("lint", "--strict", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    result = (
        helm("lint", "--strict", str(path), "-f", "-", stdin=yaml.safe_dump(NON_DEFAULT))
        if chart != "tollgate-crds"
        else result
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", [{}, NON_DEFAULT], ids=["defaults", "non-defaults"])
@pytest.mark.parametrize("service", SERVICES)
def test_rendered_chart_passes_server_side_dry_run(
    cluster: EmbeddedCluster, service: str, values: dict[str, Any]
) -> None:
    objects = render_chart(service, values=values)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "Service", "ServiceAccount"} <= kinds
    assert ("PodDisruptionBudget" in kinds) == (values.get("replicaCount", default_replicas(service)) > 1)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    readiness = {"grpc": {"port": 18000}} if service == "xds" else {"httpGet": {"path": "/readyz", "port": "health"}}
    assert readiness.items() <= container["readinessProbe"].items(), "gRPC health where the port is plaintext gRPC"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    result = cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(objects), check=False)
    assert result.returncode == 0, result.stderr


def test_crds_chart_installs_every_crd(cluster: EmbeddedCluster) -> None:
    rendered = helm("template", "tollgate-crds", str(repo_root() / "deploy" / "charts" / "tollgate-crds"))
    assert rendered.returncode == 0, rendered.stderr
    crds = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert len(crds) == len(list((repo_root() / "crds").glob("*.yaml")))
    assert all(c["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for c in crds)
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", "-", stdin=rendered.stdout, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("service", "values", "complaint"),
    [
        ("jobs", {"replicaCount": "two"}, "replicaCount"),
        ("jobs", {"image": {"repository": ""}}, "image"),
        ("jobs", {"logLevel": "LOUD"}, "logLevel"),
        ("jobs", {"logLevle": "DEBUG"}, "logLevle"),
        ("jobs", {"debugApi": {"service": True}}, "debugApi"),
        ("allocator", {"certManager": {"enabled": "maybe"}}, "enabled"),
        ("allocator", {"metrics": {"envoyPodMonitor": {"intervall": "10s"}}}, "intervall"),
        ("xds", {"debugApi": {"port": 70000}}, "port"),
    ],
)
def test_values_schema_rejects_bad_values(service: str, values: dict[str, Any], complaint: str) -> None:
    chart = chart_dir(service)
    result = helm("template", "x", str(chart), "-f", "-", stdin=yaml.safe_dump(values))
    assert result.returncode != 0
    assert complaint in result.stderr


def test_webhook_chart_generates_a_ca_and_registers_every_kind() -> None:
    objects = render_chart("webhook")
    secret = next(o for o in objects if o["kind"] == "Secret")
    configurations = [o for o in objects if o["kind"].endswith("WebhookConfiguration")]
    assert sorted(c["kind"] for c in configurations) == [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ]
    for configuration in configurations:
        assert len(configuration["webhooks"]) == len(ALL_KINDS)
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
            assert hook["clientConfig"]["service"]["namespace"] == NAMESPACE
            assert hook["clientConfig"]["service"]["name"] == "tollgate-webhook"
            assert (hook["failurePolicy"], hook["sideEffects"]) == ("Fail", "None")


def test_webhook_chart_runs_two_replicas_preferring_different_nodes_with_a_disruption_budget() -> None:
    """The API server calls the webhook for every write of a tollgate kind: one replica drained refuses them all."""
    objects = render_chart("webhook")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    budget = next(o for o in objects if o["kind"] == "PodDisruptionBudget")
    assert deployment["spec"]["replicas"] == 2
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": deployment["spec"]["selector"],
    }


def test_webhook_chart_uses_cert_manager_when_it_is_served() -> None:
    result = helm(
        "template",
        "tollgate-webhook",
        str(chart_dir("webhook")),
        "-n",
        NAMESPACE,
        "--api-versions",
        "cert-manager.io/v1",
    )
    assert result.returncode == 0, result.stderr
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    kinds = {o["kind"] for o in objects}
    assert {"Certificate", "Issuer"} <= kinds
    assert "Secret" not in kinds
    configuration = next(o for o in objects if o["kind"] == "ValidatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/tollgate-webhook"


@pytest.mark.parametrize("cert_manager", [False, True], ids=["helm-ca", "cert-manager"])
def test_allocator_chart_serves_tls_from_the_shared_certificate_template_and_has_no_shared_token(
    cert_manager: bool,
) -> None:
    extra = ["--api-versions", "cert-manager.io/v1"] if cert_manager else []
    result = helm("template", "tollgate-allocator", str(chart_dir("allocator")), "-n", NAMESPACE, *extra)
    assert result.returncode == 0, result.stderr
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    secrets = [o for o in objects if o["kind"] == "Secret"]
    if cert_manager:
        certificate = next(o for o in objects if o["kind"] == "Certificate")
        assert certificate["spec"]["secretName"] == "tollgate-allocator-tls"
        assert certificate["spec"]["dnsNames"][0] == f"tollgate-allocator.{NAMESPACE}.svc"
        assert secrets == [], "no Secret: neither a Helm-made pair nor a shared token"
    else:
        (secret,) = secrets
        assert (secret["metadata"]["name"], secret["type"]) == ("tollgate-allocator-tls", "kubernetes.io/tls")
        assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "tollgate-allocator-tls"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TOLLGATE_ALLOCATOR_GRPC_CERT_DIR"] == mount["mountPath"]
    assert not any("TOKEN" in name for name in env)


@pytest.mark.parametrize("service", SERVICES)
def test_a_release_of_any_name_mounts_only_what_it_renders_itself(service: str) -> None:
    """Every Secret and ConfigMap the Deployment mounts or reads is one the chart renders under this release's
    name (a name tied to the default release, such as tollgate-webhook-tls, breaks any other release)."""
    release = f"edge-{service}"
    result = helm("template", release, str(chart_dir(service)), "-n", "edge")
    assert result.returncode == 0, result.stderr
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    rendered = {(o["kind"], o["metadata"]["name"]) for o in objects}
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    wanted = {("Secret", v["secret"]["secretName"]) for v in pod.get("volumes", []) if "secret" in v}
    wanted |= {("ConfigMap", v["configMap"]["name"]) for v in pod.get("volumes", []) if "configMap" in v}
    for env in pod["containers"][0].get("env", []):
        source = env.get("valueFrom", {})
        if "secretKeyRef" in source:
            wanted.add(("Secret", source["secretKeyRef"]["name"]))
        if "configMapKeyRef" in source:
            wanted.add(("ConfigMap", source["configMapKeyRef"]["name"]))
    assert wanted <= rendered, f"{release} refers to objects it does not render: {wanted - rendered}"
    assert pod["serviceAccountName"] == release
    assert all(o["metadata"]["name"].startswith(release) for o in objects if o["kind"] != "Lease")


def test_cross_chart_addresses_default_to_where_make_deploy_installs_the_other_chart() -> None:
    """The allocator tells Envoy to find xds at the xds chart's Service, in the namespace make deploy uses."""
    namespaces = release_namespaces()
    xds_port = next(p["port"] for p in yaml.safe_load((chart_dir("xds") / "values.yaml").read_text())["ports"]
                    if p["name"] == "xds")  # fmt: skip
    objects = render_chart("allocator")
    container = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TOLLGATE_ALLOCATOR_XDS_ADDRESS"] == f"tollgate-xds.{namespaces['tollgate-xds']}.svc:{xds_port}"
    for configuration in (o for o in render_chart("webhook") if o["kind"].endswith("WebhookConfiguration")):
        for hook in configuration["webhooks"]:
            assert hook["clientConfig"]["service"]["namespace"] == namespaces["tollgate-webhook"]


@pytest.mark.parametrize("service", ["webhook", "allocator", "xds"])
def test_the_services_that_judge_endpoints_get_the_endpoint_policy_value(service: str) -> None:
    """One value, `endpointPolicy`, in each chart, as the service's own settings (tollgate-common)."""
    values = {
        "endpointPolicy": {"deniedRanges": ["198.18.0.0/16", "198.19.0.0/16"], "allowedRanges": ["127.77.0.0/16"]}
    }
    for given, denied, allowed in (({}, "10.96.0.0/12,10.244.0.0/16", ""),
                                   (values, "198.18.0.0/16,198.19.0.0/16", "127.77.0.0/16")):  # fmt: skip
        objects = render_chart(service, values=given)
        [container] = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        prefix = f"TOLLGATE_{service.upper()}_"
        assert (env[f"{prefix}ENDPOINT_DENIED_RANGES"], env[f"{prefix}ENDPOINT_ALLOWED_RANGES"]) == (denied, allowed)


def test_xds_debug_api_is_on_the_pods_loopback_and_a_service_port_only_when_asked() -> None:
    """The debug API shows every Envoy's config: by default it is no port of the Service nor the pod, and the
    service listens on 127.0.0.1 (its default); `debugApi.service: true` publishes it."""

    def rendered(values: dict[str, Any]) -> tuple[list[str], list[str], dict[str, str]]:
        objects = render_chart("xds", values=values)
        service = next(o for o in objects if o["kind"] == "Service")
        [container] = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        service_ports = [f"{p['name']}:{p['port']}->{p['targetPort']}" for p in service["spec"]["ports"]]
        container_ports = [f"{p['name']}:{p['containerPort']}" for p in container["ports"]]
        return service_ports, container_ports, env

    service_ports, container_ports, env = rendered({})
    assert service_ports == ["health:8080->health", "xds:18000->xds"]
    assert container_ports == ["health:8080", "xds:18000"]
    assert "TOLLGATE_XDS_API_HOST" not in env and env["TOLLGATE_XDS_API_PORT"] == "8081"

    service_ports, container_ports, env = rendered({"debugApi": {"service": True, "port": 9000}})
    assert service_ports == ["health:8080->health", "xds:18000->xds", "debug:9000->debug"]
    assert container_ports == ["health:8080", "xds:18000", "debug:9000"]
    assert (env["TOLLGATE_XDS_API_HOST"], env["TOLLGATE_XDS_API_PORT"]) == ("0.0.0.0", "9000")
    assert (env["TOLLGATE_XDS_API_AUTH"], env["TOLLGATE_XDS_API_CERT_DIR"]) == ("true", "/etc/tollgate/debug-tls")


def test_a_published_xds_debug_api_serves_tls_and_lets_in_whom_an_operator_binds() -> None:
    """`debugApi.service: true`: the serving certificate is mounted, the ServiceAccount tollgate-xds-debug may read the
    debug API, and the ClusterRole tollgate-xds-debug-viewer lets its holder mint that account's token and proxy."""
    objects = render_chart("xds", values={"debugApi": {"service": True}})
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert ("Secret", "tollgate-xds-debug-tls") in named or ("Certificate", "tollgate-xds") in named
    pod = named[("Deployment", "tollgate-xds")]["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "debug-tls")
    assert volume["secret"]["secretName"] == "tollgate-xds-debug-tls"
    assert {"name": "debug-tls", "mountPath": "/etc/tollgate/debug-tls", "readOnly": True} in pod["containers"][0][
        "volumeMounts"
    ]
    assert ("ServiceAccount", DEBUG_SERVICE_ACCOUNT) in named
    reader = named[("ClusterRole", "tollgate-xds-debug-reader")]["rules"]
    assert reader == [{"nonResourceURLs": [DEBUG_PERMISSION_URL], "verbs": ["get"]}]
    binding = named[("ClusterRoleBinding", "tollgate-xds-debug-reader")]
    assert [s["name"] for s in binding["subjects"]] == [DEBUG_SERVICE_ACCOUNT]
    viewer = named[("ClusterRole", "tollgate-xds-debug-viewer")]["rules"]
    assert viewer[0] == {"apiGroups": [""], "resources": ["serviceaccounts/token"],
                         "resourceNames": [DEBUG_SERVICE_ACCOUNT], "verbs": ["create"]}  # fmt: skip
    unpublished = {(o["kind"], o["metadata"]["name"]) for o in render_chart("xds")}
    assert not [name for kind, name in unpublished if "debug" in name], "nothing of it when not published"


@pytest.mark.parametrize("service", SERVICES)
def test_spans_carry_the_pods_resource_attributes_from_the_downward_api(service: str) -> None:
    """k8s.pod.name, k8s.namespace.name and service.instance.id from the Downward API (env references resolved by
    the kubelet), service.version from the image tag (the chart's appVersion when none); OTLP as http/json."""
    appversion = yaml.safe_load((chart_dir(service) / "Chart.yaml").read_text())["appVersion"]
    for values, version in (({}, appversion), (NON_DEFAULT, "1.2.3")):
        objects = render_chart(service, values=values)
        [container] = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["POD_UID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
        names = list(env)
        assert names.index("OTEL_RESOURCE_ATTRIBUTES") > names.index("POD_UID"), "$(VAR) needs VAR defined before"
        attributes = dict(item.split("=", 1) for item in env["OTEL_RESOURCE_ATTRIBUTES"]["value"].split(","))
        assert attributes == {
            "k8s.pod.name": "$(POD_NAME)",
            "k8s.namespace.name": "$(POD_NAMESPACE)",
            "k8s.pod.uid": "$(POD_UID)",
            "service.instance.id": "$(POD_UID)",
            "service.version": str(version),
        }
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/json"
