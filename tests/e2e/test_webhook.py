"""The admission webhook registered for real with the embedded cluster's API server.

Each test runs its own webhook process, under its chart's ServiceAccount, and Mutating/ValidatingWebhookConfigurations
that match only objects carrying the test's label (objectSelector), so nothing else in the shared cluster goes through
them; the configurations are deleted in teardown.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from tollgate.models import ALL_KINDS, ClusterRoutedIPClass, kind_for
from tollgate.models.envoy import ADMIN_PORT, XDS_CLUSTER
from tollgate.testing import objects
from tollgate.testing.cluster import EmbeddedCluster
from tollgate.testing.fixtures import ServiceFactory
from tollgate.testing.objects import with_value
from tollgate.testing.services import ServiceProcess
from tollgate.testing.tls import tls_endpoint, webhook_env
from tollgate.testing.tools import repo_root
from tollgate.testing.wait import wait_for
from tollgate.webhook.k8s import register, unregister
from tollgate.webhook.registration import Registration

LABEL = "webhook.tollgate.io/test"
Obj = dict[str, Any]
INFO = {model.resource.kind: model.resource for model in ALL_KINDS}


@dataclass
class Webhook:
    label: str
    process: ServiceProcess
    custom: client.CustomObjectsApi

    def labelled(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {}).setdefault("labels", {})[LABEL] = self.label
        return obj

    def create(self, obj: Obj, dry_run: bool = False) -> Obj:
        """Create `obj` (labelled for this webhook) through the API server; the object as stored."""
        return objects.create(self.custom, self.labelled(obj), dry_run)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        return objects.read(self.custom, kind, name, namespace)

    def refusal(self, create: Callable[[], Any]) -> str:
        """The message the API server answers `create` with; fails when it is accepted."""
        try:
            create()
        except client.ApiException as error:
            return str(json.loads(error.body or "{}")["message"])
        raise AssertionError("accepted")


def goop(namespace: str, name: str = "g", **spec: Any) -> Obj:
    return {
        "apiVersion": "goop.example.com/v1alpha1",
        "kind": "Goop",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"cmd": "echo hi", **spec},
    }


@pytest.fixture
def webhook(run_service: ServiceFactory, kube: client.ApiClient, tmp_path: Path) -> Iterator[Webhook]:
    """A webhook process of the test's own, registered for objects with the test's label only."""
    label = uuid.uuid4().hex[:12]
    served = tls_endpoint(tmp_path / f"tls-{label}")
    process = run_service(
        "webhook", rbac=True, env=webhook_env(served, TOLLGATE_WEBHOOK_LABEL_SELECTOR=f"{LABEL}={label}")
    )
    registration = Registration(
        ca_bundle=served.ca,
        url=served.url,
        name=f"tollgate-webhook-e2e-{label}",
        object_selector={"matchLabels": {LABEL: label}},
    )
    webhook = Webhook(label, process, client.CustomObjectsApi(kube))
    register(kube, registration)
    try:
        # The API server picks new configurations up through its own informer: wait until ours is in force.
        probe = goop("default", f"probe-{label}", cmd=" ")
        wait_for(
            lambda: "must not be blank" in webhook.refusal(lambda: webhook.create(probe, dry_run=True)),
            "the webhook configurations to be in force",
            timeout=30,
            ignore=(AssertionError,),
        )
        yield webhook
    finally:
        unregister(kube, registration.name)
        info = ClusterRoutedIPClass.resource
        webhook.custom.delete_collection_cluster_custom_object(
            info.group, info.version, info.plural, label_selector=f"{LABEL}={label}"
        )


# ---- every invalid object is refused with its message, and nothing of it is stored ----


@dataclass(frozen=True)
class Case:
    id: str
    obj: Obj
    message: str


def _lb(namespace: str, name: str = "lb", spec: Obj | None = None) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LoadBalancer",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"public-address": "192.168.77.2", "service-group": "sample", "public-ports": [{"port": 80}]}
        | (spec or {}),
    }


def _gwp(namespace: str, spec: Obj) -> Obj:
    return {**_lb(namespace, "gwp", spec), "kind": "GWProxy"}


def _listener(name: str, port: int, protocol: str = "udp", **cluster: Any) -> Obj:
    return {
        "name": name,
        protocol: {
            "port": port,
            "cluster": {
                "name": f"{name}-c",
                "endpoints": [{"name": f"{name}-e", "host": {"address": "10.0.0.1"}, "port": 7000}],
                **cluster,
            },
        },
    }


def _gw_listeners(*listeners: tuple[str, int, str]) -> Obj:
    return {"listeners": [{"name": name, "port": port, "protocol": protocol} for name, port, protocol in listeners]}


def _gwr(namespace: str, spec: Obj) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "GWRoute",
        "metadata": {"name": "gwr", "namespace": namespace},
        "spec": spec,
    }


def _http_route(parent: str, path: str = "/", weight: int = 1) -> Obj:
    rule = {"matches": [{"path": {"value": path}}], "backendRefs": [{"name": "web", "weight": weight}]}
    return {"http": {"parentRefs": [{"name": parent}], "rules": [rule]}}


def _gwes(namespace: str, address: str, parent: Obj | None = None, port: int = 8080) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "GWEndpointSlice",
        "metadata": {"name": "gwes", "namespace": namespace},
        "spec": {
            "parentRef": {"uid": "web"} if parent is None else parent,
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address]}],
            "ports": [{"port": port}],
        },
    }


def _vs(namespace: str, *listeners: Obj, selector: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "servicemesh.l7mp.io/v1",
        "kind": "VirtualService",
        "metadata": {"name": "vs", "namespace": namespace},
        "spec": {"selector": {"app": "ingress"} if selector is None else selector, "listeners": list(listeners)},
    }


def _class(name: str, spec: Obj | None = None) -> Obj:
    return {
        "apiVersion": "routedip.tollgate.io/v1alpha1",
        "kind": "ClusterRoutedIPClass",
        "metadata": {"name": name},
        "spec": {"className": name, "provider": "local"} | (spec or {}),
    }


def _rip(namespace: str, address: str, class_name: str) -> Obj:
    return {
        "apiVersion": "routedip.tollgate.io/v1alpha1",
        "kind": "RoutedIP",
        "metadata": {"name": "rip", "namespace": namespace},
        "spec": {
            "className": class_name,
            "routedIP": address,
            "serviceRef": {"serviceName": "s", "namespace": namespace},
        },
    }


def _epic(namespace: str, name: str = "epic") -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "EPIC",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
    }


def _account(namespace: str, name: str) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "Account",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
    }


def _group(namespace: str, name: str = "sample", spec: Obj | None = None) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "LBServiceGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or {},
    }


def _remote_endpoint(namespace: str, address: str) -> Obj:
    return {
        "apiVersion": "epic.acnodal.io/v1",
        "kind": "RemoteEndpoint",
        "metadata": {"name": "rep", "namespace": namespace},
        "spec": {"load-balancer": "lb", "address": address, "port": {"port": 8080}},
    }


def denied(kind: str, message: str) -> str:
    info = INFO[kind]
    return f'admission webhook "validate.{info.plural}.{info.group}" denied the request: {message}'


def defaulting(kind: str, message: str) -> str:
    """A denial by the mutating webhook: the model refuses the object before the CRD schema sees it."""
    info = INFO[kind]
    return f'admission webhook "default.{info.plural}.{info.group}" denied the request: {message}'


def schema(field: str, rule: str) -> str:
    """How the API server words a CRD schema violation."""
    return f"{field}: {rule}"


def cases(ns: str, label: str) -> list[Case]:
    """Invalid objects of every kind (at least 40); `existing-*` objects are created first (see prerequisites)."""
    cls = f"e2e-{label}"
    one = _listener("one", 4000)
    two = _listener("two", 4005)
    ports = "public-ports"
    hc = "spec.listeners[0].udp.cluster.health_check"
    host = "spec.listeners[0].udp.cluster.endpoints[0].host"
    unicast = "is not a unicast host address"
    existing = f"VirtualService {ns}/existing-vs"
    return [
        Case(
            "epic-name",
            _epic("epic", "other"),
            denied("EPIC", "metadata.name: only epic/epic may exist, not epic/other"),
        ),
        Case(
            "epic-namespace",
            _epic(ns),
            denied("EPIC", f"metadata.namespace: only epic/epic may exist, not {ns}/epic"),
        ),
        Case(
            "account-too-long",
            _account(ns, "a" * 59),
            denied("Account", f"metadata.name: the account's user namespace 'epic-{'a' * 59}' would be 64 characters"),
        ),
        Case(
            "account-dot",
            _account(ns, "acme.widgets"),
            denied("Account", "metadata.name: the account's user namespace 'epic-acme.widgets' is not a valid"),
        ),
        Case(
            "lb-unspecified-address",
            _lb(ns, spec={"public-address": "0.0.0.0"}),
            denied("LoadBalancer", f"spec.public-address: 0.0.0.0 {unicast}"),
        ),
        Case(
            "lb-multicast-address",
            _lb(ns, spec={"public-address": "224.0.0.5"}),
            denied("LoadBalancer", f"spec.public-address: 224.0.0.5 {unicast}"),
        ),
        Case(
            "lb-ipv6-address",
            _lb(ns, spec={"public-address": "2001:db8::1"}),
            defaulting("LoadBalancer", 'spec.public-address: Input is not a valid IPv4 address (got "2001:db8::1")'),
        ),
        Case(
            "lb: a public address another load balancer holds",
            _lb(ns, spec={"public-address": "192.168.77.8"}),
            denied(
                "LoadBalancer",
                f"spec.public-address: 192.168.77.8 is the public address of LoadBalancer {ns}/existing-lb already",
            ),
        ),
        Case(
            "lb-duplicate-port",
            _lb(ns, spec={ports: [{"port": 80}, {"port": 80, "protocol": "TCP"}]}),
            denied("LoadBalancer", "spec.public-ports[1]: duplicate port/protocol pair 80/TCP (spec.public-ports[0]"),
        ),
        Case(
            "lb-duplicate-name",
            _lb(ns, spec={ports: [{"name": "w", "port": 80}, {"name": "w", "port": 81}]}),
            denied("LoadBalancer", "spec.public-ports[1].name: duplicate port name 'w'"),
        ),
        Case(
            "lb-duplicate-node-port",
            _lb(ns, spec={ports: [{"port": 80, "nodePort": 30080}, {"port": 81, "nodePort": 30080}]}),
            denied("LoadBalancer", "spec.public-ports[1].nodePort: duplicate nodePort 30080/TCP"),
        ),
        Case(
            "lb-missing-group",
            _lb(ns, spec={"service-group": "nope"}),
            denied("LoadBalancer", "spec.service-group: LBServiceGroup 'nope' does not exist in the account's"),
        ),
        Case(
            "lb-port-range",
            _lb(ns, spec={ports: [{"port": 70000}]}),
            defaulting(
                "LoadBalancer", "spec.public-ports[0].port: Input should be less than or equal to 65535 (got 70000)"
            ),
        ),
        Case(
            "lb-port-as-string",
            _lb(ns, spec={ports: [{"port": "80"}]}),
            schema("spec.public-ports[0].port", 'Invalid value: "string": spec.public-ports[0].port in body must be'),
        ),
        Case(
            "lb-protocol",
            _lb(ns, spec={ports: [{"port": 80, "protocol": "ICMP"}]}),
            defaulting(
                "LoadBalancer", "spec.public-ports[0].protocol: Input should be 'TCP', 'UDP' or 'SCTP' (got \"ICMP\")"
            ),
        ),
        Case(
            "lb: a name too long for the label the allocator puts it in",
            _lb(ns, "l" * 64),
            denied("LoadBalancer", "metadata.name: 64 characters, above the 63 of a label value"),
        ),
        Case(
            "lb: a public port on the Envoy admin port",
            _lb(ns, spec={ports: [{"port": ADMIN_PORT}]}),
            denied("LoadBalancer", f"spec.public-ports[0].port: TCP port {ADMIN_PORT} is the Envoy admin port"),
        ),
        Case(
            "gwproxy: a name too long for the label the allocator puts it in",
            with_value(_gwp(ns, {}), "metadata.name", "g" * 64),
            denied("GWProxy", "metadata.name: 64 characters, above the 63 of a label value"),
        ),
        Case(
            "gwproxy: a gateway listener on the Envoy admin port",
            _gwp(ns, {"gateway": _gw_listeners(("admin", ADMIN_PORT, "HTTP"))}),
            denied("GWProxy", f"spec.gateway.listeners[0].port: TCP port {ADMIN_PORT} is the Envoy admin port"),
        ),
        Case(
            "vs: a cluster named like the bootstrap's xDS cluster",
            _vs(ns, with_value(_listener("xds", 4010), "udp.cluster.name", XDS_CLUSTER)),
            denied("VirtualService", f"spec.listeners[0].udp.cluster.name: {XDS_CLUSTER!r} is reserved"),
        ),
        Case(
            "gwproxy-missing-group",
            _gwp(ns, {"service-group": "nope"}),
            denied("GWProxy", "spec.service-group: LBServiceGroup 'nope' does not exist"),
        ),
        Case(
            "gwproxy-duplicate-port",
            _gwp(ns, {ports: [{"port": 443}, {"port": 443}]}),
            denied("GWProxy", "spec.public-ports[1]: duplicate port/protocol pair 443/TCP"),
        ),
        Case(
            "gwproxy: one listener per port",
            _gwp(ns, {"gateway": _gw_listeners(("a", 8080, "HTTP"), ("b", 8080, "TCP"))}),
            denied("GWProxy", "spec.gateway.listeners[1].port: port 8080 is taken by spec.gateway.listeners[0]"),
        ),
        Case(
            "gwproxy: above the account's proxyLimit",
            with_value(_gwp(ns, {"public-address": "192.168.77.4"}), "metadata.name", "gwp-over"),
            denied(
                "GWProxy",
                f"metadata.namespace: Account proxy limit exceeded: {ns} holds 1 GWProxies and Account {ns}'s "
                "spec.proxyLimit is 1",
            ),
        ),
        Case(
            "serviceprefix: outside namespace epic",
            {
                "apiVersion": "epic.acnodal.io/v1",
                "kind": "ServicePrefix",
                "metadata": {"name": "sp", "namespace": ns},
                "spec": {"public-pool": {"pool": "192.0.2.16/28"}},
            },
            denied("ServicePrefix", f"metadata.namespace: ServicePrefixes live in namespace epic, not {ns}"),
        ),
        Case(
            "gwroute: neither http nor tcp",
            _gwr(ns, {}),
            defaulting("GWRoute", "spec: exactly one of http, tcp must be set (got none)"),
        ),
        Case(
            "gwroute: no parentRefs",
            _gwr(ns, with_value(_http_route("existing-gwp"), "http.parentRefs", [])),
            denied("GWRoute", "spec.http.parentRefs: at least one parentRef is required"),
        ),
        Case(
            "gwroute: a path not starting with /",
            _gwr(ns, _http_route("existing-gwp", path="shop")),
            denied("GWRoute", "spec.http.rules[0].matches[0].path.value: 'shop' must start with '/'"),
        ),
        Case(
            "gwroute: a negative weight",
            _gwr(ns, _http_route("existing-gwp", weight=-1)),
            defaulting(
                "GWRoute", "spec.http.rules[0].backendRefs[0].weight: Input should be greater than or equal to 0"
            ),
        ),
        Case(
            "gwroute: a tcp route on an HTTP listener",
            _gwr(
                ns,
                {
                    "tcp": {
                        "parentRefs": [{"name": "existing-gwp", "sectionName": "web"}],
                        "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}],
                    }
                },
            ),
            denied(
                "GWRoute",
                "spec.tcp.parentRefs[0]: GWProxy 'existing-gwp' has no TCP listener 'web' to attach to ('web' is "
                "HTTP): a tcp route attaches to TCP listeners",
            ),
        ),
        Case(
            "gwendpointslice: an address not of its addressType",
            _gwes(ns, "10.0.0.300"),
            denied("GWEndpointSlice", "spec.endpoints[0].addresses[0]: '10.0.0.300' is not an IPv4 address"),
        ),
        Case(
            "gwendpointslice: no backend uid",
            _gwes(ns, "10.0.0.3", parent={"name": "web"}),
            denied("GWEndpointSlice", "spec.parentRef.uid: is required: GWRoute backendRefs name the backend by it"),
        ),
        Case(
            "gwendpointslice: port 0",
            _gwes(ns, "10.0.0.3", port=0),
            defaulting("GWEndpointSlice", "spec.ports[0].port: Input should be greater than or equal to 1 (got 0)"),
        ),
        Case(
            "remote-endpoint-address",
            _remote_endpoint(ns, "0.0.0.0"),
            denied("RemoteEndpoint", "spec.address: 0.0.0.0 is the unspecified address; endpoints must be reachable"),
        ),
        Case(
            "remote endpoint: a second object for one address, port and protocol",
            with_value(_remote_endpoint(ns, "192.168.1.44"), "metadata.name", "rep-twin"),
            denied(
                "RemoteEndpoint",
                "spec: endpoint 192.168.1.44:8080/TCP of load balancer 'lb' is registered already as RemoteEndpoint "
                "existing-rep: one RemoteEndpoint per address, port and protocol",
            ),
        ),
        Case(
            "vs-duplicate-listener",
            _vs(ns, one, with_value(two, "name", "one")),
            denied("VirtualService", "spec.listeners[1].name: duplicate listener name 'one' (spec.listeners[0].name"),
        ),
        Case(
            "vs-duplicate-cluster",
            _vs(ns, one, with_value(two, "udp.cluster.name", "one-c")),
            denied("VirtualService", "spec.listeners[1].udp.cluster.name: duplicate cluster name 'one-c'"),
        ),
        Case(
            "vs-duplicate-endpoint",
            _vs(ns, with_value(one, "udp.cluster.endpoints", [one["udp"]["cluster"]["endpoints"][0]] * 2)),
            denied("VirtualService", "spec.listeners[0].udp.cluster.endpoints[1].name: duplicate endpoint name"),
        ),
        Case(
            "vs-port-twice",
            _vs(ns, one, _listener("two", 4000)),
            denied("VirtualService", "spec.listeners[1].udp.port: UDP port 4000 is taken by spec.listeners[0]"),
        ),
        Case(
            "vs-port-taken-for-overlapping-selectors",
            _vs(ns, _listener("new", 3000), selector={}),
            denied(
                "VirtualService",
                f"spec.listeners[0].udp.port: UDP port 3000 is taken by listener 'taken-l' of {existing}",
            ),
        ),
        Case(
            "vs-hash-key-on-tcp",
            _vs(ns, _listener("t", 4001, "tcp", hash_key="callid")),
            denied("VirtualService", "spec.listeners[0].tcp.cluster.hash_key: only a cluster behind a udp listener"),
        ),
        Case(
            "vs-host-both",
            _vs(ns, with_value(one, "udp.cluster.endpoints.0.host", {"address": "a", "selector": {"a": "b"}})),
            defaulting(
                "VirtualService", f"{host}: exactly one of selector, address must be set (got selector, address)"
            ),
        ),
        Case(
            "vs-host-none",
            _vs(ns, with_value(one, "udp.cluster.endpoints.0.host", {})),
            defaulting("VirtualService", f"{host}: exactly one of selector, address must be set (got none)"),
        ),
        Case(
            "vs-health-interval",
            _vs(ns, _listener("hc", 4007, health_check={"interval": 100})),
            defaulting("VirtualService", f"{hc}.interval: Input should be greater than or equal to 500 (got 100)"),
        ),
        Case(
            "vs-health-protocol",
            _vs(ns, _listener("hc", 4008, health_check={"protocol": "HTTP"})),
            defaulting("VirtualService", f"{hc}.protocol: Input should be 'TCP' (got \"HTTP\")"),
        ),
        Case(
            "vs-udp-and-tcp",
            _vs(ns, {**one, "tcp": one["udp"]}),
            defaulting("VirtualService", "spec.listeners[0]: exactly one of udp, tcp must be set (got udp, tcp)"),
        ),
        Case(
            "class-range-order",
            _class(f"{cls}-a", {"nodePortRange": "32767-30000"}),
            defaulting("ClusterRoutedIPClass", "spec.nodePortRange: '32767-30000': need 1 <= LOW <= HIGH <= 65535"),
        ),
        Case(
            "class-range-bound",
            _class(f"{cls}-b", {"nodePortRange": "30000-99999"}),
            defaulting("ClusterRoutedIPClass", "spec.nodePortRange: '30000-99999': need 1 <= LOW <= HIGH <= 65535"),
        ),
        Case(
            "class-range-form",
            _class(f"{cls}-c", {"nodePortRange": "any"}),
            defaulting("ClusterRoutedIPClass", "spec.nodePortRange: 'any' is not a port range of the form LOW-HIGH"),
        ),
        Case(
            "class-per-node-limit",
            _class(f"{cls}-d", {"perNodeIPLimit": 0}),
            defaulting(
                "ClusterRoutedIPClass", "spec.perNodeIPLimit: Input should be greater than or equal to 1 (got 0)"
            ),
        ),
        Case(
            "class-duplicate-class-name",
            _class(f"{cls}-e", {"className": cls}),
            denied("ClusterRoutedIPClass", f"spec.className: className '{cls}' is already served by"),
        ),
        Case(
            "rip-unspecified",
            _rip(ns, "0.0.0.0", cls),
            denied("RoutedIP", f"spec.routedIP: 0.0.0.0 {unicast}"),
        ),
        Case(
            "rip-multicast",
            _rip(ns, "239.1.1.1", cls),
            denied("RoutedIP", f"spec.routedIP: 239.1.1.1 {unicast}"),
        ),
        Case(
            "rip-not-ipv4",
            _rip(ns, "203.0.113.256", cls),
            defaulting("RoutedIP", 'spec.routedIP: Input is not a valid IPv4 address (got "203.0.113.256")'),
        ),
        Case(
            "rip-missing-class",
            _rip(ns, "203.0.113.20", "nope"),
            denied("RoutedIP", "spec.className: no ClusterRoutedIPClass has className 'nope'"),
        ),
        Case(
            "rip-address-taken",
            _rip(ns, "198.51.100.7", cls),
            denied("RoutedIP", f"spec.routedIP: 198.51.100.7 is already routed by RoutedIP {ns}/existing-rip"),
        ),
        Case(
            "goop-job-count-maximum",
            goop(ns, jobCount=101),
            denied("Goop", "spec.jobCount: 101 is above the configured maximum of 100"),
        ),
        Case(
            "goop-job-count-zero",
            goop(ns, jobCount=0),
            defaulting("Goop", "spec.jobCount: Input should be greater than or equal to 1 (got 0)"),
        ),
        Case(
            "goop-blank-cmd",
            goop(ns, cmd="   "),
            denied("Goop", "spec.cmd: must not be blank"),
        ),
        Case(
            "goop-per-node-count",
            goop(ns, placement="PerNode", jobCount=3),
            denied("Goop", "spec.jobCount: placement PerNode runs one worker per eligible node"),
        ),
        Case(
            "goop-new-nodes",
            goop(ns, includeNewNodes=True),
            denied("Goop", "spec.includeNewNodes: applies to placement PerNode only"),
        ),
        Case(
            "goop-node-selector",
            goop(ns, nodeSelector={"not a key": "x"}),
            denied("Goop", "spec.nodeSelector[not a key]: 'not a key' is not a valid label key"),
        ),
        Case(
            "goop-placement",
            goop(ns, placement="Everywhere"),
            defaulting("Goop", "spec.placement: Input should be 'Jobs' or 'PerNode' (got \"Everywhere\")"),
        ),
        Case(
            "lbservicegroup-replicas",
            _group(ns, "big", {"envoy-replica-count": 101}),
            defaulting(
                "LBServiceGroup", "spec.envoy-replica-count: Input should be less than or equal to 100 (got 101)"
            ),
        ),
    ]


def _refused_with(webhook: Webhook, obj: Obj, refusal: str) -> bool:
    return refusal in webhook.refusal(partial(webhook.create, obj, dry_run=True))


def prerequisites(webhook: Webhook, ns: str) -> None:
    """The objects the cross-object cases collide with, in the webhook's cache before the cases run."""
    cls = f"e2e-{webhook.label}"
    webhook.create(_group(ns))
    webhook.create(_lb(ns, "existing-lb", {"service-id": 1, "public-address": "192.168.77.8"}))
    webhook.create(with_value(_vs(ns, _listener("taken-l", 3000)), "metadata.name", "existing-vs"))
    webhook.create(_class(cls))
    webhook.create(with_value(_rip(ns, "198.51.100.7", cls), "metadata.name", "existing-rip"))
    webhook.create(with_value(_remote_endpoint(ns, "192.168.1.44"), "metadata.name", "existing-rep"))
    # The test namespace stands for the account of its own name: it may hold one GWProxy, which it does.
    webhook.create(with_value(_account(ns, ns), "spec", {"proxyLimit": 1}))
    gateway = _gw_listeners(("web", 80, "HTTP"), ("db", 5432, "TCP"))
    webhook.create(
        with_value(_gwp(ns, {"public-address": "192.168.77.9", "gateway": gateway}), "metadata.name", "existing-gwp")
    )
    # Watch events reach the webhook's cache a moment after the writes: wait until it refuses duplicates.
    for probe, refusal in (
        (_rip(ns, "198.51.100.7", cls), "already routed"),
        (_vs(ns, _listener("probe", 3000)), "is taken by listener 'taken-l'"),
        (with_value(_remote_endpoint(ns, "192.168.1.44"), "metadata.name", "probe"), "registered already"),
        (with_value(_gwp(ns, {"public-address": "192.168.77.5"}), "metadata.name", "probe"), "proxy limit exceeded"),
    ):
        wait_for(
            partial(_refused_with, webhook, probe, refusal),
            "the webhook's cache to hold the prerequisites",
            timeout=30,
            ignore=(AssertionError,),
        )


