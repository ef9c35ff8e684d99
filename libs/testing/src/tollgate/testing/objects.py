"""Objects of tollgate's kinds as a user would write them, for tests that create them through the API server."""

from __future__ import annotations

import copy
from typing import Any

from tollgate.models.routedip import GROUP as ROUTEDIP_GROUP
from tollgate.models.routedip import VERSION as ROUTEDIP_VERSION

Obj = dict[str, Any]
EPIC_API_VERSION = "epic.acnodal.io/v1"
ROUTEDIP_API_VERSION = f"{ROUTEDIP_GROUP}/{ROUTEDIP_VERSION}"


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


def with_value(obj: Obj, path: str, value: Any) -> Obj:
    """`obj` with the value at a dotted path (list indexes as numbers) replaced."""
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    target: Any = obj
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return obj
