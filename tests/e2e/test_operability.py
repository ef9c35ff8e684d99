"""What an operator reads from the running system (#19 parts 4 and 5): every service's /metrics names only declared
`tollgate_` metrics, the allocator and xds answer grpc.health.v1 and list their services by reflection without
the registration token, the charts render ServiceMonitor, PodMonitor and gRPC probes, and the Grafana dashboard
queries only metrics that exist."""

from __future__ import annotations

import importlib
import json
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tollgate.allocator import proxy
from tollgate.models.envoy import ADMIN_PORT, ENVOY_CONTAINER, ENVOY_PROXY_LABEL
from tollgate.models.epic import LBServiceGroupSpec
from tollgate.runtime.metrics import PROCESS, Metric
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.net import free_port
from tollgate.testing.rbac import render_chart
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import tls_endpoint, webhook_env
from tollgate.testing.tools import repo_root
from tollgate.testing.xds import start_xds, xds_settings
from tollgate.webhook.kinds import KINDS

pytestmark = pytest.mark.e2e

SERVICES = ["allocator", "jobs", "routedip", "webhook", "xds"]
ALLOCATOR_SERVICE = "tollgate.allocator.v1.Allocator"
ADS_SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
STANDARD = {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
DASHBOARD = repo_root() / "deploy" / "grafana" / "tollgate.json"
ENVOY_LOAD_BALANCER = {
    "apiVersion": "epic.acnodal.io/v1",
    "kind": "LoadBalancer",
    "metadata": {"name": "web", "namespace": "epic-acme", "uid": "u-1"},
    "spec": {"service-group": "sample"},
}


def declared(service: str) -> list[Metric]:
    return [*importlib.import_module(f"tollgate.{service}.metrics").METRICS, *PROCESS]


@dataclass
class System:
    processes: dict[str, ServiceProcess]
    grpc_ports: dict[str, int]


def scraped_names(process: ServiceProcess) -> set[str]:
    with urllib.request.urlopen(f"{process.health_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")}


@pytest.fixture(scope="module")
def system(run_module_service: ServiceFactory, tmp_path_factory: pytest.TempPathFactory) -> System:
    webhook_tls = tls_endpoint(tmp_path_factory.mktemp("webhook-tls"))
    allocator_port = free_port()
    xds_env = xds_settings()
    running = {
        "allocator": run_module_service(
            "allocator",
            rbac=True,
            env={
                "TOLLGATE_ALLOCATOR_GRPC_ADDRESS": f"127.0.0.1:{allocator_port}",
                "TOLLGATE_ALLOCATOR_XDS_ADDRESS": f"127.0.0.1:{xds_env['TOLLGATE_XDS_GRPC_PORT']}",
                "TOLLGATE_ALLOCATOR_GUE_ADDRESS": "192.168.1.40",
            },
        ),
        "jobs": run_module_service("jobs", rbac=True),
        "routedip": run_module_service(
            "routedip", rbac=True, env={"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": "tollgate-system"}
        ),
        "webhook": run_module_service(
            "webhook",
            rbac=True,
            env=webhook_env(webhook_tls, TOLLGATE_WEBHOOK_LABEL_SELECTOR="tollgate.io/e2e=operability"),
        ),
        "xds": start_xds(run_module_service, xds_env).process,
    }
    # One admission review (a body that is not one: outcome bad-request), so the webhook has a metric of its own.
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
    review = urllib.request.Request(f"{webhook_tls.url}{KINDS[0].path('validate')}", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(review, timeout=5, context=insecure)
    assert refused.value.code == 400
    return System(running, {"allocator": allocator_port, "xds": int(xds_env["TOLLGATE_XDS_GRPC_PORT"])})


@pytest.mark.parametrize("service", SERVICES)
def test_metrics_are_only_tollgate_names_and_each_is_in_the_reference_table(system: System, service: str) -> None:
    names = scraped_names(system.processes[service])
    assert {m.exported for m in PROCESS} <= names, "the process collector's metrics, under the prefix"
    assert sorted(n for n in names if not n.startswith("tollgate_")) == []
    known = {series for metric in declared(service) for series in metric.series}
    assert sorted(names - known) == [], "served but not declared (so not in docs/operations.md)"
    table = (repo_root() / "docs" / "operations.md").read_text()
    assert all(f"| `{m.exported}` |" in table for m in declared(service))


def test_the_webhook_serves_its_admission_latency(system: System) -> None:
    assert "tollgate_webhook_admission_seconds_count" in scraped_names(system.processes["webhook"])


@pytest.mark.parametrize(("service", "name"), [("allocator", ALLOCATOR_SERVICE), ("xds", ADS_SERVICE)])
async def test_grpc_health_and_reflection_without_the_token(system: System, service: str, name: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{system.grpc_ports[service]}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for checked in ("", name):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=checked), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, checked
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        stream = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        listed = {s.name for s in (await stream.read()).list_services_response.service}
        assert listed == {name, *STANDARD}
        stream = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol=name)])
        )
        assert (await stream.read()).file_descriptor_response.file_descriptor_proto, f"no descriptor for {name}"


