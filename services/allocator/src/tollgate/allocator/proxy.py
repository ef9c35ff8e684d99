"""The Envoy proxies of a load balancer or a GWProxy, planned without I/O: the bootstrap ConfigMap, the Deployment,
the conditions."""

from __future__ import annotations

import hashlib
from ipaddress import IPv4Address
from typing import Any

import yaml

from tollgate.models.envoy import (
    ADMIN_PORT,
    BOOTSTRAP_KEY,
    ENVOY_CONTAINER,
    ENVOY_PROXY_LABEL,
    ads_bootstrap,
    fill_bootstrap,
)
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    GWPROXY_LABEL,
    LOAD_BALANCER_LABEL,
    DNSEndpoint,
    LBServiceGroupSpec,
    ProxyStatus,
    RemoteEndpointSpec,
    ServicePort,
    account_of,
    reaches,
    render_dns_name,
    target_of,
)

JSON = dict[str, Any]
BOOTSTRAP_DIR = "/etc/envoy"
NODE_ID = "$(POD_NAME).$(POD_NAMESPACE)"
CONFIG_HASH_ANNOTATION = "tollgate.io/bootstrap-hash"
ALLOCATED, PROXY_READY, READY = "Allocated", "ProxyReady", "Ready"
ENDPOINTS_MATCHED = "EndpointsMatched"


# The label that ties Envoy pods to their object, by the object's kind.
MAX_LABEL_VALUE = 63
OWNER_LABELS = {"LoadBalancer": LOAD_BALANCER_LABEL, "GWProxy": GWPROXY_LABEL}


def proxy_name(obj: JSON) -> str:
    """`<lb>-envoy` for a load balancer, `<gwproxy>-gwproxy-envoy` for a GWProxy (they may share a name)."""
    name = obj["metadata"]["name"]
    return f"{name}-envoy" if obj["kind"] == "LoadBalancer" else f"{name}-gwproxy-envoy"


def owner_labels(obj: JSON, account: str) -> dict[str, str]:
    return {OWNER_LABELS[obj["kind"]]: obj["metadata"]["name"], ACCOUNT_LABEL: account}


def dns_endpoint(obj: JSON, group: LBServiceGroupSpec, address: IPv4Address | None) -> DNSEndpoint:
    """The object's DNS record from its group's endpoint-template: the dnsName filled in, the public address (when
    it has one) the target."""
    meta, spec = obj["metadata"], obj["spec"]
    template = group.endpoint_template
    variables = {
        "LBName": meta["name"],
        "LBSGName": spec["service-group"],
        "PureLBServiceName": spec.get("display-name") or meta["name"],
        "Account": account_of(meta["namespace"]),
    }
    fields = template.model_dump(by_alias=True, exclude_none=True) | {
        "dnsName": render_dns_name(template.dns_name, variables),
        "targets": [str(address)] if address else [],
    }
    return DNSEndpoint.model_validate(fields)


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"xds address {address!r}: expected HOST:PORT")
    return host, int(port)


def bootstrap(group: LBServiceGroupSpec, load_balancer: str, xds_address: str) -> str:
    """The group's bootstrap template with {node_id}, {cluster}, {xds_address}, {xds_host} and {xds_port} filled
    in, or an ADS bootstrap pointing at the xDS server."""
    host, port = split_address(xds_address)
    if group.envoy_bootstrap is None:
        return yaml.safe_dump(ads_bootstrap(host, port), sort_keys=False)
    values = {"node_id": NODE_ID, "cluster": load_balancer, "xds_address": xds_address}
    return fill_bootstrap(group.envoy_bootstrap, values | {"xds_host": host, "xds_port": str(port)})


def owner_reference(obj: JSON) -> JSON:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def config_map(lb: JSON, account: str, text: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": proxy_name(lb),
            "namespace": lb["metadata"]["namespace"],
            "labels": owner_labels(lb, account),
            "ownerReferences": [owner_reference(lb)],
        },
        "data": {BOOTSTRAP_KEY: text},
    }


