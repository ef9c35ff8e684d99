"""The end-to-end tests whose pods run: one cluster for this directory, with the real node (tollgate.testing.node),
where every Envoy pod is a container of the Envoy image `make images` built. It overrides the session's `cluster`
(and what is built on it) for the tests here; it is torn down before the rest of tests/e2e starts theirs.

KWOK's fake nodes stay beside it for what needs many nodes: a pod meant to run "elsewhere" (a worker a test plays
with an echo server at its IP) goes to one of them (tollgate.testing.xds.kwok_pod).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tollgate.runtime.kube import api_client
from tollgate.testing import requirements
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import embedded_cluster


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    requirements.require_real_node("tests/e2e/node")  # skipped here without it, failed in CI
    with embedded_cluster(tmp_path_factory.mktemp("real-node"), "tollgate-node-tests", real_node=True) as embedded:
        yield embedded


@pytest.fixture(scope="package")
def kube(cluster: EmbeddedCluster) -> client.ApiClient:
    return api_client(cluster.kubeconfig)


@pytest.fixture(scope="package")
def core(kube: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube)


@pytest.fixture(scope="package")
def custom(kube: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube)
