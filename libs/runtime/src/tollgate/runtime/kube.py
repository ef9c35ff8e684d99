"""Kubernetes client configuration: a kubeconfig file when given, in-cluster otherwise."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tollgate.models.base import now_rfc3339


def api_client(kubeconfig: Path | None = None) -> client.ApiClient:
    """An ApiClient for `kubeconfig`, else $KUBECONFIG, else the in-cluster service account."""
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    configuration = client.Configuration()
    if path is not None:
        config.load_kube_config(config_file=str(path), client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def own_pod_reference() -> dict[str, Any] | None:
    """An ownerReference to the pod this process runs in (POD_NAME and POD_UID from the Downward API, as the
    charts set them), so that what the process makes for itself goes with its pod; None outside a pod."""
    name, uid = os.environ.get("POD_NAME"), os.environ.get("POD_UID")
    if not name or not uid:
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def is_conflict(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 409


def is_not_found(error: BaseException) -> bool:
    return isinstance(error, client.ApiException) and error.status == 404


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """An Event's `involvedObject` for `obj`: its apiVersion, kind, name, namespace and uid (those it has)."""
    meta = obj.get("metadata") or {}
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }
    return {key: str(value) for key, value in reference.items() if value}


def event_body(
    involved: Mapping[str, str], type_: str, reason: str, message: str, component: str, namespace: str
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object reference), to create in `namespace`."""
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {key: value for key, value in involved.items() if value},
        "type": type_,
        "reason": reason,
        "message": message[:1024],  # the API server's limit
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "action": reason,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