@pytest.fixture
def epic_namespace(core: client.CoreV1Api) -> str:
    """The EPIC system namespace `epic`, created when missing and left in place (as applying the samples does)."""

    def active() -> bool:
        try:
            return bool(core.read_namespace("epic").status.phase == "Active")
        except client.ApiException as error:
            if error.status != 404:
                raise
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="epic")))
        return False

    wait_for(active, "namespace epic to be active", timeout=90, ignore=(client.ApiException,))
    return "epic"


def test_invalid_objects_are_refused_with_their_messages_and_nothing_is_stored(
    webhook: Webhook, namespace: str, epic_namespace: str
) -> None:
    prerequisites(webhook, namespace)
    table = cases(namespace, webhook.label)
    assert len(table) >= 40
    assert {case.obj["kind"] for case in table} == set(INFO)
    failures = []
    for case in table:
        metadata = case.obj["metadata"]
        try:
            message = webhook.refusal(partial(webhook.create, case.obj))
        except AssertionError:
            failures.append(f"{case.id}: accepted")
            continue
        if case.message not in message:
            failures.append(f"{case.id}: {message!r}\n    does not contain {case.message!r}")
        if webhook.get(case.obj["kind"], metadata["name"], metadata.get("namespace")) is not None:
            failures.append(f"{case.id}: refused, yet stored")
    assert not failures, "\n".join(failures)