def test_charts_render_a_service_monitor_when_asked_and_none_by_default() -> None:
    for service in SERVICES:
        assert [o for o in render_chart(service) if o["kind"] in ("ServiceMonitor", "PodMonitor")] == []
        values = {"metrics": {"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prom"}}}}
        objects = render_chart(service, values=values)
        (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
        (svc,) = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == f"tollgate-{service}"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prom"
        assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["spec"]["selector"].items()
        assert "health" in {p["name"] for p in svc["spec"]["ports"]}
        assert monitor["spec"]["endpoints"] == [{"port": "health", "path": "/metrics", "interval": "15s"}]


def test_the_allocator_chart_renders_a_pod_monitor_for_envoy_admin_stats() -> None:
    objects = render_chart("allocator", values={"metrics": {"envoyPodMonitor": {"enabled": True}}})
    (monitor,) = [o for o in objects if o["kind"] == "PodMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"] == {ENVOY_PROXY_LABEL: "true"}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "admin", "path": "/stats/prometheus", "interval": "30s"}]
    # The pods it selects are the allocator's Envoy pods; Prometheus finds the port by its name, so the Envoy
    # container must name one `admin`, whatever its number: the number is the pod's to say.
    pod = proxy.deployment(ENVOY_LOAD_BALANCER, "acme", LBServiceGroupSpec(), "bootstrap")["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (envoy,) = [c for c in pod["spec"]["containers"] if c["name"] == ENVOY_CONTAINER]
    named = {port["name"]: port for port in envoy.get("ports", [])}
    assert "admin" in named, f"the Envoy container names no port admin: {envoy.get('ports')}"
    admin = named["admin"]
    assert admin.get("protocol", "TCP") == "TCP"
    # That port is Envoy's admin listener, which no listener of a load balancer may take (the webhook refuses it).
    assert admin["containerPort"] == ADMIN_PORT


def test_xds_readiness_is_a_grpc_probe_and_the_allocator_keeps_http() -> None:
    def readiness(service: str) -> dict[str, object]:
        (deployment,) = [o for o in render_chart(service) if o["kind"] == "Deployment"]
        return dict(deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"])

    assert readiness("xds")["grpc"] == {"port": 18000}
    assert readiness("allocator")["httpGet"] == {"path": "/readyz", "port": "health"}


def test_the_dashboard_queries_only_declared_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for query in queries for name in re.findall(r"\btollgate_[a-z0-9_]+", query)}
    known = {series for service in SERVICES for metric in declared(service) for series in metric.series}
    assert used and sorted(used - known) == []
    headline = {
        "tollgate_xds_convergence_seconds_bucket",
        "tollgate_xds_nacks_total",
        "tollgate_allocator_tunnel_ids_allocated_total",
        "tollgate_routedip_moves_total",
        "tollgate_webhook_admission_seconds_bucket",
    }
    assert headline <= used
