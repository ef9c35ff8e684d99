"""Kubernetes client configuration: a kubeconfig file when given, in-cluster otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config


def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """An ApiClient for `kubeconfig`, else $KUBECONFIG, else the in-cluster service account."""
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    configuration = client.Configuration()
    if path is not None:
        config.load_kube_config(config_file=str(path), client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def is_conflict(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 409


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 404