def _load(namespace: str, number: int, listener: str | None = None) -> Obj:
    """One of a generated set: VirtualService load-N, listener load-N-l on its own port, its one endpoint named e."""
    name = f"load-{number}"
    vs = _vs(
        namespace, with_value(_listener(listener or f"{name}-l", 10000 + number), "udp.cluster.endpoints.0.name", "e")
    )
    return with_value(vs, "metadata.name", name)


LOAD = 1000


def test_names_are_scoped_to_the_namespace_no_squatting_no_leaks_no_needless_refusals(
    webhook: Webhook, cluster: EmbeddedCluster, namespace: str, other_namespace: str
) -> None:
    """Issue #20's three cases: another tenant's VirtualService cannot block a name, a refusal never names
    another namespace's object, and 1000 VirtualServices whose endpoints are all named `e` apply at once."""
    squatter = webhook.create(_load(other_namespace, 5))
    assert squatter["spec"]["listeners"][0]["name"] == "load-5-l"
    wait_for(
        partial(_refused_with, webhook, with_value(_load(other_namespace, 5), "metadata.name", "probe"), "is taken"),
        "the webhook's cache to hold the other tenant's VirtualService",
        timeout=30,
        ignore=(AssertionError,),
    )

    documents = "\n---\n".join(json.dumps(webhook.labelled(_load(namespace, n))) for n in range(LOAD))
    started = time.monotonic()
    applied = cluster.kubectl("apply", "-f", "-", stdin=documents, timeout=300)
    seconds = time.monotonic() - started
    assert applied.stdout.count("created") == LOAD, applied.stdout[-2000:]
    stored = webhook.custom.list_namespaced_custom_object(
        "servicemesh.l7mp.io", "v1", namespace, "virtualservices", label_selector=f"{LABEL}={webhook.label}"
    )
    assert len(stored["items"]) == LOAD
    print(f"\n{LOAD} VirtualServices with endpoint 'e' in one kubectl apply: {seconds:.1f} s")

    # A clash inside the namespace is real (same port, overlapping selectors): it names the other object.
    refusal = webhook.refusal(
        partial(webhook.create, with_value(_load(namespace, 5, "new-l"), "metadata.name", "late"))
    )
    assert f"UDP port 10005 is taken by listener 'load-5-l' of VirtualService {namespace}/load-5" in refusal
    assert other_namespace not in refusal


