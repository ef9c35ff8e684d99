"""Kubernetes Events: one way to build them and one to post them.

Code that runs inside kopf's handlers posts through kopf (`kopf.event`, as the jobs controller does: kopf posts
it with its own). Everything else (reconcilers, gRPC servers, the test kubelet) posts through an `EventRecorder`:
a core/v1 Event built by `event_body`, created with the kubernetes client in a worker thread. Posting is best
effort: an Event is a courtesy, never worth failing the decision it reports, so a failed post is logged and
reported as lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import Executor
from typing import Any, cast

from kubernetes import client

from tollgate.models.base import now_rfc3339
from tollgate.runtime.backoff import is_api_failure

log = logging.getLogger("tollgate.runtime.events")


def event_body(
    involved: Mapping[str, str], type_: str, reason: str, message: str, component: str, namespace: str
) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object reference), to create in `namespace`."""
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{involved.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {key: value for key, value in involved.items() if value},
        "type": type_,
        "reason": reason,
        "message": message[:1024],  # the API server's limit
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "action": reason,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    """Posts Events as `component`, each create call on `executor` (default: asyncio's)."""

    def __init__(self, api: client.ApiClient, component: str, executor: Executor | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.component = component
        self.executor = executor

    async def post(
        self,
        involved: Mapping[str, str],
        type_: str,
        reason: str,
        message: str,
        *,
        namespace: str | None = None,
        host: str | None = None,
    ) -> bool:
        """An Event about `involved` (an object reference: apiVersion, kind, name, namespace, uid, fieldPath) in
        its namespace, else in `namespace`, else in default; `host` names the node it comes from. False when
        the API server did not take it (logged); an error that is not the API server's is raised."""
        target = involved.get("namespace") or namespace or "default"
        body = event_body(involved, type_, reason, message, self.component, target)
        if host is not None:
            body["source"]["host"] = host
        # The client serializes a plain dict body as it does its own model.
        create = self.core.create_namespaced_event
        try:
            await asyncio.get_running_loop().run_in_executor(
                self.executor, lambda: create(target, cast(client.CoreV1Event, body))
            )
        except Exception as error:
            if not is_api_failure(error):
                raise
            log.warning("cannot post Event %s on %s/%s: %s", reason, target, involved.get("name"), error)
            return False
        return True
