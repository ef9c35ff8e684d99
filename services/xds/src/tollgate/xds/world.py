"""What the xDS server knows of the cluster: the watched objects, and the IR of every source, kept current.

Handlers put objects in; `sources()` translates only what changed since the last call. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tollgate.models.addresses import DEFAULT_POLICY, EndpointPolicy
from tollgate.models.base import CustomResource
from tollgate.models.epic import GWEndpointSlice, GWProxy, GWRoute, LoadBalancer, RemoteEndpoint
from tollgate.models.servicemesh import VirtualService
from tollgate.runtime.resync import Key, key_of
from tollgate.xds import ir, translate
from tollgate.xds.translate import Pod

Parsed = TypeVar("Parsed", bound=BaseModel)


def _translated_part(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = obj.get("metadata", {})
    return obj.get("spec"), meta.get("generation"), meta.get("creationTimestamp"), meta.get("uid")


def _invalid(obj: Mapping[str, Any], kind: ir.SourceKind, error: ValidationError) -> ir.Source:
    meta = obj.get("metadata", {})
    ref = ir.SourceRef(str(meta.get("creationTimestamp") or ""), *key_of(obj), kind=kind)
    errors = tuple(
        f"{'.'.join(str(part) for part in e['loc']) or 'spec'}: {e['msg']}" for e in error.errors(include_url=False)
    )
    return ir.Source(ref, int(meta.get("generation") or 0), ir.NO_PROXIES, (), errors)


def _replace(
    store: dict[Key, Parsed], model: type[Parsed], obj: Mapping[str, Any], deleted: bool
) -> tuple[Parsed | None, ...]:
    """Store the object as its model reads it (an invalid one counts as gone); (old, new) when that changed, else ()."""
    key = key_of(obj)
    try:
        new = None if deleted else model.model_validate(obj)
    except ValidationError:
        new = None
    old = store.pop(key, None)
    if new is not None:
        store[key] = new
    return () if old == new else (old, new)


class World:
    def __init__(self, endpoint_policy: EndpointPolicy = DEFAULT_POLICY) -> None:
        self.endpoint_policy = endpoint_policy
        self.virtual_services: dict[Key, Mapping[str, Any]] = {}
        self.load_balancers: dict[Key, Mapping[str, Any]] = {}
        self.gw_proxies: dict[Key, Mapping[str, Any]] = {}
        self.remote_endpoints: dict[Key, RemoteEndpoint] = {}
        self.gw_routes: dict[Key, GWRoute] = {}
        self.gw_endpoint_slices: dict[Key, GWEndpointSlice] = {}
        self.pods: dict[Key, Pod] = {}
        # The pods whose labels, IPs or readiness changed (or that were deleted) since `take_changed_pods`.
        self.changed_pods: set[Key] = set()
        self._sources: dict[tuple[ir.SourceKind, Key], ir.Source] = {}
        self._stale: set[tuple[ir.SourceKind, Key]] = set()

    def set_virtual_service(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        """True when the change matters to Envoys (not for a change of status or annotations)."""
        return self._set(self.virtual_services, "VirtualService", obj, deleted)

    def set_load_balancer(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        return self._set(self.load_balancers, "LoadBalancer", obj, deleted)

    def _set(
        self, store: dict[Key, Mapping[str, Any]], kind: ir.SourceKind, obj: Mapping[str, Any], deleted: bool
    ) -> bool:
        key = key_of(obj)
        old = store.pop(key, None)
        if not deleted:
            store[key] = obj
        if old is not None and not deleted and _translated_part(old) == _translated_part(obj):
            return False
        self._stale.add((kind, key))
        return True

    def set_gw_proxy(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        return self._set(self.gw_proxies, "GWProxy", obj, deleted)

    def set_remote_endpoint(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        key = key_of(obj)
        changed = _replace(self.remote_endpoints, RemoteEndpoint, obj, deleted)
        for lb in {e.spec.load_balancer for e in changed if e is not None}:
            self._stale.add(("LoadBalancer", (key[0], lb)))
        return bool(changed)

    def set_gw_route(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        return self._gateway_part(_replace(self.gw_routes, GWRoute, obj, deleted), key_of(obj)[0])

    def set_gw_endpoint_slice(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        return self._gateway_part(_replace(self.gw_endpoint_slices, GWEndpointSlice, obj, deleted), key_of(obj)[0])

    def _gateway_part(self, changed: tuple[object, ...], namespace: str) -> bool:
        """A route or slice changed: the GWProxies of its namespace (at most the account's proxyLimit) translate
        again."""
        for key in self.gw_proxies if changed else ():
            if key[0] == namespace:
                self._stale.add(("GWProxy", key))
        return bool(changed)

    def set_pod(self, obj: Mapping[str, Any], deleted: bool = False) -> bool:
        """True when what matters of the pod (labels, IP, readiness) changed."""
        key = key_of(obj)
        pod = None if deleted else Pod.from_object(obj)
        old = self.pods.pop(key, None)
        if pod is not None:
            self.pods[key] = pod
        if old == pod:
            return False
        self.changed_pods.add(key)
        for kind, source_key in self._sources:
            if kind == "VirtualService" and source_key[0] == key[0]:
                self._stale.add((kind, source_key))
        return True

    def take_changed_pods(self) -> set[Key]:
        changed, self.changed_pods = self.changed_pods, set()
        return changed

    def pod(self, namespace: str, name: str) -> Pod | None:
        return self.pods.get((namespace, name))

    def pod_labels(self, namespace: str, name: str) -> ir.Labels | None:
        pod = self.pods.get((namespace, name))
        return pod.labels if pod is not None else None

    def sources(self) -> list[ir.Source]:
        """The IR of every source, translating again only those that changed."""
        for kind, key in self._stale:
            source = self._translate(kind, key)
            if source is None:
                self._sources.pop((kind, key), None)
            else:
                self._sources[(kind, key)] = source
        self._stale.clear()
        return list(self._sources.values())

    def _translate(self, kind: ir.SourceKind, key: Key) -> ir.Source | None:
        stores: dict[ir.SourceKind, tuple[dict[Key, Mapping[str, Any]], type[CustomResource[Any, Any]]]] = {
            "VirtualService": (self.virtual_services, VirtualService),
            "LoadBalancer": (self.load_balancers, LoadBalancer),
            "GWProxy": (self.gw_proxies, GWProxy),
        }
        store, model = stores[kind]
        obj = store.get(key)
        if obj is None:
            return None
        try:
            resource = model.model_validate(obj)
        except ValidationError as error:
            return _invalid(obj, kind, error)
        namespace = key[0]
        if isinstance(resource, VirtualService):
            pods = (p for p in self.pods.values() if p.namespace == namespace)
            return translate.virtual_service(resource, pods, self.endpoint_policy)
        if isinstance(resource, LoadBalancer):
            endpoints = (e for e in self.remote_endpoints.values() if e.namespace == namespace)
            return translate.load_balancer(resource, endpoints)
        assert isinstance(resource, GWProxy)
        routes = (r for r in self.gw_routes.values() if r.namespace == namespace)
        slices = (s for s in self.gw_endpoint_slices.values() if s.namespace == namespace)
        return translate.gw_proxy(resource, routes, slices)