def test_the_service_id_of_a_load_balancer_is_immutable(webhook: Webhook, namespace: str) -> None:
    webhook.create(_group(namespace))
    stored = webhook.create(_lb(namespace, "lb", {"service-id": 1}))
    stored["spec"]["service-id"] = 2
    stored["spec"]["public-address"] = "192.168.77.3"
    message = webhook.refusal(
        lambda: webhook.custom.replace_namespaced_custom_object(
            "epic.acnodal.io", "v1", namespace, "loadbalancers", "lb", stored
        )
    )
    assert denied("LoadBalancer", "spec.service-id: is immutable once set (was 1, now 2)") in message
    after = webhook.get("LoadBalancer", "lb", namespace)
    assert after is not None
    assert (after["spec"]["service-id"], after["spec"]["public-address"]) == (1, "192.168.77.2"), "nothing half-applied"


# ---- every sample is accepted, stored complete ----


def _samples(namespace: str, label: str) -> list[Obj]:
    """The samples of every kind, moved into the test's namespace (cluster-scoped ones renamed for the test)."""
    order = ["Account", "LBServiceGroup", "ClusterRoutedIPClass"]
    documents = []
    for path in sorted((repo_root() / "deploy" / "samples").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document["kind"] not in INFO:
                continue
            document.pop("status", None)
            metadata = document["metadata"] = {
                "name": document["metadata"]["name"],
                **({} if INFO[document["kind"]].scope == "Cluster" else {"namespace": namespace}),
            }
            if document["kind"] == "ClusterRoutedIPClass":
                metadata["name"] = f"{metadata['name']}-{label}"
            if document["kind"] == "RoutedIP":  # its Service moves along: it must be in the RoutedIP's namespace
                document["spec"]["serviceRef"]["namespace"] = namespace
            documents.append(document)
    return sorted(documents, key=lambda d: order.index(d["kind"]) if d["kind"] in order else len(order))


def test_every_sample_is_accepted_and_stored_with_its_defaults(
    webhook: Webhook, namespace: str, epic_namespace: str
) -> None:
    documents = _samples(namespace, webhook.label)
    assert {document["kind"] for document in documents} == set(INFO)
    for document in documents:
        model = kind_for(document["apiVersion"], document["kind"])
        complete = model.model_validate(document).to_wire()["spec"]
        if document["kind"] in ("EPIC", "ServicePrefix"):  # these live in `epic`: only a dry run there
            stored: Obj | None = _dry_run_in_epic(webhook, document, epic_namespace)
        else:
            webhook.create(document)
            metadata = document["metadata"]
            stored = webhook.get(document["kind"], metadata["name"], metadata.get("namespace"))
        assert stored is not None
        assert stored["spec"] == complete, f"{document['kind']} {document['metadata']['name']}"
    goop_spec = webhook.get("Goop", "goop-sample", namespace)
    assert goop_spec is not None
    # Defaults the CRD schema cannot carry (factories) come from the webhook alone.
    assert goop_spec["spec"]["nodeSelector"] == {}
    assert webhook.get("LBServiceGroup", "sample", namespace) is not None


def _dry_run_in_epic(webhook: Webhook, document: Obj, namespace: str) -> Obj:
    document = with_value(document, "metadata.namespace", namespace)
    try:
        return webhook.create(document, dry_run=True)
    except client.ApiException as error:
        if error.status != 409:
            raise
    kind, name = document["kind"], document["metadata"]["name"]
    existing = webhook.get(kind, name, namespace)
    assert existing is not None
    replacement = webhook.labelled({**document, "metadata": {**existing["metadata"], **document["metadata"]}})
    replacement["metadata"]["labels"] = {**existing["metadata"].get("labels", {}), LABEL: webhook.label}
    info = INFO[kind]
    stored = webhook.custom.replace_namespaced_custom_object(
        info.group, info.version, namespace, info.plural, name, replacement, dry_run="All"
    )
    return cast(Obj, stored)


# ---- what kubectl shows for what would break an Envoy or the allocator's labels ----


def test_kubectl_shows_why_an_admin_port_listener_and_a_too_long_load_balancer_name_are_refused(
    webhook: Webhook, cluster: EmbeddedCluster, namespace: str
) -> None:
    webhook.create(_group(namespace))
    admin = _vs(namespace, _listener("admin", ADMIN_PORT, "tcp"))
    long_name = _lb(namespace, "l" * 64)
    for obj, message in (
        (
            admin,
            f"spec.listeners[0].tcp.port: TCP port {ADMIN_PORT} is the Envoy admin port, which the Envoy binds at "
            f"start: a listener there cannot bind (reserved: {ADMIN_PORT}/TCP)",
        ),
        (
            long_name,
            "metadata.name: 64 characters, above the 63 of a label value: the LoadBalancer's Envoy Deployment and "
            "pods carry its name in the label epic.acnodal.io/load-balancer",
        ),
    ):
        result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(webhook.labelled(obj)), check=False)
        assert result.returncode != 0, result.stdout
        # kubectl words the webhook's denial (its details name the kind and object) as it words schema errors.
        assert f'The {obj["kind"]} "{obj["metadata"]["name"]}" is invalid: {message}' in result.stderr
        assert webhook.get(obj["kind"], obj["metadata"]["name"], namespace) is None
    udp = _vs(namespace, _listener("udp-admin", ADMIN_PORT))  # the admin server is TCP only: UDP may have the port
    assert cluster.kubectl("create", "-f", "-", stdin=json.dumps(webhook.labelled(udp))).returncode == 0


