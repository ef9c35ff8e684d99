"""Every API call the allocator makes (rbac.yaml lists the permissions they need).

The kubernetes client is synchronous: each call runs in a worker thread so that kopf, the gRPC server
and the allocators share one event loop.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from kubernetes import client

from tollgate.models.base import CustomResource, now_rfc3339
from tollgate.models.epic import NAMESPACE_CREATED_FOR, RemoteEndpoint
from tollgate.runtime.coalesce import Coalesced
from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import (
    Watch,
    is_conflict,
    is_not_found,
    object_reference,
    own_pod_reference,
    raw_json,
    timeouts,
)
from tollgate.runtime.optimistic import UpdateResult, update_optimistically
from tollgate.runtime.tracing import carrying_trace

log = logging.getLogger("tollgate.allocator.k8s")
JSON = dict[str, Any]
Kind = type[CustomResource[Any, Any]]
FIELD_MANAGER = "tollgate-allocator"
LEASE_LABEL = "tollgate.io/allocator-lease"
# Objects per page of a chunked list (Kube.pages).
PAGE = 200
# A list's objects as PartialObjectMetadata: their metadata only.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
T = TypeVar("T")


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.events = EventRecorder(api, FIELD_MANAGER)
        # Every reconcile of a load balancer and every RemoteEndpoint event reads the load balancer's RemoteEndpoints:
        # a list filtered by the API server (the CRD's selectable field spec.load-balancer), so that each read holds
        # that load balancer's endpoints, not the namespace's; concurrent reads of one load balancer share the call.
        self._remote_endpoints: Coalesced[tuple[str, str], list[JSON]] = Coalesced(
            lambda key: self.list_objects(RemoteEndpoint, key[0], field_selector=field_is("spec.load-balancer", key[1]))
        )

    @staticmethod
    async def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(function, *args, **kwargs)

    async def server_version(self) -> tuple[str, str]:
        """The API server's Kubernetes version as /version gives it: (major, minor), such as ("1", "31+")."""
        info = await self._call(client.VersionApi(self.api).get_code)
        return str(info.major), str(info.minor)

    # custom resources

    async def get(self, kind: Kind, namespace: str, name: str) -> JSON | None:
        info = kind.resource
        try:
            found: JSON = await self._call(
                self.custom.get_namespaced_custom_object, info.group, info.version, namespace, info.plural, name
            )
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise
        return found

    async def remote_endpoints_of(self, namespace: str, load_balancer: str) -> list[JSON]:
        """The RemoteEndpoints of a load balancer (copies: the callers may change them), leaving out those being
        deleted; as fresh as a list sent now."""
        return [
            copy.deepcopy(rep)
            for rep in await self._remote_endpoints((namespace, load_balancer))
            if not rep["metadata"].get("deletionTimestamp")
        ]

    async def _list(self, kind: Kind, namespace: str | None, **options: Any) -> Any:
        """One list call, of a namespace or (namespace None) of the whole cluster."""
        info = kind.resource
        if namespace is None:
            return await self._call(
                self.custom.list_cluster_custom_object, info.group, info.version, info.plural, **options
            )
        return await self._call(
            self.custom.list_namespaced_custom_object, info.group, info.version, namespace, info.plural, **options
        )

    async def list_objects(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JSON]:
        """The objects of a kind (in a namespace); a field selector names one of the kind's selectable fields."""
        options = {"label_selector": label_selector} if label_selector else {}
        if field_selector:
            options["field_selector"] = field_selector
        items: list[JSON] = (await self._list(kind, namespace, **options))["items"]
        return items

    async def pages(
        self,
        kind: Kind,
        namespace: str | None = None,
        field_selector: str | None = None,
        limit: int = PAGE,
        metadata_only: bool = False,
    ) -> AsyncIterator[list[JSON]]:
        """The objects of a kind (in a namespace) a page at a time (a chunked list: `limit` and `continue`), so that
        reading them all never decodes more than a page at once; `metadata_only`: their metadata alone (no spec or
        status). One consistent snapshot, as a single list is; the caller must not linger between pages (the server
        forgets a continue token after about five minutes)."""
        options: dict[str, Any] = {"limit": limit}
        if field_selector:
            options["field_selector"] = field_selector
        if metadata_only:
            options |= {"_headers": {"Accept": METADATA_ONLY}, "_preload_content": False}
        token: str | None = None
        while True:
            listed = await self._list(kind, namespace, **options, **({"_continue": token} if token else {}))
            result = raw_json(listed) if metadata_only else listed
            yield result["items"]
            token = (result.get("metadata") or {}).get("continue")
            if not token:
                return

    async def count(self, kind: Kind, namespace: str) -> int | None:
        """How many objects of a kind the namespace holds, as fresh as a list sent now, for the bytes of one object's
        metadata: a list of one, the rest counted by the API server (`remainingItemCount`). None when it does not
        say."""
        options = {"limit": 1, "_headers": {"Accept": METADATA_ONLY}, "_preload_content": False}
        listed = raw_json(await self._list(kind, namespace, **options))
        meta, items = listed.get("metadata") or {}, listed.get("items") or []  # an empty list's items are null
        if not meta.get("continue"):
            return len(items)
        remaining = meta.get("remainingItemCount")
        return None if remaining is None else len(items) + int(remaining)

    async def uids(self, kind: Kind) -> set[str]:
        """The uids of every object of a kind, read from their metadata alone."""
        return {str(item["metadata"]["uid"]) async for page in self.pages(kind, metadata_only=True) for item in page}

    async def create(self, kind: Kind, namespace: str, body: JSON) -> JSON:
        info = kind.resource
        created: JSON = await self._call(
            self.custom.create_namespaced_custom_object, info.group, info.version, namespace, info.plural, body
        )
        return created

    async def patch(self, kind: Kind, namespace: str, name: str, body: JSON) -> JSON:
        """Merge-patch the object; a spec change carries the current span as the object's trace parent, so that
        whoever reacts to it (xds) continues this reconcile's trace (tollgate.runtime.tracing)."""
        info = kind.resource
        if "spec" in body:
            body = carrying_trace(body)
        patched: JSON = await self._call(
            self.custom.patch_namespaced_custom_object, info.group, info.version, namespace, info.plural, name, body
        )
        return patched

    async def replace(self, kind: Kind, obj: JSON) -> JSON:
        """Replace the object carrying the resourceVersion that was read: 409 Conflict when someone wrote first."""
        info, meta = kind.resource, obj["metadata"]
        replaced: JSON = await self._call(
            self.custom.replace_namespaced_custom_object,
            info.group,
            info.version,
            meta["namespace"],
            info.plural,
            meta["name"],
            carrying_trace(obj),
        )
        return replaced

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        info = kind.resource
        try:
            await self._call(
                self.custom.delete_namespaced_custom_object, info.group, info.version, namespace, info.plural, name
            )
        except client.ApiException as error:
            if is_not_found(error):
                return False
            raise
        return True

    async def replace_status(self, kind: Kind, obj: JSON) -> JSON:
        """Write the status carrying the resourceVersion that was read: 409 Conflict when someone wrote first."""
        info, meta = kind.resource, obj["metadata"]
        replaced: JSON = await self._call(
            self.custom.replace_namespaced_custom_object_status,
            info.group,
            info.version,
            meta["namespace"],
            info.plural,
            meta["name"],
            obj,
        )
        return replaced

    async def update_status(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        change: Callable[[JSON], T],
        missing: Callable[[], Exception],
        on_conflict: Callable[[int], None] | None = None,
        prepare: Callable[[JSON], Awaitable[None]] | None = None,
    ) -> UpdateResult[JSON, T]:
        """Read the object (`missing()` is raised when it is gone), `change` it, replace its status with the
        resourceVersion read; on 409 Conflict read again and retry. `prepare` runs after each read, before `change`:
        what `change` needs from other reads, made after the object was read."""

        async def read() -> JSON:
            obj = await self.get(kind, namespace, name)
            if obj is None:
                raise missing()
            if prepare is not None:
                await prepare(obj)
            return obj

        return await update_optimistically(
            read,
            change,
            lambda obj: self.replace_status(kind, obj),
            is_conflict,
            what=f"status of {kind.resource.kind} {namespace}/{name}",
            on_conflict=on_conflict,
        )

    async def merge_status(self, kind: Kind, namespace: str, name: str, status: JSON) -> JSON:
        """A merge patch of the status: touches only the keys given, so it never conflicts."""
        info = kind.resource
        patched: JSON = await self._call(
            self.custom.patch_namespaced_custom_object_status,
            info.group,
            info.version,
            namespace,
            info.plural,
            name,
            {"status": status},
        )
        return patched

    async def json_patch_status(self, kind: Kind, namespace: str, name: str, operations: list[JSON]) -> bool:
        """A JSON patch of the status (with `test` operations); False when a test failed or the object is gone."""
        info = kind.resource
        try:
            await self._call(
                self.custom.patch_namespaced_custom_object_status,
                info.group,
                info.version,
                namespace,
                info.plural,
                name,
                operations,
                _content_type="application/json-patch+json",
            )
        except client.ApiException as error:
            if error.status in (404, 422):
                return False
            raise
        return True

    # core objects

    async def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        body = {"metadata": {"name": name, "labels": labels or {}}}
        try:
            await self._call(self.core.create_namespace, body)
        except client.ApiException as error:
            if not is_conflict(error):
                raise
            if labels:
                await self._call(self.core.patch_namespace, name, {"metadata": {"labels": labels}})

    async def namespace_created_for(self, name: str) -> str | None:
        """The account a namespace was created for by tollgate (its NAMESPACE_CREATED_FOR annotation), if any."""
        try:
            namespace = await self._call(self.core.read_namespace, name)
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise
        return (namespace.metadata.annotations or {}).get(NAMESPACE_CREATED_FOR)

    async def delete_namespace(self, name: str) -> None:
        try:
            await self._call(self.core.delete_namespace, name)
        except client.ApiException as error:
            if not is_not_found(error):
                raise

    async def apply(self, obj: JSON) -> JSON:
        """Server-side apply of a ConfigMap or Deployment; the object as stored."""
        meta = obj["metadata"]
        functions: dict[str, Callable[..., Any]] = {
            "ConfigMap": self.core.patch_namespaced_config_map,
            "Deployment": self.apps.patch_namespaced_deployment,
        }
        function = functions[obj["kind"]]
        applied = await self._call(
            function,
            meta["name"],
            meta["namespace"],
            obj,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
            _preload_content=False,
        )
        return raw_json(applied)

    async def pod_node_address(self, namespace: str, label_selector: str) -> str | None:
        """The InternalIP of the node of the first (by name) scheduled pod that `label_selector` picks."""
        pods = raw_json(
            await self._call(
                self.core.list_namespaced_pod, namespace, label_selector=label_selector, _preload_content=False
            )
        )
        scheduled = sorted(
            (p for p in pods["items"] if (p.get("spec") or {}).get("nodeName")), key=lambda p: p["metadata"]["name"]
        )
        if not scheduled:
            return None
        try:
            node_name = scheduled[0]["spec"]["nodeName"]
            node = raw_json(await self._call(self.core.read_node, node_name, _preload_content=False))
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise
        addresses = (node.get("status") or {}).get("addresses") or []
        return next((str(a["address"]) for a in addresses if a.get("type") == "InternalIP"), None)

    async def event(self, obj: JSON, reason: str, message: str, warning: bool = False) -> None:
        """Post an Event on `obj` (a decision a user would wonder about)."""
        await self.events.post(object_reference(obj), "Warning" if warning else "Normal", reason, message)

    # per-account credentials: one Secret of a name per user namespace (tollgate.allocator.credentials)

    def list_secrets_named(self, name: str) -> tuple[list[JSON], str]:
        """Every namespace's Secret `name` (blocking: the credentials threads call it) and the list's version."""
        listed = self.core.list_secret_for_all_namespaces(field_selector=f"metadata.name={name}")
        items: list[JSON] = self.api.sanitize_for_serialization(listed.items)  # type: ignore[no-untyped-call]
        return items, str(listed.metadata.resource_version if listed.metadata else "")

    def watch_secrets_named(
        self, name: str, resource_version: str, on_event: Callable[[str, JSON], None], stop: threading.Event
    ) -> str:
        """Stream changes of the Secrets `name` until the server ends the watch; the version to resume from."""
        watcher = Watch(resource_version)
        for kind, obj in watcher.events(
            self.core.list_secret_for_all_namespaces,
            field_selector=f"metadata.name={name}",
            timeout_seconds=timeouts().watch,
        ):
            on_event(kind, obj)
            if stop.is_set():
                break
        return watcher.resource_version

    # leases: one per running allocator, so that others can tell which block owners are alive

    async def renew_lease(self, namespace: str, name: str, holder: str, seconds: int) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        spec = {"holderIdentity": holder, "leaseDurationSeconds": seconds, "renewTime": now}
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {LEASE_LABEL: "true"}}
        # Owned by this replica's pod: the Lease goes with the pod even when the replica cannot delete it itself
        # (at `helm uninstall` its RoleBinding may be gone before it stops).
        if (owner := own_pod_reference()) is not None:
            metadata["ownerReferences"] = [owner]
        body = {"metadata": metadata, "spec": spec}
        try:
            await self._call(self.coordination.patch_namespaced_lease, name, namespace, {"spec": spec})
        except client.ApiException as error:
            if not is_not_found(error):
                raise
            await self._call(self.coordination.create_namespaced_lease, namespace, body)

    async def live_holders(self, namespace: str) -> tuple[set[str], list[str]]:
        """Holders of unexpired allocator Leases, and the names of the expired Leases."""
        leases = await self._call(self.coordination.list_namespaced_lease, namespace, label_selector=LEASE_LABEL)
        now = datetime.now(UTC)
        live, expired = set(), []
        for lease in leases.items:
            spec = lease.spec
            if spec is None or spec.renew_time is None or spec.holder_identity is None:
                continue
            if spec.renew_time + timedelta(seconds=spec.lease_duration_seconds or 0) > now:
                live.add(spec.holder_identity)
            else:
                expired.append(lease.metadata.name)
        return live, expired

    async def delete_lease(self, namespace: str, name: str) -> None:
        try:
            await self._call(self.coordination.delete_namespaced_lease, name, namespace)
        except client.ApiException as error:
            if is_not_found(error):
                return
            if error.status != 403:
                raise
            log.warning("cannot delete this replica's Lease; it goes with the pod", extra={"lease": name})


