"""One running system for the chaos suite, and its table printed at the end of the run.

The system runs on an embedded cluster of its own with the real node (the suite freezes its API server): an Envoy
container runs there, while KWOK's nodes (droplets of the fake DigitalOcean) take the Goops' pods and back the routed
IPs. Allocator, xds, routedip (DigitalOcean provider against the fake DigitalOcean API) and jobs run as processes,
each under its chart's RBAC and through a FaultProxy of its own in front of the API server. They keep the dev
endpoint policy: the endpoints registered here only take tunnel IDs. The webhook is not run (it needs certificates
and a registration; its watch on a half-open connection is tests/e2e/test_watch_faults.py's subject): the second
RoutedIP of one address goes straight in, as one its lagging cache lets through would.
"""

from __future__ import annotations

import base64
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tollgate.models.routedip import GROUP as ROUTEDIP_GROUP
from tollgate.models.routedip import VERSION as ROUTEDIP_VERSION
from tollgate.runtime.kube import api_client
from tollgate.testing import agents
from tollgate.testing.chaos import (
    DO_CLASS,
    DO_SECRET,
    DO_TOKEN,
    DROPLETS,
    LEASE_SECONDS,
    NAMESPACE,
    REQUEST_SECONDS,
    SERVICES,
    TABLE,
    WATCH_SECONDS,
    System,
)
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.echo import UDPEcho
from tollgate.testing.fakedo import FakeDigitalOceanThread
from tollgate.testing.faultproxy import FaultProxy, proxied_kubeconfig, server_of
from tollgate.testing.fixtures import embedded_cluster
from tollgate.testing.nodes import HOLD_POLICY_OBJECTS, Nodes
from tollgate.testing.rbac import NAMESPACE as SYSTEM_NAMESPACE
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import allocator_env, tls_endpoint
from tollgate.testing.xds import Xds, envoy_pod, running_envoy, xds_settings


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TABLE.rows:
        terminalreporter.write_sep("=", "chaos suite: faults and recovery")
        terminalreporter.write_line(TABLE.render())


def _settings(name: str, kubeconfig: Path) -> dict[str, str]:
    prefix = f"TOLLGATE_{name.upper()}_"
    return {
        "KUBECONFIG": str(kubeconfig),
        f"{prefix}KUBECONFIG": str(kubeconfig),
        f"{prefix}WATCH_TIMEOUT_SECONDS": str(WATCH_SECONDS),
        f"{prefix}KUBE_REQUEST_TIMEOUT_SECONDS": str(REQUEST_SECONDS),
        f"{prefix}LOG_LEVEL": "INFO",
    }


def _account(cluster: EmbeddedCluster, name: str) -> None:
    """An EPIC account `name` with a service group and a load balancer `lb` (no Envoy replicas)."""
    namespace = f"epic-{name}"

    def epic(kind: str, object_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "epic.acnodal.io/v1", "kind": kind,
                "metadata": {"name": object_name, "namespace": namespace}, "spec": spec}  # fmt: skip

    documents = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        epic("Account", name, {}),
        epic("LBServiceGroup", "web", {"envoy-replica-count": 0}),
        epic("LoadBalancer", "lb", {"public-ports": [{"port": 80}], "service-group": "web"}),
    ]
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    workdir, name = tmp_path_factory.mktemp("kwok-chaos"), f"tollgate-chaos-{os.getpid()}"
    with embedded_cluster(workdir, name, real_node=True, fake_nodes_take_pods=True) as cluster:
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(HOLD_POLICY_OBJECTS))
        yield cluster


