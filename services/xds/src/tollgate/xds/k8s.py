"""The API calls tollgate-xds makes besides watching: VirtualService status, Events, and the reviews of the debug
API's tokens."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kubernetes import client

from tollgate.models.servicemesh import GROUP, VERSION, VirtualService
from tollgate.runtime.events import EventRecorder
from tollgate.runtime.kube import is_not_found, object_reference, raw_json
from tollgate.xds.api.auth import User
from tollgate.xds.identity import Refusal

log = logging.getLogger("tollgate.xds.k8s")
COMPONENT = "tollgate-xds"


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.events = EventRecorder(api, COMPONENT)

    async def patch_virtual_service_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        """Merge-patch the status subresource; False when the object is gone."""
        try:
            await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                namespace,
                VirtualService.resource.plural,
                name,
                {"status": status},
            )
        except client.ApiException as error:
            if is_not_found(error):
                return False
            raise
        return True

    async def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about `obj` (failures are logged: an Event is never worth failing a pass)."""
        await self.events.post(object_reference(obj), type_, reason, message)


class RefusalEvents:
    """A Warning Event `XdsRefused` on the pod a refused Envoy claimed to be (`XdsStreamEnded` on the pod of a stream
    ended after it was admitted), at most one per pod and reason every `interval` seconds (a refused Envoy retries
    every few seconds)."""

    def __init__(self, kube: Kube, interval: float = 60) -> None:
        self.kube = kube
        self.interval = interval
        self._posted: dict[tuple[str, str, str], float] = {}

    async def __call__(self, refusal: Refusal) -> None:
        pod = refusal.pod
        if pod is None:
            return
        key, now = (pod.namespace, pod.name, refusal.reason), time.monotonic()
        if now - self._posted.get(key, -self.interval) < self.interval:
            return
        self._posted = {k: t for k, t in self._posted.items() if now - t < self.interval} | {key: now}
        meta = {"namespace": pod.namespace, "name": pod.name, "uid": pod.uid}  # an empty uid is left out
        reference = {"apiVersion": "v1", "kind": "Pod", "metadata": meta}
        if refusal.revoked:
            await self.kube.event(reference, "Warning", "XdsStreamEnded", f"xDS stream ended: {refusal.message}")
        else:
            await self.kube.event(reference, "Warning", "XdsRefused", f"xDS stream refused: {refusal.message}")


# Seconds to connect and to wait for the answer of one review.
REVIEW_TIMEOUT = (5, 10)


class Reviews:
    """TokenReview and SubjectAccessReview for the debug API (tollgate.xds.api.auth.Reviewer)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.authentication = client.AuthenticationV1Api(api)
        self.authorization = client.AuthorizationV1Api(api)

    def review_token(self, token: str, audience: str) -> User | str:
        body = {"spec": {"token": token, "audiences": [audience]}}
        review = self.authentication.create_token_review(body, _request_timeout=REVIEW_TIMEOUT)  # type: ignore[arg-type]
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return (status and status.error) or "not authenticated"
        if audience not in (status.audiences or [audience]):
            return f"the token is not for the audience {audience!r}"
        user = status.user
        return User(str(user.username), str(user.uid or ""), tuple(user.groups or ()), dict(user.extra or {}))

    def may(self, user: User, verb: str, path: str) -> tuple[bool, str]:
        spec = {"user": user.name, "groups": list(user.groups), "extra": user.extra,
                "nonResourceAttributes": {"path": path, "verb": verb}}  # fmt: skip
        if user.uid:
            spec["uid"] = user.uid
        review = self.authorization.create_subject_access_review({"spec": spec}, _request_timeout=REVIEW_TIMEOUT)  # type: ignore[arg-type]
        status = review.status
        return bool(status and status.allowed), str((status and status.reason) or "")


# Seconds to connect and to wait for each read of a listing: a frozen connection fails instead of hanging.
LIST_TIMEOUT = (10, 60)


def list_watched(
    api: client.ApiClient, namespace: str | None, watched: dict[str, tuple[str, str]]
) -> dict[str, list[Any]]:
    """Every object of the watched kinds (plural: (group, version)), as the API server stores them."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    result: dict[str, list[Any]] = {}
    for plural, (group, version) in watched.items():
        if not group:
            response = (
                core.list_namespaced_pod(namespace, _preload_content=False, _request_timeout=LIST_TIMEOUT)
                if namespace
                else core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=LIST_TIMEOUT)
            )
            listing: Any = raw_json(response)
        elif namespace:
            listing = custom.list_namespaced_custom_object(
                group, version, namespace, plural, _request_timeout=LIST_TIMEOUT
            )
        else:
            listing = custom.list_cluster_custom_object(group, version, plural, _request_timeout=LIST_TIMEOUT)
        result[plural] = listing.get("items", [])
    return result