# ---- a stopped webhook fails requests, it never lets them through ----


def test_a_stopped_webhook_refuses_clearly_instead_of_admitting_silently(
    webhook: Webhook, namespace: str, custom: client.CustomObjectsApi
) -> None:
    webhook.create(goop(namespace, "before"))
    webhook.process.stop()
    message = webhook.refusal(lambda: webhook.create(goop(namespace, "after")))
    assert 'failed calling webhook "default.goops.goop.example.com"' in message
    assert "connection refused" in message
    assert webhook.get("Goop", "after", namespace) is None
    # Only objects with the test's label go through its webhook: the rest of the cluster is unaffected.
    custom.create_namespaced_custom_object(
        "goop.example.com", "v1alpha1", namespace, "goops", goop(namespace, "unlabelled")
    )


def test_the_epic_singleton_is_not_deleted_while_a_group_or_load_balancer_exists(
    webhook: Webhook, namespace: str, epic_namespace: str
) -> None:
    """DELETE of epic/epic reaches the webhook (its registration asks for it) and is refused, naming the user,
    until nothing uses it. Dry runs: the singleton stays for the other tests."""
    info = INFO["EPIC"]
    if webhook.get("EPIC", "epic", epic_namespace) is None:
        webhook.create(_epic(epic_namespace))
    else:  # the webhook judges (and caches) only objects with the test's label
        labels = {"metadata": {"labels": {LABEL: webhook.label}}}
        webhook.custom.patch_namespaced_custom_object(
            info.group, info.version, epic_namespace, info.plural, "epic", labels
        )

    def delete_epic() -> Any:
        return webhook.custom.delete_namespaced_custom_object(
            info.group, info.version, epic_namespace, info.plural, "epic", dry_run="All"
        )

    webhook.create(_group(namespace, "users"))
    webhook.create(_lb(namespace, "web", {"service-group": "users", "public-address": "192.168.77.90"}))
    message = wait_for(  # until the webhook's cache has seen both
        lambda: webhook.refusal(delete_epic),
        "the refusal of deleting the EPIC singleton",
        timeout=30,
        ignore=(AssertionError,),
    )
    assert message == (
        'admission webhook "validate.epics.epic.acnodal.io" denied the request: the EPIC singleton epic/epic is in use '
        f"by LoadBalancer {namespace}/web, LBServiceGroup {namespace}/users: it holds their tunnel IDs; delete every "
        "LoadBalancer, GWProxy and LBServiceGroup first"
    )
    lb_info, group_info = INFO["LoadBalancer"], INFO["LBServiceGroup"]
    webhook.custom.delete_namespaced_custom_object(lb_info.group, lb_info.version, namespace, lb_info.plural, "web")
    webhook.custom.delete_namespaced_custom_object(
        group_info.group, group_info.version, namespace, group_info.plural, "users"
    )

    def deletable() -> bool:
        try:
            delete_epic()
        except client.ApiException:
            return False
        return True

    wait_for(deletable, "deleting the unused EPIC singleton to be allowed", timeout=30)
