"""The API calls of the Goop controller (each one listed in services/jobs/rbac.yaml).

The kubernetes client is synchronous: every call runs in a worker thread so the kopf event loop never blocks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from kubernetes import client

from tollgate.jobs.workers import GOOP_UID_LABEL
from tollgate.models.goop import GROUP, VERSION
from tollgate.runtime.kube import is_conflict, is_not_found, raw_json

PLURAL = "goops"
JOB_GROUP, JOB_VERSION, JOB_PLURAL = "batch", "v1", "jobs"
NODE_PLURAL = "nodes"
LIST_PAGE = 500  # objects per page of a listing, as kubectl pages them
# What the controller reads of each listed kind besides metadata (kept, observe_job, node_info): the rest, most of a
# Job (its pod template) and of a node (its status), is dropped page by page, so no listing is ever held whole.
LISTED_FIELDS = {PLURAL: ("apiVersion", "kind", "spec", "status"), JOB_PLURAL: ("status",), NODE_PLURAL: ("spec",)}

Outcome = Literal["created", "exists", "taken", "rejected"]


@dataclass(frozen=True)
class PatchResult:
    """`written`: `body` is the Goop as the API server stored it; `gone`: the Goop no longer exists; `conflict`: it
    changed since it was read (another resourceVersion, or deleted and re-created: another uid)."""

    outcome: Literal["written", "gone", "conflict"]
    body: dict[str, Any] | None = None


@dataclass(frozen=True)
class CreateResult:
    """`exists`: a Job of this Goop already has the name; `taken`: another object's Job has it;
    `rejected`: the API server refused the manifest (422), `message` says which field and rule."""

    outcome: Outcome
    message: str = ""


def trimmed(plural: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """A listed object as far as the controller reads it: its metadata (without managedFields) and LISTED_FIELDS."""
    metadata = {key: value for key, value in (obj.get("metadata") or {}).items() if key != "managedFields"}
    return {"metadata": metadata, **{field: obj[field] for field in LISTED_FIELDS[plural] if field in obj}}


def _api_message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except ValueError:
        return str(error.reason)


class GoopApi:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.core = client.CoreV1Api(api_client)

    async def list_watched(self, plurals: Iterable[str], namespace: str | None) -> dict[str, list[dict[str, Any]]]:
        """goops, jobs (only the Goops' Jobs, as kopf watches them) and nodes list: every object of `plurals` in
        `namespace` (nodes: all), trimmed."""
        return {plural: await asyncio.to_thread(self._list, plural, namespace) for plural in plurals}

    def _list(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = self._page(plural, namespace, token)
            items.extend(trimmed(plural, obj) for obj in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _page(self, plural: str, namespace: str | None, token: str | None) -> dict[str, Any]:
        if plural == NODE_PLURAL:
            return raw_json(self.core.list_node(limit=LIST_PAGE, _continue=token, _preload_content=False))
        group, version = (GROUP, VERSION) if plural == PLURAL else (JOB_GROUP, JOB_VERSION)
        selector = GOOP_UID_LABEL if plural == JOB_PLURAL else None
        options: dict[str, Any] = {"label_selector": selector, "limit": LIST_PAGE, "_continue": token}
        if namespace:
            page = self.custom.list_namespaced_custom_object(group, version, namespace, plural, **options)
        else:
            page = self.custom.list_cluster_custom_object(group, version, plural, **options)
        return cast(dict[str, Any], page)

    async def get_goop(self, namespace: str, name: str) -> dict[str, Any] | None:
        """goops get."""
        try:
            body = await asyncio.to_thread(
                self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
            )
        except client.ApiException as error:
            if is_not_found(error):
                return None
            raise
        return dict(body) if isinstance(body, dict) else None

    async def patch_status(
        self, namespace: str, name: str, uid: str, resource_version: str, status: dict[str, Any]
    ) -> PatchResult:
        """goops/status patch: a merge patch (keys set to None are removed) of the Goop as it was read, guarded by
        its uid (not a re-created Goop) and resourceVersion (409 Conflict when it changed meanwhile)."""
        body = {"metadata": {"uid": uid, "resourceVersion": resource_version}, "status": status}
        try:
            written = await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object_status, GROUP, VERSION, namespace, PLURAL, name, body
            )
        except client.ApiException as error:
            if is_not_found(error):
                return PatchResult("gone")
            if is_conflict(error):
                return PatchResult("conflict")
            raise
        return PatchResult("written", dict(written) if isinstance(written, dict) else None)

    async def create_job(self, namespace: str, manifest: dict[str, Any], owner_uid: str) -> CreateResult:
        """jobs create; on a name clash, jobs get to tell our own Job (seen late) from someone else's. Sent and read
        as plain JSON (the generic object calls), not through the client's Job models: building and validating
        those cost more CPU and memory than the whole request."""
        try:
            await asyncio.to_thread(
                self.custom.create_namespaced_custom_object, JOB_GROUP, JOB_VERSION, namespace, JOB_PLURAL, manifest
            )
        except client.ApiException as error:
            if error.status == 422:
                return CreateResult("rejected", _api_message(error))
            if error.status != 409:
                raise
        else:
            return CreateResult("created")
        name = manifest["metadata"]["name"]
        try:
            existing = await asyncio.to_thread(
                self.custom.get_namespaced_custom_object, JOB_GROUP, JOB_VERSION, namespace, JOB_PLURAL, name
            )
        except client.ApiException as error:
            if is_not_found(error):  # deleted in between: the next reconcile creates it
                return CreateResult("exists")
            raise
        metadata = existing.get("metadata") if isinstance(existing, dict) else None
        owners = (metadata or {}).get("ownerReferences") or []
        if any(owner.get("uid") == owner_uid for owner in owners):
            return CreateResult("exists")
        return CreateResult("taken", f"Job {name} already exists and does not belong to this Goop")

    async def delete_job(self, namespace: str, name: str, uid: str | None) -> None:
        """jobs delete, with its pods (background propagation); only the Job that was observed (uid)."""
        options = client.V1DeleteOptions(
            propagation_policy="Background", preconditions=client.V1Preconditions(uid=uid) if uid else None
        )
        try:
            await asyncio.to_thread(self.batch.delete_namespaced_job, name, namespace, body=options)
        except client.ApiException as error:
            if not is_not_found(error) and error.status != 409:
                raise
