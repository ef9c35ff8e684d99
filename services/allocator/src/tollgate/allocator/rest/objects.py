"""What each route of EPIC's REST API does to the EPIC objects. Endpoints and clusters go through the same
Registry as the gRPC API (one RemoteEndpoint per address, port and protocol, one tunnel per client node, one
admission of a client cluster); proxies, services, routes and slices are written through the API server, so the
webhook defaults and validates them as it does every other writer's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Any

from kubernetes import client

from tollgate.allocator.allocation import InvalidArgumentError, validate_name
from tollgate.allocator.k8s import JSON, Kind, Kube, is_conflict
from tollgate.allocator.limits import LIMIT_EXCEEDED
from tollgate.allocator.registry import Registry
from tollgate.allocator.registry.errors import LimitExceededError, NotFoundError
from tollgate.allocator.registry.records import CLUSTERS, identity, pointer
from tollgate.allocator.registry.registrations import Endpoint
from tollgate.allocator.rest import links
from tollgate.models.base import WireModel, raw_condition
from tollgate.models.epic import (
    ACCOUNT_LABEL,
    DEFAULT_CLUSTER,
    SYSTEM_NAMESPACE,
    Account,
    GWEndpointSlice,
    GWEndpointSliceSpec,
    GWProxy,
    GWProxySpec,
    GWRoute,
    GWRouteSpec,
    LBServiceGroup,
    LBServiceGroupSpec,
    LoadBalancer,
    LoadBalancerSpec,
    RemoteEndpoint,
    ServicePrefix,
    ServicePrefixSpec,
    account_namespace,
)

# The kinds an agent names by their clientRef.uid, by the key of their body, with the model of their spec.
NAMED: dict[str, tuple[Kind, type[WireModel]]] = {
    "route": (GWRoute, GWRouteSpec),
    "slice": (GWEndpointSlice, GWEndpointSliceSpec),
}
# The kinds the reconcile gives a public address and DNS record, by the key of their body, with their spec's model.
ALLOCATED: dict[str, tuple[type[WireModel], Callable[[str, str], str]]] = {
    "proxy": (GWProxySpec, links.proxy_path),
    "service": (LoadBalancerSpec, links.service_path),
}
ALLOCATION_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.1


class DuplicateError(Exception):
    """The object exists already: 409, and where it is."""

    def __init__(self, message: str, location: str, extra: JSON | None = None) -> None:
        super().__init__(message)
        self.location = location
        self.extra = extra or {}


@dataclass(frozen=True)
class Found:
    """An object as the API answers it: under `key`, with its links."""

    key: str
    obj: JSON
    link: dict[str, str]

    def body(self) -> JSON:
        return {"link": self.link, self.key: self.obj}


class EpicObjects:
    def __init__(self, kube: Kube, registry: Registry, allocation_wait: float = ALLOCATION_WAIT_SECONDS) -> None:
        self.kube = kube
        self.registry = registry
        self.allocation_wait = allocation_wait

    async def _get(self, kind: Kind, account: str, name: str, what: str) -> JSON:
        obj = await self.kube.get(kind, account_namespace(account), name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            raise NotFoundError(f"{what}: no {kind.resource.kind} {name!r} in account {account!r}")
        return obj

    async def account(self, account: str) -> Found:
        validate_name("account", account)
        return Found("account", await self._get(Account, account, account, "account"), links.account_links(account))

    async def group(self, account: str, group: str) -> Found:
        validate_name("group", group)
        obj = await self._get(LBServiceGroup, account, group, "group")
        return Found("group", obj, links.group_links(account, group))

    # proxies (GWProxy) and services (LoadBalancer): named by the client, allocated by the reconcile

    async def create_proxy(self, account: str, group: str, body: object) -> str:
        found = await self.group(account, group)
        proxy = links.unwrapped(body, "proxy")
        spec = links.client_spec("proxy", proxy) | {"service-group": group}
        name = links.object_name("proxy.spec.clientRef.uid", (spec.get("clientRef") or {}).get("uid"))
        return await self._create_allocated(GWProxy, "proxy", account, name, spec, found.obj)

    async def proxy(self, account: str, name: str) -> Found:
        obj = await self._get(GWProxy, account, name, "proxy")
        return Found("proxy", obj, links.proxy_links(account, obj))

    async def create_service(self, account: str, group: str, body: object) -> str:
        found = await self.group(account, group)
        service = links.unwrapped(body, "service")
        client_name = links.object_name("service.metadata.name", (service.get("metadata") or {}).get("name"))
        shareable = LBServiceGroupSpec.model_validate(found.obj.get("spec") or {}).can_be_shared
        name = links.object_name("service.metadata.name", links.load_balancer_name(group, client_name, shareable))
        spec = links.client_spec("service", service) | {"service-group": group}
        return await self._create_allocated(LoadBalancer, "service", account, name, spec, found.obj)

    async def service(self, account: str, name: str) -> Found:
        obj = await self._get(LoadBalancer, account, name, "service")
        return Found("service", obj, links.service_links(account, obj))

    async def _create_allocated(self, kind: Kind, key: str, account: str, name: str, spec: JSON, group: JSON) -> str:
        """Check a proxy's or service's spec (`key`: its body key), create it and wait for its allocation; its URL."""
        model, path = ALLOCATED[key]
        links.validated(model, spec, f"{key}.spec")
        await self._requested_address(group, spec, f"{key}.spec.public-address")
        location = path(account, name)
        await self._create(kind, account, name, spec, location)
        await self._allocated(kind, account, name)
        return location

    async def _requested_address(self, group: JSON, spec: JSON, field: str) -> None:
        """An agent may ask for a public address (a Service's loadBalancerIP) from its group's pool only: the
        addresses beyond it are the account administrator's to hand out, with kubectl."""
        wanted = spec.get("public-address")
        if wanted is None:
            return
        prefix_name = LBServiceGroupSpec.model_validate(group.get("spec") or {}).service_prefix
        prefix = None if prefix_name is None else await self.kube.get(ServicePrefix, SYSTEM_NAMESPACE, prefix_name)
        if prefix is None:
            raise InvalidArgumentError(
                f"{field}: {wanted} cannot be asked for: group {group['metadata']['name']!r} has no address pool "
                "(service-prefix)"
            )
        pool = ServicePrefixSpec.model_validate(prefix["spec"]).public_pool
        if IPv4Address(wanted) not in pool:
            raise InvalidArgumentError(
                f"{field}: {wanted} is not in the pool {pool.pool} of group {group['metadata']['name']!r}"
            )

    async def _create(self, kind: Kind, account: str, name: str, spec: JSON, location: str) -> JSON:
        namespace = account_namespace(account)
        body = {
            "apiVersion": f"{kind.resource.group}/{kind.resource.version}",
            "kind": kind.resource.kind,
            "metadata": {"name": name, "namespace": namespace, "labels": {ACCOUNT_LABEL: account}},
            "spec": spec,
        }
        try:
            return await self.kube.create(kind, namespace, body)
        except client.ApiException as error:
            if is_conflict(error):
                raise DuplicateError(f"duplicate {kind.resource.kind} {name!r}", location) from None
            raise

    async def _allocated(self, kind: Kind, account: str, name: str) -> None:
        """Wait (a while) for the reconcile to give a new proxy or service its public address and DNS record, or
        to say why not: EPIC's clients read both from the answer without checking that they are there. One beyond
        its Account's limit (created at the same time as others that the webhook let through) is deleted again and
        refused, as the webhook refuses one it sees beyond the limit: nothing of a refused request stays."""
        namespace = account_namespace(account)
        deadline = time.monotonic() + self.allocation_wait
        while time.monotonic() < deadline:
            obj = await self.kube.get(kind, namespace, name)
            if obj is None or obj["spec"].get("endpoints"):
                return
            allocated = raw_condition(obj, "Allocated")
            if allocated.get("reason") == LIMIT_EXCEEDED:
                await self._refuse_beyond_limit(kind, obj)
            elif allocated.get("status") == "False":
                return
            await asyncio.sleep(POLL_SECONDS)

    async def _refuse_beyond_limit(self, kind: Kind, obj: JSON) -> None:
        """The reconcile found the new object beyond its Account's limit: judged again (a place may have opened since),
        it is deleted and the request refused, unless it is served now."""
        decision = await self.registry.limits.admit(obj)
        if decision.served:
            return
        meta = obj["metadata"]
        await self.kube.delete(kind, meta["namespace"], meta["name"])
        raise LimitExceededError(
            f"{kind.resource.kind} {meta['name']!r} is beyond its Account's limit and was not kept: {decision.message}"
        )

    # routes and slices: named by their clientRef.uid, in the account's namespace

    async def create_named(self, key: str, account: str, body: object) -> str:
        """POST of a route or slice (`key`)."""
        kind, _ = NAMED[key]
        spec, name = await self._named_spec(key, account, links.unwrapped(body, key))
        location = links.named_path(account, key, name)
        await self._create(kind, account, name, spec, location)
        return location

    async def update_named(self, key: str, account: str, name: str, body: object) -> str:
        """PUT of a route or slice: its spec replaced."""
        kind, _ = NAMED[key]
        spec, _ = await self._named_spec(key, account, links.unwrapped(body, key), name)
        await self._replace_spec(kind, account, name, spec, key)
        return links.named_path(account, key, name)

    async def named(self, key: str, account: str, name: str) -> Found:
        kind, _ = NAMED[key]
        obj = await self._get(kind, account, name, key)
        return Found(key, obj, {"self": links.named_path(account, key, name)})

    async def _named_spec(self, key: str, account: str, obj: JSON, name: str | None = None) -> tuple[JSON, str]:
        """The spec to store and the object's name (its clientRef.uid; a PUT's must be the one in its URL)."""
        _, model = NAMED[key]
        spec = links.client_spec(key, obj)
        uid = links.object_name(f"{key}.spec.clientRef.uid", (spec.get("clientRef") or {}).get("uid"))
        if name is not None and uid != name:
            raise InvalidArgumentError(f"{key}.spec.clientRef.uid: {uid!r} is not the {key}'s UID {name!r}")
        links.validated(model, spec, f"{key}.spec")
        if key == "route":
            await self._own_proxies(account, spec)
        return spec, uid

    async def _own_proxies(self, account: str, spec: JSON) -> None:
        """A route attaches to proxies of its own account only: each parentRef must name one."""
        kind = "http" if "http" in spec else "tcp"
        for index, parent in enumerate(spec[kind].get("parentRefs") or []):
            if await self.kube.get(GWProxy, account_namespace(account), parent["name"]) is None:
                raise InvalidArgumentError(
                    f"route.spec.{kind}.parentRefs[{index}].name: no proxy {parent['name']!r} in account {account!r}"
                )

    async def _replace_spec(self, kind: Kind, account: str, name: str, spec: JSON, what: str) -> None:
        for _ in range(5):
            obj = await self._get(kind, account, name, what)
            obj["spec"] = spec
            try:
                await self.kube.replace(kind, obj)
                return
            except client.ApiException as error:
                if not is_conflict(error):
                    raise
        raise client.ApiException(status=409, reason=f"{what} {name!r} kept changing; try again")

    async def delete(self, kind: Kind, account: str, name: str) -> bool:
        """Delete the object; whether it was there (a DELETE of what is gone succeeds too)."""
        validate_name("account", account)
        links.object_name("name", name)
        return await self.kube.delete(kind, account_namespace(account), name)

    # endpoints and clusters of a service: the Registry's, as over gRPC

    async def create_endpoint(self, account: str, service: str, body: object) -> str:
        endpoint = links.unwrapped(body, "endpoint")
        spec = links.client_spec("endpoint", endpoint)
        port = spec.get("port") or {}
        if not isinstance(port, dict) or not isinstance(port.get("port"), int):
            raise InvalidArgumentError("endpoint.spec.port.port: required (a number)")
        tunnel, created = await self.registry.registrations.register(
            account,
            service,
            str(spec.get("address") or ""),
            Endpoint(port["port"], str(port.get("protocol") or "TCP"), str(port.get("name") or ""),
                     str(port.get("appProtocol") or "")),
            str(spec.get("node-address") or ""),
            str(spec.get("cluster") or ""),
        )  # fmt: skip
        location = links.endpoint_path(account, service, tunnel.remote_endpoint)
        if not created:
            found = await self.endpoint(account, service, tunnel.remote_endpoint)
            raise DuplicateError("duplicate endpoint", location, {"endpoint": found.obj})
        return location

    async def endpoint(self, account: str, service: str, name: str) -> Found:
        obj = await self._get(RemoteEndpoint, account, name, "endpoint")
        if obj["spec"].get("load-balancer") != service:
            raise NotFoundError(f"endpoint: no endpoint {name!r} of service {service!r}")
        link = {"self": links.endpoint_path(account, service, name), "service": links.service_path(account, service)}
        return Found("endpoint", obj, link)

    async def delete_endpoint(self, account: str, service: str, name: str) -> bool:
        try:
            found = await self.endpoint(account, service, name)
        except NotFoundError:
            return False
        lb, address, port, protocol = identity(found.obj["spec"])
        return await self.registry.registrations.unregister(account, lb, address, Endpoint(port, protocol)) > 0

    async def create_cluster(self, account: str, service: str, body: object) -> str:
        if not isinstance(body, dict):
            raise InvalidArgumentError('cluster-id: required: the body is {"cluster-id": "..."}')
        cluster = validate_name("cluster-id", str(body.get("cluster-id") or ""))
        lb = (await self.service(account, service)).obj
        location = links.cluster_path(account, service, cluster)
        if cluster in (lb.get("status") or {}).get(CLUSTERS, []):
            raise DuplicateError(f"duplicate cluster {cluster!r}", location)
        await self.registry.limits.require(lb)
        await self.registry.clusters.admit(lb, cluster)
        return location

    async def cluster(self, account: str, service: str, cluster: str) -> Found:
        lb = (await self.service(account, service)).obj
        if cluster not in (lb.get("status") or {}).get(CLUSTERS, []):
            raise NotFoundError(f"cluster: no cluster {cluster!r} in service {service!r}")
        link = {"self": links.cluster_path(account, service, cluster), "service": links.service_path(account, service)}
        return Found("cluster", {"cluster-id": cluster}, link)

    async def delete_cluster(self, account: str, service: str, cluster: str) -> bool:
        """Unregister the cluster's endpoints of the service, then the cluster; whether it was there."""
        validate_name("cluster", cluster)
        namespace = account_namespace(account)
        lb = await self.kube.get(LoadBalancer, namespace, service)
        if lb is None:
            return False
        for rep in await self.kube.remote_endpoints_of(namespace, service):
            if rep["spec"].get("cluster", DEFAULT_CLUSTER) == cluster:
                _, address, port, protocol = identity(rep["spec"])
                await self.registry.registrations.unregister(account, service, address, Endpoint(port, protocol))
        current = await self.kube.get(LoadBalancer, namespace, service)
        clusters: list[Any] = list(((current or {}).get("status") or {}).get(CLUSTERS) or [])
        if cluster not in clusters:  # its last endpoint took it along
            return cluster in (lb.get("status") or {}).get(CLUSTERS, [])
        path = pointer("status", CLUSTERS, str(clusters.index(cluster)))
        operations = [{"op": "test", "path": path, "value": cluster}, {"op": "remove", "path": path}]
        await self.kube.json_patch_status(LoadBalancer, namespace, service, operations)
        return True
