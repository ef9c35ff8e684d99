"""The API calls tollgate-routedip makes (every one is listed in services/routedip/rbac.yaml).

The Kubernetes client is synchronous: calls run on a thread pool of their own, sized for the
controller's workers, so that a failover of many IPs is not queued behind asyncio's small default pool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client

from tollgate.models.routedip import GROUP, VERSION
from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import api_client

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
REPORTING_COMPONENT = "tollgate-routedip"


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


class Kube:
    def __init__(self, kubeconfig: Path | None, threads: int = 32) -> None:
        self.api = api_client(kubeconfig, pool_size=threads)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kube")
        self.events = EventRecorder(self.api, REPORTING_COMPONENT, self._executor)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.api.close()  # type: ignore[no-untyped-call]

    def _request_sync(
        self, method: str, path: str, body: object = None, content_type: str = "application/json", **query: str
    ) -> JSON:
        params = self.api.param_serialize(
            method=method,
            resource_path=path + (f"?{urlencode(query)}" if query else ""),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*params)
        response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status < 300:
            raise client.ApiException(http_resp=response)
        return json.loads(response.data) if response.data else {}

    async def request(
        self, method: str, path: str, body: object = None, content_type: str = "application/json", **query: str
    ) -> JSON:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, lambda: self._request_sync(method, path, body, content_type, **query)
        )

    # RoutedIPs and classes
    async def patch_routed_ip_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> JSON:
        path = _path("apis", GROUP, VERSION, "namespaces", namespace, "routedips", name, "status")
        return await self.request("PATCH", path, {"status": status}, MERGE_PATCH)

    async def set_routed_ip_finalizers(
        self, namespace: str, name: str, finalizers: list[str], resource_version: str
    ) -> JSON:
        """Replace the finalizers, only if the object is still at `resource_version` (409 otherwise)."""
        path = _path("apis", GROUP, VERSION, "namespaces", namespace, "routedips", name)
        body = {"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}}
        return await self.request("PATCH", path, body, MERGE_PATCH)

    async def patch_class_status(self, name: str, status: Mapping[str, Any]) -> JSON:
        path = _path("apis", GROUP, VERSION, "clusterroutedipclasses", name, "status")
        return await self.request("PATCH", path, {"status": status}, MERGE_PATCH)

    # Nodes (the move taint)
    async def read_node(self, name: str) -> JSON:
        return await self.request("GET", _path("api", "v1", "nodes", name))

    async def patch_node(self, name: str, body: Mapping[str, Any]) -> JSON:
        """A merge patch; a `metadata.resourceVersion` in `body` makes it conditional (409 when stale)."""
        return await self.request("PATCH", _path("api", "v1", "nodes", name), body, MERGE_PATCH)

    # The local provider's ConfigMap, Secrets and Jobs, in the namespace tollgate-routedip runs in
    async def read_config_map(self, namespace: str, name: str) -> JSON:
        return await self.request("GET", _path("api", "v1", "namespaces", namespace, "configmaps", name))

    async def create_config_map(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return await self.request("POST", _path("api", "v1", "namespaces", namespace, "configmaps"), body)

    async def patch_config_map(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        path = _path("api", "v1", "namespaces", namespace, "configmaps", name)
        return await self.request("PATCH", path, body, MERGE_PATCH)

    async def read_secret(self, namespace: str, name: str) -> JSON:
        return await self.request("GET", _path("api", "v1", "namespaces", namespace, "secrets", name))

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return await self.request("POST", _path("apis", "batch", "v1", "namespaces", namespace, "jobs"), body)

    async def list_jobs(self, namespace: str, label_selector: str) -> list[JSON]:
        path = _path("apis", "batch", "v1", "namespaces", namespace, "jobs")
        result = await self.request("GET", path, labelSelector=label_selector)
        return list(result.get("items") or [])

    async def read_job(self, namespace: str, name: str) -> JSON:
        return await self.request("GET", _path("apis", "batch", "v1", "namespaces", namespace, "jobs", name))

    async def delete_job(self, namespace: str, name: str) -> None:
        path = _path("apis", "batch", "v1", "namespaces", namespace, "jobs", name)
        await self.request("DELETE", path, {"propagationPolicy": "Background"})

    # Events
    async def post_event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, namespace: str | None = None
    ) -> None:
        """A core/v1 Event about `involved` (apiVersion, kind, name, namespace, uid); a failure is logged."""
        await self.events.post(involved, type_, reason, message, namespace=namespace)