class UnsupportedKubernetes(RuntimeError):
    pass


# The CRDs' selectableFields, which every per-object read here filters by, are on by default from Kubernetes 1.31 (an
# older API server drops them from the CRD without a word, and then refuses each such read).
OLDEST_KUBERNETES = (1, 31)


def require_supported(major: str, minor: str) -> None:
    """Raise UnsupportedKubernetes, saying why, for an API server older than OLDEST_KUBERNETES. The minor may carry
    a provider's suffix ("31+"); a version that does not parse is let through (a development build)."""
    numbers = (major.rstrip("+"), minor.rstrip("+"))
    if not all(n.isdigit() for n in numbers):
        return
    found = (int(numbers[0]), int(numbers[1]))
    if found < OLDEST_KUBERNETES:
        oldest = ".".join(map(str, OLDEST_KUBERNETES))
        raise UnsupportedKubernetes(
            f"tollgate-allocator needs Kubernetes {oldest} or later, and the API server is {major}.{minor}: it "
            "reads RemoteEndpoints and LoadBalancers by field (the CRDs' selectableFields), which older API "
            "servers do not serve"
        )


def field_is(path: str, value: object) -> str:
    """A field selector for `path` equal to `value`, its value escaped as the API server parses it."""
    escaped = str(value).replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")
    return f"{path}={escaped}"


def new_identity(hostname: str) -> str:
    """A name for this allocator process, different after every restart."""
    cleaned = "".join(c if c.isalnum() else "-" for c in hostname.lower()).strip("-")[:40] or "allocator"
    return f"{cleaned}-{uuid.uuid4().hex[:6]}"


__all__ = [
    "OLDEST_KUBERNETES",
    "Kube",
    "UnsupportedKubernetes",
    "field_is",
    "is_conflict",
    "is_not_found",
    "new_identity",
    "now_rfc3339",
    "require_supported",
]
