"""pytest fixtures for tests that need a cluster (registered as the `tollgate` pytest plugin).

- `cluster`: one embedded cluster for the whole session, CRDs installed. Set TOLLGATE_E2E_KUBECONFIG
  to run against a cluster you started yourself (`make cluster`, or kind) instead.
- `namespace`: a fresh namespace per test, deleted afterwards; `other_namespace` a second one (another tenant).
- `run_service`: start a tollgate service as a subprocess; its logs are printed when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tollgate.runtime.kube import api_client
from tollgate.testing.cluster import EmbeddedCluster, endpoint_policy_env
from tollgate.testing.faultproxy import FaultProxy, proxied_kubeconfig
from tollgate.testing.rbac import service_account_kubeconfig
from tollgate.testing.services import ServiceProcess

NODES = 3


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"report_{report.when}", report)


def _failed(request: pytest.FixtureRequest) -> bool:
    return any(getattr(getattr(request.node, f"report_{when}", None), "failed", False) for when in ("setup", "call"))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    external = os.environ.get("TOLLGATE_E2E_KUBECONFIG")
    if external:
        reused = EmbeddedCluster("external", Path("/nonexistent"), Path(external))
        reused.wait_ready(60)
        reused.install_crds()
        yield reused
        return
    with embedded_cluster(tmp_path_factory.mktemp("kwok"), f"tollgate-test-{os.getpid()}") as embedded:
        yield embedded


@contextlib.contextmanager
def embedded_cluster(
    workdir: Path, name: str, nodes: int = NODES, real_node: bool = False, fake_nodes_take_pods: bool = False
) -> Iterator[EmbeddedCluster]:
    """A cluster of `nodes` KWOK nodes (and the real node), CRDs installed, for a fixture to yield; deleted after."""
    embedded = EmbeddedCluster(
        name, workdir, workdir / "kubeconfig", real_node=real_node, fake_nodes_take_pods=fake_nodes_take_pods
    )
    try:
        seconds = embedded.up(nodes)
        print(f"\nembedded cluster ready in {seconds:.1f} s ({nodes} nodes{', the real node' if real_node else ''})")
        embedded.install_crds()
        yield embedded
    finally:
        embedded.down()


@pytest.fixture(scope="session")
def kube(cluster: EmbeddedCluster) -> client.ApiClient:
    return api_client(cluster.kubeconfig)


@pytest.fixture(scope="session")
def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


@pytest.fixture(scope="session")
def custom(kube: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube)


def _test_namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{stem}-{uuid.uuid4().hex[:5]}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"tollgate.io/test": "true"}))
    )
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    yield from _test_namespace(request, core)


@pytest.fixture
def other_namespace(request: pytest.FixtureRequest, core: client.CoreV1Api) -> Iterator[str]:
    yield from _test_namespace(request, core)


ServiceFactory = Callable[..., ServiceProcess]


class ServiceLauncher:
    """Starts tollgate services against `cluster` and stops them all at once; see `run_service`."""

    def __init__(self, cluster: EmbeddedCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.started: list[ServiceProcess] = []

    def __call__(
        self, name: str, *, rbac: bool = False, via: FaultProxy | None = None, **kwargs: Any
    ) -> ServiceProcess:
        kubeconfig = service_account_kubeconfig(self.cluster, name, self.workdir) if rbac else self.cluster.kubeconfig
        if via is not None:
            kubeconfig = proxied_kubeconfig(kubeconfig, via, self.workdir / f"{name}-via-{via.port}.kubeconfig")
        # The cluster's endpoint policy unless the test sets its own.
        kwargs["env"] = {**endpoint_policy_env(name, self.cluster.real_node), **kwargs.get("env", {})}
        service = ServiceProcess(name, kubeconfig, self.workdir / "logs", **kwargs)
        self.started.append(service)
        return service.start().wait_ready()

    def stop(self, show_logs: bool) -> None:
        for service in self.started:
            service.stop()
        if show_logs:
            for service in self.started:
                print(f"\n----- logs of {service.name} ({service.log_path}) -----\n{service.logs()[-20000:]}")


@pytest.fixture
def run_service(request: pytest.FixtureRequest, cluster: EmbeddedCluster, tmp_path: Path) -> Iterator[ServiceFactory]:
    """`run_service("jobs", rbac=True, env={...})` starts the service and waits for /readyz.

    With `rbac=True` the service authenticates as its chart's ServiceAccount, bound to exactly the
    chart's rules (rendered with helm), so a missing permission fails the test. With `via=proxy` (a running
    FaultProxy in front of the API server) it reaches the API server through the proxy.
    """
    launcher = ServiceLauncher(cluster, tmp_path)
    yield launcher
    launcher.stop(show_logs=_failed(request))


@pytest.fixture(scope="module")
def run_module_service(
    request: pytest.FixtureRequest, cluster: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceFactory]:
    """`run_service` for services a whole module shares; their logs are printed when any test of it failed."""
    launcher = ServiceLauncher(cluster, tmp_path_factory.mktemp("services"))
    failures = request.session.testsfailed
    yield launcher
    launcher.stop(show_logs=request.session.testsfailed > failures)
