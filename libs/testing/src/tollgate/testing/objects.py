"""Objects of tollgate's kinds as a user would write them, for tests that create them through the API server, and
what is stored, read back."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from tollgate.models import ALL_KINDS
from tollgate.models.routedip import GROUP as ROUTEDIP_GROUP
from tollgate.models.routedip import VERSION as ROUTEDIP_VERSION
from tollgate.runtime.kube import api_client

Obj = dict[str, Any]
EPIC_API_VERSION = "epic.acnodal.io/v1"
ROUTEDIP_API_VERSION = f"{ROUTEDIP_GROUP}/{ROUTEDIP_VERSION}"
RESOURCES = {model.resource.kind: model.resource for model in ALL_KINDS}


def load_balancer(namespace: str, name: str = "lb", spec: Obj | None = None) -> Obj:
    return {
        "apiVersion": EPIC_API_VERSION,
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"public-address": "192.168.77.2", "service-group": "sample", "public-ports": [{"port": 80}]}
        | (spec or {}),
    }


def gwproxy(namespace: str, spec: Obj, name: str = "gwp") -> Obj:
    return {**load_balancer(namespace, name, spec), "kind": "GWProxy"}


def listener(name: str, port: int, protocol: str = "udp", address: str = "10.0.0.1", **cluster: Any) -> Obj:
    """A VirtualService listener on `port` whose cluster has one endpoint at `address`:7000."""
    endpoint = {"name": f"{name}-e", "host": {"address": address}, "port": 7000}
    cluster = {"name": f"{name}-c", "endpoints": [endpoint], **cluster}
    return {"name": name, protocol: {"port": port, "cluster": cluster}}


def virtual_service(namespace: str, *listeners: Obj, name: str = "vs", selector: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": "ingress"} if selector is None else selector, "listeners": list(listeners)},
    }


def routed_ip_class(name: str, provider: str = "local", **spec: Any) -> Obj:
    return {
        "apiVersion": ROUTEDIP_API_VERSION,
        "kind": "ClusterRoutedIPClass",
        "metadata": {"name": name},
        "spec": {"className": name, "provider": provider, **spec},
    }


def routed_ip(namespace: str, address: str, class_name: str, service_namespace: str, name: str = "rip") -> Obj:
    return {
        "apiVersion": ROUTEDIP_API_VERSION,
        "kind": "RoutedIP",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "className": class_name,
            "routedIP": address,
            "serviceRef": {"serviceName": "web", "namespace": service_namespace},
        },
    }


def remote_endpoint(namespace: str, address: str, load_balancer: str = "lb", name: str = "rep") -> Obj:
    return {
        "apiVersion": EPIC_API_VERSION,
        "kind": "RemoteEndpoint",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"load-balancer": load_balancer, "address": address, "port": {"port": 8080}},
    }


def account(namespace: str, name: str) -> Obj:
    return {"apiVersion": EPIC_API_VERSION, "kind": "Account", "metadata": {"name": name, "namespace": namespace}}


def named(obj: Obj, name: str, namespace: str | None = None) -> Obj:
    """`obj` renamed in place (and moved to `namespace`, when given)."""
    obj["metadata"]["name"] = name
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return obj


def with_value(obj: Obj, path: str, value: Any) -> Obj:
    """`obj` with the value at a dotted path (list indexes as numbers) replaced."""
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target: Any = obj
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return obj


def create(custom: client.CustomObjectsApi, obj: Obj, dry_run: bool = False) -> Obj:
    """Create `obj` through the API server (admission included); the object as stored."""
    info = RESOURCES[obj["kind"]]
    dry = "All" if dry_run else None
    if info.scope == "Cluster":
        return cast(Obj, custom.create_cluster_custom_object(info.group, info.version, info.plural, obj, dry_run=dry))
    namespace = obj["metadata"]["namespace"]
    return cast(
        Obj, custom.create_namespaced_custom_object(info.group, info.version, namespace, info.plural, obj, dry_run=dry)
    )


def create_at_once(kubeconfig: Path, bodies: list[Obj]) -> list[Obj]:
    """Send the objects to the API server at the same instant, each from a client and thread of its own released
    together (as users racing each other would); the objects as stored."""
    start = threading.Barrier(len(bodies))

    def send(body: Obj) -> Obj:
        with api_client(kubeconfig) as kube:
            custom = client.CustomObjectsApi(kube)
            start.wait()
            return create(custom, body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(send, bodies))


def read(custom: client.CustomObjectsApi, kind: str, name: str, namespace: str | None = None) -> Obj | None:
    """The stored object, or None when there is none."""
    info = RESOURCES[kind]
    try:
        if namespace is None:
            return cast(Obj, custom.get_cluster_custom_object(info.group, info.version, info.plural, name))
        return cast(Obj, custom.get_namespaced_custom_object(info.group, info.version, namespace, info.plural, name))
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def config_map_data(core: client.CoreV1Api, name: str, namespace: str) -> dict[str, str]:
    """A ConfigMap's data (what the routedip local provider records, among others), empty when there is none."""
    try:
        return dict(core.read_namespaced_config_map(name, namespace).data or {})
    except client.ApiException as error:
        if error.status == 404:
            return {}
        raise