def deployment(lb: JSON, account: str, group: LBServiceGroupSpec, text: str) -> JSON:
    """The Envoy proxy Deployment: the group's image and resources, the load balancer's replica count; a changed
    bootstrap rolls the pods."""
    name = lb["metadata"]["name"]
    owned = owner_labels(lb, account)
    labels = {ENVOY_PROXY_LABEL: "true", **owned}
    selector = {OWNER_LABELS[lb["kind"]]: name, ENVOY_PROXY_LABEL: "true"}
    downward = [
        {"name": var, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for var, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"))
    ]
    container = {
        "name": ENVOY_CONTAINER,
        "image": group.envoy_image,
        "args": ["-c", f"{BOOTSTRAP_DIR}/{BOOTSTRAP_KEY}", "--service-node", NODE_ID, "--service-cluster", name],
        "env": downward,
        "ports": [{"name": "admin", "containerPort": ADMIN_PORT, "protocol": "TCP"}],
        "resources": group.envoy_resources.to_wire(),
        "volumeMounts": [{"name": "bootstrap", "mountPath": BOOTSTRAP_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": proxy_name(lb),
            "namespace": lb["metadata"]["namespace"],
            "labels": owned,
            "ownerReferences": [owner_reference(lb)],
        },
        "spec": {
            "replicas": replicas(lb, group),
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {CONFIG_HASH_ANNOTATION: hashlib.sha256(text.encode()).hexdigest()[:16]},
                },
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "bootstrap", "configMap": {"name": proxy_name(lb)}}],
                },
            },
        },
    }


def replicas(lb: JSON, group: LBServiceGroupSpec) -> int:
    """The load balancer's own replica count (copied from its group when it was created), else the group's."""
    own = lb["spec"].get("envoy-replica-count")
    return group.envoy_replica_count if own is None else int(own)


def proxy_readiness(deployment_obj: JSON | None) -> tuple[bool, str, str]:
    """ProxyReady from the Deployment: (ready, reason, message)."""
    if deployment_obj is None:
        return False, "ProxyMissing", "the Envoy proxy Deployment does not exist yet"
    wanted = int(deployment_obj.get("spec", {}).get("replicas", 1))
    status = deployment_obj.get("status") or {}
    ready = int(status.get("readyReplicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    current = status.get("observedGeneration", 0) >= deployment_obj["metadata"].get("generation", 0)
    message = f"{ready}/{wanted} Envoy replicas ready"
    if wanted == 0:
        return False, "NoReplicas", "the service group asks for 0 Envoy replicas"
    if current and ready >= wanted and updated >= wanted:
        return True, "ProxyAvailable", message
    return False, "ProxyProgressing", message


Verdict = tuple[bool, str, str]  # (ok, reason, message) of a condition


def name_not_a_label(obj: JSON) -> str | None:
    """Why the object's name cannot label its Envoy pods (a label value has at most 63 characters), or None."""
    name = obj["metadata"]["name"]
    if len(name) <= MAX_LABEL_VALUE:
        return None
    kind = "load balancer" if obj["kind"] == "LoadBalancer" else obj["kind"]
    return (
        f"metadata.name: {len(name)} characters; a {kind}'s name labels its Envoy pods and must have at most "
        f"{MAX_LABEL_VALUE}: no Envoy proxy is made for it"
    )


def set_conditions(status: ProxyStatus, generation: int | None, allocated: Verdict, proxy_ready: Verdict) -> None:
    """Allocated and ProxyReady of a load balancer or GWProxy, and Ready from them."""
    status.observed_generation = generation
    for name, (ok, reason, message) in ((ALLOCATED, allocated), (PROXY_READY, proxy_ready)):
        status.set_condition(name, "True" if ok else "False", reason, message, generation)
    settle_ready(status, generation)


def settle_ready(status: ProxyStatus, generation: int | None) -> None:
    """Ready is Allocated and ProxyReady; when not, the first failing one says why."""
    for name in (ALLOCATED, PROXY_READY):
        condition = status.condition(name)
        if condition is None:
            status.set_condition(READY, "Unknown", "Pending", f"{name} is not known yet", generation)
            return
        if condition.status != "True":
            status.set_condition(READY, "False", condition.reason or "Pending", condition.message, generation)
            return
    status.set_condition(READY, "True", "Ready", "service ID allocated and Envoy proxies ready", generation)


def endpoint_match(public_ports: list[ServicePort], reps: list[JSON]) -> tuple[bool, str, str]:
    """EndpointsMatched: whether every RemoteEndpoint is reached by a public port's targetPort (same protocol, and
    its port's number or name is the target); the ones that are not are named, since no listener forwards to them."""
    unmatched = []
    for rep in sorted(reps, key=lambda r: str(r["metadata"]["name"])):
        spec = RemoteEndpointSpec.model_validate(rep["spec"])
        if not any(reaches(public, spec.port) for public in public_ports):
            named = f" ({spec.port.name})" if spec.port.name else ""
            unmatched.append(f"{rep['metadata']['name']} ({spec.address}:{spec.port.port}/{spec.port.protocol}{named})")
    if unmatched:
        targets = ", ".join(f"{p.port}/{p.protocol} -> {target_of(p)}" for p in public_ports) or "none"
        message = (
            f"no public port reaches RemoteEndpoint {', '.join(unmatched)}: not forwarded to "
            f"(public ports and their targets: {targets})"
        )
        return False, "EndpointMatchesNoPort", message
    return True, "AllEndpointsMatched", "every RemoteEndpoint is reached by a public port"