@pytest.fixture(scope="module")
async def system(chaos_cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[System]:
    cluster = chaos_cluster
    directory = tmp_path_factory.mktemp("chaos")
    kube = api_client(cluster.kubeconfig)
    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
        cluster.kubectl("create", "namespace", namespace, check=False)
    token = base64.b64encode(DO_TOKEN.encode()).decode()
    core.create_namespaced_secret(
        SYSTEM_NAMESPACE, client.V1Secret(metadata=client.V1ObjectMeta(name=DO_SECRET), data={"token": token})
    )
    allocator_tls = tls_endpoint(directory / "allocator-tls")
    settings = {
        "xds": {**xds_settings(cluster.host_address), "TOLLGATE_XDS_RESYNC_PERIOD_S": "5"},
        "jobs": {},
        "routedip": {"TOLLGATE_ROUTEDIP_SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "TOLLGATE_ROUTEDIP_LOG_FORMAT": "text"},
        "allocator": allocator_env(allocator_tls, TOLLGATE_ALLOCATOR_LEASE_SECONDS=str(LEASE_SECONDS)),
    }
    services: dict[str, ServiceProcess] = {}
    async with contextlib.AsyncExitStack() as stack:
        fake = stack.enter_context(FakeDigitalOceanThread(DO_TOKEN))
        fake.add_droplets(*DROPLETS)
        proxies: dict[str, FaultProxy] = {}
        for name in SERVICES:
            as_account = service_account_kubeconfig(cluster, name, directory)
            proxies[name] = stack.enter_context(FaultProxy(*server_of(as_account)))
            via = proxied_kubeconfig(as_account, proxies[name], directory / f"{name}-via-proxy.kubeconfig")
            trust = fake.trust_settings() if name == "routedip" else {}
            services[name] = ServiceProcess(
                name, via, directory / "logs", env={**_settings(name, via), **settings[name], **trust}
            )

        def stop_services() -> None:
            for service in services.values():
                service.stop()

        stack.callback(stop_services)
        for service in services.values():
            service.start()
        for service in services.values():
            service.wait_ready(timeout=120)
        xds_env = settings["xds"]
        xds = Xds(
            services["xds"],
            cluster.host_address,
            int(xds_env["TOLLGATE_XDS_GRPC_PORT"]),
            int(xds_env["TOLLGATE_XDS_API_PORT"]),
        )
        echo_target = cluster.remote_address()
        await stack.enter_async_context(UDPEcho(echo_target, 1234, name="echo"))
        envoy_pod(core, NAMESPACE, "edge", xds, {"app": "edge"}, delta=True)
        envoy_ip, envoy_container = await running_envoy(core, NAMESPACE, "edge")
        account = f"chaos-{uuid.uuid4().hex[:5]}"
        _account(cluster, account)
        agent = agents.Agent.mint(core, account, allocator_tls.ca_file)
        body = {
            "apiVersion": f"{ROUTEDIP_GROUP}/{ROUTEDIP_VERSION}",
            "kind": "ClusterRoutedIPClass",
            "metadata": {"name": DO_CLASS},
            "spec": {
                "className": DO_CLASS,
                "provider": "digitalocean",
                "moveCooldownSeconds": 0,
                "fromSecretsRef": [{"name": DO_SECRET, "namespace": SYSTEM_NAMESPACE}],
                "digitalocean": {"apiURL": fake.url},
            },
        }
        custom.create_cluster_custom_object(ROUTEDIP_GROUP, ROUTEDIP_VERSION, "clusterroutedipclasses", body)
        web = {
            "metadata": {"name": "web"},
            "spec": {"type": "NodePort", "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
        }  # fmt: skip
        core.create_namespaced_service(NAMESPACE, web)  # type: ignore[arg-type]
        built = System(
            cluster,
            custom,
            services,
            proxies,
            fake,
            Nodes(cluster, core),
            echo_target,
            envoy_ip,
            envoy_container,
            allocator_tls.port,
            agent,
            account,
        )
        yield built
        built.nodes.restore()


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest, system: System) -> Iterator[None]:
    """The services' logs (the tail of each) when a row failed."""
    yield
    if any(getattr(getattr(request.node, f"report_{when}", None), "failed", False) for when in ("setup", "call")):
        print(system.service_logs())
